"""The diagnosis rule set (docs/diagnosis.md): from one workload window to findings and a primary diagnosis.

Order (docs/diagnosis.md): health gates (HardwareFault, Throttled) block everything;
then InsufficientData; then IdleAllocation; then data-path causes (CPU, I/O, host transfer,
communication), which explain a low busy figure; then in-GPU efficiency (occupancy, bandwidth, tensor
cores); then sizing (oversized, memory capacity); then serving (replicas). Healthy when nothing fires.

Busy = DCGM_FI_PROF_GR_ENGINE_ACTIVE, else DCGM_FI_DEV_GPU_UTIL (never under MIG, where NVML does not
report it). Device series of a GPU shared by several pods appear once per pod; they are deduplicated by
GPU UUID and never summed. Every aggregate is order-independent (sorted inputs, `math.fsum`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from gpu_rightsizer.logic.mig import (
    GIB_PER_MIB,
    NVLINK_FALLBACK_PER_DIRECTION,
    GPUModelSpec,
    MigProfile,
    MigTables,
    find_profile,
    is_pre_volta,
    nvlink_per_direction_bytes,
    profiles_for,
    spec_for_product,
)
from gpu_rightsizer.logic.rules.registry import PRIMARY_ORDER
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import DiagnosisCode, Severity
from gpu_rightsizer.model.observation import GPUObservation, Signal, SignalStats, WorkloadWindow
from gpu_rightsizer.model.result import Finding

#: Signals that are ratios in 0..1 (a value far outside is contradictory data).
RATIO_SIGNALS: frozenset[Signal] = frozenset(
    {
        Signal.GR_ENGINE_ACTIVE,
        Signal.SM_ACTIVE,
        Signal.SM_OCCUPANCY,
        Signal.TENSOR_ACTIVE,
        Signal.FP32_ACTIVE,
        Signal.FP16_ACTIVE,
        Signal.DRAM_ACTIVE,
        Signal.GPU_UTIL,
        Signal.THROTTLE_FRACTION,
        Signal.CPU_THROTTLED_RATIO,
    }
)

_RANK = {code: rank for rank, code in enumerate(PRIMARY_ORDER)}

#: No finding claims certainty: window statistics can always miss what happened between samples.
MAX_CONFIDENCE = 0.95

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


def _pct(value: float) -> str:
    return f"{value * 100:.0f}%"


def _fmean(values: Iterable[float]) -> float | None:
    items = list(values)
    return math.fsum(items) / len(items) if items else None


def _max(values: Iterable[float]) -> float | None:
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


def _gpu_stat(
    gpus: tuple[GPUFigures, ...], signal: Signal, pick: Callable[[SignalStats], float]
) -> list[float]:
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


def summarise(window: WorkloadWindow, mig_tables: MigTables | None = None) -> WorkloadFigures:
    """Reduce a window to the figures the rules read (pure, order-independent)."""
    allocation = window.allocation
    gpus = _gpu_figures(window, mig_tables)
    busy_gpus = [g.busy for g in gpus if g.busy is not None]
    sources = {g.busy_source for g in gpus}
    busy_source = (
        None
        if None in sources or not sources
        else ("gpu_util" if "gpu_util" in sources else "gr_engine_active")
    )
    spec = next((g.spec for g in gpus if g.spec is not None), None) or spec_for_product(allocation.gpu_model)
    profiles = profiles_for(spec, mig_tables)

    fb_p99 = _max(_gpu_stat(gpus, Signal.FB_USED_MIB, lambda s: s.p99))
    fb_p99_gib = fb_p99 * GIB_PER_MIB if fb_p99 is not None else None
    fb_max = _max(_gpu_stat(gpus, Signal.FB_USED_MIB, lambda s: s.max))
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
    cpu_throttled = _max(
        p.stats[Signal.CPU_THROTTLED_RATIO].p50 for p in pods if Signal.CPU_THROTTLED_RATIO in p.stats
    )
    memory_ws = _max(
        p.stats[Signal.MEMORY_WORKING_SET_BYTES].p99
        for p in pods
        if Signal.MEMORY_WORKING_SET_BYTES in p.stats
    )
    io_values = []
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
        busy_p50=_fmean(b.p50 for b in busy_gpus),
        busy_p95=_fmean(b.p95 for b in busy_gpus),
        busy_p95_max=_max(b.p95 for b in busy_gpus),
        busy_max=_max(b.max for b in busy_gpus),
        busy_active_fraction=max(active_fractions) if active_fractions else None,
        busy_samples=busy_samples,
        busy_sawtooth=max(sawtooths) if sawtooths else None,
        sm_p50=_fmean(_gpu_stat(gpus, Signal.SM_ACTIVE, lambda s: s.p50)),
        sm_p95=_fmean(_gpu_stat(gpus, Signal.SM_ACTIVE, lambda s: s.p95)),
        sm_p99_max=_max(_gpu_stat(gpus, Signal.SM_ACTIVE, lambda s: s.p99)),
        gr_p99_max=_max(_gpu_stat(gpus, Signal.GR_ENGINE_ACTIVE, lambda s: s.p99)),
        math_p50=_max(_math_p50(g) for g in gpus if g.stat(Signal.TENSOR_ACTIVE) is not None),
        fp16_p50=_fmean(_gpu_stat(gpus, Signal.FP16_ACTIVE, lambda s: s.p50)),
        occupancy_p50=_fmean(_gpu_stat(gpus, Signal.SM_OCCUPANCY, lambda s: s.p50)),
        tensor_p50=_fmean(_gpu_stat(gpus, Signal.TENSOR_ACTIVE, lambda s: s.p50)),
        tensor_p95=_fmean(_gpu_stat(gpus, Signal.TENSOR_ACTIVE, lambda s: s.p95)),
        fp32_p50=_fmean(_gpu_stat(gpus, Signal.FP32_ACTIVE, lambda s: s.p50)),
        dram_p95=_fmean(_gpu_stat(gpus, Signal.DRAM_ACTIVE, lambda s: s.p95)),
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
        process_cpu_max_p50=_max(
            p.stats[Signal.PROCESS_CPU_MAX_CORES].p50 for p in pods if Signal.PROCESS_CPU_MAX_CORES in p.stats
        ),
        cpu_reference_cores=reference,
        cpu_reference_is_limit=allocation.cpu_limit_cores is not None,
        cpu_saturation=cpu_saturation,
        cpu_throttled=cpu_throttled,
        memory_ws_p99_bytes=memory_ws,
        io_bytes_p50=max(io_values) if io_values else None,
        gpu_cpu_correlation=_fmean(correlations),
        restarts=sum(p.restarts for p in pods),
        oom_killed=any(p.oom_killed for p in pods),
        requests_per_s=requests.mean if requests else None,
        queue_length_p50=queue_p50,
        queue_length_p95=queue_p95,
        queue_active_fraction=queue_active,
        is_serving=is_serving,
        coverage=coverage,
        pods=len(pods),
    )


# --------------------------------------------------------------------------------------------------
# Findings
# --------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Builder:
    """Collects findings, clamping confidence and rounding evidence for stable output."""

    findings: list[Finding] = field(default_factory=list)

    def add(
        self,
        code: DiagnosisCode,
        severity: Severity,
        confidence: float,
        message: str,
        evidence: dict[str, float | None],
    ) -> None:
        clean = {
            k: round(float(v), 4) for k, v in sorted(evidence.items()) if v is not None and math.isfinite(v)
        }
        self.findings.append(
            Finding(
                code=code,
                severity=severity,
                confidence=round(min(MAX_CONFIDENCE, max(0.0, confidence)), 3),
                message=message,
                evidence=clean,
            )
        )


def _all_stats(window: WorkloadWindow) -> Iterable[tuple[str, Signal, SignalStats]]:
    for signal, stats in sorted(window.stats.items()):
        yield "workload", signal, stats
    for pod in sorted(window.pods, key=lambda p: p.name):
        for signal, stats in sorted(pod.stats.items()):
            yield f"pod {pod.name}", signal, stats
        for gpu in sorted(pod.gpus, key=lambda g: g.uuid):
            for signal, stats in sorted(gpu.stats.items()):
                yield f"GPU {gpu.uuid} of pod {pod.name}", signal, stats


def _data_problems(figures: WorkloadFigures, settings: EngineSettings, now: datetime | None) -> list[str]:
    """Reasons the window cannot be trusted; empty when it can."""
    window = figures.window
    problems: list[str] = []
    tol = settings.ratio_tolerance
    for where, signal, stats in sorted(_all_stats(window), key=lambda item: (item[0], item[1])):
        values = (stats.mean, stats.p50, stats.p95, stats.p99, stats.max, stats.min)
        if not all(math.isfinite(v) for v in values):
            problems.append(f"{signal.value} on {where} holds NaN or infinite values")
            continue
        if not (
            stats.min - tol <= stats.p50 <= stats.p95 + tol <= stats.p99 + 2 * tol <= stats.max + 3 * tol
        ):
            problems.append(
                f"{signal.value} on {where} has percentiles out of order (p50 ≤ p95 ≤ p99 ≤ max broken)"
            )
        if signal in RATIO_SIGNALS and (stats.min < -tol or stats.max > 1 + tol):
            problems.append(f"{signal.value} on {where} leaves the 0..1 range (max {stats.max:.2f})")
        elif signal not in RATIO_SIGNALS and stats.min < -tol and signal is not Signal.GPU_TEMP_C:
            problems.append(f"{signal.value} on {where} is negative")
    if problems:
        return problems
    if window.end <= window.start:
        return ["the window ends before it starts"]
    if not window.pods:
        return ["no pods of the workload were observed in the window"]
    if not figures.gpus:
        return ["no GPU series matched the workload's pods"]
    missing = [g.uuid for g in figures.gpus if g.busy is None]
    if missing:
        if all(g.is_mig for g in figures.gpus if g.busy is None):
            problems.append(
                "no GR_ENGINE_ACTIVE for MIG slice(s) "
                f"{', '.join(missing)}; GPU_UTIL is not reported under MIG, so there is no busy signal"
            )
        else:
            problems.append(
                f"no busy signal (neither GR_ENGINE_ACTIVE nor GPU_UTIL) for GPU(s) {', '.join(missing)}"
            )
        return problems
    if window.duration_seconds < settings.min_window_seconds:
        problems.append(
            f"the window is {window.duration_seconds / 60:.0f} min long, shorter than the "
            f"{settings.min_window_seconds / 60:.0f} min minimum"
        )
    if figures.busy_samples < settings.min_samples:
        problems.append(
            f"only {figures.busy_samples} busy samples, fewer than the {settings.min_samples} required"
        )
    if figures.coverage is not None and figures.coverage < settings.min_coverage:
        problems.append(
            f"samples cover {_pct(figures.coverage)} of the window, below the {_pct(settings.min_coverage)} "
            "minimum "
            "(gaps in the data)"
        )
    if now is not None and (now - window.end).total_seconds() > settings.max_staleness_seconds:
        age = (now - window.end).total_seconds()
        problems.append(
            f"the newest data is {age / 60:.0f} min old (stale; limit "
            f"{settings.max_staleness_seconds / 60:.0f} min)"
        )
    for gpu in figures.gpus:
        gr, sm = gpu.stat(Signal.GR_ENGINE_ACTIVE), gpu.stat(Signal.SM_ACTIVE)
        if gr is not None and sm is not None and sm.p95 > gr.p95 + settings.contradiction_gap:
            problems.append(
                f"GPU {gpu.uuid}: SM_ACTIVE p95 {_pct(sm.p95)} exceeds GR_ENGINE_ACTIVE p95 {_pct(gr.p95)}; "
                "SM activity cannot exceed engine activity (contradictory series)"
            )
        util = gpu.stat(Signal.GPU_UTIL)
        if (
            gr is not None
            and util is not None
            and min(gr.samples, util.samples) >= settings.consistency_min_samples
            and gr.mean > util.mean + 2 * settings.contradiction_gap
        ):
            problems.append(
                f"GPU {gpu.uuid}: GR_ENGINE_ACTIVE mean {_pct(gr.mean)} far above GPU_UTIL mean "
                f"{_pct(util.mean)} over {min(gr.samples, util.samples)} samples (contradictory series)"
            )
        fb = gpu.stat(Signal.FB_USED_MIB)
        if fb is not None and gpu.capacity_gib and fb.p99 * GIB_PER_MIB > gpu.capacity_gib * (1 + tol):
            problems.append(
                f"GPU {gpu.uuid}: {fb.p99 * GIB_PER_MIB:.1f} GiB used exceeds its {gpu.capacity_gib:.1f} GiB "
                "capacity"
            )
    return problems


def _health(figures: WorkloadFigures, settings: EngineSettings, out: _Builder) -> None:
    """H0/H1: hardware faults and platform throttling; they block every sizing action."""
    critical: dict[int, list[str]] = {}
    for gpu in figures.gpus:
        for xid in sorted(set(gpu.observation.xid_codes)):
            if xid in settings.critical_xids:
                critical.setdefault(xid, []).append(gpu.uuid)
    if critical:
        listed = "; ".join(
            f"Xid {xid} on {', '.join(sorted(uuids))}" for xid, uuids in sorted(critical.items())
        )
        out.add(
            DiagnosisCode.HARDWARE_FAULT,
            Severity.CRITICAL,
            0.95,
            f"Seen: {listed}. These Xid codes mean a hardware or driver fault, not a workload issue. "
            "Change: no right-sizing on this data; follow the NVIDIA Xid catalog action (restart the app, "
            "reset the GPU or drain the node) and open a node-health ticket.",
            {"criticalXids": float(len(critical)), "firstXid": float(min(critical))},
        )
    worst: tuple[float, GPUFigures] | None = None
    for gpu in figures.gpus:
        throttle = gpu.stat(Signal.THROTTLE_FRACTION)
        if (
            throttle is not None
            and throttle.mean > settings.throttle_fraction
            and (worst is None or throttle.mean > worst[0])
        ):
            worst = (throttle.mean, gpu)
    if worst is not None:
        fraction, gpu = worst
        clock = gpu.stat(Signal.SM_CLOCK_MHZ)
        clock_ratio = clock.p50 / clock.max if clock is not None and clock.max > 0 else None
        corroborated = clock_ratio is not None and clock_ratio < settings.throttle_clock_ratio
        clock_text = (
            f", SM clock p50 {clock.p50:.0f} MHz is {_pct(clock_ratio)} of its {clock.max:.0f} MHz peak"
            if clock is not None and clock_ratio is not None
            else ""
        )
        out.add(
            DiagnosisCode.THROTTLED,
            Severity.CRITICAL,
            0.9 if corroborated else 0.75,
            f"Seen: GPU {gpu.uuid} was clock-throttled (thermal, HW slowdown or power brake) for "
            f"{_pct(fraction)} of the window (limit {_pct(settings.throttle_fraction)}){clock_text}. "
            "Meaning: the platform, not the workload, capped throughput, so utilisation figures are not "
            "representative. Change: open an infrastructure ticket (cooling, power); the window is excluded "
            "from sizing.",
            {"throttleFraction": fraction, "smClockRatio": clock_ratio},
        )


def _base_confidence(
    figures: WorkloadFigures, settings: EngineSettings, *, gpu_signals: bool = True
) -> float:
    confidence = 1.0
    if figures.coverage is not None and figures.coverage < settings.good_coverage:
        confidence *= 0.85
    if gpu_signals and figures.is_shared:
        confidence *= settings.shared_gpu_confidence
    if gpu_signals and figures.busy_source == "gpu_util":
        confidence *= settings.missing_profiling_confidence
    if figures.window.warnings:
        confidence *= 0.9
    return confidence


def _window_factor(duration: float, recommended: float) -> float:
    return 0.7 + 0.3 * min(1.0, duration / recommended) if recommended > 0 else 1.0


def _compute_low(figures: WorkloadFigures, settings: EngineSettings) -> tuple[bool, float | None, str]:
    """SM activity p50 (or busy p50 when profiling fields are missing) below the 'ineffective' line."""
    if figures.sm_p50 is not None:
        return figures.sm_p50 < settings.low_busy, figures.sm_p50, "SM activity"
    busy = figures.busy_p50
    return busy is not None and busy < settings.low_busy, busy, "GPU busy"


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


def no_kernels(figures: WorkloadFigures, settings: EngineSettings) -> bool:
    """True when no kernel ran on any GPU: SM activity (else GR, else GPU_UTIL) at the noise floor."""
    if figures.sm_p99_max is not None:
        return figures.sm_p99_max <= settings.idle_sm_p99
    if figures.gr_p99_max is not None:
        return figures.gr_p99_max <= settings.idle_gr_p99
    return figures.busy_max is not None and figures.busy_max <= settings.release_max_busy


def _idle(figures: WorkloadFigures, settings: EngineSettings, out: _Builder) -> None:
    """R1: no kernels, quiet links, no CPU work and no requests. GPU memory held is not liveness."""
    busy = figures.busy_p95_max
    if busy is None or busy >= settings.idle_busy_p95 or not no_kernels(figures, settings):
        return
    if figures.requests_per_s is not None and figures.requests_per_s > 0:
        return  # a GPU that serves requests is not idle (SPEC §1); sizing and serving rules handle it
    if (
        figures.transfer_bytes_p95 is not None
        and figures.transfer_bytes_p95 >= settings.idle_transfer_bytes_per_s
    ):
        return  # copies over PCIe/NVLink are GPU work the busy signal misses (SPEC §1: not idle)
    if figures.cpu_usage_p95 is not None and figures.cpu_usage_p95 > settings.idle_cpu_cores:
        return  # a process that works on the CPU may feed the GPU any moment: live, not idle
    util = _max(_gpu_stat(figures.gpus, Signal.GPU_UTIL, lambda s: s.p95))
    if figures.busy_source == "gr_engine_active" and util is not None and util >= settings.idle_busy_p95:
        return  # NVML saw kernels or copies that the graphics-engine counter did not
    window = figures.window
    confidence = _base_confidence(figures, settings)
    if window.duration_seconds < settings.idle_min_window_seconds:
        confidence *= 0.8
    if not figures.profiling_fields:
        confidence *= settings.missing_profiling_confidence
    signal = (
        "SM activity"
        if figures.sm_p99_max is not None
        else ("graphics-engine activity" if figures.gr_p99_max is not None else "GPU_UTIL (whole percent)")
    )
    cpu_text = f", CPU p95 {figures.cpu_usage_p95:.2f} cores" if figures.cpu_usage_p95 is not None else ""
    link_text = (
        f", PCIe/NVLink p95 {figures.transfer_bytes_p95 / 1e6:.1f} MB/s"
        if figures.transfer_bytes_p95 is not None
        else ", no PCIe series"
    )
    out.add(
        DiagnosisCode.IDLE_ALLOCATION,
        Severity.WARNING,
        confidence,
        f"Seen: {figures.total_gpus} GPU(s) allocated and no kernel ran over "
        f"{window.duration_seconds / 3600:.1f} h ({signal} at its noise floor, busy p95 {_pct(busy)})"
        f"{link_text}{cpu_text}, no requests. Meaning: the allocation holds GPUs it does not use (memory "
        "held is not work). Change: release the GPU (scale to zero, end the notebook or job); a "
        "long-running service is released automatically only after a full day idle.",
        {
            "gpuBusyP95": busy,
            "gpuBusyMax": figures.busy_max,
            "smActiveP99": figures.sm_p99_max,
            "cpuUsageP95": figures.cpu_usage_p95,
            "transferBytesP95": figures.transfer_bytes_p95,
            "gpus": float(figures.total_gpus),
            "windowHours": window.duration_seconds / 3600,
        },
    )


def cpu_plateau_cores(figures: WorkloadFigures, settings: EngineSettings) -> int | None:
    """Whole cores a CPU plateau sits at (k pinned processes below the limit), or None without one.

    One data-loader process cannot use more than one core, so a 2-core quota is never exhausted: no
    throttling, no saturation. What shows is a flat container CPU at ≈ k cores with headroom left. When
    the node agent reports per-process CPU, it decides: a process at one core confirms the plateau, no
    such process rules it out.
    """
    usage_p50, usage_p95 = figures.cpu_usage_p50, figures.cpu_usage_p95
    if usage_p50 is None or usage_p95 is None:
        return None
    limit = figures.window.allocation.cpu_limit_cores
    if limit is not None and limit - usage_p95 < settings.cpu_plateau_min_headroom:
        return None  # at the limit: the saturation/throttling rule speaks
    throttled = figures.cpu_throttled
    if throttled is not None and throttled >= settings.cpu_plateau_max_throttled:
        return None
    process = figures.process_cpu_max_p50
    if process is not None:
        pinned = process >= settings.cpu_process_pinned_cores
        return max(1, math.floor(usage_p50 + 0.05)) if pinned else None
    cores = math.floor(usage_p50 + 0.05)
    if cores < 1 or usage_p50 - cores > settings.cpu_plateau_max_excess:
        return None
    if usage_p95 - usage_p50 > settings.cpu_plateau_max_spread:
        return None
    return cores


def _data_path(figures: WorkloadFigures, settings: EngineSettings, out: _Builder) -> None:
    busy = figures.busy_p50
    if busy is None:
        return
    # A saturated input pipeline rarely drives busy all the way down: a starved GPU alternates between
    # bursts and stalls, so anything below "looks busy" counts, with more confidence below 0.5.
    low_busy = busy < settings.input_bound_max_busy
    clearly_low = busy < settings.low_busy
    pcie = figures.pcie_utilisation
    cpu_sat, thr = figures.cpu_saturation, figures.cpu_throttled
    # Without a limit, use above the request is bursting, not saturation: only a limit can starve.
    saturated = figures.cpu_reference_is_limit and cpu_sat is not None and cpu_sat >= settings.cpu_saturation
    cpu_bound = saturated or (thr is not None and thr >= settings.cpu_throttled_ratio)
    sawtooth = figures.busy_sawtooth is not None and figures.busy_sawtooth >= settings.sawtooth_strong
    anti = figures.gpu_cpu_correlation is not None and figures.gpu_cpu_correlation <= -0.3
    base = _base_confidence(figures, settings)
    compute_low, compute, compute_name = _compute_low(figures, settings)
    p50_bytes, p50_share = figures.pcie_bytes_p50, figures.pcie_utilisation_p50
    absolute_rate = p50_bytes is not None and p50_bytes >= settings.transfer_bound_bytes_per_s
    link_share = p50_share is not None and p50_share >= settings.transfer_bound_link_share
    sustained_transfer = absolute_rate and (link_share or not figures.pcie_link_known)
    link_saturated = pcie is not None and pcie >= settings.pcie_utilisation
    copying = pcie is not None and (link_saturated or (sustained_transfer and clearly_low)) and compute_low
    reading = figures.io_bytes_p50 is not None and figures.io_bytes_p50 >= settings.io_bytes_per_s
    plateau = (
        cpu_plateau_cores(figures, settings)
        if not cpu_bound and clearly_low and not copying and not reading and not no_kernels(figures, settings)
        else None
    )

    # R2: input pipeline CPU-bound (at the limit), or R2c: a CPU plateau below it
    if low_busy and cpu_bound and (pcie is None or pcie < settings.pcie_utilisation):
        confidence = (
            base * (0.8 if clearly_low else 0.7) + (0.1 if sawtooth else 0.0) + (0.05 if anti else 0.0)
        )
        reference = figures.cpu_reference_cores
        sat_text = (
            f"CPU use p95 {figures.cpu_usage_p95:.2f} of {reference:g} cores "
            f"({_pct(cpu_sat)} of the {'limit' if figures.cpu_reference_is_limit else 'request'})"
            if cpu_sat is not None and figures.cpu_usage_p95 is not None and reference
            else "CPU use unknown"
        )
        thr_text = f", CFS throttled in {_pct(thr)} of periods" if thr is not None else ""
        out.add(
            DiagnosisCode.INPUT_PIPELINE_CPU_BOUND,
            Severity.WARNING,
            confidence,
            f"Seen: GPU busy p50 {_pct(busy)} while {sat_text}{thr_text}"
            f"{'; busy alternates high/low (sawtooth)' if sawtooth else ''}. Meaning: the GPU waits for the "
            "CPU-side input pipeline (data loading/preprocessing); training typically needs 3–24 CPU cores "
            "per GPU. Change: raise the CPU request/limit together with the DataLoader workers (size them "
            "from os.sched_getaffinity(0) or the cgroup's cpu.max, not os.cpu_count()), pinned memory and "
            "prefetch.",
            {
                "gpuBusyP50": busy,
                "cpuUsageP95": figures.cpu_usage_p95,
                "cpuSaturation": cpu_sat,
                "cpuThrottledRatio": thr,
                "busySawtooth": figures.busy_sawtooth,
                "gpuCpuCorrelation": figures.gpu_cpu_correlation,
            },
        )
    elif plateau is not None:
        limit = figures.window.allocation.cpu_limit_cores
        process_text = (
            f"; its busiest process uses {figures.process_cpu_max_p50:.2f} cores (node agent)"
            if figures.process_cpu_max_p50 is not None
            else ""
        )
        limit_text = f" of a {limit:g}-core limit" if limit is not None else " (no CPU limit)"
        out.add(
            DiagnosisCode.INPUT_PIPELINE_CPU_BOUND,
            Severity.WARNING,
            base * (0.8 if figures.process_cpu_max_p50 is not None else (0.75 if sawtooth else 0.6)),
            f"Seen: container CPU flat at {figures.cpu_usage_p50 or 0.0:.2f} cores (p50; p95 "
            f"{figures.cpu_usage_p95 or 0.0:.2f}){limit_text}, not throttled, while GPU busy p50 is "
            f"{_pct(busy)}{'; busy alternates high/low (sawtooth)' if sawtooth else ''}"
            f"{process_text}. Meaning: {plateau} "
            f"process(es) pinned at one core each feed the GPU (a DataLoader with too few workers, or a "
            "single-threaded loop); the limit is not reached, so more cores alone change nothing. Change: "
            "more DataLoader workers (about the cores available minus one; read them from "
            "os.sched_getaffinity(0) or the cgroup's cpu.max, not os.cpu_count()), or CUDA Graphs for a "
            "launch-bound loop. Shrinking the GPU is withheld: fed, the job needs it.",
            {
                "gpuBusyP50": busy,
                "cpuUsageP50": figures.cpu_usage_p50,
                "cpuUsageP95": figures.cpu_usage_p95,
                "cpuPlateauCores": float(plateau),
                "processCpuMaxP50": figures.process_cpu_max_p50,
                "cpuThrottledRatio": thr,
                "busySawtooth": figures.busy_sawtooth,
            },
        )
    # R2b: fetch stall (storage / network I/O)
    io = figures.io_bytes_p50
    # R2b is an input-pipeline (training) pattern: a service's network receive is its request traffic.
    # The median, not p95, so counter resets and bursts do not pass for a sustained fetch stall. Reads
    # alone are normal (image training reads ~300 MB/s at busy 0.75): the GPU must also look starved.
    starved = clearly_low or sawtooth
    if (
        starved
        and not cpu_bound
        and plateau is None
        and not figures.is_serving
        and io is not None
        and io >= settings.io_bytes_per_s
    ):
        confidence = base * (0.6 if clearly_low else 0.5) + (0.1 if sawtooth else 0.0)
        out.add(
            DiagnosisCode.INPUT_PIPELINE_IO_BOUND,
            Severity.WARNING,
            confidence,
            f"Seen: GPU busy p50 {_pct(busy)}{' with a sawtooth' if sawtooth else ''}, CPU not saturated"
            f"{f' ({_pct(cpu_sat)} of its cores)' if cpu_sat is not None else ''}, while the pod reads "
            f"{io / 2**20:.0f} MiB/s (median) from disk and network. Meaning: the GPU probably waits for data "
            "to arrive (fetch stall). Missing for certainty: an I/O wait signal (cgroup io.pressure) or the "
            "volume's read ceiling. Change: cache the data set locally or in RAM, prefetch more, use faster "
            "storage.",
            {
                "gpuBusyP50": busy,
                "ioBytesP50": io,
                "cpuSaturation": cpu_sat,
                "busySawtooth": figures.busy_sawtooth,
            },
        )
    multi_gpu = figures.gpus_per_pod >= 2  # one distributed pod; never independent replicas
    # R4: NVLink per direction at the median; PCIe stands in only when its traffic is symmetric (a
    # collective), never for one-way host copies.
    link = figures.nvlink_utilisation
    link_name = "NVLink"
    if link is None and multi_gpu and figures.pcie_symmetric and figures.pcie_utilisation_p50 is not None:
        link, link_name = figures.pcie_utilisation_p50, "PCIe (symmetric, no NVLink series)"
    math_p50 = figures.math_p50
    pipes_idle = math_p50 < settings.communication_max_math_p50 if math_p50 is not None else compute_low
    link_busy = link is not None and link >= settings.nvlink_utilisation
    comm = multi_gpu and link_busy and pipes_idle
    tensor_p50 = figures.tensor_p50
    # R3: host <-> device transfer-bound (R3b: a sustained rate with idle compute; see thresholds).
    if pcie is not None and copying and not (comm and figures.nvlink_utilisation is None):
        out.add(
            DiagnosisCode.HOST_TRANSFER_BOUND,
            Severity.WARNING,
            base * (0.75 if link_saturated else 0.7),
            f"Seen: PCIe transfers at {_pct(pcie)} of link capacity (p95)"
            f"{f', {p50_bytes / 1e9:.1f} GB/s median' if p50_bytes is not None else ''} while {compute_name} "
            f"p50 is "
            f"{_pct(compute or 0.0)}. Meaning: the GPU waits for host↔device copies. Change: pinned memory "
            "and "
            "asynchronous copies, keep data resident on the GPU, larger batches; avoid co-locating "
            "transfer-heavy pods on MIG slices of one GPU (they share PCIe).",
            {"pcieUtilisation": pcie, "pcieBytesP50": p50_bytes, "computeP50": compute},
        )
    # R4: communication-bound
    if comm and link is not None:
        math_text = (
            f"the math pipes (tensor + FP16 + FP32) work only {_pct(math_p50)} of the time (p50)"
            if math_p50 is not None
            else f"{compute_name} p50 is {_pct(compute or 0.0)} (no pipe fields)"
        )
        nominal_text = "" if figures.nvlink_nominal_known else "; GPU model unknown, NVLink 4 nominal assumed"
        out.add(
            DiagnosisCode.COMMUNICATION_BOUND,
            Severity.WARNING,
            base
            * (0.8 if link >= settings.nvlink_utilisation * 1.4 else 0.7)
            * (1.0 if math_p50 is not None else settings.busy_as_sm_proxy_penalty)
            * (1.0 if figures.nvlink_nominal_known else 0.85),
            f"Seen: {figures.gpus_per_pod} GPUs per pod, {link_name} traffic at {_pct(link)} of the nominal "
            f"per-direction bandwidth (busier direction, p50){nominal_text} while {math_text}. Meaning: the "
            "GPUs wait on each other (communication and synchronisation; NCCL kernels count as SM-active, so "
            "SM activity does not show it). Change: pack the pods on one node / NVLink domain, overlap "
            "communication with compute, gradient accumulation or larger per-GPU batches; fewer, larger "
            "GPUs. Never MIG for this work (no P2P/NVLink on slices).",
            {
                "linkUtilisation": link,
                "mathPipesP50": math_p50,
                "tensorActiveP50": tensor_p50,
                "computeP50": compute,
                "gpusPerPod": float(figures.gpus_per_pod),
            },
        )


def _efficiency(figures: WorkloadFigures, settings: EngineSettings, out: _Builder) -> None:
    busy = figures.busy_p50
    if busy is None:
        return
    base = _base_confidence(figures, settings)
    memory_full = (
        figures.memory_share_p99 is not None and figures.memory_share_p99 >= settings.memory_full_share
    )
    # R5: busy but most SMs idle (launch-bound, tiny kernels). Occupancy alone never fires: large GEMM
    # tiles keep one block per SM by design, and DCGM says occupancy is no goal for compute-bound work.
    sm, occ = figures.sm_p50, figures.occupancy_p50
    communicating = figures.gpus_per_pod >= 2 and (figures.nvlink_utilisation or 0.0) >= 0.1
    if busy >= settings.high_busy and not memory_full and sm is not None and sm < settings.low_busy:
        low_occ = occ is not None and occ < settings.low_occupancy
        share_hint = (
            "; or share the GPU (MIG/MPS)"
            if figures.gpus_per_pod == 1
            and not communicating
            and figures.sm_p95 is not None
            and figures.sm_p95 < 0.4
            else ""
        )
        if not communicating:
            out.add(
                DiagnosisCode.LOW_OCCUPANCY,
                Severity.WARNING,
                base * (0.8 if low_occ or occ is None else 0.7),
                f"Seen: GPU busy p50 {_pct(busy)} but SM activity p50 {_pct(sm)}"
                f"{f', occupancy p50 {_pct(occ)}' if occ is not None else ''}. Meaning: kernels run all the "
                "time but keep most SMs idle (small kernels, small batch, launch-bound). Change: larger "
                f"(micro-)batch, CUDA Graphs / torch.compile to fuse kernels{share_hint}.",
                {"gpuBusyP50": busy, "smActiveP50": sm, "smOccupancyP50": occ},
            )
    # Without SM_ACTIVE (dcgm-exporter's default counters lack it) busy stands in for SM activity in R6
    # and R7, as in slice sizing: busy ≥ SM activity, so the rules see the GPU as at least this active, and
    # the findings carry the proxy penalty. R5 needs SM fields and is skipped (said in the finding).
    proxy = sm is None
    proxy_factor = settings.busy_as_sm_proxy_penalty if proxy else 1.0
    sm_or_busy = busy if proxy else sm
    compute_name = "GPU busy (no SM_ACTIVE; stands in for SM activity)" if proxy else "SM activity"
    skipped = (
        " LowOccupancy was not checked: it needs SM_ACTIVE / SM_OCCUPANCY, which this GPU does not export."
        if proxy and occ is None
        else ""
    )
    # R6: memory-bandwidth-bound
    dram, tensor = figures.dram_p95, figures.tensor_p95
    if (
        dram is not None
        and sm_or_busy is not None
        and dram >= settings.dram_bound
        and (tensor is None or tensor < settings.dram_bound_max_tensor)
        and sm_or_busy >= settings.low_busy
    ):
        confidence = base * 0.8 * (1.0 if tensor is not None else 0.8) * proxy_factor
        out.add(
            DiagnosisCode.MEMORY_BANDWIDTH_BOUND,
            Severity.INFO,
            confidence,
            f"Seen: DRAM activity p95 {_pct(dram)} (practical peak ~80%), tensor activity p95 "
            f"{_pct(tensor) if tensor is not None else 'unknown'}, {compute_name} p50 {_pct(sm_or_busy)}. "
            "Meaning: "
            "memory bandwidth, not compute, limits the work (typical of LLM decode and element-wise "
            "kernels). "
            "Change: batch more (continuous batching), quantise weights/KV cache, or a higher-bandwidth GPU; "
            f"do not shrink to a MIG slice (bandwidth scales with memory slices).{skipped}",
            {
                "dramActiveP95": dram,
                "tensorActiveP95": tensor,
                "smActiveP50": sm,
                "gpuBusyP50": busy if proxy else None,
            },
        )
    # R7: tensor cores unused
    fp32 = figures.fp32_p50
    has_tensor_cores = not any(
        is_pre_volta(g.observation.model_name) for g in figures.gpus
    ) and not is_pre_volta(figures.window.allocation.gpu_model)
    if (
        has_tensor_cores
        and sm_or_busy is not None
        and sm_or_busy >= (settings.high_busy if proxy else settings.low_busy)
        and tensor is not None
        and tensor < settings.no_tensor_max
        and (fp32 >= settings.no_tensor_min_fp32 if fp32 is not None else not proxy)
        and (dram is None or dram < settings.dram_bound)
    ):
        out.add(
            DiagnosisCode.NO_TENSOR_CORES,
            Severity.INFO,
            base * (0.8 if fp32 is not None else 0.5) * proxy_factor,
            f"Seen: {compute_name} p50 {_pct(sm_or_busy)}, tensor-core activity p95 {_pct(tensor)}"
            f"{f', FP32 pipe p50 {_pct(fp32)}' if fp32 is not None else ''}. Meaning: the math runs on the "
            "FP32 pipes and skips the tensor cores. Change: enable mixed precision (AMP with BF16/FP16) or "
            f"TF32.{skipped}",
            {
                "smActiveP50": sm,
                "gpuBusyP50": busy if proxy else None,
                "tensorActiveP95": tensor,
                "fp32ActiveP50": fp32,
            },
        )


def _sizing(figures: WorkloadFigures, settings: EngineSettings, out: _Builder) -> None:
    base = _base_confidence(figures, settings)
    need = sizing_need(figures, settings)
    share = figures.memory_share_p99
    # R8: oversized single-GPU work (never for multi-GPU or NVLink-heavy work)
    nvlink_quiet = (
        figures.nvlink_bytes_p95 is None or figures.nvlink_bytes_p95 < settings.nvlink_quiet_bytes_per_s
    )
    smallest = min((p.gpu_fraction for p in figures.profiles), default=None)
    current_profile = next((g.profile for g in figures.gpus if g.profile), None)
    already_smallest = (
        current_profile is not None and smallest is not None and current_profile.gpu_fraction <= smallest
    )
    if (
        need is not None
        and share is not None
        and figures.gpus_per_pod == 1
        and nvlink_quiet
        and share <= settings.oversized_max_memory_share
        and need.share_of_device <= settings.oversized_max_device_share
        and not already_smallest
    ):
        confidence = base * 0.85 * (settings.busy_as_sm_proxy_penalty if need.sm_from_busy else 1.0)
        if figures.is_serving:
            confidence *= _window_factor(figures.window.duration_seconds, settings.inference_window_seconds)
        device = (
            current_profile.name
            if current_profile
            else (figures.spec.display_name if figures.spec else "GPU")
        )
        cpu_hint = (
            " With this little use, a CPU deployment may also serve it."
            if (figures.busy_p95_max or 0.0) < 0.1 and need.memory_gib < 4
            else ""
        )
        if (figures.busy_p95_max or 0.0) < settings.idle_busy_p95:
            cpu_hint += (
                " Kernels still run (not idle, never released): the GPU mostly waits on the host between "
                "steps or requests; overlap host work with the GPU (prefetch, CUDA Graphs) if it is a job."
            )
        out.add(
            DiagnosisCode.OVERSIZED_GPU,
            Severity.WARNING,
            confidence,
            f"Seen: peak GPU memory {need.memory_gib:.1f} GiB of {figures.capacity_gib or 0:.0f} GiB "
            f"({_pct(share)}), {'GPU busy' if need.sm_from_busy else 'SM activity'} p95 "
            f"{_pct(figures.sm_p95 if figures.sm_p95 is not None else figures.busy_p95_max or 0.0)} on a "
            f"{device}. "
            f"Meaning: the work needs about {_pct(need.share_of_device)} of this device. Change: a smaller "
            "MIG "
            f"slice or a shared GPU (time-slicing/MPS).{cpu_hint}",
            {
                "memoryUsedMaxGiB": need.memory_gib,
                "memoryShareP99": share,
                "smActiveP95": figures.sm_p95,
                "gpuBusyP95": figures.busy_p95_max,
                "deviceShareNeeded": need.share_of_device,
            },
        )
    # R9: memory capacity. gpu-signals §4.3 R9: "p99 FB need ≥ 0.95 × capacity WITH OOM restarts". A pod
    # that crashes is killed before its allocation peaks in the samples, so restarts / OOM kills with
    # memory high (≥ memory_crash_share) are capacity evidence on their own; memory full with forced small
    # batches (busy high, SM low) still needs the full line.
    crashed = figures.restarts > 0 or figures.oom_killed
    if share is not None and (
        share >= settings.memory_full_share or (crashed and share >= settings.memory_crash_share)
    ):
        full = share >= settings.memory_full_share
        tiny_batch = (
            full
            and figures.busy_p50 is not None
            and figures.busy_p50 >= settings.high_busy
            and figures.sm_p50 is not None
            and figures.sm_p50 < settings.low_busy
        )
        if crashed or tiny_batch:
            symptom = (
                f"{figures.restarts} restart(s){' with OOM kills' if figures.oom_killed else ''}"
                if crashed
                else f"busy {_pct(figures.busy_p50 or 0.0)} but SM activity only {_pct(figures.sm_p50 or 0.0)} "
                "(forced small batches)"
            )
            out.add(
                DiagnosisCode.MEMORY_CAPACITY_BOUND,
                Severity.WARNING,
                base * ((0.8 if full else 0.7) if crashed else 0.65),
                f"Seen: p99 GPU memory {figures.fb_used_p99_gib or 0:.1f} GiB of "
                f"{figures.capacity_gib or 0:.0f} GiB "
                f"({_pct(share)}) and {symptom}. Meaning: GPU memory capacity, not compute, limits the work. "
                "Change: activation checkpointing, gradient accumulation or ZeRO; else a bigger-memory GPU "
                "(or "
                "MIG slice), and tensor parallelism across GPUs last.",
                {
                    "memoryShareP99": share,
                    "memoryUsedP99GiB": figures.fb_used_p99_gib,
                    "restarts": float(figures.restarts),
                    "oomKilled": 1.0 if figures.oom_killed else 0.0,
                },
            )


def _serving(figures: WorkloadFigures, settings: EngineSettings, out: _Builder) -> None:
    if not figures.is_serving:
        return
    base = _base_confidence(figures, settings) * _window_factor(
        figures.window.duration_seconds, settings.inference_window_seconds
    )
    queue_p50, queue_active = figures.queue_length_p50, figures.queue_active_fraction
    sustained = (queue_active is not None and queue_active >= settings.queue_sustained_fraction) or (
        queue_active is None and queue_p50 is not None and queue_p50 > 0
    )
    # Latency spikes at peak (SPEC §1): a queue at the p95 (present in ≥ 5 % of the window) while the GPUs
    # saturate at those times is the same shortage, seen at the peaks only: lower confidence.
    at_peaks = not sustained and figures.queue_length_p95 is not None and figures.queue_length_p95 > 0
    saturation = figures.sm_p95 if figures.sm_p95 is not None else figures.busy_p95
    saturation_name = "SM activity" if figures.sm_p95 is not None else "GPU busy"
    hpa = figures.window.allocation.hpa
    if (sustained or at_peaks) and saturation is not None and saturation >= settings.serving_saturation:
        share = _pct(queue_active) if queue_active is not None else ("the peaks" if at_peaks else "most")
        out.add(
            DiagnosisCode.UNDER_REPLICATED,
            Severity.WARNING,
            base
            * (0.85 if figures.sm_p95 is not None else 0.7)
            * (settings.queue_at_peaks_confidence if at_peaks else 1.0),
            f"Seen: requests queue for {share} of the window "
            f"(queue p50 {queue_p50 or 0:.1f}, p95 {figures.queue_length_p95 or 0:.1f}"
            f"{', at the peaks only' if at_peaks else ''}) while {saturation_name} p95 is {_pct(saturation)} "
            f"across {figures.replicas} replica(s). Meaning: too few replicas; latency grows at peak. Change: "
            f"{'raise the HPA maximum (it owns the replica count)' if hpa else 'add replicas'}; scale on SM "
            "activity or queue length, not GPU_UTIL.",
            {
                "queueP50": queue_p50,
                "queueP95": figures.queue_length_p95,
                "queueActiveFraction": queue_active,
                "saturationP95": saturation,
                "replicas": float(figures.replicas),
            },
        )
        return
    queue_quiet = figures.queue_length_p95 is None or figures.queue_length_p95 < 1.0
    # R11 is fleet-level: a few replicas that peak do not make a mostly idle fleet right-sized.
    fleet = figures.busy_p95
    needed = fleet_replicas_needed(figures, settings.replica_target_utilisation)
    busy_gpus = [g.busy for g in figures.gpus if g.busy is not None]
    idle_share = (
        sum(1 for b in busy_gpus if b.p50 < settings.active_busy) / len(busy_gpus) if busy_gpus else None
    )
    # A p95 alone flips on a few burst minutes (0.22 vs 0.2 with a median of 0.12): a low fleet median
    # also counts when the fleet, sized on its p95, fits on at most half its replicas.
    half_suffices = needed is not None and needed * 2 <= figures.replicas
    fleet_median = figures.busy_p50
    low_fleet = fleet is not None and fleet < settings.over_replicated_busy_p95
    quiet_median = (
        fleet_median is not None and fleet_median < settings.over_replicated_busy_p50 and half_suffices
    )
    idle_fleet = (
        idle_share is not None and idle_share >= settings.over_replicated_idle_share and half_suffices
    )
    if (
        figures.replicas >= 2
        and fleet is not None
        and (low_fleet or quiet_median or idle_fleet)
        and queue_quiet
    ):
        out.add(
            DiagnosisCode.OVER_REPLICATED,
            Severity.INFO,
            base * (0.8 if low_fleet else 0.7),
            f"Seen: {figures.replicas} replicas, fleet busy p95 {_pct(fleet)} (replicas' p95 averaged; "
            f"busiest {_pct(figures.busy_p95_max or 0.0)}), fleet busy p50 {_pct(fleet_median or 0.0)}, "
            f"{_pct(idle_share or 0.0)} of replicas idle at the median, and "
            f"{'no queue' if figures.queue_length_p95 is not None else 'no queue signal'}"
            f"{f', {figures.requests_per_s:.1f} requests/s' if figures.requests_per_s is not None else ''}. "
            f"Meaning: the traffic fits on about {needed} replica(s) at "
            f"{_pct(settings.replica_target_utilisation)} saturation. Change: "
            f"{'lower the HPA minimum' if hpa else 'scale in'}, or consolidate onto MIG slices / time-sliced "
            "GPUs.",
            {
                "fleetBusyP95": fleet,
                "fleetBusyP50": fleet_median,
                "gpuBusyP95Max": figures.busy_p95_max,
                "idleReplicaShare": idle_share,
                "replicasNeeded": float(needed) if needed is not None else None,
                "replicas": float(figures.replicas),
                "queueP95": figures.queue_length_p95,
            },
        )


#: Rules whose figure lies within this share of its threshold (on the quiet side) count as near misses.
_NEAR_THRESHOLD = 0.1


def _near_misses(figures: WorkloadFigures, settings: EngineSettings) -> list[str]:
    """Rules that did not fire but whose figure is within 10 % of the threshold: the verdict is fragile."""
    checks: list[tuple[str, float | None, float]] = [
        ("CPU saturation", figures.cpu_saturation, settings.cpu_saturation),
        ("CPU throttling", figures.cpu_throttled, settings.cpu_throttled_ratio),
        ("PCIe p95 share of the link", figures.pcie_utilisation, settings.pcie_utilisation),
        ("GPU memory p99 share", figures.memory_share_p99, settings.memory_full_share),
        ("DRAM activity p95", figures.dram_p95, settings.dram_bound),
    ]
    if figures.total_gpus >= 2:
        checks.append(("NVLink p95 share", figures.nvlink_utilisation, settings.nvlink_utilisation))
    if not figures.is_serving:
        checks.append(("file-system + network read median", figures.io_bytes_p50, settings.io_bytes_per_s))
    near = [
        f"{name} {value:.3g} vs {threshold:.3g}"
        for name, value, threshold in checks
        if value is not None and threshold > 0 and threshold * (1 - _NEAR_THRESHOLD) <= value < threshold
    ]
    # Rules that fire below their line: SM activity (R5 while busy looks high) and the fleet's load (R11).
    below: list[tuple[str, float | None, float]] = [
        ("SM activity p50", figures.sm_p50, settings.low_busy),
    ]
    if figures.is_serving and figures.replicas >= 2:
        below.append(("fleet busy p95", figures.busy_p95, settings.over_replicated_busy_p95))
    near.extend(
        f"{name} {value:.3g} vs {threshold:.3g}"
        for name, value, threshold in below
        if value is not None and threshold > 0 and threshold <= value <= threshold * (1 + _NEAR_THRESHOLD)
    )
    return near


def _healthy(figures: WorkloadFigures, settings: EngineSettings, out: _Builder) -> None:
    """Nothing fired: say what was measured, what was missing and which verdicts were close."""
    figures_text = [f"GPU busy p50 {_pct(figures.busy_p50 or 0.0)}, p95 {_pct(figures.busy_p95 or 0.0)}"]
    missing: list[str] = []
    if figures.sm_p50 is not None:
        figures_text.append(f"SM activity p50 {_pct(figures.sm_p50)}")
    else:
        missing.append("SM_ACTIVE")
    if figures.tensor_p95 is not None:
        figures_text.append(f"tensor activity p95 {_pct(figures.tensor_p95)}")
    else:
        missing.append("tensor-pipe activity")
    if figures.cpu_saturation is not None:
        figures_text.append(f"CPU p95 at {_pct(figures.cpu_saturation)} of its cores")
    else:
        missing.append("CPU use against a CPU limit/request")
    if figures.memory_share_p99 is not None:
        figures_text.append(
            f"GPU memory p99 {figures.fb_used_p99_gib or 0.0:.1f} GiB ({_pct(figures.memory_share_p99)})"
        )
    else:
        missing.append("GPU memory used")
    near = _near_misses(figures, settings)
    confidence = _base_confidence(figures, settings) * 0.9
    if not figures.profiling_fields:
        confidence *= 0.8
    if len(missing) > (0 if figures.profiling_fields else 1):
        confidence *= 0.9
    if near:
        confidence *= 0.85
    notes = ""
    if not figures.profiling_fields:
        notes += " No SM_ACTIVE: LowOccupancy was not checked, and busy stood in for SM activity elsewhere."
    if missing:
        notes += f" Missing: {', '.join(missing)}."
    if near:
        notes += f" Near a threshold (within 10 %): {'; '.join(near)}."
    out.add(
        DiagnosisCode.HEALTHY,
        Severity.INFO,
        confidence,
        f"Seen: {', '.join(figures_text)}; no rule fired. Meaning: no waste pattern found. "
        f"Change: nothing.{notes}",
        {
            "gpuBusyP50": figures.busy_p50,
            "gpuBusyP95": figures.busy_p95,
            "smActiveP50": figures.sm_p50,
            "tensorActiveP95": figures.tensor_p95,
            "cpuSaturation": figures.cpu_saturation,
            "memoryShareP99": figures.memory_share_p99,
            "nearThresholds": float(len(near)),
        },
    )


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Findings in rule order and the primary code chosen from them."""

    primary: DiagnosisCode
    confidence: float
    findings: tuple[Finding, ...]
    figures: WorkloadFigures


