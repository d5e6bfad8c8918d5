"""The actuator's step (actuator/step.py) driven against an in-memory cluster.

The fake keeps what the API server guarantees and the actuator relies on: status writes are RFC 7386
merge patches, and every write carrying a resourceVersion is refused with 409 when the object moved
on since. The change record (GPURightsizingChange) is a separate object from the recommendation, as on
the server. Each test replays one way the old actuator did harm (re-sent gated-out patches, verified
without evidence, rolled back over a person's edit, retried a regression forever, wrote without the
lease) and asserts it no longer happens.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from gpu_rightsizer.actuator import loop
from gpu_rightsizer.actuator.gates import CLEAR_REGRESSIONS_ANNOTATION
from gpu_rightsizer.actuator.plan import CHANGE_ANNOTATION
from gpu_rightsizer.actuator.record import ChangeRecord
from gpu_rightsizer.actuator.step import Actuator
from gpu_rightsizer.actuator.verify import REVISION_ANNOTATION
from gpu_rightsizer.actuator.writes import LeadershipLostError, WorkloadCase
from gpu_rightsizer.adapters.change_store import readable_changes
from gpu_rightsizer.logic.policy import effective_settings
from gpu_rightsizer.model.codes import ActionType
from gpu_rightsizer.model.crd import GPURightsizingPolicy
from gpu_rightsizer.model.k8s import merge_patched
from gpu_rightsizer.model.observation import (
    Allocation,
    GPUObservation,
    PodObservation,
    Signal,
    SignalStats,
    WorkloadRef,
    WorkloadWindow,
)
from gpu_rightsizer.model.result import Action, ActionTarget

T0 = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)
REF = WorkloadRef(namespace="team-a", kind="Deployment", name="trainer")
CPU = "containers[main].resources.limits[cpu]"


def conflict() -> ApiException:
    return ApiException(status=409, reason="Conflict")


class Cluster:
    """One Deployment, its recommendation, its pods and ReplicaSets; writes are recorded in order."""

    def __init__(self, replicas: int = 2) -> None:
        self.workload: dict[str, Any] = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "trainer", "namespace": "team-a", "uid": "d-1", "generation": 1,
                "resourceVersion": "100", "annotations": {REVISION_ANNOTATION: "1"},
            },
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "trainer"}},
                "template": {
                    "metadata": {"labels": {"app": "trainer"}},
                    "spec": {"containers": [{"name": "main", "resources": {
                        "limits": {"cpu": "1", "nvidia.com/gpu": "1"},
                        "requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                    }}]},
                },
            },
        }  # fmt: skip
        self.recommendation: dict[str, Any] = {
            "metadata": {"name": "deployment-trainer", "namespace": "team-a", "resourceVersion": "7"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "trainer"}},
            "status": {},
        }
        self.change: dict[str, Any] | None = None
        self.mirrors = 0
        self.revision = 1
        self.pod_state: dict[str, Any] = {"phase": "Running"}
        self.writes: list[str] = []
        self.events: list[str] = []
        self.fail_next_patch: ApiException | None = None
        self.deleted_pods: list[str] = []
        self.roll_out()

    # --- what the controllers do -------------------------------------------------------------------

    def roll_out(self) -> None:
        """The Deployment controller finished: status caught up with the spec."""
        replicas = self.workload["spec"]["replicas"]
        self.workload["status"] = {
            "observedGeneration": self.workload["metadata"]["generation"], "replicas": replicas,
            "updatedReplicas": replicas, "availableReplicas": replicas, "readyReplicas": replicas,
        }  # fmt: skip

    def human_sets_cpu(self, cores: str) -> None:
        self.workload["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = cores
        self._bump()

    def _bump(self) -> None:
        metadata = self.workload["metadata"]
        metadata["generation"] += 1
        metadata["resourceVersion"] = str(int(metadata["resourceVersion"]) + 1)
        self.revision += 1
        metadata["annotations"][REVISION_ANNOTATION] = str(self.revision)

    def cpu(self) -> str:
        return str(self.workload["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"])

    def apply(self) -> dict[str, Any]:
        """The actuator's state: its change record's status, or (no record yet: no change was ever
        started) the verdict it showed on the recommendation."""
        if self.change is not None:
            return dict(self.change.get("status") or {})
        return dict(self.recommendation["status"].get("apply") or {})

    def forge_change(self, status: dict[str, Any], uid: str = "d-1") -> None:
        """Put a change record in place as if an earlier actuator had written it."""
        self.change = {
            "metadata": {"name": "deployment-trainer", "namespace": "team-a", "resourceVersion": "50"},
            "spec": {"targetRef": {"kind": "Deployment", "name": "trainer"}, "workloadUid": uid},
            "status": status,
        }

    def publish(self, cores: str = "4", now: datetime = T0, **status: Any) -> None:
        """The recommender's status: a CPU action with its target, for the live generation."""
        action = Action(
            type=ActionType.CPU, from_value="1 cores", to_value="4 cores", reason="starved", automatic=True,
            resource="cpu", target=ActionTarget(container="main", requests={"cpu": cores}, limits={"cpu": cores}),
        )  # fmt: skip
        self.recommendation["status"].update(
            {
                "diagnosis": {"primary": "InputPipelineCPUBound", "findings": []},
                "actions": [action.model_dump(mode="json", by_alias=True, exclude_none=True)],
                "window": {"start": (now - timedelta(hours=1)).isoformat(), "end": now.isoformat()},
                "workloadGeneration": self.workload["metadata"]["generation"],
                **status,
            }
        )

    # --- the KubeAdapter calls the actuator makes -------------------------------------------------

    def patch_recommendation_status(
        self, ref: WorkloadRef, status: Mapping[str, Any], *, resource_version: str | None = None
    ) -> dict[str, Any]:
        metadata = self.recommendation["metadata"]
        if resource_version is not None and resource_version != metadata["resourceVersion"]:
            raise conflict()
        self.recommendation["status"] = merge_patched(self.recommendation["status"], dict(status))
        metadata["resourceVersion"] = str(int(metadata["resourceVersion"]) + 1)
        self.mirrors += 1
        return copy.deepcopy(self.recommendation)

    # --- the change records (adapters.change_store.ChangeStore) ------------------------------------

    def get_change(self, ref: WorkloadRef) -> dict[str, Any] | None:
        return copy.deepcopy(self.change)

    def list_changes(self, namespaces: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        return [copy.deepcopy(self.change)] if self.change is not None else []

    def create_change(self, ref: WorkloadRef, spec: Mapping[str, Any]) -> dict[str, Any]:
        if self.change is not None:
            raise conflict()
        self.change = {
            "metadata": {"name": "deployment-trainer", "namespace": "team-a", "resourceVersion": "1"},
            "spec": dict(spec), "status": {},
        }  # fmt: skip
        return copy.deepcopy(self.change)

    def patch_change(
        self, ref: WorkloadRef, body: Mapping[str, Any], *, resource_version: str | None, status: bool
    ) -> dict[str, Any]:
        assert self.change is not None, "a change record is patched only after it was created"
        metadata = self.change["metadata"]
        if resource_version is not None and resource_version != metadata["resourceVersion"]:
            raise conflict()
        key = "status" if status else "spec"
        self.change[key] = merge_patched(self.change.get(key) or {}, dict(body[key]))
        metadata["resourceVersion"] = str(int(metadata["resourceVersion"]) + 1)
        self.writes.append(f"status:{(body.get('status') or {}).get('phase', '-')}" if status else "spec")
        return copy.deepcopy(self.change)

    def strategic_patch(
        self, ref: WorkloadRef, body: Mapping[str, Any], *, resource_version: str | None = None
    ) -> dict[str, Any]:
        if self.fail_next_patch is not None:
            error, self.fail_next_patch = self.fail_next_patch, None
            raise error
        if resource_version is not None and resource_version != self.workload["metadata"]["resourceVersion"]:
            raise conflict()
        container = self.workload["spec"]["template"]["spec"]["containers"][0]
        template = ((body.get("spec") or {}).get("template") or {}).get("spec") or {}
        for patch in template.get("containers") or []:
            for section, values in (patch.get("resources") or {}).items():
                for resource, value in values.items():
                    if value is None:
                        container["resources"][section].pop(resource, None)
                    else:
                        container["resources"][section][resource] = value
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        self.workload["metadata"]["annotations"].update(annotations)
        self._bump()
        self.writes.append("workload")
        return copy.deepcopy(self.workload)

    def pods_of(self, workload: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [
            {
                "metadata": {"name": f"trainer-{self.revision}-{i}", "uid": f"p{i}",
                             "labels": {"app": "trainer", "pod-template-hash": f"h{self.revision}"}},
                "spec": copy.deepcopy(self.workload["spec"]["template"]["spec"]),
                "status": copy.deepcopy(self.pod_state),
            }
            for i in range(int(self.workload["spec"]["replicas"]))
        ]  # fmt: skip

    def owned_pods(self, workload: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Unscheduled pods (no node): nothing to resize in place, so CPU changes take the template."""
        return self.pods_of(workload)

    def list_workloads(self, kind: str, namespaces: tuple[str, ...] = ()) -> dict[tuple[str, str], Any]:
        rs = {
            "metadata": {
                "labels": {"pod-template-hash": f"h{self.revision}"},
                "annotations": {REVISION_ANNOTATION: str(self.revision)},
                "ownerReferences": [{"uid": "d-1", "controller": True}],
            }
        }
        return {("team-a", f"trainer-h{self.revision}"): rs}

    def post_event(
        self, ref: WorkloadRef, uid: str, reason: str, message: str, *, warning: bool = False
    ) -> None:
        self.events.append(reason)

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        self.deleted_pods.append(name)

    def patch_hpa(
        self, namespace: str, name: str, body: Mapping[str, Any], *, resource_version: str | None = None
    ) -> None:
        raise AssertionError("no HPA in these tests")


def policy(name: str = "apply", mode: str = "Apply", **safety: Any) -> Any:
    spec: dict[str, Any] = {"mode": mode, "safety": {"cooldown": "1h", "verifyFor": "10m", **safety}}
    if mode == "Apply":
        spec["actions"] = ["cpu"]
    return effective_settings(GPURightsizingPolicy.model_validate({"metadata": {"name": name}, "spec": spec}))


def window(busy: float, cpu: float, pods: tuple[str, ...] = ("trainer-1-0", "trainer-1-1")) -> WorkloadWindow:
    def stats(value: float) -> SignalStats:
        return SignalStats(samples=30, mean=value, p50=value, p95=value, p99=value, max=value)

    return WorkloadWindow(
        workload=REF,
        start=T0 - timedelta(hours=1),
        end=T0,
        allocation=Allocation(cpu_limit_cores=1.0),
        pods=[
            PodObservation(
                name=name,
                stats={Signal.CPU_USAGE_CORES: stats(cpu)},
                gpus=[GPUObservation(uuid=f"g-{name}", stats={Signal.GR_ENGINE_ACTIVE: stats(busy)})],
            )
            for name in pods
        ],
    )


class Driver:
    """Runs steps as the cycle does: a fresh read of both objects each time, a clock, a lease."""

    def __init__(self, cluster: Cluster, after: WorkloadWindow | None = None) -> None:
        self.cluster = cluster
        self.leader = True
        self.recent: list[tuple[str, datetime]] = []
        self.before: WorkloadWindow | None = window(0.3, 0.98)
        self.after = after
        #: Answers of the next verification reads: an exception is raised, None means "no series".
        self.bad_answers: list[Exception | None] = []
        self.actuator = Actuator(cluster, cluster, lambda: self.leader, self.measure)  # type: ignore[arg-type]

    def measure(self, ref: WorkloadRef, start: datetime, end: datetime) -> WorkloadWindow | None:
        """The one-workload read: the baseline before a change, the new pods' window after it."""
        assert ref == REF, "the actuator reads only the workload it steps"
        if self.cluster.apply().get("phase") not in ("Applied", "RolledOut"):
            return self.before
        if self.bad_answers:
            answer = self.bad_answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return None
        return self.after

    def step(self, now: datetime, settings: Any = None, **extra: Any) -> None:
        case = WorkloadCase(
            ref=REF, uid=extra.pop("uid", "d-1"), workload=copy.deepcopy(self.cluster.workload),
            recommendation=copy.deepcopy(self.cluster.recommendation), settings=settings or policy(),
            hpa=extra.pop("hpa", None), now=now, **extra,
        )  # fmt: skip
        self.actuator.step(case, self.recent)


def applied(cluster: Cluster, driver: Driver) -> None:
    cluster.publish()
    driver.step(T0)
    assert cluster.cpu() == "4" and cluster.apply()["phase"] == "Applied"


def verified(cluster: Cluster, driver: Driver) -> dict[str, Any]:
    """Steps a rolled-out change through its verification (10 min of `verifyFor`); its Verified status."""
    driver.step(T0 + timedelta(minutes=1))
    driver.step(T0 + timedelta(minutes=15))
    status = cluster.apply()
    assert status["state"] == "Verified", status["reason"]
    return status


# --------------------------------------------------------------------------------------------------
# C1: nothing is applied without passing every gate at the moment it is sent
# --------------------------------------------------------------------------------------------------


def test_a_change_goes_intent_first_then_patch_then_applied() -> None:
    cluster = Cluster()
    driver = Driver(cluster)
    applied(cluster, driver)
    assert cluster.writes == ["status:IntentRecorded", "workload", "status:Applied"]
    assert "ChangeApplied" in cluster.events


def test_a_rolled_back_change_is_not_reapplied_after_a_switch_to_recommend() -> None:
    """The reviewer's exp1: cpu 1->4, pods fail, rolled back, policy set to Recommend: no write since."""
    cluster = Cluster()
    driver = Driver(cluster)
    applied(cluster, driver)
    cluster.pod_state = {
        "phase": "Pending",
        "containerStatuses": [{"state": {"waiting": {"reason": "ImagePullBackOff"}}}],
    }
    driver.step(T0 + timedelta(minutes=2))
    assert cluster.cpu() == "1" and cluster.apply()["state"] == "RolledBack"
    assert "patch" not in cluster.apply()  # terminal states clear the recorded patch
    cluster.writes.clear()
    for minutes in range(5, 400, 30):
        cluster.publish(now=T0 + timedelta(minutes=minutes))
        driver.step(T0 + timedelta(minutes=minutes), policy(mode="Recommend"))
    assert "workload" not in cluster.writes and cluster.cpu() == "1"


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        (policy(mode="Recommend"), "Recommend mode"),
        (policy(name="other"), "started by policy 'apply'"),
        (effective_settings(None), "no Apply policy"),
    ],
)
def test_a_recorded_intent_is_never_resent_without_its_policy(settings: Any, words: str) -> None:
    """An old-style Pending status with patch and appliedAt (what a mode switch, a rename or a deleted
    policy used to leave) is abandoned, not sent."""
    cluster = Cluster()
    driver = Driver(cluster)
    cluster.publish()
    driver.step(T0)  # apply it, then forge the interrupted intent of the old format
    apply = cluster.apply()
    cluster.workload = Cluster().workload  # the change never landed
    cluster.forge_change({
        "state": "Pending", "policy": "apply", "patch": apply["patch"], "appliedAt": apply["appliedAt"], "dryRun": False,
    })  # fmt: skip
    cluster.writes.clear()
    driver.step(T0 + timedelta(minutes=1), settings)
    assert cluster.writes == ["status:Abandoned"] and cluster.cpu() == "1"
    assert words in cluster.apply()["reason"] and "patch" not in cluster.apply()


def test_a_days_old_intent_does_not_overwrite_a_persons_later_value() -> None:
    cluster = Cluster()
    driver = Driver(cluster)
    cluster.publish()
    cluster.fail_next_patch = ApiException(status=500, reason="Internal Error")
    driver.step(T0)
    assert cluster.apply()["phase"] == "IntentRecorded" and "500" in cluster.apply()["lastError"]  # M1: kept
    cluster.human_sets_cpu("8")
    cluster.publish(now=T0 + timedelta(days=3))
    cluster.writes.clear()
    driver.step(T0 + timedelta(days=3))
    assert cluster.cpu() == "8" and "workload" not in cluster.writes
    assert cluster.apply()["phase"] == "Abandoned"


def test_an_interrupted_intent_is_resumed_through_every_gate() -> None:
    cluster = Cluster()
    driver = Driver(cluster)
    cluster.publish()
    cluster.fail_next_patch = ApiException(status=503, reason="Unavailable")
    driver.step(T0)
    assert cluster.cpu() == "1"
    driver.step(T0 + timedelta(minutes=1))
    assert cluster.cpu() == "4" and cluster.apply()["phase"] == "Applied"
    assert cluster.writes.count("workload") == 1


def test_a_resumed_intent_still_meets_the_gates_of_now() -> None:
    cluster = Cluster()
    driver = Driver(cluster)
    cluster.publish()
    cluster.fail_next_patch = ApiException(status=503, reason="Unavailable")
    driver.step(T0)
    cluster.publish(warnings_unused=None)
    stale = T0 + timedelta(minutes=20)  # the published window is now older than maxStaleness (15m)
    driver.step(stale)
    assert cluster.cpu() == "1" and cluster.apply()["phase"] == "Abandoned"
    assert "stale" in cluster.apply()["reason"]


def test_no_change_without_a_recommendation_for_the_live_generation() -> None:
    cluster = Cluster()
    driver = Driver(cluster)
    cluster.publish()
    cluster.human_sets_cpu("2")  # the spec moved on since the analysis
    cluster.roll_out()
    driver.step(T0)
    assert cluster.cpu() == "2" and "waiting for a fresh analysis" in cluster.apply()["reason"]


def test_a_change_record_written_by_someone_else_meanwhile_stops_the_step() -> None:
    cluster = Cluster()
    driver = Driver(cluster)
    cluster.publish()
    cluster.forge_change({"state": "Skipped", "reason": "earlier"})
    stale_read = copy.deepcopy(cluster.change)
    assert cluster.change is not None
    cluster.change["metadata"]["resourceVersion"] = "51"  # another writer
    cluster.get_change = lambda ref: copy.deepcopy(stale_read)  # type: ignore[method-assign]
    case = WorkloadCase(
        ref=REF, uid="d-1", workload=copy.deepcopy(cluster.workload),
        recommendation=copy.deepcopy(cluster.recommendation), settings=policy(), hpa=None, now=T0,
    )  # fmt: skip
    driver.actuator.step(case, [])
    assert cluster.writes == [] and cluster.cpu() == "1"


def test_no_write_at_all_without_the_lease() -> None:
    cluster = Cluster()
    driver = Driver(cluster)
    cluster.publish()
    driver.leader = False
    with pytest.raises(LeadershipLostError):
        driver.step(T0)
    assert cluster.writes == [] and cluster.events == []


# --------------------------------------------------------------------------------------------------
# H1: verification that proves something
# --------------------------------------------------------------------------------------------------


def test_no_data_is_inconclusive_never_verified() -> None:
    cluster = Cluster()
    driver = Driver(cluster, after=None)
    applied(cluster, driver)
    cluster.roll_out()
    driver.step(T0 + timedelta(minutes=1))
    assert cluster.apply()["phase"] == "RolledOut"
    for hours in (1, 2):  # a read without figures is retried, not a verdict
        driver.step(T0 + timedelta(hours=hours))
        assert cluster.apply()["phase"] == "RolledOut" and cluster.apply()["failedReads"] == hours
    driver.step(T0 + timedelta(hours=3))
    assert cluster.apply()["state"] == "Inconclusive" and "no figures" in cluster.apply()["reason"]
    assert cluster.cpu() == "4"  # Hold is the default
    assert cluster.apply()["history"][-1]["outcome"] == "Inconclusive"


def test_inconclusive_rolls_back_when_the_policy_says_so() -> None:
    cluster = Cluster()
    driver = Driver(cluster, after=None)
    settings = policy(onInconclusive="RollBack")
    cluster.publish()
    driver.step(T0, settings)
    cluster.roll_out()
    driver.step(T0 + timedelta(minutes=1), settings)
    for hours in (1, 2, 3):
        driver.step(T0 + timedelta(hours=hours), settings)
    assert cluster.cpu() == "1" and cluster.apply()["state"] == "RolledBack"
    assert cluster.apply()["rollbacks"] == 0  # an inconclusive rollback does not count toward maxRollbacks


def test_a_rollout_that_never_completes_is_inconclusive() -> None:
    cluster = Cluster()
    driver = Driver(cluster)
    applied(cluster, driver)
    driver.step(T0 + timedelta(minutes=11))
    assert cluster.apply()["state"] == "Inconclusive" and "rollout not complete" in cluster.apply()["reason"]


def test_verification_waits_for_the_rollout_and_measures_only_new_pods() -> None:
    cluster = Cluster()
    old_pods_only = window(0.9, 0.3, pods=("trainer-1-0", "trainer-1-1"))
    driver = Driver(cluster, after=old_pods_only)
    applied(cluster, driver)
    driver.step(T0 + timedelta(minutes=5))  # the controller has not rolled out the new revision
    assert cluster.apply()["phase"] == "Applied" and "rollout" in cluster.apply()["reason"]
    cluster.roll_out()
    driver.step(T0 + timedelta(minutes=6))
    for minutes in (20, 25, 30):
        driver.step(T0 + timedelta(minutes=minutes))
    assert cluster.apply()["state"] == "Inconclusive"  # the old pods' figures are never used
    cluster2 = Cluster()
    driver2 = Driver(cluster2)
    applied(cluster2, driver2)
    driver2.after = window(0.6, 3.0, pods=tuple(p["metadata"]["name"] for p in cluster2.pods_of({})))
    cluster2.roll_out()
    driver2.step(T0 + timedelta(minutes=1))
    driver2.step(T0 + timedelta(minutes=15))
    assert cluster2.apply()["state"] == "Verified", cluster2.apply()["reason"]
    assert cluster2.apply()["history"][-1]["after"]["gpuBusyP95"] == 0.6


def test_the_new_pods_of_a_two_container_template_are_measured_against_both_containers() -> None:
    """main 1 -> 4 beside a 2-core sidecar: the new pods' 5.8 cores (both containers) are 97 % of the
    6 cores they run with, as the baseline's 2.94 of 3 cores is 98 %; over main's 4 alone they would
    read 145 %, a regression, and a good change would be rolled back."""
    cluster = Cluster()
    sidecar = {"name": "sidecar", "resources": {"limits": {"cpu": "2"}, "requests": {"cpu": "2"}}}
    cluster.workload["spec"]["template"]["spec"]["containers"].append(sidecar)
    driver = Driver(cluster)
    driver.before = window(0.3, 2.94).model_copy(update={"allocation": Allocation(cpu_limit_cores=3.0)})
    applied(cluster, driver)
    new_pods = cluster.pods_of(cluster.workload)
    assert [c["resources"]["limits"]["cpu"] for c in new_pods[0]["spec"]["containers"]] == ["4", "2"]
    driver.after = window(0.8, 5.8, pods=tuple(p["metadata"]["name"] for p in new_pods))
    cluster.roll_out()
    status = verified(cluster, driver)
    assert "CPU saturation p95 98%->97%" in status["reason"]
    assert status["history"][-1]["after"]["cpuSaturationP95"] == round(5.8 / 6, 4)


def test_pods_that_never_pull_their_image_are_rolled_back_within_minutes() -> None:
    cluster = Cluster()
    driver = Driver(cluster)
    applied(cluster, driver)
    cluster.pod_state = {
        "phase": "Pending",
        "containerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull"}}}],
    }
    cluster.writes.clear()
    driver.step(T0 + timedelta(minutes=1))
    assert cluster.writes == ["status:RollbackIntentRecorded", "workload", "status:RolledBack"]
    assert cluster.cpu() == "1" and "ErrImagePull" in cluster.apply()["reason"]


