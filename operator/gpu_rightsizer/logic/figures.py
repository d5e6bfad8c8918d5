"""Shared window figures: one workload window reduced to the order-independent aggregates every rule reads.

Busy = DCGM_FI_PROF_GR_ENGINE_ACTIVE, else DCGM_FI_DEV_GPU_UTIL (never under MIG, where NVML does not
report it). Device series of a GPU shared by several pods appear once per pod; they are deduplicated by
GPU UUID and never summed. Every aggregate is order-independent (sorted inputs, `math.fsum`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpu_rightsizer.logic.mig import (
    GIB_PER_MIB,
    NVLINK_FALLBACK_PER_DIRECTION,
    GPUModelSpec,
    MigProfile,
    MigTables,
    find_profile,
    nvlink_per_direction_bytes,
    profiles_for,
    spec_for_product,
)
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.logic.width import PhaseShape
from gpu_rightsizer.model.observation import GPUObservation, Signal, SignalStats, WorkloadWindow

_PCIE_FALLBACK_BYTES_PER_S = (
    16 * 1.97e9
)  # PCIe Gen4 x16, one direction (PCIe doubling rule over DCGM's Gen3 985 MB/s/lane)


_SERVING_TYPES = frozenset({"inference", "serving"})


def fleet_replicas_needed(figures: WorkloadFigures, target: float) -> int | None:
    """Replicas that carry the fleet's load at `target` saturation, or None without a busy figure.

    The fleet's load is the replicas' busy p95 averaged over replicas, times the replica count: an
    upper-bound proxy of the p95 of the fleet's summed busy (the engine holds per-GPU statistics, not
    series), so a consolidated fleet is sized for each replica's own peak, not for its median.
    """
    if figures.busy_p95 is None or figures.replicas < 1:
        return None
    gpus_per_replica = max(1, figures.gpus_per_pod)
    load = figures.busy_p95 * max(figures.total_gpus, figures.replicas * gpus_per_replica)
    return max(1, math.ceil(load / (target * gpus_per_replica) - 1e-9))


def fmean(values: Iterable[float]) -> float | None:
    """Exact mean (math.fsum), None for no values."""
    items = list(values)
    return math.fsum(items) / len(items) if items else None


def max_of(values: Iterable[float]) -> float | None:
    """Largest value, None for no values."""
    items = list(values)
    return max(items) if items else None


@dataclass(frozen=True, slots=True)
class GPUFigures:
    """One distinct GPU (or MIG slice) of the workload."""

    uuid: str
    observation: GPUObservation
    busy: SignalStats | None
    busy_source: str | None  # "gr_engine_active" | "gpu_util" | None
    is_mig: bool
    shared: bool
    spec: GPUModelSpec | None
    profile: MigProfile | None  # the slice's profile when MIG
    capacity_gib: float | None
    sms: int | None  # SMs of the device as allocated (slice SMs under MIG)

    def stat(self, signal: Signal) -> SignalStats | None:
        """Statistics of one signal on this GPU, if present."""
        return self.observation.stats.get(signal)


@dataclass(frozen=True, slots=True)
class WorkloadFigures:
    """Order-independent aggregates of a window that every rule reads."""

    window: WorkloadWindow
    gpus: tuple[GPUFigures, ...]
    gpus_per_pod: int
    total_gpus: int
    replicas: int
    is_mig: bool
    is_shared: bool
    spec: GPUModelSpec | None
    profiles: tuple[MigProfile, ...]
    busy_source: str | None
    busy_p50: float | None
    busy_p95: float | None
    busy_p95_max: float | None
    busy_max: float | None
    busy_active_fraction: float | None
    busy_samples: int
    busy_sawtooth: float | None
    sm_p50: float | None
    sm_p95: float | None
    sm_p99_max: float | None  # the busiest GPU's SM p99: "no kernels" means this is at the noise floor
    gr_p99_max: float | None
    sm_max: float | None  # the highest SM activity of any GPU in any sample
    gr_max: float | None
    math_p50: float | None  # tensor + FP16 + FP32 pipe p50 (busiest GPU): idle math while links work
    fp16_p50: float | None
    occupancy_p50: float | None
    tensor_p50: float | None
    tensor_p95: float | None
    fp32_p50: float | None
    dram_p95: float | None
    fb_used_p99_gib: float | None
    fb_used_max_gib: float | None
    capacity_gib: float | None
    memory_share_p99: float | None
    pcie_utilisation: float | None
    pcie_bytes_p50: float | None  # busier direction's median, busiest GPU
    pcie_utilisation_p50: float | None  # the same as a share of the link (one direction)
    pcie_link_known: bool  # every GPU's model (hence link capacity) is known; else a Gen4 x16 fallback
    transfer_bytes_p95: float | None  # largest PCIe/NVLink direction p95 of any GPU
    nvlink_utilisation: float | None  # max(rx p50, tx p50) / per-direction nominal, busiest GPU
    nvlink_bytes_p95: float | None
    pcie_symmetric: bool  # rx and tx medians within 2× of each other (collective traffic, not a copy)
    nvlink_nominal_known: bool
    cpu_usage_p95: float | None
    cpu_usage_p50: float | None  # of the pod with the highest p95
    process_cpu_max_p50: float | None  # the busiest process's cores (node agent), busiest pod, median
    cpu_reference_cores: float | None
    cpu_reference_is_limit: bool
    cpu_saturation: float | None
    cpu_throttled: float | None
    memory_ws_p99_bytes: float | None
    io_bytes_p50: float | None
    gpu_cpu_correlation: float | None
    restarts: int
    oom_killed: bool
    requests_per_s: float | None
    queue_length_p50: float | None
    queue_length_p95: float | None
    queue_active_fraction: float | None
    is_serving: bool
    coverage: float | None
    pods: int
    # --- evidence for the shrink gate (logic/vetoes.py) and the width model (logic/width.py) ----------
    phase_shape: PhaseShape | None  # the busiest GPU's duty, width while busy and DRAM share
    fs_read_p50: float | None  # the busiest pod's file-system read median (bytes/s)
    net_rx_p50: float | None  # the busiest pod's network receive median (bytes/s)
    net_rx_max: float | None  # the highest network receive of any pod in any sample (bytes/s)
    requests_max: float | None  # the workload's highest request rate in any sample
    memory_ws_max_bytes: float | None
    cpu_pressure_p50: float | None  # PSI: share of wall time some task stalled on CPU
    io_pressure_p50: float | None  # PSI: share of wall time some task stalled on I/O
    no_kernel_gpus: tuple[str, ...]  # GPUs of multi-GPU pods with SM activity exactly 0 next to busy ones

    @property
    def phase_width_ratio(self) -> float | None:
        """The share of SMs busy while the GPU is busy (SM / GR), or None without both series."""
        return self.phase_shape.width_fraction if self.phase_shape is not None else None

    @property
    def profiling_fields(self) -> bool:
        """True when DCGM profiling fields (SM_ACTIVE) are present, not only busy."""
        return self.sm_p50 is not None


def _allocation_is_mig(window: WorkloadWindow) -> bool:
    allocation = window.allocation
    return (
        allocation.mig_profile is not None
        or allocation.gpu_resource.startswith("nvidia.com/mig-")
        or allocation.sharing == "mig"
    )


def _gpu_figures(window: WorkloadWindow, mig_tables: MigTables | None) -> tuple[GPUFigures, ...]:
    allocation = window.allocation
    allocation_mig = _allocation_is_mig(window)
    allocation_shared = allocation.sharing in {"time-slicing", "mps"} or allocation.gpu_resource.endswith(
        ".shared"
    )
    by_uuid: dict[str, GPUObservation] = {}
    for pod in sorted(window.pods, key=lambda p: p.name):
        for gpu in sorted(pod.gpus, key=lambda g: g.uuid):
            by_uuid.setdefault(gpu.uuid, gpu)
    pods_per_uuid: dict[str, int] = {}
    for pod in window.pods:
        for uuid in {gpu.uuid for gpu in pod.gpus}:
            pods_per_uuid[uuid] = pods_per_uuid.get(uuid, 0) + 1
    result = []
    for uuid in sorted(by_uuid):
        gpu = by_uuid[uuid]
        spec = spec_for_product(gpu.model_name) or spec_for_product(allocation.gpu_model)
        profiles = profiles_for(spec, mig_tables)
        profile_name = gpu.mig_profile or allocation.mig_profile
        if profile_name is None and allocation.gpu_resource.startswith("nvidia.com/mig-"):
            profile_name = allocation.gpu_resource
        is_mig = gpu.mig_profile is not None or allocation_mig
        profile = find_profile(profiles, profile_name) if is_mig else None
        gr = gpu.stats.get(Signal.GR_ENGINE_ACTIVE)
        util = gpu.stats.get(Signal.GPU_UTIL)
        if gr is not None:
            busy, source = gr, "gr_engine_active"
        elif util is not None and not is_mig:
            busy, source = util, "gpu_util"
        else:
            busy, source = None, None
        capacity: float | None = None
        if gpu.memory_total_mib:
            capacity = gpu.memory_total_mib * GIB_PER_MIB
        elif allocation.gpu_memory_mib:
            capacity = allocation.gpu_memory_mib * GIB_PER_MIB
        elif Signal.FB_USED_MIB in gpu.stats and Signal.FB_FREE_MIB in gpu.stats:
            capacity = (gpu.stats[Signal.FB_USED_MIB].p50 + gpu.stats[Signal.FB_FREE_MIB].p50) * GIB_PER_MIB
        elif profile is not None:
            capacity = profile.memory_gib
        elif spec is not None and not is_mig:
            capacity = spec.memory_gib
        sms = profile.sms if profile is not None else (spec.sms if spec is not None and not is_mig else None)
        result.append(
            GPUFigures(
                uuid=uuid,
                observation=gpu,
                busy=busy,
                busy_source=source,
                is_mig=is_mig,
                shared=allocation_shared or gpu.shared_by_pods > 1 or pods_per_uuid.get(uuid, 1) > 1,
                spec=spec,
                profile=profile,
                capacity_gib=capacity,
                sms=sms,
            )
        )
    return tuple(result)


def gpu_stat(
    gpus: tuple[GPUFigures, ...], signal: Signal, pick: Callable[[SignalStats], float]
) -> list[float]:
    """One figure (`pick`) of one signal from every GPU that has it."""
    return [pick(s) for g in gpus if (s := g.stat(signal)) is not None]


def _workload_stat(window: WorkloadWindow, signal: Signal) -> SignalStats | None:
    """A workload-level serving signal; falls back to the busiest pod's own series."""
    if signal in window.stats:
        return window.stats[signal]
    candidates = [pod.stats[signal] for pod in window.pods if signal in pod.stats]
    if not candidates:
        return None
    return max(candidates, key=lambda s: (s.p95, s.p50, s.mean, s.max))


