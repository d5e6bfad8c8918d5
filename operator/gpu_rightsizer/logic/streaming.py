"""Streaming window statistics: each cycle adds only its new samples, the window is read from summaries.

Why: re-reading a whole window from Prometheus every cycle makes its work grow with pods × window
length × cycles. Here every series keeps a ring of per-interval records (the window is split into
`slots` intervals of `window / slots` seconds); a cycle adds the samples since the previous one to the
newest interval, whole intervals older than the window expire, and the window's `SignalStats` are
merged from the intervals on read. The number of intervals is fixed, so reading a 24 h window costs
the same as reading a 5 min one.

What is exact and what is estimated:

* count, mean, min, max, share above the activity floor and the mean absolute step between
  consecutive samples are kept exactly (sums and extremes merge without loss; every read
  adds the intervals' sums afresh, so nothing is ever subtracted and no rounding builds up); the
  steps only where there is a sawtooth floor (0..1 ratios), the sawtooth score being their only use;
* quantiles (p05, p50, p95, p99) come from DDSketch's logarithmic mapping (the `ddsketch` package,
  Datadog's reference implementation): every interval keeps the bin counts of that mapping with
  relative accuracy `RELATIVE_ACCURACY`, bins of intervals add up exactly, and the samples at the two
  ranks around `q * (n - 1)` read from the merged bins are each within that relative error, so their
  linear interpolation (what `stats.percentile` computes from the exact samples) is too. Values
  whose magnitude is below `ZERO_BELOW` count as zero (absolute error below it), which keeps the bin
  range of near-idle ratios bounded; magnitudes above about 1e278 share the top bin (only negative
  ones can get there: positive ones that large are DCGM blanks and dropped), and a quantile is
  always clipped to the exact extremes;
* the window covers whole intervals: it reaches back at least `window` seconds and at most one
  interval more.

The sawtooth score uses the sketch's p05/p95 spread, so it carries the quantile error too.

Memory: at scale the windows are most of the operator's memory (tens of thousands of series), so a
series is two flat typed arrays and nothing else: its sums as doubles, one fixed-size record per
interval, and its counts and bins as 32-bit integers (a bin and its count share one word); see
`SeriesWindow`. Nothing is cached between reads.
"""

from __future__ import annotations

import bisect
import functools
import json
import math
import struct
import sys
import zlib
from array import array
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

from ddsketch.mapping import LogarithmicMapping

from gpu_rightsizer.logic.stats import DEFAULT_SAWTOOTH_FLOOR, Sample, is_missing
from gpu_rightsizer.model.metric_names import DCGM_BLANK_SENTINEL_MIN
from gpu_rightsizer.model.observation import SignalStats

#: Relative accuracy of every quantile (DDSketch's alpha): 1 % of the value at that rank.
RELATIVE_ACCURACY = 0.01
#: Magnitudes below this count as zero in the quantile bins (not in the exact sums and extremes).
ZERO_BELOW = 1e-6
#: Intervals per window: the cost of a read and the granularity of expiry.
DEFAULT_SLOTS = 12
#: One mapping for every series: bins of series that share it can be added together.
MAPPING = LogarithmicMapping(RELATIVE_ACCURACY)

SeriesKey = TypeVar("SeriesKey", bound=Hashable)

#: Doubles before the records: the series' first sample time (origin of the interval indices) and
#: its newest sample (skips samples already seen, gives the step into the next one); NaN until set.
ORIGIN, LAST_TIME, LAST_VALUE = range(3)
HEAD = 3
#: One interval's doubles. The steps (ABS_STEPS, ENTRY_STEP) are kept only by windows with a sawtooth
#: floor, their only reader. No least-squares sums: no rule reads a trend (`SignalStats.trend_per_hour`
#: stays None here), and they were half of every record.
TOTAL, MINIMUM, MAXIMUM, ABS_STEPS, ENTRY_STEP = range(5)
RECORD_WITHOUT_STEPS, RECORD_WITH_STEPS = 3, 5
#: One interval's integers, at the front of the integer array: which interval it is (intervals since
#: the one holding the origin), its samples, those above the activity floor and its bin words. Steps
#: inside an interval are always COUNT - 1.
INDEX, COUNT, ACTIVE, BINS = range(4)
COUNTS = 4
#: After the records' integers come the bins of every interval in the same order, each one 32-bit word
#: `bin << 16 | count` (sorted within an interval, so sorting the window's words orders them by value).
#: The stored bin is 0 for zero, `key + BIAS` for a positive value and its negation for a negative one:
#: DDSketch keys of magnitudes from `ZERO_BELOW` up are -690 and more, so stored bins are 1..TOP_BIN.
BIAS = 691
#: The largest stored bin: magnitudes above MAPPING.value(TOP_BIN - BIAS), about 1e278, share it.
TOP_BIN = 0x7FFF
#: Samples one word counts at most; a bin with more takes another word.
FULL = 0xFFFF


