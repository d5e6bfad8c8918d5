"""Cost of one analysis cycle against the window length: the full window read against the incremental one.

Simulated history (the labelled scenario library, `--workloads` of them) is backfilled into a local
Prometheus with `promtool tsdb create-blocks-from openmetrics`, as long as the longest window. Then,
for each window length, the bench measures:

* the full read (`PrometheusSource.read`, what every cycle did before): one read;
* the incremental read (`IncrementalSource.read`): its cold start (the backfill in time slices), then
  one steady cycle `--interval` seconds later, which asks only for the new interval.

For each it prints the wall time, the queries, the samples Prometheus touched
(`prometheus_engine_query_samples_total` when it exports it) and Prometheus' CPU-seconds
(`process_cpu_seconds_total`), from Prometheus' own `/metrics`. The steady incremental cycle must stay
flat while the full read grows with the window.

    .venv/bin/python bench/window_flatness.py [--workloads 25] [--windows 5m,1h,24h] [--step 60]
"""

from __future__ import annotations

import argparse
import cProfile
import multiprocessing
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from krr_side_by_side import Snapshot, snapshot

from gpu_rightsizer.adapters.incremental import IncrementalSource
from gpu_rightsizer.adapters.prometheus import PrometheusConfig, PrometheusSource
from gpu_rightsizer.config import parse_duration
from gpu_rightsizer.sim.backfill import write_openmetrics
from gpu_rightsizer.sim.library import scenario_library
from gpu_rightsizer.testcluster.prometheus import PrometheusServer

END = 1_767_225_600.0


def cost(url: str, action: Callable[[], object]) -> tuple[float, Snapshot]:
    """Wall seconds of `action` and what it cost Prometheus (counter differences)."""
    before = snapshot(url)
    started = time.perf_counter()
    action()
    wall = time.perf_counter() - started
    time.sleep(0.5)
    after = snapshot(url)
    touched = (
        after.samples_touched - before.samples_touched
        if after.samples_touched is not None and before.samples_touched is not None
        else None
    )
    return wall, Snapshot(after.queries - before.queries, touched, after.cpu_seconds - before.cpu_seconds)


def peak_rss_mib() -> float:
    """This process's peak resident set (the full read's answers included, so an upper bound)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def row(label: str, wall: float, spent: Snapshot) -> None:
    touched = "-" if spent.samples_touched is None else f"{spent.samples_touched:,.0f}"
    print(f"{label:42}{wall:>9.2f}{spent.queries:>9.0f}{touched:>16}{spent.cpu_seconds:>10.2f}", flush=True)


def measure_window(
    url: str, window: float, step: float, interval: float, only: str, profile: str | None
) -> None:
    """The full read, then the incremental cold start and one steady cycle, at one window length."""
    at = datetime.fromtimestamp(END, tz=UTC)
    before = datetime.fromtimestamp(END - interval, tz=UTC)
    if only != "incremental":
        full = PrometheusSource(PrometheusConfig(url=url, timeout_seconds=300))
        wall, spent = cost(url, lambda: full.read(window_seconds=window, at=at, step_seconds=step))
        row(f"window {window / 3600:g} h: full read", wall, spent)
    if only == "full":
        return
    source = PrometheusSource(PrometheusConfig(url=url, timeout_seconds=300))
    incremental = IncrementalSource(source, window_seconds=window, step_seconds=step)
    wall, spent = cost(url, lambda: incremental.read(at=before))
    row(f"window {window / 3600:g} h: incremental cold start", wall, spent)
    windows: list[object] = []
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    wall, spent = cost(url, lambda: windows.extend(incremental.read(at=at)))
    if profiler is not None and profile:
        profiler.disable()
        profiler.dump_stats(profile)
    row(f"window {window / 3600:g} h: incremental steady cycle", wall, spent)
    print(
        f"{'':42}{len(windows)} workload windows from {len(incremental.reader.store)} series; "
        f"{incremental.report.samples:,} samples fetched this cycle; process peak RSS {peak_rss_mib():.0f} MiB",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workloads", type=int, default=25)
    parser.add_argument("--windows", default="5m,1h,24h")
    parser.add_argument("--step", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=60.0, help="seconds between two cycles")
    parser.add_argument("--profile", default=None, help="write a cProfile of the steady cycle here")
    parser.add_argument(
        "--only", choices=("both", "full", "incremental"), default="both", help="which reads to measure"
    )
    args = parser.parse_args()
    windows = [parse_duration(w) for w in args.windows.split(",")]
    library = scenario_library("flat")
    scenarios = [
        library[i % len(library)].with_(name=f"{library[i % len(library)].name}-{i}")
        for i in range(args.workloads)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        history = workdir / "history.om"
        started = time.perf_counter()
        # in a child process, so the RSS printed later is the reads' and not the history's
        child = multiprocessing.get_context("fork").Process(
            target=write_openmetrics, args=(history, scenarios, END - max(windows) - 900, END, args.step)
        )
        child.start()
        child.join()
        print(f"history for {len(scenarios)} workloads written in {time.perf_counter() - started:.0f} s")
        server = PrometheusServer(workdir=workdir, backfill=(history,))
        started = time.perf_counter()
        server.start(timeout=1800)
        print(f"promtool backfill and start: {time.perf_counter() - started:.0f} s")
        try:
            url = server.url
            print(f"\n{'':42}{'wall s':>9}{'queries':>9}{'samples touched':>16}{'CPU-s':>10}")
            for window in windows:
                measure_window(url, window, args.step, args.interval, args.only, args.profile)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