# --------------------------------------------------------------------------------------------------
# H2, H6: rollbacks
# --------------------------------------------------------------------------------------------------


def test_a_persons_later_revision_is_not_blamed_on_our_change() -> None:
    """M-E: a person edits the template after our change and that revision fails: our change is
    superseded (not verified, not a regression, not counted), and the person's revision is left alone."""
    cluster = Cluster()
    driver = Driver(cluster)
    applied(cluster, driver)
    cluster.human_sets_cpu("6")  # kubectl edit on the limit; the request still holds our 4
    cluster.pod_state = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    }
    cluster.writes.clear()
    driver.step(T0 + timedelta(minutes=1))
    resources = cluster.workload["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["limits"]["cpu"] == "6" and resources["requests"]["cpu"] == "4"
    assert cluster.writes == ["status:Done"] and "superseded" in cluster.apply()["reason"]
    assert cluster.apply()["rollbacks"] == 0 if "rollbacks" in cluster.apply() else True
    assert "ChangeSuperseded" in cluster.events


def test_a_crash_during_rollback_never_undoes_the_rollback() -> None:
    cluster = Cluster()
    driver = Driver(cluster)
    applied(cluster, driver)
    cluster.pod_state = {
        "phase": "Failed",
        "containerStatuses": [{"restartCount": 5, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}],
    }
    cluster.fail_next_patch = ApiException(status=500, reason="Internal Error")
    driver.step(T0 + timedelta(minutes=1))
    assert cluster.apply()["phase"] == "RollbackIntentRecorded" and cluster.cpu() == "4"
    driver.step(T0 + timedelta(minutes=2))
    assert cluster.cpu() == "1" and cluster.apply()["state"] == "RolledBack"
    cluster.writes.clear()
    driver.step(T0 + timedelta(minutes=3))
    assert "workload" not in cluster.writes and cluster.cpu() == "1"


def test_a_regressed_change_is_not_retried_until_the_spec_changes_and_n_rollbacks_block() -> None:
    cluster = Cluster()
    driver = Driver(cluster)
    failing = {
        "phase": "Pending",
        "containerStatuses": [{"state": {"waiting": {"reason": "ImagePullBackOff"}}}],
    }
    applied(cluster, driver)
    cluster.pod_state = failing
    driver.step(T0 + timedelta(minutes=1))
    cluster.pod_state = {"phase": "Running"}
    cluster.roll_out()
    later = T0 + timedelta(hours=2)  # past the cooldown
    cluster.publish(now=later)
    driver.step(later)
    assert cluster.cpu() == "1" and "not retried" in cluster.apply()["reason"]
    cluster.human_sets_cpu("1.1")  # the spec changed: the change may be tried again
    cluster.roll_out()
    cluster.publish(now=later + timedelta(minutes=1))
    driver.step(later + timedelta(minutes=1))
    assert cluster.cpu() == "4"
    cluster.pod_state = failing
    driver.step(later + timedelta(minutes=2))
    assert cluster.apply()["rollbacks"] == 2
    cluster.pod_state = {"phase": "Running"}
    cluster.human_sets_cpu("1.2")
    cluster.roll_out()
    much_later = later + timedelta(hours=3)
    cluster.publish(now=much_later)
    driver.step(much_later)
    assert cluster.apply()["state"] == "Blocked" and "clear-regressions" in cluster.apply()["reason"]
    cluster.workload["metadata"]["annotations"][CLEAR_REGRESSIONS_ANNOTATION] = "ticket-42"
    driver.step(much_later + timedelta(minutes=1))
    assert cluster.cpu() == "4" and cluster.apply()["rollbacks"] == 0


def test_a_policy_deleted_mid_verification_leaves_the_change_without_a_write() -> None:
    cluster = Cluster()
    driver = Driver(cluster)
    applied(cluster, driver)
    cluster.pod_state = {
        "phase": "Pending",
        "containerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull"}}}],
    }
    cluster.writes.clear()
    driver.step(T0 + timedelta(minutes=1), effective_settings(None))
    assert cluster.writes == ["status:Abandoned"] and cluster.cpu() == "4"
    assert "left in place unverified" in cluster.apply()["reason"]


