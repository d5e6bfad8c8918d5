"""One actuator (H7): the lease with locally observed times, exit on loss, release after the cycle;
and the kopf memo that handlers share."""

from __future__ import annotations

import asyncio
import copy
import threading
from datetime import UTC, datetime, timedelta

import kopf
import pytest
from kopf._core.reactor.inventory import ResourceMemories
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpu_rightsizer.actuator import wiring as actuator
from gpu_rightsizer.adapters.kube import KubeAdapter, LeaseElector
from gpu_rightsizer.config import OperatorConfig
from gpu_rightsizer.runtime.context import OperatorContext, context_of


class FakeLeases:
    """coordination.k8s.io Leases in memory, with resourceVersion conflicts."""

    def __init__(self) -> None:
        self.lease: client.V1Lease | None = None
        self.version = 0

    def read_namespaced_lease(self, name: str, namespace: str) -> client.V1Lease:
        if self.lease is None:
            raise ApiException(status=404, reason="Not Found")
        return copy.deepcopy(self.lease)

    def create_namespaced_lease(self, namespace: str, body: client.V1Lease) -> None:
        if self.lease is not None:
            raise ApiException(status=409, reason="AlreadyExists")
        self._store(body)

    def replace_namespaced_lease(self, name: str, namespace: str, body: client.V1Lease) -> None:
        assert self.lease is not None
        if body.metadata.resource_version != self.lease.metadata.resource_version:
            raise ApiException(status=409, reason="Conflict")
        self._store(body)

    def _store(self, body: client.V1Lease) -> None:
        self.version += 1
        stored = copy.deepcopy(body)
        stored.metadata.resource_version = str(self.version)
        self.lease = stored


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(leases: FakeLeases, identity: str, clock: Clock) -> LeaseElector:
    found = LeaseElector(
        KubeAdapter(client.ApiClient()),
        name="l",
        namespace="ns",
        identity=identity,
        duration_seconds=15,
        clock=clock,
    )
    found.coordination = leases  # type: ignore[assignment]
    return found


def test_a_standby_with_a_skewed_clock_does_not_take_a_renewed_lease() -> None:
    """The reviewer's exp4: the holder renews every 5 s; a standby whose wall clock is far ahead (the
    renewTime looks minutes old to it) must still not take the lease, because it only counts the time
    it has itself seen the lease record unchanged."""
    leases, clock = FakeLeases(), Clock()
    holder = elector(leases, "a", clock)
    standby = elector(leases, "b", clock)
    assert holder.try_acquire()
    assert leases.lease is not None
    leases.lease.spec.renew_time = datetime.now(UTC) - timedelta(minutes=10)  # as a skewed clock sees it
    for _ in range(10):
        clock.now += 5
        assert holder.try_acquire()
        assert not standby.try_acquire()
        assert holder.is_leader() and not standby.is_leader()


def test_a_lease_that_stops_changing_is_taken_after_its_duration_on_the_local_clock() -> None:
    leases, clock = FakeLeases(), Clock()
    holder = elector(leases, "a", clock)
    standby = elector(leases, "b", clock)
    assert holder.try_acquire()
    assert not standby.try_acquire()  # first sight: the record is fresh to the standby
    clock.now += 14
    assert not standby.try_acquire()
    assert not holder.is_leader()  # the holder stopped acting at 80 % of the duration already
    clock.now += 2
    assert standby.try_acquire() and standby.is_leader()
    assert not holder.try_acquire()  # its renewal now loses the race


def test_leadership_lapses_by_the_local_clock_without_renewal() -> None:
    leases, clock = FakeLeases(), Clock()
    holder = elector(leases, "a", clock)
    assert holder.try_acquire()
    clock.now += 11.9
    assert holder.is_leader()
    clock.now += 0.2
    assert not holder.is_leader()


@pytest.mark.asyncio
async def test_losing_the_lease_stops_the_process() -> None:
    leases, clock = FakeLeases(), Clock()
    holder = elector(leases, "a", clock)
    holder.duration = timedelta(seconds=3)  # renew every second
    lost: list[str] = []

    async def take_over() -> None:
        await asyncio.sleep(0.05)
        assert leases.lease is not None
        leases.lease.spec.holder_identity = "b"  # another actuator took the lease
        clock.now += 30

    await asyncio.gather(actuator.keep_lease(holder, asyncio.Event(), on_loss=lost.append), take_over())
    assert lost == ["a"]


@pytest.mark.asyncio
async def test_the_lease_is_released_only_after_the_cycle_finished() -> None:
    order: list[str] = []

    def cycle() -> None:
        threading.Event().wait(0.2)
        order.append("cycle finished")

    class Elector:
        def release(self) -> None:
            order.append("released")

    ctx = OperatorContext(config=OperatorConfig(), kube=None)  # type: ignore[arg-type]
    ctx.cycle_task = asyncio.create_task(asyncio.to_thread(cycle))
    ctx.elector = Elector()  # type: ignore[assignment]
    memo = kopf.Memo()
    memo.context = ctx
    await asyncio.sleep(0.01)
    await actuator.actuator_cleanup(memo=memo)
    assert order == ["cycle finished", "released"]


@pytest.mark.asyncio
async def test_kopf_gives_each_object_a_shallow_copy_of_the_memo() -> None:
    """The review's claim, proven: kopf copies the memo (copy.copy) when it first sees an object, so an
    attribute the cycle assigns to the root memo later (`memo.policies = ...`) never reaches that
    object's handlers; a shared mutable object inside the memo does."""
    root = kopf.Memo()
    root.policies = []
    root.shared = {"policies": []}
    memories = ResourceMemories()
    body = {"metadata": {"uid": "pod-1", "name": "p", "namespace": "ns"}}
    first = await memories.recall(body, memobase=root)  # type: ignore[arg-type]
    root.policies = ["apply-policy"]  # what cycle.py did every cycle
    root.shared["policies"] = ["apply-policy"]
    again = await memories.recall(body, memobase=root)  # type: ignore[arg-type]
    assert again is first
    assert again.memo.policies == []  # stale: the pod handler never sees the cycle's policies
    assert again.memo.shared["policies"] == ["apply-policy"]


@pytest.mark.asyncio
async def test_the_operator_context_reaches_every_objects_memo_copy() -> None:
    root = kopf.Memo()
    root.context = OperatorContext(config=OperatorConfig(), kube=None)  # type: ignore[arg-type]
    memories = ResourceMemories()
    body = {"metadata": {"uid": "pod-2", "name": "p", "namespace": "ns"}}
    copied = await memories.recall(body, memobase=root)  # type: ignore[arg-type]
    root.context.policies = ["apply-policy"]  # what the cycle does now
    assert context_of(copied.memo).policies == ["apply-policy"]
