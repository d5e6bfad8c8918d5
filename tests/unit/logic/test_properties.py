"""Invariants of the engine over generated windows (hypothesis)."""

from __future__ import annotations

import random
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.logic.logic_builders import START

from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.mig import MigProfile, find_profile, profiles_for, spec_for_product
from gpu_rightsizer.logic.width import PhaseShape, predicted_slowdown
from gpu_rightsizer.model.codes import HEALTH_CODES, ActionType, DiagnosisCode, SharingStrategy
from gpu_rightsizer.model.observation import (
    Allocation,
    GPUObservation,
    HPAInfo,
    PodObservation,
    Signal,
    SignalStats,
    WorkloadRef,
    WorkloadWindow,
)

MODELS = {
    "NVIDIA H100 80GB HBM3": 81559.0,
    "NVIDIA H200": 143771.0,
    "NVIDIA A100-SXM4-40GB": 40960.0,
    "NVIDIA A100-SXM4-80GB": 81920.0,
    "NVIDIA L4": 23034.0,
}
RATIO = [
    Signal.GR_ENGINE_ACTIVE,
    Signal.SM_ACTIVE,
    Signal.SM_OCCUPANCY,
    Signal.TENSOR_ACTIVE,
    Signal.FP32_ACTIVE,
    Signal.DRAM_ACTIVE,
    Signal.GPU_UTIL,
    Signal.THROTTLE_FRACTION,
]
BYTES = [
    Signal.PCIE_RX_BYTES_PER_S,
    Signal.PCIE_TX_BYTES_PER_S,
    Signal.NVLINK_RX_BYTES_PER_S,
    Signal.NVLINK_TX_BYTES_PER_S,
]


@st.composite
def stats(draw: st.DrawFn, high: float, samples: st.SearchStrategy[int] | None = None) -> SignalStats:
    values = sorted(draw(st.lists(st.floats(0.0, high, allow_nan=False), min_size=5, max_size=5)))
    low, p50, p95, p99, top = values
    return SignalStats(
        samples=draw(samples if samples is not None else st.sampled_from([1440, 1440, 720, 5])),
        mean=draw(st.floats(low, top)) if top > low else low,
        p50=p50,
        p95=p95,
        p99=p99,
        max=top,
        min=low,
        active_fraction=draw(st.none() | st.floats(0.0, 1.0)),
        sawtooth=draw(st.none() | st.floats(0.0, 1.0)),
    )


def scaled(source: SignalStats, factor: float) -> SignalStats:
    """The same distribution times `factor` (SM activity never exceeds engine activity)."""
    return source.model_copy(
        update={key: getattr(source, key) * factor for key in ("mean", "p50", "p95", "p99", "max", "min")}
    )


@st.composite
def gpus(draw: st.DrawFn, uuid: str, model: str, mig: str | None, busy_samples: int) -> GPUObservation:
    capacity = MODELS[model] if mig is None else 9.75 * 1024
    chosen: dict[Signal, SignalStats] = {}
    busy = draw(stats(draw(st.sampled_from([0.02, 0.2, 0.4, 1.0])), st.just(busy_samples)))
    chosen[Signal.GR_ENGINE_ACTIVE if draw(st.integers(0, 9)) > 0 else Signal.GPU_UTIL] = busy
    if draw(st.integers(0, 3)) > 0:
        chosen[Signal.SM_ACTIVE] = scaled(busy, draw(st.floats(0.2, 1.0)))
    for signal in (Signal.SM_OCCUPANCY, Signal.TENSOR_ACTIVE, Signal.FP32_ACTIVE, Signal.DRAM_ACTIVE):
        if draw(st.booleans()):
            chosen[signal] = draw(stats(1.0))
    if draw(st.integers(0, 29)) == 0:
        chosen[Signal.THROTTLE_FRACTION] = draw(stats(1.0))
    for signal in BYTES:
        if draw(st.integers(0, 3)) == 0:
            chosen[signal] = draw(stats(draw(st.sampled_from([1e8, 8e11]))))
    if draw(st.integers(0, 4)) > 0:
        chosen[Signal.FB_USED_MIB] = draw(
            stats(capacity * draw(st.sampled_from([0.05, 0.1, 0.2, 0.5, 0.99])))
        )
    xids = (
        draw(st.lists(st.sampled_from([13, 31, 48, 79, 94]), max_size=1))
        if draw(st.integers(0, 29)) == 0
        else []
    )
    return GPUObservation(
        uuid=uuid,
        model_name=model,
        mig_profile=mig,
        memory_total_mib=None if mig else capacity,
        stats=chosen,
        xid_codes=xids,
    )


