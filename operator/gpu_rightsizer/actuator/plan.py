"""Safety gates, patch building and regression checks of the actuator (pure: data in, data out).

The actuator's I/O (reading workloads, patching, posting Events) lives in `handlers.actuator`; every
decision it makes is a function here, so each guard of SPEC §6 is unit-tested without a cluster:

- `check_gates`: only under an `Apply` policy, never on stale or insufficient data or with a health
  finding, inside maintenance windows, outside the per-workload cooldown, within the per-cluster and
  per-namespace hourly rate limits;
- `select_actions` / `plan_change`: which recommended actions may be carried out (policy `actions`,
  HPA-owned replica counts, `minReplicas`, minimum change size) and the exact values they set;
- `workload_patch` / `hpa_patch`: the patch bodies, built from flat field paths so a
  rollback is the same function applied to the recorded previous values;
- `field_conflicts`: other field managers that own the fields we would change (never fought);
- `check_availability`: controller owners, rollout health, replica floor, PDBs, disruption budget;
- `verification_outcome`: rollout first, then only the new revision's pods; no data is Inconclusive;
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
from enum import StrEnum
from typing import Any

from gpu_rightsizer.logic.owners import managed_by_parent
from gpu_rightsizer.logic.policy import EffectiveSettings, in_maintenance_window
from gpu_rightsizer.logic.workloads import (
    GPU_RESOURCE_PATTERN,
    QuantityError,
    parse_quantity,
)
from gpu_rightsizer.model.codes import HEALTH_CODES, ActionType, ApplyState, DiagnosisCode, PolicyMode
from gpu_rightsizer.model.observation import Signal, WorkloadWindow
from gpu_rightsizer.model.result import Action, ActionTarget

FIELD_MANAGER = "gpu-rightsizer"
#: JSON record of the last change on the workload: change id, previous and target values, baseline.
CHANGE_ANNOTATION = "gpurightsizer.io/previous"

#: kubectl's one-shot imperative verbs: they hold no declared intent, so taking a field they last set
#: reverts nothing. Every other manager (client-side apply, Helm, Argo CD's `argocd-controller`,
#: Flux's `kustomize-controller`/`helm-controller`, any operator) owns its fields.
IMPERATIVE_MANAGERS = frozenset(
    {"kubectl-create", "kubectl-edit", "kubectl-patch", "kubectl-set", "kubectl-scale", "kubectl-replace"}
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
    """Everything the gates look at for one workload, as published in its recommendation's status."""

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
    #: Warnings of the metrics source for this window (partial data, missing series).
    warnings: tuple[str, ...] = ()
    #: The workload generation the recommendation was computed for, and the live one.
    analysed_generation: int | None = None
    live_generation: int | None = None
    #: The policy that recorded a change being resumed (None for a new change).
    started_by: str | None = None


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
    if ctx.started_by is not None and ctx.started_by != settings.policy:
        return Verdict(
            False,
            ApplyState.SKIPPED,
            f"the change was started by policy {ctx.started_by!r}; {settings.policy!r} governs the workload now",
        )
    if ctx.diagnosis is None or ctx.diagnosis == DiagnosisCode.INSUFFICIENT_DATA:
        return Verdict(False, ApplyState.SKIPPED, "insufficient data: nothing is changed without a diagnosis")
    health = sorted(code.value for code in ctx.finding_codes | {ctx.diagnosis} if code in HEALTH_CODES)
    if health:
        return Verdict(
            False,
            ApplyState.BLOCKED,
            f"health finding {', '.join(health)}: fix the hardware first, sizing waits",
        )
    if ctx.warnings:
        return Verdict(
            False, ApplyState.BLOCKED, f"partial data, not acted on: {'; '.join(sorted(ctx.warnings)[:3])}"
        )
    if ctx.window_end is None:
        return Verdict(False, ApplyState.SKIPPED, "no observation window yet")
    age = ctx.now - ctx.window_end
    if age > ctx.staleness_limit:
        return Verdict(
            False,
            ApplyState.BLOCKED,
            f"data is stale: the newest data is {_human(age)} old (limit {_human(ctx.staleness_limit)})",
        )
    if ctx.analysed_generation is None or ctx.analysed_generation != ctx.live_generation:
        return Verdict(
            False,
            ApplyState.SKIPPED,
            f"the recommendation was computed for workload generation {ctx.analysed_generation}, the "
            f"workload is at {ctx.live_generation}: waiting for a fresh analysis",
        )
    if not in_maintenance_window(settings.maintenance_windows, ctx.now):
        return Verdict(False, ApplyState.BLOCKED, "outside the policy's maintenance windows")
    if ctx.last_change_at is not None and ctx.now - ctx.last_change_at < settings.cooldown:
        return Verdict(False, ApplyState.BLOCKED, "cooldown: the last change is less than the cooldown ago")
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
# Availability and ownership gates (on the live objects)
# --------------------------------------------------------------------------------------------------

