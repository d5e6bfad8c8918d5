"""Memory of the streaming windows per series, and the cost of reading them, at N GPU workloads.

Feeds the real incremental path (`adapters.incremental.IncrementalReader` with the operator's family
definitions and `_ingest`) from a fake Prometheus that answers range queries with rows shaped like
Prometheus' (`{"metric": {...}, "values": [[t, "v"], ...]}`). The rows come from the simulator's
labelled scenario library (`sim.library.scenario_library`), written once over the window and turned
into what each family's PromQL returns: per-GPU DCGM gauges (busy/SM ratios from near-idle to busy,
memory in MiB, bytes per second, watts), counters as per-second rates summed by pod (CPU cores,
network and disk bytes), CPU throttled ratios and serving signals. N workloads are the library's
workloads repeated under new namespaces, pod names and GPU UUIDs, values jittered by a few percent.

The reader does its cold start over a full window (`--window`, default 1 h, at `--step` 60 s), then
`--cycles` steady cycles one step apart (so intervals have expired and every cache is in its steady
state). Printed:

* the process RSS before the reader (the generated history and imports) and after, and the RSS of a
  bare process that imports what the operator imports (kopf, kubernetes, the package): the floor;
* bytes per series by a walk over the store's objects (every object counted once), broken down into
  keys/labels, per-series objects and the windows' parts by the attribute or type that holds them
  (the interval records' sums and counts/bins; intervals, merged caches and DDSketch stores in the
  layout before the compact one);
* bytes per series traced by `tracemalloc` over a second run of `--traced-workloads` workloads (100;
  tracing makes the run ten times slower, and the bytes per series do not depend on their number);
* the time to read every series' `figures()` and `summary()` once, as the cycle does.

    .venv/bin/python bench/store_memory.py [--workloads 1000] [--window 1h] [--step 60] [--cycles 15]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import math
import subprocess
import sys
import time
import tracemalloc
from array import array
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from gpu_rightsizer.adapters.incremental import IncrementalReader, _source_families
from gpu_rightsizer.adapters.prom_answers import RangeSeries, matrix_of
from gpu_rightsizer.adapters.prometheus import GPU_KEYS, POD_KEYS
from gpu_rightsizer.config import parse_duration
from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.observation import Signal
from gpu_rightsizer.sim.backfill import generate
from gpu_rightsizer.sim.library import scenario_library

END = 1_767_225_600.0
FLOOR_IMPORTS = (
    "import kopf, kubernetes, prometheus_client, prometheus_api_client, gpu_rightsizer.cli, "
    "gpu_rightsizer.recommender.cycle, gpu_rightsizer.recommender.wiring, gpu_rightsizer.actuator.wiring, "
    "gpu_rightsizer.adapters.incremental"
)
#: Families whose values are 0..1 ratios (the jitter keeps them inside).
RATIO_FAMILIES = {f"gpu:{s.metric}" for s in mn.GPU_SIGNAL_SOURCES if s.signal in mn.RATIO_SIGNALS} | {
    "gpu:throttle",
    f"pod:{Signal.CPU_THROTTLED_RATIO.value}",
}

Labels = tuple[tuple[str, str], ...]
#: One base series: scenario index, family name, labels, values on the step grid (NaN: no sample).
BaseSeries = tuple[int, str, dict[str, str], "array[float]"]


def say(message: str) -> None:
    print(f"[store-memory {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def rss_mib() -> float:
    """This process's resident set now (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def floor_rss_mib() -> float:
    """RSS of a bare process that imports what the operator imports."""
    code = (
        f"{FLOOR_IMPORTS}\nimport pathlib\n"
        "print([l for l in pathlib.Path('/proc/self/status').read_text().splitlines() "
        "if l.startswith('VmRSS:')][0].split()[1])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.strip()) / 1024


# --- history: what each family's PromQL returns, from the simulator -------------------------------------
def _rates(points: dict[float, float], grid: list[float]) -> list[float]:
    """Per-second rate between consecutive grid samples (a drop is a reset), NaN where unknown."""
    out = [math.nan]
    for previous, current in itertools.pairwise(grid):
        a, b = points.get(previous), points.get(current)
        out.append(math.nan if a is None or b is None else (b - a if b >= a else b) / (current - previous))
    return out


def _combine(grouped: dict[Labels, list[list[float]]], how: str) -> Iterator[tuple[Labels, list[float]]]:
    """`sum`/`max`/`avg by (keys)` at every step."""
    for labels, rows in grouped.items():
        values = []
        for column in zip(*rows, strict=True):
            present = [v for v in column if not math.isnan(v)]
            if not present:
                values.append(math.nan)
            elif how == "max":
                values.append(max(present))
            elif how == "avg":
                values.append(sum(present) / len(present))
            else:
                values.append(sum(present))
        yield labels, values


def _scenario_history(scenario_index: int, scenario: Any, grid: list[float]) -> list[BaseSeries]:
    store = generate([scenario], grid[0], grid[-1], grid[1] - grid[0])
    raw: dict[str, dict[Labels, dict[float, float]]] = {}
    for _is_counter, by_name in store._families.values():
        raw.update(by_name)

    def by(metric: str, keys: tuple[str, ...], counter: bool = False) -> dict[Labels, list[list[float]]]:
        out: dict[Labels, list[list[float]]] = defaultdict(list)
        for labels, points in raw.get(metric, {}).items():
            named = {("hostname" if k == "Hostname" else k): v for k, v in labels}
            if named.get("container") == "POD":
                continue
            identity = tuple((k, named[k]) for k in keys if named.get(k))
            out[identity].append(_rates(points, grid) if counter else [points.get(t, math.nan) for t in grid])
        return out

    history: list[BaseSeries] = []

    def keep(family: str, rows: Iterator[tuple[Labels, list[float]]]) -> None:
        history.extend((scenario_index, family, dict(labels), array("d", values)) for labels, values in rows)

    for source in mn.GPU_SIGNAL_SOURCES:
        keep(f"gpu:{source.metric}", _combine(by(source.metric, GPU_KEYS), "max"))
    reasons = _combine(by(mn.DCGM_CLOCKS_EVENT_REASONS, GPU_KEYS), "max")
    keep(
        "gpu:throttle",
        ((k, [v if math.isnan(v) else float(int(v) & ~1 != 0) for v in vs]) for k, vs in reasons),
    )
    keep("xid", _combine(by(mn.DCGM_XID_ERRORS, GPU_KEYS), "max"))
    for source in (*mn.POD_SIGNAL_SOURCES, *mn.SERVING_SIGNAL_SOURCES):
        how = "avg" if source.signal is Signal.QUEUE_TIME_MS else source.combine
        keep(f"pod:{source.signal.value}", _combine(by(source.metric, POD_KEYS, source.counter), how))
    periods = dict(_combine(by(mn.CADVISOR_CPU_PERIODS, POD_KEYS, True), "sum"))
    ratios = []
    for labels, throttled in _combine(by(mn.CADVISOR_CPU_THROTTLED_PERIODS, POD_KEYS, True), "sum"):
        total = periods.get(labels, [math.nan] * len(grid))
        ratios.append((labels, [t / p if p > 0 else math.nan for t, p in zip(throttled, total, strict=True)]))
    keep(f"pod:{Signal.CPU_THROTTLED_RATIO.value}", iter(ratios))
    return history


def base_history(start: float, end: float, step: float) -> tuple[list[BaseSeries], int]:
    """The scenario library's series as the families' range queries answer them; and its workload count."""
    grid = [start + i * step for i in range(int((end - start) // step) + 1)]
    library = scenario_library("bench")
    history: list[BaseSeries] = []
    for index, scenario in enumerate(library):
        history.extend(_scenario_history(index, scenario, grid))
    return history, len(library)


class FakePrometheus:
    """Answers the families' range queries for N workloads: the library's, repeated under new names."""

    def __init__(
        self, history: list[BaseSeries], library_size: int, workloads: int, grid_start: float, step: float
    ):
        self.step = step
        self.grid_start = grid_start
        self.by_family: dict[str, list[tuple[int, dict[str, str], array[float]]]] = defaultdict(list)
        for replica in range(math.ceil(workloads / library_size)):
            for scenario_index, family, labels, values in history:
                if replica * library_size + scenario_index >= workloads:
                    continue
                renamed = dict(labels)
                renamed["namespace"] = f"team-{replica:04d}"
                if "UUID" in renamed:
                    renamed["UUID"] = f"{renamed['UUID']}-{replica:04d}"
                self.by_family[family].append((replica, renamed, values))
        self.series = sum(len(rows) for rows in self.by_family.values())

    def __call__(self, what: str, query: str, start: float, end: float, step: float) -> list[RangeSeries]:
        first = round((start - self.grid_start) / self.step)
        last = round((end - self.grid_start) / self.step)
        ratio = what in RATIO_FAMILIES
        rows = []
        for serial, (replica, labels, values) in enumerate(self.by_family.get(what, ())):
            points = []
            for index in range(max(0, first), min(len(values) - 1, last) + 1):
                value = values[index]
                if math.isnan(value):
                    continue
                if replica and value:  # a few percent of jitter, deterministic, zeros kept
                    value *= 1.0 + 0.04 * (
                        ((index * 2654435761 + replica * 40503 + serial * 97) % 1000) / 1000 - 0.5
                    )
                    if ratio:
                        value = min(value, 1.0)
                points.append([self.grid_start + index * self.step, repr(value)])
            if points:
                rows.append({"metric": dict(labels), "values": points})
        return matrix_of(rows)


def reader_for(fake: FakePrometheus, window: float, step: float) -> IncrementalReader:
    """The operator's reader with the families an `IncrementalSource` reads (the fake answers by name)."""
    return IncrementalReader(
        fake, window_seconds=window, step_seconds=step, families=_source_families(step, None)
    )


def feed(reader: IncrementalReader, cycles: int, step: float) -> float:
    """Cold start over the window, then steady cycles; the time of the last one."""
    started = time.perf_counter()
    reader.read(END)
    say(f"cold start: {len(reader.store):,} series in {time.perf_counter() - started:.1f} s")
    now = END
    for _ in range(cycles):
        now += step
        reader.read(now)
    say(f"{cycles} steady cycles done in {time.perf_counter() - started:.1f} s")
    return now


# --- where the bytes are ----------------------------------------------------------------------------
#: Subtrees by the attribute that holds them, and by the type of object at their root.
ATTRIBUTE_PARTS = {
    "_intervals": "intervals",
    "_closed": "merged caches",
    "_sums": "intervals: sums",
    "_counts": "intervals: counts, bins",
}
TYPE_PARTS = {"DenseStore": "sketch stores", "_Merged": "merged caches", "Interval": "intervals"}
PART_ORDER = ["keys/labels", "per-series objects", "intervals", "merged caches", "sketch stores"]
LEAVES = (str, bytes, bytearray, float, int, bool, array, type(None))


def _attributes(obj: object) -> list[tuple[str, object]]:
    names: list[str] = []
    for klass in type(obj).__mro__:
        names.extend(getattr(klass, "__slots__", ()))
    found = [(name, getattr(obj, name)) for name in names if hasattr(obj, name)]
    found.extend(vars(obj).items() if hasattr(obj, "__dict__") else ())
    return found


def _ours(obj: object) -> bool:
    module = type(obj).__module__
    return module.startswith(("gpu_rightsizer", "ddsketch"))


def breakdown(store: Any) -> dict[str, int]:
    """Bytes of every object the store holds, each counted once, by part."""
    parts: dict[str, int] = defaultdict(int)
    seen: set[int] = set()

    def walk(root: object, part: str) -> None:
        stack = [(root, part)]
        while stack:
            obj, where = stack.pop()
            if id(obj) in seen or isinstance(obj, (type, ModuleType)) or (callable(obj) and not _ours(obj)):
                continue
            seen.add(id(obj))
            where = TYPE_PARTS.get(type(obj).__name__, where)
            parts[where] += sys.getsizeof(obj)
            if isinstance(obj, LEAVES):
                continue
            if isinstance(obj, (tuple, list, set, frozenset)):
                stack.extend((item, where) for item in obj)
            elif isinstance(obj, dict):
                stack.extend((item, where) for pair in obj.items() for item in pair)
            elif _ours(obj):
                if hasattr(obj, "__dict__"):
                    parts[where] += sys.getsizeof(vars(obj))
                    seen.add(id(vars(obj)))
                stack.extend((value, ATTRIBUTE_PARTS.get(name, where)) for name, value in _attributes(obj))

    parts["keys/labels"] += sys.getsizeof(store.series)
    seen.add(id(store.series))
    for key, window in store.series.items():
        walk(key, "keys/labels")
        walk(window, "per-series objects")
    return dict(parts)


def read_timing(store: Any, now: float) -> tuple[float, float]:
    """Best of five: seconds to read every series' figures(), and summaries() (expiry included)."""
    figures, summaries = math.inf, math.inf
    for _ in range(5):
        started = time.perf_counter()
        for window in store.series.values():
            window.figures(now)
        figures = min(figures, time.perf_counter() - started)
        started = time.perf_counter()
        store.summaries(now)
        summaries = min(summaries, time.perf_counter() - started)
    return figures, summaries


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--window", default="1h")
    parser.add_argument("--step", type=float, default=60.0)
    parser.add_argument("--cycles", type=int, default=15, help="steady cycles after the cold start")
    parser.add_argument(
        "--traced-workloads",
        type=int,
        default=100,
        help="workloads of the second run under tracemalloc (ten times slower); 0 skips it",
    )
    args = parser.parse_args()
    if args.workloads < 1 or args.step <= 0 or args.cycles < 0:
        parser.error("--workloads must be at least 1, --step positive and --cycles not negative")
    window = parse_duration(args.window)
    step = args.step
    grid_start = math.floor((END - window - step) / step) * step
    started = time.perf_counter()
    history, library_size = base_history(grid_start, END + args.cycles * step, step)
    fake = FakePrometheus(history, library_size, args.workloads, grid_start, step)
    say(
        f"history of {library_size} workloads in {time.perf_counter() - started:.0f} s; {fake.series:,} series"
    )
    floor = floor_rss_mib()
    gc.collect()
    before = rss_mib()

    reader = reader_for(fake, window, step)
    now = feed(reader, args.cycles, step)
    gc.collect()
    after = rss_mib()
    store = reader.store
    count = len(store)
    say("walking the store")
    parts = breakdown(store)
    say("timing the reads")
    figures, summaries = read_timing(store, now)
    total = sum(parts.values())

    print(
        f"\n{args.workloads:,} workloads, {count:,} series, window {args.window} at {step:g} s, {args.cycles} steady cycles"
    )
    print(f"  bare process importing what the operator imports: {floor:8.1f} MiB RSS (the floor)")
    print(f"  this process before the reader (imports, history):  {before:8.1f} MiB RSS")
    print(f"  this process after the reader:                      {after:8.1f} MiB RSS")
    print(
        f"  the reader's share:                                 {after - before:8.1f} MiB "
        f"= {(after - before) * 2**20 / count:,.0f} B/series"
    )
    print(
        f"  objects of the store (walk):                        {total / 2**20:8.1f} MiB = {total / count:,.0f} B/series"
    )
    for name in sorted(
        parts, key=lambda part: PART_ORDER.index(part) if part in PART_ORDER else len(PART_ORDER)
    ):
        print(f"    {name:24} {parts[name] / count:>8,.0f} B/series")
    print(f"  read every series' figures(): {figures:6.3f} s ({figures / count * 1e6:5.1f} us/series)")
    print(f"  StreamingStore.summaries():   {summaries:6.3f} s ({summaries / count * 1e6:5.1f} us/series)")
    sys.stdout.flush()

    if args.traced_workloads > 0:
        del reader, store
        gc.collect()
        traced_workloads = min(args.workloads, args.traced_workloads)
        fake = FakePrometheus(history, library_size, traced_workloads, grid_start, step)
        say(f"traced run of {traced_workloads} workloads")
        tracemalloc.start()
        baseline = tracemalloc.get_traced_memory()[0]
        traced_reader = reader_for(fake, window, step)
        feed(traced_reader, args.cycles, step)
        gc.collect()
        traced = tracemalloc.get_traced_memory()[0] - baseline
        tracemalloc.stop()
        print(
            f"  tracemalloc ({traced_workloads} workloads), live after the run: {traced / 2**20:8.1f} MiB = {traced / len(traced_reader.store):,.0f} B/series"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
