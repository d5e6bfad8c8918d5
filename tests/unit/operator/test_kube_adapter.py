"""API contract tests of adapters/kube.py against kmock, an in-memory Kubernetes API over HTTP.

The adapter is synchronous (the kubernetes client); kmock serves from the test's event loop, so each
adapter call runs in a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

import kmock
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpu_rightsizer.adapters.kube import KubeAdapter, listed_objects
from gpu_rightsizer.adapters.owner_cache import OwnerCache
from gpu_rightsizer.model.observation import WorkloadRef

pytestmark = pytest.mark.asyncio

T = TypeVar("T")
NS = "team-a"
RECS = f"/apis/gpurightsizer.io/v1alpha1/namespaces/{NS}/gpurecommendations"
REC_RESOURCE = "gpurightsizer.io/v1alpha1/gpurecommendations"
TEMPLATE = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "main", "image": "i"}]}}


async def call(function: Callable[..., T], *args: Any) -> T:
    return await asyncio.to_thread(function, *args)


@pytest.fixture
def adapter(kmock: kmock.KubernetesEmulator) -> KubeAdapter:
    configuration = client.Configuration()
    configuration.host = str(kmock.url).rstrip("/")
    return KubeAdapter(client.ApiClient(configuration))


def owned(kind: str, name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1" if kind in ("ReplicaSet", "Deployment") else "batch/v1",
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
    }


def meta(name: str, uid: str, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"name": name, "namespace": NS, "uid": uid}
    if owner is not None:
        found["ownerReferences"] = [owner]
    return found


def seed_deployment_chain(
    handler: kmock.KubernetesEmulator, *, with_deployment: bool = True
) -> dict[str, Any]:
    """Deployment `trainer` -> ReplicaSet `trainer-5d4` -> the returned Pod."""
    selector = {"matchLabels": {"app": "x"}}
    if with_deployment:
        handler.objects["apps/v1/deployments", NS, "trainer"] = {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("trainer", "uid-deploy"),
            "spec": {"selector": selector, "template": TEMPLATE},
        }  # fmt: skip
    handler.objects["apps/v1/replicasets", NS, "trainer-5d4"] = {
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": meta("trainer-5d4", "uid-rs", owned("Deployment", "trainer", "uid-deploy")),
        "spec": {"selector": selector, "template": TEMPLATE},
    }  # fmt: skip
    return {"metadata": meta("trainer-5d4-abc", "uid-pod", owned("ReplicaSet", "trainer-5d4", "uid-rs"))}


def writes(handler: kmock.KubernetesEmulator) -> list[str]:
    return [f"{request.method} {request.url}" for request in handler if str(request.method) != "method.GET"]


# --------------------------------------------------------------------------------------------------
# Owner resolution
# --------------------------------------------------------------------------------------------------


async def test_pod_resolves_through_its_replicaset_to_the_deployment(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter
) -> None:
    pod = seed_deployment_chain(kmock)
    resolved = await call(adapter.resolve_owner, pod)
    assert resolved.ref == WorkloadRef(namespace=NS, kind="Deployment", name="trainer", api_version="apps/v1")
    assert resolved.uid == "uid-deploy"
    assert not writes(kmock)


async def test_job_pod_resolves_to_its_cronjob(kmock: kmock.KubernetesEmulator, adapter: KubeAdapter) -> None:
    kmock.objects["batch/v1/cronjobs", NS, "nightly"] = {
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta("nightly", "uid-cron"),
        "spec": {"schedule": "0 1 * * *", "jobTemplate": {"spec": {"template": TEMPLATE}}},
    }  # fmt: skip
    kmock.objects["batch/v1/jobs", NS, "nightly-29"] = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": meta("nightly-29", "uid-job", owned("CronJob", "nightly", "uid-cron")),
        "spec": {"template": TEMPLATE},
    }  # fmt: skip
    pod = {"metadata": meta("nightly-29-xyz", "uid-pod", owned("Job", "nightly-29", "uid-job"))}
    resolved = await call(adapter.resolve_owner, pod)
    assert (resolved.ref.kind, resolved.ref.name, resolved.ref.api_version) == (
        "CronJob",
        "nightly",
        "batch/v1",
    )
    assert resolved.uid == "uid-cron"


async def test_a_bare_pod_is_its_own_workload(kmock: kmock.KubernetesEmulator, adapter: KubeAdapter) -> None:
    resolved = await call(adapter.resolve_owner, {"metadata": meta("lonely", "uid-pod")})
    assert (resolved.ref.kind, resolved.ref.name, resolved.ref.api_version, resolved.uid) == (
        "Pod", "lonely", "v1", "uid-pod"
    )  # fmt: skip
    assert len(kmock) == 0  # nothing to look up


async def test_a_missing_owner_stops_at_the_last_known_object(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter
) -> None:
    pod = seed_deployment_chain(kmock, with_deployment=False)  # the Deployment is gone (404)
    resolved = await call(adapter.resolve_owner, pod)
    assert (resolved.ref.kind, resolved.ref.name, resolved.uid) == ("ReplicaSet", "trainer-5d4", "uid-rs")


def _ref(kind: str, name: str, api_version: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True}


async def test_a_crd_owner_is_the_workload_with_its_own_api_version(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter
) -> None:
    kmock.objects["ray.io/v1/rayclusters", NS, "ray"] = {
        "apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta("ray", "uid-ray"),
    }  # fmt: skip
    owner = _ref("RayCluster", "ray", "ray.io/v1", "uid-ray")
    resolved = await call(adapter.resolve_owner, {"metadata": meta("ray-worker", "uid-pod", owner)})
    assert resolved.ref == WorkloadRef(namespace=NS, kind="RayCluster", name="ray", api_version="ray.io/v1")
    assert resolved.uid == "uid-ray"


async def test_trainjob_pods_resolve_through_job_and_jobset_to_the_trainjob(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter
) -> None:
    kmock.objects["trainer.kubeflow.org/v1alpha1/trainjobs", NS, "llm"] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": meta("llm", "uid-tj"),
    }  # fmt: skip
    kmock.objects["jobset.x-k8s.io/v1alpha2/jobsets", NS, "llm"] = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": meta("llm", "uid-js", _ref("TrainJob", "llm", "trainer.kubeflow.org/v1alpha1", "uid-tj")),
    }  # fmt: skip
    kmock.objects["batch/v1/jobs", NS, "llm-node-0"] = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": meta("llm-node-0", "uid-job", _ref("JobSet", "llm", "jobset.x-k8s.io/v1alpha2", "uid-js")),
        "spec": {"template": TEMPLATE},
    }  # fmt: skip
    pod = {"metadata": meta("llm-node-0-0-x", "uid-pod", owned("Job", "llm-node-0", "uid-job"))}
    resolved = await call(adapter.resolve_owner, pod)
    assert (resolved.ref.kind, resolved.ref.name, resolved.ref.api_version, resolved.uid) == (
        "TrainJob", "llm", "trainer.kubeflow.org/v1alpha1", "uid-tj"
    )  # fmt: skip


async def test_leaderworkerset_workers_and_leaders_share_one_workload(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter
) -> None:
    """LWS makes the leader pod the controller of each worker StatefulSet (lws pod_controller.go)."""
    lws = _ref("LeaderWorkerSet", "vllm", "leaderworkerset.x-k8s.io/v1", "uid-lws")
    kmock.objects["leaderworkerset.x-k8s.io/v1/leaderworkersets", NS, "vllm"] = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": meta("vllm", "uid-lws"),
    }  # fmt: skip
    kmock.objects["apps/v1/statefulsets", NS, "vllm"] = {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta("vllm", "uid-leader-sts", lws),
        "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": TEMPLATE},
    }  # fmt: skip
    leader_sts = _ref("StatefulSet", "vllm", "apps/v1", "uid-leader-sts")
    kmock.objects["v1/pods", NS, "vllm-0"] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta("vllm-0", "uid-leader", leader_sts),
    }  # fmt: skip
    kmock.objects["apps/v1/statefulsets", NS, "vllm-0"] = {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": meta("vllm-0", "uid-worker-sts", _ref("Pod", "vllm-0", "v1", "uid-leader")),
        "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": TEMPLATE},
    }  # fmt: skip
    worker = {
        "metadata": meta("vllm-0-1", "uid-w", _ref("StatefulSet", "vllm-0", "apps/v1", "uid-worker-sts"))
    }
    leader = kmock.objects["v1/pods", NS, "vllm-0"]
    for pod in (worker, leader):
        resolved = await call(adapter.resolve_owner, pod)
        assert (resolved.ref.kind, resolved.ref.name, resolved.ref.api_version) == (
            "LeaderWorkerSet", "vllm", "leaderworkerset.x-k8s.io/v1"
        )  # fmt: skip


async def test_an_unreadable_custom_owner_is_still_the_workload(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter
) -> None:
    """No RBAC for the CRD: the ownerReference names it fully, so it is the workload (never the pod)."""
    kmock["get /apis/example.com/v1/namespaces/team-a/trainers/t"] << 403
    kmock["get /apis/example.com/v1"] << {
        "kind": "APIResourceList", "groupVersion": "example.com/v1",
        "resources": [{"name": "trainers", "singularName": "trainer", "namespaced": True, "kind": "Trainer",
                       "verbs": ["get"]}],
    }  # fmt: skip
    owner = _ref("Trainer", "t", "example.com/v1", "uid-t")
    resolved = await call(adapter.resolve_owner, {"metadata": meta("t-0", "uid-pod", owner)})
    assert resolved.ref == WorkloadRef(namespace=NS, kind="Trainer", name="t", api_version="example.com/v1")
    assert resolved.uid == "uid-t"
    assert not writes(kmock)


@pytest.mark.parametrize("status", [500, 403])
async def test_an_api_error_while_resolving_is_raised_not_guessed(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter, status: int
) -> None:
    pod = seed_deployment_chain(kmock)
    kmock[f"get /apis/apps/v1/namespaces/{NS}/replicasets/trainer-5d4"] << status
    with pytest.raises(ApiException) as raised:
        await call(adapter.resolve_owner, pod)
    assert raised.value.status == status  # not mistaken for a bare pod or a missing owner
    assert not writes(kmock)


# --------------------------------------------------------------------------------------------------
# Recommendations
# --------------------------------------------------------------------------------------------------


async def test_ensure_recommendation_creates_one_owned_by_the_workload(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter
) -> None:
    kmock[f"post {RECS}"] << 201 << (lambda request: request.data)  # the real API answers 201
    resolved = await call(adapter.resolve_owner, seed_deployment_chain(kmock))
    created = await call(adapter.ensure_recommendation, resolved)
    assert created["metadata"]["name"] == "deployment-trainer"
    posts = list(kmock[f"post {RECS}"])
    assert len(posts) == 1
    body = posts[0].data
    assert body["spec"]["targetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "trainer"}
    owner = body["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Deployment", "trainer", "uid-deploy")
    assert posts[0].params.get("fieldManager") == "gpu-rightsizer"


async def test_ensure_recommendation_on_409_returns_the_winners_copy(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter
) -> None:
    resolved = await call(adapter.resolve_owner, seed_deployment_chain(kmock))
    winner = {
        "metadata": {"name": "deployment-trainer", "namespace": NS},
        "spec": {},
        "status": {"by": "winner"},
    }
    kmock.objects[REC_RESOURCE, NS, "deployment-trainer"] = winner
    kmock[f"get {RECS}/deployment-trainer"][:1] << 404  # not there yet when first looked for
    found = await call(adapter.ensure_recommendation, resolved)
    assert found["status"] == {"by": "winner"}
    assert len(kmock[f"post {RECS}"]) == 1  # one create attempt, answered 409 (already exists)
    assert kmock.objects[REC_RESOURCE, NS, "deployment-trainer"]["status"] == {"by": "winner"}


async def test_ensure_recommendation_returns_an_existing_one_without_writing(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter
) -> None:
    resolved = await call(adapter.resolve_owner, seed_deployment_chain(kmock))
    kmock.objects[REC_RESOURCE, NS, "deployment-trainer"] = {"metadata": {"name": "deployment-trainer"}}
    found = await call(adapter.ensure_recommendation, resolved)
    assert found["metadata"]["name"] == "deployment-trainer"
    assert not writes(kmock)


@pytest.mark.parametrize("status", [500, 403])
async def test_ensure_recommendation_surfaces_errors_and_writes_nothing(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter, status: int
) -> None:
    resolved = await call(adapter.resolve_owner, seed_deployment_chain(kmock))
    kmock[f"get {RECS}/deployment-trainer"] << status
    with pytest.raises(ApiException) as raised:
        await call(adapter.ensure_recommendation, resolved)
    assert raised.value.status == status
    assert not writes(kmock)  # an unreadable recommendation is not blindly created


async def test_status_patch_is_a_merge_patch_of_the_status_subresource(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter
) -> None:
    kmock.objects[REC_RESOURCE, NS, "deployment-trainer"] = {
        "metadata": {"name": "deployment-trainer", "namespace": NS},
        "spec": {"targetRef": {"kind": "Deployment", "name": "trainer"}},
    }
    ref = WorkloadRef(namespace=NS, kind="Deployment", name="trainer")
    await call(adapter.patch_recommendation_status, ref, {"diagnosis": {"primary": "IdleAllocation"}})
    [patch] = list(kmock["patch"])
    assert str(patch.url).endswith(f"{RECS}/deployment-trainer/status")
    assert patch.headers["Content-Type"] == "application/merge-patch+json"
    assert patch.data == {"status": {"diagnosis": {"primary": "IdleAllocation"}}}
    stored = kmock.objects[REC_RESOURCE, NS, "deployment-trainer"]
    assert stored["status"]["diagnosis"]["primary"] == "IdleAllocation"


@pytest.mark.parametrize(("status", "attempts"), [(403, 1), (422, 1), (500, 5), (429, 5)])
async def test_a_failed_status_patch_raises_after_bounded_retries(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter, status: int, attempts: int
) -> None:
    """A refusal retrying cannot fix is sent once; throttling and server errors a bounded number of
    times, with waits in between (no retry storm, no fallback write elsewhere)."""
    kmock.objects[REC_RESOURCE, NS, "deployment-trainer"] = {"metadata": {"name": "deployment-trainer"}}
    kmock[f"patch {RECS}/deployment-trainer/status"] << status
    slept: list[float] = []
    adapter.sleep = slept.append
    ref = WorkloadRef(namespace=NS, kind="Deployment", name="trainer")
    with pytest.raises(ApiException) as raised:
        await call(adapter.patch_recommendation_status, ref, {"diagnosis": {"primary": "Healthy"}})
    assert raised.value.status == status
    assert len(writes(kmock)) == attempts
    assert len(slept) == attempts - 1 and all(0 < s <= 30 for s in slept)


async def test_delete_recommendation_reports_whether_there_was_one(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter
) -> None:
    kmock.objects[REC_RESOURCE, NS, "deployment-trainer"] = {"metadata": {"name": "deployment-trainer"}}
    ref = WorkloadRef(namespace=NS, kind="Deployment", name="trainer")
    assert await call(adapter.delete_recommendation, ref) is True
    assert await call(adapter.delete_recommendation, ref) is False  # 404: already gone


async def test_events_are_posted_on_the_workload_and_failures_do_not_raise(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter
) -> None:
    ref = WorkloadRef(namespace=NS, kind="Deployment", name="trainer")
    kmock[f"post /api/v1/namespaces/{NS}/events"] << 201 << (lambda request: request.data)
    await call(lambda: adapter.post_event(ref, "uid-deploy", "DiagnosisChanged", "plain words", warning=True))
    [event] = [r.data for r in kmock["post"]]
    assert event["involvedObject"] == {
        "apiVersion": "apps/v1", "kind": "Deployment", "name": "trainer", "namespace": NS, "uid": "uid-deploy"
    }  # fmt: skip
    assert (event["reason"], event["message"], event["type"]) == (
        "DiagnosisChanged",
        "plain words",
        "Warning",
    )

    kmock[f"post /api/v1/namespaces/{NS}/events"] << 403
    await call(lambda: adapter.post_event(ref, "uid-deploy", "DiagnosisChanged", "again"))  # logged only


# --------------------------------------------------------------------------------------------------
# Owners from the watched cache
# --------------------------------------------------------------------------------------------------


def reads(handler: kmock.KubernetesEmulator) -> list[str]:
    return [f"{request.url}" for request in handler if str(request.method) == "method.GET"]


async def test_watched_owners_resolve_pod_events_without_reads(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter
) -> None:
    """Pod events of a thousand-pod rollout cost no owner GETs once the owners' watch has them."""
    pod = seed_deployment_chain(kmock)
    adapter.owner_cache = OwnerCache()
    adapter.owner_cache.event(None, kmock.objects["apps/v1/deployments", NS, "trainer"], "Deployment")
    adapter.owner_cache.event(None, kmock.objects["apps/v1/replicasets", NS, "trainer-5d4"], "ReplicaSet")
    for _ in range(20):
        resolved = await call(adapter.resolve_owner, pod)
        assert resolved.ref == WorkloadRef(
            namespace=NS, kind="Deployment", name="trainer", api_version="apps/v1"
        )
        assert resolved.uid == "uid-deploy"
    assert reads(kmock) == []


