"""Streaming window statistics: each cycle adds only its new samples, the window is read from summaries.

Why: re-reading a whole window from Prometheus every cycle makes its work grow with pods × window
length × cycles. Here every series keeps a ring of per-interval records (the window is split into
`slots` intervals of `window / slots` seconds); a cycle adds the samples since the previous one to the
open interval, whole intervals older than the window expire, and the window's `SignalStats` are
merged from the intervals on read. The number of intervals is fixed, so reading a 24 h window costs
the same as reading a 5 min one.

What is exact and what is estimated:

* count, mean, min, max, share above the activity floor, least-squares trend and the mean absolute
  step between consecutive samples are kept exactly (sums and extremes merge without loss);
* quantiles (p05, p50, p95, p99) come from DDSketch (the `ddsketch` package, Datadog's reference
  implementation): every interval keeps the bin counts of a logarithmic mapping with relative
  accuracy `RELATIVE_ACCURACY`, bins of intervals add up exactly, and the samples at the two ranks
  around `q * (n - 1)` read from the merged bins are each within that relative error, so their linear
  interpolation (what `stats.percentile` computes from the exact samples) is too. Values
  whose magnitude is below `ZERO_BELOW` count as zero (absolute error below it), which keeps the bin
  range of near-idle ratios bounded;
* the window covers whole intervals: it reaches back at least `window` seconds and at most one
  interval more.

The sawtooth score uses the sketch's p05/p95 spread, so it carries the quantile error too.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ddsketch.ddsketch import BaseDDSketch
from ddsketch.mapping import LogarithmicMapping
from ddsketch.store import DenseStore

from gpu_rightsizer.logic.stats import DEFAULT_SAWTOOTH_FLOOR, Sample, is_missing
from gpu_rightsizer.model.observation import SignalStats

#: Relative accuracy of every quantile (DDSketch's alpha): 1 % of the value at that rank.
RELATIVE_ACCURACY = 0.01
#: Magnitudes below this count as zero in the quantile bins (not in the exact sums and extremes).
ZERO_BELOW = 1e-6
#: Intervals per window: the cost of a read and the granularity of expiry.
DEFAULT_SLOTS = 12
#: One mapping for every sketch: bins of sketches that share it can be added together.
MAPPING = LogarithmicMapping(RELATIVE_ACCURACY)

Bins = dict[int, int]
SeriesKey = TypeVar("SeriesKey", bound=Hashable)


def _bin_of(value: float) -> tuple[int, int]:
    """(sign, key): sign 0 for zero, 1 positive, -1 negative; key is the mapping's bin."""
    if abs(value) < ZERO_BELOW:
        return 0, 0
    if value > 0:
        return 1, int(MAPPING.key(value))
    return -1, int(MAPPING.key(-value))


@dataclass(slots=True)
class Interval:
    """Mergeable summary of the samples of one series in one interval `[start, start + width)`."""

    start: float
    count: int = 0
    total: float = 0.0
    minimum: float = math.inf
    maximum: float = -math.inf
    active: int = 0
    #: Least-squares sums, with times relative to the series' origin (exact to float precision).
    sum_t: float = 0.0
    sum_tt: float = 0.0
    sum_tv: float = 0.0
    #: Σ|Δ| and number of steps between consecutive samples inside this interval.
    abs_steps: float = 0.0
    steps: int = 0
    #: |Δ| from the previous interval's last sample into this one's first (None when it had none).
    entry_step: float | None = None
    zeros: int = 0
    positive: Bins = field(default_factory=dict)
    negative: Bins = field(default_factory=dict)

    def add(self, time: float, value: float, relative_time: float, floor: float | None) -> None:
        """One cleaned sample, newer than every sample added before."""
        self.count += 1
        self.total += value
        self.minimum = min(self.minimum, value)
        self.maximum = max(self.maximum, value)
        if floor is not None and value > floor:
            self.active += 1
        self.sum_t += relative_time
        self.sum_tt += relative_time * relative_time
        self.sum_tv += relative_time * value
        sign, key = _bin_of(value)
        if sign == 0:
            self.zeros += 1
        else:
            bins = self.positive if sign > 0 else self.negative
            bins[key] = bins.get(key, 0) + 1


