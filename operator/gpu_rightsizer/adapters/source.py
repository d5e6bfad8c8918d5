"""The metric-source port: workload windows for a window length, and node capacity.

Why a port: the recommender reads every workload's window each cycle, the actuator reads one
workload's window to verify a change, and `analyze` reads a file or a server once. All three take a
`WindowSource` and never name Prometheus, so a new source is one module that implements this protocol
plus one line in `adapters.source_registry`, and the tests use a fake source instead of patching the
cycle. This module imports no source, so the actuator can depend on the port alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

from gpu_rightsizer.logic.capacity import ClusterCapacity
from gpu_rightsizer.logic.floors import UnheldGPU
from gpu_rightsizer.logic.owners import ObjectLink
from gpu_rightsizer.model.observation import WorkloadWindow
from gpu_rightsizer.model.shards import ShardSlice

#: The controller owner of an object in a namespace, from a source other than the metrics (the
#: operator passes API reads): kube-state-metrics has no owner series for StatefulSets, Deployments or
#: custom kinds.
ExtraOwners = Callable[[str, ObjectLink], ObjectLink | None]


def step_for(window_seconds: float) -> float:
    """About 60 points per window, between 1 s and 60 s (short test and demo windows keep samples)."""
    return max(1.0, min(60.0, window_seconds / 60.0))


#: The shortest rate window: rate()/deriv() need several samples even at fine steps (Prometheus'
#: documentation: a range of at least 4 × the scrape interval; 3 × step at steps of 60 s and over).
RATE_WINDOW_MIN_SECONDS = 180.0


def rate_window_seconds(step_seconds: float) -> float:
    """Range of every counter's rate()/deriv() at `step_seconds`: max(3 × step, 180 s), on every path
    (the Prometheus source's queries, the incremental reads, the recording rules and the file reader).
    A sample at t sums what the counter did over [t - range, t]: the actuator's in-place verification
    starts that far after a resize, so no sample reaches back before it."""
    return max(3 * step_seconds, RATE_WINDOW_MIN_SECONDS)


@dataclass(frozen=True)
class Scope:
    """Which workloads a read is for: all of them, one namespace's, or one workload's."""

    namespace: str | None = None
    #: A workload within `namespace`, as "Kind/name" (or a bare name): its windows only.
    workload: str | None = None
    #: A shard's slice: the windows of the namespaces it owns only, read with a namespace matcher.
    shard: ShardSlice | None = None

    def __post_init__(self) -> None:
        if self.workload is not None and self.namespace is None:
            raise ValueError("a workload scope needs its namespace")

    def holds(self, namespace: str) -> bool:
        """Whether a workload of `namespace` is within the scope."""
        return (self.namespace is None or namespace == self.namespace) and (
            self.shard is None or self.shard.owns(namespace)
        )


#: Every workload the source can see.
EVERYWHERE = Scope()


@dataclass
class CycleReport:
    """What one incremental read did (for the log and the operator's own metrics)."""

    backfilling: bool
    chunks_done: int = 0
    chunks_failed: int = 0
    queries: int = 0
    samples: int = 0
    #: Backfill chunks done and planned so far (0/0 outside a backfill).
    backfill_done: int = 0
    backfill_total: int = 0
    #: Series loaded from saved state at the start (0 when the start was cold).
    restored_series: int = 0
    #: (family group: gpu, pod, xid, ksm or range; seconds) of every query, for the duration histogram.
    durations: list[tuple[str, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def timed(self, name: str, seconds: float) -> None:
        """Record one query's duration under its family group (the part of its name before ':')."""
        self.durations.append((name.partition(":")[0], seconds))

    @property
    def backfill_progress(self) -> float:
        """Share of the backfill's chunks done (1.0 when there is none)."""
        return self.backfill_done / self.backfill_total if self.backfill_total else 1.0


@dataclass
class WindowRead:
    """One read of one window length.

    `windows` is None while the source has not seen the whole window yet (an incremental source
    backfilling after a start): the reader then keeps what it had rather than judge part of a window.
    """

    windows: list[WorkloadWindow] | None
    #: The windows one chunk of namespaces at a time, assembled as they are taken, when the source
    #: reads so (`ReadsInChunks`); `windows` is then empty (None while backfilling, as ever).
    chunks: Iterator[list[WorkloadWindow]] | None = None
    #: What an incremental read did (None for a source that reads whole windows).
    report: CycleReport | None = None
    #: Families read from recorded series, and those read raw (incremental Prometheus only).
    recorded: tuple[str, ...] = ()
    raw: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return self.windows is not None

    def batches(self) -> Iterator[list[WorkloadWindow]]:
        """The windows in chunks: the source's own, else all of them as one."""
        if self.chunks is not None:
            yield from self.chunks
        elif self.windows is not None:
            yield self.windows


class WindowSource(Protocol):
    """Workload windows and node capacity from one metrics backend."""

    #: Where the data comes from, for log lines ("http://prometheus:9090", a file name).
    @property
    def where(self) -> str: ...

    def read_windows(
        self,
        window_seconds: float,
        at: datetime,
        *,
        scope: Scope = EVERYWHERE,
        owners: ExtraOwners | None = None,
    ) -> WindowRead:
        """The windows over [at - window_seconds, at] of the workloads in `scope`."""
        ...

    def read_capacity(self, at: datetime) -> ClusterCapacity:
        """What the nodes offer, from the metrics (for when the API server's nodes cannot be listed)."""
        ...

    def read_unheld_gpus(self, at: datetime, window_seconds: float) -> list[UnheldGPU]:
        """GR and PCIe maxima of the GPUs no pod held over the window (the idle floors' input)."""
        ...


def scoped(windows: list[WorkloadWindow], scope: Scope) -> list[WorkloadWindow]:
    """The windows within `scope` (for sources that read more than they were asked for)."""
    return [
        window
        for window in windows
        if scope.holds(window.workload.namespace)
        and scope.workload in (None, window.workload.name, f"{window.workload.kind}/{window.workload.name}")
    ]


@runtime_checkable
class ReadsInChunks(Protocol):
    """A source that can hand the windows of one read over one chunk of namespaces at a time, so its
    reader never holds them all (`WindowRead.chunks`)."""

    def read_window_chunks(
        self,
        window_seconds: float,
        at: datetime,
        *,
        scope: Scope = EVERYWHERE,
        owners: ExtraOwners | None = None,
    ) -> WindowRead:
        """`WindowSource.read_windows`, its windows in `chunks`."""
        ...


@runtime_checkable
class KeepsWindows(Protocol):
    """A source that keeps state per window length across reads (incremental reads), which its reader
    tells which lengths are still in use and asks to save on shutdown."""

    def keep_only(self, window_lengths: set[float]) -> list[float]:
        """Forget the window lengths not in `window_lengths`; returns those forgotten."""
        ...

    def save_all(self) -> int:
        """Save what can be saved now; returns how many windows were saved."""
        ...

    @property
    def backfilling(self) -> bool:
        """Whether a window is still being read back to its start (its reader should come back soon)."""
        ...
