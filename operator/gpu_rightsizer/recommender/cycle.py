"""The periodic analysis cycle: one batch of metric queries for all workloads, then one status patch each.

Queries are aggregated server-side for the whole cluster per cycle (SPEC §4), so their number does
not grow with the number of workloads. Workloads and HPAs are listed once per cycle too, and a status
is only written when it says something new (or its window grows old), by a few threads at a time.
The cycle never writes the apply state, nor drives the actuator: the actuator has its own loop and
reads what the statuses publish.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections import Counter as Tally
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gpu_rightsizer.adapters.capacity import IDLE_FLOOR_LOOKBACK_SECONDS, load_capacity, with_idle_floors
from gpu_rightsizer.adapters.kube import KubeAdapter
from gpu_rightsizer.adapters.owners import WorkloadListings, api_parent_lookup, read_workload
from gpu_rightsizer.adapters.source import (
    KeepsWindows,
)
from gpu_rightsizer.adapters.store import RecommendationStore, StoredRecommendation
from gpu_rightsizer.config import OperatorConfig
from gpu_rightsizer.logic.capacity import ClusterCapacity, analyze_within, sharing_for
from gpu_rightsizer.logic.engine import analyze_window, continued_lookback
from gpu_rightsizer.logic.figures import WorkloadFigures, summarise
from gpu_rightsizer.logic.floors import floor_for, with_idle_floor
from gpu_rightsizer.logic.policy import (
    EffectiveSettings,
    settings_for_workload,
)
from gpu_rightsizer.logic.sharing import observe_sharing, with_notes
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.logic.waste import gpu_models, with_cost
from gpu_rightsizer.model.codes import SharingStrategy
from gpu_rightsizer.model.crd import (
    GPURightsizingPolicy,
)
from gpu_rightsizer.model.kinds import is_scalable
from gpu_rightsizer.model.observation import HPAInfo, WorkloadRef, WorkloadWindow
from gpu_rightsizer.model.result import Analysis, MemoryLookback
from gpu_rightsizer.recommender.policies import load_policies, update_policy_statuses
from gpu_rightsizer.recommender.windows import capacity_from_metrics, fetch_chunks, scope_of, shard_of
from gpu_rightsizer.recommender.writes import (
    StatusWrite,
    refresh_period,
    remove_recommendation,
    restore_missing,
    say_metrics_failed,
    window_end_of,
    write_recommendation,
)
from gpu_rightsizer.runtime import metrics
from gpu_rightsizer.runtime.context import OperatorContext
from gpu_rightsizer.runtime.memory import release_free_memory
from gpu_rightsizer.runtime.startup import runs

LOG = logging.getLogger(__name__)


#: Pause between cycles while a window is being backfilled (a cold start reads back to back).
BACKFILL_PAUSE_SECONDS = 5.0


#: Threads that analyse and write statuses in parallel (the client's connection pool is thread-safe).
WRITERS = 4


#: The engine's defaults, built once (validating them each workload took a share of the cycle).
_DEFAULT_ENGINE_SETTINGS = EngineSettings()


def engine_settings(settings: EffectiveSettings, window_seconds: float | None = None) -> EngineSettings:
    """Engine thresholds with the governing policy's overrides (minSamples included).

    The operator's `--window` is an explicit choice of the person running it, so it also lowers the
    engine's minimum window when shorter (tests and demos use minutes, not hours).
    """
    overrides: dict[str, object] = dict(settings.threshold_overrides)
    if window_seconds is not None:
        overrides["windowSeconds"] = window_seconds
        overrides["minWindowSeconds"] = min(_DEFAULT_ENGINE_SETTINGS.min_window_seconds, window_seconds * 0.9)
    if settings.policy is not None:
        overrides["minSamples"] = settings.min_samples
    try:
        key = json.dumps(overrides, sort_keys=True)
    except (TypeError, ValueError):  # not plain JSON: validated without the cache
        return _DEFAULT_ENGINE_SETTINGS.with_overrides(overrides)
    return _engine_settings_from(key)


@functools.lru_cache(maxsize=256)
def _engine_settings_from(overrides_json: str) -> EngineSettings:
    """Validated engine settings for one set of overrides. Cached: building and validating them took
    ~3 % of a 1,000-workload cycle, and a cycle has one or a few distinct sets (they are frozen)."""
    return _DEFAULT_ENGINE_SETTINGS.with_overrides(json.loads(overrides_json))


def analyse(
    window: WorkloadWindow,
    settings: EffectiveSettings,
    now: datetime,
    window_seconds: float | None = None,
    capacity: ClusterCapacity | None = None,
    memory_lookback: MemoryLookback | None = None,
    figures: WorkloadFigures | None = None,
) -> Analysis:
    """Run the engine with the cluster's sharing strategy (the policy's when no node is known), MIG
    profiles and thresholds, then keep its advice to what the node pools can schedule.

    `memory_lookback` is the GPU-memory high-water mark the stored status carries from earlier
    cycles: a slice is sized on it, not on this window's peak alone (the engine merges the two).
    `figures` is `summarise(window)` when the caller has it (the cycle needs it for the baseline
    too). The window is summarised once however many times the engine runs on it (`analyze_within`).
    """
    fallback = settings.sharing_strategy if settings.policy is not None else SharingStrategy.MIG_MIXED
    capacity = capacity or ClusterCapacity()
    sharing = sharing_for(capacity, window.allocation.gpu_model, fallback=fallback)
    observed, notes = observe_sharing(window, capacity)
    thresholds = with_idle_floor(
        engine_settings(settings, window_seconds), floor_for(capacity.idle_floors, observed)
    )
    seen = figures if figures is not None and observed is window else summarise(observed)

    def run(profiles: list[str] | None) -> Analysis:
        return analyze_window(
            observed,
            thresholds,
            sharing=sharing,
            now=now,
            allowed_mig_profiles=profiles,
            min_replicas=settings.min_replicas if settings.policy is not None else 0,
            memory_lookback=memory_lookback,
            figures=seen,
        )

    allowed = list(settings.allowed_mig_profiles) or None
    stated = settings.policy is not None  # the policy's sharingStrategy stands in for node facts
    return with_notes(analyze_within(capacity, window.allocation.gpu_model, run, allowed, stated), notes)


def stored_lookback(stored: StoredRecommendation, window: WorkloadWindow) -> MemoryLookback | None:
    """The GPU-memory look-back the stored status carries, continued into `window` only where the
    stored window reaches it (`logic.engine.continued_lookback`)."""
    status = stored.status
    until = status.window.end if status.window is not None else None
    return continued_lookback(status.memory_lookback, until, window.start)


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
    #: The pod-owning workloads: watched copies, else one LIST per kind (set by `load`).
    listings: WorkloadListings | None = None
    #: (namespace, kind, name) of the scaled workload -> HPA; None when not listed (read one by one).
    hpas: dict[tuple[str, str, str], dict[str, Any]] | None = None
    #: What the nodes offer (node pools), read once per cycle.
    capacity: ClusterCapacity = field(default_factory=ClusterCapacity)

    def workload(self, kube: KubeAdapter, ref: WorkloadRef) -> Mapping[str, Any] | None:
        """The workload from the watched copies or this cycle's listing, else (a kind not listed, not
        found, or its listing refused) a GET. Read for its metadata only."""
        found = None
        if self.listings is not None:
            found, _ = self.listings.find(ref.kind, ref.namespace, ref.name)
        if found is None:  # any kind: a PyTorchJob, a LeaderWorkerSet, ... (adapters.owners)
            found = read_workload(kube, ref.api_version, ref.kind, ref.namespace, ref.name)
        return found

    def hpa_of(self, kube: KubeAdapter, ref: WorkloadRef) -> dict[str, Any] | None:
        """The HPA scaling the workload, from this cycle's listing when there is one."""
        if self.hpas is None:
            return kube.hpa_for(ref)
        return self.hpas.get((ref.namespace, ref.kind, ref.name))

    def load(self, kube: KubeAdapter, refs: list[WorkloadRef], namespaces: tuple[str, ...]) -> None:
        """Set up the workload reads and list the HPAs `refs` need, once; whatever fails is read one
        by one. Workload kinds are listed only where the watched copies miss (`WorkloadListings`)."""
        self.listings = WorkloadListings(
            kube, namespaces, on_error=lambda _: metrics.ERRORS.labels("kubernetes").inc()
        )
        if any(is_scalable(ref.kind) for ref in refs):
            try:
                self.hpas = kube.list_hpas(namespaces)
            except Exception as error:
                metrics.ERRORS.labels("kubernetes").inc()
                LOG.warning("listing HPAs failed; reading them per workload: %s", error)

    def labels_of(self, kube: KubeAdapter, namespace: str) -> dict[str, str]:
        if namespace not in self.namespace_labels:
            self.namespace_labels[namespace] = kube.namespace_labels(namespace)
        return self.namespace_labels[namespace]


