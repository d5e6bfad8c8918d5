"""A fleet of GPU workloads (10,000 by default) over a 1 h window: the operator's analysis path against a
backfilled Prometheus.

A live simulator cannot serve ~14,000 pods on a small machine, so their history is backfilled into
Prometheus' TSDB instead. The labelled scenario library (`sim.library.scenario_library`: every shape,
allocations and workload kinds) is repeated over `--workloads` workloads spread over namespaces of
`--per-namespace` each; every workload gets the history of the window, plus `--margin` before it
(rate windows) and max(3, `--cycles`) × `--interval` after it (the new data of the steady cycles), at one
sample every `--step` seconds (60 s: a common production scrape interval; slower than the
simulator's live 5 s, which only changes the samples per series, not the shape of the work).

The history is written and backfilled in pieces of `--batch` workloads (one OpenMetrics file and one
`promtool tsdb create-blocks-from openmetrics` run each, the file deleted after), so memory and disk
stay bounded whatever the fleet. The pieces' blocks overlap in time, which Prometheus 2.39 and newer
(Debian's is 2.42) always accept; one Prometheus start then compacts them vertically into one block
per 2 h, as a real server's TSDB would be. The TSDB is cached under `--cache-dir` keyed by the
parameters (and the simulator's source), so a re-run skips all that and says so.

Then Prometheus (127.0.0.1, `--query.timeout` the operator's default client timeout) serves the
cached TSDB, and this process runs what every operator cycle runs, in process:

* the windows from `adapters.windows.sources_for` (one `IncrementalSource` per window, at most half
  an interval of backfill queries per cycle), plus the node capacity from kube-state-metrics;
* `recommender.cycle.analyse` (the engine with the policy-less settings) on every workload window,
  the windows taken one chunk of namespaces at a time (`IncrementalSource.read_chunks`), as the
  operator's cycle takes them, so that the resident set is the operator's; the chunks' assembly
  counts in the engine's part of the cycle.

The cold start is read as back-to-back operator cycles at one simulated "now" (the end of the
window) until the backfill is complete, then the engine runs on every workload: its wall time is
"cold start"; a live operator pauses `recommender.cycle.BACKFILL_PAUSE_SECONDS` between backfill
cycles, so the script also prints that time. Then `--cycles` steady cycles, "now" advanced by `--interval` each. For every
cycle it prints the wall time, the read and engine parts, the queries, the samples Prometheus
touched (`prometheus_engine_query_samples_total`, when exported) and its CPU-seconds
(`process_cpu_seconds_total`), both from Prometheus' own `/metrics`, and this process's resident
set (current and peak, `VmRSS` and `VmHWM` of /proc/self/status).

With `--total-shards N` the cycles run first as N shards (`--shard i --total-shards N`), each in a
process of its own against the one Prometheus, every phase (the cold start, each steady cycle)
started in all of them at once: per shard its cycle, queries and resident set, and across the shards
what each phase cost Prometheus; then (unless `--shards-only`) as one process on a fresh start of
the same Prometheus, and the shards against it as ratios, their diagnoses included.

Not measured here: the kube-apiserver side (listing recommendations and workloads, status patches,
events). `bench/operator_scale.py` runs the real operator against a live cluster for that.

    .venv/bin/python bench/fleet_backfill.py [--workloads 10000] [--window 1h] [--step 60] \\
        [--interval 5m] [--cycles 3] [--batch 500] [--profile /tmp/fleet] [--tracemalloc] \\
        [--total-shards 2 [--shards-only]] [--baseline DIR [--steady-reads-only]]
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import hashlib
import json
import math
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from operator_scale import http_text, samples
from window_flatness import END, cost

from gpu_rightsizer.adapters.incremental import Chunk
from gpu_rightsizer.adapters.prometheus import PrometheusSource, QueryStats, source_for
from gpu_rightsizer.adapters.source import CycleReport
from gpu_rightsizer.adapters.windows import WindowSources, sources_for
from gpu_rightsizer.config import OperatorConfig, parse_duration
from gpu_rightsizer.logic.capacity import ClusterCapacity
from gpu_rightsizer.logic.policy import settings_for_workload
from gpu_rightsizer.model.codes import DiagnosisCode
from gpu_rightsizer.model.observation import WorkloadWindow
from gpu_rightsizer.model.shards import ShardSlice
from gpu_rightsizer.recommender.cycle import BACKFILL_PAUSE_SECONDS, analyse
from gpu_rightsizer.runtime.memory import release_free_memory
from gpu_rightsizer.sim import backfill, library, scenarios
from gpu_rightsizer.sim.backfill import write_openmetrics
from gpu_rightsizer.sim.library import scenario_library
from gpu_rightsizer.sim.scenarios import Scenario, pod_contexts
from gpu_rightsizer.testcluster.prometheus import PrometheusError, PrometheusServer, create_blocks

DEFAULT_CACHE = Path.home() / ".cache" / "gpu-rightsizer" / "fleet-backfill"
MIB = 1024 * 1024
#: Steady cycles the history always covers, so fewer cycles reuse the same cached TSDB.
HISTORY_CYCLES = 3


# --- the fleet and its history ---------------------------------------------------------------------
def fleet(workloads: int, per_namespace: int) -> list[Scenario]:
    """`workloads` copies of the scenario library's shapes, `per_namespace` to a namespace.

    A time-sliced scenario gets a node of its own: the simulator's shared time-slicing pool would
    otherwise put thousands of unrelated pods on one device and read them as sharing it.
    """
    shapes = scenario_library()
    out = []
    for index in range(workloads):
        base = shapes[index % len(shapes)]
        changes: dict[str, object] = {
            "name": f"{base.name}-{index}",
            "namespace": f"team-{index // per_namespace:03d}",
        }
        if base.pods_per_gpu > 1 and base.node_prefix is None:
            changes["node_prefix"] = f"gpu-ts-{index}"
        out.append(base.with_(**changes))
    return out


def cache_key(params: dict[str, Any]) -> str:
    """Parameters and the simulator's source: a changed simulator never reuses an old TSDB."""
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode())
    for module in (backfill, library, scenarios):
        digest.update(Path(str(module.__file__)).read_bytes())
    return digest.hexdigest()[:16]


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def write_piece(path: Path, piece: Sequence[Scenario], start: float, end: float, step: float) -> int:
    """One piece's OpenMetrics file (in the worker process); returns its samples."""
    return write_openmetrics(path, piece, start, end, step)