@st.composite
def windows(draw: st.DrawFn) -> WorkloadWindow:
    model = draw(st.sampled_from(sorted(MODELS)))
    gpu_count = draw(st.sampled_from([1, 1, 2, 3]))
    replicas = draw(st.integers(1, 4))
    mig = (
        "1g.10gb"
        if model == "NVIDIA H100 80GB HBM3" and gpu_count == 1 and draw(st.integers(0, 4)) == 0
        else None
    )
    busy_samples = draw(st.sampled_from([1440, 1440, 720, 5]))
    pods = []
    for index in range(replicas):
        devices = [draw(gpus(f"GPU-{index}-{i}", model, mig, busy_samples)) for i in range(gpu_count)]
        pod_stats: dict[Signal, SignalStats] = {}
        if draw(st.booleans()):
            pod_stats[Signal.CPU_USAGE_CORES] = draw(stats(16.0))
        if draw(st.booleans()):
            pod_stats[Signal.CPU_THROTTLED_RATIO] = draw(stats(1.0))
        if draw(st.booleans()):
            pod_stats[Signal.FS_READ_BYTES_PER_S] = draw(stats(1e9))
        pods.append(
            PodObservation(
                name=f"pod-{index}", gpus=devices, stats=pod_stats, restarts=draw(st.integers(0, 2))
            )
        )
    workload_type = draw(st.sampled_from([None, "training", "inference"]))
    serving: dict[Signal, SignalStats] = {}
    if workload_type == "inference" and draw(st.booleans()):
        serving[Signal.QUEUE_LENGTH] = draw(stats(20.0))
        serving[Signal.REQUESTS_PER_S] = draw(stats(100.0))
    hpa = (
        HPAInfo(name="h", min_replicas=1, max_replicas=replicas + 2) if draw(st.integers(0, 3)) == 0 else None
    )
    allocation = Allocation(
        gpu_resource="nvidia.com/mig-1g.10gb" if mig else "nvidia.com/gpu",
        gpu_count=gpu_count,
        gpu_model=model.replace(" ", "-"),
        mig_profile=mig,
        cpu_request_cores=draw(st.sampled_from([None, 1.0, 4.0])),
        cpu_limit_cores=draw(st.sampled_from([None, 2.0, 8.0])),
        memory_limit_bytes=draw(st.sampled_from([None, 16 * 2**30])),
        replicas=replicas,
        hpa=hpa,
        workload_type=workload_type,
    )
    hours = draw(st.sampled_from([2.0, 2.0, 24.0, 0.25]))
    return WorkloadWindow(
        workload=WorkloadRef(namespace="ns", kind="Deployment", name="w"),
        start=START,
        end=START + timedelta(hours=hours),
        step_seconds=60.0,
        allocation=allocation,
        pods=pods,
        stats=serving,
    )


COMMON = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STRATEGIES = st.sampled_from(list(SharingStrategy))


def _fb_p99_gib(window: WorkloadWindow) -> float:
    return max(
        (
            g.stats[Signal.FB_USED_MIB].p99 / 1024.0
            for p in window.pods
            for g in p.gpus
            if Signal.FB_USED_MIB in g.stats
        ),
        default=0.0,
    )


