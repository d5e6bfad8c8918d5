"""Every number the diagnosis engine decides with, named, documented and overridable.

Each field's description ends with its basis:
- **NV**: an NVIDIA-documented figure (DCGM feature overview, `nvml.h`, Xid catalog);
- **Lit**: a published study (Mohan et al. VLDB'21, tf.data VLDB'21, Gao et al. ICSE'24, Cankur et al. 2025,
  NVIDIA/nccl#1264);
- **Heur**: an engineering default, tuned on the labelled scenario library.

A rule's own numbers are a nested model (`EngineSettings.idle`, `.input_pipeline`, ...), named by its
registry line (`logic/rules/registry.py`); the engine-wide ones (window, data quality, busy lines,
slice sizing, the shrink gate and its vetoes, confidence factors) sit on `EngineSettings` itself.
A `GPURightsizingPolicy` may override the observation window, `minSamples` and thresholds; use
`EngineSettings.with_overrides`, which accepts the policy's flat camelCase names (a rule's setting by
its own name, `idleBusyP95`, or by its path, `idle.idleBusyP95`) and rejects unknown ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

#: Xid codes that mean a hardware or driver fault (rule H0 in docs/diagnosis.md; NVIDIA Xid catalog):
#: 48 DBE, 63/64 row-remap / page-retirement event or failure, 74 NVLink, 79 fallen off the bus,
#: 92 high SBE rate, 94/95 contained/uncontained ECC, 109 context-switch timeout, 119/120 GSP RPC,
#: 140 unrecovered ECC, 143 init failure, 144-150 NVLink. 63/64 are treated as critical because the
#: window does not carry ROW_REMAP_PENDING; a pending remap needs a GPU reset anyway.
DEFAULT_CRITICAL_XIDS: frozenset[int] = frozenset(
    {48, 63, 64, 74, 79, 92, 94, 95, 109, 119, 120, 140, 143, 144, 145, 146, 147, 148, 149, 150}
)

#: Xid codes that are usually caused by the application (13, 31, 43, 45): reported, never a health gate.
DEFAULT_APPLICATION_XIDS: frozenset[int] = frozenset({13, 31, 43, 45})


class _Settings(BaseModel):
    """Settings are frozen, camelCase in policies, and refuse unknown names."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)


def _rule(model: type[_Settings]) -> Any:
    """The field of `EngineSettings` that holds one rule's settings: its defaults, its docstring."""
    return Field(default_factory=model, description=model.__doc__)


class HealthSettings(_Settings):
    """H0 HardwareFault and H1 Throttled: the health gates."""

    critical_xids: frozenset[int] = Field(
        default=DEFAULT_CRITICAL_XIDS,
        description="Xid codes that gate every action as a hardware fault. NV (NVIDIA Xid catalog).",
    )
    application_xids: frozenset[int] = Field(
        default=DEFAULT_APPLICATION_XIDS,
        description="Xid codes that are usually the application's fault; reported only. NV (Xid catalog).",
    )
    throttle_fraction: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="Share of the window with HW/SW thermal, HW slowdown or power-brake clock events above "
        "which the window is 'throttled'. Heur 5 % (rule H1).",
    )
    throttle_clock_ratio: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description="SM clock p50 below this share of the window's max clock corroborates throttling. "
        "Heur (rule H1; HW slowdown halves clocks, nvml.h).",
    )


