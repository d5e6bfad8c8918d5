"""Per-process CPU from /proc: which process of a container is pinned at one core.

Why: a trainer fed by one data-loader worker under a 2-core limit uses about 1.1 cores. The container
never reaches its limit and is never throttled, so container-level CPU cannot tell "starved by one
process" from "light". The single process at ~100 % of one core is the tell. Per container, the agent
exports the busiest process's CPU in cores and how many processes are at or above `PINNED_CORES`
(not one series per PID: PIDs come and go, and their cardinality has no bound).

CPU time is utime + stime from `/proc/<pid>/stat`, all threads of the process together; a process is
identified across ticks by (PID, start time), so a reused PID is never diffed against its predecessor.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpu_rightsizer.agent.cgroups import PodIdentity
from gpu_rightsizer.model import metric_names as mn

log = logging.getLogger(__name__)

PROCESS_CPU_MAX = mn.AGENT_PROCESS_CPU_MAX
PROCESSES_PINNED = mn.AGENT_PROCESSES_PINNED

#: A process at or above this many cores over one interval counts as pinned at one core.
PINNED_CORES = 0.9

#: /proc/<pid>/stat fields after the command name (0-based, counting from field 3, `state`).
_UTIME, _STIME, _START_TIME = 11, 12, 19


@dataclass(frozen=True)
class ProcessCpuTime:
    """A process's cumulative CPU time at one reading."""

    pid: int
    start_ticks: int
    cpu_seconds: float
    comm: str


@dataclass(frozen=True)
class ContainerProcessCpu:
    """One container's per-process CPU over one interval."""

    identity: PodIdentity
    max_cores: float
    busiest: str
    pinned: int
    processes: int


def parse_proc_stat(pid: int, text: str, clock_ticks: int) -> ProcessCpuTime | None:
    """One `/proc/<pid>/stat` line, or None when it is malformed (the command name may hold spaces)."""
    open_paren, close_paren = text.find("("), text.rfind(")")
    if open_paren < 0 or close_paren < open_paren:
        return None
    fields = text[close_paren + 2 :].split()
    try:
        utime, stime = int(fields[_UTIME]), int(fields[_STIME])
        start = int(fields[_START_TIME])
    except (IndexError, ValueError):
        return None
    return ProcessCpuTime(
        pid=pid,
        start_ticks=start,
        cpu_seconds=(utime + stime) / clock_ticks,
        comm=text[open_paren + 1 : close_paren],
    )


def container_process_cpu(
    previous: Mapping[int, ProcessCpuTime],
    current: Mapping[int, ProcessCpuTime],
    seconds: float,
    resolve: Callable[[int], PodIdentity | None],
) -> list[ContainerProcessCpu]:
    """Per container: the busiest process's cores and the pinned count over `seconds` (pure)."""
    if seconds <= 0:
        return []
    by_container: dict[tuple[str, str], tuple[PodIdentity, list[tuple[float, str]]]] = {}
    for pid, now in current.items():
        before = previous.get(pid)
        if before is None or before.start_ticks != now.start_ticks:
            continue  # new (or reused) PID: no interval to measure yet
        identity = resolve(pid)
        if identity is None:
            continue
        cores = max(0.0, now.cpu_seconds - before.cpu_seconds) / seconds
        key = (identity.pod_uid, identity.container or identity.container_id or "")
        by_container.setdefault(key, (identity, []))[1].append((cores, now.comm))
    rows = []
    for identity, processes in by_container.values():
        cores, comm = max(processes)
        pinned = sum(1 for c, _ in processes if c >= PINNED_CORES)
        rows.append(ContainerProcessCpu(identity, cores, comm, pinned, len(processes)))
    return sorted(rows, key=lambda row: (row.identity.pod_uid, row.identity.container or ""))


class ProcessCpuTracker:
    """Reads every process's CPU time once per tick and reports per-container figures."""

    def __init__(
        self,
        resolve: Callable[[int], PodIdentity | None],
        proc_root: Path = Path("/proc"),
        monotonic: Callable[[], float] = time.monotonic,
        clock_ticks: int | None = None,
        retain: Callable[[Iterable[int]], None] | None = None,
    ) -> None:
        """`retain`, when given, is called with the live PIDs each tick (to prune the resolver's cache)."""
        self._resolve = resolve
        self._retain = retain
        self._proc_root = proc_root
        self._monotonic = monotonic
        self._clock_ticks = clock_ticks or os.sysconf("SC_CLK_TCK")
        self._previous: dict[int, ProcessCpuTime] = {}
        self._previous_at: float | None = None
        self._latest: list[ContainerProcessCpu] = []
        self._lock = threading.Lock()

    def live_pids(self) -> list[int]:
        """PIDs under the proc root (the agent needs hostPID to see the pods' processes)."""
        try:
            return [int(entry.name) for entry in self._proc_root.iterdir() if entry.name.isdigit()]
        except OSError as exc:
            log.warning("cannot list %s: %s", self._proc_root, exc)
            return []

    def read(self, pids: Iterable[int]) -> dict[int, ProcessCpuTime]:
        """CPU times of `pids`; processes that exited meanwhile are skipped."""
        times: dict[int, ProcessCpuTime] = {}
        for pid in pids:
            try:
                text = (self._proc_root / str(pid) / "stat").read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            reading = parse_proc_stat(pid, text, self._clock_ticks)
            if reading is not None:
                times[pid] = reading
        return times

    def sample(self, pids: Iterable[int] | None = None) -> list[ContainerProcessCpu]:
        """Figures since the last call (empty on the first); `pids` defaults to every live process."""
        now = self._monotonic()
        current = self.read(self.live_pids() if pids is None else pids)
        if self._retain is not None:
            self._retain(current)
        rows: list[ContainerProcessCpu] = []
        if self._previous_at is not None:
            rows = container_process_cpu(self._previous, current, now - self._previous_at, self._resolve)
        self._previous, self._previous_at = current, now
        with self._lock:
            self._latest = rows
        return rows

    def latest(self) -> list[ContainerProcessCpu]:
        """The figures of the last `sample()` (what a scrape serves)."""
        with self._lock:
            return list(self._latest)


def process_cpu_families(
    rows: Iterable[ContainerProcessCpu], hostname: str | None, timestamp: float | None = None
) -> list[Metric]:
    """The two per-container gauges, labelled like cAdvisor's container series."""
    busiest = GaugeMetricFamily(
        PROCESS_CPU_MAX, "CPU of the container's busiest process over the last interval, in cores."
    )
    pinned = GaugeMetricFamily(
        PROCESSES_PINNED,
        f"Processes of the container at or above {PINNED_CORES} core over the last interval.",
    )
    host = {"Hostname": hostname} if hostname else {}
    for row in rows:
        labels = {
            **host,
            "namespace": row.identity.namespace or "",
            "pod": row.identity.pod or "",
            "container": row.identity.container or "",
            "pod_uid": row.identity.pod_uid,
        }
        busiest.add_sample(PROCESS_CPU_MAX, labels, row.max_cores, timestamp)
        pinned.add_sample(PROCESSES_PINNED, labels, float(row.pinned), timestamp)
    return [busiest, pinned]


class ProcessCpuCollector(Collector):
    """Serves the tracker's latest figures; a scrape never reads /proc itself."""

    def __init__(self, tracker: ProcessCpuTracker, hostname: str | None) -> None:
        self._tracker = tracker
        self._hostname = hostname

    def collect(self) -> Iterator[Metric]:
        yield from process_cpu_families(self._tracker.latest(), self._hostname)