def _math_p50(gpu: GPUFigures) -> float:
    """Tensor + FP16 + FP32 pipe p50 of one GPU: how much of the time its math units work."""
    return math.fsum(
        s.p50
        for signal in (Signal.TENSOR_ACTIVE, Signal.FP16_ACTIVE, Signal.FP32_ACTIVE)
        if (s := gpu.stat(signal)) is not None
    )


def runs_no_kernel(gpu: GPUFigures) -> bool:
    """SM activity exactly 0 in every sample: no kernel ran on this GPU (no noise floor to argue over)."""
    sm = gpu.stat(Signal.SM_ACTIVE)
    return sm is not None and sm.samples > 0 and sm.max <= 0.0


def _no_kernel_gpus(window: WorkloadWindow, gpus: tuple[GPUFigures, ...]) -> tuple[str, ...]:
    """GPUs of a multi-GPU pod that ran no kernel while another GPU of the same pod did."""
    by_uuid = {g.uuid: g for g in gpus}
    idle: set[str] = set()
    for pod in window.pods:
        mine = [by_uuid[u] for u in sorted({gpu.uuid for gpu in pod.gpus}) if u in by_uuid]
        if len(mine) < 2:
            continue
        quiet = [g.uuid for g in mine if runs_no_kernel(g)]
        if quiet and len(quiet) < len(mine):
            idle.update(quiet)
    return tuple(sorted(idle))


