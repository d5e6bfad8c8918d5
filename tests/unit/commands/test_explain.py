"""`explain`'s sparklines: what each cell stands for."""

from __future__ import annotations

import math

from gpu_rightsizer.commands.explain import AT_LIMIT, BLOCKS, sparkline


def _every_minute(values: list[float]) -> list[tuple[float, float]]:
    return [(60.0 * index, value) for index, value in enumerate(values)]


def test_levels_follow_the_values_on_their_scale() -> None:
    assert (
        sparkline(_every_minute([0.0, 0.5, 0.99]), 0.0, 180.0, 3, 1.0) == BLOCKS[0] + BLOCKS[4] + BLOCKS[-1]
    )


def test_a_value_at_the_top_of_its_scale_is_marked() -> None:
    """CPU at its limit reads as a limit, not as the highest block of an unbounded scale."""
    assert sparkline(_every_minute([2.0, 2.4, 1.0]), 0.0, 180.0, 3, 2.0) == AT_LIMIT + AT_LIMIT + BLOCKS[4]


def test_time_without_samples_stays_blank_and_nan_is_no_sample() -> None:
    samples = [(0.0, math.nan), (120.0, 0.5), (180.0, 0.5)]
    assert sparkline(samples, 0.0, 240.0, 4, 1.0) == "  " + BLOCKS[4] * 2


def test_more_samples_than_cells_are_averaged_per_cell() -> None:
    line = sparkline(_every_minute([0.0] * 30 + [1.0] * 30), 0.0, 3600.0, 6, 1.0)
    assert line == BLOCKS[0] * 3 + AT_LIMIT * 3


def test_samples_outside_the_window_are_left_out() -> None:
    assert sparkline([(-60.0, 1.0), (30.0, 0.0), (400.0, 1.0)], 0.0, 60.0, 1, 1.0) == BLOCKS[0]