#: Annotation a person sets on a workload (any new value) to clear its remembered regressions.
CLEAR_REGRESSIONS_ANNOTATION = "gpurightsizer.io/clear-regressions"


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return None


def rollout_failure(workload: Mapping[str, Any]) -> str | None:
    """Why the workload's rollout has failed for good (a Deployment past its progress deadline)."""
    progressing = _condition(workload, "Progressing")
    if (
        progressing is not None
        and progressing.get("status") == "False"
        and progressing.get("reason") == "ProgressDeadlineExceeded"
    ):
        return f"rollout failed: {progressing.get('message') or 'progress deadline exceeded'}"
    return None


def rollout_incomplete(workload: Mapping[str, Any]) -> str | None:
    """Why the workload is not fully rolled out and available; None when it is.

    Deployment: observedGeneration caught up, every replica updated and available. StatefulSet: the
    same, with the current revision equal to the update revision. Kinds without a rollout (CronJob)
    are always complete.
    """
    kind = str(workload.get("kind", ""))
    if kind not in _SCALABLE_KINDS:
        return None
    metadata = workload.get("metadata") or {}
    status = workload.get("status") or {}
    generation = metadata.get("generation")
    observed = status.get("observedGeneration")
    if generation is not None and (observed is None or int(observed) < int(generation)):
        return f"the controller has not seen generation {generation} yet"
    failure = rollout_failure(workload)
    if failure:
        return failure
    replicas = int(_dig(workload, ("spec", "replicas")) or (1 if kind != "ReplicaSet" else 0))
    if kind == "ReplicaSet":
        available = int(status.get("availableReplicas") or 0)
        return None if available >= replicas else f"{available}/{replicas} replicas available"
    updated = int(status.get("updatedReplicas") or 0)
    ready_key = "availableReplicas" if kind == "Deployment" else "readyReplicas"
    ready = int(status.get(ready_key) or 0)
    total = int(status.get("replicas") or 0)
    if updated < replicas:
        return f"{updated}/{replicas} replicas updated"
    if total > replicas:
        return f"{total - replicas} old replica(s) still terminating"
    if ready < replicas:
        return f"{ready}/{replicas} replicas available"
    if (
        kind == "StatefulSet"
        and status.get("updateRevision")
        and (status.get("currentRevision") != status.get("updateRevision"))
    ):
        return "the StatefulSet's current revision is not the update revision yet"
    return None


def disrupts_pods(plan: ChangePlan, workload: Mapping[str, Any]) -> bool:
    """True when the change restarts or removes running pods (a template change or a scale-in of a
    Deployment, StatefulSet or ReplicaSet; a CronJob's next run simply starts with the new template)."""
    if workload.get("kind") not in _SCALABLE_KINDS:
        return False
    for path, value in plan.target.items():
        if path.startswith("hpa."):
            continue
        if path == REPLICAS_PATH:
            current = int(current_value(workload, REPLICAS_PATH) or "1")
            if value is not None and int(value) < current:
                return True
            continue
        return True
    return False


def label_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector (as a dict) against labels; an empty selector matches everything."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key"), expression.get("operator")
        values = set(expression.get("values") or [])
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


@dataclass(frozen=True)
class Availability:
    """What the availability gates look at, read from the live objects just before a change."""

    workload: Mapping[str, Any]
    pdbs: Sequence[Mapping[str, Any]] = ()
    #: Pods of this policy's other workloads with a change in flight (applied, not yet settled).
    pods_in_disruption: int = 0


