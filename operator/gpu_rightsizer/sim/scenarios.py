"""Simulated GPU workloads: for a pod at time t, the value of every series a real cluster exports.

A `Scenario` names a bottleneck (and the diagnosis it should produce) plus the workload's allocation.
`pod_series()` gives the dcgm-exporter, cAdvisor and serving series of one pod at one instant;
`cluster_series()` adds the kube-state-metrics series (owners, requests/limits, node labels, replicas).
Both read the pod's *actual* resources from `PodContext`, not the scenario's defaults, so a change the
operator makes shows in the signals: an input-pipeline-bound pod gets busier when its CPU limit rises,
an under-replicated service's queue drains when replicas are added.

Deterministic and stateless: noise is a hash of (seed, entity, metric, 10-second tick) and counters
are closed-form integrals of their rates since the pod started, so the same call gives the same value
in backfill and in live mode, and a live exporter needs no memory between scrapes. (An in-place CPU
resize changes a counter's slope from the pod's start, which a reader sees as a rate spike or a
counter reset; recreated pods start fresh.)

Pure: no I/O, no third-party imports.
"""

from __future__ import annotations

import math
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum

from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.codes import DiagnosisCode

GIB = 1024.0**3


class Shape(StrEnum):
    """The behaviour a scenario simulates; the value is the `sim.gpurightsizer.io/scenario` annotation."""

    IDLE = "idle"
    INPUT_CPU_BOUND = "input-cpu-bound"
    INPUT_IO_BOUND = "input-io-bound"
    HOST_TRANSFER_BOUND = "host-transfer-bound"
    COMMUNICATION_BOUND = "communication-bound"
    LOW_OCCUPANCY = "low-occupancy"
    MEMORY_BANDWIDTH_BOUND = "memory-bandwidth-bound"
    NO_TENSOR_CORES = "no-tensor-cores"
    OVERSIZED = "oversized"
    MEMORY_CAPACITY_BOUND = "memory-capacity-bound"
    UNDER_REPLICATED = "under-replicated"
    OVER_REPLICATED = "over-replicated"
    THROTTLED = "throttled"
    XID_FAULT = "xid-fault"
    HEALTHY = "healthy"
    INSUFFICIENT_DATA = "insufficient-data"


EXPECTED_CODE: dict[Shape, DiagnosisCode] = {
    Shape.IDLE: DiagnosisCode.IDLE_ALLOCATION,
    Shape.INPUT_CPU_BOUND: DiagnosisCode.INPUT_PIPELINE_CPU_BOUND,
    Shape.INPUT_IO_BOUND: DiagnosisCode.INPUT_PIPELINE_IO_BOUND,
    Shape.HOST_TRANSFER_BOUND: DiagnosisCode.HOST_TRANSFER_BOUND,
    Shape.COMMUNICATION_BOUND: DiagnosisCode.COMMUNICATION_BOUND,
    Shape.LOW_OCCUPANCY: DiagnosisCode.LOW_OCCUPANCY,
    Shape.MEMORY_BANDWIDTH_BOUND: DiagnosisCode.MEMORY_BANDWIDTH_BOUND,
    Shape.NO_TENSOR_CORES: DiagnosisCode.NO_TENSOR_CORES,
    Shape.OVERSIZED: DiagnosisCode.OVERSIZED_GPU,
    Shape.MEMORY_CAPACITY_BOUND: DiagnosisCode.MEMORY_CAPACITY_BOUND,
    Shape.UNDER_REPLICATED: DiagnosisCode.UNDER_REPLICATED,
    Shape.OVER_REPLICATED: DiagnosisCode.OVER_REPLICATED,
    Shape.THROTTLED: DiagnosisCode.THROTTLED,
    Shape.XID_FAULT: DiagnosisCode.HARDWARE_FAULT,
    Shape.HEALTHY: DiagnosisCode.HEALTHY,
    Shape.INSUFFICIENT_DATA: DiagnosisCode.INSUFFICIENT_DATA,
}


@dataclass(frozen=True)
class GPUModel:
    """What the simulator needs of a GPU model (GFD product label and the DCGM `modelName`)."""

    product: str
    model_name: str
    memory_mib: float
    max_sm_clock_mhz: float
    max_power_watts: float
    pcie_bytes_per_s: float  # one direction
    nvlink_bytes_per_s: float  # nominal bidirectional; 0 = no NVLink


GPU_MODELS: dict[str, GPUModel] = {
    m.product: m
    for m in (
        GPUModel("NVIDIA-H100-80GB-HBM3", "NVIDIA H100 80GB HBM3", 81559, 1980, 700, 63.0e9, 900e9),
        GPUModel("NVIDIA-H200", "NVIDIA H200", 143771, 1980, 700, 63.0e9, 900e9),
        GPUModel("NVIDIA-A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", 81920, 1410, 400, 31.5e9, 600e9),
        GPUModel("NVIDIA-A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", 40960, 1410, 400, 31.5e9, 600e9),
        GPUModel("NVIDIA-L4", "NVIDIA L4", 23034, 2040, 72, 31.5e9, 0.0),
    )
}
DEFAULT_GPU_MODEL = "NVIDIA-H100-80GB-HBM3"


class DataDefect(StrEnum):
    """How the data of an insufficient-data scenario is broken."""

    NONE = "none"
    SHORT = "short"  # the pod's history covers only a few minutes of the window
    BLANK = "blank"  # every GPU field is a DCGM blank sentinel (profiling unsupported)
    NAN = "nan"  # every GPU field is NaN


