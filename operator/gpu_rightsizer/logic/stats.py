"""Raw samples → `SignalStats`: cleaning, percentiles, activity, trend, sawtooth, counter rates, gaps.

Pure Python (the standard library's `math` only; numpy is not a dependency of the project): windows
are at most a few thousand samples per series, where a sort and one pass cost microseconds.
Percentiles interpolate linearly between closest ranks, as numpy's default and Prometheus'
`quantile_over_time` do, so the OpenMetrics and Prometheus sources agree on the same data.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence

from gpu_rightsizer.model.metric_names import DCGM_BLANK_SENTINEL_MIN, THROTTLE_CLOCK_EVENT_MASK
from gpu_rightsizer.model.observation import SignalStats

#: Smallest p95 - p5 spread for which a sawtooth is scored; below it a signal counts as flat.
DEFAULT_SAWTOOTH_FLOOR = 0.1

Sample = tuple[float, float]  # (unix seconds, value)


def is_missing(value: float) -> bool:
    """NaN, ±inf and DCGM blank sentinels (≥ 0x7ffffffffffffff0) carry no measurement."""
    return math.isnan(value) or math.isinf(value) or value >= DCGM_BLANK_SENTINEL_MIN


def clean(samples: Iterable[Sample]) -> list[Sample]:
    """Samples with a real value, sorted by time; duplicates of one timestamp keep the last value."""
    by_time: dict[float, float] = {}
    for timestamp, value in samples:
        if not is_missing(value):
            by_time[timestamp] = value
    return sorted(by_time.items())


def percentile(sorted_values: Sequence[float], quantile: float) -> float:
    """Linear-interpolated percentile of already sorted values (`quantile` in 0..1)."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    rank = quantile * (len(sorted_values) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(sorted_values) - 1)
    weight = rank - low
    return sorted_values[low] * (1.0 - weight) + sorted_values[high] * weight


def trend_per_hour(samples: Sequence[Sample]) -> float | None:
    """Least-squares slope of value over time, in the value's unit per hour (None under 3 samples)."""
    if len(samples) < 3:
        return None
    count = len(samples)
    mean_t = sum(t for t, _ in samples) / count
    mean_v = sum(v for _, v in samples) / count
    var_t = sum((t - mean_t) ** 2 for t, _ in samples)
    if var_t == 0:
        return None
    cov = sum((t - mean_t) * (v - mean_v) for t, v in samples)
    return cov / var_t * 3600.0


def sawtooth_score(values: Sequence[float], floor: float = DEFAULT_SAWTOOTH_FLOOR) -> float | None:
    """How strongly consecutive samples alternate: mean |Δ| over the p5..p95 spread, clipped to 0..1.

    A square wave flipping every sample scores 1, a flat or slowly drifting signal near 0, white noise
    about 0.35. Signals whose spread is below `floor` score 0: tiny wiggles are not a stall pattern.
    """
    if len(values) < 3:
        return None
    ordered = sorted(values)
    spread = percentile(ordered, 0.95) - percentile(ordered, 0.05)
    if spread < floor:
        return 0.0
    mean_step = sum(abs(b - a) for a, b in itertools.pairwise(values)) / (len(values) - 1)
    return min(1.0, mean_step / spread)


def summarize(
    samples: Iterable[Sample],
    *,
    activity_floor: float | None = None,
    sawtooth_floor: float | None = DEFAULT_SAWTOOTH_FLOOR,
) -> SignalStats | None:
    """Distribution of one signal over the window; None when no sample survives cleaning.

    `sawtooth_floor` None skips the sawtooth score (it is meaningful for 0..1 activity ratios).
    """
    kept = clean(samples)
    if not kept:
        return None
    values = [v for _, v in kept]
    ordered = sorted(values)
    active = None
    if activity_floor is not None:
        active = sum(1 for v in values if v > activity_floor) / len(values)
    return SignalStats(
        samples=len(values),
        mean=math.fsum(values) / len(values),
        p50=percentile(ordered, 0.50),
        p95=percentile(ordered, 0.95),
        p99=percentile(ordered, 0.99),
        max=ordered[-1],
        min=ordered[0],
        active_fraction=active,
        trend_per_hour=trend_per_hour(kept),
        sawtooth=sawtooth_score(values, sawtooth_floor) if sawtooth_floor is not None else None,
    )


def counter_rates(samples: Iterable[Sample]) -> list[Sample]:
    """Per-second rate between consecutive counter samples, stamped at the later sample.

    A drop is a counter reset (process restart): the increase is then the new value itself, as
    Prometheus' `rate()` assumes.
    """
    kept = clean(samples)
    rates: list[Sample] = []
    for (t0, v0), (t1, v1) in itertools.pairwise(kept):
        elapsed = t1 - t0
        if elapsed <= 0:
            continue
        increase = v1 - v0 if v1 >= v0 else v1
        rates.append((t1, increase / elapsed))
    return rates


def scale(samples: Iterable[Sample], factor: float) -> list[Sample]:
    """Every value multiplied by `factor` (unit conversion, e.g. GPU_UTIL percent → ratio)."""
    return [(t, v * factor) for t, v in samples]


def gaps(
    timestamps: Sequence[float], expected_step: float, tolerance: float = 2.5
) -> list[tuple[float, float]]:
    """Intervals between consecutive samples longer than `tolerance` × the expected step."""
    ordered = sorted(timestamps)
    return [(a, b) for a, b in itertools.pairwise(ordered) if b - a > tolerance * expected_step]


