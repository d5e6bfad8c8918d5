"""The diagnosis rule set (docs/diagnosis.md): from one workload window to findings and a primary diagnosis.

Each rule family lives in `logic/rules/` (one module per code or per family of codes that share their
figures); the shared window figures in `logic/figures.py`; the order in which findings become the
primary diagnosis, severity first, in `logic/rules/registry.py`. Health findings and InsufficientData
stop evaluation; Healthy is reported when nothing fired.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from gpu_rightsizer.logic.figures import (
    GPUFigures,
    SizingNeed,
    WorkloadFigures,
    fleet_replicas_needed,
    sizing_need,
    summarise,
)
from gpu_rightsizer.logic.mig import MigTables
from gpu_rightsizer.logic.rules.common import FindingBuilder
from gpu_rightsizer.logic.rules.data_path import check_data_path, cpu_plateau_cores
from gpu_rightsizer.logic.rules.efficiency import check_efficiency
from gpu_rightsizer.logic.rules.health import check_health
from gpu_rightsizer.logic.rules.healthy import check_healthy
from gpu_rightsizer.logic.rules.idle import check_idle, no_kernels
from gpu_rightsizer.logic.rules.insufficient_data import RATIO_SIGNALS, data_problems
from gpu_rightsizer.logic.rules.registry import PRIMARY_ORDER
from gpu_rightsizer.logic.rules.serving import check_serving
from gpu_rightsizer.logic.rules.sizing import check_sizing
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import DiagnosisCode, Severity
from gpu_rightsizer.model.observation import WorkloadWindow
from gpu_rightsizer.model.result import Finding

__all__ = [
    "PRIMARY_ORDER",
    "RATIO_SIGNALS",
    "Diagnosis",
    "GPUFigures",
    "SizingNeed",
    "WorkloadFigures",
    "choose_primary",
    "cpu_plateau_cores",
    "diagnose",
    "diagnose_figures",
    "fleet_replicas_needed",
    "no_kernels",
    "sizing_need",
    "summarise",
]

_RANK = {code: rank for rank, code in enumerate(PRIMARY_ORDER)}

#: Workload rules, in evaluation order (the primary comes from the registry's order, not this one).
_WORKLOAD_RULES = (check_idle, check_data_path, check_efficiency, check_sizing, check_serving)


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Findings in rule order and the primary code chosen from them."""

    primary: DiagnosisCode
    confidence: float
    findings: tuple[Finding, ...]
    figures: WorkloadFigures


def choose_primary(findings: Iterable[Finding]) -> Finding | None:
    """The finding whose code comes first in `PRIMARY_ORDER` (ties: higher confidence)."""
    ordered = sorted(findings, key=lambda f: (_RANK[f.code], -f.confidence, f.message))
    return ordered[0] if ordered else None


def diagnose_figures(
    figures: WorkloadFigures, settings: EngineSettings, now: datetime | None = None
) -> Diagnosis:
    """Run the rules on pre-computed figures (the engine reuses the figures for actions and savings)."""
    out = FindingBuilder()
    check_health(figures, settings, out)
    problems = data_problems(figures, settings, now)
    if problems:
        out.add(
            DiagnosisCode.INSUFFICIENT_DATA,
            Severity.INFO,
            0.9,
            f"Seen: {'; '.join(problems)}. Meaning: the window cannot be trusted for sizing. Change: nothing "
            "yet; fix the metric source or wait for a longer, complete window.",
            {"busySamples": float(figures.busy_samples), "coverage": figures.coverage},
        )
    if not out.findings:
        for rule in _WORKLOAD_RULES:
            rule(figures, settings, out)
        if not out.findings:
            check_healthy(figures, settings, out)
    findings = tuple(sorted(out.findings, key=lambda f: (_RANK[f.code], -f.confidence, f.message)))
    primary = findings[0]
    return Diagnosis(primary.code, primary.confidence, findings, figures)


def diagnose(
    window: WorkloadWindow,
    settings: EngineSettings | None = None,
    mig_tables: MigTables | None = None,
    now: datetime | None = None,
) -> list[Finding]:
    """All findings for a window, primary first (rule order)."""
    effective = settings or EngineSettings()
    return list(diagnose_figures(summarise(window, mig_tables), effective, now).findings)
