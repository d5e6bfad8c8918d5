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
from array import array
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import Generic, TypeVar

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

SeriesKey = TypeVar("SeriesKey", bound=Hashable)

# Positions in an interval's `numbers`. Least-squares sums use times relative to the series' origin.
COUNT, TOTAL, MINIMUM, MAXIMUM, ACTIVE, SUM_T, SUM_TT, SUM_TV, ABS_STEPS, STEPS, ENTRY_STEP, ZEROS = range(12)
_EMPTY = (0.0, 0.0, math.inf, -math.inf, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, math.nan, 0.0)
#: Keys of the negative values' bins are kept as `key + NEGATIVE` in the same table as the positive ones.
NEGATIVE = 1 << 40
#: Bins a store grows by (ddsketch's default of 128 would cost a kilobyte per series for nothing).
STORE_CHUNK = 8


def _bin_of(value: float) -> int | None:
    """The bin key of a value (negative values offset by NEGATIVE); None for zero."""
    if abs(value) < ZERO_BELOW:
        return None
    if value > 0:
        return int(MAPPING.key(value))
    return int(MAPPING.key(-value)) + NEGATIVE


class Interval:
    """Mergeable summary of the samples of one series in one interval `[start, start + width)`.

    Kept compact because a window holds `slots` of them per series: the exact sums in one array of
    doubles, the sketch's bins in a dict while the interval is open, appended to that same array as
    (key, count) pairs once it is closed (integers below 2**53 are exact as doubles).
    """

    __slots__ = ("bins", "numbers", "start")

    def __init__(self, start: float) -> None:
        self.start = start
        self.numbers = array("d", _EMPTY)
        self.bins: dict[int, int] | None = {}

    @property
    def count(self) -> int:
        return int(self.numbers[COUNT])

    def add(self, value: float, relative_time: float, floor: float | None) -> None:
        """One cleaned sample, newer than every sample added before."""
        if self.bins is None:
            raise RuntimeError("a closed interval takes no more samples")
        numbers = self.numbers
        numbers[COUNT] += 1
        numbers[TOTAL] += value
        numbers[MINIMUM] = min(numbers[MINIMUM], value)
        numbers[MAXIMUM] = max(numbers[MAXIMUM], value)
        if floor is not None and value > floor:
            numbers[ACTIVE] += 1
        numbers[SUM_T] += relative_time
        numbers[SUM_TT] += relative_time * relative_time
        numbers[SUM_TV] += relative_time * value
        key = _bin_of(value)
        if key is None:
            numbers[ZEROS] += 1
        else:
            self.bins[key] = self.bins.get(key, 0) + 1

    def step(self, change: float, *, entry: bool) -> None:
        """|Δ| from the previous sample: inside this interval, or into its first sample (`entry`)."""
        if entry:
            self.numbers[ENTRY_STEP] = change
        else:
            self.numbers[ABS_STEPS] += change
            self.numbers[STEPS] += 1

    def close(self) -> None:
        """Freeze the bins into the array of sums (a fraction of a dict's memory)."""
        if self.bins is not None:
            flat = [*self.numbers]
            for key, count in self.bins.items():
                flat.append(key)
                flat.append(count)
            self.numbers = array("d", flat)  # sized exactly: appending in place over-allocates
            self.bins = None

    def bin_items(self) -> Iterator[tuple[int, int]]:
        """(key, count) of every bin."""
        if self.bins is not None:
            return iter(self.bins.items())
        pairs = self.numbers[len(_EMPTY) :]
        return zip(map(int, pairs[::2]), map(int, pairs[1::2]), strict=True)


