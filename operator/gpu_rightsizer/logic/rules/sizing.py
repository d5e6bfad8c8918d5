"""R8 OversizedGPU and R9 MemoryCapacityBound: whether the device fits the work."""

from __future__ import annotations

from gpu_rightsizer.logic.figures import SizingNeed, WorkloadFigures, sizing_need
from gpu_rightsizer.logic.mig import SliceNeed, smallest_fitting_profile
from gpu_rightsizer.logic.rules.common import (
    FindingBuilder,
    base_confidence,
    pct,
    window_factor,
)
from gpu_rightsizer.logic.rules.confidence import CONFIDENCE as C
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import DiagnosisCode, Severity


def check_sizing(figures: WorkloadFigures, settings: EngineSettings, out: FindingBuilder) -> None:
    base = base_confidence(figures, settings)
    need = sizing_need(figures, settings)
    share = figures.memory_share_p99
    # R8: oversized single-GPU work (never for multi-GPU or NVLink-heavy work)
    nvlink_quiet = (
        figures.nvlink_bytes_p95 is None
        or figures.nvlink_bytes_p95 < settings.oversized.nvlink_quiet_bytes_per_s
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
        and share <= settings.oversized.oversized_max_memory_share
        and need.share_of_device <= settings.oversized.oversized_max_device_share
        and not already_smallest
    ):
        confidence = base * C.oversized * (settings.busy_as_sm_proxy_penalty if need.sm_from_busy else 1.0)
        if figures.is_serving:
            confidence *= window_factor(figures.window.duration_seconds, settings.inference_window_seconds)
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
        if (figures.busy_p95_max or 0.0) < settings.idle.idle_busy_p95:
            cpu_hint += (
                " Kernels still run (not idle, never released): the GPU mostly waits on the host between "
                "steps or requests; overlap host work with the GPU (prefetch, CUDA Graphs) if it is a job."
            )
        out.add(
            DiagnosisCode.OVERSIZED_GPU,
            Severity.WARNING,
            confidence,
            f"Seen: peak GPU memory {need.memory_gib:.1f} GiB of {figures.capacity_gib or 0:.0f} GiB "
            f"({pct(share)}), {'GPU busy' if need.sm_from_busy else 'SM activity'} p95 "
            f"{pct(figures.sm_p95 if figures.sm_p95 is not None else figures.busy_p95_max or 0.0)} on a "
            f"{device}. "
            f"Meaning: the work needs about {pct(need.share_of_device)} of this device. Change: "
            f"{_slice_advice(figures, settings, need)}{cpu_hint}",
            {
                "memoryUsedMaxGib": need.memory_gib,
                "memoryShareP99": share,
                "smActiveP95": figures.sm_p95,
                "gpuBusyP95": figures.busy_p95_max,
                "deviceShareNeeded": need.share_of_device,
            },
        )
    elif need is not None:
        check_no_slice_fits(figures, settings, out)
    # R9: memory capacity. gpu-signals §4.3 R9: "p99 FB need ≥ 0.95 × capacity WITH OOM restarts". A pod
    # that crashes is killed before its allocation peaks in the samples, so restarts / OOM kills with
    # memory high (≥ memory_crash_share) are capacity evidence on their own; memory full with forced small
    # batches (busy high, SM low) still needs the full line.
    crashed = figures.restarts > 0 or figures.oom_killed
    peak_share = (
        figures.fb_used_max_gib / figures.capacity_gib
        if figures.fb_used_max_gib is not None and figures.capacity_gib
        else None
    )
    if share is not None and (
        share >= settings.memory_capacity.memory_full_share
        or (crashed and gpu_oom_suspected(figures, settings))
    ):
        full = share >= settings.memory_capacity.memory_full_share or (
            crashed and (peak_share or 0.0) >= settings.memory_capacity.memory_full_share
        )
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
                else f"busy {pct(figures.busy_p50 or 0.0)} but SM activity only {pct(figures.sm_p50 or 0.0)} "
                "(forced small batches)"
            )
            out.add(
                DiagnosisCode.MEMORY_CAPACITY_BOUND,
                Severity.WARNING,
                base
                * ((C.memory_crash_full if full else C.memory_crash) if crashed else C.memory_small_batches),
                f"Seen: p99 GPU memory {figures.fb_used_p99_gib or 0:.1f} GiB of "
                f"{figures.capacity_gib or 0:.0f} GiB "
                f"({pct(share)}) and {symptom}. Meaning: GPU memory capacity, not compute, limits the work. "
                "Change: activation checkpointing, gradient accumulation or ZeRO; else a bigger-memory GPU "
                "(or "
                "MIG slice), and tensor parallelism across GPUs last.",
                {
                    "memoryShareP99": share,
                    "memoryUsedP99Gib": figures.fb_used_p99_gib,
                    "restarts": float(figures.restarts),
                    "oomKilled": 1.0 if figures.oom_killed else 0.0,
                },
            )


