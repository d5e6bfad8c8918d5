"""The periodic analysis cycle: one batch of metric queries for all workloads, then one status patch each.

Queries are aggregated server-side for the whole cluster per cycle (SPEC §4), so their number does
not grow with the number of workloads. Workloads and HPAs are listed once per cycle too, and a status
is only written when it says something new (or its window grows old), by a few threads at a time. The
same cycle drives the actuator (when this process has that role and holds the lease), so both act on
one analysis.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
import zlib
from collections import Counter as Tally
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client, config

from gpu_rightsizer.actuator import step as changes
from gpu_rightsizer.adapters.capacity import load_capacity
from gpu_rightsizer.adapters.kube import KubeAdapter
from gpu_rightsizer.adapters.owners import api_parent_lookup, read_workload
from gpu_rightsizer.adapters.source import (
    ExtraOwners,
    KeepsWindows,
    Scope,
    WindowRead,
    WindowSource,
)
from gpu_rightsizer.config import OperatorConfig
from gpu_rightsizer.handlers import metrics
from gpu_rightsizer.handlers.context import OperatorContext
from gpu_rightsizer.logic.capacity import ClusterCapacity, analyze_within, sharing_for
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.policy import (
    EffectiveSettings,
    count_governed,
    find_overlaps,
    policy_problems,
    readable_policies,
    settings_for_workload,
)
from gpu_rightsizer.logic.sharing import observe_sharing, with_notes
from gpu_rightsizer.logic.status import (
    analysed_status,
    materially_same,
    merge_conditions,
    metrics_condition,
)
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.logic.workloads import target_of
from gpu_rightsizer.model.codes import DiagnosisCode, SharingStrategy
from gpu_rightsizer.model.crd import GPURightsizingPolicy
from gpu_rightsizer.model.observation import HPAInfo, WorkloadRef, WorkloadWindow
from gpu_rightsizer.model.result import Analysis

LOG = logging.getLogger(__name__)

#: Kinds an HPA can scale among the workloads we analyse.
SCALABLE_KINDS = ("Deployment", "StatefulSet", "ReplicaSet")
#: Kinds listed once per cycle instead of read one by one (bare Pods are read: a LIST of every pod
#: would cost more than it saves).
LISTED_KINDS = ("Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "Job", "CronJob")
#: A status that says nothing new (`logic.status.materially_same`) is still rewritten once its stored
#: window is this share of the governing policy's `maxStaleness` old (15 min by default), so the
#: actuator's freshness gate, which reads the stored window's end, never finds a status stale because
#: a write was skipped: in the same cycle the stored window is younger than this share, and an
#: actuator in another process, one cycle behind at most, still finds it younger than maxStaleness
#: while a cycle (interval and run) is shorter than the rest.
REFRESH_STALENESS_SHARE = 0.5
#: ... and at the latest after this long whatever maxStaleness says (it may be up to 24 h).
REFRESH_AT_MOST = timedelta(hours=1)
#: Each refresh period is shortened by up to this share (drawn anew after each write from the workload
#: and its stored window), so statuses first written in one cycle are not all refreshed in one later
#: cycle; never below 1.5 intervals (a shorter period would rewrite every cycle).
REFRESH_SPREAD = 0.5
#: Pause between cycles while a window is being backfilled (a cold start reads back to back).
BACKFILL_PAUSE_SECONDS = 5.0
#: Threads that analyse and write statuses in parallel (the client's connection pool is thread-safe).
WRITERS = 4


def api_client() -> client.ApiClient:
    """A Kubernetes client from the in-cluster service account, else from KUBECONFIG."""
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


def capacity_from_metrics(source: WindowSource | None, end: datetime) -> Callable[[], ClusterCapacity] | None:
    """Node capacity from the metrics, for when the API server's nodes cannot be listed."""
    if source is None:
        return None
    return lambda: source.read_capacity(end)


def load_policies(kube: KubeAdapter) -> list[GPURightsizingPolicy]:
    """Every policy the operator can read; unreadable ones are logged and left out (never guessed)."""
    policies, problems = readable_policies(kube.list_policies())
    for problem in problems:
        metrics.ERRORS.labels("policy").inc()
        LOG.warning("%s", problem)
    return policies


