"""The actuator's step: carries published recommendations into workloads under an `Apply` policy (SPEC §6).

`Actuator.step()` is called by the analysis cycle for each workload while this process holds the
lease (`actuator.wiring` keeps it).
It acts only on what the recommendation's status publishes (machine-readable action targets, the
workload generation and window they were computed from); it never analyses. Every decision is a
function of the pure modules `actuator.{gates,plan,fields,record,verify}`; this module reads, writes and records.

A change's life (`status.apply.phase`) is a state machine, each step one conditional status write
(resourceVersion precondition) so a crash at any point neither loses nor repeats it:

    Proposed -> IntentRecorded -> Applied -> RolledOut -> Verified | Inconclusive
                                                       -> RollbackIntentRecorded -> RolledBack

Only the policy that recorded an intent may resume it, only in Apply mode and after every gate ran
again; terminal states clear the recorded patch; a rolled-back change is not retried until the
workload's spec changes, and after `maxRollbacks` the workload is Blocked until a person clears it.
Leadership is checked before every write; losing it stops the step at once.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from gpu_rightsizer.actuator.fields import conflict_reason, field_conflicts
from gpu_rightsizer.actuator.gates import (
    CLEAR_REGRESSIONS_ANNOTATION,
    Availability,
    GateContext,
    Verdict,
    check_availability,
    check_gates,
    count_recent,
    rollout_failure,
    rollout_incomplete,
)
from gpu_rightsizer.actuator.plan import (
    CHANGE_ANNOTATION,
    ChangePlan,
    PlanError,
    current_value,
    hpa_patch,
    plan_change,
    same_value,
    workload_patch,
)
from gpu_rightsizer.actuator.record import ChangeRecord, change_landed, record_on, rollback_plan
from gpu_rightsizer.actuator.verify import (
    Outcome,
    VerificationInput,
    new_revision_pods,
    pod_health,
    signals_from_window,
    target_cpu_limit,
    verification_outcome,
)
from gpu_rightsizer.adapters.kube import KubeAdapter
from gpu_rightsizer.logic.policy import EffectiveSettings
from gpu_rightsizer.model.codes import ApplyState, DiagnosisCode, PolicyMode
from gpu_rightsizer.model.crd import HISTORY_LENGTH, ChangePhase
from gpu_rightsizer.model.observation import WorkloadRef, WorkloadWindow
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

#: Reads the metrics of every workload over [start, end] (the cycle's Prometheus batch).
Measure = Callable[[datetime, datetime], list[WorkloadWindow]]


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
    window: WorkloadWindow | None
    hpa: dict[str, Any] | None
    now: datetime
    pdbs: tuple[dict[str, Any], ...] = ()
    pods_in_disruption: int = 0


@dataclass
class _Status:
    """The recommendation's `status.apply` as this step knows it, and the version to write against."""

    apply: dict[str, Any]
    resource_version: str | None
    changed: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def parse_time(text: Any) -> datetime | None:
    """An RFC 3339 time from a status or annotation (naive ones taken as UTC); None when absent or garbled."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _record_from_patch(patch_text: str) -> ChangeRecord | None:
    """The change record inside a recorded patch (its annotation), or None."""
    try:
        body = yaml.safe_load(patch_text)
        annotation = body["metadata"]["annotations"][CHANGE_ANNOTATION]
        return ChangeRecord.from_annotation(str(annotation))
    except (yaml.YAMLError, KeyError, TypeError, ValueError):
        return None


def published_actions(recommendation: Mapping[str, Any]) -> list[Action]:
    """The actions as published in the recommendation's status (unreadable ones are left out)."""
    actions = []
    for raw in (recommendation.get("status") or {}).get("actions") or []:
        try:
            actions.append(Action.model_validate(raw))
        except ValidationError as error:
            LOG.warning("unreadable action in a recommendation status is ignored: %s", error)
    return actions


def _published_diagnosis(status: Mapping[str, Any]) -> tuple[DiagnosisCode | None, frozenset[DiagnosisCode]]:
    diagnosis = status.get("diagnosis") or {}
    codes: set[DiagnosisCode] = set()
    for finding in diagnosis.get("findings") or []:
        with contextlib.suppress(ValueError):
            codes.add(DiagnosisCode(finding.get("code")))
    try:
        primary = DiagnosisCode(str(diagnosis.get("primary")))
    except ValueError:
        primary = None
    return primary, frozenset(codes)


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