def check_availability(plan: ChangePlan, facts: Availability, settings: EffectiveSettings) -> Verdict | None:
    """Ownership and availability gates for one planned change; None when the change may go."""
    workload = facts.workload
    managed = managed_by_parent(workload)
    if managed is not None:
        return Verdict(False, ApplyState.BLOCKED, managed)
    not_ready = rollout_incomplete(workload)
    if not_ready is not None:
        return Verdict(False, ApplyState.BLOCKED, f"not fully rolled out and healthy: {not_ready}")
    if not disrupts_pods(plan, workload):
        return None
    replicas = (
        int(current_value(workload, REPLICAS_PATH) or "1") if workload.get("kind") in _SCALABLE_KINDS else 1
    )
    if replicas < 2 and not settings.allow_single_replica:
        return Verdict(
            False,
            ApplyState.BLOCKED,
            f"replica floor: the change restarts the only pod of a {replicas}-replica workload "
            "(set spec.safety.allowSingleReplica to allow it)",
        )
    labels = _dig(pod_template(workload), ("metadata", "labels")) or {}
    for pdb in facts.pdbs:
        if not label_selector_matches((pdb.get("spec") or {}).get("selector"), labels):
            continue
        allowed = int((pdb.get("status") or {}).get("disruptionsAllowed") or 0)
        if allowed < 1:
            name = (pdb.get("metadata") or {}).get("name")
            return Verdict(False, ApplyState.BLOCKED, f"PodDisruptionBudget {name} allows no disruption now")
    if facts.pods_in_disruption + replicas > settings.max_pods_in_disruption:
        return Verdict(
            False,
            ApplyState.BLOCKED,
            f"disruption budget: {facts.pods_in_disruption} pod(s) of this policy's workloads are already "
            f"changing, {replicas} more would exceed maxPodsInDisruption {settings.max_pods_in_disruption}",
        )
    return None


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
    if not _CONTAINER_PATH.match(path):
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


def rollback_plan(
    record: ChangeRecord,
    workload: Mapping[str, Any],
    hpa: Mapping[str, Any] | None = None,
    workload_key: str = "",
) -> tuple[ChangePlan | None, tuple[str, ...]]:
    """The change that restores what a recorded change replaced, for the fields that still hold the
    values it set; and the fields someone else changed since (never overwritten)."""
    target: dict[str, str | None] = {}
    kept: list[str] = []
    for path, ours in record.target.items():
        if same_value(path, current_value(workload, path, hpa), ours):
            target[path] = record.previous.get(path)
        else:
            kept.append(path)
    if not target:
        return None, tuple(sorted(kept))
    plan = ChangePlan(
        change_id=change_id_for(workload_key, target, salt=f"rollback-of-{record.change_id}"),
        actions=record.actions,
        target=target,
        previous={path: record.target[path] for path in target},
    )
    return plan, tuple(sorted(kept))


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


def field_conflicts(workload: Mapping[str, Any], paths: Iterable[str]) -> dict[str, list[str]]:
    """Other field managers that own fields the change would set: manager -> paths.

    Any other manager is a conflict (a GitOps controller, Helm, an operator, client-side apply under
    any name such as Argo CD's `argocd-controller` or Flux's), except kubectl's one-shot imperative
    verbs, which hold no intent and revert nothing. The actuator reports conflicts instead of taking
    the fields.
    """
    kind = str(workload.get("kind", ""))
    owners: dict[str, list[str]] = {}
    for entry in (workload.get("metadata") or {}).get("managedFields") or []:
        manager = str(entry.get("manager", ""))
        if manager == FIELD_MANAGER:
            continue
        if manager in IMPERATIVE_MANAGERS and entry.get("operation") == "Update":
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
        + f" (owned there, so a change would be reverted or fought; let that manager cede the fields to "
        f"{FIELD_MANAGER!r}, e.g. Argo CD ignoreDifferences.managedFieldsManagers, or change the manifest)"
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
    """What the new revision's pods look like after a change: counts of each way a pod fails to start."""

    total: int = 0
    running: int = 0
    unschedulable: int = 0
    crash_looping: int = 0
    image_pull: int = 0
    init_failing: int = 0
    gated: int = 0
    restarts: int = 0
    messages: tuple[str, ...] = ()

    @property
    def failing(self) -> int:
        """Pods that will not start without a change (gated pods only after the grace period)."""
        return self.unschedulable + self.crash_looping + self.image_pull + self.init_failing