#: `MAPPING.key(m)` is `int(ceil(log(m, 2) * multiplier) + offset)`; the same float operations are
#: done inline in `_bin_of` (a method call per sample was a fifth of adding one).
_LOG2_MULTIPLIER: float = MAPPING._multiplier
_KEY_OFFSET: float = MAPPING._offset
#: `is_missing(v)` is `not _FIRST_REAL < v < DCGM_BLANK_SENTINEL_MIN`: NaN compares False, ±inf and
#: DCGM blanks fall outside (the chained comparison is what `_add` does per sample, without a call).
_FIRST_REAL = -math.inf


def _bin_of(value: float) -> int:
    """The stored bin of a value (see BIAS)."""
    magnitude = abs(value)
    if magnitude < ZERO_BELOW:
        return 0
    stored = int(math.ceil(math.log(magnitude, 2) * _LOG2_MULTIPLIER) + _KEY_OFFSET) + BIAS
    stored = TOP_BIN if stored > TOP_BIN else 1 if stored < 1 else stored
    return stored if value > 0 else -stored


def _value_of(stored_bin: int) -> float:
    """The mapping's representative value of a stored bin (within RELATIVE_ACCURACY of its samples);
    read through `_VALUES`, which keeps each one computed (at most 2 * TOP_BIN + 1 of them)."""
    if stored_bin > 0:
        return float(MAPPING.value(stored_bin - BIAS))
    if stored_bin < 0:
        return -float(MAPPING.value(-stored_bin - BIAS))
    return 0.0


class IntervalInfo(NamedTuple):
    """What `SeriesWindow.intervals` tells about one interval."""

    start: float
    samples: int