def gpu_oom_suspected(figures: WorkloadFigures, settings: EngineSettings) -> bool:
    """Restarts with GPU memory near full at its peak: a crashing pod dies before its p99 shows the peak."""
    capacity = figures.capacity_gib
    peak = figures.fb_used_max_gib if figures.fb_used_max_gib is not None else figures.fb_used_p99_gib
    return (
        (figures.restarts > 0 or figures.oom_killed)
        and peak is not None
        and bool(capacity)
        and peak >= settings.memory_capacity.memory_crash_share * (capacity or 0.0)
    )


def check_no_slice_fits(figures: WorkloadFigures, settings: EngineSettings, out: FindingBuilder) -> None:
    """R8b: little compute with a lot of memory held: oversized, but no slice holds the memory.

    The advice lowers the reservation first (a server's KV-cache or memory fraction); it frees nothing
    until that lands, so it counts no savings and proposes no slice.
    """
    share, capacity = figures.memory_share_p99, figures.capacity_gib
    compute = figures.sm_p95
    if (
        share is None
        or compute is None
        or capacity is None
        or figures.gpus_per_pod != 1
        or (figures.is_serving and figures.replicas >= 2)  # a fleet consolidates first (R11)
        or share <= settings.oversized.oversized_max_memory_share
        or share >= settings.memory_capacity.memory_full_share
        or compute / settings.sm_target_utilisation > settings.oversized.oversized_max_device_share
        or figures.sm_max is None
        or figures.sm_max <= 0.0
    ):
        return
    out.add(
        DiagnosisCode.OVERSIZED_GPU,
        Severity.WARNING,
        base_confidence(figures, settings) * C.no_slice_fits,
        f"Seen: SM activity p95 {pct(compute)} but GPU memory p99 {figures.fb_used_p99_gib or 0.0:.1f} of "
        f"{capacity:.0f} GiB ({pct(share)}). Meaning: the work needs little of the GPU's compute, but holds "
        "more memory than any slice that small. Change: lower the memory the process reserves (a "
        "server's memory fraction or KV-cache size, e.g. vLLM --gpu-memory-utilization, or a framework's "
        "caching allocator); once it holds less, a slice or a share fits. Nothing is freed until then.",
        {"memoryShareP99": share, "smActiveP95": compute, "noSliceFits": 1.0},
    )


def _slice_advice(figures: WorkloadFigures, settings: EngineSettings, need: SizingNeed) -> str:
    """Name the MIG profile that fits when the table has one smaller than now; else say none does."""
    if not figures.profiles:
        return "a shared GPU (time-slicing/MPS), or MIG on a MIG-capable GPU."
    fitting = smallest_fitting_profile(
        figures.profiles,
        SliceNeed(need.memory_gib, need.sm_equivalents, need.dram_fraction_of_full_gpu),
        memory_headroom=settings.memory_headroom,
        sm_target=settings.sm_target_utilisation,
        dram_target=settings.dram_target_utilisation,
    )
    current = next((g.profile for g in figures.gpus if g.profile), None)
    current_fraction = current.gpu_fraction if current else 1.0
    if fitting is None or fitting.gpu_fraction >= current_fraction:
        return (
            "no smaller MIG profile of this GPU holds it (peak memory × headroom, SMs, bandwidth); a shared "
            "GPU (time-slicing/MPS) does."
        )
    return f"the MIG slice {fitting.name} (or a shared GPU: time-slicing/MPS)."
