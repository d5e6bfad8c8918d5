"""Streaming window statistics: quantiles within the sketch's relative error, exact sums, expiry."""

from __future__ import annotations

import itertools
import math
import sys
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from gpu_rightsizer.logic import stats as st
from gpu_rightsizer.logic.streaming import (
    BIAS,
    FULL,
    MAPPING,
    RELATIVE_ACCURACY,
    TOP_BIN,
    ZERO_BELOW,
    SeriesWindow,
    StreamingStore,
    _bin_of,
    _quantile_plan,
    _Shape,
    _value_of,
    _values_at,
    summarize_streamed,
)

STEP = 15.0
values_strategy = hs.lists(
    hs.one_of(
        hs.just(0.0), hs.floats(min_value=1e-3, max_value=1e6), hs.floats(min_value=-50, max_value=-1e-3)
    ),
    min_size=1,
    max_size=400,
)


def _series(values: list[float], start: float = 1_000_000.0, step: float = STEP) -> list[st.Sample]:
    return [(start + i * step, v) for i, v in enumerate(values)]


def _within_sketch_error(estimate: float, ordered: list[float], quantile: float) -> bool:
    """Within alpha of the interpolated percentile: each of the two closest ranks is (zeros exact)."""
    rank = quantile * (len(ordered) - 1)
    low, high = ordered[math.floor(rank)], ordered[math.ceil(rank)]
    weight = rank - math.floor(rank)
    exact = st.percentile(ordered, quantile)
    bound = RELATIVE_ACCURACY * (abs(low) * (1 - weight) + abs(high) * weight) + ZERO_BELOW
    return abs(estimate - exact) <= bound * (1 + 1e-9) + 1e-12