#: Waiting reasons of a container that will not start by itself.
_IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
_CRASH_REASONS = frozenset(
    {"CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError", "RunContainerError"}
)
#: Restarts of one container after which it counts as crash-looping.
CRASH_RESTARTS = 3


def pod_health(pods: Iterable[Mapping[str, Any]]) -> PodHealth:
    """Count pods that cannot be scheduled (or are held by scheduling gates), cannot pull their image,
    crash or fail in an init container; pods being deleted are left out."""
    counts = dict.fromkeys(
        ("total", "running", "unschedulable", "crash", "pull", "init", "gated", "restarts"), 0
    )
    messages: list[str] = []
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        counts["total"] += 1
        status = pod.get("status") or {}
        name = str((pod.get("metadata") or {}).get("name"))
        if status.get("phase") == "Running":
            counts["running"] += 1
        scheduled = _pod_condition(pod, "PodScheduled")
        if scheduled is not None and scheduled.get("status") == "False":
            if scheduled.get("reason") == "SchedulingGated":
                counts["gated"] += 1
                messages.append(f"{name}: scheduling gated")
            elif scheduled.get("reason") == "Unschedulable":
                counts["unschedulable"] += 1
                messages.append(f"{name}: {scheduled.get('message') or 'unschedulable'}")
        for section, key in (("initContainerStatuses", "init"), ("containerStatuses", "crash")):
            for container in status.get(section) or []:
                restarts = int(container.get("restartCount") or 0)
                counts["restarts"] += restarts
                waiting = (container.get("state") or {}).get("waiting") or {}
                reason = str(waiting.get("reason") or "")
                if reason in _IMAGE_PULL_REASONS:
                    counts["pull"] += 1
                    messages.append(f"{name}: {reason} {waiting.get('message') or ''}".strip())
                elif reason in _CRASH_REASONS or restarts >= CRASH_RESTARTS:
                    counts[key] += 1
                    messages.append(f"{name}: {reason or f'{restarts} restarts'}")
    return PodHealth(
        total=counts["total"], running=counts["running"], unschedulable=counts["unschedulable"],
        crash_looping=counts["crash"], image_pull=counts["pull"], init_failing=counts["init"],
        gated=counts["gated"], restarts=counts["restarts"], messages=tuple(messages),
    )  # fmt: skip