def observation_seconds(settings: EffectiveSettings, default: float) -> float:
    """The window a workload is observed over: its policy's `spec.observation.window` when the
    policy sets one, else the operator's `--window`."""
    return default if settings.window is None else settings.window.total_seconds()


@dataclass
class _Pending:
    """One workload to analyse this cycle, once its window's batch of metrics is in."""

    ref: WorkloadRef
    recommendation: StoredRecommendation
    workload: Mapping[str, Any]
    settings: EffectiveSettings
    window_seconds: float


def run_cycle(ctx: OperatorContext, now: datetime | None = None) -> int:
    """Analyse every workload that has a GPURecommendation; returns how many were updated.

    Workloads are grouped by observation window (the operator's `--window`, or their policy's), and
    each distinct window costs one batch of queries, whatever the number of workloads. A failing
    metrics source changes nothing: the recommendations keep what they said.
    """
    cfg, kube = ctx.config, ctx.kube
    if not runs(cfg, "recommender"):
        return 0  # an actuator-only process never analyses (it does not import this wing's wiring)
    store = RecommendationStore(kube, ctx.parsed_recommendations)
    end = now or datetime.now(UTC)
    marks = [time.monotonic()]  # phase ends: listing, metrics, analysis and writes, policies
    try:
        recommendations = store.list(cfg.namespaces if not cfg.all_namespaces else ())
        state = CycleState(now=end, policies=load_policies(kube))
    except Exception:
        metrics.ERRORS.labels("kubernetes").inc()
        LOG.exception("listing recommendations or policies failed")
        return 0
    recommendations.extend(restore_missing(ctx, store, recommendations))
    ctx.policies = state.policies
    shard = shard_of(cfg)
    # a shard analyses and writes its own namespaces' recommendations only: another shard's, and one
    # no running shard owns yet (a resize under way), keep the status their last owner wrote
    others = [stored for stored in recommendations if not shard.owns(stored.ref.namespace)]
    recommendations = [stored for stored in recommendations if shard.owns(stored.ref.namespace)]
    counts_policies = shard.shard == 0  # one writer of the policies' statuses, counting every shard's
    refs = [stored.ref for stored in recommendations]
    listed = [*refs, *(stored.ref for stored in others)] if counts_policies else refs
    state.load(kube, listed, cfg.namespaces if not cfg.all_namespaces else ())
    source = ctx.source
    unheld = (lambda: source.read_unheld_gpus(end, IDLE_FLOOR_LOOKBACK_SECONDS)) if source else None
    state.capacity = with_idle_floors(load_capacity(kube, capacity_from_metrics(source, end)), unheld)
    pending: list[_Pending] = []
    for ref, recommendation in zip(refs, recommendations, strict=True):
        try:
            item = _prepare(ctx, store, cfg, state, recommendation)
        except Exception:
            metrics.ERRORS.labels("kubernetes").inc()
            LOG.exception("cycle step for %s failed", ref.key)
            continue
        if item is not None:
            pending.append(item)
    for stored in others if counts_policies else []:
        try:
            _count_governed(ctx, state, stored.ref)
        except Exception:
            metrics.ERRORS.labels("kubernetes").inc()
            LOG.exception("reading %s for the policies' statuses failed", stored.ref.key)
    marks.append(time.monotonic())
    window_lengths = sorted({item.window_seconds for item in pending})
    backfilling: set[float] = set()
    failures: dict[float, str] = {}
    chunked = fetch_chunks(
        ctx.source,
        window_lengths,
        end,
        scope_of(cfg),
        api_parent_lookup(kube, state.listings),
        failures,
        backfilling,
    )
    if isinstance(ctx.source, KeepsWindows) and window_lengths:
        for seconds in ctx.source.keep_only(set(window_lengths)):
            for gauge in (metrics.BACKFILL_PROGRESS, metrics.SAMPLES_FETCHED, metrics.STATE_RESTORED_SERIES):
                with contextlib.suppress(KeyError):  # never published
                    gauge.remove(f"{seconds:g}")
    metrics.WORKLOADS_PENDING.set(sum(1 for item in pending if item.window_seconds in backfilling))
    waiting: dict[float, dict[str, _Pending]] = {}
    for item in pending:
        if item.window_seconds in chunked:
            waiting.setdefault(item.window_seconds, {})[item.ref.key] = item
        elif item.window_seconds in failures:  # no metrics for this window: keep the status, and say so
            say_metrics_failed(store, item.recommendation, failures[item.window_seconds], end)

    def attempt(job: tuple[_Pending, WorkloadWindow]) -> _Analysed | None:
        try:
            return _analyse_and_write(store, kube, cfg, state, job[0], job[1])
        except Exception:
            metrics.ERRORS.labels("kubernetes").inc()
            LOG.exception("cycle step for %s failed", job[0].ref.key)
            return None

    marks.append(time.monotonic())
    tally = _Tally()
    with ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="gpurs-cycle") as pool:
        for seconds, chunks in chunked.items():
            items = waiting.get(seconds, {})
            try:
                for chunk in chunks:  # assembled, analysed and written a chunk of namespaces at a time
                    work = [(items[w.workload.key], w) for w in chunk if w.workload.key in items]
                    del chunk
                    for done in pool.map(attempt, work) if len(work) > 1 else map(attempt, work):
                        tally.add(done)
            except Exception:
                metrics.ERRORS.labels("metrics_source").inc()
                LOG.exception(
                    "assembling the %s windows failed; the rest keep their status", timedelta(seconds=seconds)
                )
    marks.append(time.monotonic())
    if counts_policies:
        update_policy_statuses(kube, state.policies, state.governed, state.now)
    if chunked or not pending:
        tally.publish()
    ctx.last_cycle = time.monotonic()
    spans = [b - a for a, b in zip(marks, [*marks[1:], ctx.last_cycle], strict=True)]
    LOG.info(
        "cycle phases: listing %.1f s, metrics %.1f s, analysis and writes %.1f s, policies %.1f s",
        *spans,
    )
    if tally.changed:
        LOG.info(
            "status writes by what changed first: %s",
            ", ".join(f"{path} {count}" for path, count in tally.changed.most_common()),
        )
    ctx.last_written = sum(tally.written.values())
    ctx.last_refreshed = tally.written["refresh"]
    release_free_memory()  # the cycle's transients are gone: their pages need not stay resident
    return tally.updated


