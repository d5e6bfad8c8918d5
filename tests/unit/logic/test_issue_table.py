"""One test (at least) per row of the "Engine v2" table: advice that would harm under an Apply policy.

Figures are the measured H200 ones quoted in docs/reviews (engine-2026-12, D1-D11). Each test failed
on the engine before these rules.
"""

from __future__ import annotations

from tests.unit.logic.logic_builders import allocation, gpu, pod, stat, window

from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.model.codes import ActionType, DiagnosisCode
from gpu_rightsizer.model.observation import Signal, WorkloadWindow
from gpu_rightsizer.model.result import Analysis

H200 = "NVIDIA H200"
H200_PRODUCT = "NVIDIA-H200"
H200_MIB = 143771.0
GIB = 1024.0
SHRINKING = {ActionType.MIG_PROFILE, ActionType.GPU_SHARING, ActionType.RELEASE_IDLE, ActionType.REPLICAS}


def h200(uuid: str = "GPU-0", **signals: object) -> object:
    return gpu(uuid, model=H200, memory_mib=H200_MIB, **signals)  # type: ignore[arg-type]


def h200_alloc(**changes: object) -> object:
    return allocation(gpu_model=H200_PRODUCT, **changes)


def capacity_changes(analysis: Analysis) -> list[ActionType]:
    return [a.type for a in analysis.actions if a.automatic and a.target and a.target.gpu_capacity_change]


def codes(analysis: Analysis) -> set[DiagnosisCode]:
    return {finding.code for finding in analysis.findings}


# --- row 1: a live inference server doing little work is never released -------------------------
def tiny_server(*, hours: float = 1.0, with_sm: bool = True, samples: int = 60) -> WorkloadWindow:
    signals = {
        "gr_engine_active": stat(0.004, 0.001, peak=0.009, samples=samples),
        "fb_used_mib": stat(1.3 * GIB, samples=samples),
        "pcie_rx_bytes_per_s": stat(6e6, 1.5e6, samples=samples),
        "pcie_tx_bytes_per_s": stat(1e6, 0.2e6, samples=samples),
    }
    if with_sm:
        signals["sm_active"] = stat(0.0024, 0.0006, samples=samples)
    else:
        signals = {"gpu_util": stat(0.0, samples=samples), **signals}
        del signals["gr_engine_active"]
    return window(
        [pod(gpus=[h200(**signals)], cpu_usage_cores=stat(0.11, 0.02, samples=samples))],
        alloc=h200_alloc(workload_type="inference", cpu_limit_cores=2.0),  # type: ignore[arg-type]
        hours=hours,
        step=hours * 3600 / samples,
    )


def test_row1_live_server_without_request_metric_is_not_idle_and_not_released() -> None:
    analysis = analyze_window(tiny_server())
    assert DiagnosisCode.IDLE_ALLOCATION not in codes(analysis), analysis.summary
    assert analysis.primary is DiagnosisCode.OVERSIZED_GPU
    assert not any(a.type is ActionType.RELEASE_IDLE for a in analysis.actions)


def test_row1_gpu_util_only_never_releases_automatically() -> None:
    analysis = analyze_window(tiny_server(with_sm=False))
    assert not any(a.automatic and a.type is ActionType.RELEASE_IDLE for a in analysis.actions)


def _idle_service(hours: float, samples: int) -> WorkloadWindow:
    quiet = h200(
        gr_engine_active=stat(0.0, samples=samples),
        sm_active=stat(0.0, samples=samples),
        fb_used_mib=stat(80 * GIB, samples=samples),
        pcie_rx_bytes_per_s=stat(0.8e6, 0.2e6, samples=samples),
    )
    return window(
        [
            pod(
                gpus=[quiet],
                cpu_usage_cores=stat(0.01, samples=samples),
                net_rx_bytes_per_s=stat(400, 100, samples=samples),  # kubelet probes only: no traffic
            )
        ],
        alloc=h200_alloc(workload_type="inference"),  # type: ignore[arg-type]
        hours=hours,
        step=hours * 3600 / samples,
    )