def ref_of(recommendation: Mapping[str, Any]) -> WorkloadRef:
    """The workload a GPURecommendation targets."""
    return target_of(recommendation)


def engine_settings(settings: EffectiveSettings, window_seconds: float | None = None) -> EngineSettings:
    """Engine thresholds with the governing policy's overrides (minSamples included).

    The operator's `--window` is an explicit choice of the person running it, so it also lowers the
    engine's minimum window when shorter (tests and demos use minutes, not hours).
    """
    overrides: dict[str, object] = dict(settings.threshold_overrides)
    if window_seconds is not None:
        defaults = EngineSettings()
        overrides["windowSeconds"] = window_seconds
        overrides["minWindowSeconds"] = min(defaults.min_window_seconds, window_seconds * 0.9)
    if settings.policy is not None:
        overrides["minSamples"] = settings.min_samples
    try:
        key = json.dumps(overrides, sort_keys=True)
    except (TypeError, ValueError):  # not plain JSON: validated without the cache
        return EngineSettings().with_overrides(overrides)
    return _engine_settings_from(key)


@functools.lru_cache(maxsize=256)
def _engine_settings_from(overrides_json: str) -> EngineSettings:
    """Validated engine settings for one set of overrides. Cached: building and validating them took
    ~3 % of a 1,000-workload cycle, and a cycle has one or a few distinct sets (they are frozen)."""
    return EngineSettings().with_overrides(json.loads(overrides_json))


def analyse(
    window: WorkloadWindow,
    settings: EffectiveSettings,
    now: datetime,
    window_seconds: float | None = None,
    capacity: ClusterCapacity | None = None,
) -> Analysis:
    """Run the engine with the cluster's sharing strategy (the policy's when no node is known), MIG
    profiles and thresholds, then keep its advice to what the node pools can schedule."""
    fallback = settings.sharing_strategy if settings.policy is not None else SharingStrategy.MIG_MIXED
    capacity = capacity or ClusterCapacity()
    sharing = sharing_for(capacity, window.allocation.gpu_model, fallback=fallback)
    window, notes = observe_sharing(window, capacity)
    thresholds = engine_settings(settings, window_seconds)

    def run(profiles: list[str] | None) -> Analysis:
        return analyze_window(
            window,
            thresholds,
            sharing=sharing,
            now=now,
            allowed_mig_profiles=profiles,
            min_replicas=settings.min_replicas if settings.policy is not None else 0,
        )

    allowed = list(settings.allowed_mig_profiles) or None
    return with_notes(analyze_within(capacity, window.allocation.gpu_model, run, allowed), notes)


def with_hpa(window: WorkloadWindow, hpa: Mapping[str, Any] | None) -> WorkloadWindow:
    """The window with the workload's HPA in its allocation (the engine then recommends HPA bounds)."""
    if hpa is None:
        return window
    spec = hpa.get("spec") or {}
    info = HPAInfo(
        name=str((hpa.get("metadata") or {}).get("name")),
        min_replicas=int(spec.get("minReplicas") or 1),
        max_replicas=int(spec.get("maxReplicas") or 1),
    )
    return window.model_copy(update={"allocation": window.allocation.model_copy(update={"hpa": info})})


