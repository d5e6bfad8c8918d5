"""One test (or more) per rule and per diagnosis code: each builds the pattern and checks the primary."""

from __future__ import annotations

from datetime import timedelta

import pytest
from tests.unit.logic.logic_builders import (
    H100,
    H100_PRODUCT,
    START,
    allocation,
    busy_gpu,
    gpu,
    pod,
    stat,
    window,
)

from gpu_rightsizer.logic.diagnose import PRIMARY_ORDER, diagnose
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import HEALTH_CODES, ActionType, DiagnosisCode, Severity
from gpu_rightsizer.model.observation import Signal, SignalStats, WorkloadWindow


def primary(w: WorkloadWindow, **kwargs: object) -> DiagnosisCode:
    return analyze_window(w, **kwargs).primary  # type: ignore[arg-type]


def codes(w: WorkloadWindow) -> set[DiagnosisCode]:
    return {finding.code for finding in diagnose(w)}


# --- windows, one per code -----------------------------------------------------------------------
def healthy() -> WorkloadWindow:
    return window([pod(gpus=[busy_gpu()], cpu_usage_cores=stat(3.0, 0.5))])


def idle() -> WorkloadWindow:
    return window([pod(gpus=[gpu(gr_engine_active=stat(0.0), fb_used_mib=stat(3000))])])


def cpu_bound() -> WorkloadWindow:
    return window(
        [
            pod(
                gpus=[busy_gpu(gr_engine_active=stat(0.35, 0.3, sawtooth=0.6), sm_active=stat(0.3, 0.25))],
                cpu_usage_cores=stat(7.8, 0.1),
                cpu_throttled_ratio=stat(0.6, 0.1),
            )
        ]
    )


def io_bound() -> WorkloadWindow:
    return window(
        [
            pod(
                gpus=[busy_gpu(gr_engine_active=stat(0.28, 0.2), sm_active=stat(0.24, 0.15))],
                cpu_usage_cores=stat(2.0, 0.2),
                cpu_throttled_ratio=stat(0.01),
                fs_read_bytes_per_s=stat(4.5e8, 2e7),
                net_rx_bytes_per_s=stat(3e8, 1e7),
            )
        ]
    )


def host_transfer() -> WorkloadWindow:
    return window(
        [
            pod(
                gpus=[
                    busy_gpu(
                        gr_engine_active=stat(0.55),
                        sm_active=stat(0.3),
                        pcie_rx_bytes_per_s=stat(0.78 * 63e9, 0.03 * 63e9),
                        pcie_tx_bytes_per_s=stat(0.2 * 63e9),
                    )
                ],
                cpu_usage_cores=stat(4.0),
            )
        ]
    )


def communication() -> WorkloadWindow:
    gpus = [
        busy_gpu(
            f"GPU-{i}",
            gr_engine_active=stat(0.7),
            sm_active=stat(0.15, 0.3),
            tensor_active=stat(0.02, 0.05),
            fp32_active=stat(0.05),
            nvlink_tx_bytes_per_s=stat(3.4e11, 2e10),
            nvlink_rx_bytes_per_s=stat(3.4e11, 2e10),
        )
        for i in range(8)
    ]
    return window(
        [pod(gpus=gpus, cpu_usage_cores=stat(6.0))], alloc=allocation(gpu_count=8, cpu_limit_cores=32.0)
    )


def low_occupancy() -> WorkloadWindow:
    return window(
        [pod(gpus=[busy_gpu(gr_engine_active=stat(0.92), sm_active=stat(0.3), sm_occupancy=stat(0.08))])]
    )


def bandwidth_bound() -> WorkloadWindow:
    return window(
        [
            pod(
                gpus=[
                    busy_gpu(
                        gr_engine_active=stat(0.95),
                        sm_active=stat(0.7),
                        sm_occupancy=stat(0.5),
                        tensor_active=stat(0.08),
                        dram_active=stat(0.72, 0.05),
                    )
                ]
            )
        ]
    )


def no_tensor_cores() -> WorkloadWindow:
    return window(
        [
            pod(
                gpus=[
                    busy_gpu(
                        gr_engine_active=stat(0.95),
                        sm_active=stat(0.8),
                        tensor_active=stat(0.01),
                        fp32_active=stat(0.6),
                        dram_active=stat(0.35),
                    )
                ]
            )
        ]
    )


