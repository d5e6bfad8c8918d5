"""Who owns a GPU pod: one walk up the controller ownerReferences, shared by every entry point.

The pod watch (objects read from the API server) and the metric sources (kube-state-metrics'
`kube_pod_owner`, `kube_replicaset_owner`, `kube_job_owner`, plus API reads where the operator has
them) both call `resolve_workload` with their own `parent_of` lookup, so a workload gets one key
whichever path saw it first.

The workload a recommendation targets is the top of the chain: the object a person edits. Pod →
ReplicaSet → Deployment → (KServe) InferenceService; Pod → Job → JobSet → (Kubeflow Trainer)
TrainJob; worker Pod → worker StatefulSet → leader Pod → leader StatefulSet → LeaderWorkerSet (the
LWS controller makes the leader *pod* the controller of each worker StatefulSet, so workers and
leaders meet at the LWS). An owner the walk cannot read further (an unknown CRD, no RBAC) is still
the workload: its kind, name and apiVersion come from the ownerReference that names it.

`KNOWN_CONTROLLERS` gives the apiVersion and plural of well-known kinds, for sources that name only
a kind (kube-state-metrics has no apiVersion label) and for reads of custom objects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_rightsizer.model.kinds import KINDS, WorkloadKind

#: Well-known controllers of GPU pods, by kind (`model.kinds`, the one table of kinds).
KNOWN_CONTROLLERS: dict[str, WorkloadKind] = KINDS


#: Owner kinds that never make a workload (a mirror pod is "owned" by its Node; a ConfigMap or Service
#: set as controller is bookkeeping, not a pod controller): the walk stops below them, and the object
#: there is the workload, controller-owned (`managed_by_parent` then refuses to patch it). Any other
#: core-group (`v1`) kind but Pod is treated the same.
_NOT_WORKLOADS = frozenset(
    {
        "Node",
        "ConfigMap",
        "Secret",
        "Service",
        "Namespace",
        "PersistentVolumeClaim",
        "ServiceAccount",
        "Endpoints",
    }
)


def _not_a_workload(link: ObjectLink) -> bool:
    return link.kind in _NOT_WORKLOADS or (link.api_version == "v1" and link.kind != "Pod")


#: Ownership chains are short; the bound protects against cycles in bad data.
MAX_DEPTH = 8


@dataclass(frozen=True, slots=True)
class ObjectLink:
    """One object of an ownership chain, as an ownerReference names it."""

    kind: str
    name: str
    api_version: str = ""
    uid: str = ""

    @property
    def group(self) -> str:
        """The API group ('' for the core group)."""
        return self.api_version.rpartition("/")[0]


#: The controller owner of an object (None at the top, or when the source cannot tell).
ParentLookup = Callable[[ObjectLink], ObjectLink | None]


@dataclass(frozen=True, slots=True)
class Resolution:
    """The workload that owns a pod, with the chain that led there (pod first)."""

    workload: ObjectLink
    chain: tuple[ObjectLink, ...]

    @property
    def via(self) -> str:
        """The chain as `Pod/a → ReplicaSet/b → Deployment/c`, for messages."""
        return " → ".join(f"{link.kind}/{link.name}" for link in self.chain)


def api_version_for(kind: str, given: str = "") -> str:
    """The apiVersion of a kind: the one a source gave, else the table's, else '' (unknown)."""
    if given:
        return given
    known = KNOWN_CONTROLLERS.get(kind)
    return known.api_version if known else ""


def resolve_workload(pod: ObjectLink, parent_of: ParentLookup, max_depth: int = MAX_DEPTH) -> Resolution:
    """Walk controller owners up from a pod to the top-level object a person would change.

    `parent_of` answers the controller owner of one object; it returns None at the top or when the
    object cannot be read, and the last object named is then the workload. A bare pod owns itself.
    """
    chain = [pod]
    seen = {(pod.kind, pod.name)}
    current = pod
    for _ in range(max_depth):
        parent = parent_of(current)
        if parent is None or _not_a_workload(parent) or (parent.kind, parent.name) in seen:
            break
        parent = ObjectLink(
            parent.kind, parent.name, api_version_for(parent.kind, parent.api_version), parent.uid
        )
        chain.append(parent)
        seen.add((parent.kind, parent.name))
        current = parent
    top = chain[-1]
    if top.kind == "Pod" and len(chain) > 1:
        # an LWS leader pod whose own StatefulSet could not be followed: the pod is not the workload
        # the others share, so stay with the StatefulSet below it
        top = chain[-2]
    return Resolution(workload=top, chain=tuple(chain))


def controller_reference(obj: Mapping[str, Any]) -> ObjectLink | None:
    """The controller ownerReference of an object as the API server returns it, or None."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") and ref.get("kind") and ref.get("name"):
            return ObjectLink(
                kind=str(ref["kind"]),
                name=str(ref["name"]),
                api_version=str(ref.get("apiVersion") or ""),
                uid=str(ref.get("uid") or ""),
            )
    return None


def managed_by_parent(obj: Mapping[str, Any]) -> str | None:
    """Why the actuator must not patch `obj`, naming the parent to change instead; None when free.

    An object with a controller ownerReference is reconciled by that controller: a patch would be
    undone (KServe, Knative, the Notebook controller, LWS, Argo Rollouts rewrite their children).
    """
    parent = controller_reference(obj)
    if parent is None:
        return None
    kind = str(obj.get("kind") or "object")
    name = str((obj.get("metadata") or {}).get("name") or "")
    api_version = api_version_for(parent.kind, parent.api_version)
    where = f" ({api_version})" if api_version else ""
    return (
        f"{kind}/{name} is managed by {parent.kind}/{parent.name}{where}, which would undo a change: "
        f"change the {parent.kind} instead"
    )
