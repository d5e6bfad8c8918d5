"""The engine/actuator contract: every automatic action carries a machine-readable `target`."""

from __future__ import annotations

import pytest
from tests.unit.logic.logic_builders import PROVEN, allocation, busy_gpu, gpu, hpa, pod, stat, window
from tests.unit.logic.test_diagnose import CASES, cpu_bound, oversized, under_replicated
from tests.unit.logic.test_recommend import rare_job

from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.mig import GPU_MODELS, MigProfile
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import GPU_CAPACITY_ACTIONS, ActionType, SharingStrategy
from gpu_rightsizer.model.observation import Signal, WorkloadWindow
from gpu_rightsizer.model.result import Action

_DAY = 24.0


def _action(w: WorkloadWindow, kind: ActionType, **kwargs: object) -> Action:
    kwargs.setdefault("settings", PROVEN)
    analysis = analyze_window(w, **kwargs)  # type: ignore[arg-type]
    return next(a for a in analysis.actions if a.type is kind)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("sharing", [SharingStrategy.MIG_MIXED, SharingStrategy.TIME_SLICING])
def test_every_automatic_action_has_a_target(name: str, sharing: SharingStrategy) -> None:
    analysis = analyze_window(CASES[name](), sharing=sharing)
    for action in analysis.actions:
        if action.automatic:
            assert action.target is not None, (name, action)
            assert action.target.gpu_capacity_change is (action.type in GPU_CAPACITY_ACTIONS), (name, action)


def test_cpu_target_raises_request_and_limit_when_the_pod_has_a_limit() -> None:
    cpu = _action(cpu_bound(), ActionType.CPU)
    assert cpu.target is not None
    cores = cpu.to_value.split()[0]
    assert cpu.target.requests == {"cpu": cores}
    assert cpu.target.limits == {"cpu": cores}
    assert cpu.target.container is None and not cpu.target.gpu_capacity_change


def test_a_pod_without_a_cpu_limit_keeps_having_none() -> None:
    w = cpu_bound()
    w = w.model_copy(update={"allocation": allocation(cpu_limit_cores=None, cpu_request_cores=8.0)})
    cpu = _action(w, ActionType.CPU)
    assert cpu.target is not None
    assert cpu.target.limits == {}
    assert cpu.target.requests["cpu"] == cpu.to_value.split()[0]
    assert "no limit" in cpu.to_value


def test_cpu_target_quantities_are_kubernetes_notation() -> None:
    tiny = (
        cpu_bound()
        .pods[0]
        .model_copy(
            update={"stats": {Signal.CPU_USAGE_CORES: stat(0.99), Signal.CPU_THROTTLED_RATIO: stat(0.3)}}
        )
    )
    w = window([tiny], alloc=allocation(cpu_limit_cores=1.0, cpu_request_cores=1.0))
    cpu = _action(w, ActionType.CPU)
    assert cpu.target is not None
    assert cpu.target.limits["cpu"].isdigit() or cpu.target.limits["cpu"].endswith("m")


def test_mig_target_swaps_the_gpu_resource() -> None:
    mig = _action(oversized(), ActionType.MIG_PROFILE)
    assert mig.automatic and mig.target is not None
    resource = mig.to_value.split(":")[0]
    assert resource.startswith("nvidia.com/mig-")
    assert mig.target.requests == {resource: "1"} and mig.target.limits == {resource: "1"}
    assert mig.target.remove_resources == ["nvidia.com/gpu"]
    assert mig.target.gpu_capacity_change


def test_mig_single_is_advice_because_a_node_selector_is_not_a_target() -> None:
    mig = _action(oversized(), ActionType.MIG_PROFILE, sharing=SharingStrategy.MIG_SINGLE)
    assert not mig.automatic and mig.target is None
    assert "node" in mig.reason


def test_an_estimated_mig_row_never_drives_an_automatic_change() -> None:
    spec = GPU_MODELS["H100-80GB"]
    estimated = {
        "H100-80GB": [
            MigProfile(
                p.name,
                p.memory_gib,
                p.sms,
                p.compute_slices,
                p.memory_slices,
                p.max_instances,
                p.media_extensions,
                True,
            )
            for p in spec.mig_profiles
        ]
    }
    mig = _action(oversized(), ActionType.MIG_PROFILE, mig_tables=estimated)
    assert not mig.automatic and mig.target is None
    assert "estimate" in mig.reason