@dataclass
class CycleState:
    """What one cycle learns once and shares across workloads."""

    now: datetime
    policies: list[GPURightsizingPolicy]
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    governed: list[tuple[dict[str, str], dict[str, str]]] = field(default_factory=list)
    recent_changes: list[tuple[str, datetime]] = field(default_factory=list)
    #: policy -> workload key -> pods of its changes in flight.
    in_flight: dict[str, dict[str, int]] = field(default_factory=dict)
    pdbs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: Workloads no longer recommended on whose change is still in flight (the actuator settles them).
    settling: list[_Pending] = field(default_factory=list)
    #: kind -> (namespace, name) -> object, for the kinds listed this cycle.
    workloads: dict[str, dict[tuple[str, str], dict[str, Any]]] = field(default_factory=dict)
    #: (namespace, kind, name) of the scaled workload -> HPA; None when not listed (read one by one).
    hpas: dict[tuple[str, str, str], dict[str, Any]] | None = None
    #: What the nodes offer (node pools), read once per cycle.
    capacity: ClusterCapacity = field(default_factory=ClusterCapacity)

    def workload(self, kube: KubeAdapter, ref: WorkloadRef) -> dict[str, Any] | None:
        """The workload from this cycle's listing, else (a kind not listed, or not found) a GET."""
        found = self.workloads.get(ref.kind, {}).get((ref.namespace, ref.name))
        if found is None:  # any kind: a PyTorchJob, a LeaderWorkerSet, ... (adapters.owners)
            found = read_workload(kube, ref.api_version, ref.kind, ref.namespace, ref.name)
        return found

    def hpa_of(self, kube: KubeAdapter, ref: WorkloadRef) -> dict[str, Any] | None:
        """The HPA scaling the workload, from this cycle's listing when there is one."""
        if self.hpas is None:
            return kube.hpa_for(ref)
        return self.hpas.get((ref.namespace, ref.kind, ref.name))

    def load(self, kube: KubeAdapter, refs: list[WorkloadRef], namespaces: tuple[str, ...]) -> None:
        """List the workload kinds and HPAs `refs` need, once; whatever fails is read one by one."""
        for kind in sorted({ref.kind for ref in refs} & set(LISTED_KINDS)):
            try:
                self.workloads[kind] = kube.list_workloads(kind, namespaces)
            except Exception as error:
                metrics.ERRORS.labels("kubernetes").inc()
                LOG.warning("listing %s objects failed; reading them one by one: %s", kind, error)
        if any(ref.kind in SCALABLE_KINDS for ref in refs):
            try:
                self.hpas = kube.list_hpas(namespaces)
            except Exception as error:
                metrics.ERRORS.labels("kubernetes").inc()
                LOG.warning("listing HPAs failed; reading them per workload: %s", error)

    def pdbs_of(self, kube: KubeAdapter, namespace: str) -> list[dict[str, Any]]:
        """The namespace's PodDisruptionBudgets, listed once per cycle (only by the actuator)."""
        if namespace not in self.pdbs:
            self.pdbs[namespace] = kube.list_pdbs(namespace)
        return self.pdbs[namespace]

    def labels_of(self, kube: KubeAdapter, namespace: str) -> dict[str, str]:
        if namespace not in self.namespace_labels:
            self.namespace_labels[namespace] = kube.namespace_labels(namespace)
        return self.namespace_labels[namespace]


def _has_role(cfg: OperatorConfig, role: str) -> bool:
    return cfg.role in (role, "all")


def merge_patched(target: Any, patch: Any) -> Any:
    """`target` after a JSON merge patch (RFC 7386), as the API server applies it to a status."""
    if not isinstance(patch, Mapping):
        return patch
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patched(result.get(key), value)
    return result


def refresh_period(interval_seconds: float, max_staleness: timedelta, spread_key: str = "") -> timedelta:
    """How old a stored window may grow before a status that says nothing new is rewritten anyway:
    REFRESH_STALENESS_SHARE of `max_staleness` (at most REFRESH_AT_MOST), shortened by up to
    REFRESH_SPREAD as `spread_key` draws, but not below 1.5 intervals. Never longer than the share, so
    the actuator's freshness gate holds whatever is drawn."""
    longest = min(max_staleness * REFRESH_STALENESS_SHARE, REFRESH_AT_MOST)
    draw = (zlib.crc32(spread_key.encode()) % 1000) / 1000
    shortest = min(longest, timedelta(seconds=1.5 * interval_seconds))
    return max(longest * (1 - REFRESH_SPREAD * draw), shortest)


