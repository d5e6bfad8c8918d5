"""Engine speed: build 10,000 varied workload windows, analyse them on one core, print windows/s.

Run: `python bench/engine_speed.py [--windows N] [--seed S]`. Building the windows is not timed;
only `analyze_window` is. The target is 10,000 windows in under 10 s on one core.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))

from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import SharingStrategy
from gpu_rightsizer.model.observation import (
    Allocation,
    GPUObservation,
    PodObservation,
    Signal,
    SignalStats,
    WorkloadRef,
    WorkloadWindow,
)

START = datetime(2026, 1, 1, tzinfo=UTC)
MODELS = [("NVIDIA H100 80GB HBM3", 81559.0), ("NVIDIA H200", 143771.0), ("NVIDIA A100-SXM4-80GB", 81920.0)]


def _stats(
    rng: random.Random, centre: float, spread: float, samples: int, ceiling: float | None = 1.0
) -> SignalStats:
    low = max(0.0, centre - spread * rng.random())
    high = centre + spread * rng.random()
    if ceiling is not None:
        high = min(ceiling, high)
        centre = min(centre, high)
    return SignalStats(
        samples=samples,
        mean=centre,
        p50=centre,
        p95=high,
        p99=high,
        max=high,
        min=min(low, centre),
        active_fraction=rng.random(),
        sawtooth=rng.random() * 0.5,
    )


def build_window(rng: random.Random, index: int) -> WorkloadWindow:
    """One window with a random shape: busy level, SM share, memory, CPU, serving signals, GPU count."""
    model, capacity = rng.choice(MODELS)
    gpu_count = rng.choice([1, 1, 1, 2, 8])
    replicas = rng.choice([1, 1, 2, 4])
    samples = rng.choice([10, 60, 720])
    busy = rng.choice([0.0, 0.1, 0.3, 0.6, 0.93])
    pods = []
    for p in range(replicas):
        gpus = []
        for g in range(gpu_count):
            stats = {
                Signal.GR_ENGINE_ACTIVE: _stats(rng, busy, 0.1, samples),
                Signal.SM_ACTIVE: _stats(rng, busy * rng.uniform(0.2, 0.9), 0.05, samples),
                Signal.TENSOR_ACTIVE: _stats(rng, rng.random() * 0.5, 0.05, samples),
                Signal.FP32_ACTIVE: _stats(rng, rng.random() * 0.5, 0.05, samples),
                Signal.DRAM_ACTIVE: _stats(rng, rng.random() * 0.7, 0.05, samples),
                Signal.FB_USED_MIB: _stats(rng, capacity * rng.random() * 0.9, 500.0, samples, capacity),
                Signal.PCIE_RX_BYTES_PER_S: _stats(rng, rng.random() * 4e10, 1e9, samples, None),
                Signal.NVLINK_TX_BYTES_PER_S: _stats(rng, rng.random() * 3e11, 1e10, samples, None),
            }
            gpus.append(
                GPUObservation(
                    uuid=f"GPU-{index}-{p}-{g}",
                    model_name=model,
                    memory_total_mib=capacity,
                    stats=stats,
                    xid_codes=[79] if rng.random() < 0.01 else [],
                )
            )
        pods.append(
            PodObservation(
                name=f"w{index}-pod-{p}",
                gpus=gpus,
                stats={
                    Signal.CPU_USAGE_CORES: _stats(rng, rng.uniform(0.5, 8.0), 0.5, samples, 8.0),
                    Signal.CPU_THROTTLED_RATIO: _stats(rng, rng.random() * 0.5, 0.1, samples),
                    Signal.FS_READ_BYTES_PER_S: _stats(rng, rng.random() * 3e8, 1e7, samples, None),
                },
            )
        )
    workload_type = rng.choice(["training", "inference"])
    serving = (
        {
            Signal.QUEUE_LENGTH: _stats(rng, rng.choice([0.0, 5.0]), 2.0, samples, None),
            Signal.REQUESTS_PER_S: _stats(rng, rng.uniform(0, 50), 5.0, samples, None),
        }
        if workload_type == "inference"
        else {}
    )
    return WorkloadWindow(
        workload=WorkloadRef(namespace="bench", kind="Deployment", name=f"w{index}"),
        start=START,
        end=START + timedelta(hours=rng.choice([1.0, 2.0, 24.0])),
        step_seconds=rng.choice([60.0, 120.0]),
        allocation=Allocation(
            gpu_count=gpu_count,
            gpu_model=model.replace(" ", "-"),
            cpu_request_cores=4.0,
            cpu_limit_cores=8.0,
            replicas=replicas,
            workload_type=workload_type,
        ),
        pods=pods,
        stats=serving,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    build_start = time.perf_counter()
    windows = [build_window(rng, i) for i in range(args.windows)]
    build_seconds = time.perf_counter() - build_start
    settings = EngineSettings()
    start = time.perf_counter()
    results = [analyze_window(w, settings, sharing=SharingStrategy.MIG_MIXED) for w in windows]
    seconds = time.perf_counter() - start
    primaries = Counter(r.primary.value for r in results)
    print(f"built {len(windows)} windows in {build_seconds:.2f} s (not timed)")
    print(
        f"analysed {len(results)} windows in {seconds:.2f} s on one core: {len(results) / seconds:,.0f} windows/s"
    )
    print("primary diagnoses:", ", ".join(f"{code} {count}" for code, count in primaries.most_common()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
