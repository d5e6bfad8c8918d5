"""What the cluster's nodes offer, per node pool, and advice reduced to what can land there.

Built from node objects (API server) or the same shape rebuilt from kube-state-metrics
(`kube_node_status_allocatable`, `kube_node_labels`). The GPU labels are those GPU feature discovery
and the device plugin write (k8s-device-plugin README "Generated Labels" and "Shared Access to GPUs";
GPU Operator gpu-sharing docs):

- `nvidia.com/mig.strategy`: none | single | mixed. Under `mixed` each profile is its own extended
  resource `nvidia.com/mig-<profile>`; under `single` the slices are `nvidia.com/gpu` and
  `nvidia.com/gpu.product` ends in `-MIG-<profile>`. GFD writes this label on every GPU node, MIG or
  not, and the GPU Operator's default is `single` (device-plugin `internal/lm/mig-strategy.go`): the
  label alone never says a pool is sliced. A pool counts as MIG single only when its product is
  `-MIG-<profile>` (or `nvidia.com/mig.capable=true` with a MIG layout other than `all-disabled`),
  and as MIG mixed only when it publishes `nvidia.com/mig-*` resources.
- `nvidia.com/gpu.sharing-strategy`: none | time-slicing | mps, with `nvidia.com/gpu.replicas`. The
  resource stays `nvidia.com/gpu` (product suffixed `-SHARED`) unless the plugin runs with
  `renameByDefault: true`, which publishes `nvidia.com/gpu.shared`.
- `nvidia.com/mig.config`: the MIG manager's layout name (`all-1g.10gb`, `all-balanced`, ...).

`constrain_to_capacity` is a post-processing step on the engine's `Analysis`: an action that names a
resource no pool offers (or more of it than one node holds) becomes advice (`automatic=False`) that
says what a pool would need; CPU and memory raises are capped at the largest node's allocatable; the
savings no longer count what cannot land.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_rightsizer.logic.floors import IdleFloor
from gpu_rightsizer.logic.mig import model_key_for_product
from gpu_rightsizer.logic.savings import HOURS_PER_DAY, estimate_savings
from gpu_rightsizer.logic.workloads import QuantityError, format_cpu, format_memory, parse_quantity
from gpu_rightsizer.model.codes import ActionType, DiagnosisCode, SharingStrategy
from gpu_rightsizer.model.result import Action, Analysis, Savings

LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_MIG_STRATEGY = "nvidia.com/mig.strategy"
LABEL_MIG_CONFIG = "nvidia.com/mig.config"
LABEL_SHARING = "nvidia.com/gpu.sharing-strategy"
LABEL_REPLICAS = "nvidia.com/gpu.replicas"
LABEL_MIG_CAPABLE = "nvidia.com/mig.capable"
#: Labels cloud providers and Karpenter put on nodes to name their pool, preferred first.
POOL_LABELS = (
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "karpenter.sh/nodepool",
    "kubernetes.azure.com/agentpool",
    "agentpool",
    "node.kubernetes.io/instance-type",
)
WHOLE_GPU = "nvidia.com/gpu"
SHARED_GPU = "nvidia.com/gpu.shared"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
_GPU_RESOURCE = re.compile(r"^nvidia\.com/(gpu(\.shared)?|mig-.+)$")
_SHAPE_ACTIONS = frozenset({ActionType.MIG_PROFILE, ActionType.GPU_SHARING, ActionType.GPU_COUNT})


@dataclass(frozen=True)
class NodePool:
    """Nodes that offer the same GPUs the same way (and their largest CPU and memory)."""

    name: str
    nodes: tuple[str, ...]
    gpu_product: str | None
    mig_strategy: str  # none | single | mixed
    mig_config: str | None
    sharing_strategy: str  # none | time-slicing | mps
    replicas: int
    #: extended resource -> the most one node of the pool has allocatable
    gpu_resources: Mapping[str, float]
    max_cpu_cores: float
    max_memory_bytes: float
    mig_capable: bool | None = None  # nvidia.com/mig.capable; None when the label is absent

    @property
    def mig_mixed(self) -> bool:
        """MIG mixed is what the pool publishes: `nvidia.com/mig-<profile>` resources."""
        return any(resource.startswith(MIG_RESOURCE_PREFIX) for resource in self.gpu_resources)

    @property
    def mig_single(self) -> bool:
        """MIG single: slices published as `nvidia.com/gpu` on a `-MIG-` product, or MIG enabled on a
        capable GPU. `mig.strategy=single` alone is GFD's label on every node of a default install."""
        if self.mig_strategy != "single" or not self.gpu_resources.get(WHOLE_GPU):
            return False
        if self.gpu_product and "-MIG-" in self.gpu_product:
            return True
        return bool(self.mig_capable) and self.mig_config not in (None, "", "all-disabled")

    @property
    def shares(self) -> str | None:
        """time-slicing or mps when the pool shares whole GPUs (label, or a `-SHARED` product)."""
        if self.sharing_strategy in ("time-slicing", "mps"):
            return self.sharing_strategy
        if self.gpu_product and self.gpu_product.upper().endswith("-SHARED"):
            return "time-slicing"
        return None

    @property
    def offers(self) -> SharingStrategy:
        """The finest way this pool shares its GPUs, named as the engine plans with it."""
        if self.mig_mixed:
            return SharingStrategy.MIG_MIXED
        if self.mig_single:
            return SharingStrategy.MIG_SINGLE
        if self.shares == "mps":
            return SharingStrategy.MPS
        if self.shares == "time-slicing":
            renamed = SHARED_GPU in self.gpu_resources
            return SharingStrategy.TIME_SLICING if renamed else SharingStrategy.TIME_SLICING_NO_RENAME
        return SharingStrategy.NONE

    def describe(self) -> str:
        """One line for messages: `pool a100 (3 nodes): NVIDIA-A100..., MIG mixed, nvidia.com/mig-1g.10gb ×7`."""
        how = []
        if self.mig_mixed or self.mig_single:
            how.append("MIG mixed" if self.mig_mixed else "MIG single")
        if self.shares:
            renamed = "" if SHARED_GPU in self.gpu_resources else " without rename"
            how.append(f"{self.shares} ×{self.replicas}{renamed}")
        offered = ", ".join(f"{name} ×{amount:g}" for name, amount in sorted(self.gpu_resources.items()))
        return (
            f"pool {self.name} ({len(self.nodes)} node{'s' if len(self.nodes) != 1 else ''}): "
            f"{self.gpu_product or 'no GPU product label'}"
            + (f", {', '.join(how)}" if how else "")
            + (f"; offers {offered}" if offered else "; offers no GPU resource")
        )