async def test_an_owner_not_watched_yet_is_read_once(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter
) -> None:
    pod = seed_deployment_chain(kmock)
    adapter.owner_cache = OwnerCache()
    for _ in range(5):
        resolved = await call(adapter.resolve_owner, pod)
        assert resolved.ref.name == "trainer"
    assert len(reads(kmock)) == 2  # the ReplicaSet and the Deployment, once each
    assert "template" not in (resolved.obj.get("spec") or {})  # the kept copy is slim


async def test_without_a_cache_every_walk_reads_the_owners(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter
) -> None:
    pod = seed_deployment_chain(kmock)
    for _ in range(3):
        await call(adapter.resolve_owner, pod)
    assert len(reads(kmock)) == 6


# --------------------------------------------------------------------------------------------------
# Listings (decoded from the JSON, without the typed client models)
# --------------------------------------------------------------------------------------------------


async def test_listed_workloads_are_the_objects_as_the_api_server_sent_them(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter
) -> None:
    seed_deployment_chain(kmock)
    kmock.objects["apps/v1/deployments", "team-b", "server"] = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {**meta("server", "uid-server"), "namespace": "team-b",
                     "creationTimestamp": "2026-03-04T12:00:00Z"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "y"}}, "template": TEMPLATE,
                 "strategy": {"rollingUpdate": {"maxSurge": "25%"}}},
    }  # fmt: skip

    everywhere = await call(adapter.list_workloads, "Deployment")
    only_b = await call(adapter.list_workloads, "Deployment", ("team-b",))
    replica_sets = await call(adapter.list_workloads, "ReplicaSet", (NS,))

    assert set(everywhere) == {(NS, "trainer"), ("team-b", "server")}
    assert set(only_b) == {("team-b", "server")}
    server = only_b[("team-b", "server")]
    assert (server["kind"], server["apiVersion"]) == ("Deployment", "apps/v1")
    assert server["spec"]["replicas"] == 3
    assert server["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == "25%"
    assert server["metadata"]["creationTimestamp"] == "2026-03-04T12:00:00Z", "as sent, not re-encoded"
    assert replica_sets[(NS, "trainer-5d4")]["metadata"]["ownerReferences"][0]["name"] == "trainer"
    assert not writes(kmock)


async def test_listed_objects_leave_out_managed_fields_and_keep_the_rest_of_the_metadata(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter
) -> None:
    managed = [
        {
            "manager": "gpu-rightsizer",
            "operation": "Update",
            "subresource": "status",
            "fieldsV1": {"f:status": {"f:diagnosis": {".": {}, "f:primary": {}}}},
        }
    ]
    kmock.objects[REC_RESOURCE, NS, "trainer-gpu"] = {
        "apiVersion": "gpurightsizer.io/v1alpha1", "kind": "GPURecommendation",
        "metadata": {"name": "trainer-gpu", "namespace": NS, "uid": "uid-rec", "generation": 4,
                     "labels": {"team": "a"}, "finalizers": ["keep"], "managedFields": managed},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "trainer"}},
        "status": {"diagnosis": {"primary": "Healthy"}},
    }  # fmt: skip
    seed_deployment_chain(kmock)
    kmock.objects["apps/v1/deployments", NS, "trainer"]["metadata"]["managedFields"] = managed

    in_namespace = await call(adapter.list_recommendations, (NS,))
    everywhere = await call(adapter.list_recommendations)
    deployment = (await call(adapter.list_workloads, "Deployment"))[(NS, "trainer")]

    assert in_namespace == everywhere
    (recommendation,) = everywhere
    assert recommendation["metadata"] == {
        "name": "trainer-gpu",
        "namespace": NS,
        "uid": "uid-rec",
        "generation": 4,
        "labels": {"team": "a"},
        "finalizers": ["keep"],
    }, "every key but managedFields, and no key the object does not have"
    assert recommendation["status"] == {"diagnosis": {"primary": "Healthy"}}
    assert "managedFields" not in deployment["metadata"]
    assert deployment["metadata"]["uid"] == "uid-deploy"


