"""kopf wiring of the recommender: GPU pods -> one GPURecommendation per workload, kept current.

Imported only by a process that recommends (`commands.run`): the actuator runs none of these
watches. Owner resolution and writes are in the adapters, the cycle in `recommender.cycle`.
Pods are watched with event handlers, which keep no state on the pods (the operator never writes
to objects it does not own).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import kopf

from gpu_rightsizer.adapters.kube import KubeAdapter
from gpu_rightsizer.adapters.owner_cache import OwnerCache
from gpu_rightsizer.adapters.source import KeepsWindows
from gpu_rightsizer.adapters.store import RecommendationStore
from gpu_rightsizer.logic.policy import settings_for_workload
from gpu_rightsizer.logic.workloads import is_ignored, requests_gpu
from gpu_rightsizer.model.codes import PolicyMode
from gpu_rightsizer.model.kinds import POD_OWNERS
from gpu_rightsizer.recommender import cycle, writes
from gpu_rightsizer.recommender.windows import shard_of
from gpu_rightsizer.runtime.context import KnownWorkload, OperatorContext, context_of

LOG = logging.getLogger(__name__)


def _uses_gpu(body: kopf.Body, **_: Any) -> bool:
    return requests_gpu(body)


@kopf.on.startup()
async def recommender_startup(memo: kopf.Memo, **_: Any) -> None:
    """Walk owners from the watched copies, and start the periodic analysis loop."""
    ctx = context_of(memo)
    ctx.kube.owner_cache = OwnerCache()
    shard = shard_of(ctx.config)
    if shard.sharded:
        ctx.kube.status_field_manager = shard.field_manager
        LOG.info("recommender %s: analyses the namespaces that hash to %d", shard.describe(), shard.shard)
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


#: Kinds that own pods, watched so the pod handler walks owners without reading them.
OWNER_KINDS = POD_OWNERS


def _owner_event_handler(kind: str) -> Callable[..., None]:
    def owner_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        """Keep the owner cache up to date (a slim copy of each object, dropped when deleted)."""
        cache = context_of(memo).kube.owner_cache
        if cache is not None:
            cache.event(type, body, kind)

    return owner_event


for _owner in OWNER_KINDS:
    kopf.on.event(_owner.group, _owner.version, _owner.plural, id=f"owner-cache-{_owner.plural}")(
        _owner_event_handler(_owner.kind)
    )


@kopf.on.event("", "v1", "pods", when=_uses_gpu)
def gpu_pod_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A GPU pod appeared or changed: make sure its workload has a GPURecommendation."""
    if type == "DELETED" or is_ignored(body) or (body.get("metadata") or {}).get("deletionTimestamp"):
        return
    ctx = context_of(memo)
    config = ctx.config
    if not shard_of(config).owns(str((body.get("metadata") or {}).get("namespace") or "")):
        return  # another shard's namespace: that shard makes and removes its recommendations
    kube = ctx.kube
    store = RecommendationStore(kube)
    workload = kube.resolve_owner(body)
    key = workload.ref.key
    if is_ignored(workload.obj) or _switched_off(ctx, kube, workload.ref.namespace, workload.obj):
        with ctx.lock:
            ctx.known.pop(key, None)
        existing = store.get(workload.ref)
        apply = existing.status.apply if existing is not None else None
        if existing is not None and "apply" not in existing.unreadable and not (apply and apply.in_flight):
            store.delete(workload.ref)  # one with a change in flight: the cycle settles it first
        return
    with ctx.lock:
        known = ctx.known.get(key)
        if known is not None and known.workload.uid == workload.uid:
            return  # a recreated workload (another uid) is made a recommendation again
    known = KnownWorkload.kept(workload, body.get("spec") or {})
    writes.ensure_recommendation(store, config, known)
    with ctx.lock:
        ctx.known[key] = known


def _switched_off(ctx: OperatorContext, kube: KubeAdapter, namespace: str, workload: Any) -> bool:
    """True when the winning policy (as of the last cycle) is in Off mode."""
    policies = list(ctx.policies)
    if not policies:
        return False
    metadata = workload.get("metadata") or {}
    settings = settings_for_workload(policies, kube.namespace_labels(namespace), metadata.get("labels") or {})
    return settings.mode == PolicyMode.OFF
