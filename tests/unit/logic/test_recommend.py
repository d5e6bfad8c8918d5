"""Actions: what is recommended for each finding, in which order, and what is never recommended."""

from __future__ import annotations

import pytest
from tests.unit.logic.logic_builders import PROVEN, allocation, busy_gpu, gpu, hpa, pod, stat, window
from tests.unit.logic.test_diagnose import (
    CASES,
    bandwidth_bound,
    communication,
    cpu_bound,
    idle,
    io_bound,
    memory_capacity,
    no_tensor_cores,
    over_replicated,
    oversized,
    under_replicated,
)

from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import ActionType, DiagnosisCode, SharingStrategy
from gpu_rightsizer.model.observation import Signal, WorkloadWindow


def action_types(w: WorkloadWindow, **kwargs: object) -> list[ActionType]:
    return [a.type for a in analyze_window(w, **kwargs).actions]  # type: ignore[arg-type]


def test_cpu_bound_gets_software_then_cpu_within_literature_bounds() -> None:
    analysis = analyze_window(cpu_bound())
    assert [a.type for a in analysis.actions][:2] == [ActionType.SOFTWARE, ActionType.CPU]
    cpu = next(a for a in analysis.actions if a.type is ActionType.CPU)
    cores = float(cpu.to_value.split()[0])
    # usage 7.9 cores p95, throttled 60 %: demand ≈ 12.6 → /0.7 ≈ 18 cores, within 3-24 per GPU
    assert 8.0 * 1.2 <= cores <= 24.0
    assert cpu.automatic and cpu.resource == "cpu"


def test_cpu_recommendation_is_capped_at_24_cores_per_gpu() -> None:
    w = cpu_bound()
    hungry = w.pods[0].model_copy(
        update={"stats": {Signal.CPU_USAGE_CORES: stat(20.0), Signal.CPU_THROTTLED_RATIO: stat(0.9)}}
    )
    analysis = analyze_window(window([hungry], alloc=allocation(cpu_limit_cores=20.0)))
    cpu = next(a for a in analysis.actions if a.type is ActionType.CPU)
    assert float(cpu.to_value.split()[0]) == 24.0


def test_cpu_recommendation_has_a_floor_of_three_cores_per_gpu() -> None:
    w = cpu_bound()
    tiny = w.pods[0].model_copy(
        update={"stats": {Signal.CPU_USAGE_CORES: stat(0.99), Signal.CPU_THROTTLED_RATIO: stat(0.3)}}
    )
    analysis = analyze_window(window([tiny], alloc=allocation(cpu_limit_cores=1.0, cpu_request_cores=1.0)))
    cpu = next(a for a in analysis.actions if a.type is ActionType.CPU)
    assert float(cpu.to_value.split()[0]) >= 3.0


def test_tiny_cpu_change_is_not_proposed() -> None:
    w = cpu_bound()
    near = w.pods[0].model_copy(
        update={"stats": {Signal.CPU_USAGE_CORES: stat(16.0), Signal.CPU_THROTTLED_RATIO: stat(0.0)}}
    )
    # usage 16 of 24 cores... limit already at the 24-core cap: nothing to add
    analysis = analyze_window(window([near], alloc=allocation(cpu_limit_cores=16.5, cpu_request_cores=16.5)))
    assert analysis.primary is DiagnosisCode.INPUT_PIPELINE_CPU_BOUND
    cpu = [a for a in analysis.actions if a.type is ActionType.CPU]
    assert all(float(a.to_value.split()[0]) - 16.5 >= max(0.5, 0.2 * 16.5) for a in cpu)


def test_memory_is_raised_with_cpu_when_the_working_set_is_tight() -> None:
    w = cpu_bound()
    tight = w.pods[0].model_copy(
        update={"stats": {**w.pods[0].stats, Signal.MEMORY_WORKING_SET_BYTES: stat(60 * 2**30)}}
    )
    types = action_types(window([tight]))
    assert ActionType.MEMORY in types


def test_idle_without_activity_is_released() -> None:
    analysis = analyze_window(idle())
    assert [a.type for a in analysis.actions] == [ActionType.RELEASE_IDLE]
    assert analysis.savings.share_of_allocation == 1.0
    assert analysis.savings.gpu_hours_per_day == 24.0


def test_idle_with_activity_is_moved_to_a_slice_not_released() -> None:
    rare = gpu(
        gr_engine_active=stat(0.002, 0.02, peak=0.3),
        sm_active=stat(0.0005, 0.005, peak=0.1),  # kernels ran: not idle; phases 25 % of the SMs wide
        fb_used_mib=stat(3000),
    )
    types = action_types(window([pod(gpus=[rare])]))
    assert ActionType.RELEASE_IDLE not in types
    assert ActionType.MIG_PROFILE in types