@dataclass(slots=True)
class _Merged:
    """Sums of several intervals (the closed part of a window, cached between reads)."""

    count: int = 0
    total: float = 0.0
    minimum: float = math.inf
    maximum: float = -math.inf
    active: int = 0
    sum_t: float = 0.0
    sum_tt: float = 0.0
    sum_tv: float = 0.0
    abs_steps: float = 0.0
    steps: int = 0
    zeros: int = 0
    positive: Bins = field(default_factory=dict)
    negative: Bins = field(default_factory=dict)

    def add(self, interval: Interval, *, with_entry_step: bool) -> None:
        self.count += interval.count
        self.total += interval.total
        self.minimum = min(self.minimum, interval.minimum)
        self.maximum = max(self.maximum, interval.maximum)
        self.active += interval.active
        self.sum_t += interval.sum_t
        self.sum_tt += interval.sum_tt
        self.sum_tv += interval.sum_tv
        self.abs_steps += interval.abs_steps
        self.steps += interval.steps
        if with_entry_step and interval.entry_step is not None:
            self.abs_steps += interval.entry_step
            self.steps += 1
        self.zeros += interval.zeros
        for key, count in interval.positive.items():
            self.positive[key] = self.positive.get(key, 0) + count
        for key, count in interval.negative.items():
            self.negative[key] = self.negative.get(key, 0) + count

    def sketch(self) -> BaseDDSketch:
        """A DDSketch holding these bins (built per read: only the bins present, no raw samples)."""
        positive, negative = DenseStore(), DenseStore()
        for key, count in self.positive.items():
            positive.add(key, count)
        for key, count in self.negative.items():
            negative.add(key, count)
        return BaseDDSketch(MAPPING, positive, negative, float(self.zeros))


