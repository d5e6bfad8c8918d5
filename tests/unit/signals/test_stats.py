"""Cleaning and statistics of raw samples."""

from __future__ import annotations

import math

import pytest

from gpu_rightsizer.logic import stats as st
from gpu_rightsizer.model.metric_names import DCGM_BLANK_SENTINEL_MIN


def _series(values: list[float], step: float = 60.0) -> list[tuple[float, float]]:
    return [(i * step, v) for i, v in enumerate(values)]


def test_nan_inf_and_dcgm_sentinels_are_dropped() -> None:
    samples = _series([0.5, math.nan, 9223372036854775794.0, math.inf, 0.7, float(0x7FFFFFFFFFFFFFFE)])
    summary = st.summarize(samples)
    assert summary is not None
    assert summary.samples == 2
    assert summary.max == 0.7
    assert st.is_missing(DCGM_BLANK_SENTINEL_MIN)
    assert not st.is_missing(9.0e18)


def test_only_missing_values_give_no_stats() -> None:
    assert st.summarize(_series([math.nan, 9223372036854775794.0])) is None
    assert st.summarize([]) is None


def test_percentiles_interpolate_like_numpy_and_prometheus() -> None:
    summary = st.summarize(_series([float(v) for v in range(1, 101)]))
    assert summary is not None
    assert summary.p50 == pytest.approx(50.5)
    assert summary.p95 == pytest.approx(95.05)
    assert summary.p99 == pytest.approx(99.01)
    assert (summary.min, summary.max, summary.mean) == (1.0, 100.0, 50.5)


def test_active_fraction_counts_samples_above_the_floor() -> None:
    summary = st.summarize(_series([0.0, 0.01, 0.2, 0.9]), activity_floor=0.05)
    assert summary is not None
    assert summary.active_fraction == 0.5


def test_trend_is_per_hour() -> None:
    summary = st.summarize(_series([0.1 * i for i in range(10)]))  # +0.1 per minute
    assert summary is not None
    assert summary.trend_per_hour == pytest.approx(6.0)


def test_sawtooth_separates_alternation_from_drift_and_flat() -> None:
    square = st.sawtooth_score([0.1, 0.9] * 20)
    drift = st.sawtooth_score([i / 40 for i in range(40)])
    flat = st.sawtooth_score([0.5 + 0.001 * (i % 2) for i in range(40)])
    assert square == pytest.approx(1.0)
    assert drift is not None and drift < 0.1
    assert flat == 0.0
    assert st.sawtooth_score([0.1, 0.9]) is None


def test_counter_rates_survive_resets() -> None:
    rates = st.counter_rates(_series([0.0, 60.0, 120.0, 30.0, 90.0]))
    assert [r for _, r in rates] == [1.0, 1.0, 0.5, 1.0]


def test_counter_rates_skip_missing_and_duplicate_timestamps() -> None:
    rates = st.counter_rates([(0.0, 0.0), (60.0, math.nan), (60.0, 60.0), (120.0, 180.0)])
    assert [r for _, r in rates] == [1.0, 2.0]


def test_gaps_and_coverage() -> None:
    stamps = [0.0, 60.0, 120.0, 600.0, 660.0]
    assert st.gaps(stamps, 60.0) == [(120.0, 600.0)]
    assert st.coverage(5, 660.0, 60.0) == pytest.approx(5 / 11)
    assert st.coverage(100, 60.0, 60.0) == 1.0


def test_pearson() -> None:
    xs = [1.0, 2.0, 3.0, 4.0]
    assert st.pearson(xs, [2.0, 4.0, 6.0, 8.0]) == pytest.approx(1.0)
    assert st.pearson(xs, [8.0, 6.0, 4.0, 2.0]) == pytest.approx(-1.0)
    assert st.pearson(xs, [1.0, 1.0, 1.0, 1.0]) is None
    assert st.pearson([1.0], [1.0]) is None


def test_aligned_sum_and_correlation_tolerate_jittered_timestamps() -> None:
    a = [(0.0, 1.0), (61.0, 2.0), (119.0, 3.0)]
    b = [(2.0, 10.0), (60.0, 20.0), (125.0, 30.0)]
    assert st.sum_aligned([a, b], 60.0) == [(0.0, 11.0), (60.0, 22.0), (120.0, 33.0)]
    assert st.aligned_correlation(a, [(0.0, 1.0), (60.0, 2.0), (60.0 + 59, 3.0)], 60.0) == pytest.approx(1.0)


def test_throttle_flags_read_only_throttling_bits() -> None:
    flags = st.throttle_flags(_series([0.0, 1.0, 4.0, 8.0, 0x40 | 0x1, 0x80, math.nan]))
    assert [f for _, f in flags] == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]


def test_successive_summaries_combine_exactly_where_they_can() -> None:
    """Counts, mean, extremes and activity are exact; a percentile is the parts' weighted mean."""
    first = st.summarize([(float(t), 0.2) for t in range(30)], activity_floor=0.1)
    second = st.summarize([(float(t), 0.6) for t in range(30, 40)], activity_floor=0.5)
    assert first is not None and second is not None
    both = st.combine_successive([first, second])
    assert both is not None
    assert both.samples == 40 and both.min == 0.2 and both.max == 0.6
    assert both.mean == pytest.approx((30 * 0.2 + 10 * 0.6) / 40)
    assert both.p50 == pytest.approx(0.3) and both.active_fraction == pytest.approx(1.0)
    assert st.combine_successive([]) is None
