"""The actuator's change records (`GPURightsizingChange`, one per workload, named like its recommendation).

Only the actuator's identity may write them (chart RBAC). Every status write after the first carries
a resourceVersion precondition, so two writers never both think they advanced a change.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from gpu_rightsizer.adapters.backoff import with_backoff
from gpu_rightsizer.logic.workloads import recommendation_name
from gpu_rightsizer.model.change import GPURightsizingChange
from gpu_rightsizer.model.crd import GROUP, VERSION
from gpu_rightsizer.model.observation import WorkloadRef

LOG = logging.getLogger(__name__)

CHANGES = GPURightsizingChange.PLURAL
FIELD_MANAGER = "gpu-rightsizer"
#: Seconds any single call may take (a hung API server must not stall the actuator's loop).
REQUEST_TIMEOUT_SECONDS = 30


def readable_changes(listed: Iterable[Mapping[str, Any]]) -> list[GPURightsizingChange]:
    """The listed change records as models; one that does not parse is named in a warning and left
    out (its workload's step reads it again and refuses it), never half-read."""
    found: list[GPURightsizingChange] = []
    for raw in listed:
        try:
            found.append(GPURightsizingChange.model_validate(raw))
        except ValidationError as error:
            metadata = raw.get("metadata") if isinstance(raw, Mapping) else None
            where = "{namespace}/{name}".format_map(dict(metadata)) if isinstance(metadata, Mapping) else "?"
            first = error.errors()[0]
            LOG.warning(
                "GPURightsizingChange %s is unreadable (%s: %s): left out of this pass's budgets",
                where, ".".join(str(part) for part in first.get("loc", ())), first.get("msg"),
            )  # fmt: skip
    return found


class ChangeStore:
    """Reads and writes GPURightsizingChange objects through the custom-objects API."""

    def __init__(
        self, api_client: client.ApiClient | None = None, sleep: Callable[[float], None] = time.sleep
    ):
        self.custom = client.CustomObjectsApi(api_client)
        self.sleep = sleep

    def get_change(self, ref: WorkloadRef) -> dict[str, Any] | None:
        """The workload's change record, or None."""
        try:
            found = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, ref.namespace, CHANGES, recommendation_name(ref),
                _request_timeout=REQUEST_TIMEOUT_SECONDS,
            )  # fmt: skip
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return cast(dict[str, Any], found)

    def list_changes(self, namespaces: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        """The change records in `namespaces` (every namespace when empty; that needs cluster-wide read)."""
        if not namespaces:
            listed = self.custom.list_cluster_custom_object(
                GROUP, VERSION, CHANGES, _request_timeout=REQUEST_TIMEOUT_SECONDS
            )
            return list(cast(dict[str, Any], listed).get("items") or [])
        found: list[dict[str, Any]] = []
        for namespace in namespaces:
            listed = self.custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, CHANGES, _request_timeout=REQUEST_TIMEOUT_SECONDS
            )
            found.extend(cast(dict[str, Any], listed).get("items") or [])
        return found

    def create_change(self, ref: WorkloadRef, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Create the record (status empty); a 409 means it exists and is raised to the caller."""
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": GPURightsizingChange.KIND,
            "metadata": {
                "name": recommendation_name(ref),
                "namespace": ref.namespace,
                "labels": {"app.kubernetes.io/managed-by": "gpu-rightsizer"},
            },
            "spec": dict(spec),
        }
        created = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, ref.namespace, CHANGES, body, field_manager=FIELD_MANAGER,
            _request_timeout=REQUEST_TIMEOUT_SECONDS,
        )  # fmt: skip
        return cast(dict[str, Any], created)

    def patch_change(
        self, ref: WorkloadRef, body: Mapping[str, Any], *, resource_version: str | None, status: bool
    ) -> dict[str, Any]:
        """Merge-patch the record (spec) or its status subresource, conditional on `resource_version`."""
        patch: dict[str, Any] = dict(body)
        if resource_version is not None:
            patch["metadata"] = {"resourceVersion": resource_version}
        call = (
            self.custom.patch_namespaced_custom_object_status
            if status
            else self.custom.patch_namespaced_custom_object
        )
        patched = with_backoff(
            lambda: call(
                GROUP, VERSION, ref.namespace, CHANGES, recommendation_name(ref), patch,
                _request_timeout=REQUEST_TIMEOUT_SECONDS,
            ),
            what=f"change record of {ref.key}",
            sleep=self.sleep,
        )  # fmt: skip
        return cast(dict[str, Any], patched)