@dataclass(frozen=True)
class Scenario:
    """One simulated workload: its bottleneck, its allocation and the knobs of its shape."""

    name: str
    shape: Shape
    seed: int = 0
    namespace: str = "default"
    kind: str = "Deployment"  # Deployment, StatefulSet, Job or Pod
    workload_type: str = "training"  # training | inference
    gpu_model: str = DEFAULT_GPU_MODEL
    gpu_count: int = 1
    mig_profile: str | None = None  # e.g. "3g.40gb": each pod gets one slice of its own GPU
    pods_per_gpu: int = 1  # > 1: time-slicing, pods share a device (device series are duplicated)
    cpu_request: float = 4.0
    cpu_limit: float | None = 8.0
    memory_request_bytes: float = 32 * GIB
    memory_limit_bytes: float | None = 64 * GIB
    replicas: int = 1
    #: Cores the input pipeline needs to keep one GPU fully busy (Mohan et al.: 3-24 per GPU).
    cpu_demand_per_gpu: float = 12.0
    #: Serving: total requests/s the service receives (daily mean) and what one replica can serve.
    traffic_qps: float = 0.0
    replica_capacity_qps: float = 20.0
    #: Share of the GPU's memory the model occupies.
    memory_share: float = 0.5
    xid: int = 79
    xid_after_seconds: float = 1200.0
    defect: DataDefect = DataDefect.NONE
    short_history_seconds: float = 300.0
    extra_labels: dict[str, str] = field(default_factory=dict)
    # --- realism knobs: the neutral defaults leave every series exactly as the shape makes it ---------
    #: Serving traffic: relative amplitude and period of the daily wave (a short period puts a whole
    #: "day", trough included, inside one observation window).
    traffic_amplitude: float = 0.2
    traffic_period_seconds: float = 86400.0
    #: Levels fields (see `Levels`) set to a fixed value, then scaled, before noise and bursts: values
    #: placed near a rule's threshold, or a decoy's extra load.
    level_overrides: dict[str, float] = field(default_factory=dict)
    level_scales: dict[str, float] = field(default_factory=dict)
    #: Jitter on the activity levels per 10-second tick: multiplicative (shared by the GPU activity
    #: fields, as real counters move together, plus half as much per field) and additive (per 0..1 ratio).
    noise_amplitude: float = 0.0
    noise_additive: float = 0.0
    #: Bursts: each `burst_seconds` block is a burst with this probability; during a burst the GPU
    #: activity, PCIe and CPU levels are multiplied by `burst_scale` (> 1 spikes, < 1 dips).
    burst_probability: float = 0.0
    burst_scale: float = 2.0
    burst_seconds: float = 60.0
    #: dcgm-exporter series never exported (e.g. `NO_SM_FIELDS`: the default counters CSV lacks
    #: SM_ACTIVE/SM_OCCUPANCY; `PROFILING_FIELDS`: no DCGM profiling module at all, GPU_UTIL only).
    dropped_metrics: frozenset[str] = frozenset()
    #: Missed dcgm-exporter scrapes: each `gap_seconds` block is missing with this probability.
    gap_fraction: float = 0.0
    gap_seconds: float = 300.0
    #: Node names of the backfilled pods: "<prefix>-<replica>" (one node for time-sliced pods). None =
    #: hashed from the scenario name, where two workloads of one library may land on one GPU.
    node_prefix: str | None = None
    #: The dcgm-exporter label style of this workload's node; None = the caller's style.
    label_style: LabelStyle | None = None
    #: The diagnosis a careful expert gives from the numbers when it differs from the shape's (decoys).
    expected_code: DiagnosisCode | None = None
    #: One line: why this scenario carries its expected code.
    why: str = ""

    def __post_init__(self) -> None:
        level_fields = {f.name for f in fields(Levels)}
        unknown = sorted((set(self.level_overrides) | set(self.level_scales)) - level_fields)
        if unknown:
            raise ValueError(f"scenario {self.name!r}: unknown level field(s) {', '.join(unknown)}")
        for knob in ("noise_amplitude", "noise_additive", "burst_probability", "gap_fraction"):
            amount = getattr(self, knob)
            if not 0.0 <= amount <= 1.0 or math.isnan(amount):
                raise ValueError(f"scenario {self.name!r}: {knob} must be in [0, 1], got {amount}")
        for knob in ("burst_seconds", "gap_seconds", "traffic_period_seconds"):
            if not getattr(self, knob) > 0:
                raise ValueError(f"scenario {self.name!r}: {knob} must be positive")

    @property
    def expected(self) -> DiagnosisCode:
        """The primary diagnosis this scenario should produce."""
        return self.expected_code or EXPECTED_CODE[self.shape]

    @property
    def gpu(self) -> GPUModel:
        """The GPU model spec."""
        return GPU_MODELS[self.gpu_model]

    @property
    def gpu_resource(self) -> str:
        """The Kubernetes resource the pods request."""
        if self.mig_profile:
            return f"nvidia.com/mig-{self.mig_profile}"
        return "nvidia.com/gpu"

    @property
    def device_memory_mib(self) -> float:
        """Memory of one allocated device: the whole GPU, or the MIG slice."""
        if self.mig_profile:
            return mig_memory_mib(self.mig_profile)
        return self.gpu.memory_mib

    def with_(self, **changes: object) -> Scenario:
        """A copy with some fields changed (variants of the library)."""
        return replace(self, **changes)  # type: ignore[arg-type]


def mig_memory_mib(profile: str) -> float:
    """Memory of a MIG profile from its name ('3g.40gb' → 40 GiB minus the usual 1.25 % overhead)."""
    gigabytes = float(profile.split(".")[1].split("gb", maxsplit=1)[0].split("+", maxsplit=1)[0])
    return gigabytes * 1024.0 * 0.9875


@dataclass(frozen=True)
class PodContext:
    """What one pod actually has now (read from the cluster in live mode, from the scenario in backfill)."""

    namespace: str
    pod: str
    workload: str
    node: str
    started_at: float
    pod_index: int = 0
    container: str = "main"
    cpu_request: float | None = None
    cpu_limit: float | None = None
    memory_request_bytes: float | None = None
    memory_limit_bytes: float | None = None
    gpu_count: int = 1
    replicas: int = 1  # current replica count of the workload (serving load is split across them)
    owner_kind: str = "Deployment"
    owner_name: str | None = None  # the pod's direct controller (ReplicaSet name for Deployments)
    gpu_resource: str = "nvidia.com/gpu"


@dataclass(frozen=True)
class LabelStyle:
    """Which label names dcgm-exporter series carry (gpu-signals §0.5, §0.6)."""

    exported_pod_labels: bool = False  # pod/namespace/container arrive as exported_* (honor_labels false)
    hostname_label: str = "Hostname"  # "Hostname" (released tags) or "hostname" (main after d5e5f51)


#: (metric name, labels, value, is_counter)
SeriesSample = tuple[str, dict[str, str], float, bool]


# --- deterministic noise and closed-form counters -------------------------------------------------
_MASK64 = (1 << 64) - 1
_TICK_SECONDS = 10.0


def _mix(value: int) -> int:
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def noise(seed: int, entity: str, metric: str, t: float) -> float:
    """Uniform pseudo-random number in [0, 1), fixed for (seed, entity, metric, 10-second tick)."""
    key = _mix(seed & _MASK64)
    key = _mix(key ^ zlib.crc32(entity.encode()))
    key = _mix(key ^ zlib.crc32(metric.encode()))
    key = _mix(key ^ (math.floor(t / _TICK_SECONDS) & _MASK64))
    return key / float(1 << 64)