@dataclass(frozen=True)
class ClusterCapacity:
    """Every node pool, and where the facts came from."""

    pools: tuple[NodePool, ...] = ()
    source: str = "none"  # api | kube-state-metrics | none
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: (node, GPU model) -> idle floor learned from that node's unheld GPUs (logic/floors.py)
    idle_floors: Mapping[tuple[str, str], IdleFloor] = field(default_factory=dict)

    @property
    def known(self) -> bool:
        """False when no node was seen: nothing is constrained then."""
        return bool(self.pools)

    def most_of(self, resource: str, product: str | None = None) -> float:
        """The most of `resource` one node offers (0 when no pool offers it), among the pools of the
        GPU model `product` when some pool has it (a slice or share of another model is a model change)."""
        pools = self.pools_of(product) or self.pools
        return max((p.gpu_resources.get(resource, 0.0) for p in pools), default=0.0)

    @property
    def max_cpu_cores(self) -> float:
        """The largest allocatable CPU of any node."""
        return max((p.max_cpu_cores for p in self.pools), default=0.0)

    @property
    def max_memory_bytes(self) -> float:
        """The largest allocatable memory of any node."""
        return max((p.max_memory_bytes for p in self.pools), default=0.0)

    def pools_of(self, product: str | None) -> list[NodePool]:
        """Pools with the same GPU model as `product` (GFD product label, MIG and -SHARED suffixes ignored)."""
        wanted = _base_product(product)
        return [p for p in self.pools if wanted and _base_product(p.gpu_product) == wanted]

    def mig_profiles(self, product: str | None) -> list[str]:
        """MIG profiles the pools of `product` offer: `mig-<profile>` resources (mixed) and the
        `-MIG-<profile>` product of MIG-single pools with allocatable slices."""
        found: set[str] = set()
        for pool in self.pools_of(product):
            for resource in pool.gpu_resources:
                if resource.startswith(MIG_RESOURCE_PREFIX):
                    found.add(resource.removeprefix(MIG_RESOURCE_PREFIX))
            if pool.mig_single and pool.gpu_product and "-MIG-" in pool.gpu_product:
                found.add(pool.gpu_product.split("-MIG-", 1)[1])
        return sorted(found)

    def sharing_strategy(self, product: str | None = None) -> SharingStrategy:
        """How this cluster shares GPUs of `product` (else of any model), from what the pools publish.

        MIG mixed wins over MIG single, then renamed time-slicing, time-slicing without rename, MPS,
        none: the engine then proposes the finest sharing some pool really offers.
        """
        pools = self.pools_of(product) or list(self.pools)
        offered = {p.offers for p in pools if p.gpu_resources}
        for strategy in _STRATEGY_ORDER:
            if strategy in offered:
                return strategy
        return SharingStrategy.NONE