class Actuator:
    """One actuator step per workload; every write is preceded by a leadership check."""

    def __init__(self, kube: KubeAdapter, is_leader: Callable[[], bool], measure: Measure) -> None:
        self.kube = kube
        self.is_leader = is_leader
        self.measure = measure

    # writes -------------------------------------------------------------------------------------

    def _guard(self) -> None:
        if not self.is_leader():
            raise LeadershipLostError("the lease is no longer held; no write is sent")

    def _write(self, case: WorkloadCase, status: _Status, fields: Mapping[str, Any]) -> None:
        """One conditional write of `status.apply` (409 when someone wrote since we read)."""
        self._guard()
        body = {"policy": case.settings.policy, **fields}
        written = self.kube.patch_recommendation_status(
            case.ref, {"apply": body}, resource_version=status.resource_version
        )
        status.resource_version = (written.get("metadata") or {}).get("resourceVersion")
        status.apply = {k: v for k, v in {**status.apply, **body}.items() if v is not None}

    def _event(self, case: WorkloadCase, reason: str, message: str, *, warning: bool = False) -> None:
        self._guard()
        self.kube.post_event(case.ref, case.uid, reason, message, warning=warning)

    def _patch_workload(self, case: WorkloadCase, plan: ChangePlan, record: ChangeRecord) -> dict[str, Any]:
        """The change as a strategic-merge patch, conditional on the workload version the gates saw."""
        self._guard()
        body = workload_patch(case.ref.kind, plan.target, record.to_annotation())
        version = (case.workload.get("metadata") or {}).get("resourceVersion")
        patched = self.kube.strategic_patch(case.ref, body, resource_version=version)
        hpa_body = hpa_patch(plan.target)
        if hpa_body is not None and case.hpa is not None:
            self._guard()
            self.kube.patch_hpa(case.ref.namespace, str(case.hpa["metadata"]["name"]), hpa_body)
        return patched

    def _settle(
        self,
        case: WorkloadCase,
        status: _Status,
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
        record = _record_from_patch(str(apply.get("patch") or ""))
        if apply.get("changeId"):
            history.append(
                {
                    "changeId": apply["changeId"],
                    "at": apply.get("appliedAt") or _stamp(case.now),
                    "finishedAt": _stamp(case.now),
                    "change": _describe(record),
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
                "dryRun": False, **(extra or {}),
            },
        )  # fmt: skip

    def _set_state(self, case: WorkloadCase, status: _Status, state: ApplyState, reason: str) -> None:
        """A gate's verdict for a workload with no change in flight (written only when it changed)."""
        apply = status.apply
        if apply.get("state") == state.value and apply.get("reason") == reason and not apply.get("dryRun"):
            return
        self._write(case, status, {"state": state.value, "reason": reason, "dryRun": False, "patch": None})
        if state == ApplyState.BLOCKED:
            self._event(case, "ChangeBlocked", reason, warning=True)

    # the step -----------------------------------------------------------------------------------

    def step(self, case: WorkloadCase, recent_changes: list[tuple[str, datetime]]) -> ChangePhase | None:
        """Advance one workload's change by at most one phase, or propose a new change; returns the
        phase the change is in afterwards (as this step wrote it)."""
        metadata = case.recommendation.get("metadata") or {}
        status = _Status(
            apply=dict((case.recommendation.get("status") or {}).get("apply") or {}),
            resource_version=metadata.get("resourceVersion"),
        )
        phase = phase_of(status.apply)
        try:
            if phase == ChangePhase.INTENT_RECORDED:
                self._resume_intent(case, status, recent_changes)
            elif phase in (ChangePhase.APPLIED, ChangePhase.ROLLED_OUT):
                self._verify(case, status)
            elif phase == ChangePhase.ROLLBACK_INTENT_RECORDED:
                self._resume_rollback(case, status)
            else:
                self._maybe_change(case, status, recent_changes)
        except ApiException as error:
            metrics.ERRORS.labels("kubernetes").inc()
            LOG.warning("actuation of %s failed: %s %s", case.ref.key, error.status, error.reason)
            if error.status != 409:  # on 409 someone wrote first: the next cycle starts from that
                # keep the state (an intent stays an intent and is resumed through every gate next cycle)
                with contextlib.suppress(ApiException):
                    self._write(
                        case, status, {"lastError": f"Kubernetes API error {error.status}: {error.reason}"}
                    )
        return phase_of(status.apply)

    # new change ----------------------------------------------------------------------------------

    def _gates(
        self, case: WorkloadCase, recent: list[tuple[str, datetime]], *, started_by: str | None = None,
        exclude_own: datetime | None = None, last_change: datetime | None = None,
    ) -> Verdict:  # fmt: skip
        published = case.recommendation.get("status") or {}
        diagnosis, findings = _published_diagnosis(published)
        changes = [
            c for c in recent if not (exclude_own is not None and c == (case.ref.namespace, exclude_own))
        ]
        cluster, namespace = count_recent(changes, case.ref.namespace, case.now)
        return check_gates(
            GateContext(
                settings=case.settings,
                diagnosis=diagnosis,
                finding_codes=findings,
                window_end=parse_time((published.get("window") or {}).get("end")),
                now=case.now,
                staleness_limit=case.settings.max_staleness,
                last_change_at=last_change,
                changes_last_hour_cluster=cluster,
                changes_last_hour_namespace=namespace,
                namespace=case.ref.namespace,
                warnings=tuple(case.window.warnings) if case.window is not None else (),
                analysed_generation=published.get("workloadGeneration"),
                live_generation=(case.workload.get("metadata") or {}).get("generation"),
                started_by=started_by,
            )
        )

    def _live_gates(self, case: WorkloadCase, plan: ChangePlan) -> Verdict | None:
        owners = field_conflicts(case.workload, plan.target)
        if owners:
            return Verdict(False, ApplyState.BLOCKED, conflict_reason(owners))
        return check_availability(
            plan,
            Availability(case.workload, case.pdbs, case.pods_in_disruption),
            case.settings,
        )

    def _regression_block(self, case: WorkloadCase, status: _Status) -> str | None:
        """Why remembered regressions hold this workload back; clears them on a person's request."""
        apply = status.apply
        token = ((case.workload.get("metadata") or {}).get("annotations") or {}).get(
            CLEAR_REGRESSIONS_ANNOTATION
        )
        if (
            token
            and token != apply.get("clearedToken")
            and (apply.get("rollbacks") or apply.get("regressed"))
        ):
            self._write(case, status, {"rollbacks": 0, "regressed": [], "clearedToken": token})
            self._event(case, "RegressionsCleared", f"cleared by {CLEAR_REGRESSIONS_ANNOTATION}={token}")
            return None
        rollbacks = int(apply.get("rollbacks") or 0)
        if rollbacks >= case.settings.max_rollbacks:
            return (
                f"{rollbacks} change(s) of this workload were rolled back (maxRollbacks "
                f"{case.settings.max_rollbacks}): no automatic change until a person sets the "
                f"{CLEAR_REGRESSIONS_ANNOTATION} annotation on the workload to a new value"
            )
        return None

    def _maybe_change(self, case: WorkloadCase, status: _Status, recent: list[tuple[str, datetime]]) -> None:
        settings = case.settings
        apply = status.apply
        if case.window is None and settings.may_change:
            self._set_state(case, status, ApplyState.SKIPPED, "no metrics for this workload this cycle")
            return
        # the annotation is editable by the workload's owners: it may only make the cooldown longer
        record = record_on(case.workload)
        times = [
            t for t in (record.at if record is not None else None, parse_time(apply.get("appliedAt"))) if t
        ]
        last_change = max(times) if times else None
        in_cooldown = last_change is not None and case.now - last_change < settings.cooldown
        if phase_of(apply) in SETTLED and in_cooldown:
            return  # keep the outcome visible: nothing new may happen before the cooldown ends anyway
        verdict = self._gates(case, recent, last_change=last_change)
        if not verdict.go:
            self._set_state(case, status, verdict.state, verdict.reason)
            return
        blocked = self._regression_block(case, status)
        if blocked is not None:
            self._set_state(case, status, ApplyState.BLOCKED, blocked)
            return
        try:
            plan = plan_change(
                case.workload, published_actions(case.recommendation), settings, hpa=case.hpa,
                workload_key=case.ref.key,
            )  # fmt: skip
        except PlanError as error:
            self._set_state(case, status, ApplyState.BLOCKED, str(error))
            return
        if plan is None:
            self._set_state(
                case, status, ApplyState.SKIPPED, "no applicable change: nothing the policy allows"
            )
            return
        generation = (case.workload.get("metadata") or {}).get("generation")
        for regressed in apply.get("regressed") or []:
            if (
                regressed.get("changeId") == plan.change_id
                and regressed.get("workloadGeneration") == generation
            ):
                self._set_state(
                    case, status, ApplyState.SKIPPED,
                    f"change {plan.change_id} was rolled back at {regressed.get('at')}: not retried until the "
                    "workload's spec or the recommendation changes",
                )  # fmt: skip
                return
        live = self._live_gates(case, plan)
        if live is not None:
            self._set_state(case, status, live.state, live.reason)
            return
        baseline = signals_from_window(case.window) if case.window is not None else {}
        change = ChangeRecord(
            change_id=plan.change_id, at=case.now, target=plan.target, previous=plan.previous,
            actions=plan.actions, baseline=baseline,
        )  # fmt: skip
        patch_text = yaml.safe_dump(
            workload_patch(case.ref.kind, plan.target, change.to_annotation()), sort_keys=True
        )
        previous = {path: "" if value is None else value for path, value in plan.previous.items()}
        if settings.dry_run:
            if apply.get("patch") != patch_text or not apply.get("dryRun"):
                self._write(case, status, {
                    "state": ApplyState.PENDING.value, "phase": ChangePhase.PROPOSED.value, "dryRun": True,
                    "patch": patch_text, "reason": f"dry run: would apply {plan.describe()}",
                    "previous": previous, "appliedAt": None, "verifyAfter": None, "changeId": plan.change_id,
                })  # fmt: skip
                self._event(case, "DryRun", f"would apply {plan.describe()}; patch:\n{patch_text}")
            return
        # 1. intent first
        self._write(case, status, {
            "state": ApplyState.PENDING.value, "phase": ChangePhase.INTENT_RECORDED.value, "dryRun": False,
            "patch": patch_text, "changeId": plan.change_id, "previous": previous,
            "reason": f"change {plan.change_id} recorded: applying {plan.describe()}",
            "appliedAt": _stamp(case.now), "verifyAfter": None, "rolledOutAt": None, "lastError": None,
        })  # fmt: skip
        recent.append((case.ref.namespace, case.now))
        # 2. the change, 3. mark it applied
        patched = self._patch_workload(case, plan, change)
        self._mark_applied(case, status, plan, patched)

    def _mark_applied(
        self, case: WorkloadCase, status: _Status, plan: ChangePlan, patched: Mapping[str, Any]
    ) -> None:
        generation = (patched.get("metadata") or {}).get("generation")
        self._write(case, status, {
            "state": ApplyState.APPLIED.value, "phase": ChangePhase.APPLIED.value,
            "reason": f"change {plan.change_id} applied: {plan.describe()}; waiting for the rollout",
            "workloadGeneration": generation, "verifyAfter": _stamp(case.now + case.settings.verify_for),
        })  # fmt: skip
        self._event(case, "ChangeApplied", f"{plan.describe()} (change {plan.change_id})")
        for action in plan.actions:
            metrics.ACTIONS_APPLIED.labels(action.value, "applied").inc()
        LOG.info("applied change %s to %s: %s", plan.change_id, case.ref.key, plan.describe())

    # an interrupted intent -------------------------------------------------------------------------

    def _resume_intent(self, case: WorkloadCase, status: _Status, recent: list[tuple[str, datetime]]) -> None:
        """An intent without its outcome. Resumed only by the policy that recorded it, in Apply mode,
        after every gate ran again on the live workload; otherwise abandoned (patch cleared)."""
        apply = status.apply
        record = _record_from_patch(str(apply.get("patch") or ""))
        if record is None:
            self._settle(
                case, status, ApplyState.BLOCKED, ChangePhase.ABANDONED, "recorded intent is unreadable"
            )
            return
        plan = ChangePlan(record.change_id, record.actions, record.target, record.previous)
        landed = change_landed(case.workload, plan, case.hpa)
        recorded_at = parse_time(apply.get("appliedAt")) or record.at
        verdict = self._gates(case, recent, started_by=apply.get("policy"), exclude_own=recorded_at)
        if verdict.go and case.now - recorded_at > case.settings.max_staleness:
            verdict = Verdict(False, ApplyState.SKIPPED, "the intent is older than maxStaleness")
        if verdict.go and not landed:
            live_now = {p: current_value(case.workload, p, case.hpa) for p in plan.target}
            if any(not same_value(p, live_now[p], plan.previous.get(p)) for p in plan.target):
                verdict = Verdict(False, ApplyState.SKIPPED, "the workload changed since the intent")
            else:
                verdict = self._live_gates(case, plan) or verdict
        if not verdict.go:
            what = "landed but is left in place unverified" if landed else "was never sent"
            self._settle(
                case, status, verdict.state, ChangePhase.ABANDONED,
                f"change {record.change_id} {what}: {verdict.reason}",
            )  # fmt: skip
            self._event(
                case, "ChangeAbandoned", f"change {record.change_id} {what}: {verdict.reason}", warning=True
            )
            return
        if landed:
            LOG.info("change %s of %s had landed before the restart", record.change_id, case.ref.key)
            patched: Mapping[str, Any] = case.workload
        else:
            LOG.info(
                "change %s of %s was recorded but not sent; sending it now", record.change_id, case.ref.key
            )
            patched = self._patch_workload(case, plan, record)
        self._mark_applied(case, status, plan, patched)

    # verification ----------------------------------------------------------------------------------

    def _owned_by_policy(self, case: WorkloadCase, status: _Status) -> str | None:
        """Why the change's own policy no longer lets the actuator write this workload; None if it does."""
        settings = case.settings
        if settings.ignored:
            return "the workload opts out (gpurightsizer.io/ignore)"
        if settings.mode != PolicyMode.APPLY:
            if settings.policy:
                return f"policy {settings.policy!r} is in {settings.mode.value} mode"
            return "no Apply policy selects the workload any more"
        if status.apply.get("policy") != settings.policy:
            return f"the change was started by policy {status.apply.get('policy')!r}, {settings.policy!r} governs now"
        return None

    def _verify(self, case: WorkloadCase, status: _Status) -> None:
        apply = status.apply
        record = _record_from_patch(str(apply.get("patch") or ""))
        applied_at = parse_time(apply.get("appliedAt"))
        if record is None or applied_at is None:
            self._settle(
                case, status, ApplyState.BLOCKED, ChangePhase.ABANDONED, "the change record is unreadable"
            )
            return
        not_ours = self._owned_by_policy(case, status)
        if not_ours is not None:  # no workload write (rollback included) without an Apply policy
            reason = f"change {record.change_id} left in place unverified: {not_ours}"
            self._settle(case, status, ApplyState.SKIPPED, ChangePhase.ABANDONED, reason)
            self._event(case, "ChangeAbandoned", reason, warning=True)
            return
        pods = self.kube.pods_of(case.workload)
        replica_sets: list[dict[str, Any]] = []
        if case.ref.kind == "Deployment":
            replica_sets = list(self.kube.list_workloads("ReplicaSet", (case.ref.namespace,)).values())
        new_pods = new_revision_pods(case.workload, pods, replica_sets)
        health = pod_health(new_pods)
        rolled_out_at = parse_time(apply.get("rolledOutAt"))
        after: dict[str, float] = {}
        if rolled_out_at is not None and case.now >= rolled_out_at + case.settings.verify_for:
            after = self._measure_new_pods(case, rolled_out_at, new_pods, record)
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
        if outcome == Outcome.WAIT:
            if apply.get("reason") != reason:
                self._write(case, status, {"reason": f"change {record.change_id}: {reason}"})
            return
        if outcome == Outcome.ROLLED_OUT:
            self._write(case, status, {
                "phase": ChangePhase.ROLLED_OUT.value, "rolledOutAt": _stamp(case.now),
                "verifyAfter": _stamp(case.now + case.settings.verify_for),
                "reason": f"change {record.change_id} rolled out; measuring the new pods until "
                f"{_stamp(case.now + case.settings.verify_for)}",
            })  # fmt: skip
            return
        if outcome == Outcome.VERIFIED:
            text = f"change {record.change_id} verified: {reason}"
            self._settle(case, status, ApplyState.VERIFIED, ChangePhase.VERIFIED, text, after=after)
            self._event(case, "ChangeVerified", text)
            for action in record.actions:
                metrics.ACTIONS_APPLIED.labels(action.value, "verified").inc()
            return
        undo = outcome == Outcome.REGRESSED and case.settings.rollback_on_regression
        undo = undo or (outcome == Outcome.INCONCLUSIVE and case.settings.roll_back_inconclusive)
        if not undo:
            state = ApplyState.INCONCLUSIVE if outcome == Outcome.INCONCLUSIVE else ApplyState.APPLIED
            phase = ChangePhase.INCONCLUSIVE if outcome == Outcome.INCONCLUSIVE else ChangePhase.DONE
            held = (
                "held in place"
                if outcome == Outcome.INCONCLUSIVE
                else "left in place (rollbackOnRegression off)"
            )
            text = f"change {record.change_id} {outcome.value.lower()}: {reason}; {held}"
            self._settle(case, status, state, phase, text, after=after)
            self._event(case, f"Change{outcome.value}", text, warning=True)
            return
        self._roll_back(case, status, record, f"{outcome.value.lower()}: {reason}", after)

    def _measure_new_pods(
        self, case: WorkloadCase, since: datetime, pods: list[Mapping[str, Any]], record: ChangeRecord
    ) -> dict[str, float]:
        names = [str((p.get("metadata") or {}).get("name")) for p in pods]
        if not names:
            return {}
        try:
            windows = self.measure(since, case.now)
        except Exception as error:
            LOG.warning("metrics for verifying %s unavailable: %s", case.ref.key, error)
            return {}
        mine = next((w for w in windows if w.workload.key == case.ref.key), None)
        if mine is None or any(name in warning for warning in mine.warnings for name in names):
            return {}  # a new pod without its series: no figures rather than partial ones
        return signals_from_window(mine, names, target_cpu_limit(record))

    # rollback --------------------------------------------------------------------------------------

    def _roll_back(
        self, case: WorkloadCase, status: _Status, record: ChangeRecord, why: str, after: Mapping[str, float]
    ) -> None:
        """Record the rollback intent, then restore only the fields that still hold our values."""
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
            "phase": ChangePhase.ROLLBACK_INTENT_RECORDED.value,
            "rollback": yaml.safe_dump(
                workload_patch(case.ref.kind, plan.target, undo.to_annotation()), sort_keys=True
            ),
            "reason": f"change {record.change_id} {why}: rolling back{kept_text}",
        })  # fmt: skip
        self._finish_rollback(case, status, record, plan, undo, f"{why}{kept_text}", after)

    def _finish_rollback(
        self, case: WorkloadCase, status: _Status, record: ChangeRecord, plan: ChangePlan, undo: ChangeRecord,
        why: str, after: Mapping[str, float],
    ) -> None:  # fmt: skip
        on_workload = record_on(case.workload)
        patched: Mapping[str, Any] = case.workload
        bad_revision: str | None = None
        if on_workload is None or on_workload.change_id != undo.change_id:
            bad_revision = (case.workload.get("status") or {}).get("updateRevision")
            patched = self._patch_workload(case, plan, undo)
        if case.ref.kind == "StatefulSet":
            self._unstick_statefulset(case, bad_revision)
        generation = (patched.get("metadata") or {}).get("generation")
        regressed = [
            *list(status.apply.get("regressed") or []),
            {"changeId": record.change_id, "workloadGeneration": generation, "at": _stamp(case.now)},
        ][-HISTORY_LENGTH:]
        text = f"change {record.change_id} rolled back: {why}"
        self._settle(
            case, status, ApplyState.ROLLED_BACK, ChangePhase.ROLLED_BACK, text, after=after,
            extra={
                "rollback": None, "rollbacks": int(status.apply.get("rollbacks") or 0) + 1,
                "regressed": regressed, "appliedAt": _stamp(case.now),
            },
        )  # fmt: skip
        self._event(case, "ChangeRolledBack", text, warning=True)
        for action in record.actions:
            metrics.ACTIONS_APPLIED.labels(action.value, "rolled_back").inc()
        LOG.warning("%s: %s", case.ref.key, text)

    def _unstick_statefulset(self, case: WorkloadCase, bad_revision: str | None) -> None:
        """A StatefulSet does not replace a pod of a failed revision that never became ready
        (kubernetes#67250, "Forced rollback"): after the rollback, delete the pods of the failed
        revision that are Pending or failing. `bad_revision` is the revision our change created;
        None (a resumed rollback) means every revision but the current update revision."""
        current = (case.workload.get("status") or {}).get("updateRevision")
        for pod in self.kube.pods_of(case.workload):
            metadata = pod.get("metadata") or {}
            revision = (metadata.get("labels") or {}).get("controller-revision-hash")
            stale = revision == bad_revision if bad_revision is not None else revision != current
            stuck = pod_health([pod]).failing or (pod.get("status") or {}).get("phase") == "Pending"
            if stale and stuck:
                self._guard()
                self.kube.delete_pod(case.ref.namespace, str(metadata.get("name")), str(metadata.get("uid")))
                LOG.info("deleted stuck pod %s of %s after the rollback", metadata.get("name"), case.ref.key)

    def _resume_rollback(self, case: WorkloadCase, status: _Status) -> None:
        """A rollback intent without its outcome (the actuator stopped mid-rollback)."""
        apply = status.apply
        record = _record_from_patch(str(apply.get("patch") or ""))
        undo = _record_from_patch(str(apply.get("rollback") or ""))
        if record is None or undo is None:
            self._settle(
                case, status, ApplyState.BLOCKED, ChangePhase.ABANDONED, "recorded rollback is unreadable"
            )
            return
        not_ours = self._owned_by_policy(case, status)
        if not_ours is not None:
            reason = f"rollback of change {record.change_id} not done: {not_ours}"
            self._settle(
                case, status, ApplyState.BLOCKED, ChangePhase.ABANDONED, reason, extra={"rollback": None}
            )
            self._event(case, "ChangeAbandoned", reason, warning=True)
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