def _jitter(value: float, u: float, amount: float = 0.05) -> float:
    return value * (1.0 + amount * (2.0 * u - 1.0))


def _wave_integral(rate: float, amplitude: float, period: float, phase: float, t0: float, t: float) -> float:
    """∫ rate·(1 + amplitude·sin(2πs/period + phase)) ds from t0 to t (monotonic when amplitude ≤ 1)."""
    omega = 2.0 * math.pi / period
    wave = (math.cos(omega * t0 + phase) - math.cos(omega * t + phase)) / omega
    return rate * ((t - t0) + amplitude * wave)


def _wave(rate: float, amplitude: float, period: float, phase: float, t: float) -> float:
    return rate * (1.0 + amplitude * math.sin(2.0 * math.pi * t / period + phase))


def _phase(seed: int, entity: str) -> float:
    return 2.0 * math.pi * noise(seed, entity, "phase", 0.0)


# --- the levels of one pod at one instant ---------------------------------------------------------
@dataclass
class Levels:
    """Mean levels of every signal of one pod's GPUs and containers at one instant (before noise)."""

    busy: float = 0.0
    sm: float = 0.0
    occupancy: float = 0.0
    tensor: float = 0.0
    fp32: float = 0.0
    fp16: float = 0.0
    dram: float = 0.0
    pcie_rx: float = 0.0
    pcie_tx: float = 0.0
    nvlink_each_way: float = 0.0
    memory_share: float = 0.5
    cpu_cores: float = 0.5  # mean CPU usage rate
    throttled_ratio: float = 0.0
    fs_read: float = 1e6
    fs_write: float = 1e5
    net_rx: float = 1e6
    net_tx: float = 1e6
    working_set_bytes: float = 4 * GIB
    qps: float | None = None  # per pod; None = not a service
    queue: float = 0.0
    queue_ms: float = 0.0
    clock_events: int = 0
    sm_clock_share: float = 0.97
    temperature: float = 55.0
    xid: int = 0
    restarts_per_hour: float = 0.0


def _cpu_limit(ctx: PodContext) -> float:
    return ctx.cpu_limit if ctx.cpu_limit is not None else 64.0


def _serving_phase_width(scenario: Scenario) -> float:
    """SM / GR of a server's GPU phases: a small model on a big GPU launches narrow kernels.

    Measured on an H200 (tests/fixtures/h200): tiny-server 0.43, tiny-inference 0.50; a loaded server's
    batched kernels fill the GPU (0.85).
    """
    return 0.45 if scenario.shape is Shape.OVERSIZED else 0.85


def _serving_levels(scenario: Scenario, ctx: PodContext, t: float) -> Levels:
    """A service whose load is the diurnal traffic split across the replicas that exist now."""
    replicas = max(1, ctx.replicas)
    total = _wave(
        scenario.traffic_qps,
        scenario.traffic_amplitude,
        scenario.traffic_period_seconds,
        _phase(scenario.seed, ctx.workload),
        t,
    )
    per_pod = total / replicas
    load = per_pod / scenario.replica_capacity_qps
    busy = min(0.97, 0.95 * load)
    queue = max(0.0, 40.0 * (load - 0.9))
    return Levels(
        busy=busy,
        sm=busy * _serving_phase_width(scenario),
        occupancy=0.3 if busy > 0.05 else 0.02,
        tensor=busy * 0.45,
        fp16=busy * 0.3,
        fp32=busy * 0.05,
        dram=busy * 0.42,
        pcie_rx=2e8 * load,
        pcie_tx=1e8 * load,
        memory_share=scenario.memory_share,
        cpu_cores=min(_cpu_limit(ctx) * 0.6, 0.3 + 0.05 * per_pod),
        net_rx=2e5 * per_pod + 1e4,
        net_tx=4e5 * per_pod + 1e4,
        qps=per_pod,
        queue=queue,
        queue_ms=queue * 60.0,
    )


#: Level fields that are 0..1 ratios of the GPU's activity (noise and bursts move them together).
_ACTIVITY_FIELDS = ("busy", "sm", "occupancy", "tensor", "fp32", "fp16", "dram")
#: Level fields in bytes/s or cores that bursts and multiplicative noise also move.
_RATE_FIELDS = ("pcie_rx", "pcie_tx", "nvlink_each_way", "cpu_cores")
#: dcgm-exporter's default counters CSV lacks the SM fields (gpu-signals §1.2).
NO_SM_FIELDS: frozenset[str] = frozenset({mn.DCGM_SM_ACTIVE, mn.DCGM_SM_OCCUPANCY})
#: Every DCGM profiling field: a GPU or exporter without the profiling module leaves GPU_UTIL only.
PROFILING_FIELDS: frozenset[str] = frozenset(
    {
        mn.DCGM_GR_ENGINE_ACTIVE,
        mn.DCGM_SM_ACTIVE,
        mn.DCGM_SM_OCCUPANCY,
        mn.DCGM_TENSOR_ACTIVE,
        mn.DCGM_FP32_ACTIVE,
        mn.DCGM_FP16_ACTIVE,
        mn.DCGM_DRAM_ACTIVE,
        mn.DCGM_PCIE_RX_BYTES,
        mn.DCGM_PCIE_TX_BYTES,
        mn.DCGM_NVLINK_RX_BYTES,
        mn.DCGM_NVLINK_TX_BYTES,
    }
)


def _has_realism_knobs(scenario: Scenario) -> bool:
    return bool(
        scenario.level_overrides
        or scenario.level_scales
        or scenario.noise_amplitude
        or scenario.noise_additive
        or scenario.burst_probability
    )


def _knob_entity(scenario: Scenario, ctx: PodContext) -> str:
    """Noise key of the pod's activity: time-sliced pods share their device, and so its jitter."""
    if scenario.pods_per_gpu > 1:
        return f"{ctx.node}/gpu{ctx.pod_index // scenario.pods_per_gpu}"
    return ctx.pod


def in_burst(scenario: Scenario, ctx: PodContext, t: float) -> bool:
    """Whether the pod is in a burst at time t (fixed per `burst_seconds` block)."""
    if scenario.burst_probability <= 0.0:
        return False
    block = math.floor(t / scenario.burst_seconds) * _TICK_SECONDS
    return noise(scenario.seed, _knob_entity(scenario, ctx), "knob-burst", block) < scenario.burst_probability


