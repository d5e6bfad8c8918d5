"""The agent's main loop: sample on a fixed clock, serve the latest snapshot or record them all.

Sampling runs on its own drift-free schedule (next tick = previous tick + interval), so scrapes never
trigger NVML calls and a slow scrape cannot shift the GPM sampling interval.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType

from prometheus_client import start_http_server
from prometheus_client.core import Metric
from prometheus_client.registry import CollectorRegistry

from gpu_rightsizer.adapters.nvml import NvmlLibrary
from gpu_rightsizer.agent.exporter import (
    AgentState,
    DcgmCompatibleCollector,
    DevicePods,
    OpenMetricsRecording,
    PodResolver,
    families_from_sampler,
)
from gpu_rightsizer.agent.process_cpu import ProcessCpuCollector, ProcessCpuTracker, process_cpu_families
from gpu_rightsizer.agent.sampler import NodeSnapshot, NvmlSampler

log = logging.getLogger(__name__)

#: Extra families to record at each tick (the proof harness adds cAdvisor/KSM-like series here).
TickHook = Callable[[NodeSnapshot], Iterable[Metric]]


class AgentRunner:
    """Owns the sampler and the schedule; one per process."""

    def __init__(
        self,
        nvml: NvmlLibrary,
        resolve: PodResolver,
        hostname: str | None,
        interval: float = 1.0,
        sampler: NvmlSampler | None = None,
        device_pods: DevicePods | None = None,
    ) -> None:
        self.sampler = sampler or NvmlSampler(nvml)
        self.resolve = resolve
        self.device_pods = device_pods
        self.hostname = hostname
        self.interval = interval
        self.state = AgentState()
        self.stop_event = threading.Event()
        self._cpu_start = time.process_time()
        self._wall_start = time.monotonic()
        #: Per-process CPU from /proc, sampled on the same clock when set (agent/process_cpu.py).
        self.process_cpu: ProcessCpuTracker | None = None

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT end the loop cleanly (a recording is still written)."""

        def _stop(signum: int, _frame: FrameType | None) -> None:
            log.info("signal %d: stopping", signum)
            self.stop_event.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)

    def tick(self) -> NodeSnapshot:
        """Sample once and publish the snapshot."""
        started = time.monotonic()
        snapshot = self.sampler.sample()
        if self.process_cpu is not None:
            self.process_cpu.sample()
        elapsed = time.monotonic() - started
        with self.state.lock:
            self.state.snapshot = snapshot
            self.state.sample_seconds = elapsed
        return snapshot

    def ticks(self, duration: float | None = None) -> Iterable[NodeSnapshot]:
        """Snapshots on the fixed schedule until `duration` passes or a stop is asked for."""
        start = time.monotonic()
        next_at = start
        while not self.stop_event.is_set():
            yield self.tick()
            next_at += self.interval
            now = time.monotonic()
            if next_at < now:  # fell behind (slow NVML): skip missed ticks instead of bursting
                next_at = now + self.interval
            if duration is not None and next_at - start > duration + 1e-6:
                return
            self.stop_event.wait(max(0.0, next_at - now))

    def cpu_seconds_per_second(self) -> float:
        """This process's CPU time over wall time since start (the agent's own cost)."""
        wall = time.monotonic() - self._wall_start
        return (time.process_time() - self._cpu_start) / wall if wall > 0 else 0.0

    # -- modes ---------------------------------------------------------------------------------

    def serve(self, host: str, port: int) -> int:
        """Serve /metrics until stopped."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(
            DcgmCompatibleCollector(self.state, self.sampler, self.resolve, self.hostname, self.device_pods)
        )
        server, thread = start_http_server(port, addr=host, registry=registry)
        log.info(
            "serving dcgm-exporter-compatible metrics on http://%s:%d/metrics every %.3g s",
            host,
            port,
            self.interval,
        )
        if self.process_cpu is not None:
            registry.register(ProcessCpuCollector(self.process_cpu, self.hostname))
        try:
            for _ in self.ticks():
                pass
        finally:
            server.shutdown()
            thread.join(timeout=5)
            log.info("agent CPU cost: %.4f CPU-s per s", self.cpu_seconds_per_second())
        return 0

    def snapshot_to_file(self, output: Path) -> int:
        """Two ticks one interval apart (GPM needs a pair), the second written as OpenMetrics."""
        snapshots = list(self.ticks(duration=self.interval))
        last = snapshots[-1]
        if not last.nvml_up:
            log.error("NVML is not available: nothing written to %s", output)
            return 1
        recording = OpenMetricsRecording()
        recording.add(self._families(last))
        recording.add(self._process_cpu_families(last))
        recording.write(output)
        log.info("wrote %d samples to %s", recording.sample_count, output)
        return 0

    def record_to_file(self, output: Path, duration: float, hook: TickHook | None = None) -> int:
        """Sample for `duration` seconds and write every tick, timestamped, to one OpenMetrics file."""
        recording = OpenMetricsRecording()
        ticks = 0
        for snapshot in self.ticks(duration=duration):
            ticks += 1
            if snapshot.nvml_up:
                recording.add(self._families(snapshot))
            recording.add(self._process_cpu_families(snapshot))
            if hook is not None:
                recording.add(hook(snapshot))
        if recording.sample_count == 0:
            log.error("no samples recorded (NVML down the whole time?): nothing written to %s", output)
            return 1
        recording.write(output)
        log.info(
            "recorded %d ticks, %d samples to %s; agent CPU cost %.4f CPU-s per s",
            ticks,
            recording.sample_count,
            output,
            self.cpu_seconds_per_second(),
        )
        return 0

    def _families(self, snapshot: NodeSnapshot) -> list[Metric]:
        with self.state.lock:
            sample_seconds = self.state.sample_seconds or 0.0
        return list(
            families_from_sampler(
                self.sampler, snapshot, self.resolve, self.hostname, sample_seconds, self.device_pods
            )
        )

    def _process_cpu_families(self, snapshot: NodeSnapshot) -> list[Metric]:
        if self.process_cpu is None:
            return []
        return process_cpu_families(self.process_cpu.latest(), self.hostname, snapshot.timestamp)

    def close(self) -> None:
        """Release NVML."""
        self.sampler.close()