def write_reason(
    old_status: Mapping[str, Any], patch: Mapping[str, Any], now: datetime, refresh_after: timedelta
) -> str | None:
    """Why the patch is worth writing: "new" (no analysed window stored yet), "changed" (it says
    something new: `logic.status.materially_same`, window times left out, figures within a
    tolerance), "refresh" (the stored window ended `refresh_after` ago or more, so readers and the
    actuator's freshness gate still see a recent window); None when it is not."""
    stored_end = changes.parse_time((old_status.get("window") or {}).get("end"))
    if stored_end is None:
        return "new"
    if not materially_same(dict(old_status), merge_patched(old_status, patch)):
        return "changed"
    return "refresh" if now - stored_end >= refresh_after else None


def status_unchanged(
    old_status: Mapping[str, Any], patch: Mapping[str, Any], now: datetime, refresh_after: timedelta
) -> bool:
    """True when the patch need not be written (`write_reason` has none)."""
    return write_reason(old_status, patch, now, refresh_after) is None


def write_recommendation(
    kube: KubeAdapter,
    ref: WorkloadRef,
    uid: str,
    recommendation: Mapping[str, Any],
    analysis: Analysis,
    window: WorkloadWindow,
    settings: EffectiveSettings,
    now: datetime,
    *,
    refresh_after: timedelta | None = None,
    workload_generation: int | None = None,
) -> str | None:
    """Patch the recommendation's status; post an Event on the workload when the diagnosis changes.

    `status.apply` belongs to the actuator, so the recommender never writes it (a merge patch
    without the field keeps it). `workloadGeneration` publishes which spec the analysis saw, so the
    actuator acts only on a recommendation made for the workload as it is. With `refresh_after`, a status
    that would say nothing new (`status_unchanged`: its figures moved within a tolerance, its window
    slid) is left as stored while that window is younger than `refresh_after`. Returns why the status
    was written (`write_reason`; "changed" without `refresh_after`), None when it was not.
    """
    old_status = recommendation.get("status") or {}
    status = analysed_status(
        analysis,
        window.allocation,
        window_start=window.start,
        window_end=window.end,
        workload=ref,
        now=now,
        generation=(recommendation.get("metadata") or {}).get("generation"),
    )
    body = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    body.pop("apply", None)  # the actuator's state: the recommender never writes it
    if workload_generation is not None:
        body["workloadGeneration"] = workload_generation
    body["conditions"] = merge_conditions(
        list(old_status.get("conditions") or []), body.get("conditions", [])
    )
    written = "changed" if refresh_after is None else write_reason(old_status, body, now, refresh_after)
    if written is not None:
        kube.patch_recommendation_status(ref, body)
        metrics.STATUS_WRITES.labels(written).inc()
    before = (old_status.get("diagnosis") or {}).get("primary")
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


def remove_recommendation(kube: KubeAdapter, ctx: OperatorContext, ref: WorkloadRef, why: str) -> None:
    """Delete a recommendation the workload no longer wants (opt-out annotation or an Off policy)."""
    if kube.delete_recommendation(ref):
        LOG.info("removed the recommendation of %s: %s", ref.key, why)
    with ctx.lock:
        ctx.known.discard(ref.key)


def update_policy_statuses(kube: KubeAdapter, state: CycleState) -> None:
    """matchedWorkloads (workloads each policy wins for), overlaps, problems, observedGeneration."""
    if not state.policies:
        return
    counts = count_governed(state.policies, state.governed)
    overlaps = find_overlaps(state.policies)
    stamp = state.now.replace(microsecond=0).isoformat().replace("+00:00", "Z")
    for policy in state.policies:
        problems = policy_problems(policy)
        old = policy.status.model_dump(mode="json", by_alias=True) if policy.status else {}
        old_conditions = {c["type"]: c for c in old.get("conditions", [])}
        ready = "False" if problems else "True"
        previous_ready = old_conditions.get("Ready")
        condition = {
            "type": "Ready",
            "status": ready,
            "reason": "Invalid" if problems else "Active",
            "message": "; ".join(problems)
            or f"governs {counts[policy.name]} workload(s) in {policy.spec.mode.value} mode",
            "lastTransitionTime": previous_ready["lastTransitionTime"]
            if previous_ready and previous_ready.get("status") == ready
            else stamp,
            "observedGeneration": policy.metadata.get("generation"),
        }
        status = {
            "observedGeneration": policy.metadata.get("generation"),
            "matchedWorkloads": counts[policy.name],
            "overlaps": overlaps.get(policy.name, []),
            "conditions": [condition],
        }
        comparable_old = {
            **{k: old.get(k) for k in status if k != "conditions"},
            "message": (previous_ready or {}).get("message"),
        }
        comparable_new = {
            **{k: status[k] for k in status if k != "conditions"},
            "message": condition["message"],
        }
        if comparable_old == comparable_new and previous_ready and previous_ready.get("status") == ready:
            continue
        try:
            kube.patch_policy_status(policy.name, status)
        except Exception:
            metrics.ERRORS.labels("kubernetes").inc()
            LOG.exception("status update of policy %s failed", policy.name)


