"""The labelled scenario libraries: several variants of every diagnosis code.

`scenario_library()`: variants differ in seed, GPU model, GPU count, CPU limit, replicas, MIG slice,
sharing and workload kind, so a rule that only works for one allocation shows up as a miss in
`bench/diagnosis_accuracy.py`. Its shapes sit far from every threshold.

`hard_scenario_library()`: the difficulties of real clusters — noise and bursts, missing profiling
fields, missed scrapes, `exported_*` and `hostname` label variants, shared GPUs and MIG slices, values
near each threshold on both sides, and decoys whose signals look like one problem but are another (or
none). Each carries the code a careful expert gives from the numbers, with a one-line `why`.
"""

from __future__ import annotations

from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.codes import DiagnosisCode
from gpu_rightsizer.sim.scenarios import (
    GIB,
    NO_SM_FIELDS,
    PROFILING_FIELDS,
    DataDefect,
    LabelStyle,
    Scenario,
    Shape,
)

H100 = "NVIDIA-H100-80GB-HBM3"
H200 = "NVIDIA-H200"
A100_80 = "NVIDIA-A100-SXM4-80GB"
A100_40 = "NVIDIA-A100-SXM4-40GB"
L4 = "NVIDIA-L4"


def _serving(name: str, shape: Shape, seed: int, **changes: object) -> Scenario:
    base = Scenario(name, shape, seed=seed, workload_type="inference", cpu_request=2.0, cpu_limit=4.0)
    return base.with_(**changes)


def scenario_library(namespace: str = "sim") -> list[Scenario]:
    """Every labelled scenario (≥ 3 per diagnosis code), in one namespace."""
    s = Scenario
    scenarios = [
        # IdleAllocation
        s("idle-notebook", Shape.IDLE, seed=1, kind="Pod", cpu_limit=2.0, memory_share=0.2),
        s("idle-stuck-job", Shape.IDLE, seed=2, kind="Job", gpu_model=A100_80, gpu_count=2),
        s("idle-mig", Shape.IDLE, seed=3, gpu_model=H100, mig_profile="3g.40gb"),
        _serving("idle-service", Shape.IDLE, 4, gpu_model=L4, replicas=2),
        # InputPipelineCPUBound
        s("loader-starved", Shape.INPUT_CPU_BOUND, seed=11, cpu_limit=2.0),
        s(
            "loader-starved-a100",
            Shape.INPUT_CPU_BOUND,
            seed=12,
            gpu_model=A100_80,
            cpu_limit=4.0,
            cpu_demand_per_gpu=16,
        ),
        s(
            "loader-starved-multi",
            Shape.INPUT_CPU_BOUND,
            seed=13,
            gpu_model=H200,
            gpu_count=2,
            cpu_limit=6.0,
            kind="Job",
        ),
        s(
            "loader-starved-sts",
            Shape.INPUT_CPU_BOUND,
            seed=14,
            kind="StatefulSet",
            gpu_model=L4,
            cpu_limit=1.0,
            cpu_demand_per_gpu=6,
        ),
        # InputPipelineIOBound
        s("remote-dataset", Shape.INPUT_IO_BOUND, seed=21, cpu_limit=16.0),
        s("remote-dataset-a100", Shape.INPUT_IO_BOUND, seed=22, gpu_model=A100_40, cpu_limit=8.0, kind="Job"),
        s("remote-dataset-h200", Shape.INPUT_IO_BOUND, seed=23, gpu_model=H200, cpu_limit=32.0, gpu_count=2),
        # HostTransferBound
        s("pageable-copies", Shape.HOST_TRANSFER_BOUND, seed=31),
        s("pageable-copies-a100", Shape.HOST_TRANSFER_BOUND, seed=32, gpu_model=A100_80, kind="Job"),
        s("pageable-copies-l4", Shape.HOST_TRANSFER_BOUND, seed=33, gpu_model=L4, cpu_limit=16.0),
        # CommunicationBound
        s("allreduce-4gpu", Shape.COMMUNICATION_BOUND, seed=41, gpu_count=4, cpu_limit=32.0),
        s(
            "allreduce-a100",
            Shape.COMMUNICATION_BOUND,
            seed=42,
            gpu_model=A100_80,
            gpu_count=8,
            cpu_limit=64.0,
            kind="Job",
        ),
        s("allreduce-h200", Shape.COMMUNICATION_BOUND, seed=43, gpu_model=H200, gpu_count=2, cpu_limit=16.0),
        # LowOccupancy
        s("tiny-batch", Shape.LOW_OCCUPANCY, seed=51),
        s("tiny-batch-a100", Shape.LOW_OCCUPANCY, seed=52, gpu_model=A100_40, kind="Job"),
        s("tiny-batch-h200", Shape.LOW_OCCUPANCY, seed=53, gpu_model=H200, replicas=2),
        # MemoryBandwidthBound
        s("decode-batch1", Shape.MEMORY_BANDWIDTH_BOUND, seed=61),
        s("decode-batch1-a100", Shape.MEMORY_BANDWIDTH_BOUND, seed=62, gpu_model=A100_80),
        s("elementwise-h200", Shape.MEMORY_BANDWIDTH_BOUND, seed=63, gpu_model=H200, kind="Job"),
        # NoTensorCores
        s("fp32-gemm", Shape.NO_TENSOR_CORES, seed=71),
        s("fp32-gemm-a100", Shape.NO_TENSOR_CORES, seed=72, gpu_model=A100_80, kind="Job"),
        s("fp32-gemm-l4", Shape.NO_TENSOR_CORES, seed=73, gpu_model=L4),
        # OversizedGPU
        _serving("small-model", Shape.OVERSIZED, 81, traffic_qps=3.0, memory_share=0.1),
        _serving(
            "small-model-a100", Shape.OVERSIZED, 82, gpu_model=A100_80, traffic_qps=2.0, memory_share=0.15
        ),
        _serving("small-model-h200", Shape.OVERSIZED, 83, gpu_model=H200, traffic_qps=4.0, memory_share=0.08),
        _serving("small-model-l4", Shape.OVERSIZED, 84, gpu_model=L4, traffic_qps=2.5, memory_share=0.2),
        # MemoryCapacityBound
        s("oom-training", Shape.MEMORY_CAPACITY_BOUND, seed=91),
        s("oom-training-a100", Shape.MEMORY_CAPACITY_BOUND, seed=92, gpu_model=A100_40, kind="Job"),
        s("oom-training-h200", Shape.MEMORY_CAPACITY_BOUND, seed=93, gpu_model=H200, gpu_count=2),
        # UnderReplicated
        _serving("busy-service", Shape.UNDER_REPLICATED, 101, traffic_qps=60.0, replicas=2, memory_share=0.6),
        _serving(
            "busy-service-a100", Shape.UNDER_REPLICATED, 102, gpu_model=A100_80, traffic_qps=35.0, replicas=1
        ),
        _serving(
            "busy-service-h200", Shape.UNDER_REPLICATED, 103, gpu_model=H200, traffic_qps=120.0, replicas=3
        ),
        # OverReplicated
        _serving("quiet-service", Shape.OVER_REPLICATED, 111, traffic_qps=8.0, replicas=4, memory_share=0.6),
        _serving(
            "quiet-service-a100",
            Shape.OVER_REPLICATED,
            112,
            gpu_model=A100_80,
            traffic_qps=6.0,
            replicas=3,
            memory_share=0.7,
        ),
        _serving(
            "quiet-service-h200",
            Shape.OVER_REPLICATED,
            113,
            gpu_model=H200,
            traffic_qps=12.0,
            replicas=5,
            memory_share=0.55,
        ),
        # Throttled
        s("hot-node", Shape.THROTTLED, seed=121),
        s("hot-node-a100", Shape.THROTTLED, seed=122, gpu_model=A100_80, kind="Job"),
        s("hot-node-h200", Shape.THROTTLED, seed=123, gpu_model=H200, gpu_count=2),
        # HardwareFault
        s("xid79", Shape.XID_FAULT, seed=131, xid=79),
        s("xid48-a100", Shape.XID_FAULT, seed=132, gpu_model=A100_80, xid=48, kind="Job"),
        s("xid94-h200", Shape.XID_FAULT, seed=133, gpu_model=H200, xid=94),
        # Healthy
        s("healthy-training", Shape.HEALTHY, seed=141, cpu_limit=16.0),
        s(
            "healthy-training-a100",
            Shape.HEALTHY,
            seed=142,
            gpu_model=A100_80,
            gpu_count=4,
            cpu_limit=48.0,
            kind="Job",
        ),
        _serving("healthy-service", Shape.HEALTHY, 143, traffic_qps=30.0, replicas=2, memory_share=0.6),
        # InsufficientData
        s("new-pod", Shape.INSUFFICIENT_DATA, seed=151, defect=DataDefect.SHORT),
        s("no-profiling", Shape.INSUFFICIENT_DATA, seed=152, defect=DataDefect.BLANK, gpu_model=A100_80),
        s("nan-metrics", Shape.INSUFFICIENT_DATA, seed=153, defect=DataDefect.NAN, gpu_model=H200),
    ]
    return [
        sc.with_(namespace=namespace, memory_limit_bytes=sc.memory_limit_bytes or 64 * GIB)
        for sc in scenarios
    ]


