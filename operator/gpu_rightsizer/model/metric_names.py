"""Names of the series gpu-rightsizer reads, and how each maps onto a normalised `Signal`.

One vocabulary for every producer and consumer: the simulator and the NVML agent *export* these
names, the OpenMetrics and Prometheus sources *read* them. The names are those of dcgm-exporter
(gpu-signals §1.2), cAdvisor (kubelet) and kube-state-metrics, so a real cluster needs no renaming.
Pure constants: no I/O, no third-party imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from gpu_rightsizer.model.observation import Signal

# --- dcgm-exporter: profiling fields (ratios 0..1, except PCIe/NVLink in bytes/s) -----------------
DCGM_GR_ENGINE_ACTIVE: Final = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
DCGM_SM_ACTIVE: Final = "DCGM_FI_PROF_SM_ACTIVE"
DCGM_SM_OCCUPANCY: Final = "DCGM_FI_PROF_SM_OCCUPANCY"
DCGM_TENSOR_ACTIVE: Final = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
DCGM_FP32_ACTIVE: Final = "DCGM_FI_PROF_PIPE_FP32_ACTIVE"
DCGM_FP16_ACTIVE: Final = "DCGM_FI_PROF_PIPE_FP16_ACTIVE"
DCGM_DRAM_ACTIVE: Final = "DCGM_FI_PROF_DRAM_ACTIVE"
DCGM_PCIE_TX_BYTES: Final = "DCGM_FI_PROF_PCIE_TX_BYTES"
DCGM_PCIE_RX_BYTES: Final = "DCGM_FI_PROF_PCIE_RX_BYTES"
DCGM_NVLINK_TX_BYTES: Final = "DCGM_FI_PROF_NVLINK_TX_BYTES"
DCGM_NVLINK_RX_BYTES: Final = "DCGM_FI_PROF_NVLINK_RX_BYTES"
# --- dcgm-exporter: device fields --------------------------------------------------------------------
DCGM_GPU_UTIL: Final = "DCGM_FI_DEV_GPU_UTIL"  # percent; absent under MIG
DCGM_FB_USED: Final = "DCGM_FI_DEV_FB_USED"  # MiB
DCGM_FB_FREE: Final = "DCGM_FI_DEV_FB_FREE"  # MiB
DCGM_FB_RESERVED: Final = "DCGM_FI_DEV_FB_RESERVED"  # MiB
DCGM_POWER_USAGE: Final = "DCGM_FI_DEV_POWER_USAGE"  # W
DCGM_SM_CLOCK: Final = "DCGM_FI_DEV_SM_CLOCK"  # MHz
DCGM_GPU_TEMP: Final = "DCGM_FI_DEV_GPU_TEMP"  # °C
DCGM_CLOCKS_EVENT_REASONS: Final = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"  # bitmask
#: The same field (112) under its name before DCGM 3.3; dcgm-exporter names the series after the CSV line.
DCGM_CLOCK_THROTTLE_REASONS: Final = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
#: Both names of the clock-event bitmask, current first.
DCGM_CLOCK_EVENT_METRICS: Final[tuple[str, str]] = (DCGM_CLOCKS_EVENT_REASONS, DCGM_CLOCK_THROTTLE_REASONS)
#: Counters of the time the clocks were held down per reason, in nanoseconds (dcgm_fields.h: "Violation
#: time in ns"; NVML `nvmlViolationTime_t.violationTime`). Their rate / 1e9 is the share of time throttled.
DCGM_POWER_VIOLATION: Final = "DCGM_FI_DEV_POWER_VIOLATION"
DCGM_THERMAL_VIOLATION: Final = "DCGM_FI_DEV_THERMAL_VIOLATION"
DCGM_BOARD_LIMIT_VIOLATION: Final = "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION"
DCGM_RELIABILITY_VIOLATION: Final = "DCGM_FI_DEV_RELIABILITY_VIOLATION"
DCGM_VIOLATION_COUNTERS: Final[tuple[str, ...]] = (
    DCGM_POWER_VIOLATION,
    DCGM_THERMAL_VIOLATION,
    DCGM_BOARD_LIMIT_VIOLATION,
    DCGM_RELIABILITY_VIOLATION,
)
#: The violation counters that mean platform throttling. Power violation time is the software power cap
#: (the clock-event bit 0x4 the bitmask gate leaves out too): a GPU at full load sits at its power limit,
#: which is no reason to distrust its figures.
DCGM_THROTTLE_VIOLATION_COUNTERS: Final[tuple[str, ...]] = (
    DCGM_THERMAL_VIOLATION,
    DCGM_BOARD_LIMIT_VIOLATION,
    DCGM_RELIABILITY_VIOLATION,
)
VIOLATION_NS_PER_SECOND: Final = 1e9
DCGM_XID_ERRORS: Final = "DCGM_FI_DEV_XID_ERRORS"  # value of the last Xid; labels err_code, err_msg

#: Every dcgm-exporter series gpu-rightsizer reads.
DCGM_METRICS: Final[tuple[str, ...]] = (
    DCGM_GR_ENGINE_ACTIVE,
    DCGM_SM_ACTIVE,
    DCGM_SM_OCCUPANCY,
    DCGM_TENSOR_ACTIVE,
    DCGM_FP32_ACTIVE,
    DCGM_FP16_ACTIVE,
    DCGM_DRAM_ACTIVE,
    DCGM_PCIE_TX_BYTES,
    DCGM_PCIE_RX_BYTES,
    DCGM_NVLINK_TX_BYTES,
    DCGM_NVLINK_RX_BYTES,
    DCGM_GPU_UTIL,
    DCGM_FB_USED,
    DCGM_FB_FREE,
    DCGM_FB_RESERVED,
    DCGM_POWER_USAGE,
    DCGM_SM_CLOCK,
    DCGM_GPU_TEMP,
    DCGM_CLOCKS_EVENT_REASONS,
    DCGM_CLOCK_THROTTLE_REASONS,
    *DCGM_VIOLATION_COUNTERS,
    DCGM_XID_ERRORS,
)

#: Fields reported for the whole board only, never per MIG instance (gpu-signals §0.4, §1.5). Under MIG
#: dcgm-exporter still labels them with each GPU instance (dcgm-exporter #257, #561), so every tenant of
#: a board sees the board's value.
DCGM_BOARD_ONLY_METRICS: Final[frozenset[str]] = frozenset(
    {
        DCGM_GPU_UTIL,
        DCGM_POWER_USAGE,
        DCGM_SM_CLOCK,
        DCGM_GPU_TEMP,
        DCGM_CLOCKS_EVENT_REASONS,
        DCGM_CLOCK_THROTTLE_REASONS,
        *DCGM_VIOLATION_COUNTERS,
        DCGM_PCIE_TX_BYTES,
        DCGM_PCIE_RX_BYTES,
        DCGM_NVLINK_TX_BYTES,
        DCGM_NVLINK_RX_BYTES,
    }
)
#: The board-only fields that measure *work* (utilisation, PCIe and NVLink traffic): on a MIG slice they
#: are the sum over every tenant, so they are never given to one (a busy neighbour would make an idle
#: slice look busy, or HostTransferBound). The other board-only fields describe the board's *condition*
#: (clocks, power, temperature, throttling), which every tenant shares, and stay.
DCGM_BOARD_ACTIVITY_METRICS: Final[frozenset[str]] = frozenset(
    {DCGM_GPU_UTIL, DCGM_PCIE_TX_BYTES, DCGM_PCIE_RX_BYTES, DCGM_NVLINK_TX_BYTES, DCGM_NVLINK_RX_BYTES}
)

#: Values at or above this are DCGM "blank / not found / not supported" sentinels (`dcgm_structs.h`).
DCGM_BLANK_SENTINEL_MIN: Final = float(0x7FFFFFFFFFFFFFF0)

#: `DCGM_FI_DEV_CLOCKS_EVENT_REASONS` bits that mean platform throttling (gpu-signals §5):
#: 0x8 HW slowdown, 0x20 SW thermal, 0x40 HW thermal, 0x80 HW power brake.
CLOCK_EVENT_GPU_IDLE: Final = 0x1
CLOCK_EVENT_SW_POWER_CAP: Final = 0x4
CLOCK_EVENT_HW_SLOWDOWN: Final = 0x8
CLOCK_EVENT_SW_THERMAL: Final = 0x20
CLOCK_EVENT_HW_THERMAL: Final = 0x40
CLOCK_EVENT_HW_POWER_BRAKE: Final = 0x80
THROTTLE_CLOCK_EVENT_BITS: Final[tuple[int, ...]] = (
    CLOCK_EVENT_HW_SLOWDOWN,
    CLOCK_EVENT_SW_THERMAL,
    CLOCK_EVENT_HW_THERMAL,
    CLOCK_EVENT_HW_POWER_BRAKE,
)
THROTTLE_CLOCK_EVENT_MASK: Final = (
    CLOCK_EVENT_HW_SLOWDOWN | CLOCK_EVENT_SW_THERMAL | CLOCK_EVENT_HW_THERMAL | CLOCK_EVENT_HW_POWER_BRAKE
)

# --- cAdvisor (kubelet /metrics/cadvisor) -------------------------------------------------------------
CADVISOR_CPU_USAGE: Final = "container_cpu_usage_seconds_total"  # counter, seconds
CADVISOR_CPU_THROTTLED_PERIODS: Final = "container_cpu_cfs_throttled_periods_total"  # counter
CADVISOR_CPU_PERIODS: Final = "container_cpu_cfs_periods_total"  # counter
CADVISOR_MEMORY_WORKING_SET: Final = "container_memory_working_set_bytes"  # gauge
CADVISOR_FS_READS: Final = "container_fs_reads_bytes_total"  # counter
CADVISOR_FS_WRITES: Final = "container_fs_writes_bytes_total"  # counter
CADVISOR_NET_RX: Final = "container_network_receive_bytes_total"  # counter, pod level
CADVISOR_NET_TX: Final = "container_network_transmit_bytes_total"  # counter, pod level
#: Pressure stall information (PSI, cgroup v2 cpu.pressure / io.pressure), seconds, counters. cAdvisor
#: names PSI "some" (at least one task of the container waited) `waiting` and PSI "full" (every task
#: stalled at once) `stalled`; kubelet serves both on /metrics/cadvisor where the kernel has PSI.
CADVISOR_CPU_PRESSURE_WAITING: Final = "container_pressure_cpu_waiting_seconds_total"
CADVISOR_CPU_PRESSURE_STALLED: Final = "container_pressure_cpu_stalled_seconds_total"
CADVISOR_IO_PRESSURE_WAITING: Final = "container_pressure_io_waiting_seconds_total"
CADVISOR_IO_PRESSURE_STALLED: Final = "container_pressure_io_stalled_seconds_total"

#: The node agent's per-process CPU (agent/process_cpu.py), per container, with cAdvisor's labels: the
#: busiest process's CPU in cores, and how many processes are pinned at one core.
AGENT_PROCESS_CPU_MAX: Final = "gpu_rightsizer_container_process_cpu_max_cores"  # gauge, cores
AGENT_PROCESSES_PINNED: Final = "gpu_rightsizer_container_processes_pinned"  # gauge, count

#: cAdvisor `container` values that are not an application container: "" is the pod cgroup (the sum of
#: its containers) and "POD" the pause container. Summing them with real containers double-counts.
CADVISOR_NON_APP_CONTAINERS: Final[frozenset[str]] = frozenset({"", "POD"})
#: Network series exist only at pod level, under one of these `container` values.
CADVISOR_NETWORK_METRICS: Final[frozenset[str]] = frozenset({CADVISOR_NET_RX, CADVISOR_NET_TX})

# --- kube-state-metrics -------------------------------------------------------------------------------
KSM_POD_OWNER: Final = "kube_pod_owner"  # {namespace,pod,owner_kind,owner_name,owner_is_controller}
KSM_REPLICASET_OWNER: Final = "kube_replicaset_owner"  # {namespace,replicaset,owner_kind,owner_name}
KSM_JOB_OWNER: Final = "kube_job_owner"  # {namespace,job_name,owner_kind,owner_name}
KSM_POD_INFO: Final = "kube_pod_info"  # {namespace,pod,node,...}
KSM_POD_LABELS: Final = "kube_pod_labels"  # {namespace,pod,label_<sanitised>...}
KSM_POD_REQUESTS: Final = "kube_pod_container_resource_requests"  # {namespace,pod,container,resource,unit}
KSM_POD_LIMITS: Final = "kube_pod_container_resource_limits"
KSM_POD_RESTARTS: Final = "kube_pod_container_status_restarts_total"  # {namespace,pod,container}
KSM_POD_LAST_TERMINATED: Final = "kube_pod_container_status_last_terminated_reason"  # {...,reason}
KSM_NODE_LABELS: Final = "kube_node_labels"  # {node,label_nvidia_com_gpu_product,...}
KSM_DEPLOYMENT_REPLICAS: Final = "kube_deployment_spec_replicas"  # {namespace,deployment}
KSM_STATEFULSET_REPLICAS: Final = "kube_statefulset_replicas"  # {namespace,statefulset}
KSM_HPA_INFO: Final = (
    "kube_horizontalpodautoscaler_info"  # {namespace,horizontalpodautoscaler,scaletargetref_*}
)
KSM_HPA_MIN_REPLICAS: Final = "kube_horizontalpodautoscaler_spec_min_replicas"
KSM_HPA_MAX_REPLICAS: Final = "kube_horizontalpodautoscaler_spec_max_replicas"

#: kube_node_labels labels set by GPU feature discovery (node label names sanitised by KSM).
NODE_LABEL_GPU_PRODUCT: Final = "label_nvidia_com_gpu_product"  # e.g. NVIDIA-H100-80GB-HBM3
NODE_LABEL_GPU_MEMORY: Final = "label_nvidia_com_gpu_memory"  # MiB
NODE_LABEL_GPU_SHARING: Final = "label_nvidia_com_gpu_sharing_strategy"  # time-slicing|mps|none
NODE_LABEL_GPU_REPLICAS: Final = "label_nvidia_com_gpu_replicas"
NODE_LABEL_MIG_STRATEGY: Final = "label_nvidia_com_mig_strategy"  # none|single|mixed
NODE_LABEL_MIG_CONFIG: Final = "label_nvidia_com_mig_config"  # MIG manager layout, e.g. all-1g.10gb
NODE_LABEL_MIG_CAPABLE: Final = "label_nvidia_com_mig_capable"  # true|false
KSM_NODE_ALLOCATABLE: Final = "kube_node_status_allocatable"  # {node,resource,unit}
#: Optional pod label `gpurightsizer.io/workload-type` (training|inference), as kube_pod_labels shows it.
POD_LABEL_WORKLOAD_TYPE: Final = "label_gpurightsizer_io_workload_type"
#: LeaderWorkerSet's group label on every leader and worker pod (`leaderworkerset.sigs.k8s.io/name`).
POD_LABEL_LWS_NAME: Final = "label_leaderworkerset_sigs_k8s_io_name"

#: HAMi vGPU resources: a pod asks `nvidia.com/gpu` for physical GPUs plus a memory and core share
#: (HAMi README, "nvidia.com/gpu refers to the number of physical GPUs").
HAMI_RESOURCES: Final[frozenset[str]] = frozenset(
    {"nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpumem-percentage"}
)

#: Owner kind kube-state-metrics writes for a pod without a controller.
KSM_NO_OWNER: Final = "<none>"

# --- serving (application metrics; optional) -----------------------------------------------------------
#: Request counters (a rate of any of these is requests/s). vLLM and Triton names.
SERVING_REQUEST_COUNTERS: Final[tuple[str, ...]] = (
    "vllm:request_success_total",
    "nv_inference_request_success",
)
#: Queue-length gauges (requests waiting for a slot).
SERVING_QUEUE_GAUGES: Final[tuple[str, ...]] = ("vllm:num_requests_waiting",)
#: Mean queueing time gauges in milliseconds (a gateway exports this directly).
SERVING_QUEUE_TIME_MS_GAUGES: Final[tuple[str, ...]] = ("gateway_queue_time_milliseconds",)
VLLM_REQUESTS_TOTAL: Final = SERVING_REQUEST_COUNTERS[0]
VLLM_REQUESTS_WAITING: Final = SERVING_QUEUE_GAUGES[0]
GATEWAY_QUEUE_TIME_MS: Final = SERVING_QUEUE_TIME_MS_GAUGES[0]

# --- label variants --------------------------------------------------------------------------------------
#: Preferred first: `exported_*` carries the workload's pod when Prometheus renamed the exporter's labels
#: (honor_labels false, gpu-signals §0.6); `pod_name` etc. come from `--use-old-namespace`.
POD_LABELS: Final[tuple[str, ...]] = ("exported_pod", "pod", "pod_name")
NAMESPACE_LABELS: Final[tuple[str, ...]] = ("exported_namespace", "namespace", "pod_namespace")
CONTAINER_LABELS: Final[tuple[str, ...]] = ("exported_container", "container", "container_name")
HOSTNAME_LABELS: Final[tuple[str, ...]] = ("Hostname", "hostname")  # released tags / main after d5e5f51
UUID_LABELS: Final[tuple[str, ...]] = ("UUID", "uuid", "gpu_uuid")
MODEL_NAME_LABELS: Final[tuple[str, ...]] = ("modelName", "model_name")
GPU_INDEX_LABEL: Final = "gpu"
DEVICE_LABEL: Final = "device"
PCI_BUS_ID_LABEL: Final = "pci_bus_id"
MIG_PROFILE_LABEL: Final = "GPU_I_PROFILE"
MIG_INSTANCE_LABEL: Final = "GPU_I_ID"
VGPU_LABEL: Final = "vgpu"  # shared-GPU replica index (time-slicing / MPS)
XID_CODE_LABEL: Final = "err_code"
XID_MESSAGE_LABEL: Final = "err_msg"
DRIVER_VERSION_LABEL: Final = "DCGM_FI_DRIVER_VERSION"
NODE_LABEL: Final = "node"


def first_label(labels: dict[str, str], candidates: tuple[str, ...]) -> str | None:
    """The value of the first non-empty label among `candidates` (label variants, preferred first)."""
    for name in candidates:
        value = labels.get(name)
        if value:
            return value
    return None


# --- metric → Signal -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SignalSource:
    """How one exported series becomes one normalised signal: `signal = value × scale` (or its rate)."""

    metric: str
    signal: Signal
    scale: float = 1.0
    counter: bool = False  # take the per-second rate (with counter resets) before scaling
    #: How a pod's containers combine: "sum" (usage adds up) or "max" (the busiest one, e.g. a
    #: per-process peak: two containers each with a process at one core still have a one-core peak).
    combine: Literal["sum", "max"] = "sum"


#: Per-GPU (or per-MIG-instance) gauges.
GPU_SIGNAL_SOURCES: Final[tuple[SignalSource, ...]] = (
    SignalSource(DCGM_GR_ENGINE_ACTIVE, Signal.GR_ENGINE_ACTIVE),
    SignalSource(DCGM_SM_ACTIVE, Signal.SM_ACTIVE),
    SignalSource(DCGM_SM_OCCUPANCY, Signal.SM_OCCUPANCY),
    SignalSource(DCGM_TENSOR_ACTIVE, Signal.TENSOR_ACTIVE),
    SignalSource(DCGM_FP32_ACTIVE, Signal.FP32_ACTIVE),
    SignalSource(DCGM_FP16_ACTIVE, Signal.FP16_ACTIVE),
    SignalSource(DCGM_DRAM_ACTIVE, Signal.DRAM_ACTIVE),
    SignalSource(DCGM_GPU_UTIL, Signal.GPU_UTIL, scale=0.01),
    SignalSource(DCGM_FB_USED, Signal.FB_USED_MIB),
    SignalSource(DCGM_FB_FREE, Signal.FB_FREE_MIB),
    SignalSource(DCGM_PCIE_TX_BYTES, Signal.PCIE_TX_BYTES_PER_S),
    SignalSource(DCGM_PCIE_RX_BYTES, Signal.PCIE_RX_BYTES_PER_S),
    SignalSource(DCGM_NVLINK_TX_BYTES, Signal.NVLINK_TX_BYTES_PER_S),
    SignalSource(DCGM_NVLINK_RX_BYTES, Signal.NVLINK_RX_BYTES_PER_S),
    SignalSource(DCGM_POWER_USAGE, Signal.POWER_WATTS),
    SignalSource(DCGM_SM_CLOCK, Signal.SM_CLOCK_MHZ),
    SignalSource(DCGM_GPU_TEMP, Signal.GPU_TEMP_C),
)
GPU_SIGNAL_BY_METRIC: Final[dict[str, SignalSource]] = {
    source.metric: source for source in GPU_SIGNAL_SOURCES
}
#: Signals of `DCGM_BOARD_ACTIVITY_METRICS`: kept off MIG slices.
BOARD_ACTIVITY_SIGNALS: Final[frozenset[Signal]] = frozenset(
    GPU_SIGNAL_BY_METRIC[metric].signal for metric in DCGM_BOARD_ACTIVITY_METRICS
)

#: Per-pod series with cAdvisor's labels (cAdvisor's own and the node agent's per-process gauges),
#: combined over the pod's application containers as each source says.
POD_SIGNAL_SOURCES: Final[tuple[SignalSource, ...]] = (
    SignalSource(CADVISOR_CPU_USAGE, Signal.CPU_USAGE_CORES, counter=True),
    SignalSource(CADVISOR_MEMORY_WORKING_SET, Signal.MEMORY_WORKING_SET_BYTES),
    SignalSource(CADVISOR_FS_READS, Signal.FS_READ_BYTES_PER_S, counter=True),
    SignalSource(CADVISOR_FS_WRITES, Signal.FS_WRITE_BYTES_PER_S, counter=True),
    SignalSource(CADVISOR_NET_RX, Signal.NET_RX_BYTES_PER_S, counter=True),
    SignalSource(CADVISOR_NET_TX, Signal.NET_TX_BYTES_PER_S, counter=True),
    SignalSource(AGENT_PROCESS_CPU_MAX, Signal.PROCESS_CPU_MAX_CORES, combine="max"),
    SignalSource(AGENT_PROCESSES_PINNED, Signal.PROCESSES_PINNED),
)
POD_SIGNAL_BY_METRIC: Final[dict[str, SignalSource]] = {
    source.metric: source for source in POD_SIGNAL_SOURCES
}


@dataclass(frozen=True)
class PressureSource:
    """One PSI signal: the share of wall time a pod's tasks waited on a resource (rate of seconds).

    Per pod it is the most-pressed application container's `waiting` ("some") rate, and the `stalled`
    ("full") rate only where no `waiting` series is exposed: full never exceeds some, so the vetoes
    that read it are never fed the smaller figure when both exist.
    """

    signal: Signal
    waiting: str
    stalled: str


PRESSURE_SOURCES: Final[tuple[PressureSource, ...]] = (
    PressureSource(Signal.CPU_PRESSURE_RATIO, CADVISOR_CPU_PRESSURE_WAITING, CADVISOR_CPU_PRESSURE_STALLED),
    PressureSource(Signal.IO_PRESSURE_RATIO, CADVISOR_IO_PRESSURE_WAITING, CADVISOR_IO_PRESSURE_STALLED),
)
PRESSURE_METRICS: Final[frozenset[str]] = frozenset(
    name for source in PRESSURE_SOURCES for name in (source.waiting, source.stalled)
)

#: Serving series (per pod; workload level is their sum over pods at each instant).
SERVING_SIGNAL_SOURCES: Final[tuple[SignalSource, ...]] = (
    *(SignalSource(name, Signal.REQUESTS_PER_S, counter=True) for name in SERVING_REQUEST_COUNTERS),
    *(SignalSource(name, Signal.QUEUE_LENGTH) for name in SERVING_QUEUE_GAUGES),
    *(SignalSource(name, Signal.QUEUE_TIME_MS) for name in SERVING_QUEUE_TIME_MS_GAUGES),
)
SERVING_SIGNAL_BY_METRIC: Final[dict[str, SignalSource]] = {
    source.metric: source for source in SERVING_SIGNAL_SOURCES
}

#: Signals that are ratios 0..1 (a value outside [0, 1] after scaling is contradictory data).
RATIO_SIGNALS: Final[frozenset[Signal]] = frozenset(
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

#: Activity floor per signal: `SignalStats.active_fraction` is the share of samples above it.
#: 0.05 busy = "job active" (gpu-signals §4.3 preamble).
ACTIVITY_FLOORS: Final[dict[Signal, float]] = {
    Signal.GR_ENGINE_ACTIVE: 0.05,
    Signal.SM_ACTIVE: 0.05,
    Signal.GPU_UTIL: 0.05,
    Signal.TENSOR_ACTIVE: 0.05,
    Signal.DRAM_ACTIVE: 0.05,
    Signal.THROTTLE_FRACTION: 0.0,
    Signal.QUEUE_LENGTH: 0.0,
    Signal.REQUESTS_PER_S: 0.0,
    Signal.CPU_THROTTLED_RATIO: 0.0,
}


def resource_from_ksm(resource: str) -> str:
    """Undo kube-state-metrics' sanitising of extended resource names.

    KSM writes `nvidia.com/gpu` as `nvidia_com_gpu` and `nvidia.com/mig-1g.10gb.me` as
    `nvidia_com_mig_1g_10gb_me`; newer releases keep the original. Both come back as the Kubernetes name.
    """
    if "/" in resource or not resource.startswith("nvidia_com_"):
        return resource
    rest = resource.removeprefix("nvidia_com_")
    if rest.startswith("mig_"):
        parts = rest.removeprefix("mig_").split("_")
        # mig_1g_10gb -> mig-1g.10gb ; mig_1g_10gb_me -> mig-1g.10gb.me ; mig_1g_24gb_me_all ->
        # mig-1g.24gb.me.all (the device plugin writes NVML's '+' as '.'). '-me' (Blackwell) and '.me'
        # sanitise alike; the far more common '.me' is assumed.
        profile = ".".join(parts)
        return f"nvidia.com/mig-{profile}"
    if rest == "gpu_shared":
        return "nvidia.com/gpu.shared"
    return f"nvidia.com/{rest}"


def resource_to_ksm(resource: str) -> str:
    """kube-state-metrics' sanitised form of a resource name (`nvidia.com/gpu` → `nvidia_com_gpu`)."""
    return "".join(ch if ch.isalnum() else "_" for ch in resource)


def is_gpu_resource(resource: str) -> bool:
    """True for whole, MIG and shared NVIDIA GPU resource names (after `resource_from_ksm`)."""
    return resource == "nvidia.com/gpu" or resource.startswith(("nvidia.com/mig-", "nvidia.com/gpu."))
