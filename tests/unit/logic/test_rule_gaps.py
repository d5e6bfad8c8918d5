"""Rules that must still judge a workload when a signal is missing or a figure sits near a threshold."""

from __future__ import annotations

from tests.unit.logic.logic_builders import allocation, gpu, pod, stat, window

from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import DiagnosisCode
from gpu_rightsizer.model.observation import GPUObservation, Signal, SignalStats, WorkloadWindow


def _without_sm(**signals: SignalStats) -> GPUObservation:
    """A GPU as default dcgm-exporter counters show it: busy, pipes and DRAM, no SM_ACTIVE/OCCUPANCY."""
    base: dict[str, SignalStats] = {"fb_used_mib": stat(40000, 500)}
    base.update(signals)
    return gpu().model_copy(update={"stats": {Signal(name): value for name, value in base.items()}})


def _finding(analysis_window: WorkloadWindow, code: DiagnosisCode) -> tuple[float, str]:
    analysis = analyze_window(analysis_window)
    match = [f for f in analysis.findings if f.code is code]
    assert match, analysis.findings
    return match[0].confidence, match[0].message


# --- gap 1: in-GPU efficiency without SM fields ----------------------------------------------------


def _fp32_training(with_sm: bool) -> WorkloadWindow:
    signals = {
        "gr_engine_active": stat(0.95, 0.04),
        "tensor_active": stat(0.01),
        "fp32_active": stat(0.6, 0.03),
        "dram_active": stat(0.35, 0.02),
    }
    if with_sm:
        signals["sm_active"] = stat(0.9, 0.04)
    return window([pod(gpus=[_without_sm(**signals)])])


def test_no_tensor_cores_is_judged_on_busy_without_sm_fields_at_lower_confidence() -> None:
    with_sm, _ = _finding(_fp32_training(with_sm=True), DiagnosisCode.NO_TENSOR_CORES)
    analysis = analyze_window(_fp32_training(with_sm=False))
    assert analysis.primary is DiagnosisCode.NO_TENSOR_CORES, analysis.summary
    proxy, message = _finding(_fp32_training(with_sm=False), DiagnosisCode.NO_TENSOR_CORES)
    assert proxy < with_sm
    assert "LowOccupancy was not checked" in message


def test_no_tensor_cores_without_sm_fields_needs_high_busy_and_the_fp32_field() -> None:
    moderate = window(
        [pod(gpus=[_without_sm(gr_engine_active=stat(0.6), tensor_active=stat(0.01), fp32_active=stat(0.6))])]
    )
    assert DiagnosisCode.NO_TENSOR_CORES not in {f.code for f in analyze_window(moderate).findings}
    no_fp32 = window([pod(gpus=[_without_sm(gr_engine_active=stat(0.95), tensor_active=stat(0.01))])])
    assert DiagnosisCode.NO_TENSOR_CORES not in {f.code for f in analyze_window(no_fp32).findings}


def test_bandwidth_bound_without_sm_fields_carries_the_proxy_penalty() -> None:
    def bandwidth(with_sm: bool) -> WorkloadWindow:
        signals = {"gr_engine_active": stat(0.9), "tensor_active": stat(0.05), "dram_active": stat(0.7, 0.05)}
        if with_sm:
            signals["sm_active"] = stat(0.7)
        return window([pod(gpus=[_without_sm(**signals)])])

    with_sm, _ = _finding(bandwidth(True), DiagnosisCode.MEMORY_BANDWIDTH_BOUND)
    proxy, message = _finding(bandwidth(False), DiagnosisCode.MEMORY_BANDWIDTH_BOUND)
    assert analyze_window(bandwidth(False)).primary is DiagnosisCode.MEMORY_BANDWIDTH_BOUND
    assert proxy == round(with_sm * EngineSettings().busy_as_sm_proxy_penalty, 3)
    assert "GPU busy" in message and "LowOccupancy was not checked" in message


def test_low_occupancy_is_never_claimed_without_sm_fields() -> None:
    busy_only = window([pod(gpus=[_without_sm(gr_engine_active=stat(0.95), tensor_active=stat(0.4))])])
    assert DiagnosisCode.LOW_OCCUPANCY not in {f.code for f in analyze_window(busy_only).findings}


