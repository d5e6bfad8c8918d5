"""The actuator's kopf wiring: leader election on a Lease (SPEC §6).

Importing this module registers the handlers. Only the lease holder changes workloads; the work
itself is `actuator.step.Actuator.step()`, driven by the actuator's own loop (`actuator.loop`). Times are observed
locally (client-go semantics, see `LeaseElector`); a process that loses the lease exits at once,
and on a clean shutdown the lease is released only after the running cycle has finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import kopf

from gpu_rightsizer.actuator.loop import actuator_loop, scoped_measure
from gpu_rightsizer.actuator.step import Actuator
from gpu_rightsizer.adapters.change_store import ChangeStore
from gpu_rightsizer.adapters.kube import LeaseElector
from gpu_rightsizer.runtime.context import OperatorContext, context_of

LOG = logging.getLogger(__name__)


@kopf.on.startup()
async def actuator_startup(memo: kopf.Memo, **_: Any) -> None:
    """Join the leader election; only the lease holder changes workloads."""
    ctx = context_of(memo)
    cfg = ctx.config
    identity = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    ctx.elector = LeaseElector(
        ctx.kube, name=cfg.lease_name, namespace=cfg.lease_namespace, identity=identity,
        duration_seconds=cfg.lease_seconds,
    )  # fmt: skip
    ctx.lease_task = asyncio.create_task(keep_lease(ctx.elector, ctx.stop))
    ctx.actuator_task = asyncio.create_task(start_actuator(ctx))


def start_actuator(ctx: OperatorContext) -> Coroutine[Any, Any, None]:
    """The actuator's loop over its own change records and the one-workload metric reads."""
    records = ChangeStore(ctx.kube.api_client)
    acting = Actuator(ctx.kube, records, ctx.elector.is_leader if ctx.elector else lambda: False,
                      scoped_measure(ctx.verify_source))  # fmt: skip
    interval = ctx.config.actuator_interval_seconds or ctx.config.interval_seconds
    namespaces = () if ctx.config.all_namespaces else ctx.config.namespaces
    return actuator_loop(
        ctx.kube, records, acting, interval_seconds=interval, stop=ctx.stop, namespaces=namespaces
    )


def _lost_lease(identity: str) -> None:
    """Exit at once, as client-go users do (VPA: `klog.Fatal("lost master")`): a process that lost
    the lease must not finish a write it started deciding on while it was the leader."""
    LOG.error("actuator %s lost the lease: exiting", identity)
    os._exit(3)


async def keep_lease(
    elector: LeaseElector, stop: asyncio.Event, on_loss: Callable[[str], None] = _lost_lease
) -> None:
    """Renew the lease every third of its duration; on losing it, `on_loss` (exit) at once."""
    period = max(1.0, elector.duration.total_seconds() / 3)
    was_leader = False
    while not stop.is_set():
        try:
            await asyncio.to_thread(elector.try_acquire)
        except Exception as error:
            LOG.warning("lease renewal failed: %s", error)
        leader = elector.is_leader()
        if was_leader and not leader and not stop.is_set():
            on_loss(elector.identity)
            return
        if leader != was_leader:
            LOG.info("actuator %s: %s", elector.identity, "now the leader" if leader else "standing by")
            was_leader = leader
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=period)


@kopf.on.cleanup()
async def actuator_cleanup(memo: kopf.Memo, **_: Any) -> None:
    """Hand the lease over on a clean shutdown, only after the running cycle has finished."""
    ctx = context_of(memo)
    ctx.stop.set()
    for task in (ctx.cycle_task, ctx.actuator_task):  # a pass may be writing: wait, never cancel it
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.shield(task)
    if ctx.lease_task is not None:
        ctx.lease_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await ctx.lease_task
    if ctx.elector is not None:
        await asyncio.to_thread(ctx.elector.release)