def oversized() -> WorkloadWindow:
    return window(
        [
            pod(
                gpus=[
                    gpu(
                        gr_engine_active=stat(0.2, 0.1),
                        sm_active=stat(0.055, 0.02),  # narrow phases: SM/GR 0.275, 36 of 132 SMs
                        dram_active=stat(0.05, 0.02),
                        fb_used_mib=stat(8000, 500),
                    )
                ]
            )
        ]
    )


def memory_capacity() -> WorkloadWindow:
    return window(
        [
            pod(
                gpus=[
                    busy_gpu(gr_engine_active=stat(0.55), sm_active=stat(0.35), fb_used_mib=stat(79000, 500))
                ],
                restarts=3,
            )
        ]
    )


def under_replicated() -> WorkloadWindow:
    pods = [
        pod(
            f"pod-{i}",
            gpus=[busy_gpu(f"GPU-{i}", gr_engine_active=stat(0.95, 0.02), sm_active=stat(0.8, 0.04))],
        )
        for i in range(2)
    ]
    return window(
        pods,
        alloc=allocation(replicas=2, workload_type="inference"),
        stats={
            Signal.QUEUE_LENGTH: stat(8.0, 4.0, active_fraction=0.9),
            Signal.REQUESTS_PER_S: stat(50.0),
        },
    )


def over_replicated() -> WorkloadWindow:
    pods = [
        pod(f"pod-{i}", gpus=[busy_gpu(f"GPU-{i}", gr_engine_active=stat(0.08, 0.04), sm_active=stat(0.06))])
        for i in range(4)
    ]
    return window(
        pods,
        alloc=allocation(replicas=4, workload_type="inference"),
        stats={Signal.QUEUE_LENGTH: stat(0.0, active_fraction=0.0), Signal.REQUESTS_PER_S: stat(4.0)},
    )


def crash_looping() -> WorkloadWindow:
    """Four restarts with 8 GB of GPU memory: the container fails, not for want of GPU memory."""
    return window([pod(gpus=[busy_gpu(fb_used_mib=stat(8000, 200))], restarts=4)])


def serving_host_bound() -> WorkloadWindow:
    """Requests queue 90 % of the time while SM activity p95 is 0.3: the wait is on the host side."""
    return window(
        [pod(gpus=[busy_gpu(gr_engine_active=stat(0.35, 0.05), sm_active=stat(0.25, 0.05))])],
        alloc=allocation(workload_type="inference"),
        stats={Signal.QUEUE_LENGTH: stat(12.0, 4.0, active_fraction=0.9), Signal.REQUESTS_PER_S: stat(30.0)},
    )


def launch_bound() -> WorkloadWindow:
    """Busy 0.3 with SM 0.05 (SM/GR 0.17: narrow phases) and the busiest process at one core."""
    return window(
        [
            pod(
                gpus=[busy_gpu(gr_engine_active=stat(0.3, 0.05), sm_active=stat(0.05, 0.01))],
                cpu_usage_cores=stat(1.05, 0.05),
                process_cpu_max_cores=stat(1.0, 0.01),
            )
        ],
        alloc=allocation(workload_type="training"),
        kind="Job",
    )


def host_wait() -> WorkloadWindow:
    """A training Job busy 2 % of the time in phases 82 % of the SMs wide, with no CPU, I/O or copies."""
    return window(
        [
            pod(
                gpus=[
                    gpu(
                        gr_engine_active=stat(0.02, 0.01),
                        sm_active=stat(0.0165, 0.008),
                        fb_used_mib=stat(900, 10),
                    )
                ],
                cpu_usage_cores=stat(0.03, 0.01),
            )
        ],
        alloc=allocation(workload_type="training"),
        kind="Job",
    )


def throttled() -> WorkloadWindow:
    return window(
        [
            pod(
                gpus=[
                    busy_gpu(
                        throttle_fraction=stat(0.6, 0.4, peak=1.0),
                        sm_clock_mhz=clock_stats(),
                    )
                ]
            )
        ]
    )


