"""The cycle's metric windows from incremental reads kept across cycles, one source per window length.

Why here: the streaming windows live as long as the process, so the cycle keeps one
`IncrementalSource` per observation window in use (the operator's `--window`, or a policy's), reads
it each cycle within a query budget and hands back what the read did (the cycle publishes it as
the operator's own metrics). A window still being backfilled gives no batch, so its workloads keep
their last status. Each window also looks for the chart's recording rules when it starts and every
`REDETECT_SECONDS` after (`recording_rules.detect`), and reads the families they cover from them.

With a state directory (`--state-dir`), a window's streaming state is saved after a cycle at most
every `save_every_seconds` and on shutdown, and loaded when its source is made, before its first
read: the backfill after a restart then covers only the time since the save. State that cannot be
used (older than the window, other families or settings, damaged) is discarded with a log line.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gpu_rightsizer.adapters.incremental import CHUNK_PODS, IncrementalSource
from gpu_rightsizer.adapters.prometheus import PrometheusSource, source_for
from gpu_rightsizer.adapters.recording_rules import Detection, detect
from gpu_rightsizer.adapters.source import (
    EVERYWHERE,
    CycleReport,
    ExtraOwners,
    Scope,
    WindowRead,
    scoped,
    step_for,
)
from gpu_rightsizer.adapters.state import StateDir
from gpu_rightsizer.config import OperatorConfig
from gpu_rightsizer.logic.capacity import ClusterCapacity
from gpu_rightsizer.logic.floors import UnheldGPU
from gpu_rightsizer.logic.streaming import StateError
from gpu_rightsizer.model.observation import WorkloadWindow

LOG = logging.getLogger(__name__)

#: How often a window looks again for recorded series (rules added, or removed, since the start).
REDETECT_SECONDS = 900.0


class WindowSources:
    """`WindowSource` from incremental Prometheus reads: one incremental source per window length,
    created on first use and dropped when unused."""

    def __init__(
        self,
        make_source: Callable[[], PrometheusSource],
        *,
        budget_seconds: float,
        step_seconds: float | None = None,
        recorded_series: bool = True,
        state: StateDir | None = None,
        save_every_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        chunk_pods: int = CHUNK_PODS,
    ) -> None:
        self.make_source = make_source
        #: About how many pods' windows a chunked read assembles at a time (`read_window_chunks`).
        self.chunk_pods = chunk_pods
        self.budget_seconds = budget_seconds
        #: A fixed sample step (`--prometheus-step`), else `step_for` the window.
        self.step_seconds = step_seconds
        #: Whether to look for the chart's recording rules (when a window's source is made, then
        #: every `REDETECT_SECONDS`).
        self.recorded_series = recorded_series
        self.sources: dict[float, IncrementalSource] = {}
        #: What the detection found for each window's source (families read from recorded series).
        self.detections: dict[float, Detection] = {}
        self._detected_at: dict[float, float] = {}
        #: Where each window's state is saved and loaded from (None: nothing is saved).
        self.state = state
        self.save_every_seconds = save_every_seconds
        self.clock = clock
        self._saved_at: dict[float, float] = {}
        self._lock = threading.Lock()
        self.unheld = UnheldMaxima()

    def source(self, window_seconds: float, at: datetime | None = None) -> IncrementalSource:
        """The window's source; made on first use, after detecting the recorded series it can use
        over a window ending `at` (now if not given)."""
        with self._lock:
            found = self.sources.get(window_seconds)
            if found is None:
                prometheus = self.make_source()
                step = self.step_seconds or step_for(window_seconds)
                found = IncrementalSource(prometheus, window_seconds=window_seconds, step_seconds=step)
                self.sources[window_seconds] = found
                self._restore(window_seconds, found, at or datetime.now(tz=UTC))
                if self.recorded_series:
                    self._detect(window_seconds, found, at or datetime.now(tz=UTC))
            return found

    def _restore(self, window_seconds: float, source: IncrementalSource, at: datetime) -> None:
        """Load the window's saved state into its new source, or say why not (the start is then cold)."""
        if self.state is None:
            return
        path = self.state.path(window_seconds)
        try:
            data = self.state.read(window_seconds)
        except OSError as error:
            LOG.warning("cannot read saved state %s; backfilling the whole window: %s", path, error)
            return
        if data is None:
            LOG.info(
                "no saved state for the %g s window (%s): backfilling the whole window", window_seconds, path
            )
            return
        try:
            last_end = source.restore_state(data, at=at)
        except StateError as error:
            LOG.warning("discarding saved state %s: %s; backfilling the whole window", path, error)
            return
        LOG.info(
            "restored the %g s window from %s: %d series, %d bytes, read up to %.0f s ago; "
            "backfilling only that gap",
            window_seconds,
            path,
            source.reader.restored_series,
            len(data),
            at.timestamp() - last_end,
        )
        self._saved_at[window_seconds] = self.clock()  # what is on disk is current: no save due yet

    def save(self, window_seconds: float, *, force: bool = False) -> bool:
        """Save the window's state when due (`save_every_seconds` since the last save, or `force`) and
        its window is complete; a failure is logged, never raised (it must not stop a cycle)."""
        source = self.sources.get(window_seconds)
        if self.state is None or source is None:
            return False
        now = self.clock()
        if not force and now - self._saved_at.get(window_seconds, -float("inf")) < self.save_every_seconds:
            return False
        try:
            data = source.save_state()
            if data is None:
                return False
            path = self.state.write(window_seconds, data)
        except Exception as error:  # a full or read-only volume: the reads go on without saving
            self._saved_at[window_seconds] = now  # tried again after the interval, not every cycle
            LOG.warning("saving the %g s window's state failed: %s", window_seconds, error)
            return False
        self._saved_at[window_seconds] = now
        LOG.info(
            "saved the %g s window: %d series, %d bytes to %s",
            window_seconds,
            len(source.reader.store),
            len(data),
            path,
        )
        return True

    def save_all(self) -> int:
        """Save every complete window now (on shutdown); returns how many were saved."""
        with self._lock:
            return sum(self.save(seconds, force=True) for seconds in list(self.sources))

    def _detect(self, window_seconds: float, source: IncrementalSource, at: datetime) -> None:
        """Which families this window reads from recording rules; logged when it changes. A detection
        that fails in any way leaves every family raw: it must never stop the window's reads."""
        try:
            detection = detect(
                source.source,
                now=at.timestamp(),
                window_seconds=window_seconds,
                step_seconds=source.step_seconds,
            )
        except Exception as error:  # an answer of an unexpected shape, say
            LOG.warning("looking for recorded series failed; reading the raw expressions: %s", error)
            detection = Detection(method=f"failed: {error}")
        previous = self.detections.get(window_seconds)
        self.detections[window_seconds] = detection
        self._detected_at[window_seconds] = at.timestamp()
        if previous is None or previous.used != detection.used:
            LOG.info("%g s window: %s", window_seconds, detection.describe())
            source.use_recorded(detection.used)

    def fetch(
        self, window_seconds: float, end: datetime, *, namespace: str | None = None, **assembly: Any
    ) -> tuple[list[WorkloadWindow] | None, CycleReport]:
        """The windows of every workload at `end` (None while the window is being backfilled) and
        what the read did. `assembly` goes to the full read's assembly (e.g. `owners`)."""
        source = self.source(window_seconds, end)
        self._detect_when_due(window_seconds, source, end)
        windows = source.read(at=end, namespace=namespace, budget_seconds=self.budget_seconds, **assembly)
        self.save(window_seconds)
        return (windows if source.complete else None), source.report

    def _detect_when_due(self, window_seconds: float, source: IncrementalSource, at: datetime) -> None:
        """Look for recording rules again when it is time (rules added once they cover the window,
        or gone since the last look)."""
        if (
            self.recorded_series
            and at.timestamp() - self._detected_at.get(window_seconds, 0.0) >= REDETECT_SECONDS
        ):
            with self._lock:
                self._detect(window_seconds, source, at)

    @property
    def backfilling(self) -> bool:
        return any(not source.complete for source in list(self.sources.values()))

    @property
    def where(self) -> str:
        return self.make_source().config.url

    def read_windows(
        self,
        window_seconds: float,
        at: datetime,
        *,
        scope: Scope = EVERYWHERE,
        owners: ExtraOwners | None = None,
    ) -> WindowRead:
        """`WindowSource.read_windows`: the window's incremental read (no windows while backfilling)."""
        windows, report = self.fetch(
            window_seconds, at, namespace=scope.namespace, shard=scope.shard, owners=owners
        )
        detection = self.detections.get(window_seconds) or Detection()
        return WindowRead(
            windows=None if windows is None else scoped(windows, scope),
            report=report,
            recorded=tuple(sorted(detection.used)),
            raw=tuple(sorted(detection.fallback)),
        )

    def read_window_chunks(
        self,
        window_seconds: float,
        at: datetime,
        *,
        scope: Scope = EVERYWHERE,
        owners: ExtraOwners | None = None,
    ) -> WindowRead:
        """`read_windows`, the windows one chunk of namespaces at a time (`IncrementalSource.read_chunks`):
        the reads happen now, each chunk is assembled as it is taken."""
        source = self.source(window_seconds, at)
        self._detect_when_due(window_seconds, source, at)
        chunks = source.read_chunks(
            at=at,
            namespace=scope.namespace,
            shard=scope.shard,
            owners=owners,
            budget_seconds=self.budget_seconds,
        )
        self.save(window_seconds)
        detection = self.detections.get(window_seconds) or Detection()
        return WindowRead(
            windows=None if chunks is None else [],
            chunks=None if chunks is None else (scoped(chunk, scope) for chunk in chunks),
            report=source.report,
            recorded=tuple(sorted(detection.used)),
            raw=tuple(sorted(detection.fallback)),
        )

    def read_capacity(self, at: datetime) -> ClusterCapacity:
        """Node capacity from one instant query set (nothing incremental about it)."""
        return self.make_source().read_capacity(at)

    def read_unheld_gpus(self, at: datetime, window_seconds: float) -> list[UnheldGPU]:
        """The unheld GPUs' maxima over the window: two instant queries that look back only to the
        previous read (`UnheldMaxima`), so every shard's share of them stays one interval's samples."""
        with self._lock:
            return self.unheld.read(self.make_source(), at, window_seconds)

    def keep_only(self, window_lengths: set[float]) -> list[float]:
        """Forget the sources of window lengths no workload uses any more (their memory with them);
        returns the lengths forgotten."""
        with self._lock:
            gone = [s for s in self.sources if s not in window_lengths]
            for seconds in gone:
                del self.sources[seconds]
                self.detections.pop(seconds, None)
                self._detected_at.pop(seconds, None)
                self._saved_at.pop(seconds, None)
                if self.state is not None:
                    try:
                        self.state.remove(seconds)
                    except OSError as error:
                        LOG.warning("cannot remove the saved state of the %g s window: %s", seconds, error)
            return gone


