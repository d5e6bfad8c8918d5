"""A workload's plotted series over its window: the few lines the HTML report draws, in few points.

The engine reads statistics, never series; the report wants to show them over time. The sources
hand their per-pod samples here (the same samples they summarise for the engine) and get back one
short series per plot: busy and SM activity of the busiest GPU, CPU of the busiest pod, and GPU
memory used on the fullest GPU. Limits and capacities come from the window's allocation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from gpu_rightsizer.logic import stats as st
from gpu_rightsizer.model.observation import WorkloadWindow

Sample = tuple[float, float]

#: Points per plotted series: enough for a plot a few hundred pixels wide, small in the file.
TIMELINE_POINTS = 120


@dataclass(frozen=True)
class Timeline:
    """One workload's plotted series, each (unix seconds, value), oldest first."""

    gpu_busy: list[Sample] = field(default_factory=list)  # busiest GPU, 0..1
    sm_active: list[Sample] = field(default_factory=list)  # busiest GPU, 0..1
    cpu_cores: list[Sample] = field(default_factory=list)  # busiest pod, cores
    gpu_memory_used_mib: list[Sample] = field(default_factory=list)  # fullest GPU, MiB
    cpu_limit_cores: float | None = None  # per pod (else its request), drawn against cpu_cores
    gpu_memory_capacity_mib: float | None = None  # one allocated GPU or slice

    @property
    def empty(self) -> bool:
        """True when no series has a point."""
        return not (self.gpu_busy or self.sm_active or self.cpu_cores or self.gpu_memory_used_mib)


def downsample(samples: Sequence[Sample], points: int = TIMELINE_POINTS) -> list[Sample]:
    """At most `points` samples: the mean of each equal slice of time (NaN and sentinels dropped)."""
    kept = st.clean(samples)
    if len(kept) <= points:
        return kept
    first, last = kept[0][0], kept[-1][0]
    width = (last - first) / points or 1.0
    slots: dict[int, list[Sample]] = {}
    for timestamp, value in kept:
        slots.setdefault(min(points - 1, int((timestamp - first) / width)), []).append((timestamp, value))
    return [
        (math.fsum(t for t, _ in slot) / len(slot), math.fsum(v for _, v in slot) / len(slot))
        for _, slot in sorted(slots.items())
    ]


def timeline_of(
    *,
    busy: Sequence[Sequence[Sample]],
    sm_active: Sequence[Sequence[Sample]],
    cpu_cores: Sequence[Sequence[Sample]],
    memory_used_mib: Sequence[Sequence[Sample]],
    step_seconds: float,
) -> Timeline:
    """The plotted series from per-GPU (busy, SM, memory) and per-pod (CPU) samples: the largest
    at each step, downsampled, so the plot shows what the table's figures (the busiest GPU's p95,
    the busiest pod's CPU) were computed on."""

    def peak(series: Sequence[Sequence[Sample]]) -> list[Sample]:
        return downsample(st.max_aligned([st.clean(one) for one in series if one], step_seconds))

    return Timeline(
        gpu_busy=peak(busy),
        sm_active=peak(sm_active),
        cpu_cores=peak(cpu_cores),
        gpu_memory_used_mib=peak(memory_used_mib),
    )


def with_allocation(timeline: Timeline, window: WorkloadWindow) -> Timeline:
    """The timeline with the lines its series are read against: the pod's CPU limit (its request
    when it has none) and the memory of one allocated GPU or slice."""
    allocation = window.allocation
    capacities = [g.memory_total_mib for p in window.pods for g in p.gpus if g.memory_total_mib]
    return replace(
        timeline,
        cpu_limit_cores=allocation.cpu_limit_cores or allocation.cpu_request_cores,
        gpu_memory_capacity_mib=allocation.gpu_memory_mib or (max(capacities) if capacities else None),
    )
