"""From findings to actions, cheapest first (SPEC §1).

Cost tiers: software and deployment settings (0-1), then CPU/memory/storage (2), then GPU slice,
sharing or model (3-4), then more GPUs / multi-node (5). Health findings and InsufficientData yield no
action at all. Changes below the minimum delta are not proposed (SPEC §6). Sizing actions are withheld
while a data-path finding (CPU, I/O, transfer, communication) fires: a starved GPU looks smaller than
the work needs once the starvation is fixed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gpu_rightsizer.logic.diagnose import Diagnosis, WorkloadFigures, fleet_replicas_needed, sizing_need
from gpu_rightsizer.logic.mig import (
    BANDWIDTH_UPGRADE_PATH,
    GPU_MODELS,
    MEMORY_UPGRADE_PATH,
    MigProfile,
    SliceNeed,
    mig_request,
    shared_request,
    smallest_fitting_profile,
)
from gpu_rightsizer.logic.rules.idle import no_cuda_context
from gpu_rightsizer.logic.rules.registry import BREAKING_CODES, BY_CODE, DATA_PATH_CODES
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.logic.vetoes import SERVICE_KINDS, missing_evidence, serves
from gpu_rightsizer.logic.width import PhaseShape, predicted_slowdown, predicted_time_sliced_slowdown
from gpu_rightsizer.logic.workloads import format_cpu, format_memory
from gpu_rightsizer.model.codes import HEALTH_CODES, ActionType, DiagnosisCode, SharingStrategy
from gpu_rightsizer.model.result import Action, ActionTarget, Finding, MemoryLookback

_MIG_STRATEGIES = frozenset({SharingStrategy.MIG_MIXED, SharingStrategy.MIG_SINGLE})
_SHARING_STRATEGIES = frozenset({SharingStrategy.TIME_SLICING, SharingStrategy.MPS})
#: Allocations that already are a share of a GPU (Allocation.sharing): no sharing action for them.
_SHARED_ALLOCATIONS = frozenset({"time-slicing", "mps", "hami"})
#: Action types of which one recommendation carries at most one (the higher-ranked finding wins).
_SINGLETON_TYPES = frozenset(
    {
        ActionType.CPU,
        ActionType.MEMORY,
        ActionType.GPU_COUNT,
        ActionType.MIG_PROFILE,
        ActionType.GPU_SHARING,
        ActionType.GPU_MODEL,
        ActionType.REPLICAS,
        ActionType.HPA_BOUNDS,
        ActionType.RELEASE_IDLE,
    }
)
#: Types that change how much GPU the workload holds; they give way to a release.
_GPU_SHAPE_TYPES = frozenset(
    {
        ActionType.MIG_PROFILE,
        ActionType.GPU_SHARING,
        ActionType.GPU_MODEL,
        ActionType.GPU_COUNT,
        ActionType.REPLICAS,
    }
)


@dataclass(frozen=True, slots=True)
class PlannedAction:
    """An action with its cost tier and the share of the current GPU allocation it frees (0..1)."""

    action: Action
    tier: int
    freed_share: float = 0.0
    shrinks: bool = False  # reduces GPU capacity: passes the shrink gate (logic/vetoes.py) first
    confidence: float = 1.0  # of the finding that proposed it: automatic only at or above minConfidence


def _round_up(value: float, step: float) -> float:
    return math.ceil(value / step - 1e-9) * step


def _cores(value: float) -> str:
    return f"{value:g} cores"


def _gib(value_bytes: float) -> str:
    return f"{value_bytes / 2**30:.1f}Gi"


def _big_enough(new: float, old: float, ratio: float, absolute: float) -> bool:
    return abs(new - old) >= max(absolute, ratio * abs(old))


def _current_gpu(figures: WorkloadFigures) -> str:
    allocation = figures.window.allocation
    model = f" ({figures.spec.display_name})" if figures.spec else ""
    return f"{allocation.gpu_resource}: {allocation.gpu_count}{model}"


def _software(text: str, reason: str) -> PlannedAction:
    return PlannedAction(
        Action(
            type=ActionType.SOFTWARE, from_value="current code and settings", to_value=text, reason=reason
        ),
        0,
    )


def _infrastructure(current: str, change: str, reason: str) -> PlannedAction:
    """Advice for the platform team (storage, placement): never automatic, tier 2."""
    return PlannedAction(
        Action(type=ActionType.INFRASTRUCTURE, from_value=current, to_value=change, reason=reason), 2
    )


def cpu_demand_cores(figures: WorkloadFigures, settings: EngineSettings) -> float | None:
    """CPU cores the pod would use if its GPU were fed, or None without a CPU usage figure.

    A starved pod's use is capped by its limit, so use / target saturation undershoots (on an H200 a
    2-core loader at 22 % busy got 3 cores and ran 1.5× faster; 8 cores ran 4× faster). Throughput scales
    with cores until the GPU becomes the bottleneck, so demand ≈ use × target busy / busy.
    """
    usage = figures.cpu_usage_p95
    if usage is None:
        return None
    headroom = usage * (1.0 + (figures.cpu_throttled or 0.0)) / settings.cpu_target_saturation
    busy = figures.busy_p95
    if busy is None:
        return headroom
    starved = usage * settings.cpu_target_busy / max(busy, settings.active_busy)
    return max(headroom, starved)


def _cpu_action(figures: WorkloadFigures, settings: EngineSettings) -> PlannedAction | None:
    """Raise CPU toward the demand a fed GPU would create, within 3-24 cores per GPU (Mohan et al.)."""
    allocation = figures.window.allocation
    current = allocation.cpu_limit_cores or allocation.cpu_request_cores
    gpus = max(1, figures.gpus_per_pod)
    lower, upper = settings.cpu_min_cores_per_gpu * gpus, settings.cpu_max_cores_per_gpu * gpus
    demand = cpu_demand_cores(figures, settings)
    target = demand if demand is not None else lower
    if current is not None:
        upper = min(upper, max(lower, current * settings.cpu_max_step_factor))
    target = min(max(target, lower), upper)
    if current is not None:
        target = max(target, current)
    target = _round_up(target, 1.0 if target >= 2 else 0.5)
    if current is not None and not _big_enough(
        target, current, settings.min_delta_ratio, settings.min_cpu_delta_cores
    ):
        return None
    has_limit = allocation.cpu_limit_cores is not None
    which = "limit" if has_limit else "request"
    usage = (
        f"p95 use {figures.cpu_usage_p95:.2f} cores" if figures.cpu_usage_p95 is not None else "use unknown"
    )
    throttled = (
        f", throttled {figures.cpu_throttled:.0%} of periods" if figures.cpu_throttled is not None else ""
    )
    quantity = {"cpu": format_cpu(target)}
    # A pod without a CPU limit keeps having none: only its request changes.
    cpu_target = ActionTarget(requests=quantity, limits=dict(quantity) if has_limit else {})
    return PlannedAction(
        Action(
            type=ActionType.CPU,
            from_value=_cores(current) + f" ({which})" if current is not None else "no CPU request",
            to_value=_cores(target)
            + (" (request and limit)" if has_limit else " (request; no limit, as before)"),
            reason=f"Input pipeline is CPU-bound ({usage}{throttled}, GPU busy p95 "
            f"{(figures.busy_p95 or 0.0):.0%}); a starved pod cannot use more than its limit, so demand is "
            f"estimated as use × {settings.cpu_target_busy:.0%} / busy, bounded to "
            f"{settings.cpu_min_cores_per_gpu:g}-{settings.cpu_max_cores_per_gpu:g} cores per GPU and "
            f"{settings.cpu_max_step_factor:g}× the current value per step. More cores help only with more "
            "loader workers: size num_workers from os.sched_getaffinity(0) or the cgroup's cpu.max, not "
            "os.cpu_count() (which ignores the quota).",
            resource="cpu",
            automatic=True,
            target=cpu_target,
        ),
        2,
    )


def _memory_action(
    figures: WorkloadFigures, settings: EngineSettings, *, peak: bool = False
) -> PlannedAction | None:
    """Raise the memory limit when the working set is close to it (more loader workers need more RAM).

    `peak`: size on the working set's max (an OOM-killed container dies at its peak, which its p99 misses).
    """
    allocation = figures.window.allocation
    current = allocation.memory_limit_bytes or allocation.memory_request_bytes
    used = (
        (figures.memory_ws_max_bytes or figures.memory_ws_p99_bytes) if peak else figures.memory_ws_p99_bytes
    )
    if current is None or used is None or used < settings.memory_tight_share * current:
        return None
    target = _round_up(used / settings.memory_target_saturation, 2**28)
    if not _big_enough(target, current, settings.min_delta_ratio, settings.min_memory_delta_bytes):
        return None
    return PlannedAction(
        Action(
            type=ActionType.MEMORY,
            from_value=_gib(current),
            to_value=_gib(target),
            reason=f"Working set {'peak' if peak else 'p99'} {_gib(used)} is {used / current:.0%} of the memory "
            f"limit; {'the container was OOMKilled' if peak else 'more input workers need more memory'}.",
            resource="memory",
            automatic=True,
            target=_memory_target(figures, target),
        ),
        2,
    )


def _memory_target(figures: WorkloadFigures, target_bytes: float) -> ActionTarget:
    """The limit moves when there is one; a pod without a memory limit only gets a larger request."""
    quantity = {"memory": format_memory(target_bytes)}
    if figures.window.allocation.memory_limit_bytes is not None:
        return ActionTarget(limits=quantity)
    return ActionTarget(requests=quantity)


def _gpu_resource_target(figures: WorkloadFigures, resource: str, count: int) -> ActionTarget:
    """Swap the GPU resource: the new one in requests and limits, the current one removed."""
    current = figures.window.allocation.gpu_resource
    return ActionTarget(
        requests={resource: str(count)},
        limits={resource: str(count)},
        remove_resources=[current] if current and current != resource else [],
        gpu_capacity_change=True,
    )


def _mig_applicable(profile: MigProfile, sharing: SharingStrategy) -> tuple[bool, str]:
    """Whether the actuator may apply a move to `profile`, and the caveat to add when it may not.

    Under mig-single the pod keeps `nvidia.com/gpu` and moves by node selector, which the action target
    cannot express; a profile whose figures are estimates never drives an automatic change.
    """
    if profile.sms_estimated:
        return False, (
            f" {profile.name}'s SM count is an estimate (no published or runtime table): check it with "
            "`nvidia-smi mig -lgip` before moving."
        )
    if sharing is SharingStrategy.MIG_SINGLE:
        return False, " Under mig-single the move is a node-selector change: schedule it on a node pool."
    return True, ""


def _current_fraction(figures: WorkloadFigures) -> float:
    profile = next((g.profile for g in figures.gpus if g.profile), None)
    return profile.gpu_fraction if profile else 1.0


def _slowdown_bound(figures: WorkloadFigures, settings: EngineSettings) -> float:
    """The policy's bound: step time for batch work, GPU-phase latency for a server (× today's)."""
    return settings.max_serving_latency_ratio if serves(figures) else 1.0 + settings.max_slowdown


def _bound_text(figures: WorkloadFigures, settings: EngineSettings) -> str:
    return (
        f"GPU-phase latency ≤ {settings.max_serving_latency_ratio:g}× today's"
        if serves(figures)
        else f"step time ≤ {1.0 + settings.max_slowdown:g}× today's"
    )


def _shape_for(figures: WorkloadFigures) -> PhaseShape | None:
    """The phase shape the bound applies to: a server's latency is its GPU phase, as if duty were 1."""
    shape = figures.phase_shape
    if shape is None or not serves(figures):
        return shape
    return PhaseShape(1.0, shape.width_fraction, shape.sm_count, shape.bandwidth_share)