def clock_stats() -> SignalStats:
    """SM clock p50 at 55 % of its peak: a throttled GPU."""
    return SignalStats(samples=60, mean=1400, p50=1089, p95=1920, p99=1920, max=1920, min=1089)


def hardware_fault() -> WorkloadWindow:
    return window([pod(gpus=[busy_gpu().model_copy(update={"xid_codes": [79]})])])


def insufficient() -> WorkloadWindow:
    return window([pod(gpus=[busy_gpu(gr_engine_active=stat(0.9, samples=5))])])


CASES = {
    DiagnosisCode.HEALTHY: healthy,
    DiagnosisCode.IDLE_ALLOCATION: idle,
    DiagnosisCode.INPUT_PIPELINE_CPU_BOUND: cpu_bound,
    DiagnosisCode.INPUT_PIPELINE_IO_BOUND: io_bound,
    DiagnosisCode.HOST_TRANSFER_BOUND: host_transfer,
    DiagnosisCode.COMMUNICATION_BOUND: communication,
    DiagnosisCode.LOW_OCCUPANCY: low_occupancy,
    DiagnosisCode.MEMORY_BANDWIDTH_BOUND: bandwidth_bound,
    DiagnosisCode.NO_TENSOR_CORES: no_tensor_cores,
    DiagnosisCode.OVERSIZED_GPU: oversized,
    DiagnosisCode.MEMORY_CAPACITY_BOUND: memory_capacity,
    DiagnosisCode.UNDER_REPLICATED: under_replicated,
    DiagnosisCode.OVER_REPLICATED: over_replicated,
    DiagnosisCode.THROTTLED: throttled,
    DiagnosisCode.HARDWARE_FAULT: hardware_fault,
    DiagnosisCode.INSUFFICIENT_DATA: insufficient,
    DiagnosisCode.CRASH_LOOPING: crash_looping,
    DiagnosisCode.SERVING_HOST_BOUND: serving_host_bound,
    DiagnosisCode.LAUNCH_BOUND: launch_bound,
    DiagnosisCode.HOST_WAIT_BOUND: host_wait,
}


def test_every_code_has_a_case_and_a_rank() -> None:
    assert set(CASES) == set(DiagnosisCode)
    assert set(PRIMARY_ORDER) == set(DiagnosisCode)


@pytest.mark.parametrize("code", list(CASES), ids=lambda c: c.value)
def test_each_pattern_yields_its_code(code: DiagnosisCode) -> None:
    analysis = analyze_window(CASES[code]())
    assert analysis.primary is code, [f.message for f in analysis.findings]
    assert analysis.findings[0].code is code
    assert 0.0 < analysis.confidence <= 0.95


@pytest.mark.parametrize("code", list(CASES), ids=lambda c: c.value)
def test_messages_carry_numbers_and_advice(code: DiagnosisCode) -> None:
    finding = analyze_window(CASES[code]()).findings[0]
    assert "Seen:" in finding.message
    assert "Change:" in finding.message
    assert any(ch.isdigit() for ch in finding.message)
    if code is not DiagnosisCode.INSUFFICIENT_DATA:
        assert finding.evidence


def test_health_findings_are_critical_and_block_actions() -> None:
    for make in (throttled, hardware_fault):
        analysis = analyze_window(make())
        assert analysis.primary in HEALTH_CODES
        assert analysis.findings[0].severity is Severity.CRITICAL
        assert analysis.actions == []


def test_health_gate_wins_over_every_workload_rule() -> None:
    faulty = idle().pods[0].gpus[0].model_copy(update={"xid_codes": [48]})
    w = window([pod(gpus=[faulty])])
    assert primary(w) is DiagnosisCode.HARDWARE_FAULT
    assert DiagnosisCode.IDLE_ALLOCATION not in codes(w)


def test_application_xid_is_not_a_hardware_fault() -> None:
    w = window([pod(gpus=[busy_gpu().model_copy(update={"xid_codes": [13, 31]})])])
    assert primary(w) is DiagnosisCode.HEALTHY


def test_throttle_below_five_percent_is_ignored() -> None:
    w = window([pod(gpus=[busy_gpu(throttle_fraction=stat(0.02, 0.1))])])
    assert primary(w) is DiagnosisCode.HEALTHY