class IdleSettings(_Settings):
    """R1 IdleAllocation: no kernels, quiet links and CPU; a release needs proof of no traffic."""

    idle_busy_p95: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="Every GPU's busy p95 below this → IdleAllocation. Heur (rule R1).",
    )
    idle_max_active_fraction: float = Field(
        default=0.10,
        ge=0,
        le=1,
        description="Idle means busy under the floor for ≥ 90 % of the window. Heur (rule R1).",
    )
    idle_min_window_seconds: float = Field(
        default=3600.0,
        ge=0,
        description="Idle over a shorter window lowers confidence. Heur (rule R1: ≥ 1 h).",
    )
    idle_cpu_cores: float = Field(
        default=0.05,
        ge=0,
        description="Idle also needs container CPU p95 at or below this (cores): a process that feeds a GPU "
        "uses CPU. Measured: idle holder 0.01, live server 0.11. Heur, measured (review Q2).",
    )
    idle_transfer_bytes_per_s: float = Field(
        default=5e6,
        ge=0,
        description="Idle also needs every GPU's PCIe RX/TX and NVLink p95 below this (bytes/s): copies are "
        "GPU work that the busy signal does not count. Measured: an idle H200 moves ≈ 0.8-1.2 MB/s over "
        "PCIe, a live server with a 1.3 GiB model 7.5 MB/s, a pageable copy loop ≈ 9 GB/s "
        "(tests/fixtures/h200; review Q2). Heur, measured.",
    )
    idle_fb_mib: float = Field(
        default=64.0,
        ge=0,
        description="Framebuffer below this on every device for the whole window = no CUDA context = idle, "
        "whatever the activity counters read (a CUDA context alone holds a few hundred MiB). Heur "
        "(issue 18).",
    )
    idle_gr_floor: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Without SM fields, GR_ENGINE_ACTIVE's idle floor learned on GPUs no pod holds (same "
        "node and model): GR max at or below it = no kernels. Absent: GR alone never says idle (an idle "
        "RTX 4000 Ada reads 15-20× above the H200 floor). An input learned per node and model; Heur.",
    )
    release_max_busy: float = Field(
        default=0.01,
        ge=0,
        le=1,
        description="Releasing a GPU is advised only when busy never exceeded this (no GPU activity at all) "
        "and no requests were served. SPEC §1 (a live service is never released).",
    )
    release_max_network_rx_bytes_per_s: float = Field(
        default=10.0 * 1024,
        ge=0,
        description="An automatic release needs proof of no traffic: a request counter that did not grow, "
        "or the pod's network receive max below this (kubelet probes only). Heur (issue 18 defaults; "
        "engine-review-2 H1: a 0.3 req/s server was released).",
    )


class InputPipelineSettings(_Settings):
    """R2/R2c InputPipelineCPUBound and R2b InputPipelineIOBound: the loader starves the GPU."""

    input_bound_max_busy: float = Field(
        default=0.8,
        ge=0,
        le=1,
        description="Input-pipeline rules (CPU, I/O) fire while busy p50 is below this; a starved GPU "
        "alternates bursts and stalls, so its median busy often sits between 0.5 and 0.8. Below `low_busy` "
        "raises confidence. Heur (rule R2 uses 0.5 with a sawtooth).",
    )
    cpu_saturation: float = Field(
        default=0.9,
        ge=0,
        le=2,
        description="CPU usage p95 / CPU limit at or above this = CPU saturated. Heur (rule R2).",
    )
    cpu_throttled_ratio: float = Field(
        default=0.25,
        ge=0,
        le=1,
        description="CFS throttled periods / periods at or above this = CPU throttled. Heur: "
        "kubernetes-mixin CPUThrottlingHigh default 25 %.",
    )
    cpu_plateau_max_excess: float = Field(
        default=0.3,
        ge=0,
        description="CPU plateau (a loader pinned below its limit): usage p50 lies within this many cores "
        "above a whole number k ≥ 1 of cores (k pinned processes plus light main-thread work). Heur "
        "(review Q4).",
    )
    cpu_plateau_max_spread: float = Field(
        default=0.15,
        ge=0,
        description="CPU plateau: usage p95 - p50 at or below this (cores): flat, not bursty. Heur (review Q4).",
    )
    cpu_plateau_min_headroom: float = Field(
        default=0.5,
        ge=0,
        description="CPU plateau: the limit lies at least this many cores above usage p95 (so the quota is "
        "never exhausted and nothing is throttled). Heur (review Q4).",
    )
    cpu_plateau_max_throttled: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="CPU plateau: throttled periods below this share. Heur (review Q4).",
    )
    cpu_process_pinned_cores: float = Field(
        default=0.9,
        ge=0,
        description="When the node agent reports per-process CPU, a busiest process at or above this many "
        "cores (median) is pinned at one core: it confirms a CPU plateau; below it, no plateau. Measured: "
        "the one-worker loader's busiest process 1.00 core. Heur (review Q4; agent/process_cpu.py uses 0.9).",
    )
    sawtooth_strong: float = Field(
        default=0.3,
        ge=0,
        le=1,
        description="Busy sawtooth score above this supports an input-pipeline stall. Heur (rule R2).",
    )
    cpu_anticorrelation: float = Field(
        default=-0.3,
        ge=-1,
        le=0,
        description="GPU busy and CPU saturation correlated at or below this (they move apart) raise R2's "
        "confidence (cpuAnticorrelatedBonus). Heur.",
    )
    io_bytes_per_s: float = Field(
        default=100.0 * 1024 * 1024,
        ge=0,
        description="File-system read + network receive median per pod at or above this = I/O busy (fetch "
        "stall). Heur; Lit for the pattern (Mohan et al. fetch stalls).",
    )