def _duty(figures: WorkloadFigures) -> float | None:
    """Share of time the GPU has work (GR mean of the busiest GPU); time-slicing cost depends on it only."""
    if figures.phase_shape is not None:
        return figures.phase_shape.duty
    means = [g.busy.mean for g in figures.gpus if g.busy is not None and g.busy_source == "gr_engine_active"]
    return max(means) if means else None


def slice_slowdown(figures: WorkloadFigures, profile: MigProfile, current: MigProfile | None) -> float | None:
    """Predicted slowdown on `profile` (logic/width.py), or None without a phase shape."""
    shape = _shape_for(figures)
    if shape is None:
        return None
    bandwidth = profile.memory_fraction / (current.memory_fraction if current else 1.0)
    return predicted_slowdown(shape, profile.sms, shape.sm_count, min(1.0, bandwidth))


def _slice_action(
    figures: WorkloadFigures,
    settings: EngineSettings,
    sharing: SharingStrategy,
    allowed_profiles: Sequence[str] | None,
    reason_prefix: str,
    memory_peak_gib: float | None = None,
) -> PlannedAction | None:
    """MIG profile (mig strategies) or shared GPU (time-slicing/MPS; advice when the cluster has none).

    Proposed only with positive evidence that the work is narrow: the predicted slowdown on the slice
    or share (logic/width.py) within the policy's bound. Memory is sized on the look-back's peak.
    """
    if figures.gpus_per_pod != 1:
        return None  # never MIG or sharing for multi-GPU work
    need = sizing_need(figures, settings)
    if need is None:
        return None
    memory = max(need.memory_gib, memory_peak_gib or 0.0)
    bound = _slowdown_bound(figures, settings)
    current_profile = next((g.profile for g in figures.gpus if g.profile), None)
    current_fraction = _current_fraction(figures)
    product = figures.window.allocation.gpu_model or next(
        (g.observation.model_name for g in figures.gpus if g.observation.model_name), None
    )
    shape = figures.phase_shape
    if sharing in _MIG_STRATEGIES and figures.profiles and shape is not None:
        slowdowns = {p.name: slice_slowdown(figures, p, current_profile) for p in figures.profiles}
        narrow_enough = [p for p in figures.profiles if (slowdowns[p.name] or math.inf) <= bound + 1e-12]
        profile: MigProfile | None = smallest_fitting_profile(
            narrow_enough,
            SliceNeed(memory, 0.0, need.dram_fraction_of_full_gpu),
            memory_headroom=settings.memory_headroom,
            sm_target=settings.sm_target_utilisation,
            dram_target=settings.dram_target_utilisation,
            allowed=allowed_profiles,
        )
        if profile is None or profile.gpu_fraction >= current_fraction:
            return None
        slowdown = slowdowns[profile.name] or 1.0
        request = mig_request(profile, sharing, product)
        automatic, caveat = _mig_applicable(profile, sharing)
        return PlannedAction(
            Action(
                type=ActionType.MIG_PROFILE,
                from_value=_current_gpu(figures),
                to_value=request.describe(),
                reason=f"{reason_prefix} {profile.name} holds {profile.memory_gib:g} GiB ≥ "
                f"{settings.memory_headroom:g} × {memory:.1f} GiB used (peak) and its {profile.sms} SMs "
                f"predict a slowdown of × {slowdown:.3f} (phases {shape.width_sms:.0f} SMs wide, busy "
                f"{shape.duty:.0%} of the time; bandwidth term modelled; bound: "
                f"{_bound_text(figures, settings)}).{caveat}",
                resource=request.resource,
                automatic=automatic,
                target=_gpu_resource_target(figures, request.resource, request.count) if automatic else None,
                predicted_slowdown=round(slowdown, 4),
            ),
            3,
            max(0.0, 1.0 - profile.gpu_fraction / current_fraction),
            shrinks=True,
        )
    if figures.is_mig or (sharing in _MIG_STRATEGIES and figures.profiles):
        return None  # on a slice with no finer sharing, or a MIG GPU whose slices none fit narrowly
    if sharing is SharingStrategy.NONE or figures.window.allocation.sharing in _SHARED_ALLOCATIONS:
        return None  # no sharing is offered, or the pod already holds a share
    share = min(1.0, need.share_of_device)
    if share > settings.oversized.oversized_max_device_share:
        return None
    replicas_per_gpu = max(2, min(16, math.floor(1.0 / max(share, 1e-6))))
    duty = 1.0 if serves(figures) else _duty(figures)
    slowdown = (
        predicted_time_sliced_slowdown(PhaseShape(duty, 1.0, 1), replicas_per_gpu)
        if duty is not None
        else math.inf
    )
    if slowdown > bound + 1e-12:
        return None
    request = shared_request(sharing, share, product)
    automatic = sharing in _SHARING_STRATEGIES
    advice = ""
    if sharing in _MIG_STRATEGIES:
        advice = f" {product or 'This GPU'} has no MIG, so a time-sliced share stands in for a slice."
    elif not automatic:
        advice = " The share is a node-selector change: schedule it on the time-sliced node pool."
    return PlannedAction(
        Action(
            type=ActionType.GPU_SHARING,
            from_value=_current_gpu(figures),
            to_value=request.describe(),
            reason=f"{reason_prefix} the work needs about {share:.0%} of a GPU ({memory:.1f} GiB used at "
            f"peak); sharing with {replicas_per_gpu - 1} others predicts × {slowdown:.3f} when all are busy "
            f"at once (bound: {_bound_text(figures, settings)})." + advice,
            resource=request.resource,
            automatic=automatic,
            target=_gpu_resource_target(figures, request.resource, request.count) if automatic else None,
            predicted_slowdown=round(slowdown, 4),
        ),
        3,
        1.0 - 1.0 / replicas_per_gpu,
        shrinks=True,
    )