# --------------------------------------------------------------------------------------------------
# H4, H5: availability and ownership
# --------------------------------------------------------------------------------------------------


def test_a_pdb_at_zero_allowance_blocks_the_change() -> None:
    cluster = Cluster()
    driver = Driver(cluster)
    cluster.publish()
    pdb = {"metadata": {"name": "keep-all"}, "spec": {"selector": {"matchLabels": {"app": "trainer"}}},
           "status": {"disruptionsAllowed": 0}}  # fmt: skip
    driver.step(T0, pdbs=(pdb,))
    assert cluster.cpu() == "1" and "PodDisruptionBudget keep-all" in cluster.apply()["reason"]
    assert cluster.apply()["state"] == "Blocked"


def test_a_single_replica_workload_is_not_restarted_unless_allowed() -> None:
    cluster = Cluster(replicas=1)
    driver = Driver(cluster)
    cluster.publish()
    driver.step(T0)
    assert cluster.cpu() == "1" and "replica floor" in cluster.apply()["reason"]
    driver.step(T0 + timedelta(minutes=1), policy(allowSingleReplica=True))
    assert cluster.cpu() == "4"


def test_a_controller_owned_deployment_is_refused_naming_the_parent() -> None:
    cluster = Cluster()
    cluster.workload["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "name": "llm",
            "uid": "i",
            "controller": True,
        }
    ]
    driver = Driver(cluster)
    cluster.publish()
    driver.step(T0)
    reason = cluster.apply()["reason"]
    assert cluster.cpu() == "1" and "managed by InferenceService/llm (serving.kserve.io/v1beta1)" in reason
    assert "change the InferenceService instead" in reason


