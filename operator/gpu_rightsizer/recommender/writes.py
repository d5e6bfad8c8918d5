"""The recommender's status writes: what a status says, when it is worth writing, and the
recommendations it makes again when they are gone. Never the apply state (`adapters.store`)."""

from __future__ import annotations

import logging
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from gpu_rightsizer.adapters.kube import KubeAdapter, ResolvedWorkload
from gpu_rightsizer.adapters.owners import read_workload
from gpu_rightsizer.adapters.store import RecommendationStore, StoredRecommendation, status_body
from gpu_rightsizer.config import OperatorConfig
from gpu_rightsizer.logic.figures import WorkloadFigures, summarise
from gpu_rightsizer.logic.policy import (
    EffectiveSettings,
)
from gpu_rightsizer.logic.status import (
    analysed_status,
    material_difference,
    merge_conditions,
    metrics_condition,
    waiting_status,
)
from gpu_rightsizer.logic.workloads import allocation_from_pod_spec
from gpu_rightsizer.model.codes import DiagnosisCode
from gpu_rightsizer.model.crd import (
    MAX_WINDOW_WARNINGS,
    Baseline,
    Condition,
    GPURecommendationStatus,
)
from gpu_rightsizer.model.k8s import merge_patched, parse_time
from gpu_rightsizer.model.observation import WorkloadRef, WorkloadWindow
from gpu_rightsizer.model.result import Analysis
from gpu_rightsizer.runtime import metrics
from gpu_rightsizer.runtime.context import KnownWorkload, OperatorContext

LOG = logging.getLogger(__name__)


#: A status that says nothing new (`logic.status.material_difference`) is still rewritten once its stored
#: window is this share of the governing policy's `maxStaleness` old (15 min by default) while an Apply
#: policy governs the workload, so the actuator's freshness gate, which reads the stored window's end,
#: never finds a status stale because a write was skipped: in the same cycle the stored window is
#: younger than this share, and an actuator in another process, one cycle behind at most, still finds
#: it younger than maxStaleness while a cycle (interval and run) is shorter than the rest. Without an
#: Apply policy nothing acts on the stored window's age; a policy that becomes Apply finds the status
#: stale (its gate refuses) until the next cycle, which refreshes it under this share.
REFRESH_STALENESS_SHARE = 0.5


#: ... and at the latest after this long whatever maxStaleness says (it may be up to 24 h).
REFRESH_AT_MOST = timedelta(hours=1)


#: ... and before the next window stops overlapping the stored one, so the GPU-memory look-back the
#: stored status carries continues instead of counting again (`logic.engine.continued_lookback`): the
#: stored window may grow this share of the observation window old, and at least
#: REFRESH_WINDOW_MARGIN_INTERVALS short of the whole window (the cycle that refreshes comes up to an
#: interval and a cycle's run after the period ends), but never less than half the window.
REFRESH_WINDOW_SHARE = 0.75
REFRESH_WINDOW_MARGIN_INTERVALS = 3


#: Each refresh period is shortened by up to this share (drawn anew after each write from the workload
#: and its stored window), so statuses first written in one cycle are not all refreshed in one later
#: cycle; never below 1.5 intervals (a shorter period would rewrite every cycle).
REFRESH_SPREAD = 0.5


def refresh_period(
    interval_seconds: float,
    max_staleness: timedelta,
    spread_key: str = "",
    window_seconds: float | None = None,
    *,
    acted_on: bool = True,
) -> timedelta:
    """How old a stored window may grow before a status that says nothing new is rewritten anyway:
    at most REFRESH_AT_MOST; with `acted_on` (an Apply policy governs the workload) at most
    REFRESH_STALENESS_SHARE of `max_staleness`, so the actuator's freshness gate holds whatever is
    drawn; and short of the observation window `window_seconds` (`window_overlap_limit`), so the
    stored window always overlaps the next one. Shortened by up to REFRESH_SPREAD as `spread_key`
    draws, but not below 1.5 intervals."""
    longest = REFRESH_AT_MOST
    if acted_on:
        longest = min(longest, max_staleness * REFRESH_STALENESS_SHARE)
    if window_seconds is not None:
        longest = min(longest, window_overlap_limit(window_seconds, interval_seconds))
    draw = (zlib.crc32(spread_key.encode()) % 1000) / 1000
    shortest = min(longest, timedelta(seconds=1.5 * interval_seconds))
    return max(longest * (1 - REFRESH_SPREAD * draw), shortest)


