"""The change record on the workload (pure): which change landed, how to undo it (crash safety)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import yaml

from gpu_rightsizer.actuator.plan import (
    CHANGE_ANNOTATION,
    CONTAINER_PATH,
    HPA_MAX_PATH,
    HPA_MIN_PATH,
    REPLICAS_PATH,
    ChangePlan,
    change_id_for,
    current_value,
    policy_name_for,
    same_value,
)
from gpu_rightsizer.logic.policy import EffectiveSettings
from gpu_rightsizer.logic.workloads import GPU_RESOURCE_PATTERN
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


# --------------------------------------------------------------------------------------------------
# Validating a recorded change again before every write (apply, resume, rollback)
# --------------------------------------------------------------------------------------------------

_GPU_ACTIONS = frozenset(
    {ActionType.GPU_COUNT, ActionType.MIG_PROFILE, ActionType.GPU_SHARING, ActionType.RELEASE_IDLE}
)


def path_actions(path: str) -> frozenset[ActionType]:
    """The policy actions that may change one flat field path (empty: no action may)."""
    if path == REPLICAS_PATH:
        return frozenset({ActionType.REPLICAS, ActionType.RELEASE_IDLE})
    if path in (HPA_MIN_PATH, HPA_MAX_PATH):
        return frozenset({ActionType.REPLICAS})  # hpaBounds is governed by the policy's replicas action
    match = CONTAINER_PATH.match(path)
    if match is None:
        return frozenset()
    resource = match["resource"]
    if resource == "cpu":
        return frozenset({ActionType.CPU})
    if resource == "memory":
        return frozenset({ActionType.MEMORY})
    return _GPU_ACTIONS if GPU_RESOURCE_PATTERN.match(resource) else frozenset()


def _count(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def record_problems(record: ChangeRecord, settings: EffectiveSettings) -> list[str]:
    """Why a recorded change may not be sent under the policy as it is now; empty when it may.

    The record is the actuator's own, but the policy may have changed since it was written, and a
    record is never trusted beyond what the policy allows today: its actions, the fields those
    actions may change, the MIG profiles and the replica floor (SPEC §6)."""
    problems = [
        f"action {action.value} is not in the policy's actions"
        for action in record.actions
        if policy_name_for(action) not in settings.actions
    ]
    for path, value in sorted(record.target.items()):
        allowed = {policy_name_for(action) for action in path_actions(path)}
        if not allowed & settings.actions:
            problems.append(f"{path} is not a field the policy's actions may change")
            continue
        match = CONTAINER_PATH.match(path)
        resource = match["resource"] if match is not None else ""
        if value is not None and resource.startswith("nvidia.com/mig-"):
            profile = resource.removeprefix("nvidia.com/mig-")
            if profile not in settings.allowed_mig_profiles:
                problems.append(f"{path}: MIG profile {profile} is not in allowedMigProfiles")
        if path in (REPLICAS_PATH, HPA_MIN_PATH, HPA_MAX_PATH):
            wanted, before = _count(value), _count(record.previous.get(path))
            if wanted is None:
                problems.append(f"{path}: {value!r} is not a replica count")
            elif path == HPA_MIN_PATH and wanted < max(1, settings.min_replicas):
                problems.append(f"{path} {wanted} is below minReplicas {max(1, settings.min_replicas)}")
            elif (
                path == REPLICAS_PATH
                and wanted < settings.min_replicas
                and (before is None or wanted < before)
            ):
                problems.append(f"{path}: scale-in to {wanted} is below minReplicas {settings.min_replicas}")
    low, high = _count(record.target.get(HPA_MIN_PATH)), _count(record.target.get(HPA_MAX_PATH))
    if low is not None and high is not None and low > high:
        problems.append(f"HPA bounds {low}-{high}: minimum above maximum")
    return problems


def rollback_problems(undo: ChangeRecord, change: ChangeRecord) -> list[str]:
    """Why a recorded rollback is not the undoing of `change`: it may only put back, on fields the
    change set, the values the change replaced; and every one of those fields must be one that
    some policy action may change."""
    problems = []
    if undo.rollback_of != change.change_id:
        problems.append(f"the rollback record undoes {undo.rollback_of!r}, not change {change.change_id}")
    for path, value in sorted(undo.target.items()):
        if path not in change.target or not path_actions(path):
            problems.append(f"the rollback would change {path}, which change {change.change_id} did not set")
        elif not same_value(path, value, change.previous.get(path)):
            problems.append(
                f"the rollback would set {path} to {value!r}, not the replaced {change.previous.get(path)!r}"
            )
    return problems


def record_from_patch(patch_text: str) -> ChangeRecord | None:
    """The change record inside a recorded patch (its annotation), or None."""
    try:
        body = yaml.safe_load(patch_text)
        annotation = body["metadata"]["annotations"][CHANGE_ANNOTATION]
        return ChangeRecord.from_annotation(str(annotation))
    except (yaml.YAMLError, KeyError, TypeError, ValueError):
        return None


def describe(record: ChangeRecord | None) -> str:
    """The change in words, e.g. `containers[main].resources.limits[cpu] 1->4`."""
    if record is None:
        return ""
    return ChangePlan(record.change_id, record.actions, record.target, record.previous).describe()
