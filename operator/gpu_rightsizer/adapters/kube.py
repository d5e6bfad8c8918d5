"""Thin Kubernetes I/O: resolve a pod's owning workload, read workloads, write GPURecommendations.

Everything here is a direct API call; decisions live in `gpu_rightsizer.logic`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from gpu_rightsizer.adapters.backoff import with_backoff
from gpu_rightsizer.adapters.owner_cache import OwnerCache
from gpu_rightsizer.adapters.owners import OwnerReader, resolve_pod
from gpu_rightsizer.logic.workloads import recommendation_name
from gpu_rightsizer.model.kinds import BUILT_IN, IN_PLACE_KINDS, KINDS, PATCHABLE_KINDS, WorkloadKind
from gpu_rightsizer.model.observation import WorkloadRef

LOG = logging.getLogger(__name__)

GROUP = "gpurightsizer.io"
VERSION = "v1alpha1"
RECOMMENDATIONS = "gpurecommendations"
POLICIES = "gpurightsizingpolicies"
FIELD_MANAGER = "gpu-rightsizer"

#: The error every Kubernetes call raises (status, reason, body), for the wings to catch: they do
#: not import the client themselves.
ApiError = ApiException

#: (connect, read) seconds every Kubernetes call may take unless it says otherwise. Without one, a
#: call to an API server that accepted the connection and then went silent waits forever, and the
#: cycle (or the lease renewal) waits with it.
REQUEST_TIMEOUT = (5.0, 30.0)


class TimedApiClient(client.ApiClient):
    """An ApiClient whose every call has a request timeout (`REQUEST_TIMEOUT` unless the call gives
    one): the generated API methods all send through `call_api`."""

    request_timeout: Any = REQUEST_TIMEOUT

    def call_api(
        self,
        method: Any,
        url: Any,
        header_params: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        timeout = self.request_timeout if _request_timeout is None else _request_timeout
        return super().call_api(method, url, header_params, body, post_params, _request_timeout=timeout)


def api_client() -> client.ApiClient:
    """A Kubernetes client with request timeouts, from the in-cluster service account, else from
    KUBECONFIG."""
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    return TimedApiClient()


@dataclass(frozen=True)
class ResolvedWorkload:
    """The top-level owner of a pod, with the uid the recommendation's ownerReference needs."""

    ref: WorkloadRef
    uid: str
    obj: Mapping[str, Any]


class _ListedMeta(msgspec.Struct, rename="camel"):
    """ObjectMeta without `managedFields`, which nothing that lists reads: a status-patched object's
    field-manager trees were most of the decoded bytes of a cycle's recommendation LIST. Fields the
    object does not have stay UNSET and are left out of the dict (`msgspec.to_builtins`)."""

    name: Any = msgspec.UNSET
    generate_name: Any = msgspec.UNSET
    namespace: Any = msgspec.UNSET
    self_link: Any = msgspec.UNSET
    uid: Any = msgspec.UNSET
    resource_version: Any = msgspec.UNSET
    generation: Any = msgspec.UNSET
    creation_timestamp: Any = msgspec.UNSET
    deletion_timestamp: Any = msgspec.UNSET
    deletion_grace_period_seconds: Any = msgspec.UNSET
    labels: Any = msgspec.UNSET
    annotations: Any = msgspec.UNSET
    owner_references: Any = msgspec.UNSET
    finalizers: Any = msgspec.UNSET


class _ListedObject(msgspec.Struct, rename="camel"):
    api_version: Any = msgspec.UNSET
    kind: Any = msgspec.UNSET
    metadata: _ListedMeta | msgspec.UnsetType = msgspec.UNSET
    spec: Any = msgspec.UNSET
    status: Any = msgspec.UNSET


class _ListAnswer(msgspec.Struct):
    items: list[_ListedObject] | None = None


_LIST_DECODER = msgspec.json.Decoder(_ListAnswer)