def scenarios_by_code(namespace: str = "sim") -> dict[DiagnosisCode, list[Scenario]]:
    """The library grouped by the diagnosis each scenario should produce."""
    grouped: dict[DiagnosisCode, list[Scenario]] = {}
    for scenario in scenario_library(namespace):
        grouped.setdefault(scenario.expected, []).append(scenario)
    return grouped


#: dcgm-exporter behind a ServiceMonitor without honorLabels, on an exporter built after d5e5f51.
EXPORTED = LabelStyle(exported_pod_labels=True, hostname_label="hostname")
#: Plain pod labels, lower-case `hostname` (dcgm-exporter main after d5e5f51).
LOWER_HOSTNAME = LabelStyle(hostname_label="hostname")
H100_PCIE = 63.0e9  # one direction, bytes/s (GPU_MODELS)


def _hard_training(name: str, shape: Shape, seed: int, why: str, **changes: object) -> Scenario:
    return Scenario(name, shape, seed=seed, why=why).with_(**changes)


def _hard_serving(name: str, shape: Shape, seed: int, why: str, **changes: object) -> Scenario:
    return _serving(name, shape, seed, why=why).with_(**changes)


def hard_scenario_library(namespace: str = "sim-hard") -> list[Scenario]:
    """Realistic, harder scenarios (≥ 3 per diagnosis code), each labelled by expert reading, with a `why`."""
    t, v = _hard_training, _hard_serving
    code = DiagnosisCode
    scenarios = [
        # --- IdleAllocation ------------------------------------------------------------------------
        t("h-idle-noisy-gaps", Shape.IDLE, 201, "busy ≈ 0.4 % with jitter and 20 % missed scrapes is still "
          "an idle allocation", noise_additive=0.01, gap_fraction=0.2, kind="Pod"),
        t("h-idle-gpu-util-only", Shape.IDLE, 202, "no profiling module: GPU_UTIL ≈ 0 % for the whole hour "
          "is enough to call it idle", dropped_metrics=PROFILING_FIELDS, label_style=EXPORTED),
        t("h-idle-near-floor", Shape.IDLE, 203, "busy ≈ 2 %, SM ≈ 1 %: a keep-alive poller runs kernels, "
          "so it is live work (never released); already on the smallest slice, nothing to shrink",
          level_overrides={"busy": 0.02, "sm": 0.01}, noise_amplitude=0.3,
          gpu_model=H100, mig_profile="1g.10gb", expected_code=code.HEALTHY),
        v("h-idle-shared-service", Shape.IDLE, 204, "two replicas time-sliced on one GPU that does nothing",
          replicas=2, pods_per_gpu=2, label_style=LOWER_HOSTNAME),
        # --- InputPipelineCPUBound -----------------------------------------------------------------
        t("h-loader-noisy-bursts", Shape.INPUT_CPU_BOUND, 211, "3 cores for a 12-core pipeline, CPU pegged "
          "and throttled; noise and bursts do not change that", cpu_limit=3.0, noise_amplitude=0.15,
          burst_probability=0.1, burst_scale=1.6),
        t("h-loader-no-sm", Shape.INPUT_CPU_BOUND, 212, "default counters CSV (no SM fields): busy sawtooth "
          "and a saturated 2-core limit still show the starved loader", cpu_limit=2.0,
          dropped_metrics=NO_SM_FIELDS),
        t("h-loader-gpu-util-only", Shape.INPUT_CPU_BOUND, 213, "GPU_UTIL only and 15 % missed scrapes: "
          "GPU ~30 % with CPU pegged at its 4-core limit", cpu_limit=4.0, dropped_metrics=PROFILING_FIELDS,
          gap_fraction=0.15, gpu_model=A100_80),
        t("h-loader-near-busy-ceiling", Shape.INPUT_CPU_BOUND, 214, "busy ≈ 0.70 (under 0.8) with the CPU "
          "limit saturated and 60 % of periods throttled: more CPU still buys speed", cpu_limit=9.5),
        t("h-loader-half-gaps", Shape.INPUT_CPU_BOUND, 215, "half the scrapes missing still leaves ~30 "
          "samples of an obviously starved GPU", cpu_limit=2.0, gap_fraction=0.5, label_style=EXPORTED),
        # --- InputPipelineIOBound ------------------------------------------------------------------
        t("h-fetch-noisy", Shape.INPUT_IO_BOUND, 221, "GPU ~28 % in a sawtooth, CPU idle, 750 MB/s of "
          "storage and network reads, under noise and read bursts", cpu_limit=16.0, noise_amplitude=0.2,
          burst_probability=0.15, burst_scale=1.5),
        t("h-fetch-exported-no-sm", Shape.INPUT_IO_BOUND, 222, "exported_* labels, no SM fields, gaps: "
          "the starved GPU and the busy storage are unchanged", cpu_limit=8.0, label_style=EXPORTED,
          dropped_metrics=NO_SM_FIELDS, gap_fraction=0.15),
        t("h-fetch-near-io-threshold", Shape.INPUT_IO_BOUND, 223, "reads ≈ 120 MB/s (just over 100 MiB/s) "
          "with CPU idle and the GPU starved: a fetch stall", cpu_limit=16.0,
          level_overrides={"fs_read": 9.0e7, "net_rx": 3.0e7}),
        t("h-fetch-latency-bound", Shape.INPUT_IO_BOUND, 224, "only ≈ 80 MB/s read, but CPU idle and the GPU "
          "starved in a sawtooth: latency-bound remote reads, still a fetch stall", cpu_limit=16.0,
          level_overrides={"fs_read": 6.0e7, "net_rx": 2.0e7}),
        # --- HostTransferBound ---------------------------------------------------------------------
        t("h-copies-noisy-gaps", Shape.HOST_TRANSFER_BOUND, 231, "PCIe RX ≈ 78 % of the link with SMs at "
          "30 %, under noise and missed scrapes", noise_amplitude=0.15, gap_fraction=0.2),
        t("h-copies-idle-looking", Shape.HOST_TRANSFER_BOUND, 232, "decoy: busy 3 %, but PCIe RX moves "
          "≈ 25 GB/s: the GPU waits on host copies, it is not idle",
          level_overrides={"busy": 0.03, "sm": 0.015, "tensor": 0.0, "fp32": 0.01, "dram": 0.04,
                           "pcie_rx": 0.4 * H100_PCIE}),
        t("h-copies-mig", Shape.HOST_TRANSFER_BOUND, 233, "a copy-heavy job on a MIG slice: dcgm-exporter "
          "reports PCIe per board (every instance carries the board's sum), so the slice's own copies are "
          "not measurable and the sources keep them off it; from the slice's fields (SM p95 31 %, memory "
          "half the slice) it is OversizedGPU with advice only, since no smaller slice holds its memory",
          mig_profile="3g.40gb", expected_code=code.OVERSIZED_GPU),
        t("h-copies-near-link-share", Shape.HOST_TRANSFER_BOUND, 234, "PCIe RX ≈ 62 % of the link (just "
          "over 0.6) with SMs at 45 %: transfer-bound",
          level_overrides={"pcie_rx": 0.62 * H100_PCIE, "sm": 0.45, "busy": 0.6}, noise_amplitude=0.05),
        # --- CommunicationBound --------------------------------------------------------------------
        t("h-allreduce-noisy", Shape.COMMUNICATION_BOUND, 241, "4 GPUs, NVLink ≈ 76 % of nominal while SMs "
          "idle, under noise", gpu_count=4, cpu_limit=32.0, noise_amplitude=0.15),
        t("h-allreduce-no-sm", Shape.COMMUNICATION_BOUND, 242, "8×A100 without SM fields: NVLink saturated "
          "and tensor pipes mostly idle", gpu_count=8, cpu_limit=64.0, gpu_model=A100_80,
          dropped_metrics=NO_SM_FIELDS, kind="Job"),
        t("h-allreduce-exported-gaps", Shape.COMMUNICATION_BOUND, 243, "exported_* labels and missed "
          "scrapes on a 2×H200 job", gpu_count=2, gpu_model=H200, cpu_limit=16.0, label_style=EXPORTED,
          gap_fraction=0.2),
        t("h-allreduce-near", Shape.COMMUNICATION_BOUND, 244, "NVLink ≈ 56 % of nominal (just over 0.5) "
          "while SMs sit at 15–40 %", gpu_count=4, cpu_limit=32.0, level_scales={"nvlink_each_way": 0.74}),
        # --- LowOccupancy --------------------------------------------------------------------------
        t("h-tiny-batch-noisy", Shape.LOW_OCCUPANCY, 251, "busy 92 % but SMs 30 % and occupancy 8 %, "
          "with multiplicative and additive noise", noise_amplitude=0.1, noise_additive=0.02),
        t("h-tiny-batch-near", Shape.LOW_OCCUPANCY, 252, "busy 85 %, SMs 45 % (just under half), occupancy "
          "18 %: most SMs idle while the GPU looks busy",
          level_overrides={"busy": 0.85, "sm": 0.45, "occupancy": 0.18}),
        t("h-tiny-batch-shared", Shape.LOW_OCCUPANCY, 253, "two time-sliced pods on a GPU whose SMs are 30 % "
          "active at 92 % busy", replicas=2, pods_per_gpu=2, label_style=EXPORTED),
        t("h-tiny-batch-no-occupancy", Shape.LOW_OCCUPANCY, 254, "SM_ACTIVE 30 % at busy 92 % is enough "
          "even without SM_OCCUPANCY", dropped_metrics=frozenset({mn.DCGM_SM_OCCUPANCY}), gpu_model=A100_40),
        # --- MemoryBandwidthBound ------------------------------------------------------------------
        t("h-decode-noisy-dips", Shape.MEMORY_BANDWIDTH_BOUND, 261, "DRAM 72 % with tensor 8 %, noise and "
          "occasional dips", noise_amplitude=0.1, burst_probability=0.1, burst_scale=0.6),
        t("h-decode-near", Shape.MEMORY_BANDWIDTH_BOUND, 262, "DRAM ≈ 63 % (just over 0.6) with tensor 12 %",
          level_overrides={"dram": 0.63, "tensor": 0.12}),
        t("h-decode-mig", Shape.MEMORY_BANDWIDTH_BOUND, 263, "a 3g.40gb slice at 72 % DRAM activity: "
          "bandwidth-bound, and a smaller slice would only have less bandwidth", mig_profile="3g.40gb"),
        t("h-decode-gaps-hostname", Shape.MEMORY_BANDWIDTH_BOUND, 264, "lower-case hostname and 25 % "
          "missed scrapes", label_style=LOWER_HOSTNAME, gap_fraction=0.25, gpu_model=H200),
        # --- NoTensorCores -------------------------------------------------------------------------
        t("h-fp32-noisy", Shape.NO_TENSOR_CORES, 271, "FP32 pipe 60 %, tensor 1 %, under noise",
          noise_amplitude=0.15),
        t("h-fp32-near", Shape.NO_TENSOR_CORES, 272, "tensor 4 % (under 5 %) and FP32 32 % (over 30 %) with "
          "SMs 80 % active", level_overrides={"tensor": 0.04, "fp32": 0.32}),
        t("h-fp32-no-sm", Shape.NO_TENSOR_CORES, 273, "no SM fields, but the pipe fields show FP32 60 % "
          "and tensor 1 % at busy 95 %", dropped_metrics=NO_SM_FIELDS, gpu_model=A100_80),
        t("h-fp32-exported-gaps", Shape.NO_TENSOR_CORES, 274, "exported_* labels and missed scrapes",
          label_style=EXPORTED, gap_fraction=0.2, gpu_model=L4),
        # --- OversizedGPU --------------------------------------------------------------------------
        v("h-small-model-noisy", Shape.OVERSIZED, 281, "3 req/s on a whole H100, 10 % memory, with noise "
          "and request bursts", traffic_qps=3.0, memory_share=0.1, noise_amplitude=0.2,
          burst_probability=0.1, burst_scale=2.5),
        v("h-small-model-gpu-util-only", Shape.OVERSIZED, 282, "GPU_UTIL ≈ 14 % and 12 % memory: a small "
          "model on a whole GPU, even without profiling fields", traffic_qps=3.0, memory_share=0.12,
          dropped_metrics=PROFILING_FIELDS, gpu_model=A100_80),
        v("h-small-model-near-memory", Shape.OVERSIZED, 283, "memory 40 % (× 1.2 = 48 % < half) and busy "
          "≈ 12 %: fits a half-GPU slice", traffic_qps=2.5, memory_share=0.4),
        v("h-small-model-exported", Shape.OVERSIZED, 284, "exported_* labels, gaps", traffic_qps=2.0,
          memory_share=0.15, gpu_model=H200, label_style=EXPORTED, gap_fraction=0.15),
        # --- MemoryCapacityBound -------------------------------------------------------------------
        t("h-oom-noisy", Shape.MEMORY_CAPACITY_BOUND, 291, "memory 97.5 % with OOM restarts, under noise",
          noise_amplitude=0.1),
        t("h-oom-exported-gaps", Shape.MEMORY_CAPACITY_BOUND, 292, "exported_* labels and missed scrapes",
          label_style=EXPORTED, gap_fraction=0.2, gpu_model=A100_40, kind="Job"),
        t("h-oom-near", Shape.MEMORY_CAPACITY_BOUND, 293, "memory 95.5 % (just over 95 %) and restarts "
          "every 30 min", memory_share=0.955, level_overrides={"memory_share": 0.955}),
        # --- UnderReplicated -----------------------------------------------------------------------
        v("h-busy-service-noisy", Shape.UNDER_REPLICATED, 301, "2 replicas for 60 req/s (capacity 40): "
          "queue all hour, under noise", traffic_qps=60.0, replicas=2, memory_share=0.6, noise_amplitude=0.1),
        v("h-busy-service-peak", Shape.UNDER_REPLICATED, 302, "load 0.77–1.43 of capacity over an hourly "
          "cycle: queue ~70 % of the window at saturation", traffic_qps=44.0, replicas=2, memory_share=0.6,
          traffic_amplitude=0.3, traffic_period_seconds=3600.0),
        v("h-busy-service-gpu-util-only", Shape.UNDER_REPLICATED, 303, "GPU_UTIL pegged and a sustained "
          "queue, no profiling fields", traffic_qps=35.0, replicas=1, dropped_metrics=PROFILING_FIELDS,
          gpu_model=A100_80),
        v("h-busy-service-mig", Shape.UNDER_REPLICATED, 304, "3 replicas on 3g.40gb slices with a queue all "
          "hour", traffic_qps=90.0, replicas=3, mig_profile="3g.40gb", memory_share=0.6),
        # --- OverReplicated ------------------------------------------------------------------------
        v("h-quiet-service-noisy", Shape.OVER_REPLICATED, 311, "4 replicas at ~10 % busy, no queue, with "
          "noise and request bursts", traffic_qps=8.0, replicas=4, memory_share=0.6, noise_amplitude=0.2,
          burst_probability=0.1, burst_scale=2.0),
        v("h-quiet-service-near", Shape.OVER_REPLICATED, 312, "4 replicas at busy p95 ≈ 18 % (under 20 %), "
          "no queue: one or two would do", traffic_qps=14.0, replicas=4, memory_share=0.6),
        v("h-quiet-service-exported", Shape.OVER_REPLICATED, 313, "6 replicas, exported_* labels, gaps",
          traffic_qps=10.0, replicas=6, memory_share=0.55, label_style=EXPORTED, gap_fraction=0.15),
        # --- Throttled -----------------------------------------------------------------------------
        t("h-hot-node-noisy", Shape.THROTTLED, 321, "thermal clock events 60 % of the time, clocks at 55 %, "
          "under noise", noise_amplitude=0.15),
        t("h-hot-node-no-sm", Shape.THROTTLED, 322, "no SM fields and exported_* labels; the clock events "
          "and clocks still show thermal throttling", dropped_metrics=NO_SM_FIELDS, label_style=EXPORTED),
        t("h-hot-node-mig", Shape.THROTTLED, 323, "a MIG slice on a thermally throttled board",
          mig_profile="3g.40gb", gpu_model=A100_80),
        t("h-slowdown-all-window", Shape.HEALTHY, 324, "HW slowdown set in every sample and clocks at 85 % "
          "of the rated max: throttled all hour (no unthrottled peak to compare with)",
          level_overrides={"clock_events": float(mn.CLOCK_EVENT_HW_SLOWDOWN), "sm_clock_share": 0.85},
          expected_code=code.THROTTLED),
        # --- HardwareFault -------------------------------------------------------------------------
        t("h-xid79-noisy", Shape.XID_FAULT, 331, "Xid 79 (fallen off the bus) after 20 min, under noise "
          "and bursts", xid=79, noise_amplitude=0.15, burst_probability=0.1),
        t("h-xid48-exported-gaps", Shape.XID_FAULT, 332, "Xid 48 (DBE) with exported_* labels and gaps",
          xid=48, label_style=EXPORTED, gap_fraction=0.2, gpu_model=A100_80, kind="Job"),
        t("h-xid94-mig", Shape.XID_FAULT, 333, "Xid 94 (contained ECC) on a MIG slice", xid=94,
          mig_profile="3g.40gb", gpu_model=H100),
        # --- Healthy (decoys) ----------------------------------------------------------------------
        t("h-bursty-trainer", Shape.HEALTHY, 341, "decoy: busy 93 % with short dips for evaluation and "
          "checkpoints (15 % of minutes at a third) is a healthy trainer", cpu_limit=16.0,
          burst_probability=0.15, burst_scale=0.35, noise_amplitude=0.1),
        v("h-diurnal-service", Shape.HEALTHY, 342, "decoy: a service sized for its peak (load 0.22–0.88, "
          "no queue): quiet troughs are not over-replication", traffic_qps=22.0, replicas=2,
          memory_share=0.6, traffic_amplitude=0.6, traffic_period_seconds=3600.0),
        t("h-cpu-heavy-not-starved", Shape.HEALTHY, 343, "decoy: CPU at its 6-core limit and 35 % throttled, "
          "but the GPU is 93 % busy: the GPU is not starved", cpu_limit=6.0,
          level_overrides={"cpu_cores": 6.0, "throttled_ratio": 0.35}),
        t("h-big-model-full-memory", Shape.HEALTHY, 344, "decoy: 97 % memory with no OOM restarts and "
          "SMs 85 % active: a big model that computes well", level_overrides={"memory_share": 0.97}),
        t("h-power-capped", Shape.HEALTHY, 345, "decoy: SW power cap at full load with clocks at 88 % is "
          "normal (rule H2), not throttling",
          level_overrides={"clock_events": float(mn.CLOCK_EVENT_SW_POWER_CAP), "sm_clock_share": 0.88}),
        t("h-healthy-no-sm", Shape.HEALTHY, 346, "the default counters CSV (no SM fields) on a busy trainer",
          dropped_metrics=NO_SM_FIELDS, cpu_limit=16.0, label_style=LOWER_HOSTNAME),
        t("h-healthy-shared", Shape.HEALTHY, 347, "two time-sliced pods on a GPU that is 93 % busy with SMs "
          "85 % active", replicas=2, pods_per_gpu=2, cpu_limit=16.0),
        # --- InsufficientData ----------------------------------------------------------------------
        t("h-mostly-gaps", Shape.HEALTHY, 351, "85 % of the scrapes missing: too few samples to say anything",
          gap_fraction=0.85, expected_code=code.INSUFFICIENT_DATA),
        t("h-new-pod-exported", Shape.INSUFFICIENT_DATA, 352, "5 minutes of history, exported_* labels",
          defect=DataDefect.SHORT, label_style=EXPORTED),
        t("h-mig-no-profiling", Shape.LOW_OCCUPANCY, 353, "a MIG slice without profiling fields has no busy "
          "signal at all (GPU_UTIL is not reported under MIG)", mig_profile="3g.40gb",
          dropped_metrics=PROFILING_FIELDS, expected_code=code.INSUFFICIENT_DATA),
        t("h-nan-gaps", Shape.INSUFFICIENT_DATA, 354, "NaN in every GPU field plus missed scrapes",
          defect=DataDefect.NAN, gap_fraction=0.2, gpu_model=H200),
        # --- the other side of the thresholds: just short of a rule, labelled by what the numbers say --
        t("h-dram-just-under", Shape.MEMORY_BANDWIDTH_BOUND, 361, "DRAM 57 % (under 0.6), SMs 70 %, busy "
          "95 %: a well-used GPU, no bandwidth wall", level_overrides={"dram": 0.57},
          expected_code=code.HEALTHY),
        t("h-tensor-just-over", Shape.NO_TENSOR_CORES, 362, "tensor 7 % (over 5 %) with FP32 50 %: mixed "
          "precision is on for the big GEMMs; SMs 80 % active", level_overrides={"tensor": 0.07, "fp32": 0.5},
          expected_code=code.HEALTHY),
        t("h-sm-just-over-half", Shape.LOW_OCCUPANCY, 363, "SMs 55 % (over half) and occupancy 25 % at busy "
          "92 %: kernels fill the GPU well enough", level_overrides={"sm": 0.55, "occupancy": 0.25,
                                                                    "tensor": 0.35}, expected_code=code.HEALTHY),
        t("h-cpu-just-enough", Shape.INPUT_CPU_BOUND, 364, "12.5 cores for a 12-core pipeline: GPU 92 % "
          "busy, CPU not throttled", cpu_limit=12.5, expected_code=code.HEALTHY),
        t("h-busy-just-over-idle", Shape.IDLE, 365, "busy 7 % (over the 5 % floor) with 3 % memory, but SM/GR "
          "0.71: real work in wide phases at low duty with no named cause, so the GPU waits on the host; "
          "not idle, and no slice", level_overrides={"busy": 0.07, "sm": 0.05, "occupancy": 0.1},
          memory_share=0.1, expected_code=code.HOST_WAIT_BOUND),
        t("h-oom-at-93", Shape.MEMORY_CAPACITY_BOUND, 366, "memory p99 ≈ 93 % (under 95 %) but an OOM restart "
          "every 30 min: capacity-bound all the same", level_overrides={"memory_share": 0.93}),
        # --- CrashLooping, ServingHostBound, LaunchBound, HostWaitBound (engine v3) -----------------
        t("h-crash-loop-small-gpu", Shape.OVERSIZED, 371, "a restart every 20 min with 10 % of GPU memory: the "
          "container fails for its own reasons; a slice sized on a window of crashes would be a guess",
          level_overrides={"restarts_per_hour": 3.0}, expected_code=code.CRASH_LOOPING),
        t("h-crash-loop-busy", Shape.HEALTHY, 372, "a busy trainer that restarts every 30 min: the window mixes "
          "container lives, nothing is sized on it", level_overrides={"restarts_per_hour": 2.0}, expected_code=code.CRASH_LOOPING),
        v("h-crash-loop-service", Shape.OVERSIZED, 373, "a small service restarting twice an hour: a live "
          "crash loop, never scaled in or sliced", level_overrides={"restarts_per_hour": 2.0}, expected_code=code.CRASH_LOOPING),
        v("h-queue-cpu-bound-server", Shape.UNDER_REPLICATED, 374, "requests queue all the time while SM "
          "activity is 25 %: the tokenizer or the batch settings hold them, not the GPU",
          level_overrides={"busy": 0.35, "sm": 0.25, "queue": 8.0, "queue_ms": 480.0}, expected_code=code.SERVING_HOST_BOUND),
        v("h-queue-small-batches", Shape.UNDER_REPLICATED, 375, "a queue of ~5 with the GPU at 40 %: the "
          "server's max batch keeps the GPU underfed; more replicas would not help",
          level_overrides={"busy": 0.45, "sm": 0.3, "queue": 5.0, "queue_ms": 300.0}, expected_code=code.SERVING_HOST_BOUND),
        v("h-queue-no-saturation-h200", Shape.UNDER_REPLICATED, 376, "an H200 server queueing at 20 % SM "
          "activity: the wait is on the host side", gpu_model=H200,
          level_overrides={"busy": 0.3, "sm": 0.2, "queue": 12.0, "queue_ms": 700.0}, expected_code=code.SERVING_HOST_BOUND),
        t("h-launch-bound-loop", Shape.IDLE, 377, "busy 0.30 with SM 0.05 (SM/GR 0.17) and the container flat at "
          "one core: one thread launches tiny kernels; CUDA Graphs, not more workers", kind="Job",
          cpu_limit=4.0, cpu_request=4.0, noise_amplitude=0.02,
          level_overrides={"busy": 0.3, "sm": 0.05, "cpu_cores": 1.05, "throttled_ratio": 0.0,
                           "memory_share": 0.1, "fs_read": 0.0, "net_rx": 0.0}, expected_code=code.LAUNCH_BOUND),
        t("h-launch-bound-h200", Shape.IDLE, 378, "an H200 loop of small kernels: busy 0.4, SM 0.06, one core "
          "busy: launch overhead, not data", kind="Job", gpu_model=H200, cpu_limit=8.0, cpu_request=8.0,
          noise_amplitude=0.02, level_overrides={"busy": 0.4, "sm": 0.06, "cpu_cores": 1.1,
                                                 "throttled_ratio": 0.0, "memory_share": 0.05,
                                                 "fs_read": 0.0, "net_rx": 0.0}, expected_code=code.LAUNCH_BOUND),
        t("h-launch-bound-small-batch", Shape.IDLE, 379, "batch-1 inference loop in a Job: busy 0.25, SM 0.04, "
          "one thread at a core", kind="Job", cpu_limit=2.0, cpu_request=2.0, noise_amplitude=0.02,
          level_overrides={"busy": 0.25, "sm": 0.04, "cpu_cores": 1.0, "throttled_ratio": 0.0,
                           "memory_share": 0.1, "fs_read": 0.0, "net_rx": 0.0}, expected_code=code.LAUNCH_BOUND),
        t("h-host-wait-wide-phases", Shape.IDLE, 380, "a training Job busy 10 % in phases 80 % of the SMs wide, "
          "with idle CPU and no reads: the GPU waits on the host for an unnamed reason", kind="Job",
          level_overrides={"busy": 0.1, "sm": 0.08, "cpu_cores": 0.05, "memory_share": 0.1,
                           "fs_read": 0.0, "net_rx": 0.0}, expected_code=code.HOST_WAIT_BOUND),
        t("h-host-wait-h200", Shape.IDLE, 381, "an H200 Job busy 5 % with SM/GR 0.9: wide, rare GPU phases; a "
          "slice would stretch each one", kind="Job", gpu_model=H200,
          level_overrides={"busy": 0.05, "sm": 0.045, "cpu_cores": 0.04, "memory_share": 0.05,
                           "fs_read": 0.0, "net_rx": 0.0}, expected_code=code.HOST_WAIT_BOUND),
        v("h-queue-at-peaks", Shape.UNDER_REPLICATED, 367, "queue only at each peak (~⅓ of the hour) with the "
          "GPU saturated then: latency spikes at peak = too few replicas (SPEC §1)", traffic_qps=31.0,
          replicas=2, memory_share=0.6, traffic_amplitude=0.3, traffic_period_seconds=3600.0),
    ]  # fmt: skip
    # Every workload on nodes of its own: two workloads never share a GPU unless a scenario says so.
    return [
        sc.with_(
            namespace=namespace,
            memory_limit_bytes=sc.memory_limit_bytes or 64 * GIB,
            node_prefix=f"gpu-node-h{index:02d}",
        )
        for index, sc in enumerate(scenarios)
    ]


