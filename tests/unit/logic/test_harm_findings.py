"""The eleven harm findings of the second engine review (docs/reviews/engine-review-2.md, H1–H11).

Each case is rebuilt as the review built it: in the engine's data model from the review's figures, or
(H3, H8) from a project H200 recording re-rendered the way real collection stores it
(`gpu_rightsizer.sim.rerender`). Each test asserts the safe outcome through public outputs only:
no action that takes GPU capacity away (a MIG slice of a whole GPU, a shared GPU, a release, fewer
GPUs, fewer replicas, a lower HPA minimum), no automatic action where the review says actions must be
blocked, and, where the review names the right answer, one of the accepted codes (by its string, so a
code this engine does not know yet, e.g. ServingHostBound, can satisfy it) or a waiting cause.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit.logic.logic_builders import allocation, gpu, pod, stat, window
from tests.unit.logic.safety import WAITING_CAUSES, assert_safe, describe, reduces_capacity

from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.mig import find_profile, profiles_for, spec_for_product
from gpu_rightsizer.logic.sharing import observe_sharing
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import ActionType, SharingStrategy
from gpu_rightsizer.model.observation import (
    Allocation,
    GPUObservation,
    PodObservation,
    Signal,
    SignalStats,
    WorkloadWindow,
)
from gpu_rightsizer.sim import rerender

H200 = "NVIDIA H200"
H200_PRODUCT = "NVIDIA-H200"
H200_MIB = 143771.0
H200_SMS = 132
GIB = 2**30
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "h200"

ALL_SHARING = (SharingStrategy.MIG_MIXED, SharingStrategy.TIME_SLICING, SharingStrategy.NONE)


#: Samples of a 25 h window at a 30 s step.
DAY_SAMPLES = 3000


def day(value: float, spread: float = 0.0, *, peak: float | None = None) -> SignalStats:
    """`stat` over a 25 h window at a 30 s step."""
    return stat(value, spread, samples=DAY_SAMPLES, peak=peak)


def h200_of(signals: dict[str, SignalStats], uuid: str = "GPU-0") -> GPUObservation:
    """An H200 with the signals of a dict (Signal value → stats)."""
    device = gpu(uuid, model=H200, memory_mib=H200_MIB)
    return device.model_copy(update={"stats": {Signal(k): v for k, v in signals.items()}})


def h200(uuid: str = "GPU-0", **signals: SignalStats) -> GPUObservation:
    return h200_of(signals, uuid)


def pod_of(name: str, gpus: list[GPUObservation], signals: dict[str, SignalStats]) -> PodObservation:
    """A pod with pod-level signals of a dict (Signal value → stats)."""
    return pod(name, gpus).model_copy(update={"stats": {Signal(k): v for k, v in signals.items()}})


Level = tuple[float, float]


def h200_levels(
    fb_mib: float,
    busy: Level,
    sm: Level,
    tensor: Level,
    dram: Level,
    *,
    occupancy: Level | None = None,
    fb_spread: float = 0.0,
    long: bool = False,
    uuid: str = "GPU-0",
) -> GPUObservation:
    """An H200 from (value, spread) levels of its activity fields and the memory it holds."""
    make = day if long else stat
    levels = {"gr_engine_active": busy, "sm_active": sm, "tensor_active": tensor, "dram_active": dram}
    if occupancy is not None:
        levels["sm_occupancy"] = occupancy
    signals = {name: make(value, spread) for name, (value, spread) in levels.items()}
    signals["fb_used_mib"] = make(fb_mib - fb_spread, fb_spread)
    signals["fb_free_mib"] = make(H200_MIB - fb_mib, fb_spread)
    return h200_of(signals, uuid)


def h200_allocation(**changes: object) -> Allocation:
    return allocation(gpu_model=H200_PRODUCT, **changes)


# --- H1: a live Deployment at 0.3 req/s is scaled to zero --------------------------------------------
def _low_traffic_server(with_sm: bool) -> WorkloadWindow:
    """tiny-server re-rendered at 0.3 req/s, 30 s DCGM averages, 25 h (review H1's figures)."""
    samples = 3000
    signals = {
        "gr_engine_active": SignalStats(
            samples=samples, mean=8.6e-5, p50=8.4e-5, p95=1.02e-4, p99=1.09e-4, max=1.2e-4, min=6e-5
        ),
        "fb_used_mib": stat(4910.8, samples=samples),
        "fb_free_mib": stat(H200_MIB - 4910.8, samples=samples),
        "pcie_rx_bytes_per_s": stat(0.6e6, 0.5e6, samples=samples),
        "pcie_tx_bytes_per_s": stat(0.4e6, 0.3e6, samples=samples),
    }
    if with_sm:
        signals["sm_active"] = SignalStats(
            samples=samples, mean=1.1e-5, p50=1.07e-5, p95=1.6e-5, p99=1.91e-5, max=2.39e-5, min=0.0
        )
        signals["sm_occupancy"] = stat(2e-6, 1e-6, samples=samples)
        signals["tensor_active"] = stat(0.0, samples=samples)
        signals["dram_active"] = stat(1e-5, 1e-5, samples=samples)
    cpu = {"cpu_usage_cores": stat(0.0015, 0.002, samples=samples)}
    return window(
        [pod_of("tiny-server-0", [h200_of(signals)], cpu)],
        alloc=h200_allocation(cpu_limit_cores=2.0, cpu_request_cores=2.0, workload_type="inference"),
        hours=25.0,
        step=30.0,
    )


@pytest.mark.parametrize("with_sm", [True, False], ids=["profiling-fields", "default-counters"])
def test_h1_a_server_at_low_traffic_is_never_released(with_sm: bool) -> None:
    """SM activity above 0 means kernels ran; a loaded model with no proof of no traffic is live."""
    subject = _low_traffic_server(with_sm)
    analysis = analyze_window(subject)
    assert not [a for a in analysis.actions if a.type is ActionType.RELEASE_IDLE], describe(analysis)
    assert analysis.primary.value != "IdleAllocation", describe(analysis)
    assert_safe(analysis, subject, accepted=None)


# --- H2: the CPU dead zone between R2 and R2c -----------------------------------------------------------
def _starved(cpu_limit: float, cpu_p50: float, cpu_p95: float, **pod_extra: SignalStats) -> WorkloadWindow:
    """A loader-fed trainer with its GPU starved (loader figures: busy p50 0.11, SM/GR 0.89)."""
    signals = {
        "gr_engine_active": stat(0.12, 0.05, sawtooth=0.0),
        "sm_active": stat(0.105, 0.045),
        "sm_occupancy": stat(0.06, 0.03),
        "tensor_active": stat(0.015, 0.007),
        "fp32_active": stat(0.004, 0.002),
        "dram_active": stat(0.055, 0.025),
        "fb_used_mib": stat(13388.8),
        "fb_free_mib": stat(H200_MIB - 13388.8),
        "pcie_rx_bytes_per_s": stat(0.9e8, 0.4e8),
    }
    pod_signals: dict[str, SignalStats] = {"cpu_usage_cores": stat(cpu_p50, cpu_p95 - cpu_p50)}
    pod_signals.update(pod_extra)
    return window(
        [pod_of("trainer-0", [h200_of(signals)], pod_signals)],
        alloc=h200_allocation(
            cpu_limit_cores=cpu_limit, cpu_request_cores=cpu_limit, workload_type="training", replicas=1
        ),
        kind="Job",
        hours=2.0,
        step=30.0,
    )


H2_CASES = {
    # loader-one-worker under a 1.5-core limit: one worker pinned at 1.00 core (node agent)
    "one-worker-1.5-cores-agent": _starved(
        1.5, 1.08, 1.13, process_cpu_max_cores=stat(1.0, 0.005), processes_pinned=stat(1.0)
    ),
    "one-worker-1.5-cores": _starved(1.5, 1.08, 1.13),
    # starved-loader (2 workers, CPU p95 2.00) under a 2.5-core limit
    "two-workers-2.5-cores": _starved(2.5, 1.97, 2.03),
    # synthetic: 3 workers under 4 cores
    "three-workers-4-cores": _starved(4.0, 3.1, 3.55),
    # synthetic: 2 workers under 2.5 cores with 8 % throttling
    "two-workers-2.5-cores-throttled": _starved(2.5, 1.9, 2.1, cpu_throttled_ratio=stat(0.08, 0.02)),
}


@pytest.mark.parametrize("case", sorted(H2_CASES))
@pytest.mark.parametrize("sharing", ALL_SHARING, ids=[s.value for s in ALL_SHARING])
def test_h2_a_cpu_starved_loader_is_never_sliced(case: str, sharing: SharingStrategy) -> None:
    assert_safe(analyze_window(H2_CASES[case], sharing=sharing), H2_CASES[case], accepted=WAITING_CAUSES)


# --- H3: `analyze --openmetrics` turns cAdvisor staleness into CPU spikes ------------------------------
@pytest.mark.parametrize(("scrape", "seed"), [(15.0, 1), (15.0, 2), (30.0, 2)])
def test_h3_scrape_stamped_cadvisor_does_not_slice_the_one_worker_loader(scrape: float, seed: int) -> None:
    """loader-one-worker at a 15/30 s scrape, cAdvisor housekeeping U(10, 20) s stamped with scrape time."""
    variant = rerender.Variant(scrape_seconds=scrape, cadvisor_timestamps="scrape", seed=seed)
    subject, analysis = rerender.analyze_openmetrics(FIXTURES / "loader-one-worker.om.gz", variant)
    assert_safe(analysis, subject, accepted=WAITING_CAUSES)
    cpu = subject.pods[0].stats[Signal.CPU_USAGE_CORES]
    assert cpu.p95 < 1.3, f"CPU p95 {cpu.p95:.2f} against a true 1.09–1.13: staleness read as spikes"


# --- H4: an I/O-starved loader below 100 MiB/s is sliced ----------------------------------------------
def _io_starved(read_mib_per_s: float, busy: float, sm: float, sawtooth: float) -> WorkloadWindow:
    signals = {
        "gr_engine_active": stat(busy, 0.05, sawtooth=sawtooth),
        "sm_active": stat(sm, 0.04),
        "sm_occupancy": stat(0.08, 0.03),
        "tensor_active": stat(0.05, 0.02),
        "dram_active": stat(0.08, 0.03),
        "fb_used_mib": stat(20000.0),
        "fb_free_mib": stat(H200_MIB - 20000.0),
    }
    pod_signals = {
        "cpu_usage_cores": stat(0.6, 0.15),
        "net_rx_bytes_per_s": stat(read_mib_per_s * 2**20, 0.2 * read_mib_per_s * 2**20),
    }
    return window(
        [pod_of("trainer-0", [h200_of(signals)], pod_signals)],
        alloc=h200_allocation(cpu_limit_cores=8.0, workload_type="training"),
        kind="Job",
        hours=2.0,
        step=30.0,
    )


H4_CASES = {
    "nfs-80MiB": _io_starved(80.0, busy=0.15, sm=0.13, sawtooth=0.0),
    "fuse-60MiB-sawtooth": _io_starved(60.0, busy=0.4, sm=0.33, sawtooth=0.4),
}


@pytest.mark.parametrize("case", sorted(H4_CASES))
@pytest.mark.parametrize("sharing", ALL_SHARING, ids=[s.value for s in ALL_SHARING])
def test_h4_reads_while_the_gpu_starves_veto_a_shrink(case: str, sharing: SharingStrategy) -> None:
    assert_safe(analyze_window(H4_CASES[case], sharing=sharing), H4_CASES[case], accepted=WAITING_CAUSES)


# --- H5: a serving fleet crashing on GPU OOM is scaled in ---------------------------------------------
def _oom_fleet() -> WorkloadWindow:
    used = 133 * 1024.0
    pods = [
        pod(
            f"server-{i}",
            [
                h200_levels(
                    used,
                    (0.11, 0.04),
                    (0.09, 0.03),
                    (0.04, 0.02),
                    (0.1, 0.03),
                    fb_spread=3000.0,
                    long=True,
                    uuid=f"GPU-{i}",
                )
            ],
            restarts=3,
            cpu_usage_cores=day(1.0, 0.3),
        )
        for i in range(4)
    ]
    return window(
        pods,
        alloc=h200_allocation(replicas=4, workload_type="inference"),
        hours=25.0,
        step=30.0,
        stats={Signal.REQUESTS_PER_S: day(40.0, 10.0), Signal.QUEUE_LENGTH: day(0.0)},
    )


@pytest.mark.parametrize("sharing", ALL_SHARING, ids=[s.value for s in ALL_SHARING])
def test_h5_a_fleet_crashing_on_gpu_memory_is_not_scaled_in(sharing: SharingStrategy) -> None:
    subject = _oom_fleet()
    accepted = frozenset({"MemoryCapacityBound", "CrashLooping"})
    assert_safe(analyze_window(subject, sharing=sharing), subject, accepted=accepted, no_automatic=True)


# --- H6: a queueing server whose bottleneck is the CPU is sliced ---------------------------------------
def _cpu_bound_queueing_server() -> WorkloadWindow:
    device = h200_levels(
        30000.0, (0.3, 0.05), (0.22, 0.03), (0.1, 0.03), (0.15, 0.05), occupancy=(0.1, 0.03), long=True
    )
    queue = SignalStats(
        samples=DAY_SAMPLES, mean=12.0, p50=12.0, p95=20.0, p99=24.0, max=30.0, active_fraction=0.9
    )
    return window(
        [pod("server-0", [device], cpu_usage_cores=day(2.1, 0.5, peak=2.6))],
        alloc=h200_allocation(cpu_limit_cores=4.0, workload_type="inference"),
        hours=25.0,
        step=30.0,
        stats={Signal.QUEUE_LENGTH: queue, Signal.REQUESTS_PER_S: day(50.0, 5.0)},
    )


@pytest.mark.parametrize("sharing", ALL_SHARING, ids=[s.value for s in ALL_SHARING])
def test_h6_a_sustained_queue_vetoes_every_shrink(sharing: SharingStrategy) -> None:
    subject = _cpu_bound_queueing_server()
    accepted = frozenset({"ServingHostBound", "InputPipelineCPUBound", "UnderReplicated"})
    assert_safe(analyze_window(subject, sharing=sharing), subject, accepted=accepted)


# --- H7: a memory peak outside the window leads to a slice, then OOM ----------------------------------
def test_h7_no_automatic_slice_on_one_window_of_memory_history() -> None:
    """A trainer at 30 GiB in a 1 h window whose evaluation peaks at 90 GiB every 2 h."""
    used = 30 * 1024.0
    subject = window(
        [
            pod(
                "trainer-0",
                [
                    h200_levels(
                        used,
                        (0.35, 0.05),
                        (0.3, 0.05),
                        (0.2, 0.05),
                        (0.2, 0.05),
                        occupancy=(0.2, 0.05),
                        fb_spread=200.0,
                    )
                ],
                cpu_usage_cores=stat(2.0, 0.3),
            )
        ],
        alloc=h200_allocation(cpu_limit_cores=16.0, workload_type="training"),
        kind="Job",
        hours=1.0,
        step=30.0,
    )
    for sharing in ALL_SHARING:
        analysis = analyze_window(subject, sharing=sharing)
        automatic = [a for a in analysis.actions if a.automatic and reduces_capacity(a, subject)]
        assert not automatic, f"{sharing.value}: {describe(analysis)}"


# --- H8: a pod replaced on the same GPU is read as time-slicing ---------------------------------------
@pytest.mark.parametrize(
    ("recording", "expected"),
    [("pageable-h2d", "HostTransferBound"), ("fp32-gemm", "NoTensorCores")],
)
def test_h8_a_pod_replaced_on_the_same_gpu_is_not_a_sharer(recording: str, expected: str) -> None:
    variant = rerender.Variant(perturbation="pod-replaced", seed=0)
    subject, analysis = rerender.analyze_openmetrics(FIXTURES / f"{recording}.om.gz", variant)
    assert subject.allocation.sharing == "exclusive", subject.allocation
    assert all(g.shared_by_pods == 1 for p in subject.pods for g in p.gpus)
    assert expected in {f.code.value for f in analysis.findings}, describe(analysis)
    assert_safe(analysis, subject)


# --- H9: a host-RAM OOM crash loop is sliced, and memory is never raised ------------------------------
def test_h9_a_host_oom_crash_loop_gets_memory_not_a_slice() -> None:
    subject = window(
        [
            pod(
                "server-0",
                [h200_levels(4096.0, (0.05, 0.03), (0.04, 0.02), (0.02, 0.01), (0.03, 0.01), long=True)],
                restarts=7,
                oom_killed=True,
                cpu_usage_cores=day(0.5, 0.2),
                memory_working_set_bytes=day(31.0 * GIB, 0.9 * GIB),
            )
        ],
        alloc=h200_allocation(
            memory_limit_bytes=32 * GIB, memory_request_bytes=32 * GIB, workload_type="inference"
        ),
        hours=25.0,
        step=30.0,
    )
    for sharing in ALL_SHARING:
        analysis = analyze_window(subject, sharing=sharing)
        assert_safe(analysis, subject, accepted=frozenset({"CrashLooping"}))
        gpu_actions = [a for a in analysis.actions if a.automatic and a.type is not ActionType.MEMORY]
        assert not gpu_actions, f"{sharing.value}: {describe(analysis)}"
        memory = [a for a in analysis.actions if a.type is ActionType.MEMORY]
        assert memory, f"{sharing.value}: no memory-limit raise: {describe(analysis)}"


# --- H10: confidence never gates actuation ------------------------------------------------------------
def test_h10_no_automatic_action_below_the_default_minimum_confidence() -> None:
    """tiny-server as the review saw it after a pod replacement: shared copies, gaps, source warnings."""
    signals = {
        "gr_engine_active": stat(4.2e-4, 1e-4, samples=40),
        "gpu_util": stat(0.0, 0.01, samples=40),
        "fb_used_mib": stat(4910.8, samples=40),
        "fb_free_mib": stat(H200_MIB - 4910.8, samples=40),
    }
    pods = [
        pod(
            f"tiny-server-{i}",
            [h200_of(signals).model_copy(update={"shared_by_pods": 2})],
            cpu_usage_cores=stat(0.005, 0.005, samples=40),
        )
        for i in range(2)
    ]
    read = window(
        pods,
        alloc=h200_allocation(replicas=1, cpu_limit_cores=2.0, workload_type="inference"),
        hours=1.0,
        step=30.0,
    ).model_copy(update={"warnings": ["2 gap(s) in the GPU series of GPU-0, the longest 300s"]})
    subject, _ = observe_sharing(read)
    settings = EngineSettings(min_window_seconds=1800.0)
    for sharing in ALL_SHARING:
        analysis = analyze_window(subject, settings, sharing=sharing)
        automatic = [a for a in analysis.actions if a.automatic]
        assert not automatic or analysis.confidence >= 0.6, f"{sharing.value}: {describe(analysis)}"


# --- H11: slices sized on time-averaged SM use, not on how wide the GPU phases are --------------------
def test_h11_a_slice_keeps_the_serialised_slowdown_within_five_percent() -> None:
    """host-wait: GPU phases 82 % of 132 SMs wide at 2.2 % duty; a 16-SM slice makes each phase 6.8× longer."""
    busy_mean, sm_mean = 0.0222, 0.01833
    subject = window(
        [
            pod(
                "host-wait-0",
                [
                    h200(
                        gr_engine_active=stat(busy_mean, 0.001),
                        sm_active=stat(sm_mean, 0.001),
                        sm_occupancy=stat(0.01, 0.002),
                        tensor_active=stat(0.005, 0.001),
                        dram_active=stat(0.01, 0.002),
                        gpu_util=stat(0.02, 0.0),
                        fb_used_mib=stat(942.8),
                        fb_free_mib=stat(H200_MIB - 942.8),
                    )
                ],
                cpu_usage_cores=stat(0.03, 0.01),
            )
        ],
        alloc=h200_allocation(cpu_limit_cores=2.0, workload_type="training"),
        kind="Job",
        hours=2.0,
        step=30.0,
    )
    width = sm_mean / busy_mean * H200_SMS
    spec = spec_for_product(H200_PRODUCT)
    assert spec is not None
    analysis = analyze_window(subject)
    for action in analysis.actions:
        if action.type is not ActionType.MIG_PROFILE:
            continue
        profile = find_profile(profiles_for(spec), action.to_value.split(":")[0].split()[0])
        assert profile is not None, action.to_value
        slowdown = (1 - busy_mean) + busy_mean * max(1.0, width / profile.sms)
        assert slowdown <= 1.05, (
            f"{action.to_value}: {profile.sms} SMs for phases {width:.0f} SMs wide, serialised slowdown "
            f"{slowdown:.3f}: {describe(analysis)}"
        )