def listed_objects(data: bytes) -> list[dict[str, Any]]:
    """The items of a LIST answer as plain JSON objects, each without `metadata.managedFields`.

    Decoded with a typed schema (msgspec, as the Prometheus answers are), so the field-manager trees
    are skipped, never built as Python objects. An answer that is not a Kubernetes list raises
    `ValueError` naming what is wrong."""
    try:
        answer = _LIST_DECODER.decode(data)
    except msgspec.DecodeError as error:
        raise ValueError(f"the API server's LIST answer could not be read: {error}") from error
    return [msgspec.to_builtins(item) for item in answer.items or []]


def _listed_items(lister: Callable[..., Any], *args: Any) -> list[dict[str, Any]]:
    """The items of a LIST as the API server sent them (JSON objects, without `managedFields`),
    without the typed client models.

    Why: building the typed models of a thousand Deployments (then turning them back into plain
    dicts) took the Python client ~1.7 s of the GIL per kind and cycle; decoding the JSON takes ~0.06 s.
    Errors still raise `ApiException`.
    """
    return listed_objects(lister(*args, _preload_content=False).data)


def _as_dict(value: object) -> dict[str, Any]:
    """A custom-objects API answer, which the client types as `object`, as the dict it is."""
    if not isinstance(value, dict):
        raise TypeError(f"expected a JSON object from the API server, got {type(value).__name__}")
    return value


