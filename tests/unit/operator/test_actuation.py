"""Unit tests of actuator/: safety gates, action selection, patch building, field ownership,
the change record and regression checks."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_rightsizer.actuator.fields import conflict_reason, field_conflicts
from gpu_rightsizer.actuator.gates import (
    Availability,
    GateContext,
    check_availability,
    check_gates,
    count_recent,
    disrupts_pods,
)
from gpu_rightsizer.actuator.plan import (
    CHANGE_ANNOTATION,
    ChangePlan,
    PlanError,
    hpa_patch,
    plan_change,
    replica_target,
    select_actions,
    workload_patch,
)
from gpu_rightsizer.actuator.record import ChangeRecord, change_landed, record_on, rollback_plan
from gpu_rightsizer.actuator.verify import (
    REVISION_ANNOTATION,
    Outcome,
    PodHealth,
    VerificationInput,
    improvement_summary,
    new_revision_pods,
    pod_health,
    regression,
    running_cpu_cores,
    signals_from_window,
    signals_of_pods,
    verification_outcome,
)
from gpu_rightsizer.logic.policy import effective_settings
from gpu_rightsizer.model.codes import ActionType, ApplyState, DiagnosisCode
from gpu_rightsizer.model.crd import GPURightsizingPolicy
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

NOW = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)  # a Wednesday


def policy(mode: str = "Apply", actions: tuple[str, ...] = ("cpu",), **safety: Any) -> GPURightsizingPolicy:
    spec: dict[str, Any] = {"mode": mode, "safety": safety}
    if mode != "Off":
        spec["actions"] = list(actions) if mode == "Apply" else []
    return GPURightsizingPolicy.model_validate({"metadata": {"name": "p"}, "spec": spec})


def settings(mode: str = "Apply", actions: tuple[str, ...] = ("cpu",), **safety: Any) -> Any:
    return effective_settings(policy(mode, actions, **safety))


def gate(**changes: Any) -> GateContext:
    base: dict[str, Any] = {
        "settings": settings(),
        "diagnosis": DiagnosisCode.INPUT_PIPELINE_CPU_BOUND,
        "finding_codes": frozenset({DiagnosisCode.INPUT_PIPELINE_CPU_BOUND}),
        "window_end": NOW - timedelta(seconds=10),
        "now": NOW,
        "staleness_limit": timedelta(minutes=5),
        "namespace": "team-a",
        "analysed_generation": 3,
        "live_generation": 3,
    }
    base.update(changes)
    return GateContext(**base)


def deployment(
    cpu: str | None = "1",
    gpu: tuple[str, str] = ("nvidia.com/gpu", "1"),
    replicas: int = 1,
    memory: str = "8Gi",
    node_selector: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    kind: str = "Deployment",
) -> dict[str, Any]:
    resources: dict[str, dict[str, str]] = {
        "limits": {gpu[0]: gpu[1], "memory": memory},
        "requests": {gpu[0]: gpu[1], "memory": memory},
    }
    if cpu is not None:
        resources["limits"]["cpu"] = cpu
        resources["requests"]["cpu"] = cpu
    main = {"name": "main", "image": "x", "resources": resources}
    template = {
        "spec": {
            "containers": containers or [main],
            "nodeSelector": node_selector or {"nvidia.com/gpu.product": "NVIDIA-H200"},
        }
    }
    spec: dict[str, Any] = {
        "replicas": replicas,
        "template": template,
        "selector": {"matchLabels": {"app": "x"}},
    }
    if kind == "CronJob":
        spec = {"jobTemplate": {"spec": {"template": template}}}
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "x", "namespace": "team-a"},
        "spec": spec,
    }


def cpu_action(cores: str = "4", container: str | None = "main") -> Action:
    """A CPU action as the engine publishes it: display text plus the machine-readable target."""
    return Action(
        type=ActionType.CPU,
        from_value="1 cores (limit)",
        to_value="display text the actuator never parses",
        reason="r",
        resource="cpu",
        automatic=True,
        target=ActionTarget(container=container, requests={"cpu": cores}, limits={"cpu": cores}),
    )


def mig_action(profile: str = "1g.18gb") -> Action:
    return Action(
        type=ActionType.MIG_PROFILE,
        from_value="nvidia.com/gpu: 1",
        to_value="display",
        reason="r",
        automatic=True,
        target=ActionTarget(
            container="main",
            requests={f"nvidia.com/mig-{profile}": "1"},
            limits={f"nvidia.com/mig-{profile}": "1"},
            remove_resources=["nvidia.com/gpu"],
            gpu_capacity_change=True,
        ),
    )


# --------------------------------------------------------------------------------------------------
# Gates
# --------------------------------------------------------------------------------------------------


def test_all_gates_pass_under_an_apply_policy() -> None:
    verdict = check_gates(gate())
    assert verdict.go and verdict.state == ApplyState.PENDING


@pytest.mark.parametrize(
    ("changes", "state", "words"),
    [
        ({"settings": settings(mode="Recommend")}, ApplyState.ADVISED, "Recommend mode"),
        ({"settings": settings(mode="Off")}, ApplyState.SKIPPED, "Off mode"),
        ({"settings": effective_settings(None)}, ApplyState.ADVISED, "no Apply policy"),
        ({"settings": effective_settings(policy(), ignored=True)}, ApplyState.SKIPPED, "opts out"),
        ({"diagnosis": DiagnosisCode.INSUFFICIENT_DATA}, ApplyState.SKIPPED, "insufficient data"),
        ({"diagnosis": None}, ApplyState.SKIPPED, "insufficient data"),
        ({"finding_codes": frozenset({DiagnosisCode.THROTTLED})}, ApplyState.BLOCKED, "Throttled"),
        ({"diagnosis": DiagnosisCode.HARDWARE_FAULT}, ApplyState.BLOCKED, "HardwareFault"),
        ({"window_end": NOW - timedelta(minutes=30)}, ApplyState.BLOCKED, "stale"),
        ({"window_end": None}, ApplyState.SKIPPED, "no observation window"),
        ({"last_change_at": NOW - timedelta(minutes=10)}, ApplyState.BLOCKED, "cooldown"),
        ({"changes_last_hour_namespace": 3}, ApplyState.BLOCKED, "perNamespace 3"),
        (
            {"changes_last_hour_cluster": 10, "changes_last_hour_namespace": 0},
            ApplyState.BLOCKED,
            "cluster 10",
        ),
        (
            {"settings": settings(maintenanceWindows=[{"start": "01:00", "end": "02:00"}])},
            ApplyState.BLOCKED,
            "maintenance",
        ),
    ],
)
def test_each_gate_blocks_and_names_itself(changes: dict[str, Any], state: ApplyState, words: str) -> None:
    verdict = check_gates(gate(**changes))
    assert not verdict.go
    assert verdict.state == state
    assert words in verdict.reason


def test_cooldown_expires() -> None:
    assert check_gates(gate(last_change_at=NOW - timedelta(hours=7))).go


def test_inside_a_maintenance_window_passes() -> None:
    inside = settings(maintenanceWindows=[{"start": "11:00", "end": "13:00", "days": ["Wed"]}])
    assert check_gates(gate(settings=inside)).go


def test_rate_limits_count_only_the_last_hour() -> None:
    changes = [
        ("team-a", NOW - timedelta(minutes=5)),
        ("team-b", NOW - timedelta(minutes=50)),
        ("team-a", NOW - timedelta(minutes=61)),
        ("team-a", NOW + timedelta(minutes=1)),  # clock skew: not counted
    ]
    assert count_recent(changes, "team-a", NOW) == (2, 1)


def test_zero_rate_limit_blocks_everything() -> None:
    zero = settings(maxChangesPerHour={"cluster": 0, "perNamespace": 0})
    assert not check_gates(gate(settings=zero)).go


# --------------------------------------------------------------------------------------------------
# Selection and plans
# --------------------------------------------------------------------------------------------------


def test_cpu_plan_sets_request_and_limit_and_records_previous() -> None:
    plan = plan_change(deployment(), [cpu_action()], settings(), workload_key="team-a/Deployment/x")
    assert plan is not None
    assert plan.target == {
        "containers[main].resources.limits[cpu]": "4",
        "containers[main].resources.requests[cpu]": "4",
    }
    assert plan.previous == {
        "containers[main].resources.limits[cpu]": "1",
        "containers[main].resources.requests[cpu]": "1",
    }
    assert plan.actions == (ActionType.CPU,)
    assert plan.change_id.startswith("c-")


def test_same_change_gets_the_same_id() -> None:
    first = plan_change(deployment(), [cpu_action()], settings(), workload_key="k")
    second = plan_change(deployment(), [cpu_action()], settings(), workload_key="k")
    other = plan_change(deployment(), [cpu_action("6")], settings(), workload_key="k")
    assert first is not None and second is not None and other is not None
    assert first.change_id == second.change_id != other.change_id


def test_actions_outside_the_policy_are_left_out() -> None:
    plan = plan_change(deployment(), [cpu_action()], settings(actions=("memory",)))
    assert plan is None
    selection = select_actions(
        [cpu_action()], settings(actions=("memory",)), has_hpa=False, kind="Deployment"
    )
    assert selection.actions == () and "not in the policy" in selection.left_out[0]


def test_advice_only_actions_are_never_applied() -> None:
    advice = Action(type=ActionType.CPU, from_value="1", to_value="4 cores", reason="r", automatic=False)
    assert plan_change(deployment(), [advice], settings()) is None


def test_small_cpu_change_is_below_the_minimum() -> None:
    assert plan_change(deployment(cpu="4"), [cpu_action("4.2")], settings()) is None


def test_an_action_without_a_target_is_never_applied_and_display_text_is_never_parsed() -> None:
    untyped = Action(
        type=ActionType.CPU,
        from_value="1",
        to_value="4 cores (request and limit)",
        reason="r",
        automatic=True,
    )
    with pytest.raises(PlanError, match="no machine-readable target"):
        plan_change(deployment(), [untyped], settings())
    lying = cpu_action("2").model_copy(update={"to_value": "64 cores"})
    plan = plan_change(deployment(), [lying], settings())
    assert plan is not None and plan.target["containers[main].resources.limits[cpu]"] == "2"


def test_a_target_naming_an_unknown_container_is_a_plan_error() -> None:
    with pytest.raises(PlanError, match="not in the pod template"):
        plan_change(deployment(), [cpu_action(container="ghost")], settings())


def test_cpu_target_for_one_of_two_containers_keeps_the_sidecar() -> None:
    containers = [
        {"name": "sidecar", "resources": {"limits": {"cpu": "500m"}}},
        {
            "name": "main",
            "resources": {
                "limits": {"cpu": "1", "nvidia.com/gpu": "1"},
                "requests": {"cpu": "1", "nvidia.com/gpu": "1"},
            },
        },
    ]
    plan = plan_change(deployment(containers=containers), [cpu_action("4")], settings())
    assert plan is not None
    assert plan.target["containers[main].resources.limits[cpu]"] == "4"
    assert not any("sidecar" in path for path in plan.target)


def test_unreadable_cpu_target_is_a_plan_error() -> None:
    with pytest.raises(PlanError, match="not a Kubernetes quantity"):
        plan_change(deployment(), [cpu_action("lots")], settings())


def test_memory_plan_raises_the_limit() -> None:
    action = Action(
        type=ActionType.MEMORY,
        from_value="8.0Gi",
        to_value="16.0Gi",
        reason="r",
        resource="memory",
        automatic=True,
        target=ActionTarget(container="main", requests={"memory": "16Gi"}, limits={"memory": "16Gi"}),
    )
    plan = plan_change(deployment(), [action], settings(actions=("memory",)))
    assert plan is not None
    assert plan.target["containers[main].resources.limits[memory]"] == "16Gi"
    assert plan.target["containers[main].resources.requests[memory]"] == "16Gi"


def test_mig_mixed_plan_swaps_the_gpu_resource() -> None:
    mig = settings(actions=("migProfile",), sharingStrategy="mig-mixed", allowedMigProfiles=["1g.18gb"])
    plan = plan_change(deployment(), [mig_action()], mig)
    assert plan is not None
    assert plan.target == {
        "containers[main].resources.limits[nvidia.com/gpu]": None,
        "containers[main].resources.requests[nvidia.com/gpu]": None,
        "containers[main].resources.limits[nvidia.com/mig-1g.18gb]": "1",
        "containers[main].resources.requests[nvidia.com/mig-1g.18gb]": "1",
    }
    assert plan.previous["containers[main].resources.limits[nvidia.com/gpu]"] == "1"
    assert plan.previous["containers[main].resources.limits[nvidia.com/mig-1g.18gb]"] is None


def test_gpu_count_plan() -> None:
    action = Action(
        type=ActionType.GPU_COUNT,
        from_value="1",
        to_value="2",
        reason="r",
        resource="nvidia.com/gpu",
        automatic=True,
        target=ActionTarget(container="main", limits={"nvidia.com/gpu": "2"}, gpu_capacity_change=True),
    )
    plan = plan_change(deployment(), [action], settings(actions=("gpuCount",)))
    assert plan is not None and plan.target["containers[main].resources.limits[nvidia.com/gpu]"] == "2"


def replicas_action(to: int, kind: ActionType = ActionType.REPLICAS) -> Action:
    return Action(
        type=kind, from_value="x", to_value="display", reason="r", resource="replicas", automatic=True,
        target=ActionTarget(replicas=to),
    )  # fmt: skip


def test_scale_in_stops_at_min_replicas() -> None:
    plan = plan_change(
        deployment(replicas=4), [replicas_action(1)], settings(actions=("replicas",), minReplicas=2)
    )
    assert plan is not None and plan.target == {"replicas": "2"}


def test_scale_in_already_at_min_replicas_is_no_change() -> None:
    assert (
        plan_change(
            deployment(replicas=2), [replicas_action(1)], settings(actions=("replicas",), minReplicas=2)
        )
        is None
    )


def test_hpa_owned_replica_count_is_never_touched() -> None:
    hpa = {"metadata": {"name": "h"}, "spec": {"minReplicas": 2, "maxReplicas": 4}}
    plan = plan_change(deployment(replicas=3), [replicas_action(5)], settings(actions=("replicas",)), hpa=hpa)
    assert plan is None
    selection = select_actions(
        [replicas_action(5)], settings(actions=("replicas",)), has_hpa=True, kind="Deployment"
    )
    assert "HorizontalPodAutoscaler owns the replica count" in selection.left_out[0]


def test_hpa_bounds_are_patched_on_the_hpa() -> None:
    hpa = {"metadata": {"name": "h"}, "spec": {"minReplicas": 2, "maxReplicas": 4}}
    action = Action(
        type=ActionType.HPA_BOUNDS, from_value="2-4", to_value="2-8", reason="r", automatic=True,
        target=ActionTarget(min_replicas=2, max_replicas=8),
    )  # fmt: skip
    plan = plan_change(deployment(replicas=3), [action], settings(actions=("replicas",)), hpa=hpa)
    assert plan is not None and plan.target == {"hpa.maxReplicas": "8"}  # minReplicas 2 already in place
    assert plan.touches_hpa
    assert hpa_patch(plan.target) == {"spec": {"maxReplicas": 8}}
    assert workload_patch("Deployment", plan.target, None) == {}


def test_release_idle_respects_min_replicas() -> None:
    release = replicas_action(0, ActionType.RELEASE_IDLE)
    assert plan_change(deployment(), [release], settings(actions=("cpu",))) is None
    # the default minReplicas (1) keeps a 1-replica workload as it is
    assert plan_change(deployment(), [release], settings(actions=("releaseIdle",))) is None
    plan = plan_change(deployment(replicas=3), [release], settings(actions=("releaseIdle",)))
    assert plan is not None and plan.target == {"replicas": "1"}
    plan = plan_change(deployment(), [release], settings(actions=("releaseIdle",), minReplicas=0))
    assert plan is not None and plan.target == {"replicas": "0"} and plan.previous == {"replicas": "1"}


def test_min_replicas_never_turns_a_scale_in_into_a_scale_out() -> None:
    plan = plan_change(
        deployment(replicas=2), [replicas_action(1)], settings(actions=("replicas",), minReplicas=10000)
    )
    assert plan is None


def test_conflicting_actions_are_not_combined() -> None:
    count = Action(
        type=ActionType.GPU_COUNT, from_value="1", to_value="2", reason="r", automatic=True,
        target=ActionTarget(limits={"nvidia.com/gpu": "2"}),
    )  # fmt: skip
    chosen = select_actions(
        [mig_action(), count],
        settings(
            actions=("migProfile", "gpuCount"), sharingStrategy="mig-mixed", allowedMigProfiles=["1g.18gb"]
        ),
        has_hpa=False,
        kind="Deployment",
    )
    assert [a.type for a in chosen.actions] == [ActionType.MIG_PROFILE]


@pytest.mark.parametrize(
    ("kind", "words"), [("Job", "immutable"), ("Pod", "bare pods"), ("DaemonSet", "no pod template")]
)
def test_kinds_without_a_patchable_template(kind: str, words: str) -> None:
    obj = deployment()
    obj["kind"] = kind
    with pytest.raises(PlanError, match=words):
        plan_change(obj, [cpu_action()], settings())


def test_cronjob_template_path() -> None:
    plan = plan_change(deployment(kind="CronJob"), [cpu_action()], settings())
    assert plan is not None
    body = workload_patch("CronJob", plan.target, None)
    containers = body["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert containers == [{"name": "main", "resources": {"limits": {"cpu": "4"}, "requests": {"cpu": "4"}}}]


# --------------------------------------------------------------------------------------------------
# Patch bodies and records
# --------------------------------------------------------------------------------------------------


def test_strategic_patch_deletes_with_null_and_carries_the_record() -> None:
    mig = settings(actions=("migProfile",), sharingStrategy="mig-mixed", allowedMigProfiles=["1g.18gb"])
    plan = plan_change(deployment(), [mig_action()], mig)
    assert plan is not None
    body = workload_patch("Deployment", plan.target, "{}")
    limits = body["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": None, "nvidia.com/mig-1g.18gb": "1"}
    assert body["metadata"]["annotations"][CHANGE_ANNOTATION] == "{}"


def test_replica_patch() -> None:
    assert workload_patch("Deployment", {"replicas": "0"}, None) == {"spec": {"replicas": 0}}


def test_rollback_restores_previous_values_including_removals() -> None:
    mig = settings(actions=("migProfile",), sharingStrategy="mig-mixed", allowedMigProfiles=["1g.18gb"])
    plan = plan_change(deployment(), [mig_action()], mig)
    assert plan is not None
    record = ChangeRecord(
        change_id=plan.change_id, at=NOW, target=plan.target, previous=plan.previous, actions=plan.actions
    )
    changed = deployment(gpu=("nvidia.com/mig-1g.18gb", "1"))
    undo, kept = rollback_plan(record, changed)
    assert undo is not None and kept == ()
    assert undo.target["containers[main].resources.limits[nvidia.com/gpu]"] == "1"
    assert undo.target["containers[main].resources.limits[nvidia.com/mig-1g.18gb]"] is None
    assert undo.change_id != plan.change_id


def test_rollback_leaves_fields_someone_else_changed_since() -> None:
    plan = plan_change(deployment(), [cpu_action("4")], settings())
    assert plan is not None
    record = ChangeRecord(change_id=plan.change_id, at=NOW, target=plan.target, previous=plan.previous)
    human = deployment(cpu="4")
    human["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "6"  # kubectl edit
    undo, kept = rollback_plan(record, human)
    assert undo is not None
    assert undo.target == {"containers[main].resources.requests[cpu]": "1"}
    assert kept == ("containers[main].resources.limits[cpu]",)
    everything_changed = deployment(cpu="6")
    assert rollback_plan(record, everything_changed) == (None, tuple(sorted(plan.target)))


def test_change_record_round_trips_and_tells_whether_a_change_landed() -> None:
    plan = plan_change(deployment(), [cpu_action()], settings(), workload_key="k")
    assert plan is not None
    record = ChangeRecord(
        change_id=plan.change_id,
        at=NOW,
        target=plan.target,
        previous=plan.previous,
        actions=plan.actions,
        baseline={"gpuBusyP95": 0.3},
    )
    text = record.to_annotation()
    assert ChangeRecord.from_annotation(text) == record
    before = deployment()
    assert not change_landed(before, plan)
    after = deployment(cpu="4")
    after["metadata"]["annotations"] = {CHANGE_ANNOTATION: text}
    assert change_landed(after, plan)
    assert record_on(after) == record


@pytest.mark.parametrize("text", ["", "not json", json.dumps({"changeId": "x"}), json.dumps([1, 2])])
def test_damaged_record_is_rejected_clearly(text: str) -> None:
    with pytest.raises(ValueError, match="not a change record"):
        ChangeRecord.from_annotation(text)
    obj = deployment()
    obj["metadata"]["annotations"] = {CHANGE_ANNOTATION: text}
    assert record_on(obj) is None


# --------------------------------------------------------------------------------------------------
# Field ownership
# --------------------------------------------------------------------------------------------------


def managed(manager: str, operation: str) -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": operation,
        "fieldsV1": {
            "f:spec": {
                "f:template": {
                    "f:spec": {
                        "f:containers": {'k:{"name":"main"}': {"f:resources": {"f:limits": {"f:cpu": {}}}}}
                    }
                }
            }
        },
    }


@pytest.mark.parametrize(
    ("manager", "operation", "blocked"),
    [
        ("argocd-controller", "Apply", True),
        ("argocd-controller", "Update", True),  # Argo CD's client-side apply
        ("kustomize-controller", "Update", True),  # Flux
        ("helm-controller", "Update", True),
        ("kubectl", "Apply", True),
        ("kubectl-client-side-apply", "Update", True),
        ("some-operator", "Update", True),
        ("kubectl-create", "Update", False),
        ("kubectl-edit", "Update", False),
        ("gpu-rightsizer", "Update", False),
    ],
)
def test_any_other_field_owner_is_a_conflict(manager: str, operation: str, blocked: bool) -> None:
    obj = deployment()
    obj["metadata"]["managedFields"] = [managed(manager, operation)]
    owners = field_conflicts(obj, ["containers[main].resources.limits[cpu]"])
    assert bool(owners) == blocked
    if blocked:
        assert manager in conflict_reason(owners)


def test_owner_of_another_field_is_no_conflict() -> None:
    obj = deployment()
    obj["metadata"]["managedFields"] = [managed("argocd-controller", "Apply")]
    assert field_conflicts(obj, ["containers[main].resources.limits[memory]"]) == {}


# --------------------------------------------------------------------------------------------------
# Verification
# --------------------------------------------------------------------------------------------------


def stats(value: float) -> SignalStats:
    return SignalStats(samples=30, mean=value, p50=value, p95=value, p99=value, max=value)


def window(busy: float, cpu: float, pod: str = "p-1") -> WorkloadWindow:
    return WorkloadWindow(
        workload=WorkloadRef(namespace="team-a", kind="Deployment", name="x"),
        start=NOW - timedelta(minutes=1),
        end=NOW,
        allocation=Allocation(cpu_limit_cores=2.0),
        pods=[
            PodObservation(
                name=pod,
                stats={Signal.CPU_USAGE_CORES: stats(cpu)},
                gpus=[GPUObservation(uuid="g", stats={Signal.GR_ENGINE_ACTIVE: stats(busy)})],
            )
        ],
    )


def test_signals_from_window_and_pod_filter() -> None:
    assert signals_from_window(window(0.4, 1.9)) == {"gpuBusyP95": 0.4, "cpuSaturationP95": 0.95}
    assert signals_from_window(window(0.4, 1.9), pods=["other"]) == {}


def sized_pod(
    name: str, spec_cpu: Mapping[str, str | None], reported_cpu: Mapping[str, str | None] | None = None
) -> dict[str, Any]:
    """A pod with one container per entry (limit = request = cores; None: no CPU set) and, when
    `reported_cpu` is given, the kubelet's report of what each of those containers runs with."""

    def resources(cores: str | None) -> dict[str, Any]:
        return {} if cores is None else {"limits": {"cpu": cores}, "requests": {"cpu": cores}}

    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": c, "resources": resources(v)} for c, v in spec_cpu.items()]},
        "status": {
            "containerStatuses": [
                {"name": c, "resources": resources(v)} for c, v in (reported_cpu or {}).items()
            ]
        },
    }


