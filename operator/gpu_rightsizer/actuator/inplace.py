"""In-place resize (pure): more (or less) CPU for running pods through `pods/resize`, no new pods.

Kubernetes resizes a running container's CPU and memory in place (the `pods/resize` subresource,
GA in 1.35). It is the only path for a Job, a CRD trainer (PyTorchJob, ...) or a bare pod, whose
pod templates are immutable or absent. A Deployment or StatefulSet, where a template change would
restart every pod, takes it for CPU and memory raises its pods take without a restart
(`resize_fits`), and for every change when annotated `RESIZE_ANNOTATION: InPlace`. The functions
here decide:

- which workloads take the path (`resizes_in_place`, `resize_fits`) and which actions it can
  carry (CPU and memory of one container, raises only: a lower is a shrink, refused automatically);
- per pod, whether the resize may be sent (`pod_problems`: the container's `resizePolicy`, the
  node's allocatable CPU) and the body to send (`resize_body`);
- from the pod's status, how the kubelet answered (`resize_state`): done when
  `status.containerStatuses[].resources` shows the new size, `Infeasible`/`Deferred` from the
  `PodResizePending` condition, in progress while `PodResizeInProgress` is set.

The target of a template workload stays as manifest advice (`manifest_advice`): new pods start
from the template, so a person's rollout that brings the old size back ends the change.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpu_rightsizer.actuator.plan import (
    CONTAINER_PATH,
    ChangePlan,
    PlanError,
    container_path,
    plan_change,
)
from gpu_rightsizer.logic.policy import EffectiveSettings
from gpu_rightsizer.logic.workloads import QuantityError, parse_quantity
from gpu_rightsizer.model.codes import ActionType
from gpu_rightsizer.model.kinds import IN_PLACE_KINDS, KINDS, offers_in_place_resize
from gpu_rightsizer.model.result import Action

#: On a kind that offers in-place resize (`resize_opt_in` in the kinds table: Deployment, StatefulSet),
#: `InPlace` asks for every change to be made by resizing the running pods, never by changing the pod
#: template (which restarts every pod): what cannot be resized without one (a GPU action, a container
#: that restarts on resize) is left out or blocked.
RESIZE_ANNOTATION = "gpurightsizer.io/resize"
IN_PLACE = "InPlace"
#: ... and `Template` keeps every change on the pod template (new pods), as before in-place resize.
TEMPLATE = "Template"

#: Resources the kubelet resizes in place.
RESIZABLE = frozenset({"cpu", "memory"})

#: Pod condition types and reasons of the resize (KEP-1287, GA in 1.35).
RESIZE_PENDING = "PodResizePending"
RESIZE_IN_PROGRESS = "PodResizeInProgress"
INFEASIBLE = "Infeasible"
DEFERRED = "Deferred"


def resize_paths_table() -> str:
    """docs/in-place-resize.md's "Which workloads" table, from the kinds table (written there by
    hack/gen-docs-tables.py, checked by the docs tests): which path each kind's changes take."""
    only = ", ".join(k.kind for k in KINDS.values() if k.resized_in_place)
    opt_in = ", ".join(k.kind for k in KINDS.values() if k.resize_opt_in)
    template = ", ".join(k.kind for k in KINDS.values() if k.patchable and not k.resize_opt_in)
    rows = [
        (only, "in place only (`resized_in_place` in `model/kinds.py`)"),
        (
            f"{opt_in}: a CPU or memory raise that every running pod takes without a restart",
            "in place (`resize_opt_in` in `model/kinds.py`, `resize_fits` in `actuator/inplace.py`): "
            "the template is not patched",
        ),
        (
            f"{opt_in} annotated `{RESIZE_ANNOTATION}: {IN_PLACE}`",
            "in place only, whatever the change: the template is never patched",
        ),
        (
            f"{opt_in} annotated `{RESIZE_ANNOTATION}: {TEMPLATE}`",
            "the pod template, as before in-place resize",
        ),
        (f"{opt_in} otherwise; {template}", "the pod template, as before"),
    ]
    return "| Workload | Path |\n|---|---|\n" + "".join(
        f"| {workload} | {path} |\n" for workload, path in rows
    )


def resizes_in_place(workload: Mapping[str, Any]) -> bool:
    """True when the workload's changes are made only by resizing its running pods, whatever they
    are: its kind has no template to patch, or offers in-place resize and is annotated `InPlace`."""
    kind = str(workload.get("kind", ""))
    if kind in IN_PLACE_KINDS:
        return True
    annotations = (workload.get("metadata") or {}).get("annotations") or {}
    return offers_in_place_resize(kind) and annotations.get(RESIZE_ANNOTATION) == IN_PLACE


