"""What every rule shares: the finding builder, the window's confidence factors and small formatters."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpu_rightsizer.logic.figures import WorkloadFigures
from gpu_rightsizer.logic.rules.confidence import CONFIDENCE
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import DiagnosisCode, Severity
from gpu_rightsizer.model.result import Finding

#: No finding claims certainty: window statistics can always miss what happened between samples.
MAX_CONFIDENCE = CONFIDENCE.max_confidence


def pct(value: float) -> str:
    """A 0..1 ratio as a whole percent, for messages."""
    return f"{value * 100:.0f}%"


@dataclass(slots=True)
class FindingBuilder:
    """Collects findings, clamping confidence and rounding evidence for stable output."""

    findings: list[Finding] = field(default_factory=list)

    def add(
        self,
        code: DiagnosisCode,
        severity: Severity,
        confidence: float,
        message: str,
        evidence: dict[str, float | None],
    ) -> None:
        clean = {
            k: round(float(v), 4) for k, v in sorted(evidence.items()) if v is not None and math.isfinite(v)
        }
        self.findings.append(
            Finding(
                code=code,
                severity=severity,
                confidence=round(min(MAX_CONFIDENCE, max(0.0, confidence)), 3),
                message=message,
                evidence=clean,
            )
        )


@dataclass(frozen=True, slots=True)
class ConfidenceFactor:
    """One named reason a finding is less certain, with the factor it multiplies confidence by."""

    name: str
    value: float
    why: str


#: Samples cover less of the window than `good_coverage`: gaps may hide what happened. Heur.
GAPPY_WINDOW_FACTOR = CONFIDENCE.gappy_window
#: The metric source reported warnings (duplicates, resets, unknown labels). Heur.
SOURCE_WARNINGS_FACTOR = CONFIDENCE.source_warnings


def window_factors(
    figures: WorkloadFigures, settings: EngineSettings, *, gpu_signals: bool = True
) -> tuple[ConfidenceFactor, ...]:
    """The window-wide confidence factors that apply to every finding (GPU-signal ones on request)."""
    factors: list[ConfidenceFactor] = []
    if figures.coverage is not None and figures.coverage < settings.good_coverage:
        factors.append(
            ConfidenceFactor("gappyWindow", GAPPY_WINDOW_FACTOR, f"samples cover {pct(figures.coverage)}")
        )
    if gpu_signals and figures.is_shared:
        factors.append(
            ConfidenceFactor(
                "sharedGpu", settings.shared_gpu_confidence, "device series include the neighbours' work"
            )
        )
    if gpu_signals and figures.busy_source == "gpu_util":
        factors.append(
            ConfidenceFactor(
                "busyFromGpuUtil",
                settings.missing_profiling_confidence,
                "GPU_UTIL only says a kernel ran, not how much of the GPU it used",
            )
        )
    if figures.window.warnings:
        factors.append(
            ConfidenceFactor(
                "sourceWarnings", SOURCE_WARNINGS_FACTOR, "; ".join(figures.window.warnings)[:200]
            )
        )
    return tuple(factors)


def base_confidence(figures: WorkloadFigures, settings: EngineSettings, *, gpu_signals: bool = True) -> float:
    """The product of the window's confidence factors: where every rule's confidence starts."""
    return math.prod(factor.value for factor in window_factors(figures, settings, gpu_signals=gpu_signals))


def window_factor(duration: float, recommended: float) -> float:
    """`short_window` (0.7) .. 1.0 as the window approaches the recommended length (serving: a diurnal
    cycle)."""
    floor = CONFIDENCE.short_window
    return floor + (1.0 - floor) * min(1.0, duration / recommended) if recommended > 0 else 1.0


def compute_is_low(figures: WorkloadFigures, settings: EngineSettings) -> tuple[bool, float | None, str]:
    """SM activity p50 (or busy p50 when profiling fields are missing) below the 'ineffective' line."""
    if figures.sm_p50 is not None:
        return figures.sm_p50 < settings.low_busy, figures.sm_p50, "SM activity"
    busy = figures.busy_p50
    return busy is not None and busy < settings.low_busy, busy, "GPU busy"