@dataclass
class _Tally:
    """What a cycle's analyses add up to, kept as they come: the analyses for the metrics (never the
    windows they were made from), the writes by reason."""

    analysed: list[tuple[WorkloadRef, Analysis]] = field(default_factory=list)
    written: Tally[str] = field(default_factory=Tally)
    #: What said something new, by status path, for the "changed" writes.
    changed: Tally[str] = field(default_factory=Tally)

    @property
    def updated(self) -> int:
        return len(self.analysed)

    def add(self, done: _Analysed | None) -> None:
        if done is None:
            return
        self.analysed.append((done.item.ref, done.analysis))
        if done.written is not None:
            self.written[done.written.reason] += 1
            if done.written.changed is not None:
                self.changed[done.written.changed] += 1

    def publish(self) -> None:
        """The per-workload and per-namespace figures, as this cycle saw them."""
        metrics.publish_recommendations(self.analysed)


def _prepare(
    ctx: OperatorContext,
    store: RecommendationStore,
    cfg: OperatorConfig,
    state: CycleState,
    recommendation: StoredRecommendation,
) -> _Pending | None:
    """Read the workload and decide its settings; remove the recommendation of an opted-out one."""
    ref = recommendation.ref
    governed = _count_governed(ctx, state, ref)
    if governed is None:  # the workload is gone; garbage collection removes the recommendation
        return None
    workload, settings = governed
    if not settings.recommends:
        apply = recommendation.status.apply
        if "apply" in recommendation.unreadable or (apply is not None and apply.in_flight):
            # a change in flight is settled by the actuator first (its onDisable rule); the
            # recommendation stays until then, so people still see what the change is about
            return None
        why = "opt-out annotation" if settings.ignored else f"policy {settings.policy} is Off"
        remove_recommendation(store, ctx, ref, why)
        return None
    seconds = observation_seconds(settings, cfg.window_seconds)
    return _Pending(ref, recommendation, workload, settings, seconds)


