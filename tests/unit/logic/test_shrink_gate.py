"""The shrink gate (logic/vetoes.py, recommend._gate): a capacity-reducing action needs proof it is safe."""

from __future__ import annotations

from datetime import timedelta

import pytest
from tests.unit.logic.logic_builders import PROVEN, START, allocation, busy_gpu, gpu, pod, stat, window
from tests.unit.logic.test_diagnose import oversized

from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import ActionType, DiagnosisCode, SharingStrategy
from gpu_rightsizer.model.observation import Signal, WorkloadWindow
from gpu_rightsizer.model.result import Action, Analysis, MemoryLookback

_SHRINKS = {ActionType.MIG_PROFILE, ActionType.GPU_SHARING, ActionType.RELEASE_IDLE}


def _migs(analysis: Analysis) -> list[Action]:
    return [a for a in analysis.actions if a.type is ActionType.MIG_PROFILE]


# --- complete evidence ---------------------------------------------------------------------------
def test_the_default_minimums_block_an_automatic_slice() -> None:
    """A narrow, oversized Deployment on a 2 h window: a slice is advice until a day is observed."""
    blocked = _migs(analyze_window(oversized()))
    assert blocked and not blocked[0].automatic and blocked[0].target is None
    assert "24 h" in blocked[0].reason and "look-back" not in blocked[0].reason.split("24 h")[0][-5:]
    proven = _migs(analyze_window(oversized(), PROVEN))
    assert proven and proven[0].automatic and proven[0].target is not None


def test_a_job_needs_its_window_and_a_day_of_memory_peaks() -> None:
    job = oversized().model_copy(update={"workload": oversized().workload.model_copy(update={"kind": "Job"})})
    advice = _migs(analyze_window(job))
    assert advice and not advice[0].automatic
    assert "GPU memory was tracked for 2.0 h" in advice[0].reason
    lowered = EngineSettings(memory_lookback_min_seconds=3600.0)
    assert _migs(analyze_window(job, lowered))[0].automatic


def test_the_memory_lookback_sizes_the_slice_and_is_carried_forward() -> None:
    earlier = MemoryLookback(max_gib=30.0, since=START - timedelta(days=3))
    analysis = analyze_window(oversized(), PROVEN, memory_lookback=earlier)
    mig = _migs(analysis)[0]
    assert "36.0 GiB used (peak)" in mig.reason.replace("1.2 × 30.0", "36.0") or "30.0 GiB" in mig.reason
    assert analysis.memory_lookback == MemoryLookback(max_gib=30.0, since=earlier.since)
    alone = analyze_window(oversized(), PROVEN)
    assert alone.memory_lookback is not None and alone.memory_lookback.since == START
    assert alone.memory_lookback.max_gib == pytest.approx(8500 / 1024, abs=0.01)
    # a peak no slice holds leaves no slice at all
    huge = MemoryLookback(max_gib=70.0, since=START - timedelta(days=3))
    assert not _migs(analyze_window(oversized(), PROVEN, memory_lookback=huge))


def test_a_missing_replica_or_sm_field_leaves_the_slice_as_advice() -> None:
    two = oversized().model_copy(update={"allocation": allocation(replicas=2)})
    mig = _migs(analyze_window(two, PROVEN))
    assert mig and not mig[0].automatic and "only 1 of 2 replicas" in mig[0].reason
    no_sm = oversized().pods[0].gpus[0]
    no_sm = no_sm.model_copy(
        update={"stats": {k: v for k, v in no_sm.stats.items() if k is not Signal.SM_ACTIVE}}
    )
    assert not _migs(analyze_window(window([pod(gpus=[no_sm])]), PROVEN))  # no width, no slice


# --- positive evidence: the width model ------------------------------------------------------------
def test_every_capacity_reducing_action_carries_its_predicted_slowdown_within_the_bound() -> None:
    mig = _migs(analyze_window(oversized(), PROVEN))[0]
    assert mig.predicted_slowdown is not None and 1.0 <= mig.predicted_slowdown <= 1.25