def test_verification_measures_new_pods_against_the_new_cpu_limit() -> None:
    """Right after 2 -> 8 cores the window may still carry the old 2-core limit: the new pods' 7.8
    cores over it would read as 390 % saturation and roll a good change back."""
    baseline = {"gpuBusyP95": 0.2, "cpuSaturationP95": 0.98}
    after = signals_of_pods(window(0.8, 7.8), [sized_pod("p-1", {"main": "8"})])
    assert after["cpuSaturationP95"] == pytest.approx(0.975)
    assert regression(baseline, after, PodHealth(), (ActionType.CPU,)) is None
    stale = signals_from_window(window(0.8, 7.8))  # the old limit (2 cores) from the window
    assert regression(baseline, stale, PodHealth(), (ActionType.CPU,)) is not None


def test_a_two_container_pod_is_measured_against_every_container() -> None:
    """main 2 -> 8 beside a 2-core sidecar: the pod's CPU use (both containers) is measured against
    both containers' 10 cores, as the baseline is, not against main's 8 (9.8 / 8 = 122 %)."""
    new_pod = sized_pod("p-1", {"main": "8", "sidecar": "2"})
    assert running_cpu_cores(new_pod) == 10.0
    assert signals_of_pods(window(0.8, 9.8), [new_pod])["cpuSaturationP95"] == pytest.approx(0.98)