def test_live_service_is_never_released() -> None:
    w = window(
        [pod(gpus=[gpu(gr_engine_active=stat(0.0), fb_used_mib=stat(3000))])],
        alloc=allocation(workload_type="inference"),
        stats={Signal.REQUESTS_PER_S: stat(0.2)},
    )
    assert ActionType.RELEASE_IDLE not in action_types(w)


def test_oversized_gets_smallest_fitting_mig_profile() -> None:
    analysis = analyze_window(oversized())
    mig = next(a for a in analysis.actions if a.type is ActionType.MIG_PROFILE)
    # 8.3 GiB used → needs ≥ 10 GiB; phases SM/GR 0.275 × 132 = 36 SMs wide: on 1g.20gb (26 SMs) a GPU
    # phase takes 1.4× (over the 1.25× serving bound), on 2g.20gb (32 SMs) 1.13× → 2g.20gb
    assert mig.to_value.startswith("nvidia.com/mig-2g.20gb")
    assert mig.resource == "nvidia.com/mig-2g.20gb"
    assert analysis.savings.share_of_allocation == pytest.approx(5 / 7, abs=1e-3)


def test_mig_single_uses_gpu_resource_and_node_selector() -> None:
    analysis = analyze_window(oversized(), sharing=SharingStrategy.MIG_SINGLE)
    mig = next(a for a in analysis.actions if a.type is ActionType.MIG_PROFILE)
    assert mig.resource == "nvidia.com/gpu"
    assert "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-MIG-2g.20gb" in mig.to_value
    assert "nvidia.com/mig.config=all-2g.20gb" in mig.to_value


def rare_job() -> WorkloadWindow:
    """A training Job busy 1 % of the time in narrow phases, 20 GB used: a time-sliced share of 1/3
    predicts (1 − 0.01) + 0.01 × 3 = 1.02× its step time, within the 5 % bound."""
    return window(
        [
            pod(
                gpus=[
                    gpu(
                        gr_engine_active=stat(0.01, 0.005),
                        sm_active=stat(0.003, 0.002),
                        fb_used_mib=stat(20000, 200),
                    )
                ]
            )
        ],
        alloc=allocation(workload_type="training"),
        kind="Job",
    )


@pytest.mark.parametrize("strategy", [SharingStrategy.TIME_SLICING, SharingStrategy.MPS])
def test_time_slicing_or_mps_when_no_mig(strategy: SharingStrategy) -> None:
    analysis = analyze_window(rare_job(), PROVEN, sharing=strategy)
    sharing = next(a for a in analysis.actions if a.type is ActionType.GPU_SHARING)
    assert sharing.resource == "nvidia.com/gpu.shared"
    assert sharing.automatic
    assert ActionType.MIG_PROFILE not in [a.type for a in analysis.actions]


def test_no_sharing_strategy_means_no_sharing_action() -> None:
    analysis = analyze_window(rare_job(), PROVEN, sharing=SharingStrategy.NONE)
    assert not [a for a in analysis.actions if a.type in (ActionType.GPU_SHARING, ActionType.MIG_PROFILE)]
    assert analysis.savings.gpu_hours_per_day == 0


def test_a_pod_already_on_a_share_gets_no_sharing_action() -> None:
    job = rare_job()
    shared = job.model_copy(
        update={"allocation": job.allocation.model_copy(update={"sharing": "time-slicing"})}
    )
    for strategy in (
        SharingStrategy.TIME_SLICING,
        SharingStrategy.TIME_SLICING_NO_RENAME,
        SharingStrategy.MPS,
    ):
        assert any(
            a.type is ActionType.GPU_SHARING for a in analyze_window(job, PROVEN, sharing=strategy).actions
        )
        analysis = analyze_window(shared, PROVEN, sharing=strategy)
        assert not [a for a in analysis.actions if a.type is ActionType.GPU_SHARING], strategy


def test_a_share_without_rename_selects_the_shared_product_with_nvidia_com_gpu() -> None:
    analysis = analyze_window(rare_job(), PROVEN, sharing=SharingStrategy.TIME_SLICING_NO_RENAME)
    sharing = next(a for a in analysis.actions if a.type is ActionType.GPU_SHARING)
    assert sharing.resource == "nvidia.com/gpu" and "gpu.shared" not in sharing.to_value
    assert "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-SHARED" in sharing.to_value
    assert not sharing.automatic and sharing.target is None  # a node-selector move: advice


