"""A `WindowSource` in memory, for tests of the cycle and the actuator (in place of patching them)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpu_rightsizer.adapters.source import EVERYWHERE, CycleReport, ExtraOwners, Scope, WindowRead, scoped
from gpu_rightsizer.logic.capacity import ClusterCapacity
from gpu_rightsizer.logic.floors import UnheldGPU
from gpu_rightsizer.model.observation import Allocation, WorkloadRef, WorkloadWindow


@dataclass
class FakeSource:
    """One window per workload in `workloads`, over exactly the window asked for.

    `failing` window lengths raise (a broken backend); the first `backfill_reads` reads of each length
    give no windows (an incremental source backfilling); `shape` builds each window, so a test can
    say what the workload did. Every read is recorded as (window length, scope).
    """

    workloads: Callable[[], Iterable[WorkloadRef]]
    failing: frozenset[float] = frozenset()
    backfill_reads: int = 0
    shape: Callable[[WorkloadRef, datetime, datetime], WorkloadWindow] | None = None
    capacity: ClusterCapacity = field(default_factory=ClusterCapacity)
    calls: list[tuple[float, Scope]] = field(default_factory=list)
    reads: dict[float, int] = field(default_factory=dict)
    kept: list[set[float]] = field(default_factory=list)

    @property
    def where(self) -> str:
        return "memory"

    def read_windows(
        self,
        window_seconds: float,
        at: datetime,
        *,
        scope: Scope = EVERYWHERE,
        owners: ExtraOwners | None = None,
    ) -> WindowRead:
        self.calls.append((window_seconds, scope))
        if window_seconds in self.failing:
            raise ValueError("Prometheus answered something that is not JSON")
        done = self.reads[window_seconds] = self.reads.get(window_seconds, 0) + 1
        start = at - timedelta(seconds=window_seconds)
        if self.backfill_reads:
            report = CycleReport(backfilling=done <= self.backfill_reads, samples=10 * done)
            report.backfill_done, report.backfill_total = min(done, self.backfill_reads), self.backfill_reads
            report.timed("pod:cpu_usage_cores", 0.25)
            if done <= self.backfill_reads:
                return WindowRead(windows=None, report=report)
        else:
            report = None
        build = self.shape or plain_window
        windows = [build(ref, start, at) for ref in self.workloads()]
        return WindowRead(windows=scoped(windows, scope), report=report)

    def read_capacity(self, at: datetime) -> ClusterCapacity:
        return self.capacity

    def read_unheld_gpus(self, at: datetime, window_seconds: float) -> list[UnheldGPU]:
        return []

    def keep_only(self, window_lengths: set[float]) -> list[float]:
        self.kept.append(window_lengths)
        return []

    def save_all(self) -> int:
        return 0

    @property
    def backfilling(self) -> bool:
        return any(done <= self.backfill_reads for done in self.reads.values())

    @property
    def lengths(self) -> list[float]:
        """The window lengths read, in order."""
        return [seconds for seconds, _ in self.calls]


def plain_window(ref: WorkloadRef, start: datetime, end: datetime) -> WorkloadWindow:
    """A window with no samples at all (the engine says InsufficientData)."""
    seconds = (end - start).total_seconds()
    return WorkloadWindow(
        workload=ref, start=start, end=end, step_seconds=max(1.0, seconds / 60), allocation=Allocation()
    )