def test_the_kubelets_report_is_what_a_pod_runs_with() -> None:
    """After an in-place resize the spec says 8 before the kubelet runs main at 8: its report decides,
    container by container (the sidecar it does not report is read from the spec)."""
    pending = sized_pod("p-1", {"main": "8", "sidecar": "2"}, reported_cpu={"main": "2"})
    assert running_cpu_cores(pending) == 4.0
    assert (
        running_cpu_cores(sized_pod("p-1", {"main": "8", "sidecar": "2"}, {"main": "8", "sidecar": "2"}))
        == 10.0
    )


def test_a_container_without_a_limit_is_counted_as_the_baseline_counts_it() -> None:
    """The baseline's allocation sums the limits that are set (a sidecar with only a request adds
    none) and falls back to requests only when no container has a limit: so does the measurement."""
    with_request_only = sized_pod("p-1", {"main": "4"})
    with_request_only["spec"]["containers"].append(
        {"name": "sidecar", "resources": {"requests": {"cpu": "1"}}}
    )
    assert running_cpu_cores(with_request_only) == 4.0
    requests_only = sized_pod("p-1", {})
    requests_only["spec"]["containers"] = [
        {"name": n, "resources": {"requests": {"cpu": "1"}}} for n in ("main", "sidecar")
    ]
    assert running_cpu_cores(requests_only) == 2.0
    assert running_cpu_cores(sized_pod("p-1", {"main": None})) is None
    assert "cpuSaturationP95" not in signals_of_pods(window(0.8, 1.0), [sized_pod("p-1", {"main": None})])


