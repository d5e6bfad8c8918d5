"""Waste and money: the idle GPU time a workload holds, and what it and its savings cost.

Waste counts as Kubecost counts idle cost: allocated GPU-hours × (1 − busy). Busy is the window's mean
of GR_ENGINE_ACTIVE, or of GPU_UTIL where the profiling fields are absent (the same busy signal the
rules read, `logic/figures.py`). A MIG slice holds its compute share of a GPU and a time-sliced share
1/N of its device; a shared device's busy is the device's, so its sharers split its idle time.
(Savings count a slice as the scarcer of its compute and memory share, what it takes from others.)

Savings (`logic/savings.py`) are what a landable action frees; waste is what the allocation leaves
idle today. The two are kept apart: a CPU-starved trainer at 11 % busy wastes most of its GPU-hours
and frees none until more CPU lands. Money is a price per GPU-hour (one for every model, or one per
model) times either; with no price there is no money.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpu_rightsizer.logic.figures import GPUFigures, WorkloadFigures
from gpu_rightsizer.logic.savings import HOURS_PER_DAY
from gpu_rightsizer.model.observation import WorkloadWindow
from gpu_rightsizer.model.result import Analysis, Cost, Waste


def _allocation_shared(figures: WorkloadFigures) -> bool:
    """Whether the allocation itself is a shared one (time-slicing, MPS, a `.shared` resource)."""
    allocation = figures.window.allocation
    return allocation.sharing in {"time-slicing", "mps"} or allocation.gpu_resource.endswith(".shared")


def _devices(figures: WorkloadFigures) -> int:
    """Devices (GPUs or slices) the workload holds: per pod times replicas, else those observed."""
    allocation = figures.window.allocation
    return allocation.gpu_count * max(allocation.replicas, 0) or figures.total_gpus


def _share_of_shared_device(figures: WorkloadFigures, gpu: GPUFigures) -> float:
    """A pod's share of a shared (time-sliced/MPS) device: 1 / the pods that see it (`shared_by_pods`,
    or the pods of this workload seen on it, whichever is larger), at most 1/2 when the allocation is
    shared but no neighbour is visible (a time-sliced device has at least two replicas)."""
    minimum = 2 if _allocation_shared(figures) else 1
    seen_on = sum(1 for pod in figures.window.pods if any(g.uuid == gpu.uuid for g in pod.gpus))
    return 1.0 / max(minimum, gpu.observation.shared_by_pods, seen_on or 1)


def _mean_shared_share(figures: WorkloadFigures) -> float:
    shares = [_share_of_shared_device(figures, gpu) for gpu in figures.gpus]
    return math.fsum(shares) / len(shares) if shares else 1.0 / (2 if _allocation_shared(figures) else 1)


def allocated_gpu_equivalents(figures: WorkloadFigures) -> float:
    """Whole-GPU equivalents the workload holds now, as savings count them.

    A MIG slice counts as the share of a GPU it takes out of service for others (the scarcer of
    compute and memory); a pod on a shared GPU only its share of the device. Crediting each sharing
    pod with a whole GPU counted one device several times over.
    """
    devices = _devices(figures)
    profile = next((g.profile for g in figures.gpus if g.profile), None)
    if profile is not None:
        return float(devices) * profile.gpu_fraction
    if not figures.is_shared:
        return float(devices)
    return float(devices) * _mean_shared_share(figures)


def _held_share(figures: WorkloadFigures, gpu: GPUFigures) -> float:
    """One device's share of a whole GPU for waste: a slice's compute share, a shared device's 1/N."""
    profile = gpu.profile or next((g.profile for g in figures.gpus if g.profile), None)
    if profile is not None:
        return profile.compute_fraction
    if figures.is_shared:
        return _share_of_shared_device(figures, gpu)
    return 1.0


def held_gpus(figures: WorkloadFigures) -> float:
    """Whole-GPU equivalents held, as waste counts them: a MIG slice its compute share, a time-sliced
    share 1/N of its device, a whole GPU 1."""
    shares = [_held_share(figures, gpu) for gpu in figures.gpus]
    if not shares:
        return allocated_gpu_equivalents(figures)
    return float(_devices(figures)) * math.fsum(shares) / len(shares)


def busy_fraction(figures: WorkloadFigures) -> float | None:
    """Mean busy over the window, each device weighted by its share of a GPU; None without busy.

    The mean, not a percentile: idle time is the time not busy, summed over the window. A GPU of a
    multi-GPU pod that ran no kernel counts with its busy of 0.
    """
    weighted: list[float] = []
    weights: list[float] = []
    for gpu in figures.gpus:
        share = _held_share(figures, gpu)
        if gpu.busy is None or gpu.busy.samples == 0 or not math.isfinite(gpu.busy.mean):
            continue
        weighted.append(share * min(1.0, max(0.0, gpu.busy.mean)))
        weights.append(share)
    total = math.fsum(weights)
    if total <= 0:
        return None
    return min(1.0, max(0.0, math.fsum(weighted) / total))


def estimate_waste(figures: WorkloadFigures) -> Waste | None:
    """Idle GPU-hours per day the workload holds: allocated GPU-hours × (1 − busy); None without busy."""
    busy = busy_fraction(figures)
    if busy is None:
        return None
    allocated = held_gpus(figures)
    return Waste(
        gpu_hours_per_day=round(allocated * HOURS_PER_DAY * (1.0 - busy), 3),
        allocated_gpus=round(allocated, 4),
        busy_fraction=round(busy, 4),
    )


