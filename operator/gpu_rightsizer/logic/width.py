"""How wide a workload's GPU work is while it runs, and what a smaller slice or a share would cost it.

The time-averaged SM activity is the wrong figure for sizing: a job that fills all 132 SMs for 15 % of
the time averages 0.15, yet does not fit in 26 SMs — each of its phases would run five times longer. The
figures that size a slice are the *phase shape*:

- duty d: the share of time the GPU has work (GR_ENGINE_ACTIVE, averaged over the window);
- phase width w: how many SMs the work keeps busy while it runs, SM_ACTIVE / GR_ENGINE_ACTIVE × SM count
  (both are time averages, SM_ACTIVE is 0 whenever GR_ENGINE_ACTIVE is, so the ratio of the means is the
  mean SM fraction over busy time);
- memory-bandwidth share while busy, DRAM_ACTIVE / GR_ENGINE_ACTIVE.

From them, the serialised bound of the slowdown on s SMs is (1 − d) + d · max(1, w / s): the host part of a
step is unchanged and the GPU part stretches by w / s once the phase no longer fits. The SM term was
checked on an H200 by limiting the SMs a workload may use (green contexts and MPS); the bandwidth term
d · b / β for a slice with a fraction β of the memory bandwidth is modelled, not measured (MIG also cuts
L2 and bandwidth, which an SM limit does not). Pure: data in, data out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

#: Below this duty the ratio SM / GR is the quotient of two numbers near the counters' noise floor, so
#: no width is claimed (an idle or nearly idle GPU has no phase shape to size on).
MIN_BUSY_FOR_SHAPE = 1e-3


def _finite(value: float | None) -> float | None:
    """`value` when it is a finite number, else None (missing, NaN, ±inf)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _clamp01(value: float) -> float:
    return min(1.0, max(0.0, value))


@dataclass(frozen=True, slots=True)
class PhaseShape:
    """The shape of a workload's GPU phases on one GPU of `sm_count` SMs.

    `width_fraction` is the share of the GPU's SMs busy while the GPU has work (w / SM count), so the
    width in SMs follows from the GPU it was measured on. `bandwidth_share` is DRAM_ACTIVE while busy,
    or None where DRAM_ACTIVE was not collected.
    """

    duty: float
    width_fraction: float
    sm_count: int
    bandwidth_share: float | None = None

    @property
    def width_sms(self) -> float:
        """Phase width w in SMs of the GPU the shape was measured on."""
        return self.width_fraction * self.sm_count

    @classmethod
    def from_means(
        cls,
        gr_engine_active: float | None,
        sm_active: float | None,
        sm_count: int | None,
        dram_active: float | None = None,
        *,
        min_busy: float = MIN_BUSY_FOR_SHAPE,
    ) -> PhaseShape | None:
        """The shape from window means of the three fields, or None when it cannot be known.

        None when GR_ENGINE_ACTIVE or SM_ACTIVE is missing or not finite, when the SM count is unknown,
        or when the GPU was busy less than `min_busy` of the time. A missing or non-finite DRAM_ACTIVE
        only drops the bandwidth share. Ratios are clamped to 0..1: sampling noise can put SM_ACTIVE a
        little above GR_ENGINE_ACTIVE.
        """
        busy = _finite(gr_engine_active)
        sm = _finite(sm_active)
        if busy is None or sm is None or sm_count is None or sm_count <= 0:
            return None
        busy = _clamp01(busy)
        if busy < min_busy:
            return None
        dram = _finite(dram_active)
        return cls(
            duty=busy,
            width_fraction=_clamp01(max(0.0, sm) / busy),
            sm_count=sm_count,
            bandwidth_share=None if dram is None else _clamp01(max(0.0, dram) / busy),
        )

    @classmethod
    def from_samples(
        cls,
        samples: Iterable[tuple[float | None, float | None, float | None]],
        sm_count: int | None,
        *,
        min_busy: float = MIN_BUSY_FOR_SHAPE,
    ) -> PhaseShape | None:
        """The shape from per-sample (GR_ENGINE_ACTIVE, SM_ACTIVE, DRAM_ACTIVE) readings of one GPU.

        Only samples with finite GR and SM count, so a gap in one field does not bias the ratio; DRAM is
        averaged over the samples that also carry it. None when no sample qualifies (see `from_means`).
        """
        busy_values: list[float] = []
        sm_values: list[float] = []
        dram_busy: list[float] = []
        dram_values: list[float] = []
        for gr, sm, dram in samples:
            gr_value, sm_value = _finite(gr), _finite(sm)
            if gr_value is None or sm_value is None:
                continue
            busy_values.append(gr_value)
            sm_values.append(sm_value)
            dram_value = _finite(dram)
            if dram_value is not None:
                dram_busy.append(gr_value)
                dram_values.append(dram_value)
        if not busy_values:
            return None
        shape = cls.from_means(
            math.fsum(busy_values) / len(busy_values),
            math.fsum(sm_values) / len(sm_values),
            sm_count,
            min_busy=min_busy,
        )
        if shape is None or not dram_values:
            return shape
        busy_with_dram = math.fsum(dram_busy)
        share = None if busy_with_dram <= 0 else _clamp01(max(0.0, math.fsum(dram_values)) / busy_with_dram)
        return PhaseShape(shape.duty, shape.width_fraction, shape.sm_count, share)


