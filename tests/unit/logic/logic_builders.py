"""Builders for WorkloadWindow objects used by the engine's unit tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpu_rightsizer.logic.thresholds import EngineSettings
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

START = datetime(2026, 1, 1, tzinfo=UTC)
H100 = "NVIDIA H100 80GB HBM3"
H100_PRODUCT = "NVIDIA-H100-80GB-HBM3"
H100_MIB = 81559.0
MIB_PER_GIB = 1024.0


#: The shrink gate's minimum windows and memory look-back lowered, as a policy may: the builders' windows
#: last hours, not the day a Deployment needs (tests/unit/logic/test_shrink_gate.py proves the defaults
#: block). Everything else about the gate (vetoes, width, confidence) stays as shipped.
PROVEN = EngineSettings(
    shrink_min_window_service_seconds=0.0,
    shrink_min_window_job_seconds=0.0,
    memory_lookback_min_seconds=0.0,
)


def stat(
    value: float,
    spread: float = 0.0,
    *,
    samples: int = 60,
    active_fraction: float | None = None,
    sawtooth: float | None = None,
    peak: float | None = None,
) -> SignalStats:
    """A distribution centred on `value`, p95/p99 at value + spread, max at `peak` (default value + "
    "spread)."""
    top = value + spread
    return SignalStats(
        samples=samples,
        mean=value,
        p50=value,
        p95=top,
        p99=top,
        max=peak if peak is not None else top,
        min=max(0.0, value - spread),
        active_fraction=active_fraction,
        sawtooth=sawtooth,
    )


def gpu(
    uuid: str = "GPU-0",
    *,
    model: str | None = H100,
    memory_mib: float | None = H100_MIB,
    mig_profile: str | None = None,
    shared_by: int = 1,
    xids: list[int] | None = None,
    **signals: SignalStats,
) -> GPUObservation:
    """One GPU with signals given by Signal value name, e.g. gr_engine_active=stat(0.5)."""
    return GPUObservation(
        uuid=uuid,
        model_name=model,
        mig_profile=mig_profile,
        shared_by_pods=shared_by,
        memory_total_mib=memory_mib,
        xid_codes=xids or [],
        stats={Signal(name): value for name, value in signals.items()},
    )


def pod(
    name: str = "pod-0",
    gpus: list[GPUObservation] | None = None,
    *,
    restarts: int = 0,
    oom_killed: bool = False,
    correlation: float | None = None,
    **signals: SignalStats,
) -> PodObservation:
    """One pod with its GPUs and pod-level signals."""
    return PodObservation(
        name=name,
        gpus=gpus if gpus is not None else [gpu()],
        restarts=restarts,
        oom_killed=oom_killed,
        gpu_cpu_correlation=correlation,
        stats={Signal(key): value for key, value in signals.items()},
    )


def allocation(**changes: object) -> Allocation:
    """A whole-H100 allocation with 8 CPU cores (limit) and 64 GiB memory, overridable."""
    base: dict[str, object] = {
        "gpu_model": H100_PRODUCT,
        "gpu_count": 1,
        "gpu_memory_mib": None,
        "cpu_request_cores": 4.0,
        "cpu_limit_cores": 8.0,
        "memory_request_bytes": 32 * 2**30,
        "memory_limit_bytes": 64 * 2**30,
        "replicas": 1,
    }
    base.update(changes)
    return Allocation.model_validate(base)


def window(
    pods: list[PodObservation] | None = None,
    *,
    alloc: Allocation | None = None,
    hours: float = 2.0,
    step: float = 120.0,
    stats: dict[Signal, SignalStats] | None = None,
    kind: str = "Deployment",
) -> WorkloadWindow:
    """A window over `hours` with the given pods (default one healthy-looking pod)."""
    return WorkloadWindow(
        workload=WorkloadRef(namespace="team-a", kind=kind, name="app"),
        start=START,
        end=START + timedelta(hours=hours),
        step_seconds=step,
        allocation=alloc or allocation(replicas=len(pods) if pods else 1),
        pods=pods if pods is not None else [pod()],
        stats=stats or {},
        source="test",
    )


def busy_gpu(uuid: str = "GPU-0", **extra: SignalStats) -> GPUObservation:
    """A well-used GPU: busy 0.93, SM 0.85, tensor 0.5, DRAM 0.45, 50 GB used."""
    signals: dict[str, SignalStats] = {
        "gr_engine_active": stat(0.93, 0.03),
        "sm_active": stat(0.85, 0.03),
        "sm_occupancy": stat(0.45),
        "tensor_active": stat(0.5, 0.05),
        "fp32_active": stat(0.1),
        "dram_active": stat(0.45, 0.05),
        "fb_used_mib": stat(50000, 500),
    }
    signals.update(extra)
    return GPUObservation(
        uuid=uuid,
        model_name=H100,
        memory_total_mib=H100_MIB,
        stats={Signal(name): value for name, value in signals.items()},
    )


def hpa(min_replicas: int, max_replicas: int) -> HPAInfo:
    """An HPA owning the replica count."""
    return HPAInfo(name="app", min_replicas=min_replicas, max_replicas=max_replicas)
