"""The actuator's in-place path: CPU for running pods through `pods/resize`, no new pods (SPEC §6).

Jobs, CRD trainers and bare pods take only this path; Deployments and StatefulSets take it when
annotated `gpurightsizer.io/resize: InPlace` (`actuator.inplace.resizes_in_place`). The change
lives in the same `GPURightsizingChange` and goes through the same phases as a template change:

    Proposed -> IntentRecorded -> Applied (sent, waiting for the kubelet) -> RolledOut (every pod
    reports the new size) -> Verified | Inconclusive | RollbackIntentRecorded -> RolledBack

The recorded patch names the pods (name and uid) and the values; verification measures the same
pods before and after (no new revision exists). Infeasible blocks the change and resizes back;
Deferred waits at most one `verifyFor`, then resizes back. Every write is preceded by the gates of
the top workload, as on the template path, plus the node's allocatable CPU.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import yaml

from gpu_rightsizer.actuator.checks import CheckedWriter
from gpu_rightsizer.actuator.fields import conflict_reason, field_conflicts
from gpu_rightsizer.actuator.gates import (
    Availability,
    Verdict,
    disruption_gates,
    rollout_incomplete,
)
from gpu_rightsizer.actuator.inplace import (
    ResizeState,
    job_backoff_problem,
    live_pods,
    manifest_advice,
    node_fit,
    plan_resize,
    pod_problems,
    resize_body,
    resize_fits,
    resize_state,
    resizes_in_place,
    restarts,
    worst,
)
from gpu_rightsizer.actuator.plan import CHANGE_ANNOTATION, ChangePlan
from gpu_rightsizer.actuator.record import ChangeRecord, record_from_patch, rollback_problems
from gpu_rightsizer.actuator.verify import (
    Outcome,
    VerificationInput,
    pod_health,
    signals_of_pods,
    template_fingerprint,
    verification_outcome,
)
from gpu_rightsizer.actuator.writes import RecordState, WorkloadCase
from gpu_rightsizer.adapters.source import rate_window_seconds, step_for
from gpu_rightsizer.logic.owners import managed_by_parent
from gpu_rightsizer.model.codes import ApplyState
from gpu_rightsizer.model.crd import ChangePhase, OnDisableAction
from gpu_rightsizer.model.k8s import parse_time, stamp
from gpu_rightsizer.model.kinds import offers_in_place_resize
from gpu_rightsizer.model.observation import WorkloadWindow
from gpu_rightsizer.model.result import Action
from gpu_rightsizer.runtime import metrics

LOG = logging.getLogger(__name__)

#: Phases that end a change (its outcome stays shown until the cooldown ends).
SETTLED_PHASES = frozenset(
    p.value for p in (ChangePhase.VERIFIED, ChangePhase.INCONCLUSIVE, ChangePhase.ROLLED_BACK,
                      ChangePhase.ABANDONED, ChangePhase.DONE)
)  # fmt: skip

#: Key of the recorded patch that makes it an in-place one: pod name -> uid.
RESIZE_KEY = "resize"


def measuring_start(
    resized_at: datetime, verify_for: timedelta, window: WorkloadWindow | None = None
) -> datetime:
    """When the measuring of resized pods starts: one counter range after every pod reported the new
    size (`rolledOutAt`). The same pods' series go on through a resize, and a CPU or GPU sample at t
    sums what the counter did over [t - range, t] (`rate_window_seconds`): an earlier sample mixes
    the old size into the new one (a 1 -> 4 core resize read 30 s later is mostly the old core).
    The range follows the step of `window` when given, else the step a `verifyFor` window gets."""
    step = window.step_seconds if window is not None else step_for(verify_for.total_seconds())
    return resized_at + timedelta(seconds=rate_window_seconds(step))


def resize_text(record: ChangeRecord, pods: Mapping[str, str], outcome: ApplyState | None = None) -> str:
    """The recorded in-place change: the record (as the template path keeps it), the pods, the body."""
    body: dict[str, Any] = {
        "metadata": {"annotations": {CHANGE_ANNOTATION: record.to_annotation()}},
        RESIZE_KEY: {"pods": dict(pods), "body": resize_body(record.target)},
    }
    if outcome is not None:
        body[RESIZE_KEY]["outcome"] = outcome.value
    return yaml.safe_dump(body, sort_keys=True)


def resized_pods(text: str | None) -> dict[str, str] | None:
    """The pods (name -> uid) of a recorded in-place change; None for a template change or garbage."""
    try:
        body = yaml.safe_load(text or "")
        pods = body[RESIZE_KEY]["pods"]
    except (yaml.YAMLError, KeyError, TypeError):
        return None
    return {str(k): str(v) for k, v in pods.items()} if isinstance(pods, Mapping) else None


def _outcome(text: str | None) -> ApplyState:
    try:
        return ApplyState(yaml.safe_load(text or "")[RESIZE_KEY]["outcome"])
    except (yaml.YAMLError, KeyError, TypeError, ValueError):
        return ApplyState.ROLLED_BACK


def _name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name"))


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid"))


class InPlaceSteps(CheckedWriter):
    """The in-place path of the actuator's step."""

    # dispatch --------------------------------------------------------------------------------------

    def _resize_step(
        self, case: WorkloadCase, status: RecordState, phase: ChangePhase | None,
        recent: list[tuple[str, datetime]], actions: list[Action],
    ) -> None:  # fmt: skip
        if phase == ChangePhase.INTENT_RECORDED:
            self._resume_resize(case, status, recent)
        elif phase in (ChangePhase.APPLIED, ChangePhase.ROLLED_OUT):
            self._verify_resize(case, status)
        elif phase == ChangePhase.ROLLBACK_INTENT_RECORDED:
            self._resume_resize_rollback(case, status)
        else:
            self._maybe_resize(case, status, recent, actions)

    def _takes_resize_path(self, case: WorkloadCase, actions: list[Action]) -> bool:
        """A new change's path: in place for the in-place kinds and annotated workloads, and for a
        Deployment's or StatefulSet's CPU raise that its running pods take without a restart."""
        if resizes_in_place(case.workload):
            return True
        if not offers_in_place_resize(str(case.workload.get("kind", ""))) or not any(
            a.automatic for a in actions
        ):
            return False  # no pod list needed
        return resize_fits(case.workload, self.kube.owned_pods(case.workload), actions, case.settings)

    # gates -----------------------------------------------------------------------------------------

    def _resize_gates(
        self, case: WorkloadCase, plan: ChangePlan, pods: list[Mapping[str, Any]]
    ) -> Verdict | None:
        """The live gates of a resize: the top workload's owners and field managers, a restart's
        availability gates, each pod's resize policy and its node's allocatable CPU."""
        workload = case.workload
        managed = managed_by_parent(workload)
        if managed is not None:
            return Verdict(False, ApplyState.BLOCKED, managed)
        # a Job's template sits where a ReplicaSet's does (spec.template): the same managed-field paths
        view = {**workload, "kind": "ReplicaSet"} if workload.get("kind") == "Job" else workload
        owners = field_conflicts(view, plan.target)
        if owners:
            return Verdict(False, ApplyState.BLOCKED, conflict_reason(owners))
        if (not_ready := rollout_incomplete(workload)) is not None:
            return Verdict(False, ApplyState.BLOCKED, f"not fully rolled out and healthy: {not_ready}")
        if any(restarts(pod, plan.target) for pod in pods):  # RestartContainer: a restart, gated as one
            # every pod restarts at once: the floor, PDBs and budget count all of them
            verdict = disruption_gates(
                len(pods), [(pod.get("metadata") or {}).get("labels") or {} for pod in pods],
                Availability(workload, case.pdbs, case.pods_in_disruption), case.settings,
            )  # fmt: skip
            if verdict is not None:
                return verdict
            if (backoff := job_backoff_problem(workload, pods)) is not None:
                return Verdict(False, ApplyState.BLOCKED, backoff)
        for pod in pods:
            problems = pod_problems(pod, plan.target)
            if problems:
                return Verdict(False, ApplyState.BLOCKED, "; ".join(problems))
            node_name = str((pod.get("spec") or {}).get("nodeName") or "")
            unfit = node_fit(
                pod, self.kube.read_node(node_name), self.kube.pods_on_node(node_name), plan.target
            )
            if unfit is not None:
                return Verdict(False, ApplyState.BLOCKED, f"the node cannot hold the resized pod: {unfit}")
        return None

    # a new change ----------------------------------------------------------------------------------

    def _maybe_resize(
        self,
        case: WorkloadCase,
        status: RecordState,
        recent: list[tuple[str, datetime]],
        actions: list[Action],
    ) -> None:
        settings = case.settings
        apply = status.apply
        last_change = parse_time(apply.get("appliedAt"))
        if not self._may_start(
            case, status, recent, last_change, settled=apply.get("phase") in SETTLED_PHASES
        ):
            return
        pods = live_pods(self.kube.owned_pods(case.workload))
        started = self._start(
            case, status, lambda: plan_resize(pods, actions, settings, workload_key=case.ref.key), None,
            lambda _, plan: self._resize_gates(case, plan, pods),
        )  # fmt: skip
        if started is None:
            return
        plan, change = started
        names = {_name(pod): _uid(pod) for pod in pods}
        text = resize_text(change, names)
        advice = manifest_advice(case.ref.kind, case.ref.name, plan)
        previous = {path: "" if value is None else value for path, value in plan.previous.items()}
        if settings.dry_run:
            would = f"would resize {len(pods)} pod(s) in place: {plan.describe()}"
            self._propose_dry_run(
                case,
                status,
                apply,
                plan,
                {"patch": text, "reason": f"dry run: {would}", "previous": previous},
                would,
            )
            return
        self._write(case, status, {
            "state": ApplyState.PENDING.value, "phase": ChangePhase.INTENT_RECORDED.value, "dryRun": False,
            "patch": text, "changeId": plan.change_id, "previous": previous, "policy": settings.policy,
            "reason": f"change {plan.change_id} recorded: resizing {len(pods)} pod(s) in place, {plan.describe()}",
            "appliedAt": stamp(case.now), "verifyAfter": None, "rolledOutAt": None, "lastError": None,
            "workloadGeneration": (case.workload.get("metadata") or {}).get("generation"),
            "templateHash": template_fingerprint(case.workload) if offers_in_place_resize(str(case.workload.get("kind", ""))) else None,
            "conditions": [], "manifestAdvice": advice, "resizeDeferredSince": None,
            "replicas": len(pods) if any(restarts(p, plan.target) for p in pods) else 0,
        })  # fmt: skip
        recent.append((case.ref.namespace, case.now))
        self._send_resize(case, pods, plan.target)
        self._mark_resized(case, status, plan, len(pods))

    def _send_resize(
        self, case: WorkloadCase, pods: list[Mapping[str, Any]], values: Mapping[str, str | None]
    ) -> None:
        """Resize each pod that does not hold `values` yet (uid-bound: a recreated pod is not touched)."""
        body = resize_body(values)
        for pod in pods:
            if resize_state(pod, values).state != ResizeState.NOT_SENT:
                continue
            self._guard()
            self.kube.resize_pod(case.ref.namespace, _name(pod), body, uid=_uid(pod))

    def _mark_resized(self, case: WorkloadCase, status: RecordState, plan: ChangePlan, count: int) -> None:
        self._write(case, status, {
            "state": ApplyState.APPLIED.value, "phase": ChangePhase.APPLIED.value,
            "reason": f"change {plan.change_id} sent: {count} pod(s) resized in place, {plan.describe()}; "
            "waiting for the kubelet",
        })  # fmt: skip
        self._event(
            case,
            "ChangeApplied",
            f"resized {count} pod(s) in place: {plan.describe()} (change {plan.change_id})",
        )
        for action in plan.actions:
            metrics.ACTIONS_APPLIED.labels(action.value, "applied").inc()
        LOG.info("resized %d pod(s) of %s in place: %s", count, case.ref.key, plan.describe())

    # the recorded pods -------------------------------------------------------------------------------

    def _recorded(self, case: WorkloadCase, names: Mapping[str, str]) -> list[Mapping[str, Any]]:
        """The recorded pods that still run (same uid, not finished)."""
        return [
            pod
            for pod in live_pods(self.kube.owned_pods(case.workload))
            if names.get(_name(pod)) == _uid(pod)
        ]

    def _resume_resize(
        self, case: WorkloadCase, status: RecordState, recent: list[tuple[str, datetime]]
    ) -> None:
        """An intent without its outcome: the pods that hold the values are kept, the rest are sent
        only after every gate ran again; when the gates say no, what was sent is resized back."""
        apply = status.apply
        record = record_from_patch(str(apply.get("patch") or ""))
        names = resized_pods(apply.get("patch"))
        if record is None or names is None:
            self._refuse(case, status, "recorded resize", ["it is unreadable"])
            return
        problems = self._still_ours(case, status, record)
        if problems:
            self._refuse(case, status, f"change {record.change_id}", problems)
            return
        plan = ChangePlan(record.change_id, record.actions, record.target, record.previous)
        pods = self._recorded(case, names)
        states = [resize_state(pod, record.target).state for pod in pods]
        if pods and ResizeState.NOT_SENT not in states:
            self._mark_resized(case, status, plan, len(pods))
            return
        recorded_at = parse_time(apply.get("appliedAt")) or record.at
        verdict = self._gates(case, recent, started_by=apply.get("policy"), exclude_own=recorded_at)
        if verdict.go and case.now - recorded_at > case.settings.max_staleness:
            verdict = Verdict(False, ApplyState.SKIPPED, "the intent is older than maxStaleness")
        if verdict.go:
            verdict = (
                self._resize_gates(
                    case,
                    plan,
                    [p for p in pods if resize_state(p, record.target).state == ResizeState.NOT_SENT],
                )
                or verdict
            )
        if verdict.go and pods:
            self._send_resize(case, pods, record.target)
            self._mark_resized(case, status, plan, len(pods))
            return
        reason = (
            f"change {record.change_id} was not sent to every pod: {verdict.reason or 'no recorded pod runs'}"
        )
        if any(s != ResizeState.NOT_SENT for s in states):
            self._roll_back_resize(
                case, status, record, names, reason, {}, counts=False, outcome=verdict.state
            )
            return
        self._settle(case, status, verdict.state, ChangePhase.ABANDONED, reason)
        self._event(case, "ChangeAbandoned", reason, warning=True)

    # verification ----------------------------------------------------------------------------------

    def _verify_resize(self, case: WorkloadCase, status: RecordState) -> None:
        apply = status.apply
        record = record_from_patch(str(apply.get("patch") or ""))
        names = resized_pods(apply.get("patch"))
        applied_at = parse_time(apply.get("appliedAt"))
        if record is None or names is None or applied_at is None:
            self._refuse(case, status, "recorded resize", ["it is unreadable"])
            return

        def undo(why: str, after: Mapping[str, float], counts: bool) -> None:
            self._roll_back_resize(case, status, record, names, why, after, counts=counts)

        if self._on_disable_step(case, status, record, undo):
            return
        pods = self._recorded(case, names)
        rollout = apply.get("templateHash") and apply["templateHash"] != template_fingerprint(case.workload)
        if not pods or rollout:
            why = (
                f"the {case.ref.kind}'s pod template was changed since: its rollout replaces the resized pods"
                if rollout else "the resized pods were replaced or finished"
            )  # fmt: skip
            text = f"change {record.change_id} ended: {why} (not a regression); {apply.get('manifestAdvice') or ''}"
            text = text.rstrip("; ")
            self._settle(case, status, ApplyState.APPLIED, ChangePhase.DONE, text)
            self._event(case, "ChangeEnded", text)
            return
        decided = worst(resize_state(pod, record.target) for pod in pods)
        assert decided is not None
        if decided.state == ResizeState.NOT_SENT:
            text = (
                f"change {record.change_id} superseded: pod {decided.pod} was resized since by someone else; "
                "not verified and not counted as a regression"
            )
            self._settle(case, status, ApplyState.APPLIED, ChangePhase.DONE, text)
            self._event(case, "ChangeSuperseded", text, warning=True)
            return
        if decided.state == ResizeState.INFEASIBLE:
            reason = f"the kubelet answered Infeasible for pod {decided.pod}: {decided.message}"
            self._roll_back_resize(
                case, status, record, names, reason, {}, counts=False, outcome=ApplyState.BLOCKED
            )
            return
        rolled_out_at = parse_time(apply.get("rolledOutAt"))
        if rolled_out_at is None:
            self._await_kubelet(case, status, record, names, decided.state, decided.pod, decided.message)
            return
        self._measure_resize(case, status, record, names, pods, applied_at, rolled_out_at)

    def _await_kubelet(
        self, case: WorkloadCase, status: RecordState, record: ChangeRecord, names: Mapping[str, str],
        state: ResizeState, pod: str, message: str,
    ) -> None:  # fmt: skip
        """Sent, not yet applied by every kubelet: Done moves on to measuring; Deferred (or no answer)
        waits for at most one `verifyFor`, then the resize is given up and undone."""
        apply = status.apply
        if state == ResizeState.DONE:
            start = measuring_start(case.now, case.settings.verify_for)
            until = stamp(start + case.settings.verify_for)
            self._write(case, status, {
                "phase": ChangePhase.ROLLED_OUT.value, "rolledOutAt": stamp(case.now), "verifyAfter": until,
                "resizeDeferredSince": None,
                "reason": f"change {record.change_id}: every pod runs at the new size; measuring the same pods "
                f"from {stamp(start)} (their first samples taken wholly at the new size) until {until}",
            })  # fmt: skip
            return
        since = parse_time(apply.get("resizeDeferredSince"))
        if since is None:
            self._write(case, status, {
                "resizeDeferredSince": stamp(case.now),
                "reason": f"change {record.change_id}: resize of pod {pod} {state.value.lower()}"
                f"{f' ({message})' if message else ''}; waiting at most {case.settings.verify_for}",
            })  # fmt: skip
            return
        if case.now - since > case.settings.verify_for:
            why = f"pod {pod} not resized within verifyFor ({state.value}{f': {message}' if message else ''}); given up"
            self._roll_back_resize(
                case, status, record, names, why, {}, counts=False, outcome=ApplyState.SKIPPED
            )

    def _measure_resize(
        self, case: WorkloadCase, status: RecordState, record: ChangeRecord, names: Mapping[str, str],
        pods: list[Mapping[str, Any]], applied_at: datetime, rolled_out_at: datetime,
    ) -> None:  # fmt: skip
        verify_for = case.settings.verify_for
        start = measuring_start(rolled_out_at, verify_for)
        after: dict[str, float] = {}
        window = self._read_resized(case, start) if case.now >= start + verify_for else None
        if window is not None and (coarser := measuring_start(rolled_out_at, verify_for, window)) > start:
            start = coarser  # the source's counter range is longer (a fixed coarse step): start later
            window = self._read_resized(case, start) if case.now >= start + verify_for else None
        if window is not None:
            after = signals_of_pods(window, pods)
        outcome, reason = verification_outcome(
            VerificationInput(
                now=case.now, applied_at=applied_at, rolled_out_at=start,
                verify_for=case.settings.verify_for, rollout=None, failure=None, health=pod_health(pods),
                before=record.baseline, after=after, actions=record.actions,
            )
        )  # fmt: skip
        if outcome in (Outcome.WAIT, Outcome.ROLLED_OUT):
            return

        def undo(why: str, figures: Mapping[str, float], counts: bool) -> None:
            self._roll_back_resize(case, status, record, names, why, figures, counts=counts)

        self._conclude(
            case,
            status,
            record,
            outcome,
            reason,
            after,
            undo,
            note=str(status.apply.get("manifestAdvice") or ""),
        )

    def _read_resized(self, case: WorkloadCase, start: datetime) -> WorkloadWindow | None:
        """The workload's window from `start` to now; None when the read failed (logged)."""
        try:
            return self.measure(case.ref, start, case.now)
        except Exception as error:
            LOG.warning("metrics for verifying %s unavailable: %s", case.ref.key, error)
            return None

    # rollback --------------------------------------------------------------------------------------

    def _roll_back_resize(
        self, case: WorkloadCase, status: RecordState, record: ChangeRecord, names: Mapping[str, str], why: str,
        after: Mapping[str, float], *, counts: bool, outcome: ApplyState = ApplyState.ROLLED_BACK,
    ) -> None:  # fmt: skip
        """Record the rollback intent, then resize back the pods that still hold our values."""
        undo = ChangeRecord(
            change_id=f"{record.change_id}-undo", at=case.now, target=dict(record.previous),
            previous=dict(record.target), actions=record.actions, baseline=record.baseline,
            rollback_of=record.change_id,
        )  # fmt: skip
        self._write(case, status, {
            "phase": ChangePhase.ROLLBACK_INTENT_RECORDED.value, "rollbackCounts": counts,
            "rollback": resize_text(undo, names, outcome),
            "reason": f"change {record.change_id} {why}: resizing back",
        })  # fmt: skip
        self._finish_resize_rollback(case, status, record, undo, names, why, after, outcome)

    def _finish_resize_rollback(
        self, case: WorkloadCase, status: RecordState, record: ChangeRecord, undo: ChangeRecord,
        names: Mapping[str, str], why: str, after: Mapping[str, float], outcome: ApplyState,
    ) -> None:  # fmt: skip
        back = resize_body(undo.target)
        for pod in self._recorded(case, names):
            if resize_state(pod, record.target).state == ResizeState.NOT_SENT:
                continue  # not ours (never sent, or resized since by someone else): left alone
            self._guard()
            self.kube.resize_pod(case.ref.namespace, _name(pod), back, uid=_uid(pod))
        done = "resized back" if outcome != ApplyState.ROLLED_BACK else "rolled back"
        phase = ChangePhase.ROLLED_BACK if outcome == ApplyState.ROLLED_BACK else ChangePhase.ABANDONED
        self._settle_rollback(
            case, status, record, None, f"change {record.change_id} {done}: {why}", after, state=outcome,
            phase=phase, extra={"resizeDeferredSince": None},
        )  # fmt: skip

    def _resume_resize_rollback(self, case: WorkloadCase, status: RecordState) -> None:
        """A rollback intent without its outcome: finished only when the recorded rollback is exactly the
        undoing of the recorded change and the workload is still ours to write."""
        apply = status.apply
        record = record_from_patch(str(apply.get("patch") or ""))
        undo = record_from_patch(str(apply.get("rollback") or ""))
        names = resized_pods(apply.get("rollback"))
        if record is None or undo is None or names is None:
            self._refuse(case, status, "recorded rollback", ["it is unreadable"])
            return
        problems = rollback_problems(undo, record)
        not_ours = self._owned_by_policy(case, status)
        if not_ours is not None and self._on_disable(case, status) == OnDisableAction.KEEP:
            problems.append(not_ours)
        managed = managed_by_parent(case.workload)
        if managed is not None:
            problems.append(managed)
        if problems:
            self._refuse(case, status, f"rollback of change {record.change_id}", problems)
            return
        self._finish_resize_rollback(
            case, status, record, undo, names, "resumed after a restart", {}, _outcome(apply.get("rollback"))
        )
