"""Shared GPUs as dcgm-exporter reports them: what of a sharer's series is really its own.

With time-slicing or MPS, dcgm-exporter maps a device to one arbitrary sharer unless
`KUBERNETES_VIRTUAL_GPUS` is set (toDeviceToPod keeps the last pod per GPU UUID, dcgm-exporter #307);
with it, every sharer gets a copy of the device's series, and only the per-process fields
(`DCGM_FI_DEV_FB_USED`, `DCGM_FI_DEV_GPU_UTIL`, with `hostPID`) are its own: profiling fields stay the
device's value (#587, #582). HAMi pods (`nvidia.com/gpumem` / `nvidia.com/gpucores`) get device ids
dcgm-exporter cannot map at all (HAMi #112, #1043).

`observe_sharing` runs before the engine: on a shared device it removes the device-wide profiling
signals from each sharer (so SM, tensor, DRAM, PCIe and NVLink diagnoses are not made from another
workload's activity), marks the allocation shared when the node pool says so, and returns notes that
say why; `with_notes` adds them to the analysis summary the status shows.
"""

from __future__ import annotations

from gpu_rightsizer.logic.capacity import ClusterCapacity
from gpu_rightsizer.model.observation import GPUObservation, Signal, WorkloadWindow
from gpu_rightsizer.model.result import Analysis

#: Device-wide fields: a sharer's copy says nothing about the sharer.
DEVICE_WIDE_SIGNALS: frozenset[Signal] = frozenset(
    {
        Signal.SM_ACTIVE,
        Signal.SM_OCCUPANCY,
        Signal.TENSOR_ACTIVE,
        Signal.FP32_ACTIVE,
        Signal.FP16_ACTIVE,
        Signal.DRAM_ACTIVE,
        Signal.PCIE_TX_BYTES_PER_S,
        Signal.PCIE_RX_BYTES_PER_S,
        Signal.NVLINK_TX_BYTES_PER_S,
        Signal.NVLINK_RX_BYTES_PER_S,
    }
)
SHARED_KINDS = frozenset({"time-slicing", "mps"})
HAMI = "hami"


def _pool_sharing(window: WorkloadWindow, capacity: ClusterCapacity | None) -> str | None:
    """time-slicing or mps when the node pool of the workload's pods shares its GPUs."""
    if capacity is None:
        return None
    nodes = {pod.node for pod in window.pods if pod.node} | {
        gpu.node for pod in window.pods for gpu in pod.gpus if gpu.node
    }
    found = {pool.shares or "" for pool in capacity.pools if nodes & set(pool.nodes)} & SHARED_KINDS
    return sorted(found)[0] if found else None


def observe_sharing(
    window: WorkloadWindow, capacity: ClusterCapacity | None = None
) -> tuple[WorkloadWindow, tuple[str, ...]]:
    """The window as the engine should see it on shared GPUs, and notes that say what was done."""
    allocation = window.allocation
    notes: list[str] = []
    if allocation.sharing == HAMI:
        notes.append(
            "HAMi vGPU pod (nvidia.com/gpumem/gpucores): dcgm-exporter cannot map HAMi device ids to pods "
            "(HAMi #112, #1043), so GPU figures are missing; read HAMi's own metrics for this workload"
        )
        return window, tuple(notes)
    sharing = allocation.sharing
    pool = _pool_sharing(window, capacity)
    if sharing == "exclusive" and pool is not None and allocation.mig_profile is None:
        sharing = pool
        allocation = allocation.model_copy(update={"sharing": sharing})
    copies = sharing in SHARED_KINDS or any(g.shared_by_pods > 1 for p in window.pods for g in p.gpus)
    if not copies:
        return window, ()
    stripped: set[Signal] = set()

    def own(gpu: GPUObservation) -> GPUObservation:
        dropped = set(gpu.stats) & DEVICE_WIDE_SIGNALS
        if not dropped:
            return gpu
        stripped.update(dropped)
        return gpu.model_copy(update={"stats": {s: v for s, v in gpu.stats.items() if s not in dropped}})

    pods = [pod.model_copy(update={"gpus": [own(g) for g in pod.gpus]}) for pod in window.pods]
    kind = sharing if sharing in SHARED_KINDS else "shared"
    sharers = max((g.shared_by_pods for p in window.pods for g in p.gpus), default=1)
    seen = f" ({sharers} pods see the same device)" if sharers > 1 else ""
    notes.append(
        f"GPU shared by {kind}{seen}: dcgm-exporter reports the device's profiling fields to each sharer "
        "(or the whole device to one arbitrary sharer without KUBERNETES_VIRTUAL_GPUS, dcgm-exporter #307), "
        "so SM, tensor, DRAM, PCIe and NVLink diagnoses are not made from them; busy and memory are the "
        "device's, and savings count this workload's share of the device"
    )
    warnings = list(window.warnings)
    if stripped:
        warnings.append(notes[-1])
    changed = window.model_copy(update={"pods": pods, "allocation": allocation, "warnings": warnings})
    return changed, tuple(notes)


def with_notes(analysis: Analysis, notes: tuple[str, ...]) -> Analysis:
    """The analysis with the sharing notes in its summary (what the status and its condition show)."""
    if not notes:
        return analysis
    return analysis.model_copy(update={"summary": f"{analysis.summary}. Note: {'; '.join(notes)}."})