async def test_listed_policies_leave_out_managed_fields(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter
) -> None:
    kmock.objects["gpurightsizer.io/v1alpha1/gpurightsizingpolicies", None, "staging"] = {
        "apiVersion": "gpurightsizer.io/v1alpha1", "kind": "GPURightsizingPolicy",
        "metadata": {"name": "staging", "generation": 2, "managedFields": [{"manager": "kubectl"}]},
        "spec": {"mode": "Recommend"},
    }  # fmt: skip

    (policy,) = await call(adapter.list_policies)

    assert policy["metadata"] == {"name": "staging", "generation": 2}
    assert policy["spec"] == {"mode": "Recommend"}


async def test_the_nodes_capacity_is_read_from_their_listing_as_sent(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter
) -> None:
    from gpu_rightsizer.adapters.capacity import load_capacity

    for i, labels in enumerate(({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {})):
        kmock.objects["v1/nodes", None, f"gpu-{i}"] = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": f"gpu-{i}", "labels": labels, "managedFields": [{"manager": "kubelet"}]},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"}},
        }  # fmt: skip

    nodes = await call(adapter.list_nodes)
    capacity = await call(load_capacity, adapter)

    assert sorted(node["metadata"]["name"] for node in nodes) == ["gpu-0", "gpu-1"]
    assert all("managedFields" not in node["metadata"] for node in nodes)
    assert capacity.source == "api"
    assert sorted(node for pool in capacity.pools for node in pool.nodes) == ["gpu-0", "gpu-1"]
    assert {pool.gpu_product for pool in capacity.pools} == {"NVIDIA-H100-80GB-HBM3", None}
    assert all(pool.gpu_resources == {"nvidia.com/gpu": 8.0} for pool in capacity.pools)


async def test_a_list_answer_that_is_not_a_kubernetes_list_is_a_clear_error() -> None:
    assert listed_objects(b'{"kind": "DeploymentList"}') == []
    with pytest.raises(ValueError, match="LIST answer could not be read"):
        listed_objects(b'{"items": [{"metadata": "not an object"}]}')
    with pytest.raises(ValueError, match="LIST answer could not be read"):
        listed_objects(b"<html>proxy error</html>")


async def test_listed_hpas_are_keyed_by_the_workload_they_scale(
    kmock: kmock.KubernetesEmulator, adapter: KubeAdapter
) -> None:
    kmock.objects["autoscaling/v2/horizontalpodautoscalers", NS, "trainer-hpa"] = {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": meta("trainer-hpa", "uid-hpa"),
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "trainer"},
                 "minReplicas": 2, "maxReplicas": 5},
    }  # fmt: skip

    found = await call(adapter.list_hpas)
    in_namespace = await call(adapter.list_hpas, (NS,))

    assert set(found) == set(in_namespace) == {(NS, "Deployment", "trainer")}
    assert found[(NS, "Deployment", "trainer")]["spec"]["maxReplicas"] == 5