# --- insufficient data -----------------------------------------------------------------------------
def test_nan_statistics_are_insufficient_data() -> None:
    w = window([pod(gpus=[busy_gpu(gr_engine_active=stat(float("nan")))])])
    analysis = analyze_window(w)
    assert analysis.primary is DiagnosisCode.INSUFFICIENT_DATA
    assert "NaN" in analysis.findings[0].message
    assert analysis.actions == []


def test_missing_busy_signal_is_insufficient_data() -> None:
    w = window([pod(gpus=[gpu(fb_used_mib=stat(1000))])])
    assert primary(w) is DiagnosisCode.INSUFFICIENT_DATA


def test_gpu_util_is_never_used_under_mig() -> None:
    slice_ = gpu(mig_profile="3g.40gb", memory_mib=40448, gpu_util=stat(0.0), fb_used_mib=stat(1000))
    w = window(
        [pod(gpus=[slice_])], alloc=allocation(gpu_resource="nvidia.com/mig-3g.40gb", mig_profile="3g.40gb")
    )
    analysis = analyze_window(w)
    assert analysis.primary is DiagnosisCode.INSUFFICIENT_DATA
    assert "MIG" in analysis.findings[0].message


def test_gpu_util_is_the_fallback_on_whole_gpus_with_lower_confidence() -> None:
    with_gr = analyze_window(idle())
    w = window([pod(gpus=[gpu(gpu_util=stat(0.0), fb_used_mib=stat(3000))])])
    with_util = analyze_window(w)
    assert with_util.primary is DiagnosisCode.IDLE_ALLOCATION
    assert with_util.confidence < with_gr.confidence


def test_short_window_is_insufficient() -> None:
    w = window([pod(gpus=[busy_gpu()])], hours=0.25, step=10)
    assert primary(w) is DiagnosisCode.INSUFFICIENT_DATA


def test_too_few_samples_is_insufficient() -> None:
    assert primary(insufficient()) is DiagnosisCode.INSUFFICIENT_DATA
    relaxed = EngineSettings(min_samples=3, min_coverage=0.0)
    assert analyze_window(insufficient(), relaxed).primary is not DiagnosisCode.INSUFFICIENT_DATA


def test_gappy_window_is_insufficient() -> None:
    w = window([pod(gpus=[busy_gpu(gr_engine_active=stat(0.9, samples=30))])], hours=24, step=60)
    assert primary(w) is DiagnosisCode.INSUFFICIENT_DATA


def test_stale_window_is_insufficient_when_now_is_given() -> None:
    w = healthy()
    assert analyze_window(w, now=w.end + timedelta(minutes=5)).primary is DiagnosisCode.HEALTHY
    assert analyze_window(w, now=w.end + timedelta(hours=2)).primary is DiagnosisCode.INSUFFICIENT_DATA


def test_sm_active_above_engine_active_is_contradictory() -> None:
    w = window([pod(gpus=[busy_gpu(gr_engine_active=stat(0.2), sm_active=stat(0.8))])])
    analysis = analyze_window(w)
    assert analysis.primary is DiagnosisCode.INSUFFICIENT_DATA
    assert "contradictory" in analysis.findings[0].message


def test_ratio_out_of_range_is_contradictory() -> None:
    w = window([pod(gpus=[busy_gpu(gr_engine_active=stat(0.9, 0.9))])])
    assert primary(w) is DiagnosisCode.INSUFFICIENT_DATA


def test_memory_above_capacity_is_contradictory() -> None:
    w = window([pod(gpus=[busy_gpu(fb_used_mib=stat(90000))])])
    assert primary(w) is DiagnosisCode.INSUFFICIENT_DATA


def test_no_pods_or_no_gpus_is_insufficient() -> None:
    assert primary(window([])) is DiagnosisCode.INSUFFICIENT_DATA
    assert primary(window([pod(gpus=[])])) is DiagnosisCode.INSUFFICIENT_DATA


# --- idle and live services ------------------------------------------------------------------------
def test_serving_gpu_is_never_idle() -> None:
    w = window(
        [pod(gpus=[gpu(gr_engine_active=stat(0.01), fb_used_mib=stat(3000))])],
        alloc=allocation(workload_type="inference"),
        stats={Signal.REQUESTS_PER_S: stat(0.5)},
    )
    assert DiagnosisCode.IDLE_ALLOCATION not in codes(w)