def block_ranges(data_dir: Path) -> list[tuple[int, int]]:
    """(minTime, maxTime) of every finished block in a TSDB directory."""
    ranges = []
    for meta in data_dir.glob("*/meta.json"):
        if meta.parent.name.endswith(".tmp") or ".tmp-" in meta.parent.name:
            continue
        body = json.loads(meta.read_text())
        ranges.append((int(body["minTime"]), int(body["maxTime"])))
    return sorted(ranges)


def overlapping(ranges: list[tuple[int, int]]) -> int:
    """Blocks that overlap the one before them (0 once Prometheus compacted them vertically)."""
    count, reach = 0, None
    for start, end in ranges:
        count += reach is not None and start < reach
        reach = end if reach is None else max(reach, end)
    return count


def compact(workdir: Path) -> None:
    """Start Prometheus once on the backfilled blocks and wait until it merged the overlapping ones."""
    server = PrometheusServer(workdir=workdir, keep_data=True)
    started = time.perf_counter()
    server.start(timeout=600)
    try:
        while True:
            ranges = block_ranges(server.data_dir)
            left = overlapping(ranges)
            tmp = any(".tmp" in p.name for p in server.data_dir.iterdir())
            if not left and not tmp:
                break
            if time.perf_counter() - started > 1800:
                raise PrometheusError(f"{left} blocks still overlap after 30 min")
            print(
                f"  compacting: {len(ranges)} blocks, {left} overlapping "
                f"({time.perf_counter() - started:.0f} s)",
                flush=True,
            )
            time.sleep(10)
    finally:
        server.stop()
    print(
        f"compacted into {len(block_ranges(server.data_dir))} blocks in "
        f"{time.perf_counter() - started:.0f} s",
        flush=True,
    )


def build_tsdb(
    workdir: Path, fleet_: list[Scenario], start: float, end: float, step: float, batch: int
) -> dict[str, float]:
    """Backfill the fleet piece by piece into `workdir/data`; the next piece is written while
    promtool reads the last. Returns its figures."""
    data_dir = workdir / "data"
    data_dir.mkdir(parents=True)
    pieces = [fleet_[i : i + batch] for i in range(0, len(fleet_), batch)]
    started = time.perf_counter()
    total_samples, total_bytes, promtool_seconds, peak_disk = 0, 0, 0.0, 0
    done = 0
    # a worker process: the history's memory is never this process's (its RSS is the operator's)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:

        def submit(index: int) -> Future[int]:
            return pool.submit(write_piece, workdir / f"piece-{index}.om", pieces[index], start, end, step)

        pending = submit(0)
        for index, piece in enumerate(pieces):
            written = pending.result()
            path = workdir / f"piece-{index}.om"
            if index + 1 < len(pieces):
                pending = submit(index + 1)
            size = path.stat().st_size
            peak_disk = max(peak_disk, tree_bytes(workdir))
            promtool_seconds += create_blocks(path, data_dir)
            peak_disk = max(peak_disk, tree_bytes(workdir))
            path.unlink()
            done += len(piece)
            total_samples += written
            total_bytes += size
            print(
                f"  backfilled {done:,}/{len(fleet_):,} workloads: {total_samples:,} samples, "
                f"{total_bytes / MIB:,.0f} MiB of OpenMetrics, {time.perf_counter() - started:.0f} s "
                f"(promtool {promtool_seconds:.0f} s)",
                flush=True,
            )
    backfill_seconds = time.perf_counter() - started
    compact(workdir)
    return {
        "samples": total_samples,
        "openmetrics_mib": total_bytes / MIB,
        "backfill_seconds": backfill_seconds,
        "promtool_seconds": promtool_seconds,
        "generate_and_compact_seconds": time.perf_counter() - started,
        "peak_disk_mib": peak_disk / MIB,
        "tsdb_mib": tree_bytes(data_dir) / MIB,
    }