def observation_seconds(settings: EffectiveSettings, default: float) -> float:
    """The window a workload is observed over: its policy's `spec.observation.window` when the
    policy sets one, else the operator's `--window`."""
    return default if settings.window is None else settings.window.total_seconds()


@dataclass
class _Pending:
    """One workload to analyse this cycle, once its window's batch of metrics is in."""

    ref: WorkloadRef
    recommendation: dict[str, Any]
    workload: dict[str, Any]
    settings: EffectiveSettings
    window_seconds: float


def run_cycle(ctx: OperatorContext, now: datetime | None = None) -> int:
    """Analyse every workload that has a GPURecommendation; returns how many were updated.

    Workloads are grouped by observation window (the operator's `--window`, or their policy's), and
    each distinct window costs one batch of queries, whatever the number of workloads. A failing
    metrics source changes nothing: the recommendations keep what they said.
    """
    cfg, kube = ctx.config, ctx.kube
    end = now or datetime.now(UTC)
    marks = [time.monotonic()]  # phase ends: listing, metrics, analysis and writes, actuator
    if not _has_role(cfg, "recommender"):
        return 0  # the actuator runs its own loop (actuator.loop), never this cycle
    try:
        recommendations = kube.list_recommendations(cfg.namespaces if not cfg.all_namespaces else ())
        state = CycleState(now=end, policies=load_policies(kube))
    except Exception:
        metrics.ERRORS.labels("kubernetes").inc()
        LOG.exception("listing recommendations or policies failed")
        return 0
    ctx.policies = state.policies
    refs = [ref_of(recommendation) for recommendation in recommendations]
    state.load(kube, refs, cfg.namespaces if not cfg.all_namespaces else ())
    state.capacity = load_capacity(kube, capacity_from_metrics(ctx.source, end))
    pending: list[_Pending] = []
    for ref, recommendation in zip(refs, recommendations, strict=True):
        try:
            item = _prepare(ctx, kube, cfg, state, ref, recommendation)
        except Exception:
            metrics.ERRORS.labels("kubernetes").inc()
            LOG.exception("cycle step for %s failed", ref.key)
            continue
        if item is not None:
            pending.append(item)
    marks.append(time.monotonic())
    window_lengths = sorted({item.window_seconds for item in pending})
    backfilling: set[float] = set()
    failures: dict[float, str] = {}
    batches = _fetch_batches(
        ctx.source,
        window_lengths,
        end,
        _scope_of(cfg),
        api_parent_lookup(kube, cfg.namespaces if not cfg.all_namespaces else (), state.workloads),
        failures,
        backfilling,
    )
    if isinstance(ctx.source, KeepsWindows) and window_lengths:
        for seconds in ctx.source.keep_only(set(window_lengths)):
            for gauge in (metrics.BACKFILL_PROGRESS, metrics.SAMPLES_FETCHED, metrics.STATE_RESTORED_SERIES):
                with contextlib.suppress(KeyError):  # never published
                    gauge.remove(f"{seconds:g}")
    metrics.WORKLOADS_PENDING.set(sum(1 for item in pending if item.window_seconds in backfilling))
    by_diagnosis: Tally[tuple[str, str]] = Tally()
    wasted: dict[str, float] = {}
    updated = 0
    written: Tally[str] = Tally()
    work: list[tuple[_Pending, WorkloadWindow]] = []
    for item in pending:
        batch = batches.get(item.window_seconds)
        if batch is None:  # no metrics for this window this cycle: keep what the status says, and say so
            if item.window_seconds in failures and _has_role(cfg, "recommender"):
                say_metrics_failed(kube, item.ref, item.recommendation, failures[item.window_seconds], end)
            continue
        window = batch.get(item.ref.key)
        if window is not None:
            work.append((item, window))

    def attempt(job: tuple[_Pending, WorkloadWindow]) -> _Analysed | None:
        try:
            return _analyse_and_write(kube, cfg, state, job[0], job[1])
        except Exception:
            metrics.ERRORS.labels("kubernetes").inc()
            LOG.exception("cycle step for %s failed", job[0].ref.key)
            return None

    marks.append(time.monotonic())
    if len(work) > 1:
        with ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="gpurs-cycle") as pool:
            results = list(pool.map(attempt, work))
    else:
        results = [attempt(job) for job in work]
    analysed = {done.item.ref.key: done for done in results if done is not None}
    for done in analysed.values():
        ref = done.item.ref
        if done.analysis is not None:
            by_diagnosis[(done.analysis.primary.value, ref.namespace)] += 1
            wasted[ref.namespace] = wasted.get(ref.namespace, 0.0) + done.analysis.savings.gpu_hours_per_day
        updated += 1
        if done.written is not None:
            written[done.written] += 1
    marks.append(time.monotonic())
    if _has_role(cfg, "recommender"):
        update_policy_statuses(kube, state)
        if batches or not pending:
            metrics.RECOMMENDATIONS.clear()
            for (diagnosis, namespace), count in by_diagnosis.items():
                metrics.RECOMMENDATIONS.labels(diagnosis, namespace).set(count)
            metrics.WASTED_GPU_HOURS.clear()
            for namespace, hours in wasted.items():
                metrics.WASTED_GPU_HOURS.labels(namespace).set(hours)
    ctx.last_cycle = time.monotonic()
    spans = [b - a for a, b in zip(marks, [*marks[1:], ctx.last_cycle], strict=True)]
    LOG.info(
        "cycle phases: listing %.1f s, metrics %.1f s, analysis and writes %.1f s, actuator and "
        "policies %.1f s",
        *spans,
    )
    ctx.last_written = sum(written.values())
    ctx.last_refreshed = written["refresh"]
    return updated