class SeriesWindow:
    """The window of one series: a ring of intervals, the open one last.

    `activity_floor` counts samples above it (`SignalStats.active_fraction`); `sawtooth_floor` None
    leaves the sawtooth score out (it means something for 0..1 ratios only), as `stats.summarize` does.
    """

    __slots__ = (
        "_closed",
        "_closed_dirty",
        "_intervals",
        "_last",
        "_last_counter",
        "activity_floor",
        "origin",
        "sawtooth_floor",
        "slots",
        "width",
        "window_seconds",
    )

    def __init__(
        self,
        window_seconds: float,
        *,
        slots: int = DEFAULT_SLOTS,
        activity_floor: float | None = None,
        sawtooth_floor: float | None = DEFAULT_SAWTOOTH_FLOOR,
    ) -> None:
        if window_seconds <= 0:
            raise ValueError(f"window must be positive, got {window_seconds} s")
        if slots < 1:
            raise ValueError(f"a window needs at least one interval, got {slots}")
        self.window_seconds = window_seconds
        self.slots = slots
        self.width = window_seconds / slots
        self.activity_floor = activity_floor
        self.sawtooth_floor = sawtooth_floor
        self.origin: float | None = None
        self._intervals: list[Interval] = []
        self._last: Sample | None = None
        self._last_counter: Sample | None = None
        self._closed = _Merged()
        self._closed_dirty = False

    # -- writing --------------------------------------------------------------------------------------
    def add(self, samples: Iterable[Sample]) -> int:
        """Add gauge samples; ones not newer than the last sample added (overlapping reads) are skipped.

        Returns how many samples were kept.
        """
        kept = 0
        for time, value in sorted(samples):
            if is_missing(value) or (self._last is not None and time <= self._last[0]):
                continue
            self._add_one(time, value)
            kept += 1
        return kept

    def add_counter(self, samples: Iterable[Sample]) -> int:
        """Add a counter's raw samples as per-second rates between consecutive samples.

        The previous call's last sample bridges the cycles, so no increase is lost between reads; a
        drop is a reset and the increase is then the new value, as Prometheus' `rate()` assumes.
        """
        rates: list[Sample] = []
        for time, value in sorted(samples):
            if is_missing(value):
                continue
            previous = self._last_counter
            if previous is not None and time <= previous[0]:
                continue
            self._last_counter = (time, value)
            if previous is None:
                continue
            increase = value - previous[1] if value >= previous[1] else value
            rates.append((time, increase / (time - previous[0])))
        return self.add(rates)

    def _add_one(self, time: float, value: float) -> None:
        if self.origin is None:
            self.origin = time
        start = math.floor(time / self.width) * self.width
        open_interval = self._intervals[-1] if self._intervals else None
        if open_interval is None or open_interval.start != start:
            open_interval = Interval(start=start)
            if self._last is not None:
                open_interval.entry_step = abs(value - self._last[1])
            if self._intervals:
                self._closed_dirty = True
            self._intervals.append(open_interval)
        elif self._last is not None:
            open_interval.abs_steps += abs(value - self._last[1])
            open_interval.steps += 1
        open_interval.add(time, value, time - self.origin, self.activity_floor)
        self._last = (time, value)

    def expire(self, now: float) -> None:
        """Drop intervals that end before `now - window` (they no longer overlap the window)."""
        horizon = now - self.window_seconds
        keep = [i for i in self._intervals if i.start + self.width > horizon]
        if len(keep) != len(self._intervals):
            self._intervals = keep
            self._closed_dirty = True

    # -- reading --------------------------------------------------------------------------------------
    @property
    def empty(self) -> bool:
        """No interval left in the window."""
        return not self._intervals

    @property
    def first_time(self) -> float | None:
        """Start of the oldest interval kept (how far back the window reaches today)."""
        return self._intervals[0].start if self._intervals else None

    @property
    def last_time(self) -> float | None:
        """Time of the newest sample added."""
        return self._last[0] if self._last else None

    def intervals(self) -> Iterator[Interval]:
        """The intervals, oldest first."""
        return iter(self._intervals)

    def complete(self, now: float, *, since: float | None = None) -> bool:
        """Whether the window is covered back to `now - window` (or back to `since`, when later).

        `since` is where data could start at all (e.g. the pod's start), so a young pod's window is
        complete once it is covered from its first sample on.
        """
        first = self.first_time
        if first is None:
            return False
        horizon = now - self.window_seconds
        if since is not None:
            horizon = max(horizon, since)
        return first <= horizon + self.width

    def _closed_part(self) -> _Merged:
        """Sums of every interval but the open one, rebuilt only when an interval closed or expired."""
        if self._closed_dirty:
            merged = _Merged()
            for position, interval in enumerate(self._intervals[:-1]):
                merged.add(interval, with_entry_step=position > 0)
            self._closed = merged
            self._closed_dirty = False
        return self._closed

    def merged(self, now: float | None = None) -> _Merged:
        """The window's sums: the cached closed part plus the open interval."""
        if now is not None:
            self.expire(now)
        if not self._intervals:
            return _Merged()
        closed = self._closed_part()
        if len(self._intervals) == 1:
            merged = _Merged()
            merged.add(self._intervals[0], with_entry_step=False)
            return merged
        merged = _Merged(
            count=closed.count,
            total=closed.total,
            minimum=closed.minimum,
            maximum=closed.maximum,
            active=closed.active,
            sum_t=closed.sum_t,
            sum_tt=closed.sum_tt,
            sum_tv=closed.sum_tv,
            abs_steps=closed.abs_steps,
            steps=closed.steps,
            zeros=closed.zeros,
            positive=dict(closed.positive),
            negative=dict(closed.negative),
        )
        merged.add(self._intervals[-1], with_entry_step=True)
        return merged

    def summary(self, now: float | None = None) -> SignalStats | None:
        """The window's statistics (expiring first when `now` is given); None without samples."""
        merged = self.merged(now)
        if merged.count == 0:
            return None
        sketch = merged.sketch()

        count = merged.count

        def at_rank(rank: int) -> float:
            # the middle of a rank picks that sample whatever the float rounding of q * (n - 1)
            value = sketch.get_quantile_value(min(1.0, (rank + 0.5) / (count - 1)))
            return 0.0 if value is None else float(value)

        def quantile(q: float) -> float:
            """Linear interpolation between the sketch's samples at the two closest ranks (as
            `stats.percentile` does between the exact ones), clipped to the exact extremes."""
            if count == 1:
                return merged.minimum
            rank = q * (count - 1)
            low = math.floor(rank)
            estimate = at_rank(low)
            if rank > low:
                estimate += (rank - low) * (at_rank(min(low + 1, count - 1)) - estimate)
            return min(merged.maximum, max(merged.minimum, estimate))

        sawtooth = None
        if self.sawtooth_floor is not None and count >= 3:
            spread = quantile(0.95) - quantile(0.05)
            sawtooth = (
                0.0 if spread < self.sawtooth_floor else min(1.0, merged.abs_steps / merged.steps / spread)
            )
        return SignalStats(
            samples=count,
            mean=merged.total / count,
            p50=quantile(0.50),
            p95=quantile(0.95),
            p99=quantile(0.99),
            max=merged.maximum,
            min=merged.minimum,
            active_fraction=merged.active / count if self.activity_floor is not None else None,
            trend_per_hour=_slope(merged) if count >= 3 else None,
            sawtooth=sawtooth,
        )