def cached_tsdb(args: argparse.Namespace, fleet_: list[Scenario], start: float, end: float) -> Path:
    """The TSDB of these parameters: from the cache, else generated into it."""
    params = {
        "workloads": args.workloads,
        "per_namespace": args.per_namespace,
        "start": start,
        "end": end,
        "step": args.step,
    }
    workdir = Path(args.cache_dir) / cache_key(params)
    marker = workdir / "complete.json"
    if marker.exists():
        figures = json.loads(marker.read_text())["figures"]
        print(
            f"cached TSDB found in {workdir}: generation skipped (it took "
            f"{figures['generate_and_compact_seconds']:.0f} s: {figures['samples']:,} samples, "
            f"{figures['tsdb_mib']:.0f} MiB)",
            flush=True,
        )
        return workdir
    if workdir.exists():  # an interrupted run: start that one again
        shutil.rmtree(workdir)
    print(f"generating the TSDB into {workdir} ...", flush=True)
    figures = build_tsdb(workdir, fleet_, start, end, args.step, args.batch)
    print(
        f"backfill: {figures['samples']:,} samples ({figures['openmetrics_mib']:,.0f} MiB of OpenMetrics) "
        f"in {figures['backfill_seconds']:.0f} s (promtool {figures['promtool_seconds']:.0f} s); with "
        f"compaction {figures['generate_and_compact_seconds']:.0f} s; TSDB {figures['tsdb_mib']:.0f} MiB, "
        f"peak disk {figures['peak_disk_mib']:.0f} MiB",
        flush=True,
    )
    marker.write_text(json.dumps({"params": params, "figures": figures}, indent=2))
    return workdir


# --- the operator's cycle --------------------------------------------------------------------------
def rss_mib() -> tuple[float, float]:
    """This process's resident set now and at its peak (VmRSS, VmHWM), in MiB."""
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = float(value.split()[0]) / 1024
    return found.get("VmRSS", 0.0), found.get("VmHWM", 0.0)


@dataclass
class Cycle:
    """What one cycle did and cost."""

    wall: float
    read: float
    engine: float
    queries: float
    touched: float | None
    cpu: float
    fetched: int
    #: Workload windows read (None while backfilling); the windows themselves are dropped after the
    #: cycle, as the operator does, so they never count in the next cycle's resident set.
    windows: int | None
    report: CycleReport
    diagnoses: dict[str, DiagnosisCode]
    #: Every query's own cost (`stats=all`), in the order answered.
    stats: list[QueryStats]


def with_stats(source: PrometheusSource, stats: list[QueryStats]) -> PrometheusSource:
    """`source`, asking Prometheus for every query's own cost (`stats=all`) into `stats`."""
    source.query_stats = stats
    return source


def one_cycle(
    url: str,
    cfg: OperatorConfig,
    sources: WindowSources,
    now: datetime,
    stats: list[QueryStats],
    progress: Any = None,
    shard: ShardSlice | None = None,
) -> Cycle:
    """The windows at `now` (None while backfilling) and, when there are, the engine on each; a
    `shard`'s only when given."""
    answer: list[tuple[Iterator[list[WorkloadWindow]] | None, CycleReport, ClusterCapacity]] = []
    first = len(stats)

    def read() -> None:
        # as the operator's cycle reads them: the reads now, the windows one chunk of namespaces at
        # a time (assembled as each chunk is taken, so the assembly counts in the engine's part)
        source = sources.source(cfg.window_seconds, now)
        windows = source.read_chunks(
            at=now, shard=shard, budget_seconds=sources.budget_seconds, progress=progress
        )
        sources.save(cfg.window_seconds)
        report = source.report
        capacity = ClusterCapacity()
        if windows is not None:
            try:
                capacity = with_stats(source_for(cfg), stats).read_capacity(now)
            except Exception as error:  # the operator goes on without node pools too
                print(f"  node capacity unreadable: {error}", flush=True)
        answer.append((windows, report, capacity))

    read_wall, spent = cost(url, read)
    windows, report, capacity = answer[0]
    diagnoses: dict[str, DiagnosisCode] = {}
    started = time.perf_counter()
    if windows is not None:
        settings = settings_for_workload([], {}, {}, {})
        for chunk in windows:
            for window in chunk:
                analysis = analyse(window, settings, now, cfg.window_seconds, capacity)
                diagnoses[window.workload.key] = analysis.primary
    release_free_memory()  # as the operator's cycle ends (`recommender.cycle.run_cycle`)
    engine = time.perf_counter() - started
    return Cycle(
        read_wall + engine,
        read_wall,
        engine,
        spent.queries,
        spent.samples_touched,
        spent.cpu_seconds,
        report.samples,
        None if windows is None else len(diagnoses),
        report,
        diagnoses,
        stats[first:],
    )


