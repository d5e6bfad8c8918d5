"""Pod UID → namespace/pod/container names from the Kubernetes API (optional for the agent).

Lists the pods of this node only (`spec.nodeName` field selector), and refreshes the list at most once
per `min_refresh_seconds` when an unknown UID shows up, so a node with churning pods costs one LIST
per interval at most.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from gpu_rightsizer.agent.cgroups import PodIdentity, container_name_from_statuses

log = logging.getLogger(__name__)


class KubernetesPodDirectory:
    """`PodDirectory` backed by a LIST of the node's pods through the kubernetes client."""

    def __init__(
        self,
        node_name: str,
        core_api: Any | None = None,
        min_refresh_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if core_api is None:
            from kubernetes import client, config

            try:
                config.load_incluster_config()  # type: ignore[no-untyped-call]
            except config.ConfigException:
                config.load_kube_config()  # type: ignore[no-untyped-call]
            core_api = client.CoreV1Api()
        self._api = core_api
        self._node_name = node_name
        self._min_refresh = min_refresh_seconds
        self._clock = clock
        self._last_refresh: float | None = None
        self._pods: dict[str, tuple[str, str, list[tuple[str, str | None]]]] = {}

    def _refresh(self) -> None:
        now = self._clock()
        if self._last_refresh is not None and now - self._last_refresh < self._min_refresh:
            return
        self._last_refresh = now
        try:
            pods = self._api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self._node_name}")
        except Exception as exc:  # the API being down must not stop the exporter
            log.warning("cannot list pods of node %s: %s", self._node_name, exc)
            return
        table: dict[str, tuple[str, str, list[tuple[str, str | None]]]] = {}
        for pod in pods.items:
            meta = pod.metadata
            if meta is None or not meta.uid:
                continue
            statuses = [
                (status.name, status.container_id)
                for status in (getattr(pod.status, "container_statuses", None) or [])
            ]
            table[str(meta.uid)] = (str(meta.namespace or ""), str(meta.name or ""), statuses)
        self._pods = table

    def lookup(self, pod_uid: str, container_id: str | None) -> PodIdentity | None:
        if pod_uid not in self._pods:
            self._refresh()
        entry = self._pods.get(pod_uid)
        if entry is None:
            return None
        namespace, name, statuses = entry
        return PodIdentity(
            pod_uid=pod_uid,
            namespace=namespace,
            pod=name,
            container=container_name_from_statuses(statuses, container_id),
            container_id=container_id,
        )
