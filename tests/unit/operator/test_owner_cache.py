"""Owner lookups from the watched cache: no API read for a known owner, fallback once for a miss."""

from __future__ import annotations

from typing import Any

from gpu_rightsizer.adapters.owner_cache import OwnerCache, slim


def replicaset(name: str, owner: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "ml", "uid": f"uid-{name}", "labels": {"a": "b"}}
    if owner:
        metadata["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": owner, "uid": "d", "controller": True}
        ]
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": metadata,
        "spec": {"template": {"spec": {"containers": [{"name": "x" * 1000}]}}},
    }


class CountingApi:
    def __init__(self, objects: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.objects = objects
        self.reads: list[tuple[str, str]] = []

    def __call__(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> tuple[dict[str, Any] | None, bool]:
        self.reads.append((kind, name))
        found = self.objects.get((kind, name))
        return found, found is None


def test_watched_owners_are_answered_without_an_api_read() -> None:
    cache = OwnerCache()
    cache.event(None, replicaset("web-1", owner="web"))
    api = CountingApi({})
    lookup = cache.lookup_through(api)
    for _ in range(100):  # one event per pod of the ReplicaSet
        found, gone = lookup("apps/v1", "ReplicaSet", "ml", "web-1")
        assert found is not None and not gone
        assert found["metadata"]["ownerReferences"][0]["name"] == "web"
    assert api.reads == []
    assert cache.hits == 100


def test_a_miss_reads_the_api_once_and_keeps_the_answer() -> None:
    cache = OwnerCache()
    api = CountingApi({("ReplicaSet", "web-1"): replicaset("web-1", owner="web")})
    lookup = cache.lookup_through(api)
    for _ in range(5):
        found, _ = lookup("apps/v1", "ReplicaSet", "ml", "web-1")
        assert found is not None
    assert api.reads == [("ReplicaSet", "web-1")]


def test_a_gone_owner_is_not_cached_and_deletion_drops_it() -> None:
    cache = OwnerCache()
    api = CountingApi({})
    lookup = cache.lookup_through(api)
    assert lookup("apps/v1", "ReplicaSet", "ml", "gone") == (None, True)
    assert lookup("apps/v1", "ReplicaSet", "ml", "gone") == (None, True)
    assert len(api.reads) == 2
    cache.event("ADDED", replicaset("web-1"))
    assert cache.get("ReplicaSet", "ml", "web-1") is not None
    cache.event("DELETED", replicaset("web-1"))
    assert cache.get("ReplicaSet", "ml", "web-1") is None


def test_a_modified_owner_replaces_the_copy() -> None:
    cache = OwnerCache()
    cache.event("ADDED", replicaset("web-1"))
    cache.event("MODIFIED", replicaset("web-1", owner="web"))
    found = cache.get("ReplicaSet", "ml", "web-1")
    assert found is not None and found["metadata"]["ownerReferences"][0]["name"] == "web"


def test_the_copy_keeps_no_spec() -> None:
    kept = slim(replicaset("web-1", owner="web"))
    assert "spec" not in kept
    assert kept["metadata"]["labels"] == {"a": "b"} and kept["kind"] == "ReplicaSet"


def test_the_recommender_feeds_the_cache_from_watch_events() -> None:
    import kopf

    from gpu_rightsizer.adapters.kube import KubeAdapter
    from gpu_rightsizer.config import OperatorConfig
    from gpu_rightsizer.recommender import wiring as recommender
    from gpu_rightsizer.runtime.context import OperatorContext

    kube = KubeAdapter()
    kube.owner_cache = OwnerCache()
    memo = kopf.Memo()
    memo.context = OperatorContext(config=OperatorConfig(), kube=kube)
    handler = recommender._owner_event_handler("ReplicaSet")
    listed = {key: value for key, value in replicaset("web-1", owner="web").items() if key != "kind"}
    handler(type=None, body=listed, memo=memo)  # the initial listing's items carry no kind
    assert kube.owner_cache.get("ReplicaSet", "ml", "web-1") is not None
    handler(type="DELETED", body=listed, memo=memo)
    assert kube.owner_cache.get("ReplicaSet", "ml", "web-1") is None
    assert {owner.kind for owner in recommender.OWNER_KINDS} >= {
        "ReplicaSet",
        "Deployment",
        "Job",
        "StatefulSet",
    }