@COMMON
@given(windows(), STRATEGIES)
def test_mig_profile_always_holds_p99_memory_with_headroom(
    window: WorkloadWindow, sharing: SharingStrategy
) -> None:
    analysis = analyze_window(window, sharing=sharing)
    spec = spec_for_product(window.allocation.gpu_model)
    for action in analysis.actions:
        if (
            action.type is ActionType.MIG_PROFILE
            and analysis.primary is not DiagnosisCode.MEMORY_CAPACITY_BOUND
        ):
            name = action.to_value.split(":")[0].removeprefix("nvidia.com/mig-")
            if action.resource == "nvidia.com/gpu":
                name = action.to_value.split("-MIG-")[1].split(",")[0]
            profile = find_profile(profiles_for(spec), name)
            assert profile is not None
            assert profile.memory_gib >= 1.2 * _fb_p99_gib(window) - 1e-9


@COMMON
@given(windows(), STRATEGIES)
def test_no_mig_or_sharing_for_multi_gpu_work(window: WorkloadWindow, sharing: SharingStrategy) -> None:
    analysis = analyze_window(window, sharing=sharing)
    if window.allocation.gpu_count >= 2:
        assert not {a.type for a in analysis.actions} & {ActionType.MIG_PROFILE, ActionType.GPU_SHARING}


@COMMON
@given(windows())
def test_health_finding_blocks_every_action(window: WorkloadWindow) -> None:
    analysis = analyze_window(window)
    if any(f.code in HEALTH_CODES for f in analysis.findings):
        assert analysis.primary in HEALTH_CODES
        assert analysis.actions == []
        assert analysis.savings.gpu_hours_per_day == 0.0


@COMMON
@given(windows())
def test_no_action_on_insufficient_data(window: WorkloadWindow) -> None:
    analysis = analyze_window(window)
    if any(f.code is DiagnosisCode.INSUFFICIENT_DATA for f in analysis.findings):
        assert analysis.actions == []


@COMMON
@given(windows())
def test_release_only_without_any_gpu_activity(window: WorkloadWindow) -> None:
    analysis = analyze_window(window)
    if any(a.type is ActionType.RELEASE_IDLE for a in analysis.actions):
        busy = [
            (g.stats.get(Signal.GR_ENGINE_ACTIVE) or g.stats[Signal.GPU_UTIL]).max
            for p in window.pods
            for g in p.gpus
        ]
        assert max(busy) <= 0.01
        assert Signal.REQUESTS_PER_S not in window.stats or window.stats[Signal.REQUESTS_PER_S].mean == 0


@COMMON
@given(windows(), st.randoms(use_true_random=False))
def test_result_does_not_depend_on_order(window: WorkloadWindow, rng: random.Random) -> None:
    def shuffled(items: list) -> list:  # type: ignore[type-arg]
        copy = list(items)
        rng.shuffle(copy)
        return copy

    def shuffle_stats(stats: dict[Signal, SignalStats]) -> dict[Signal, SignalStats]:
        return dict(shuffled(list(stats.items())))

    permuted = window.model_copy(
        update={
            "pods": [
                p.model_copy(
                    update={
                        "gpus": [
                            g.model_copy(update={"stats": shuffle_stats(g.stats)}) for g in shuffled(p.gpus)
                        ],
                        "stats": shuffle_stats(p.stats),
                    }
                )
                for p in shuffled(window.pods)
            ],
            "stats": shuffle_stats(window.stats),
        }
    )
    assert analyze_window(permuted).model_dump() == analyze_window(window).model_dump()


@COMMON
@given(windows())
def test_analysis_is_always_well_formed(window: WorkloadWindow) -> None:
    analysis = analyze_window(window)
    assert analysis.findings and analysis.findings[0].code is analysis.primary
    assert 0.0 <= analysis.savings.share_of_allocation <= 1.0
    assert all(f.message for f in analysis.findings)


MIG_MODELS = {
    "NVIDIA H100 80GB HBM3": 81559.0,
    "NVIDIA H200": 143771.0,
    "NVIDIA A100-SXM4-40GB": 40960.0,
    "NVIDIA A100-SXM4-80GB": 81920.0,
}


