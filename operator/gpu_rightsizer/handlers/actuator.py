"""The actuator: carries recommendations into workloads under an `Apply` policy, safely (SPEC §6).

Importing this module registers its kopf handlers (leader election on a Lease). The work itself is
`step()`, called by the analysis cycle for each workload while this process holds the lease; every
decision is made by `logic.actuation`, this module only reads, writes and records.

A change goes through three writes, so a crash at any point neither loses nor repeats it:

1. intent: `status.apply` = Pending with the exact patch (which carries the change id, the target
   and the previous values) and `appliedAt`;
2. the patch itself, which also writes the change record annotation — atomically with the change;
3. `status.apply` = Applied, with `verifyAfter`.

A restarted actuator that finds an intent without step 3 reads the annotation: the change id there
says whether step 2 landed; if not, it sends the recorded patch (sending it twice is a no-op).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
import yaml
from kubernetes.client.exceptions import ApiException

from gpu_rightsizer.adapters.kube import KubeAdapter, LeaseElector
from gpu_rightsizer.config import OperatorConfig
from gpu_rightsizer.handlers import metrics
from gpu_rightsizer.logic import actuation
from gpu_rightsizer.logic.actuation import ChangePlan, ChangeRecord, GateContext, PodHealth
from gpu_rightsizer.logic.policy import EffectiveSettings
from gpu_rightsizer.model.codes import ApplyState
from gpu_rightsizer.model.observation import WorkloadRef, WorkloadWindow
from gpu_rightsizer.model.result import Analysis

LOG = logging.getLogger(__name__)

#: Test hook: exit right after the intent is recorded, before the patch (crash-safety tests).
EXIT_AFTER_INTENT_ENV = "GPURS_TEST_EXIT_AFTER_INTENT"


@dataclass(frozen=True)
class WorkloadCase:
    """One workload as the cycle saw it."""

    ref: WorkloadRef
    uid: str
    workload: dict[str, Any]
    recommendation: dict[str, Any]
    settings: EffectiveSettings
    analysis: Analysis
    window: WorkloadWindow
    hpa: dict[str, Any] | None
    now: datetime


# --------------------------------------------------------------------------------------------------
# kopf wiring: the lease
# --------------------------------------------------------------------------------------------------


@kopf.on.startup()
async def actuator_startup(memo: kopf.Memo, **_: Any) -> None:
    """Join the leader election; only the lease holder changes workloads."""
    cfg: OperatorConfig = memo.config
    identity = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    memo.elector = LeaseElector(
        memo.kube, name=cfg.lease_name, namespace=cfg.lease_namespace, identity=identity,
        duration_seconds=cfg.lease_seconds,
    )  # fmt: skip
    memo.lease_task = asyncio.create_task(_keep_lease(memo))


async def _keep_lease(memo: kopf.Memo) -> None:
    elector: LeaseElector = memo.elector
    stop: asyncio.Event = memo.stop
    period = max(1.0, elector.duration.total_seconds() / 3)
    was_leader = False
    while not stop.is_set():
        try:
            leader = await asyncio.to_thread(elector.try_acquire)
        except Exception as error:
            LOG.warning("lease renewal failed: %s", error)
            leader = elector.is_leader()
        if leader != was_leader:
            LOG.info("actuator %s: %s", elector.identity, "now the leader" if leader else "standing by")
            was_leader = leader
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=period)


@kopf.on.cleanup()
async def actuator_cleanup(memo: kopf.Memo, **_: Any) -> None:
    """Hand the lease over at once on a clean shutdown."""
    task = getattr(memo, "lease_task", None)
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    elector = getattr(memo, "elector", None)
    if elector is not None:
        await asyncio.to_thread(elector.release)


# --------------------------------------------------------------------------------------------------
# The step
# --------------------------------------------------------------------------------------------------


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _parse_time(text: Any) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None


def _write_apply(kube: KubeAdapter, case: WorkloadCase, apply: dict[str, Any]) -> None:
    apply = {"policy": case.settings.policy, **apply}
    kube.patch_recommendation_status(case.ref, {"apply": apply})


def _status_apply(case: WorkloadCase) -> dict[str, Any]:
    return dict((case.recommendation.get("status") or {}).get("apply") or {})


def _record_from_patch(patch_text: str) -> ChangeRecord | None:
    """The change record inside a recorded patch (its annotation), or None."""
    try:
        body = yaml.safe_load(patch_text)
        annotation = body["metadata"]["annotations"][actuation.CHANGE_ANNOTATION]
        return ChangeRecord.from_annotation(str(annotation))
    except (yaml.YAMLError, KeyError, TypeError, ValueError):
        return None


def step(memo: kopf.Memo, case: WorkloadCase, recent_changes: list[tuple[str, datetime]]) -> None:
    """Advance one workload: finish an interrupted change, verify an applied one, or start a new one."""
    kube: KubeAdapter = memo.kube
    apply = _status_apply(case)
    state = apply.get("state")
    try:
        if (
            state == ApplyState.PENDING
            and apply.get("patch")
            and not apply.get("dryRun")
            and apply.get("appliedAt")
        ):
            _finish_interrupted(kube, case, apply)
        elif state == ApplyState.APPLIED and apply.get("verifyAfter"):
            _verify(memo, kube, case, apply)
        else:
            _maybe_change(kube, case, apply, recent_changes)
    except ApiException as error:
        metrics.ERRORS.labels("kubernetes").inc()
        LOG.warning("actuation of %s failed: %s %s", case.ref.key, error.status, error.reason)
        _write_apply(
            kube,
            case,
            {
                **apply,
                "state": ApplyState.BLOCKED.value,
                "reason": f"Kubernetes API error {error.status}: {error.reason}",
            },
        )


def _maybe_change(
    kube: KubeAdapter, case: WorkloadCase, apply: dict[str, Any], recent: list[tuple[str, datetime]]
) -> None:
    settings = case.settings
    record = actuation.record_on(case.workload)
    last_change = record.at if record is not None else _parse_time(apply.get("appliedAt"))
    in_cooldown = last_change is not None and case.now - last_change < settings.cooldown
    if apply.get("state") in (ApplyState.VERIFIED, ApplyState.ROLLED_BACK) and in_cooldown:
        return  # keep the outcome visible; nothing new may happen before the cooldown ends anyway
    cluster, namespace = actuation.count_recent(recent, case.ref.namespace, case.now)
    verdict = actuation.check_gates(
        GateContext(
            settings=settings,
            diagnosis=case.analysis.primary,
            finding_codes=frozenset(f.code for f in case.analysis.findings),
            window_end=case.window.end,
            now=case.now,
            staleness_limit=max(timedelta(seconds=case.window.duration_seconds), timedelta(minutes=1)),
            last_change_at=last_change,
            changes_last_hour_cluster=cluster,
            changes_last_hour_namespace=namespace,
            namespace=case.ref.namespace,
        )
    )
    try:
        plan = (
            actuation.plan_change(
                case.workload, case.analysis.actions, settings, hpa=case.hpa, workload_key=case.ref.key
            )
            if verdict.go
            else None
        )
    except actuation.PlanError as error:
        _set_state(kube, case, apply, ApplyState.BLOCKED, str(error))
        return
    if not verdict.go:
        _set_state(kube, case, apply, verdict.state, verdict.reason)
        return
    if plan is None:
        _set_state(
            kube,
            case,
            apply,
            ApplyState.SKIPPED,
            "no applicable change: " + ("; ".join(_left_out(case)) or "nothing the policy allows"),
        )
        return
    owners = actuation.declarative_owners(case.workload, plan.target)
    if owners:
        _set_state(kube, case, apply, ApplyState.BLOCKED, actuation.conflict_reason(owners))
        return
    baseline = actuation.signals_from_window(case.window)
    change = ChangeRecord(
        change_id=plan.change_id, at=case.now, target=plan.target, previous=plan.previous,
        actions=plan.actions, baseline=baseline,
    )  # fmt: skip
    body = actuation.workload_patch(case.ref.kind, plan.target, change.to_annotation())
    patch_text = yaml.safe_dump(body, sort_keys=True)
    if settings.dry_run:
        if apply.get("patch") != patch_text or not apply.get("dryRun"):
            kube.post_event(
                case.ref, case.uid, "DryRun", f"would apply {plan.describe()}; patch:\n{patch_text}"
            )
            _write_apply(kube, case, {
                "state": ApplyState.PENDING.value, "dryRun": True, "patch": patch_text,
                "reason": f"dry run: would apply {plan.describe()}",
                "previous": _previous_for_status(plan.previous), "appliedAt": None, "verifyAfter": None,
            })  # fmt: skip
        return
    # 1. intent first
    _write_apply(kube, case, {
        "state": ApplyState.PENDING.value, "dryRun": False, "patch": patch_text,
        "reason": f"change {plan.change_id} recorded: applying {plan.describe()}",
        "previous": _previous_for_status(plan.previous), "appliedAt": _stamp(case.now), "verifyAfter": None,
    })  # fmt: skip
    recent.append((case.ref.namespace, case.now))
    if os.environ.get(EXIT_AFTER_INTENT_ENV) == "1":
        LOG.warning("test hook %s: exiting after recording intent %s", EXIT_AFTER_INTENT_ENV, plan.change_id)
        os._exit(17)
    # 2. the change, 3. mark it applied
    _send(kube, case, plan, change)
    _mark_applied(kube, case, plan, change.at)


def _left_out(case: WorkloadCase) -> list[str]:
    selection = actuation.select_actions(
        case.analysis.actions, case.settings, has_hpa=case.hpa is not None, kind=case.ref.kind
    )
    return list(selection.left_out)


def _previous_for_status(previous: dict[str, str | None]) -> dict[str, str]:
    return {path: "" if value is None else value for path, value in previous.items()}


def _set_state(
    kube: KubeAdapter, case: WorkloadCase, apply: dict[str, Any], state: ApplyState, reason: str
) -> None:
    if apply.get("state") == state.value and apply.get("reason") == reason and not apply.get("dryRun"):
        return
    _write_apply(kube, case, {"state": state.value, "reason": reason, "dryRun": False})
    if state == ApplyState.BLOCKED and apply.get("reason") != reason:
        kube.post_event(case.ref, case.uid, "ChangeBlocked", reason, warning=True)


def _send(kube: KubeAdapter, case: WorkloadCase, plan: ChangePlan, change: ChangeRecord) -> None:
    """Server-side apply (never forced); strategic merge where fields must be removed or an
    imperative writer (kubectl create/edit/scale) holds them."""
    annotation = change.to_annotation()
    body = actuation.apply_body(case.workload, plan.target, annotation)
    sent = False
    if body is not None:
        try:
            kube.server_side_apply(case.ref, body)
            sent = True
        except ApiException as error:
            if error.status != 409:
                raise
            LOG.info(
                "server-side apply of %s conflicts with imperative writers; using a strategic merge patch",
                case.ref.key,
            )
    if not sent:
        kube.strategic_patch(case.ref, actuation.workload_patch(case.ref.kind, plan.target, annotation))
    hpa_body = actuation.hpa_patch(plan.target)
    if hpa_body is not None and case.hpa is not None:
        kube.patch_hpa(case.ref.namespace, str(case.hpa["metadata"]["name"]), hpa_body)
    for action in plan.actions:
        metrics.ACTIONS_APPLIED.labels(action.value, "applied").inc()


def _mark_applied(kube: KubeAdapter, case: WorkloadCase, plan: ChangePlan, at: datetime) -> None:
    verify_after = at + case.settings.verify_for
    _write_apply(kube, case, {
        "state": ApplyState.APPLIED.value,
        "reason": f"change {plan.change_id} applied: {plan.describe()}; verifying until {_stamp(verify_after)}",
        "appliedAt": _stamp(at), "verifyAfter": _stamp(verify_after),
    })  # fmt: skip
    kube.post_event(case.ref, case.uid, "ChangeApplied", f"{plan.describe()} (change {plan.change_id})")
    LOG.info("applied change %s to %s: %s", plan.change_id, case.ref.key, plan.describe())


def _finish_interrupted(kube: KubeAdapter, case: WorkloadCase, apply: dict[str, Any]) -> None:
    """An intent without its outcome: a previous actuator stopped between recording and marking."""
    record = _record_from_patch(str(apply.get("patch")))
    if record is None:
        _set_state(kube, case, apply, ApplyState.BLOCKED, "recorded intent is unreadable; not repeating it")
        return
    plan = ChangePlan(
        change_id=record.change_id, actions=record.actions, target=record.target, previous=record.previous
    )
    if actuation.landed(case.workload, plan, case.hpa):
        LOG.info(
            "change %s of %s had landed before the restart; marking it applied",
            record.change_id,
            case.ref.key,
        )
    else:
        LOG.info("change %s of %s was recorded but not sent; sending it now", record.change_id, case.ref.key)
        _send(kube, case, plan, record)
    _mark_applied(kube, case, plan, record.at)


def _pod_health(kube: KubeAdapter, case: WorkloadCase) -> tuple[PodHealth, list[str]]:
    pods = [p for p in kube.pods_of(case.workload) if not (p.get("metadata") or {}).get("deletionTimestamp")]
    unschedulable, crashing, restarts, running, messages, names = 0, 0, 0, 0, [], []
    for pod in pods:
        names.append(str(pod["metadata"]["name"]))
        status = pod.get("status") or {}
        if status.get("phase") == "Running":
            running += 1
        for condition in status.get("conditions") or []:
            if (
                condition.get("type") == "PodScheduled"
                and condition.get("status") == "False"
                and condition.get("reason") == "Unschedulable"
            ):
                unschedulable += 1
                messages.append(str(condition.get("message", "")))
        for container in status.get("containerStatuses") or []:
            restarts += int(container.get("restartCount") or 0)
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") == "CrashLoopBackOff" or int(container.get("restartCount") or 0) >= 3:
                crashing += 1
    health = PodHealth(
        total=len(pods), running=running, unschedulable=unschedulable, crash_looping=crashing,
        restarts=restarts, messages=tuple(messages),
    )  # fmt: skip
    return health, names


def _verify(memo: kopf.Memo, kube: KubeAdapter, case: WorkloadCase, apply: dict[str, Any]) -> None:
    verify_after = _parse_time(apply.get("verifyAfter"))
    applied_at = _parse_time(apply.get("appliedAt"))
    if verify_after is None or applied_at is None or case.now < verify_after:
        return
    record = actuation.record_on(case.workload) or _record_from_patch(str(apply.get("patch") or ""))
    if record is None:
        _set_state(
            kube, case, apply, ApplyState.BLOCKED, "the change record annotation is gone; cannot verify"
        )
        return
    health, pod_names = _pod_health(kube, case)
    after: dict[str, float] = {}
    try:
        from gpu_rightsizer.handlers.cycle import fetch_windows

        windows = fetch_windows(memo.config, applied_at, case.now)
        mine = next((w for w in windows if w.workload.key == case.ref.key), None)
        if mine is not None:
            after = actuation.signals_from_window(mine, pod_names, actuation.target_cpu_limit(record))
    except Exception as error:
        LOG.warning("metrics for verifying %s unavailable: %s", case.ref.key, error)
    problem = actuation.regression(record.baseline, after, health, record.actions)
    if problem is None and not after and health.unschedulable == 0:
        give_up = verify_after + 2 * case.settings.verify_for
        if case.now < give_up:
            return  # new pods have no metrics yet; look again next cycle
    if problem is None:
        summary = actuation.improvement_summary(record.baseline, after)
        _write_apply(
            kube,
            case,
            {"state": ApplyState.VERIFIED.value, "reason": f"change {record.change_id} verified: {summary}"},
        )
        kube.post_event(case.ref, case.uid, "ChangeVerified", f"change {record.change_id}: {summary}")
        for action in record.actions:
            metrics.ACTIONS_APPLIED.labels(action.value, "verified").inc()
        return
    if not case.settings.rollback_on_regression:
        _write_apply(kube, case, {
            "state": ApplyState.APPLIED.value, "verifyAfter": None,
            "reason": f"change {record.change_id} regressed ({problem}); rollbackOnRegression is off, left in place",
        })  # fmt: skip
        kube.post_event(case.ref, case.uid, "ChangeRegressed", problem, warning=True)
        return
    rollback = actuation.rollback_plan(record, case.ref.key)
    undo = ChangeRecord(
        change_id=rollback.change_id, at=case.now, target=rollback.target, previous=rollback.previous,
        actions=record.actions, rollback_of=record.change_id,
    )  # fmt: skip
    kube.strategic_patch(
        case.ref, actuation.workload_patch(case.ref.kind, rollback.target, undo.to_annotation())
    )
    hpa_body = actuation.hpa_patch(rollback.target)
    if hpa_body is not None and case.hpa is not None:
        kube.patch_hpa(case.ref.namespace, str(case.hpa["metadata"]["name"]), hpa_body)
    reason = f"change {record.change_id} rolled back: {problem}"
    _write_apply(
        kube, case, {"state": ApplyState.ROLLED_BACK.value, "reason": reason, "appliedAt": _stamp(case.now)}
    )
    kube.post_event(case.ref, case.uid, "ChangeRolledBack", reason, warning=True)
    for action in record.actions:
        metrics.ACTIONS_APPLIED.labels(action.value, "rolled_back").inc()
    LOG.warning("%s: %s", case.ref.key, reason)
