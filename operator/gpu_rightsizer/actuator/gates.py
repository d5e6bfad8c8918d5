"""The actuator's gates (pure): whether a change may start now, and whether the live workload can take it.

- `check_gates`: only under an `Apply` policy, never on stale or insufficient data or with a health
  finding, inside maintenance windows, outside the per-workload cooldown, within the per-cluster and
  per-namespace hourly rate limits;
- `check_availability`: controller owners, rollout health, replica floor, PDBs, disruption budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gpu_rightsizer.actuator.plan import (
    REPLICAS_PATH,
    ChangePlan,
    current_value,
    dig,
    pod_template,
)
from gpu_rightsizer.logic.owners import managed_by_parent
from gpu_rightsizer.logic.policy import EffectiveSettings, in_maintenance_window
from gpu_rightsizer.model.codes import HEALTH_CODES, ApplyState, DiagnosisCode, PolicyMode
from gpu_rightsizer.model.kinds import KINDS, Rollout, is_scalable

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
        advice = ApplyState.SKIPPED if settings.mode == PolicyMode.OFF else ApplyState.ADVISED
        return Verdict(False, advice, where)
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
            f"data is stale: the newest data is {human_duration(age)} old (limit {human_duration(ctx.staleness_limit)})",
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


def human_duration(delta: timedelta) -> str:
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


def workload_condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return None


def rollout_failure(workload: Mapping[str, Any]) -> str | None:
    """Why the workload's rollout has failed for good (a Deployment past its progress deadline)."""
    progressing = workload_condition(workload, "Progressing")
    if (
        progressing is not None
        and progressing.get("status") == "False"
        and progressing.get("reason") == "ProgressDeadlineExceeded"
    ):
        return f"rollout failed: {progressing.get('message') or 'progress deadline exceeded'}"
    return None


def rollout_incomplete(workload: Mapping[str, Any]) -> str | None:
    """Why the workload is not fully rolled out and available; None when it is.

    By the kind's rollout rule (model.kinds): Deployment, observedGeneration caught up, every replica
    updated and serving; StatefulSet, the same, with the current revision equal to the update
    revision; ReplicaSet, enough replicas available. Kinds without a rollout (CronJob) are always
    complete.
    """
    row = KINDS.get(str(workload.get("kind", "")))
    if row is None or row.rollout == Rollout.NONE:
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
    if row.rollout == Rollout.REPLICASET:
        replicas = int(dig(workload, ("spec", "replicas")) or 0)
        available = int(status.get("availableReplicas") or 0)
        return None if available >= replicas else f"{available}/{replicas} replicas available"
    replicas = int(dig(workload, ("spec", "replicas")) or 1)
    updated = int(status.get("updatedReplicas") or 0)
    ready = int(status.get(row.ready_status) or 0)
    total = int(status.get("replicas") or 0)
    if updated < replicas:
        return f"{updated}/{replicas} replicas updated"
    if total > replicas:
        return f"{total - replicas} old replica(s) still terminating"
    if ready < replicas:
        return f"{ready}/{replicas} replicas available"
    if (
        row.rollout == Rollout.STATEFULSET
        and status.get("updateRevision")
        and (status.get("currentRevision") != status.get("updateRevision"))
    ):
        return f"the {row.kind}'s current revision is not the update revision yet"
    return None


def disrupts_pods(plan: ChangePlan, workload: Mapping[str, Any]) -> bool:
    """True when the change restarts or removes running pods (a template change or a scale-in of a
    Deployment, StatefulSet or ReplicaSet; a CronJob's next run simply starts with the new template)."""
    if not is_scalable(str(workload.get("kind", ""))):
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
    spec = workload.get("spec") or {}
    kind = str(workload.get("kind", ""))
    row = KINDS.get(kind)
    if row is not None and row.pausable and spec.get("paused"):
        return Verdict(
            False, ApplyState.BLOCKED,
            f"the {kind} is paused (spec.paused): a change would not roll out until someone resumes it",
        )  # fmt: skip
    not_ready = rollout_incomplete(workload)
    if not_ready is not None:
        return Verdict(False, ApplyState.BLOCKED, f"not fully rolled out and healthy: {not_ready}")
    if not disrupts_pods(plan, workload):
        return None
    recreate = (
        row is not None and row.recreate_strategy and (spec.get("strategy") or {}).get("type") == "Recreate"
    )
    if recreate and not settings.allow_recreate:
        return Verdict(
            False, ApplyState.BLOCKED,
            "strategy Recreate stops every replica at once, whatever the PodDisruptionBudget allows "
            "(set spec.safety.allowRecreate to allow it)",
        )  # fmt: skip
    replicas = int(current_value(workload, REPLICAS_PATH) or "1") if is_scalable(kind) else 1
    # a rolling update restarts one pod at a time
    labels = dig(pod_template(workload), ("metadata", "labels")) or {}
    return disruption_gates(replicas, [labels], facts, settings)


def disruption_gates(
    replicas: int, at_once: Sequence[Mapping[str, str]], facts: Availability, settings: EffectiveSettings
) -> Verdict | None:
    """The gates of a change that restarts pods of a `replicas`-pod workload: the replica floor, every
    PodDisruptionBudget over the pods restarted at once (`at_once`: their labels) allowing that many
    disruptions now, and the policy's disruption budget."""
    if replicas < 2 and not settings.allow_single_replica:
        return Verdict(
            False,
            ApplyState.BLOCKED,
            f"replica floor: the change restarts the only pod of a {replicas}-replica workload "
            "(set spec.safety.allowSingleReplica to allow it)",
        )
    for pdb in facts.pdbs:
        selector = (pdb.get("spec") or {}).get("selector")
        covered = sum(1 for labels in at_once if label_selector_matches(selector, labels))
        allowed = int((pdb.get("status") or {}).get("disruptionsAllowed") or 0)
        if covered and allowed < covered:
            name = (pdb.get("metadata") or {}).get("name")
            what = (
                "no disruption" if allowed < 1 else f"{allowed} disruption(s), {covered} pods restart at once"
            )
            return Verdict(False, ApplyState.BLOCKED, f"PodDisruptionBudget {name} allows {what} now")
    if facts.pods_in_disruption + replicas > settings.max_pods_in_disruption:
        return Verdict(
            False,
            ApplyState.BLOCKED,
            f"disruption budget: {facts.pods_in_disruption} pod(s) of this policy's workloads are already "
            f"changing, {replicas} more would exceed maxPodsInDisruption {settings.max_pods_in_disruption}",
        )
    return None