def scrape_missing(scenario: Scenario, ctx: PodContext, t: float) -> bool:
    """Whether the pod's dcgm-exporter scrape at time t is missing (fixed per `gap_seconds` block)."""
    if scenario.gap_fraction <= 0.0:
        return False
    block = math.floor(t / scenario.gap_seconds) * _TICK_SECONDS
    return noise(scenario.seed, ctx.node, "knob-gap", block) < scenario.gap_fraction


def _apply_realism(scenario: Scenario, ctx: PodContext, t: float, lv: Levels) -> None:
    """Overrides, scales, noise and bursts on top of the shape's levels (in place)."""
    for name, value in scenario.level_overrides.items():
        current = getattr(lv, name)
        setattr(lv, name, int(value) if isinstance(current, int) and not isinstance(current, bool) else value)
    for name, factor in scenario.level_scales.items():
        current = getattr(lv, name)
        if current is not None:
            setattr(lv, name, current * factor)
    seed, entity = scenario.seed, _knob_entity(scenario, ctx)
    if scenario.noise_amplitude or scenario.noise_additive:
        amplitude = scenario.noise_amplitude
        common = amplitude * (2.0 * noise(seed, entity, "knob-noise", t) - 1.0)
        for name in _ACTIVITY_FIELDS + _RATE_FIELDS:
            own = 0.5 * amplitude * (2.0 * noise(seed, entity, f"knob-noise/{name}", t) - 1.0)
            shared = common if name in _ACTIVITY_FIELDS else 0.0
            value = max(0.0, getattr(lv, name) * (1.0 + shared + own))
            # a profiling counter that reads exactly 0 (no kernel) has no noise to add to
            if name in _ACTIVITY_FIELDS and scenario.noise_additive and getattr(lv, name) > 0:
                value += scenario.noise_additive * (2.0 * noise(seed, entity, f"knob-add/{name}", t) - 1.0)
            setattr(lv, name, value)
    if in_burst(scenario, ctx, t):
        for name in _ACTIVITY_FIELDS + _RATE_FIELDS:
            setattr(lv, name, getattr(lv, name) * scenario.burst_scale)
    for name in _ACTIVITY_FIELDS:
        setattr(lv, name, min(1.0, max(0.0, getattr(lv, name))))
    lv.cpu_cores = min(lv.cpu_cores, _cpu_limit(ctx))


def levels(scenario: Scenario, ctx: PodContext, t: float) -> Levels:
    """Mean signal levels of the pod at time t, shaped by the scenario and the pod's actual resources."""
    lv = _shape_levels(scenario, ctx, t)
    if _has_realism_knobs(scenario):
        _apply_realism(scenario, ctx, t, lv)
    return lv


def _shape_levels(scenario: Scenario, ctx: PodContext, t: float) -> Levels:
    """The shape's levels alone (no overrides, noise or bursts)."""
    shape = scenario.shape
    entity = ctx.pod
    u = noise(scenario.seed, entity, "phase-coin", t)
    limit = _cpu_limit(ctx)
    gpus = max(1, ctx.gpu_count)
    if shape is Shape.IDLE:
        # Measured on an H200 holding 80 GiB and running nothing: GR ≈ 6e-5, SM exactly 0, CPU 0.01
        # core, PCIe ≈ 1 MB/s (tests/fixtures/h200/idle-holder).
        return Levels(
            busy=0.00006,
            sm=0.0,
            occupancy=0.0,
            memory_share=scenario.memory_share * 0.3,
            cpu_cores=0.01,
            fs_read=1e3,
            net_rx=2e3,
            net_tx=2e3,
            working_set_bytes=1.5 * GIB,
            qps=0.0 if scenario.workload_type == "inference" else None,
        )
    if shape is Shape.INPUT_CPU_BOUND:
        need = scenario.cpu_demand_per_gpu * gpus
        fed = min(1.0, 0.95 * limit / need)
        swing = 0.45 * (1.0 - fed) * (1.0 if u < 0.5 else -1.0)  # stall / burst alternation
        busy = max(0.0, 0.93 * fed * (1.0 + swing))
        return Levels(
            busy=busy,
            sm=busy * 0.85,
            occupancy=0.35,
            tensor=busy * 0.5,
            fp16=busy * 0.3,
            fp32=busy * 0.1,
            dram=busy * 0.4,
            pcie_rx=3e9 * fed,
            pcie_tx=2e8,
            cpu_cores=min(limit * 0.98, need),
            throttled_ratio=0.6 if need > limit else 0.03,
            fs_read=6e7,
            net_rx=1e7,
            working_set_bytes=min(24 * GIB, 0.6 * (ctx.memory_limit_bytes or 64 * GIB)),
        )
    if shape is Shape.INPUT_IO_BOUND:
        fed = 0.3
        swing = 0.45 * (1.0 if u < 0.5 else -1.0)
        busy = 0.93 * fed * (1.0 + swing)
        return Levels(
            busy=busy,
            sm=busy * 0.85,
            occupancy=0.35,
            tensor=busy * 0.5,
            fp16=busy * 0.3,
            dram=busy * 0.4,
            pcie_rx=1.5e9,
            # loaders that wait on reads use a fraction of their cores (waiting is not CPU time)
            cpu_cores=min(limit * 0.22, 1.7),
            throttled_ratio=0.01,
            fs_read=4.5e8,
            net_rx=3.0e8,
            working_set_bytes=12 * GIB,
        )
    if shape is Shape.HOST_TRANSFER_BOUND:
        return Levels(
            busy=0.55,
            sm=0.3,
            occupancy=0.25,
            tensor=0.15,
            fp32=0.1,
            dram=0.25,
            pcie_rx=0.78 * scenario.gpu.pcie_bytes_per_s,
            pcie_tx=0.2 * scenario.gpu.pcie_bytes_per_s,
            cpu_cores=min(limit * 0.5, 4.0),
            throttled_ratio=0.02,
            fs_read=5e7,
        )
    if shape is Shape.COMMUNICATION_BOUND:
        nominal = scenario.gpu.nvlink_bytes_per_s or 2 * scenario.gpu.pcie_bytes_per_s
        communicating = u < 0.75
        return Levels(
            busy=0.7,
            sm=0.15 if communicating else 0.42,
            occupancy=0.2,
            tensor=0.05 if communicating else 0.3,
            fp16=0.05 if communicating else 0.2,
            dram=0.3,
            nvlink_each_way=(0.38 if communicating else 0.04) * nominal,
            pcie_rx=1e9,
            cpu_cores=min(limit * 0.4, 2.0 * gpus),
            throttled_ratio=0.01,
            net_rx=2e7,
            net_tx=2e7,
        )
    if shape is Shape.LOW_OCCUPANCY:
        return Levels(
            busy=0.92, sm=0.3, occupancy=0.08, tensor=0.1, fp32=0.15, dram=0.15, cpu_cores=limit * 0.3
        )
    if shape is Shape.MEMORY_BANDWIDTH_BOUND:
        return Levels(
            busy=0.95,
            sm=0.7,
            occupancy=0.5,
            tensor=0.08,
            fp16=0.2,
            fp32=0.1,
            dram=0.72,
            cpu_cores=limit * 0.3,
        )
    if shape is Shape.NO_TENSOR_CORES:
        return Levels(
            busy=0.95, sm=0.8, occupancy=0.4, tensor=0.01, fp32=0.6, dram=0.35, cpu_cores=limit * 0.35
        )
    if shape is Shape.MEMORY_CAPACITY_BOUND:
        return Levels(
            busy=0.55,
            sm=0.35,
            occupancy=0.15,
            tensor=0.25,
            fp16=0.2,
            dram=0.3,
            memory_share=0.975,
            cpu_cores=limit * 0.35,
            restarts_per_hour=2.0,
        )
    if shape is Shape.THROTTLED:
        hot = u < 0.6
        return Levels(
            busy=0.9,
            sm=0.75,
            occupancy=0.4,
            tensor=0.4,
            fp16=0.25,
            dram=0.4,
            cpu_cores=limit * 0.35,
            clock_events=mn.CLOCK_EVENT_HW_THERMAL | mn.CLOCK_EVENT_SW_THERMAL if hot else 0,
            sm_clock_share=0.55 if hot else 0.97,
            temperature=89.0 if hot else 78.0,
        )
    if shape is Shape.XID_FAULT:
        faulted = t - ctx.started_at >= scenario.xid_after_seconds
        return Levels(
            busy=0.6 if not faulted else 0.3,
            sm=0.5 if not faulted else 0.25,
            occupancy=0.3,
            tensor=0.3,
            dram=0.3,
            cpu_cores=limit * 0.3,
            xid=scenario.xid if faulted else 0,
        )
    if shape in (Shape.OVERSIZED, Shape.UNDER_REPLICATED, Shape.OVER_REPLICATED) or (
        scenario.workload_type == "inference" and scenario.traffic_qps > 0
    ):
        return _serving_levels(scenario, ctx, t)
    # HEALTHY training and INSUFFICIENT_DATA (whose defect is applied when the series are written)
    return Levels(
        busy=0.93,
        sm=0.85,
        occupancy=0.45,
        tensor=0.5,
        fp16=0.3,
        fp32=0.1,
        dram=0.45,
        pcie_rx=2e9,
        cpu_cores=min(limit * 0.4, 5.0),
        throttled_ratio=0.02,
        fs_read=8e7,
    )


