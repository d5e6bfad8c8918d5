"""The engine's entry points: one window in, one `Analysis` out; pure and fast.

`analyze_window` ties summarising, diagnosis, recommendation and savings together. Results do not
depend on the order of pods, GPUs or series: every aggregate sorts its inputs first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from gpu_rightsizer.logic.diagnose import WorkloadFigures, diagnose_figures, summarise
from gpu_rightsizer.logic.mig import MigTables
from gpu_rightsizer.logic.recommend import recommend
from gpu_rightsizer.logic.savings import estimate_savings
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.logic.waste import allocated_gpu_equivalents, estimate_waste
from gpu_rightsizer.model.codes import DiagnosisCode, SharingStrategy
from gpu_rightsizer.model.observation import WorkloadWindow
from gpu_rightsizer.model.result import Analysis, MemoryLookback

_DEFAULT_SETTINGS = EngineSettings()


def _key_figures(figures: WorkloadFigures) -> str:
    """The figures a Healthy verdict rests on, so 'Healthy' is never a bare fall-through."""
    parts = [f"busy p95 {figures.busy_p95 or 0.0:.0%}"]
    if figures.sm_p50 is not None:
        parts.append(f"SM p50 {figures.sm_p50:.0%}")
    if figures.tensor_p95 is not None:
        parts.append(f"tensor p95 {figures.tensor_p95:.0%}")
    if figures.cpu_saturation is not None:
        parts.append(f"CPU {figures.cpu_saturation:.0%} of cores")
    if figures.memory_share_p99 is not None:
        parts.append(f"GPU memory p99 {figures.memory_share_p99:.0%}")
    return ", ".join(parts)


def analyze_window(
    window: WorkloadWindow,
    settings: EngineSettings | None = None,
    mig_tables: MigTables | None = None,
    sharing: SharingStrategy = SharingStrategy.MIG_MIXED,
    *,
    now: datetime | None = None,
    allowed_mig_profiles: Sequence[str] | None = None,
    min_replicas: int = 0,
    memory_lookback: MemoryLookback | None = None,
    figures: WorkloadFigures | None = None,
) -> Analysis:
    """Diagnose one workload window and recommend changes, cheapest first.

    `mig_tables` maps a GPU model key (see `logic.mig.GPU_MODELS`) to a runtime MIG profile table that
    replaces the static one; `sharing` is the cluster's GPU-sharing strategy; `now` enables the
    staleness check; `allowed_mig_profiles` restricts MIG recommendations to a policy's list;
    `min_replicas` is the policy's floor, below which no release or scale-in is proposed as automatic;
    `memory_lookback` is the GPU-memory high-water mark carried from earlier cycles (status), merged
    with this window's and returned in the analysis for the next cycle. `figures` is
    `summarise(window, mig_tables)` when the caller has it already (summarising is most of the
    engine's time, and a caller that runs the engine twice on one window needs it once).
    """
    effective = settings or _DEFAULT_SETTINGS
    if figures is None:
        figures = summarise(window, mig_tables)
    diagnosis = diagnose_figures(figures, effective, now)
    lookback = merge_lookback(memory_lookback, figures)
    planned = recommend(diagnosis, effective, sharing, allowed_mig_profiles, min_replicas, lookback)
    savings = estimate_savings(allocated_gpu_equivalents(figures), (p.freed_share for p in planned))
    primary = diagnosis.findings[0]
    first_action = planned[0].action if planned else None
    action_text = f"; do: {first_action.type.value} → {first_action.to_value}" if first_action else ""
    busy = figures.busy_p95_max
    if primary.code is DiagnosisCode.HEALTHY:
        action_text = f": {_key_figures(figures)}{action_text}"
    return Analysis(
        workload=window.workload,
        primary=diagnosis.primary,
        confidence=diagnosis.confidence,
        findings=list(diagnosis.findings),
        actions=[p.action for p in planned],
        savings=savings,
        gpu_busy_p95=round(busy, 4) if busy is not None else None,
        samples=figures.busy_samples,
        summary=f"{primary.code.value} ({primary.confidence:.0%} confidence){action_text}",
        vetoes=list(diagnosis.vetoes),
        memory_lookback=lookback,
        waste=estimate_waste(figures),
    )


def continued_lookback(
    stored: MemoryLookback | None, stored_until: datetime | None, window_start: datetime
) -> MemoryLookback | None:
    """The stored look-back as it may continue into a window starting at `window_start`.

    `stored_until` is the end of the window the stored status was written from. When the new window
    starts after it, the time between was never observed (the operator was down, the workload was not
    analysed): its peaks may be missing, so the peak is kept but the look-back counts again from this
    window, and a slice waits for a full look-back of observed time.
    """
    if stored is None or stored_until is None or window_start <= stored_until:
        return stored
    return stored.model_copy(update={"since": window_start})


def merge_lookback(previous: MemoryLookback | None, figures: WorkloadFigures) -> MemoryLookback | None:
    """The GPU-memory high-water mark over the previous look-back and this window (None without FB).

    The look-back keeps the highest peak and the earliest start; a stored one that starts after this
    window ends (a clock jump, a forged status) is not trusted, and the look-back starts again here.
    """
    peak = figures.fb_used_max_gib
    start = figures.window.start
    if previous is not None and previous.since > figures.window.end:
        previous = None
    if previous is None:
        return MemoryLookback(max_gib=round(peak, 3), since=start) if peak is not None else None
    return MemoryLookback(
        max_gib=round(max(previous.max_gib, peak or 0.0), 3), since=min(previous.since, start)
    )


def analyze_many(
    windows: Iterable[WorkloadWindow],
    settings: EngineSettings | None = None,
    mig_tables: MigTables | None = None,
    sharing: SharingStrategy = SharingStrategy.MIG_MIXED,
    *,
    now: datetime | None = None,
    allowed_mig_profiles: Sequence[str] | None = None,
) -> list[Analysis]:
    """`analyze_window` over many windows, results in input order."""
    return [
        analyze_window(
            window, settings, mig_tables, sharing, now=now, allowed_mig_profiles=allowed_mig_profiles
        )
        for window in windows
    ]
