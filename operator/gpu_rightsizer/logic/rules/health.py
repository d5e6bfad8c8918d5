"""H0 HardwareFault and H1 Throttled: hardware health gates that block every action."""

from __future__ import annotations

from gpu_rightsizer.logic.figures import (
    GPUFigures,
    WorkloadFigures,
)
from gpu_rightsizer.logic.rules.common import (
    FindingBuilder,
    pct,
)
from gpu_rightsizer.logic.rules.confidence import CONFIDENCE as C
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import DiagnosisCode, Severity
from gpu_rightsizer.model.observation import Signal


def check_health(figures: WorkloadFigures, settings: EngineSettings, out: FindingBuilder) -> None:
    """H0/H1: hardware faults and platform throttling; they block every sizing action."""
    critical: dict[int, list[str]] = {}
    for gpu in figures.gpus:
        for xid in sorted(set(gpu.observation.xid_codes)):
            if xid in settings.health.critical_xids:
                critical.setdefault(xid, []).append(gpu.uuid)
    if critical:
        listed = "; ".join(
            f"Xid {xid} on {', '.join(sorted(uuids))}" for xid, uuids in sorted(critical.items())
        )
        out.add(
            DiagnosisCode.HARDWARE_FAULT,
            Severity.CRITICAL,
            C.hardware_fault,
            f"Seen: {listed}. These Xid codes mean a hardware or driver fault, not a workload issue. "
            "Change: no right-sizing on this data; follow the NVIDIA Xid catalog action (restart the app, "
            "reset the GPU or drain the node) and open a node-health ticket.",
            {"criticalXids": float(len(critical)), "firstXid": float(min(critical))},
        )
    worst: tuple[float, GPUFigures] | None = None
    for gpu in figures.gpus:
        throttle = gpu.stat(Signal.THROTTLE_FRACTION)
        if (
            throttle is not None
            and throttle.mean > settings.health.throttle_fraction
            and (worst is None or throttle.mean > worst[0])
        ):
            worst = (throttle.mean, gpu)
    if worst is not None:
        fraction, gpu = worst
        clock = gpu.stat(Signal.SM_CLOCK_MHZ)
        clock_ratio = clock.p50 / clock.max if clock is not None and clock.max > 0 else None
        corroborated = clock_ratio is not None and clock_ratio < settings.health.throttle_clock_ratio
        clock_text = (
            f", SM clock p50 {clock.p50:.0f} MHz is {pct(clock_ratio)} of its {clock.max:.0f} MHz peak"
            if clock is not None and clock_ratio is not None
            else ""
        )
        out.add(
            DiagnosisCode.THROTTLED,
            Severity.CRITICAL,
            C.throttled_corroborated if corroborated else C.throttled,
            f"Seen: GPU {gpu.uuid} was clock-throttled (thermal, HW slowdown or power brake) for "
            f"{pct(fraction)} of the window (limit {pct(settings.health.throttle_fraction)}){clock_text}. "
            "Meaning: the platform, not the workload, capped throughput, so utilisation figures are not "
            "representative. Change: open an infrastructure ticket (cooling, power); the window is excluded "
            "from sizing.",
            {"throttleFraction": fraction, "smClockRatio": clock_ratio},
        )
