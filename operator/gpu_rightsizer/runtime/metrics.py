"""The operator's own Prometheus metrics (names are part of the chart's alerts and dashboard)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram

from gpu_rightsizer.logic.waste import totals_by
from gpu_rightsizer.model.codes import APPLICABLE_ACTIONS
from gpu_rightsizer.model.observation import WorkloadRef
from gpu_rightsizer.model.result import Analysis

WORKLOADS_ANALYZED = Counter(
    "gpu_rightsizer_workloads_analyzed", "Workload windows analysed (one per workload per cycle)."
)
STATUS_WRITES = Counter(
    "gpu_rightsizer_status_writes",
    "Recommendation statuses written, by why: new (first analysis), changed (it says something new), "
    "refresh (the stored window grew old).",
    ["reason"],
)
RECOMMENDATIONS = Gauge(
    "gpu_rightsizer_recommendations",
    "Current recommendations by primary diagnosis and namespace.",
    ["diagnosis", "namespace"],
)
WASTED_GPU_HOURS = Gauge(
    "gpu_rightsizer_wasted_gpu_hours_per_day",
    "GPU-hours per day the analysed workloads hold and leave idle (allocated x (1 - busy)), by namespace.",
    ["namespace"],
)
SAVINGS_GPU_HOURS = Gauge(
    "gpu_rightsizer_savings_gpu_hours_per_day",
    "GPU-hours per day the recommendations' landable actions would free, by namespace.",
    ["namespace"],
)
COST = Gauge(
    "gpu_rightsizer_cost_per_day",
    "What the analysed workloads' GPUs cost per day at the configured GPU-hour price, by namespace.",
    ["namespace"],
)
WASTED_COST = Gauge(
    "gpu_rightsizer_wasted_cost_per_day",
    "What the idle GPU time costs per day at the configured GPU-hour price, by namespace.",
    ["namespace"],
)
SAVINGS_COST = Gauge(
    "gpu_rightsizer_savings_cost_per_day",
    "What the landable actions would save per day at the configured GPU-hour price, by namespace.",
    ["namespace"],
)
#: Labels of the per-workload figures: the workload, and its diagnosis (for a table of top wasters).
WORKLOAD_LABELS = ["namespace", "kind", "workload", "diagnosis"]
WORKLOAD_WASTED_GPU_HOURS = Gauge(
    "gpu_rightsizer_workload_wasted_gpu_hours_per_day",
    "GPU-hours per day one workload holds and leaves idle (allocated x (1 - busy)).",
    WORKLOAD_LABELS,
)
WORKLOAD_SAVINGS_GPU_HOURS = Gauge(
    "gpu_rightsizer_workload_savings_gpu_hours_per_day",
    "GPU-hours per day one workload's landable actions would free.",
    WORKLOAD_LABELS,
)
WORKLOAD_ALLOCATED_GPUS = Gauge(
    "gpu_rightsizer_workload_allocated_gpus",
    "Whole-GPU equivalents one workload holds (a MIG slice its compute share, a time-sliced share 1/N).",
    WORKLOAD_LABELS,
)
WORKLOAD_BUSY = Gauge(
    "gpu_rightsizer_workload_gpu_busy_ratio",
    "Mean GPU busy of one workload over its window (GR_ENGINE_ACTIVE, or GPU_UTIL), 0..1.",
    WORKLOAD_LABELS,
)
WORKLOAD_COST = Gauge(
    "gpu_rightsizer_workload_cost_per_day",
    "What one workload's GPUs cost per day at the configured GPU-hour price.",
    WORKLOAD_LABELS,
)
WORKLOAD_WASTED_COST = Gauge(
    "gpu_rightsizer_workload_wasted_cost_per_day",
    "What one workload's idle GPU time costs per day at the configured GPU-hour price.",
    WORKLOAD_LABELS,
)
WORKLOAD_SAVINGS_COST = Gauge(
    "gpu_rightsizer_workload_savings_cost_per_day",
    "What one workload's landable actions would save per day at the configured GPU-hour price.",
    WORKLOAD_LABELS,
)
CYCLE_DURATION = Histogram(
    "gpu_rightsizer_cycle_duration_seconds",
    "Duration of one analysis cycle over all workloads.",
    buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
)
ERRORS = Counter("gpu_rightsizer_errors", "Errors by kind (metrics source, kubernetes, analysis).", ["kind"])
#: Every kind the operator counts, exported at 0 from the start: a dashboard or alert on
#: gpu_rightsizer_errors_total reads 0, not "no data", until the first error.
ERROR_KINDS = ("analysis", "cycle", "kubernetes", "metrics_source", "policy")
for _kind in ERROR_KINDS:
    ERRORS.labels(_kind)
ACTIONS_APPLIED = Counter(
    "gpu_rightsizer_actions_applied",
    "Changes carried out by the actuator, by action and result.",
    ["action", "result"],
)
#: What the actuator counts per change: sent, verified after the window, rolled back on regression.
ACTION_RESULTS = ("applied", "verified", "rolled_back")
#: Exported at 0 from the start, so the dashboard and the rollback alert read 0, not "no data",
#: before the first change (and on a recommender that applies nothing).
for _action in sorted(APPLICABLE_ACTIONS):
    for _result in ACTION_RESULTS:
        ACTIONS_APPLIED.labels(_action.value, _result)
SAMPLES_FETCHED = Gauge(
    "gpu_rightsizer_cycle_samples_fetched",
    "Samples the last cycle read from Prometheus (the new interval, or backfill chunks), by window.",
    ["window"],
)
QUERY_DURATION = Histogram(
    "gpu_rightsizer_query_duration_seconds",
    "Duration of one Prometheus query by family (gpu, pod, xid, ksm, range).",
    ["family"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
)
BACKFILL_PROGRESS = Gauge(
    "gpu_rightsizer_backfill_progress_ratio",
    "Share of the window's backfill read since the start (1 once complete), by window.",
    ["window"],
)
STATE_RESTORED_SERIES = Gauge(
    "gpu_rightsizer_state_restored_series",
    "Series loaded from saved state when the window's reads started (0 after a cold start, or without "
    "--state-dir), by window.",
    ["window"],
)
RECORDED_SERIES_USED = Gauge(
    "gpu_rightsizer_recorded_series_used",
    "1 when a signal family is read from the chart's recording rules, 0 when from its raw expression "
    "(detected when a window's reads start, then every 15 minutes), by window and family.",
    ["window", "family"],
)
WORKLOADS_PENDING = Gauge(
    "gpu_rightsizer_workloads_pending_window",
    "Workloads whose window is still being backfilled: their recommendations keep their last status.",
)
METRICS_SOURCE_UP = Gauge(
    "gpu_rightsizer_metrics_source_up",
    "1 when the last batch of metric queries for an observation window was answered, 0 when it failed.",
    ["window"],
)
METRICS_LAST_SUCCESS = Gauge(
    "gpu_rightsizer_metrics_last_success_timestamp_seconds",
    "Unix time of the last answered batch of metric queries.",
)


#: The gauges `publish_recommendations` rewrites as a whole each cycle.
_FLEET_GAUGES = (
    RECOMMENDATIONS,
    WASTED_GPU_HOURS,
    SAVINGS_GPU_HOURS,
    COST,
    WASTED_COST,
    SAVINGS_COST,
    WORKLOAD_WASTED_GPU_HOURS,
    WORKLOAD_SAVINGS_GPU_HOURS,
    WORKLOAD_ALLOCATED_GPUS,
    WORKLOAD_BUSY,
    WORKLOAD_COST,
    WORKLOAD_WASTED_COST,
    WORKLOAD_SAVINGS_COST,
)


def publish_recommendations(analysed: Iterable[tuple[WorkloadRef, Analysis]]) -> None:
    """Replace the per-workload and per-namespace figures with this cycle's analyses.

    Waste and savings are published apart; money only for workloads whose GPU has a price, and a
    namespace's money only when one of its workloads has one (no price, no money series).
    """
    rows = list(analysed)
    for gauge in _FLEET_GAUGES:
        gauge.clear()
    diagnoses: dict[tuple[str, str], int] = {}
    for ref, analysis in rows:
        key = (analysis.primary.value, ref.namespace)
        diagnoses[key] = diagnoses.get(key, 0) + 1
        labels = (ref.namespace, ref.kind, ref.name, analysis.primary.value)
        WORKLOAD_SAVINGS_GPU_HOURS.labels(*labels).set(analysis.savings.gpu_hours_per_day)
        if analysis.waste is not None:
            WORKLOAD_WASTED_GPU_HOURS.labels(*labels).set(analysis.waste.gpu_hours_per_day)
            WORKLOAD_ALLOCATED_GPUS.labels(*labels).set(analysis.waste.allocated_gpus)
            WORKLOAD_BUSY.labels(*labels).set(analysis.waste.busy_fraction)
        if analysis.cost is not None:
            WORKLOAD_COST.labels(*labels).set(analysis.cost.per_day)
            WORKLOAD_WASTED_COST.labels(*labels).set(analysis.cost.waste_per_day)
            WORKLOAD_SAVINGS_COST.labels(*labels).set(analysis.cost.savings_per_day)
    for (diagnosis, namespace), count in diagnoses.items():
        RECOMMENDATIONS.labels(diagnosis, namespace).set(count)
    for namespace, totals in totals_by((ref.namespace, analysis) for ref, analysis in rows).items():
        WASTED_GPU_HOURS.labels(namespace).set(round(totals.waste_gpu_hours_per_day, 3))
        SAVINGS_GPU_HOURS.labels(namespace).set(round(totals.savings_gpu_hours_per_day, 3))
        for gauge, money in (
            (COST, totals.cost_per_day),
            (WASTED_COST, totals.waste_cost_per_day),
            (SAVINGS_COST, totals.savings_cost_per_day),
        ):
            if money is not None:
                gauge.labels(namespace).set(round(money, 2))
