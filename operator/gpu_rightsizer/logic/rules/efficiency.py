"""R5 LowOccupancy, R6 MemoryBandwidthBound, R7 NoTensorCores: how well the kernels use the GPU."""

from __future__ import annotations

from gpu_rightsizer.logic.figures import WorkloadFigures
from gpu_rightsizer.logic.mig import is_pre_volta
from gpu_rightsizer.logic.rules.common import (
    FindingBuilder,
    base_confidence,
    pct,
)
from gpu_rightsizer.logic.rules.confidence import CONFIDENCE as C
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import DiagnosisCode, Severity


def check_efficiency(figures: WorkloadFigures, settings: EngineSettings, out: FindingBuilder) -> None:
    busy = figures.busy_p50
    if busy is None:
        return
    base = base_confidence(figures, settings)
    memory_full = (
        figures.memory_share_p99 is not None
        and figures.memory_share_p99 >= settings.memory_capacity.memory_full_share
    )
    # R5: busy but most SMs idle (launch-bound, tiny kernels). Occupancy alone never fires: large GEMM
    # tiles keep one block per SM by design, and DCGM says occupancy is no goal for compute-bound work.
    sm, occ = figures.sm_p50, figures.occupancy_p50
    communicating = figures.gpus_per_pod >= 2 and (figures.nvlink_utilisation or 0.0) >= 0.1
    if busy >= settings.high_busy and not memory_full and sm is not None and sm < settings.low_busy:
        low_occ = occ is not None and occ < settings.occupancy.low_occupancy
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
                base * (C.low_occupancy if low_occ or occ is None else C.low_occupancy_occupied),
                f"Seen: GPU busy p50 {pct(busy)} but SM activity p50 {pct(sm)}"
                f"{f', occupancy p50 {pct(occ)}' if occ is not None else ''}. Meaning: kernels run all the "
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
        and dram >= settings.memory_bandwidth.dram_bound
        and (tensor is None or tensor < settings.memory_bandwidth.dram_bound_max_tensor)
        and sm_or_busy >= settings.low_busy
    ):
        confidence = (
            base * C.bandwidth_bound * (1.0 if tensor is not None else C.no_tensor_field) * proxy_factor
        )
        out.add(
            DiagnosisCode.MEMORY_BANDWIDTH_BOUND,
            Severity.INFO,
            confidence,
            f"Seen: DRAM activity p95 {pct(dram)} (practical peak ~80%), tensor activity p95 "
            f"{pct(tensor) if tensor is not None else 'unknown'}, {compute_name} p50 {pct(sm_or_busy)}. "
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
        and tensor < settings.no_tensor_cores.no_tensor_max
        and (fp32 >= settings.no_tensor_cores.no_tensor_min_fp32 if fp32 is not None else not proxy)
        and (dram is None or dram < settings.memory_bandwidth.dram_bound)
    ):
        out.add(
            DiagnosisCode.NO_TENSOR_CORES,
            Severity.INFO,
            base * (C.no_tensor_cores if fp32 is not None else C.no_tensor_cores_no_fp32) * proxy_factor,
            f"Seen: {compute_name} p50 {pct(sm_or_busy)}, tensor-core activity p95 {pct(tensor)}"
            f"{f', FP32 pipe p50 {pct(fp32)}' if fp32 is not None else ''}. Meaning: the math runs on the "
            "FP32 pipes and skips the tensor cores. Change: enable mixed precision (AMP with BF16/FP16) or "
            f"TF32.{skipped}",
            {
                "smActiveP50": sm,
                "gpuBusyP50": busy if proxy else None,
                "tensorActiveP95": tensor,
                "fp32ActiveP50": fp32,
            },
        )
