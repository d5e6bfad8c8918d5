"""Manifests of simulated GPU workloads for end-to-end tests.

The `sim.gpurightsizer.io/scenario` pod annotation tells the live metrics simulator how the pod
behaves; everything else is an ordinary Deployment as users write them.
"""

from __future__ import annotations

from typing import Any

SCENARIO_ANNOTATION = "sim.gpurightsizer.io/scenario"


def gpu_deployment(
    name: str,
    namespace: str,
    *,
    scenario: str = "healthy",
    gpu_resource: str = "nvidia.com/gpu",
    gpus: int = 1,
    cpu: str = "1",
    memory: str = "8Gi",
    replicas: int = 1,
    product: str | None = "NVIDIA-H100-80GB-HBM3",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    cpu_resize_policy: str | None = "RestartContainer",
) -> dict[str, Any]:
    """A Deployment whose pods ask for GPUs and land on a fake node of the given GPU product.

    `cpu_resize_policy` is the container's `resizePolicy` for CPU. RestartContainer (the default
    here) makes a CPU raise take the pod-template path, with its rollouts and rollbacks, which most
    tests exercise; NotRequired (Kubernetes' default, also when None leaves the field out) lets the
    actuator resize the running pods in place."""
    selector = {"app": name}
    node_selector = {"nvidia.com/gpu.product": product} if product else {}
    resize = [{"resourceName": "cpu", "restartPolicy": cpu_resize_policy}] if cpu_resize_policy else []
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {**selector, **(labels or {})},
                     "annotations": annotations or {}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector, "annotations": {SCENARIO_ANNOTATION: scenario}},
                "spec": {
                    "nodeSelector": node_selector,
                    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.example/gpu-app:1.0",
                            "resources": {
                                "requests": {"cpu": cpu, "memory": memory, gpu_resource: str(gpus)},
                                "limits": {"cpu": cpu, "memory": memory, gpu_resource: str(gpus)},
                            },
                            **({"resizePolicy": resize} if resize else {}),
                        }
                    ],
                },
            },
        },
    }  # fmt: skip


def gpu_statefulset(name: str, namespace: str, **options: Any) -> dict[str, Any]:
    """The same workload as a StatefulSet (one ordinal at a time, OrderedReady)."""
    manifest = gpu_deployment(name, namespace, **options)
    manifest["kind"] = "StatefulSet"
    manifest["spec"]["serviceName"] = name
    return manifest