def test_sporadic_kernels_are_live_work_never_idle_or_released() -> None:
    """Idle means no kernels: a GPU that ran kernels now and then is tiny work (OversizedGPU), not idle."""
    w = window([pod(gpus=[gpu(gr_engine_active=stat(0.0, 0.02, peak=0.4), fb_used_mib=stat(3000))])])
    analysis = analyze_window(w)
    assert DiagnosisCode.IDLE_ALLOCATION not in {f.code for f in analysis.findings}
    assert analysis.primary is DiagnosisCode.OVERSIZED_GPU, analysis.summary
    assert not any(a.type is ActionType.RELEASE_IDLE for a in analysis.actions)


def test_idle_over_less_than_an_hour_has_lower_confidence() -> None:
    long = analyze_window(idle())
    short = analyze_window(window(idle().pods, hours=0.75, step=30))
    assert short.primary is DiagnosisCode.IDLE_ALLOCATION
    assert short.confidence < long.confidence


# --- data path -------------------------------------------------------------------------------------
def test_cpu_bound_needs_saturated_or_throttled_cpu() -> None:
    relaxed_cpu = (
        cpu_bound()
        .pods[0]
        .model_copy(
            update={"stats": {Signal.CPU_USAGE_CORES: stat(2.0, 0.6), Signal.CPU_THROTTLED_RATIO: stat(0.0)}}
        )
    )
    # bursty use well below the limit, no throttling, no R2c plateau: no rule claims CPU-bound. Use
    # holding at ≥ 1 core with the GPU at 0.35 is still a (noisy) plateau veto: the suspected cause is
    # named, advice only, and nothing shrinks.
    analysis = analyze_window(window([relaxed_cpu]))
    cpu = [f for f in analysis.findings if f.code is DiagnosisCode.INPUT_PIPELINE_CPU_BOUND]
    assert cpu and all(f.evidence.get("suspected") == 1.0 for f in cpu)
    assert [v.name for v in analysis.vetoes] == ["cpuPlateau"]
    assert not [a for a in analysis.actions if a.type is ActionType.CPU or a.automatic]


def test_throttling_alone_marks_cpu_bound() -> None:
    only_throttled = (
        cpu_bound()
        .pods[0]
        .model_copy(
            update={"stats": {Signal.CPU_USAGE_CORES: stat(4.0), Signal.CPU_THROTTLED_RATIO: stat(0.4)}}
        )
    )
    assert primary(window([only_throttled])) is DiagnosisCode.INPUT_PIPELINE_CPU_BOUND


def test_cpu_bound_wins_over_io_and_oversized() -> None:
    assert primary(cpu_bound()) is DiagnosisCode.INPUT_PIPELINE_CPU_BOUND
    assert DiagnosisCode.INPUT_PIPELINE_IO_BOUND not in codes(cpu_bound())


def test_communication_needs_several_gpus() -> None:
    single = communication().pods[0].model_copy(update={"gpus": communication().pods[0].gpus[:1]})
    assert DiagnosisCode.COMMUNICATION_BOUND not in codes(window([single]))


def test_multi_gpu_without_nvlink_series_reads_symmetric_pcie_as_communication() -> None:
    def box(tx: float) -> WorkloadWindow:
        gpus = [
            busy_gpu(
                f"GPU-{i}",
                gr_engine_active=stat(0.7),
                sm_active=stat(0.2),
                tensor_active=stat(0.02),
                pcie_rx_bytes_per_s=stat(45e9),
                pcie_tx_bytes_per_s=stat(tx),
            )
            for i in range(4)
        ]
        return window([pod(gpus=gpus)], alloc=allocation(gpu_count=4))

    assert primary(box(40e9)) is DiagnosisCode.COMMUNICATION_BOUND
    # one-way traffic is a host copy, never read as GPUs waiting on each other
    assert DiagnosisCode.COMMUNICATION_BOUND not in codes(box(1e9))


