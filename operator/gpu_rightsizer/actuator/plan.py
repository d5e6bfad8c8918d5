"""Planning a change (pure): which recommended actions may be carried out and the exact values they set.

- `select_actions` / `plan_change`: policy `actions`, HPA-owned replica counts, `minReplicas`,
  minimum change size;
- `workload_patch` / `hpa_patch`: the patch bodies, built from flat field paths so a rollback is the
  same function applied to the recorded previous values.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_rightsizer.logic.policy import EffectiveSettings
from gpu_rightsizer.logic.workloads import (
    GPU_RESOURCE_PATTERN,
    QuantityError,
    parse_quantity,
)
from gpu_rightsizer.model.codes import ActionType
from gpu_rightsizer.model.kinds import is_scalable, patch_template_path
from gpu_rightsizer.model.result import Action, ActionTarget

#: JSON record of the last change on the workload: change id, previous and target values, baseline.
CHANGE_ANNOTATION = "gpurightsizer.io/previous"

DEFAULT_MIN_DELTA_RATIO = 0.10

CONTAINER_PATH = re.compile(
    r"^containers\[(?P<container>[^\]]+)\]\.resources\.(?P<section>limits|requests)\[(?P<resource>[^\]]+)\]$"
)
NODE_SELECTOR_PATH = re.compile(r"^nodeSelector\[(?P<key>[^\]]+)\]$")
REPLICAS_PATH = "replicas"
HPA_MIN_PATH = "hpa.minReplicas"
HPA_MAX_PATH = "hpa.maxReplicas"


class PlanError(ValueError):
    """A recommended action cannot be turned into a patch (unsupported kind, unreadable value)."""


def container_path(container: str, section: str, resource: str) -> str:
    """Flat path of one container resource quantity, e.g. containers[main].resources.limits[cpu]."""
    return f"containers[{container}].resources.{section}[{resource}]"


def node_selector_path(key: str) -> str:
    """Flat path of one pod-template nodeSelector entry."""
    return f"nodeSelector[{key}]"


# --------------------------------------------------------------------------------------------------
# Choosing actions
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """Actions the actuator will carry out, and why the others were left out."""

    actions: tuple[Action, ...]
    left_out: tuple[str, ...] = ()


def policy_name_for(action: ActionType) -> ActionType:
    """HPA bounds are governed by the policy's `replicas` action."""
    return ActionType.REPLICAS if action == ActionType.HPA_BOUNDS else action


def select_actions(
    actions: Sequence[Action], settings: EffectiveSettings, *, has_hpa: bool, kind: str
) -> Selection:
    """The recommended actions this policy lets the actuator apply to this workload."""
    chosen: list[Action] = []
    left_out: list[str] = []
    for action in actions:
        if not action.automatic:
            continue
        allowed = policy_name_for(action.type)
        if allowed not in settings.actions:
            left_out.append(f"{action.type.value}: not in the policy's actions")
            continue
        if action.type in (ActionType.REPLICAS, ActionType.RELEASE_IDLE) and has_hpa:
            left_out.append(f"{action.type.value}: a HorizontalPodAutoscaler owns the replica count")
            continue
        if action.type in (ActionType.REPLICAS, ActionType.RELEASE_IDLE) and not is_scalable(kind):
            left_out.append(f"{action.type.value}: a {kind} has no replica count to change")
            continue
        if action.type == ActionType.HPA_BOUNDS and not has_hpa:
            left_out.append("hpaBounds: no HorizontalPodAutoscaler found")
            continue
        if any(_conflicting(action, other) for other in chosen):
            left_out.append(f"{action.type.value}: overlaps an earlier action of this change")
            continue
        chosen.append(action)
    return Selection(tuple(chosen), tuple(left_out))


def _conflicting(first: Action, second: Action) -> bool:
    """Two actions that set the same thing (e.g. a MIG slice and a GPU count) are not combined."""
    gpu = {ActionType.GPU_COUNT, ActionType.MIG_PROFILE, ActionType.GPU_SHARING, ActionType.RELEASE_IDLE}
    scale = {ActionType.REPLICAS, ActionType.RELEASE_IDLE}
    return (
        first.type == second.type
        or ({first.type, second.type} <= gpu)
        or ({first.type, second.type} <= scale)
    )