# --- series ----------------------------------------------------------------------------------------
def gpu_uuid(node: str, index: int) -> str:
    """A stable, realistic-looking GPU UUID for a node's GPU index."""
    digest = f"{zlib.crc32(f'{node}/{index}'.encode()):08x}{zlib.crc32(f'{index}/{node}'.encode()):08x}"
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[:4]}-{digest[4:16]}"


def _pod_labels(ctx: PodContext, style: LabelStyle) -> dict[str, str]:
    if style.exported_pod_labels:
        return {
            "exported_pod": ctx.pod,
            "exported_namespace": ctx.namespace,
            "exported_container": ctx.container,
            "pod": f"dcgm-exporter-{ctx.node}",
            "namespace": "gpu-operator",
            "container": "nvidia-dcgm-exporter",
        }
    return {"pod": ctx.pod, "namespace": ctx.namespace, "container": ctx.container}


def _gpu_devices(scenario: Scenario, ctx: PodContext) -> list[tuple[int, str]]:
    """(index on node, UUID) of each device the pod sees; time-sliced pods share their devices."""
    if scenario.pods_per_gpu > 1:
        index = ctx.pod_index // scenario.pods_per_gpu
        return [(index, gpu_uuid(ctx.node, index))]
    base = ctx.pod_index * max(1, ctx.gpu_count) % 8
    # An exclusive GPU is the pod's alone: two workloads placed on one simulated node never get the
    # same device (a UUID shared by two pods is read as a time-sliced GPU).
    owner = f"{ctx.node}/{ctx.namespace}/{ctx.workload}"
    return [((base + i) % 8, gpu_uuid(owner, (base + i) % 8)) for i in range(max(1, ctx.gpu_count))]


