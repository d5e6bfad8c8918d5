"""What the engine sees of one workload over one observation window.

This is the contract between the metric sources (Prometheus, OpenMetrics files, the NVML agent, the
simulator) and the pure diagnosis engine: sources reduce raw series to these statistics, the engine
never sees a raw sample. Every statistic is optional because real clusters lack fields (no
`DCGM_FI_DEV_GPU_UTIL` under MIG, no profiling fields on default dcgm-exporter installs); a missing
statistic is `None`, never a made-up zero.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class Signal(StrEnum):
    """Normalised signal names. Units are in the value names; ratios are 0..1."""

    # GPU activity (per GPU or MIG instance)
    GR_ENGINE_ACTIVE = "gr_engine_active"  # DCGM_FI_PROF_GR_ENGINE_ACTIVE, ratio
    SM_ACTIVE = "sm_active"  # DCGM_FI_PROF_SM_ACTIVE, ratio
    SM_OCCUPANCY = "sm_occupancy"  # DCGM_FI_PROF_SM_OCCUPANCY, ratio
    TENSOR_ACTIVE = "tensor_active"  # DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, ratio
    FP32_ACTIVE = "fp32_active"  # DCGM_FI_PROF_PIPE_FP32_ACTIVE, ratio
    FP16_ACTIVE = "fp16_active"  # DCGM_FI_PROF_PIPE_FP16_ACTIVE, ratio
    DRAM_ACTIVE = "dram_active"  # DCGM_FI_PROF_DRAM_ACTIVE, ratio
    GPU_UTIL = "gpu_util"  # DCGM_FI_DEV_GPU_UTIL / 100, ratio (absent under MIG)
    # GPU memory and transfers
    FB_USED_MIB = "fb_used_mib"  # DCGM_FI_DEV_FB_USED, MiB
    FB_FREE_MIB = "fb_free_mib"  # DCGM_FI_DEV_FB_FREE, MiB
    PCIE_TX_BYTES_PER_S = "pcie_tx_bytes_per_s"  # DCGM_FI_PROF_PCIE_TX_BYTES (device -> host)
    PCIE_RX_BYTES_PER_S = "pcie_rx_bytes_per_s"  # DCGM_FI_PROF_PCIE_RX_BYTES (host -> device)
    NVLINK_TX_BYTES_PER_S = "nvlink_tx_bytes_per_s"  # DCGM_FI_PROF_NVLINK_TX_BYTES
    NVLINK_RX_BYTES_PER_S = "nvlink_rx_bytes_per_s"  # DCGM_FI_PROF_NVLINK_RX_BYTES
    # GPU health
    POWER_WATTS = "power_watts"  # DCGM_FI_DEV_POWER_USAGE
    SM_CLOCK_MHZ = "sm_clock_mhz"  # DCGM_FI_DEV_SM_CLOCK
    GPU_TEMP_C = "gpu_temp_c"  # DCGM_FI_DEV_GPU_TEMP
    THROTTLE_FRACTION = "throttle_fraction"  # share of samples with HW/SW thermal, HW slowdown or power brake
    # Pod (cAdvisor)
    CPU_USAGE_CORES = "cpu_usage_cores"  # rate(container_cpu_usage_seconds_total)
    CPU_THROTTLED_RATIO = "cpu_throttled_ratio"  # throttled periods / periods
    MEMORY_WORKING_SET_BYTES = "memory_working_set_bytes"  # container_memory_working_set_bytes
    FS_READ_BYTES_PER_S = "fs_read_bytes_per_s"  # rate(container_fs_reads_bytes_total)
    FS_WRITE_BYTES_PER_S = "fs_write_bytes_per_s"  # rate(container_fs_writes_bytes_total)
    NET_RX_BYTES_PER_S = "net_rx_bytes_per_s"  # rate(container_network_receive_bytes_total)
    NET_TX_BYTES_PER_S = "net_tx_bytes_per_s"  # rate(container_network_transmit_bytes_total)
    CPU_PRESSURE_RATIO = "cpu_pressure_ratio"  # rate(container_pressure_cpu_stalled_seconds_total), PSI
    IO_PRESSURE_RATIO = "io_pressure_ratio"  # rate(container_pressure_io_stalled_seconds_total), PSI
    # Pod (node agent, /proc): the container's busiest process in cores, and how many sit at one core
    PROCESS_CPU_MAX_CORES = "process_cpu_max_cores"  # gpu_rightsizer_container_process_cpu_max_cores
    PROCESSES_PINNED = "processes_pinned"  # gpu_rightsizer_container_processes_pinned
    # Serving (optional, from the application: vLLM, Triton, a gateway)
    REQUESTS_PER_S = "requests_per_s"
    QUEUE_LENGTH = "queue_length"
    QUEUE_TIME_MS = "queue_time_ms"


class SignalStats(BaseModel):
    """Distribution of one signal over the window, after NaN and DCGM blank sentinels are dropped."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    samples: int = Field(ge=0, description="Samples that survived cleaning.")
    mean: float
    p50: float
    p95: float
    p99: float
    max: float
    min: float = 0.0
    active_fraction: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Share of samples above the signal's activity floor."
    )
    trend_per_hour: float | None = Field(
        default=None, description="Least-squares slope of the signal, in its unit per hour."
    )
    sawtooth: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="How strongly the signal alternates between high and low (0 flat, 1 square wave).",
    )