def memory_profile(top: int = 12) -> None:
    """What the live Python objects are, by source file, against the resident set: the difference is
    memory the allocators hold but no object uses (fragmentation, freed pages kept mapped)."""
    snapshot = tracemalloc.take_snapshot()
    live, _ = tracemalloc.get_traced_memory()
    resident, _ = rss_mib()
    print(
        f"memory profile after the steady cycles: {live / 2**20:,.0f} MiB in live Python objects, "
        f"{resident:,.0f} MiB resident (the rest is allocator overhead and this profiler's own)",
        flush=True,
    )
    for stat in snapshot.statistics("filename")[:top]:
        frame = stat.traceback[0]
        print(f"  {stat.size / 2**20:9,.1f} MiB {stat.count:>10,} blocks  {frame.filename}", flush=True)


def row(label: str, cycle: Cycle) -> None:
    touched = "-" if cycle.touched is None else f"{cycle.touched:,.0f}"
    rss, peak = rss_mib()
    print(
        f"{label:24}{cycle.wall:>8.1f}{cycle.read:>8.1f}{cycle.engine:>8.1f}{cycle.queries:>8.0f}"
        f"{touched:>15}{cycle.cpu:>8.1f}{cycle.fetched:>13,}{rss:>8.0f}{peak:>8.0f}",
        flush=True,
    )
    groups: dict[str, float] = {}
    for group, seconds in cycle.report.durations:
        groups[group] = groups.get(group, 0.0) + seconds
    print(
        f"{'':24}query seconds by family group (4 in flight): "
        + ", ".join(f"{g} {s:.1f}" for g, s in sorted(groups.items(), key=lambda kv: -kv[1])),
        flush=True,
    )


def family_group(what: str) -> str:
    """The query family a query belongs to: its name, less the namespace of a split chunk."""
    return what.split(" in ", 1)[0]


def family_table(label: str, stats: Sequence[QueryStats], cpu_seconds: float) -> None:
    """Per query family: queries, raw samples read, series returned, Prometheus' evaluation seconds."""
    groups: dict[str, list[QueryStats]] = {}
    for one in stats:
        groups.setdefault(family_group(one.what), []).append(one)
    total = sum(one.samples for one in stats) or 1
    print(f"\nper query family, {label} (Prometheus CPU-s of the cycle: {cpu_seconds:.1f})", flush=True)
    print(f"{'family':44}{'queries':>8}{'samples touched':>17}{'share':>7}{'series':>10}{'query s':>9}")
    for name, group in sorted(groups.items(), key=lambda kv: -sum(one.samples for one in kv[1])):
        touched = sum(one.samples for one in group)
        print(
            f"{name[:44]:44}{len(group):>8}{touched:>17,}{touched / total:>7.1%}"
            f"{sum(one.series for one in group):>10,}{sum(one.seconds for one in group):>9.2f}"
        )
    print(
        f"{'total':44}{len(stats):>8}{sum(one.samples for one in stats):>17,}{'':>7}"
        f"{sum(one.series for one in stats):>10,}{sum(one.seconds for one in stats):>9.2f}",
        flush=True,
    )


HEADER = (
    f"{'':24}{'wall s':>8}{'read s':>8}{'engine':>8}{'queries':>8}{'samples touch':>15}{'P CPU-s':>8}"
    f"{'fetched':>13}{'RSS MiB':>8}{'peak':>8}"
)


def expected_diagnoses(fleet_: list[Scenario]) -> dict[tuple[str, str], DiagnosisCode]:
    """(namespace, workload name) -> the code the scenario is labelled with."""
    return {(s.namespace, s.name): s.expected for s in fleet_}


def tally(
    diagnoses: dict[str, DiagnosisCode], expected: dict[tuple[str, str], DiagnosisCode]
) -> tuple[int, int, int]:
    """(windows with a real diagnosis, workloads that should have one, diagnoses as labelled)."""
    real = sum(1 for code in diagnoses.values() if code != DiagnosisCode.INSUFFICIENT_DATA)
    should = sum(1 for code in expected.values() if code != DiagnosisCode.INSUFFICIENT_DATA)
    matches = 0
    for key, code in diagnoses.items():
        namespace, _, name = key.split("/", 2)
        matches += expected.get((namespace, name)) == code
    return real, should, matches


