"""Real-cluster shapes end to end: GPU pods owned through custom controllers, and node pools that share
GPUs in different ways.

Custom resources use their real groups and kinds (minimal CRDs: only what ownership needs); their
pods are created the way their controllers create them (directly, or through a Job, StatefulSet or
ReplicaSet the custom resource owns). Node pools carry the labels GPU feature discovery and the device
plugin publish: MIG mixed (default fleet), MIG single, time-slicing with and without renaming, none.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from gpu_rightsizer.testcluster.nodes import gpu_operator_default_nodes, sharing_pool_nodes
from tests.e2e.conftest import Kube
from tests.e2e.test_operator_lifecycle import FAST, create, recommendation, wait
from tests.e2e.workloads import SCENARIO_ANNOTATION, gpu_deployment

#: (group, version, kind, plural) of the custom controllers under test.
CUSTOM_KINDS = [
    ("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs"),
    ("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
    ("ray.io", "v1", "RayCluster", "rayclusters"),
    ("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets"),
    ("argoproj.io", "v1alpha1", "Rollout", "rollouts"),
]
TOLERATION = [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]
GPU_RESOURCE = re.compile(r"^nvidia\.com/(gpu(\.shared)?|mig-.+)$")


def _crd(group: str, version: str, kind: str, plural: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": version, "served": True, "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }  # fmt: skip


@pytest.fixture(scope="module")
def custom_kinds(kube: Kube) -> None:
    """The CRDs of the custom controllers (no controllers: the test makes their children)."""
    kube.apply(*(_crd(*kind) for kind in CUSTOM_KINDS))
    for group, _, _, plural in CUSTOM_KINDS:
        kube.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{plural}.{group}")


def _add_nodes(kube: Kube, specs: list[Any]) -> list[str]:
    """Apply fake nodes and wait until KWOK has them Ready."""
    kube.cluster.apply((spec.manifest() for spec in specs), server_side=False)
    names = [spec.name for spec in specs]

    def ready() -> bool:
        items = kube.get_json("nodes")["items"]
        up = {
            n["metadata"]["name"]
            for n in items
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
        }
        return set(names) <= up

    kube.wait_for(ready, timeout=120, what="the sharing pools' nodes to be Ready")
    return names


@pytest.fixture(scope="module")
def sharing_pools(kube: Kube) -> Iterator[list[str]]:
    """MIG-single and time-sliced (renamed and not) node pools next to the default fleet."""
    names = _add_nodes(kube, sharing_pool_nodes())
    yield names
    kube.kubectl("delete", "node", *names, "--wait=false", check=False)


def _create_json(kube: Kube, obj: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = json.loads(
        kube.kubectl("create", "-o", "json", "-f", "-", input_text=yaml.safe_dump(obj)).stdout
    )
    return created


def _owner(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True,
    }  # fmt: skip


def _pod_template(labels: dict[str, str], *, restart: str = "Always") -> dict[str, Any]:
    return {
        "metadata": {"labels": labels, "annotations": {SCENARIO_ANNOTATION: "healthy"}},
        "spec": {
            "restartPolicy": restart,
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "tolerations": TOLERATION,
            "containers": [
                {
                    "name": "main", "image": "registry.example/gpu-app:1.0",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": "1"},
                        "limits": {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": "1"},
                    },
                }
            ],
        },
    }  # fmt: skip


def _custom(kube: Kube, namespace: str, group: str, version: str, kind: str, name: str) -> dict[str, Any]:
    return _create_json(
        kube,
        {"apiVersion": f"{group}/{version}", "kind": kind, "metadata": {"name": name, "namespace": namespace},
         "spec": {}},
    )  # fmt: skip


def _bare_pod(name: str, namespace: str, owner: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    template = _pod_template(labels)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": [owner], **template["metadata"]},
        "spec": template["spec"],
    }  # fmt: skip


def _workload_set(
    kind: str, name: str, namespace: str, owner: dict[str, Any], labels: dict[str, str]
) -> dict[str, Any]:
    """A StatefulSet or ReplicaSet of one GPU pod, controlled by `owner`."""
    api = "apps/v1"
    spec: dict[str, Any] = {
        "replicas": 1,
        "selector": {"matchLabels": labels},
        "template": _pod_template(labels),
    }
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {
        "apiVersion": api, "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": [owner], "labels": labels},
        "spec": spec,
    }  # fmt: skip


def _make_custom_workloads(kube: Kube, namespace: str) -> None:
    """One workload per custom controller, with its pods made as its controller makes them."""
    kinds = {kind: (group, version) for group, version, kind, _ in CUSTOM_KINDS}
    # Kubeflow PyTorchJob and KubeRay RayCluster own their pods directly.
    for kind, name, pods in (("PyTorchJob", "ptj", ("ptj-master-0", "ptj-worker-0")),
                             ("RayCluster", "ray", ("ray-head-x1", "ray-worker-x2"))):  # fmt: skip
        parent = _custom(kube, namespace, *kinds[kind], kind, name)
        for pod in pods:
            create(kube, _bare_pod(pod, namespace, _owner(parent), {"app": name}))
    # JobSet → Job → Pod (the Job controller makes the pod).
    jobset = _custom(kube, namespace, *kinds["JobSet"], "JobSet", "js")
    create(kube, {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "js-workers-0", "namespace": namespace, "ownerReferences": [_owner(jobset)]},
        "spec": {"template": _pod_template({"app": "js"}, restart="Never"), "backoffLimit": 0},
    })  # fmt: skip
    # Argo Rollout → ReplicaSet (with the rollout's template hash) → Pod.
    rollout = _custom(kube, namespace, *kinds["Rollout"], "Rollout", "web")
    labels = {"app": "web", "rollouts-pod-template-hash": "6f7c8"}
    create(kube, _workload_set("ReplicaSet", "web-6f7c8", namespace, _owner(rollout), labels))
    # LeaderWorkerSet → leader StatefulSet → leader pod → worker StatefulSet → worker pod
    # (lws pod_controller.go makes the leader pod the controller of its group's worker StatefulSet).
    lws = _custom(kube, namespace, *kinds["LeaderWorkerSet"], "LeaderWorkerSet", "lws")
    group = {"leaderworkerset.sigs.k8s.io/name": "lws"}
    create(kube, _workload_set("StatefulSet", "lws", namespace, _owner(lws), {**group, "role": "leader"}))
    leader = kube.wait_for(
        lambda: _get(kube, "pod", namespace, "lws-0"), timeout=60, what="the LWS leader pod"
    )
    create(
        kube, _workload_set("StatefulSet", "lws-0", namespace, _owner(leader), {**group, "role": "worker"})
    )


def _get(kube: Kube, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    found = kube.kubectl("get", kind, "-n", namespace, name, "-o", "json", check=False)
    return json.loads(found.stdout) if found.returncode == 0 else None


def test_custom_controllers_get_one_recommendation_on_the_object_people_change(
    kube: Kube, custom_kinds: None, live_metrics: str, run_operator: Any
) -> None:
    namespace = kube.create_namespace("owners")
    _make_custom_workloads(kube, namespace)
    operator = run_operator("-n", namespace, "--prometheus-url", live_metrics, *FAST)
    expected = {
        "pytorchjob-ptj": ("kubeflow.org/v1", "PyTorchJob", "ptj"),
        "jobset-js": ("jobset.x-k8s.io/v1alpha2", "JobSet", "js"),
        "raycluster-ray": ("ray.io/v1", "RayCluster", "ray"),
        "leaderworkerset-lws": ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "lws"),
        "rollout-web": ("argoproj.io/v1alpha1", "Rollout", "web"),
    }

    missing: list[str] = []
    # KWOK completes pods owned by a Job as soon as they run, so the JobSet's pod yields no metrics:
    # its recommendation is checked for its target; the others are also analysed through the metric path
    no_metrics = {"jobset-js"}

    def analysed() -> dict[str, dict[str, Any]] | None:
        found = {name: recommendation(kube, namespace, name) for name in expected}
        missing[:] = [
            name
            for name, rec in found.items()
            if not rec or (name not in no_metrics and not (rec.get("status") or {}).get("window"))
        ]
        return None if missing else {k: v for k, v in found.items() if v}

    try:
        recommendations = wait(
            analysed, 240, "every custom workload analysed through its top owner", operator
        )
    except pytest.fail.Exception:
        pods = kube.kubectl("get", "pods", "-n", namespace, "-o", "wide").stdout
        pytest.fail(f"not analysed: {missing}\n{pods}")
    for name, (api_version, kind, workload) in expected.items():
        target = recommendations[name]["spec"]["targetRef"]
        assert (target["apiVersion"], target["kind"], target["name"]) == (api_version, kind, workload)
    # grouping: no recommendation per pod, child Job, StatefulSet or ReplicaSet
    every = kube.get_json("gpurecommendations", "-n", namespace)["items"]
    assert sorted(item["metadata"]["name"] for item in every) == sorted(expected)
    lws_pods = recommendations["leaderworkerset-lws"]["status"]["allocation"]["replicas"]
    assert lws_pods == 2, "the LWS is analysed on its leader and its worker"


def _nodes_offering(kube: Kube) -> list[tuple[str, dict[str, float]]]:
    """(base GPU product, allocatable GPU resources) of every node."""
    out = []
    for node in kube.get_json("nodes")["items"]:
        product = (node["metadata"].get("labels") or {}).get("nvidia.com/gpu.product", "")
        base = re.sub(r"-SHARED$", "", re.sub(r"-MIG-.*$", "", product))
        offered = {k: float(v) for k, v in node["status"]["allocatable"].items() if GPU_RESOURCE.match(k)}
        out.append((base, offered))
    return out


def _gpu_resources(action: dict[str, Any]) -> set[str]:
    target = action.get("target") or {}
    named = set(target.get("requests") or {}) | set(target.get("limits") or {})
    if action.get("resource"):
        named.add(action["resource"])
    return {name for name in named if GPU_RESOURCE.match(name)}


def _analysed(kube: Kube, namespace: str, workloads: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
    """Each Deployment's recommendation status once every one has a diagnosis other than InsufficientData."""
    found = {name: recommendation(kube, namespace, f"deployment-{name}") for name in workloads}
    done = all(
        rec
        and ((rec.get("status") or {}).get("diagnosis") or {}).get("primary")
        not in (None, "InsufficientData")
        for rec in found.values()
    )
    return {k: v["status"] for k, v in found.items() if v} if done else None