def _count_governed(
    ctx: OperatorContext, state: CycleState, ref: WorkloadRef
) -> tuple[Mapping[str, Any], EffectiveSettings] | None:
    """The workload and the settings its policies give it, counted for the policies' statuses (unless
    it opted out); None when the workload is gone."""
    kube = ctx.kube
    workload = state.workload(kube, ref)
    if workload is None:
        return None
    metadata = workload.get("metadata") or {}
    namespace_labels = state.labels_of(kube, ref.namespace)
    settings = settings_for_workload(
        state.policies, namespace_labels, metadata.get("labels") or {}, metadata.get("annotations") or {}
    )
    if not settings.ignored:
        state.governed.append((namespace_labels, dict(metadata.get("labels") or {})))
    return workload, settings


@dataclass
class _Analysed:
    """One workload's analysis this cycle."""

    item: _Pending
    analysis: Analysis
    written: StatusWrite | None = None  # why this cycle wrote the status; None: not written


def _analyse_and_write(
    store: RecommendationStore,
    kube: KubeAdapter,
    cfg: OperatorConfig,
    state: CycleState,
    item: _Pending,
    window: WorkloadWindow,
) -> _Analysed | None:
    """Analyse one workload and (recommender) write its status; None when the analysis failed.

    Runs on a worker thread: it reads the shared cycle state and changes nothing in it. The status is
    refreshed within `refresh_period`: under an Apply policy within its governing maxStaleness, so
    skipping a write never makes the actuator's freshness gate call it stale.
    """
    ref, settings = item.ref, item.settings
    hpa = state.hpa_of(kube, ref) if is_scalable(ref.kind) else None
    window = with_hpa(window, hpa)
    uid = str((item.workload.get("metadata") or {}).get("uid", ""))
    try:
        figures = summarise(window)  # once: the engine's input and the status's baseline
        analysis = analyse(
            window,
            settings,
            state.now,
            item.window_seconds,
            state.capacity,
            stored_lookback(item.recommendation, window),
            figures,
        )
    except Exception:
        metrics.ERRORS.labels("analysis").inc()
        LOG.exception("analysis of %s failed", ref.key)
        return None
    metrics.WORKLOADS_ANALYZED.inc()
    analysis = with_cost(analysis, cfg.gpu_prices, gpu_models(window))
    written = write_recommendation(
        store, kube, uid, item.recommendation, analysis, window, settings, state.now,
        refresh_after=refresh_period(
            cfg.interval_seconds,
            settings.max_staleness,
            f"{ref.key} {window_end_of(item.recommendation)}",
            item.window_seconds,
            acted_on=settings.may_change,
        ),
        workload_generation=(item.workload.get("metadata") or {}).get("generation"),
        figures=figures,
    )  # fmt: skip
    return _Analysed(item=item, analysis=analysis, written=written)


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
