"""Turn the engine's answer into a `GPURecommendation.status` (pure: data in, data out)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from gpu_rightsizer.logic.workloads import format_cpu, format_memory
from gpu_rightsizer.model.codes import ActionType, ApplyState, DiagnosisCode
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
_FIRST_NUMBER = re.compile(r"\d+(?:\.\d+)?")
#: What people call each GPU change, before "from → to".
_GPU_CHANGE_WORDS = {
    ActionType.GPU_COUNT: "GPUs",
    ActionType.MIG_PROFILE: "MIG slice",
    ActionType.GPU_SHARING: "shared GPU",
    ActionType.GPU_MODEL: "GPU model",
    ActionType.REPLICAS: "replicas",
    ActionType.HPA_BOUNDS: "HPA min-max",
}


def _resource_change(action: Action, resource: str, unit: str) -> str:
    """'cpu limit 1 → 4 cores', 'memory request 8 → 12 Gi': which bound changes, from the target."""
    target = action.target
    which = "limit" if target is not None and resource in target.limits else "request"
    before = _FIRST_NUMBER.search(action.from_value)
    after = _FIRST_NUMBER.search(action.to_value)
    if after is None:
        return f"{resource} {which}: {action.to_value}"
    if before is None:
        return f"{resource} {which} → {after.group()} {unit}"
    return f"{resource} {which} {before.group()} → {after.group()} {unit}"


#: GPU changes whose current value is a long description; the column shows only where they go.
_TARGET_ONLY = frozenset({ActionType.MIG_PROFILE, ActionType.GPU_SHARING, ActionType.GPU_MODEL})


def describe_action(action: Action, *, short: bool = False) -> str:
    """A change as people say it: 'cpu limit 1 → 4 cores', 'MIG slice nvidia.com/gpu: 1 →
    nvidia.com/mig-2g.35gb: 1', 'code change: raise the batch size'; `short` leaves the current
    GPU out of GPU changes (the printer column)."""
    if action.type == ActionType.CPU:
        return _resource_change(action, "cpu", "cores")
    if action.type == ActionType.MEMORY:
        return _resource_change(action, "memory", "Gi")
    if action.type == ActionType.SOFTWARE:
        return f"code change: {action.to_value}"
    if action.type == ActionType.INFRASTRUCTURE:
        return f"platform change: {action.to_value}"
    if action.type == ActionType.RELEASE_IDLE:
        return f"release idle GPUs: {action.to_value}"
    words = _GPU_CHANGE_WORDS.get(action.type, action.type.value)
    if short and action.type in _TARGET_ONLY:
        return f"{words} → {action.to_value}"
    return f"{words} {action.from_value} → {action.to_value}"


def action_column(action: Action) -> str:
    """`describe_action` cut to the Action printer column's width."""
    text = describe_action(action, short=True)
    return text if len(text) <= ACTION_COLUMN_WIDTH else text[: ACTION_COLUMN_WIDTH - 1] + "…"