def _replicas_needed(replicas: int, load: float, target: float, factor: float) -> int:
    needed = math.ceil(replicas * load / target - 1e-9)
    return int(min(max(needed, 1), math.ceil(replicas * factor)))


def _under_replicated(figures: WorkloadFigures, settings: EngineSettings) -> list[PlannedAction]:
    saturation = figures.sm_p95 if figures.sm_p95 is not None else figures.busy_p95
    replicas = figures.replicas
    if saturation is None or replicas < 1:
        return []
    needed = max(
        replicas + settings.min_replica_delta,
        _replicas_needed(
            replicas, saturation, settings.replica_target_utilisation, settings.max_replica_factor
        ),
    )
    hpa = figures.window.allocation.hpa
    actions = [
        _software(
            "scale on SM activity or queue length (not GPU_UTIL, which saturates)",
            "GPU_UTIL reads 100% as soon as one kernel runs, so autoscalers on it react late.",
        )
    ]
    if hpa is not None:
        new_max = max(hpa.max_replicas, needed)
        if new_max - hpa.max_replicas >= settings.min_replica_delta:
            actions.append(
                PlannedAction(
                    Action(
                        type=ActionType.HPA_BOUNDS,
                        from_value=f"{hpa.min_replicas}-{hpa.max_replicas}",
                        to_value=f"{hpa.min_replicas}-{new_max}",
                        reason=f"Requests queue at {saturation:.0%} saturation; the HPA '{hpa.name}' owns the "
                        "replica count, so its maximum is raised.",
                        resource="replicas",
                        automatic=True,
                        target=ActionTarget(
                            min_replicas=hpa.min_replicas, max_replicas=new_max, gpu_capacity_change=True
                        ),
                    ),
                    1,
                )
            )
        return actions
    actions.append(
        PlannedAction(
            Action(
                type=ActionType.REPLICAS,
                from_value=str(replicas),
                to_value=str(needed),
                reason=f"Requests queue while saturation p95 is {saturation:.0%}; sized for "
                f"{settings.replica_target_utilisation:.0%} per replica.",
                resource="replicas",
                automatic=True,
                target=ActionTarget(replicas=needed, gpu_capacity_change=True),
            ),
            1,
        )
    )
    return actions


