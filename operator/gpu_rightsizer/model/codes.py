"""Stable vocabularies shared by the engine, the CRDs and every output format.

These strings are part of the public contract (SPEC §3): users alert and filter on them, so a value
may be added but never renamed or removed.
"""

from __future__ import annotations

from enum import StrEnum


class DiagnosisCode(StrEnum):
    """Why a workload wastes (or does not waste) its GPU; one primary code per recommendation."""

    HEALTHY = "Healthy"
    IDLE_ALLOCATION = "IdleAllocation"
    INPUT_PIPELINE_CPU_BOUND = "InputPipelineCPUBound"
    INPUT_PIPELINE_IO_BOUND = "InputPipelineIOBound"
    HOST_TRANSFER_BOUND = "HostTransferBound"
    COMMUNICATION_BOUND = "CommunicationBound"
    LOW_OCCUPANCY = "LowOccupancy"
    MEMORY_BANDWIDTH_BOUND = "MemoryBandwidthBound"
    NO_TENSOR_CORES = "NoTensorCores"
    OVERSIZED_GPU = "OversizedGPU"
    MEMORY_CAPACITY_BOUND = "MemoryCapacityBound"
    UNDER_REPLICATED = "UnderReplicated"
    OVER_REPLICATED = "OverReplicated"
    THROTTLED = "Throttled"
    HARDWARE_FAULT = "HardwareFault"
    INSUFFICIENT_DATA = "InsufficientData"
    CRASH_LOOPING = "CrashLooping"
    SERVING_HOST_BOUND = "ServingHostBound"
    HOST_WAIT_BOUND = "HostWaitBound"
    LAUNCH_BOUND = "LaunchBound"


#: Codes that describe the health of the hardware: they block every sizing action (SPEC §6).
HEALTH_CODES: frozenset[DiagnosisCode] = frozenset({DiagnosisCode.THROTTLED, DiagnosisCode.HARDWARE_FAULT})


class Severity(StrEnum):
    """How much a finding matters to the person reading it."""

    INFO = "Info"
    WARNING = "Warning"
    CRITICAL = "Critical"


class ActionType(StrEnum):
    """A change the operator may recommend; the policy's `actions` list uses the same names."""

    CPU = "cpu"
    MEMORY = "memory"
    GPU_COUNT = "gpuCount"
    MIG_PROFILE = "migProfile"
    GPU_SHARING = "gpuSharing"
    GPU_MODEL = "gpuModel"
    REPLICAS = "replicas"
    HPA_BOUNDS = "hpaBounds"
    RELEASE_IDLE = "releaseIdle"
    SOFTWARE = "software"
    INFRASTRUCTURE = "infrastructure"


#: Actions the actuator can carry out by patching a workload; the others are advice for people.
APPLICABLE_ACTIONS: frozenset[ActionType] = frozenset(
    {
        ActionType.CPU,
        ActionType.MEMORY,
        ActionType.GPU_COUNT,
        ActionType.MIG_PROFILE,
        ActionType.GPU_SHARING,
        ActionType.REPLICAS,
        ActionType.HPA_BOUNDS,
        ActionType.RELEASE_IDLE,
    }
)


#: Actions that change the GPU capacity a workload gets: at most one of them per recommendation.
GPU_CAPACITY_ACTIONS: frozenset[ActionType] = frozenset(
    {
        ActionType.MIG_PROFILE,
        ActionType.GPU_SHARING,
        ActionType.GPU_COUNT,
        ActionType.REPLICAS,
        ActionType.HPA_BOUNDS,
        ActionType.RELEASE_IDLE,
    }
)


class ApplyState(StrEnum):
    """Where a recommendation stands on its way into the workload."""

    PENDING = "Pending"
    APPLIED = "Applied"
    VERIFIED = "Verified"
    INCONCLUSIVE = "Inconclusive"
    ROLLED_BACK = "RolledBack"
    SKIPPED = "Skipped"
    BLOCKED = "Blocked"
    #: Advice only: no Apply policy governs the workload (none, or one in Recommend mode), so the
    #: recommendation waits for a person; nothing failed.
    ADVISED = "Advised"


class SharingStrategy(StrEnum):
    """How the cluster shares GPUs (set by the GPU operator / device plugin configuration)."""

    MIG_MIXED = "mig-mixed"
    MIG_SINGLE = "mig-single"
    TIME_SLICING = "time-slicing"  # renamed: the device plugin publishes nvidia.com/gpu.shared
    #: the device plugin's default (no renameByDefault): shares stay nvidia.com/gpu, product `-SHARED`
    TIME_SLICING_NO_RENAME = "time-slicing-no-rename"
    MPS = "mps"
    NONE = "none"


class PolicyMode(StrEnum):
    """What a policy lets the operator do with the workloads it selects."""

    OFF = "Off"
    RECOMMEND = "Recommend"
    APPLY = "Apply"