def test_advice_names_only_resources_the_node_pools_offer(
    kube: Kube, sharing_pools: list[str], live_metrics: str, run_operator: Any
) -> None:
    namespace = kube.create_namespace("pools")
    workloads = {
        "on-h100": gpu_deployment("on-h100", namespace, scenario="oversized", cpu="4"),  # no H100 MIG pool
        "on-h200": gpu_deployment("on-h200", namespace, scenario="oversized", product="NVIDIA-H200", cpu="4"),
        "on-l4-shared": gpu_deployment(
            "on-l4-shared", namespace, scenario="oversized", product="NVIDIA-L4-SHARED", cpu="4"
        ),
        "on-a100-renamed": gpu_deployment(
            "on-a100-renamed", namespace, scenario="oversized", product="NVIDIA-A100-SXM4-40GB", cpu="4",
            gpu_resource="nvidia.com/gpu.shared",
        ),
    }  # fmt: skip
    for manifest in workloads.values():
        create(kube, manifest)
    operator = run_operator("-n", namespace, "--prometheus-url", live_metrics, *FAST)

    statuses = wait(
        lambda: _analysed(kube, namespace, workloads), 240, "the four workloads analysed", operator
    )
    nodes = _nodes_offering(kube)
    products = {
        "on-h100": "NVIDIA-H100-80GB-HBM3", "on-h200": "NVIDIA-H200", "on-l4-shared": "NVIDIA-L4",
        "on-a100-renamed": "NVIDIA-A100-SXM4-40GB",
    }  # fmt: skip
    for name, status in statuses.items():
        same_model = [offered for base, offered in nodes if base == products[name]]
        for action in status.get("actions") or []:
            for resource in _gpu_resources(action):
                offered = any(resource in offer for offer in same_model)
                if action.get("automatic"):
                    assert offered, (name, action)  # an automatic change only to what a pool offers
                elif not offered and action["type"] in ("migProfile", "gpuSharing"):
                    assert "Not schedulable on this cluster" in action["reason"], (name, action)
    # no MIG pool of H100s: the old default (mig-mixed) proposed nvidia.com/mig-* automatically here
    h100 = statuses["on-h100"].get("actions") or []
    assert not any(a.get("automatic") and a["type"] in ("migProfile", "gpuSharing") for a in h100), h100
    assert statuses["on-h100"]["savings"]["gpuHoursPerDay"] == 0 or any(
        a.get("automatic") and a["type"] in ("releaseIdle", "replicas", "hpaBounds") for a in h100
    )
    # the L4 pool time-slices without renaming: nvidia.com/gpu.shared does not exist there
    for action in statuses["on-l4-shared"].get("actions") or []:
        if action["type"] == "gpuSharing":
            assert not action.get("automatic") and "renameByDefault" in action["reason"], action
    # the H200 pool with MIG mixed offers some slices: the one chosen is among them; with no policy the
    # shrink gate keeps it advice until a Deployment has been watched for a day
    h200 = [a for a in statuses["on-h200"].get("actions") or [] if a["type"] == "migProfile"]
    offered_h200 = {k for base, offer in nodes if base == "NVIDIA-H200" for k in offer}
    assert h200 and all(a["resource"] in offered_h200 for a in h200), h200
    assert all(a.get("automatic") or "a Deployment is shrunk only after 24 h" in a["reason"] for a in h200), (
        h200
    )