def _over_replicated(figures: WorkloadFigures, settings: EngineSettings) -> list[PlannedAction]:
    """Scale in to the replicas that carry the fleet's load at the target saturation (bounded step)."""
    fleet = figures.busy_p95
    replicas = figures.replicas
    sized = fleet_replicas_needed(figures, settings.replica_target_utilisation)
    if fleet is None or sized is None or replicas < 2:
        return []
    floor = math.ceil(replicas / settings.max_replica_factor - 1e-9)
    needed = max(1, sized, floor)
    if replicas - needed < settings.min_replica_delta:
        return []
    step = (
        f" (one step goes to at most 1/{settings.max_replica_factor:g} of the fleet)"
        if needed > sized
        else ""
    )
    basis = (
        f"the fleet's busy p95 is {fleet:.0%} (replicas' p95 averaged, busiest "
        f"{(figures.busy_p95_max or 0.0):.0%}); {sized} replica(s) carry the load at "
        f"{settings.replica_target_utilisation:.0%}{step}"
    )
    hpa = figures.window.allocation.hpa
    if hpa is not None:
        if hpa.min_replicas - needed < settings.min_replica_delta:
            return []
        return [
            PlannedAction(
                Action(
                    type=ActionType.HPA_BOUNDS,
                    from_value=f"{hpa.min_replicas}-{hpa.max_replicas}",
                    to_value=f"{needed}-{hpa.max_replicas}",
                    reason=f"{basis[0].upper()}{basis[1:]}; the HPA '{hpa.name}' owns the replica count, so "
                    "its minimum is lowered.",
                    resource="replicas",
                    automatic=True,
                    target=ActionTarget(
                        min_replicas=needed, max_replicas=hpa.max_replicas, gpu_capacity_change=True
                    ),
                    predicted_slowdown=1.0,
                ),
                1,
                (hpa.min_replicas - needed) / hpa.min_replicas if hpa.min_replicas else 0.0,
                shrinks=True,
            )
        ]
    return [
        PlannedAction(
            Action(
                type=ActionType.REPLICAS,
                from_value=str(replicas),
                to_value=str(needed),
                reason=f"{basis[0].upper()}{basis[1:]}, with no queue (the policy's minReplicas still applies); "
                "each replica's GPU phases keep their GPU, so their latency stays (predicted × 1.0).",
                resource="replicas",
                automatic=True,
                target=ActionTarget(replicas=needed, gpu_capacity_change=True),
                predicted_slowdown=1.0,
            ),
            1,
            (replicas - needed) / replicas,
            shrinks=True,
        )
    ]