def test_sharing_target_under_time_slicing() -> None:
    shared = _action(rare_job(), ActionType.GPU_SHARING, sharing=SharingStrategy.TIME_SLICING)
    assert shared.automatic and shared.target is not None
    assert shared.target.limits == {"nvidia.com/gpu.shared": "1"}
    assert shared.target.remove_resources == ["nvidia.com/gpu"]


def test_replica_targets_are_numbers() -> None:
    replicas = _action(under_replicated(), ActionType.REPLICAS)
    assert replicas.target is not None and replicas.target.replicas == int(replicas.to_value)
    w = under_replicated()
    w = w.model_copy(update={"allocation": w.allocation.model_copy(update={"hpa": hpa(2, 2)})})
    bounds = _action(w, ActionType.HPA_BOUNDS)
    assert bounds.target is not None
    low, high = (int(x) for x in bounds.to_value.split("-"))
    assert (bounds.target.min_replicas, bounds.target.max_replicas) == (low, high)


def _day_idle(kind: str = "Deployment") -> WorkloadWindow:
    """No kernel for a day: GR and SM at 0, with the profiling fields present."""
    quiet = gpu(
        gr_engine_active=stat(0.0, samples=720),
        sm_active=stat(0.0, samples=720),
        fb_used_mib=stat(3000, samples=720),
    )
    return window([pod(gpus=[quiet], net_rx_bytes_per_s=stat(600, 200))], hours=_DAY, kind=kind)


def test_release_target_scales_to_the_policy_floor() -> None:
    release = _action(_day_idle(), ActionType.RELEASE_IDLE)
    assert release.automatic and release.target is not None
    assert release.target.replicas == 0 and release.target.gpu_capacity_change


def test_release_respects_min_replicas() -> None:
    analysis = analyze_window(_day_idle(), min_replicas=1)
    release = [a for a in analysis.actions if a.type is ActionType.RELEASE_IDLE]
    assert all(not a.automatic and a.target is None for a in release)


def test_memory_target_moves_the_limit_only() -> None:
    w = cpu_bound()
    tight = w.pods[0].model_copy(
        update={"stats": {**w.pods[0].stats, Signal.MEMORY_WORKING_SET_BYTES: stat(62 * 2**30)}}
    )
    memory = _action(window([tight], alloc=w.allocation), ActionType.MEMORY)
    assert memory.target is not None
    assert set(memory.target.limits) == {"memory"} and memory.target.requests == {}


def test_busy_gpu_builder_still_yields_no_capacity_change() -> None:
    analysis = analyze_window(window([pod(gpus=[busy_gpu()])]), EngineSettings())
    assert not [a for a in analysis.actions if a.target and a.target.gpu_capacity_change]


def test_window_confidence_factors_are_named_and_multiply() -> None:
    from gpu_rightsizer.logic.figures import summarise
    from gpu_rightsizer.logic.rules.common import base_confidence, window_factors

    shared = oversized().pods[0].gpus[0].model_copy(update={"shared_by_pods": 2})
    figures = summarise(window([pod(gpus=[shared])]))
    factors = window_factors(figures, EngineSettings())
    assert [f.name for f in factors] == ["sharedGpu"]
    assert (
        base_confidence(figures, EngineSettings())
        == factors[0].value
        == EngineSettings().shared_gpu_confidence
    )


def test_memory_full_slice_moves_to_a_bigger_profile_with_a_target() -> None:
    full = gpu(
        mig_profile="1g.10gb",
        memory_mib=None,  # the slice's own capacity (10 GiB) from the table
        gr_engine_active=stat(0.9, 0.05),
        sm_active=stat(0.6, 0.05),
        fb_used_mib=stat(9800, 100),
    )
    w = window(
        [pod(gpus=[full], restarts=2, oom_killed=True)],
        alloc=allocation(gpu_resource="nvidia.com/mig-1g.10gb"),
    )
    mig = _action(w, ActionType.MIG_PROFILE)
    assert mig.automatic and mig.target is not None and mig.target.gpu_capacity_change
    assert mig.target.remove_resources == ["nvidia.com/mig-1g.10gb"]
    (resource,) = mig.target.limits
    assert resource.startswith("nvidia.com/mig-") and resource != "nvidia.com/mig-1g.10gb"