def resize_fits(
    workload: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    actions: Sequence[Action],
    settings: EffectiveSettings,
) -> bool:
    """True when a Deployment's or StatefulSet's change goes in place: every automatic action is a
    CPU or memory raise that every running pod takes without a restart (`resizePolicy` NotRequired).
    A template change would create new pods. Anything else (a GPU, MIG or replica action, a lower,
    a container that restarts on resize, pods that differ, none running) keeps the template path,
    where the rollout gates apply."""
    annotations = (workload.get("metadata") or {}).get("annotations") or {}
    if (
        not offers_in_place_resize(str(workload.get("kind", "")))
        or annotations.get(RESIZE_ANNOTATION) == TEMPLATE
    ):
        return False
    automatic = [action for action in actions if action.automatic]
    if not automatic or any(_resizable(action) is not None for action in automatic):
        return False
    running = live_pods(pods)
    try:
        plan = plan_resize(running, automatic, settings, workload_key="") if running else None
    except PlanError:
        return False
    return plan is not None and not any(
        restarts(pod, plan.target) or pod_problems(pod, plan.target) for pod in running
    )


def live_pods(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pods a resize applies to: scheduled, not finished, not being deleted (sorted by name)."""
    chosen = [
        pod
        for pod in pods
        if not (pod.get("metadata") or {}).get("deletionTimestamp")
        and (pod.get("spec") or {}).get("nodeName")
        and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
    return sorted(chosen, key=lambda pod: str((pod.get("metadata") or {}).get("name")))


# --------------------------------------------------------------------------------------------------
# Planning
# --------------------------------------------------------------------------------------------------


def _resizable(action: Action) -> str | None:
    """Why an action cannot be carried by a resize; None when it can."""
    target = action.target
    if action.type not in (ActionType.CPU, ActionType.MEMORY):
        return f"{action.type.value}: only CPU and memory are resized in place"
    if target is None:
        return None  # plan_change names the missing target
    names = set(target.requests) | set(target.limits) | set(target.remove_resources)
    if target.remove_resources or not names <= RESIZABLE or target.replicas is not None:
        return f"{action.type.value}: changes more than CPU or memory, which a resize cannot carry"
    return None


def pod_view(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A running pod seen as a template of itself, so the template planner reads its containers
    (the view is only read, never sent)."""
    return {"kind": "ReplicaSet", "metadata": {}, "spec": {"template": {"spec": pod.get("spec") or {}}}}


def plan_resize(
    pods: Sequence[Mapping[str, Any]],
    actions: Sequence[Action],
    settings: EffectiveSettings,
    *,
    workload_key: str,
) -> ChangePlan | None:
    """The resize the published actions call for, planned on the first live pod (the pods of one
    workload share a template); PlanError when the pods disagree, when a value would go down
    (a shrink: capacity-reducing, never automatic) or when nothing is running to resize."""
    running = live_pods(pods)
    if not running:
        raise PlanError("no running pod to resize in place")
    kept: list[Action] = []
    left_out: list[str] = []
    for action in actions:
        why = _resizable(action) if action.automatic else None
        if why is None:
            kept.append(action)
        else:
            left_out.append(why)
    plan = plan_change(pod_view(running[0]), kept, settings, workload_key=workload_key)
    if plan is None:
        return None
    for path, value in plan.target.items():
        if value is None or not CONTAINER_PATH.match(path):
            raise PlanError(f"{path}: a resize only sets container CPU and memory")
        for pod in running[1:]:
            other = _value_on(pod, path)
            if not _equal(other, plan.previous.get(path)):
                raise PlanError(
                    f"{path}: pod {_name(pod)} has {other!r}, {_name(running[0])} has "
                    f"{plan.previous.get(path)!r}: the pods differ, nothing is resized"
                )
        before, after = _amount(plan.previous.get(path)), _amount(value)
        if before is not None and after is not None and after < before:
            raise PlanError(
                f"{path} {plan.previous.get(path)}->{value}: a lower in place is a shrink; it is "
                "never applied automatically"
            )
    return ChangePlan(plan.change_id, plan.actions, plan.target, plan.previous, (*plan.left_out, *left_out))


# --------------------------------------------------------------------------------------------------
# Per pod: may it be resized, and the body
# --------------------------------------------------------------------------------------------------


def _name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name"))


def _amount(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = parse_quantity(value)
    except QuantityError:
        return None
    return number if math.isfinite(number) else None


def _equal(first: str | None, second: str | None) -> bool:
    if first is None or second is None:
        return first == second
    a, b = _amount(first), _amount(second)
    return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9)


def _container(spec_or_status: Iterable[Mapping[str, Any]] | None, name: str) -> Mapping[str, Any] | None:
    return next((c for c in spec_or_status or [] if c.get("name") == name), None)


def _value_on(pod: Mapping[str, Any], path: str) -> str | None:
    """A pod's spec value at a flat container path."""
    match = CONTAINER_PATH.match(path)
    if match is None:
        return None
    container = _container((pod.get("spec") or {}).get("containers"), match["container"]) or {}
    value = ((container.get("resources") or {}).get(match["section"]) or {}).get(match["resource"])
    return None if value is None else str(value)


def _status_value(pod: Mapping[str, Any], path: str) -> str | None:
    """The size the kubelet reports it applied (`status.containerStatuses[].resources`)."""
    match = CONTAINER_PATH.match(path)
    if match is None:
        return None
    container = _container((pod.get("status") or {}).get("containerStatuses"), match["container"]) or {}
    value = ((container.get("resources") or {}).get(match["section"]) or {}).get(match["resource"])
    return None if value is None else str(value)


def restart_policy(pod: Mapping[str, Any], container: str, resource: str) -> str:
    """The container's `resizePolicy` for a resource (`NotRequired` when unset, as in Kubernetes)."""
    spec = _container((pod.get("spec") or {}).get("containers"), container) or {}
    for entry in spec.get("resizePolicy") or []:
        if entry.get("resourceName") == resource:
            return str(entry.get("restartPolicy") or "NotRequired")
    return "NotRequired"


def restarts(pod: Mapping[str, Any], values: Mapping[str, str | None]) -> bool:
    """True when the resize restarts a container (`resizePolicy` RestartContainer for a changed
    resource): it counts as a restart and passes the same gates as a rollout."""
    for path in values:
        match = CONTAINER_PATH.match(path)
        if match and restart_policy(pod, match["container"], match["resource"]) == "RestartContainer":
            return True
    return False


#: A Job's `spec.backoffLimit` when unset (Kubernetes' default).
JOB_BACKOFF_LIMIT = 6


def job_backoff_problem(job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> str | None:
    """Why restarting the containers of a Job's pods would fail the Job; None when it would not.
    Under `restartPolicy: OnFailure` every container restart counts against `backoffLimit`, as
    failed pods do: past the limit the Job fails and its pods are deleted."""
    if job.get("kind") != "Job":
        return None
    limit = int((job.get("spec") or {}).get("backoffLimit", JOB_BACKOFF_LIMIT))
    listed = list(pods)
    used = int((job.get("status") or {}).get("failed") or 0) + sum(
        int(status.get("restartCount") or 0)
        for pod in listed
        for status in (pod.get("status") or {}).get("containerStatuses") or []
    )
    if used + len(listed) > limit:
        return (
            f"a restart of the resized container counts against the Job's backoffLimit {limit} "
            f"({used} used): restarting {len(listed)} pod(s) would fail the Job"
        )
    return None


def _cpu_request(pod: Mapping[str, Any], values: Mapping[str, str | None] | None = None) -> float:
    """The pod's CPU request in cores (a container's limit stands in for an absent request, as the
    API server defaults it), with `values` applied over its spec."""
    total = 0.0
    for container in (pod.get("spec") or {}).get("containers") or []:
        name = str(container.get("name"))
        resources = container.get("resources") or {}
        request = (resources.get("requests") or {}).get("cpu")
        limit = (resources.get("limits") or {}).get("cpu")
        if values is not None:
            request = values.get(container_path(name, "requests", "cpu"), request)
            limit = values.get(container_path(name, "limits", "cpu"), limit)
        total += _amount(str(request) if request is not None else None) or (
            _amount(str(limit) if limit is not None else None) or 0.0
        )
    return total


def node_fit(
    pod: Mapping[str, Any],
    node: Mapping[str, Any] | None,
    pods_on_node: Iterable[Mapping[str, Any]],
    values: Mapping[str, str | None],
) -> str | None:
    """Why the pod's node cannot hold the resized pod (allocatable CPU minus the other pods'
    requests); None when it can."""
    name = _name(pod)
    if node is None:
        return f"pod {name}: its node {(pod.get('spec') or {}).get('nodeName')!r} cannot be read"
    allocatable = _amount(str(((node.get("status") or {}).get("allocatable") or {}).get("cpu") or "")) or 0.0
    uid = (pod.get("metadata") or {}).get("uid")
    others = sum(
        _cpu_request(other)
        for other in pods_on_node
        if (other.get("metadata") or {}).get("uid") != uid
        and (other.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    )
    wanted = _cpu_request(pod, values)
    if others + wanted > allocatable + 1e-9:
        node_name = (node.get("metadata") or {}).get("name")
        return (
            f"pod {name}: node {node_name} has {allocatable:g} allocatable CPU, the other pods request "
            f"{others:g}; the pod at {wanted:g} does not fit"
        )
    return None


def pod_problems(pod: Mapping[str, Any], values: Mapping[str, str | None]) -> list[str]:
    """Why this pod may not be resized to `values` (its containers and resize policies)."""
    problems = []
    for path in sorted(values):
        match = CONTAINER_PATH.match(path)
        if match is None or match["resource"] not in RESIZABLE:
            problems.append(f"{path}: not resizable in place")
            continue
        if _container((pod.get("spec") or {}).get("containers"), match["container"]) is None:
            problems.append(f"pod {_name(pod)} has no container {match['container']!r}")
            continue
        policy = restart_policy(pod, match["container"], match["resource"])
        if match["resource"] == "memory" and policy != "NotRequired":
            problems.append(
                f"pod {_name(pod)}: memory of {match['container']!r} resizes only with a restart "
                f"(resizePolicy {policy})"
            )
    return problems


def resize_body(values: Mapping[str, str | None]) -> dict[str, Any]:
    """The `pods/resize` patch (strategic merge on containers by name) setting `values`."""
    containers: dict[str, dict[str, dict[str, str | None]]] = {}
    for path, value in values.items():
        match = CONTAINER_PATH.match(path)
        if match is not None:
            containers.setdefault(match["container"], {}).setdefault(match["section"], {})[
                match["resource"]
            ] = value
    return {
        "spec": {
            "containers": [
                {"name": name, "resources": sections} for name, sections in sorted(containers.items())
            ]
        }
    }


# --------------------------------------------------------------------------------------------------
# The kubelet's answer
# --------------------------------------------------------------------------------------------------


class ResizeState(StrEnum):
    """How far one pod's resize is, as its status tells."""

    NOT_SENT = "NotSent"  # the pod's spec does not hold the values
    PENDING = "Pending"  # sent; the kubelet has not answered
    IN_PROGRESS = "InProgress"
    DEFERRED = "Deferred"
    INFEASIBLE = "Infeasible"
    DONE = "Done"


@dataclass(frozen=True)
class PodResize:
    """One pod's resize state, with the kubelet's message."""

    pod: str
    state: ResizeState
    message: str = ""


def _condition(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return dict(condition)
    return None


def resize_state(pod: Mapping[str, Any], values: Mapping[str, str | None]) -> PodResize:
    """One pod's resize to `values`: done only when the spec and the kubelet's reported resources
    both hold them and no resize condition is set."""
    name = _name(pod)
    if any(not _equal(_value_on(pod, path), value) for path, value in values.items()):
        return PodResize(name, ResizeState.NOT_SENT)
    pending = _condition(pod, RESIZE_PENDING)
    if pending is not None:
        reason = str(pending.get("reason") or "")
        state = ResizeState.INFEASIBLE if reason == INFEASIBLE else ResizeState.DEFERRED
        return PodResize(name, state, str(pending.get("message") or reason))
    if _condition(pod, RESIZE_IN_PROGRESS) is not None:
        return PodResize(name, ResizeState.IN_PROGRESS)
    if all(_equal(_status_value(pod, path), value) for path, value in values.items()):
        return PodResize(name, ResizeState.DONE)
    return PodResize(name, ResizeState.PENDING)


def worst(states: Iterable[PodResize]) -> PodResize | None:
    """The state that decides the change: Infeasible, then Deferred, NotSent, Pending, InProgress,
    and Done only when every pod is done."""
    order = [
        ResizeState.INFEASIBLE, ResizeState.DEFERRED, ResizeState.NOT_SENT, ResizeState.PENDING,
        ResizeState.IN_PROGRESS, ResizeState.DONE,
    ]  # fmt: skip
    listed = list(states)
    return min(listed, key=lambda s: order.index(s.state)) if listed else None


def manifest_advice(kind: str, name: str, plan: ChangePlan) -> str:
    """What a person must change so that new pods start at the new size."""
    parts = []
    for path, value in sorted(plan.target.items()):
        match = CONTAINER_PATH.match(path)
        if match is None:
            continue
        parts.append(
            f"{match['resource']} {match['section']} of container {match['container']} to {value}"
            f" (now {plan.previous.get(path) or 'unset'})"
        )
    what = "; ".join(parts)
    if offers_in_place_resize(kind):
        return (
            f"resized in place; set {what} in the {kind} {name} manifest, or new pods start at the old size"
        )
    return (
        f"resized in place; the next run starts from its manifest: set {what} in the {kind} {name} manifest"
    )
