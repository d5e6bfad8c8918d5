"""Safety gates, patch building and regression checks of the actuator (pure: data in, data out).

The actuator's I/O (reading workloads, patching, posting Events) lives in `handlers.actuator`; every
decision it makes is a function here, so each guard of SPEC §6 is unit-tested without a cluster:

- `check_gates`: only under an `Apply` policy, never on stale or insufficient data or with a health
  finding, inside maintenance windows, outside the per-workload cooldown, within the per-cluster and
  per-namespace hourly rate limits;
- `select_actions` / `plan_change`: which recommended actions may be carried out (policy `actions`,
  HPA-owned replica counts, `minReplicas`, minimum change size) and the exact values they set;
- `workload_patch` / `apply_body` / `hpa_patch`: the patch bodies, built from flat field paths so a
  rollback is the same function applied to the recorded previous values;
- `declarative_owners`: other field managers that declared the fields we would change (never fought);
- `regression`: after `verifyFor`, the same signals compared with before the change.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpu_rightsizer.logic.policy import EffectiveSettings, in_maintenance_window
from gpu_rightsizer.logic.workloads import (
    GPU_RESOURCE_PATTERN,
    QuantityError,
    format_cpu,
    format_memory,
    parse_quantity,
)
from gpu_rightsizer.model.codes import HEALTH_CODES, ActionType, ApplyState, DiagnosisCode, PolicyMode
from gpu_rightsizer.model.observation import Signal, WorkloadWindow
from gpu_rightsizer.model.result import Action

FIELD_MANAGER = "gpu-rightsizer"
#: JSON record of the last change on the workload: change id, previous and target values, baseline.
CHANGE_ANNOTATION = "gpurightsizer.io/previous"

#: Field managers that hold a declared intent even though they write with Update operations
#: (client-side `kubectl apply` keeps a last-applied copy and reverts anything else on its next run).
DECLARATIVE_UPDATE_MANAGERS = frozenset(
    {"kubectl-client-side-apply", "helm", "argocd-application-controller"}
)

DEFAULT_MIN_DELTA_RATIO = 0.10
#: GPU busy may drop by this share of its value before the change counts as a regression...
REGRESSION_BUSY_DROP_RATIO = 0.25
#: ...and by at least this much in absolute terms (noise on low values is not a regression).
REGRESSION_BUSY_DROP_ABSOLUTE = 0.05
#: CPU saturation may rise by this much (absolute, usage / limit) before it counts as a regression.
REGRESSION_CPU_RISE = 0.25

_TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
_SCALABLE_KINDS = frozenset({"Deployment", "StatefulSet", "ReplicaSet"})

_CONTAINER_PATH = re.compile(
    r"^containers\[(?P<container>[^\]]+)\]\.resources\.(?P<section>limits|requests)\[(?P<resource>[^\]]+)\]$"
)
_NODE_SELECTOR_PATH = re.compile(r"^nodeSelector\[(?P<key>[^\]]+)\]$")
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
# Gates
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """Whether the actuator may change the workload now, and why (shown in status.apply)."""

    go: bool
    state: ApplyState
    reason: str


@dataclass(frozen=True)
class GateContext:
    """Everything the gates look at for one workload."""

    settings: EffectiveSettings
    diagnosis: DiagnosisCode | None
    finding_codes: frozenset[DiagnosisCode]
    window_end: datetime | None
    now: datetime
    staleness_limit: timedelta
    last_change_at: datetime | None = None
    changes_last_hour_cluster: int = 0
    changes_last_hour_namespace: int = 0
    namespace: str = ""


def check_gates(ctx: GateContext) -> Verdict:
    """The guards of SPEC §6 in a fixed order; the first that fails names itself in the reason."""
    settings = ctx.settings
    if settings.ignored:
        return Verdict(False, ApplyState.SKIPPED, 'the workload opts out (gpurightsizer.io/ignore: "true")')
    if settings.mode != PolicyMode.APPLY:
        where = (
            f"policy {settings.policy!r} is in {settings.mode.value} mode"
            if settings.policy
            else "no Apply policy selects this workload"
        )
        return Verdict(False, ApplyState.SKIPPED, where)
    if ctx.diagnosis is None or ctx.diagnosis == DiagnosisCode.INSUFFICIENT_DATA:
        return Verdict(False, ApplyState.SKIPPED, "insufficient data: nothing is changed without a diagnosis")
    health = sorted(code.value for code in ctx.finding_codes | {ctx.diagnosis} if code in HEALTH_CODES)
    if health:
        return Verdict(
            False,
            ApplyState.BLOCKED,
            f"health finding {', '.join(health)}: fix the hardware first, sizing waits",
        )
    if ctx.window_end is None:
        return Verdict(False, ApplyState.SKIPPED, "no observation window yet")
    age = ctx.now - ctx.window_end
    if age > ctx.staleness_limit:
        return Verdict(False, ApplyState.BLOCKED, f"data is stale: the window ended {_human(age)} ago")
    if not in_maintenance_window(settings.maintenance_windows, ctx.now):
        return Verdict(False, ApplyState.BLOCKED, "outside the policy's maintenance windows")
    if ctx.last_change_at is not None and ctx.now - ctx.last_change_at < settings.cooldown:
        left = settings.cooldown - (ctx.now - ctx.last_change_at)
        return Verdict(
            False,
            ApplyState.BLOCKED,
            f"cooldown: last change {_human(ctx.now - ctx.last_change_at)} ago, {_human(left)} to go",
        )
    if ctx.changes_last_hour_namespace >= settings.max_changes_per_hour_namespace:
        return Verdict(
            False,
            ApplyState.BLOCKED,
            f"rate limit: {ctx.changes_last_hour_namespace} change(s) in namespace {ctx.namespace!r} in the last hour "
            f"(maxChangesPerHour.perNamespace {settings.max_changes_per_hour_namespace})",
        )
    if ctx.changes_last_hour_cluster >= settings.max_changes_per_hour_cluster:
        return Verdict(
            False,
            ApplyState.BLOCKED,
            f"rate limit: {ctx.changes_last_hour_cluster} change(s) in the cluster in the last hour "
            f"(maxChangesPerHour.cluster {settings.max_changes_per_hour_cluster})",
        )
    return Verdict(True, ApplyState.PENDING, "all safety gates passed")


def count_recent(changes: Iterable[tuple[str, datetime]], namespace: str, now: datetime) -> tuple[int, int]:
    """(cluster, namespace) counts of changes in the hour before `now`, from (namespace, time) pairs."""
    hour_ago = now - timedelta(hours=1)
    recent = [(ns, at) for ns, at in changes if hour_ago < at <= now]
    return len(recent), sum(1 for ns, _ in recent if ns == namespace)


def _human(delta: timedelta) -> str:
    seconds = max(0, round(delta.total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


# --------------------------------------------------------------------------------------------------
# Choosing actions
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """Actions the actuator will carry out, and why the others were left out."""

    actions: tuple[Action, ...]
    left_out: tuple[str, ...] = ()


def _policy_name_for(action: ActionType) -> ActionType:
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
        allowed = _policy_name_for(action.type)
        if allowed not in settings.actions:
            left_out.append(f"{action.type.value}: not in the policy's actions")
            continue
        if action.type in (ActionType.REPLICAS, ActionType.RELEASE_IDLE) and has_hpa:
            left_out.append(f"{action.type.value}: a HorizontalPodAutoscaler owns the replica count")
            continue
        if action.type in (ActionType.REPLICAS, ActionType.RELEASE_IDLE) and kind not in _SCALABLE_KINDS:
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


def _dig(obj: Mapping[str, Any], path: Sequence[str]) -> Any:
    current: Any = obj
    for key in path:
        if not isinstance(current, Mapping):
            return None
        current = current.get(key)
    return current


def pod_template(workload: Mapping[str, Any]) -> Mapping[str, Any]:
    """The workload's pod template; PlanError for kinds whose pods cannot be changed through an owner."""
    kind = str(workload.get("kind", ""))
    path = _TEMPLATE_PATHS.get(kind)
    if path is None:
        if kind == "Job":
            raise PlanError("a Job's pod template is immutable: change the Job's manifest for its next run")
        raise PlanError(
            f"a {kind or 'object'} has no pod template the actuator may patch (bare pods are never patched)"
        )
    template = _dig(workload, path)
    if not isinstance(template, Mapping):
        raise PlanError(f"{kind} has no {'.'.join(path)}")
    return template