def confidence_text(confidence: float) -> str:
    """Confidence as every output shows it (CLI, kubectl): '73%'."""
    return f"{confidence:.0%}"


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
            confidence=confidence_text(0.0),
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
        waste=analysis.waste,
        cost=analysis.cost,
        vetoes=analysis.vetoes,
        memory_lookback=analysis.memory_lookback,
        apply=apply
        or ApplyStatus(
            state=ApplyState.ADVISED,
            reason="no change recommended"
            if not analysis.actions
            else "no Apply policy selects this workload",
        ),
        summary=RecommendationSummary(
            workload=f"{workload.kind}/{workload.name}",
            action="none" if main_action is None else action_column(main_action),
            gpu_busy_p95=busy,
            savings=f"{analysis.savings.gpu_hours_per_day:.1f} GPUh/d",
            confidence=confidence_text(analysis.confidence),
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


# --------------------------------------------------------------------------------------------------
# When a new analysis is worth a status write
# --------------------------------------------------------------------------------------------------

#: Two figures of a status are the same when they differ by at most this share of the larger one:
#: the window slides every cycle, so its figures (confidence, evidence, savings, samples) move a
#: little each time without the recommendation saying anything new. Compared with the figures as
#: stored (not the last analysis), so slow drift adds up and is written once it passes the tolerance.
FIGURE_TOLERANCE = 0.05
#: Figures closer than this are the same whatever their ratio: shares and fractions (busy, throttled,
#: confidence) are read in whole percent, and around a small share two points are noise (a 1 % busy
#: GPU at 2 %, a throttle fraction of 0.01 at 0.03). Numbers shown as percentages in texts count the
#: same two points, or one sample's weight when that is more (SAMPLE_SHARES).
FIGURE_FLOOR = 0.02
#: The samples a window holds move as the window slides over scrape times, and by several at once
#: when a loaded Prometheus misses scrapes of a short window; what they gate (a count under the
#: engine's minimum, the coverage an automatic change needs) changes the diagnosis or an action's
#: reason and `automatic`, which are written at once. So the count alone counts only past a quarter.
SAMPLES_TOLERANCE = 0.25
#: The GPU-memory look-back is what a slice is sized on and is carried from status to status
#: (`memoryLookback`): a higher peak is written once it passes this share, so the stored peak is
#: never more than that below the one seen (the slice's memory headroom is far wider).
PEAK_TOLERANCE = 0.01
#: Figures that are the share of the window's samples in which a flag was up (the throttle fraction):
#: as the window slides one sample enters and one leaves, so they move by one sample's weight (1 /
#: `window.samples`) with nothing new to say; that weight is their floor when it is above FIGURE_FLOOR
#: (a window of 10 samples, where one sample is 10 points), and so for percentages in texts, which
#: print these shares. Windows of more than 1 / FIGURE_FLOOR samples (50) keep FIGURE_FLOOR.
SAMPLE_SHARES = ("throttleFraction",)

#: Paths (keys, `*` for any key or list index) that are left out of the comparison: the window's
#: times move every cycle (how old the stored window may grow is the refresh period's business), and
#: figures computed from others that are compared (idle GPU-hours from `waste.allocatedGpus` and
#: `waste.busyFraction`; money per day from `cost.pricePerGPUHour`, the allocation and savings).
_IGNORED = (
    ("window", "start"),
    ("window", "end"),
    ("waste", "gpuHoursPerDay"),
    ("cost", "perDay"),
    ("cost", "wastePerDay"),
    ("cost", "savingsPerDay"),
)
#: Paths holding figures, compared within FIGURE_TOLERANCE or FIGURE_FLOOR.
_FIGURES = (
    ("diagnosis", "confidence"),
    ("diagnosis", "findings", "*", "confidence"),
    ("diagnosis", "findings", "*", "evidence", "*"),
    ("actions", "*", "predictedSlowdown"),
    ("savings", "*"),
    ("waste", "*"),
    ("baseline", "*"),
)
#: Paths holding text for people, made from the same figures: their words must match, their numbers
#: only within FIGURE_TOLERANCE or one step of the digits shown ("21%" and "22%" are one rounding
#: apart), percentages within FIGURE_FLOOR or one sample's weight, whichever is more.
_TEXTS = (
    ("diagnosis", "summary"),
    ("diagnosis", "findings", "*", "message"),
    ("actions", "*", "reason"),
    ("vetoes", "*", "reason"),
    ("vetoes", "*", "measureNext"),
    ("conditions", "*", "message"),
    ("summary", "gpuBusyP95"),
    ("summary", "savings"),
    ("summary", "confidence"),
    ("window", "warnings", "*"),
)
_NUMBER = re.compile(r"(\d+(?:\.\d+)?)(%?)")


_IGNORE, _FIGURE, _SHARE, _SAMPLES, _PEAK, _TEXT = "ignore", "figure", "share", "samples", "peak", "text"
#: How a figure of each kind compares: (share of the larger value, absolute floor); a share of the
#: samples (`_SHARE`) has the larger of FIGURE_FLOOR and one sample's weight as its floor.
_TOLERANCES = {
    _FIGURE: (FIGURE_TOLERANCE, FIGURE_FLOOR),
    _SHARE: (FIGURE_TOLERANCE, FIGURE_FLOOR),
    _SAMPLES: (SAMPLES_TOLERANCE, 0.0),
    _PEAK: (PEAK_TOLERANCE, 0.0),
}
#: A rule tree: key (or `*`) -> subtree, or how a leaf compares; built once from the paths above.
_Rules = dict[str, "_Rules | str"]


def _rule_tree() -> _Rules:
    tree: _Rules = {}
    for how, paths in (
        (_IGNORE, _IGNORED),
        (_FIGURE, _FIGURES),
        (_SHARE, tuple(("diagnosis", "findings", "*", "evidence", key) for key in SAMPLE_SHARES)),
        (_SAMPLES, (("window", "samples"),)),
        (_PEAK, (("memoryLookback", "maxGib"),)),
        (_TEXT, _TEXTS),
    ):
        for path in paths:
            node = tree
            for key in path[:-1]:
                child = node.setdefault(key, {})
                assert isinstance(child, dict)
                node = child
            node[path[-1]] = how
    return tree


_RULES = _rule_tree()
_NO_RULES: _Rules = {}


def same_figure(
    old: object, new: object, share: float = FIGURE_TOLERANCE, floor: float = FIGURE_FLOOR
) -> bool:
    """True when two figures differ by at most `share` of the larger, or `floor`."""
    if isinstance(old, bool) or isinstance(new, bool):
        return old == new
    if not isinstance(old, int | float) or not isinstance(new, int | float):
        return old == new
    return abs(old - new) <= max(floor, share * max(abs(old), abs(new)))


def _same_shown_number(old: str, new: str, percent: bool, share_floor: float = FIGURE_FLOOR) -> bool:
    decimals = max(len(text.partition(".")[2]) for text in (old, new))
    a, b = float(old), float(new)
    floor = share_floor * 100 if percent else 0.0
    return abs(a - b) <= max(10.0**-decimals, FIGURE_TOLERANCE * max(abs(a), abs(b)), floor)


def same_text(old: object, new: object, share_floor: float = FIGURE_FLOOR) -> bool:
    """True when two texts have the same words and their numbers are the same figures, as shown;
    percentages within `share_floor` (FIGURE_FLOOR, or one sample's weight: `sample_weight`)."""
    if not isinstance(old, str) or not isinstance(new, str):
        return old == new
    if _NUMBER.sub(r"#\2", old) != _NUMBER.sub(r"#\2", new):
        return False
    return all(
        _same_shown_number(a[0], b[0], bool(a[1]), share_floor)
        for a, b in zip(_NUMBER.findall(old), _NUMBER.findall(new), strict=True)
    )


def sample_weight(old: object, new: object) -> float:
    """One sample's share of the window two statuses were analysed over: 1 / the larger of their
    `window.samples` (the stricter), 0 when neither says."""
    counts = [
        count
        for status in (old, new)
        if isinstance(status, dict)
        for count in [(status.get("window") or {}).get("samples")]
        if isinstance(count, int | float) and not isinstance(count, bool) and count > 0
    ]
    return 1.0 / max(counts) if counts else 0.0


def materially_same(old: object, new: object) -> bool:
    """True when the status `new` says what `old` says (`material_difference` finds none)."""
    return material_difference(old, new) is None


def material_difference(old: object, new: object) -> str | None:
    """Where the status `new` first says something `old` does not, as a path with `*` for list
    indices ("diagnosis.findings.*.code"); None when it says the same: the same diagnosis codes,
    actions and their targets, allocation, conditions and generations, and figures within
    FIGURE_TOLERANCE (shares of the samples, SAMPLE_SHARES, within one sample's weight); the window's
    times are left out. Both are statuses as JSON (old as the API server returned it). The path names
    why a status is written (the cycle counts them)."""
    # a hair above one sample's weight, so k/n and (k+1)/n compare as one sample apart in floats
    share_floor = max(FIGURE_FLOOR, sample_weight(old, new) * (1 + 1e-9))
    return _difference(old, new, _RULES, "", share_floor)


def _difference(old: object, new: object, rules: _Rules | str, path: str, share_floor: float) -> str | None:
    if type(old) is type(new) and old == new:  # most of a status does not move: no walk needed
        return None
    if isinstance(rules, str) and rules in _TOLERANCES:
        share, floor = _TOLERANCES[rules]
        return None if same_figure(old, new, share, share_floor if rules == _SHARE else floor) else path
    if rules == _TEXT:
        return None if same_text(old, new, share_floor) else path
    tree = rules if isinstance(rules, dict) else _NO_RULES
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(old.keys() | new.keys(), key=str):
            rule = tree.get(key, tree.get("*", _NO_RULES))
            if rule == _IGNORE:
                continue
            where = f"{path}.{key}" if path else str(key)
            if key not in old or key not in new:
                return where
            found = _difference(old[key], new[key], rule, where, share_floor)
            if found is not None:
                return found
        return None
    if isinstance(old, list) and isinstance(new, list):
        rule = tree.get("*", _NO_RULES)
        where = f"{path}.*"
        if len(old) != len(new):
            return path
        for a, b in zip(old, new, strict=True):
            found = _difference(a, b, rule, where, share_floor)
            if found is not None:
                return found
        return None
    return None if (old == new and type(old) is type(new)) or _same_number(old, new) else path


def _same_number(old: object, new: object) -> bool:
    """1 and 1.0 are one number (the API server gives back whole floats as integers)."""
    return (
        isinstance(old, int | float)
        and isinstance(new, int | float)
        and not isinstance(old, bool)
        and not isinstance(new, bool)
        and old == new
    )
