"""Harm: automatic actions that would be wrong on a labelled case, whatever the diagnosis says.

Accuracy counts right primaries; harm counts what an `Apply` policy would break. A labelled case is
its expected code plus its window. The kinds:

- `release-on-live-work`: an automatic releaseIdle where the label is not IdleAllocation;
- `shrink-on-starved`: an automatic action that shrinks GPU capacity (slice, sharing, fewer replicas, a
  lower HPA minimum, release) where the label is a data-path, breaking (memory capacity, crash loop,
  queueing) or health code (the registry's families);
- `second-capacity-change`: more than one automatic GPU-capacity change in one recommendation;
- `action-on-bad-data`: any automatic action where the label is a health code or InsufficientData;
- `cpu-limit-added`: an automatic CPU change that sets a limit on a pod that had none;
- `no-target`: an automatic action without a machine-readable target.
"""

from __future__ import annotations

from gpu_rightsizer.logic.rules.registry import BREAKING_CODES, DATA_PATH_CODES, HEALTH_CODES, WAITING_CODES
from gpu_rightsizer.model.codes import GPU_CAPACITY_ACTIONS, ActionType, DiagnosisCode
from gpu_rightsizer.model.observation import WorkloadWindow
from gpu_rightsizer.model.result import Action, Analysis

#: Codes that name why the GPU waits (the registry's `WAITING_CODES`): an advice-only result that names
#: one withholds a shrink rightly (by their strings, so the robustness bench and the safety tests can
#: name codes an engine lacks).
WAITING_CAUSES: frozenset[str] = frozenset(code.value for code in WAITING_CODES)

#: Labels under which shrinking GPU capacity hurts: the work needs more (or cannot be judged).
_NO_SHRINK: frozenset[DiagnosisCode] = (
    DATA_PATH_CODES | HEALTH_CODES | BREAKING_CODES | {DiagnosisCode.INSUFFICIENT_DATA}
)


def shrinks(action: Action, window: WorkloadWindow) -> bool:
    """True when the action takes GPU capacity away (slice, sharing, release, fewer replicas or a lower
    HPA minimum than the window shows)."""
    target = action.target
    if action.type in (ActionType.RELEASE_IDLE, ActionType.GPU_SHARING):
        return True
    if action.type is ActionType.MIG_PROFILE:
        return True
    if action.type is ActionType.REPLICAS and target is not None and target.replicas is not None:
        return target.replicas < max(window.allocation.replicas, len(window.pods))
    if action.type is ActionType.HPA_BOUNDS and target is not None and target.min_replicas is not None:
        hpa = window.allocation.hpa
        return hpa is not None and target.min_replicas < hpa.min_replicas
    return False


def harms(analysis: Analysis, expected: DiagnosisCode, window: WorkloadWindow) -> list[str]:
    """The harmful automatic actions of one analysis, as 'kind: action' strings (empty when none)."""
    automatic = [a for a in analysis.actions if a.automatic]
    found: list[str] = []
    for action in automatic:
        text = f"{action.type.value} → {action.to_value}"
        if action.target is None:
            found.append(f"no-target: {text}")
        if action.type is ActionType.RELEASE_IDLE and expected is not DiagnosisCode.IDLE_ALLOCATION:
            found.append(f"release-on-live-work: {text}")
        elif (
            expected in _NO_SHRINK
            and shrinks(action, window)
            and not (
                expected is DiagnosisCode.MEMORY_CAPACITY_BOUND and action.type is ActionType.MIG_PROFILE
            )
        ):
            found.append(f"shrink-on-starved: {text}")
        if expected in HEALTH_CODES or expected is DiagnosisCode.INSUFFICIENT_DATA:
            found.append(f"action-on-bad-data: {text}")
        if (
            action.type is ActionType.CPU
            and window.allocation.cpu_limit_cores is None
            and action.target is not None
            and "cpu" in action.target.limits
        ):
            found.append(f"cpu-limit-added: {text}")
    capacity = [
        a
        for a in automatic
        if a.type in GPU_CAPACITY_ACTIONS or (a.target is not None and a.target.gpu_capacity_change)
    ]
    if len(capacity) > 1:
        found.append("second-capacity-change: " + ", ".join(a.type.value for a in capacity))
    return found