def test_row1_a_service_idle_for_an_hour_at_night_is_not_released_automatically() -> None:
    analysis = analyze_window(_idle_service(1.0, 60))
    assert analysis.primary is DiagnosisCode.IDLE_ALLOCATION
    release = [a for a in analysis.actions if a.type is ActionType.RELEASE_IDLE]
    assert release and not release[0].automatic and "24 h" in release[0].reason
    day = analyze_window(_idle_service(24.0, 1440))
    assert any(a.automatic and a.type is ActionType.RELEASE_IDLE for a in day.actions)


def test_row1_release_never_goes_below_min_replicas() -> None:
    analysis = analyze_window(_idle_service(24.0, 1440), min_replicas=1)
    assert not any(a.automatic and a.type is ActionType.RELEASE_IDLE for a in analysis.actions)


# --- row 2: scale-in and slice shrink are never applied together ---------------------------------
def test_row2_one_gpu_capacity_change_per_recommendation() -> None:
    pods = [
        pod(
            f"srv-{i}",
            gpus=[
                h200(
                    f"GPU-{i}",
                    gr_engine_active=stat(0.1, 0.02, samples=1440),
                    # narrow phases (SM/GR 0.2, 26 SMs): a 2g slice keeps a GPU phase's latency
                    sm_active=stat(0.02, 0.005, samples=1440),
                    fb_used_mib=stat(12 * GIB, samples=1440),
                    pcie_rx_bytes_per_s=stat(5e7, samples=1440),
                )
            ],
            cpu_usage_cores=stat(0.5, 0.3, samples=1440),
        )
        for i in range(4)
    ]
    w = window(
        pods,
        alloc=h200_alloc(replicas=4, workload_type="inference"),  # type: ignore[arg-type]
        hours=24.0,
        step=60.0,
        stats={Signal.QUEUE_LENGTH: stat(0.0, samples=1440)},
    )
    analysis = analyze_window(w)
    assert {DiagnosisCode.OVERSIZED_GPU, DiagnosisCode.OVER_REPLICATED} <= codes(analysis)
    assert len(capacity_changes(analysis)) == 1, analysis.actions
    assert len([a for a in analysis.actions if a.automatic and a.type in SHRINKING]) == 1
    deferred = [a for a in analysis.actions if "next verified cycle" in a.reason]
    assert deferred and not deferred[0].automatic


# --- row 3: LowOccupancy is no verdict on compute-bound GEMMs ------------------------------------
def test_row3_fp32_gemm_is_no_tensor_cores_not_low_occupancy() -> None:
    gemm = h200(
        gr_engine_active=stat(0.97, 0.01),
        sm_active=stat(0.95, 0.01),
        sm_occupancy=stat(0.12),
        tensor_active=stat(0.0),
        fp32_active=stat(0.6, 0.05),
        dram_active=stat(0.2, 0.05),
        fb_used_mib=stat(20 * GIB),
    )
    analysis = analyze_window(window([pod(gpus=[gemm], cpu_usage_cores=stat(1.0))], alloc=h200_alloc()))  # type: ignore[arg-type]
    assert analysis.primary is DiagnosisCode.NO_TENSOR_CORES, analysis.summary
    assert DiagnosisCode.LOW_OCCUPANCY not in codes(analysis)


