"""The operator's own Prometheus metrics (names are part of the chart's alerts and dashboard)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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
    "Estimated GPU-hours per day the current recommendations would free, by namespace.",
    ["namespace"],
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
