"""The cycle's metric reads: one read of the source per window length, published as the operator's
own metrics."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

from gpu_rightsizer.adapters.source import (
    ExtraOwners,
    ReadsInChunks,
    Scope,
    WindowRead,
    WindowSource,
)
from gpu_rightsizer.config import OperatorConfig
from gpu_rightsizer.logic.capacity import ClusterCapacity
from gpu_rightsizer.model.observation import WorkloadWindow
from gpu_rightsizer.model.shards import ShardSlice
from gpu_rightsizer.runtime import metrics

LOG = logging.getLogger(__name__)


def capacity_from_metrics(source: WindowSource | None, end: datetime) -> Callable[[], ClusterCapacity] | None:
    """Node capacity from the metrics, for when the API server's nodes cannot be listed."""
    if source is None:
        return None
    return lambda: source.read_capacity(end)


def scope_of(cfg: OperatorConfig) -> Scope:
    """What the operator watches: one namespace's workloads, or every one's; a shard's only when sharded."""
    return Scope(
        namespace=cfg.namespaces[0] if len(cfg.namespaces) == 1 else None,
        shard=shard_of(cfg) if cfg.sharded else None,
    )


def shard_of(cfg: OperatorConfig) -> ShardSlice:
    """This process's share of the namespaces (all of them unless sharded)."""
    return ShardSlice(cfg.shard, cfg.total_shards)


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


def fetch_chunks(
    source: WindowSource | None,
    windows: list[float],
    end: datetime,
    scope: Scope,
    owners: ExtraOwners | None = None,
    failures: dict[float, str] | None = None,
    backfilling: set[float] | None = None,
) -> dict[float, Iterator[list[WorkloadWindow]]]:
    """Window length -> its windows, a chunk of namespaces at a time: one read of the source per
    distinct window length, done here; a source that reads in chunks (`ReadsInChunks`) assembles
    each chunk as it is taken, so the cycle never holds every window at once.

    A window the source has not seen whole yet (an incremental source backfilling) gives no batch and
    is added to `backfilling`, so its workloads keep their last status. A window whose read fails is
    left out (counted and logged); the others still go ahead.
    """
    if source is None or not windows:
        return {}
    batches: dict[float, Iterator[list[WorkloadWindow]]] = {}
    failed: list[str] = []
    for seconds in windows:
        try:
            if isinstance(source, ReadsInChunks):
                read = source.read_window_chunks(seconds, end, scope=scope, owners=owners)
            else:
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
            failed.append(str(error))
            LOG.debug(
                "metrics source %s failed for the %s window: %s",
                source.where,
                timedelta(seconds=seconds),
                error,
            )
            continue
        batches[seconds] = read.batches()
        metrics.METRICS_SOURCE_UP.labels(_duration_label(seconds)).set(1)
        metrics.METRICS_LAST_SUCCESS.set(time.time())
    if failed:  # one line a person sees per cycle; the per-window lines are at DEBUG
        LOG.error(
            "metrics source %s failed for %d of %d window(s): %s. Check %s; recommendations keep their "
            "last analysis and show METRICS False (condition MetricsAvailable)",
            source.where,
            len(failed),
            len(windows),
            failed[0],
            URL_SETTINGS,
        )
    return batches


#: Where a person sets the Prometheus URL, named in the outage line.
URL_SETTINGS = "prometheus.url (chart), --prometheus-url or GPURS_PROMETHEUS_URL (run)"


def _duration_label(seconds: float) -> str:
    return f"{seconds:g}s"
