"""Pod owners from watched caches: the pod handler walks owners without a GET per pod event.

Why: with a GET of the ReplicaSet and then of the Deployment on every pod event, creating a thousand
GPU pods spent most of the operator's time in owner reads. Watch events of the kinds that own pods
(ReplicaSets, Jobs, Deployments, StatefulSets, DaemonSets, CronJobs, and known custom controllers)
keep a small copy of each object here: its identity, its controller reference and its labels and
annotations, not its spec. A lookup is answered from the cache; a miss (the watch has not delivered
the object yet, or the kind is not watched) falls through to the API once and the answer is kept
until the watch replaces or deletes it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

#: (the object or None, whether it is gone): `owners.OwnerReader.lookup`'s answer.
Lookup = Callable[[str, str, str, str], tuple[dict[str, Any] | None, bool]]
#: Metadata kept of an owner: enough to walk further up and to read its opt-out annotations.
KEPT_METADATA = ("name", "namespace", "uid", "ownerReferences", "labels", "annotations", "generation")


def slim(body: Mapping[str, Any]) -> dict[str, Any]:
    """The part of an object the owner walk and the pod handler read (of the spec, its replicas)."""
    metadata = body.get("metadata") or {}
    kept: dict[str, Any] = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {key: metadata[key] for key in KEPT_METADATA if key in metadata},
    }
    replicas = (body.get("spec") or {}).get("replicas")
    if replicas is not None:
        kept["spec"] = {"replicas": replicas}
    return kept


class OwnerCache:
    """Slim copies of pod owners by (kind, namespace, name), fed by watch events; thread-safe."""

    def __init__(self) -> None:
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def event(self, event_type: str | None, body: Mapping[str, Any], kind: str | None = None) -> None:
        """One watch event: ADDED/MODIFIED (or the initial listing, type None) store, DELETED drops.

        `kind` names the watched kind when the body does not carry it (listed items may not)."""
        metadata = body.get("metadata") or {}
        kind = str(body.get("kind") or kind)
        key = (kind, str(metadata.get("namespace", "")), str(metadata.get("name")))
        with self._lock:
            if event_type == "DELETED":
                self._objects.pop(key, None)
            else:
                self._objects[key] = slim({**body, "kind": kind})

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._objects.get((kind, namespace, name))

    def __len__(self) -> int:
        with self._lock:
            return len(self._objects)

    def lookup_through(self, fallback: Lookup) -> Lookup:
        """A lookup answered from the cache, else by `fallback` (whose found objects are kept)."""

        def lookup(
            api_version: str, kind: str, namespace: str, name: str
        ) -> tuple[dict[str, Any] | None, bool]:
            found = self.get(kind, namespace, name)
            if found is not None:
                with self._lock:
                    self.hits += 1
                return found, False
            with self._lock:
                self.misses += 1
            answer, gone = fallback(api_version, kind, namespace, name)
            if answer is not None:
                kept = slim({**answer, "kind": answer.get("kind") or kind})
                with self._lock:
                    self._objects.setdefault((kind, namespace, name), kept)
            return answer, gone

        return lookup