@settings(max_examples=150, deadline=None)
@given(values=values_strategy, chunks=hs.lists(hs.integers(min_value=1, max_value=60), min_size=1))
def test_quantiles_from_merged_intervals_are_within_relative_error(
    values: list[float], chunks: list[int]
) -> None:
    """Samples added in arbitrary cycles and spread over many intervals: p05..p99 within alpha."""
    samples = _series(values)
    window = SeriesWindow(len(values) * STEP * 2, slots=12)
    position = 0
    for size in chunks * (len(samples) // max(1, sum(chunks)) + 1):
        window.add(samples[position : position + size])
        position += size
        if position >= len(samples):
            break
    summary = window.summary(samples[-1][0])
    assert summary is not None
    ordered = sorted(values)
    assert summary.samples == len(values)
    for quantile, estimate in ((0.5, summary.p50), (0.95, summary.p95), (0.99, summary.p99)):
        assert _within_sketch_error(estimate, ordered, quantile), (quantile, estimate, ordered)
    assert summary.min == ordered[0]
    assert summary.max == ordered[-1]
    assert summary.mean == pytest.approx(math.fsum(values) / len(values), rel=1e-9, abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(values=hs.lists(hs.floats(min_value=0.0, max_value=1.0), min_size=3, max_size=300))
def test_exact_statistics_match_the_full_window_summary(values: list[float]) -> None:
    """Count, mean, extremes and activity equal `stats.summarize` over the same samples; no trend is
    kept (no rule reads one)."""
    samples = _series(values)
    window = SeriesWindow(len(values) * STEP + 1, slots=8, activity_floor=0.05)
    for index in range(0, len(samples), 7):
        window.add(samples[index : index + 7])
    streamed = window.summary(samples[-1][0])
    exact = st.summarize(samples, activity_floor=0.05)
    assert streamed is not None and exact is not None
    assert streamed.samples == exact.samples
    assert streamed.mean == pytest.approx(exact.mean, abs=1e-9)
    assert (streamed.min, streamed.max) == (exact.min, exact.max)
    assert streamed.active_fraction == pytest.approx(exact.active_fraction)
    assert streamed.trend_per_hour is None
    assert _within_sketch_error(streamed.p95, sorted(values), 0.95)
    assert abs(streamed.p50 - exact.p50) <= RELATIVE_ACCURACY * exact.max + ZERO_BELOW


def test_sawtooth_matches_the_full_window_score_within_quantile_error() -> None:
    values = [0.9 if i % 2 else 0.1 for i in range(120)]
    samples = _series(values)
    window = SeriesWindow(len(values) * STEP + 1, slots=6)
    window.add(samples)
    streamed = window.summary(samples[-1][0])
    exact = st.summarize(samples)
    assert streamed is not None and exact is not None and exact.sawtooth is not None
    assert streamed.sawtooth == pytest.approx(exact.sawtooth, rel=3 * RELATIVE_ACCURACY)


@settings(max_examples=60, deadline=None)
@given(
    cycles=hs.integers(min_value=1, max_value=40),
    per_cycle=hs.integers(min_value=1, max_value=10),
    slots=hs.integers(min_value=1, max_value=16),
)
def test_expiry_keeps_exactly_the_intervals_that_overlap_the_window(
    cycles: int, per_cycle: int, slots: int
) -> None:
    """After many cycles the window holds the samples of the intervals that still overlap it, no more."""
    window_seconds = 600.0
    window = SeriesWindow(window_seconds, slots=slots)
    width = window_seconds / slots
    samples = _series([float(i % 17) for i in range(cycles * per_cycle)], start=0.0, step=30.0)
    for cycle in range(cycles):
        window.add(samples[cycle * per_cycle : (cycle + 1) * per_cycle])
    now = samples[-1][0]
    summary = window.summary(now)
    assert summary is not None
    kept = [(t, v) for t, v in samples if math.floor(t / width) * width + width > now - window_seconds]
    assert summary.samples == len(kept)
    assert summary.mean == pytest.approx(math.fsum(v for _, v in kept) / len(kept))
    exact = st.summarize(kept)
    assert exact is not None
    assert (summary.min, summary.max) == (exact.min, exact.max)
    figures = window.figures(now)
    assert figures is not None
    if len(kept) > 1:  # the mean step between kept samples only, none from an expired one
        steps = [abs(b - a) for (_, a), (_, b) in itertools.pairwise(kept)]
        assert figures["absstep"] == pytest.approx(math.fsum(steps) / len(steps))
    assert window.first_time is not None
    assert now - window_seconds - width < window.first_time <= max(0.0, now - window_seconds) + width


def test_a_window_later_than_every_sample_is_empty_and_its_series_is_forgotten() -> None:
    store: StreamingStore[str] = StreamingStore(300.0, slots=5)
    store.window("a").add(_series([1.0, 2.0, 3.0], start=0.0))
    store.window("b").add(_series([1.0, 2.0], start=1000.0))
    summaries = store.summaries(1030.0)
    assert set(summaries) == {"b"}
    assert len(store) == 1


def test_overlapping_reads_do_not_count_a_sample_twice() -> None:
    window = SeriesWindow(3600.0)
    samples = _series([1.0, 2.0, 3.0, 4.0], start=0.0)
    assert window.add(samples[:3]) == 3
    assert window.add(samples[2:]) == 1  # the boundary sample comes back in the next cycle's read
    summary = window.summary(samples[-1][0])
    assert summary is not None and summary.samples == 4


def test_missing_values_and_dcgm_blanks_are_dropped() -> None:
    window = SeriesWindow(3600.0)
    assert window.add([(0.0, math.nan), (15.0, 9.3e18), (30.0, 0.5)]) == 1


@settings(max_examples=300, deadline=None)
@given(hs.lists(hs.tuples(hs.integers(-40, 40), hs.integers(1, FULL)), min_size=1, max_size=60))
def test_the_samples_at_each_rank_are_read_from_both_ends_as_from_every_sample(
    bins: list[tuple[int, int]],
) -> None:
    """`_values_at` walks up to the low ranks and down to the high ones; every rank gets the bin of
    the sample at that rank in the expanded, sorted samples."""
    words = sorted(stored_bin << 16 | count for stored_bin, count in bins)
    expanded = [word >> 16 for word in words for _ in range(word & FULL)]
    plan = _quantile_plan(len(expanded))
    found = _values_at(words, plan)
    assert set(found) == set(plan.low_ranks + plan.high_ranks)
    assert found == {rank: _value_of(expanded[rank]) for rank in found}


@settings(max_examples=400, deadline=None)
@given(hs.floats(allow_nan=False, allow_infinity=False, width=64))
def test_a_stored_bin_is_ddsketchs_key_of_the_magnitude(value: float) -> None:
    """`_bin_of` inlines `LogarithmicMapping.key`: every value lands in the bin the library gives it."""
    magnitude = abs(value)
    expected = 0 if magnitude < ZERO_BELOW else min(TOP_BIN, max(1, int(MAPPING.key(magnitude)) + BIAS))
    assert _bin_of(value) == (expected if value > 0 else -expected)


@pytest.mark.parametrize(
    "value", [math.nan, math.inf, -math.inf, 9.3e18, float(0x7FFFFFFFFFFFFFF0), -1e300, 0.0, 5e18, -0.0]
)
def test_adding_drops_exactly_what_is_missing(value: float) -> None:
    """The inline check in `_add` keeps a sample exactly when `stats.is_missing` says it is real."""
    window = SeriesWindow(3600.0)
    assert window.add([(0.0, value)]) == (0 if st.is_missing(value) else 1)


def test_counter_rates_bridge_cycles_and_resets() -> None:
    """Rates between consecutive counter samples, also across the cycle boundary and a reset."""
    window = SeriesWindow(3600.0, sawtooth_floor=None)
    window.add_counter([(0.0, 0.0), (10.0, 20.0)])
    window.add_counter([(20.0, 60.0), (30.0, 5.0)])  # a reset: the increase is the new value
    summary = window.summary(30.0)
    assert summary is not None
    assert summary.samples == 3
    expected = st.counter_rates([(0.0, 0.0), (10.0, 20.0), (20.0, 60.0), (30.0, 5.0)])
    assert summary.mean == pytest.approx(math.fsum(v for _, v in expected) / 3)
    assert summary.max == pytest.approx(4.0)


def test_window_completeness_follows_the_oldest_interval() -> None:
    window = SeriesWindow(600.0, slots=6)
    window.add(_series([1.0] * 10, start=300.0, step=30.0))
    assert not window.complete(600.0)
    assert window.complete(600.0, since=300.0)  # a pod that started at 300 s is covered from its start
    window.add(_series([1.0] * 20, start=600.0, step=30.0))
    assert window.complete(900.0)


def test_reading_costs_the_same_whatever_the_window_length() -> None:
    """The number of intervals is fixed, so a day's window holds as many records as five minutes."""
    short, long = SeriesWindow(300.0, slots=12), SeriesWindow(86_400.0, slots=12)
    for window, step in ((short, 15.0), (long, 60.0)):
        window.add(_series([0.5] * int(window.window_seconds / step), start=0.0, step=step))
    assert len(list(short.intervals())) <= 13 and len(list(long.intervals())) <= 13


def test_bad_window_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="window must be positive"):
        SeriesWindow(0.0)
    with pytest.raises(ValueError, match="at least one interval"):
        SeriesWindow(60.0, slots=0)


@settings(max_examples=60, deadline=None)
@given(values=hs.lists(hs.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=200))
def test_summarize_streamed_keeps_every_sample_of_the_span(values: list[float]) -> None:
    samples = _series(values)
    streamed = summarize_streamed(samples, activity_floor=0.05, cycle_seconds=45.0)
    exact = st.summarize(samples, activity_floor=0.05)
    assert streamed is not None and exact is not None
    assert (streamed.samples, streamed.min, streamed.max) == (exact.samples, exact.min, exact.max)
    assert summarize_streamed([]) is None


def test_negative_values_and_zeros_keep_exact_sums_and_order_in_the_bins() -> None:
    """Negative bins sort below the zeros, the zeros below positive bins; sums and extremes exact."""
    values = [-40.0, -3.0, -3.0, 0.0, 0.0, 0.0, 5e-7, -5e-7, 0.002, 0.5, 7.0, 1e9]
    window = SeriesWindow(3600.0, slots=4)
    for index in range(0, len(values), 3):  # a few cycles, spread over several intervals
        window.add(_series(values[index : index + 3], start=index * 300.0, step=300.0))
    figures = window.figures(len(values) * 300.0)
    assert figures is not None
    assert figures["count"] == len(values)
    assert (figures["min"], figures["max"]) == (-40.0, 1e9)
    assert figures["sum"] == pytest.approx(math.fsum(values), rel=1e-12)
    ordered = sorted(values)
    for name, quantile in (("p05", 0.05), ("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
        assert _within_sketch_error(figures[name], ordered, quantile), (name, figures[name])
    all_zero = SeriesWindow(3600.0)
    all_zero.add(_series([0.0, 1e-9, -1e-9], start=0.0))
    zero = all_zero.summary(30.0)
    assert zero is not None and (zero.p50, zero.p95, zero.p99) == (0.0, 0.0, 0.0)


def test_bins_of_one_value_merge_exactly_across_intervals() -> None:
    """The same bin in every interval adds up: the quantiles of a constant are its bin's value."""
    window = SeriesWindow(3600.0, slots=12)
    window.add(_series([0.37] * 240, start=0.0))  # 15 s steps over the whole hour: 12 intervals
    figures = window.figures(3600.0)
    assert figures is not None and figures["count"] == 240
    assert all(abs(figures[name] - 0.37) <= RELATIVE_ACCURACY * 0.37 for name in ("p05", "p50", "p99"))
    assert figures["absstep"] == 0.0


def test_a_bin_with_more_samples_than_one_word_counts_takes_another() -> None:
    """A bin word counts at most FULL samples: 70,000 samples of 2.0 and 5,000 of 1.0 in one interval."""
    window = SeriesWindow(12 * 100_000.0, slots=12)  # 100,000 s intervals: every sample below in one
    window.add(_series([2.0] * 70_000, start=0.0, step=1.0))
    window.add(_series([1.0] * 5_000, start=70_000.0, step=1.0))
    figures = window.figures(75_000.0)
    assert figures is not None and figures["count"] == 75_000
    assert abs(figures["p05"] - 1.0) <= RELATIVE_ACCURACY  # ranks 0..4,999 are the 1.0s
    assert abs(figures["p50"] - 2.0) <= 2 * RELATIVE_ACCURACY
    assert [interval.samples for interval in window.intervals()] == [75_000]


def test_magnitudes_beyond_the_top_bin_share_it_and_stay_within_the_exact_extremes() -> None:
    """Only negative values get there (positive ones that large are DCGM blanks, dropped)."""
    window = SeriesWindow(3600.0)
    window.add(_series([-1e300, -1e290, -1e280, 5.0], start=0.0))
    figures = window.figures(60.0)
    assert figures is not None
    assert (figures["min"], figures["max"]) == (-1e300, 5.0)
    assert -1e300 <= figures["p05"] < -1e277
    assert figures["sum"] == -1e300 - 1e290 - 1e280 + 5.0


def test_expiry_then_new_samples_match_a_window_that_only_saw_the_kept_intervals() -> None:
    """Dropping records leaves nothing of them behind: the next reads are those of a fresh window."""
    values = [math.sin(i / 5.0) * 3.0 + (i % 7) for i in range(200)]
    samples = _series(values, start=0.0, step=30.0)
    window = SeriesWindow(1800.0, slots=6, activity_floor=1.0)
    for index in range(0, len(samples), 4):
        window.add(samples[index : index + 4])
    now = samples[-1][0]
    window.expire(now)
    first = window.first_time
    assert first is not None
    kept = [(t, v) for t, v in samples if t >= first]
    fresh = SeriesWindow(1800.0, slots=6, activity_floor=1.0)
    fresh.add(kept)
    got, expected = window.figures(now), fresh.figures(now)
    assert got is not None and expected is not None
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=1e-9, abs=1e-9), name
    assert [i.samples for i in window.intervals()] == [i.samples for i in fresh.intervals()]


def test_counter_resets_stay_exact_across_intervals_and_expiry() -> None:
    totals = [0.0, 30.0, 90.0, 10.0, 70.0, 130.0, 5.0, 65.0]  # resets at 90 → 10 and 130 → 5
    samples = [(i * 300.0, total) for i, total in enumerate(totals)]
    window = SeriesWindow(1200.0, slots=4, sawtooth_floor=None)
    for sample in samples:
        window.add_counter([sample])
    now = samples[-1][0]
    summary = window.summary(now)
    assert summary is not None
    rates = st.counter_rates(samples)
    first = window.first_time
    assert first is not None
    kept = [v for t, v in rates if t >= first]
    assert summary.samples == len(kept)
    assert summary.mean == pytest.approx(math.fsum(kept) / len(kept), rel=1e-12)
    assert (summary.min, summary.max) == (min(kept), max(kept))


def test_a_series_is_two_exactly_sized_arrays_and_windows_of_a_kind_share_their_parameters() -> None:
    """What keeps memory flat at scale: no object per interval or bin, no spare capacity kept."""
    store: StreamingStore[str] = StreamingStore(3600.0)
    first, second = store.window("a", activity_floor=0.05), store.window("b", activity_floor=0.05)
    assert first._shape is second._shape
    first.add(_series([i / 100 for i in range(100)], start=0.0, step=30.0))
    first.add(_series([0.5, 0.25], start=3000.0, step=30.0))
    for values in (first._sums, first._counts):
        assert sys.getsizeof(values) == sys.getsizeof(array(values.typecode)) + len(values) * values.itemsize
    assert {type(value) for value in vars_of(first)} <= {array, _Shape, type(None), tuple}


def vars_of(window: SeriesWindow) -> list[object]:
    return [getattr(window, name) for name in SeriesWindow.__slots__]


def test_steps_are_kept_only_where_a_sawtooth_score_needs_them() -> None:
    """A window without a sawtooth floor (not a 0..1 ratio) keeps no steps and reports no absstep."""
    samples = _series([0.1, 0.9, 0.1, 0.9, 0.1], start=0.0)
    ratio, gauge = SeriesWindow(3600.0), SeriesWindow(3600.0, sawtooth_floor=None)
    ratio.add(samples)
    gauge.add(samples)
    with_steps, without = ratio.figures(60.0), gauge.figures(60.0)
    assert with_steps is not None and without is not None
    assert with_steps["absstep"] == pytest.approx(0.8)
    assert "absstep" not in without
    assert {k: v for k, v in with_steps.items() if k != "absstep"} == without
    assert len(gauge._sums) < len(ratio._sums)