def l4_job() -> WorkloadWindow:
    """The rare training Job on an L4, a GPU without MIG, using 6 GB."""
    base = (
        rare_job().pods[0].gpus[0].model_copy(update={"model_name": "NVIDIA L4", "memory_total_mib": 23034})
    )
    w = window(
        [pod(gpus=[base.model_copy(update={"stats": {**base.stats, Signal.FB_USED_MIB: stat(6000)}})])],
        alloc=allocation(gpu_model="NVIDIA-L4", workload_type="training"),
        kind="Job",
    )
    return w


def test_mig_strategy_on_a_gpu_without_mig_says_so_and_never_enable_mig() -> None:
    w = l4_job()
    for strategy in (SharingStrategy.MIG_MIXED, SharingStrategy.MIG_SINGLE):
        sharing = next(a for a in analyze_window(w, PROVEN, sharing=strategy).actions)
        assert sharing.type is ActionType.GPU_SHARING
        assert "NVIDIA-L4 has no MIG" in sharing.reason and "enable MIG" not in sharing.reason


def test_allowed_profiles_restrict_the_choice() -> None:
    analysis = analyze_window(oversized(), allowed_mig_profiles=["3g.40gb"])
    mig = next(a for a in analysis.actions if a.type is ActionType.MIG_PROFILE)
    assert "3g.40gb" in mig.to_value


def test_non_mig_gpu_falls_back_to_sharing() -> None:
    w = l4_job()
    types = action_types(w)
    assert ActionType.MIG_PROFILE not in types
    assert ActionType.GPU_SHARING in types


def test_mig_slice_that_is_too_big_shrinks() -> None:
    slice_ = gpu(
        mig_profile="3g.40gb",
        memory_mib=40448,
        gr_engine_active=stat(0.2, 0.05),
        sm_active=stat(0.1, 0.05),
        fb_used_mib=stat(6000),
    )
    w = window(
        [pod(gpus=[slice_])], alloc=allocation(gpu_resource="nvidia.com/mig-3g.40gb", mig_profile="3g.40gb")
    )
    analysis = analyze_window(w)
    assert analysis.primary is DiagnosisCode.OVERSIZED_GPU
    mig = next(a for a in analysis.actions if a.type is ActionType.MIG_PROFILE)
    # phases SM/GR 0.5 of the slice's 60 SMs = 30 SMs wide: 1g.10gb (16 SMs) stretches a GPU phase
    # 1.9×, 1g.20gb (26 SMs) 1.15× (within the 1.25× bound)
    assert mig.to_value.startswith("nvidia.com/mig-1g.20gb")
    assert mig.predicted_slowdown is not None and mig.predicted_slowdown <= 1.25


def test_under_replicated_scales_out() -> None:
    analysis = analyze_window(under_replicated())
    replicas = next(a for a in analysis.actions if a.type is ActionType.REPLICAS)
    assert int(replicas.to_value) > int(replicas.from_value) == 2


def test_under_replicated_with_hpa_raises_hpa_max_instead() -> None:
    w = under_replicated().model_copy(
        update={"allocation": allocation(replicas=2, workload_type="inference", hpa=hpa(1, 2))}
    )
    types = action_types(w)
    assert ActionType.REPLICAS not in types
    assert ActionType.HPA_BOUNDS in types


def test_over_replicated_scales_in_and_saves() -> None:
    analysis = analyze_window(over_replicated())
    replicas = next(a for a in analysis.actions if a.type is ActionType.REPLICAS)
    assert int(replicas.to_value) < 4
    assert analysis.savings.gpu_hours_per_day > 0


def test_over_replicated_with_hpa_lowers_hpa_min() -> None:
    w = over_replicated().model_copy(
        update={"allocation": allocation(replicas=4, workload_type="inference", hpa=hpa(4, 8))}
    )
    analysis = analyze_window(w)
    bounds = next(a for a in analysis.actions if a.type is ActionType.HPA_BOUNDS)
    assert bounds.from_value == "4-8"
    assert bounds.to_value.endswith("-8")
    assert ActionType.REPLICAS not in [a.type for a in analysis.actions]


def test_memory_capacity_gets_software_then_bigger_gpu_then_more_gpus() -> None:
    types = action_types(memory_capacity())
    assert types == [ActionType.SOFTWARE, ActionType.GPU_MODEL, ActionType.GPU_COUNT]
    model = next(a for a in analyze_window(memory_capacity()).actions if a.type is ActionType.GPU_MODEL)
    assert "H200" in model.to_value or "NVL" in model.to_value