def test_row3_healthy_bf16_ddp_is_healthy() -> None:
    gpus = [
        h200(
            f"GPU-{i}",
            gr_engine_active=stat(0.93, 0.02),
            sm_active=stat(0.9, 0.02),
            sm_occupancy=stat(0.19),
            tensor_active=stat(0.75, 0.05),
            fp32_active=stat(0.05),
            dram_active=stat(0.4, 0.05),
            fb_used_mib=stat(70 * GIB),
            nvlink_rx_bytes_per_s=stat(3e10, 1e10),
            nvlink_tx_bytes_per_s=stat(3e10, 1e10),
        )
        for i in range(2)
    ]
    w = window(
        [pod(gpus=gpus, cpu_usage_cores=stat(6.0, 1.0))], alloc=h200_alloc(gpu_count=2, cpu_limit_cores=16.0)
    )  # type: ignore[arg-type]
    analysis = analyze_window(w)
    assert analysis.primary is DiagnosisCode.HEALTHY, analysis.summary


# --- row 4: a loader pinned below its limit is starved; no shrink, no useless CPU raise ----------
def one_worker_loader(samples: int = 60) -> WorkloadWindow:
    trainer = h200(
        gr_engine_active=stat(0.16, 0.06, sawtooth=0.2, samples=samples),
        sm_active=stat(0.14, 0.05, samples=samples),
        tensor_active=stat(0.08, 0.03, samples=samples),
        fb_used_mib=stat(5.3 * GIB, samples=samples),
        pcie_rx_bytes_per_s=stat(1.4e8, 0.3e8, samples=samples),
        pcie_tx_bytes_per_s=stat(1e6, samples=samples),
    )
    return window(
        [pod(gpus=[trainer], cpu_usage_cores=stat(1.1, 0.05, samples=samples))],
        alloc=h200_alloc(workload_type="training", cpu_limit_cores=2.0, cpu_request_cores=2.0),  # type: ignore[arg-type]
        step=7200 / samples,
    )


def test_row4_cpu_plateau_below_the_limit_is_cpu_bound_and_blocks_every_shrink() -> None:
    analysis = analyze_window(one_worker_loader())
    assert analysis.primary is DiagnosisCode.INPUT_PIPELINE_CPU_BOUND, analysis.summary
    assert not [a for a in analysis.actions if a.type in SHRINKING]
    assert not [a for a in analysis.actions if a.type is ActionType.CPU]  # the limit is not the bottleneck
    advice = " ".join(a.to_value for a in analysis.actions if a.type is ActionType.SOFTWARE)
    assert "sched_getaffinity" in advice and "cpu_count" in advice


def test_row4_no_limit_pod_is_not_saturated_at_its_request() -> None:
    """Use ≥ 90 % of a request is bursting, not saturation: only a limit can starve a pod."""
    base = one_worker_loader()
    bursty = base.pods[0].model_copy(update={"stats": {Signal.CPU_USAGE_CORES: stat(3.9, 0.8)}})
    w = window([bursty], alloc=h200_alloc(cpu_limit_cores=None, cpu_request_cores=4.0))  # type: ignore[arg-type]
    analysis = analyze_window(w)
    # no rule claims CPU-bound; CPU holding at ≥ 1 core while the GPU waits is a plateau veto, so the
    # suspected cause is named (advice only) and nothing shrinks or gets more CPU
    cpu = [f for f in analysis.findings if f.code is DiagnosisCode.INPUT_PIPELINE_CPU_BOUND]
    assert all(f.evidence.get("suspected") == 1.0 for f in cpu)
    assert not [a for a in analysis.actions if a.type is ActionType.CPU or a.type in SHRINKING]


# --- row 5: CommunicationBound per pod, per direction, on idle math pipes ------------------------
def allreduce(
    model: str = H200, nvlink: float = 1.71e11, pods_: int = 1, gpus_per_pod: int = 2, sm: float = 0.51
) -> WorkloadWindow:
    pods = []
    for p in range(pods_):
        gpus = [
            gpu(
                f"GPU-{p}-{i}",
                model=model,
                memory_mib=H200_MIB,
                gr_engine_active=stat(0.6, 0.05),
                sm_active=stat(sm, 0.05),
                tensor_active=stat(0.01, 0.01),
                fp32_active=stat(0.02),
                fb_used_mib=stat(60 * GIB),
                nvlink_rx_bytes_per_s=stat(nvlink, 0.1 * nvlink),
                nvlink_tx_bytes_per_s=stat(nvlink, 0.1 * nvlink),
            )
            for i in range(gpus_per_pod)
        ]
        pods.append(pod(f"rank-{p}", gpus=gpus, cpu_usage_cores=stat(4.0, 1.0)))
    return window(
        pods,
        alloc=allocation(
            gpu_model=model.replace(" ", "-"), gpu_count=gpus_per_pod, replicas=pods_, cpu_limit_cores=32.0
        ),
    )