def review_scenario_library(namespace: str = "sim-review") -> list[Scenario]:
    """The engine review's harmful cases (docs/reviews engine-2026-12, measured H200 figures) as scenarios.

    Each is a case on which an earlier engine gave advice that would cause an outage under `Apply`;
    the bench counts accuracy and harm on them.
    """
    t, v = _hard_training, _hard_serving
    code = DiagnosisCode
    scenarios = [
        t("r-live-server-no-metric", Shape.IDLE, 401, "a live Deployment at 5 req/s with no request metric: "
          "SM 0.00018 means kernels run; a slice fits, a release is an outage", kind="Deployment",
          gpu_model=H200, level_overrides={"busy": 0.0004, "sm": 0.00018, "cpu_cores": 0.005,
                                           "memory_share": 0.1},
          expected_code=code.OVERSIZED_GPU),
        t("r-host-wait-loop", Shape.IDLE, 402, "a loop that waits 50 ms on the host per step: busy 2 %, "
          "kernels in every sample, phases 82 % of the SMs wide: live work that waits on the host, never "
          "idle and never a slice", kind="Job", gpu_model=H200,
          level_overrides={"busy": 0.022, "sm": 0.018, "cpu_cores": 0.03, "pcie_rx": 2e6,
                           "memory_share": 0.02}, expected_code=code.HOST_WAIT_BOUND),
        t("r-one-worker-loader", Shape.IDLE, 403, "one loader process pinned at a core under a 2-core "
          "limit: CPU flat at 1.1, never throttled, busy 0.16: starved, a slice would starve it for good",
          kind="Job", gpu_model=H200, cpu_limit=2.0, cpu_request=2.0,
          level_overrides={"busy": 0.16, "sm": 0.14, "tensor": 0.015, "cpu_cores": 1.1, "pcie_rx": 1e8,
                           "memory_share": 0.09, "throttled_ratio": 0.0},
          expected_code=code.INPUT_PIPELINE_CPU_BOUND),
        t("r-starved-at-limit-idle-gpu", Shape.IDLE, 404, "CPU pinned at its 2-core limit, throttled 70 %, "
          "GPU nearly idle: the CPU starves it; a release would end a live job", kind="Deployment",
          cpu_limit=2.0, cpu_request=2.0,
          level_overrides={"busy": 0.003, "sm": 0.002, "cpu_cores": 2.0, "throttled_ratio": 0.7},
          expected_code=code.INPUT_PIPELINE_CPU_BOUND),
        t("r-fp32-gemm", Shape.NO_TENSOR_CORES, 405, "FP32 GEMMs, TF32 off: occupancy 0.13 is the GEMM tile "
          "by design; the tensor cores sit unused", gpu_model=H200,
          level_overrides={"busy": 0.99, "sm": 0.97, "occupancy": 0.13, "tensor": 0.0001, "fp32": 0.75}),
        t("r-bf16-ddp", Shape.HEALTHY, 406, "healthy BF16 DDP: SM 0.9, occupancy 0.19, tensor 0.75",
          gpu_model=H200, gpu_count=2, cpu_limit=16.0,
          level_overrides={"sm": 0.9, "occupancy": 0.19, "tensor": 0.75}),
        t("r-allreduce-nvlink", Shape.COMMUNICATION_BOUND, 407, "DDP all-reduce over NVLink 4: 171 GB/s each "
          "way, tensor 1 %, SM 0.51 (NCCL kernels count as SM-active)", gpu_model=H200, gpu_count=2,
          cpu_limit=16.0, level_overrides={"nvlink_each_way": 1.71e11, "sm": 0.51, "busy": 0.6,
                                           "tensor": 0.01, "fp16": 0.0, "fp32": 0.02}),
        t("r-image-training-reads", Shape.HEALTHY, 408, "busy 0.75, tensor 0.5 while reading ≈ 300 MB/s: "
          "normal image-training input, nothing waits", gpu_model=H200,
          level_overrides={"busy": 0.75, "sm": 0.7, "tensor": 0.5, "fs_read": 3.1e8}),
        v("r-four-small-replicas", Shape.OVER_REPLICATED, 409, "4 replicas each using 10 % of an H200: a "
          "scale-in and a slice together would leave 52 SMs for 53 SM-equivalents of demand; one change "
          "at a time, the slice first", gpu_model=H200, replicas=4, memory_share=0.085,
          level_overrides={"busy": 0.1, "sm": 0.1}, expected_code=code.OVERSIZED_GPU),
    ]  # fmt: skip
    return [
        sc.with_(namespace=namespace, memory_limit_bytes=sc.memory_limit_bytes or 64 * GIB,
                 node_prefix=f"gpu-node-r{index:02d}")
        for index, sc in enumerate(scenarios)
    ]  # fmt: skip