_STRATEGY_ORDER = (
    SharingStrategy.MIG_MIXED,
    SharingStrategy.MIG_SINGLE,
    SharingStrategy.TIME_SLICING,
    SharingStrategy.TIME_SLICING_NO_RENAME,
    SharingStrategy.MPS,
)


def sharing_for(
    capacity: ClusterCapacity,
    product: str | None,
    explicit: SharingStrategy | None = None,
    fallback: SharingStrategy = SharingStrategy.MIG_MIXED,
) -> SharingStrategy:
    """The one rule every entry point uses for the sharing strategy the engine plans with.

    An explicit choice (the CLI's `--sharing`) wins; else the cluster's node labels decide; else,
    with no node facts at all, `fallback` (the governing policy's `sharingStrategy`, or mig-mixed).
    """
    if explicit is not None:
        return explicit
    if capacity.known:
        return capacity.sharing_strategy(product)
    return fallback


def _base_product(product: str | None) -> str:
    if not product:
        return ""
    text = re.sub(r"-MIG-.*$", "", product.strip())
    return re.sub(r"-SHARED$", "", text).upper()


def _quantity(value: object) -> float:
    try:
        number = parse_quantity(value if isinstance(value, (int, float)) else str(value))
    except QuantityError:
        return 0.0
    return number if math.isfinite(number) and number > 0 else 0.0


def _flag(value: str | None) -> bool | None:
    """A GFD true/false label; None when absent or neither."""
    text = (value or "").strip().lower()
    return True if text == "true" else False if text == "false" else None


def _pool_name(labels: Mapping[str, str]) -> str:
    for key in POOL_LABELS:
        if labels.get(key):
            return str(labels[key])
    product = labels.get(LABEL_PRODUCT)
    return product or "cpu"


