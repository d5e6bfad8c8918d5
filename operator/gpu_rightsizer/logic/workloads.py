"""Pure helpers on pod and workload manifests: which pods use GPUs, and what they ask for.

They take plain dicts (as the Kubernetes API returns them) so the same code serves the operator,
the simulator and the tests without any client library.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpu_rightsizer.model.crd import IGNORE_ANNOTATION
from gpu_rightsizer.model.observation import Allocation, WorkloadRef

#: Extended resources that mean "this pod uses an NVIDIA GPU or a part of one". MIG resources as the device
#: plugin advertises them: '+' in a profile is written '.', so 'mig-1g.10gb.me', and Blackwell adds
#: 'mig-1g.24gb.gfx', 'mig-1g.24gb.me.all' and 'mig-1g.24gb-me' (k8s-device-plugin internal/rm/rm.go;
#: gpu-operator assets/state-mig-manager/0400_configmap.yaml); compute-instance profiles put the CI
#: count first, 'mig-1c.3g.20gb' (go-nvlib pkg/nvlib/device/mig_profile.go).
GPU_RESOURCE_PATTERN = re.compile(
    r"^nvidia\.com/(gpu|gpu\.shared|mig-(?:[1-7]c\.)?[1-7]g\.[0-9]+gb(?:[.-][a-z][a-z0-9]*)*)$"
)

_MEM_UNITS = {
    "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "m": 1e-3,
}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


class QuantityError(ValueError):
    """A Kubernetes quantity string that does not parse."""


def parse_quantity(value: str | int | float) -> float:
    """Parse a Kubernetes quantity ('500m', '2', '16Gi', '1e3') into a float in base units."""
    if isinstance(value, int | float):
        return float(value)
    match = _QUANTITY.match(value.strip())
    if not match or match.group(2) not in _MEM_UNITS:
        raise QuantityError(f"not a Kubernetes quantity: {value!r}")
    return float(match.group(1)) * _MEM_UNITS[match.group(2)]


def format_cpu(cores: float) -> str:
    """Cores as a Kubernetes CPU quantity: whole cores as '4', fractions in millicores '1500m'."""
    millis = round(cores * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def format_memory(num_bytes: float) -> str:
    """Bytes as a Kubernetes memory quantity in Mi (or Gi when whole)."""
    mib = round(num_bytes / 2**20)
    return f"{mib // 1024}Gi" if mib % 1024 == 0 and mib else f"{mib}Mi"


def gpu_resources(pod_spec: Mapping[str, Any]) -> dict[str, int]:
    """GPU resources the pod asks for (limits, as the device plugin requires), summed over containers."""
    totals: dict[str, int] = {}
    for container in pod_spec.get("containers", []) or []:
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        requests = resources.get("requests") or {}
        for name in set(limits) | set(requests):
            if GPU_RESOURCE_PATTERN.match(name):
                amount = int(parse_quantity(limits.get(name, requests.get(name, 0))))
                if amount > 0:
                    totals[name] = totals.get(name, 0) + amount
    return totals


def requests_gpu(pod: Mapping[str, Any]) -> bool:
    """True when any container of the pod asks for a GPU resource."""
    return bool(gpu_resources(pod.get("spec") or {}))


def is_ignored(obj: Mapping[str, Any]) -> bool:
    """True when the object carries the opt-out annotation."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(IGNORE_ANNOTATION, "")).lower() == "true"


def target_of(obj: Mapping[str, Any]) -> WorkloadRef:
    """The workload a GPURecommendation or a GPURightsizingChange targets (`spec.targetRef`)."""
    target = (obj.get("spec") or {}).get("targetRef") or {}
    return WorkloadRef(
        namespace=str((obj.get("metadata") or {}).get("namespace")),
        kind=str(target.get("kind")),
        name=str(target.get("name")),
        api_version=str(target.get("apiVersion", "apps/v1")),
    )


def recommendation_name(ref: WorkloadRef) -> str:
    """Name of the GPURecommendation for a workload: kind and name, so kinds never collide."""
    name = f"{ref.kind.lower()}-{ref.name}"
    return name[:253]


def resources_of(pod_spec: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a pod spec `allocation_from_pod_spec` reads: each container's name and resources.

    Why: the recommender keeps a pod spec per known workload for the rest of its life (to make the
    recommendation's first status again when it is deleted); a whole spec (volumes, env, probes,
    tolerations) is many times this."""
    return {
        "containers": [
            {"name": container.get("name"), "resources": container.get("resources") or {}}
            for container in pod_spec.get("containers", []) or []
            if isinstance(container, Mapping)
        ]
    }


def _container_sum(pod_spec: Mapping[str, Any], section: str, resource: str) -> float | None:
    total, seen = 0.0, False
    for container in pod_spec.get("containers", []) or []:
        value = ((container.get("resources") or {}).get(section) or {}).get(resource)
        if value is not None:
            total += parse_quantity(value)
            seen = True
    return total if seen else None


def pod_cpu_cores(pod_spec: Mapping[str, Any]) -> float | None:
    """A pod's CPU as its allocation gives it (`cpu_limit_cores`, else `cpu_request_cores`): the CPU
    limits of its containers summed, else their requests; what CPU use is measured against."""
    return _container_sum(pod_spec, "limits", "cpu") or _container_sum(pod_spec, "requests", "cpu")


def allocation_from_pod_spec(
    pod_spec: Mapping[str, Any],
    *,
    replicas: int = 1,
    node_labels: Mapping[str, str] | None = None,
) -> Allocation:
    """What one pod of the workload is allocated, from its spec and (optionally) its node's GFD labels."""
    gpus = gpu_resources(pod_spec)
    resource, count = next(iter(sorted(gpus.items())), ("nvidia.com/gpu", 0))
    mig_match = re.match(r"^nvidia\.com/mig-(.+)$", resource)
    labels = node_labels or {}
    memory = labels.get("nvidia.com/gpu.memory")
    sharing = "mig" if mig_match else ("time-slicing" if resource.endswith(".shared") else "exclusive")
    return Allocation(
        gpu_resource=resource,
        gpu_count=count,
        gpu_model=labels.get("nvidia.com/gpu.product"),
        gpu_memory_mib=float(memory) if memory and not mig_match else None,
        mig_profile=mig_match.group(1) if mig_match else None,
        sharing=sharing,
        cpu_request_cores=_container_sum(pod_spec, "requests", "cpu"),
        cpu_limit_cores=_container_sum(pod_spec, "limits", "cpu"),
        memory_request_bytes=_container_sum(pod_spec, "requests", "memory"),
        memory_limit_bytes=_container_sum(pod_spec, "limits", "memory"),
        replicas=replicas,
    )
