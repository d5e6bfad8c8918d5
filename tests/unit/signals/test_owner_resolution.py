"""One owner walk for every entry point: kube-state-metrics owners, pod labels, API reads, actuation."""

from __future__ import annotations

import pytest

from gpu_rightsizer.adapters.openmetrics import Inventory
from gpu_rightsizer.logic.owners import (
    KNOWN_CONTROLLERS,
    ObjectLink,
    managed_by_parent,
    resolve_workload,
)
from gpu_rightsizer.model import metric_names as mn

NS = "ml"


def _owner(inventory: Inventory, pod: str, kind: str, name: str, controller: str = "true") -> None:
    inventory.add(
        mn.KSM_POD_OWNER,
        {
            "namespace": NS,
            "pod": pod,
            "owner_kind": kind,
            "owner_name": name,
            "owner_is_controller": controller,
        },
        1.0,
    )


@pytest.mark.parametrize(
    ("kind", "api_version"),
    [
        ("PyTorchJob", "kubeflow.org/v1"),
        ("MPIJob", "kubeflow.org/v2beta1"),
        ("RayCluster", "ray.io/v1"),
        ("Workflow", "argoproj.io/v1alpha1"),
        ("Notebook", "kubeflow.org/v1"),
    ],
)
def test_a_crd_owner_from_kube_state_metrics_gets_its_real_api_version(kind: str, api_version: str) -> None:
    inventory = Inventory()
    _owner(inventory, "w-0", kind, "w")
    ref = inventory.workload_of(NS, "w-0")
    assert (ref.kind, ref.name, ref.api_version) == (kind, "w", api_version)  # was apps/v1


def test_rollout_and_jobset_owners_are_followed_past_their_replicaset_and_job() -> None:
    inventory = Inventory()
    _owner(inventory, "web-7f-x", "ReplicaSet", "web-7f")
    inventory.add(
        mn.KSM_REPLICASET_OWNER,
        {"namespace": NS, "replicaset": "web-7f", "owner_kind": "Rollout", "owner_name": "web"},
        1.0,
    )
    _owner(inventory, "train-w-0-0", "Job", "train-w-0")
    inventory.add(
        mn.KSM_JOB_OWNER,
        {"namespace": NS, "job_name": "train-w-0", "owner_kind": "JobSet", "owner_name": "train"},
        1.0,
    )
    rollout, jobset = inventory.workload_of(NS, "web-7f-x"), inventory.workload_of(NS, "train-w-0-0")
    assert (rollout.kind, rollout.api_version) == ("Rollout", "argoproj.io/v1alpha1")
    assert (jobset.kind, jobset.name, jobset.api_version) == ("JobSet", "train", "jobset.x-k8s.io/v1alpha2")


def test_the_controller_owner_wins_over_other_owners_whatever_the_order() -> None:
    for first_controller in (True, False):
        inventory = Inventory()
        rows = [("Deployment", "d", "true"), ("ConfigMap", "c", "false")]
        for kind, name, controller in rows if first_controller else rows[::-1]:
            _owner(inventory, "p", kind, name, controller)
        assert inventory.workload_of(NS, "p").kind == "Deployment"


def test_leaderworkerset_pods_group_by_their_label_or_by_api_reads() -> None:
    """Workers' StatefulSets are owned by the leader pod; either way every pod lands on the LWS."""
    labelled = Inventory()
    for pod, sts in (("vllm-0", "vllm"), ("vllm-0-1", "vllm-0")):
        _owner(labelled, pod, "StatefulSet", sts)
        labelled.add(mn.KSM_POD_LABELS, {"namespace": NS, "pod": pod, mn.POD_LABEL_LWS_NAME: "vllm"}, 1.0)
    assert {labelled.workload_of(NS, p).key for p in ("vllm-0", "vllm-0-1")} == {f"{NS}/LeaderWorkerSet/vllm"}
    api_owners = {
        "vllm-0": ObjectLink("Pod", "vllm-0", "v1"),  # worker StatefulSet vllm-0 → leader pod
        "vllm": ObjectLink("LeaderWorkerSet", "vllm", "leaderworkerset.x-k8s.io/v1"),
    }
    pod_owners = {"vllm-0": ObjectLink("StatefulSet", "vllm", "apps/v1")}

    def parent_of(namespace: str, link: ObjectLink) -> ObjectLink | None:
        assert namespace == NS
        return (pod_owners if link.kind == "Pod" else api_owners).get(link.name)

    read = Inventory(extra_owners=parent_of)
    for pod, sts in (("vllm-0", "vllm"), ("vllm-0-1", "vllm-0")):
        _owner(read, pod, "StatefulSet", sts)
    refs = {read.workload_of(NS, p) for p in ("vllm-0", "vllm-0-1")}
    assert {(r.kind, r.name, r.api_version) for r in refs} == {
        ("LeaderWorkerSet", "vllm", "leaderworkerset.x-k8s.io/v1")
    }


def test_an_unknown_owner_kind_is_grouped_under_it_with_no_made_up_api_version() -> None:
    inventory = Inventory()
    _owner(inventory, "x-0", "CloneSet", "x")
    ref = inventory.workload_of(NS, "x-0")
    assert (ref.kind, ref.name, ref.api_version) == ("CloneSet", "x", "")