def capacity_from_nodes(nodes: Iterable[Mapping[str, Any]], source: str = "api") -> ClusterCapacity:
    """Pools from node objects as the API server returns them (metadata.labels, status.allocatable).

    Unschedulable nodes count too: a cordon is temporary, a node pool's shape is not.
    """
    grouped: dict[tuple[Any, ...], list[tuple[str, Mapping[str, str], Mapping[str, Any]]]] = {}
    for node in nodes:
        metadata = node.get("metadata") or {}
        labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        gpu_kinds = tuple(sorted(k for k in allocatable if _GPU_RESOURCE.match(str(k))))
        key = (
            _pool_name(labels),
            labels.get(LABEL_PRODUCT),
            labels.get(LABEL_MIG_STRATEGY, "none"),
            labels.get(LABEL_SHARING, "none"),
            gpu_kinds,
        )
        grouped.setdefault(key, []).append((str(metadata.get("name", "")), labels, allocatable))
    pools = []
    for (name, product, mig, sharing, _), members in sorted(grouped.items(), key=lambda item: str(item[0])):
        resources: dict[str, float] = {}
        for _, _, allocatable in members:
            for resource, amount in allocatable.items():
                if _GPU_RESOURCE.match(str(resource)):
                    resources[str(resource)] = max(resources.get(str(resource), 0.0), _quantity(amount))
        first_labels = members[0][1]
        try:
            replicas = max(1, int(first_labels.get(LABEL_REPLICAS, "1")))
        except ValueError:
            replicas = 1
        pools.append(
            NodePool(
                name=name,
                nodes=tuple(sorted(m[0] for m in members)),
                gpu_product=product,
                mig_strategy=mig,
                mig_config=first_labels.get(LABEL_MIG_CONFIG),
                sharing_strategy=sharing,
                replicas=replicas,
                gpu_resources={k: v for k, v in resources.items() if v > 0},
                max_cpu_cores=max(_quantity(m[2].get("cpu", 0)) for m in members),
                max_memory_bytes=max(_quantity(m[2].get("memory", 0)) for m in members),
                mig_capable=_flag(first_labels.get(LABEL_MIG_CAPABLE)),
            )
        )
    return ClusterCapacity(pools=tuple(pools), source=source if pools else "none")


# --- constraining an analysis ------------------------------------------------------------------------


def analyze_within(
    capacity: ClusterCapacity,
    product: str | None,
    run: Callable[[list[str] | None], Analysis],
    allowed: Sequence[str] | None = None,
    stated: bool = False,
) -> Analysis:
    """Run the engine (`run(allowed MIG profiles)`) so that a MIG slice is chosen among those the
    pools of the workload's GPU model offer, then constrain the rest to capacity.

    When no offered profile fits (or none is offered), the unrestricted answer is kept, as advice that
    says which slice a pool would need. `stated`: a person said how the cluster shares GPUs (the CLI's
    `--sharing`, the policy's `sharingStrategy`), which stands in for node facts when there are none.
    """
    offered = capacity.mig_profiles(product)
    wanted = {p.lower() for p in allowed} if allowed else None
    restricted = [p for p in offered if wanted is None or p.lower() in wanted]
    if restricted:
        analysis = run(restricted)
        if any(a.type is ActionType.MIG_PROFILE for a in analysis.actions):
            return with_final_change(constrain_to_capacity(analysis, capacity, product, stated))
    unrestricted = run(list(allowed) if allowed else None)
    return with_final_change(constrain_to_capacity(unrestricted, capacity, product, stated))


#: The first sentence of a finding's "Change:" part (a profile's dots are not followed by a space).
_CHANGE = re.compile(r"Change: .+?\.(?=\s|$)")
_STILL_RUNS = re.compile(r" Kernels still run \(not idle, never released\):[^.]*\.")


def with_final_change(analysis: Analysis) -> Analysis:
    """Findings rendered from the final action: the sizing finding's "Change:" names the slice or share
    the (pool-constrained) action proposes, and no finding says kernels run where the idle rule found none."""
    shape = next(
        (a for a in analysis.actions if a.type in (ActionType.MIG_PROFILE, ActionType.GPU_SHARING)), None
    )
    idle = any(f.code is DiagnosisCode.IDLE_ALLOCATION for f in analysis.findings)
    findings = []
    for finding in analysis.findings:
        message = finding.message
        if finding.code is DiagnosisCode.OVERSIZED_GPU and shape is not None:
            advice = "" if shape.automatic else " (advice: see the action's reason)"
            message = _CHANGE.sub(f"Change: {shape.type.value} → {shape.to_value}{advice}.", message, count=1)
        if idle:
            message = _STILL_RUNS.sub("", message)
        findings.append(
            finding if message == finding.message else finding.model_copy(update={"message": message})
        )
    if findings == analysis.findings:
        return analysis
    return analysis.model_copy(update={"findings": findings})