@pytest.mark.parametrize(
    ("before", "after", "health", "actions", "words"),
    [
        ({"gpuBusyP95": 0.4}, {"gpuBusyP95": 0.8}, PodHealth(total=1, running=1), [ActionType.CPU], None),
        (
            {"gpuBusyP95": 0.8},
            {"gpuBusyP95": 0.3},
            PodHealth(total=1, running=1),
            [ActionType.CPU],
            "GPU busy p95 fell",
        ),
        ({"gpuBusyP95": 0.8}, {"gpuBusyP95": 0.78}, PodHealth(), [ActionType.CPU], None),
        ({"gpuBusyP95": 0.8}, {"gpuBusyP95": 0.3}, PodHealth(), [ActionType.REPLICAS], None),
        (
            {},
            {},
            PodHealth(total=2, unschedulable=1, messages=("0/7 nodes are available",)),
            [ActionType.CPU],
            "cannot start: 0/7",
        ),
        ({}, {}, PodHealth(total=1, crash_looping=1, restarts=5), [ActionType.MIG_PROFILE], "cannot start"),
        (
            {"cpuSaturationP95": 0.5},
            {"cpuSaturationP95": 0.9},
            PodHealth(),
            [ActionType.CPU],
            "CPU saturation",
        ),
    ],
)
def test_regression(
    before: dict[str, float],
    after: dict[str, float],
    health: PodHealth,
    actions: list[ActionType],
    words: str | None,
) -> None:
    problem = regression(before, after, health, actions)
    if words is None:
        assert problem is None
    else:
        assert problem is not None and words in problem


