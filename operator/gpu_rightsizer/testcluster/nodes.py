"""Fake nodes that look like what NVIDIA GPU feature discovery (GFD) and the device plugin publish.

Labels and resource names follow the k8s-device-plugin / GFD READMEs (gpu-signals.md §3.4), so the
operator sees the same node shapes it would see on a real cluster. KWOK keeps these nodes Ready.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class GPUNodeModel:
    """One GPU product as GFD labels it."""

    product: str  # nvidia.com/gpu.product
    memory_mib: int  # nvidia.com/gpu.memory
    family: str  # nvidia.com/gpu.family
    mig_capable: bool = True


H100_80GB = GPUNodeModel("NVIDIA-H100-80GB-HBM3", 81559, "hopper")
H200 = GPUNodeModel("NVIDIA-H200", 143771, "hopper")
A100_80GB = GPUNodeModel("NVIDIA-A100-SXM4-80GB", 81920, "ampere")
A100_40GB = GPUNodeModel("NVIDIA-A100-SXM4-40GB", 40960, "ampere")
L4 = GPUNodeModel("NVIDIA-L4", 23034, "ada-lovelace", mig_capable=False)
GPU_MODELS: dict[str, GPUNodeModel] = {"h100": H100_80GB, "h200": H200, "a100": A100_80GB}

#: A mixed MIG layout per product, as `nvidia.com/mig.config` names such layouts: resource -> count
#: for a node of 8 GPUs. Chosen to offer every small profile the engine may recommend.
MIG_MIXED_LAYOUTS: dict[str, dict[str, int]] = {
    "NVIDIA-H200": {"nvidia.com/mig-1g.18gb": 28, "nvidia.com/mig-2g.35gb": 6, "nvidia.com/mig-3g.71gb": 2},
    "NVIDIA-H100-80GB-HBM3": {
        "nvidia.com/mig-1g.10gb": 28,
        "nvidia.com/mig-2g.20gb": 6,
        "nvidia.com/mig-3g.40gb": 2,
    },
    "NVIDIA-A100-SXM4-80GB": {
        "nvidia.com/mig-1g.10gb": 28,
        "nvidia.com/mig-2g.20gb": 6,
        "nvidia.com/mig-3g.40gb": 2,
    },
}


@dataclass(frozen=True)
class NodeSpec:
    """A fake node: a GPU model (or None for a CPU node), GPU count, CPU and memory, MIG layout."""

    name: str
    gpu: GPUNodeModel | None = None
    gpus: int = 8
    cpu: str = "128"
    memory: str = "1Ti"
    mig_mixed: bool = False
    extra_labels: dict[str, str] = field(default_factory=dict)
    #: MIG strategy single with every GPU cut into this profile (e.g. "1g.10gb", 7 per GPU).
    mig_single_profile: str | None = None
    #: Time-slicing replicas per GPU (0: none); shared GPUs stay `nvidia.com/gpu` with the product
    #: label suffixed `-SHARED` unless `rename_shared` (device plugin `renameByDefault: true`).
    time_slicing_replicas: int = 0
    rename_shared: bool = False
    #: The `nvidia.com/mig.strategy` GFD writes on a node without MIG slices: GFD labels every GPU node
    #: with the device plugin's configured strategy, and the GPU Operator's default is `single`.
    gfd_mig_strategy: str = "none"

    def manifest(self) -> dict[str, Any]:
        """The Node object, with status, ready for `kubectl apply`."""
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
            **self.extra_labels,
        }
        resources: dict[str, str] = {"cpu": self.cpu, "memory": self.memory, "pods": "110"}
        if self.gpu is not None:
            labels.update(
                {
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": self.gpu.product,
                    "nvidia.com/gpu.memory": str(self.gpu.memory_mib),
                    "nvidia.com/gpu.count": str(self.gpus),
                    "nvidia.com/gpu.family": self.gpu.family,
                    "nvidia.com/mig.capable": str(self.gpu.mig_capable).lower(),
                }
            )
            if self.mig_mixed:
                labels["nvidia.com/mig.strategy"] = "mixed"
                labels["nvidia.com/mig.config"] = "all-balanced"
                resources.update({k: str(v) for k, v in MIG_MIXED_LAYOUTS[self.gpu.product].items()})
            elif self.mig_single_profile:
                labels["nvidia.com/mig.strategy"] = "single"
                labels["nvidia.com/mig.config"] = f"all-{self.mig_single_profile}"
                labels["nvidia.com/gpu.product"] = f"{self.gpu.product}-MIG-{self.mig_single_profile}"
                resources["nvidia.com/gpu"] = str(
                    self.gpus * 7 // int(self.mig_single_profile.split("g.")[0])
                )
            elif self.time_slicing_replicas:
                labels["nvidia.com/mig.strategy"] = self.gfd_mig_strategy
                labels["nvidia.com/gpu.sharing-strategy"] = "time-slicing"
                labels["nvidia.com/gpu.replicas"] = str(self.time_slicing_replicas)
                shared = str(self.gpus * self.time_slicing_replicas)
                if self.rename_shared:
                    resources["nvidia.com/gpu.shared"] = shared
                else:
                    labels["nvidia.com/gpu.product"] = f"{self.gpu.product}-SHARED"
                    resources["nvidia.com/gpu"] = shared
            else:
                labels["nvidia.com/mig.strategy"] = self.gfd_mig_strategy
                resources["nvidia.com/gpu"] = str(self.gpus)
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            },
            "spec": {},
            "status": {
                "allocatable": resources,
                "capacity": resources,
                "nodeInfo": {
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "kubeletVersion": "fake",
                    "kernelVersion": "",
                    "osImage": "",
                    "containerRuntimeVersion": "",
                    "kubeProxyVersion": "",
                    "machineID": "",
                    "systemUUID": "",
                    "bootID": "",
                },
                "phase": "Running",
            },
        }


def sharing_pool_nodes() -> list[NodeSpec]:
    """Node pools for capacity tests, each shaped as GFD and the device plugin publish it: MIG single
    A100 80GB (1g.10gb), time-sliced L4 without renaming (`nvidia.com/gpu`, product `-SHARED`), and a
    time-sliced A100 40GB renamed to `nvidia.com/gpu.shared`. Whole-GPU pools and MIG mixed are in the
    default fleet."""
    return [
        NodeSpec("gpu-a100-mig-single-0", A100_80GB, mig_single_profile="1g.10gb"),
        NodeSpec("gpu-l4-ts-0", L4, gpus=4, time_slicing_replicas=4),
        NodeSpec("gpu-a100-40-ts-renamed-0", A100_40GB, gpus=4, time_slicing_replicas=4, rename_shared=True),
    ]


def default_nodes() -> list[NodeSpec]:
    """The default test fleet: whole-GPU H100, H200 and A100 nodes, a MIG-mixed H200, CPU nodes.

    Six H100 nodes (48 GPUs) because one test session keeps every test's workloads: with two, the
    later tests' pods stayed Pending for lack of GPUs.
    """
    return [
        *(NodeSpec(f"gpu-h100-{index}", H100_80GB) for index in range(6)),
        NodeSpec("gpu-h200-0", H200),
        NodeSpec("gpu-a100-0", A100_80GB),
        NodeSpec("gpu-h200-mig-0", H200, mig_mixed=True),
        NodeSpec("cpu-0", None, cpu="64", memory="256Gi"),
        NodeSpec("cpu-1", None, cpu="64", memory="256Gi"),
    ]


def gpu_operator_default_nodes() -> list[NodeSpec]:
    """An L4 fleet as a default GPU Operator install labels it: `mig.strategy=single` on every node (no
    GPU has MIG), one pool whole and one time-sliced ×4 without rename (`nvidia.com/gpu` ×16 on four
    GPUs, product `NVIDIA-L4-SHARED`)."""
    return [
        NodeSpec("gpu-l4-op-0", L4, gpus=4, gfd_mig_strategy="single"),
        NodeSpec("gpu-l4-op-ts-0", L4, gpus=4, time_slicing_replicas=4, gfd_mig_strategy="single"),
    ]
