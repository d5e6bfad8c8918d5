"""The labelled scenario library: several variants of every diagnosis code.

Variants differ in seed, GPU model, GPU count, CPU limit, replicas, MIG slice, sharing and workload
kind, so a rule that only works for one allocation shows up as a miss in `bench/diagnosis_accuracy.py`.
"""

from __future__ import annotations

from gpu_rightsizer.model.codes import DiagnosisCode
from gpu_rightsizer.sim.scenarios import GIB, DataDefect, Scenario, Shape

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