def _describe(record: ChangeRecord | None) -> str:
    if record is None:
        return ""
    return ChangePlan(record.change_id, record.actions, record.target, record.previous).describe()


def in_flight_pods(recommendations: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """policy -> workload key -> pods of changes in flight (for the per-policy disruption budget)."""
    found: dict[str, dict[str, int]] = {}
    for recommendation in recommendations:
        status = recommendation.get("status") or {}
        apply = status.get("apply") or {}
        if phase_of(apply) not in IN_FLIGHT or not apply.get("policy"):
            continue
        target = (recommendation.get("spec") or {}).get("targetRef") or {}
        key = f"{(recommendation.get('metadata') or {}).get('namespace')}/{target.get('kind')}/{target.get('name')}"
        replicas = int((status.get("allocation") or {}).get("replicas") or 1)
        found.setdefault(str(apply["policy"]), {})[key] = replicas
    return found


def recent_changes(recommendations: list[dict[str, Any]], now: datetime) -> list[tuple[str, datetime]]:
    """(namespace, time) of changes sent in the last hour, from recommendation statuses (persistent, so
    a restarted actuator still knows its rate budget). Every state with `appliedAt` counts, Blocked
    included (a change whose outcome failed to be written still happened)."""
    changes = []
    for recommendation in recommendations:
        apply = (recommendation.get("status") or {}).get("apply") or {}
        moment = parse_time(apply.get("appliedAt"))
        if moment is None or apply.get("dryRun"):
            continue
        if now - moment < timedelta(hours=1):
            changes.append((str((recommendation.get("metadata") or {}).get("namespace")), moment))
    return changes
