"""The operator's shared state: one typed object, held in kopf's memo.

kopf gives each watched object a shallow copy of the memo when it first sees it, so an attribute
assigned to the root memo later never reaches that object's handlers (proven in
tests/unit/operator/test_lease.py). Everything the handlers share therefore lives in this one
object, which every copy references: an update here is seen by every handler.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from gpu_rightsizer.adapters.kube import KubeAdapter, LeaseElector, ResolvedWorkload
from gpu_rightsizer.adapters.owner_cache import slim
from gpu_rightsizer.adapters.source import WindowSource
from gpu_rightsizer.adapters.store import ParsedRecommendations
from gpu_rightsizer.config import OperatorConfig
from gpu_rightsizer.logic.workloads import resources_of
from gpu_rightsizer.model.crd import GPURightsizingPolicy


@dataclass(frozen=True)
class KnownWorkload:
    """A GPU workload the recommender made a recommendation for."""

    workload: ResolvedWorkload
    pod_spec: Mapping[str, Any]

    @classmethod
    def kept(cls, workload: ResolvedWorkload, pod_spec: Mapping[str, Any]) -> KnownWorkload:
        """What is kept of a workload for the life of the process: the owner's slim copy
        (`owner_cache.slim`: identity, controller reference, labels, annotations, replicas) and the
        pod spec's containers' resources (`logic.workloads.resources_of`), not whole objects."""
        resolved = ResolvedWorkload(ref=workload.ref, uid=workload.uid, obj=slim(workload.obj))
        return cls(workload=resolved, pod_spec=resources_of(pod_spec))


@dataclass
class OperatorContext:
    """What the recommender, the cycle and the actuator share for the life of the process."""

    config: OperatorConfig
    kube: KubeAdapter
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    #: GPU workloads whose recommendation was made, by key (guarded by `lock`): the workload as
    #: resolved (its uid tells a recreated one apart) and a pod spec for the first status. The cycle
    #: makes the recommendation again when it is gone while the workload is still there.
    known: dict[str, KnownWorkload] = field(default_factory=dict)
    #: The policies as of the last cycle (replaced as a whole, read by the pod handler).
    policies: list[GPURightsizingPolicy] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: time.monotonic() of the last finished cycle (liveness probe).
    last_cycle: float = field(default_factory=time.monotonic)
    #: Statuses the last cycle wrote (the others it analysed said nothing new).
    last_written: int = 0
    #: Of those, the statuses written only because their stored window grew old.
    last_refreshed: int = 0
    cycle_task: asyncio.Task[Any] | None = None
    elector: LeaseElector | None = None
    #: The cycle's parses of the listed recommendations, reused while an object is unchanged.
    parsed_recommendations: ParsedRecommendations = field(default_factory=ParsedRecommendations)
    #: Where the recommender reads every workload's windows (None: no metrics backend configured).
    source: WindowSource | None = None
    #: Where the actuator reads one workload's window to verify a change: whole windows, scoped to
    #: that workload (`adapters.source.Scope`), never the recommender's incremental state.
    verify_source: WindowSource | None = None
    lease_task: asyncio.Task[Any] | None = None
    #: The actuator's own loop (`actuator.loop.actuator_loop`), waited for on shutdown.
    actuator_task: asyncio.Task[Any] | None = None


def context_of(memo: kopf.Memo) -> OperatorContext:
    """The context the startup handler put into the memo."""
    found = memo.get("context")
    if not isinstance(found, OperatorContext):
        raise RuntimeError("the operator context is missing from kopf's memo: startup did not run")
    return found