def bench_config(args: argparse.Namespace) -> OperatorConfig:
    return OperatorConfig(
        prometheus_url="http://placeholder",
        interval_seconds=args.interval,
        window_seconds=args.window,
        prometheus_step_seconds=args.step,
        trusted_gpu_targets=(),  # the backfilled fleet has no scrape targets: every series is read
    )


def serve(workdir: Path, cfg: OperatorConfig) -> PrometheusServer:
    """Prometheus on the cached TSDB, started (with the operator's client timeout as its own)."""
    server = PrometheusServer(
        workdir=workdir,
        keep_data=True,
        extra_args=(f"--query.timeout={cfg.prometheus_timeout_seconds:g}s",),
    )
    started = time.perf_counter()
    server.start(timeout=600)
    print(
        f"Prometheus ready on the cached TSDB in {time.perf_counter() - started:.1f} s; this process "
        f"holds {rss_mib()[0]:.0f} MiB before the cold start (interpreter, modules, the fleet's list)",
        flush=True,
    )
    return server


@dataclass
class Summary:
    """What a run of the cycles gave, for the shards' comparison with one process."""

    diagnoses: dict[str, DiagnosisCode]
    steady_queries: float
    steady_cpu: float
    steady_p50: float
    rss_steady: float
    rss_peak: float


def measure(args: argparse.Namespace, fleet_: list[Scenario], workdir: Path) -> Summary:
    cfg = bench_config(args)
    server = serve(workdir, cfg)
    try:
        cfg = dataclasses.replace(cfg, prometheus_url=server.url)
        sources = sources_for(cfg)
        stats: list[QueryStats] = []
        make_source = sources.make_source
        sources.make_source = lambda: with_stats(make_source(), stats)
        expected = expected_diagnoses(fleet_)
        last_print = [0.0]

        def progress(report: CycleReport, chunk: Chunk) -> None:
            if time.perf_counter() - last_print[0] > 15:
                last_print[0] = time.perf_counter()
                rss, _ = rss_mib()
                print(
                    f"  backfill chunk {report.backfill_done}/{report.backfill_total} "
                    f"({chunk.describe()}), {report.samples:,} samples this cycle, RSS {rss:.0f} MiB",
                    flush=True,
                )

        print(f"\n{HEADER}", flush=True)
        now = datetime.fromtimestamp(END, tz=UTC)
        profiler = cProfile.Profile() if args.profile else None
        cold: list[Cycle] = []
        if profiler is not None:
            profiler.enable()
        while not cold or cold[-1].windows is None:
            cold.append(one_cycle(server.url, cfg, sources, now, stats, progress))
            row(f"cold start cycle {len(cold)}", cold[-1])
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(f"{args.profile}.cold")
        cold_wall = sum(c.wall for c in cold)
        real, should, matches = tally(cold[-1].diagnoses, expected)
        # a live operator starts the next cycle BACKFILL_PAUSE_SECONDS after one that left a window
        # still backfilling (recommender.cycle.next_delay)
        live = cold_wall + (len(cold) - 1) * min(BACKFILL_PAUSE_SECONDS, args.interval)
        steady: list[Cycle] = []
        for k in range(1, args.cycles + 1):
            moment = datetime.fromtimestamp(END + k * args.interval, tz=UTC)
            profiler = cProfile.Profile() if args.profile and k == 1 else None
            if profiler is not None:
                profiler.enable()
            steady.append(one_cycle(server.url, cfg, sources, moment, stats))
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats(f"{args.profile}.steady")
            row(f"steady cycle {k}", steady[-1])
        rss_steady, peak = rss_mib()
        family_table("cold start", [one for c in cold for one in c.stats], sum(c.cpu for c in cold))
        for k, cycle in enumerate(steady, 1):
            family_table(f"steady cycle {k}", cycle.stats, cycle.cpu)
        if tracemalloc.is_tracing():
            memory_profile()
        if args.baseline:
            compare_steady_reads(args, server.url)
        prometheus_rss = samples(http_text(f"{server.url}/metrics"), "process_resident_memory_bytes")
    finally:
        server.stop()
    walls = [c.wall for c in steady]
    touched = [c.touched for c in steady if c.touched is not None]
    print(
        f"\n{args.workloads:,} workloads, {cold[-1].windows or 0:,} windows, "
        f"{len(sources.source(cfg.window_seconds).reader.store.series):,} series in memory",
        flush=True,
    )
    print(
        f"cold start: {cold_wall:.0f} s in {len(cold)} back-to-back cycle(s) (read "
        f"{sum(c.read for c in cold):.0f} s, engine {cold[-1].engine:.0f} s, {sum(c.queries for c in cold):.0f} "
        f"queries, {sum(c.cpu for c in cold):.0f} Prometheus CPU-s); a live operator, "
        f"{BACKFILL_PAUSE_SECONDS:g} s between backfill cycles: {live:.0f} s"
    )
    print(
        f"diagnosed after the cold start: {real:,} of {should:,} workloads that can be "
        f"({args.workloads - should:,} are labelled InsufficientData); {matches:,} as labelled "
        f"=> time until every workload is diagnosed: "
        + (f"{cold_wall:.0f} s (live operator {live:.0f} s)" if real >= should else "not reached")
    )
    if walls:
        print(
            f"steady cycle: p50 {statistics.median(walls):.1f} s, max {max(walls):.1f} s; "
            f"per cycle {statistics.mean(c.queries for c in steady):.0f} queries, "
            + (
                f"{statistics.mean(touched):,.0f} samples touched, "
                if touched
                else "samples touched not exported by this Prometheus, "
            )
            + f"{statistics.mean(c.cpu for c in steady):.1f} Prometheus CPU-s"
        )
    print(
        f"operator RSS peak {peak:.0f} MiB; Prometheus RSS "
        + (f"{prometheus_rss[0][1] / MIB:.0f} MiB" if prometheus_rss else "-")
    )
    print(
        f"targets: cold start <= 600 s: {'met' if live <= 600 else 'MISSED'} (live {live:.0f} s); "
        f"steady cycle <= 60 s: {'met' if walls and max(walls) <= 60 else 'MISSED'}; "
        f"RSS <= 600 MiB: {'met' if peak <= 600 else 'MISSED'}",
        flush=True,
    )
    return Summary(
        cold[-1].diagnoses,
        statistics.mean(c.queries for c in steady) if steady else 0.0,
        statistics.mean(c.cpu for c in steady) if steady else 0.0,
        statistics.median(walls) if walls else 0.0,
        rss_steady,
        peak,
    )


