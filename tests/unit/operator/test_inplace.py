"""In-place resize, the pure half: which workloads take it, the plan, per-pod checks and the kubelet's answer."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_rightsizer.actuator.inplace import (
    RESIZE_ANNOTATION,
    ResizeState,
    manifest_advice,
    node_fit,
    plan_resize,
    pod_problems,
    resize_body,
    resize_state,
    resizes_in_place,
    restarts,
    worst,
)
from gpu_rightsizer.actuator.plan import PlanError, container_path
from gpu_rightsizer.logic.policy import effective_settings
from gpu_rightsizer.model.codes import ActionType
from gpu_rightsizer.model.crd import GPURightsizingPolicy
from gpu_rightsizer.model.result import Action, ActionTarget

CPU_LIMIT = container_path("main", "limits", "cpu")
CPU_REQUEST = container_path("main", "requests", "cpu")


def settings(actions: tuple[str, ...] = ("cpu",)) -> Any:
    return effective_settings(
        GPURightsizingPolicy.model_validate(
            {"metadata": {"name": "p"}, "spec": {"mode": "Apply", "actions": list(actions)}}
        )
    )


def pod(name: str = "t-0", cpu: str = "1", *, node: str = "n1", resize_policy: str | None = None,
        reported: str | None = None, conditions: list[dict[str, Any]] | None = None,
        phase: str = "Running") -> dict[str, Any]:  # fmt: skip
    container: dict[str, Any] = {
        "name": "main",
        "resources": {"requests": {"cpu": cpu, "memory": "8Gi"}, "limits": {"cpu": cpu, "memory": "8Gi"}},
    }
    if resize_policy is not None:
        container["resizePolicy"] = [{"resourceName": "cpu", "restartPolicy": resize_policy}]
    status: dict[str, Any] = {"phase": phase, "conditions": conditions or []}
    if reported is not None:
        status["containerStatuses"] = [
            {"name": "main", "resources": {"requests": {"cpu": reported}, "limits": {"cpu": reported}}}
        ]
    return {
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {"nodeName": node, "containers": [container]},
        "status": status,
    }


def cpu_action(cpu: str, *, automatic: bool = True) -> Action:
    return Action(
        type=ActionType.CPU, **{"from": "1", "to": cpu}, reason="starved loader", automatic=automatic,
        container="main", target=ActionTarget(container="main", requests={"cpu": cpu}, limits={"cpu": cpu}),
    )  # fmt: skip


def test_which_workloads_resize_in_place() -> None:
    assert resizes_in_place({"kind": "Job"})
    assert resizes_in_place({"kind": "PyTorchJob"})
    assert resizes_in_place({"kind": "Pod"})
    assert not resizes_in_place({"kind": "Deployment"})
    assert resizes_in_place(
        {"kind": "Deployment", "metadata": {"annotations": {RESIZE_ANNOTATION: "InPlace"}}}
    )
    assert not resizes_in_place(
        {"kind": "CronJob", "metadata": {"annotations": {RESIZE_ANNOTATION: "InPlace"}}}
    )


def test_a_raise_is_planned_on_the_running_pods_and_a_lower_is_refused() -> None:
    plan = plan_resize([pod("t-0"), pod("t-1"), pod("t-2", phase="Succeeded", cpu="9")], [cpu_action("4")],
                       settings(), workload_key="ml/Job/t")  # fmt: skip
    assert plan is not None
    assert plan.target == {CPU_LIMIT: "4", CPU_REQUEST: "4"}
    assert plan.previous == {CPU_LIMIT: "1", CPU_REQUEST: "1"}
    with pytest.raises(PlanError, match="shrink"):
        plan_resize([pod(cpu="8")], [cpu_action("4")], settings(), workload_key="k")
    with pytest.raises(PlanError, match="pods differ"):
        plan_resize([pod("a"), pod("b", cpu="2")], [cpu_action("4")], settings(), workload_key="k")
    with pytest.raises(PlanError, match="no running pod"):
        plan_resize([pod(phase="Succeeded")], [cpu_action("4")], settings(), workload_key="k")
    assert plan_resize([pod()], [cpu_action("4")], settings(("memory",)), workload_key="k") is None


def test_a_gpu_or_replica_action_is_left_out_of_a_resize() -> None:
    replicas = Action(
        type=ActionType.REPLICAS, **{"from": "1", "to": "2"}, reason="r", automatic=True,
        target=ActionTarget(replicas=2),
    )  # fmt: skip
    plan = plan_resize([pod()], [cpu_action("4"), replicas], settings(("cpu", "replicas")), workload_key="k")
    assert plan is not None and set(plan.target) == {CPU_LIMIT, CPU_REQUEST}
    assert any("only CPU and memory" in why for why in plan.left_out)


def test_resize_policy_decides_restart_and_memory() -> None:
    values = {CPU_LIMIT: "4"}
    assert not restarts(pod(), values)
    assert restarts(pod(resize_policy="RestartContainer"), values)
    memory = {container_path("main", "limits", "memory"): "16Gi"}
    restarting = pod()
    restarting["spec"]["containers"][0]["resizePolicy"] = [
        {"resourceName": "memory", "restartPolicy": "RestartContainer"}
    ]
    assert pod_problems(pod(), memory) == []
    assert "only with a restart" in pod_problems(restarting, memory)[0]
    assert "no container" in pod_problems(pod(), {container_path("side", "limits", "cpu"): "2"})[0]


def test_the_node_must_hold_the_resized_pod() -> None:
    node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "8"}}}
    neighbour = pod("other", cpu="3")
    me = pod("t-0")
    assert node_fit(me, node, [me, neighbour], {CPU_REQUEST: "4", CPU_LIMIT: "4"}) is None
    reason = node_fit(me, node, [me, neighbour], {CPU_REQUEST: "6", CPU_LIMIT: "6"})
    assert reason is not None and "8 allocatable CPU" in reason and "request 3" in reason
    assert node_fit(me, None, [], {CPU_REQUEST: "2"}) is not None


def test_the_pod_status_decides_the_outcome() -> None:
    values = {CPU_LIMIT: "4", CPU_REQUEST: "4"}
    assert resize_state(pod(cpu="1", reported="1"), values).state == ResizeState.NOT_SENT
    assert resize_state(pod(cpu="4", reported="1"), values).state == ResizeState.PENDING
    assert resize_state(pod(cpu="4", reported="4000m"), values).state == ResizeState.DONE
    infeasible = pod(cpu="4", reported="1", conditions=[
        {"type": "PodResizePending", "status": "True", "reason": "Infeasible", "message": "node too small"}
    ])  # fmt: skip
    state = resize_state(infeasible, values)
    assert (state.state, state.message) == (ResizeState.INFEASIBLE, "node too small")
    deferred = pod(cpu="4", reported="1", conditions=[
        {"type": "PodResizePending", "status": "True", "reason": "Deferred"}
    ])  # fmt: skip
    assert resize_state(deferred, values).state == ResizeState.DEFERRED
    moving = pod(cpu="4", reported="4", conditions=[{"type": "PodResizeInProgress", "status": "True"}])
    assert resize_state(moving, values).state == ResizeState.IN_PROGRESS
    decided = worst([resize_state(pod(cpu="4", reported="4"), values), resize_state(infeasible, values)])
    assert decided is not None and decided.state == ResizeState.INFEASIBLE
    assert worst([]) is None


def test_body_and_manifest_advice() -> None:
    assert resize_body({CPU_LIMIT: "4", CPU_REQUEST: "4"}) == {
        "spec": {
            "containers": [{"name": "main", "resources": {"limits": {"cpu": "4"}, "requests": {"cpu": "4"}}}]
        }
    }
    plan = plan_resize([pod()], [cpu_action("4")], settings(), workload_key="k")
    assert plan is not None
    deployment = manifest_advice("Deployment", "trainer", plan)
    assert "cpu limits of container main to 4 (now 1)" in deployment and "new pods start" in deployment
    assert "next run" in manifest_advice("Job", "train", plan)