def coverage(samples: int, window_seconds: float, step_seconds: float) -> float:
    """Samples present / samples expected over the window, capped at 1."""
    expected = max(1.0, window_seconds / step_seconds)
    return min(1.0, samples / expected)


def bucket(timestamp: float, step_seconds: float) -> int:
    """Index of the nearest step (aligns series scraped at slightly different instants)."""
    return round(timestamp / step_seconds)


def _last_in_each_step(one: Sequence[Sample], step_seconds: float) -> dict[int, float]:
    """One value per step of a series: the last clean one in it."""
    last_in_step: dict[int, float] = {}
    for timestamp, value in clean(one):
        last_in_step[bucket(timestamp, step_seconds)] = value
    return last_in_step


def sum_aligned(series: Iterable[Sequence[Sample]], step_seconds: float) -> list[Sample]:
    """Sum of several series at each step (one value per series and step: the last one in it)."""
    totals: dict[int, float] = {}
    for one in series:
        for index, value in _last_in_each_step(one, step_seconds).items():
            totals[index] = totals.get(index, 0.0) + value
    return [(index * step_seconds, total) for index, total in sorted(totals.items())]


def max_aligned(series: Iterable[Sequence[Sample]], step_seconds: float) -> list[Sample]:
    """Largest of several series at each step (e.g. a pod's busiest process over its containers)."""
    peaks: dict[int, float] = {}
    for one in series:
        for index, value in _last_in_each_step(one, step_seconds).items():
            peaks[index] = max(peaks.get(index, value), value)
    return [(index * step_seconds, peak) for index, peak in sorted(peaks.items())]


def mean_aligned(series: Iterable[Sequence[Sample]], step_seconds: float) -> list[Sample]:
    """Mean of several series at each step (e.g. busy of a pod's GPUs)."""
    totals: dict[int, list[float]] = {}
    for one in series:
        last_in_step: dict[int, float] = {}
        for timestamp, value in clean(one):
            last_in_step[bucket(timestamp, step_seconds)] = value
        for index, value in last_in_step.items():
            totals.setdefault(index, []).append(value)
    return [(index * step_seconds, math.fsum(vs) / len(vs)) for index, vs in sorted(totals.items())]


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson correlation of two equally long series; None when too short or one is constant."""
    if len(xs) != len(ys) or len(xs) < 3:
        return None
    count = len(xs)
    mean_x = math.fsum(xs) / count
    mean_y = math.fsum(ys) / count
    var_x = math.fsum((x - mean_x) ** 2 for x in xs)
    var_y = math.fsum((y - mean_y) ** 2 for y in ys)
    if var_x <= 1e-12 or var_y <= 1e-12:
        return None
    cov = math.fsum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    return max(-1.0, min(1.0, cov / math.sqrt(var_x * var_y)))


def aligned_correlation(
    first: Sequence[Sample], second: Sequence[Sample], step_seconds: float
) -> float | None:
    """Pearson correlation of two series over the steps where both have a value."""
    a = {bucket(t, step_seconds): v for t, v in clean(first)}
    b = {bucket(t, step_seconds): v for t, v in clean(second)}
    common = sorted(a.keys() & b.keys())
    return pearson([a[k] for k in common], [b[k] for k in common])


def throttle_flag(bitmask: float) -> float:
    """A clock-event-reason bitmask → 1.0 where a throttling bit is set, else 0.0."""
    return 1.0 if int(bitmask) & THROTTLE_CLOCK_EVENT_MASK else 0.0


def throttle_flags(samples: Iterable[Sample]) -> list[Sample]:
    """Clock-event-reason bitmasks → 1.0 where a throttling bit is set, else 0.0 (mean = share throttled)."""
    return [(t, throttle_flag(v)) for t, v in clean(samples)]


def ratio_series(
    numerator: Sequence[Sample], denominator: Sequence[Sample], step_seconds: float
) -> list[Sample]:
    """numerator / denominator at each step where both exist and the denominator is positive."""
    den = {bucket(t, step_seconds): v for t, v in clean(denominator)}
    out: list[Sample] = []
    for t, v in clean(numerator):
        d = den.get(bucket(t, step_seconds))
        if d is not None and d > 0:
            out.append((t, v / d))
    return out


def combine_successive(parts: Sequence[SignalStats]) -> SignalStats | None:
    """One distribution from the summaries of series that followed each other (a pod and its successor).

    Counts, mean, min, max and the activity share are exact; the percentiles, trend and sawtooth are
    the sample-weighted means of the parts' (exact when the parts share one distribution, as a pod
    and the retry that runs the same work do; a source that has only summaries cannot do better).
    """
    kept = [p for p in parts if p.samples > 0]
    if not kept:
        return None
    total = sum(p.samples for p in kept)

    def weighted(values: Iterable[tuple[float | None, int]]) -> float | None:
        known = [(v, n) for v, n in values if v is not None]
        weight = sum(n for _, n in known)
        return math.fsum(v * n for v, n in known) / weight if known and weight else None

    return SignalStats(
        samples=total,
        mean=math.fsum(p.mean * p.samples for p in kept) / total,
        p50=math.fsum(p.p50 * p.samples for p in kept) / total,
        p95=math.fsum(p.p95 * p.samples for p in kept) / total,
        p99=math.fsum(p.p99 * p.samples for p in kept) / total,
        max=max(p.max for p in kept),
        min=min(p.min for p in kept),
        active_fraction=weighted((p.active_fraction, p.samples) for p in kept),
        trend_per_hour=weighted((p.trend_per_hour, p.samples) for p in kept),
        sawtooth=weighted((p.sawtooth, p.samples) for p in kept),
    )