def test_wide_phases_get_no_slice_however_low_the_average() -> None:
    """GR 0.2, SM 0.18: phases 90 % of 132 SMs wide; a server's GPU phase would stretch past 1.25×."""
    wide = gpu(gr_engine_active=stat(0.2, 0.1), sm_active=stat(0.18, 0.05), fb_used_mib=stat(8000, 500))
    served = window([pod(gpus=[wide])], alloc=allocation(workload_type="inference"))
    analysis = analyze_window(served, PROVEN)
    assert not [a for a in analysis.actions if a.type in _SHRINKS]


def test_max_slowdown_is_the_policy_bound_for_training() -> None:
    """A training Job busy 20 % with phases 28 % wide: 2g.20gb costs 1.03× its step, 1g.20gb 1.08×."""
    job = window(
        oversized().pods,
        alloc=allocation(workload_type="training"),
        kind="Job",
    )
    default = _migs(analyze_window(job, PROVEN))[0]
    assert default.predicted_slowdown is not None and default.predicted_slowdown <= 1.05
    loose = _migs(analyze_window(job, PROVEN.with_overrides({"maxSlowdown": 0.5})))[0]
    assert loose.predicted_slowdown is not None and loose.predicted_slowdown > default.predicted_slowdown


# --- confidence ------------------------------------------------------------------------------------
def test_min_confidence_gates_every_automatic_action() -> None:
    starved = window(
        [
            pod(
                gpus=[busy_gpu(gr_engine_active=stat(0.35, 0.3, sawtooth=0.6), sm_active=stat(0.3, 0.25))],
                cpu_usage_cores=stat(7.8, 0.1),
                cpu_throttled_ratio=stat(0.6, 0.1),
            )
        ]
    )
    cpu = next(a for a in analyze_window(starved).actions if a.type is ActionType.CPU)
    assert cpu.automatic
    strict = EngineSettings().with_overrides({"minConfidence": 0.99})
    held = next(a for a in analyze_window(starved, strict).actions if a.type is ActionType.CPU)
    assert not held.automatic and held.target is None and "minConfidence" in held.reason


# --- vetoes ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("usage", "throttled", "veto"),
    [(7.3, 0.0, "cpuNearLimit"), (3.0, 0.08, "cpuThrottled"), (2.1, 0.0, "cpuPlateau")],
)
def test_a_cpu_veto_names_the_cause_and_withholds_every_shrink(
    usage: float, throttled: float, veto: str
) -> None:
    starved = window(
        [
            pod(
                gpus=[
                    gpu(gr_engine_active=stat(0.2, 0.1), sm_active=stat(0.055, 0.02), fb_used_mib=stat(8000))
                ],
                cpu_usage_cores=stat(usage, 0.3),
                cpu_throttled_ratio=stat(throttled),
            )
        ]
    )
    for sharing in (SharingStrategy.MIG_MIXED, SharingStrategy.TIME_SLICING):
        analysis = analyze_window(starved, PROVEN, sharing=sharing)
        assert veto in [v.name for v in analysis.vetoes]
        assert all(v.reason and v.measure_next for v in analysis.vetoes)
        assert analysis.primary is not DiagnosisCode.HEALTHY
        assert not [a for a in analysis.actions if a.type in _SHRINKS]


def test_io_reads_of_a_few_mib_while_the_gpu_starves_veto_a_slice() -> None:
    """60 MiB/s of reads, far below R2b's 100 MiB/s: still a veto, with I/O as the suspected cause."""
    reader = window(
        [
            pod(
                gpus=[
                    gpu(gr_engine_active=stat(0.2, 0.1), sm_active=stat(0.055, 0.02), fb_used_mib=stat(8000))
                ],
                cpu_usage_cores=stat(0.4, 0.1),
                net_rx_bytes_per_s=stat(60 * 2**20, 2**20),
            )
        ]
    )
    analysis = analyze_window(reader, PROVEN)
    assert [v.name for v in analysis.vetoes] == ["ioReads"]
    assert analysis.primary is DiagnosisCode.INPUT_PIPELINE_IO_BOUND
    assert not [a for a in analysis.actions if a.type in _SHRINKS or a.automatic]