@st.composite
def small_single_gpu_windows(draw: st.DrawFn) -> WorkloadWindow:
    """Single-GPU windows with low use: the ones that reach slice selection."""
    model = draw(st.sampled_from(sorted(MIG_MODELS)))
    capacity = MIG_MODELS[model]
    busy = draw(st.floats(0.06, 0.5))
    sm = busy * draw(st.floats(0.1, 1.0))
    used = capacity * draw(st.floats(0.0, 0.45))
    signals = {
        Signal.GR_ENGINE_ACTIVE: SignalStats(
            samples=720, mean=busy, p50=busy * 0.8, p95=busy, p99=busy, max=busy
        ),
        Signal.FB_USED_MIB: SignalStats(samples=720, mean=used, p50=used * 0.9, p95=used, p99=used, max=used),
    }
    if draw(st.booleans()):
        signals[Signal.SM_ACTIVE] = SignalStats(samples=720, mean=sm, p50=sm * 0.8, p95=sm, p99=sm, max=sm)
    if draw(st.booleans()):
        dram = draw(st.floats(0.0, 0.4))
        signals[Signal.DRAM_ACTIVE] = SignalStats(
            samples=720, mean=dram, p50=dram, p95=dram, p99=dram, max=dram
        )
    device = GPUObservation(uuid="GPU-0", model_name=model, memory_total_mib=capacity, stats=signals)
    return WorkloadWindow(
        workload=WorkloadRef(namespace="ns", kind="Deployment", name="w"),
        start=START,
        end=START + timedelta(hours=12),
        step_seconds=60.0,
        allocation=Allocation(gpu_model=model.replace(" ", "-"), cpu_limit_cores=8.0),
        pods=[PodObservation(name="p", gpus=[device])],
    )


@COMMON
@given(small_single_gpu_windows(), st.sampled_from([SharingStrategy.MIG_MIXED, SharingStrategy.MIG_SINGLE]))
def test_chosen_slice_is_the_smallest_that_fits(window: WorkloadWindow, sharing: SharingStrategy) -> None:
    """The width model (logic/width.py), not time-averaged SM: the smallest profile within the bound."""
    analysis = analyze_window(window, sharing=sharing)
    spec = spec_for_product(window.allocation.gpu_model)
    assert spec is not None
    device = window.pods[0].gpus[0].stats
    used_gib = device[Signal.FB_USED_MIB].max / 1024.0
    dram = device[Signal.DRAM_ACTIVE].p95 if Signal.DRAM_ACTIVE in device else 0.0
    sm = device.get(Signal.SM_ACTIVE)
    gr = device[Signal.GR_ENGINE_ACTIVE]
    dram_mean = device[Signal.DRAM_ACTIVE].mean if Signal.DRAM_ACTIVE in device else None
    measured = PhaseShape.from_means(gr.mean, sm.mean if sm else None, spec.sms, dram_mean)
    # a Deployment not labelled training is held to the serving bound: GPU-phase latency (duty 1)
    shape = (
        PhaseShape(1.0, measured.width_fraction, measured.sm_count, measured.bandwidth_share)
        if measured is not None
        else None
    )

    def fits(p: MigProfile) -> bool:
        return (
            shape is not None
            and p.memory_gib >= 1.2 * used_gib
            and dram <= p.memory_fraction * 0.8 + 1e-9
            and predicted_slowdown(shape, p.sms, spec.sms, p.memory_fraction) <= 1.25 + 1e-9
        )

    migs = [a for a in analysis.actions if a.type is ActionType.MIG_PROFILE]
    if not migs:
        return
    name = migs[0].to_value.split(":")[0].removeprefix("nvidia.com/mig-")
    if sharing is SharingStrategy.MIG_SINGLE:
        name = migs[0].to_value.split("-MIG-")[1].split(",")[0]
    chosen = find_profile(spec.mig_profiles, name)
    assert chosen is not None and fits(chosen)
    smaller = [
        p for p in spec.mig_profiles if not p.media_extensions and p.gpu_fraction < chosen.gpu_fraction
    ]
    assert not any(fits(p) for p in smaller)
