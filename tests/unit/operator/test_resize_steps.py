"""The actuator's in-place path, step by step against a fake cluster: resize, verify, Infeasible,
Deferred, a crash mid-rollback, a person's rollout ending the change."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from tests.unit.operator.test_changes import T0, Cluster, Driver, verified, window

from gpu_rightsizer.actuator.inplace import RESIZE_ANNOTATION
from gpu_rightsizer.actuator.writes import LeadershipLostError
from gpu_rightsizer.adapters.source import rate_window_seconds
from gpu_rightsizer.model.observation import Allocation, WorkloadRef, WorkloadWindow


class ResizeCluster(Cluster):
    """The Deployment of test_changes, opted in to in-place resize, with running pods and a kubelet."""

    def __init__(self, replicas: int = 2, node_cpu: str = "64", *, annotated: bool = True) -> None:
        super().__init__(replicas)
        if annotated:
            self.workload["metadata"]["annotations"][RESIZE_ANNOTATION] = "InPlace"
        self.node_cpu = node_cpu
        self.kubelet = "apply"  # apply | Infeasible | Deferred
        self.resizes: list[str] = []
        self.pods: list[dict[str, Any]] = [self._pod(i) for i in range(replicas)]
        self.run_kubelet()

    def _pod(self, index: int) -> dict[str, Any]:
        resources = {
            "limits": {"cpu": "1", "nvidia.com/gpu": "1"},
            "requests": {"cpu": "1", "nvidia.com/gpu": "1"},
        }
        return {
            "metadata": {"name": f"trainer-1-{index}", "uid": f"p{index}",
                         "labels": {"app": "trainer", "pod-template-hash": "h1"}},
            "spec": {"nodeName": f"node-{index}", "containers": [{"name": "main", "resources": resources}]},
            "status": {"phase": "Running", "conditions": [], "containerStatuses": [
                {"name": "main", "restartCount": 0, "resources": copy.deepcopy(resources)}
            ]},
        }  # fmt: skip

    def run_kubelet(self) -> None:
        """What the kubelet answers to a pending resize (the KWOK Stages model the same)."""
        for pod in self.pods:
            spec = pod["spec"]["containers"][0]["resources"]
            status = pod["status"]
            if status["containerStatuses"][0]["resources"] == spec:
                status["conditions"] = []
            elif self.kubelet == "apply":
                status["containerStatuses"][0]["resources"] = copy.deepcopy(spec)
                status["conditions"] = []
            else:
                status["conditions"] = [{"type": "PodResizePending", "status": "True", "reason": self.kubelet,
                                         "message": f"simulated {self.kubelet}"}]  # fmt: skip

    def pod_cpu(self) -> list[str]:
        return [str(p["spec"]["containers"][0]["resources"]["limits"]["cpu"]) for p in self.pods]

    # --- KubeAdapter calls of the in-place path ---------------------------------------------------

    def owned_pods(self, workload: Mapping[str, Any]) -> list[dict[str, Any]]:
        return copy.deepcopy(self.pods)

    def read_node(self, name: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": self.node_cpu}}}

    def pods_on_node(self, name: str) -> list[dict[str, Any]]:
        return copy.deepcopy([p for p in self.pods if p["spec"]["nodeName"] == name])

    def resize_pod(
        self, namespace: str, name: str, body: Mapping[str, Any], *, uid: str | None = None
    ) -> dict[str, Any]:
        pod = next(p for p in self.pods if p["metadata"]["name"] == name)
        assert uid == pod["metadata"]["uid"]
        for patch in body["spec"]["containers"]:
            for section, values in patch["resources"].items():
                pod["spec"]["containers"][0]["resources"][section].update(values)
        self.resizes.append(f"{name}:{pod['spec']['containers'][0]['resources']['limits']['cpu']}")
        self.writes.append("resize")
        return copy.deepcopy(pod)


def started(cluster: ResizeCluster, driver: Driver) -> None:
    cluster.publish()
    driver.step(T0)
    assert cluster.pod_cpu() == ["4", "4"] and cluster.apply()["phase"] == "Applied"


def test_pods_are_resized_in_place_and_verified_on_the_same_pods() -> None:
    cluster = ResizeCluster()
    driver = Driver(cluster, after=window(0.8, 0.5))
    started(cluster, driver)
    assert cluster.writes == ["status:IntentRecorded", "resize", "resize", "status:Applied"]
    assert cluster.cpu() == "1"  # no template patch: the Deployment is not touched
    assert "set cpu limits of container main to 4 (now 1)" in cluster.apply()["manifestAdvice"]
    assert cluster.recommendation["status"]["apply"]["manifestAdvice"] == cluster.apply()["manifestAdvice"]
    cluster.run_kubelet()
    driver.step(T0 + timedelta(minutes=1))
    assert cluster.apply()["phase"] == "RolledOut"
    driver.step(T0 + timedelta(minutes=12))
    assert cluster.apply()["phase"] == "RolledOut"  # still measuring: from 3 min after the resize
    driver.step(T0 + timedelta(minutes=15))
    status = cluster.apply()
    assert status["state"] == "Verified", status["reason"]
    assert "GPU busy p95 30%->80%" in status["reason"] and "manifest" in status["reason"]
    assert [p["metadata"]["uid"] for p in cluster.pods] == ["p0", "p1"]  # the same pods


def test_an_infeasible_resize_is_blocked_with_its_reason_and_resized_back() -> None:
    cluster = ResizeCluster()
    cluster.kubelet = "Infeasible"
    driver = Driver(cluster)
    started(cluster, driver)
    cluster.run_kubelet()
    driver.step(T0 + timedelta(minutes=1))
    status = cluster.apply()
    assert status["state"] == "Blocked" and "Infeasible" in status["reason"], status
    assert "simulated Infeasible" in status["reason"]
    assert cluster.pod_cpu() == ["1", "1"] and cluster.resizes[-2:] == ["trainer-1-0:1", "trainer-1-1:1"]
    assert status["rollbacks"] == 0  # not a regression


def test_a_deferred_resize_waits_one_verify_for_then_gives_up() -> None:
    cluster = ResizeCluster()
    cluster.kubelet = "Deferred"
    driver = Driver(cluster)
    started(cluster, driver)
    cluster.run_kubelet()
    driver.step(T0 + timedelta(minutes=1))
    assert cluster.apply()["phase"] == "Applied" and "deferred" in cluster.apply()["reason"]
    driver.step(T0 + timedelta(minutes=8))
    assert cluster.apply()["phase"] == "Applied"
    driver.step(T0 + timedelta(minutes=12))
    status = cluster.apply()
    assert status["state"] == "Skipped" and "not resized within verifyFor" in status["reason"], status
    assert cluster.pod_cpu() == ["1", "1"]


def test_the_node_must_hold_the_resized_pod() -> None:
    cluster = ResizeCluster(node_cpu="2")
    driver = Driver(cluster)
    cluster.publish()
    driver.step(T0)
    status = cluster.apply()
    assert status["state"] == "Blocked" and "node cannot hold" in status["reason"], status
    assert cluster.resizes == []


def test_a_crash_during_an_in_place_rollback_resumes_to_rolled_back() -> None:
    cluster = ResizeCluster()
    driver = Driver(cluster, after=window(0.05, 0.5))  # GPU busy fell: a regression
    started(cluster, driver)
    cluster.run_kubelet()
    driver.step(T0 + timedelta(minutes=1))
    real = cluster.resize_pod
    calls = {"n": 0}

    def crash_after_first(
        namespace: str, name: str, body: Mapping[str, Any], *, uid: str | None = None
    ) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] > 1:
            driver.leader = False
            raise LeadershipLostError("simulated crash between two pods")
        return real(namespace, name, body, uid=uid)

    cluster.resize_pod = crash_after_first  # type: ignore[method-assign]
    with contextlib.suppress(LeadershipLostError):
        driver.step(T0 + timedelta(minutes=15))
    assert cluster.apply()["phase"] == "RollbackIntentRecorded"
    assert cluster.pod_cpu() == ["1", "4"]  # half done
    cluster.resize_pod = real  # type: ignore[method-assign]
    driver.leader = True
    driver.step(T0 + timedelta(minutes=16))
    status = cluster.apply()
    assert status["state"] == "RolledBack" and status["phase"] == "RolledBack", status
    assert cluster.pod_cpu() == ["1", "1"] and status["rollbacks"] == 1


def test_a_rollout_that_replaces_the_pods_ends_the_change() -> None:
    cluster = ResizeCluster()
    driver = Driver(cluster)
    started(cluster, driver)
    cluster.run_kubelet()
    driver.step(T0 + timedelta(minutes=1))
    cluster.pods = [cluster._pod(i) for i in range(2)]
    for i, pod in enumerate(cluster.pods):
        pod["metadata"].update(name=f"trainer-2-{i}", uid=f"q{i}")
    driver.step(T0 + timedelta(minutes=3))
    status = cluster.apply()
    assert status["phase"] == "Done" and "ended" in status["reason"] and not status.get("rollbacks"), status


def test_a_lower_in_place_is_refused() -> None:
    cluster = ResizeCluster()
    driver = Driver(cluster)
    cluster.publish(cores="500m")
    driver.step(T0)
    status = cluster.apply()
    assert status["state"] == "Blocked" and "shrink" in status["reason"], status
    assert cluster.resizes == []


def test_a_resize_that_restarts_the_container_obeys_the_rollout_gates() -> None:
    """resizePolicy RestartContainer: a restart, so the replica floor holds a single-replica workload."""
    cluster = ResizeCluster(replicas=1)
    cluster.pods[0]["spec"]["containers"][0]["resizePolicy"] = [
        {"resourceName": "cpu", "restartPolicy": "RestartContainer"}
    ]
    driver = Driver(cluster)
    cluster.publish()
    driver.step(T0)
    status = cluster.apply()
    assert status["state"] == "Blocked" and "replica floor" in status["reason"], status
    assert cluster.resizes == []
    cluster.pods[0]["spec"]["containers"][0].pop("resizePolicy")  # NotRequired: no restart, no floor
    driver.step(T0 + timedelta(minutes=1))
    assert cluster.apply()["phase"] == "Applied" and cluster.pod_cpu() == ["4"]


def test_a_gitops_owner_of_the_template_cpu_blocks_the_resize() -> None:
    cluster = ResizeCluster()
    cluster.workload["metadata"]["managedFields"] = [{
        "manager": "argocd-controller", "operation": "Apply",
        "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {'k:{"name":"main"}': {
            "f:resources": {"f:limits": {"f:cpu": {}}}}}}}}},
    }]  # fmt: skip
    driver = Driver(cluster)
    cluster.publish()
    driver.step(T0)
    status = cluster.apply()
    assert status["state"] == "Blocked" and "'argocd-controller'" in status["reason"], status
    assert cluster.resizes == []


def test_the_resized_pods_are_measured_at_their_new_size_only() -> None:
    """The same pods' series go on through a resize, so verification reads only samples whose counter
    range starts after every pod reported the new size, and compares each pod's usage with the CPU it
    runs with now (all its containers, as the kubelet reports them), never with the old or a partial
    limit. Here main goes 1 -> 4 beside a 2-core sidecar: 5.8 of 6 cores used is 97 %, not the 145 %
    that 5.8 over main's 4 alone would read (a regression from the baseline's 98 %)."""
    cluster = ResizeCluster()
    for pod in cluster.pods:
        sidecar = {"name": "sidecar", "resources": {"limits": {"cpu": "2"}, "requests": {"cpu": "2"}}}
        pod["spec"]["containers"].append(copy.deepcopy(sidecar))
        pod["status"]["containerStatuses"].append({"restartCount": 0, **copy.deepcopy(sidecar)})
    driver = Driver(cluster, after=window(0.8, 5.8))
    driver.before = window(0.3, 2.94).model_copy(update={"allocation": Allocation(cpu_limit_cores=3.0)})
    reads: list[tuple[datetime, datetime]] = []
    measure = driver.actuator.measure

    def recorded(ref: WorkloadRef, start: datetime, end: datetime) -> WorkloadWindow | None:
        reads.append((start, end))
        return measure(ref, start, end)

    driver.actuator.measure = recorded
    started(cluster, driver)
    cluster.run_kubelet()
    driver.step(T0 + timedelta(minutes=1))
    assert cluster.apply()["phase"] == "RolledOut"
    reported = datetime.fromisoformat(cluster.apply()["rolledOutAt"].replace("Z", "+00:00"))
    reads.clear()
    driver.step(T0 + timedelta(minutes=12))  # verifyFor (10 min) after the report, not after the range
    assert cluster.apply()["phase"] == "RolledOut" and reads == []
    driver.step(T0 + timedelta(minutes=15))
    status = cluster.apply()
    assert reads and all(
        start >= reported + timedelta(seconds=rate_window_seconds(60.0)) for start, _ in reads
    )
    assert status["state"] == "Verified", status["reason"]
    assert "CPU saturation p95 98%->97%" in status["reason"]


def test_a_resized_pod_is_measured_as_the_template_path_and_the_baseline_measure_it() -> None:
    """main 1 -> 4 beside a sidecar with a 1-core request and no limit: the baseline's allocation
    counts the limits that are set (main's 1 core: 0.98 used is 98 %), so after the resize 3.8 cores
    are 95 % of main's 4, the figure the template path gives too; not 76 % of limits and requests
    mixed (4 + 1), which would hide a rise in saturation."""
    cluster = ResizeCluster()
    for pod in cluster.pods:
        sidecar = {"name": "sidecar", "resources": {"requests": {"cpu": "1"}}}
        pod["spec"]["containers"].append(copy.deepcopy(sidecar))
        pod["status"]["containerStatuses"].append({"restartCount": 0, **copy.deepcopy(sidecar)})
    driver = Driver(cluster, after=window(0.8, 3.8))
    started(cluster, driver)
    cluster.run_kubelet()
    assert "CPU saturation p95 98%->95%" in verified(cluster, driver)["reason"]


def test_a_deployment_s_cpu_raise_goes_in_place_without_the_annotation() -> None:
    """Deployments take the in-place path for a CPU raise their pods take without a restart: the
    template is never patched, the target stays as manifest advice."""
    cluster = ResizeCluster(annotated=False)
    driver = Driver(cluster, after=window(0.8, 0.5))
    started(cluster, driver)
    assert cluster.cpu() == "1" and "workload" not in cluster.writes
    assert "new pods start at the old size" in cluster.apply()["manifestAdvice"]


def test_a_deployment_whose_container_restarts_on_resize_keeps_the_template_path() -> None:
    """resizePolicy RestartContainer: resizing every pod at once would restart them all together; the
    template path rolls them out one by one under the rollout gates."""
    cluster = ResizeCluster(annotated=False)
    for pod in cluster.pods:
        pod["spec"]["containers"][0]["resizePolicy"] = [
            {"resourceName": "cpu", "restartPolicy": "RestartContainer"}
        ]
    driver = Driver(cluster)
    cluster.publish()
    driver.step(T0)
    assert cluster.cpu() == "4" and cluster.resizes == [] and "workload" in cluster.writes


def test_the_template_annotation_keeps_a_deployment_on_the_template_path() -> None:
    cluster = ResizeCluster(annotated=False)
    cluster.workload["metadata"]["annotations"][RESIZE_ANNOTATION] = "Template"
    driver = Driver(cluster)
    cluster.publish()
    driver.step(T0)
    assert cluster.cpu() == "4" and cluster.resizes == []


def test_a_person_s_rollout_ends_an_in_place_change_not_a_regression() -> None:
    """A rollout of the Deployment after the resize (here one that keeps the old size) replaces the
    resized pods: the change ends at once, before any pod is gone, and is not rolled back."""
    cluster = ResizeCluster(annotated=False)
    driver = Driver(cluster, after=window(0.05, 0.5))  # would read as a regression
    started(cluster, driver)
    cluster.run_kubelet()
    driver.step(T0 + timedelta(minutes=1))
    # `kubectl rollout restart`: a new template revision, whose pods start at the manifest's size
    cluster.workload["spec"]["template"]["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/restartedAt": "now"
    }
    cluster._bump()
    driver.step(T0 + timedelta(minutes=2))
    status = cluster.apply()
    assert status["phase"] == "Done" and "ended" in status["reason"], status
    assert not status.get("rollbacks") and cluster.pod_cpu() == ["4", "4"]


def test_a_restarting_resize_of_a_job_obeys_the_pdb_and_counts_every_pod() -> None:
    """A Job has no rollout, but a RestartContainer resize restarts its pods, all at once: a
    PodDisruptionBudget over them must allow that many disruptions."""
    cluster = ResizeCluster(annotated=False)
    cluster.workload["kind"] = "Job"
    for pod in cluster.pods:
        pod["spec"]["containers"][0]["resizePolicy"] = [
            {"resourceName": "cpu", "restartPolicy": "RestartContainer"}
        ]
    pdb = {"metadata": {"name": "workers"}, "spec": {"selector": {"matchLabels": {"app": "trainer"}}},
           "status": {"disruptionsAllowed": 1}}  # fmt: skip
    driver = Driver(cluster)
    cluster.publish()
    driver.step(T0, pdbs=[pdb])
    status = cluster.apply()
    assert status["state"] == "Blocked" and "PodDisruptionBudget workers allows 1" in status["reason"], status
    assert cluster.resizes == []
    cluster.workload["spec"]["backoffLimit"] = 1  # two restarts would fail the Job
    pdb["status"]["disruptionsAllowed"] = 2
    driver.step(T0 + timedelta(minutes=1), pdbs=[pdb])
    status = cluster.apply()
    assert status["state"] == "Blocked" and "backoffLimit 1" in status["reason"], status
    cluster.workload["spec"]["backoffLimit"] = 6
    driver.step(T0 + timedelta(minutes=2), pdbs=[pdb])
    assert cluster.pod_cpu() == ["4", "4"] and cluster.apply()["replicas"] == 2  # counted as restarts