def release_blockers(figures: WorkloadFigures, settings: EngineSettings, min_replicas: int) -> list[str]:
    """Why an idle allocation may not be released automatically; empty when it may.

    Idle is decided on the window; a release also needs profiling fields or no CUDA context at all
    (GPU_UTIL's whole percent reads a 0.5 %-duty server as 0), every replica observed, a full day for
    long-running services (a service idle at night is not idle), positive evidence that no request
    arrived (a request counter that did not grow, or network receive at probe level), and a target
    above the policy's minReplicas floor.
    """
    blockers: list[str] = []
    window = figures.window
    if not figures.profiling_fields and not no_cuda_context(figures, settings):
        blockers.append("no SM_ACTIVE: GPU_UTIL alone cannot tell a light service from an idle one")
    blockers.extend(
        m for m in missing_evidence(figures, settings, math.inf) if not m.startswith("no SM_ACTIVE")
    )
    if window.workload.kind not in SERVICE_KINDS:
        blockers.append(f"a {window.workload.kind} has no replica count to set: end it by hand")
    if window.allocation.hpa is not None:
        blockers.append(f"the HPA '{window.allocation.hpa.name}' owns the replica count")
    if min_replicas >= max(figures.replicas, 1):
        blockers.append(f"the policy keeps at least {min_replicas} replica(s)")
    quiet_requests = figures.requests_max is not None and figures.requests_max <= 0.0
    quiet_network = (
        figures.net_rx_max is not None
        and figures.net_rx_max < settings.idle.release_max_network_rx_bytes_per_s
    )
    if not (quiet_requests or quiet_network):
        blockers.append(
            "no proof that no request arrived: export a request counter, or the pod's network receive "
            f"must stay below {settings.idle.release_max_network_rx_bytes_per_s / 1024:g} KiB/s (probes only)"
            + (
                f"; it reached {figures.net_rx_max / 1024:.1f} KiB/s"
                if figures.net_rx_max is not None
                else ""
            )
        )
    return blockers


def _release(figures: WorkloadFigures, settings: EngineSettings, min_replicas: int) -> PlannedAction | None:
    """Release only when no kernel ran and no request was served (SPEC §1); automatic only when safe."""
    busy_max = figures.busy_max
    if busy_max is None or busy_max > settings.idle.release_max_busy:
        return None
    if figures.requests_per_s is not None and figures.requests_per_s > 0:
        return None
    blockers = release_blockers(figures, settings, min_replicas)
    target_replicas = max(0, min_replicas)
    automatic = not blockers
    manual = f" Not applied automatically: {'; '.join(blockers)}." if blockers else ""
    return PlannedAction(
        Action(
            type=ActionType.RELEASE_IDLE,
            from_value=f"{figures.total_gpus} × {figures.window.allocation.gpu_resource}",
            to_value=f"{target_replicas} replicas (scale to zero / end the job)"
            if target_replicas == 0
            else f"{target_replicas} replicas (the policy's minReplicas)",
            reason=f"No GPU kernel ran in the window (busy never above {busy_max:.1%}).{manual}",
            resource=figures.window.allocation.gpu_resource,
            automatic=automatic,
            target=ActionTarget(replicas=target_replicas, gpu_capacity_change=True) if automatic else None,
            predicted_slowdown=1.0,
        ),
        1,
        1.0 - target_replicas / max(figures.replicas, 1),
        shrinks=True,
    )


def _next_model(path: tuple[str, ...], current_key: str | None, better: str) -> str | None:
    if current_key not in path:
        return None
    index = path.index(current_key or "")
    current = GPU_MODELS[current_key or ""]
    for key in path[index + 1 :]:
        candidate = GPU_MODELS[key]
        if better == "memory" and candidate.memory_gib >= current.memory_gib * 1.2:
            return key
        if better == "bandwidth" and key != current_key and candidate.memory_gib > current.memory_gib:
            return key
    return None


def _memory_capacity(
    figures: WorkloadFigures, settings: EngineSettings, sharing: SharingStrategy
) -> list[PlannedAction]:
    actions = [
        _software(
            "activation checkpointing, gradient accumulation with a smaller micro-batch, or ZeRO/FSDP "
            "sharding",
            "GPU memory is full; these trade a little compute for memory without new hardware.",
        )
    ]
    current = next((g.profile for g in figures.gpus if g.profile), None)
    if current is not None and sharing in _MIG_STRATEGIES and figures.profiles:
        bigger = sorted(
            (p for p in figures.profiles if p.memory_gib > current.memory_gib and not p.media_extensions),
            key=lambda p: (p.gpu_fraction, p.memory_gib, p.name),
        )
        if bigger:
            request = mig_request(bigger[0], sharing, figures.window.allocation.gpu_model)
            automatic, caveat = _mig_applicable(bigger[0], sharing)
            actions.append(
                PlannedAction(
                    Action(
                        type=ActionType.MIG_PROFILE,
                        from_value=_current_gpu(figures),
                        to_value=request.describe(),
                        reason=f"{current.name} ({current.memory_gib:g} GiB) is full; {bigger[0].name} holds "
                        f"{bigger[0].memory_gib:g} GiB.{caveat}",
                        resource=request.resource,
                        automatic=automatic,
                        target=_gpu_resource_target(figures, request.resource, request.count)
                        if automatic
                        else None,
                    ),
                    3,
                )
            )
            return actions
    upgrade = _next_model(MEMORY_UPGRADE_PATH, figures.spec.key if figures.spec else None, "memory")
    if upgrade is not None:
        target = GPU_MODELS[upgrade]
        actions.append(
            PlannedAction(
                Action(
                    type=ActionType.GPU_MODEL,
                    from_value=figures.spec.display_name if figures.spec else "current GPU",
                    to_value=target.display_name,
                    reason=f"Memory is full at {figures.capacity_gib or 0:.0f} GiB; {target.display_name} has "
                    f"{target.memory_gib:g} GiB.",
                    resource="nvidia.com/gpu.product",
                ),
                4,
            )
        )
    gpus = max(1, figures.gpus_per_pod)
    actions.append(
        PlannedAction(
            Action(
                type=ActionType.GPU_COUNT,
                from_value=str(gpus),
                to_value=str(gpus * 2),
                reason="Last resort: split the model across GPUs (tensor/pipeline parallelism); needs code support.",
                resource=figures.window.allocation.gpu_resource,
            ),
            5,
        )
    )
    return actions