# --- idle and release ------------------------------------------------------------------------------
def _quiet(sm_max: float, **pod_signals: object) -> WorkloadWindow:
    device = gpu(
        gr_engine_active=stat(0.0, peak=sm_max * 2, samples=720),
        sm_active=stat(0.0, peak=sm_max, samples=720),
        fb_used_mib=stat(4800, samples=720),
    )
    return window([pod(gpus=[device], **pod_signals)], hours=25.0, step=125.0)  # type: ignore[arg-type]


def test_idle_means_sm_exactly_zero() -> None:
    assert analyze_window(_quiet(0.0)).primary is DiagnosisCode.IDLE_ALLOCATION
    # a server at 0.3 requests/s averages 2e-5 over 30 s: kernels ran, so it is live
    live = analyze_window(_quiet(2.4e-5))
    assert live.primary is not DiagnosisCode.IDLE_ALLOCATION
    assert not [a for a in live.actions if a.type is ActionType.RELEASE_IDLE]


def test_without_sm_fields_idle_needs_a_learned_floor_or_no_cuda_context() -> None:
    floor_level = gpu(gr_engine_active=stat(6e-5, samples=720), fb_used_mib=stat(4800, samples=720))
    w = window([pod(gpus=[floor_level])], hours=25.0, step=125.0)
    assert analyze_window(w).primary is not DiagnosisCode.IDLE_ALLOCATION
    learned = EngineSettings(idle_gr_floor=1e-4)
    assert analyze_window(w, learned).primary is DiagnosisCode.IDLE_ALLOCATION
    no_context = gpu(gr_engine_active=stat(6e-5, samples=720), fb_used_mib=stat(0.0, peak=40.0, samples=720))
    empty = window([pod(gpus=[no_context])], hours=25.0, step=125.0)
    assert analyze_window(empty).primary is DiagnosisCode.IDLE_ALLOCATION


def test_an_automatic_release_needs_proof_that_no_request_arrived() -> None:
    unproven = next(a for a in analyze_window(_quiet(0.0)).actions if a.type is ActionType.RELEASE_IDLE)
    assert not unproven.automatic and "no proof that no request arrived" in unproven.reason
    probes = _quiet(0.0, net_rx_bytes_per_s=stat(500.0, 200.0, samples=720))
    release = next(a for a in analyze_window(probes).actions if a.type is ActionType.RELEASE_IDLE)
    assert release.automatic and release.predicted_slowdown == 1.0
    traffic = _quiet(0.0, net_rx_bytes_per_s=stat(500.0, 200.0, samples=720, peak=50_000.0))
    held = next(a for a in analyze_window(traffic).actions if a.type is ActionType.RELEASE_IDLE)
    assert not held.automatic and "48.8 KiB/s" in held.reason
    counted = _quiet(0.0).model_copy(update={"stats": {Signal.REQUESTS_PER_S: stat(0.0, samples=720)}})
    assert next(a for a in analyze_window(counted).actions if a.type is ActionType.RELEASE_IDLE).automatic


# --- causes ----------------------------------------------------------------------------------------
def test_a_gpu_that_ran_no_kernel_in_a_two_gpu_pod_gets_gpu_count_advice() -> None:
    busy = busy_gpu("GPU-0")
    unused = gpu("GPU-1", gr_engine_active=stat(0.0), sm_active=stat(0.0), fb_used_mib=stat(500))
    w = window([pod(gpus=[busy, unused])], alloc=allocation(gpu_count=2))
    analysis = analyze_window(w)
    count = next(a for a in analysis.actions if a.type is ActionType.GPU_COUNT)
    assert (count.from_value, count.to_value, count.automatic) == ("2", "1", False)
    assert "GPU-1" in count.reason
    # the busy GPU is not averaged with the unused one into a starved pod
    assert analysis.primary is DiagnosisCode.HEALTHY or analysis.primary is DiagnosisCode.OVERSIZED_GPU
    assert not analysis.vetoes