def _containers(workload: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    containers = _dig(pod_template(workload), ("spec", "containers"))
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
    match = _CONTAINER_PATH.match(path)
    if match:
        for container in _containers(workload):
            if container.get("name") == match["container"]:
                value = ((container.get("resources") or {}).get(match["section"]) or {}).get(
                    match["resource"]
                )
                return None if value is None else str(value)
        return None
    match = _NODE_SELECTOR_PATH.match(path)
    if match:
        value = (_dig(pod_template(workload), ("spec", "nodeSelector")) or {}).get(match["key"])
        return None if value is None else str(value)
    if path == REPLICAS_PATH:
        value = _dig(workload, ("spec", "replicas"))
        return str(1 if value is None else value)
    if path in (HPA_MIN_PATH, HPA_MAX_PATH):
        if hpa is None:
            return None
        value = _dig(hpa, ("spec", path.split(".", 1)[1]))
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


_CORES = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*cores?\b")
_RESOURCE_REQUEST = re.compile(
    r"^\s*(?P<resource>nvidia\.com/[A-Za-z0-9.+\-]+)\s*:\s*(?P<count>[0-9]+)(?P<rest>.*)$"
)
_NODE_SELECTOR_TEXT = re.compile(r"\(nodeSelector (?P<pairs>[^)]*)\)")
_BOUNDS = re.compile(r"^\s*(?P<low>[0-9]+)\s*-\s*(?P<high>[0-9]+)\s*$")


def _delta_big_enough(new: float, old: float | None, ratio: float) -> bool:
    if old is None or old == 0:
        return True
    return abs(new - old) >= ratio * abs(old)


def _resource_values(
    workload: Mapping[str, Any], container: str, resource: str, amount: str, *, both: bool
) -> dict[str, str | None]:
    """Set `resource` in limits (and in requests when `both`, or when requests already name it)."""
    values: dict[str, str | None] = {container_path(container, "limits", resource): amount}
    if both or current_value(workload, container_path(container, "requests", resource)) is not None:
        values[container_path(container, "requests", resource)] = amount
    return values


def _cpu_values(workload: Mapping[str, Any], action: Action, min_delta: float) -> dict[str, str | None]:
    match = _CORES.match(action.to_value)
    if not match:
        raise PlanError(f"cpu target {action.to_value!r} is not a number of cores")
    target_pod = float(match.group(1))
    container = action.container or str(gpu_container(workload).get("name"))
    containers = _containers(workload)
    current_pod = 0.0
    current_own: float | None = None
    for item in containers:
        resources = item.get("resources") or {}
        raw = (resources.get("limits") or {}).get("cpu") or (resources.get("requests") or {}).get("cpu")
        if raw is not None:
            cores = _quantity(raw, "cpu")
            current_pod += cores
            if item.get("name") == container:
                current_own = cores
    if not _delta_big_enough(target_pod, current_pod or None, min_delta):
        return {}
    own_target = max(0.1, target_pod - (current_pod - (current_own or 0.0)))
    return _resource_values(workload, container, "cpu", format_cpu(own_target), both=True)


def _memory_values(workload: Mapping[str, Any], action: Action, min_delta: float) -> dict[str, str | None]:
    target = _quantity(action.to_value.split()[0] if action.to_value.strip() else action.to_value, "memory")
    container = action.container or str(gpu_container(workload).get("name"))
    current_raw = current_value(workload, container_path(container, "limits", "memory")) or current_value(
        workload, container_path(container, "requests", "memory")
    )
    current = _quantity(current_raw, "memory") if current_raw is not None else None
    if not _delta_big_enough(target, current, min_delta):
        return {}
    return _resource_values(workload, container, "memory", format_memory(target), both=False)


def _quantity(value: str, what: str) -> float:
    try:
        number = parse_quantity(value)
    except QuantityError as error:
        raise PlanError(f"{what} value {value!r} is not a Kubernetes quantity") from error
    if not math.isfinite(number) or number < 0:
        raise PlanError(f"{what} value {value!r} is not a usable quantity")
    return number


def _gpu_resource_values(workload: Mapping[str, Any], action: Action) -> dict[str, str | None]:
    """Swap the container's GPU resource for the recommended one, with the node selector it needs."""
    match = _RESOURCE_REQUEST.match(action.to_value)
    if not match:
        raise PlanError(f"GPU target {action.to_value!r} is not '<resource>: <count>'")
    new_resource, count = match["resource"], match["count"]
    if not GPU_RESOURCE_PATTERN.match(new_resource):
        raise PlanError(f"{new_resource!r} is not a GPU resource")
    container = gpu_container(workload)
    name = str(container.get("name"))
    resources = container.get("resources") or {}
    values: dict[str, str | None] = {}
    for section in ("limits", "requests"):
        for resource in resources.get(section) or {}:
            if GPU_RESOURCE_PATTERN.match(resource) and resource != new_resource:
                values[container_path(name, section, resource)] = None
    had_requests = any(GPU_RESOURCE_PATTERN.match(r) for r in (resources.get("requests") or {}))
    values[container_path(name, "limits", new_resource)] = count
    if had_requests:
        values[container_path(name, "requests", new_resource)] = count
    selector = _NODE_SELECTOR_TEXT.search(match["rest"])
    if selector:
        for pair in selector["pairs"].split(","):
            key, _, value = pair.strip().partition("=")
            if not key or not value:
                raise PlanError(f"node selector {pair!r} in {action.to_value!r} is not key=value")
            values[node_selector_path(key)] = value
    return values


def _gpu_count_values(workload: Mapping[str, Any], action: Action) -> dict[str, str | None]:
    if not action.to_value.strip().isdigit():
        raise PlanError(f"GPU count {action.to_value!r} is not a whole number")
    container = gpu_container(workload)
    name = str(container.get("name"))
    resources = container.get("resources") or {}
    resource = action.resource or next(
        (r for r in (resources.get("limits") or {}) if GPU_RESOURCE_PATTERN.match(r)), "nvidia.com/gpu"
    )
    return _resource_values(workload, name, resource, action.to_value.strip(), both=False)


def _replica_values(
    workload: Mapping[str, Any], action: Action, settings: EffectiveSettings
) -> dict[str, str | None]:
    text = action.to_value.strip()
    if not text.isdigit():
        raise PlanError(f"replica target {action.to_value!r} is not a whole number")
    target = int(text)
    current = int(current_value(workload, REPLICAS_PATH) or "1")
    if target < current:
        target = max(target, settings.min_replicas)
    return {} if target == current else {REPLICAS_PATH: str(target)}


def _hpa_values(
    action: Action, hpa: Mapping[str, Any] | None, settings: EffectiveSettings
) -> dict[str, str | None]:
    match = _BOUNDS.match(action.to_value)
    if not match:
        raise PlanError(f"HPA bounds {action.to_value!r} are not 'min-max'")
    low, high = max(int(match["low"]), 1, settings.min_replicas), int(match["high"])
    if low > high:
        raise PlanError(f"HPA bounds {low}-{high}: minimum above maximum")
    values: dict[str, str | None] = {}
    if current_value({}, HPA_MIN_PATH, hpa) != str(low):
        values[HPA_MIN_PATH] = str(low)
    if current_value({}, HPA_MAX_PATH, hpa) != str(high):
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

    Raises PlanError (with a message for status) when an action cannot be expressed as a patch.
    """
    kind = str(workload.get("kind", ""))
    pod_template(workload)  # fail early on kinds we never patch
    min_delta = float(settings.threshold_overrides.get("minDeltaRatio", DEFAULT_MIN_DELTA_RATIO))
    selection = select_actions(actions, settings, has_hpa=hpa is not None, kind=kind)
    target: dict[str, str | None] = {}
    applied: list[ActionType] = []
    left_out = list(selection.left_out)
    for action in selection.actions:
        if action.type == ActionType.CPU:
            values = _cpu_values(workload, action, min_delta)
        elif action.type == ActionType.MEMORY:
            values = _memory_values(workload, action, min_delta)
        elif action.type in (ActionType.MIG_PROFILE, ActionType.GPU_SHARING):
            values = _gpu_resource_values(workload, action)
        elif action.type == ActionType.GPU_COUNT:
            values = _gpu_count_values(workload, action)
        elif action.type == ActionType.REPLICAS:
            values = _replica_values(workload, action, settings)
        elif action.type == ActionType.RELEASE_IDLE:
            values = {} if current_value(workload, REPLICAS_PATH) == "0" else {REPLICAS_PATH: "0"}
        elif action.type == ActionType.HPA_BOUNDS:
            values = _hpa_values(action, hpa, settings)
        else:  # pragma: no cover - select_actions only passes applicable types
            continue
        values = {
            path: value for path, value in values.items() if current_value(workload, path, hpa) != value
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


def rollback_plan(record: ChangeRecord, workload_key: str = "") -> ChangePlan:
    """The change that restores the values a recorded change replaced."""
    target = dict(record.previous)
    return ChangePlan(
        change_id=change_id_for(workload_key, target, salt=f"rollback-of-{record.change_id}"),
        actions=record.actions,
        target=target,
        previous=dict(record.target),
    )


# --------------------------------------------------------------------------------------------------
# The record on the workload (crash safety)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChangeRecord:
    """What the `gpurightsizer.io/previous` annotation holds: which change landed, and how to undo it."""

    change_id: str
    at: datetime
    target: dict[str, str | None]
    previous: dict[str, str | None]
    actions: tuple[ActionType, ...] = ()
    baseline: dict[str, float] = field(default_factory=dict)
    rollback_of: str | None = None

    def to_annotation(self) -> str:
        """Compact JSON for the annotation value."""
        payload: dict[str, Any] = {
            "changeId": self.change_id,
            "at": self.at.isoformat(),
            "actions": [a.value for a in self.actions],
            "target": self.target,
            "previous": self.previous,
            "baseline": self.baseline,
        }
        if self.rollback_of:
            payload["rollbackOf"] = self.rollback_of
        return json.dumps(payload, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_annotation(cls, text: str) -> ChangeRecord:
        """Parse the annotation; ValueError with a clear message when it is not ours or is damaged."""
        try:
            payload = json.loads(text)
            return cls(
                change_id=str(payload["changeId"]),
                at=datetime.fromisoformat(str(payload["at"])),
                target={str(k): (None if v is None else str(v)) for k, v in dict(payload["target"]).items()},
                previous={
                    str(k): (None if v is None else str(v)) for k, v in dict(payload["previous"]).items()
                },
                actions=tuple(ActionType(a) for a in payload.get("actions", [])),
                baseline={str(k): float(v) for k, v in dict(payload.get("baseline", {})).items()},
                rollback_of=payload.get("rollbackOf"),
            )
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"annotation {CHANGE_ANNOTATION} is not a change record: {error}") from error


def record_on(workload: Mapping[str, Any]) -> ChangeRecord | None:
    """The change record on a workload, or None (absent or unreadable)."""
    text = ((workload.get("metadata") or {}).get("annotations") or {}).get(CHANGE_ANNOTATION)
    if not text:
        return None
    try:
        return ChangeRecord.from_annotation(str(text))
    except ValueError:
        return None


def landed(workload: Mapping[str, Any], plan: ChangePlan, hpa: Mapping[str, Any] | None = None) -> bool:
    """True when the workload already carries this change (its record and its target values)."""
    record = record_on(workload)
    if record is None or record.change_id != plan.change_id:
        return False
    return all(
        current_value(workload, path, hpa) == value
        for path, value in plan.target.items()
        if not path.startswith("hpa.")
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
        match = _CONTAINER_PATH.match(path)
        if match:
            sections = containers.setdefault(match["container"], {})
            sections.setdefault(match["section"], {})[match["resource"]] = value
            continue
        match = _NODE_SELECTOR_PATH.match(path)
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
    template_path = _TEMPLATE_PATHS.get(kind)
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


def apply_body(
    workload: Mapping[str, Any], values: Mapping[str, str | None], annotation: str | None
) -> dict[str, Any] | None:
    """Server-side-apply body for the same change; None when it removes fields (SSA cannot delete
    fields that other managers own, so such changes go as a strategic-merge patch)."""
    own = _workload_values(values)
    if any(value is None for value in own.values()):
        return None
    kind = str(workload.get("kind"))
    metadata = workload.get("metadata") or {}
    body = workload_patch(kind, own, annotation)
    body["apiVersion"] = str(workload.get("apiVersion"))
    body["kind"] = kind
    body["metadata"] = {
        "name": metadata.get("name"),
        "namespace": metadata.get("namespace"),
        **({"annotations": {CHANGE_ANNOTATION: annotation}} if annotation is not None else {}),
    }
    return body


def hpa_patch(values: Mapping[str, str | None]) -> dict[str, Any] | None:
    """Merge patch of the HorizontalPodAutoscaler's bounds; None when the change has none."""
    spec: dict[str, Any] = {}
    for path in (HPA_MIN_PATH, HPA_MAX_PATH):
        if path in values and values[path] is not None:
            spec[path.split(".", 1)[1]] = int(str(values[path]))
    return {"spec": spec} if spec else None


# --------------------------------------------------------------------------------------------------
# Field ownership
# --------------------------------------------------------------------------------------------------


def _fields_v1_has(fields: Mapping[str, Any], path: Sequence[str]) -> bool:
    current: Any = fields
    for key in path:
        if not isinstance(current, Mapping) or key not in current:
            return False
        current = current[key]
    return True


def _managed_key_paths(kind: str, path: str) -> list[str] | None:
    """The managedFields (fieldsV1) key path of a flat path, or None for paths outside the workload."""
    template = _TEMPLATE_PATHS.get(kind)
    if template is None:
        return None
    match = _CONTAINER_PATH.match(path)
    if match:
        return [
            *[f"f:{p}" for p in template],
            "f:spec",
            "f:containers",
            f'k:{{"name":"{match["container"]}"}}',
            "f:resources",
            f"f:{match['section']}",
            f"f:{match['resource']}",
        ]
    match = _NODE_SELECTOR_PATH.match(path)
    if match:
        return [*[f"f:{p}" for p in template], "f:spec", "f:nodeSelector", f"f:{match['key']}"]
    if path == REPLICAS_PATH:
        return ["f:spec", "f:replicas"]
    return None


def declarative_owners(workload: Mapping[str, Any], paths: Iterable[str]) -> dict[str, list[str]]:
    """Other field managers with a declared intent (server-side apply, client-side apply, Helm, Argo CD)
    that own fields the change would set: manager -> paths. Such managers would revert the change on
    their next sync, so the actuator reports them instead of fighting them."""
    kind = str(workload.get("kind", ""))
    owners: dict[str, list[str]] = {}
    for entry in (workload.get("metadata") or {}).get("managedFields") or []:
        manager = str(entry.get("manager", ""))
        if manager == FIELD_MANAGER:
            continue
        declarative = entry.get("operation") == "Apply" or manager in DECLARATIVE_UPDATE_MANAGERS
        if not declarative:
            continue
        fields = entry.get("fieldsV1") or {}
        for path in paths:
            key_path = _managed_key_paths(kind, path)
            if key_path is not None and _fields_v1_has(fields, key_path):
                owners.setdefault(manager, []).append(path)
    return owners


def conflict_reason(owners: Mapping[str, Sequence[str]]) -> str:
    """Status reason naming the managers whose fields the actuator will not take."""
    parts = [
        f"{', '.join(sorted(paths))} managed by {manager!r}" for manager, paths in sorted(owners.items())
    ]
    return (
        "field manager conflict: "
        + "; ".join(parts)
        + f" (declared there, so a change would be reverted; let that manager cede the fields to {FIELD_MANAGER!r}, "
        "e.g. Argo CD ignoreDifferences.managedFieldsManagers, or change the manifest)"
    )


# --------------------------------------------------------------------------------------------------
# Verification
# --------------------------------------------------------------------------------------------------

BUSY_KEY = "gpuBusyP95"
CPU_SATURATION_KEY = "cpuSaturationP95"


def target_cpu_limit(record: ChangeRecord) -> float | None:
    """The pod's CPU limit after the change (summed over containers), when the change set one."""
    limits = [
        parse_quantity(value)
        for path, value in record.target.items()
        if value is not None and path.endswith("resources.limits[cpu]")
    ]
    return sum(limits) if limits else None


def signals_from_window(
    window: WorkloadWindow, pods: Iterable[str] | None = None, cpu_limit_cores: float | None = None
) -> dict[str, float]:
    """The figures compared before and after a change: GPU busy p95 (worst GPU) and CPU saturation
    p95 (usage over limit, worst pod); only the given pods when `pods` is set. Missing figures are
    left out rather than guessed. `cpu_limit_cores` overrides the window's limit: right after a CPU
    change the window still holds the old pods' limit, and the new pods' usage over the old limit
    reads as a rise in saturation (4 cores used over a 1-core limit: 392 %)."""
    wanted = set(pods) if pods is not None else None
    busy: list[float] = []
    saturation: list[float] = []
    limit = cpu_limit_cores or window.allocation.cpu_limit_cores or window.allocation.cpu_request_cores
    for pod in window.pods:
        if wanted is not None and pod.name not in wanted:
            continue
        for gpu in pod.gpus:
            stats = gpu.stats.get(Signal.GR_ENGINE_ACTIVE) or gpu.stats.get(Signal.GPU_UTIL)
            if stats is not None and stats.samples > 0 and math.isfinite(stats.p95):
                busy.append(stats.p95)
        cpu = pod.stats.get(Signal.CPU_USAGE_CORES)
        if cpu is not None and cpu.samples > 0 and limit and math.isfinite(cpu.p95):
            saturation.append(cpu.p95 / limit)
    figures: dict[str, float] = {}
    if busy:
        figures[BUSY_KEY] = round(max(busy), 4)
    if saturation:
        figures[CPU_SATURATION_KEY] = round(max(saturation), 4)
    return figures


@dataclass(frozen=True)
class PodHealth:
    """What the workload's current pods look like after a change."""

    total: int = 0
    running: int = 0
    unschedulable: int = 0
    crash_looping: int = 0
    restarts: int = 0
    messages: tuple[str, ...] = ()


def regression(
    before: Mapping[str, float],
    after: Mapping[str, float],
    health: PodHealth,
    actions: Iterable[ActionType] = (),
) -> str | None:
    """Why the change made things worse, or None. Pods that do not schedule or crash always count;
    a GPU busy drop counts except after adding replicas (load spread over more pods is the point)."""
    if health.unschedulable:
        detail = f": {health.messages[0]}" if health.messages else ""
        return f"{health.unschedulable} new pod(s) cannot be scheduled{detail}"
    if health.crash_looping:
        return f"{health.crash_looping} new pod(s) crash-loop ({health.restarts} restarts)"
    kinds = set(actions)
    if (
        BUSY_KEY in before
        and BUSY_KEY in after
        and not (kinds & {ActionType.REPLICAS, ActionType.HPA_BOUNDS})
    ):
        old, new = before[BUSY_KEY], after[BUSY_KEY]
        if old - new > max(REGRESSION_BUSY_DROP_ABSOLUTE, REGRESSION_BUSY_DROP_RATIO * old):
            return f"GPU busy p95 fell from {old:.0%} to {new:.0%}"
    if CPU_SATURATION_KEY in before and CPU_SATURATION_KEY in after and ActionType.CPU in kinds:
        old, new = before[CPU_SATURATION_KEY], after[CPU_SATURATION_KEY]
        if new - old > REGRESSION_CPU_RISE:
            return f"CPU saturation p95 rose from {old:.0%} to {new:.0%}"
    return None


def improvement_summary(before: Mapping[str, float], after: Mapping[str, float]) -> str:
    """`GPU busy p95 35%->81%, CPU saturation p95 98%->60%` for the Verified reason."""
    parts = []
    if BUSY_KEY in before and BUSY_KEY in after:
        parts.append(f"GPU busy p95 {before[BUSY_KEY]:.0%}->{after[BUSY_KEY]:.0%}")
    if CPU_SATURATION_KEY in before and CPU_SATURATION_KEY in after:
        parts.append(f"CPU saturation p95 {before[CPU_SATURATION_KEY]:.0%}->{after[CPU_SATURATION_KEY]:.0%}")
    return ", ".join(parts) or "no comparable figures"