# --- shards -------------------------------------------------------------------------------------
def shard_worker(connection: Any, cfg: OperatorConfig, shard: ShardSlice) -> None:
    """One shard's recommender in its own process (its own resident set): runs the cycles the
    parent asks for, `("cold", at)` until its window is complete or `("steady", at)` once, and
    answers with its figures; None ends it."""
    sources = sources_for(cfg)
    while (message := connection.recv()) is not None:
        phase, at = message
        now = datetime.fromtimestamp(at, tz=UTC)
        cycles: list[Cycle] = []
        while not cycles or (phase == "cold" and cycles[-1].windows is None):
            cycles.append(one_cycle(cfg.prometheus_url or "", cfg, sources, now, [], shard=shard))
        rss, peak = rss_mib()
        connection.send(
            {
                "cycles": len(cycles),
                "wall": sum(c.wall for c in cycles),
                "read": sum(c.read for c in cycles),
                "engine": cycles[-1].engine,
                "queries": sum(c.report.queries for c in cycles),
                "windows": cycles[-1].windows or 0,
                "rss": rss,
                "peak": peak,
                "diagnoses": cycles[-1].diagnoses,
            }
        )


SHARD_HEADER = (
    f"{'':8}{'':18}{'cycles':>7}{'wall s':>8}{'read s':>8}{'engine':>8}{'queries':>8}{'windows':>9}"
    f"{'RSS MiB':>8}{'peak':>8}{'samples touch':>15}{'P CPU-s':>8}"
)


