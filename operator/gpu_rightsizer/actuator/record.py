"""The change record on the workload (pure): which change landed, how to undo it (crash safety)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpu_rightsizer.actuator.plan import (
    CHANGE_ANNOTATION,
    ChangePlan,
    change_id_for,
    current_value,
    same_value,
)
from gpu_rightsizer.model.codes import ActionType


def rollback_plan(
    record: ChangeRecord,
    workload: Mapping[str, Any],
    hpa: Mapping[str, Any] | None = None,
    workload_key: str = "",
) -> tuple[ChangePlan | None, tuple[str, ...]]:
    """The change that restores what a recorded change replaced, for the fields that still hold the
    values it set; and the fields someone else changed since (never overwritten)."""
    target: dict[str, str | None] = {}
    kept: list[str] = []
    for path, ours in record.target.items():
        if same_value(path, current_value(workload, path, hpa), ours):
            target[path] = record.previous.get(path)
        else:
            kept.append(path)
    if not target:
        return None, tuple(sorted(kept))
    plan = ChangePlan(
        change_id=change_id_for(workload_key, target, salt=f"rollback-of-{record.change_id}"),
        actions=record.actions,
        target=target,
        previous={path: record.target[path] for path in target},
    )
    return plan, tuple(sorted(kept))


# --------------------------------------------------------------------------------------------------
# The record on the workload (crash safety)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChangeRecord:
    """What the `gpurightsizer.io/previous` annotation holds: which change landed, and how to undo it."""

    change_id: str
    at: datetime
    target: dict[str, str | None]
    previous: dict[str, str | None]
    actions: tuple[ActionType, ...] = ()
    baseline: dict[str, float] = field(default_factory=dict)
    rollback_of: str | None = None

    def to_annotation(self) -> str:
        """Compact JSON for the annotation value."""
        payload: dict[str, Any] = {
            "changeId": self.change_id,
            "at": self.at.isoformat(),
            "actions": [a.value for a in self.actions],
            "target": self.target,
            "previous": self.previous,
            "baseline": self.baseline,
        }
        if self.rollback_of:
            payload["rollbackOf"] = self.rollback_of
        return json.dumps(payload, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_annotation(cls, text: str) -> ChangeRecord:
        """Parse the annotation; ValueError with a clear message when it is not ours or is damaged."""
        try:
            payload = json.loads(text)
            return cls(
                change_id=str(payload["changeId"]),
                at=datetime.fromisoformat(str(payload["at"])),
                target={str(k): (None if v is None else str(v)) for k, v in dict(payload["target"]).items()},
                previous={
                    str(k): (None if v is None else str(v)) for k, v in dict(payload["previous"]).items()
                },
                actions=tuple(ActionType(a) for a in payload.get("actions", [])),
                baseline={str(k): float(v) for k, v in dict(payload.get("baseline", {})).items()},
                rollback_of=payload.get("rollbackOf"),
            )
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"annotation {CHANGE_ANNOTATION} is not a change record: {error}") from error


def record_on(workload: Mapping[str, Any]) -> ChangeRecord | None:
    """The change record on a workload, or None (absent or unreadable)."""
    text = ((workload.get("metadata") or {}).get("annotations") or {}).get(CHANGE_ANNOTATION)
    if not text:
        return None
    try:
        return ChangeRecord.from_annotation(str(text))
    except ValueError:
        return None


def change_landed(
    workload: Mapping[str, Any], plan: ChangePlan, hpa: Mapping[str, Any] | None = None
) -> bool:
    """True when the workload already carries this change (its record and its target values)."""
    record = record_on(workload)
    if record is None or record.change_id != plan.change_id:
        return False
    return all(
        current_value(workload, path, hpa) == value
        for path, value in plan.target.items()
        if not path.startswith("hpa.")
    )