def recommend(
    diagnosis: Diagnosis,
    settings: EngineSettings,
    sharing: SharingStrategy = SharingStrategy.MIG_MIXED,
    allowed_profiles: Sequence[str] | None = None,
    min_replicas: int = 0,
    memory_lookback: MemoryLookback | None = None,
) -> list[PlannedAction]:
    """Actions for every finding of a diagnosis, cheapest first; none on health or insufficient data.

    Every capacity-reducing action then passes the shrink gate (`_gate`), and every automatic action
    the confidence gate; one recommendation never carries two changes that fight.
    """
    codes = {finding.code for finding in diagnosis.findings}
    if codes & HEALTH_CODES or DiagnosisCode.INSUFFICIENT_DATA in codes:
        return []
    figures = diagnosis.figures
    data_path = bool(codes & DATA_PATH_CODES)
    peak = memory_lookback.max_gib if memory_lookback is not None else None
    planned: list[PlannedAction] = []
    for finding in diagnosis.findings:  # already in rule order: the higher-ranked finding wins a type
        plan = FindingPlan(
            finding, diagnosis, settings, sharing, allowed_profiles, min_replicas, peak, data_path
        )
        allowed = BY_CODE[finding.code].actions  # the registry says what a rule may propose
        planned.extend(
            replace(p, confidence=finding.confidence) for p in _plan_finding(plan) if p.action.type in allowed
        )
    planned.extend(_idle_gpu_advice(figures))
    lookback_seconds = (
        (figures.window.end - memory_lookback.since).total_seconds()
        if memory_lookback is not None
        else figures.window.duration_seconds
    )
    gated = [g for item in planned if (g := _gate(item, diagnosis, settings, lookback_seconds)) is not None]
    return _resolve(gated)


@dataclass(frozen=True, slots=True)
class FindingPlan:
    """One finding to plan actions for, with the choices of the cycle around it."""

    finding: Finding
    diagnosis: Diagnosis
    settings: EngineSettings
    sharing: SharingStrategy
    allowed_profiles: Sequence[str] | None
    min_replicas: int
    peak: float | None  # the GPU-memory look-back's peak, GiB
    data_path: bool  # a data-path finding holds: nothing shrinks the GPU

    @property
    def figures(self) -> WorkloadFigures:
        return self.diagnosis.figures


#: Plans the actions a finding of one code proposes (before the registry's filter and the gates).
Planner = Callable[[FindingPlan], list[PlannedAction]]

#: Codes whose findings propose one piece of software advice: (change, reason).
_ADVICE: dict[DiagnosisCode, tuple[str, str]] = {
    DiagnosisCode.LAUNCH_BOUND: (
        "CUDA Graphs, torch.compile (fused kernels) or a larger batch per launch",
        "One thread launches a stream of tiny kernels: fewer, larger launches help; more CPU or "
        "DataLoader workers do not.",
    ),
    DiagnosisCode.HOST_WAIT_BOUND: (
        "profile the loop between GPU phases (Nsight Systems, torch.profiler) and overlap the host "
        "work with the GPU (prefetch, asynchronous copies, CUDA Graphs)",
        "The GPU phases are wide but rare: the GPU waits on the host.",
    ),
    DiagnosisCode.HOST_TRANSFER_BOUND: (
        "pinned memory with asynchronous copies (non_blocking=True), keep data resident on the GPU, "
        "larger batches",
        "Host↔device copies dominate.",
    ),
    DiagnosisCode.LOW_OCCUPANCY: (
        "larger (micro-)batch; CUDA Graphs or torch.compile to fuse small kernels",
        "Kernels keep most SMs idle.",
    ),
    DiagnosisCode.NO_TENSOR_CORES: (
        "mixed precision (torch.autocast with BF16/FP16) or TF32 matmuls",
        "The tensor cores sit unused while FP32 pipes work.",
    ),
}


def _advice_only(plan: FindingPlan) -> list[PlannedAction]:
    return [_software(*_ADVICE[plan.finding.code])]


def _plan_crash_looping(plan: FindingPlan) -> list[PlannedAction]:
    planned = [
        _software(
            "read the last termination reason and the container log before each restart",
            "The container restarts; nothing is sized on a window that mixes container lives.",
        )
    ]
    if plan.figures.oom_killed:
        planned.extend(a for a in (_memory_action(plan.figures, plan.settings, peak=True),) if a)
    return planned