def predicted_slowdown(
    shape: PhaseShape,
    slice_sms: float,
    total_sms: int | None = None,
    slice_bandwidth_fraction: float | None = None,
) -> float:
    """Predicted step time on `slice_sms` SMs over today's step time on `total_sms` (≥ 1.0).

    Serialised bound: (1 − d) + d · stretch, with stretch = max(1, w / s) — the host part of a step stays,
    the GPU part runs w / s times longer once the phase is wider than the slice. Exact when host and GPU
    work alternate; an upper bound when they overlap. With `slice_bandwidth_fraction` β (the slice's share
    of the GPU's memory bandwidth, a MIG profile's memory slices over the GPU's) the stretch is also at
    least b / β, b the DRAM share while busy: a modelled term, not measured (an SM limit leaves bandwidth
    and L2 whole). A slice of the whole GPU predicts 1.0. `total_sms` defaults to the shape's SM count.
    """
    if slice_sms <= 0:
        raise ValueError(f"a slice needs at least one SM, got {slice_sms}")
    total = shape.sm_count if total_sms is None else total_sms
    width = shape.width_fraction * total
    stretch = 1.0 if slice_sms >= total else max(1.0, width / slice_sms)
    if slice_bandwidth_fraction is not None and shape.bandwidth_share is not None:
        if slice_bandwidth_fraction <= 0:
            raise ValueError(f"a slice needs some memory bandwidth, got {slice_bandwidth_fraction}")
        if slice_bandwidth_fraction < 1.0:
            stretch = max(stretch, shape.bandwidth_share / slice_bandwidth_fraction)
    return (1.0 - shape.duty) + shape.duty * stretch


def predicted_time_sliced_slowdown(shape: PhaseShape, sharers: int) -> float:
    """Predicted step time on a time-sliced share of 1/`sharers` of the GPU over today's (≥ 1.0).

    Time-slicing keeps every SM but hands the GPU to one context at a time: when every other sharer is
    busy whenever this one is (the case a bound must cover), each GPU phase takes `sharers` times longer,
    so (1 − d) + d · N. Context-switch overhead is not in it, so it is a lower estimate of the worst case.
    """
    if sharers < 1:
        raise ValueError(f"a share needs at least one sharer, got {sharers}")
    return (1.0 - shape.duty) + shape.duty * sharers


def fits(
    shape: PhaseShape,
    slice_sms: float,
    max_slowdown: float,
    total_sms: int | None = None,
    slice_bandwidth_fraction: float | None = None,
) -> bool:
    """Whether the predicted slowdown on the slice stays within `max_slowdown` (0.05 = 5 % longer steps)."""
    slowdown = predicted_slowdown(shape, slice_sms, total_sms, slice_bandwidth_fraction)
    return slowdown <= 1.0 + max_slowdown + 1e-12
