"""The periodic analysis cycle: one batch of metric queries for all workloads, then one status patch each.

Queries are aggregated server-side for the whole cluster per cycle (SPEC §4), so their number does
not grow with the number of workloads; only the status writes do.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter as Tally
from datetime import UTC, datetime, timedelta

import kopf
from kubernetes import client, config

from gpu_rightsizer.adapters.kube import KubeAdapter
from gpu_rightsizer.config import OperatorConfig
from gpu_rightsizer.handlers import metrics
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.status import analysed_status
from gpu_rightsizer.model.observation import WorkloadWindow

LOG = logging.getLogger(__name__)


def api_client() -> client.ApiClient:
    """A Kubernetes client from the in-cluster service account, else from KUBECONFIG."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()


def fetch_windows(cfg: OperatorConfig, start: datetime, end: datetime) -> list[WorkloadWindow]:
    """All workload windows from the configured Prometheus (imported lazily: optional at startup)."""
    from gpu_rightsizer.adapters.prometheus import PrometheusSource

    source = PrometheusSource(
        cfg.prometheus_url or "",
        token_file=cfg.prometheus_token_file,
        ca_file=cfg.prometheus_ca_file,
        insecure=cfg.prometheus_insecure,
    )
    return source.windows(start=start, end=end)


def run_cycle(memo: kopf.Memo, now: datetime | None = None) -> int:
    """Analyse every workload that has a GPURecommendation; returns how many were updated."""
    cfg: OperatorConfig = memo.config
    kube: KubeAdapter = memo.kube
    end = now or datetime.now(UTC)
    start = end - timedelta(seconds=cfg.window_seconds)
    try:
        windows = fetch_windows(cfg, start, end)
    except Exception as error:
        metrics.ERRORS.labels("metrics_source").inc()
        LOG.warning("metrics source failed, nothing analysed this cycle: %s", error)
        return 0
    by_diagnosis: Tally[tuple[str, str]] = Tally()
    wasted: dict[str, float] = {}
    updated = 0
    for window in windows:
        if cfg.namespaces and window.workload.namespace not in cfg.namespaces:
            continue
        recommendation = kube.get_recommendation(window.workload)
        if recommendation is None:  # not a workload the pod watcher has registered (gone or ignored)
            continue
        try:
            analysis = analyze_window(window)
        except Exception:
            metrics.ERRORS.labels("analysis").inc()
            LOG.exception("analysis of %s failed", window.workload.key)
            continue
        metrics.WORKLOADS_ANALYZED.inc()
        status = analysed_status(
            analysis,
            window.allocation,
            window_start=window.start,
            window_end=window.end,
            workload=window.workload,
            now=end,
            generation=(recommendation.get("metadata") or {}).get("generation"),
        )
        try:
            kube.patch_recommendation_status(
                window.workload, status.model_dump(mode="json", by_alias=True, exclude_none=True)
            )
        except Exception:
            metrics.ERRORS.labels("kubernetes").inc()
            LOG.exception("status update of %s failed", window.workload.key)
            continue
        by_diagnosis[(analysis.primary.value, window.workload.namespace)] += 1
        wasted[window.workload.namespace] = wasted.get(window.workload.namespace, 0.0) + analysis.savings.gpu_hours_per_day
        updated += 1
    metrics.RECOMMENDATIONS.clear()
    for (diagnosis, namespace), count in by_diagnosis.items():
        metrics.RECOMMENDATIONS.labels(diagnosis, namespace).set(count)
    metrics.WASTED_GPU_HOURS.clear()
    for namespace, hours in wasted.items():
        metrics.WASTED_GPU_HOURS.labels(namespace).set(hours)
    return updated


async def analysis_loop(memo: kopf.Memo) -> None:
    """Run a cycle every `interval`; the first one soon after startup. Never dies on one bad cycle."""
    cfg: OperatorConfig = memo.config
    if not cfg.prometheus_url:
        LOG.warning("no --prometheus-url: recommendations stay InsufficientData until one is configured")
        return
    stop: asyncio.Event = memo.stop
    delay = min(10.0, cfg.interval_seconds)
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), timeout=delay)
            return
        except TimeoutError:
            pass
        started = time.monotonic()
        try:
            updated = await asyncio.to_thread(run_cycle, memo)
            LOG.info("analysis cycle: %d recommendations updated in %.1f s", updated, time.monotonic() - started)
        except Exception:
            metrics.ERRORS.labels("cycle").inc()
            LOG.exception("analysis cycle failed")
        metrics.CYCLE_DURATION.observe(time.monotonic() - started)
        delay = cfg.interval_seconds