def _gpu_resources_of(action: Action) -> dict[str, int]:
    """GPU resources (and per-pod amounts) an action asks for."""
    wanted: dict[str, int] = {}
    target = action.target
    if target is not None:
        for section in (target.requests, target.limits):
            for name, amount in section.items():
                if _GPU_RESOURCE.match(name):
                    wanted[name] = max(wanted.get(name, 0), 1, math.ceil(_quantity(amount)))
    if not wanted and action.resource and _GPU_RESOURCE.match(action.resource):
        count = 1
        if action.type is ActionType.GPU_COUNT:
            try:
                count = int(action.to_value.strip().split()[0])
            except (ValueError, IndexError):
                count = 1
        wanted[action.resource] = count
    return wanted


def _selected_product(action: Action) -> str | None:
    """The `nvidia.com/gpu.product` a node-selector recommendation (MIG single `-MIG-<profile>`, a
    non-renamed share `-SHARED`) selects nodes by, if it does."""
    match = re.search(r"nvidia\.com/gpu\.product=([^,)\s]+)", action.to_value)
    return match.group(1) if match else None


def _what_a_pool_needs(resource: str, count: int, action: Action) -> str:
    if resource.startswith("nvidia.com/mig-"):
        profile = resource.removeprefix("nvidia.com/mig-")
        return (
            f"a node pool with MIG strategy mixed and a layout with {profile} slices "
            f"(nvidia.com/mig.config, e.g. all-{profile}) publishing {resource}"
        )
    if resource == SHARED_GPU:
        return (
            "a node pool with time-slicing or MPS and renameByDefault: true (the device plugin then "
            f"publishes {SHARED_GPU}; without it shared GPUs stay nvidia.com/gpu with the "
            "nvidia.com/gpu.sharing-strategy label)"
        )
    if action.type is ActionType.GPU_COUNT or count > 1:
        return f"nodes with {count} × {resource} allocatable"
    return f"a node pool publishing {resource}"


def _unlandable(action: Action, capacity: ClusterCapacity, product: str | None) -> str | None:
    """Why `action` cannot be scheduled on any pool, or None when some pool offers what it names."""
    selected = _selected_product(action)
    if selected is not None:
        if any(p.gpu_product == selected and p.gpu_resources.get(WHOLE_GPU) for p in capacity.pools):
            return None
        how = "MIG strategy single" if "-MIG-" in selected else "time-slicing without rename"
        return f"needs a node pool with {how} labelled {LABEL_PRODUCT}={selected}"
    for resource, count in sorted(_gpu_resources_of(action).items()):
        most = capacity.most_of(resource, product)
        if most < count:
            where = f" with {_base_product(product)}" if capacity.pools_of(product) else ""
            offered = f"no pool{where} offers it" if most == 0 else f"the largest node offers {most:g}"
            return f"needs {_what_a_pool_needs(resource, count, action)}; {offered}"
    return None


def _cap_quantity(action: Action, ceiling: float, unit: str) -> tuple[Action, str] | None:
    """The action with its target capped at `ceiling` (cores or bytes); None when it needs no cap."""
    target = action.target
    wanted = [
        _quantity(section[action.resource or ""])
        for section in ((target.requests, target.limits) if target else ())
        if action.resource in section
    ]
    if not wanted:
        match = re.match(r"^\s*([0-9.]+)\s*(cores|Gi)", action.to_value)
        if not match:
            return None
        wanted = [float(match.group(1)) * (2**30 if match.group(2) == "Gi" else 1.0)]
    if max(wanted) <= ceiling or ceiling <= 0:
        return None
    if unit == "cpu":
        capped_value = math.floor(ceiling * 2) / 2 if ceiling >= 1 else ceiling
        text, shown = format_cpu(capped_value), f"{capped_value:g} cores (request and limit)"
    else:
        capped_value = math.floor(ceiling / 2**28) * 2**28
        text, shown = format_memory(capped_value), f"{capped_value / 2**30:.1f}Gi"
    new_target = None
    if target is not None:
        new_target = target.model_copy(
            update={
                "requests": {k: (text if k == action.resource else v) for k, v in target.requests.items()},
                "limits": {k: (text if k == action.resource else v) for k, v in target.limits.items()},
            }
        )
    capped = action.model_copy(update={"to_value": shown, "target": new_target})
    return capped, f"{max(wanted):g}" if unit == "cpu" else f"{max(wanted) / 2**30:.1f}Gi"