def window_overlap_limit(window_seconds: float, interval_seconds: float) -> timedelta:
    """The longest refresh period that keeps the next window overlapping the stored one:
    REFRESH_WINDOW_SHARE of the window, and REFRESH_WINDOW_MARGIN_INTERVALS intervals short of it,
    but not below half the window."""
    limit = min(
        window_seconds * REFRESH_WINDOW_SHARE,
        window_seconds - REFRESH_WINDOW_MARGIN_INTERVALS * interval_seconds,
    )
    return timedelta(seconds=max(limit, window_seconds / 2))


@dataclass(frozen=True)
class StatusWrite:
    """Why a status was written: `reason` as `write_reason` says, and for "changed" the first path
    that says something new (`logic.status.material_difference`), so a cycle can say what moved."""

    reason: str
    changed: str | None = None


def status_write(
    old_status: Mapping[str, Any], patch: Mapping[str, Any], now: datetime, refresh_after: timedelta
) -> StatusWrite | None:
    """Why the patch is worth writing: "new" (no analysed window stored yet), "changed" (it says
    something new: `logic.status.material_difference`, window times left out, figures within a
    tolerance), "refresh" (the stored window ended `refresh_after` ago or more, so readers and the
    actuator's freshness gate still see a recent window); None when it is not."""
    stored_end = parse_time((old_status.get("window") or {}).get("end"))
    if stored_end is None:
        return StatusWrite("new")
    changed = material_difference(dict(old_status), merge_patched(old_status, patch))
    if changed is not None:
        return StatusWrite("changed", changed)
    return StatusWrite("refresh") if now - stored_end >= refresh_after else None


def write_reason(
    old_status: Mapping[str, Any], patch: Mapping[str, Any], now: datetime, refresh_after: timedelta
) -> str | None:
    """`status_write`'s reason alone ("new", "changed", "refresh"; None: not worth writing)."""
    write = status_write(old_status, patch, now, refresh_after)
    return None if write is None else write.reason


def status_unchanged(
    old_status: Mapping[str, Any], patch: Mapping[str, Any], now: datetime, refresh_after: timedelta
) -> bool:
    """True when the patch need not be written (`write_reason` has none)."""
    return write_reason(old_status, patch, now, refresh_after) is None


def write_recommendation(
    store: RecommendationStore,
    kube: KubeAdapter,
    uid: str,
    stored: StoredRecommendation,
    analysis: Analysis,
    window: WorkloadWindow,
    settings: EffectiveSettings,
    now: datetime,
    *,
    refresh_after: timedelta | None = None,
    workload_generation: int | None = None,
    figures: WorkloadFigures | None = None,
) -> StatusWrite | None:
    """Patch the recommendation's status; post an Event on the workload when the diagnosis changes.

    `status.apply` belongs to the actuator, so the recommender never writes it (`store.patch_status`
    leaves it out). `workloadGeneration` publishes which spec the analysis saw, so the actuator acts
    only on a recommendation made for the workload as it is. The window's warnings and its baseline
    figures are published for people (the actuator measures its own baseline). With `refresh_after`,
    a status that would say nothing new (`write_reason`: its figures moved within a tolerance, its
    window slid) is left as stored while that window is younger than `refresh_after`. Returns why the
    status was written ("changed" without `refresh_after`), None when it was not.
    """
    ref = stored.ref
    old_status = stored.status_json()
    status = analysed_status(
        analysis,
        window.allocation,
        window_start=window.start,
        window_end=window.end,
        workload=ref,
        now=now,
        generation=stored.generation,
    )
    status = with_window_facts(status, window, figures)
    if workload_generation is not None:
        status.workload_generation = workload_generation
    fresh = [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in status.conditions]
    old_conditions = list(old_status.get("conditions") or [])
    status.conditions = [Condition.model_validate(c) for c in merge_conditions(old_conditions, fresh)]
    body = status_body(status)
    if refresh_after is None:
        written: StatusWrite | None = StatusWrite("changed")
    else:
        written = status_write(old_status, body, now, refresh_after)
    if written is not None:
        store.patch_status(ref, status)
        metrics.STATUS_WRITES.labels(written.reason).inc()
    before = stored.status.diagnosis.primary.value if stored.status.diagnosis else None
    if before != analysis.primary.value and analysis.primary != DiagnosisCode.INSUFFICIENT_DATA:
        warning = analysis.primary not in (DiagnosisCode.HEALTHY,)
        kube.post_event(
            ref,
            uid,
            "DiagnosisChanged",
            f"Diagnosis changed from {before or 'none'} to {analysis.primary.value}: {analysis.summary}",
            warning=warning,
        )
    return written