def _phase_shape(gpus: Iterable[GPUFigures]) -> PhaseShape | None:
    """The phase shape (logic/width.py) of the busiest GPU that has GR and SM series and a known SM count."""
    shapes = [
        shape
        for g in gpus
        if (gr := g.stat(Signal.GR_ENGINE_ACTIVE)) is not None
        and (sm := g.stat(Signal.SM_ACTIVE)) is not None
        and (
            shape := PhaseShape.from_means(
                gr.mean,
                sm.mean,
                g.sms or (g.spec.sms if g.spec else None),
                dram.mean if (dram := g.stat(Signal.DRAM_ACTIVE)) is not None else None,
            )
        )
        is not None
    ]
    return max(shapes, key=lambda s: (s.duty, s.width_fraction)) if shapes else None


def summarise(window: WorkloadWindow, mig_tables: MigTables | None = None) -> WorkloadFigures:
    """Reduce a window to the figures the rules read (pure, order-independent).

    Per GPU first: in a multi-GPU pod, a GPU that ran no kernel is left out of the busy figures (it
    gets its own gpuCount advice), so one busy GPU is never averaged into a 'starved' pod.
    """
    allocation = window.allocation
    gpus = _gpu_figures(window, mig_tables)
    no_kernel = _no_kernel_gpus(window, gpus)
    active = tuple(g for g in gpus if g.uuid not in no_kernel)  # activity figures: GPUs that ran kernels
    busy_gpus = [g.busy for g in active if g.busy is not None]
    sources = {g.busy_source for g in gpus}
    busy_source = (
        None
        if None in sources or not sources
        else ("gpu_util" if "gpu_util" in sources else "gr_engine_active")
    )
    spec = next((g.spec for g in gpus if g.spec is not None), None) or spec_for_product(allocation.gpu_model)
    profiles = profiles_for(spec, mig_tables)

    fb_p99 = max_of(gpu_stat(gpus, Signal.FB_USED_MIB, lambda s: s.p99))
    fb_p99_gib = fb_p99 * GIB_PER_MIB if fb_p99 is not None else None
    fb_max = max_of(gpu_stat(gpus, Signal.FB_USED_MIB, lambda s: s.max))
    fb_max_gib = fb_max * GIB_PER_MIB if fb_max is not None else None
    capacities = [g.capacity_gib for g in gpus if g.capacity_gib]
    capacity = min(capacities) if capacities else None
    shares = [
        s.p99 * GIB_PER_MIB / g.capacity_gib
        for g in gpus
        if g.capacity_gib and (s := g.stat(Signal.FB_USED_MIB)) is not None
    ]

    pcie_utils = []
    pcie_p50_bytes: list[float] = []
    pcie_p50_utils: list[float] = []
    transfer_p95: list[float] = []
    nvlink_utils = []
    nvlink_bytes = []
    symmetric: list[bool] = []
    nominal_known = True
    for g in gpus:
        pcie_capacity = g.spec.pcie_bytes_per_s if g.spec else _PCIE_FALLBACK_BYTES_PER_S
        rx, tx = g.stat(Signal.PCIE_RX_BYTES_PER_S), g.stat(Signal.PCIE_TX_BYTES_PER_S)
        if rx is not None or tx is not None:
            pcie_utils.append(max(rx.p95 if rx else 0.0, tx.p95 if tx else 0.0) / pcie_capacity)
            median = max(rx.p50 if rx else 0.0, tx.p50 if tx else 0.0)
            pcie_p50_bytes.append(median)
            pcie_p50_utils.append(median / pcie_capacity)
            low, high = sorted((rx.p50 if rx else 0.0, tx.p50 if tx else 0.0))
            symmetric.append(high > 0 and low * 2.0 >= high)
        transfer_p95.extend(
            s.p95
            for signal in (
                Signal.PCIE_RX_BYTES_PER_S,
                Signal.PCIE_TX_BYTES_PER_S,
                Signal.NVLINK_RX_BYTES_PER_S,
                Signal.NVLINK_TX_BYTES_PER_S,
            )
            if (s := g.stat(signal)) is not None
        )
        nrx, ntx = g.stat(Signal.NVLINK_RX_BYTES_PER_S), g.stat(Signal.NVLINK_TX_BYTES_PER_S)
        if nrx is not None or ntx is not None:
            nvlink_bytes.append(max(nrx.p95 if nrx else 0.0, ntx.p95 if ntx else 0.0))
            per_direction = nvlink_per_direction_bytes(g.observation.model_name or allocation.gpu_model)
            if per_direction is None:
                nominal_known = False
                per_direction = NVLINK_FALLBACK_PER_DIRECTION
            nvlink_utils.append(max(nrx.p50 if nrx else 0.0, ntx.p50 if ntx else 0.0) / per_direction)

    pods = sorted(window.pods, key=lambda p: p.name)
    reference = allocation.cpu_limit_cores or allocation.cpu_request_cores
    cpu_stats = sorted(
        (p.stats[Signal.CPU_USAGE_CORES] for p in pods if Signal.CPU_USAGE_CORES in p.stats),
        key=lambda st: (st.p95, st.p50),
    )
    cpu_usage = cpu_stats[-1].p95 if cpu_stats else None
    cpu_usage_p50 = cpu_stats[-1].p50 if cpu_stats else None
    cpu_saturation = cpu_usage / reference if cpu_usage is not None and reference else None
    cpu_throttled = max_of(
        p.stats[Signal.CPU_THROTTLED_RATIO].p50 for p in pods if Signal.CPU_THROTTLED_RATIO in p.stats
    )
    memory_ws = max_of(
        p.stats[Signal.MEMORY_WORKING_SET_BYTES].p99
        for p in pods
        if Signal.MEMORY_WORKING_SET_BYTES in p.stats
    )
    io_values = []
    fs_p50 = max_of(
        p.stats[Signal.FS_READ_BYTES_PER_S].p50 for p in pods if Signal.FS_READ_BYTES_PER_S in p.stats
    )
    net_p50 = max_of(
        p.stats[Signal.NET_RX_BYTES_PER_S].p50 for p in pods if Signal.NET_RX_BYTES_PER_S in p.stats
    )
    net_max = max_of(
        p.stats[Signal.NET_RX_BYTES_PER_S].max for p in pods if Signal.NET_RX_BYTES_PER_S in p.stats
    )
    for pod in pods:
        read = pod.stats.get(Signal.FS_READ_BYTES_PER_S)
        net = pod.stats.get(Signal.NET_RX_BYTES_PER_S)
        if read is not None or net is not None:
            io_values.append((read.p50 if read else 0.0) + (net.p50 if net else 0.0))
    correlations = [p.gpu_cpu_correlation for p in pods if p.gpu_cpu_correlation is not None]

    requests = _workload_stat(window, Signal.REQUESTS_PER_S)
    queue = _workload_stat(window, Signal.QUEUE_LENGTH)
    queue_time = _workload_stat(window, Signal.QUEUE_TIME_MS)
    queue_p50 = queue.p50 if queue else (queue_time.p50 if queue_time else None)
    queue_p95 = queue.p95 if queue else (queue_time.p95 if queue_time else None)
    queue_active = queue.active_fraction if queue else (queue_time.active_fraction if queue_time else None)
    is_serving = (allocation.workload_type or "").lower() in _SERVING_TYPES or (
        allocation.workload_type is None and (requests is not None or queue is not None)
    )

    busy_samples = min((b.samples for b in busy_gpus), default=0)
    expected = window.duration_seconds / window.step_seconds if window.duration_seconds > 0 else 0.0
    coverage = min(1.0, busy_samples / expected) if expected > 0 and busy_gpus else None
    active_fractions = [b.active_fraction for b in busy_gpus if b.active_fraction is not None]
    sawtooths = [b.sawtooth for b in busy_gpus if b.sawtooth is not None]
    total_gpus = len(gpus) if gpus else allocation.gpu_count * allocation.replicas

    return WorkloadFigures(
        window=window,
        gpus=gpus,
        gpus_per_pod=max([allocation.gpu_count, *(len({g.uuid for g in p.gpus}) for p in pods)]),
        total_gpus=total_gpus,
        replicas=max(allocation.replicas, len(pods)) if allocation.replicas else len(pods),
        is_mig=any(g.is_mig for g in gpus) or _allocation_is_mig(window),
        is_shared=any(g.shared for g in gpus),
        spec=spec,
        profiles=profiles,
        busy_source=busy_source,
        busy_p50=fmean(b.p50 for b in busy_gpus),
        busy_p95=fmean(b.p95 for b in busy_gpus),
        busy_p95_max=max_of(b.p95 for b in busy_gpus),
        busy_max=max_of(b.max for b in busy_gpus),
        busy_active_fraction=max(active_fractions) if active_fractions else None,
        busy_samples=busy_samples,
        busy_sawtooth=max(sawtooths) if sawtooths else None,
        sm_p50=fmean(gpu_stat(active, Signal.SM_ACTIVE, lambda s: s.p50)),
        sm_p95=fmean(gpu_stat(active, Signal.SM_ACTIVE, lambda s: s.p95)),
        sm_p99_max=max_of(gpu_stat(active, Signal.SM_ACTIVE, lambda s: s.p99)),
        gr_p99_max=max_of(gpu_stat(active, Signal.GR_ENGINE_ACTIVE, lambda s: s.p99)),
        sm_max=max_of(gpu_stat(active, Signal.SM_ACTIVE, lambda s: s.max)),
        gr_max=max_of(gpu_stat(active, Signal.GR_ENGINE_ACTIVE, lambda s: s.max)),
        math_p50=max_of(_math_p50(g) for g in active if g.stat(Signal.TENSOR_ACTIVE) is not None),
        fp16_p50=fmean(gpu_stat(active, Signal.FP16_ACTIVE, lambda s: s.p50)),
        occupancy_p50=fmean(gpu_stat(active, Signal.SM_OCCUPANCY, lambda s: s.p50)),
        tensor_p50=fmean(gpu_stat(active, Signal.TENSOR_ACTIVE, lambda s: s.p50)),
        tensor_p95=fmean(gpu_stat(active, Signal.TENSOR_ACTIVE, lambda s: s.p95)),
        fp32_p50=fmean(gpu_stat(active, Signal.FP32_ACTIVE, lambda s: s.p50)),
        dram_p95=fmean(gpu_stat(active, Signal.DRAM_ACTIVE, lambda s: s.p95)),
        fb_used_p99_gib=fb_p99_gib,
        fb_used_max_gib=fb_max_gib,
        capacity_gib=capacity,
        memory_share_p99=max(shares) if shares else None,
        pcie_utilisation=max(pcie_utils) if pcie_utils else None,
        pcie_bytes_p50=max(pcie_p50_bytes) if pcie_p50_bytes else None,
        pcie_utilisation_p50=max(pcie_p50_utils) if pcie_p50_utils else None,
        pcie_link_known=bool(gpus) and all(g.spec is not None for g in gpus),
        transfer_bytes_p95=max(transfer_p95) if transfer_p95 else None,
        nvlink_utilisation=max(nvlink_utils) if nvlink_utils else None,
        nvlink_bytes_p95=max(nvlink_bytes) if nvlink_bytes else None,
        pcie_symmetric=bool(symmetric) and all(symmetric),
        nvlink_nominal_known=nominal_known,
        cpu_usage_p95=cpu_usage,
        cpu_usage_p50=cpu_usage_p50,
        process_cpu_max_p50=max_of(
            p.stats[Signal.PROCESS_CPU_MAX_CORES].p50 for p in pods if Signal.PROCESS_CPU_MAX_CORES in p.stats
        ),
        cpu_reference_cores=reference,
        cpu_reference_is_limit=allocation.cpu_limit_cores is not None,
        cpu_saturation=cpu_saturation,
        cpu_throttled=cpu_throttled,
        memory_ws_p99_bytes=memory_ws,
        io_bytes_p50=max(io_values) if io_values else None,
        gpu_cpu_correlation=fmean(correlations),
        restarts=sum(p.restarts for p in pods),
        oom_killed=any(p.oom_killed for p in pods),
        requests_per_s=requests.mean if requests else None,
        queue_length_p50=queue_p50,
        queue_length_p95=queue_p95,
        queue_active_fraction=queue_active,
        is_serving=is_serving,
        coverage=coverage,
        pods=len(pods),
        phase_shape=_phase_shape(active),
        fs_read_p50=fs_p50,
        net_rx_p50=net_p50,
        net_rx_max=net_max,
        requests_max=requests.max if requests else None,
        memory_ws_max_bytes=max_of(
            p.stats[Signal.MEMORY_WORKING_SET_BYTES].max
            for p in pods
            if Signal.MEMORY_WORKING_SET_BYTES in p.stats
        ),
        cpu_pressure_p50=max_of(
            p.stats[Signal.CPU_PRESSURE_RATIO].p50 for p in pods if Signal.CPU_PRESSURE_RATIO in p.stats
        ),
        io_pressure_p50=max_of(
            p.stats[Signal.IO_PRESSURE_RATIO].p50 for p in pods if Signal.IO_PRESSURE_RATIO in p.stats
        ),
        no_kernel_gpus=no_kernel,
    )