class KubeAdapter:
    """Kubernetes reads and writes the operator needs, on one ApiClient."""

    def __init__(self, api_client: client.ApiClient | None = None) -> None:
        self.api_client = api_client or TimedApiClient()
        self.core = client.CoreV1Api(self.api_client)
        self.apps = client.AppsV1Api(self.api_client)
        self.batch = client.BatchV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        #: How retries of throttled writes wait (tests replace it).
        self.sleep: Callable[[float], None] = time.sleep
        #: Owners kept up to date by watch events (set by the recommender, which feeds it).
        self.owner_cache: OwnerCache | None = None
        #: Field manager of the recommendation status writes (a sharded recommender names its shard,
        #: so managedFields tell which one wrote a status); None: the client's default.
        self.status_field_manager: str | None = None

    def _plain(self, obj: Any) -> Any:
        """A client model as the plain JSON-like structure the API server sent."""
        return self.api_client.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]

    def _typed(self, kind: WorkloadKind) -> Any:
        """The typed client of a built-in kind's API group."""
        return {"": self.core, "apps": self.apps, "batch": self.batch}[kind.group]

    def _call(self, verb: str, name: str, *, cluster_wide: bool = False) -> Callable[..., Any]:
        """A built-in kind's typed-client method: `read_namespaced_deployment`,
        `list_deployment_for_all_namespaces`, ... (`model.kinds` names the client)."""
        kind = BUILT_IN.get(name)
        if kind is None:
            raise ValueError(f"cannot {verb} {name} objects")
        method = (
            f"{verb}_{kind.client}_for_all_namespaces" if cluster_wide else f"{verb}_namespaced_{kind.client}"
        )
        return getattr(self._typed(kind), method)  # type: ignore[no-any-return]

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """Read a workload object as a plain dict; None when it does not exist (or is no built-in kind)."""
        if kind not in BUILT_IN:
            return None
        try:
            obj = self._call("read", kind)(name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        result: dict[str, Any] = self._plain(obj)
        result.setdefault("kind", kind)
        result.setdefault("apiVersion", BUILT_IN[kind].api_version)
        return result

    def read_target(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """A workload the actuator acts on: a built-in kind, or a custom kind whose pods it resizes in
        place (a PyTorchJob, ...), read through the custom-objects API; None when it does not exist."""
        row = KINDS.get(kind)
        if row is None or row.built_in or kind not in IN_PLACE_KINDS:
            return self.read(kind, namespace, name)
        try:
            found: dict[str, Any] = self.custom.get_namespaced_custom_object(  # type: ignore[assignment]
                row.group, row.version, namespace, row.plural, name
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return found

    def read_owner(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """An owner for the owner walk: from `owner_cache` when watch events feed one (a slim copy:
        identity, controller reference, labels, annotations, replicas), else read from the API."""
        cache = self.owner_cache
        if cache is None:
            return self.read(kind, namespace, name)
        found, _ = cache.lookup_through(lambda _v, k, ns, n: (self.read(k, ns, n), False))(
            "", kind, namespace, name
        )
        return found

    def resolve_owner(self, pod: Mapping[str, Any]) -> ResolvedWorkload:
        """The pod's top-level owner, through any controller kind (see `logic.owners`)."""
        top, obj, _ = resolve_pod(OwnerReader(self, owners_only=True), pod)
        namespace = str((pod.get("metadata") or {}).get("namespace", "default"))
        ref = WorkloadRef(namespace=namespace, kind=top.kind, name=top.name, api_version=top.api_version)
        return ResolvedWorkload(ref=ref, uid=str((obj.get("metadata") or {}).get("uid") or top.uid), obj=obj)

    def get_recommendation(self, ref: WorkloadRef) -> dict[str, Any] | None:
        """The workload's GPURecommendation, or None."""
        try:
            obj: dict[str, Any] = self.custom.get_namespaced_custom_object(  # type: ignore[assignment]
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
            created = _as_dict(
                self.custom.create_namespaced_custom_object(
                    GROUP, VERSION, ref.namespace, RECOMMENDATIONS, body, field_manager=FIELD_MANAGER
                )
            )
            LOG.info("created GPURecommendation %s/%s", ref.namespace, recommendation_name(ref))
            return created
        except ApiException as error:
            if error.status == 409:  # created concurrently by another event: read the winner's copy
                found = self.get_recommendation(ref)
                if found is not None:
                    return found
            raise

    def patch_recommendation_status(
        self, ref: WorkloadRef, status: Mapping[str, Any], *, resource_version: str | None = None
    ) -> dict[str, Any]:
        """Merge-patch the status subresource of the workload's GPURecommendation.

        With `resource_version`, the write is conditional: the API server answers 409 when the object
        changed since that version was read (optimistic concurrency, no lost update). Retried on 429
        (after the server's Retry-After) and 5xx: a large cycle writes many statuses from a few
        threads, and an API server under load asks them to slow down.
        """
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        manager: dict[str, Any] = (
            {"field_manager": self.status_field_manager} if self.status_field_manager else {}
        )
        return _as_dict(
            with_backoff(
                lambda: self.custom.patch_namespaced_custom_object_status(
                    GROUP, VERSION, ref.namespace, RECOMMENDATIONS, recommendation_name(ref), body, **manager
                ),
                what=f"status of {ref.key}",
                sleep=self.sleep,
            )
        )

    # ----------------------------------------------------------------------------------------------
    # Recommendations, policies, namespaces, events
    # ----------------------------------------------------------------------------------------------

    def list_recommendations(self, namespaces: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        """Every GPURecommendation (in `namespaces` when given, else cluster-wide)."""
        if namespaces:
            return [
                item
                for namespace in namespaces
                for item in _listed_items(
                    self.custom.list_namespaced_custom_object, GROUP, VERSION, namespace, RECOMMENDATIONS
                )
            ]
        return _listed_items(self.custom.list_cluster_custom_object, GROUP, VERSION, RECOMMENDATIONS)

    def delete_recommendation(self, ref: WorkloadRef) -> bool:
        """Delete the workload's GPURecommendation; False when there was none."""
        try:
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, ref.namespace, RECOMMENDATIONS, recommendation_name(ref)
            )
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        LOG.info("deleted GPURecommendation %s/%s", ref.namespace, recommendation_name(ref))
        return True

    def list_policies(self) -> list[dict[str, Any]]:
        """Every GPURightsizingPolicy as stored (parsing is the caller's business)."""
        return _listed_items(self.custom.list_cluster_custom_object, GROUP, VERSION, POLICIES)

    def patch_policy_status(self, name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch a policy's status subresource (retried on 429 and 5xx, as recommendations are)."""
        with_backoff(
            lambda: self.custom.patch_cluster_custom_object_status(
                GROUP, VERSION, POLICIES, name, {"status": dict(status)}
            ),
            what=f"status of policy {name}",
            sleep=self.sleep,
        )

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        """Labels of a namespace ({} when it is gone)."""
        try:
            found = self.core.read_namespace(namespace)
        except ApiException as error:
            if error.status == 404:
                return {}
            raise
        return dict((found.metadata.labels if found.metadata else None) or {})

    def list_workloads(
        self, kind: str, namespaces: tuple[str, ...] = ()
    ) -> dict[tuple[str, str], dict[str, Any]]:
        """Every workload of `kind` (in `namespaces` when given, else cluster-wide) by (namespace, name).

        One LIST per kind and namespace instead of one GET per workload; items carry kind and
        apiVersion as `read` returns them.
        """
        namespaced, cluster_wide = self._call("list", kind), self._call("list", kind, cluster_wide=True)
        listed = (
            [item for namespace in namespaces for item in _listed_items(namespaced, namespace)]
            if namespaces
            else _listed_items(cluster_wide)
        )
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for result in listed:
            result.setdefault("kind", kind)
            result.setdefault("apiVersion", BUILT_IN[kind].api_version)
            metadata = result.get("metadata") or {}
            found[(str(metadata.get("namespace")), str(metadata.get("name")))] = result
        return found

    def list_hpas(self, namespaces: tuple[str, ...] = ()) -> dict[tuple[str, str, str], dict[str, Any]]:
        """HorizontalPodAutoscalers by the (namespace, kind, name) they scale, in `namespaces` when given
        (the namespaced RBAC of a namespace-scoped install), else cluster-wide; the first per target wins,
        as in `hpa_for`."""
        autoscaling = client.AutoscalingV2Api(self.api_client)
        listed = (
            [
                item
                for namespace in namespaces
                for item in _listed_items(autoscaling.list_namespaced_horizontal_pod_autoscaler, namespace)
            ]
            if namespaces
            else _listed_items(autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces)
        )
        found: dict[tuple[str, str, str], dict[str, Any]] = {}
        for plain in listed:
            target = (plain.get("spec") or {}).get("scaleTargetRef") or {}
            namespace = (plain.get("metadata") or {}).get("namespace")
            found.setdefault((str(namespace), str(target.get("kind")), str(target.get("name"))), plain)
        return found

    def hpa_for(self, ref: WorkloadRef) -> dict[str, Any] | None:
        """The HorizontalPodAutoscaler that scales the workload, if any."""
        autoscaling = client.AutoscalingV2Api(self.api_client)
        listed = autoscaling.list_namespaced_horizontal_pod_autoscaler(ref.namespace)
        for item in listed.items:
            target = item.spec.scale_target_ref
            if target.kind == ref.kind and target.name == ref.name:
                result: dict[str, Any] = self._plain(item)
                return result
        return None

    def pods_of(self, workload: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The workload's current pods (by its selector), as plain dicts."""
        metadata = workload.get("metadata") or {}
        selector = ((workload.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        if not selector:
            return []
        label_selector = ",".join(f"{key}={value}" for key, value in sorted(selector.items()))
        listed = self.core.list_namespaced_pod(str(metadata.get("namespace")), label_selector=label_selector)
        return [self._plain(pod) for pod in listed.items]

    def owned_pods(self, workload: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The pods whose controller is this workload (by uid), the pod itself for a bare pod, and a
        Deployment's or StatefulSet's pods by its selector (a Deployment's are owned by ReplicaSets)."""
        metadata = workload.get("metadata") or {}
        if workload.get("kind") == "Pod":
            return [dict(workload)]
        if workload.get("kind") in ("Deployment", "StatefulSet"):
            return self.pods_of(workload)
        uid = metadata.get("uid")
        listed = self.core.list_namespaced_pod(str(metadata.get("namespace")))
        pods = [self._plain(pod) for pod in listed.items]
        return [
            pod
            for pod in pods
            if any(
                ref.get("uid") == uid and ref.get("controller")
                for ref in (pod.get("metadata") or {}).get("ownerReferences") or []
            )
        ]

    def list_nodes(self) -> list[dict[str, Any]]:
        """Every node as plain JSON (without managedFields): read each cycle for the pools' capacity,
        so not through the typed client models (`_listed_items`)."""
        return _listed_items(self.core.list_node)

    def read_node(self, name: str) -> dict[str, Any] | None:
        """A node as a plain dict; None when it does not exist."""
        try:
            node: dict[str, Any] = self._plain(self.core.read_node(name))
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return node

    def pods_on_node(self, name: str) -> list[dict[str, Any]]:
        """Every pod bound to a node, in every namespace (what its allocatable CPU is shared by)."""
        listed = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}")
        return [self._plain(pod) for pod in listed.items]

    def resize_pod(
        self, namespace: str, name: str, body: Mapping[str, Any], *, uid: str | None = None
    ) -> dict[str, Any]:
        """Resize a running pod in place through `pods/resize` (field manager `gpu-rightsizer`); with
        `uid`, only that pod (a pod recreated under the same name is not touched)."""
        patch = dict(body)
        if uid is not None:
            patch["metadata"] = {"uid": uid}
        result: dict[str, Any] = self._plain(
            self.core.patch_namespaced_pod_resize(
                name, namespace, patch, field_manager=FIELD_MANAGER,
                _content_type="application/strategic-merge-patch+json",
            )
        )  # fmt: skip
        return result

    def post_event(
        self, ref: WorkloadRef, uid: str, reason: str, message: str, *, warning: bool = False
    ) -> None:
        """A Kubernetes Event on the workload (what `kubectl describe` shows); failures are only logged."""
        now = datetime.now(UTC)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{ref.name}.", namespace=ref.namespace),
            involved_object=client.V1ObjectReference(
                api_version=ref.api_version,
                kind=ref.kind,
                name=ref.name,
                namespace=ref.namespace,
                uid=uid or None,
            ),
            reason=reason,
            message=message[:1024],
            type="Warning" if warning else "Normal",
            source=client.V1EventSource(component=FIELD_MANAGER),
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            reporting_component=FIELD_MANAGER,
            reporting_instance=FIELD_MANAGER,
        )
        try:
            self.core.create_namespaced_event(ref.namespace, body)
        except ApiException as error:
            LOG.warning("could not post event %s on %s: %s", reason, ref.key, error.reason)

    # ----------------------------------------------------------------------------------------------
    # Workload writes (actuator only)
    # ----------------------------------------------------------------------------------------------

    def _patcher(self, kind: str) -> Any:
        if kind not in PATCHABLE_KINDS:
            raise ValueError(f"the actuator does not patch {kind} objects")
        return self._call("patch", kind)

    def strategic_patch(
        self, ref: WorkloadRef, body: Mapping[str, Any], *, resource_version: str | None = None
    ) -> dict[str, Any]:
        """Strategic-merge patch as field manager `gpu-rightsizer`, conditional on `resource_version`
        when given (409 when the workload changed since it was read); returns the patched object."""
        patch = dict(body)
        if resource_version is not None:
            patch["metadata"] = {**dict(patch.get("metadata") or {}), "resourceVersion": resource_version}
        result: dict[str, Any] = self._plain(
            self._patcher(ref.kind)(
                ref.name, ref.namespace, patch, field_manager=FIELD_MANAGER,
                _content_type="application/strategic-merge-patch+json",
            )
        )  # fmt: skip
        return result

    def list_pdbs(self, namespace: str) -> list[dict[str, Any]]:
        """PodDisruptionBudgets of a namespace, as plain dicts."""
        listed = client.PolicyV1Api(self.api_client).list_namespaced_pod_disruption_budget(namespace)
        return [self._plain(item) for item in listed.items]

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Delete one pod, only if it is still the same pod (uid precondition)."""
        self.core.delete_namespaced_pod(
            name, namespace, body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid))
        )

    def patch_hpa(
        self, namespace: str, name: str, body: Mapping[str, Any], *, resource_version: str | None = None
    ) -> None:
        """Merge-patch a HorizontalPodAutoscaler's bounds; with `resource_version`, only if the HPA is
        still the version the field-owner check saw (409 otherwise)."""
        patch = dict(body)
        if resource_version is not None:
            patch["metadata"] = {"resourceVersion": resource_version}
        client.AutoscalingV2Api(self.api_client).patch_namespaced_horizontal_pod_autoscaler(
            name, namespace, patch, field_manager=FIELD_MANAGER,
            _content_type="application/merge-patch+json",
        )  # fmt: skip


class LeaseElector:
    """Leader election on a coordination.k8s.io Lease: exactly one actuator acts at a time.

    As client-go does, only locally observed times count, never the clock of the process that wrote
    the lease: another holder's lease is valid until `duration` has passed on *our* monotonic clock
    since we last saw its record change, and our own leadership lasts until `duration` (less a safety
    margin) after our last successful renewal was *sent*. Optimistic concurrency (resourceVersion)
    decides races. Clock skew between hosts therefore cannot make two holders.
    """

    def __init__(
        self,
        kube: KubeAdapter,
        *,
        name: str,
        namespace: str,
        identity: str,
        duration_seconds: int = 15,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.coordination = client.CoordinationV1Api(kube.api_client)
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.duration = timedelta(seconds=duration_seconds)
        self._clock = clock
        self._renewed_at: float | None = None
        #: (holder, renewTime as written, resourceVersion) we last saw, and when (our clock).
        self._observed: tuple[str | None, str | None, str | None] | None = None
        self._observed_at: float = 0.0

    def is_leader(self) -> bool:
        """True while our last renewal, by our clock, is younger than 80 % of the lease duration."""
        if self._renewed_at is None:
            return False
        return self._clock() - self._renewed_at < self.duration.total_seconds() * 0.8

    def _observe(self, lease: client.V1Lease, now: float) -> None:
        spec = lease.spec or client.V1LeaseSpec()
        record = (
            spec.holder_identity,
            None if spec.renew_time is None else str(spec.renew_time),
            (lease.metadata.resource_version if lease.metadata else None),
        )
        if record != self._observed:
            self._observed = record
            self._observed_at = now

    def try_acquire(self) -> bool:
        """Take or renew the lease; False when another holder's lease is still valid."""
        started = self._clock()
        wall = datetime.now(UTC)
        spec = client.V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=int(self.duration.total_seconds()),
            renew_time=wall,
            acquire_time=wall,
        )
        try:
            lease = self.coordination.read_namespaced_lease(self.name, self.namespace)
        except ApiException as error:
            if error.status != 404:
                raise
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace), spec=spec
            )
            try:
                self.coordination.create_namespaced_lease(self.namespace, body)
            except ApiException as create_error:
                if create_error.status == 409:
                    return False
                raise
            self._renewed_at = started
            return True
        self._observe(lease, started)
        current = lease.spec or client.V1LeaseSpec()
        holder = current.holder_identity
        duration = float(current.lease_duration_seconds or self.duration.total_seconds())
        if holder and holder != self.identity and started - self._observed_at < duration:
            self._renewed_at = None
            return False
        if holder == self.identity and current.acquire_time is not None:
            spec.acquire_time = current.acquire_time
        lease.spec = spec
        try:
            self.coordination.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as error:
            if error.status == 409:  # someone else wrote first
                self._renewed_at = None
                return False
            raise
        self._renewed_at = started
        return True

    def release(self) -> None:
        """Give the lease up on shutdown so a standby takes over at once."""
        if self._renewed_at is None:
            return
        self._renewed_at = None
        try:
            lease = self.coordination.read_namespaced_lease(self.name, self.namespace)
            if lease.spec is not None and lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = None
                lease.spec.renew_time = None
                self.coordination.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as error:
            LOG.warning("could not release lease %s: %s", self.name, error.reason)