class GPUObservation(BaseModel):
    """Statistics of one GPU (or MIG instance) attached to one pod."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    uuid: str = Field(description="GPU UUID, or MIG instance UUID/'<gpu>-<gi>' id.")
    index: str | None = None
    node: str | None = None
    model_name: str | None = Field(default=None, description="e.g. 'NVIDIA H100 80GB HBM3'.")
    mig_profile: str | None = Field(default=None, description="e.g. '1g.10gb' when this is a MIG slice.")
    shared_by_pods: int = Field(
        default=1, ge=1, description="Pods that see this same device (time-slicing/MPS copies series)."
    )
    stats: dict[Signal, SignalStats] = Field(default_factory=dict)
    xid_codes: list[int] = Field(default_factory=list, description="XID error codes seen in the window.")
    memory_total_mib: float | None = None


class PodObservation(BaseModel):
    """Statistics of one pod of the workload, with its GPUs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    node: str | None = None
    stats: dict[Signal, SignalStats] = Field(default_factory=dict)
    gpus: list[GPUObservation] = Field(default_factory=list)
    restarts: int = Field(default=0, ge=0)
    oom_killed: bool = False
    gpu_cpu_correlation: float | None = Field(
        default=None,
        ge=-1.0,
        le=1.0,
        description="Pearson correlation of GPU busy with CPU saturation over the window.",
    )


class WorkloadRef(BaseModel):
    """The object that owns the pods: what a recommendation targets and what the actuator patches."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str
    kind: str = Field(description="Deployment, StatefulSet, Job, CronJob or Pod.")
    name: str
    api_version: str = "apps/v1"

    @property
    def key(self) -> str:
        """`namespace/Kind/name`, unique in a cluster."""
        return f"{self.namespace}/{self.kind}/{self.name}"


class HPAInfo(BaseModel):
    """The HorizontalPodAutoscaler that owns the replica count, if any."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    min_replicas: int = Field(ge=0)
    max_replicas: int = Field(ge=1)


class Allocation(BaseModel):
    """What the workload asks for today (per pod, except `replicas`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_resource: str = Field(
        default="nvidia.com/gpu", description="nvidia.com/gpu, nvidia.com/mig-1g.10gb, nvidia.com/gpu.shared"
    )
    gpu_count: int = Field(default=1, ge=0, description="GPUs (or slices) per pod.")
    gpu_model: str | None = Field(default=None, description="GFD product label, e.g. NVIDIA-H100-80GB-HBM3.")
    gpu_memory_mib: float | None = Field(default=None, description="Memory of one allocated GPU or slice.")
    mig_profile: str | None = None
    sharing: str = Field(default="exclusive", description="exclusive, mig, time-slicing, mps or hami.")
    cpu_request_cores: float | None = None
    cpu_limit_cores: float | None = None
    memory_request_bytes: float | None = None
    memory_limit_bytes: float | None = None
    replicas: int = Field(default=1, ge=0)
    hpa: HPAInfo | None = None
    workload_type: str | None = Field(
        default=None, description="'training', 'inference' or None when unknown (from labels or shape)."
    )


class WorkloadWindow(BaseModel):
    """Everything known about one workload over one window: the engine's only input."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workload: WorkloadRef
    start: datetime
    end: datetime
    step_seconds: float = Field(default=60.0, gt=0)
    allocation: Allocation
    pods: list[PodObservation] = Field(default_factory=list)
    stats: dict[Signal, SignalStats] = Field(
        default_factory=dict, description="Workload-level signals (serving: requests/s, queue)."
    )
    source: str = Field(default="unknown", description="prometheus, openmetrics, agent, simulator.")
    warnings: list[str] = Field(
        default_factory=list, description="Data problems found while reading (shown to users)."
    )

    @property
    def duration_seconds(self) -> float:
        """Length of the window."""
        return (self.end - self.start).total_seconds()
