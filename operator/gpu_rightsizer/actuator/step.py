"""The actuator's step: carries published recommendations into workloads under an `Apply` policy (SPEC §6).

`Actuator.step()` is called by the actuator's own loop (`actuator.loop`) for each workload while this
process holds the lease (`actuator.wiring` keeps it). It acts only on the machine-readable actions the
recommendation publishes; it never analyses. Every decision is a function of the pure modules
`actuator.{gates,plan,fields,record,verify}`; this module reads, writes and records.

The change's state lives in the workload's `GPURightsizingChange`, which only the actuator's identity
may write; nothing in the recommendation's status is read as the actuator's own state (its
`status.apply` is a mirror for people). A change's life is a state machine, each step one
conditional write (resourceVersion precondition), so a crash at any point neither loses nor repeats it:

    Proposed -> IntentRecorded -> Applied -> RolledOut -> Verified | Inconclusive
                                                       -> RollbackIntentRecorded -> RolledBack

Before every apply, resume or rollback the recorded change is validated again against the policy as
it is now, the workload's identity and controllers, and the gates; a record that does not validate
is refused (Event, condition, no write). Leadership is checked before every write.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import yaml
from pydantic import ValidationError

from gpu_rightsizer.actuator.fields import conflict_reason, field_conflicts
from gpu_rightsizer.actuator.gates import (
    Availability,
    Verdict,
    check_availability,
    rollout_failure,
    rollout_incomplete,
)
from gpu_rightsizer.actuator.legacy import converted_apply
from gpu_rightsizer.actuator.plan import (
    ChangePlan,
    current_value,
    plan_change,
    same_value,
    workload_patch,
)
from gpu_rightsizer.actuator.record import (
    ChangeRecord,
    record_from_patch,
    record_on,
    rollback_plan,
    rollback_problems,
)
from gpu_rightsizer.actuator.resize import InPlaceSteps, resized_pods
from gpu_rightsizer.actuator.verify import (
    Outcome,
    VerificationInput,
    landed_by_us,
    new_revision_pods,
    pod_health,
    reads_exhausted,
    signals_of_pods,
    template_fingerprint,
    verification_outcome,
)
from gpu_rightsizer.actuator.writes import RecordState, WorkloadCase
from gpu_rightsizer.adapters.kube import ApiError
from gpu_rightsizer.logic.owners import managed_by_parent
from gpu_rightsizer.model.codes import ApplyState
from gpu_rightsizer.model.crd import ChangePhase, OnDisableAction
from gpu_rightsizer.model.k8s import parse_time, stamp
from gpu_rightsizer.model.kinds import KINDS
from gpu_rightsizer.model.result import Action
from gpu_rightsizer.runtime import metrics

LOG = logging.getLogger(__name__)

#: Phases of a change in flight (not settled): it holds a recorded patch and counts as a disruption.
IN_FLIGHT = frozenset(
    {
        ChangePhase.INTENT_RECORDED,
        ChangePhase.APPLIED,
        ChangePhase.ROLLED_OUT,
        ChangePhase.ROLLBACK_INTENT_RECORDED,
    }
)

#: Phases that end a change: its outcome stays shown until the cooldown ends.
SETTLED = frozenset(
    {
        ChangePhase.VERIFIED,
        ChangePhase.INCONCLUSIVE,
        ChangePhase.ROLLED_BACK,
        ChangePhase.ABANDONED,
        ChangePhase.DONE,
    }
)


def published_actions(recommendation: Mapping[str, Any]) -> list[Action]:
    """The actions as published in the recommendation's status (unreadable ones are left out)."""
    actions = []
    for raw in (recommendation.get("status") or {}).get("actions") or []:
        try:
            actions.append(Action.model_validate(raw))
        except ValidationError as error:
            LOG.warning("unreadable action in a recommendation status is ignored: %s", error)
    return actions


def phase_of(apply: Mapping[str, Any]) -> ChangePhase | None:
    """The change phase; statuses written before phases existed map from their state."""
    raw = apply.get("phase")
    if raw:
        with contextlib.suppress(ValueError):
            return ChangePhase(raw)
    state = apply.get("state")
    if (
        state == ApplyState.PENDING
        and apply.get("patch")
        and apply.get("appliedAt")
        and not apply.get("dryRun")
    ):
        return ChangePhase.INTENT_RECORDED
    if state == ApplyState.APPLIED and apply.get("verifyAfter"):
        return ChangePhase.APPLIED
    return None