def test_memory_capacity_on_a_slice_grows_the_slice() -> None:
    slice_ = busy_gpu(fb_used_mib=stat(19800)).model_copy(
        update={"mig_profile": "2g.20gb", "memory_total_mib": 20090}
    )
    w = window(
        [pod(gpus=[slice_], restarts=2)],
        alloc=allocation(gpu_resource="nvidia.com/mig-2g.20gb", mig_profile="2g.20gb"),
    )
    analysis = analyze_window(w)
    assert analysis.primary is DiagnosisCode.MEMORY_CAPACITY_BOUND
    mig = next(a for a in analysis.actions if a.type is ActionType.MIG_PROFILE)
    assert "40gb" in mig.to_value


@pytest.mark.parametrize(
    "make", [io_bound, communication, bandwidth_bound, no_tensor_cores], ids=lambda f: f.__name__
)
def test_efficiency_findings_give_non_automatic_advice_first(make) -> None:  # type: ignore[no-untyped-def]
    analysis = analyze_window(make())
    assert analysis.actions
    assert analysis.actions[0].type is ActionType.SOFTWARE
    assert not analysis.actions[0].automatic
    assert all(
        not a.automatic
        for a in analysis.actions
        if a.type in {ActionType.SOFTWARE, ActionType.INFRASTRUCTURE, ActionType.GPU_MODEL}
    )


def test_communication_bound_never_recommends_mig() -> None:
    assert ActionType.MIG_PROFILE not in action_types(communication())


def test_data_path_finding_withholds_sizing_actions() -> None:
    w = cpu_bound()
    small = (
        w.pods[0]
        .gpus[0]
        .model_copy(update={"stats": {**w.pods[0].gpus[0].stats, Signal.FB_USED_MIB: stat(5000)}})
    )
    w2 = window([w.pods[0].model_copy(update={"gpus": [small]})])
    types = action_types(w2)
    assert ActionType.MIG_PROFILE not in types
    assert ActionType.CPU in types


_TIER = {
    ActionType.SOFTWARE: 0,
    ActionType.REPLICAS: 1,
    ActionType.HPA_BOUNDS: 1,
    ActionType.RELEASE_IDLE: 1,
    ActionType.CPU: 2,
    ActionType.MEMORY: 2,
    ActionType.INFRASTRUCTURE: 2,
    ActionType.MIG_PROFILE: 3,
    ActionType.GPU_SHARING: 3,
    ActionType.GPU_MODEL: 4,
    ActionType.GPU_COUNT: 5,
}


@pytest.mark.parametrize("code", list(CASES), ids=lambda c: c.value)
def test_actions_are_cheapest_first(code: DiagnosisCode) -> None:
    tiers = [_TIER[a.type] for a in analyze_window(CASES[code]()).actions]
    assert tiers == sorted(tiers)


def test_settings_override_changes_the_outcome() -> None:
    strict = EngineSettings().with_overrides({"oversizedMaxDeviceShare": 0.01})
    assert analyze_window(oversized(), strict).primary is not DiagnosisCode.OVERSIZED_GPU


def _starved(usage: float, busy_p95: float, limit: float) -> WorkloadWindow:
    starved_pod = pod(
        gpus=[
            busy_gpu(gr_engine_active=stat(busy_p95 * 0.8, busy_p95 * 0.2), sm_active=stat(busy_p95 * 0.7))
        ],
        cpu_usage_cores=stat(usage * 0.98, usage * 0.02),
        cpu_throttled_ratio=stat(0.5),
    )
    return window([starved_pod], alloc=allocation(cpu_limit_cores=limit, cpu_request_cores=limit))


def _cpu_cores(w: WorkloadWindow) -> float:
    analysis = analyze_window(w)
    assert analysis.primary is DiagnosisCode.INPUT_PIPELINE_CPU_BOUND, analysis.summary
    cpu = next(a for a in analysis.actions if a.type is ActionType.CPU)
    return float(cpu.to_value.split()[0])


def test_cpu_demand_scales_with_the_busy_deficit() -> None:
    """use / 0.7 would say 2.03 × 1.5 / 0.7 ≈ 4.4; the busy deficit says 2.03 × 0.8 / 0.22 ≈ 7.4 → 8."""
    assert _cpu_cores(_starved(2.03, 0.22, 2.0)) == 8.0


def test_cpu_step_is_bounded_by_the_step_factor() -> None:
    """Busy 0.06 would ask for 2 × 0.8 / 0.06 ≈ 27 cores; one step goes to 4 × 2 = 8 at most."""
    assert _cpu_cores(_starved(2.0, 0.06, 2.0)) == 8.0


def test_cpu_demand_is_bounded_by_the_literature_maximum() -> None:
    assert _cpu_cores(_starved(12.0, 0.2, 12.0)) == 24.0
