"""Phase shape and predicted slowdown: the figures that size a slice on how wide the GPU work is."""

from __future__ import annotations

import math

import pytest

from gpu_rightsizer.logic.width import (
    PhaseShape,
    fits,
    predicted_slowdown,
    predicted_time_sliced_slowdown,
)

H200_SMS = 132


def test_shape_from_means_reads_duty_width_and_bandwidth_while_busy() -> None:
    shape = PhaseShape.from_means(gr_engine_active=0.5, sm_active=0.25, sm_count=H200_SMS, dram_active=0.1)
    assert shape is not None
    assert shape.duty == pytest.approx(0.5)
    assert shape.width_fraction == pytest.approx(0.5)
    assert shape.width_sms == pytest.approx(66.0)
    assert shape.bandwidth_share == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("gr", "sm", "sms"),
    [
        (None, 0.1, H200_SMS),
        (0.2, None, H200_SMS),
        (math.nan, 0.1, H200_SMS),
        (0.2, math.nan, H200_SMS),
        (math.inf, 0.1, H200_SMS),
        (0.0, 0.0, H200_SMS),
        (1e-5, 1e-5, H200_SMS),
        (0.2, 0.1, None),
        (0.2, 0.1, 0),
    ],
)
def test_shape_is_unknown_without_fields_or_busy_time(
    gr: float | None, sm: float | None, sms: int | None
) -> None:
    assert PhaseShape.from_means(gr, sm, sms) is None


def test_missing_dram_drops_only_the_bandwidth_share() -> None:
    shape = PhaseShape.from_means(0.4, 0.2, H200_SMS, math.nan)
    assert shape is not None
    assert shape.bandwidth_share is None
    assert shape.width_fraction == pytest.approx(0.5)


def test_sm_above_gr_from_sampling_noise_is_clamped_to_the_whole_gpu() -> None:
    shape = PhaseShape.from_means(0.30, 0.31, H200_SMS)
    assert shape is not None
    assert shape.width_fraction == 1.0


def test_shape_from_samples_skips_samples_missing_a_field() -> None:
    samples = [(1.0, 1.0, 0.5), (0.0, 0.0, 0.0), (math.nan, 0.9, 0.1), (1.0, None, 0.2)]
    shape = PhaseShape.from_samples(samples, H200_SMS)
    assert shape is not None
    assert shape.duty == pytest.approx(0.5)  # the two complete samples: busy 1.0 and 0.0
    assert shape.width_fraction == pytest.approx(1.0)
    assert shape.bandwidth_share == pytest.approx(0.5)
    assert PhaseShape.from_samples([(math.nan, 1.0, 1.0), (None, None, None)], H200_SMS) is None
    assert PhaseShape.from_samples([], H200_SMS) is None


def test_whole_slice_predicts_no_slowdown() -> None:
    shape = PhaseShape(duty=0.9, width_fraction=1.0, sm_count=H200_SMS, bandwidth_share=0.9)
    assert predicted_slowdown(shape, H200_SMS) == pytest.approx(1.0)
    assert predicted_slowdown(shape, H200_SMS, H200_SMS, slice_bandwidth_fraction=1.0) == pytest.approx(1.0)


def test_wide_phases_at_low_duty_do_not_fit_a_fifth_of_the_gpu() -> None:
    """All 132 SMs for 15 % of the time: averaged SM 0.15 suggests 26 SMs, but each phase runs ≈ 5× longer."""
    shape = PhaseShape.from_means(gr_engine_active=0.15, sm_active=0.15, sm_count=H200_SMS)
    assert shape is not None
    slowdown = predicted_slowdown(shape, 26)
    assert slowdown == pytest.approx(0.85 + 0.15 * 132 / 26)
    assert slowdown > 1.05
    assert not fits(shape, 26, max_slowdown=0.05)


def test_narrow_phases_fit_a_small_slice() -> None:
    shape = PhaseShape.from_means(gr_engine_active=0.6, sm_active=0.06, sm_count=H200_SMS)
    assert shape is not None  # width 13 SMs
    assert predicted_slowdown(shape, 16) == pytest.approx(1.0)
    assert fits(shape, 16, max_slowdown=0.05)


def test_slowdown_never_grows_as_the_slice_grows() -> None:
    shape = PhaseShape(duty=0.7, width_fraction=0.8, sm_count=H200_SMS, bandwidth_share=0.3)
    previous = math.inf
    for sms in range(1, H200_SMS + 1):
        slowdown = predicted_slowdown(shape, sms, slice_bandwidth_fraction=sms / H200_SMS)
        assert slowdown <= previous + 1e-12
        assert slowdown >= 1.0
        previous = slowdown


def test_bandwidth_term_binds_a_streaming_job_on_a_narrow_bandwidth_slice() -> None:
    """Narrow in SMs but DRAM-heavy: the SM term says it fits, the modelled bandwidth term says not."""
    shape = PhaseShape.from_means(gr_engine_active=1.0, sm_active=0.2, sm_count=H200_SMS, dram_active=0.9)
    assert shape is not None
    assert predicted_slowdown(shape, 33) == pytest.approx(1.0)
    assert predicted_slowdown(shape, 33, slice_bandwidth_fraction=0.25) == pytest.approx(3.6)


def test_time_sliced_share_stretches_every_gpu_phase() -> None:
    shape = PhaseShape(duty=0.1, width_fraction=1.0, sm_count=H200_SMS)
    assert predicted_time_sliced_slowdown(shape, 1) == pytest.approx(1.0)
    assert predicted_time_sliced_slowdown(shape, 4) == pytest.approx(1.3)
    assert predicted_time_sliced_slowdown(shape, 4) < predicted_time_sliced_slowdown(shape, 5)


def test_impossible_slices_are_refused() -> None:
    shape = PhaseShape(duty=0.5, width_fraction=0.5, sm_count=H200_SMS, bandwidth_share=0.5)
    with pytest.raises(ValueError, match="SM"):
        predicted_slowdown(shape, 0)
    with pytest.raises(ValueError, match="bandwidth"):
        predicted_slowdown(shape, 10, slice_bandwidth_fraction=0.0)
    with pytest.raises(ValueError, match="sharer"):
        predicted_time_sliced_slowdown(shape, 0)
