"""Field ownership (pure): other field managers that own the fields we would change (never fought)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpu_rightsizer.actuator.plan import (
    CONTAINER_PATH,
    HPA_MAX_PATH,
    HPA_MIN_PATH,
    NODE_SELECTOR_PATH,
    REPLICAS_PATH,
)
from gpu_rightsizer.model.kinds import patch_template_path

FIELD_MANAGER = "gpu-rightsizer"

#: kubectl's one-shot imperative verbs: they hold no declared intent, so taking a field they last set
#: reverts nothing. Every other manager (client-side apply, Helm, Argo CD's `argocd-controller`,
#: Flux's `kustomize-controller`/`helm-controller`, any operator) owns its fields.
IMPERATIVE_MANAGERS = frozenset(
    {"kubectl-create", "kubectl-edit", "kubectl-patch", "kubectl-set", "kubectl-scale", "kubectl-replace"}
)

# --------------------------------------------------------------------------------------------------
# Field ownership
# --------------------------------------------------------------------------------------------------


def _fields_v1_has(fields: Mapping[str, Any], path: Sequence[str]) -> bool:
    current: Any = fields
    for key in path:
        if not isinstance(current, Mapping) or key not in current:
            return False
        current = current[key]
    return True


def _managed_key_paths(kind: str, path: str) -> list[str] | None:
    """The managedFields (fieldsV1) key path of a flat path, or None for paths outside the object."""
    if kind == "HorizontalPodAutoscaler":
        return ["f:spec", f"f:{path.removeprefix('hpa.')}"] if path in (HPA_MIN_PATH, HPA_MAX_PATH) else None
    template = patch_template_path(kind)
    if template is None:
        return None
    match = CONTAINER_PATH.match(path)
    if match:
        return [
            *[f"f:{p}" for p in template],
            "f:spec",
            "f:containers",
            f'k:{{"name":"{match["container"]}"}}',
            "f:resources",
            f"f:{match['section']}",
            f"f:{match['resource']}",
        ]
    match = NODE_SELECTOR_PATH.match(path)
    if match:
        return [*[f"f:{p}" for p in template], "f:spec", "f:nodeSelector", f"f:{match['key']}"]
    if path == REPLICAS_PATH:
        return ["f:spec", "f:replicas"]
    return None


def field_conflicts(workload: Mapping[str, Any], paths: Iterable[str]) -> dict[str, list[str]]:
    """Other field managers that own fields the change would set: manager -> paths.

    Any other manager is a conflict (a GitOps controller, Helm, an operator, client-side apply under
    any name such as Argo CD's `argocd-controller` or Flux's), except kubectl's one-shot imperative
    verbs, which hold no intent and revert nothing. The actuator reports conflicts instead of taking
    the fields.
    """
    kind = str(workload.get("kind", ""))
    owners: dict[str, list[str]] = {}
    for entry in (workload.get("metadata") or {}).get("managedFields") or []:
        manager = str(entry.get("manager", ""))
        if manager == FIELD_MANAGER:
            continue
        if manager in IMPERATIVE_MANAGERS and entry.get("operation") == "Update":
            continue
        fields = entry.get("fieldsV1") or {}
        for path in paths:
            key_path = _managed_key_paths(kind, path)
            if key_path is not None and _fields_v1_has(fields, key_path):
                owners.setdefault(manager, []).append(path)
    return owners


def conflict_reason(owners: Mapping[str, Sequence[str]]) -> str:
    """Status reason naming the managers whose fields the actuator will not take."""
    parts = [
        f"{', '.join(sorted(paths))} managed by {manager!r}" for manager, paths in sorted(owners.items())
    ]
    return (
        "field manager conflict: "
        + "; ".join(parts)
        + f" (owned there, so a change would be reverted or fought; let that manager cede the fields to "
        f"{FIELD_MANAGER!r}, e.g. Argo CD ignoreDifferences.managedFieldsManagers, or change the manifest)"
    )