class _Merged:
    """Sums of several intervals, with their bins in DDSketch stores (the closed part is cached)."""

    __slots__ = ("negative", "numbers", "positive")

    def __init__(self) -> None:
        self.numbers = array("d", _EMPTY)
        self.positive = DenseStore(STORE_CHUNK)
        self.negative: DenseStore | None = None

    def add(self, interval: Interval, *, with_entry_step: bool) -> None:
        """Add an interval's sums and bins."""
        self.add_numbers(interval, with_entry_step=with_entry_step)
        self.add_bins(interval, 1)

    def add_numbers(self, interval: Interval, *, with_entry_step: bool, sign: int = 1) -> None:
        """Add (sign 1) or take away (sign -1) an interval's sums; extremes only grow (see `expire`)."""
        mine, theirs = self.numbers, interval.numbers
        for position in (COUNT, TOTAL, ACTIVE, SUM_T, SUM_TT, SUM_TV, ABS_STEPS, STEPS, ZEROS):
            mine[position] += sign * theirs[position]
        if sign > 0:
            mine[MINIMUM] = min(mine[MINIMUM], theirs[MINIMUM])
            mine[MAXIMUM] = max(mine[MAXIMUM], theirs[MAXIMUM])
        if with_entry_step:
            self.add_entry_step(interval, sign)

    def add_entry_step(self, interval: Interval, sign: int) -> None:
        """Count (or stop counting) the step into the interval's first sample."""
        entry = interval.numbers[ENTRY_STEP]
        if not math.isnan(entry):
            self.numbers[ABS_STEPS] += sign * entry
            self.numbers[STEPS] += sign

    def add_bins(self, interval: Interval, sign: int) -> None:
        """Add (sign 1) or take away (sign -1, an expired interval) an interval's bin counts: exact."""
        for key, count in interval.bin_items():
            if key >= NEGATIVE // 2:
                if self.negative is None:
                    self.negative = DenseStore(STORE_CHUNK)
                self.negative.add(key - NEGATIVE, sign * count)
            else:
                self.positive.add(key, sign * count)

    def copy(self) -> _Merged:
        twin = _Merged()
        twin.numbers = array("d", self.numbers)
        twin.positive.copy(self.positive)
        if self.negative is not None:
            twin.negative = DenseStore(STORE_CHUNK)
            twin.negative.copy(self.negative)
        return twin

    def values_at(self, ranks: Sequence[int]) -> list[float]:
        """The bin values of the samples at these ranks (ascending ranks, 0-based), in one pass.

        What DDSketch's `get_quantile_value` does for one rank, for all of them at once: negative
        bins from the largest magnitude, then the zeros, then positive bins. Each value is the
        mapping's representative of the rank's bin, within `RELATIVE_ACCURACY` of the sample.
        """
        out: list[float] = []
        pending = iter(ranks)
        target = next(pending, None)
        seen = 0.0
        for count, value in self._ascending():
            seen += count
            while target is not None and target < seen:
                out.append(value)
                target = next(pending, None)
            if target is None:
                break
        return out

    def _ascending(self) -> Iterator[tuple[float, float]]:
        negative = self.negative
        if negative is not None:
            for index in range(len(negative.bins) - 1, -1, -1):
                if negative.bins[index] > 0:
                    yield negative.bins[index], -float(MAPPING.value(index + negative.offset))
        if self.numbers[ZEROS]:
            yield self.numbers[ZEROS], 0.0
        positive = self.positive
        for index, count in enumerate(positive.bins):
            if count > 0:
                yield count, float(MAPPING.value(index + positive.offset))