class HostTransferSettings(_Settings):
    """R3/R3b HostTransferBound: the GPU waits on host copies."""

    pcie_utilisation: float = Field(
        default=0.6,
        ge=0,
        le=1,
        description="PCIe bytes p95 / link capacity (one direction) at or above this = transfer-bound. "
        "Heur 0.6 (rule R3).",
    )
    transfer_bound_bytes_per_s: float = Field(
        default=1e9,
        ge=0,
        description="PCIe RX or TX median at or above this (bytes/s) while compute is low, together with "
        "transfer_bound_link_share when the link's capacity is known (alone when it is not) = transfer-bound "
        "(rule R3b). Heur; the H200 pageable-copy recording moves 8.9 GB/s (p50) at 0.4 % SM activity, a "
        "starved loader 0.14 GB/s.",
    )
    transfer_bound_link_share: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="R3b also needs the PCIe RX or TX median at or above this share of the link (one "
        "direction) when the GPU model, hence the link, is known: 1.5 GB/s leaves a Gen5 x16 link 97 % free. "
        "Heur; a pageable copy's median reaches ≈ 0.14 of a Gen5 x16 link (H200 recording: 8.9 GB/s p50, "
        "9.3 GB/s p95).",
    )


class CommunicationSettings(_Settings):
    """R4 CommunicationBound: the GPUs of one pod wait on each other."""

    nvlink_utilisation: float = Field(
        default=0.25,
        ge=0,
        le=1,
        description="The busier NVLink direction's median / the model's per-direction nominal at or above "
        "this (PCIe only when its traffic is symmetric), with the math pipes idle, = communication-bound. "
        "Lit: NCCL reaches ≈ 0.8 × nominal (NVIDIA/nccl#1264), so 0.25 means links busy ≥ 30 % of the "
        "time; a measured all-reduce DDP on H200 ran 171 of 450 GB/s per direction (0.38). Heur 0.25.",
    )
    communication_max_math_p50: float = Field(
        default=0.25,
        ge=0,
        le=3,
        description="Tensor + FP16 + FP32 pipe p50 below this = the math units mostly idle (R4). SM activity "
        "is not a gate: NCCL kernels count as SM-active (DCGM). Measured all-reduce DDP: tensor 0.01; "
        "healthy BF16 DDP: tensor 0.75. Heur (review Q5).",
    )
    nvlink_strong_factor: float = Field(
        default=1.4,
        ge=1,
        description="The link at or above this × nvlink_utilisation gives R4 its higher confidence base "
        "(communicationStrong). Heur.",
    )


class LaunchBoundSettings(_Settings):
    """R14 LaunchBound: narrow GPU phases launched by one thread."""

    narrow_phase_ratio: float = Field(
        default=0.35,
        ge=0,
        le=1,
        description="SM_ACTIVE / GR_ENGINE_ACTIVE (the share of SMs busy while the engine is busy) below "
        "this = narrow GPU phases: a loop of tiny kernels. Measured (engine-review-2 §4): the starved "
        "loaders read 0.89, host-wait 0.825, tiny-inference 0.50, tiny-server 0.43; synthetic "
        "launch-bound loops 0.15-0.17. Heur.",
    )


class HostWaitSettings(_Settings):
    """R15 HostWaitBound: wide GPU phases at low duty with no named cause."""

    wide_phase_ratio: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="SM_ACTIVE / GR_ENGINE_ACTIVE at or above this = wide GPU phases; at low duty with no "
        "named cause, the GPU waits on the host (unknown host wait veto). Measured: host-wait 0.825, "
        "loaders 0.89. Heur.",
    )


class LowOccupancySettings(_Settings):
    """R5 LowOccupancy."""

    low_occupancy: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="SM occupancy p50 below this raises LowOccupancy's confidence; occupancy alone never "
        "fires (DCGM: higher occupancy does not mean better use for compute-bound work; large GEMM tiles "
        "keep one block per SM by design). Heur (R5).",
    )