def test_a_field_owned_by_argo_cds_client_side_apply_is_a_conflict() -> None:
    cluster = Cluster()
    cluster.workload["metadata"]["managedFields"] = [{
        "manager": "argocd-controller", "operation": "Update",
        "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {'k:{"name":"main"}': {
            "f:resources": {"f:limits": {"f:cpu": {}}}}}}}}},
    }]  # fmt: skip
    driver = Driver(cluster)
    cluster.publish()
    driver.step(T0)
    assert cluster.cpu() == "1" and "'argocd-controller'" in cluster.apply()["reason"]


def test_partial_data_is_not_acted_on() -> None:
    cluster = Cluster()
    driver = Driver(cluster)
    cluster.publish()
    driver.before = window(0.3, 0.98).model_copy(update={"warnings": ["team-a/trainer-1-1: no GPU series"]})
    driver.step(T0)
    assert cluster.cpu() == "1" and "partial data" in cluster.apply()["reason"]


def test_a_dry_run_records_the_proposal_and_sends_nothing() -> None:
    cluster = Cluster()
    driver = Driver(cluster)
    cluster.publish()
    driver.step(T0, policy_dry_run())
    assert cluster.cpu() == "1" and cluster.apply()["phase"] == "Proposed" and cluster.apply()["dryRun"]
    assert yaml.safe_load(cluster.apply()["patch"])["spec"]["template"]["spec"]["containers"][0]["resources"]