def test_improvement_summary() -> None:
    text = improvement_summary(
        {"gpuBusyP95": 0.35, "cpuSaturationP95": 0.98}, {"gpuBusyP95": 0.81, "cpuSaturationP95": 0.6}
    )
    assert text == "GPU busy p95 35%->81%, CPU saturation p95 98%->60%"


# --------------------------------------------------------------------------------------------------
# Replica invariants (property tests), availability gates, verification
# --------------------------------------------------------------------------------------------------


@given(
    current=st.integers(min_value=0, max_value=20_000),
    requested=st.integers(min_value=0, max_value=20_000),
    floor=st.integers(min_value=0, max_value=20_000),
)
def test_replica_target_never_reverses_direction_nor_breaks_the_floor(
    current: int, requested: int, floor: int
) -> None:
    result = replica_target(current, requested, min_replicas=floor)
    if result is None:
        return
    assert result != current
    assert (result > current) == (requested > current)  # never against the requested direction
    assert min(current, requested) <= result <= max(current, requested)  # never past the request
    if requested < current:
        assert result >= floor  # a scale-in never ends below minReplicas


def test_gates_refuse_partial_data_stale_data_and_an_old_generation() -> None:
    partial = check_gates(gate(warnings=("team-a/p-2: requests nvidia.com/gpu but has no GPU series",)))
    assert not partial.go and "partial data" in partial.reason
    stale = check_gates(gate(window_end=NOW - timedelta(minutes=20), staleness_limit=timedelta(minutes=15)))
    assert not stale.go and "stale" in stale.reason
    moved = check_gates(gate(analysed_generation=2, live_generation=3))
    assert not moved.go and "generation 2" in moved.reason
    other = check_gates(gate(started_by="old-policy"))
    assert not other.go and "started by policy 'old-policy'" in other.reason


