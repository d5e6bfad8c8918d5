"""The actuator's own loop: every interval, while this process holds the lease, step each workload's
change (SPEC §6).

It runs no recommender watches and shares no cycle with the recommender: it lists the
recommendations (the published actions), the policies and its own change records, and reads metrics
only through the `WindowSource` port, scoped to one workload (a baseline before a change, the new
pods after it). So a new leader needs no window backfill before its first change.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from gpu_rightsizer.actuator.step import IN_FLIGHT, Actuator, phase_of
from gpu_rightsizer.actuator.writes import ChangeRecords, LeadershipLostError, Measure, WorkloadCase
from gpu_rightsizer.adapters.kube import KubeAdapter
from gpu_rightsizer.adapters.source import Scope, WindowSource
from gpu_rightsizer.logic.policy import readable_policies, settings_for_workload
from gpu_rightsizer.logic.workloads import target_of
from gpu_rightsizer.model.crd import GPURightsizingPolicy
from gpu_rightsizer.model.k8s import parse_time
from gpu_rightsizer.model.kinds import SCALABLE_KINDS
from gpu_rightsizer.model.observation import WorkloadRef, WorkloadWindow
from gpu_rightsizer.runtime import metrics

LOG = logging.getLogger(__name__)


class SourceNotReadyError(RuntimeError):
    """The metric source could not give a whole window (none configured, or still filling)."""


def scoped_measure(source: WindowSource | None) -> Measure:
    """One workload's window over [start, end], read through the port with a scope of that workload."""

    def read(ref: WorkloadRef, start: datetime, end: datetime) -> WorkloadWindow | None:
        if source is None:
            raise SourceNotReadyError("no metrics source is configured")
        scope = Scope(namespace=ref.namespace, workload=f"{ref.kind}/{ref.name}")
        windows = source.read_windows((end - start).total_seconds(), end, scope=scope).windows
        if windows is None:
            raise SourceNotReadyError(f"{source.where}: the window is not complete")
        return next((window for window in windows if window.workload.key == ref.key), None)

    return read


def recent_changes(records: Iterable[Mapping[str, Any]], now: datetime) -> list[tuple[str, datetime]]:
    """(namespace, time) of changes sent in the last hour, from the actuator's own change records (so a
    restarted actuator still knows its rate budget, and nobody else's write can lift it). Every state
    with `appliedAt` counts, Blocked included: a change whose outcome failed to be written happened."""
    changes = []
    for record in records:
        status = record.get("status") or {}
        moment = parse_time(status.get("appliedAt"))
        if moment is not None and not status.get("dryRun") and now - moment < timedelta(hours=1):
            changes.append((str((record.get("metadata") or {}).get("namespace")), moment))
    return changes


def in_flight_pods(records: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """policy -> workload key -> pods of changes in flight (for the per-policy disruption budget)."""
    found: dict[str, dict[str, int]] = {}
    for record in records:
        status = record.get("status") or {}
        if phase_of(status) in IN_FLIGHT and status.get("policy"):
            key = target_of(record).key
            found.setdefault(str(status["policy"]), {})[key] = int(status.get("replicas") or 1)
    return found


def _policies(kube: KubeAdapter) -> list[GPURightsizingPolicy]:
    policies, problems = readable_policies(kube.list_policies())
    for problem in problems:
        LOG.warning("%s", problem)
    return policies


def run_once(
    kube: KubeAdapter,
    records: ChangeRecords,
    actuator: Actuator,
    now: datetime,
    namespaces: tuple[str, ...] = (),
) -> int:
    """One pass: step every workload that has a recommendation or a change in flight in `namespaces`
    (all when empty); returns how many were stepped."""
    recommendations = kube.list_recommendations(namespaces)
    policies = _policies(kube)
    listed = records.list_changes(namespaces)
    recent = recent_changes(listed, now)
    in_flight = in_flight_pods(listed)
    labels: dict[str, dict[str, str]] = {}
    pdbs: dict[str, tuple[dict[str, Any], ...]] = {}
    stepped = 0
    targets = {target_of(recommendation).key: recommendation for recommendation in recommendations}
    for record in listed:  # a change in flight is watched even when its recommendation is gone
        if phase_of(record.get("status") or {}) in IN_FLIGHT:
            targets.setdefault(
                target_of(record).key, {"metadata": record.get("metadata"), "spec": record.get("spec")}
            )
    for recommendation in targets.values():
        ref = target_of(recommendation)
        workload = kube.read(ref.kind, ref.namespace, ref.name)
        if workload is None:
            continue  # gone: its recommendation is garbage-collected, its change record stays as history
        metadata = workload.get("metadata") or {}
        if ref.namespace not in labels:
            labels[ref.namespace] = kube.namespace_labels(ref.namespace)
        settings = settings_for_workload(
            policies, labels[ref.namespace], metadata.get("labels") or {}, metadata.get("annotations") or {}
        )
        if settings.may_change and ref.namespace not in pdbs:
            pdbs[ref.namespace] = tuple(kube.list_pdbs(ref.namespace))
        others = {k: v for k, v in in_flight.get(settings.policy or "", {}).items() if k != ref.key}
        case = WorkloadCase(
            ref=ref, uid=str(metadata.get("uid") or ""), workload=workload, recommendation=recommendation,
            settings=settings, hpa=kube.hpa_for(ref) if ref.kind in SCALABLE_KINDS else None, now=now,
            pdbs=pdbs.get(ref.namespace, ()), pods_in_disruption=sum(others.values()),
        )  # fmt: skip
        try:
            phase = actuator.step(case, recent)
        except LeadershipLostError:
            raise
        except Exception:
            metrics.ERRORS.labels("kubernetes").inc()
            LOG.exception("actuator step for %s failed", ref.key)
            continue
        stepped += 1
        if phase in IN_FLIGHT and settings.policy:  # a change started now counts against the budget at once
            in_flight.setdefault(settings.policy, {})[ref.key] = int(
                (workload.get("spec") or {}).get("replicas") or 1
            )
    return stepped


async def actuator_loop(
    kube: KubeAdapter,
    records: ChangeRecords,
    actuator: Actuator,
    *,
    interval_seconds: float,
    stop: asyncio.Event,
    namespaces: tuple[str, ...] = (),
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> None:
    """Step every workload each `interval_seconds` while this process leads; never dies on one bad pass."""
    delay = min(5.0, interval_seconds)
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), timeout=delay)
            return
        except TimeoutError:
            pass
        delay = interval_seconds
        if not actuator.is_leader():
            continue
        started = time.monotonic()
        try:
            stepped = await asyncio.to_thread(run_once, kube, records, actuator, clock(), namespaces)
            LOG.info("actuator pass: %d workloads in %.1f s", stepped, time.monotonic() - started)
        except LeadershipLostError:
            LOG.error("the lease was lost during the pass: the actuator stops acting")
        except Exception:
            metrics.ERRORS.labels("kubernetes").inc()
            LOG.exception("actuator pass failed")