# --- in-GPU efficiency ------------------------------------------------------------------------------
def test_no_tensor_cores_not_claimed_on_pre_volta() -> None:
    w = no_tensor_cores()
    old_gpu = (
        w.pods[0].gpus[0].model_copy(update={"model_name": "Tesla P100-PCIE-16GB", "memory_total_mib": 16280})
    )
    w2 = window(
        [pod(gpus=[old_gpu.model_copy(update={"stats": {**old_gpu.stats, Signal.FB_USED_MIB: stat(9000)}})])],
        alloc=allocation(gpu_model="Tesla-P100-PCIE-16GB"),
    )
    assert DiagnosisCode.NO_TENSOR_CORES not in codes(w2)


def test_low_occupancy_yields_to_memory_capacity_when_memory_is_full() -> None:
    w = window(
        [pod(gpus=[busy_gpu(gr_engine_active=stat(0.92), sm_active=stat(0.3), fb_used_mib=stat(79500))])]
    )
    assert primary(w) is DiagnosisCode.MEMORY_CAPACITY_BOUND


# --- sizing -----------------------------------------------------------------------------------------
def test_oversized_never_for_multi_gpu_pods() -> None:
    gpus = [
        gpu(f"GPU-{i}", gr_engine_active=stat(0.2), sm_active=stat(0.1), fb_used_mib=stat(5000))
        for i in range(2)
    ]
    w = window([pod(gpus=gpus)], alloc=allocation(gpu_count=2))
    assert DiagnosisCode.OVERSIZED_GPU not in codes(w)


def test_oversized_never_with_nvlink_traffic() -> None:
    base = oversized().pods[0].gpus[0]
    busy_link = base.model_copy(update={"stats": {**base.stats, Signal.NVLINK_TX_BYTES_PER_S: stat(5e10)}})
    assert DiagnosisCode.OVERSIZED_GPU not in codes(window([pod(gpus=[busy_link])]))


def test_half_full_memory_is_not_oversized() -> None:
    base = oversized().pods[0].gpus[0]
    fuller = base.model_copy(update={"stats": {**base.stats, Signal.FB_USED_MIB: stat(45000)}})
    analysis = analyze_window(window([pod(gpus=[fuller])]))
    # no slice holds 1.2 × 44 GiB: OversizedGPU (little compute, a lot of memory held), with advice
    # that needs no slice and no savings until it lands; never a slice
    oversized_finding = next(f for f in analysis.findings if f.code is DiagnosisCode.OVERSIZED_GPU)
    assert oversized_finding.evidence.get("noSliceFits") == 1.0
    assert {a.type for a in analysis.actions} == {ActionType.SOFTWARE}
    assert analysis.savings.gpu_hours_per_day == 0.0


def test_memory_full_without_symptoms_is_not_capacity_bound() -> None:
    w = window([pod(gpus=[busy_gpu(fb_used_mib=stat(79000))])])
    assert primary(w) is DiagnosisCode.HEALTHY


# --- serving ----------------------------------------------------------------------------------------
def test_serving_rules_need_a_serving_workload() -> None:
    training = over_replicated().model_copy(
        update={"allocation": allocation(replicas=4, workload_type="training"), "stats": {}}
    )
    assert DiagnosisCode.OVER_REPLICATED not in codes(training)


def test_short_serving_window_lowers_confidence() -> None:
    day = over_replicated().model_copy(update={"end": START + timedelta(hours=24)})
    day = day.model_copy(
        update={
            "pods": [
                p.model_copy(
                    update={
                        "gpus": [
                            g.model_copy(
                                update={
                                    "stats": {
                                        k: v.model_copy(update={"samples": 720}) for k, v in g.stats.items()
                                    }
                                }
                            )
                            for g in p.gpus
                        ]
                    }
                )
                for p in day.pods
            ]
        }
    )
    assert analyze_window(day).confidence > analyze_window(over_replicated()).confidence


# --- confidence ---------------------------------------------------------------------------------------
def test_shared_gpu_lowers_confidence() -> None:
    exclusive = analyze_window(oversized())
    shared_gpu = oversized().pods[0].gpus[0].model_copy(update={"shared_by_pods": 4})
    shared = analyze_window(window([pod(gpus=[shared_gpu])]))
    assert shared.primary is exclusive.primary
    assert shared.confidence < exclusive.confidence