#: Real-GPU recordings (tests/fixtures/<gpu>/<name>.om.gz, 1 s samples): the diagnosis each deserves,
#: by expert reading of the workload that was run, and why. Used at 1 s and at dcgm-exporter's default
#: resolution (sim/resolution.py).
RECORDING_LABELS: dict[str, tuple[DiagnosisCode, str]] = {
    "starved-loader": (
        DiagnosisCode.INPUT_PIPELINE_CPU_BOUND,
        "2 loader workers pinned at a 2-core limit while the GPU waits; 8 cores ran 4× faster",
    ),
    "fed-loader": (DiagnosisCode.HEALTHY, "the same loader with 14 cores keeps the GPU busy"),
    "tiny-inference": (
        DiagnosisCode.OVERSIZED_GPU,
        "a small model served at 200 req/s uses a sliver of an H200: a slice fits, never a release",
    ),
    "idle-holder": (DiagnosisCode.IDLE_ALLOCATION, "holds GPU memory and runs no kernel at all"),
    "membw": (DiagnosisCode.MEMORY_BANDWIDTH_BOUND, "a streaming copy kernel at the DRAM ceiling"),
    "bf16-train": (DiagnosisCode.HEALTHY, "BF16 GEMM training on tensor cores"),
    "pageable-h2d": (
        DiagnosisCode.HOST_TRANSFER_BOUND,
        "pageable host-to-device copies at ≈ 9 GB/s with SMs idle: the GPU waits on copies",
    ),
    "loader-one-worker": (
        DiagnosisCode.INPUT_PIPELINE_CPU_BOUND,
        "ResNet-50 fed by one loader worker under a 2-core limit: CPU flat at 1.1 cores, never "
        "throttled, busy 0.16; 4 workers ran 3.6× faster, so shrinking the GPU would starve it for good",
    ),
    "fp32-gemm": (
        DiagnosisCode.NO_TENSOR_CORES,
        "FP32 GEMMs with TF32 off: SM 0.97, FP32 pipe 0.75, tensor 0; occupancy 0.13 is the large "
        "GEMM tile by design, not a problem",
    ),
    "tiny-server": (
        DiagnosisCode.OVERSIZED_GPU,
        "a live Deployment serving 5 req/s with no request metric: SM 0.00018 (kernels run), 4 GiB "
        "resident; a slice fits, a release would cause an outage",
    ),
    "host-wait": (
        DiagnosisCode.HOST_WAIT_BOUND,
        "a loop that waits 50 ms on the host each step: busy 0.02 with kernels in every sample and "
        "phases 82 % of the SMs wide (SM/GR 0.825): live work that waits on the host, never idle; a "
        "16-SM slice would stretch each phase 6.8×",
    ),
    "bf16-trainer": (DiagnosisCode.HEALTHY, "BF16 training at 61.5 steps/s, SM 0.95, tensor 0.67"),
}
