"""Turn the engine's answer into a `GPURecommendation.status` (pure: data in, data out)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gpu_rightsizer.logic.workloads import format_cpu, format_memory
from gpu_rightsizer.model.codes import ApplyState, DiagnosisCode
from gpu_rightsizer.model.crd import (
    AllocationStatus,
    ApplyStatus,
    Condition,
    Diagnosis,
    GPURecommendationStatus,
    ObservedWindow,
    RecommendationSummary,
)
from gpu_rightsizer.model.observation import Allocation, WorkloadRef
from gpu_rightsizer.model.result import Action, Analysis


def allocation_status(allocation: Allocation) -> AllocationStatus:
    """The allocation as users read it (Kubernetes quantities, not floats)."""
    return AllocationStatus(
        gpu_resource=allocation.gpu_resource,
        gpu_count=allocation.gpu_count,
        gpu_model=allocation.gpu_model,
        mig_profile=allocation.mig_profile,
        cpu_request=None
        if allocation.cpu_request_cores is None
        else format_cpu(allocation.cpu_request_cores),
        cpu_limit=None if allocation.cpu_limit_cores is None else format_cpu(allocation.cpu_limit_cores),
        memory_request=None
        if allocation.memory_request_bytes is None
        else format_memory(allocation.memory_request_bytes),
        memory_limit=None
        if allocation.memory_limit_bytes is None
        else format_memory(allocation.memory_limit_bytes),
        replicas=allocation.replicas,
    )


#: Width of the Action printer column; the full actions are in `status.actions`.
ACTION_COLUMN_WIDTH = 48


def action_column(action: Action) -> str:
    """The main change in a few words for `kubectl get`: 'cpu 1->8', 'migProfile ...->mig-1g.18gb'."""
    text = f"{action.type.value} {action.from_value}->{action.to_value}"
    return text if len(text) <= ACTION_COLUMN_WIDTH else text[: ACTION_COLUMN_WIDTH - 1] + "…"


def format_duration(seconds: float) -> str:
    """A window length as people say it: 45m, 6h, 1d12h."""
    minutes = round(seconds / 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    parts = [f"{days}d" if days else "", f"{hours}h" if hours else "", f"{mins}m" if mins else ""]
    return "".join(parts) or "0m"


def _condition(
    type_: str, ok: bool, reason: str, message: str, now: datetime, generation: int | None
) -> Condition:
    return Condition(
        type=type_,
        status="True" if ok else "False",
        reason=reason,
        message=message,
        last_transition_time=now,
        observed_generation=generation,
    )


def merge_conditions(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """New conditions replace old ones of the same type, keeping lastTransitionTime when the status
    did not change (metav1 convention); other types (written by the other role) stay."""
    by_type = {c.get("type"): c for c in old}
    merged = dict(by_type)
    for fresh in new:
        before = by_type.get(fresh.get("type"))
        kept = fresh
        if before is not None and before.get("status") == fresh.get("status"):
            kept = {**fresh, "lastTransitionTime": before.get("lastTransitionTime")}
        merged[fresh.get("type")] = kept
    return list(merged.values())


def waiting_status(
    allocation: Allocation, reason: str, *, workload: WorkloadRef, now: datetime, generation: int | None
) -> GPURecommendationStatus:
    """Status of a workload that has not been analysed yet: honestly `InsufficientData`, no action."""
    return GPURecommendationStatus(
        observed_generation=generation,
        allocation=allocation_status(allocation),
        diagnosis=Diagnosis(
            primary=DiagnosisCode.INSUFFICIENT_DATA, confidence=0.0, summary=reason, findings=[]
        ),
        actions=[],
        apply=ApplyStatus(state=ApplyState.SKIPPED, reason="nothing to apply before the first analysis"),
        summary=RecommendationSummary(
            workload=f"{workload.kind}/{workload.name}",
            action="none",
            gpu_busy_p95="-",
            savings="-",
            confidence="0.00",
            window="-",
        ),
        conditions=[_condition("Analyzed", False, "WaitingForData", reason, now, generation)],
    )


def analysed_status(
    analysis: Analysis,
    allocation: Allocation,
    *,
    window_start: datetime,
    window_end: datetime,
    workload: WorkloadRef,
    now: datetime,
    generation: int | None,
    apply: ApplyStatus | None = None,
) -> GPURecommendationStatus:
    """Status after an analysis: diagnosis, actions, savings, and the summary the printer columns show."""
    main_action = analysis.main_action
    busy = "-" if analysis.gpu_busy_p95 is None else f"{analysis.gpu_busy_p95 * 100:.0f}%"
    insufficient = analysis.primary == DiagnosisCode.INSUFFICIENT_DATA
    return GPURecommendationStatus(
        observed_generation=generation,
        window=ObservedWindow(start=window_start, end=window_end, samples=analysis.samples),
        allocation=allocation_status(allocation),
        diagnosis=Diagnosis(
            primary=analysis.primary,
            confidence=analysis.confidence,
            summary=analysis.summary or analysis.primary.value,
            findings=analysis.findings,
        ),
        actions=analysis.actions,
        savings=analysis.savings,
        apply=apply
        or ApplyStatus(
            state=ApplyState.SKIPPED if not analysis.actions else ApplyState.PENDING,
            reason="no change recommended"
            if not analysis.actions
            else "no Apply policy selects this workload",
        ),
        summary=RecommendationSummary(
            workload=f"{workload.kind}/{workload.name}",
            action="none" if main_action is None else action_column(main_action),
            gpu_busy_p95=busy,
            savings=f"{analysis.savings.gpu_hours_per_day:.1f} GPUh/d",
            confidence=f"{analysis.confidence:.2f}",
            window=format_duration((window_end - window_start).total_seconds()),
        ),
        conditions=[
            _condition(
                "Analyzed",
                not insufficient,
                "InsufficientData" if insufficient else "Analyzed",
                analysis.summary or analysis.primary.value,
                now,
                generation,
            ),
            metrics_condition(None, now, generation),
        ],
    )


#: Condition type that says whether the last batch of metric queries for this workload was answered.
METRICS_CONDITION = "MetricsAvailable"


def metrics_condition(error: str | None, now: datetime, generation: int | None) -> Condition:
    """`MetricsAvailable`: True after an answered batch; False, with the error, when the batch failed
    and the status still shows the previous analysis (so it is never silently stale)."""
    if error is None:
        return _condition(
            METRICS_CONDITION, True, "QueriesAnswered", "the last query batch was answered", now, generation
        )
    return _condition(
        METRICS_CONDITION,
        False,
        "QueryFailed",
        f"the last query batch failed, so this status still shows the previous analysis: {error}"[:1024],
        now,
        generation,
    )