@dataclass(frozen=True, slots=True)
class SizingNeed:
    """Per-GPU need of a single-GPU workload, and the share of its current device it uses."""

    memory_gib: float  # max used over the window
    sm_equivalents: float
    dram_fraction_of_full_gpu: float | None
    share_of_device: float
    sm_from_busy: bool


def sizing_need(figures: WorkloadFigures, settings: EngineSettings) -> SizingNeed | None:
    """Memory/SM/DRAM need for slice selection (docs/diagnosis.md), or None when it cannot be measured.

    Memory is the window's **max**, not p99: an eval peak that fills 1 % of the window is still a peak,
    and running out of memory in a slice kills the pod.
    """
    memory = figures.fb_used_max_gib if figures.fb_used_max_gib is not None else figures.fb_used_p99_gib
    if memory is None or figures.capacity_gib is None:
        return None
    sms = next((g.sms for g in figures.gpus if g.sms), None)
    if sms is None and figures.spec is not None:
        sms = figures.spec.sms
    sm_share = figures.sm_p95 if figures.sm_p95 is not None else figures.busy_p95_max
    if sm_share is None:
        return None
    sm_equivalents = sm_share * (sms or 0)
    profile = next((g.profile for g in figures.gpus if g.profile), None)
    dram_full = (
        figures.dram_p95 * profile.memory_fraction
        if figures.dram_p95 is not None and profile
        else figures.dram_p95
    )
    share = max(
        memory * settings.memory_headroom / figures.capacity_gib,
        sm_share / settings.sm_target_utilisation,
        (figures.dram_p95 / settings.dram_target_utilisation) if figures.dram_p95 is not None else 0.0,
    )
    return SizingNeed(
        memory_gib=memory,
        sm_equivalents=sm_equivalents,
        dram_fraction_of_full_gpu=dram_full,
        share_of_device=share,
        sm_from_busy=figures.sm_p95 is None,
    )