# --------------------------------------------------------------------------------------------------
# Money
# --------------------------------------------------------------------------------------------------

#: A GPU model's published suffixes that name how it is shared, not what it is: GFD's
#: `NVIDIA-A100-SXM4-40GB-MIG-1g.5gb` (MIG single) and `Tesla-T4-SHARED` (time-slicing renamed).
_SHARING_SUFFIX = re.compile(r"(-mig-.*|-shared)$")


def model_key(model: str) -> str:
    """A GPU model name as a price-map key: `NVIDIA H100 80GB HBM3` (DCGM's modelName) and
    `NVIDIA-H100-80GB-HBM3` (GFD's gpu.product) read the same, without a sharing suffix."""
    key = re.sub(r"[\s_]+", "-", model.strip().lower())
    return _SHARING_SUFFIX.sub("", key)


class PriceError(ValueError):
    """A price or price map that cannot be used (its message says which entry and why)."""


def _price(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise PriceError(f"{where}: a price per GPU-hour must be a number, got {value!r}")
    try:
        price = float(value)
    except ValueError:
        raise PriceError(f"{where}: a price per GPU-hour must be a number, got {value!r}") from None
    if not math.isfinite(price) or price < 0:
        raise PriceError(f"{where}: a price per GPU-hour must be a finite number ≥ 0, got {value!r}")
    return price


@dataclass(frozen=True)
class GPUPrices:
    """Prices per whole-GPU hour: per model where the map names it, else `default`; None is no price."""

    default: float | None = None
    by_model: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def parse(cls, default: object | None = None, by_model: object | None = None) -> GPUPrices:
        """Validated prices from a flag's value and a price map's content (YAML/JSON: model → price)."""
        price = None if default is None or default == "" else _price(default, "GPU-hour price")
        if by_model is None:
            return cls(price, {})
        if not isinstance(by_model, Mapping):
            raise PriceError(
                f"the GPU price map must map GPU models to prices (e.g. NVIDIA-H100-80GB-HBM3: 2.5), "
                f"got {type(by_model).__name__}"
            )
        prices: dict[str, float] = {}
        for model, value in by_model.items():
            if not isinstance(model, str) or not model.strip():
                raise PriceError(f"the GPU price map has a key that is no GPU model name: {model!r}")
            prices[model_key(model)] = _price(value, f"GPU price map entry {model!r}")
        return cls(price, prices)

    @property
    def known(self) -> bool:
        """Whether any price is set."""
        return self.default is not None or bool(self.by_model)

    def price_for(self, models: Iterable[str | None]) -> float | None:
        """The price of the first of `models` the map names, else the default (None: no price)."""
        for model in models:
            if model and model_key(model) in self.by_model:
                return self.by_model[model_key(model)]
        return self.default


def cost_of(analysis: Analysis, price: float | None) -> Cost | None:
    """Money per day at `price` per GPU-hour; None without a price or without a waste figure."""
    if price is None or analysis.waste is None:
        return None
    waste = analysis.waste
    return Cost(
        price_per_gpu_hour=price,
        per_day=round(waste.allocated_gpus * HOURS_PER_DAY * price, 2),
        waste_per_day=round(waste.gpu_hours_per_day * price, 2),
        savings_per_day=round(analysis.savings.gpu_hours_per_day * price, 2),
    )


def gpu_models(window: WorkloadWindow) -> list[str | None]:
    """The names the workload's GPU model is known by: the node's product label, then DCGM's names."""
    names: list[str | None] = [window.allocation.gpu_model]
    names.extend(gpu.model_name for pod in window.pods for gpu in pod.gpus)
    return names


def with_cost(analysis: Analysis, prices: GPUPrices, models: Iterable[str | None]) -> Analysis:
    """The analysis with its cost at the price of its GPU model (`models`: the names it is known by)."""
    cost = cost_of(analysis, prices.price_for(models)) if prices.known else None
    return analysis.model_copy(update={"cost": cost})


# --------------------------------------------------------------------------------------------------
# Totals
# --------------------------------------------------------------------------------------------------


@dataclass
class Totals:
    """Sums over several workloads (a namespace, the fleet); money only where a price was known."""

    waste_gpu_hours_per_day: float = 0.0
    savings_gpu_hours_per_day: float = 0.0
    cost_per_day: float | None = None
    waste_cost_per_day: float | None = None
    savings_cost_per_day: float | None = None

    def add(self, analysis: Analysis) -> None:
        """Count one workload in."""
        if analysis.waste is not None:
            self.waste_gpu_hours_per_day += analysis.waste.gpu_hours_per_day
        self.savings_gpu_hours_per_day += analysis.savings.gpu_hours_per_day
        if analysis.cost is not None:
            self.cost_per_day = (self.cost_per_day or 0.0) + analysis.cost.per_day
            self.waste_cost_per_day = (self.waste_cost_per_day or 0.0) + analysis.cost.waste_per_day
            self.savings_cost_per_day = (self.savings_cost_per_day or 0.0) + analysis.cost.savings_per_day


def totals_by(analyses: Iterable[tuple[str, Analysis]]) -> dict[str, Totals]:
    """Totals per key (e.g. namespace) of (key, analysis) pairs."""
    totals: dict[str, Totals] = {}
    for key, analysis in analyses:
        totals.setdefault(key, Totals()).add(analysis)
    return totals