def pod_series(
    scenario: Scenario, ctx: PodContext, t: float, style: LabelStyle | None = None
) -> list[SeriesSample]:
    """Every dcgm-exporter, cAdvisor and serving series of one pod at time t (empty before it starts)."""
    if t < ctx.started_at:
        return []
    style = scenario.label_style or style or LabelStyle()
    lv = levels(scenario, ctx, t)
    out: list[SeriesSample] = []
    seed = scenario.seed
    gpu = scenario.gpu
    capacity = scenario.device_memory_mib
    mig = scenario.mig_profile
    shared = scenario.pods_per_gpu > 1
    devices = [] if scrape_missing(scenario, ctx, t) else _gpu_devices(scenario, ctx)
    for index, uuid in devices:
        # Device-level values of a shared GPU are the device's, identical in every sharing pod's copy.
        entity = uuid if shared else f"{ctx.pod}/{uuid}"
        device = {
            mn.GPU_INDEX_LABEL: str(index),
            mn.UUID_LABELS[0]: uuid,
            mn.PCI_BUS_ID_LABEL: f"00000000:{0x18 + index * 0x10:02X}:00.0",
            mn.DEVICE_LABEL: f"nvidia{index}",
            mn.MODEL_NAME_LABELS[0]: gpu.model_name,
            style.hostname_label: ctx.node,
            mn.DRIVER_VERSION_LABEL: "570.124.06",
        }
        attached = {**device, **_pod_labels(ctx, style)}
        if mig:
            attached[mn.MIG_PROFILE_LABEL] = mig
            attached[mn.MIG_INSTANCE_LABEL] = "1"
        if shared:
            attached[mn.VGPU_LABEL] = str(ctx.pod_index % scenario.pods_per_gpu)

        def value(metric: str, level: float, jitter: float = 0.05, ceiling: float | None = 1.0) -> float:
            v = _jitter(level, noise(seed, entity, metric, t), jitter)  # noqa: B023
            return min(v, ceiling) if ceiling is not None else v

        fb_used = min(capacity * 0.995, value(mn.DCGM_FB_USED, lv.memory_share * capacity, 0.01, None))
        gauges: list[tuple[str, float]] = [
            (mn.DCGM_GR_ENGINE_ACTIVE, value(mn.DCGM_GR_ENGINE_ACTIVE, lv.busy)),
            (mn.DCGM_SM_ACTIVE, min(value(mn.DCGM_SM_ACTIVE, lv.sm), 1.0)),
            (mn.DCGM_SM_OCCUPANCY, value(mn.DCGM_SM_OCCUPANCY, lv.occupancy)),
            (mn.DCGM_TENSOR_ACTIVE, value(mn.DCGM_TENSOR_ACTIVE, lv.tensor)),
            (mn.DCGM_FP32_ACTIVE, value(mn.DCGM_FP32_ACTIVE, lv.fp32)),
            (mn.DCGM_FP16_ACTIVE, value(mn.DCGM_FP16_ACTIVE, lv.fp16)),
            (mn.DCGM_DRAM_ACTIVE, value(mn.DCGM_DRAM_ACTIVE, lv.dram, ceiling=0.8)),
            (mn.DCGM_FB_USED, round(fb_used)),
            (mn.DCGM_FB_FREE, round(capacity - fb_used)),
        ]
        board: list[tuple[str, float]] = [
            (mn.DCGM_PCIE_RX_BYTES, value(mn.DCGM_PCIE_RX_BYTES, lv.pcie_rx, 0.08, None)),
            (mn.DCGM_PCIE_TX_BYTES, value(mn.DCGM_PCIE_TX_BYTES, lv.pcie_tx, 0.08, None)),
            (
                mn.DCGM_POWER_USAGE,
                value(mn.DCGM_POWER_USAGE, gpu.max_power_watts * (0.12 + 0.8 * lv.busy), 0.03, None),
            ),
            (mn.DCGM_SM_CLOCK, round(gpu.max_sm_clock_mhz * lv.sm_clock_share)),
            (mn.DCGM_GPU_TEMP, round(value(mn.DCGM_GPU_TEMP, lv.temperature + 10 * lv.busy, 0.02, None))),
            (
                mn.DCGM_CLOCKS_EVENT_REASONS,
                float(lv.clock_events or (mn.CLOCK_EVENT_GPU_IDLE if lv.busy < 0.05 else 0)),
            ),
        ]
        if gpu.nvlink_bytes_per_s > 0:
            board.append(
                (mn.DCGM_NVLINK_TX_BYTES, value(mn.DCGM_NVLINK_TX_BYTES, lv.nvlink_each_way, 0.08, None))
            )
            board.append(
                (mn.DCGM_NVLINK_RX_BYTES, value(mn.DCGM_NVLINK_RX_BYTES, lv.nvlink_each_way, 0.08, None))
            )
        if not mig:
            board.append((mn.DCGM_GPU_UTIL, round(100.0 * min(1.0, value(mn.DCGM_GPU_UTIL, lv.busy * 1.05)))))
        defect = scenario.defect if scenario.shape is Shape.INSUFFICIENT_DATA else DataDefect.NONE
        broken = {DataDefect.BLANK: float(0x7FFFFFFFFFFFFFF2), DataDefect.NAN: math.nan}.get(defect)
        if scenario.dropped_metrics:
            gauges = [(metric, v) for metric, v in gauges if metric not in scenario.dropped_metrics]
            board = [(metric, v) for metric, v in board if metric not in scenario.dropped_metrics]
        for metric, v in gauges:
            spoilt = broken is not None and metric not in (mn.DCGM_FB_USED, mn.DCGM_FB_FREE)
            out.append((metric, attached, broken if spoilt and broken is not None else v, False))
        # Board-level fields cannot be attributed to a MIG slice: dcgm-exporter reports them per GPU.
        board_labels = device if mig else attached
        spoilable = (mn.DCGM_GPU_UTIL, mn.DCGM_PCIE_RX_BYTES, mn.DCGM_PCIE_TX_BYTES)
        for metric, v in board:
            value_out = broken if broken is not None and metric in spoilable else v
            out.append((metric, board_labels, value_out, False))
        xid_labels = {
            **attached,
            mn.XID_CODE_LABEL: str(lv.xid),
            mn.XID_MESSAGE_LABEL: "No Error" if lv.xid == 0 else f"Xid {lv.xid}",
        }
        out.append((mn.DCGM_XID_ERRORS, xid_labels, float(lv.xid), False))
    out.extend(_cadvisor_series(scenario, ctx, t, lv))
    if lv.qps is not None:
        out.extend(_serving_series(scenario, ctx, t, lv))
    return out


#: Counters are integrated on this grid from the pod's start (midpoint rule): exact integrals of the
#: level functions are not closed-form once levels follow the traffic wave, and `rate(t) × elapsed`
#: (the earlier shortcut) goes down whenever the rate does, which readers see as counter resets.
_COUNTER_GRID_SECONDS = 60.0
#: Pods whose running totals are kept (least recently used first out); a re-computed pod gets the same
#: totals, since they depend only on the scenario, the pod and time.
_COUNTER_CACHE_PODS = 4096
#: A pod first asked for longer than this after its start (live mode: it ran before the exporter) gets
#: its earlier history in one step at the then-current rates, so the work stays bounded.
_COUNTER_MAX_HISTORY_SECONDS = 2 * 86400.0
_COUNTER_FIELDS = ("cpu", "periods", "throttled", "fs_read", "fs_write", "net_rx", "net_tx", "served")
#: Per pod: (origin, totals at origin + k × grid).
_COUNTER_TOTALS: OrderedDict[tuple[str, str, int, str, str, float], tuple[float, list[tuple[float, ...]]]] = (
    OrderedDict()
)
#: Per pod: the (scenario, context) its totals were integrated with, and its latest read (time,
#: totals). When the pod's resources change (live mode: an in-place resize), its counters go on from
#: that read at the new rates, as a container's counters do; without it the current grid cell would
#: be re-integrated at the new rates and the counter would jump (a 1 -> 4 core resize 50 s into a
#: cell reads as 150 extra CPU seconds).
_COUNTER_INPUTS: dict[
    tuple[str, str, int, str, str, float], tuple[tuple[Scenario, PodContext], float, tuple[float, ...]]
] = {}