class MemoryBandwidthSettings(_Settings):
    """R6 MemoryBandwidthBound."""

    dram_bound: float = Field(
        default=0.6,
        ge=0,
        le=1,
        description="DRAM activity p95 at or above this = memory-bandwidth-bound (practical peak 0.8). "
        "NV peak, Heur 0.6 (rule R6).",
    )
    dram_bound_max_tensor: float = Field(
        default=0.2, ge=0, le=1, description="Tensor activity p95 below this for R6. Heur."
    )


class NoTensorCoresSettings(_Settings):
    """R7 NoTensorCores."""

    no_tensor_max: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="Tensor-pipe activity p95 below this = tensor cores unused. Heur (rule R7).",
    )
    no_tensor_min_fp32: float = Field(
        default=0.3,
        ge=0,
        le=1,
        description="FP32-pipe activity p50 at or above this (with SM activity ≥ low_busy) for R7. Heur.",
    )


class OversizedSettings(_Settings):
    """R8/R8b OversizedGPU: little work on a large device."""

    oversized_max_memory_share: float = Field(
        default=0.45,
        ge=0,
        le=1,
        description="p99 GPU memory need ≤ this share of capacity = MIG/sharing candidate. Heur; Lit: 55 % "
        "of 80 GB jobs peak ≤ 50 % HBM (Cankur et al. 2025).",
    )
    oversized_max_device_share: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Share of the current device the work needs (max of memory × headroom, SM p95 / target, "
        "DRAM p95 / target) at or below this = oversized. Heur (half a GPU or less frees at least one "
        "slice).",
    )
    nvlink_quiet_bytes_per_s: float = Field(
        default=1e9,
        ge=0,
        description="NVLink p95 below this counts as 'no NVLink traffic' (a MIG candidate). Heur.",
    )


class MemoryCapacitySettings(_Settings):
    """R9 MemoryCapacityBound: GPU memory full or crashing at its peak."""

    memory_full_share: float = Field(
        default=0.95,
        ge=0,
        le=1,
        description="p99 GPU memory at or above this share of capacity = memory full. Heur (rule R9).",
    )
    memory_crash_share: float = Field(
        default=0.85,
        ge=0,
        le=1,
        description="p99 GPU memory at or above this share of capacity WITH container restarts or OOM kills = "
        "memory-capacity-bound (R9; a crashing pod dies before its peak is sampled). gpu-signals §4.3 R9; "
        "0.85 Heur.",
    )


class UnderReplicatedSettings(_Settings):
    """R10 UnderReplicated (and R13 ServingHostBound's queue test)."""

    queue_sustained_fraction: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Queue non-empty for at least this share of the window = sustained queueing. Heur (R10).",
    )
    serving_saturation: float = Field(
        default=0.7,
        ge=0,
        le=1,
        description="SM activity (or busy) p95 at or above this with a queue = under-replicated. Heur (R10).",
    )
    queue_at_peaks_confidence: float = Field(
        default=0.75,
        ge=0,
        le=1,
        description="Confidence factor for R10 when requests queue only at the peaks (queue p95 > 0, active "
        "under queue_sustained_fraction) while saturation p95 reaches serving_saturation: latency spikes at "
        "peak (SPEC §1), less certain than sustained queueing. Heur.",
    )


class OverReplicatedSettings(_Settings):
    """R11 OverReplicated: a quiet serving fleet."""

    over_replicated_busy_p95: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="Fleet busy p95 (the replicas' busy p95, averaged over replicas) below this with no queue "
        "= over-replicated, however much a few replicas peak. Heur (R11).",
    )
    over_replicated_busy_p50: float = Field(
        default=0.15,
        ge=0,
        le=1,
        description="Or: fleet busy p50 (the replicas' medians averaged) below this and the fleet, sized on its "
        "p95 at replica_target_utilisation, fits on at most half its replicas, with no queue. The median is "
        "robust to a few burst minutes that lift a p95 over its line. Heur (R11).",
    )
    over_replicated_idle_share: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Or: at least this share of the replicas idle at the median (busy p50 below active_busy) "
        "and the fleet fits on at most half its replicas at the target saturation, with no queue. Heur "
        "(R11; the GenTD26 serving fleet: ~110 replicas, median duty cycle 0 %).",
    )


class CrashLoopingSettings(_Settings):
    """R12 CrashLooping."""

    crash_loop_restarts: int = Field(
        default=2,
        ge=1,
        description="Container restarts in the window at or above this (or any OOM kill) = CrashLooping, "
        "and a veto on every shrink. Two: the container failed again after it was restarted, which is "
        "what kubelet's restart back-off (10 s, doubled per failure up to 5 min; Kubernetes pod lifecycle, "
        "container restarts) reports as CrashLoopBackOff; one restart is a restart, not a loop. SPEC "
        "(Kubernetes kubelet back-off); Heur for the count.",
    )


