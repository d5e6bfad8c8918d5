"""An in-memory NVML for unit tests: GPUs are plain objects whose fields tests set or break."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpu_rightsizer.adapters.nvml import (
    ClockType,
    EccCounter,
    GpmMetric,
    MemoryInfo,
    MigDevice,
    MigProfileInfo,
    NvmlCallError,
    NvmlErrorKind,
    PcieDirection,
    ProcessMemory,
    ProcessUtilization,
    XidEvent,
)

GIB = 1024**3


@dataclass
class FakeGpu:
    """One fake GPU. `unsupported` names methods that answer NOT_SUPPORTED; `failing` maps method → kind."""

    uuid: str
    name: str = "NVIDIA H200"
    util: tuple[float, float] = (50.0, 20.0)
    memory: MemoryInfo = field(default_factory=lambda: MemoryInfo(141 * GIB, 10 * GIB, 131 * GIB, 1 * GIB))
    power_mw: float = 300_000.0
    sm_clock: float = 1980.0
    reasons: int = 0
    gpm: bool = True
    gpm_counter: float = 0.0  # each sample carries the value; metrics = difference-based fake
    gpm_values: dict[GpmMetric, float] = field(default_factory=dict)
    processes: list[ProcessMemory] = field(default_factory=list)
    process_util: list[ProcessUtilization] = field(default_factory=list)
    mig_mode: tuple[int, int] = (0, 0)
    mig_profiles: list[MigProfileInfo] = field(default_factory=list)
    mig_devices: list[MigDevice] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)
    failing: dict[str, NvmlErrorKind] = field(default_factory=dict)


@dataclass
class FakeGpmSample:
    gpu: FakeGpu
    gpu_instance_id: int | None


class FakeNvml:
    """Implements `NvmlLibrary`; counts calls so tests can check that unsupported fields are not retried."""

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.calls: dict[str, int] = {}
        self.init_failures: list[NvmlErrorKind] = []
        self.initialised = False
        self.init_count = 0
        self.freed_samples = 0
        self.allocated_samples = 0
        self.xid_queue: list[XidEvent] = []
        self.xid_supported = True

    def _enter(self, method: str, handle: object | None = None) -> FakeGpu | None:
        self.calls[method] = self.calls.get(method, 0) + 1
        if not self.initialised and method != "init":
            raise NvmlCallError(NvmlErrorKind.DRIVER, f"{method}: uninitialised")
        if isinstance(handle, FakeGpu):
            if method in handle.unsupported:
                raise NvmlCallError(NvmlErrorKind.NOT_SUPPORTED, f"{method}: not supported")
            if method in handle.failing:
                raise NvmlCallError(handle.failing[method], f"{method}: failing")
            return handle
        return None

    def init(self) -> None:
        self._enter("init")
        if self.init_failures:
            kind = self.init_failures.pop(0)
            raise NvmlCallError(kind, "init failed")
        self.initialised = True
        self.init_count += 1

    def shutdown(self) -> None:
        self._enter("shutdown")
        self.initialised = False

    def driver_version(self) -> str:
        self._enter("driver_version")
        return "580.159.04"

    def device_count(self) -> int:
        self._enter("device_count")
        return len(self.gpus)

    def device_handle(self, index: int) -> object:
        self._enter("device_handle")
        return self.gpus[index]

    def _gpu(self, method: str, handle: object) -> FakeGpu:
        gpu = self._enter(method, handle)
        assert gpu is not None
        return gpu

    def uuid(self, handle: object) -> str:
        return self._gpu("uuid", handle).uuid

    def name(self, handle: object) -> str:
        return self._gpu("name", handle).name

    def pci_bus_id(self, handle: object) -> str:
        self._gpu("pci_bus_id", handle)
        return "00000000:19:00.0"

    def utilization_percent(self, handle: object) -> tuple[float, float]:
        return self._gpu("utilization_percent", handle).util

    def memory(self, handle: object) -> MemoryInfo:
        return self._gpu("memory", handle).memory

    def power_mw(self, handle: object) -> float:
        return self._gpu("power_mw", handle).power_mw

    def enforced_power_limit_mw(self, handle: object) -> float:
        self._gpu("enforced_power_limit_mw", handle)
        return 700_000.0

    def total_energy_mj(self, handle: object) -> float:
        self._gpu("total_energy_mj", handle)
        return 1.0e9

    def clock_mhz(self, handle: object, clock: ClockType) -> float:
        gpu = self._gpu("clock_mhz", handle)
        return gpu.sm_clock if clock is ClockType.SM else 3201.0

    def max_clock_mhz(self, handle: object, clock: ClockType) -> float:
        self._gpu("max_clock_mhz", handle)
        return 1980.0 if clock is ClockType.SM else 3201.0

    def clock_event_reasons(self, handle: object) -> int:
        return self._gpu("clock_event_reasons", handle).reasons

    def temperature_c(self, handle: object) -> float:
        self._gpu("temperature_c", handle)
        return 40.0

    def pcie_throughput_kb_per_s(self, handle: object, direction: PcieDirection) -> float:
        self._gpu("pcie_throughput_kb_per_s", handle)
        return 1000.0 if direction is PcieDirection.RX else 10.0

    def pcie_link(self, handle: object) -> tuple[int, int, int, int]:
        self._gpu("pcie_link", handle)
        return (5, 16, 5, 16)

    def pcie_replay_counter(self, handle: object) -> int:
        self._gpu("pcie_replay_counter", handle)
        return 0

    def ecc_errors(self, handle: object, counter: EccCounter) -> int:
        self._gpu("ecc_errors", handle)
        return 0

    def mig_mode(self, handle: object) -> tuple[int, int]:
        return self._gpu("mig_mode", handle).mig_mode

    def gpu_instance_profile(self, handle: object, profile_index: int) -> MigProfileInfo:
        gpu = self._gpu("gpu_instance_profile", handle)
        for profile in gpu.mig_profiles:
            if profile.profile_index == profile_index:
                return profile
        raise NvmlCallError(NvmlErrorKind.NOT_SUPPORTED, f"profile {profile_index} not supported")

    def mig_devices(self, handle: object) -> list[MigDevice]:
        return list(self._gpu("mig_devices", handle).mig_devices)

    def gpm_supported(self, handle: object) -> bool:
        return self._gpu("gpm_supported", handle).gpm

    def gpm_sample(self, handle: object, gpu_instance_id: int | None = None) -> object:
        gpu = self._gpu("gpm_sample", handle)
        self.allocated_samples += 1
        return FakeGpmSample(gpu, gpu_instance_id)

    def gpm_free(self, sample: object) -> None:
        self._enter("gpm_free")
        self.freed_samples += 1

    def gpm_metrics(
        self, first: object, second: object, metrics: Sequence[GpmMetric]
    ) -> dict[GpmMetric, float]:
        assert isinstance(first, FakeGpmSample) and isinstance(second, FakeGpmSample)
        assert first is not second
        gpu = self._gpu("gpm_metrics", second.gpu)
        return {m: v for m, v in gpu.gpm_values.items() if m in metrics}

    def compute_processes(self, handle: object) -> list[ProcessMemory]:
        if isinstance(handle, MigHandle):
            self._enter("compute_processes")
            return list(handle.processes)
        return list(self._gpu("compute_processes", handle).processes)

    def process_utilization(self, handle: object, since_us: int) -> list[ProcessUtilization]:
        gpu = self._gpu("process_utilization", handle)
        fresh = [u for u in gpu.process_util if u.timestamp_us > since_us]
        if not fresh:
            raise NvmlCallError(NvmlErrorKind.NOT_FOUND, "no samples")
        return fresh

    def xid_event_set(self, handles: Sequence[object]) -> object:
        self._enter("xid_event_set")
        if not self.xid_supported:
            raise NvmlCallError(NvmlErrorKind.NOT_SUPPORTED, "no events")
        return object()

    def xid_wait(self, event_set: object, timeout_ms: int) -> XidEvent | None:
        self._enter("xid_wait")
        return self.xid_queue.pop(0) if self.xid_queue else None

    def xid_free(self, event_set: object) -> None:
        self._enter("xid_free")


@dataclass
class MigHandle:
    """A fake MIG device handle."""

    processes: list[ProcessMemory] = field(default_factory=list)
