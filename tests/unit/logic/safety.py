"""What "safe" means for a recommendation, read from the engine's public outputs only.

Shared by the harm-finding and shrink-property tests: the checks name action kinds, the automatic
flag and finding codes (by their strings, so a code the engine does not have yet can satisfy them),
never the engine's internals.
"""

from __future__ import annotations

from gpu_rightsizer.model.codes import ActionType
from gpu_rightsizer.model.observation import WorkloadWindow
from gpu_rightsizer.model.result import Action, Analysis
from gpu_rightsizer.sim.harm import WAITING_CAUSES

__all__ = ["WAITING_CAUSES", "assert_safe", "describe", "reduces_capacity"]


def reduces_capacity(action: Action, subject: WorkloadWindow) -> bool:
    """True when the action takes GPU capacity away from the workload (automatic or not)."""
    target = action.target
    current_replicas = max(subject.allocation.replicas, len(subject.pods))
    if action.type in (ActionType.RELEASE_IDLE, ActionType.GPU_SHARING):
        return True
    if action.type is ActionType.MIG_PROFILE:
        return subject.allocation.mig_profile is None or "smaller" in action.reason.lower()
    if action.type is ActionType.GPU_COUNT:
        return _leading_number(action.to_value) < _leading_number(action.from_value)
    if action.type is ActionType.REPLICAS:
        if target is not None and target.replicas is not None:
            return target.replicas < current_replicas
        return _leading_number(action.to_value) < current_replicas
    if action.type is ActionType.HPA_BOUNDS and target is not None and target.min_replicas is not None:
        hpa = subject.allocation.hpa
        return hpa is not None and target.min_replicas < hpa.min_replicas
    return False


def _leading_number(text: str) -> float:
    digits = ""
    for char in text.strip():
        if char.isdigit() or (char == "." and digits):
            digits += char
        elif digits:
            break
    return float(digits) if digits else float("nan")


def describe(analysis: Analysis) -> str:
    actions = ", ".join(
        f"{a.type.value}{'*' if a.automatic else ''} → {a.to_value}" for a in analysis.actions
    )
    codes = ", ".join(f"{f.code.value} {f.confidence:.2f}" for f in analysis.findings)
    return f"{analysis.summary} | findings: {codes} | actions: {actions or 'none'}"


def assert_safe(
    analysis: Analysis,
    subject: WorkloadWindow,
    *,
    accepted: frozenset[str] | None = None,
    no_automatic: bool = False,
) -> None:
    """No capacity-reducing action; no automatic action at all when `no_automatic`; an accepted code."""
    shrinking = [a for a in analysis.actions if reduces_capacity(a, subject)]
    assert not shrinking, f"capacity-reducing action proposed: {describe(analysis)}"
    if no_automatic:
        automatic = [a for a in analysis.actions if a.automatic]
        assert not automatic, f"automatic action where every action must wait: {describe(analysis)}"
    if accepted is not None:
        codes = {f.code.value for f in analysis.findings}
        assert codes & accepted, f"none of {sorted(accepted)} named: {describe(analysis)}"
        assert analysis.primary.value != "Healthy", describe(analysis)