def test_row5_nvlink_allreduce_with_sm_half_active_is_communication_bound() -> None:
    analysis = analyze_window(allreduce())
    assert analysis.primary is DiagnosisCode.COMMUNICATION_BOUND, analysis.summary


def test_row5_gb200_is_measured_against_nvlink_5() -> None:
    """150 GB/s each way is 17 % of GB200's 900 GB/s per direction: not communication-bound."""
    assert DiagnosisCode.COMMUNICATION_BOUND not in codes(
        analyze_window(allreduce("NVIDIA GB200", 1.5e11, sm=0.45))
    )


def test_row5_independent_replicas_doing_host_copies_are_not_communication_bound() -> None:
    pods = [
        pod(
            f"srv-{i}",
            gpus=[
                h200(
                    f"GPU-{i}",
                    gr_engine_active=stat(0.2, 0.05),
                    sm_active=stat(0.05, 0.02),
                    tensor_active=stat(0.01),
                    fb_used_mib=stat(30 * GIB),
                    pcie_rx_bytes_per_s=stat(2e10, 1.5e10),
                    pcie_tx_bytes_per_s=stat(1e8),
                )
            ],
            cpu_usage_cores=stat(2.0, 0.5),
        )
        for i in range(2)
    ]
    analysis = analyze_window(window(pods, alloc=h200_alloc(replicas=2)))  # type: ignore[arg-type]
    assert DiagnosisCode.COMMUNICATION_BOUND not in codes(analysis)
    assert analysis.primary is DiagnosisCode.HOST_TRANSFER_BOUND, analysis.summary


# --- row 6: starved at its limit with a near-idle GPU: CPU first, no release -------------------
def test_row6_throttled_pod_with_idle_gpu_gets_cpu_not_release() -> None:
    starved = h200(
        gr_engine_active=stat(0.003, 0.003, peak=0.009),
        sm_active=stat(0.002, 0.002),
        fb_used_mib=stat(4 * GIB),
    )
    w = window(
        [pod(gpus=[starved], cpu_usage_cores=stat(2.0, 0.0), cpu_throttled_ratio=stat(0.7, 0.05))],
        alloc=h200_alloc(cpu_limit_cores=2.0, cpu_request_cores=2.0),  # type: ignore[arg-type]
        hours=24.0,
        step=60.0,
    )
    w = w.model_copy(
        update={
            "pods": [
                w.pods[0].model_copy(
                    update={
                        "gpus": [
                            g.model_copy(
                                update={
                                    "stats": {
                                        k: v.model_copy(update={"samples": 1440}) for k, v in g.stats.items()
                                    }
                                }
                            )
                            for g in w.pods[0].gpus
                        ]
                    }
                )
            ]
        }
    )
    analysis = analyze_window(w)
    assert analysis.primary is DiagnosisCode.INPUT_PIPELINE_CPU_BOUND, analysis.summary
    assert not any(a.type is ActionType.RELEASE_IDLE for a in analysis.actions)
    assert any(a.type is ActionType.CPU for a in analysis.actions)