def _slope(merged: _Merged) -> float | None:
    """Least-squares slope per hour from the exact sums (None when every sample has one time)."""
    count = merged.count
    var_t = merged.sum_tt - merged.sum_t * merged.sum_t / count
    if var_t <= 1e-9 * max(1.0, merged.sum_tt):
        return None
    cov = merged.sum_tv - merged.sum_t * merged.total / count
    return cov / var_t * 3600.0


class StreamingStore(Generic[SeriesKey]):
    """Windows of many series under one window length, keyed by whatever identifies a series."""

    def __init__(self, window_seconds: float, *, slots: int = DEFAULT_SLOTS) -> None:
        if window_seconds <= 0:
            raise ValueError(f"window must be positive, got {window_seconds} s")
        self.window_seconds = window_seconds
        self.slots = slots
        self.series: dict[SeriesKey, SeriesWindow] = {}

    def window(
        self,
        key: SeriesKey,
        *,
        activity_floor: float | None = None,
        sawtooth_floor: float | None = DEFAULT_SAWTOOTH_FLOOR,
    ) -> SeriesWindow:
        """The series' window, created on first use with these floors."""
        found = self.series.get(key)
        if found is None:
            found = SeriesWindow(
                self.window_seconds,
                slots=self.slots,
                activity_floor=activity_floor,
                sawtooth_floor=sawtooth_floor,
            )
            self.series[key] = found
        return found

    def expire(self, now: float) -> int:
        """Expire old intervals everywhere and forget series left empty; returns how many were forgotten."""
        gone = []
        for key, series in self.series.items():
            series.expire(now)
            if series.empty:
                gone.append(key)
        for key in gone:
            del self.series[key]
        return len(gone)

    def summaries(self, now: float) -> dict[SeriesKey, SignalStats]:
        """Every series' window statistics at `now` (series without samples left out)."""
        self.expire(now)
        out: dict[SeriesKey, SignalStats] = {}
        for key, series in self.series.items():
            summary = series.summary()
            if summary is not None:
                out[key] = summary
        return out

    def __len__(self) -> int:
        return len(self.series)


def summarize_streamed(
    samples: Iterable[Sample],
    *,
    activity_floor: float | None = None,
    sawtooth_floor: float | None = DEFAULT_SAWTOOTH_FLOOR,
    cycle_seconds: float = 60.0,
    slots: int = DEFAULT_SLOTS,
) -> SignalStats | None:
    """`stats.summarize`'s answer computed the streaming way: cycle by cycle into a window of intervals.

    The window spans the samples exactly, so the result differs from `stats.summarize` only by the
    sketch's quantile error (and the sawtooth score built on it): the accuracy benchmark runs the
    engine on both to show the diagnoses do not change.
    """
    ordered = sorted(samples)
    if not ordered:
        return None
    span = max(ordered[-1][0] - ordered[0][0], cycle_seconds)
    window = SeriesWindow(span, slots=slots, activity_floor=activity_floor, sawtooth_floor=sawtooth_floor)
    batch: list[Sample] = []
    cycle_end = ordered[0][0] + cycle_seconds
    for sample in ordered:
        if sample[0] >= cycle_end:
            window.add(batch)
            batch = []
            cycle_end = sample[0] + cycle_seconds
        batch.append(sample)
    window.add(batch)
    return window.summary(ordered[-1][0])