def policy_dry_run() -> Any:
    spec = {"mode": "Apply", "dryRun": True, "actions": ["cpu"], "safety": {"cooldown": "1h"}}
    return effective_settings(
        GPURightsizingPolicy.model_validate({"metadata": {"name": "apply"}, "spec": spec})
    )


def test_in_flight_pods_and_recent_changes_come_from_the_change_records() -> None:
    target = {"apiVersion": "apps/v1", "kind": "Deployment"}
    records = readable_changes([
        {"metadata": {"namespace": "a"}, "spec": {"targetRef": {**target, "name": "x"}, "workloadUid": "u1"},
         "status": {"replicas": 3, "phase": "Applied", "policy": "p", "appliedAt": "2026-03-04T11:30:00Z"}},
        {"metadata": {"namespace": "a"}, "spec": {"targetRef": {**target, "name": "y"}, "workloadUid": "u2"},
         "status": {"state": "Blocked", "policy": "p", "appliedAt": "2026-03-04T11:40:00Z"}},
    ])  # fmt: skip
    assert loop.in_flight_pods(records) == {"p": {"a/Deployment/x": 3}}
    assert len(loop.recent_changes(records, T0)) == 2  # a Blocked change that was sent still counts


def test_a_statefulset_rollback_deletes_only_the_stuck_pods_of_the_failed_revision() -> None:
    class Pods:
        def __init__(self) -> None:
            self.deleted: list[str] = []

        def pods_of(self, workload: Mapping[str, Any]) -> list[dict[str, Any]]:
            def sts_pod(name: str, revision: str, phase: str) -> dict[str, Any]:
                labels = {"controller-revision-hash": revision}
                return {"metadata": {"name": name, "uid": name, "labels": labels}, "status": {"phase": phase}}

            return [
                sts_pod("db-0", "bad", "Pending"),
                sts_pod("db-1", "good", "Running"),
                sts_pod("db-2", "bad", "Running"),
            ]

        def delete_pod(self, namespace: str, name: str, uid: str) -> None:
            self.deleted.append(name)

    pods = Pods()
    sts = {"kind": "StatefulSet", "metadata": {"name": "db"}, "status": {"updateRevision": "good"}}
    case = WorkloadCase(
        ref=WorkloadRef(namespace="team-a", kind="StatefulSet", name="db"), uid="s", workload=sts,
        recommendation={}, settings=policy(), hpa=None, now=T0,
    )  # fmt: skip
    Actuator(pods, Cluster(), lambda: True, lambda ref, start, end: None)._delete_stuck_pods(
        case, "bad", "controller-revision-hash"
    )  # type: ignore[arg-type]
    assert pods.deleted == ["db-0"]


