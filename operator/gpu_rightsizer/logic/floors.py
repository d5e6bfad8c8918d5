"""Idle floors per platform: what GR and PCIe read on a GPU that no pod holds, per node and model.

An idle GPU does not read 0 everywhere. The driver and DCGM's own polling move a few MB/s over PCIe and
keep the graphics engine a fraction of a percent busy, and how much depends on the platform: an idle
H200 reads GR ≈ 0.00006 and ≈ 1 MB/s, an idle RTX 4000 Ada on LKE GR ≈ 0.005 and 78/46 MB/s
(docs/clusters.md "Idle floors"). The engine's idle rule (logic/rules/idle.py) takes the floor of the
workload's own node and model as input: `idle_gr_floor`, and `idle_transfer_bytes_per_s` raised to the
floor's traffic. The floors are learned from GPUs that no pod holds on that node (dcgm-exporter series
with no pod), so a node without a free GPU gives none, and the fixed thresholds apply.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.observation import WorkloadWindow

#: A learned floor is raised by this factor before it is compared: noise around the floor stays idle.
FLOOR_MARGIN = 1.5


@dataclass(frozen=True)
class UnheldGPU:
    """The window's maxima of one GPU that no pod held (one row of the adapter's query)."""

    node: str
    model: str
    gr_max: float | None
    transfer_bytes_max: float | None  # largest PCIe direction, bytes/s


@dataclass(frozen=True)
class IdleFloor:
    """The idle floor of one node and GPU model: the highest reading of its unheld GPUs."""

    node: str
    model: str
    gr: float | None
    transfer_bytes_per_s: float | None
    gpus: int


IdleFloors = Mapping[tuple[str, str], IdleFloor]


def _model_key(model: str | None) -> str:
    """modelName (`NVIDIA RTX 4000 Ada Generation`) and GFD product (`NVIDIA-RTX-4000-Ada-Generation`) alike."""
    return (model or "").replace(" ", "-").upper()


def _highest(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None and math.isfinite(v) and v >= 0]
    return max(present) if present else None


def learn_idle_floors(unheld: Iterable[UnheldGPU]) -> dict[tuple[str, str], IdleFloor]:
    """One floor per (node, model) from the GPUs no pod held through the window."""
    grouped: dict[tuple[str, str], list[UnheldGPU]] = {}
    for gpu in unheld:
        if gpu.node and gpu.model:
            grouped.setdefault((gpu.node, _model_key(gpu.model)), []).append(gpu)
    return {
        key: IdleFloor(
            node=key[0],
            model=key[1],
            gr=_highest(g.gr_max for g in gpus),
            transfer_bytes_per_s=_highest(g.transfer_bytes_max for g in gpus),
            gpus=len(gpus),
        )
        for key, gpus in grouped.items()
    }


def floor_for(floors: IdleFloors, window: WorkloadWindow) -> IdleFloor | None:
    """The floor that applies to every GPU of the window: the highest over its nodes and models, and
    None unless each GPU's node and model has one (a floor learned elsewhere says nothing here)."""
    found: list[IdleFloor] = []
    for pod in window.pods:
        for gpu in pod.gpus:
            floor = floors.get((gpu.node or pod.node or "", _model_key(gpu.model_name)))
            if floor is None:
                return None
            found.append(floor)
    if not found:
        return None
    return IdleFloor(
        node=",".join(sorted({f.node for f in found})),
        model=",".join(sorted({f.model for f in found})),
        gr=_highest(f.gr for f in found),
        transfer_bytes_per_s=_highest(f.transfer_bytes_per_s for f in found),
        gpus=sum(f.gpus for f in found),
    )


def with_idle_floor(settings: EngineSettings, floor: IdleFloor | None) -> EngineSettings:
    """The engine settings for one workload with its platform's idle floor as the idle rule's input."""
    if floor is None:
        return settings
    update: dict[str, float] = {}
    if floor.gr is not None:
        update["idle_gr_floor"] = min(1.0, floor.gr * FLOOR_MARGIN)
    if floor.transfer_bytes_per_s is not None:
        raised = floor.transfer_bytes_per_s * FLOOR_MARGIN
        update["idle_transfer_bytes_per_s"] = max(settings.idle.idle_transfer_bytes_per_s, raised)
    if not update:
        return settings
    return settings.model_copy(update={"idle": settings.idle.model_copy(update=update)})