# --- gap 2: communication-bound without SM fields --------------------------------------------------


def _allreduce(tensor_p50: float, *, with_sm: bool = False, nvlink: float = 2.2e11) -> WorkloadWindow:
    gpus = []
    for index in range(8):
        signals = {
            "gr_engine_active": stat(0.7, 0.03),
            "tensor_active": stat(tensor_p50, 0.25),
            "fp32_active": stat(0.0),
            "dram_active": stat(0.3),
            "nvlink_rx_bytes_per_s": stat(nvlink, 0.1 * nvlink),
            "nvlink_tx_bytes_per_s": stat(nvlink, 0.1 * nvlink),
        }
        if with_sm:
            signals["sm_active"] = stat(0.2, 0.2)
        gpus.append(_without_sm(**signals).model_copy(update={"uuid": f"GPU-{index}"}))
    return window(
        [pod(gpus=gpus, cpu_usage_cores=stat(8.0))], alloc=allocation(gpu_count=8, cpu_limit_cores=64.0)
    )


def test_saturated_nvlink_with_idle_tensor_pipes_is_communication_bound_without_sm_fields() -> None:
    analysis = analyze_window(_allreduce(0.05))
    assert analysis.primary is DiagnosisCode.COMMUNICATION_BOUND, analysis.summary
    _, message = _finding(_allreduce(0.05), DiagnosisCode.COMMUNICATION_BOUND)
    # SM activity is no gate (NCCL kernels count as SM-active): the same verdict with SM fields
    assert analyze_window(_allreduce(0.05, with_sm=True)).primary is DiagnosisCode.COMMUNICATION_BOUND
    assert "math pipes" in message


def test_busy_tensor_pipes_or_quiet_links_are_not_communication_bound() -> None:
    assert analyze_window(_allreduce(0.4)).primary is not DiagnosisCode.COMMUNICATION_BOUND
    assert analyze_window(_allreduce(0.05, nvlink=5e10)).primary is not DiagnosisCode.COMMUNICATION_BOUND


# --- gap 3: memory capacity with OOM restarts below the 95 % line ----------------------------------


def _memory(share: float, *, restarts: int = 0, oom: bool = False) -> WorkloadWindow:
    used = share * 81559.0
    card = _without_sm(
        gr_engine_active=stat(0.55), sm_active=stat(0.35), tensor_active=stat(0.25), fb_used_mib=stat(used)
    )
    return window([pod(gpus=[card], restarts=restarts, oom_killed=oom)])


def test_oom_restarts_with_memory_high_are_capacity_bound_below_the_full_line() -> None:
    assert analyze_window(_memory(0.93, restarts=4)).primary is DiagnosisCode.MEMORY_CAPACITY_BOUND
    assert analyze_window(_memory(0.88, restarts=1, oom=True)).primary is DiagnosisCode.MEMORY_CAPACITY_BOUND
    below, _ = _finding(_memory(0.93, restarts=4), DiagnosisCode.MEMORY_CAPACITY_BOUND)
    full, _ = _finding(_memory(0.97, restarts=4), DiagnosisCode.MEMORY_CAPACITY_BOUND)
    assert below < full


def test_restarts_with_moderate_memory_or_high_memory_without_crashes_are_not_capacity_bound() -> None:
    assert analyze_window(_memory(0.7, restarts=4)).primary is not DiagnosisCode.MEMORY_CAPACITY_BOUND
    assert analyze_window(_memory(0.93)).primary is not DiagnosisCode.MEMORY_CAPACITY_BOUND


# --- gap 5: Healthy states its figures and is less sure when signals are missing or close -------------


def _healthy(*, cpu: float = 3.0, with_sm: bool = True) -> WorkloadWindow:
    signals = {
        "gr_engine_active": stat(0.9, 0.05),
        "tensor_active": stat(0.5, 0.05),
        "fp32_active": stat(0.1),
        "dram_active": stat(0.4, 0.05),
    }
    if with_sm:
        signals["sm_active"] = stat(0.8, 0.05)
    return window([pod(gpus=[_without_sm(**signals)], cpu_usage_cores=stat(cpu, 0.1))])