def _counter_rates(scenario: Scenario, ctx: PodContext, t: float) -> tuple[float, ...]:
    """Per-second rates of every cAdvisor and serving counter at time t, from the pod's current levels."""
    lv = levels(scenario, ctx, t)
    periods = 10.0 if ctx.cpu_limit is not None else 0.0  # CFS period 100 ms
    return (
        lv.cpu_cores,
        periods,
        periods * lv.throttled_ratio,
        lv.fs_read,
        lv.fs_write,
        lv.net_rx,
        lv.net_tx,
        lv.qps or 0.0,
    )


def counter_totals(scenario: Scenario, ctx: PodContext, t: float) -> dict[str, float]:
    """∫ rate dt from the pod's start to t for every counter: monotonic, deterministic.

    Totals up to the last grid point are kept per pod and extended forward, so in live mode a changed
    CPU limit (a new `ctx`) changes the rates from now on and never rewrites the past.
    """
    key = (scenario.name, scenario.namespace, scenario.seed, ctx.namespace, ctx.pod, ctx.started_at)
    grid = _COUNTER_GRID_SECONDS
    entry = _COUNTER_TOTALS.get(key)
    inputs = _COUNTER_INPUTS.get(key)
    if entry is not None and inputs is not None and inputs[0] != (scenario, ctx) and inputs[1] <= t:
        entry = (inputs[1], [inputs[2]])  # resized: integrate on from the last read
        _COUNTER_TOTALS[key] = entry
    if entry is None:
        origin = ctx.started_at
        base = tuple(0.0 for _ in _COUNTER_FIELDS)
        if t - ctx.started_at > _COUNTER_MAX_HISTORY_SECONDS:
            skipped = math.floor((t - ctx.started_at - _COUNTER_MAX_HISTORY_SECONDS) / grid) * grid
            origin = ctx.started_at + skipped
            base = tuple(max(0.0, rate) * skipped for rate in _counter_rates(scenario, ctx, origin))
        entry = (origin, [base])
        _COUNTER_TOTALS[key] = entry
        while len(_COUNTER_TOTALS) > _COUNTER_CACHE_PODS:
            _COUNTER_INPUTS.pop(_COUNTER_TOTALS.popitem(last=False)[0], None)
    else:
        _COUNTER_TOTALS.move_to_end(key)
    origin, totals = entry
    gap = t - (origin + (len(totals) - 1) * grid)
    if gap > _COUNTER_MAX_HISTORY_SECONDS:
        # Asked again long after the last read (live mode after a pause): cross the gap in one step at
        # the rates of its start, then integrate the last stretch on the grid as usual.
        skipped = math.floor((gap - _COUNTER_MAX_HISTORY_SECONDS) / grid) * grid
        start = origin + (len(totals) - 1) * grid
        rates = _counter_rates(scenario, ctx, start)
        base = tuple(total + max(0.0, rate) * skipped for total, rate in zip(totals[-1], rates, strict=True))
        origin, totals = start + skipped, [base]
        _COUNTER_TOTALS[key] = (origin, totals)
    elapsed = max(0.0, t - origin)
    steps = math.floor(elapsed / grid)
    while len(totals) <= steps:
        k = len(totals) - 1
        mid = _counter_rates(scenario, ctx, origin + (k + 0.5) * grid)
        totals.append(
            tuple(total + max(0.0, rate) * grid for total, rate in zip(totals[k], mid, strict=True))
        )
    rates = _counter_rates(scenario, ctx, origin + (steps + 0.5) * grid)
    partial = elapsed - steps * grid
    values = tuple(max(0.0, rate) * partial + total for total, rate in zip(totals[steps], rates, strict=True))
    if inputs is None or inputs[1] <= t:
        _COUNTER_INPUTS[key] = ((scenario, ctx), t, values)
    return dict(zip(_COUNTER_FIELDS, values, strict=True))


def _cadvisor_series(scenario: Scenario, ctx: PodContext, t: float, lv: Levels) -> list[SeriesSample]:
    seed = scenario.seed
    base = {"namespace": ctx.namespace, "pod": ctx.pod}
    app = {**base, "container": ctx.container}
    pod_level = {**base, "container": ""}
    totals = counter_totals(scenario, ctx, t)
    cpu = totals["cpu"]
    periods = totals["periods"]
    throttled = min(periods, totals["throttled"])
    working_set = _jitter(lv.working_set_bytes, noise(seed, ctx.pod, mn.CADVISOR_MEMORY_WORKING_SET, t), 0.02)
    out: list[SeriesSample] = []
    for labels in (app, pod_level):
        out.append((mn.CADVISOR_CPU_USAGE, labels, cpu, True))
        out.append((mn.CADVISOR_MEMORY_WORKING_SET, labels, working_set, False))
        if ctx.cpu_limit is not None:
            out.append((mn.CADVISOR_CPU_PERIODS, labels, math.floor(periods), True))
            out.append((mn.CADVISOR_CPU_THROTTLED_PERIODS, labels, math.floor(throttled), True))
    device = {**app, "device": "/dev/nvme0n1"}
    out.append((mn.CADVISOR_FS_READS, device, totals["fs_read"], True))
    out.append((mn.CADVISOR_FS_WRITES, device, totals["fs_write"], True))
    network = {**pod_level, "interface": "eth0"}
    out.append((mn.CADVISOR_NET_RX, network, totals["net_rx"], True))
    out.append((mn.CADVISOR_NET_TX, network, totals["net_tx"], True))
    return out


def _serving_series(scenario: Scenario, ctx: PodContext, t: float, lv: Levels) -> list[SeriesSample]:
    labels = {"namespace": ctx.namespace, "pod": ctx.pod, "model_name": scenario.name}
    served = counter_totals(scenario, ctx, t)["served"]
    u = noise(scenario.seed, ctx.pod, mn.VLLM_REQUESTS_WAITING, t)
    queue = round(_jitter(lv.queue, u, 0.3))
    return [
        (mn.VLLM_REQUESTS_TOTAL, labels, math.floor(served), True),
        (mn.VLLM_REQUESTS_WAITING, labels, float(queue), False),
        (mn.GATEWAY_QUEUE_TIME_MS, labels, _jitter(lv.queue_ms, u, 0.3), False),
    ]


