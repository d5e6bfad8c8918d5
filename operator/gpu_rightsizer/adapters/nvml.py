"""A thin, typed layer over NVML (nvidia-ml-py, module `pynvml`).

The agent talks to `NvmlLibrary`, a Protocol with plain Python types, so unit tests can hand it a fake
NVML and the real `PynvmlLibrary` stays a one-call-per-method translation with no logic of its own.
Every NVML failure surfaces as `NvmlCallError` with a `kind` the caller can act on: a field the GPU
does not support is skipped (never faked), a lost GPU or unloaded driver makes the agent re-initialise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, TypeVar, cast

import pynvml


class NvmlErrorKind(StrEnum):
    """What kind of NVML failure happened; decides whether to skip a field or re-initialise."""

    NOT_SUPPORTED = "not_supported"  # the GPU/driver lacks this field: omit it
    NOT_FOUND = "not_found"  # nothing to report (e.g. no process used the GPU since the timestamp)
    GPU_LOST = "gpu_lost"  # fallen off the bus, reset required
    DRIVER = "driver"  # driver not loaded / library missing / uninitialised: re-initialise later
    NO_PERMISSION = "no_permission"
    TIMEOUT = "timeout"
    OTHER = "other"


class NvmlCallError(Exception):
    """An NVML call failed; `kind` says how the caller should react."""

    def __init__(self, kind: NvmlErrorKind, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.code = code


class GpmMetric(StrEnum):
    """GPM metrics the agent reads, with their NVML ids (`nvmlGpmMetricId_t`)."""

    GRAPHICS_UTIL = "graphics_util"
    SM_UTIL = "sm_util"
    SM_OCCUPANCY = "sm_occupancy"
    ANY_TENSOR_UTIL = "any_tensor_util"
    DRAM_BW_UTIL = "dram_bw_util"
    FP64_UTIL = "fp64_util"
    FP32_UTIL = "fp32_util"
    FP16_UTIL = "fp16_util"
    PCIE_TX_MIB_PER_S = "pcie_tx_mib_per_s"
    PCIE_RX_MIB_PER_S = "pcie_rx_mib_per_s"
    NVLINK_RX_MIB_PER_S = "nvlink_rx_mib_per_s"
    NVLINK_TX_MIB_PER_S = "nvlink_tx_mib_per_s"


#: NVML GPM metric ids (nvml.h, `NVML_GPM_METRIC_*`).
GPM_METRIC_IDS: dict[GpmMetric, int] = {
    GpmMetric.GRAPHICS_UTIL: 1,
    GpmMetric.SM_UTIL: 2,
    GpmMetric.SM_OCCUPANCY: 3,
    GpmMetric.ANY_TENSOR_UTIL: 5,
    GpmMetric.DRAM_BW_UTIL: 10,
    GpmMetric.FP64_UTIL: 11,
    GpmMetric.FP32_UTIL: 12,
    GpmMetric.FP16_UTIL: 13,
    GpmMetric.PCIE_TX_MIB_PER_S: 20,
    GpmMetric.PCIE_RX_MIB_PER_S: 21,
    GpmMetric.NVLINK_RX_MIB_PER_S: 60,
    GpmMetric.NVLINK_TX_MIB_PER_S: 61,
}


class ClockType(StrEnum):
    """Clock domains the agent reads."""

    SM = "sm"
    MEMORY = "memory"


class PcieDirection(StrEnum):
    """PCIe direction seen from the GPU: TX is device to host, RX is host to device."""

    TX = "tx"
    RX = "rx"


class EccCounter(StrEnum):
    """Volatile ECC counters (since the last driver load)."""

    CORRECTED_VOLATILE = "corrected_volatile"
    UNCORRECTED_VOLATILE = "uncorrected_volatile"


@dataclass(frozen=True)
class MemoryInfo:
    """Frame-buffer memory in bytes; `reserved` is the driver/firmware share (None on old drivers)."""

    total: int
    used: int
    free: int
    reserved: int | None = None


@dataclass(frozen=True)
class ProcessMemory:
    """One process with a context on a GPU (host PID namespace)."""

    pid: int
    used_bytes: int | None


@dataclass(frozen=True)
class ProcessUtilization:
    """Per-process utilisation sample (percent over NVML's last sample period)."""

    pid: int
    timestamp_us: int
    sm_percent: float
    memory_percent: float


@dataclass(frozen=True)
class MigProfileInfo:
    """One row of the GPU's MIG GPU-instance profile table, as NVML reports it."""

    profile_index: int
    profile_id: int
    name: str
    slice_count: int
    instance_count: int
    multiprocessor_count: int
    memory_mib: int


@dataclass(frozen=True)
class MigDevice:
    """A MIG device (one GPU instance / compute instance) on a parent GPU."""

    handle: object
    uuid: str
    gpu_instance_id: int
    compute_instance_id: int | None
    profile_name: str | None
    memory: MemoryInfo | None


@dataclass(frozen=True)
class XidEvent:
    """An XID error reported through an NVML event set."""

    device_uuid: str | None
    xid: int


class NvmlLibrary(Protocol):
    """The NVML operations the agent needs; `PynvmlLibrary` is the real one, tests pass a fake.

    Handles are opaque objects. Every method raises `NvmlCallError` on failure.
    """

    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def driver_version(self) -> str: ...
    def device_count(self) -> int: ...
    def device_handle(self, index: int) -> object: ...
    def uuid(self, handle: object) -> str: ...
    def name(self, handle: object) -> str: ...
    def pci_bus_id(self, handle: object) -> str: ...
    def utilization_percent(self, handle: object) -> tuple[float, float]: ...
    def memory(self, handle: object) -> MemoryInfo: ...
    def power_mw(self, handle: object) -> float: ...
    def enforced_power_limit_mw(self, handle: object) -> float: ...
    def total_energy_mj(self, handle: object) -> float: ...
    def clock_mhz(self, handle: object, clock: ClockType) -> float: ...
    def max_clock_mhz(self, handle: object, clock: ClockType) -> float: ...
    def clock_event_reasons(self, handle: object) -> int: ...
    def temperature_c(self, handle: object) -> float: ...
    def pcie_throughput_kb_per_s(self, handle: object, direction: PcieDirection) -> float: ...
    def pcie_link(self, handle: object) -> tuple[int, int, int, int]: ...
    def pcie_replay_counter(self, handle: object) -> int: ...
    def ecc_errors(self, handle: object, counter: EccCounter) -> int: ...
    def mig_mode(self, handle: object) -> tuple[int, int]: ...
    def gpu_instance_profile(self, handle: object, profile_index: int) -> MigProfileInfo: ...
    def mig_devices(self, handle: object) -> list[MigDevice]: ...
    def gpm_supported(self, handle: object) -> bool: ...
    def gpm_sample(self, handle: object, gpu_instance_id: int | None = None) -> object: ...
    def gpm_free(self, sample: object) -> None: ...
    def gpm_metrics(
        self, first: object, second: object, metrics: Sequence[GpmMetric]
    ) -> dict[GpmMetric, float]: ...
    def compute_processes(self, handle: object) -> list[ProcessMemory]: ...
    def process_utilization(self, handle: object, since_us: int) -> list[ProcessUtilization]: ...
    def xid_event_set(self, handles: Sequence[object]) -> object: ...
    def xid_wait(self, event_set: object, timeout_ms: int) -> XidEvent | None: ...
    def xid_free(self, event_set: object) -> None: ...


#: Number of MIG GPU-instance profile indices to probe (NVML_GPU_INSTANCE_PROFILE_1_SLICE .. _COUNT).
MIG_PROFILE_INDEX_LIMIT = 16

_T = TypeVar("_T")


class PynvmlLibrary:
    """`NvmlLibrary` over nvidia-ml-py; each method is one NVML call plus error translation."""

    def __init__(self) -> None:
        self._nv: Any = pynvml

    # -- error translation -------------------------------------------------------------------

    def _kind(self, code: int) -> NvmlErrorKind:
        nv = self._nv
        table = {
            nv.NVML_ERROR_NOT_SUPPORTED: NvmlErrorKind.NOT_SUPPORTED,
            nv.NVML_ERROR_NOT_FOUND: NvmlErrorKind.NOT_FOUND,
            nv.NVML_ERROR_GPU_IS_LOST: NvmlErrorKind.GPU_LOST,
            nv.NVML_ERROR_UNINITIALIZED: NvmlErrorKind.DRIVER,
            nv.NVML_ERROR_DRIVER_NOT_LOADED: NvmlErrorKind.DRIVER,
            nv.NVML_ERROR_LIBRARY_NOT_FOUND: NvmlErrorKind.DRIVER,
            nv.NVML_ERROR_FUNCTION_NOT_FOUND: NvmlErrorKind.NOT_SUPPORTED,
            nv.NVML_ERROR_NO_PERMISSION: NvmlErrorKind.NO_PERMISSION,
            nv.NVML_ERROR_TIMEOUT: NvmlErrorKind.TIMEOUT,
            nv.NVML_ERROR_INVALID_ARGUMENT: NvmlErrorKind.NOT_SUPPORTED,
        }
        return table.get(code, NvmlErrorKind.OTHER)

    def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        try:
            return fn(*args)
        except self._nv.NVMLError as exc:
            code = int(getattr(exc, "value", -1))
            raise NvmlCallError(self._kind(code), f"{fn.__name__}: {exc}", code) from exc

    @staticmethod
    def _text(value: object) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    # -- lifecycle and identity --------------------------------------------------------------

    def init(self) -> None:
        self._call(self._nv.nvmlInit)

    def shutdown(self) -> None:
        self._call(self._nv.nvmlShutdown)

    def driver_version(self) -> str:
        return self._text(self._call(self._nv.nvmlSystemGetDriverVersion))

    def device_count(self) -> int:
        return int(self._call(self._nv.nvmlDeviceGetCount))

    def device_handle(self, index: int) -> object:
        return cast(object, self._call(self._nv.nvmlDeviceGetHandleByIndex, index))

    def uuid(self, handle: object) -> str:
        return self._text(self._call(self._nv.nvmlDeviceGetUUID, handle))

    def name(self, handle: object) -> str:
        return self._text(self._call(self._nv.nvmlDeviceGetName, handle))

    def pci_bus_id(self, handle: object) -> str:
        info = self._call(self._nv.nvmlDeviceGetPciInfo, handle)
        return self._text(info.busId)

    # -- device fields -------------------------------------------------------------------------

    def utilization_percent(self, handle: object) -> tuple[float, float]:
        rates = self._call(self._nv.nvmlDeviceGetUtilizationRates, handle)
        return float(rates.gpu), float(rates.memory)

    def memory(self, handle: object) -> MemoryInfo:
        nv = self._nv
        try:
            info = self._call(nv.nvmlDeviceGetMemoryInfo, handle, nv.nvmlMemory_v2)
            return MemoryInfo(int(info.total), int(info.used), int(info.free), int(info.reserved))
        except NvmlCallError as exc:
            if exc.kind is not NvmlErrorKind.NOT_SUPPORTED:
                raise
        info = self._call(nv.nvmlDeviceGetMemoryInfo, handle)
        return MemoryInfo(int(info.total), int(info.used), int(info.free), None)

    def power_mw(self, handle: object) -> float:
        return float(self._call(self._nv.nvmlDeviceGetPowerUsage, handle))

    def enforced_power_limit_mw(self, handle: object) -> float:
        return float(self._call(self._nv.nvmlDeviceGetEnforcedPowerLimit, handle))

    def total_energy_mj(self, handle: object) -> float:
        return float(self._call(self._nv.nvmlDeviceGetTotalEnergyConsumption, handle))

    def _clock_id(self, clock: ClockType) -> int:
        return int(self._nv.NVML_CLOCK_SM if clock is ClockType.SM else self._nv.NVML_CLOCK_MEM)

    def clock_mhz(self, handle: object, clock: ClockType) -> float:
        return float(self._call(self._nv.nvmlDeviceGetClockInfo, handle, self._clock_id(clock)))

    def max_clock_mhz(self, handle: object, clock: ClockType) -> float:
        return float(self._call(self._nv.nvmlDeviceGetMaxClockInfo, handle, self._clock_id(clock)))

    def clock_event_reasons(self, handle: object) -> int:
        return int(self._call(self._nv.nvmlDeviceGetCurrentClocksEventReasons, handle))

    def temperature_c(self, handle: object) -> float:
        return float(self._call(self._nv.nvmlDeviceGetTemperature, handle, self._nv.NVML_TEMPERATURE_GPU))

    def pcie_throughput_kb_per_s(self, handle: object, direction: PcieDirection) -> float:
        nv = self._nv
        counter = nv.NVML_PCIE_UTIL_TX_BYTES if direction is PcieDirection.TX else nv.NVML_PCIE_UTIL_RX_BYTES
        return float(self._call(nv.nvmlDeviceGetPcieThroughput, handle, counter))

    def pcie_link(self, handle: object) -> tuple[int, int, int, int]:
        nv = self._nv
        return (
            int(self._call(nv.nvmlDeviceGetCurrPcieLinkGeneration, handle)),
            int(self._call(nv.nvmlDeviceGetCurrPcieLinkWidth, handle)),
            int(self._call(nv.nvmlDeviceGetMaxPcieLinkGeneration, handle)),
            int(self._call(nv.nvmlDeviceGetMaxPcieLinkWidth, handle)),
        )

    def pcie_replay_counter(self, handle: object) -> int:
        return int(self._call(self._nv.nvmlDeviceGetPcieReplayCounter, handle))

    def ecc_errors(self, handle: object, counter: EccCounter) -> int:
        nv = self._nv
        error_type = (
            nv.NVML_MEMORY_ERROR_TYPE_CORRECTED
            if counter is EccCounter.CORRECTED_VOLATILE
            else nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        )
        return int(self._call(nv.nvmlDeviceGetTotalEccErrors, handle, error_type, nv.NVML_VOLATILE_ECC))

    # -- MIG ----------------------------------------------------------------------------------

    def mig_mode(self, handle: object) -> tuple[int, int]:
        current, pending = self._call(self._nv.nvmlDeviceGetMigMode, handle)
        return int(current), int(pending)

    def gpu_instance_profile(self, handle: object, profile_index: int) -> MigProfileInfo:
        info = self._call(self._nv.nvmlDeviceGetGpuInstanceProfileInfo, handle, profile_index)
        name = self._text(getattr(info, "name", b"")) or f"profile-{int(info.id)}"
        return MigProfileInfo(
            profile_index=profile_index,
            profile_id=int(info.id),
            name=name.removeprefix("MIG "),
            slice_count=int(info.sliceCount),
            instance_count=int(info.instanceCount),
            multiprocessor_count=int(info.multiprocessorCount),
            memory_mib=int(info.memorySizeMB),
        )

    def mig_devices(self, handle: object) -> list[MigDevice]:
        nv = self._nv
        devices: list[MigDevice] = []
        for index in range(int(self._call(nv.nvmlDeviceGetMaxMigDeviceCount, handle))):
            try:
                mig = self._call(nv.nvmlDeviceGetMigDeviceHandleByIndex, handle, index)
            except NvmlCallError as exc:
                if exc.kind in (NvmlErrorKind.NOT_FOUND, NvmlErrorKind.NOT_SUPPORTED):
                    continue  # empty slot
                raise
            gi_id = int(self._call(nv.nvmlDeviceGetGpuInstanceId, mig))
            ci_id: int | None
            try:
                ci_id = int(self._call(nv.nvmlDeviceGetComputeInstanceId, mig))
            except NvmlCallError:
                ci_id = None
            memory: MemoryInfo | None
            try:
                memory = self.memory(mig)
            except NvmlCallError:
                memory = None
            devices.append(
                MigDevice(
                    handle=mig,
                    uuid=self.uuid(mig),
                    gpu_instance_id=gi_id,
                    compute_instance_id=ci_id,
                    profile_name=self._mig_profile_name(handle, gi_id),
                    memory=memory,
                )
            )
        return devices

    def _mig_profile_name(self, parent: object, gpu_instance_id: int) -> str | None:
        """Profile name of a GPU instance ('1g.18gb'), looked up through the GPU's profile table."""
        nv = self._nv
        try:
            instance = self._call(nv.nvmlDeviceGetGpuInstanceById, parent, gpu_instance_id)
            profile_id = int(self._call(nv.nvmlGpuInstanceGetInfo, instance).profileId)
        except NvmlCallError:
            return None
        for profile_index in range(MIG_PROFILE_INDEX_LIMIT):
            try:
                profile = self.gpu_instance_profile(parent, profile_index)
            except NvmlCallError:
                continue
            if profile.profile_id == profile_id:
                return profile.name
        return None

    # -- GPM (Hopper and newer) ---------------------------------------------------------------

    def gpm_supported(self, handle: object) -> bool:
        support = self._call(self._nv.nvmlGpmQueryDeviceSupport, handle)
        return bool(support.isSupportedDevice)

    def gpm_sample(self, handle: object, gpu_instance_id: int | None = None) -> object:
        nv = self._nv
        sample = self._call(nv.nvmlGpmSampleAlloc)
        try:
            if gpu_instance_id is None:
                self._call(nv.nvmlGpmSampleGet, handle, sample)
            else:
                self._call(nv.nvmlGpmMigSampleGet, handle, gpu_instance_id, sample)
        except NvmlCallError:
            self._call(nv.nvmlGpmSampleFree, sample)
            raise
        return cast(object, sample)

    def gpm_free(self, sample: object) -> None:
        self._call(self._nv.nvmlGpmSampleFree, sample)

    def gpm_metrics(
        self, first: object, second: object, metrics: Sequence[GpmMetric]
    ) -> dict[GpmMetric, float]:
        nv = self._nv
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(metrics)
        request.sample1 = first
        request.sample2 = second
        for slot, metric in enumerate(metrics):
            request.metrics[slot].metricId = GPM_METRIC_IDS[metric]
        self._call(nv.nvmlGpmMetricsGet, request)
        values: dict[GpmMetric, float] = {}
        for slot, metric in enumerate(metrics):
            entry = request.metrics[slot]
            if int(entry.nvmlReturn) == nv.NVML_SUCCESS:
                values[metric] = float(entry.value)
        return values

    # -- processes ----------------------------------------------------------------------------

    def compute_processes(self, handle: object) -> list[ProcessMemory]:
        processes = self._call(self._nv.nvmlDeviceGetComputeRunningProcesses, handle)
        result: list[ProcessMemory] = []
        for process in processes:
            used = getattr(process, "usedGpuMemory", None)
            result.append(ProcessMemory(pid=int(process.pid), used_bytes=None if used is None else int(used)))
        return result

    def process_utilization(self, handle: object, since_us: int) -> list[ProcessUtilization]:
        samples = self._call(self._nv.nvmlDeviceGetProcessUtilization, handle, since_us)
        return [
            ProcessUtilization(
                pid=int(s.pid),
                timestamp_us=int(s.timeStamp),
                sm_percent=float(s.smUtil),
                memory_percent=float(s.memUtil),
            )
            for s in samples
        ]

    # -- XID events ---------------------------------------------------------------------------

    def xid_event_set(self, handles: Sequence[object]) -> object:
        nv = self._nv
        event_set = self._call(nv.nvmlEventSetCreate)
        registered = 0
        for handle in handles:
            try:
                self._call(nv.nvmlDeviceRegisterEvents, handle, nv.nvmlEventTypeXidCriticalError, event_set)
                registered += 1
            except NvmlCallError as exc:
                if exc.kind is not NvmlErrorKind.NOT_SUPPORTED:
                    raise
        if registered == 0:
            self._call(nv.nvmlEventSetFree, event_set)
            raise NvmlCallError(NvmlErrorKind.NOT_SUPPORTED, "XID events are not supported on any GPU")
        return cast(object, event_set)

    def xid_wait(self, event_set: object, timeout_ms: int) -> XidEvent | None:
        try:
            data = self._call(self._nv.nvmlEventSetWait, event_set, timeout_ms)
        except NvmlCallError as exc:
            if exc.kind is NvmlErrorKind.TIMEOUT:
                return None
            raise
        uuid: str | None
        try:
            uuid = self.uuid(data.device)
        except NvmlCallError:
            uuid = None
        return XidEvent(device_uuid=uuid, xid=int(data.eventData))

    def xid_free(self, event_set: object) -> None:
        self._call(self._nv.nvmlEventSetFree, event_set)
