"""Replay the Alibaba GenTD26 serving trace through the engine.

Per container (each a single-replica workload over the whole trace) and for the fleet as one
Deployment over hourly windows: how many come out idle, oversized, over- or under-replicated, and
why; then a sanity check of those diagnoses against the trace's own QPS and queue data.

    .venv/bin/python bench/gentd26_replay.py [--data ../shared/data/alibaba-gentd26] [--window 1h]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from gpu_rightsizer.adapters.gentd26 import (
    TraceError,
    container_windows,
    default_location,
    fleet_window,
    load_trace,
)
from gpu_rightsizer.commands.analyze import parse_duration
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.model.codes import ActionType, DiagnosisCode
from gpu_rightsizer.model.observation import Signal

REPO_ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=default_location(REPO_ROOT))
    parser.add_argument("--window", type=parse_duration, default=3600.0, help="fleet window length")
    parser.add_argument("--gpu-model", default="NVIDIA-H100-80GB-HBM3")
    args = parser.parse_args()
    started = time.perf_counter()
    try:
        trace = load_trace(args.data)
    except TraceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    load_s = time.perf_counter() - started
    first, last = trace.span
    print(
        f"GenTD26: {len(trace.containers)} containers, {(last - first) / 3600:.1f} h, loaded in {load_s:.1f}s"
    )

    # --- per container -----------------------------------------------------------------------------
    started = time.perf_counter()
    per_container = [(w, analyze_window(w)) for w in container_windows(trace, gpu_model=args.gpu_model)]
    engine_s = time.perf_counter() - started
    counts = Counter(a.primary for _, a in per_container)
    print(f"\nper container (whole trace, engine {engine_s * 1000:.0f} ms):")
    for code, n in counts.most_common():
        print(f"  {code.value:<24} {n:4d}")
    by_code: dict[DiagnosisCode, list[tuple[float, float, float]]] = defaultdict(list)
    for window, analysis in per_container:
        pod = window.pods[0]
        busy = pod.gpus[0].stats.get(Signal.GPU_UTIL)
        qps = pod.stats.get(Signal.REQUESTS_PER_S)
        memory = pod.gpus[0].stats.get(Signal.FB_USED_MIB)
        by_code[analysis.primary].append(
            (busy.p95 if busy else 0.0, qps.mean if qps else 0.0, (memory.p99 / 1024) if memory else 0.0)
        )
    print("\n  why (medians per diagnosis): duty-cycle p95, mean QPS, GPU memory p99 GiB (scaled)")
    for code, rows in sorted(by_code.items(), key=lambda item: -len(item[1])):
        print(
            f"  {code.value:<24} busy p95 {statistics.median(r[0] for r in rows):6.1%}  "
            f"qps {statistics.median(r[1] for r in rows):7.3f}  mem {statistics.median(r[2] for r in rows):6.1f}"
        )
    example = {a.primary: a.findings[0].message for _, a in per_container if a.findings}
    for code, message in example.items():
        print(f"  e.g. {code.value}: {message[:160]}")

    # --- sanity vs QPS --------------------------------------------------------------------------------
    idle = list(by_code.get(DiagnosisCode.IDLE_ALLOCATION, []))
    busy_ones = [
        r for code, rows in by_code.items() if code is not DiagnosisCode.IDLE_ALLOCATION for r in rows
    ]
    if idle and busy_ones:
        print(
            f"\n  sanity: idle containers serve a median {statistics.median(r[1] for r in idle):.3f} QPS, "
            f"the others {statistics.median(r[1] for r in busy_ones):.3f}"
        )

    # --- fleet over hourly windows ------------------------------------------------------------------
    print(f"\nfleet as one Deployment, {args.window / 3600:g} h windows:")
    fleet = []
    t = first
    while t + args.window <= last + 1:
        window = fleet_window(trace, t, t + args.window, gpu_model=args.gpu_model)
        fleet.append((window, analyze_window(window)))
        t += args.window
    fleet_counts = Counter(a.primary for _, a in fleet)
    for code, n in fleet_counts.most_common():
        print(f"  {code.value:<24} {n:4d} windows")
    print(
        "  start   replicas  fleet QPS  queue p95  queue ms p95  busy p95 max  fleet p95  -> replicas  diagnosis"
    )
    groups: dict[DiagnosisCode, list[tuple[float, float]]] = defaultdict(list)
    for window, analysis in fleet:
        qps = window.stats.get(Signal.REQUESTS_PER_S)
        queue = window.stats.get(Signal.QUEUE_LENGTH)
        queue_ms = window.stats.get(Signal.QUEUE_TIME_MS)
        fleet_qps = qps.mean if qps else 0.0
        queue_p95 = queue.p95 if queue else 0.0
        groups[analysis.primary].append((fleet_qps, queue_p95))
        hours = (window.start.timestamp() - first) / 3600
        p95s = [s.p95 for p in window.pods for g in p.gpus if (s := g.stats.get(Signal.GPU_UTIL)) is not None]
        fleet_p95 = statistics.fmean(p95s) if p95s else 0.0
        scaled = next(
            (a.to_value for a in analysis.actions if a.type in (ActionType.REPLICAS, ActionType.HPA_BOUNDS)),
            "-",
        )
        print(
            f"  +{hours:5.1f}h {window.allocation.replicas:8d} {fleet_qps:10.2f} {queue_p95:10.1f} "
            f"{(queue_ms.p95 if queue_ms else 0.0):12.0f} {(analysis.gpu_busy_p95 or 0.0):12.1%} "
            f"{fleet_p95:10.1%} {scaled:>11}  {analysis.primary.value}"
        )
    print("\n  sanity: mean fleet QPS and queue p95 per fleet diagnosis")
    for code, fleet_rows in groups.items():
        print(
            f"  {code.value:<24} qps {statistics.mean(r[0] for r in fleet_rows):8.2f}  "
            f"queue p95 {statistics.mean(r[1] for r in fleet_rows):8.1f}  ({len(fleet_rows)} windows)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
