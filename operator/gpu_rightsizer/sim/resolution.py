"""Recordings at dcgm-exporter's default resolution: 1 s samples → 30 s averages read at 60 s steps.

dcgm-exporter exports, for profiling fields (DCGM_FI_PROF_*), the average over its collection interval
(30 s by default); device fields (DCGM_FI_DEV_*, e.g. GPU_UTIL) are the latest sample; Prometheus reads
either at its scrape/query step (60 s here). A short stationary recording is first repeated (tiled) so
the coarse window has enough steps; counters keep increasing across the seams.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable

#: One parsed sample: (metric name, labels, value, timestamp in seconds).
Sample = tuple[str, dict[str, str], float, float | None]

#: dcgm-exporter's default collection interval and a common Prometheus step.
DCGM_INTERVAL_SECONDS = 30.0
PROMETHEUS_STEP_SECONDS = 60.0


def _is_counter(name: str) -> bool:
    return name.endswith("_total")


def _is_interval_average(name: str) -> bool:
    return name.startswith("DCGM_FI_PROF_")


def tile(samples: Iterable[Sample], min_seconds: float) -> list[Sample]:
    """Repeat a stationary recording until it spans at least `min_seconds` (counters keep rising, or
    repeat their resets)."""
    rows = [row for row in samples if row[3] is not None]
    if not rows:
        return []
    stamps = sorted({row[3] for row in rows if row[3] is not None})
    first, last = stamps[0], stamps[-1]
    step = (last - first) / (len(stamps) - 1) if len(stamps) > 1 else 1.0
    period = last - first + step
    copies = max(1, math.ceil(min_seconds / period))
    by_series: dict[tuple[str, tuple[tuple[str, str], ...]], list[Sample]] = defaultdict(list)
    for row in rows:
        by_series[(row[0], tuple(sorted(row[1].items())))].append(row)
    out: list[Sample] = []
    for (name, _), series in by_series.items():
        series.sort(key=lambda r: r[3] or 0.0)
        increment = 0.0
        resets = any(later[2] < earlier[2] for earlier, later in itertools.pairwise(series))
        if _is_counter(name) and len(series) > 1 and not resets:
            rise = series[-1][2] - series[0][2]
            increment = rise + rise / (len(series) - 1)
        # A counter that resets (a container restart) replays its container lives in every copy: an
        # offset of last - first would be negative and make every later copy fall.
        for copy in range(copies):
            for row_name, labels, value, stamp in series:
                out.append((row_name, labels, value + copy * increment, (stamp or 0.0) + copy * period))
    return out


def coarsen(
    samples: Iterable[Sample],
    *,
    interval_seconds: float = DCGM_INTERVAL_SECONDS,
    step_seconds: float = PROMETHEUS_STEP_SECONDS,
) -> list[Sample]:
    """What Prometheus holds at `step_seconds` when dcgm-exporter averages over `interval_seconds`.

    At each step t: profiling fields give the mean of the samples in (t - interval, t]; counters and
    other gauges give their latest sample at or before t.
    """
    by_series: dict[tuple[str, tuple[tuple[str, str], ...]], list[Sample]] = defaultdict(list)
    for row in samples:
        if row[3] is not None:
            by_series[(row[0], tuple(sorted(row[1].items())))].append(row)
    stamps = [row[3] for series in by_series.values() for row in series if row[3] is not None]
    if not stamps:
        return []
    start = math.floor(min(stamps) / step_seconds) * step_seconds + step_seconds
    end = max(stamps)
    out: list[Sample] = []
    for (name, _), series in by_series.items():
        series.sort(key=lambda r: r[3] or 0.0)
        times = [r[3] or 0.0 for r in series]
        t = start
        index = 0
        while t <= end + 1e-9:
            while index < len(series) and times[index] <= t + 1e-9:
                index += 1
            if index:
                labels = series[index - 1][1]
                if _is_interval_average(name):
                    window = [r[2] for r in series[:index] if (r[3] or 0.0) > t - interval_seconds + 1e-9]
                    if window:
                        out.append((name, labels, math.fsum(window) / len(window), t))
                else:
                    out.append((name, labels, series[index - 1][2], t))
            t += step_seconds
    return out