def rolled_out(obj: dict[str, Any], replicas: int = 2) -> dict[str, Any]:
    obj["metadata"]["generation"] = 4
    obj["status"] = {
        "observedGeneration": 4, "replicas": replicas, "updatedReplicas": replicas,
        "availableReplicas": replicas, "readyReplicas": replicas,
    }  # fmt: skip
    return obj


def cpu_plan(obj: dict[str, Any]) -> ChangePlan:
    plan = plan_change(obj, [cpu_action("4")], settings())
    assert plan is not None
    return plan


def test_availability_gates_each_name_themselves() -> None:
    many = rolled_out(deployment(replicas=2))
    assert check_availability(cpu_plan(many), Availability(many), settings()) is None
    owned = rolled_out(deployment(replicas=2))
    owned["metadata"]["ownerReferences"] = [
        {"kind": "InferenceService", "name": "llm", "controller": True, "apiVersion": "v1", "uid": "u"}
    ]
    verdict = check_availability(cpu_plan(owned), Availability(owned), settings())
    assert verdict is not None and "managed by InferenceService/llm" in verdict.reason
    assert "change the InferenceService instead" in verdict.reason
    single = rolled_out(deployment(replicas=1), replicas=1)
    verdict = check_availability(cpu_plan(single), Availability(single), settings())
    assert verdict is not None and "replica floor" in verdict.reason
    assert (
        check_availability(cpu_plan(single), Availability(single), settings(allowSingleReplica=True)) is None
    )
    rolling = rolled_out(deployment(replicas=2))
    rolling["status"]["updatedReplicas"] = 1
    verdict = check_availability(cpu_plan(rolling), Availability(rolling), settings())
    assert verdict is not None and "not fully rolled out" in verdict.reason
    pdb = {"metadata": {"name": "keep-one"}, "spec": {"selector": {"matchLabels": {"app": "x"}}},
           "status": {"disruptionsAllowed": 0}}  # fmt: skip
    many["spec"]["template"]["metadata"] = {"labels": {"app": "x"}}
    verdict = check_availability(cpu_plan(many), Availability(many, (pdb,)), settings())
    assert verdict is not None and "PodDisruptionBudget keep-one" in verdict.reason
    busy = Availability(rolled_out(deployment(replicas=2)), (), pods_in_disruption=9)
    verdict = check_availability(cpu_plan(many), busy, settings())
    assert verdict is not None and "disruption budget" in verdict.reason