def test_healthy_states_the_key_figures() -> None:
    analysis = analyze_window(_healthy())
    assert analysis.primary is DiagnosisCode.HEALTHY
    message = analysis.findings[0].message
    for text in ("busy p50 90%", "p95 95%", "SM activity p50 80%", "tensor activity p95 55%", "CPU p95 at"):
        assert text in message, message
    assert "GiB" in message
    assert "busy p95 95%" in analysis.summary and "SM p50 80%" in analysis.summary
    evidence = analysis.findings[0].evidence
    assert evidence["gpuBusyP95"] == 0.95 and evidence["cpuSaturation"] == round(3.1 / 8.0, 4)


def test_healthy_is_less_sure_without_sm_fields_or_near_a_threshold() -> None:
    clear = analyze_window(_healthy()).confidence
    no_sm = analyze_window(_healthy(with_sm=False))
    near_cpu = analyze_window(_healthy(cpu=6.9))  # p95 7.0 of 8 cores = 0.875, within 10 % of 0.9
    assert no_sm.primary is DiagnosisCode.HEALTHY and near_cpu.primary is DiagnosisCode.HEALTHY
    assert no_sm.confidence < clear and near_cpu.confidence < clear
    assert "LowOccupancy was not checked" in no_sm.findings[0].message
    assert "CPU saturation" in near_cpu.findings[0].message
    assert near_cpu.findings[0].evidence["nearThresholds"] == 1.0


# --- gap 6: over-replication judged on a robust fleet statistic -----------------------------------


def _service(busy: SignalStats, replicas: int, queue: SignalStats) -> WorkloadWindow:
    pods = [
        pod(f"pod-{i}", gpus=[_without_sm(gr_engine_active=busy).model_copy(update={"uuid": f"GPU-{i}"})])
        for i in range(replicas)
    ]
    return window(
        pods,
        alloc=allocation(replicas=replicas, workload_type="inference"),
        stats={Signal.QUEUE_LENGTH: queue, Signal.REQUESTS_PER_S: stat(10.0)},
    )


def test_a_quiet_fleet_with_burst_minutes_over_the_p95_line_is_over_replicated() -> None:
    no_queue = stat(0.0, active_fraction=0.0)
    bursty = analyze_window(_service(stat(0.12, 0.10), 4, no_queue))  # p95 0.22 > 0.2, median 0.12
    assert bursty.primary is DiagnosisCode.OVER_REPLICATED, bursty.summary
    assert bursty.findings[0].evidence["fleetBusyP50"] == 0.12


def test_a_low_median_fleet_whose_peaks_need_its_replicas_is_not_over_replicated() -> None:
    no_queue = stat(0.0, active_fraction=0.0)
    peaky = analyze_window(_service(stat(0.12, 0.6), 4, no_queue))  # p95 0.72: sized on it, 5 replicas at 0.6
    assert DiagnosisCode.OVER_REPLICATED not in {f.code for f in peaky.findings}


# --- gap 7: queueing at every peak with saturated GPUs is under-replication ------------------------


def test_queue_at_the_peaks_with_saturated_gpus_is_under_replicated_at_lower_confidence() -> None:
    saturated = stat(0.72, 0.25)
    peaks = _service(saturated, 2, stat(0.0, 7.0, active_fraction=0.3))
    sustained = _service(saturated, 2, stat(3.0, 4.0, active_fraction=0.9))
    at_peaks = analyze_window(peaks)
    assert at_peaks.primary is DiagnosisCode.UNDER_REPLICATED, at_peaks.summary
    assert at_peaks.confidence < analyze_window(sustained).confidence
    assert "at the peaks only" in at_peaks.findings[0].message


def test_queue_at_the_peaks_without_saturation_is_not_under_replicated() -> None:
    calm = analyze_window(_service(stat(0.3, 0.2), 2, stat(0.0, 7.0, active_fraction=0.3)))
    assert DiagnosisCode.UNDER_REPLICATED not in {f.code for f in calm.findings}