def _plan_serving_host_bound(plan: FindingPlan) -> list[PlannedAction]:
    figures, settings = plan.figures, plan.settings
    planned = [
        _software(
            "more tokenizer / pre-processing workers, a larger max batch or more tokens in flight",
            "Requests wait on the host while the GPU is not saturated.",
        )
    ]
    if (figures.cpu_saturation or 0.0) >= settings.input_pipeline.cpu_saturation or (
        figures.cpu_throttled or 0.0
    ) >= settings.input_pipeline.cpu_throttled_ratio:
        planned.extend(a for a in (_cpu_action(figures, settings),) if a)
    return planned


def _plan_oversized(plan: FindingPlan) -> list[PlannedAction]:
    if plan.finding.evidence.get("noSliceFits"):
        return [
            _software(
                "lower the memory the process reserves (a server's memory fraction or KV-cache size)",
                "No slice holds today's reservation; a smaller one lets a slice or a share fit.",
            )
        ]
    if plan.data_path:
        return []
    action = _slice_action(
        plan.figures, plan.settings, plan.sharing, plan.allowed_profiles, "Oversized:", plan.peak
    )
    return [action] if action is not None else []


def _plan_idle(plan: FindingPlan) -> list[PlannedAction]:
    if plan.data_path:
        return []
    release = _release(plan.figures, plan.settings, plan.min_replicas)
    if release is not None:
        return [release]
    shared = _slice_action(
        plan.figures, plan.settings, plan.sharing, plan.allowed_profiles, "Idle but not inactive:", plan.peak
    )
    return [shared] if shared is not None else []


def _plan_cpu_bound(plan: FindingPlan) -> list[PlannedAction]:
    figures, settings, evidence = plan.figures, plan.settings, plan.finding.evidence
    if "cpuPlateauCores" in evidence:
        cores = int(evidence["cpuPlateauCores"])
        return [
            _software(
                "more DataLoader workers (num_workers ≈ the cores available - 1, read from "
                "os.sched_getaffinity(0) or the cgroup's cpu.max, not os.cpu_count()), pin_memory=True, "
                "prefetching; CUDA Graphs if one loop thread launches every kernel",
                f"{cores} process(es) sit at one core each below the CPU limit: the limit is not the "
                "bottleneck, the number of busy processes is.",
            )
        ]
    planned = [
        _software(
            "more DataLoader workers together with the CPU raise (size num_workers from "
            "os.sched_getaffinity(0) or the cgroup's cpu.max, not os.cpu_count()), pin_memory=True, "
            "prefetching; GPU decoding (DALI) or caching decoded data",
            "The GPU waits for CPU-side data preparation; more cores help only with more workers.",
        )
    ]
    planned.extend(a for a in (_cpu_action(figures, settings), _memory_action(figures, settings)) if a)
    return planned


def _plan_io_bound(plan: FindingPlan) -> list[PlannedAction]:
    return [
        _software("cache the data set locally or in RAM; larger prefetch", "The GPU waits for data reads."),
        _infrastructure(
            "current storage",
            "faster storage class or local NVMe cache",
            "Reads, not CPU, stall the input pipeline.",
        ),
    ]


def _plan_communication(plan: FindingPlan) -> list[PlannedAction]:
    return [
        _software(
            "overlap communication with compute, gradient accumulation or a larger per-GPU batch",
            "GPUs wait on collective communication.",
        ),
        _infrastructure(
            "pods spread over nodes / links",
            "topology-aware placement on one node or NVLink domain; fewer, larger GPUs",
            "Interconnect traffic is high while SMs idle; MIG is never suitable here.",
        ),
    ]


def _plan_bandwidth(plan: FindingPlan) -> list[PlannedAction]:
    figures = plan.figures
    planned = [
        _software(
            "continuous batching / larger batches; quantise weights or KV cache",
            "Memory bandwidth limits throughput.",
        )
    ]
    upgrade = _next_model(BANDWIDTH_UPGRADE_PATH, figures.spec.key if figures.spec else None, "bandwidth")
    if upgrade is not None:
        planned.append(
            PlannedAction(
                Action(
                    type=ActionType.GPU_MODEL,
                    from_value=figures.spec.display_name if figures.spec else "current GPU",
                    to_value=GPU_MODELS[upgrade].display_name,
                    reason="A higher-bandwidth GPU; do not shrink to a MIG slice (bandwidth scales with "
                    "memory slices).",
                    resource="nvidia.com/gpu.product",
                ),
                4,
            )
        )
    return planned


def _plan_over_replicated(plan: FindingPlan) -> list[PlannedAction]:
    return [] if plan.data_path else _over_replicated(plan.figures, plan.settings)


#: Each code's planner; a code the registry lets propose nothing has none (a test checks both ways).
PLANNERS: dict[DiagnosisCode, Planner] = {
    DiagnosisCode.CRASH_LOOPING: _plan_crash_looping,
    DiagnosisCode.SERVING_HOST_BOUND: _plan_serving_host_bound,
    **dict.fromkeys(_ADVICE, _advice_only),
    DiagnosisCode.OVERSIZED_GPU: _plan_oversized,
    DiagnosisCode.IDLE_ALLOCATION: _plan_idle,
    DiagnosisCode.INPUT_PIPELINE_CPU_BOUND: _plan_cpu_bound,
    DiagnosisCode.INPUT_PIPELINE_IO_BOUND: _plan_io_bound,
    DiagnosisCode.COMMUNICATION_BOUND: _plan_communication,
    DiagnosisCode.MEMORY_BANDWIDTH_BOUND: _plan_bandwidth,
    DiagnosisCode.MEMORY_CAPACITY_BOUND: lambda plan: _memory_capacity(
        plan.figures, plan.settings, plan.sharing
    ),
    DiagnosisCode.UNDER_REPLICATED: lambda plan: _under_replicated(plan.figures, plan.settings),
    DiagnosisCode.OVER_REPLICATED: _plan_over_replicated,
}


