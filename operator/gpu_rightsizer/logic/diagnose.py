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
from gpu_rightsizer.logic.rules.common import FindingBuilder, base_confidence
from gpu_rightsizer.logic.rules.confidence import CONFIDENCE as C
from gpu_rightsizer.logic.rules.data_path import check_data_path, cpu_plateau_cores
from gpu_rightsizer.logic.rules.efficiency import check_efficiency
from gpu_rightsizer.logic.rules.failures import check_failures
from gpu_rightsizer.logic.rules.health import check_health
from gpu_rightsizer.logic.rules.healthy import check_healthy
from gpu_rightsizer.logic.rules.idle import check_idle, no_kernels
from gpu_rightsizer.logic.rules.insufficient_data import data_problems
from gpu_rightsizer.logic.rules.registry import BY_CODE, PRIMARY_ORDER, Family
from gpu_rightsizer.logic.rules.serving import check_serving
from gpu_rightsizer.logic.rules.sizing import check_sizing
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.logic.vetoes import shrink_vetoes, veto_cause
from gpu_rightsizer.model.codes import DiagnosisCode, Severity
from gpu_rightsizer.model.observation import WorkloadWindow
from gpu_rightsizer.model.result import Finding, Veto

__all__ = [
    "PRIMARY_ORDER",
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

#: Families whose findings already name why the GPU waits or the workload breaks.
_CAUSE_FAMILIES = frozenset({Family.BREAKING, Family.DATA_PATH})

_RANK = {code: rank for rank, code in enumerate(PRIMARY_ORDER)}

#: Workload rules, in evaluation order (the primary comes from the registry's order, not this one).
_WORKLOAD_RULES = (check_failures, check_idle, check_data_path, check_efficiency, check_sizing, check_serving)
#: Findings that propose a shrink: dropped while a veto holds (their message would contradict it).
_SHRINK_FINDINGS = frozenset({DiagnosisCode.OVERSIZED_GPU, DiagnosisCode.OVER_REPLICATED})


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Findings in rule order and the primary code chosen from them."""

    primary: DiagnosisCode
    confidence: float
    findings: tuple[Finding, ...]
    figures: WorkloadFigures
    vetoes: tuple[Veto, ...] = ()


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
            C.insufficient_data,
            f"Seen: {'; '.join(problems)}. Meaning: the window cannot be trusted for sizing. Change: nothing "
            "yet; fix the metric source or wait for a longer, complete window.",
            {"busySamples": float(figures.busy_samples), "coverage": figures.coverage},
        )
    vetoes: tuple[Veto, ...] = ()
    if not out.findings:
        for rule in _WORKLOAD_RULES:
            rule(figures, settings, out)
        vetoes = shrink_vetoes(figures, settings)
        if vetoes:
            out.findings[:] = [f for f in out.findings if f.code not in _SHRINK_FINDINGS]
            _add_suspected_cause(figures, settings, vetoes, out)
        if not out.findings:
            check_healthy(figures, settings, out)
    findings = tuple(sorted(out.findings, key=lambda f: (_RANK[f.code], -f.confidence, f.message)))
    primary = findings[0]
    return Diagnosis(primary.code, primary.confidence, findings, figures, vetoes)


def _add_suspected_cause(
    figures: WorkloadFigures, settings: EngineSettings, vetoes: tuple[Veto, ...], out: FindingBuilder
) -> None:
    """A vetoed window whose cause no rule claimed gets the vetoes' suspected cause, never Healthy."""
    if any(BY_CODE[f.code].family in _CAUSE_FAMILIES for f in out.findings):
        return
    cause = veto_cause(vetoes)
    if cause is None:
        return
    seen = "; ".join(v.reason for v in vetoes)
    measure = "; ".join(dict.fromkeys(v.measure_next for v in vetoes))
    meaning = (
        "the GPU waits on the host"
        if cause is DiagnosisCode.HOST_WAIT_BOUND
        else f"suspected {cause.value}: the GPU waits or the workload breaks, though no rule's exact "
        "signature matched"
    )
    out.add(
        cause,
        BY_CODE[cause].severity,
        base_confidence(figures, settings) * C.suspected_cause,
        f"Seen: {seen}. Meaning: {meaning}. Change: nothing is shrunk; measure next: {measure}.",
        {"suspected": 1.0, "vetoes": float(len(vetoes))},
    )


def diagnose(
    window: WorkloadWindow,
    settings: EngineSettings | None = None,
    mig_tables: MigTables | None = None,
    now: datetime | None = None,
) -> list[Finding]:
    """All findings for a window, primary first (rule order)."""
    effective = settings or EngineSettings()
    return list(diagnose_figures(summarise(window, mig_tables), effective, now).findings)