def test_a_host_oom_crash_loop_raises_the_memory_limit_and_a_gpu_oom_is_memory_capacity() -> None:
    host_oom = window(
        [
            pod(
                gpus=[gpu(gr_engine_active=stat(0.2), sm_active=stat(0.05), fb_used_mib=stat(4000))],
                restarts=7,
                oom_killed=True,
                memory_working_set_bytes=stat(31.5 * 2**30, 0.4 * 2**30),
            )
        ],
        alloc=allocation(memory_limit_bytes=32 * 2**30, memory_request_bytes=32 * 2**30),
    )
    analysis = analyze_window(host_oom, PROVEN)
    assert analysis.primary is DiagnosisCode.CRASH_LOOPING
    memory = next(a for a in analysis.actions if a.type is ActionType.MEMORY)
    assert memory.automatic and memory.target is not None and "OOMKilled" in memory.reason
    assert not [a for a in analysis.actions if a.type in _SHRINKS]
    gpu_oom = window(
        [
            pod(
                gpus=[busy_gpu(fb_used_mib=stat(60000, 5000, peak=81000))],
                restarts=9,
            )
        ]
    )
    assert analyze_window(gpu_oom).primary is DiagnosisCode.MEMORY_CAPACITY_BOUND


def test_launch_bound_advice_is_never_more_cpu_or_workers() -> None:
    from tests.unit.logic.test_diagnose import launch_bound

    analysis = analyze_window(launch_bound())
    assert analysis.primary is DiagnosisCode.LAUNCH_BOUND
    advice = " ".join(a.to_value for a in analysis.actions)
    assert "CUDA Graphs" in advice and "workers" not in advice.replace("DataLoader workers do not", "")
    assert not [a for a in analysis.actions if a.type in (ActionType.CPU, *_SHRINKS)]


def test_one_recommendation_never_raises_cpu_and_replicas_together() -> None:
    """Queueing at saturation with the CPU throttled: the CPU goes first, replicas wait a cycle."""
    pods = [
        pod(
            f"srv-{i}",
            gpus=[busy_gpu(f"GPU-{i}", gr_engine_active=stat(0.7, 0.05), sm_active=stat(0.72, 0.05))],
            cpu_usage_cores=stat(3.9, 0.05),
            cpu_throttled_ratio=stat(0.4),
        )
        for i in range(2)
    ]
    w = window(
        pods,
        alloc=allocation(replicas=2, workload_type="inference", cpu_limit_cores=4.0, cpu_request_cores=4.0),
        stats={Signal.QUEUE_LENGTH: stat(6.0, 3.0, active_fraction=0.8), Signal.REQUESTS_PER_S: stat(40.0)},
    )
    analysis = analyze_window(w)
    automatic = {a.type for a in analysis.actions if a.automatic}
    assert ActionType.CPU in automatic
    assert ActionType.REPLICAS not in automatic
    assert any(a.type is ActionType.REPLICAS and "next verified cycle" in a.reason for a in analysis.actions)


def test_every_veto_is_registered_under_its_suspected_cause() -> None:
    """The registry lists, per code, the vetoes that name it; a veto outside that list is a bug."""
    from tests.unit.logic.test_diagnose import CASES

    from gpu_rightsizer.logic.rules.registry import BY_CODE

    seen: set[str] = set()
    windows = [case() for case in CASES.values()]
    windows += [_quiet(0.0, memory_working_set_bytes=stat(63 * 2**30)), _quiet(2.4e-5)]
    for w in windows:
        for veto in analyze_window(w).vetoes:
            assert veto.name in BY_CODE[veto.cause].vetoes, (veto.name, veto.cause)
            seen.add(veto.name)
    assert {"crashLoop", "sustainedQueue", "hostWait", "ioReads", "cpuThrottled"} <= seen