def _current_amount(action: Action) -> float | None:
    match = re.match(r"^\s*([0-9.]+)\s*(cores|Gi)?", action.from_value)
    if not match:
        return None
    return float(match.group(1)) * (2**30 if match.group(2) == "Gi" else 1.0)


def _freed_share(action: Action) -> float | None:
    """The share of the allocation a non-shape capacity action frees, from its from/to values."""
    numbers = [re.findall(r"\d+", action.from_value), re.findall(r"\d+", action.to_value)]
    if action.type is ActionType.RELEASE_IDLE:
        return 1.0
    if action.type is ActionType.REPLICAS and numbers[0] and numbers[1]:
        old, new = int(numbers[0][0]), int(numbers[1][0])
        return max(0.0, (old - new) / old) if old else 0.0
    if action.type is ActionType.HPA_BOUNDS and numbers[0] and numbers[1]:
        old, new = int(numbers[0][0]), int(numbers[1][0])
        return max(0.0, (old - new) / old) if old else 0.0
    return None


def _landable_savings(analysis: Analysis, kept: list[Action]) -> Savings:
    """Savings counting only actions that can land; what the demoted GPU-shape action would have
    freed is kept apart (`if_offered_gpu_hours_per_day`)."""
    savings = analysis.savings
    if savings.share_of_allocation <= 0:
        return savings
    allocated = savings.gpu_hours_per_day / HOURS_PER_DAY / savings.share_of_allocation
    shares = [s for s in (_freed_share(a) for a in kept if a.automatic) if s is not None]
    # the shape action that could not land was the only one of its kind (the engine keeps at most one)
    landable = estimate_savings(allocated, shares)
    apart = round(max(0.0, savings.gpu_hours_per_day - landable.gpu_hours_per_day), 3)
    return landable.model_copy(update={"if_offered_gpu_hours_per_day": apart})


def _demote(action: Action, why: str) -> Action:
    return action.model_copy(
        update={
            "automatic": False,
            "target": None,
            "reason": f"{action.reason} Not schedulable on this cluster as it is: {why}.",
        }
    )


def _offered_name(action: Action) -> str:
    """What a GPU-shape action needs the cluster to offer, in a few words."""
    selected = _selected_product(action)
    if selected is not None:
        return f"nodes labelled {LABEL_PRODUCT}={selected}"
    return ", ".join(sorted(_gpu_resources_of(action))) or action.to_value


def _unknown(action: Action) -> Action:
    """A GPU-shape action when no node is known: advice, since nothing says the cluster offers it."""
    return action.model_copy(
        update={
            "automatic": False,
            "target": None,
            "reason": f"{action.reason} Whether the cluster offers {_offered_name(action)} is unknown (no "
            "node data): advice only, and its savings count apart, as if the cluster offered it.",
        }
    )