def _plan_finding(plan: FindingPlan) -> list[PlannedAction]:
    """The actions one finding proposes (before the registry's filter and the gates): a suspected
    cause only asks to measure it; every other finding goes to its code's planner."""
    if plan.finding.evidence.get("suspected"):
        return [
            _software(
                "measure the suspected cause before any change (see the finding)",
                "A veto named this cause, but no rule's exact signature matched: nothing changes yet.",
            )
        ]
    planner = PLANNERS.get(plan.finding.code)
    return planner(plan) if planner is not None else []


def _idle_gpu_advice(figures: WorkloadFigures) -> list[PlannedAction]:
    """Per GPU first: a GPU of a multi-GPU pod that ran no kernel all window gives gpuCount advice."""
    idle = figures.no_kernel_gpus
    if not idle or figures.pods < 1:
        return []
    per_pod = max(1, figures.gpus_per_pod)
    idle_per_pod = max(1, len(idle) // max(1, figures.pods))
    return [
        PlannedAction(
            Action(
                type=ActionType.GPU_COUNT,
                from_value=str(per_pod),
                to_value=str(max(1, per_pod - idle_per_pod)),
                reason=f"GPU(s) {', '.join(idle)} ran no kernel in the window (SM activity 0 in every sample) "
                "while the pod's other GPUs worked: the code uses fewer GPUs than it holds. Check the device "
                "list the program sees (CUDA_VISIBLE_DEVICES, the launcher's world size).",
                resource=figures.window.allocation.gpu_resource,
                predicted_slowdown=1.0,
            ),
            5,
            idle_per_pod / per_pod,
            shrinks=True,
        )
    ]


def _gate(
    item: PlannedAction, diagnosis: Diagnosis, settings: EngineSettings, lookback_seconds: float
) -> PlannedAction | None:
    """The shrink gate and the confidence gate (logic/vetoes.py).

    A capacity-reducing action is dropped while a veto or a breaking finding holds, and is advice only
    while the evidence is incomplete. Any automatic action below `minConfidence` is advice.
    """
    codes = {f.code for f in diagnosis.findings}
    if item.shrinks and (diagnosis.vetoes or codes & BREAKING_CODES):
        return None
    withheld: list[str] = []
    if item.shrinks and item.action.automatic and item.action.type is not ActionType.RELEASE_IDLE:
        lookback = (
            lookback_seconds
            if item.action.type in (ActionType.MIG_PROFILE, ActionType.GPU_SHARING)
            else math.inf
        )
        withheld.extend(missing_evidence(diagnosis.figures, settings, lookback))
    if item.action.automatic and item.confidence < settings.min_confidence:
        withheld.append(
            f"confidence {item.confidence:.2f} is below the policy's minConfidence {settings.min_confidence:g}"
        )
    if not withheld:
        return item
    action = item.action.model_copy(
        update={
            "automatic": False,
            "target": None,
            "reason": f"{item.action.reason} Not applied automatically: {'; '.join(withheld)}.",
        }
    )
    return replace(item, action=action, freed_share=item.freed_share if item.shrinks else 0.0)


def _is_capacity_change(item: PlannedAction) -> bool:
    target = item.action.target
    return item.action.automatic and target is not None and target.gpu_capacity_change


def _defer(item: PlannedAction, applied: PlannedAction) -> PlannedAction:
    """A GPU-capacity change that waits: advice now, re-measured after the first change is verified."""
    action = item.action.model_copy(
        update={
            "automatic": False,
            "target": None,
            "reason": f"{item.action.reason} Waits for the next verified cycle: one GPU-capacity change at a "
            f"time ({applied.action.type.value} goes first), sized on the load measured after it.",
        }
    )
    return PlannedAction(action, item.tier, 0.0)


#: Host-resource changes: applied with a GPU-capacity change in one cycle, neither could be verified.
_HOST_RESOURCE_TYPES = frozenset({ActionType.CPU, ActionType.MEMORY})


def _resolve(planned: list[PlannedAction]) -> list[PlannedAction]:
    """Drop duplicates and conflicts (first wins), keep one GPU-capacity change, order cheapest first.

    No two changes that fight: an automatic CPU or memory change goes first, and a GPU-capacity
    change (replicas, slice, share) waits for the next verified cycle (replicas sized on a CPU-starved
    GPU are wrong once it is fed).
    """
    host_change = next(
        (p for p in planned if p.action.automatic and p.action.type in _HOST_RESOURCE_TYPES), None
    )
    if host_change is not None:
        planned = [_defer(p, host_change) if _is_capacity_change(p) else p for p in planned]
    kept: list[PlannedAction] = []
    seen_types: set[ActionType] = set()
    seen_texts: set[tuple[ActionType, str]] = set()
    releasing = any(p.action.type is ActionType.RELEASE_IDLE for p in planned)
    capacity: PlannedAction | None = None
    for item in planned:
        kind = item.action.type
        if releasing and kind in _GPU_SHAPE_TYPES:
            continue
        if kind in _SINGLETON_TYPES and kind in seen_types:
            continue
        key = (kind, item.action.to_value)
        if key in seen_texts:
            continue
        seen_types.add(kind)
        seen_texts.add(key)
        if _is_capacity_change(item) and capacity is not None:
            kept.append(_defer(item, capacity))
            continue
        if _is_capacity_change(item):
            capacity = item
        kept.append(item)
    return sorted(kept, key=lambda p: (p.tier, p.action.type.value, p.action.to_value))