def test_the_walk_stops_on_cycles_and_at_nodes() -> None:
    links = {"a": ObjectLink("ReplicaSet", "b"), "b": ObjectLink("ReplicaSet", "a")}
    resolved = resolve_workload(ObjectLink("Pod", "a"), lambda link: links.get(link.name))
    assert len(resolved.chain) <= 3
    mirror = resolve_workload(ObjectLink("Pod", "kube-proxy"), lambda _link: ObjectLink("Node", "n1", "v1"))
    assert (mirror.workload.kind, mirror.workload.name) == ("Pod", "kube-proxy")


def test_the_table_covers_the_controllers_of_gpu_pods() -> None:
    wanted = {
        "Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "ReplicaSet", "PyTorchJob", "TrainJob",
        "MPIJob", "JobSet", "RayCluster", "RayJob", "RayService", "LeaderWorkerSet", "Rollout", "Workflow",
        "InferenceService", "Service", "Notebook",
    }  # fmt: skip
    assert wanted <= set(KNOWN_CONTROLLERS)
    assert KNOWN_CONTROLLERS["Service"].api_version == "serving.knative.dev/v1"


def test_actuation_is_refused_on_a_controller_owned_object_and_names_the_parent() -> None:
    owned = {
        "kind": "Deployment",
        "metadata": {
            "name": "llm-predictor",
            "ownerReferences": [
                {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "name": "llm",
                 "uid": "u", "controller": True},
            ],
        },
    }  # fmt: skip
    why = managed_by_parent(owned)
    assert why is not None and "InferenceService/llm" in why and "serving.kserve.io/v1beta1" in why
    helm_only = {
        "kind": "Deployment",
        "metadata": {"name": "d", "ownerReferences": [{"kind": "X", "name": "y"}]},
    }
    assert managed_by_parent(helm_only) is None  # not a controller reference
    assert managed_by_parent({"kind": "Deployment", "metadata": {"name": "d"}}) is None


class _ListingKube:
    """Stands in for KubeAdapter: counts LISTs and GETs."""

    def __init__(self) -> None:
        self.lists: list[str] = []
        self.gets: list[str] = []
        self.custom = self
        lws = {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "name": "g",
            "controller": True,
        }
        self.objects = {
            ("ml", f"sts-{i}"): {"metadata": {"name": f"sts-{i}", "ownerReferences": [lws]}}
            for i in range(50)
        }

    def list_workloads(self, kind: str, namespaces: tuple[str, ...] = ()) -> dict[tuple[str, str], object]:
        self.lists.append(kind)
        return self.objects if kind == "StatefulSet" else {}

        self.custom = self

    def read(self, kind: str, namespace: str, name: str) -> None:
        self.gets.append(f"{kind}/{name}")

    def get_namespaced_custom_object(
        self, group: str, version: str, ns: str, plural: str, name: str
    ) -> object:
        self.gets.append(f"{plural}/{name}")
        return {"metadata": {"name": name}}


def test_the_operator_walk_lists_built_in_kinds_once_per_cycle() -> None:
    from typing import Any, cast

    from gpu_rightsizer.adapters.owners import api_parent_lookup

    kube = _ListingKube()
    parent_of = api_parent_lookup(cast(Any, kube))
    inventory = Inventory(extra_owners=parent_of)
    for i in range(50):
        _owner(inventory, f"sts-{i}-0", "StatefulSet", f"sts-{i}")
    refs = {inventory.workload_of(NS, f"sts-{i}-0").key for i in range(50)}
    assert refs == {f"{NS}/LeaderWorkerSet/g"}
    assert kube.lists == ["StatefulSet"]
    assert kube.gets == ["leaderworkersets/g"]  # the custom top, once


def test_the_operator_walk_reads_watched_owners_without_listing() -> None:
    from typing import Any, cast

    from gpu_rightsizer.adapters.owner_cache import OwnerCache
    from gpu_rightsizer.adapters.owners import WorkloadListings, api_parent_lookup

    kube = _ListingKube()
    cache = OwnerCache()
    for (namespace, _name), obj in kube.objects.items():
        cache.event(None, {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}, "StatefulSet")
    kube.owner_cache = cache  # type: ignore[attr-defined]
    listings = WorkloadListings(cast(Any, kube))
    parent_of = api_parent_lookup(cast(Any, kube), listings)
    inventory = Inventory(extra_owners=parent_of)
    for i in range(50):
        _owner(inventory, f"sts-{i}-0", "StatefulSet", f"sts-{i}")
    refs = {inventory.workload_of(NS, f"sts-{i}-0").key for i in range(50)}
    assert refs == {f"{NS}/LeaderWorkerSet/g"}
    assert kube.lists == []

    _owner(inventory, "late-0", "StatefulSet", "late")  # not delivered by the watch: one listing
    assert inventory.workload_of(NS, "late-0").key == f"{NS}/StatefulSet/late"
    assert kube.lists == ["StatefulSet"] and listings.listed_kinds == ("StatefulSet",)
    assert kube.gets == ["leaderworkersets/g"]


def test_a_core_object_as_controller_is_not_a_workload() -> None:
    """A Deployment whose controller is a ConfigMap stays the workload (and actuation refuses it)."""
    chain = {
        ("Pod", "d-1"): ObjectLink("ReplicaSet", "d-5f", "apps/v1"),
        ("ReplicaSet", "d-5f"): ObjectLink("Deployment", "d", "apps/v1"),
        ("Deployment", "d"): ObjectLink("ConfigMap", "llm", "v1"),
    }
    resolved = resolve_workload(
        ObjectLink("Pod", "d-1", "v1"), lambda link: chain.get((link.kind, link.name))
    )
    assert (resolved.workload.kind, resolved.workload.name) == ("Deployment", "d")