def _pod_condition(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return _condition(pod, kind)


def new_revision_pods(
    workload: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    replica_sets: Iterable[Mapping[str, Any]] = (),
) -> list[Mapping[str, Any]]:
    """The pods of the workload's newest revision only (old ReplicaSet pods are never measured).

    Deployment: the pod-template-hash of the ReplicaSet whose revision annotation equals the
    Deployment's. StatefulSet: controller-revision-hash equal to status.updateRevision. Other kinds:
    every pod. An unknown revision yields no pods (no evidence rather than the wrong evidence).
    """
    kind = str(workload.get("kind", ""))
    listed = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    if kind == "StatefulSet":
        revision = (workload.get("status") or {}).get("updateRevision")
        return [p for p in listed if revision and _labels(p).get("controller-revision-hash") == revision]
    if kind == "Deployment":
        uid = (workload.get("metadata") or {}).get("uid")
        revision = ((workload.get("metadata") or {}).get("annotations") or {}).get(REVISION_ANNOTATION)
        hashes = {
            _labels(rs).get("pod-template-hash")
            for rs in replica_sets
            if revision is not None
            and ((rs.get("metadata") or {}).get("annotations") or {}).get(REVISION_ANNOTATION) == revision
            and any(ref.get("uid") == uid for ref in (rs.get("metadata") or {}).get("ownerReferences") or [])
        }
        hashes.discard(None)
        return [p for p in listed if _labels(p).get("pod-template-hash") in hashes]
    return listed


REVISION_ANNOTATION = "deployment.kubernetes.io/revision"


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def regression(
    before: Mapping[str, float],
    after: Mapping[str, float],
    health: PodHealth,
    actions: Iterable[ActionType] = (),
) -> str | None:
    """Why the change made things worse, or None. Pods that do not start always count; a GPU busy
    drop counts except after adding replicas (load spread over more pods is the point)."""
    if health.failing:
        detail = f": {health.messages[0]}" if health.messages else ""
        return f"{health.failing} new pod(s) cannot start{detail}"
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


class Outcome(StrEnum):
    """The verdict of one verification look."""

    WAIT = "Wait"
    ROLLED_OUT = "RolledOut"
    VERIFIED = "Verified"
    INCONCLUSIVE = "Inconclusive"
    REGRESSED = "Regressed"


#: Pods held by scheduling gates this long after the change count as failing.
GATED_GRACE = timedelta(minutes=5)
#: The rollout must complete within this time (or `verifyFor`, when longer) after the change.
ROLLOUT_DEADLINE = timedelta(minutes=10)


@dataclass(frozen=True)
class VerificationInput:
    """What one verification look sees."""

    now: datetime
    applied_at: datetime
    rolled_out_at: datetime | None
    verify_for: timedelta
    rollout: str | None  # why the rollout is not complete; None when it is
    failure: str | None  # a rollout failure (progress deadline exceeded)
    health: PodHealth  # of the new revision's pods
    before: Mapping[str, float]
    after: Mapping[str, float]  # figures of the new revision's pods since the rollout completed
    actions: tuple[ActionType, ...] = ()


def verification_outcome(look: VerificationInput) -> tuple[Outcome, str]:
    """Wait for the rollout, then for `verifyFor` of the new pods; never Verified without figures.

    Pods that cannot start and failed rollouts are regressions at once, not after `verifyFor`.
    """
    problem = regression({}, {}, look.health)
    if problem is not None:
        return Outcome.REGRESSED, problem
    if look.health.gated and look.now - look.applied_at >= GATED_GRACE:
        return Outcome.REGRESSED, f"{look.health.gated} new pod(s) still held by scheduling gates"
    if look.failure is not None:
        return Outcome.REGRESSED, look.failure
    if look.rolled_out_at is None:
        if look.rollout is None:
            return Outcome.ROLLED_OUT, "the new revision is fully rolled out"
        if look.now - look.applied_at > max(ROLLOUT_DEADLINE, look.verify_for):
            return (
                Outcome.INCONCLUSIVE,
                f"rollout not complete after {_human(look.now - look.applied_at)}: {look.rollout}",
            )
        return Outcome.WAIT, f"waiting for the rollout: {look.rollout}"
    if look.now < look.rolled_out_at + look.verify_for:
        return Outcome.WAIT, "measuring the new revision's pods"
    if not look.after:
        return Outcome.INCONCLUSIVE, "no figures from the new revision's pods: cannot verify"
    if not any(key in look.before for key in look.after):
        return Outcome.INCONCLUSIVE, "no figures comparable with before the change: cannot verify"
    problem = regression(look.before, look.after, look.health, look.actions)
    if problem is not None:
        return Outcome.REGRESSED, problem
    return Outcome.VERIFIED, improvement_summary(look.before, look.after)


def improvement_summary(before: Mapping[str, float], after: Mapping[str, float]) -> str:
    """`GPU busy p95 35%->81%, CPU saturation p95 98%->60%` for the Verified reason."""
    parts = []
    if BUSY_KEY in before and BUSY_KEY in after:
        parts.append(f"GPU busy p95 {before[BUSY_KEY]:.0%}->{after[BUSY_KEY]:.0%}")
    if CPU_SATURATION_KEY in before and CPU_SATURATION_KEY in after:
        parts.append(f"CPU saturation p95 {before[CPU_SATURATION_KEY]:.0%}->{after[CPU_SATURATION_KEY]:.0%}")
    return ", ".join(parts) or "no comparable figures"
