"""R12 CrashLooping: the workload restarts; nothing is sized on a window that mixes container lives."""

from __future__ import annotations

from gpu_rightsizer.logic.figures import WorkloadFigures
from gpu_rightsizer.logic.rules.common import FindingBuilder, base_confidence, pct
from gpu_rightsizer.logic.rules.confidence import CONFIDENCE as C
from gpu_rightsizer.logic.rules.sizing import gpu_oom_suspected
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import DiagnosisCode, Severity


def host_memory_share(figures: WorkloadFigures) -> float | None:
    """The working set's peak as a share of the memory limit (request without a limit), or None."""
    allocation = figures.window.allocation
    limit = allocation.memory_limit_bytes or allocation.memory_request_bytes
    used = figures.memory_ws_max_bytes or figures.memory_ws_p99_bytes
    return used / limit if used is not None and limit else None


def check_failures(figures: WorkloadFigures, settings: EngineSettings, out: FindingBuilder) -> None:
    """R12: restarts at or above the crash-loop line, or an OOM kill. A GPU OOM is R9's instead."""
    if figures.restarts < settings.crash_looping.crash_loop_restarts and not figures.oom_killed:
        return
    if gpu_oom_suspected(figures, settings) and not figures.oom_killed:
        return  # GPU memory ran out: MemoryCapacityBound names it
    host_share = host_memory_share(figures)
    near_limit = figures.oom_killed and host_share is not None and host_share >= settings.memory_tight_share
    meaning = (
        f"the container is killed for host memory (OOMKilled with the working set at {pct(host_share or 0.0)} "
        "of its limit). Change: raise the memory limit"
        if near_limit
        else "the container fails and restarts. Change: read the last termination reason and the log before "
        "each restart, and fix the crash"
    )
    out.add(
        DiagnosisCode.CRASH_LOOPING,
        Severity.WARNING,
        base_confidence(figures, settings, gpu_signals=False) * C.crash_looping,
        f"Seen: {figures.restarts} container restart(s) in the window"
        f"{', OOMKilled' if figures.oom_killed else ''}. Meaning: {meaning}. Nothing is shrunk while it "
        "restarts: the window mixes container lives and the GPU figures undercount the work.",
        {
            "restarts": float(figures.restarts),
            "oomKilled": 1.0 if figures.oom_killed else 0.0,
            "hostMemoryShare": host_share,
        },
    )