def test_missing_profiling_fields_lower_confidence() -> None:
    full = analyze_window(oversized())
    base = oversized().pods[0].gpus[0]
    no_sm = base.model_copy(
        update={"stats": {k: v for k, v in base.stats.items() if k is not Signal.SM_ACTIVE}}
    )
    partial = analyze_window(window([pod(gpus=[no_sm])]))
    assert partial.primary is DiagnosisCode.OVERSIZED_GPU
    assert partial.confidence < full.confidence


def test_duplicated_series_of_a_shared_gpu_count_once() -> None:
    device = oversized().pods[0].gpus[0].model_copy(update={"shared_by_pods": 2})
    w = window(
        [pod("a", gpus=[device]), pod("b", gpus=[device])],
        alloc=allocation(replicas=2, sharing="time-slicing"),
    )
    analysis = analyze_window(w)
    assert analysis.findings[0].evidence.get("memoryUsedMaxGib") == pytest.approx(8500 / 1024, abs=0.01)


def test_io_bound_is_not_claimed_for_serving_traffic() -> None:
    served = io_bound().pods[0]
    network_only = served.model_copy(
        update={"stats": {k: v for k, v in served.stats.items() if k is not Signal.FS_READ_BYTES_PER_S}}
    )
    w = window(
        [network_only],
        alloc=allocation(workload_type="inference"),
        stats={Signal.REQUESTS_PER_S: stat(5.0)},
    )
    assert DiagnosisCode.INPUT_PIPELINE_IO_BOUND not in codes(w)


def test_io_bursts_alone_are_not_a_fetch_stall() -> None:
    base = io_bound().pods[0]
    bursty = base.model_copy(
        update={
            "stats": {
                **base.stats,
                Signal.FS_READ_BYTES_PER_S: stat(1e6, 6e8),
                Signal.NET_RX_BYTES_PER_S: stat(1e6, 6e8),
            }
        }
    )
    assert DiagnosisCode.INPUT_PIPELINE_IO_BOUND not in codes(window([bursty]))


# --- transfers: copies are GPU work (real H200 pageable-copy recording) -----------------------------
def _copy_loop(
    rx_p50: float, rx_p95: float, *, sm: float = 0.004, model: str | None = H100
) -> WorkloadWindow:
    return window(
        [
            pod(
                gpus=[
                    gpu(
                        model=model,
                        gr_engine_active=stat(sm),
                        sm_active=stat(sm),
                        fb_used_mib=stat(1600),
                        pcie_rx_bytes_per_s=stat(rx_p50, rx_p95 - rx_p50),
                        pcie_tx_bytes_per_s=stat(0.5e9, 0.05e9) if rx_p50 > 1e8 else stat(1e6, 2e5),
                    )
                ],
                cpu_usage_cores=stat(1.0),
            )
        ],
        alloc=allocation(cpu_limit_cores=2.0, cpu_request_cores=2.0, gpu_model=model and H100_PRODUCT),
    )


def test_copy_loop_below_link_saturation_is_transfer_bound_not_idle() -> None:
    analysis = analyze_window(_copy_loop(8.9e9, 9.3e9))
    assert analysis.primary is DiagnosisCode.HOST_TRANSFER_BOUND
    assert DiagnosisCode.IDLE_ALLOCATION not in {f.code for f in analysis.findings}
    assert not any(a.type.value == "releaseIdle" for a in analysis.actions)


def test_idle_needs_quiet_links() -> None:
    settings = EngineSettings()

    def holder(rx_p50: float, rx_p95: float) -> WorkloadWindow:
        loop = _copy_loop(rx_p50, rx_p95, sm=0.0)
        return window([loop.pods[0].model_copy(update={"stats": {Signal.CPU_USAGE_CORES: stat(0.01)}})])

    quiet = settings.idle.idle_transfer_bytes_per_s * 0.5
    assert primary(holder(quiet * 0.5, quiet)) is DiagnosisCode.IDLE_ALLOCATION
    noisy = settings.idle.idle_transfer_bytes_per_s * 2
    assert DiagnosisCode.IDLE_ALLOCATION not in codes(holder(noisy * 0.5, noisy))