def constrain_to_capacity(
    analysis: Analysis, capacity: ClusterCapacity, product: str | None = None, stated: bool = False
) -> Analysis:
    """The analysis with every action reduced to what the cluster's node pools can schedule.

    - A GPU action (MIG slice, shared GPU, more GPUs) naming a resource no pool offers, or more of it
      than one node has, becomes advice: `automatic=False`, no target, and the reason says what a
      pool would need. Its savings move to `if_offered_gpu_hours_per_day`.
    - CPU and memory raises are capped at the largest node's allocatable; a cap at or below today's
      value leaves advice only.
    `product` is the workload's GPU model (GFD product label): slices and shares are looked for in
    the pools of that model first. Without any node facts (`capacity.known` false) nothing is known to
    land: every saving counts apart, and a MIG slice or share is advice unless a person `stated` the
    cluster's sharing.
    """
    if not analysis.actions:
        return analysis
    changed = not capacity.known and analysis.savings.gpu_hours_per_day > 0
    demoted_shape = False
    actions: list[Action] = []
    for action in analysis.actions:
        new = action
        if not capacity.known:
            if action.type in (ActionType.MIG_PROFILE, ActionType.GPU_SHARING) and not stated:
                new = _unknown(action)
                demoted_shape = True
        elif action.type is ActionType.GPU_MODEL:
            wanted = model_key_for_product(action.to_value)
            if wanted and all(model_key_for_product(p.gpu_product) != wanted for p in capacity.pools):
                new = action.model_copy(
                    update={"reason": f"{action.reason} No node pool of this cluster has this model today."}
                )
        elif action.type in _SHAPE_ACTIONS:
            why = _unlandable(action, capacity, product)
            if why is not None:
                new = _demote(action, why)
                demoted_shape = True
        elif action.type in (ActionType.CPU, ActionType.MEMORY) and action.automatic:
            new = _capped(action, capacity)
        changed = changed or new != action
        actions.append(new)
    if not changed:
        return analysis
    savings = _landable_savings(analysis, actions) if demoted_shape else analysis.savings
    if not capacity.known:  # nothing is known to land without node data: every saving counts apart
        savings = Savings(
            gpu_hours_per_day=0.0,
            share_of_allocation=0.0,
            if_offered_gpu_hours_per_day=analysis.savings.gpu_hours_per_day,
        )
    if (
        demoted_shape
        and savings.if_offered_gpu_hours_per_day > 0
        and any(a.type in _SHAPE_ACTIONS and not a.automatic for a in actions)
    ):
        shape = next(a for a in actions if a.type in _SHAPE_ACTIONS and not a.automatic)
        index = actions.index(shape)
        actions[index] = shape.model_copy(
            update={
                "reason": f"{shape.reason} If the cluster offered {_offered_name(shape)}: "
                f"{savings.if_offered_gpu_hours_per_day:.1f} GPU-h/d, not in the savings."
            }
        )
    summary = analysis.summary
    first_old, first_new = analysis.actions[0], actions[0]
    if first_old.to_value != first_new.to_value:
        summary = summary.replace(
            f"do: {first_old.type.value} → {first_old.to_value}",
            f"do: {first_new.type.value} → {first_new.to_value}",
        )
    if not capacity.known:
        summary += " (no node data: what the cluster offers is unknown, savings counted apart)"
    elif demoted_shape:
        summary += " (the GPU change needs capacity this cluster lacks: advice only)"
    return analysis.model_copy(update={"actions": actions, "savings": savings, "summary": summary})


def _capped(action: Action, capacity: ClusterCapacity) -> Action:
    """A CPU or memory raise capped at the largest node's allocatable (advice when that is no raise)."""
    ceiling = capacity.max_cpu_cores if action.type is ActionType.CPU else capacity.max_memory_bytes
    capped = _cap_quantity(action, ceiling, "cpu" if action.type is ActionType.CPU else "memory")
    if capped is None:
        return action
    new, asked = capped
    largest = f"{ceiling:g} cores" if action.type is ActionType.CPU else f"{ceiling / 2**30:.1f}Gi"
    current = _current_amount(action)
    target_value = _current_amount(new.model_copy(update={"from_value": new.to_value}))
    if current is not None and target_value is not None and target_value <= current:
        return _demote(
            action,
            f"it needs more than the largest node's allocatable {largest}: split the input "
            "pipeline or use larger nodes",
        )
    note = f" Capped at the largest node's allocatable {largest} (the estimate was {asked})."
    return new.model_copy(update={"reason": new.reason + note})