def with_window_facts(
    status: GPURecommendationStatus, window: WorkloadWindow, figures: WorkloadFigures | None = None
) -> GPURecommendationStatus:
    """The status with its window's warnings (the first ones, sorted) and baseline figures
    (`figures`: `summarise(window)` when the caller has it)."""
    figures = figures if figures is not None else summarise(window)
    if status.window is not None:
        status.window.warnings = sorted(set(window.warnings))[:MAX_WINDOW_WARNINGS]
    status.baseline = Baseline(gpu_busy_p95=figures.busy_p95_max, cpu_saturation_p95=figures.cpu_saturation)
    return status


def ensure_recommendation(
    store: RecommendationStore, cfg: OperatorConfig, known: KnownWorkload
) -> StoredRecommendation | None:
    """The workload's recommendation, created with a first (waiting) status when there is none."""
    workload = known.workload
    stored = store.ensure(workload)
    if stored is None or stored.has_status:
        return stored
    replicas = int(((workload.obj.get("spec") or {}).get("replicas")) or 1)
    allocation = allocation_from_pod_spec(dict(known.pod_spec), replicas=replicas)
    reason = (
        "Waiting for the first observation window of metrics"
        if cfg.prometheus_url
        else "No metrics source configured (--prometheus-url): cannot analyse yet"
    )
    status = waiting_status(
        allocation, reason, workload=workload.ref, now=datetime.now(UTC), generation=stored.generation
    )
    store.patch_status(workload.ref, status)  # status.apply is the actuator's alone
    return stored


def restore_missing(
    ctx: OperatorContext, store: RecommendationStore, listed: list[StoredRecommendation]
) -> list[StoredRecommendation]:
    """Make again the recommendations of known GPU workloads that are gone (someone deleted them, or
    the workload was recreated and the old one was collected with it), so they are analysed in this
    cycle; workloads that are gone themselves are forgotten."""
    present = {stored.ref.key for stored in listed}
    with ctx.lock:
        missing = [known for key, known in ctx.known.items() if key not in present]
    made = []
    for known in missing:
        ref = known.workload.ref
        try:
            current = read_workload(ctx.kube, ref.api_version, ref.kind, ref.namespace, ref.name)
            if current is None:
                with ctx.lock:
                    ctx.known.pop(ref.key, None)
                continue
            uid = str((current.get("metadata") or {}).get("uid") or known.workload.uid)
            fresh = KnownWorkload.kept(ResolvedWorkload(ref=ref, uid=uid, obj=current), known.pod_spec)
            stored = ensure_recommendation(store, ctx.config, fresh)
        except Exception:
            metrics.ERRORS.labels("kubernetes").inc()
            LOG.exception("could not make the recommendation of %s again", ref.key)
            continue
        with ctx.lock:
            ctx.known[ref.key] = fresh
        if stored is not None:
            LOG.info("made the recommendation of %s again (it was gone)", ref.key)
            made.append(store.get(ref) or stored)
    return made


def remove_recommendation(
    store: RecommendationStore, ctx: OperatorContext, ref: WorkloadRef, why: str
) -> None:
    """Delete a recommendation the workload no longer wants (opt-out annotation or an Off policy)."""
    if store.delete(ref):
        LOG.info("removed the recommendation of %s: %s", ref.key, why)
    with ctx.lock:
        ctx.known.pop(ref.key, None)


def say_metrics_failed(
    store: RecommendationStore, stored: StoredRecommendation, error: str, now: datetime
) -> None:
    """Set `MetricsAvailable=False` on a recommendation whose batch failed; the analysis stays as it was."""
    fresh = metrics_condition(error, now, stored.generation)
    previous = next((c for c in stored.status.conditions if c.type == fresh.type), None)
    if previous is not None and previous.status == "False" and previous.message == fresh.message:
        return
    old = [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in stored.status.conditions]
    new = fresh.model_dump(mode="json", by_alias=True, exclude_none=True)
    merged = [Condition.model_validate(c) for c in merge_conditions(old, [new])]
    try:
        store.patch_status(stored.ref, GPURecommendationStatus(conditions=merged), fields={"conditions"})
    except Exception:
        metrics.ERRORS.labels("kubernetes").inc()
        LOG.exception("could not mark the metrics of %s as unavailable", stored.ref.key)


def window_end_of(stored: StoredRecommendation) -> str:
    """The stored `status.window.end` as the API server holds it ("" when none)."""
    return str((stored.status_json().get("window") or {}).get("end") or "")
