"""Verification (pure): rollout first, then only the new revision's pods; no data is Inconclusive;
after `verifyFor`, the same signals compared with before the change (`regression`)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from gpu_rightsizer.actuator.fields import FIELD_MANAGER
from gpu_rightsizer.actuator.gates import human_duration, workload_condition
from gpu_rightsizer.actuator.plan import ChangePlan, pod_template
from gpu_rightsizer.actuator.record import change_landed
from gpu_rightsizer.logic.workloads import pod_cpu_cores
from gpu_rightsizer.model.codes import ActionType
from gpu_rightsizer.model.kinds import KINDS, Rollout
from gpu_rightsizer.model.observation import Signal, WorkloadWindow

#: GPU busy may drop by this share of its value before the change counts as a regression...
REGRESSION_BUSY_DROP_RATIO = 0.25
#: ...and by at least this much in absolute terms (noise on low values is not a regression).
REGRESSION_BUSY_DROP_ABSOLUTE = 0.05
#: CPU saturation may rise by this much (absolute, usage / limit) before it counts as a regression.
REGRESSION_CPU_RISE = 0.25

# --------------------------------------------------------------------------------------------------
# Verification
# --------------------------------------------------------------------------------------------------

BUSY_KEY = "gpuBusyP95"
CPU_SATURATION_KEY = "cpuSaturationP95"


def running_cpu_cores(pod: Mapping[str, Any]) -> float | None:
    """The CPU a pod runs with, summed over every container as its allocation counts it (limits, else
    requests: `workloads.pod_cpu_cores`); each container as the kubelet reports it applied
    (`status.containerStatuses[].resources`), else as the pod's spec sets it.

    What verification proves is that the pods run with the recorded target and how they fare at it.
    A pod's CPU use is the sum over its containers, and the baseline divides it by the sum of their
    limits; over the changed container's limit alone, a pod with a sidecar would read more saturated
    after the change than it is (a good change rolled back as a regression). The kubelet's report,
    not the spec: after an in-place resize the spec holds the target before the pod runs with it."""
    reported = {
        status.get("name"): status.get("resources")
        for status in (pod.get("status") or {}).get("containerStatuses") or []
        if status.get("resources")
    }
    containers = [
        {**container, "resources": reported.get(container.get("name")) or container.get("resources") or {}}
        for container in (pod.get("spec") or {}).get("containers") or []
    ]
    return pod_cpu_cores({"containers": containers})


def signals_of_pods(window: WorkloadWindow, pods: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """The figures of these pods after a change (both paths: new revision, resized in place), each
    pod's CPU use against the CPU it runs with (`running_cpu_cores`)."""
    cores = {str((pod.get("metadata") or {}).get("name")): running_cpu_cores(pod) for pod in pods}
    return signals_from_window(window, list(cores), cores)


def signals_from_window(
    window: WorkloadWindow,
    pods: Iterable[str] | None = None,
    cpu_by_pod: Mapping[str, float | None] | None = None,
) -> dict[str, float]:
    """The figures compared before and after a change: GPU busy p95 (worst GPU) and CPU saturation
    p95 (usage over limit, worst pod); only the given pods when `pods` is set. Missing figures are
    left out rather than guessed. `cpu_by_pod` (pod name -> cores) replaces the window's limit:
    right after a CPU change the window still holds the old pods' limit, and the new pods' usage over
    the old limit reads as a rise in saturation (4 cores used over a 1-core limit: 392 %); a pod it
    gives no figure has no saturation figure."""
    wanted = set(pods) if pods is not None else None
    busy: list[float] = []
    saturation: list[float] = []
    default = window.allocation.cpu_limit_cores or window.allocation.cpu_request_cores
    for pod in window.pods:
        if wanted is not None and pod.name not in wanted:
            continue
        limit = default if cpu_by_pod is None else cpu_by_pod.get(pod.name)
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
    return workload_condition(pod, kind)


def new_revision_pods(
    workload: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    replica_sets: Iterable[Mapping[str, Any]] = (),
) -> list[Mapping[str, Any]]:
    """The pods of the workload's newest revision only (old ReplicaSet pods are never measured).

    By the kind's rollout rule (model.kinds). Deployment: the revision label of the ReplicaSet whose
    revision annotation equals the Deployment's. StatefulSet: the revision label equal to
    status.updateRevision. Other kinds: every pod. An unknown revision yields no pods (no evidence
    rather than the wrong evidence).
    """
    row = KINDS.get(str(workload.get("kind", "")))
    listed = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    if row is None or row.revision_label is None:
        return listed
    label = row.revision_label
    if row.rollout == Rollout.STATEFULSET:
        revision = (workload.get("status") or {}).get("updateRevision")
        return [p for p in listed if revision and _labels(p).get(label) == revision]
    if row.rollout == Rollout.DEPLOYMENT:
        uid = (workload.get("metadata") or {}).get("uid")
        revision = ((workload.get("metadata") or {}).get("annotations") or {}).get(REVISION_ANNOTATION)
        hashes = {
            _labels(rs).get(label)
            for rs in replica_sets
            if revision is not None
            and ((rs.get("metadata") or {}).get("annotations") or {}).get(REVISION_ANNOTATION) == revision
            and any(ref.get("uid") == uid for ref in (rs.get("metadata") or {}).get("ownerReferences") or [])
        }
        hashes.discard(None)
        return [p for p in listed if _labels(p).get(label) in hashes]
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
                f"rollout not complete after {human_duration(look.now - look.applied_at)}: {look.rollout}",
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


# --------------------------------------------------------------------------------------------------
# A bad answer is not a verdict; our change is not blamed for someone else's revision
# --------------------------------------------------------------------------------------------------

#: Verification reads (one per step, so one per cycle) that may give no figures in a row before
#: "no figures" is final: one failed, empty, partial or NaN answer is a retry, not an Inconclusive.
FAILED_READS_LIMIT = 3


def reads_exhausted(failed_reads: int, now: datetime, rolled_out_at: datetime, verify_for: timedelta) -> bool:
    """True once a lack of figures is final: `FAILED_READS_LIMIT` failed reads in a row, and a grace
    period of one more `verifyFor` after the measuring window ended."""
    return failed_reads >= FAILED_READS_LIMIT and now >= rolled_out_at + 2 * verify_for


def template_fingerprint(workload: Mapping[str, Any]) -> str:
    """A digest of the pod template: equal while nobody but the controller changed it since."""
    text = json.dumps(pod_template(workload), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def landed_by_us(
    workload: Mapping[str, Any],
    plan: ChangePlan,
    hpa: Mapping[str, Any] | None,
    generation_at_intent: int | None,
) -> bool:
    """Our patch is on the workload: its record (annotation) and values, a generation past the one the
    intent saw (the revision our patch made), and our field manager among the writers wherever the
    server reports managed fields."""
    if not change_landed(workload, plan, hpa):
        return False
    metadata = workload.get("metadata") or {}
    generation = metadata.get("generation")
    if (
        generation_at_intent is not None
        and generation is not None
        and int(generation) <= generation_at_intent
    ):
        return False
    managers = {entry.get("manager") for entry in metadata.get("managedFields") or []}
    return not managers or FIELD_MANAGER in managers
