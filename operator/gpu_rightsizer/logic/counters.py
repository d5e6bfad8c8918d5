"""Prometheus' `rate()` and `deriv()` of a counter, computed from its raw samples.

Why here: the counter families cost Prometheus most of a steady read, because a range query of
`rate(x[w]) > deriv(x[w]) or deriv(x[w])` evaluates three functions over every series at every step
(docs/scaling.md). A reader that fetches the raw samples once (`x[interval + w]`) and computes the
same figures itself spends Prometheus nothing but the samples. The file reader
(`adapters.openmetrics`) and the incremental reader (`adapters.incremental`) both use these, so
every path gives one number for one history.

Ranges are closed, `[t - w, t]`, as Prometheus 2.x selects them (3.0 leaves the start open; a sample
exactly at `t - w` then drops out, which moves a rate by at most one sample's share).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from gpu_rightsizer.logic.stats import Sample

#: Tolerance on sample times against a range's ends (answers give milliseconds as floats).
TIME_TOLERANCE = 1e-9


def extrapolated_rate(points: Sequence[Sample], resets: float, start: float, end: float) -> float:
    """Prometheus' rate() over [start, end] of a counter's samples there (promql extrapolatedRate)."""
    (first_t, first_v), (last_t, last_v) = points[0], points[-1]
    increase = last_v - first_v + resets
    sampled = last_t - first_t
    average_gap = sampled / (len(points) - 1)
    to_start, to_end = first_t - start, end - last_t
    if increase > 0 and first_v >= 0:
        to_start = min(to_start, sampled * (first_v / increase))
    threshold = average_gap * 1.1
    interval = sampled
    interval += to_start if to_start < threshold else average_gap / 2
    interval += to_end if to_end < threshold else average_gap / 2
    return increase * (interval / sampled) / (end - start)


def deriv(points: Sequence[Sample]) -> float:
    """Prometheus' deriv(): the least-squares slope of the samples, per second (centred sums, so a
    counter in the trillions keeps its precision; plain sums, as Prometheus 2.x adds them)."""
    origin = points[0][0]
    count = len(points)
    sum_t = sum_v = 0.0
    for t, v in points:
        sum_t += t - origin
        sum_v += v
    mean_t, mean_v = sum_t / count, sum_v / count
    covariance = variance = 0.0
    for t, v in points:
        offset = t - origin - mean_t
        covariance += offset * (v - mean_v)
        variance += offset * offset
    if variance <= 0:
        return 0.0
    return covariance / variance


def rates_at(kept: Sequence[Sample], times: Iterable[float], window: float) -> list[Sample]:
    """At each of `times` (ascending), `max(rate(), deriv())` of the samples in `[t - window, t]`:
    what `prometheus.counter_rate` answers there (rate() is right across a reset, deriv() for a
    series younger than the window). A time with fewer than two samples in its range has no value,
    as in PromQL. `kept` must be sorted by time, without missing values (`stats.clean`)."""
    out: list[Sample] = []
    if len(kept) < 2:
        return out
    resets_before = [0.0]
    for (_, previous), (_, current) in itertools.pairwise(kept):
        resets_before.append(resets_before[-1] + (previous if current < previous else 0.0))
    first = 0
    last = -1
    for at in times:
        while last + 1 < len(kept) and kept[last + 1][0] <= at + TIME_TOLERANCE:
            last += 1
        while first <= last and kept[first][0] < at - window - TIME_TOLERANCE:
            first += 1
        if last - first >= 1:
            points = kept[first : last + 1]
            resets = resets_before[last] - resets_before[first]
            out.append((at, max(extrapolated_rate(points, resets, at - window, at), deriv(points))))
    return out