# --- row 7: a host-wait loop runs kernels: live work, not "no useful work" ----------------------
def test_row7_host_wait_loop_is_live_work() -> None:
    loop = h200(
        gr_engine_active=stat(0.03, 0.005),
        sm_active=stat(0.025, 0.005),
        fb_used_mib=stat(2 * GIB),
        pcie_rx_bytes_per_s=stat(2e6, 0.5e6),
    )
    analysis = analyze_window(window([pod(gpus=[loop], cpu_usage_cores=stat(1.0, 0.02))], alloc=h200_alloc()))  # type: ignore[arg-type]
    assert DiagnosisCode.IDLE_ALLOCATION not in codes(analysis)
    assert "no useful work" not in " ".join(f.message for f in analysis.findings)
    assert not any(a.type is ActionType.RELEASE_IDLE for a in analysis.actions)


# --- row 8: GR and GPU_UTIL medians part on a sawtooth; their means agree -----------------------
def test_row8_sawtooth_loader_is_not_insufficient_data() -> None:
    def saw(p50: float, mean: float) -> object:
        return stat(p50, 0.4).model_copy(update={"mean": mean, "samples": 240, "sawtooth": 0.6})

    loader = h200(
        gr_engine_active=saw(0.45, 0.3),
        gpu_util=saw(0.10, 0.32),
        sm_active=stat(0.25, 0.3, samples=240),
        fb_used_mib=stat(10 * GIB, samples=240),
    )
    w = window(
        [
            pod(
                gpus=[loader],
                cpu_usage_cores=stat(2.0, 0.01, samples=240),
                cpu_throttled_ratio=stat(0.5, samples=240),
            )
        ],
        alloc=h200_alloc(cpu_limit_cores=2.0),  # type: ignore[arg-type]
        step=30.0,
    )
    analysis = analyze_window(w)
    assert DiagnosisCode.INSUFFICIENT_DATA not in codes(analysis), analysis.summary
    assert analysis.primary is DiagnosisCode.INPUT_PIPELINE_CPU_BOUND


# --- row 9: normal image-training reads are no I/O stall ----------------------------------------
def test_row9_busy_trainer_reading_300_mb_s_is_not_io_bound() -> None:
    trainer = h200(
        gr_engine_active=stat(0.75, 0.1),
        sm_active=stat(0.70, 0.1),
        tensor_active=stat(0.5, 0.05),
        dram_active=stat(0.3),
        fb_used_mib=stat(60 * GIB),
    )
    w = window(
        [pod(gpus=[trainer], cpu_usage_cores=stat(5.0, 1.0), fs_read_bytes_per_s=stat(296 * 2**20))],
        alloc=h200_alloc(workload_type="training"),  # type: ignore[arg-type]
    )
    analysis = analyze_window(w)
    assert DiagnosisCode.INPUT_PIPELINE_IO_BOUND not in codes(analysis), analysis.summary


# --- row 10: severity first ---------------------------------------------------------------------
def test_row10_oom_crash_loop_outranks_occupancy() -> None:
    crashing = h200(
        gr_engine_active=stat(0.9, 0.05),
        sm_active=stat(0.4, 0.05),
        sm_occupancy=stat(0.15),
        tensor_active=stat(0.3),
        fb_used_mib=stat(0.9 * H200_MIB),
    )
    w = window([pod(gpus=[crashing], restarts=3, oom_killed=True)], alloc=h200_alloc())  # type: ignore[arg-type]
    assert analyze_window(w).primary is DiagnosisCode.MEMORY_CAPACITY_BOUND


def test_row10_queueing_outranks_memory_bandwidth() -> None:
    llm = h200(
        gr_engine_active=stat(0.97, 0.02),
        sm_active=stat(0.8, 0.1),
        tensor_active=stat(0.1, 0.05),
        dram_active=stat(0.7, 0.05),
        fb_used_mib=stat(0.8 * H200_MIB),
    )
    w = window(
        [pod(gpus=[llm])],
        alloc=h200_alloc(workload_type="inference"),  # type: ignore[arg-type]
        stats={
            Signal.QUEUE_LENGTH: stat(4.0, 4.0, active_fraction=0.9),
            Signal.REQUESTS_PER_S: stat(30.0),
        },
    )
    analysis = analyze_window(w)
    assert DiagnosisCode.MEMORY_BANDWIDTH_BOUND in codes(analysis)
    assert analysis.primary is DiagnosisCode.UNDER_REPLICATED


