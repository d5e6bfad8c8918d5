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
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from gpu_rightsizer.actuator.step import IN_FLIGHT, Actuator
from gpu_rightsizer.actuator.writes import ChangeRecords, LeadershipLostError, Measure, WorkloadCase
from gpu_rightsizer.adapters.change_store import readable_changes
from gpu_rightsizer.adapters.kube import KubeAdapter
from gpu_rightsizer.adapters.source import Scope, WindowSource
from gpu_rightsizer.adapters.store import RecommendationStore, StoredRecommendation, ref_of
from gpu_rightsizer.logic.policy import readable_policies, settings_for_workload
from gpu_rightsizer.model.change import GPURightsizingChange
from gpu_rightsizer.model.crd import GPURightsizingPolicy
from gpu_rightsizer.model.kinds import kind_of
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


def recent_changes(records: Iterable[GPURightsizingChange], now: datetime) -> list[tuple[str, datetime]]:
    """(namespace, time) of changes sent in the last hour, from the actuator's own change records (so a
    restarted actuator still knows its rate budget, and nobody else's write can lift it). Every state
    with `appliedAt` counts, Blocked included: a change whose outcome failed to be written happened."""
    changes = []
    for record in records:
        status = record.status
        if status is None or status.applied_at is None or status.dry_run:
            continue
        if now - status.applied_at < timedelta(hours=1):
            changes.append((str(record.metadata.get("namespace")), status.applied_at))
    return changes


def in_flight_pods(records: Iterable[GPURightsizingChange]) -> dict[str, dict[str, int]]:
    """policy -> workload key -> pods of changes in flight (for the per-policy disruption budget)."""
    found: dict[str, dict[str, int]] = {}
    for record in records:
        status = record.status
        if status is not None and status.in_flight and status.policy:
            key = change_target(record).key
            found.setdefault(status.policy, {})[key] = status.replicas or 1
    return found


def change_target(record: GPURightsizingChange) -> WorkloadRef:
    """The workload a change record belongs to."""
    return ref_of(record.spec.target_ref, str(record.metadata.get("namespace") or ""))


def _targets(
    recommendations: Iterable[StoredRecommendation], changes: Iterable[GPURightsizingChange]
) -> dict[str, tuple[WorkloadRef, dict[str, Any]]]:
    """Workload key -> (workload, its recommendation as the actuator may read it): every readable
    recommendation, and every change in flight even when its recommendation is gone.

    What a step sees of a recommendation is the typed model written back out, with only the fields
    the stored object has (no defaults filled in, so the mirror compares like with like): a field
    that did not parse is absent, never half-read."""
    targets: dict[str, tuple[WorkloadRef, dict[str, Any]]] = {}
    for stored in recommendations:
        if stored.problem is not None:
            LOG.warning(
                "GPURecommendation %s/%s: %s; the actuator reads it without %s",
                stored.ref.namespace, stored.recommendation.metadata.get("name"), stored.problem,
                ", ".join(sorted(stored.unreadable)) or "those fields",
            )  # fmt: skip
        published = stored.recommendation.model_dump(mode="json", by_alias=True, exclude_unset=True)
        targets[stored.ref.key] = (stored.ref, published)
    for record in changes:
        if record.status is not None and record.status.in_flight:
            ref = change_target(record)
            stand_in = {"metadata": {"namespace": ref.namespace, "name": record.spec.recommendation}}
            targets.setdefault(ref.key, (ref, stand_in))
    return targets


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
    recommendations = RecommendationStore(kube).list(namespaces)
    policies = _policies(kube)
    listed = readable_changes(records.list_changes(namespaces))
    recent = recent_changes(listed, now)
    in_flight = in_flight_pods(listed)
    labels: dict[str, dict[str, str]] = {}
    pdbs: dict[str, tuple[dict[str, Any], ...]] = {}
    stepped = 0
    for ref, recommendation in _targets(recommendations, listed).values():
        try:
            # a custom kind (a PyTorchJob) is read through the custom-objects API: its pods are resized in place
            row = kind_of(ref.kind)
            read = kube.read if row is not None and row.built_in else kube.read_target
            workload = read(ref.kind, ref.namespace, ref.name)
            if workload is None:
                continue  # gone: its recommendation is garbage-collected, its change record stays as history
            metadata = workload.get("metadata") or {}
            if ref.namespace not in labels:
                labels[ref.namespace] = kube.namespace_labels(ref.namespace)
            settings = settings_for_workload(
                policies,
                labels[ref.namespace],
                metadata.get("labels") or {},
                metadata.get("annotations") or {},
            )
            if settings.may_change and ref.namespace not in pdbs:
                pdbs[ref.namespace] = tuple(kube.list_pdbs(ref.namespace))
            others = {k: v for k, v in in_flight.get(settings.policy or "", {}).items() if k != ref.key}
            case = WorkloadCase(
                ref=ref, uid=str(metadata.get("uid") or ""), workload=workload, recommendation=recommendation,
                settings=settings, hpa=kube.hpa_for(ref) if row is not None and row.scalable else None, now=now,
                pdbs=pdbs.get(ref.namespace, ()), pods_in_disruption=sum(others.values()),
            )  # fmt: skip
            phase = actuator.step(case, recent)
        except LeadershipLostError:
            raise
        except Exception:  # one workload's failure (an API error, a bad object) never stops the others
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