class EngineSettings(_Settings):
    """Thresholds and margins of the rule set in docs/diagnosis.md, one field per number.

    A rule's own settings are nested under it; its fields keep their flat names too (unique across
    the rules): `EngineSettings(idle_busy_p95=0.1)` and a policy's `idleBusyP95` set `idle.idle_busy_p95`.
    """

    # --- observation window and data quality (rule D and the sources) ---------------------------------
    window_seconds: float = Field(
        default=3600.0,
        gt=0,
        description="Observation window the sources read. Heur; the rule set asks for ≥ 30 min "
        "(training) and ≥ 24 h (inference).",
    )
    min_window_seconds: float = Field(
        default=1800.0,
        ge=0,
        description="Shorter windows yield InsufficientData. Heur: at least 30 min for training.",
    )
    inference_window_seconds: float = Field(
        default=86400.0,
        gt=0,
        description="Window that covers a diurnal cycle; shorter serving windows lower confidence. "
        "Heur (24 h for inference).",
    )
    min_samples: int = Field(
        default=20, ge=1, description="Fewer busy samples than this yield InsufficientData. Heur."
    )
    min_coverage: float = Field(
        default=0.25,
        ge=0,
        le=1,
        description="Samples / (window / step) below this = too many gaps → InsufficientData. Heur.",
    )
    good_coverage: float = Field(
        default=0.8, ge=0, le=1, description="Coverage below this lowers confidence. Heur."
    )
    max_staleness_seconds: float = Field(
        default=900.0,
        gt=0,
        description="Data that ends longer ago than this (when the caller passes `now`) is stale → "
        "InsufficientData. Heur (a few dcgm-exporter collect intervals of 30 s plus scrape delay).",
    )
    consistency_min_samples: int = Field(
        default=100,
        ge=1,
        description="GR_ENGINE_ACTIVE and GPU_UTIL are compared (as means: GPU_UTIL is one sub-second NVML "
        "sample per scrape, GR an interval average, so their medians part on a sawtooth) only with at "
        "least this many samples of each. Heur (review D9).",
    )
    ratio_tolerance: float = Field(
        default=0.05,
        ge=0,
        description="Slack before a 0..1 ratio outside [0, 1] or an SM_ACTIVE above GR_ENGINE_ACTIVE counts as "
        "contradictory. Heur (SM_ACTIVE is a subset of engine activity by definition, DCGM overview).",
    )
    contradiction_gap: float = Field(
        default=0.15,
        ge=0,
        le=1,
        description="SM_ACTIVE p95 above GR_ENGINE_ACTIVE p95 by more than this → contradictory data. Heur.",
    )
    # --- busy lines several rules share ------------------------------------------------------------
    active_busy: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="Busy above this counts as 'job active'. Heur (rule set preamble).",
    )
    low_busy: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Busy / SM activity below this indicates ineffective GPU use. NV (DCGM: < 0.5 likely "
        "ineffective).",
    )
    high_busy: float = Field(
        default=0.8,
        ge=0,
        le=1,
        description="Busy at or above this = the GPU looks busy. NV (DCGM: ≥ 0.8 necessary for effective use).",
    )
    # --- slice and replica sizing (logic/recommend.py, logic/width.py) ---------------------------------
    memory_headroom: float = Field(
        default=1.2,
        ge=1,
        description="A slice must hold p99 used memory × this. Heur (slice selection step 2).",
    )
    sm_target_utilisation: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description="SMs(profile) ≥ p95(SM_ACTIVE) × SMs_full / this. NV (0.8 necessary); slice selection.",
    )
    dram_target_utilisation: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description="DRAM need ≤ memory fraction of the profile × this. NV (DRAM practical peak ~0.8).",
    )
    busy_as_sm_proxy_penalty: float = Field(
        default=0.75,
        ge=0,
        le=1,
        description="Confidence factor when SM_ACTIVE is missing and busy stands in for it (busy ≥ SM "
        "activity, so sizing stays conservative). Heur.",
    )
    replica_target_utilisation: float = Field(
        default=0.6,
        gt=0,
        le=1,
        description="Replica count is sized so the fleet's busy p95 lands near this. Heur.",
    )
    max_replica_factor: float = Field(
        default=3.0,
        ge=1,
        description="One recommendation scales replicas by at most this factor. Heur (bounded steps).",
    )
    # --- recommendations ---------------------------------------------------------------------------
    cpu_target_saturation: float = Field(
        default=0.7,
        gt=0,
        le=1,
        description="New CPU limit = estimated CPU demand / this. Heur (headroom for loader bursts).",
    )
    cpu_target_busy: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description="A CPU-starved pod's demand = CPU use × (this / GPU busy p95): its use cannot exceed its "
        "limit, so use / target saturation undershoots. NV (busy ≥ 0.8 necessary). Measured on an H200 "
        "(tests/fixtures/h200/summary.json): 2 cores → 3.2 steps/s, 8 cores → 12.8, 14 → 18.1 (GPU-bound).",
    )
    cpu_max_step_factor: float = Field(
        default=4.0,
        ge=1,
        description="One CPU recommendation raises the CPU to at most this × the current value. Heur "
        "(bounded steps; the next window measures again).",
    )
    cpu_min_cores_per_gpu: float = Field(
        default=3.0,
        ge=0,
        description="Lower bound of recommended cores per GPU for input-bound pods. Lit: 3–24 cores/GPU "
        "(Mohan et al., VLDB'21).",
    )
    cpu_max_cores_per_gpu: float = Field(
        default=24.0,
        gt=0,
        description="Upper bound of recommended cores per GPU. Lit: 3–24 cores/GPU (Mohan et al., VLDB'21).",
    )
    memory_target_saturation: float = Field(
        default=0.75,
        gt=0,
        le=1,
        description="New memory limit = working-set p99 / this, when memory is tight. Heur.",
    )
    memory_tight_share: float = Field(
        default=0.85,
        gt=0,
        le=1,
        description="Working-set p99 above this share of the memory limit = tight (raise with CPU). Heur.",
    )
    min_delta_ratio: float = Field(
        default=0.2,
        ge=0,
        description="CPU/memory changes smaller than this share of the current value are not proposed. Heur "
        "(SPEC §6 minimum delta).",
    )
    min_cpu_delta_cores: float = Field(
        default=0.5, ge=0, description="CPU changes smaller than this are not proposed. Heur (SPEC §6)."
    )
    min_memory_delta_bytes: float = Field(
        default=256.0 * 1024 * 1024,
        ge=0,
        description="Memory changes smaller than this are not proposed. Heur (SPEC §6).",
    )
    min_replica_delta: int = Field(
        default=1, ge=1, description="Replica changes smaller than this are not proposed. Heur (SPEC §6)."
    )
    # --- the shrink gate and its vetoes (logic/vetoes.py) ---------------------------------------------
    min_confidence: float = Field(
        default=0.6,
        ge=0,
        le=1,
        description="Every automatic action needs the confidence of the finding that proposes it at or "
        "above this; below, it is advice. Review engine-review-2 H10 (a 0.243-confidence slice was "
        "automatic). Heur 0.6.",
    )
    shrink_min_window_job_seconds: float = Field(
        default=1800.0,
        ge=0,
        description="A Job, a training CRD or a bare Pod gets a capacity-reducing action only on a window "
        "at least this long. Heur: the 30 min minimum the rule set asks of training windows.",
    )
    shrink_min_window_service_seconds: float = Field(
        default=86400.0,
        ge=0,
        description="A Deployment or StatefulSet gets a capacity-reducing action (slice, share, scale-in, "
        "release) only on a window at least this long: a service quiet at night is busy by day. Heur "
        "(one diurnal cycle; review Q2, engine-review-2 H1).",
    )
    memory_lookback_min_seconds: float = Field(
        default=86400.0,
        ge=0,
        description="Slice memory is sized on the GPU-memory high-water mark of a look-back at least this "
        "long (kept in status across cycles); a shorter look-back leaves a shrink as advice. "
        "engine-review-2 H7: an eval peak every 2 h lay outside a 1 h window. Heur (one day).",
    )
    max_slowdown: float = Field(
        default=0.05,
        ge=0,
        description="A batch or training workload is shrunk only when the predicted slowdown of its step "
        "(logic/width.py: (1 - d) + d · max(1, w / s) plus the bandwidth term) is at most 1 + this. Heur "
        "5 % (issue 18 defaults).",
    )
    max_serving_latency_ratio: float = Field(
        default=1.25,
        ge=1,
        description="A serving workload is shrunk only when the predicted GPU-phase latency is at most this "
        "× today's (max(1, w / s) plus the bandwidth term). Heur 1.25× (issue 18 defaults).",
    )
    veto_cpu_near_limit_cores: float = Field(
        default=0.5,
        ge=0,
        description="CPU veto: CPU p95 within max(this many cores, veto_cpu_near_limit_share × limit) of "
        "the limit while the GPU waits. engine-review-2 H2 (the dead zone between R2 and R2c). Heur.",
    )
    veto_cpu_near_limit_share: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="CPU veto: see veto_cpu_near_limit_cores. Heur (engine-review-2 H2).",
    )
    veto_cpu_throttled: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="CPU veto: CFS throttled periods at or above this share while the GPU waits. Heur "
        "(engine-review-2 H2: 8 % throttling was sliced).",
    )
    veto_plateau_min_cores: float = Field(
        default=1.0,
        ge=0,
        description="CPU veto, noisy plateau: container CPU p50 at or above this many cores, below the "
        "limit, with p95 - p50 at most veto_plateau_max_spread. Heur (issue 18 defaults; "
        "engine-review-2 H3: scrape-stamped cAdvisor spreads a flat 1.1-core loader to p95 1.79).",
    )
    veto_plateau_max_spread: float = Field(
        default=1.0,
        ge=0,
        description="CPU veto, noisy plateau: see veto_plateau_min_cores. Heur (issue 18 defaults).",
    )
    veto_io_bytes_per_s: float = Field(
        default=5.0 * 1024 * 1024,
        ge=0,
        description="I/O veto: file-system reads + network receive p50 at or above this while the GPU "
        "starves (a serving pod's network receive is its requests, so fs reads only). engine-review-2 H4: "
        "a 60 MiB/s FUSE loader was sliced. Heur (issue 18 defaults: a few MiB/s).",
    )
    veto_pressure_share: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="I/O or CPU pressure veto: PSI time some task waited (container_pressure_*_waiting_"
        "seconds_total rate, the *_stalled_* rate where only that is served; google/cadvisor#3649) at or "
        "above this share of wall time while the GPU waits. Heur.",
    )
    veto_restarts: int = Field(
        default=1,
        ge=1,
        description="Container restarts in the window at or above this, below crash_loop_restarts: a veto on "
        "every shrink that names no cause (the window mixes container lives and undercounts the work). "
        "Heur (issue 18: restarts veto).",
    )
    # --- confidence factors ------------------------------------------------------------------------
    shared_gpu_confidence: float = Field(
        default=0.7,
        ge=0,
        le=1,
        description="Confidence factor for GPUs shared by time-slicing/MPS: device series are duplicated "
        "per pod and include neighbours' work. NV (dcgm-exporter KUBERNETES_VIRTUAL_GPUS, rule S1); "
        "factor Heur.",
    )
    missing_profiling_confidence: float = Field(
        default=0.8,
        ge=0,
        le=1,
        description="Confidence factor when a rule falls back from DCGM profiling fields (GR_ENGINE_ACTIVE, "
        "SM_ACTIVE) to GPU_UTIL, which only says 'a kernel ran'. NV (nvml.h utilisation semantics).",
    )
    # --- per-rule settings, one nested model per rule (its registry line names it) ---------------
    health: HealthSettings = _rule(HealthSettings)
    idle: IdleSettings = _rule(IdleSettings)
    input_pipeline: InputPipelineSettings = _rule(InputPipelineSettings)
    host_transfer: HostTransferSettings = _rule(HostTransferSettings)
    communication: CommunicationSettings = _rule(CommunicationSettings)
    launch_bound: LaunchBoundSettings = _rule(LaunchBoundSettings)
    host_wait: HostWaitSettings = _rule(HostWaitSettings)
    occupancy: LowOccupancySettings = _rule(LowOccupancySettings)
    memory_bandwidth: MemoryBandwidthSettings = _rule(MemoryBandwidthSettings)
    no_tensor_cores: NoTensorCoresSettings = _rule(NoTensorCoresSettings)
    oversized: OversizedSettings = _rule(OversizedSettings)
    memory_capacity: MemoryCapacitySettings = _rule(MemoryCapacitySettings)
    under_replicated: UnderReplicatedSettings = _rule(UnderReplicatedSettings)
    over_replicated: OverReplicatedSettings = _rule(OverReplicatedSettings)
    crash_looping: CrashLoopingSettings = _rule(CrashLoopingSettings)

    @model_validator(mode="before")
    @classmethod
    def _nest_flat_names(cls, data: Any) -> Any:
        """Put a rule's setting given by its flat name (snake_case or camelCase) under its rule."""
        if not isinstance(data, Mapping):
            return data
        out = dict(data)
        for key in [k for k in out if k in RULE_SETTING_PATHS]:
            group, field = RULE_SETTING_PATHS[key]
            nested = out.get(group) or out.get(to_camel(group)) or {}
            if isinstance(nested, BaseModel):
                nested = nested.model_dump()
            if not isinstance(nested, Mapping):
                return data  # pydantic reports the malformed group
            value = out.pop(key)
            given = {k: v for k, v in nested.items() if k in (field, to_camel(field))}
            if any(v != value for v in given.values()):
                raise ValueError(f"{key} is given twice, flat and under {group}, with different values")
            out.pop(to_camel(group), None)
            out[group] = {**{k: v for k, v in nested.items() if k not in given}, field: value}
        return out

    def with_overrides(self, overrides: Mapping[str, object]) -> EngineSettings:
        """Copy with a policy's overrides applied, validated.

        Names: an engine-wide setting's snake_case or camelCase name; a rule's setting by its flat name
        (`idleBusyP95`) or its path (`idle.idleBusyP95`). Raises ValueError naming the offending field,
        and leaves `self` unchanged.
        """
        merged = self.model_dump()
        unknown = []
        for key, value in overrides.items():
            group_name, _, field_name = key.rpartition(".")
            flat = field_name if group_name else key
            path = RULE_SETTING_PATHS.get(flat)
            if group_name and (path is None or path[0] != _GROUP_NAMES.get(group_name)):
                unknown.append(key)
            elif path is not None:
                merged[path[0]][path[1]] = value
            elif flat in _ENGINE_WIDE_NAMES:
                merged[_ENGINE_WIDE_NAMES[flat]] = value
            else:
                unknown.append(key)
        if unknown:
            raise ValueError(f"unknown engine setting(s): {', '.join(sorted(unknown))}")
        try:
            return type(self).model_validate(merged)
        except ValidationError as error:
            raise ValueError(f"invalid engine setting override: {error}") from error


