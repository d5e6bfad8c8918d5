"""D InsufficientData: the reasons a window cannot be trusted for sizing."""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime

from gpu_rightsizer.logic.figures import WorkloadFigures
from gpu_rightsizer.logic.mig import GIB_PER_MIB
from gpu_rightsizer.logic.rules.common import pct
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.observation import Signal, SignalStats, WorkloadWindow

#: Signals that are ratios in 0..1 (a value far outside is contradictory data).
RATIO_SIGNALS: frozenset[Signal] = frozenset(
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


def _all_stats(window: WorkloadWindow) -> Iterable[tuple[str, Signal, SignalStats]]:
    for signal, stats in sorted(window.stats.items()):
        yield "workload", signal, stats
    for pod in sorted(window.pods, key=lambda p: p.name):
        for signal, stats in sorted(pod.stats.items()):
            yield f"pod {pod.name}", signal, stats
        for gpu in sorted(pod.gpus, key=lambda g: g.uuid):
            for signal, stats in sorted(gpu.stats.items()):
                yield f"GPU {gpu.uuid} of pod {pod.name}", signal, stats


def data_problems(figures: WorkloadFigures, settings: EngineSettings, now: datetime | None) -> list[str]:
    """Reasons the window cannot be trusted; empty when it can."""
    window = figures.window
    problems: list[str] = []
    tol = settings.ratio_tolerance
    for where, signal, stats in sorted(_all_stats(window), key=lambda item: (item[0], item[1])):
        values = (stats.mean, stats.p50, stats.p95, stats.p99, stats.max, stats.min)
        if not all(math.isfinite(v) for v in values):
            problems.append(f"{signal.value} on {where} holds NaN or infinite values")
            continue
        if not (
            stats.min - tol <= stats.p50 <= stats.p95 + tol <= stats.p99 + 2 * tol <= stats.max + 3 * tol
        ):
            problems.append(
                f"{signal.value} on {where} has percentiles out of order (p50 ≤ p95 ≤ p99 ≤ max broken)"
            )
        if signal in RATIO_SIGNALS and (stats.min < -tol or stats.max > 1 + tol):
            problems.append(f"{signal.value} on {where} leaves the 0..1 range (max {stats.max:.2f})")
        elif signal not in RATIO_SIGNALS and stats.min < -tol and signal is not Signal.GPU_TEMP_C:
            problems.append(f"{signal.value} on {where} is negative")
    if problems:
        return problems
    if window.end <= window.start:
        return ["the window ends before it starts"]
    if not window.pods:
        return ["no pods of the workload were observed in the window"]
    if not figures.gpus:
        return ["no GPU series matched the workload's pods"]
    missing = [g.uuid for g in figures.gpus if g.busy is None]
    if missing:
        if all(g.is_mig for g in figures.gpus if g.busy is None):
            problems.append(
                "no GR_ENGINE_ACTIVE for MIG slice(s) "
                f"{', '.join(missing)}; GPU_UTIL is not reported under MIG, so there is no busy signal"
            )
        else:
            problems.append(
                f"no busy signal (neither GR_ENGINE_ACTIVE nor GPU_UTIL) for GPU(s) {', '.join(missing)}"
            )
        return problems
    if window.duration_seconds < settings.min_window_seconds:
        problems.append(
            f"the window is {window.duration_seconds / 60:.0f} min long, shorter than the "
            f"{settings.min_window_seconds / 60:.0f} min minimum"
        )
    if figures.busy_samples < settings.min_samples:
        problems.append(
            f"only {figures.busy_samples} busy samples, fewer than the {settings.min_samples} required"
        )
    if figures.coverage is not None and figures.coverage < settings.min_coverage:
        problems.append(
            f"samples cover {pct(figures.coverage)} of the window, below the {pct(settings.min_coverage)} "
            "minimum "
            "(gaps in the data)"
        )
    if now is not None and (now - window.end).total_seconds() > settings.max_staleness_seconds:
        age = (now - window.end).total_seconds()
        problems.append(
            f"the newest data is {age / 60:.0f} min old (stale; limit "
            f"{settings.max_staleness_seconds / 60:.0f} min)"
        )
    for gpu in figures.gpus:
        gr, sm = gpu.stat(Signal.GR_ENGINE_ACTIVE), gpu.stat(Signal.SM_ACTIVE)
        if gr is not None and sm is not None and sm.p95 > gr.p95 + settings.contradiction_gap:
            problems.append(
                f"GPU {gpu.uuid}: SM_ACTIVE p95 {pct(sm.p95)} exceeds GR_ENGINE_ACTIVE p95 {pct(gr.p95)}; "
                "SM activity cannot exceed engine activity (contradictory series)"
            )
        util = gpu.stat(Signal.GPU_UTIL)
        if (
            gr is not None
            and util is not None
            and min(gr.samples, util.samples) >= settings.consistency_min_samples
            and gr.mean > util.mean + 2 * settings.contradiction_gap
        ):
            problems.append(
                f"GPU {gpu.uuid}: GR_ENGINE_ACTIVE mean {pct(gr.mean)} far above GPU_UTIL mean "
                f"{pct(util.mean)} over {min(gr.samples, util.samples)} samples (contradictory series)"
            )
        fb = gpu.stat(Signal.FB_USED_MIB)
        if fb is not None and gpu.capacity_gib and fb.p99 * GIB_PER_MIB > gpu.capacity_gib * (1 + tol):
            problems.append(
                f"GPU {gpu.uuid}: {fb.p99 * GIB_PER_MIB:.1f} GiB used exceeds its {gpu.capacity_gib:.1f} GiB "
                "capacity"
            )
    return problems
