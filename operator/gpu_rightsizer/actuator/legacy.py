"""One-time conversion, on upgrade, of the apply state that versions before `GPURightsizingChange`
kept in the recommendation's `status.apply` (pure).

Before the two wings, the actuator kept its history, its rollback count and its remembered
regressions in `status.apply`. The actuator now trusts only its own change record, so without this
conversion an upgrade would forget them: a change that was rolled back would be tried again, and
`maxRollbacks` would start from zero. The first step of a workload with no change record carries
them into the new record, once (the recommendation's `status.apply` then names the record in
`change`, which marks it converted).

Only what can make the actuator more careful, or what people read, is carried: the history, the
rollback count, the regressed changes and the last clear-regressions token. A change that was in
flight at the upgrade is never resumed from there (that status is writable by the recommender's
identity, review-2 H-A); it goes into the history as Abandoned, and its patch stays on the workload.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from gpu_rightsizer.actuator.record import describe, record_from_patch
from gpu_rightsizer.model.crd import (
    HISTORY_LENGTH,
    ApplyStatus,
    ChangeHistoryEntry,
    ChangePhase,
    RegressedChange,
)
from gpu_rightsizer.model.k8s import parse_time, stamp

#: Why a change in flight at the upgrade is not resumed.
NOT_RESUMED = (
    "in flight when the operator was upgraded to change records; not resumed from the "
    "recommendation's status (writable by the recommender), its patch stays on the workload"
)


def _valid(model: type[BaseModel], raw: Any) -> dict[str, Any] | None:
    try:
        return model.model_validate(raw).model_dump(mode="json", by_alias=True, exclude_none=True)
    except ValidationError:
        return None


def converted_apply(recommendation: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """The change-record status fields carried over from a pre-change-record `status.apply`; {} when
    there is nothing to carry (no apply state, or one that already names its change record)."""
    apply = (recommendation.get("status") or {}).get("apply")
    if not isinstance(apply, Mapping) or not apply or apply.get("change"):
        return {}
    history = [entry for raw in _list(apply.get("history")) if (entry := _valid(ChangeHistoryEntry, raw))]
    regressed = [entry for raw in _list(apply.get("regressed")) if (entry := _valid(RegressedChange, raw))]
    fields: dict[str, Any] = {}
    rollbacks = apply.get("rollbacks")
    if isinstance(rollbacks, int) and not isinstance(rollbacks, bool) and rollbacks > 0:
        fields["rollbacks"] = rollbacks
    if isinstance(apply.get("clearedToken"), str):
        fields["clearedToken"] = apply["clearedToken"]
    if _in_flight(apply) and isinstance(apply.get("changeId"), str):
        history.append({
            "changeId": apply["changeId"], "at": _stamp_or(apply.get("appliedAt"), now),
            "finishedAt": stamp(now), "change": describe(record_from_patch(str(apply.get("patch") or ""))),
            "outcome": ChangePhase.ABANDONED.value, "reason": NOT_RESUMED,
        })  # fmt: skip
    if history:
        fields["history"] = history[-HISTORY_LENGTH:]
    if regressed:
        fields["regressed"] = regressed[-HISTORY_LENGTH:]
    if fields:
        fields["reason"] = (
            "history, rollbacks and regressions carried over from the recommendation's status.apply"
        )
    return fields


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _in_flight(apply: Mapping[str, Any]) -> bool:
    keys = ("state", "phase", "patch", "appliedAt", "verifyAfter", "dryRun")
    state = _valid(ApplyStatus, {k: apply[k] for k in keys if k in apply})
    return state is not None and ApplyStatus.model_validate(state).in_flight


def _stamp_or(value: Any, now: datetime) -> str:
    parsed = parse_time(value) if isinstance(value, str) else None
    return stamp(parsed or now)