def measure_shards(args: argparse.Namespace, fleet_: list[Scenario], workdir: Path) -> Summary:
    """`--total-shards` recommenders, each in its own process, against the one Prometheus: every
    phase (the cold start, then each steady cycle) starts in all shards at once, and what the phase
    cost Prometheus is measured across them."""
    cfg = bench_config(args)
    server = serve(workdir, cfg)
    context = multiprocessing.get_context("fork")
    workers = []
    try:
        cfg = dataclasses.replace(cfg, prometheus_url=server.url)
        for number in range(args.total_shards):
            parent, child = context.Pipe()
            process = context.Process(
                target=shard_worker, args=(child, cfg, ShardSlice(number, args.total_shards)), daemon=True
            )
            process.start()
            workers.append((parent, process))
        print(f"\n{args.total_shards} shards, one process each\n{SHARD_HEADER}", flush=True)
        phases = [("cold start", "cold", END)] + [
            (f"steady cycle {k}", "steady", END + k * args.interval) for k in range(1, args.cycles + 1)
        ]
        figures: dict[str, list[dict[str, Any]]] = {}
        spent: dict[str, Any] = {}
        for label, phase, at in phases:
            answers: list[dict[str, Any]] = []

            def run(phase: str = phase, at: float = at, answers: list[dict[str, Any]] = answers) -> None:
                for connection, _ in workers:
                    connection.send((phase, at))
                answers.extend(connection.recv() for connection, _ in workers)

            wall, spent[label] = cost(server.url, run)
            figures[label] = answers
            for number, answer in enumerate(answers):
                print(
                    f"{'shard ' + str(number):8}{label:18}{answer['cycles']:>7}{answer['wall']:>8.1f}"
                    f"{answer['read']:>8.1f}{answer['engine']:>8.1f}{answer['queries']:>8}"
                    f"{answer['windows']:>9,}{answer['rss']:>8.0f}{answer['peak']:>8.0f}",
                    flush=True,
                )
            touched = spent[label].samples_touched
            print(
                f"{'all':8}{label:18}{'':7}{wall:>8.1f}{'':24}{spent[label].queries:>8.0f}"
                f"{sum(a['windows'] for a in answers):>9,}{'':16}"
                f"{'-' if touched is None else f'{touched:,.0f}':>15}{spent[label].cpu_seconds:>8.1f}",
                flush=True,
            )
    finally:
        for connection, process in workers:
            connection.send(None)
            process.join(timeout=60)
        server.stop()
    steady = [label for label, phase, _ in phases if phase == "steady"]
    diagnoses = {k: v for answer in figures["cold start"] for k, v in answer["diagnoses"].items()}
    print(
        f"\n{args.total_shards} shards, {args.workloads:,} workloads, {len(diagnoses):,} windows", flush=True
    )
    for number in range(args.total_shards):
        walls = [figures[label][number]["wall"] for label in steady]
        last = figures[steady[-1] if steady else "cold start"][number]
        print(
            f"shard {number}: {figures['cold start'][number]['windows']:,} windows; cold start "
            f"{figures['cold start'][number]['wall']:.0f} s; steady cycle p50 "
            + (f"{statistics.median(walls):.1f} s, max {max(walls):.1f} s" if walls else "-")
            + f"; RSS steady {last['rss']:.0f} MiB, peak {last['peak']:.0f} MiB",
            flush=True,
        )
    queries = statistics.mean(spent[label].queries for label in steady) if steady else 0.0
    cpu = statistics.mean(spent[label].cpu_seconds for label in steady) if steady else 0.0
    touched = [spent[label].samples_touched for label in steady if spent[label].samples_touched is not None]
    print(
        f"all shards per steady cycle: {queries:.0f} Prometheus queries, "
        + (f"{statistics.mean(touched):,.0f} samples touched, " if touched else "")
        + f"{cpu:.1f} Prometheus CPU-s; cold start {spent['cold start'].queries:.0f} queries, "
        f"{spent['cold start'].cpu_seconds:.0f} CPU-s",
        flush=True,
    )
    final = figures[steady[-1] if steady else "cold start"]
    return Summary(
        diagnoses,
        queries,
        cpu,
        statistics.median(max(a["wall"] for a in figures[label]) for label in steady) if steady else 0.0,
        max(a["rss"] for a in final),
        max(a["peak"] for a in final),
    )


def compare(shards: Summary, one: Summary, total: int) -> None:
    """The shards against one process, as ratios measured in one run."""
    same = sum(one.diagnoses.get(key) == code for key, code in shards.diagnoses.items())
    print(
        f"\n{total} shards / one process, per steady cycle: Prometheus queries "
        f"{shards.steady_queries / max(one.steady_queries, 1):.2f}x, Prometheus CPU "
        f"{shards.steady_cpu / max(one.steady_cpu, 1e-9):.2f}x, cycle p50 (slowest shard) "
        f"{shards.steady_p50 / max(one.steady_p50, 1e-9):.2f}x; largest shard RSS steady/peak "
        f"{shards.rss_steady / max(one.rss_steady, 1e-9):.2f}x / {shards.rss_peak / max(one.rss_peak, 1e-9):.2f}x; "
        f"diagnoses as one process's: {same:,} of {len(one.diagnoses):,}"
        + ("" if shards.diagnoses.keys() == one.diagnoses.keys() else " (the workloads differ)"),
        flush=True,
    )


def steady_read(url: str, args: argparse.Namespace, source_root: str) -> tuple[float, dict[str, Any]]:
    """One warm steady read (`steady_read.py`) with the code under `source_root`: the Prometheus
    CPU-seconds it cost and what it printed."""
    command = [
        sys.executable,
        str(Path(__file__).resolve().parent / "steady_read.py"),
        f"--url={url}",
        f"--window={args.window}",
        f"--step={args.step}",
        f"--interval={args.interval}",
        # the last steady cycle's interval again (the history covers HISTORY_CYCLES intervals)
        f"--end={END + (max(1, min(args.cycles, HISTORY_CYCLES)) - 1) * args.interval}",
    ]
    answer: list[str] = []

    def run() -> None:
        env = {**os.environ, "PYTHONPATH": source_root}
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        answer.append(done.stdout.strip().splitlines()[-1])

    _, spent = cost(url, run)
    return spent.cpu_seconds, json.loads(answer[0])