# --------------------------------------------------------------------------------------------------
# Reading workloads
# --------------------------------------------------------------------------------------------------


def dig(obj: Mapping[str, Any], path: Sequence[str]) -> Any:
    current: Any = obj
    for key in path:
        if not isinstance(current, Mapping):
            return None
        current = current.get(key)
    return current


def pod_template(workload: Mapping[str, Any]) -> Mapping[str, Any]:
    """The workload's pod template; PlanError for kinds whose pods cannot be changed through an owner."""
    kind = str(workload.get("kind", ""))
    path = patch_template_path(kind)
    if path is None:
        if kind == "Job":
            raise PlanError("a Job's pod template is immutable: change the Job's manifest for its next run")
        raise PlanError(
            f"a {kind or 'object'} has no pod template the actuator may patch (bare pods are never patched)"
        )
    template = dig(workload, path)
    if not isinstance(template, Mapping):
        raise PlanError(f"{kind} has no {'.'.join(path)}")
    return template


def _containers(workload: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    containers = dig(pod_template(workload), ("spec", "containers"))
    if not isinstance(containers, list) or not containers:
        raise PlanError("the pod template has no containers")
    return [c for c in containers if isinstance(c, Mapping)]


def gpu_container(workload: Mapping[str, Any]) -> Mapping[str, Any]:
    """The container that holds the GPU (the first one asking for a GPU resource, else the first)."""
    containers = _containers(workload)
    for container in containers:
        resources = container.get("resources") or {}
        names = set(resources.get("limits") or {}) | set(resources.get("requests") or {})
        if any(GPU_RESOURCE_PATTERN.match(name) for name in names):
            return container
    return containers[0]


def current_value(workload: Mapping[str, Any], path: str, hpa: Mapping[str, Any] | None = None) -> str | None:
    """The live value at a flat path, as a string; None when absent."""
    match = CONTAINER_PATH.match(path)
    if match:
        for container in _containers(workload):
            if container.get("name") == match["container"]:
                value = ((container.get("resources") or {}).get(match["section"]) or {}).get(
                    match["resource"]
                )
                return None if value is None else str(value)
        return None
    match = NODE_SELECTOR_PATH.match(path)
    if match:
        value = (dig(pod_template(workload), ("spec", "nodeSelector")) or {}).get(match["key"])
        return None if value is None else str(value)
    if path == REPLICAS_PATH:
        value = dig(workload, ("spec", "replicas"))
        return str(1 if value is None else value)
    if path in (HPA_MIN_PATH, HPA_MAX_PATH):
        if hpa is None:
            return None
        value = dig(hpa, ("spec", path.split(".", 1)[1]))
        return None if value is None else str(value)
    raise PlanError(f"unknown field path {path!r}")


# --------------------------------------------------------------------------------------------------
# Planning a change
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChangePlan:
    """One change: the values it sets (None removes a field), the values it replaces, and its id."""

    change_id: str
    actions: tuple[ActionType, ...]
    target: dict[str, str | None]
    previous: dict[str, str | None]
    left_out: tuple[str, ...] = ()

    @property
    def touches_hpa(self) -> bool:
        """True when the change sets HPA bounds."""
        return any(path.startswith("hpa.") for path in self.target)

    def describe(self) -> str:
        """`cpu 1->4, replicas 3->2` for reasons and Events."""
        parts = [
            f"{path} {self.previous.get(path) or '(none)'}->{value if value is not None else '(removed)'}"
            for path, value in sorted(self.target.items())
        ]
        return ", ".join(parts)


def change_id_for(workload_key: str, target: Mapping[str, str | None], salt: str = "") -> str:
    """A short stable id of (workload, target values): the same change always gets the same id."""
    digest = hashlib.sha256(
        json.dumps([workload_key, sorted(target.items(), key=lambda kv: kv[0]), salt]).encode()
    ).hexdigest()
    return f"c-{digest[:10]}"


def _delta_big_enough(new: float, old: float | None, ratio: float) -> bool:
    if old is None or old == 0:
        return True
    return abs(new - old) >= ratio * abs(old)


def _quantity(value: str, what: str) -> float:
    try:
        number = parse_quantity(value)
    except QuantityError as error:
        raise PlanError(f"{what} value {value!r} is not a Kubernetes quantity") from error
    if not math.isfinite(number) or number < 0:
        raise PlanError(f"{what} value {value!r} is not a usable quantity")
    return number


def replica_target(current: int, requested: int, *, min_replicas: int) -> int | None:
    """The replica count to set for a request to go from `current` to `requested`; None for no change.

    Invariants (property-tested): the result never moves against the requested direction, lies
    between `current` and `requested`, and a scale-in never ends below `min_replicas` (a floor above
    the current count turns a scale-in into no change, never into a scale-out).
    """
    if requested < 0 or current < 0:
        raise PlanError(f"replica counts must not be negative (current {current}, requested {requested})")
    if requested == current:
        return None
    if requested > current:
        return requested
    target = max(requested, min_replicas)
    return target if target < current else None


def same_value(path: str, live: str | None, wanted: str | None) -> bool:
    """True when a live value equals a wanted one (quantities compared as numbers: 4 == 4000m)."""
    if live is None or wanted is None:
        return live == wanted
    if not CONTAINER_PATH.match(path):
        return live == wanted
    try:
        return math.isclose(parse_quantity(live), parse_quantity(wanted), rel_tol=1e-9)
    except QuantityError:
        return live == wanted


def _resource_target_values(
    workload: Mapping[str, Any], action: Action, target: ActionTarget, min_delta: float
) -> dict[str, str | None]:
    container = target.container or action.container or str(gpu_container(workload).get("name"))
    if container not in {str(c.get("name")) for c in _containers(workload)}:
        raise PlanError(f"{action.type.value}: container {container!r} is not in the pod template")
    values: dict[str, str | None] = {}
    for resource in target.remove_resources:
        for section in ("limits", "requests"):
            if current_value(workload, container_path(container, section, resource)) is not None:
                values[container_path(container, section, resource)] = None
    for section, quantities in (("requests", target.requests), ("limits", target.limits)):
        for resource, amount in quantities.items():
            wanted = _quantity(amount, f"{action.type.value} {resource}")
            path = container_path(container, section, resource)
            live = current_value(workload, path)
            live_amount = _quantity(live, resource) if live is not None else None
            small = resource in ("cpu", "memory") and not _delta_big_enough(wanted, live_amount, min_delta)
            if not small:
                values[path] = amount
    return values


def _target_values(
    workload: Mapping[str, Any],
    action: Action,
    settings: EffectiveSettings,
    hpa: Mapping[str, Any] | None,
    min_delta: float,
) -> dict[str, str | None]:
    """The flat-path values one action sets, read only from its machine-readable `target`."""
    target = action.target
    if target is None:
        raise PlanError(
            f"{action.type.value}: the recommendation carries no machine-readable target; nothing is applied"
        )
    values = _resource_target_values(workload, action, target, min_delta)
    if target.replicas is not None:
        current = int(current_value(workload, REPLICAS_PATH) or "1")
        to = replica_target(current, target.replicas, min_replicas=settings.min_replicas)
        if to is not None:
            values[REPLICAS_PATH] = str(to)
    if target.min_replicas is not None or target.max_replicas is not None:
        if hpa is None:
            raise PlanError(f"{action.type.value}: no HorizontalPodAutoscaler to set bounds on")
        spec = hpa.get("spec") or {}
        low = max(int(target.min_replicas or spec.get("minReplicas") or 1), 1, settings.min_replicas)
        high = int(target.max_replicas or spec.get("maxReplicas") or low)
        if low > high:
            raise PlanError(f"HPA bounds {low}-{high}: minimum above maximum")
        values[HPA_MIN_PATH] = str(low)
        values[HPA_MAX_PATH] = str(high)
    return values


def plan_change(
    workload: Mapping[str, Any],
    actions: Sequence[Action],
    settings: EffectiveSettings,
    *,
    hpa: Mapping[str, Any] | None = None,
    workload_key: str = "",
) -> ChangePlan | None:
    """The values the selected actions set, with the values they replace; None when nothing changes.

    Values come only from each action's `target` (never from the display strings). Raises PlanError
    (with a message for status) when an action cannot be expressed as a patch.
    """
    kind = str(workload.get("kind", ""))
    pod_template(workload)  # fail early on kinds we never patch
    min_delta = float(settings.threshold_overrides.get("minDeltaRatio", DEFAULT_MIN_DELTA_RATIO))
    selection = select_actions(actions, settings, has_hpa=hpa is not None, kind=kind)
    target: dict[str, str | None] = {}
    applied: list[ActionType] = []
    left_out = list(selection.left_out)
    for action in selection.actions:
        values = _target_values(workload, action, settings, hpa, min_delta)
        values = {
            path: value
            for path, value in values.items()
            if not same_value(path, current_value(workload, path, hpa), value)
        }
        if not values:
            left_out.append(f"{action.type.value}: below the minimum change or already in place")
            continue
        target.update(values)
        applied.append(action.type)
    if not target:
        return None
    previous = {path: current_value(workload, path, hpa) for path in target}
    return ChangePlan(
        change_id=change_id_for(workload_key, target),
        actions=tuple(applied),
        target=target,
        previous=previous,
        left_out=tuple(left_out),
    )


# --------------------------------------------------------------------------------------------------
# Patch bodies
# --------------------------------------------------------------------------------------------------


def _workload_values(values: Mapping[str, str | None]) -> dict[str, str | None]:
    return {path: value for path, value in values.items() if not path.startswith("hpa.")}


def _template_spec_patch(values: Mapping[str, str | None], *, ssa: bool) -> dict[str, Any]:
    containers: dict[str, dict[str, dict[str, str | None]]] = {}
    node_selector: dict[str, str | None] = {}
    for path, value in values.items():
        match = CONTAINER_PATH.match(path)
        if match:
            sections = containers.setdefault(match["container"], {})
            sections.setdefault(match["section"], {})[match["resource"]] = value
            continue
        match = NODE_SELECTOR_PATH.match(path)
        if match:
            node_selector[match["key"]] = value
    spec: dict[str, Any] = {}
    if containers:
        spec["containers"] = [
            {"name": name, "resources": sections} for name, sections in sorted(containers.items())
        ]
    if node_selector:
        spec["nodeSelector"] = node_selector
    if ssa:
        return spec
    return spec


def _nest(path: Sequence[str], leaf: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = leaf
    for key in reversed(path):
        result = {key: result}
    return result


def workload_patch(kind: str, values: Mapping[str, str | None], annotation: str | None) -> dict[str, Any]:
    """Strategic-merge patch body: set the values (None deletes the field) and the change record."""
    template_path = patch_template_path(kind)
    if template_path is None:
        raise PlanError(f"a {kind} has no pod template the actuator may patch")
    own = _workload_values(values)
    body: dict[str, Any] = {}
    spec_patch = _template_spec_patch({p: v for p, v in own.items() if p != REPLICAS_PATH}, ssa=False)
    if spec_patch:
        body = _nest(template_path, {"spec": spec_patch})
    if REPLICAS_PATH in own:
        replicas = own[REPLICAS_PATH]
        body.setdefault("spec", {})["replicas"] = None if replicas is None else int(replicas)
    if annotation is not None:
        body["metadata"] = {"annotations": {CHANGE_ANNOTATION: annotation}}
    return body


def hpa_patch(values: Mapping[str, str | None]) -> dict[str, Any] | None:
    """Merge patch of the HorizontalPodAutoscaler's bounds; None when the change has none."""
    spec: dict[str, Any] = {}
    for path in (HPA_MIN_PATH, HPA_MAX_PATH):
        if path in values and values[path] is not None:
            spec[path.split(".", 1)[1]] = int(str(values[path]))
    return {"spec": spec} if spec else None