def _scope_of(cfg: OperatorConfig) -> Scope:
    """What the operator watches: one namespace's workloads, or every one's."""
    return Scope(namespace=cfg.namespaces[0] if len(cfg.namespaces) == 1 else None)


def publish_read(window_seconds: float, read: WindowRead) -> None:
    """One window's incremental read as the operator's own metrics and log lines (and which families
    read recorded series)."""
    report = read.report
    if report is None:  # a whole-window read: nothing incremental to say
        return
    label = f"{window_seconds:g}"
    for family in (*read.recorded, *read.raw):
        metrics.RECORDED_SERIES_USED.labels(label, family).set(1.0 if family in read.recorded else 0.0)
    metrics.SAMPLES_FETCHED.labels(label).set(report.samples)
    for family, seconds in report.durations:
        metrics.QUERY_DURATION.labels(family).observe(seconds)
    metrics.BACKFILL_PROGRESS.labels(label).set(1.0 if read.complete else report.backfill_progress)
    metrics.STATE_RESTORED_SERIES.labels(label).set(report.restored_series)
    if report.errors:
        metrics.ERRORS.labels("metrics_source").inc(len(report.errors))
        LOG.warning(
            "%d Prometheus queries failed for the %s s window (asked again next cycle); first: %s",
            len(report.errors),
            label,
            report.errors[0],
        )
    if not read.complete:
        LOG.info(
            "backfilling the %s s window: %d/%d chunks (%.0f%%); its recommendations keep their last status",
            label,
            report.backfill_done,
            report.backfill_total,
            100 * report.backfill_progress,
        )


