"""API reads for the owner walk of `logic.owners`: any kind, built-in or custom, by apiVersion and kind.

Custom kinds are read through the custom-objects API; the plural comes from `KNOWN_CONTROLLERS`, else
from the group version's discovery document (cached).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException

from gpu_rightsizer.adapters.owner_cache import OwnerCache
from gpu_rightsizer.logic.owners import (
    KNOWN_CONTROLLERS,
    ObjectLink,
    api_version_for,
    controller_reference,
    resolve_workload,
)
from gpu_rightsizer.model.kinds import BUILT_IN, POD_OWNERS

LOG = logging.getLogger(__name__)

#: Groups whose kinds the operator's RBAC always covers: a refusal there is a broken install, raised.
_BUILT_IN_GROUPS = frozenset({"", "apps", "batch"})
#: Built-in kinds a cycle reads from the watched copies, else lists once (`WorkloadListings`); bare Pods
#: are read one by one (a LIST of every pod would cost more than it saves).
_LISTED_KINDS = frozenset(kind.kind for kind in POD_OWNERS)


class ApiReads(Protocol):
    """The reads the owner walk makes (`adapters.kube.KubeAdapter`)."""

    custom: Any

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...

    def read_owner(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...

    def list_workloads(
        self, kind: str, namespaces: tuple[str, ...] = ()
    ) -> dict[tuple[str, str], dict[str, Any]]: ...


class OwnerReader:
    """Reads objects of any kind: built-in kinds through `KubeAdapter.read`, custom ones as JSON.

    Discovery answers (kind -> plural) are cached per instance.
    """

    def __init__(self, kube: ApiReads, *, owners_only: bool = False) -> None:
        self.kube = kube
        #: The objects read are walked for their owners only: built-in kinds may come from the
        #: adapter's watched owner cache (slim copies, no spec) instead of a GET.
        self.owners_only = owners_only
        self._plurals: dict[tuple[str, str], str | None] = {}
        self._lock = threading.Lock()

    def plural(self, api_version: str, kind: str) -> str | None:
        """The resource name of a custom kind, from the table or discovery; None when not served."""
        group, _, version = api_version.rpartition("/")
        known = KNOWN_CONTROLLERS.get(kind)
        if known is not None and known.api_version.rpartition("/")[0] == group:
            return known.plural
        key = (api_version, kind)
        with self._lock:
            if key in self._plurals:
                return self._plurals[key]
        found: str | None = None
        if group:
            try:
                listing = self.kube.custom.get_api_resources(group, version)
                for resource in listing.resources or []:
                    if resource.kind == kind and "/" not in resource.name:
                        found = str(resource.name)
                        break
            except ApiException as error:
                if error.status not in (403, 404):
                    raise
        with self._lock:
            self._plurals[key] = found
        return found

    def read(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object as plain JSON; None when it is gone, its kind is not served, or (custom kinds
        only) reading it is forbidden. See `lookup` for which of these it was."""
        return self.lookup(api_version, kind, namespace, name)[0]

    def lookup(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> tuple[dict[str, Any] | None, bool]:
        """(the object or None, whether it is gone).

        Gone means a 404 on a served kind: the owner is being deleted. A kind that is not served, or a
        403 on a custom kind, is not gone: the caller still knows the object from the reference that
        named it. A 403 on a built-in kind is raised, since the operator's RBAC must allow those reads.
        """
        api_version = api_version_for(kind, api_version)
        group, _, version = api_version.rpartition("/")
        if group in _BUILT_IN_GROUPS:
            if kind not in BUILT_IN:
                return None, False
            found = (
                self.kube.read_owner(kind, namespace, name)
                if self.owners_only
                else self.kube.read(kind, namespace, name)
            )
            return found, found is None
        plural = self.plural(api_version, kind)
        if plural is None:
            return None, False
        try:
            answer = self.kube.custom.get_namespaced_custom_object(group, version, namespace, plural, name)
        except ApiException as error:
            if error.status == 404:
                return None, True
            if error.status == 403:
                LOG.info("no permission to read %s %s/%s; it is the workload", kind, namespace, name)
                return None, False
            raise
        if not isinstance(answer, dict):
            raise TypeError(f"expected a JSON object for {kind} {namespace}/{name}")
        found = dict(answer)
        found.setdefault("kind", kind)
        found.setdefault("apiVersion", api_version)
        return found, False


def resolve_pod(reader: OwnerReader, pod: Mapping[str, Any]) -> tuple[ObjectLink, Mapping[str, Any], str]:
    """The pod's workload (as a link), the workload object as read (a stub when unreadable), the chain.

    A 404 on an owner (it is being deleted) keeps the last object read as the workload, as before.
    """
    metadata = pod.get("metadata") or {}
    namespace = str(metadata.get("namespace", "default"))
    start = ObjectLink("Pod", str(metadata.get("name")), "v1", str(metadata.get("uid", "")))
    objects: dict[tuple[str, str], Mapping[str, Any]] = {
        ("Pod", start.name): {**pod, "kind": "Pod", "apiVersion": "v1"}
    }

    def parent_of(link: ObjectLink) -> ObjectLink | None:
        obj = objects.get((link.kind, link.name))
        if obj is None:  # known only from a reference: its own owners cannot be read
            return None
        parent = controller_reference(obj)
        if parent is None:
            return None
        if (parent.kind, parent.name) not in objects:
            found, gone_now = reader.lookup(parent.api_version, parent.kind, namespace, parent.name)
            if found is not None:
                objects[(parent.kind, parent.name)] = found
            elif gone_now:
                return None
        return parent

    resolution = resolve_workload(start, parent_of)
    top = resolution.workload
    obj = objects.get((top.kind, top.name)) or {
        "apiVersion": top.api_version,
        "kind": top.kind,
        "metadata": {"name": top.name, "namespace": namespace, "uid": top.uid},
    }
    return top, obj, resolution.via


class WorkloadListings:
    """The pod-owning built-in workloads one cycle reads: the watched copies first, else one LIST per
    kind (made on the first miss, in `namespaces` when given, else cluster-wide).

    Why: the cycle reads only the metadata of these objects (labels, annotations, uid, generation,
    controller reference), which the slim copies of `kube.owner_cache` keep, fed by the watch events
    the pod handler already needs. Listing every Deployment and ReplicaSet each cycle (pod templates
    included) was a LIST answer per kind to serialise, send and decode; with a warm cache a steady
    cycle lists none. A miss lists the kind once for the cycle, as every cycle did before, so a cold
    cache or one the watch has not filled costs what it did. Thread-safe.
    """

    def __init__(
        self,
        kube: ApiReads,
        namespaces: tuple[str, ...] = (),
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        self.kube = kube
        self.namespaces = namespaces
        #: Told of a failed LIST (the cycle counts it in its error metric).
        self.on_error = on_error
        self.cache: OwnerCache | None = getattr(kube, "owner_cache", None)
        #: kind -> (namespace, name) -> object; None when the LIST failed (read one by one instead).
        self._listed: dict[str, Mapping[tuple[str, str], Mapping[str, Any]] | None] = {}
        self._lock = threading.Lock()

    def _listing(self, kind: str) -> Mapping[tuple[str, str], Mapping[str, Any]] | None:
        with self._lock:
            if kind in self._listed:
                return self._listed[kind]
            try:
                listed: Mapping[tuple[str, str], Mapping[str, Any]] | None = self.kube.list_workloads(
                    kind, self.namespaces
                )
            except Exception as error:  # RBAC or API trouble: read one by one instead
                LOG.warning("listing %s objects failed; reading them one by one: %s", kind, error)
                if self.on_error is not None:
                    self.on_error(error)
                listed = None
            self._listed[kind] = listed
            return listed

    def find(self, kind: str, namespace: str, name: str) -> tuple[Mapping[str, Any] | None, bool]:
        """(the object or None, whether the watched copies or a listing answered for it). Not answered:
        a kind that is not listed here, or whose listing failed; the caller reads it one by one."""
        if kind not in _LISTED_KINDS:
            return None, False
        if self.cache is not None:
            cached = self.cache.get(kind, namespace, name)
            if cached is not None:
                return cached, True
        listing = self._listing(kind)
        if listing is None:
            return None, False
        return listing.get((namespace, name)), True

    @property
    def listed_kinds(self) -> tuple[str, ...]:
        """The kinds this cycle had to list (read by the tests; nothing else counts on it)."""
        with self._lock:
            return tuple(sorted(kind for kind, listed in self._listed.items() if listed is not None))


def api_parent_lookup(
    kube: ApiReads, listings: WorkloadListings | None = None
) -> Callable[[str, ObjectLink], ObjectLink | None]:
    """The controller owner of an object, from the API, for one cycle's batch.

    Lets the metric path walk past what kube-state-metrics tells (StatefulSet, Deployment and custom
    kind owners), so it reaches the same workload as the pod watch. Built-in kinds come from
    `listings` (the watched copies, else one LIST per kind for the cycle), so the cost does not grow
    with the number of workloads; custom kinds are read one by one. A failed read ends the walk there.
    """
    reader = OwnerReader(kube)
    listings = listings or WorkloadListings(kube)
    cache: dict[tuple[str, str, str], ObjectLink | None] = {}

    def parent_of(namespace: str, link: ObjectLink) -> ObjectLink | None:
        key = (namespace, link.kind, link.name)
        if key in cache:
            return cache[key]
        found: Mapping[str, Any] | None = None
        answered = False
        group = api_version_for(link.kind, link.api_version).rpartition("/")[0]
        if group in _BUILT_IN_GROUPS:
            found, answered = listings.find(link.kind, namespace, link.name)
        if not answered:
            try:
                found, _ = reader.lookup(link.api_version, link.kind, namespace, link.name)
            except (ApiException, TypeError) as error:
                LOG.warning(
                    "cannot read %s %s/%s to find its owner: %s", link.kind, namespace, link.name, error
                )
        cache[key] = controller_reference(found) if found is not None else None
        return cache[key]

    return parent_of


def read_workload(
    kube: ApiReads, api_version: str, kind: str, namespace: str, name: str
) -> dict[str, Any] | None:
    """A recommendation's target of any kind (built-in or custom); None when gone or unreadable."""
    return OwnerReader(kube).read(api_version, kind, namespace, name)