# --------------------------------------------------------------------------------------------------
# The actuator
# --------------------------------------------------------------------------------------------------


class Actuator(InPlaceSteps):
    """One actuator step per workload: which write, if any, the change's state and the gates call for."""

    # the step -----------------------------------------------------------------------------------

    def step(self, case: WorkloadCase, recent_changes: list[tuple[str, datetime]]) -> ChangePhase | None:
        """Advance one workload's change by at most one phase, or propose a new change; returns the
        phase the change is in afterwards (as this step wrote it)."""
        found = self.records.get_change(case.ref)
        status = RecordState(
            apply=dict((found or {}).get("status") or {}),
            resource_version=((found or {}).get("metadata") or {}).get("resourceVersion") if found else None,
            spec=dict((found or {}).get("spec") or {}),
        )
        phase = phase_of(status.apply)
        try:
            if found is None:
                self._convert_legacy(case, status)
            in_place = (
                resized_pods(status.apply.get("patch")) is not None
                if phase in IN_FLIGHT
                else self._takes_resize_path(case, published_actions(case.recommendation))
            )
            if found is not None and status.spec.get("workloadUid") != case.uid:
                self._rebind(case, status, phase)
            elif in_place:
                self._resize_step(case, status, phase, recent_changes, published_actions(case.recommendation))
            elif phase == ChangePhase.INTENT_RECORDED:
                self._resume_intent(case, status, recent_changes)
            elif phase in (ChangePhase.APPLIED, ChangePhase.ROLLED_OUT):
                self._verify(case, status)
            elif phase == ChangePhase.ROLLBACK_INTENT_RECORDED:
                self._resume_rollback(case, status)
            else:
                self._maybe_change(case, status, recent_changes)
        except ApiError as error:
            metrics.ERRORS.labels("kubernetes").inc()
            LOG.warning("actuation of %s failed: %s %s", case.ref.key, error.status, error.reason)
            if error.status != 409 and status.resource_version is not None:
                # keep the state: an intent stays an intent and is resumed through every check next step
                with contextlib.suppress(ApiError):
                    self._write(
                        case, status, {"lastError": f"Kubernetes API error {error.status}: {error.reason}"}
                    )
        return phase_of(status.apply)

    def _convert_legacy(self, case: WorkloadCase, status: RecordState) -> None:
        """Before anything else, carry a pre-change-record `status.apply` (history, rollbacks,
        regressions) into the new record, once (`actuator.legacy`)."""
        carried = converted_apply(case.recommendation, case.now)
        if carried:
            self._write(case, status, carried)
            LOG.info(
                "%s: %d history entries and %d rollbacks carried into its change record",
                case.ref.key, len(carried.get("history") or []), carried.get("rollbacks", 0),
            )  # fmt: skip

    def _rebind(self, case: WorkloadCase, status: RecordState, phase: ChangePhase | None) -> None:
        """The workload was deleted and recreated under the same name: the record's change was made to
        the old object. A change in flight is refused (never carried into the new one); the history
        stays and the record is bound to the new workload."""
        old = status.spec.get("workloadUid")
        if phase in IN_FLIGHT:
            self._refuse(
                case, status, f"change {status.apply.get('changeId')}",
                [f"it was made to workload uid {old}, the workload now is uid {case.uid} (recreated)"],
            )  # fmt: skip
        self._guard()
        written = self.records.patch_change(
            case.ref,
            {"spec": {"workloadUid": case.uid}},
            resource_version=status.resource_version,
            status=False,
        )
        status.resource_version = (written.get("metadata") or {}).get("resourceVersion")

    # new change ----------------------------------------------------------------------------------

    def _live_gates(self, case: WorkloadCase, plan: ChangePlan) -> Verdict | None:
        owners = field_conflicts(case.workload, plan.target)
        if case.hpa is not None:
            hpa = {**case.hpa, "kind": "HorizontalPodAutoscaler"}  # listed objects carry no kind
            owners.update(field_conflicts(hpa, [p for p in plan.target if p.startswith("hpa.")]))
        if owners:
            return Verdict(False, ApplyState.BLOCKED, conflict_reason(owners))
        return check_availability(
            plan, Availability(case.workload, case.pdbs, case.pods_in_disruption), case.settings
        )

    def _maybe_change(
        self, case: WorkloadCase, status: RecordState, recent: list[tuple[str, datetime]]
    ) -> None:
        settings = case.settings
        apply = status.apply
        # the annotation is editable by the workload's owners: it may only make the cooldown longer
        record = record_on(case.workload)
        times = [
            t for t in (record.at if record is not None else None, parse_time(apply.get("appliedAt"))) if t
        ]
        last_change = max(times) if times else None
        if not self._may_start(case, status, recent, last_change, settled=phase_of(apply) in SETTLED):
            return
        generation = (case.workload.get("metadata") or {}).get("generation")

        def planned() -> ChangePlan | None:
            return plan_change(
                case.workload, published_actions(case.recommendation), settings, hpa=case.hpa,
                workload_key=case.ref.key,
            )  # fmt: skip

        started = self._start(case, status, planned, generation, self._live_gates)
        if started is None:
            return
        plan, change = started
        patch_text = yaml.safe_dump(
            workload_patch(case.ref.kind, plan.target, change.to_annotation()), sort_keys=True
        )
        previous = {path: "" if value is None else value for path, value in plan.previous.items()}
        if settings.dry_run:
            fields = {"patch": patch_text, "reason": f"dry run: would apply {plan.describe()}", "previous": previous,
                      "verifyAfter": None}  # fmt: skip
            self._propose_dry_run(
                case, status, apply, plan, fields, f"would apply {plan.describe()}; patch:\n{patch_text}"
            )
            return
        # 1. intent first
        self._write(case, status, {
            "state": ApplyState.PENDING.value, "phase": ChangePhase.INTENT_RECORDED.value, "dryRun": False,
            "patch": patch_text, "changeId": plan.change_id, "previous": previous, "policy": settings.policy,
            "reason": f"change {plan.change_id} recorded: applying {plan.describe()}",
            "appliedAt": stamp(case.now), "verifyAfter": None, "rolledOutAt": None, "lastError": None,
            "workloadGeneration": generation, "templateHash": None, "conditions": [],
            "replicas": int(current_value(case.workload, "replicas") or 1),
        })  # fmt: skip
        recent.append((case.ref.namespace, case.now))
        # 2. the change, 3. mark it applied
        patched = self._patch_workload(case, plan, change)
        self._mark_applied(case, status, plan, patched)

    def _mark_applied(
        self, case: WorkloadCase, status: RecordState, plan: ChangePlan, patched: Mapping[str, Any]
    ) -> None:
        generation = (patched.get("metadata") or {}).get("generation")
        self._write(case, status, {
            "state": ApplyState.APPLIED.value, "phase": ChangePhase.APPLIED.value,
            "reason": f"change {plan.change_id} applied: {plan.describe()}; waiting for the rollout",
            "workloadGeneration": generation, "verifyAfter": stamp(case.now + case.settings.verify_for),
            "templateHash": template_fingerprint(patched),
        })  # fmt: skip
        self._event(case, "ChangeApplied", f"{plan.describe()} (change {plan.change_id})")
        for action in plan.actions:
            metrics.ACTIONS_APPLIED.labels(action.value, "applied").inc()
        LOG.info("applied change %s to %s: %s", plan.change_id, case.ref.key, plan.describe())

    # an interrupted intent -------------------------------------------------------------------------

    def _resume_intent(
        self, case: WorkloadCase, status: RecordState, recent: list[tuple[str, datetime]]
    ) -> None:
        """An intent without its outcome. A landed patch (ours: annotation, values, revision, field
        manager) goes on to verification; one never sent is sent only after every gate ran again."""
        apply = status.apply
        record = record_from_patch(str(apply.get("patch") or ""))
        if record is None:
            self._refuse(case, status, "recorded intent", ["it is unreadable"])
            return
        plan = ChangePlan(record.change_id, record.actions, record.target, record.previous)
        generation = apply.get("workloadGeneration")
        landed = landed_by_us(
            case.workload, plan, case.hpa, int(generation) if generation is not None else None
        )
        problems = self._still_ours(case, status, record)
        if problems:
            what = f"change {record.change_id} ({'landed' if landed else 'not sent'})"
            self._refuse(case, status, what, problems)
            return
        if landed:  # the gates are about starting a change: this one has started; verify it
            LOG.info("change %s of %s had landed before the restart", record.change_id, case.ref.key)
            self._mark_applied(case, status, plan, case.workload)
            return
        recorded_at = parse_time(apply.get("appliedAt")) or record.at
        verdict = self._gates(case, recent, started_by=apply.get("policy"), exclude_own=recorded_at)
        if verdict.go and case.now - recorded_at > case.settings.max_staleness:
            verdict = Verdict(False, ApplyState.SKIPPED, "the intent is older than maxStaleness")
        if verdict.go:
            live_now = {p: current_value(case.workload, p, case.hpa) for p in plan.target}
            if any(not same_value(p, live_now[p], plan.previous.get(p)) for p in plan.target):
                verdict = Verdict(False, ApplyState.SKIPPED, "the workload changed since the intent")
            else:
                verdict = self._live_gates(case, plan) or verdict
        if not verdict.go:
            reason = f"change {record.change_id} was never sent: {verdict.reason}"
            self._settle(case, status, verdict.state, ChangePhase.ABANDONED, reason)
            self._event(case, "ChangeAbandoned", reason, warning=True)
            return
        LOG.info("change %s of %s was recorded but not sent; sending it now", record.change_id, case.ref.key)
        self._mark_applied(case, status, plan, self._patch_workload(case, plan, record))

    # verification ----------------------------------------------------------------------------------

    def _verify(self, case: WorkloadCase, status: RecordState) -> None:
        apply = status.apply
        record = record_from_patch(str(apply.get("patch") or ""))
        applied_at = parse_time(apply.get("appliedAt"))
        if record is None or applied_at is None:
            self._refuse(case, status, "change record", ["it is unreadable"])
            return

        def undo(why: str, after: Mapping[str, float], counts: bool) -> None:
            self._roll_back(case, status, record, why, after, counts=counts)

        if self._on_disable_step(case, status, record, undo):
            return
        superseded = apply.get("templateHash") and apply.get("templateHash") != template_fingerprint(
            case.workload
        )
        if superseded:
            text = (
                f"change {record.change_id} superseded: the pod template was changed since by someone else; "
                "not verified and not counted as a regression"
            )
            self._settle(case, status, ApplyState.APPLIED, ChangePhase.DONE, text)
            self._event(case, "ChangeSuperseded", text, warning=True)
            return
        pods = self.kube.pods_of(case.workload)
        replica_sets: list[dict[str, Any]] = []
        row = KINDS.get(case.ref.kind)
        if row is not None and row.revision_sets is not None:
            replica_sets = list(self.kube.list_workloads(row.revision_sets, (case.ref.namespace,)).values())
        new_pods = new_revision_pods(case.workload, pods, replica_sets)
        health = pod_health(new_pods)
        rolled_out_at = parse_time(apply.get("rolledOutAt"))
        after: dict[str, float] = {}
        read_error: str | None = None
        if rolled_out_at is not None and case.now >= rolled_out_at + case.settings.verify_for:
            after, read_error = self._measure_new_pods(case, rolled_out_at, new_pods)
        rollout = rollout_incomplete(case.workload)
        if apply.get("workloadGeneration") is not None and rollout is None:
            observed = (case.workload.get("status") or {}).get("observedGeneration")
            if observed is not None and int(observed) < int(apply["workloadGeneration"]):
                rollout = "the controller has not seen the change yet"
        outcome, reason = verification_outcome(
            VerificationInput(
                now=case.now, applied_at=applied_at, rolled_out_at=rolled_out_at,
                verify_for=case.settings.verify_for, rollout=rollout,
                failure=rollout_failure(case.workload), health=health,
                before=record.baseline, after=after, actions=record.actions,
            )
        )  # fmt: skip
        if outcome == Outcome.INCONCLUSIVE and read_error is not None and rolled_out_at is not None:
            failed = int(apply.get("failedReads") or 0) + 1
            if not reads_exhausted(failed, case.now, rolled_out_at, case.settings.verify_for):
                self._write(case, status, {
                    "failedReads": failed, "lastReadError": read_error[:1024],
                    "reason": f"change {record.change_id}: verification read {failed} gave no figures "
                    f"({read_error}); retrying",
                })  # fmt: skip
                return
            reason = f"{reason} ({failed} reads in a row: {read_error})"
        if outcome == Outcome.WAIT:
            if apply.get("reason") != f"change {record.change_id}: {reason}":
                self._write(case, status, {"reason": f"change {record.change_id}: {reason}"})
            return
        if outcome == Outcome.ROLLED_OUT:
            self._write(case, status, {
                "phase": ChangePhase.ROLLED_OUT.value, "rolledOutAt": stamp(case.now),
                "verifyAfter": stamp(case.now + case.settings.verify_for),
                "reason": f"change {record.change_id} rolled out; measuring the new pods until "
                f"{stamp(case.now + case.settings.verify_for)}",
            })  # fmt: skip
            return
        self._conclude(case, status, record, outcome, reason, after, undo)

    def _measure_new_pods(
        self, case: WorkloadCase, since: datetime, pods: list[Mapping[str, Any]]
    ) -> tuple[dict[str, float], str | None]:
        """The new pods' figures since the rollout, or ({}, why) when this read gave none."""
        names = [str((p.get("metadata") or {}).get("name")) for p in pods]
        if not names:
            return {}, "no pods of the new revision"
        try:
            mine = self.measure(case.ref, since, case.now)
        except Exception as error:
            LOG.warning("metrics for verifying %s unavailable: %s", case.ref.key, error)
            return {}, f"the metric read failed: {error}"
        if mine is None:
            return {}, "no series for this workload"
        if any(name in warning for warning in mine.warnings for name in names):
            return {}, "a new pod without its series"  # no figures rather than partial ones
        figures = signals_of_pods(mine, pods)
        return (figures, None) if figures else ({}, "no figures for the new pods")

    def _resume_rollback(self, case: WorkloadCase, status: RecordState) -> None:
        """A rollback intent without its outcome (the actuator stopped mid-rollback). Finished only when
        the rollback record is exactly the undoing of the recorded change, the workload has no
        controller owner, and its policy (in Apply, or left Apply with onDisable other than Keep) still
        governs it."""
        apply = status.apply
        record = record_from_patch(str(apply.get("patch") or ""))
        undo = record_from_patch(str(apply.get("rollback") or ""))
        if record is None or undo is None:
            self._refuse(case, status, "recorded rollback", ["it is unreadable"])
            return
        not_ours = self._owned_by_policy(case, status)
        problems = rollback_problems(undo, record)
        if not_ours is not None and self._on_disable(case, status) == OnDisableAction.KEEP:
            problems.append(not_ours)
        managed = managed_by_parent(case.workload)
        if managed is not None:
            problems.append(managed)
        if problems:
            self._refuse(case, status, f"rollback of change {record.change_id}", problems)
            return
        on_workload = record_on(case.workload)
        landed = on_workload is not None and on_workload.change_id == undo.change_id
        plan, _ = rollback_plan(record, case.workload, case.hpa, case.ref.key)
        if not landed and plan is None:
            self._settle(
                case, status, ApplyState.BLOCKED, ChangePhase.DONE,
                f"change {record.change_id} not rolled back: every field was changed since by someone else",
                extra={"rollback": None},
            )  # fmt: skip
            return
        if landed:
            chosen = ChangePlan(undo.change_id, undo.actions, undo.target, undo.previous)
        else:  # recomputed on the live workload: only fields that still hold our values
            assert plan is not None
            chosen = plan
            undo = ChangeRecord(
                change_id=plan.change_id, at=case.now, target=plan.target, previous=plan.previous,
                actions=record.actions, baseline=record.baseline, rollback_of=record.change_id,
            )  # fmt: skip
        self._finish_rollback(case, status, record, chosen, undo, "resumed after a restart", {})