def _fetch_batches(
    source: WindowSource | None,
    windows: list[float],
    end: datetime,
    scope: Scope,
    owners: ExtraOwners | None = None,
    failures: dict[float, str] | None = None,
    backfilling: set[float] | None = None,
) -> dict[float, dict[str, WorkloadWindow]]:
    """Window length -> workload key -> window: one read of the source per distinct window length.

    A window the source has not seen whole yet (an incremental source backfilling) gives no batch and
    is added to `backfilling`, so its workloads keep their last status. A window whose read fails is
    left out (counted and logged); the others still go ahead.
    """
    if source is None or not windows:
        return {}
    batches: dict[float, dict[str, WorkloadWindow]] = {}
    for seconds in windows:
        try:
            read = source.read_windows(seconds, end, scope=scope, owners=owners)
            publish_read(seconds, read)
            if read.windows is None:
                if backfilling is not None:
                    backfilling.add(seconds)
                continue
        except Exception as error:
            metrics.ERRORS.labels("metrics_source").inc()
            metrics.METRICS_SOURCE_UP.labels(_duration_label(seconds)).set(0)
            if failures is not None:
                failures[seconds] = f"{type(error).__name__}: {error}"
            LOG.warning(
                "metrics source %s failed for the %s window; recommendations keep their last "
                "analysis this cycle: %s",
                source.where,
                timedelta(seconds=seconds),
                error,
            )
            continue
        batches[seconds] = {window.workload.key: window for window in read.windows}
        metrics.METRICS_SOURCE_UP.labels(_duration_label(seconds)).set(1)
        metrics.METRICS_LAST_SUCCESS.set(time.time())
    return batches


def _duration_label(seconds: float) -> str:
    return f"{seconds:g}s"


def say_metrics_failed(
    kube: KubeAdapter, ref: WorkloadRef, recommendation: Mapping[str, Any], error: str, now: datetime
) -> None:
    """Set `MetricsAvailable=False` on a recommendation whose batch failed; the analysis stays as it was."""
    old = list((recommendation.get("status") or {}).get("conditions") or [])
    generation = (recommendation.get("metadata") or {}).get("generation")
    fresh = metrics_condition(error, now, generation).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    previous = next((c for c in old if c.get("type") == fresh["type"]), None)
    if (
        previous is not None
        and previous.get("status") == "False"
        and previous.get("message") == fresh["message"]
    ):
        return
    try:
        kube.patch_recommendation_status(ref, {"conditions": merge_conditions(old, [fresh])})
    except Exception:
        metrics.ERRORS.labels("kubernetes").inc()
        LOG.exception("could not mark the metrics of %s as unavailable", ref.key)


def _prepare(
    ctx: OperatorContext,
    kube: KubeAdapter,
    cfg: OperatorConfig,
    state: CycleState,
    ref: WorkloadRef,
    recommendation: dict[str, Any],
) -> _Pending | None:
    """Read the workload and decide its settings; remove the recommendation of an opted-out one."""
    workload = state.workload(kube, ref)
    if workload is None:  # the workload is gone; garbage collection removes the recommendation
        return None
    metadata = workload.get("metadata") or {}
    namespace_labels = state.labels_of(kube, ref.namespace)
    settings = settings_for_workload(
        state.policies, namespace_labels, metadata.get("labels") or {}, metadata.get("annotations") or {}
    )
    if not settings.ignored:
        state.governed.append((namespace_labels, dict(metadata.get("labels") or {})))
    if not settings.recommends:
        apply = (recommendation.get("status") or {}).get("apply") or {}
        if changes.phase_of(apply) in changes.IN_FLIGHT:
            # a change in flight is settled by the actuator first (abandoned: an opted-out or Off
            # workload is never written again); deleting it now would lose the record of that change
            state.settling.append(_Pending(ref, recommendation, workload, settings, 0.0))
            return None
        if _has_role(cfg, "recommender"):
            why = "opt-out annotation" if settings.ignored else f"policy {settings.policy} is Off"
            remove_recommendation(kube, ctx, ref, why)
        return None
    seconds = observation_seconds(settings, cfg.window_seconds)
    return _Pending(ref, recommendation, workload, settings, seconds)