def pod(
    name: str, *, phase: str = "Running", labels: dict[str, str] | None = None, **status: Any
) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "status": {"phase": phase, **status}}


def test_pod_health_sees_every_way_a_pod_fails_to_start() -> None:
    waiting = {"state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}
    health = pod_health([
        pod("a", phase="Pending", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/6 nodes"}]),
        pod("b", phase="Pending", containerStatuses=[waiting]),
        pod("c", phase="Pending", initContainerStatuses=[{"restartCount": 4, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]),
        pod("d", phase="Pending", conditions=[{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]),
        pod("e"),
    ])  # fmt: skip
    assert (health.unschedulable, health.image_pull, health.init_failing, health.gated, health.running) == (
        1,
        1,
        1,
        1,
        1,
    )
    assert health.failing == 3


def test_only_the_new_revisions_pods_are_measured() -> None:
    obj = deployment()
    obj["metadata"].update({"uid": "d-1", "annotations": {REVISION_ANNOTATION: "2"}})
    rs = [
        {"metadata": {"labels": {"pod-template-hash": "old"}, "annotations": {REVISION_ANNOTATION: "1"},
                      "ownerReferences": [{"uid": "d-1"}]}},
        {"metadata": {"labels": {"pod-template-hash": "new"}, "annotations": {REVISION_ANNOTATION: "2"},
                      "ownerReferences": [{"uid": "d-1"}]}},
    ]  # fmt: skip
    pods = [
        pod("old-1", labels={"pod-template-hash": "old"}),
        pod("new-1", labels={"pod-template-hash": "new"}),
    ]
    assert [p["metadata"]["name"] for p in new_revision_pods(obj, pods, rs)] == ["new-1"]
    sts = {"kind": "StatefulSet", "metadata": {}, "status": {"updateRevision": "r2"}}
    sts_pods = [
        pod("s-0", labels={"controller-revision-hash": "r1"}),
        pod("s-1", labels={"controller-revision-hash": "r2"}),
    ]
    assert [p["metadata"]["name"] for p in new_revision_pods(sts, sts_pods)] == ["s-1"]


def look(**changes: Any) -> VerificationInput:
    base: dict[str, Any] = {
        "now": NOW, "applied_at": NOW - timedelta(minutes=40), "rolled_out_at": NOW - timedelta(minutes=35),
        "verify_for": timedelta(minutes=30), "rollout": None, "failure": None, "health": PodHealth(total=1, running=1),
        "before": {"gpuBusyP95": 0.3}, "after": {"gpuBusyP95": 0.6}, "actions": (ActionType.CPU,),
    }  # fmt: skip
    base.update(changes)
    return VerificationInput(**base)


def test_verification_never_verifies_without_evidence() -> None:
    assert verification_outcome(look())[0] == Outcome.VERIFIED
    outcome, reason = verification_outcome(look(after={}))
    assert outcome == Outcome.INCONCLUSIVE and "no figures" in reason
    outcome, _ = verification_outcome(look(before={}, after={"gpuBusyP95": 0.6}))
    assert outcome == Outcome.INCONCLUSIVE


def test_verification_waits_for_the_rollout_and_gives_up_inconclusive() -> None:
    early = look(applied_at=NOW - timedelta(minutes=2), rolled_out_at=None, rollout="1/2 replicas updated")
    assert verification_outcome(early)[0] == Outcome.WAIT
    done = look(applied_at=NOW - timedelta(minutes=2), rolled_out_at=None, rollout=None)
    assert verification_outcome(done)[0] == Outcome.ROLLED_OUT
    late = look(applied_at=NOW - timedelta(hours=2), rolled_out_at=None, rollout="1/2 replicas updated")
    assert verification_outcome(late)[0] == Outcome.INCONCLUSIVE
    measuring = look(rolled_out_at=NOW - timedelta(minutes=5))
    assert verification_outcome(measuring)[0] == Outcome.WAIT


def test_pods_that_never_start_fail_the_change_within_minutes() -> None:
    stuck = PodHealth(total=1, image_pull=1, messages=("p: ImagePullBackOff",))
    outcome, reason = verification_outcome(
        look(applied_at=NOW - timedelta(minutes=1), rolled_out_at=None, rollout="0/1 available", health=stuck)
    )
    assert outcome == Outcome.REGRESSED and "ImagePullBackOff" in reason
    deadline = look(rolled_out_at=None, rollout="x", failure="rollout failed: ProgressDeadlineExceeded")
    assert verification_outcome(deadline)[0] == Outcome.REGRESSED
    gated = PodHealth(total=1, gated=1)
    assert (
        verification_outcome(
            look(applied_at=NOW - timedelta(minutes=1), rolled_out_at=None, rollout="x", health=gated)
        )[0]
        == Outcome.WAIT
    )
    assert (
        verification_outcome(
            look(applied_at=NOW - timedelta(minutes=6), rolled_out_at=None, rollout="x", health=gated)
        )[0]
        == Outcome.REGRESSED
    )


def test_policy_durations_are_bounded() -> None:
    for safety in (
        {"cooldown": "99999999999999999999h"},
        {"cooldown": "0s"},
        {"verifyFor": "0s"},
        {"maxStaleness": "48h"},
    ):
        with pytest.raises(ValueError, match="must be between"):
            policy(**safety)


def test_a_cronjob_change_disrupts_no_running_pod() -> None:
    job = deployment(kind="CronJob")
    plan = plan_change(job, [cpu_action("4")], settings())
    assert plan is not None and not disrupts_pods(plan, job)
    assert check_availability(plan, Availability(job), settings()) is None