class SeriesWindow:
    """The window of one series: a ring of intervals, the open one last.

    `activity_floor` counts samples above it (`SignalStats.active_fraction`); `sawtooth_floor` None
    leaves the sawtooth score out (it means something for 0..1 ratios only), as `stats.summarize` does.
    """

    __slots__ = (
        "_closed",
        "_closed_dirty",
        "_expiries",
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
        self._expiries = 0

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
            if open_interval is not None:
                open_interval.close()
                self._closed.add_bins(open_interval, 1)
                self._closed.add_numbers(open_interval, with_entry_step=len(self._intervals) > 1)
            open_interval = Interval(start)
            if self._last is not None:
                open_interval.step(abs(value - self._last[1]), entry=True)
            self._intervals.append(open_interval)
        elif self._last is not None:
            open_interval.step(abs(value - self._last[1]), entry=False)
        open_interval.add(value, time - self.origin, self.activity_floor)
        self._last = (time, value)

    def expire(self, now: float) -> None:
        """Drop intervals that end before `now - window` (they no longer overlap the window).

        Their counts and sums are taken away from the cached closed part (bin counts subtract
        exactly; the float sums are re-added from the records every `slots` expiries so rounding
        never builds up), so expiry costs the expired interval, not a rebuild of the window.
        """
        horizon = now - self.window_seconds
        expired = 0
        while expired < len(self._intervals) and self._intervals[expired].start + self.width <= horizon:
            expired += 1
        if not expired:
            return
        if expired >= len(self._intervals) - 1:  # at most the open interval is left: nothing closed
            del self._intervals[:expired]
            self._closed = _Merged()
            self._closed_dirty = False
            return
        closed = self._closed
        for position, interval in enumerate(self._intervals[:expired]):
            closed.add_bins(interval, -1)
            closed.add_numbers(interval, with_entry_step=position > 0, sign=-1)
        del self._intervals[:expired]
        closed.add_entry_step(self._intervals[0], -1)  # the new oldest one's entry is outside the window
        numbers = closed.numbers
        numbers[MINIMUM], numbers[MAXIMUM] = math.inf, -math.inf
        for interval in self._intervals[:-1]:
            numbers[MINIMUM] = min(numbers[MINIMUM], interval.numbers[MINIMUM])
            numbers[MAXIMUM] = max(numbers[MAXIMUM], interval.numbers[MAXIMUM])
        self._expiries += 1
        if self._expiries % self.slots == 0:
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
        """Every interval but the open one: kept up to date on close and expiry, its float sums
        re-added exactly from the records now and then."""
        if self._closed_dirty:
            numbers = array("d", _EMPTY)
            self._closed.numbers = numbers
            for position, interval in enumerate(self._intervals[:-1]):
                self._closed.add_numbers(interval, with_entry_step=position > 0)
            self._closed_dirty = False
        return self._closed

    def merged(self, now: float | None = None) -> _Merged:
        """The window's sums: a copy of the cached closed part plus the open interval."""
        if now is not None:
            self.expire(now)
        if len(self._intervals) <= 1:
            merged = _Merged()
            if self._intervals:
                merged.add(self._intervals[0], with_entry_step=False)
            return merged
        merged = self._closed_part().copy()
        merged.add(self._intervals[-1], with_entry_step=True)
        return merged

    def figures(self, now: float | None = None) -> dict[str, float] | None:
        """The window's figures by the names the full-window PromQL gives them (`stats_query`'s `stat`
        label): count, sum, mean, min, max, p05, p50, p95, p99, and when defined active, trend, absstep.
        None without samples."""
        merged = self.merged(now)
        numbers = merged.numbers
        count = int(numbers[COUNT])
        if count == 0:
            return None
        low_value, high_value = numbers[MINIMUM], numbers[MAXIMUM]
        quantiles = {"p05": 0.05, "p50": 0.50, "p95": 0.95, "p99": 0.99}
        ranks = sorted({r for q in quantiles.values() for r in _ranks(q, count)})
        at_rank = dict(zip(ranks, merged.values_at(ranks), strict=True))
        out = {
            "count": float(count),
            "sum": numbers[TOTAL],
            "mean": numbers[TOTAL] / count,
            "min": low_value,
            "max": high_value,
        }
        for name, q in quantiles.items():
            # linear interpolation between the samples at the two closest ranks (as
            # `stats.percentile` does between the exact ones), clipped to the exact extremes
            rank = q * (count - 1)
            low = math.floor(rank)
            estimate = at_rank[low]
            if rank > low:
                estimate += (rank - low) * (at_rank[min(low + 1, count - 1)] - estimate)
            out[name] = min(high_value, max(low_value, estimate))
        if self.activity_floor is not None:
            out["active"] = numbers[ACTIVE] / count
        trend = _slope(numbers) if count >= 3 else None
        if trend is not None:
            out["trend"] = trend
        if numbers[STEPS]:
            out["absstep"] = numbers[ABS_STEPS] / numbers[STEPS]
        return out

    def summary(self, now: float | None = None) -> SignalStats | None:
        """The window's statistics (expiring first when `now` is given); None without samples."""
        figures = self.figures(now)
        if figures is None:
            return None
        count = int(figures["count"])
        sawtooth = None
        if self.sawtooth_floor is not None and count >= 3:
            spread = figures["p95"] - figures["p05"]
            mean_step = figures.get("absstep", 0.0)
            sawtooth = 0.0 if spread < self.sawtooth_floor else min(1.0, mean_step / spread)
        return SignalStats(
            samples=count,
            mean=figures["mean"],
            p50=figures["p50"],
            p95=figures["p95"],
            p99=figures["p99"],
            max=figures["max"],
            min=figures["min"],
            active_fraction=figures.get("active"),
            trend_per_hour=figures.get("trend"),
            sawtooth=sawtooth,
        )


def _ranks(quantile: float, count: int) -> tuple[int, int]:
    """The two ranks a linear-interpolated percentile sits between."""
    low = math.floor(quantile * (count - 1))
    return low, min(low + 1, count - 1)


def _slope(numbers: array[float]) -> float | None:
    """Least-squares slope per hour from the exact sums (None when every sample has one time)."""
    count = numbers[COUNT]
    var_t = numbers[SUM_TT] - numbers[SUM_T] * numbers[SUM_T] / count
    if var_t <= 1e-9 * max(1.0, numbers[SUM_TT]):
        return None
    cov = numbers[SUM_TV] - numbers[SUM_T] * numbers[TOTAL] / count
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
