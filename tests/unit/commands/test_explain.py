"""`explain`'s sparklines: what each cell stands for."""

from __future__ import annotations

import math

from gpu_rightsizer.commands.explain import AT_LIMIT, BLOCKS, on_steps, sparkline


def test_levels_follow_the_values_on_their_scale() -> None:
    assert sparkline([0.0, 0.5, 0.99], 3, 1.0) == BLOCKS[0] + BLOCKS[4] + BLOCKS[-1]


def test_a_value_at_the_top_of_its_scale_is_marked() -> None:
    """CPU at its limit reads as a limit, not as the highest block of an unbounded scale."""
    assert sparkline([2.0, 2.4, 1.0], 3, 2.0) == AT_LIMIT + AT_LIMIT + BLOCKS[4]


def test_steps_without_data_stay_blank_and_nan_is_no_data() -> None:
    assert sparkline([None, math.nan, 0.5, 0.5], 4, 1.0) == "  " + BLOCKS[4] * 2


def test_more_values_than_cells_are_averaged_per_cell() -> None:
    values = [0.0] * 30 + [1.0] * 30
    line = sparkline(values, 6, 1.0)
    assert line == BLOCKS[0] * 3 + AT_LIMIT * 3


def test_fewer_values_than_cells_repeat_each_value() -> None:
    assert sparkline([0.0, 0.99], 4, 1.0) == BLOCKS[0] * 2 + BLOCKS[-1] * 2


def test_samples_are_placed_on_the_window_steps() -> None:
    placed = on_steps([(100.0, 0.2), (160.0, 0.4), (400.0, 9.0)], 100.0, 280.0, 60.0)
    assert placed == [0.2, 0.4, None, None]