def _rule_groups() -> dict[str, type[BaseModel]]:
    """EngineSettings' nested rule models by field name."""
    out: dict[str, type[BaseModel]] = {}
    for name, info in EngineSettings.model_fields.items():
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, _Settings):
            out[name] = kind
    return out


#: A rule's settings group by its field name on EngineSettings, and by its camelCase name.
RULE_SETTING_GROUPS: dict[str, type[BaseModel]] = _rule_groups()
_GROUP_NAMES: dict[str, str] = {
    **{name: name for name in RULE_SETTING_GROUPS},
    **{to_camel(name): name for name in RULE_SETTING_GROUPS},
}
#: Flat name (snake_case and camelCase) of every rule setting → (group, field).
RULE_SETTING_PATHS: dict[str, tuple[str, str]] = {
    alias: (group, field)
    for group, model in RULE_SETTING_GROUPS.items()
    for field in model.model_fields
    for alias in (field, to_camel(field))
}
if set(RULE_SETTING_PATHS) & (set(_GROUP_NAMES) | set(EngineSettings.model_fields)):
    raise TypeError("a rule setting's flat name must not name a rule group or an engine-wide setting")
_ENGINE_WIDE_NAMES: dict[str, str] = {
    alias: name
    for name in EngineSettings.model_fields
    if name not in RULE_SETTING_GROUPS
    for alias in (name, to_camel(name))
}


def documented_settings() -> list[tuple[str | None, str, FieldInfo]]:
    """Every setting as (rule group or None for engine-wide, field name, its field), in model order."""
    out: list[tuple[str | None, str, FieldInfo]] = []
    for name, info in EngineSettings.model_fields.items():
        group = RULE_SETTING_GROUPS.get(name)
        if group is None:
            out.append((None, name, info))
        else:
            out.extend((name, field, field_info) for field, field_info in group.model_fields.items())
    return out


def setting_names() -> list[str]:
    """Every setting's policy name (camelCase, flat), engine-wide and per rule."""
    return [to_camel(name) for _, name, _ in documented_settings()]


DEFAULT_SETTINGS = EngineSettings()
