"""Thin Kubernetes I/O: resolve a pod's owning workload, read workloads, write GPURecommendations.

Everything here is a direct API call; decisions live in `gpu_rightsizer.logic`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpu_rightsizer.logic.workloads import recommendation_name
from gpu_rightsizer.model.observation import WorkloadRef

LOG = logging.getLogger(__name__)

GROUP = "gpurightsizer.io"
VERSION = "v1alpha1"
RECOMMENDATIONS = "gpurecommendations"
POLICIES = "gpurightsizingpolicies"
FIELD_MANAGER = "gpu-rightsizer"

#: kind -> (apiVersion, reader method name on the typed clients) for the workloads we manage.
_API_VERSIONS = {
    "ReplicaSet": "apps/v1",
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "Job": "batch/v1",
    "CronJob": "batch/v1",
    "Pod": "v1",
}


@dataclass(frozen=True)
class ResolvedWorkload:
    """The top-level owner of a pod, with the uid the recommendation's ownerReference needs."""

    ref: WorkloadRef
    uid: str
    obj: Mapping[str, Any]


def _controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


class KubeAdapter:
    """Kubernetes reads and writes the operator needs, on one ApiClient."""

    def __init__(self, api_client: client.ApiClient | None = None) -> None:
        self.api_client = api_client or client.ApiClient()
        self.core = client.CoreV1Api(self.api_client)
        self.apps = client.AppsV1Api(self.api_client)
        self.batch = client.BatchV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """Read a workload object as a plain dict; None when it does not exist."""
        readers = {
            "ReplicaSet": self.apps.read_namespaced_replica_set,
            "Deployment": self.apps.read_namespaced_deployment,
            "StatefulSet": self.apps.read_namespaced_stateful_set,
            "DaemonSet": self.apps.read_namespaced_daemon_set,
            "Job": self.batch.read_namespaced_job,
            "CronJob": self.batch.read_namespaced_cron_job,
            "Pod": self.core.read_namespaced_pod,
        }
        reader = readers.get(kind)
        if reader is None:
            return None
        try:
            obj = reader(name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        result: dict[str, Any] = self.api_client.sanitize_for_serialization(obj)
        result.setdefault("kind", kind)
        result.setdefault("apiVersion", _API_VERSIONS[kind])
        return result

    def resolve_owner(self, pod: Mapping[str, Any]) -> ResolvedWorkload:
        """Follow controller ownerReferences up: Pod -> ReplicaSet -> Deployment, Job -> CronJob, ...

        Stops at the first owner of a kind we do not manage, or that has gone: the last known object
        is then the workload (a bare Pod owns itself).
        """
        metadata = pod.get("metadata") or {}
        namespace = str(metadata.get("namespace", "default"))
        current: Mapping[str, Any] = {**pod, "kind": "Pod", "apiVersion": "v1"}
        for _ in range(5):  # ownership chains are short; the bound protects against cycles
            ref = _controller_ref(current)
            if ref is None or ref.get("kind") not in _API_VERSIONS:
                break
            owner = self.read(str(ref["kind"]), namespace, str(ref["name"]))
            if owner is None:
                break
            current = owner
        meta = current.get("metadata") or {}
        kind = str(current.get("kind", "Pod"))
        ref = WorkloadRef(
            namespace=namespace, kind=kind, name=str(meta.get("name")), api_version=_API_VERSIONS.get(kind, "v1")
        )
        return ResolvedWorkload(ref=ref, uid=str(meta.get("uid", "")), obj=current)

    def get_recommendation(self, ref: WorkloadRef) -> dict[str, Any] | None:
        """The workload's GPURecommendation, or None."""
        try:
            obj: dict[str, Any] = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, ref.namespace, RECOMMENDATIONS, recommendation_name(ref)
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return obj

    def ensure_recommendation(self, workload: ResolvedWorkload) -> dict[str, Any]:
        """Create the workload's GPURecommendation (owned by the workload) if it does not exist yet."""
        existing = self.get_recommendation(workload.ref)
        if existing is not None:
            return existing
        ref = workload.ref
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "GPURecommendation",
            "metadata": {
                "name": recommendation_name(ref),
                "namespace": ref.namespace,
                "labels": {"app.kubernetes.io/managed-by": "gpu-rightsizer"},
                "ownerReferences": [
                    {
                        "apiVersion": ref.api_version,
                        "kind": ref.kind,
                        "name": ref.name,
                        "uid": workload.uid,
                        "blockOwnerDeletion": False,
                        "controller": False,
                    }
                ],
            },
            "spec": {"targetRef": {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name}},
        }
        try:
            created: dict[str, Any] = self.custom.create_namespaced_custom_object(
                GROUP, VERSION, ref.namespace, RECOMMENDATIONS, body, field_manager=FIELD_MANAGER
            )
            LOG.info("created GPURecommendation %s/%s", ref.namespace, recommendation_name(ref))
            return created
        except ApiException as error:
            if error.status == 409:  # created concurrently by another event: read the winner's copy
                found = self.get_recommendation(ref)
                if found is not None:
                    return found
            raise

    def patch_recommendation_status(self, ref: WorkloadRef, status: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch the status subresource of the workload's GPURecommendation."""
        result: dict[str, Any] = self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, ref.namespace, RECOMMENDATIONS, recommendation_name(ref), {"status": dict(status)}
        )
        return result
