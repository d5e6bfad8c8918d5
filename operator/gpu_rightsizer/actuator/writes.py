"""The actuator's writes: the change record (conditional, leadership-checked), the recommendation's
mirror, Events, the workload and HPA patches, settling a change and rolling it back.

`actuator.step.Actuator` builds on `ChangeWriter` and decides which of these happens; this module
holds what every path shares, so that every write goes through the same guard.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import yaml

from gpu_rightsizer.actuator.plan import (
    ChangePlan,
    hpa_patch,
    workload_patch,
)
from gpu_rightsizer.actuator.record import (
    ChangeRecord,
    describe,
    record_from_patch,
    record_on,
    rollback_plan,
)
from gpu_rightsizer.actuator.verify import (
    pod_health,
)
from gpu_rightsizer.adapters.kube import ApiError, KubeAdapter
from gpu_rightsizer.logic.owners import managed_by_parent
from gpu_rightsizer.logic.policy import EffectiveSettings
from gpu_rightsizer.logic.workloads import recommendation_name
from gpu_rightsizer.model.change import RECORD_VALID_CONDITION
from gpu_rightsizer.model.codes import ApplyState
from gpu_rightsizer.model.crd import HISTORY_LENGTH, ChangePhase
from gpu_rightsizer.model.k8s import stamp
from gpu_rightsizer.model.kinds import KINDS
from gpu_rightsizer.model.observation import WorkloadRef, WorkloadWindow
from gpu_rightsizer.runtime import metrics

LOG = logging.getLogger(__name__)

#: Fields of the change record shown on the recommendation's `status.apply` (with `change`, its name).
MIRRORED = (
    "state", "phase", "reason", "policy", "changeId", "appliedAt", "dryRun", "rollbacks", "manifestAdvice",
)  # fmt: skip

#: One workload's window over [start, end] through the metric source port, scoped to that workload:
#: None when the source has no series for it; raises when the source fails.
Measure = Callable[[WorkloadRef, datetime, datetime], WorkloadWindow | None]


class LeadershipLostError(RuntimeError):
    """The lease is no longer ours: no further write may be sent."""


@dataclass(frozen=True)
class WorkloadCase:
    """One workload as the cycle saw it, with its recommendation as published (fresh from the API)."""

    ref: WorkloadRef
    uid: str
    workload: dict[str, Any]
    recommendation: dict[str, Any]
    settings: EffectiveSettings
    hpa: dict[str, Any] | None
    now: datetime
    pdbs: tuple[dict[str, Any], ...] = ()
    pods_in_disruption: int = 0


class ChangeRecords(Protocol):
    """Where the change records live (`adapters.change_store.ChangeStore`; a fake in the tests)."""

    def get_change(self, ref: WorkloadRef) -> dict[str, Any] | None: ...

    def create_change(self, ref: WorkloadRef, spec: Mapping[str, Any]) -> dict[str, Any]: ...

    def patch_change(
        self, ref: WorkloadRef, body: Mapping[str, Any], *, resource_version: str | None, status: bool
    ) -> dict[str, Any]: ...

    def list_changes(self, namespaces: tuple[str, ...] = ()) -> list[dict[str, Any]]: ...


@dataclass
class RecordState:
    """The change record's status as this step knows it, its spec, and the version to write against
    (None: the record does not exist yet)."""

    apply: dict[str, Any]
    resource_version: str | None
    spec: dict[str, Any] = field(default_factory=dict)


class ChangeWriter:
    """Every write the actuator sends; each is preceded by a leadership check."""

    def __init__(
        self, kube: KubeAdapter, records: ChangeRecords, is_leader: Callable[[], bool], measure: Measure
    ) -> None:
        self.kube = kube
        self.records = records
        self.is_leader = is_leader
        self.measure = measure

    # writes -------------------------------------------------------------------------------------

    def _guard(self) -> None:
        if not self.is_leader():
            raise LeadershipLostError("the lease is no longer held; no write is sent")

    def _write(self, case: WorkloadCase, status: RecordState, fields: Mapping[str, Any]) -> None:
        """One conditional write of the change record's status (409 when someone wrote since we read);
        the record is created first when it does not exist. Then the recommendation's mirror."""
        self._guard()
        if status.resource_version is None:
            status.spec = {
                "targetRef": {
                    "apiVersion": case.ref.api_version,
                    "kind": case.ref.kind,
                    "name": case.ref.name,
                },
                "workloadUid": case.uid,
                "recommendation": str((case.recommendation.get("metadata") or {}).get("name") or ""),
            }
            created = self.records.create_change(case.ref, status.spec)
            status.resource_version = (created.get("metadata") or {}).get("resourceVersion")
        written = self.records.patch_change(
            case.ref, {"status": dict(fields)}, resource_version=status.resource_version, status=True
        )
        status.resource_version = (written.get("metadata") or {}).get("resourceVersion")
        status.apply = {k: v for k, v in {**status.apply, **fields}.items() if v is not None}
        self._mirror(case, status)

    def _mirror(self, case: WorkloadCase, status: RecordState) -> None:
        """Show the state on the recommendation for people (`kubectl get gpurec`); never read back."""
        apply = status.apply
        summary = {key: apply.get(key) for key in MIRRORED}
        summary["change"] = recommendation_name(case.ref)
        published = (case.recommendation.get("status") or {}).get("apply") or {}
        if all(published.get(key) == value for key, value in summary.items()):
            return
        try:
            self._guard()
            self.kube.patch_recommendation_status(case.ref, {"apply": summary})
        except ApiError as error:  # the record is written; the mirror catches up next step
            LOG.warning("mirroring the change state of %s failed: %s", case.ref.key, error.reason)
        case.recommendation.setdefault("status", {})["apply"] = summary

    def _event(self, case: WorkloadCase, reason: str, message: str, *, warning: bool = False) -> None:
        self._guard()
        self.kube.post_event(case.ref, case.uid, reason, message, warning=warning)

    def _patch_workload(self, case: WorkloadCase, plan: ChangePlan, record: ChangeRecord) -> dict[str, Any]:
        """The change as a strategic-merge patch, conditional on the workload version the gates saw;
        the HPA's bounds as a merge patch, conditional on the HPA version the field-owner check saw."""
        self._guard()
        body = workload_patch(case.ref.kind, plan.target, record.to_annotation())
        version = (case.workload.get("metadata") or {}).get("resourceVersion")
        patched = self.kube.strategic_patch(case.ref, body, resource_version=version)
        hpa_body = hpa_patch(plan.target)
        if hpa_body is not None and case.hpa is not None:
            self._guard()
            metadata = case.hpa.get("metadata") or {}
            self.kube.patch_hpa(
                case.ref.namespace,
                str(metadata["name"]),
                hpa_body,
                resource_version=metadata.get("resourceVersion"),
            )
        return patched

    def _settle(
        self,
        case: WorkloadCase,
        status: RecordState,
        state: ApplyState,
        phase: ChangePhase,
        reason: str,
        *,
        extra: Mapping[str, Any] | None = None,
        after: Mapping[str, float] | None = None,
    ) -> None:
        """A terminal state: the recorded patch is cleared and the change goes into the history."""
        apply = status.apply
        history = list(apply.get("history") or [])
        record = record_from_patch(str(apply.get("patch") or ""))
        if apply.get("changeId"):
            history.append(
                {
                    "changeId": apply["changeId"],
                    "at": apply.get("appliedAt") or stamp(case.now),
                    "finishedAt": stamp(case.now),
                    "change": describe(record),
                    "outcome": phase.value,
                    "reason": reason[:1024],
                    "before": dict(record.baseline) if record is not None else {},
                    "after": dict(after or {}),
                }
            )
        self._write(
            case,
            status,
            {
                "state": state.value, "phase": phase.value, "reason": reason, "patch": None,
                "verifyAfter": None, "lastError": None, "history": history[-HISTORY_LENGTH:], "rollback": None,
                "dryRun": False, "failedReads": 0, "lastReadError": None, **(extra or {}),
            },
        )  # fmt: skip

    def _set_state(self, case: WorkloadCase, status: RecordState, state: ApplyState, reason: str) -> None:
        """A gate's verdict for a workload with no change in flight (written only when it changed)."""
        apply = status.apply
        if apply.get("state") == state.value and apply.get("reason") == reason and not apply.get("dryRun"):
            return
        if status.resource_version is None:  # no change yet: no record is created for a verdict alone
            status.apply = {**apply, "state": state.value, "reason": reason, "policy": case.settings.policy}
            self._mirror(case, status)
            return
        self._write(
            case, status,
            {"state": state.value, "reason": reason, "dryRun": False, "patch": None, "policy": case.settings.policy},
        )  # fmt: skip
        if state == ApplyState.BLOCKED:
            self._event(case, "ChangeBlocked", reason, warning=True)

    def _refuse(self, case: WorkloadCase, status: RecordState, what: str, problems: list[str]) -> None:
        """A recorded change that does not validate: no workload write; Event, condition, history."""
        reason = f"{what} refused: {'; '.join(problems)}"
        condition = {
            "type": RECORD_VALID_CONDITION, "status": "False", "reason": "Refused",
            "message": reason[:32768], "lastTransitionTime": stamp(case.now),
        }  # fmt: skip
        self._settle(
            case, status, ApplyState.BLOCKED, ChangePhase.ABANDONED, reason, extra={"conditions": [condition]}
        )
        self._event(case, "ChangeRefused", reason, warning=True)
        LOG.warning("%s: %s", case.ref.key, reason)

    # rollback --------------------------------------------------------------------------------------

    def _roll_back(
        self, case: WorkloadCase, status: RecordState, record: ChangeRecord, why: str, after: Mapping[str, float],
        *, counts: bool,
    ) -> None:  # fmt: skip
        """Record the rollback intent, then restore only the fields that still hold our values.
        `counts`: the rollback counts toward maxRollbacks (a regression, not an inconclusive change)."""
        if managed_by_parent(case.workload) is not None:
            self._refuse(
                case,
                status,
                f"rollback of change {record.change_id}",
                [str(managed_by_parent(case.workload))],
            )
            return
        plan, kept = rollback_plan(record, case.workload, case.hpa, case.ref.key)
        if plan is None:
            text = f"change {record.change_id} {why}; not rolled back: every field was changed since by someone else"
            self._settle(case, status, ApplyState.BLOCKED, ChangePhase.DONE, text, after=after)
            self._event(case, "ChangeRegressed", text, warning=True)
            return
        undo = ChangeRecord(
            change_id=plan.change_id, at=case.now, target=plan.target, previous=plan.previous,
            actions=record.actions, baseline=record.baseline, rollback_of=record.change_id,
        )  # fmt: skip
        kept_text = f"; left as changed since by someone else: {', '.join(kept)}" if kept else ""
        self._write(case, status, {
            "phase": ChangePhase.ROLLBACK_INTENT_RECORDED.value, "rollbackCounts": counts,
            "rollback": yaml.safe_dump(workload_patch(case.ref.kind, plan.target, undo.to_annotation()), sort_keys=True),
            "reason": f"change {record.change_id} {why}: rolling back{kept_text}",
        })  # fmt: skip
        self._finish_rollback(case, status, record, plan, undo, f"{why}{kept_text}", after)

    def _finish_rollback(
        self, case: WorkloadCase, status: RecordState, record: ChangeRecord, plan: ChangePlan, undo: ChangeRecord,
        why: str, after: Mapping[str, float],
    ) -> None:  # fmt: skip
        on_workload = record_on(case.workload)
        patched: Mapping[str, Any] = case.workload
        bad_revision: str | None = None
        if on_workload is None or on_workload.change_id != undo.change_id:
            bad_revision = (case.workload.get("status") or {}).get("updateRevision")
            patched = self._patch_workload(case, plan, undo)
        row = KINDS.get(case.ref.kind)
        if row is not None and row.replaces_stuck_pods and row.revision_label is not None:
            self._delete_stuck_pods(case, bad_revision, row.revision_label)
        generation = (patched.get("metadata") or {}).get("generation")
        self._settle_rollback(
            case, status, record, generation, f"change {record.change_id} rolled back: {why}", after
        )

    def _settle_rollback(
        self, case: WorkloadCase, status: RecordState, record: ChangeRecord, generation: Any, text: str,
        after: Mapping[str, float], *, state: ApplyState = ApplyState.ROLLED_BACK,
        phase: ChangePhase = ChangePhase.ROLLED_BACK, extra: Mapping[str, Any] | None = None,
    ) -> None:  # fmt: skip
        """A finished rollback: settled, counted toward maxRollbacks (and remembered as regressed, at
        this workload generation) unless its intent said it does not count."""
        counts = status.apply.get("rollbackCounts", True) is not False
        regressed = list(status.apply.get("regressed") or [])
        if counts:
            regressed.append(
                {"changeId": record.change_id, "workloadGeneration": generation, "at": stamp(case.now)}
            )
        self._settle(
            case, status, state, phase, text, after=after,
            extra={
                "rollback": None, "rollbacks": int(status.apply.get("rollbacks") or 0) + (1 if counts else 0),
                "regressed": regressed[-HISTORY_LENGTH:], "appliedAt": stamp(case.now), "rollbackCounts": None,
                **(extra or {}),
            },
        )  # fmt: skip
        self._event(
            case,
            "ChangeRolledBack" if state == ApplyState.ROLLED_BACK else "ChangeBlocked",
            text,
            warning=True,
        )
        for action in record.actions:
            metrics.ACTIONS_APPLIED.labels(action.value, "rolled_back").inc()
        LOG.warning("%s: %s", case.ref.key, text)

    def _delete_stuck_pods(self, case: WorkloadCase, bad_revision: str | None, label: str) -> None:
        """A StatefulSet does not replace a pod of a failed revision that never became ready
        (kubernetes#67250, "Forced rollback"): after the rollback, delete the pods of the failed
        revision (`label`) that are Pending or failing. `bad_revision` is the revision our change
        created; None (a resumed rollback) means every revision but the current update revision."""
        current = (case.workload.get("status") or {}).get("updateRevision")
        for pod in self.kube.pods_of(case.workload):
            metadata = pod.get("metadata") or {}
            revision = (metadata.get("labels") or {}).get(label)
            stale = revision == bad_revision if bad_revision is not None else revision != current
            stuck = pod_health([pod]).failing or (pod.get("status") or {}).get("phase") == "Pending"
            if stale and stuck:
                self._guard()
                self.kube.delete_pod(case.ref.namespace, str(metadata.get("name")), str(metadata.get("uid")))
                LOG.info("deleted stuck pod %s of %s after the rollback", metadata.get("name"), case.ref.key)