class UnheldMaxima:
    """The idle-floor maxima of the GPUs no pod holds, kept across cycles.

    `PrometheusSource.read_unheld_gpus` takes the maximum over its look-back; asked over the whole
    window every cycle, it touches every sample of every unheld GPU's series each time. Here each read
    looks back to the previous one (the whole window the first time, or after a gap), and the window's
    maximum is the largest of the reads kept for a window (a read is kept while its end is in it)."""

    def __init__(self) -> None:
        self.reads: list[tuple[float, list[UnheldGPU]]] = []  # (end, that read's maxima)
        self.window_seconds: float | None = None

    def read(self, source: PrometheusSource, at: datetime, window_seconds: float) -> list[UnheldGPU]:
        now = at.timestamp()
        if window_seconds != self.window_seconds or (
            self.reads and not 0 <= now - self.reads[-1][0] <= window_seconds
        ):  # another window, a gap longer than it, or the clock moved back: read it whole
            self.reads, self.window_seconds = [], window_seconds
        last = self.reads[-1][0] if self.reads else None
        if last is None or now > last:
            lookback = window_seconds if last is None else max(1.0, now - last)
            self.reads.append((now, source.read_unheld_gpus(at, lookback)))
        self.reads = [(end, found) for end, found in self.reads if end >= now - window_seconds]
        highest: dict[tuple[str, str], UnheldGPU] = {}
        for _, found in self.reads:
            for gpu in found:
                before = highest.get((gpu.node, gpu.model))
                highest[(gpu.node, gpu.model)] = (
                    gpu
                    if before is None
                    else UnheldGPU(
                        gpu.node,
                        gpu.model,
                        _larger(before.gr_max, gpu.gr_max),
                        _larger(before.transfer_bytes_max, gpu.transfer_bytes_max),
                    )
                )
        return list(highest.values())


def _larger(first: float | None, second: float | None) -> float | None:
    return second if first is None else first if second is None else max(first, second)


def sources_for(cfg: OperatorConfig) -> WindowSources:
    """Incremental windows for the operator's life. A cycle spends at most half an interval on
    backfill queries, so it still finishes in time."""
    return WindowSources(
        lambda: source_for(cfg),
        budget_seconds=max(5.0, cfg.interval_seconds / 2),
        step_seconds=cfg.prometheus_step_seconds,
        state=StateDir(cfg.state_dir) if cfg.state_dir else None,
        save_every_seconds=cfg.state_save_interval_seconds,
        chunk_pods=cfg.chunk_pods or CHUNK_PODS,
    )
