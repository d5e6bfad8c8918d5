"""Estimated GPU time a recommendation frees.

Each action frees a share of the workload's current GPU allocation (release: all of it; a 1g slice of
a whole GPU: 6/7; scaling 4 → 2 replicas: half). Several actions compound on what is left, so the
shares combine as 1 - Π(1 - share) and never exceed the allocation. Efficiency advice (software,
CPU) frees nothing measurable in advance and counts as zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from gpu_rightsizer.model.result import Savings

HOURS_PER_DAY = 24.0


def combined_share(freed_shares: Iterable[float]) -> float:
    """Share of the allocation freed by several compounding changes, clamped to 0..1."""
    remaining = 1.0
    for share in sorted(freed_shares):
        if not math.isfinite(share):
            raise ValueError(f"freed share must be finite, got {share!r}")
        remaining *= 1.0 - min(1.0, max(0.0, share))
    return min(1.0, max(0.0, 1.0 - remaining))


def estimate_savings(allocated_gpu_equivalents: float, freed_shares: Iterable[float]) -> Savings:
    """GPU-hours per day and share of the allocation that the actions free.

    `allocated_gpu_equivalents` counts whole GPUs (a MIG slice counts as its share of a GPU).
    """
    if not math.isfinite(allocated_gpu_equivalents) or allocated_gpu_equivalents < 0:
        raise ValueError(
            f"allocated GPU equivalents must be a finite number ≥ 0, got {allocated_gpu_equivalents!r}"
        )
    share = combined_share(freed_shares)
    if allocated_gpu_equivalents == 0:
        share = 0.0
    return Savings(
        gpu_hours_per_day=round(allocated_gpu_equivalents * HOURS_PER_DAY * share, 3),
        share_of_allocation=round(share, 4),
    )