def choose_primary(findings: Iterable[Finding]) -> Finding | None:
    """The finding whose code comes first in `PRIMARY_ORDER` (ties: higher confidence)."""
    ordered = sorted(findings, key=lambda f: (_RANK[f.code], -f.confidence, f.message))
    return ordered[0] if ordered else None


def diagnose_figures(
    figures: WorkloadFigures, settings: EngineSettings, now: datetime | None = None
) -> Diagnosis:
    """Run the rules on pre-computed figures (the engine reuses the figures for actions and savings)."""
    out = _Builder()
    _health(figures, settings, out)
    problems = _data_problems(figures, settings, now)
    if problems:
        out.add(
            DiagnosisCode.INSUFFICIENT_DATA,
            Severity.INFO,
            0.9,
            f"Seen: {'; '.join(problems)}. Meaning: the window cannot be trusted for sizing. Change: nothing "
            "yet; fix the metric source or wait for a longer, complete window.",
            {"busySamples": float(figures.busy_samples), "coverage": figures.coverage},
        )
    if not out.findings:
        for rule in (_idle, _data_path, _efficiency, _sizing, _serving):
            rule(figures, settings, out)
        if not out.findings:
            _healthy(figures, settings, out)
    findings = tuple(sorted(out.findings, key=lambda f: (_RANK[f.code], -f.confidence, f.message)))
    primary = findings[0]
    return Diagnosis(primary.code, primary.confidence, findings, figures)


def diagnose(
    window: WorkloadWindow,
    settings: EngineSettings | None = None,
    mig_tables: MigTables | None = None,
    now: datetime | None = None,
) -> list[Finding]:
    """All findings for a window, primary first (rule order)."""
    effective = settings or EngineSettings()
    return list(diagnose_figures(summarise(window, mig_tables), effective, now).findings)