@dataclass
class _Analysed:
    """One workload's analysis this cycle, with what the actuator needs to act on it."""

    item: _Pending
    window: WorkloadWindow | None  # None: no metrics for this workload this cycle
    hpa: dict[str, Any] | None
    analysis: Analysis | None  # None when this process does not recommend (the actuator never analyses)
    uid: str
    written: str | None = None  # why this cycle wrote the status (`write_reason`); None: not written


def _analyse_and_write(
    kube: KubeAdapter,
    cfg: OperatorConfig,
    state: CycleState,
    item: _Pending,
    window: WorkloadWindow,
) -> _Analysed | None:
    """Analyse one workload and (recommender) write its status; None when the analysis failed.

    Runs on a worker thread: it reads the shared cycle state and changes nothing in it. The status is
    refreshed within `refresh_period` of the workload's governing maxStaleness, so skipping a write
    never makes the actuator's freshness gate call it stale.
    """
    ref, settings = item.ref, item.settings
    hpa = state.hpa_of(kube, ref) if ref.kind in SCALABLE_KINDS else None
    window = with_hpa(window, hpa)
    uid = str((item.workload.get("metadata") or {}).get("uid", ""))
    if not _has_role(cfg, "recommender"):
        return _Analysed(item=item, window=window, hpa=hpa, analysis=None, uid=uid)
    try:
        analysis = analyse(window, settings, state.now, item.window_seconds, state.capacity)
    except Exception:
        metrics.ERRORS.labels("analysis").inc()
        LOG.exception("analysis of %s failed", ref.key)
        return None
    metrics.WORKLOADS_ANALYZED.inc()
    written = write_recommendation(
        kube, ref, uid, item.recommendation, analysis, window, settings, state.now,
        refresh_after=refresh_period(
            cfg.interval_seconds, settings.max_staleness, f"{ref.key} {window_end_of(item.recommendation)}"
        ),
        workload_generation=(item.workload.get("metadata") or {}).get("generation"),
    )  # fmt: skip
    return _Analysed(item=item, window=window, hpa=hpa, analysis=analysis, uid=uid, written=written)


def window_end_of(recommendation: Mapping[str, Any]) -> str:
    """The stored `status.window.end` as written ("" when none)."""
    return str(((recommendation.get("status") or {}).get("window") or {}).get("end") or "")


def next_delay(ctx: OperatorContext) -> float:
    """Seconds until the next cycle: the interval, or `BACKFILL_PAUSE_SECONDS` while a window is still
    being backfilled, so a cold start takes as many back-to-back cycles as its reads need instead of
    one interval each (every cycle still reads at most its budget; the gates are unchanged)."""
    interval = ctx.config.interval_seconds
    if isinstance(ctx.source, KeepsWindows) and ctx.source.backfilling:
        return min(BACKFILL_PAUSE_SECONDS, interval)
    return interval


async def analysis_loop(ctx: OperatorContext) -> None:
    """Run a cycle every `interval`; the first one soon after startup. Never dies on one bad cycle."""
    cfg = ctx.config
    if ctx.source is None:  # the cycle still removes opted-out recommendations, updates policies
        LOG.warning("no --prometheus-url: recommendations stay InsufficientData until one is configured")
    stop = ctx.stop
    delay = min(5.0, cfg.interval_seconds)
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), timeout=delay)
            return
        except TimeoutError:
            pass
        started = time.monotonic()
        try:
            updated = await asyncio.to_thread(run_cycle, ctx)
            LOG.info(
                "analysis cycle: %d recommendations updated in %.1f s, %d statuses written (%d refreshed)",
                updated,
                time.monotonic() - started,
                ctx.last_written,
                ctx.last_refreshed,
            )
        except Exception:
            metrics.ERRORS.labels("cycle").inc()
            LOG.exception("analysis cycle failed")
        metrics.CYCLE_DURATION.observe(time.monotonic() - started)
        delay = next_delay(ctx)
