"""R1 IdleAllocation: no kernels, quiet links, no CPU work, no requests."""

from __future__ import annotations

from gpu_rightsizer.logic.figures import (
    WorkloadFigures,
    gpu_stat,
    max_of,
)
from gpu_rightsizer.logic.rules.common import (
    FindingBuilder,
    base_confidence,
    pct,
)
from gpu_rightsizer.logic.rules.confidence import CONFIDENCE as C
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import DiagnosisCode, Severity
from gpu_rightsizer.model.observation import Signal


def no_cuda_context(figures: WorkloadFigures, settings: EngineSettings) -> bool:
    """Framebuffer below `idle_fb_mib` on every device through the window: no CUDA context exists."""
    used = [s.max for g in figures.gpus if (s := g.stat(Signal.FB_USED_MIB)) is not None]
    return bool(figures.gpus) and len(used) == len(figures.gpus) and max(used) < settings.idle.idle_fb_mib


def no_kernels(figures: WorkloadFigures, settings: EngineSettings) -> bool:
    """True when no kernel ran on any GPU through the window.

    SM activity exactly 0 in every sample of every GPU: the idle holder reads 0 at every resolution,
    while a server at 0.3 requests/s averages 2e-5 over 30 s (engine-review-2 H1), so no line above 0
    separates them. Without SM fields, GR at or below the idle floor learned for the node and model
    (`idle_gr_floor`; without one, only a GR of exactly 0 says idle), or GPU_UTIL 0 in every sample. No CUDA
    context (framebuffer below `idle_fb_mib` on every device) suffices on its own.
    """
    if no_cuda_context(figures, settings):
        return True
    if figures.sm_max is not None:
        return figures.sm_max <= 0.0
    if figures.gr_max is not None:
        floor = settings.idle.idle_gr_floor
        return figures.gr_max <= 0.0 or (floor is not None and figures.gr_max <= floor)
    return figures.busy_max is not None and figures.busy_max <= 0.0


def check_idle(figures: WorkloadFigures, settings: EngineSettings, out: FindingBuilder) -> None:
    """R1: no kernels, quiet links, no CPU work and no requests. GPU memory held is not liveness."""
    busy = figures.busy_p95_max
    if busy is None or busy >= settings.idle.idle_busy_p95 or not no_kernels(figures, settings):
        return
    if figures.requests_per_s is not None and figures.requests_per_s > 0:
        return  # a GPU that serves requests is not idle (SPEC §1); sizing and serving rules handle it
    if (
        figures.transfer_bytes_p95 is not None
        and figures.transfer_bytes_p95 >= settings.idle.idle_transfer_bytes_per_s
        and not no_cuda_context(figures, settings)  # without a context no copy is the pod's
    ):
        return  # copies over PCIe/NVLink are GPU work the busy signal misses (SPEC §1: not idle)
    if figures.cpu_usage_p95 is not None and figures.cpu_usage_p95 > settings.idle.idle_cpu_cores:
        return  # a process that works on the CPU may feed the GPU any moment: live, not idle
    util = max_of(gpu_stat(figures.gpus, Signal.GPU_UTIL, lambda s: s.p95))
    if figures.busy_source == "gr_engine_active" and util is not None and util >= settings.idle.idle_busy_p95:
        return  # NVML saw kernels or copies that the graphics-engine counter did not
    window = figures.window
    confidence = base_confidence(figures, settings)
    if window.duration_seconds < settings.idle.idle_min_window_seconds:
        confidence *= C.idle_short_window
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
        f"{window.duration_seconds / 3600:.1f} h ({signal} at its noise floor, busy p95 {pct(busy)})"
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
