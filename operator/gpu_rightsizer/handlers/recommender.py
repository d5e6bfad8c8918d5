"""kopf wiring of the recommender: GPU pods -> one GPURecommendation per workload, kept current.

Handlers only wire: owner resolution and writes are in `adapters.kube`, decisions in `logic`.
Pods are watched with event handlers, which keep no state on the pods (the operator never writes
to objects it does not own).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import kopf

from gpu_rightsizer.actuator import step as changes
from gpu_rightsizer.adapters.kube import KubeAdapter
from gpu_rightsizer.adapters.owner_cache import OwnerCache
from gpu_rightsizer.adapters.source import KeepsWindows
from gpu_rightsizer.adapters.source_registry import open_source
from gpu_rightsizer.config import OperatorConfig
from gpu_rightsizer.handlers import cycle
from gpu_rightsizer.handlers.context import OperatorContext, context_of
from gpu_rightsizer.logic.policy import settings_for_workload
from gpu_rightsizer.logic.status import waiting_status
from gpu_rightsizer.logic.workloads import allocation_from_pod_spec, is_ignored, requests_gpu
from gpu_rightsizer.model.codes import PolicyMode

LOG = logging.getLogger(__name__)

#: Set by `commands.run` before kopf starts; handlers read it from the memo.
CONFIG = OperatorConfig()


def _uses_gpu(body: kopf.Body, **_: Any) -> bool:
    return requests_gpu(body)


@kopf.on.startup()
async def operator_startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Tune kopf, connect the adapters, start the periodic analysis loop."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="gpurightsizer.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="gpurightsizer.io", key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.networking.error_backoffs = [1, 2, 5, 10, 30]
    kube = KubeAdapter(cycle.api_client())
    if CONFIG.role != "actuator":  # the pod handler walks owners from the watched copies
        kube.owner_cache = OwnerCache()
    ctx = OperatorContext(
        config=CONFIG,
        kube=kube,
        source=open_source(CONFIG) if CONFIG.role != "actuator" else None,
        verify_source=open_source(CONFIG, "prometheus") if CONFIG.role != "recommender" else None,
    )
    memo.context = ctx
    ctx.cycle_task = asyncio.create_task(cycle.analysis_loop(ctx))


@kopf.on.cleanup()
async def operator_cleanup(memo: kopf.Memo, **_: Any) -> None:
    """Stop the analysis loop once its running cycle has finished (never cancel a cycle mid-write),
    then save the streaming windows (with `--state-dir`)."""
    ctx = context_of(memo)
    ctx.stop.set()
    if ctx.cycle_task is not None:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.shield(ctx.cycle_task)
    if isinstance(ctx.source, KeepsWindows):  # with --state-dir: the next start reads only the time since now
        await asyncio.to_thread(ctx.source.save_all)


@kopf.on.probe(id="secondsSinceLastCycle")
def last_cycle_age(memo: kopf.Memo, **_: Any) -> float:
    """Readiness/liveness detail: how long ago the analysis cycle last completed (or started waiting)."""
    return round(time.monotonic() - context_of(memo).last_cycle, 1)


#: Kinds that own pods, watched so the pod handler walks owners without reading them: (group, version,
#: plural, kind).
OWNER_KINDS = (
    ("apps", "v1", "replicasets", "ReplicaSet"),
    ("apps", "v1", "deployments", "Deployment"),
    ("apps", "v1", "statefulsets", "StatefulSet"),
    ("apps", "v1", "daemonsets", "DaemonSet"),
    ("batch", "v1", "jobs", "Job"),
    ("batch", "v1", "cronjobs", "CronJob"),
)


def _owner_event_handler(kind: str) -> Callable[..., None]:
    def owner_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        """Keep the owner cache up to date (a slim copy of each object, dropped when deleted)."""
        cache = context_of(memo).kube.owner_cache
        if cache is not None:
            cache.event(type, body, kind)

    return owner_event


for _group, _version, _plural, _kind in OWNER_KINDS:
    kopf.on.event(_group, _version, _plural, id=f"owner-cache-{_plural}")(_owner_event_handler(_kind))


@kopf.on.event("", "v1", "pods", when=_uses_gpu)
def gpu_pod_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A GPU pod appeared or changed: make sure its workload has a GPURecommendation."""
    if type == "DELETED" or is_ignored(body) or (body.get("metadata") or {}).get("deletionTimestamp"):
        return
    ctx = context_of(memo)
    config = ctx.config
    if config.role == "actuator":  # the recommender creates recommendations; the actuator only acts
        return
    kube = ctx.kube
    workload = kube.resolve_owner(body)
    key = workload.ref.key
    if is_ignored(workload.obj) or _switched_off(ctx, kube, workload.ref.namespace, workload.obj):
        with ctx.lock:
            ctx.known.discard(key)
        existing = kube.get_recommendation(workload.ref)
        apply = ((existing or {}).get("status") or {}).get("apply") or {}
        if existing is not None and changes.phase_of(apply) not in changes.IN_FLIGHT:
            kube.delete_recommendation(
                workload.ref
            )  # one with a change in flight: the cycle settles it first
        return
    with ctx.lock:
        if key in ctx.known:
            return
    recommendation = kube.ensure_recommendation(workload)
    if not recommendation.get("status"):
        replicas = int(((workload.obj.get("spec") or {}).get("replicas")) or 1)
        allocation = allocation_from_pod_spec(dict(body.get("spec") or {}), replicas=replicas)
        reason = (
            "Waiting for the first observation window of metrics"
            if config.prometheus_url
            else "No metrics source configured (--prometheus-url): cannot analyse yet"
        )
        status = waiting_status(
            allocation,
            reason,
            workload=workload.ref,
            now=datetime.now(UTC),
            generation=(recommendation.get("metadata") or {}).get("generation"),
        )
        first = status.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"apply"})
        kube.patch_recommendation_status(workload.ref, first)  # status.apply is the actuator's alone
    with ctx.lock:
        ctx.known.add(key)


def _switched_off(ctx: OperatorContext, kube: KubeAdapter, namespace: str, workload: Any) -> bool:
    """True when the winning policy (as of the last cycle) is in Off mode."""
    policies = list(ctx.policies)
    if not policies:
        return False
    metadata = workload.get("metadata") or {}
    settings = settings_for_workload(policies, kube.namespace_labels(namespace), metadata.get("labels") or {})
    return settings.mode == PolicyMode.OFF