def cluster_series(
    scenario: Scenario, pods: list[PodContext], t: float, *, hpa: tuple[int, int] | None = None
) -> list[SeriesSample]:
    """kube-state-metrics series of the workload and its running pods at time t."""
    out: list[SeriesSample] = []
    live = [p for p in pods if t >= p.started_at]
    if not live:
        return out
    ns = scenario.namespace
    for ctx in live:
        owner_kind = ctx.owner_kind
        owner_name = ctx.owner_name or ctx.workload
        out.append(
            (
                mn.KSM_POD_OWNER,
                {
                    "namespace": ns,
                    "pod": ctx.pod,
                    "owner_kind": owner_kind if owner_kind != "Pod" else mn.KSM_NO_OWNER,
                    "owner_name": owner_name if owner_kind != "Pod" else mn.KSM_NO_OWNER,
                    "owner_is_controller": "true" if owner_kind != "Pod" else "false",
                },
                1.0,
                False,
            )
        )
        if owner_kind == "ReplicaSet":
            out.append(
                (
                    mn.KSM_REPLICASET_OWNER,
                    {
                        "namespace": ns,
                        "replicaset": owner_name,
                        "owner_kind": scenario.kind,
                        "owner_name": ctx.workload,
                    },
                    1.0,
                    False,
                )
            )
        out.append((mn.KSM_POD_INFO, {"namespace": ns, "pod": ctx.pod, "node": ctx.node}, 1.0, False))
        out.append(
            (
                mn.KSM_POD_LABELS,
                {
                    "namespace": ns,
                    "pod": ctx.pod,
                    "label_app": ctx.workload,
                    mn.POD_LABEL_WORKLOAD_TYPE: scenario.workload_type,
                },
                1.0,
                False,
            )
        )
        container = {"namespace": ns, "pod": ctx.pod, "container": ctx.container, "node": ctx.node}
        resources: list[tuple[str, str, str, float | None]] = [
            (mn.KSM_POD_REQUESTS, "cpu", "core", ctx.cpu_request),
            (mn.KSM_POD_LIMITS, "cpu", "core", ctx.cpu_limit),
            (mn.KSM_POD_REQUESTS, "memory", "byte", ctx.memory_request_bytes),
            (mn.KSM_POD_LIMITS, "memory", "byte", ctx.memory_limit_bytes),
            (mn.KSM_POD_REQUESTS, mn.resource_to_ksm(ctx.gpu_resource), "integer", float(ctx.gpu_count)),
            (mn.KSM_POD_LIMITS, mn.resource_to_ksm(ctx.gpu_resource), "integer", float(ctx.gpu_count)),
        ]
        for metric, resource, unit, amount in resources:
            if amount is not None:
                out.append((metric, {**container, "resource": resource, "unit": unit}, amount, False))
        default_rate = 2.0 if scenario.shape is Shape.MEMORY_CAPACITY_BOUND else 0.0
        rate = scenario.level_overrides.get("restarts_per_hour", default_rate)
        restarts = float(math.floor((t - ctx.started_at) * rate / 3600.0))
        out.append(
            (
                mn.KSM_POD_RESTARTS,
                {"namespace": ns, "pod": ctx.pod, "container": ctx.container},
                restarts,
                True,
            )
        )
        node_labels = {
            "node": ctx.node,
            mn.NODE_LABEL_GPU_PRODUCT: scenario.gpu.product
            + (f"-MIG-{scenario.mig_profile}" if scenario.mig_profile else ""),
            mn.NODE_LABEL_GPU_MEMORY: str(int(scenario.gpu.memory_mib)),
            mn.NODE_LABEL_GPU_SHARING: "time-slicing" if scenario.pods_per_gpu > 1 else "none",
        }
        out.append((mn.KSM_NODE_LABELS, node_labels, 1.0, False))
    first = live[0]
    replicas = float(first.replicas)
    if scenario.kind == "Deployment":
        out.append(
            (mn.KSM_DEPLOYMENT_REPLICAS, {"namespace": ns, "deployment": first.workload}, replicas, False)
        )
    elif scenario.kind == "StatefulSet":
        out.append(
            (mn.KSM_STATEFULSET_REPLICAS, {"namespace": ns, "statefulset": first.workload}, replicas, False)
        )
    if hpa is not None:
        hpa_labels = {"namespace": ns, "horizontalpodautoscaler": first.workload}
        out.append(
            (
                mn.KSM_HPA_INFO,
                {**hpa_labels, "scaletargetref_kind": scenario.kind, "scaletargetref_name": first.workload},
                1.0,
                False,
            )
        )
        out.append((mn.KSM_HPA_MIN_REPLICAS, hpa_labels, float(hpa[0]), False))
        out.append((mn.KSM_HPA_MAX_REPLICAS, hpa_labels, float(hpa[1]), False))
    return out


def pod_contexts(scenario: Scenario, start: float, end: float) -> list[PodContext]:
    """The pods a backfilled workload runs over [start, end], with the scenario's allocation."""
    short = scenario.shape is Shape.INSUFFICIENT_DATA and scenario.defect is DataDefect.SHORT
    started = end - scenario.short_history_seconds if short else start - 3600.0
    digest = f"{zlib.crc32(scenario.name.encode()):08x}"
    if scenario.kind == "Deployment":
        owner_kind, owner_name = "ReplicaSet", f"{scenario.name}-{digest[:9]}"
    elif scenario.kind == "Pod":
        owner_kind, owner_name = "Pod", scenario.name
    else:
        owner_kind, owner_name = scenario.kind, scenario.name
    contexts = []
    placement = scenario.name
    for index in range(max(1, scenario.replicas) if scenario.kind != "Pod" else 1):
        if scenario.kind == "Deployment":
            pod = f"{owner_name}-{digest[(index % 4) : (index % 4) + 5]}{index}"
        elif scenario.kind == "StatefulSet":
            pod = f"{scenario.name}-{index}"
        elif scenario.kind == "Job":
            pod = f"{scenario.name}-{digest[:5]}{index}"
        else:
            pod = scenario.name
        if scenario.node_prefix is not None:
            node = f"{scenario.node_prefix}-{0 if scenario.pods_per_gpu > 1 else index}"
        elif scenario.pods_per_gpu > 1:
            node = f"gpu-ts-node-{zlib.crc32(placement.encode()) % 97:02d}"  # a time-slicing pool
        else:
            node = f"gpu-node-{(zlib.crc32(placement.encode()) + index) % 97:02d}"
        contexts.append(
            PodContext(
                namespace=scenario.namespace,
                pod=pod,
                workload=scenario.name,
                node=node,
                started_at=started,
                pod_index=index,
                cpu_request=scenario.cpu_request,
                cpu_limit=scenario.cpu_limit,
                memory_request_bytes=scenario.memory_request_bytes,
                memory_limit_bytes=scenario.memory_limit_bytes,
                gpu_count=scenario.gpu_count,
                replicas=scenario.replicas,
                owner_kind=owner_kind,
                owner_name=owner_name,
                gpu_resource=scenario.gpu_resource,
            )
        )
    return contexts