def test_a_default_gpu_operator_pool_gets_only_schedulable_advice(
    kube: Kube, sharing_pools: list[str], live_metrics: str, run_operator: Any
) -> None:
    """GFD writes mig.strategy=single on every node of a default GPU Operator install; the L4 pool
    time-slices ×4 without rename. Nothing may be planned as MIG, nor named nvidia.com/gpu.shared."""
    names = _add_nodes(kube, gpu_operator_default_nodes())
    namespace = kube.create_namespace("gpu-operator-pool")
    workloads = {
        "l4-whole": gpu_deployment("l4-whole", namespace, scenario="oversized", product="NVIDIA-L4", cpu="4"),
        "l4-shared": gpu_deployment(
            "l4-shared", namespace, scenario="oversized", product="NVIDIA-L4-SHARED", cpu="4"
        ),
    }
    try:
        for manifest in workloads.values():
            create(kube, manifest)
        operator = run_operator("-n", namespace, "--prometheus-url", live_metrics, *FAST)

        statuses = wait(
            lambda: _analysed(kube, namespace, workloads), 240, "the L4 workloads analysed", operator
        )
        labels = {
            n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in kube.get_json("nodes")["items"]
        }
        offered = _nodes_offering(kube)
        for name, status in statuses.items():
            for action in status.get("actions") or []:
                assert action["type"] != "migProfile", (name, action)
                for resource in _gpu_resources(action):
                    assert any(resource in offer for base, offer in offered if base == "NVIDIA-L4"), (
                        name,
                        action,
                    )
                selected = re.search(r"nvidia\.com/gpu\.product=([^,)\s]+)", action["to"])
                if selected:  # a node selector names a product some node carries
                    assert any(
                        node.get("nvidia.com/gpu.product") == selected.group(1) for node in labels.values()
                    ), action
        shared = [a for a in statuses["l4-shared"].get("actions") or [] if a["type"] == "gpuSharing"]
        assert not shared, shared  # already on a share: no sharing action
        for action in statuses["l4-whole"].get("actions") or []:
            if action["type"] == "gpuSharing":
                assert action["resource"] == "nvidia.com/gpu" and "NVIDIA-L4-SHARED" in action["to"], action
        summaries = " ".join(
            s.get("summary", {}).get("action", "") + str(s.get("conditions")) for s in statuses.values()
        )
        assert "gpu.shared" not in summaries and "MIG single" not in summaries
    finally:
        kube.kubectl("delete", "node", *names, "--wait=false", check=False)