class _Shape:
    """What every series of one kind shares: window length, intervals and floors (one copy, not one
    per series)."""

    __slots__ = ("activity_floor", "record", "sawtooth_floor", "slots", "width", "window_seconds")

    def __init__(
        self, window_seconds: float, slots: int, activity_floor: float | None, sawtooth_floor: float | None
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
        #: Doubles per interval: the steps only where a sawtooth score is computed from them.
        self.record = RECORD_WITHOUT_STEPS if sawtooth_floor is None else RECORD_WITH_STEPS


class SeriesWindow:
    """The window of one series: a ring of interval records, oldest first, the newest one still open.

    `activity_floor` counts samples above it (`SignalStats.active_fraction`); `sawtooth_floor` None
    leaves the sawtooth score out (it means something for 0..1 ratios only), as `stats.summarize` does.

    Layout (why: tens of thousands of series, so no Python object per interval or per bin):
    `_sums` is `array('d')` of HEAD doubles then `record` doubles per interval; `_counts` is `array('i')`
    of COUNTS integers per interval, then the bin words of every interval in the same order. Both
    arrays are kept at their exact size. A read adds the records up (a few C-level slices and sums)
    and sorts the bin words, so it costs the window's distinct bins, not the mapping's key range.
    """

    __slots__ = ("_counts", "_last_counter", "_shape", "_sums")

    def __init__(
        self,
        window_seconds: float,
        *,
        slots: int = DEFAULT_SLOTS,
        activity_floor: float | None = None,
        sawtooth_floor: float | None = DEFAULT_SAWTOOTH_FLOOR,
        shape: _Shape | None = None,
    ) -> None:
        self._shape = shape or _Shape(window_seconds, slots, activity_floor, sawtooth_floor)
        self._sums = array("d", (math.nan, math.nan, math.nan))
        self._counts = array("i")
        self._last_counter: Sample | None = None

    @property
    def window_seconds(self) -> float:
        return self._shape.window_seconds

    @property
    def slots(self) -> int:
        return self._shape.slots

    @property
    def width(self) -> float:
        return self._shape.width

    @property
    def activity_floor(self) -> float | None:
        return self._shape.activity_floor

    @property
    def sawtooth_floor(self) -> float | None:
        return self._shape.sawtooth_floor

    @property
    def origin(self) -> float | None:
        """Time of the first sample ever added (the least-squares times count from it)."""
        origin = self._sums[ORIGIN]
        return None if math.isnan(origin) else origin

    def _records(self) -> int:
        return (len(self._sums) - HEAD) // self._shape.record

    def _first_index(self) -> int:
        """The interval holding the origin, counted from time 0 (INDEX counts from it)."""
        return math.floor(self._sums[ORIGIN] / self._shape.width)

    def _start(self, index: int) -> float:
        """Start of interval `index`: the same float as `floor(t / width) * width` for its samples."""
        return (self._first_index() + index) * self._shape.width

    # -- writing --------------------------------------------------------------------------------------
    def add(self, samples: Iterable[Sample]) -> int:
        """Add gauge samples; ones not newer than the last sample added (overlapping reads) are skipped.

        Returns how many samples were kept.
        """
        return self._add(sorted(samples))

    def add_series(self, times: Sequence[float], values: Sequence[float]) -> int:
        """`add` for samples already in time order, as two parallel sequences (e.g. the typed arrays
        of a decoded range answer), so no (time, value) tuple is built per sample."""
        return self._add(zip(times, values, strict=True))

    def _add(self, ordered: Iterable[Sample]) -> int:
        sums, counts = self._sums, self._counts
        sizes = len(sums), len(counts)
        floor = self._shape.activity_floor
        width = self._shape.width
        records = self._records()
        stride = self._shape.record
        first_index = 0 if math.isnan(sums[ORIGIN]) else self._first_index()
        kept = 0
        last_time = sums[LAST_TIME]
        last_value = sums[LAST_VALUE]
        started = not math.isnan(last_time)
        newest = counts[(records - 1) * COUNTS + INDEX] if records else None
        for time, value in ordered:
            if not _FIRST_REAL < value < DCGM_BLANK_SENTINEL_MIN or (started and time <= last_time):
                continue  # a missing value (`is_missing`), or a sample already seen
            kept += 1
            if not started:
                sums[ORIGIN] = time
                first_index = self._first_index()
            index = math.floor(time / width) - first_index
            stored_bin = _bin_of(value)
            active = 1 if floor is not None and value > floor else 0
            if index != newest:
                # a new interval: its record goes after the others, its counts after theirs
                entry = abs(value - last_value) if started else math.nan
                sums.extend((value, value, value))
                if stride == RECORD_WITH_STEPS:
                    sums.extend((0.0, entry))
                counts[records * COUNTS : records * COUNTS] = array("i", (index, 1, active, 1))
                counts.append(stored_bin << 16 | 1)
                records += 1
                newest = index
            else:
                base = HEAD + (records - 1) * stride
                sums[base + TOTAL] += value
                sums[base + MINIMUM] = min(sums[base + MINIMUM], value)
                sums[base + MAXIMUM] = max(sums[base + MAXIMUM], value)
                if stride == RECORD_WITH_STEPS:
                    sums[base + ABS_STEPS] += abs(value - last_value)
                head = (records - 1) * COUNTS
                counts[head + COUNT] += 1
                counts[head + ACTIVE] += active
                self._count_bin(head, stored_bin)
            last_time, last_value, started = time, value, True
        if kept:
            sums[LAST_TIME] = last_time
            sums[LAST_VALUE] = last_value
        if (len(sums), len(counts)) != sizes:  # appending over-allocates: keep the arrays exact
            self._sums, self._counts = array("d", sums), array("i", counts)
        return kept

    def _count_bin(self, head: int, stored_bin: int) -> None:
        """One more sample in the newest interval's bin (its words are the last ones of `_counts`,
        sorted: the first word of the bin is the one with the fewest samples)."""
        counts = self._counts
        end = len(counts)
        word = stored_bin << 16
        position = bisect.bisect_left(counts, word, end - counts[head + BINS], end)
        if position < end and counts[position] >> 16 == stored_bin and counts[position] & FULL != FULL:
            counts[position] += 1
        else:
            counts.insert(position, word | 1)
            counts[head + BINS] += 1

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

    def expire(self, now: float) -> None:
        """Drop intervals that end before `now - window` (they no longer overlap the window).

        Nothing is cached, so dropping their records is all there is to it.
        """
        horizon = now - self._shape.window_seconds
        width = self._shape.width
        counts = self._counts
        records = self._records()
        expired = 0
        while expired < records and self._start(counts[expired * COUNTS + INDEX]) + width <= horizon:
            expired += 1
        if not expired:
            return
        dropped_words = sum(counts[BINS : expired * COUNTS : COUNTS])
        self._sums = self._sums[:HEAD] + self._sums[HEAD + expired * self._shape.record :]
        self._counts = (
            counts[expired * COUNTS : records * COUNTS] + counts[records * COUNTS + dropped_words :]
        )

    def _inconsistency(self) -> str | None:
        """What is wrong with the arrays (None when they hold together): loaded state is checked
        before use, so a damaged file is refused rather than read into wrong figures or errors."""
        sums, counts = self._sums, self._counts
        stride = self._shape.record
        if len(sums) < HEAD or (len(sums) - HEAD) % stride:
            return f"{len(sums)} doubles is not a head and whole records of {stride}"
        records = self._records()
        if len(counts) < records * COUNTS:
            return f"{len(counts)} words for {records} records"
        if records and (math.isnan(sums[ORIGIN]) or math.isnan(sums[LAST_TIME])):
            return "records without a first or last sample time"
        at = records * COUNTS
        previous = None
        for head in range(0, records * COUNTS, COUNTS):
            index, count, active, words = counts[head : head + COUNTS]
            if previous is not None and index <= previous:
                return "intervals out of order"
            previous = index
            if count < 1 or not 0 <= active <= count or words < 1 or at + words > len(counts):
                return f"interval {index}: {count} samples, {active} active, {words} bin words"
            bins = counts[at : at + words]
            if list(bins) != sorted(bins) or sum(word & FULL for word in bins) != count:
                return f"interval {index}: bins do not add up to its samples"
            if any(not -TOP_BIN <= word >> 16 <= TOP_BIN or not word & FULL for word in bins):
                return f"interval {index}: a bin out of range"
            at += words
        if at != len(counts):
            return f"{len(counts) - at} bin words belong to no interval"
        return None

    # -- reading --------------------------------------------------------------------------------------
    @property
    def empty(self) -> bool:
        """No interval left in the window."""
        return len(self._sums) == HEAD

    @property
    def first_time(self) -> float | None:
        """Start of the oldest interval kept (how far back the window reaches today)."""
        return None if self.empty else self._start(self._counts[INDEX])

    @property
    def last_time(self) -> float | None:
        """Time of the newest sample added."""
        last = self._sums[LAST_TIME]
        return None if math.isnan(last) else last

    def intervals(self) -> Iterator[IntervalInfo]:
        """Start and sample count of every interval, oldest first."""
        counts = self._counts
        return iter(
            [
                IntervalInfo(self._start(counts[at + INDEX]), counts[at + COUNT])
                for at in range(0, self._records() * COUNTS, COUNTS)
            ]
        )

    def complete(self, now: float, *, since: float | None = None) -> bool:
        """Whether the window is covered back to `now - window` (or back to `since`, when later).

        `since` is where data could start at all (e.g. the pod's start), so a young pod's window is
        complete once it is covered from its first sample on.
        """
        first = self.first_time
        if first is None:
            return False
        horizon = now - self._shape.window_seconds
        if since is not None:
            horizon = max(horizon, since)
        return first <= horizon + self._shape.width

    def figures(self, now: float | None = None) -> dict[str, float] | None:
        """The window's figures by the names the full-window PromQL gives them (`stats_query`'s `stat`
        label): count, sum, mean, min, max, p05, p50, p95, p99, and when defined active and
        (with a sawtooth floor) absstep. None without samples."""
        if now is not None:
            self.expire(now)
        sums, counts = self._sums, self._counts
        records = self._records()
        if not records:
            return None
        count = sum(counts[COUNT : records * COUNTS : COUNTS])
        stride = self._shape.record
        total = sum(sums[HEAD + TOTAL :: stride])
        low_value = min(sums[HEAD + MINIMUM :: stride])
        high_value = max(sums[HEAD + MAXIMUM :: stride])
        plan = _quantile_plan(count)
        at_rank = _values_at(sorted(counts[records * COUNTS :]), plan)
        out = {
            "count": float(count),
            "sum": total,
            "mean": total / count,
            "min": low_value,
            "max": high_value,
        }
        for name, low, high, weight in plan.interpolations:
            # linear interpolation between the samples at the two closest ranks (as
            # `stats.percentile` does between the exact ones), clipped to the exact extremes
            estimate = at_rank[low]
            if weight:
                estimate += weight * (at_rank[high] - estimate)
            out[name] = min(high_value, max(low_value, estimate))
        if self._shape.activity_floor is not None:
            out["active"] = sum(counts[ACTIVE : records * COUNTS : COUNTS]) / count
        if count > 1 and stride == RECORD_WITH_STEPS:
            # steps inside every interval, and into every interval but the oldest (its entry step
            # comes from a sample outside the window)
            steps = sum(sums[HEAD + ABS_STEPS :: stride]) + sum(sums[HEAD + stride + ENTRY_STEP :: stride])
            out["absstep"] = steps / (count - 1)
        return out

    def summary(self, now: float | None = None) -> SignalStats | None:
        """The window's statistics (expiring first when `now` is given); None without samples."""
        figures = self.figures(now)
        if figures is None:
            return None
        count = int(figures["count"])
        sawtooth = None
        sawtooth_floor = self._shape.sawtooth_floor
        if sawtooth_floor is not None and count >= 3:
            spread = figures["p95"] - figures["p05"]
            mean_step = figures.get("absstep", 0.0)
            sawtooth = 0.0 if spread < sawtooth_floor else min(1.0, mean_step / spread)
        return SignalStats(
            samples=count,
            mean=figures["mean"],
            p50=figures["p50"],
            p95=figures["p95"],
            p99=figures["p99"],
            max=figures["max"],
            min=figures["min"],
            active_fraction=figures.get("active"),
            sawtooth=sawtooth,
        )


def _values_at(words: list[int], plan: QuantilePlan) -> dict[int, float]:
    """The bin values of the samples at the plan's ranks (0-based), from the window's bin words
    sorted, that is by value (a bin may come several times: once per interval, and once more per
    FULL samples).

    What DDSketch's `get_quantile_value` does for one rank, for all of them at once; each value is the
    mapping's representative of the rank's bin, within `RELATIVE_ACCURACY` of the sample. The low
    ranks are found walking up from the smallest word, the high ones walking down from the largest,
    so a read passes over about half of the words, not nearly all of them for p99.
    """
    out: dict[int, float] = {}
    low, high = plan.low_ranks, plan.high_ranks
    position, last = 0, len(low)
    seen = 0
    if last:
        for word in words:
            seen += word & FULL
            if low[position] < seen:
                value = _VALUES[word >> 16]
                while position < last and low[position] < seen:
                    out[low[position]] = value
                    position += 1
                if position == last:
                    break
    position = len(high) - 1
    if position < 0:
        return out
    above = plan.samples  # samples at or above the current word's first rank, counted from the top
    for word in reversed(words):
        above -= word & FULL
        if high[position] >= above:
            value = _VALUES[word >> 16]
            while position >= 0 and high[position] >= above:
                out[high[position]] = value
                position -= 1
            if position < 0:
                break
    return out


class _BinValues(dict[int, float]):
    """Stored bin → the mapping's representative value, computed on first use (`_value_of`)."""

    def __missing__(self, stored_bin: int) -> float:
        self[stored_bin] = value = _value_of(stored_bin)
        return value


_VALUES = _BinValues()

#: The quantiles a window reports, by their figure names.
QUANTILES = {"p05": 0.05, "p50": 0.50, "p95": 0.95, "p99": 0.99}


class QuantilePlan(NamedTuple):
    """For a window of `samples` samples: the ranks to read (split at the median into those walked to
    from the bottom and those walked to from the top), and per quantile the two ranks it
    interpolates between with the weight of the upper one."""

    samples: int
    low_ranks: tuple[int, ...]
    high_ranks: tuple[int, ...]
    interpolations: tuple[tuple[str, int, int, float], ...]


@functools.lru_cache(maxsize=4096)
def _quantile_plan(count: int) -> QuantilePlan:
    """The plan for `count` samples (a window's count repeats cycle after cycle, so it is cached)."""
    interpolations = []
    for name, q in QUANTILES.items():
        rank = q * (count - 1)
        low, high = _ranks(q, count)
        interpolations.append((name, low, high, rank - low))
    ranks = sorted({rank for _, low, high, _ in interpolations for rank in (low, high)})
    half = count // 2
    return QuantilePlan(
        count,
        tuple(rank for rank in ranks if rank < half),
        tuple(rank for rank in ranks if rank >= half),
        tuple(interpolations),
    )


def _ranks(quantile: float, count: int) -> tuple[int, int]:
    """The two ranks a linear-interpolated percentile sits between."""
    low = math.floor(quantile * (count - 1))
    return low, min(low + 1, count - 1)


class StreamingStore(Generic[SeriesKey]):
    """Windows of many series under one window length, keyed by whatever identifies a series."""

    def __init__(self, window_seconds: float, *, slots: int = DEFAULT_SLOTS) -> None:
        if window_seconds <= 0:
            raise ValueError(f"window must be positive, got {window_seconds} s")
        self.window_seconds = window_seconds
        self.slots = slots
        self.series: dict[SeriesKey, SeriesWindow] = {}
        self._shapes: dict[tuple[float | None, float | None], _Shape] = {}

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
            floors = (activity_floor, sawtooth_floor)
            shape = self._shapes.get(floors)
            if shape is None:
                shape = self._shapes[floors] = _Shape(self.window_seconds, self.slots, *floors)
            found = SeriesWindow(self.window_seconds, shape=shape)
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


# -- saving and loading a store ----------------------------------------------------------------------
#: Leading bytes of a saved store (so any other file is refused at once).
STATE_MAGIC = b"GPURS-STREAM\x00"
#: Bumped whenever the layout of a saved store or of a window's arrays changes: an older file is then
#: refused (and the window read again from Prometheus), never loaded into the wrong layout.
STATE_FORMAT = 2
#: Magic, format, header length, body length, CRC-32 of the uncompressed header and body.
_PREAMBLE = struct.Struct(f"<{len(STATE_MAGIC)}sIIII")


class StateError(ValueError):
    """A saved store that cannot be loaded: corrupt, truncated, or saved for other settings."""


def _little_endian(data: array[float] | array[int]) -> bytes:
    if sys.byteorder == "little":
        return data.tobytes()
    swapped = array(data.typecode, data)
    swapped.byteswap()
    return swapped.tobytes()


def dump_store(
    store: StreamingStore[SeriesKey],
    *,
    step_seconds: float,
    fingerprint: str,
    key_to_json: Callable[[SeriesKey], Any],
    meta: Mapping[str, Any] | None = None,
) -> bytes:
    """A store as bytes: a JSON header (settings, series keys, their shapes) and the windows' arrays.

    Why this shape: the arrays are written as they are held (little-endian doubles and 32-bit words),
    so a series costs what it costs in memory, before compression; no pickle, so a file written by
    someone else can at worst be refused. `fingerprint` identifies what the series mean (the caller's
    family definitions): `load_store` refuses a file saved under another one. `meta` is the caller's
    own JSON (e.g. where its reads had got to).
    """
    shapes: list[tuple[float | None, float | None]] = []
    shape_ids: dict[tuple[float | None, float | None], int] = {}
    series = []
    sums = array("d")
    counts = array("i")
    for key, window in store.series.items():
        shape = window._shape
        floors = (shape.activity_floor, shape.sawtooth_floor)
        if floors not in shape_ids:
            shape_ids[floors] = len(shapes)
            shapes.append(floors)
        counter = window._last_counter
        series.append(
            [
                key_to_json(key),
                shape_ids[floors],
                len(window._sums),
                len(window._counts),
                None if counter is None else [counter[0], counter[1]],
            ]
        )
        sums.extend(window._sums)
        counts.extend(window._counts)
    header = json.dumps(
        {
            "window_seconds": store.window_seconds,
            "slots": store.slots,
            "step_seconds": step_seconds,
            "fingerprint": fingerprint,
            "meta": dict(meta or {}),
            "shapes": shapes,
            "series": series,
        },
        separators=(",", ":"),
        allow_nan=True,
    ).encode()
    body = _little_endian(sums) + _little_endian(counts)
    crc = zlib.crc32(body, zlib.crc32(header))
    preamble = _PREAMBLE.pack(STATE_MAGIC, STATE_FORMAT, len(header), len(body), crc)
    return preamble + zlib.compress(header + body, 6)


def _tuples(value: Any) -> Any:
    """JSON lists back as tuples, all the way down (keys must be hashable)."""
    return tuple(_tuples(item) for item in value) if isinstance(value, list) else value


def load_store(
    data: bytes,
    *,
    window_seconds: float,
    slots: int,
    step_seconds: float,
    fingerprint: str,
    key_from_json: Callable[[Any], SeriesKey] = _tuples,
) -> tuple[StreamingStore[SeriesKey], dict[str, Any]]:
    """The store `dump_store` saved, and its `meta`; `StateError` saying why when it cannot be used.

    Refused: another format or file, a truncated or altered file (lengths and CRC-32), settings that
    differ (window, slots, step, fingerprint) and windows whose arrays do not hold together, so a
    restart never carries on from state it would misread.
    """
    if len(data) < _PREAMBLE.size:
        raise StateError(f"truncated: {len(data)} bytes, not even a header")
    magic, version, header_size, body_size, crc = _PREAMBLE.unpack_from(data)
    if magic != STATE_MAGIC:
        raise StateError("not a saved gpu-rightsizer window (bad magic)")
    if version != STATE_FORMAT:
        raise StateError(f"saved in format {version}, this version reads format {STATE_FORMAT}")
    inflate = zlib.decompressobj()
    try:
        plain = inflate.decompress(data[_PREAMBLE.size :], header_size + body_size + 1)
    except zlib.error as error:
        raise StateError(f"corrupt: {error}") from error
    if len(plain) != header_size + body_size or not inflate.eof:
        raise StateError(f"truncated: {len(plain)} of {header_size + body_size} bytes")
    if inflate.unused_data:
        raise StateError(f"corrupt: {len(inflate.unused_data)} bytes after the end")
    if zlib.crc32(plain) != crc:
        raise StateError("corrupt: checksum mismatch")
    try:
        header = json.loads(plain[:header_size])
        settings = {key: header[key] for key in ("window_seconds", "slots", "step_seconds", "fingerprint")}
        shapes = [
            (None if a is None else float(a), None if s is None else float(s)) for a, s in header["shapes"]
        ]
        entries = header["series"]
        meta = dict(header["meta"])
    except (ValueError, KeyError, TypeError) as error:
        raise StateError(f"corrupt header: {error}") from error
    expected = {
        "window_seconds": window_seconds,
        "slots": slots,
        "step_seconds": step_seconds,
        "fingerprint": fingerprint,
    }
    for name, wanted in expected.items():
        if settings[name] != wanted:
            raise StateError(f"saved with {name} {settings[name]!r}, now {wanted!r}")
    store: StreamingStore[SeriesKey] = StreamingStore(window_seconds, slots=slots)
    body = memoryview(plain)[header_size:]
    try:
        doubles = sum(int(entry[2]) for entry in entries)
        words = sum(int(entry[3]) for entry in entries)
    except (IndexError, TypeError, ValueError) as error:
        raise StateError(f"corrupt series list: {error}") from error
    if doubles * 8 + words * 4 != body_size:
        raise StateError(
            f"corrupt: {body_size} bytes of arrays, the series list needs {doubles * 8 + words * 4}"
        )
    sums = array("d", body[: doubles * 8].tobytes())
    counts = array("i", body[doubles * 8 :].tobytes())
    if sys.byteorder != "little":
        sums.byteswap()
        counts.byteswap()
    at_sum = at_count = 0
    for entry in entries:
        try:
            raw_key, shape_id, sum_size, count_size, counter = entry
            floors = shapes[shape_id]
            key = key_from_json(raw_key)
        except (IndexError, TypeError, ValueError) as error:
            raise StateError(f"corrupt series entry {entry!r}: {error}") from error
        window = store.window(key, activity_floor=floors[0], sawtooth_floor=floors[1])
        window._sums = sums[at_sum : at_sum + sum_size]
        window._counts = counts[at_count : at_count + count_size]
        at_sum += sum_size
        at_count += count_size
        if counter is not None:
            window._last_counter = (float(counter[0]), float(counter[1]))
        problem = window._inconsistency()
        if problem:
            raise StateError(f"corrupt window {raw_key!r}: {problem}")
    if len(store) != len(entries):
        raise StateError("corrupt: a series is listed twice")
    return store, meta