def compare_steady_reads(args: argparse.Namespace, url: str) -> None:
    """The steady cycle's reads with the baseline's code and this checkout's, alternately
    (`--baseline-runs` each), against the same Prometheus: their Prometheus CPU-seconds and samples."""
    ours = str(Path(__file__).resolve().parents[1] / "operator")
    sides = {"baseline": str(Path(args.baseline).resolve()), "this checkout": ours}
    print(f"\nwarm steady reads, baseline {sides['baseline']} against {ours}, alternately:", flush=True)
    print(f"{'':16}{'run':>4}{'queries':>9}{'samples touched':>17}{'P CPU-s':>9}", flush=True)
    spent: dict[str, list[tuple[float, int]]] = {name: [] for name in sides}
    for run in range(1, args.baseline_runs + 1):
        for name, root in sides.items():
            cpu, printed = steady_read(url, args, root)
            spent[name].append((cpu, int(printed["samples"])))
            print(
                f"{name:16}{run:>4}{printed['queries']:>9}{printed['samples']:>17,}{cpu:>9.1f}"
                + (f"  errors: {printed['errors']}" if printed["errors"] else ""),
                flush=True,
            )
    before = statistics.median(cpu for cpu, _ in spent["baseline"])
    after = statistics.median(cpu for cpu, _ in spent["this checkout"])
    samples_before = statistics.median(n for _, n in spent["baseline"])
    samples_after = statistics.median(n for _, n in spent["this checkout"])
    print(
        f"median Prometheus CPU-s per steady read: baseline {before:.1f}, this checkout {after:.1f} "
        f"({before / after if after > 0 else math.inf:.1f}x less); samples touched {samples_before:,.0f} "
        f"against {samples_after:,.0f} ({samples_before / max(samples_after, 1):.1f}x less)",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workloads", type=int, default=10_000)
    parser.add_argument("--per-namespace", type=int, default=200, help="workloads per namespace")
    parser.add_argument("--window", type=parse_duration, default=3600.0, help="default 1h")
    parser.add_argument("--step", type=float, default=60.0, help="seconds between samples")
    parser.add_argument("--interval", type=parse_duration, default=300.0, help="cycle interval, 5m")
    parser.add_argument("--cycles", type=int, default=3, help="steady cycles after the cold start")
    parser.add_argument("--margin", type=parse_duration, default=900.0, help="history before the window")
    parser.add_argument("--batch", type=int, default=500, help="workloads per promtool run")
    parser.add_argument("--cache-dir", default=str(DEFAULT_CACHE), help="default %(default)s")
    parser.add_argument(
        "--profile",
        default=None,
        help="write cProfiles of the cold start and the first steady cycle to PROFILE.cold and .steady",
    )
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="trace allocations (slower) and print live memory by source file after the steady cycles",
    )
    parser.add_argument(
        "--baseline",
        default=None,
        help="another checkout's operator/ directory: after the steady cycles, compare its steady reads "
        "with this checkout's against the same Prometheus (bench/steady_read.py)",
    )
    parser.add_argument("--baseline-runs", type=int, default=2, help="warm steady reads per side")
    parser.add_argument(
        "--steady-reads-only",
        action="store_true",
        help="with --baseline: compare the steady reads on the cached TSDB without the cycles before "
        "(no cold start, no operator figures)",
    )
    parser.add_argument(
        "--generate-only", action="store_true", help="build (or find) the cached TSDB, measure nothing"
    )
    parser.add_argument(
        "--total-shards",
        type=int,
        default=1,
        help="run this many shards, one process each, against the one Prometheus, then one process",
    )
    parser.add_argument(
        "--shards-only", action="store_true", help="with --total-shards: leave out the one-process run"
    )
    args = parser.parse_args()
    if args.workloads < 1 or args.batch < 1 or args.per_namespace < 1 or args.cycles < 0:
        parser.error("--workloads, --batch and --per-namespace must be positive, --cycles not negative")
    if args.total_shards < 1:
        parser.error("--total-shards must be positive")
    if args.steady_reads_only and not args.baseline:
        parser.error("--steady-reads-only compares with a --baseline")
    fleet_ = fleet(args.workloads, args.per_namespace)
    pods = sum(len(pod_contexts(s, 0.0, args.window)) for s in fleet_)
    start = END - args.window - args.margin
    end = END + max(args.cycles, HISTORY_CYCLES) * args.interval
    print(
        f"{args.workloads:,} workloads ({pods:,} pods) in {-(-args.workloads // args.per_namespace)} "
        f"namespaces; history {start:.0f}..{end:.0f} every {args.step:g} s",
        flush=True,
    )
    workdir = cached_tsdb(args, fleet_, start, end)
    if args.steady_reads_only:
        server = serve(workdir, bench_config(args))
        try:
            compare_steady_reads(args, server.url)
        finally:
            server.stop()
    elif not args.generate_only:
        if args.tracemalloc:
            tracemalloc.start()
        if args.total_shards > 1:
            shards = measure_shards(args, fleet_, workdir)
            if not args.shards_only:
                compare(shards, measure(args, fleet_, workdir), args.total_shards)
        else:
            measure(args, fleet_, workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