def test_a_forged_change_record_cannot_shorten_the_cooldown() -> None:
    cluster = Cluster()
    driver = Driver(cluster)
    cluster.publish()
    cluster.forge_change({"state": "Verified", "appliedAt": "2026-03-04T11:50:00Z"})
    forged = ChangeRecord(change_id="c-x", at=T0 - timedelta(days=30), target={}, previous={})
    cluster.workload["metadata"]["annotations"][CHANGE_ANNOTATION] = forged.to_annotation()
    driver.step(T0)
    assert cluster.cpu() == "1"


def test_without_metrics_no_new_change_starts_but_a_change_in_flight_is_still_watched() -> None:
    cluster = Cluster()
    driver = Driver(cluster)
    cluster.publish()

    def step_without_window(now: datetime) -> None:
        driver.before = driver.after = None
        driver.step(now)
        driver.before = window(0.3, 0.98)

    step_without_window(T0)
    assert cluster.cpu() == "1" and "no metrics" in cluster.apply()["reason"]
    applied(cluster, driver)
    cluster.pod_state = {
        "phase": "Pending",
        "containerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull"}}}],
    }
    step_without_window(T0 + timedelta(minutes=1))
    assert cluster.cpu() == "1" and cluster.apply()["state"] == "RolledBack"


@pytest.mark.parametrize(("phase", "deleted"), [("Applied", False), ("RolledBack", True)])
def test_an_opted_out_pod_never_deletes_a_recommendation_with_a_change_in_flight(
    phase: str, deleted: bool
) -> None:
    import kopf

    from gpu_rightsizer.adapters.kube import ResolvedWorkload
    from gpu_rightsizer.config import OperatorConfig
    from gpu_rightsizer.recommender import wiring as recommender
    from gpu_rightsizer.runtime.context import OperatorContext

    workload = {"metadata": {"name": "trainer", "annotations": {"gpurightsizer.io/ignore": "true"}}}

    class Kube:
        def __init__(self) -> None:
            self.deleted: list[str] = []

        def resolve_owner(self, pod: Any) -> ResolvedWorkload:
            return ResolvedWorkload(ref=REF, uid="d-1", obj=workload)

        def get_recommendation(self, ref: WorkloadRef) -> dict[str, Any]:
            target = {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name}
            return {
                "metadata": {"namespace": ref.namespace, "name": "r"},
                "spec": {"targetRef": target},
                "status": {"apply": {"phase": phase}},
            }

        def delete_recommendation(self, ref: WorkloadRef) -> bool:
            self.deleted.append(ref.key)
            return True

    kube = Kube()
    memo = kopf.Memo()
    memo.context = OperatorContext(config=OperatorConfig(role="all"), kube=kube)  # type: ignore[arg-type]
    pod = {"metadata": {"name": "trainer-0", "namespace": "team-a"}, "spec": {}}
    recommender.gpu_pod_event(type="MODIFIED", body=pod, memo=memo)  # type: ignore[arg-type]
    assert bool(kube.deleted) == deleted
