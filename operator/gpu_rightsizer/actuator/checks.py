"""Checks every path of the actuator repeats before a write: the gates of a new change, the
remembered regressions, the baseline read, and whether the change's own policy still governs.

`actuator.step.Actuator` (the template path) and `actuator.resize.InPlaceSteps` (the in-place path)
build on `CheckedWriter`, so both ask the same questions in the same words.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from gpu_rightsizer.actuator.gates import (
    CLEAR_REGRESSIONS_ANNOTATION,
    GateContext,
    Verdict,
    check_gates,
    count_recent,
)
from gpu_rightsizer.actuator.plan import ChangePlan, PlanError
from gpu_rightsizer.actuator.record import ChangeRecord, record_problems
from gpu_rightsizer.actuator.verify import Outcome, signals_from_window
from gpu_rightsizer.actuator.writes import ChangeWriter, RecordState, WorkloadCase
from gpu_rightsizer.logic.owners import managed_by_parent
from gpu_rightsizer.model.codes import ApplyState, DiagnosisCode, PolicyMode
from gpu_rightsizer.model.crd import ChangePhase, OnDisableAction
from gpu_rightsizer.model.k8s import parse_time
from gpu_rightsizer.runtime import metrics

#: Undo a change: (why, figures after, counts toward maxRollbacks).
RollBack = Callable[[str, Mapping[str, float], bool], None]


def published_diagnosis(status: Mapping[str, Any]) -> tuple[DiagnosisCode | None, frozenset[DiagnosisCode]]:
    """The published primary diagnosis and finding codes (unknown codes are left out)."""
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


class CheckedWriter(ChangeWriter):
    """The checks shared by the template and the in-place paths."""

    def _propose_dry_run(
        self, case: WorkloadCase, status: RecordState, apply: Mapping[str, Any], plan: ChangePlan,
        fields: Mapping[str, Any], event: str,
    ) -> None:  # fmt: skip
        """Record a dry-run proposal once per change (both paths): Proposed, never sent."""
        if apply.get("changeId") == plan.change_id and apply.get("dryRun"):
            return
        self._write(case, status, {
            "state": ApplyState.PENDING.value, "phase": ChangePhase.PROPOSED.value, "dryRun": True,
            "policy": case.settings.policy, "appliedAt": None, "changeId": plan.change_id, **fields,
        })  # fmt: skip
        self._event(case, "DryRun", event)

    def _gates(
        self, case: WorkloadCase, recent: list[tuple[str, datetime]], *, started_by: str | None = None,
        exclude_own: datetime | None = None, last_change: datetime | None = None,
        warnings: tuple[str, ...] = (),
    ) -> Verdict:  # fmt: skip
        published = case.recommendation.get("status") or {}
        diagnosis, findings = published_diagnosis(published)
        changes = [
            c for c in recent if not (exclude_own is not None and c == (case.ref.namespace, exclude_own))
        ]
        cluster, namespace = count_recent(changes, case.ref.namespace, case.now)
        window = published.get("window") or {}
        return check_gates(
            GateContext(
                settings=case.settings,
                diagnosis=diagnosis,
                finding_codes=findings,
                window_end=parse_time(window.get("end")),
                now=case.now,
                staleness_limit=case.settings.max_staleness,
                last_change_at=last_change,
                changes_last_hour_cluster=cluster,
                changes_last_hour_namespace=namespace,
                namespace=case.ref.namespace,
                # the published warnings can only hold a change back; the actuator's own read adds its own
                warnings=(*[str(w) for w in window.get("warnings") or []], *warnings),
                analysed_generation=published.get("workloadGeneration"),
                live_generation=(case.workload.get("metadata") or {}).get("generation"),
                started_by=started_by,
            )
        )

    def _regression_block(self, case: WorkloadCase, status: RecordState) -> str | None:
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

    def _baseline(self, case: WorkloadCase) -> tuple[dict[str, float] | None, str]:
        """The actuator's own figures before the change: one read scoped to this workload, over the
        `verifyFor` that the new pods will be measured over afterwards. (None, why) when unusable."""
        try:
            window = self.measure(case.ref, case.now - case.settings.verify_for, case.now)
        except Exception as error:  # a source failure: nothing is changed without a baseline
            return None, f"no baseline: the metric read failed ({error})"
        if window is None:
            return None, "no baseline: no metrics for this workload"
        if window.warnings:
            return None, f"no baseline: partial data ({'; '.join(sorted(window.warnings)[:3])})"
        figures = signals_from_window(window)
        return (figures, "") if figures else (None, "no baseline: no comparable figures for this workload")

    def _still_ours(self, case: WorkloadCase, status: RecordState, record: ChangeRecord) -> list[str]:
        """Checks every resume repeats on the record: the policy that started it governs, in Apply mode,
        and still allows every field and bound; the workload has no controller owner."""
        problems = []
        not_ours = self._owned_by_policy(case, status)
        if not_ours is not None:
            problems.append(not_ours)
        else:
            problems += record_problems(record, case.settings)
        managed = managed_by_parent(case.workload)
        if managed is not None:
            problems.append(managed)
        return problems

    def _owned_by_policy(self, case: WorkloadCase, status: RecordState) -> str | None:
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

    def _on_disable(self, case: WorkloadCase, status: RecordState) -> OnDisableAction:
        """What the policy asks for when it left Apply with our change in flight. Only the same policy
        in Off or Recommend mode may ask for anything but Keep: an opt-out, a deleted policy or another
        policy never leads to a write."""
        settings = case.settings
        if settings.ignored or not settings.policy or status.apply.get("policy") != settings.policy:
            return OnDisableAction.KEEP
        return settings.on_disable

    def _on_disable_step(
        self, case: WorkloadCase, status: RecordState, record: ChangeRecord, undo: RollBack
    ) -> bool:
        """A change in flight whose policy no longer governs: Keep abandons it unverified, RollBack
        undoes it; True when this step was spent so."""
        not_ours = self._owned_by_policy(case, status)
        disabled = self._on_disable(case, status) if not_ours is not None else None
        if disabled == OnDisableAction.KEEP:  # no workload write (rollback included) without the policy
            reason = f"change {record.change_id} left in place unverified: {not_ours}"
            self._settle(case, status, ApplyState.SKIPPED, ChangePhase.ABANDONED, reason)
            self._event(case, "ChangeAbandoned", reason, warning=True)
            return True
        if disabled == OnDisableAction.ROLL_BACK:
            undo(f"undone because {not_ours} (onDisable RollBack)", {}, False)
            return True
        return False

    def _conclude(
        self, case: WorkloadCase, status: RecordState, record: ChangeRecord, outcome: Outcome, reason: str,
        after: dict[str, float], undo: RollBack, *, note: str = "",
    ) -> None:  # fmt: skip
        """A verification verdict: Verified is settled; a regression (or an inconclusive change, when the
        policy asks) is undone; otherwise the change is held in place. `note` is added to the reason."""
        suffix = f"; {note}" if note else ""
        if outcome == Outcome.VERIFIED:
            text = f"change {record.change_id} verified: {reason}{suffix}"
            self._settle(case, status, ApplyState.VERIFIED, ChangePhase.VERIFIED, text, after=after)
            self._event(case, "ChangeVerified", text)
            for action in record.actions:
                metrics.ACTIONS_APPLIED.labels(action.value, "verified").inc()
            return
        roll = outcome == Outcome.REGRESSED and case.settings.rollback_on_regression
        roll = roll or (outcome == Outcome.INCONCLUSIVE and case.settings.roll_back_inconclusive)
        if roll:
            undo(f"{outcome.value.lower()}: {reason}", after, outcome == Outcome.REGRESSED)
            return
        state = ApplyState.INCONCLUSIVE if outcome == Outcome.INCONCLUSIVE else ApplyState.APPLIED
        phase = ChangePhase.INCONCLUSIVE if outcome == Outcome.INCONCLUSIVE else ChangePhase.DONE
        held = (
            "held in place" if outcome == Outcome.INCONCLUSIVE else "left in place (rollbackOnRegression off)"
        )
        text = f"change {record.change_id} {outcome.value.lower()}: {reason}; {held}"
        self._settle(case, status, state, phase, text, after=after)
        self._event(case, f"Change{outcome.value}", text, warning=True)

    def _may_start(
        self, case: WorkloadCase, status: RecordState, recent: list[tuple[str, datetime]],
        last_change: datetime | None, *, settled: bool,
    ) -> bool:  # fmt: skip
        """Whether a new change may be planned: a settled outcome stays shown until the cooldown ends
        (nothing new may happen before anyway), then the gates and the remembered regressions."""
        if settled and last_change is not None and case.now - last_change < case.settings.cooldown:
            return False
        verdict = self._gates(case, recent, last_change=last_change)
        if not verdict.go:
            self._set_state(case, status, verdict.state, verdict.reason)
            return False
        blocked = self._regression_block(case, status)
        if blocked is not None:
            self._set_state(case, status, ApplyState.BLOCKED, blocked)
            return False
        return True

    def _start(
        self, case: WorkloadCase, status: RecordState, planner: Callable[[], ChangePlan | None], generation: Any,
        live_gates: Callable[[WorkloadCase, ChangePlan], Verdict | None],
    ) -> tuple[ChangePlan, ChangeRecord] | None:  # fmt: skip
        """A new change and its record, once it passed the last checks: a plan (PlanError: Blocked), not
        a change rolled back before (at this workload generation), the live gates, a baseline, and the
        policy's limits on the record; None (with the verdict shown) when one of them says no."""
        try:
            plan = planner()
        except PlanError as error:
            self._set_state(case, status, ApplyState.BLOCKED, str(error))
            return None
        if plan is None:
            self._set_state(
                case, status, ApplyState.SKIPPED, "no applicable change: nothing the policy allows"
            )
            return None
        for regressed in status.apply.get("regressed") or []:
            if (
                regressed.get("changeId") == plan.change_id
                and regressed.get("workloadGeneration") == generation
            ):
                self._set_state(
                    case, status, ApplyState.SKIPPED,
                    f"change {plan.change_id} was rolled back at {regressed.get('at')}: not retried until the "
                    "workload's spec or the recommendation changes",
                )  # fmt: skip
                return None
        live = live_gates(case, plan)
        if live is not None:
            self._set_state(case, status, live.state, live.reason)
            return None
        baseline, why = self._baseline(case) if not case.settings.dry_run else ({}, "")
        if baseline is None:
            self._set_state(case, status, ApplyState.SKIPPED, why)
            return None
        change = ChangeRecord(
            change_id=plan.change_id, at=case.now, target=plan.target, previous=plan.previous,
            actions=plan.actions, baseline=baseline,
        )  # fmt: skip
        problems = record_problems(change, case.settings)
        if problems:  # the planners set only what the policy allows: this is a defect, never sent
            self._set_state(
                case, status, ApplyState.BLOCKED, f"planned change refused: {'; '.join(problems)}"
            )
            return None
        return plan, change
