"""Read every GPU on the node through NVML into plain snapshots, one per sampling tick.

Why a separate sampler: NVML calls are slow-ish and some need state between ticks (GPM metrics are the
difference of two samples, per-process utilisation needs the last timestamp), so sampling happens on
the agent's own clock and a Prometheus scrape only reads the latest snapshot.

Failure policy (bounded cost, nothing faked):
- a field that answers NOT_SUPPORTED is remembered per GPU and never asked again;
- any other failure is counted (`errors` by kind), logged once per (field, kind), and the field is
  omitted from that snapshot;
- GPU_LOST or a driver failure marks NVML down; the sampler shuts NVML down and re-initialises on a
  later tick (with back-off), so a driver reload heals without restarting the pod.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from typing import TypeVar

from gpu_rightsizer.adapters.nvml import (
    MIG_PROFILE_INDEX_LIMIT,
    ClockType,
    EccCounter,
    GpmMetric,
    MigProfileInfo,
    NvmlCallError,
    NvmlErrorKind,
    NvmlLibrary,
    PcieDirection,
)

log = logging.getLogger(__name__)

MIB = 1024 * 1024

#: GPM needs its two samples at least this far apart (NVML documentation).
GPM_MIN_SPACING_SECONDS = 0.1


class DeviceField(StrEnum):
    """What the sampler measures per GPU or MIG instance; units in the names."""

    GPU_UTIL_PERCENT = "gpu_util_percent"
    MEM_COPY_UTIL_PERCENT = "mem_copy_util_percent"
    FB_USED_MIB = "fb_used_mib"
    FB_FREE_MIB = "fb_free_mib"
    FB_RESERVED_MIB = "fb_reserved_mib"
    FB_TOTAL_MIB = "fb_total_mib"
    POWER_WATTS = "power_watts"
    POWER_LIMIT_WATTS = "power_limit_watts"
    ENERGY_MJ = "energy_mj"
    SM_CLOCK_MHZ = "sm_clock_mhz"
    MEM_CLOCK_MHZ = "mem_clock_mhz"
    MAX_SM_CLOCK_MHZ = "max_sm_clock_mhz"
    CLOCK_EVENT_REASONS = "clock_event_reasons"
    GPU_TEMP_C = "gpu_temp_c"
    PCIE_LINK_GEN = "pcie_link_gen"
    PCIE_LINK_WIDTH = "pcie_link_width"
    PCIE_MAX_LINK_GEN = "pcie_max_link_gen"
    PCIE_MAX_LINK_WIDTH = "pcie_max_link_width"
    PCIE_REPLAY_COUNTER = "pcie_replay_counter"
    ECC_SBE_VOLATILE = "ecc_sbe_volatile"
    ECC_DBE_VOLATILE = "ecc_dbe_volatile"
    XID_LAST = "xid_last"
    # GPM (ratios 0..1, bytes/s)
    GR_ENGINE_ACTIVE = "gr_engine_active"
    SM_ACTIVE = "sm_active"
    SM_OCCUPANCY = "sm_occupancy"
    TENSOR_ACTIVE = "tensor_active"
    DRAM_ACTIVE = "dram_active"
    FP64_ACTIVE = "fp64_active"
    FP32_ACTIVE = "fp32_active"
    FP16_ACTIVE = "fp16_active"
    PCIE_TX_BYTES_PER_S = "pcie_tx_bytes_per_s"
    PCIE_RX_BYTES_PER_S = "pcie_rx_bytes_per_s"
    NVLINK_TX_BYTES_PER_S = "nvlink_tx_bytes_per_s"
    NVLINK_RX_BYTES_PER_S = "nvlink_rx_bytes_per_s"


#: GPM metric → (field, scale to the exported unit): percentages become ratios, MiB/s bytes/s.
GPM_FIELDS: dict[GpmMetric, tuple[DeviceField, float]] = {
    GpmMetric.GRAPHICS_UTIL: (DeviceField.GR_ENGINE_ACTIVE, 0.01),
    GpmMetric.SM_UTIL: (DeviceField.SM_ACTIVE, 0.01),
    GpmMetric.SM_OCCUPANCY: (DeviceField.SM_OCCUPANCY, 0.01),
    GpmMetric.ANY_TENSOR_UTIL: (DeviceField.TENSOR_ACTIVE, 0.01),
    GpmMetric.DRAM_BW_UTIL: (DeviceField.DRAM_ACTIVE, 0.01),
    GpmMetric.FP64_UTIL: (DeviceField.FP64_ACTIVE, 0.01),
    GpmMetric.FP32_UTIL: (DeviceField.FP32_ACTIVE, 0.01),
    GpmMetric.FP16_UTIL: (DeviceField.FP16_ACTIVE, 0.01),
    GpmMetric.PCIE_TX_MIB_PER_S: (DeviceField.PCIE_TX_BYTES_PER_S, float(MIB)),
    GpmMetric.PCIE_RX_MIB_PER_S: (DeviceField.PCIE_RX_BYTES_PER_S, float(MIB)),
    GpmMetric.NVLINK_TX_MIB_PER_S: (DeviceField.NVLINK_TX_BYTES_PER_S, float(MIB)),
    GpmMetric.NVLINK_RX_MIB_PER_S: (DeviceField.NVLINK_RX_BYTES_PER_S, float(MIB)),
}

#: Per MIG instance, GPM answers per GPU instance; PCIe and NVLink are board-level, so not per slice.
MIG_GPM_METRICS: tuple[GpmMetric, ...] = tuple(
    m
    for m in GPM_FIELDS
    if m
    not in (
        GpmMetric.PCIE_TX_MIB_PER_S,
        GpmMetric.PCIE_RX_MIB_PER_S,
        GpmMetric.NVLINK_TX_MIB_PER_S,
        GpmMetric.NVLINK_RX_MIB_PER_S,
    )
)


@dataclass(frozen=True)
class ProcessSample:
    """One process on a GPU (or MIG instance) at one tick."""

    pid: int
    used_memory_mib: float | None
    sm_util_percent: float | None


@dataclass
class DeviceSnapshot:
    """One GPU, or one MIG instance of it (then `gpu_instance_id` and `mig_profile` are set)."""

    index: int
    uuid: str
    model_name: str
    pci_bus_id: str | None = None
    gpu_instance_id: int | None = None
    mig_profile: str | None = None
    mig_uuid: str | None = None
    values: dict[DeviceField, float] = field(default_factory=dict)
    processes: list[ProcessSample] = field(default_factory=list)


@dataclass
class NodeSnapshot:
    """Everything read at one tick."""

    timestamp: float
    devices: list[DeviceSnapshot] = field(default_factory=list)
    nvml_up: bool = True
    driver_version: str | None = None


@dataclass
class _Gpu:
    """What the sampler keeps about one physical GPU between ticks."""

    index: int
    handle: object
    uuid: str
    name: str
    pci_bus_id: str | None
    unsupported: set[str] = field(default_factory=set)
    gpm: bool = False
    last_gpm: dict[int | None, tuple[float, object]] = field(default_factory=dict)
    last_process_ts_us: int = 0
    mig_enabled: bool = False
    mig_profiles: list[MigProfileInfo] = field(default_factory=list)
    last_xid: int | None = None


_T = TypeVar("_T")


class NvmlSampler:
    """Samples all GPUs through an `NvmlLibrary`; call `sample()` once per interval."""

    def __init__(
        self,
        nvml: NvmlLibrary,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        reinit_backoff_seconds: float = 10.0,
    ) -> None:
        self._nvml = nvml
        self._clock = clock
        self._monotonic = monotonic
        self._reinit_backoff = reinit_backoff_seconds
        self._gpus: list[_Gpu] = []
        self._initialised = False
        self._next_init_at = 0.0
        self._driver_version: str | None = None
        self._xid_set: object | None = None
        self._logged: set[tuple[str, str]] = set()
        #: NVML failures by kind since start (exported as a counter).
        self.errors: Counter[str] = Counter()

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def up(self) -> bool:
        """True while NVML is initialised and answering."""
        return self._initialised

    @property
    def mig_profiles(self) -> dict[str, list[MigProfileInfo]]:
        """The MIG profile table NVML reported, per GPU UUID (empty where NOT_SUPPORTED)."""
        return {gpu.uuid: list(gpu.mig_profiles) for gpu in self._gpus}

    def _note_error(self, what: str, exc: NvmlCallError) -> None:
        self.errors[exc.kind.value] += 1
        key = (what, exc.kind.value)
        if key not in self._logged:
            self._logged.add(key)
            log.warning("NVML %s failed (%s): %s; omitting it", what, exc.kind.value, exc)
        if exc.kind in (NvmlErrorKind.GPU_LOST, NvmlErrorKind.DRIVER):
            self._mark_down(f"{what}: {exc}")

    def _mark_down(self, reason: str) -> None:
        if not self._initialised:
            return
        log.error("NVML is down (%s); re-initialising in %.0f s", reason, self._reinit_backoff)
        self._release()
        self._next_init_at = self._monotonic() + self._reinit_backoff

    def _release(self) -> None:
        for gpu in self._gpus:
            for _, sample in gpu.last_gpm.values():
                self._quiet(partial(self._nvml.gpm_free, sample))
        if self._xid_set is not None:
            xid_set = self._xid_set
            self._quiet(lambda: self._nvml.xid_free(xid_set))
            self._xid_set = None
        self._gpus = []
        if self._initialised:
            self._quiet(self._nvml.shutdown)
        self._initialised = False

    @staticmethod
    def _quiet(action: Callable[[], object]) -> None:
        try:
            action()
        except NvmlCallError as exc:
            log.debug("ignored NVML failure during clean-up: %s", exc)

    def _ensure_initialised(self) -> bool:
        if self._initialised:
            return True
        if self._monotonic() < self._next_init_at:
            return False
        try:
            self._nvml.init()
            self._initialised = True
            self._driver_version = self._optional(None, "driver_version", self._nvml.driver_version)
            gpus: list[_Gpu] = []
            for index in range(self._nvml.device_count()):
                handle = self._nvml.device_handle(index)
                gpu = _Gpu(
                    index=index,
                    handle=handle,
                    uuid=self._nvml.uuid(handle),
                    name=self._nvml.name(handle),
                    pci_bus_id=None,
                )
                gpu.pci_bus_id = self._optional(gpu, "pci_bus_id", partial(self._nvml.pci_bus_id, handle))
                gpu.gpm = bool(self._optional(gpu, "gpm_support", partial(self._nvml.gpm_supported, handle)))
                gpu.mig_profiles = self._read_mig_profiles(gpu)
                gpus.append(gpu)
            self._gpus = gpus
        except NvmlCallError as exc:
            self.errors[exc.kind.value] += 1
            log.error(
                "NVML initialisation failed (%s): %s; retrying in %.0f s",
                exc.kind.value,
                exc,
                self._reinit_backoff,
            )
            self._release()
            self._next_init_at = self._monotonic() + self._reinit_backoff
            return False
        self._open_xid_events()
        log.info(
            "NVML up: driver %s, %d GPU(s): %s",
            self._driver_version,
            len(self._gpus),
            ", ".join(f"{g.index}:{g.name} gpm={g.gpm}" for g in self._gpus),
        )
        return True

    def _read_mig_profiles(self, gpu: _Gpu) -> list[MigProfileInfo]:
        """The GPU's MIG profile table; NOT_SUPPORTED rows are skipped, not invented."""
        profiles: list[MigProfileInfo] = []
        for profile_index in range(MIG_PROFILE_INDEX_LIMIT):
            try:
                profiles.append(self._nvml.gpu_instance_profile(gpu.handle, profile_index))
            except NvmlCallError as exc:
                if exc.kind not in (NvmlErrorKind.NOT_SUPPORTED, NvmlErrorKind.NOT_FOUND):
                    self._note_error("mig_profile_table", exc)
                    break
        return profiles

    def _open_xid_events(self) -> None:
        try:
            self._xid_set = self._nvml.xid_event_set([g.handle for g in self._gpus])
        except NvmlCallError as exc:
            if exc.kind is not NvmlErrorKind.NOT_SUPPORTED:
                self._note_error("xid_event_set", exc)
            self._xid_set = None

    def close(self) -> None:
        """Free GPM samples and the event set, shut NVML down."""
        self._release()

    # -- reading helpers ----------------------------------------------------------------------

    def _optional(self, gpu: _Gpu | None, what: str, read: Callable[[], _T]) -> _T | None:
        """One NVML read; None (and remembered) when unsupported, None (and counted) on failure."""
        if gpu is not None and what in gpu.unsupported:
            return None
        try:
            return read()
        except NvmlCallError as exc:
            if exc.kind is NvmlErrorKind.NOT_SUPPORTED:
                if gpu is not None:
                    gpu.unsupported.add(what)
                return None
            if exc.kind is NvmlErrorKind.NOT_FOUND:
                return None
            self._note_error(what, exc)
            return None

    # -- one tick ------------------------------------------------------------------------------

    def sample(self) -> NodeSnapshot:
        """Read every GPU once. Never raises for NVML failures: they are counted and logged."""
        now = self._clock()
        if not self._ensure_initialised():
            return NodeSnapshot(timestamp=now, nvml_up=False)
        self._drain_xid_events()
        devices: list[DeviceSnapshot] = []
        for gpu in list(self._gpus):
            devices.extend(self._sample_gpu(gpu))
            if not self._initialised:
                return NodeSnapshot(timestamp=now, nvml_up=False)
        return NodeSnapshot(
            timestamp=now, devices=devices, nvml_up=self._initialised, driver_version=self._driver_version
        )

    def _drain_xid_events(self) -> None:
        if self._xid_set is None:
            return
        by_uuid = {g.uuid: g for g in self._gpus}
        for _ in range(64):  # bounded: a storm of XIDs must not stall sampling
            try:
                event = self._nvml.xid_wait(self._xid_set, 0)
            except NvmlCallError as exc:
                self._note_error("xid_wait", exc)
                return
            if event is None:
                return
            log.warning("XID %d on GPU %s", event.xid, event.device_uuid)
            gpu = by_uuid.get(event.device_uuid or "")
            if gpu is not None:
                gpu.last_xid = event.xid
            else:
                for each in self._gpus:
                    each.last_xid = event.xid

    def _sample_gpu(self, gpu: _Gpu) -> list[DeviceSnapshot]:
        nv = self._nvml
        h = gpu.handle
        snap = DeviceSnapshot(index=gpu.index, uuid=gpu.uuid, model_name=gpu.name, pci_bus_id=gpu.pci_bus_id)
        values = snap.values

        def put(target: DeviceField, value: float | None) -> None:
            if value is not None:
                values[target] = float(value)

        mig = self._optional(gpu, "mig_mode", lambda: nv.mig_mode(h))
        gpu.mig_enabled = bool(mig and mig[0] == 1)

        util = (
            None if gpu.mig_enabled else self._optional(gpu, "utilization", lambda: nv.utilization_percent(h))
        )
        if util is not None:
            put(DeviceField.GPU_UTIL_PERCENT, util[0])
            put(DeviceField.MEM_COPY_UTIL_PERCENT, util[1])
        memory = self._optional(gpu, "memory", lambda: nv.memory(h))
        if memory is not None:
            put(DeviceField.FB_USED_MIB, memory.used / MIB)
            put(DeviceField.FB_FREE_MIB, memory.free / MIB)
            put(DeviceField.FB_TOTAL_MIB, memory.total / MIB)
            if memory.reserved is not None:
                put(DeviceField.FB_RESERVED_MIB, memory.reserved / MIB)
        power = self._optional(gpu, "power", lambda: nv.power_mw(h))
        put(DeviceField.POWER_WATTS, None if power is None else power / 1000.0)
        limit = self._optional(gpu, "power_limit", lambda: nv.enforced_power_limit_mw(h))
        put(DeviceField.POWER_LIMIT_WATTS, None if limit is None else limit / 1000.0)
        put(DeviceField.ENERGY_MJ, self._optional(gpu, "energy", lambda: nv.total_energy_mj(h)))
        put(DeviceField.SM_CLOCK_MHZ, self._optional(gpu, "sm_clock", lambda: nv.clock_mhz(h, ClockType.SM)))
        put(
            DeviceField.MEM_CLOCK_MHZ,
            self._optional(gpu, "mem_clock", lambda: nv.clock_mhz(h, ClockType.MEMORY)),
        )
        put(
            DeviceField.MAX_SM_CLOCK_MHZ,
            self._optional(gpu, "max_sm_clock", lambda: nv.max_clock_mhz(h, ClockType.SM)),
        )
        reasons = self._optional(gpu, "clock_event_reasons", lambda: nv.clock_event_reasons(h))
        put(DeviceField.CLOCK_EVENT_REASONS, None if reasons is None else float(reasons))
        put(DeviceField.GPU_TEMP_C, self._optional(gpu, "temperature", lambda: nv.temperature_c(h)))
        link = self._optional(gpu, "pcie_link", lambda: nv.pcie_link(h))
        if link is not None:
            put(DeviceField.PCIE_LINK_GEN, link[0])
            put(DeviceField.PCIE_LINK_WIDTH, link[1])
            put(DeviceField.PCIE_MAX_LINK_GEN, link[2])
            put(DeviceField.PCIE_MAX_LINK_WIDTH, link[3])
        put(
            DeviceField.PCIE_REPLAY_COUNTER,
            self._optional(gpu, "pcie_replay", lambda: nv.pcie_replay_counter(h)),
        )
        put(
            DeviceField.ECC_SBE_VOLATILE,
            self._optional(gpu, "ecc_sbe", lambda: nv.ecc_errors(h, EccCounter.CORRECTED_VOLATILE)),
        )
        put(
            DeviceField.ECC_DBE_VOLATILE,
            self._optional(gpu, "ecc_dbe", lambda: nv.ecc_errors(h, EccCounter.UNCORRECTED_VOLATILE)),
        )
        if self._xid_set is not None:
            values[DeviceField.XID_LAST] = float(gpu.last_xid or 0)

        if gpu.gpm:
            self._gpm(gpu, None, values, tuple(GPM_FIELDS))
        else:
            # Pre-Hopper: NVML's 20 ms PCIe counter is the only PCIe throughput (noisier than GPM).
            tx = self._optional(gpu, "pcie_tx", lambda: nv.pcie_throughput_kb_per_s(h, PcieDirection.TX))
            rx = self._optional(gpu, "pcie_rx", lambda: nv.pcie_throughput_kb_per_s(h, PcieDirection.RX))
            put(DeviceField.PCIE_TX_BYTES_PER_S, None if tx is None else tx * 1024.0)
            put(DeviceField.PCIE_RX_BYTES_PER_S, None if rx is None else rx * 1024.0)

        if not gpu.mig_enabled:
            snap.processes = self._processes(gpu, h, with_utilization=True)
            return [snap]

        result = [snap]
        for mig_device in self._optional(gpu, "mig_devices", lambda: nv.mig_devices(h)) or []:
            instance = DeviceSnapshot(
                index=gpu.index,
                uuid=gpu.uuid,
                model_name=gpu.name,
                pci_bus_id=gpu.pci_bus_id,
                gpu_instance_id=mig_device.gpu_instance_id,
                mig_profile=mig_device.profile_name,
                mig_uuid=mig_device.uuid,
            )
            if mig_device.memory is not None:
                instance.values[DeviceField.FB_USED_MIB] = mig_device.memory.used / MIB
                instance.values[DeviceField.FB_FREE_MIB] = mig_device.memory.free / MIB
                instance.values[DeviceField.FB_TOTAL_MIB] = mig_device.memory.total / MIB
            if gpu.gpm:
                self._gpm(gpu, mig_device.gpu_instance_id, instance.values, MIG_GPM_METRICS)
            # NVML has no per-process utilisation on MIG; memory per process only.
            instance.processes = self._processes(gpu, mig_device.handle, with_utilization=False)
            result.append(instance)
        return result

    def _gpm(
        self,
        gpu: _Gpu,
        gpu_instance_id: int | None,
        values: dict[DeviceField, float],
        metrics: tuple[GpmMetric, ...],
    ) -> None:
        """GPM metrics as the difference between the previous tick's sample and this one."""
        what = "gpm" if gpu_instance_id is None else "gpm_mig"
        if what in gpu.unsupported:
            return
        sample = self._optional(gpu, what, lambda: self._nvml.gpm_sample(gpu.handle, gpu_instance_id))
        if sample is None:
            return
        taken_at = self._monotonic()
        previous = gpu.last_gpm.get(gpu_instance_id)
        if previous is not None and taken_at - previous[0] < GPM_MIN_SPACING_SECONDS:
            self._quiet(lambda: self._nvml.gpm_free(sample))
            return  # too close to the last one: keep the older sample as the base
        gpu.last_gpm[gpu_instance_id] = (taken_at, sample)
        if previous is None:
            return  # first sample: no interval yet, so nothing to report (never a made-up value)
        try:
            read = self._optional(
                gpu, what + "_metrics", lambda: self._nvml.gpm_metrics(previous[1], sample, metrics)
            )
        finally:
            self._quiet(lambda: self._nvml.gpm_free(previous[1]))
        for metric, raw in (read or {}).items():
            target, scale = GPM_FIELDS[metric]
            if math.isfinite(raw) and raw >= 0.0:  # NaN and negative (counter reset) are dropped
                values[target] = raw * scale

    def _processes(self, gpu: _Gpu, handle: object, with_utilization: bool) -> list[ProcessSample]:
        procs = self._optional(gpu, "compute_processes", lambda: self._nvml.compute_processes(handle)) or []
        sm_by_pid: dict[int, float] = {}
        utilization_known = False
        if with_utilization and "process_utilization" not in gpu.unsupported:
            since = gpu.last_process_ts_us
            try:
                utils = self._nvml.process_utilization(handle, since)
                utilization_known = True
            except NvmlCallError as exc:
                utils = []
                if exc.kind is NvmlErrorKind.NOT_FOUND:
                    utilization_known = True  # no process used the GPU since `since`: a measured zero
                elif exc.kind is NvmlErrorKind.NOT_SUPPORTED:
                    gpu.unsupported.add("process_utilization")
                else:
                    self._note_error("process_utilization", exc)
            for util in utils:
                sm_by_pid[util.pid] = max(sm_by_pid.get(util.pid, 0.0), util.sm_percent)
                gpu.last_process_ts_us = max(gpu.last_process_ts_us, util.timestamp_us)
        result: list[ProcessSample] = []
        for proc in procs:
            used = None if proc.used_bytes is None else proc.used_bytes / MIB
            sm = sm_by_pid.get(proc.pid, 0.0) if utilization_known else None
            result.append(ProcessSample(pid=proc.pid, used_memory_mib=used, sm_util_percent=sm))
        return result
