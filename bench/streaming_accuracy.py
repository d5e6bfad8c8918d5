"""Same diagnoses from streaming statistics as from a full window read, on the labelled sets.

Runs the offline path of `diagnosis_accuracy.py` (simulator → OpenMetrics file → source → engine, and
the real-GPU recordings at 1 s and at dcgm-exporter's resolution) twice per set: once with every statistic from `stats.summarize` over the whole window (the full
read), once from `streaming.summarize_streamed` (samples added cycle by cycle into a window of
per-interval sketches, quantiles from DDSketch). Prints, per set, how many workloads get the same
primary diagnosis and the same set of codes, every workload that differs, and the largest relative
difference of p50/p95/p99 between the two reads (the interpolated percentile of the full read against
the sketch's; DDSketch's own guarantee is against the sample at rank floor(q(n-1))).

    .venv/bin/python bench/streaming_accuracy.py [--set default|hard|review|real-1s|real-30s|all]
                                                 [--window 1h] [--step 60] [--cycle 60]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from unittest import mock

from diagnosis_accuracy import SHORT_RECORDING, recording_windows

from gpu_rightsizer.adapters.openmetrics import read_openmetrics
from gpu_rightsizer.config import parse_duration
from gpu_rightsizer.logic import stats as st
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.streaming import RELATIVE_ACCURACY, summarize_streamed
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.observation import SignalStats, WorkloadWindow
from gpu_rightsizer.sim.backfill import write_openmetrics
from gpu_rightsizer.sim.library import hard_scenario_library, review_scenario_library, scenario_library

END = 1_767_225_600.0
SETS = {
    "default": lambda: scenario_library("bench"),
    "hard": lambda: hard_scenario_library("bench-hard"),
    "review": lambda: review_scenario_library("bench-review"),
}


def stats_of(window: WorkloadWindow) -> Iterable[tuple[str, SignalStats]]:
    """Every SignalStats of a window, named by where it sits."""
    for signal, summary in window.stats.items():
        yield f"workload/{signal.value}", summary
    for pod in window.pods:
        for signal, summary in pod.stats.items():
            yield f"{pod.name}/{signal.value}", summary
        for gpu in pod.gpus:
            for signal, summary in gpu.stats.items():
                yield f"{pod.name}/{gpu.uuid}/{signal.value}", summary


def quantile_error(full: WorkloadWindow, streamed: WorkloadWindow) -> float:
    """Largest relative difference of p50/p95/p99 (values under 1e-3 compared absolutely)."""
    exact = dict(stats_of(full))
    worst = 0.0
    for name, summary in stats_of(streamed):
        reference = exact.get(name)
        if reference is None:
            continue
        for a, b in (
            (reference.p50, summary.p50),
            (reference.p95, summary.p95),
            (reference.p99, summary.p99),
        ):
            worst = max(worst, abs(a - b) / max(abs(a), 1e-3))
    return worst


def offline_windows(set_name: str, window: float, step: float) -> Callable[[], list[WorkloadWindow]]:
    """A reader of one labelled set through the offline path (history written once)."""
    scenarios = SETS[set_name]()
    directory = tempfile.mkdtemp(prefix="streaming-accuracy-")
    path = Path(directory) / f"{set_name}.om"
    write_openmetrics(path, scenarios, END - window - 600, END, step, None)
    at = datetime.fromtimestamp(END, tz=UTC)
    return lambda: read_openmetrics(path, window_seconds=window, at=at)


def recordings(coarse: bool) -> Callable[[], list[WorkloadWindow]]:
    """The real-GPU recordings (at 1 s, or at dcgm-exporter's 30 s averages)."""
    return lambda: list(recording_windows(coarse).values())


def both_reads(read: Callable[[], list[WorkloadWindow]], cycle: float) -> tuple[list[WorkloadWindow], ...]:
    """The windows from the full-window statistics, then from the streamed ones."""
    full = read()

    def streaming(samples: Iterable[st.Sample], **kwargs: float | None) -> SignalStats | None:
        return summarize_streamed(samples, cycle_seconds=cycle, **kwargs)  # type: ignore[arg-type]

    with mock.patch.object(st, "summarize", streaming):
        streamed = read()
    return full, streamed


def evaluate(
    set_name: str, read: Callable[[], list[WorkloadWindow]], cycle: float, settings: EngineSettings | None
) -> tuple[int, int, float]:
    full_windows, streamed_windows = both_reads(read, cycle)
    full = {w.workload.key: w for w in full_windows}
    streamed = {w.workload.key: w for w in streamed_windows}
    same_primary = same_codes = 0
    worst = 0.0
    differing = []
    for key, window_full in sorted(full.items()):
        window_streamed = streamed.get(key)
        if window_streamed is None:
            differing.append(f"  {key}: missing from the streamed read")
            continue
        a, b = analyze_window(window_full, settings), analyze_window(window_streamed, settings)
        codes_a = sorted(f.code.value for f in a.findings)
        codes_b = sorted(f.code.value for f in b.findings)
        same_primary += a.primary == b.primary
        same_codes += codes_a == codes_b
        worst = max(worst, quantile_error(window_full, window_streamed))
        if a.primary != b.primary or codes_a != codes_b:
            differing.append(f"  {key}: full {a.primary} {codes_a} / streamed {b.primary} {codes_b}")
    total = len(full)
    print(f"=== set: {set_name} ({total} workloads, statistics added every {cycle:.0f} s)")
    print(f"same primary diagnosis: {same_primary}/{total}; same diagnosis codes: {same_codes}/{total}")
    print(f"largest p50/p95/p99 difference: {worst:.2%} (sketch relative accuracy {RELATIVE_ACCURACY:.0%})")
    for line in differing:
        print(line)
    return same_primary, total, worst


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--set", choices=(*SETS, "real-1s", "real-30s", "all"), default="all")
    parser.add_argument("--window", type=parse_duration, default=3600.0)
    parser.add_argument("--step", type=float, default=60.0)
    parser.add_argument("--cycle", type=float, default=60.0, help="seconds of samples added per cycle")
    args = parser.parse_args()
    names = [*SETS, "real-1s", "real-30s"] if args.set == "all" else [args.set]
    for name in names:
        if name == "real-1s":
            evaluate(name, recordings(False), min(args.cycle, 15.0), SHORT_RECORDING)
        elif name == "real-30s":
            evaluate(name, recordings(True), args.cycle, None)
        else:
            evaluate(name, offline_windows(name, args.window, args.step), args.cycle, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