def test_row4_per_process_cpu_from_the_agent_decides_the_plateau() -> None:
    """A busiest process at one core confirms the starvation (higher confidence). A reading without one
    does not rule it out: a missed process must not turn a starved job into a GPU shrink."""
    base = one_worker_loader()
    plain = analyze_window(base)

    def with_process(cores: float) -> WorkloadWindow:
        stats = {**base.pods[0].stats, Signal.PROCESS_CPU_MAX_CORES: stat(cores, 0.01)}
        return window([base.pods[0].model_copy(update={"stats": stats})], alloc=base.allocation, step=120.0)

    pinned = analyze_window(with_process(1.0))
    assert pinned.primary is DiagnosisCode.INPUT_PIPELINE_CPU_BOUND
    assert pinned.confidence > plain.confidence
    spread = analyze_window(with_process(0.4))  # eleven light threads, or a process the agent missed
    assert spread.confidence < pinned.confidence
    shrinking = {ActionType.MIG_PROFILE, ActionType.GPU_SHARING, ActionType.RELEASE_IDLE}
    assert not any(a.automatic and a.type in shrinking for a in spread.actions)
    missed = analyze_window(with_process(0.0))  # the coarse read that once dropped the process to 0
    assert missed.primary is DiagnosisCode.INPUT_PIPELINE_CPU_BOUND
    assert not any(a.automatic and a.type in shrinking for a in missed.actions)


def test_row9_io_bound_without_a_wait_signal_says_what_is_missing() -> None:
    from tests.unit.logic.test_diagnose import io_bound

    analysis = analyze_window(io_bound())
    finding = next(f for f in analysis.findings if f.code is DiagnosisCode.INPUT_PIPELINE_IO_BOUND)
    assert "io.pressure" in finding.message
    assert finding.confidence <= 0.7


def test_oversized_says_so_when_no_smaller_mig_profile_fits() -> None:
    """Half an H100 by SMs (0.4 p95 → 66 SMs at 0.8 > 4g's 64): no slice fits; the message says so."""
    half = gpu(
        gr_engine_active=stat(0.45, 0.05),
        sm_active=stat(0.35, 0.05),
        tensor_active=stat(0.3),
        fb_used_mib=stat(20 * GIB),
    )
    analysis = analyze_window(window([pod(gpus=[half], cpu_usage_cores=stat(0.5, 0.3))]))
    oversized = next(f for f in analysis.findings if f.code is DiagnosisCode.OVERSIZED_GPU)
    assert "no smaller MIG profile" in oversized.message
    assert not any(a.type is ActionType.MIG_PROFILE for a in analysis.actions)


def test_row1_a_job_that_ran_for_one_percent_of_the_day_is_not_idle() -> None:
    """SM p99 at 0 but a 14-minute burst at SM 0.6: kernels ran, so the allocation is live."""
    samples = 1440
    daily = h200(
        gr_engine_active=stat(0.0, samples=samples, peak=0.7),
        sm_active=stat(0.0, samples=samples, peak=0.6),
        fb_used_mib=stat(20 * GIB, samples=samples),
    )
    w = window(
        [pod(gpus=[daily], cpu_usage_cores=stat(0.01, samples=samples))],
        alloc=h200_alloc(),  # type: ignore[arg-type]
        hours=24.0,
        step=60.0,
    )
    analysis = analyze_window(w)
    assert DiagnosisCode.IDLE_ALLOCATION not in codes(analysis), analysis.summary
    assert not any(a.type is ActionType.RELEASE_IDLE for a in analysis.actions)