def test_nvlink_traffic_is_not_idle() -> None:
    w = window(
        [pod(gpus=[gpu(gr_engine_active=stat(0.0), fb_used_mib=stat(3000), nvlink_tx_bytes_per_s=stat(2e9))])]
    )
    assert DiagnosisCode.IDLE_ALLOCATION not in codes(w)


def test_gpu_util_activity_next_to_an_idle_engine_counter_is_not_idle() -> None:
    w = window(
        [pod(gpus=[gpu(gr_engine_active=stat(0.004), gpu_util=stat(0.18, 0.01), fb_used_mib=stat(3000))])]
    )
    assert DiagnosisCode.IDLE_ALLOCATION not in codes(w)


@pytest.mark.parametrize(
    ("rx_p50", "model", "expected"),
    [
        (0.9e9, None, False),  # unknown link: the absolute rule alone decides
        (1.1e9, None, True),
        (1.5e9, H100, False),  # 1.5 GB/s is 2 % of a Gen5 x16 link: the link is not what the GPU waits on
        (6.0e9, H100, False),  # 0.095 of the link
        (6.6e9, H100, True),  # 0.105 of the link and over 1 GB/s
    ],
)
def test_sustained_transfer_rule_needs_the_rate_and_a_share_of_a_known_link(
    rx_p50: float, model: str | None, expected: bool
) -> None:
    """R3b: the absolute rate AND ≥ 0.1 of the link when its capacity is known; the rate alone otherwise."""
    got = DiagnosisCode.HOST_TRANSFER_BOUND in codes(_copy_loop(rx_p50, rx_p50 * 1.05, model=model))
    assert got is expected


def test_moderate_transfers_with_busy_compute_are_not_transfer_bound() -> None:
    assert DiagnosisCode.HOST_TRANSFER_BOUND not in codes(_copy_loop(5e9, 5.5e9, sm=0.7))


# --- R11 is fleet-level ------------------------------------------------------------------------------
def _fleet(idle_replicas: int, peaky_replicas: int, *, peaky: SignalStats | None = None) -> WorkloadWindow:
    quiet = stat(0.0, 0.02)
    peak = peaky or stat(0.0, 0.9, peak=0.97)
    pods = [
        pod(
            f"pod-{i:03d}",
            gpus=[
                gpu(
                    f"GPU-{i:03d}",
                    gr_engine_active=peak if i < peaky_replicas else quiet,
                    fb_used_mib=stat(50000),
                )
            ],
        )
        for i in range(idle_replicas + peaky_replicas)
    ]
    return window(
        pods,
        alloc=allocation(replicas=len(pods), workload_type="inference"),
        stats={Signal.QUEUE_LENGTH: stat(0.0, active_fraction=0.0), Signal.REQUESTS_PER_S: stat(0.3)},
    )


def test_a_few_peaking_replicas_do_not_hide_an_idle_fleet() -> None:
    """100 replicas, 5 of which peak at 90 %: every-replica rules called this Healthy."""
    analysis = analyze_window(_fleet(95, 5))
    assert analysis.primary is DiagnosisCode.OVER_REPLICATED, analysis.summary
    replicas = next(a for a in analysis.actions if a.type.value == "replicas")
    # fleet p95 = (5 × 0.9 + 95 × 0.02) / 100 = 0.064 → 100 × 0.064 / 0.6 = 10.7 → 11; step floor 100/3 → 34
    assert replicas.from_value == "100"
    assert replicas.to_value == "34"


def test_a_fleet_whose_replicas_all_peak_is_not_over_replicated() -> None:
    assert DiagnosisCode.OVER_REPLICATED not in codes(_fleet(10, 90))


def test_mostly_idle_at_the_median_fleet_is_over_replicated_when_half_suffices() -> None:
    """Fleet p95 0.25 (above 0.2) but every replica idles at the median: 40 × 0.25 / 0.6 = 17 ≤ 20."""
    w = _fleet(0, 40, peaky=stat(0.0, 0.25, peak=0.6))
    assert primary(w) is DiagnosisCode.OVER_REPLICATED
    busy_median = _fleet(0, 40, peaky=stat(0.2, 0.05))
    assert DiagnosisCode.OVER_REPLICATED not in codes(busy_median)
