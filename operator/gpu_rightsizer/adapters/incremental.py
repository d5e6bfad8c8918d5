"""Incremental Prometheus reads: each cycle asks only for the samples since the previous one.

Why: the full-window read (`prometheus.PrometheusSource.read`) makes Prometheus re-evaluate every
`*_over_time` subquery over the whole window for every container each cycle, so its work grows with
pods × window length × cycles. Here every signal family is one range query over `[last_end, now]` at
the sample step, limited to the pods that request a GPU (a join on kube-state-metrics' resource
requests), and the samples go into `logic.streaming` windows in memory.

After a start there is no `last_end`: the window is backfilled in bounded chunks, time slice by time
slice (at most `slice_seconds` each, and never more than Prometheus' 11,000 points per series). A
chunk that Prometheus refuses as too big (timeout, too many samples) is split by namespace first (for
pod families), then in halves of time, so each query stays under the timeout. Progress goes to a
callback after every chunk.

A reader restored from saved state (`IncrementalReader.restore`) backfills only the gap between the
end of its saved reads and now, the same way; state older than the window is refused (the gap would
be a hole in the window), so that start is a cold one.

The GPU gauge and XID families are sent as bare selectors (`Family.raw_series`): the reader folds the
label variants and keeps, per device identity and time, the largest value, which is what `max by` of
the folded, sentinel-filtered selector gives, while Prometheus evaluates no expression node per series
and step (a third of its CPU for those families, docs/scaling.md). The throttle family sends its
clock-event bitmasks bare too, beside the violation counters' share, and the reader works out the
flags (`Family.bitmasks`, `prometheus.throttle_raw_expr`). Once the coarse series have read
their window, `range:cpu` and `range:busy` are taken from the CPU, engine-activity and utilisation
family answers instead of queries of their own (`IncrementalSource.derive_coarse`).

The counter families (the cAdvisor rates and the CPU throttled ratio, `CounterRead`) are read as raw
samples, one instant query of `metric[interval + rate window]` each, and the reader computes what
their expression gives: `max(rate(), deriv())` per series at each step (`logic.counters`), the
per-pod sum, and the join on the pods that request a GPU at that step (one range query of those
pods per span, shared by the counter families). Prometheus then only reads the samples, once, where
the range query evaluated three functions over every series at every step.

Everything here is driven through one `RangeQuery` callable, the signature of
`PrometheusSource.range`, so tests run on recorded answers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import sys
import threading
import time
from array import array
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from gpu_rightsizer.adapters import gpu_targets
from gpu_rightsizer.adapters.gpu_facts import FACT_LABELS, held_in
from gpu_rightsizer.adapters.prom_answers import AnswerError, RangeSeries, SamplePairs, samples
from gpu_rightsizer.adapters.prometheus import (
    _KSM_METRICS,
    _SENTINEL_FILTER,
    GPU_KEYS,
    LABEL_FOLDS,
    MAX_NAMESPACE_REGEX,
    POD_KEYS,
    KubeFact,
    PodSeries,
    PrometheusSource,
    PrometheusSourceError,
    Summary,
    _gauge_by_pod,
    _promql_regex_literal,
    _rate_by_pod,
    _throttle_expr,
    _value,
    device_id_of,
    fold_labels,
    folded_labels,
    in_namespaces,
    pressure_by_pod,
    series_selected,
    serving_exprs,
    summary_from_figures,
    throttle_raw_expr,
    without_folds,
)
from gpu_rightsizer.adapters.source import CycleReport, rate_window_seconds
from gpu_rightsizer.logic.counters import rates_at
from gpu_rightsizer.logic.stats import DEFAULT_SAWTOOTH_FLOOR, is_missing, throttle_flag
from gpu_rightsizer.logic.streaming import (
    DEFAULT_SLOTS,
    SeriesWindow,
    StateError,
    StreamingStore,
    dump_store,
    load_store,
)
from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.observation import Signal, SignalStats, WorkloadWindow
from gpu_rightsizer.model.shards import ShardSlice

LOG = logging.getLogger(__name__)

#: Pods whose windows a cycle assembles, analyses and writes at a time (whole namespaces: a namespace
#: with more is a chunk of its own).
CHUNK_PODS = 250
#: Prometheus refuses range queries of more points per series than this (`query_range`).
MAX_POINTS_PER_SERIES = 11_000
#: Pods that request an NVIDIA GPU, MIG slice or share (`nvidia_com_gpu` from kube-state-metrics v2,
#: the unsanitised names from newer releases).
GPU_REQUEST_SELECTOR = f'{mn.KSM_POD_REQUESTS}{{resource=~"nvidia.com.(gpu|mig).*"{{scope}}}}'
#: Messages with which Prometheus (or the client's timeout) says a query was too big to answer.
TOO_BIG = re.compile(r"did not answer within|timed? ?out|too many samples|exceeded maximum resolution", re.I)

#: Label variants folded onto `namespace` (`LABEL_FOLDS`).
NAMESPACE_FOLDS = tuple(source for target, source in LABEL_FOLDS if target == "namespace")
#: The application containers of a cAdvisor selector (not the pod's cgroup, not the pause container).
APP_CONTAINERS = '{container!="",container!="POD"}'
Labels = tuple[tuple[str, str], ...]
#: Label sets shared before the first look for those no longer held (`LabelTable`); after it, twice
#: as many as are still held.
MAX_SHARED_LABEL_SETS = 200_000
SeriesId = tuple[str, Labels]
#: One series of an answer as the windows take it: (identity, sample times, values).
Decoded = tuple[Labels, "array[float]", "array[float]"]
#: The signals whose sawtooth score a rule reads (the GPU's busy series, `figures.busy_sawtooth`): only
#: their windows keep the steps between samples it is computed from.
SAWTOOTH_SIGNALS = frozenset({Signal.GR_ENGINE_ACTIVE, Signal.GPU_UTIL}) & mn.RATIO_SIGNALS
#: Signals no rule reads (the full read still shows them, e.g. `analyze`): the streaming windows leave
#: them out, which is about a seventh of a fleet's series. Their only reader on the full read is the
#: data check (`rules.insufficient_data`: finite, ordered, not negative), which a streaming window
#: passes by construction (missing values are dropped, quantiles are clipped to the exact extremes).
UNREAD_SIGNALS = frozenset(
    {
        Signal.FS_WRITE_BYTES_PER_S,
        Signal.NET_TX_BYTES_PER_S,
        Signal.PROCESSES_PINNED,
        Signal.POWER_WATTS,
        Signal.GPU_TEMP_C,
    }
)


class RangeQuery(Protocol):
    """`PrometheusSource.range_series`: (what, query, start, end, step) → the answer's series."""

    def __call__(
        self, what: str, query: str, start: float, end: float, step: float
    ) -> Sequence[RangeSeries]: ...


class MatrixQuery(Protocol):
    """`PrometheusSource.matrix_series`: (what, range-selector query, at) → the raw samples' series."""

    def __call__(self, what: str, query: str, at: float) -> Sequence[RangeSeries]: ...


@dataclass(frozen=True)
class CounterAnswer:
    """A counter family's chunk as fetched: the raw samples and the GPU pods at each step."""

    raw: Sequence[RangeSeries]
    gpu_pods: Sequence[RangeSeries]
    grid: tuple[float, ...]


def gpu_pods(namespace: str | None, within: Sequence[str] | None = None) -> str:
    """Instant vector of (namespace, pod) for the pods that request a GPU, optionally in one namespace
    and (a shard's slice) among `within` namespaces: the join then keeps only those pods' series."""
    scope = f',namespace="{_escape(namespace)}"' if namespace else ""
    if within is not None:
        scope += f',namespace=~"{namespace_alternation(within)}"'
    return f"(max by (namespace, pod) ({GPU_REQUEST_SELECTOR.replace('{scope}', scope)}) > 0)"


def namespace_alternation(namespaces: Sequence[str]) -> str:
    """A PromQL regex (inside a double-quoted string) that matches exactly these namespaces; none at
    all when empty (a namespace is never the empty string)."""
    return "|".join(_promql_regex_literal(namespace) for namespace in sorted(set(namespaces)))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


class LabelTable:
    """The shared label sets, their (key, value) pairs and the identities found from answers.

    Why: a device's labels come back in every family's answer as new strings, and kept per series
    they cost more than its statistics. A table holds one copy of each label set, and a set is made
    of shared pairs: at 1,000 workloads 20,740 label sets held 117,778 pairs but only 7,246
    distinct ones (and 10,000 have more sets than `MAX_SHARED_LABEL_SETS`). When the sets pass
    `limit`, the entries nothing else holds (pods and devices gone) are dropped and the limit
    becomes twice what is left. Those held by a window stay: clearing the whole table made every
    later answer a new copy of a set a window already holds, and with more sets in use than the
    limit that happened every cycle.
    """

    #: References to an entry that nothing outside the table holds, as `prune` counts them: the
    #: dict's key and value (one object), the snapshot list, the loop variable, `getrefcount`'s own.
    UNHELD_REFERENCES = 5

    def __init__(self, limit: int) -> None:
        self.minimum_limit = limit
        self.limit = limit
        self.sets: dict[Labels, Labels] = {}
        self.pairs: dict[tuple[str, str], tuple[str, str]] = {}
        #: (keys, their values in a series' labels, None where absent) → that identity (`identity_of`).
        self.identities: dict[tuple[tuple[str, ...], tuple[str | None, ...]], Labels] = {}

    def shared(self, labels: Labels) -> Labels:
        """The one copy of `labels` (added when new, its pairs and strings shared)."""
        found = self.sets.get(labels)
        if found is None:
            if len(self.sets) >= self.limit:
                self.prune()
            found = tuple(self._pair(key, value) for key, value in labels)
            self.sets[found] = found
        return found

    def _pair(self, key: str, value: str) -> tuple[str, str]:
        found = self.pairs.get((key, value))
        if found is None:
            found = (sys.intern(key), sys.intern(value))
            self.pairs[found] = found
        return found

    def prune(self) -> int:
        """Drop the identities, then the label sets and pairs that nothing else holds; how many sets
        were dropped. The identities are a lookup cache: the next answers find them again."""
        self.identities = {}
        before = len(self.sets)
        self.sets = {labels: labels for labels in self._held(list(self.sets))}
        self.pairs = {pair: pair for pair in self._held(list(self.pairs))}
        self.limit = max(self.minimum_limit, 2 * len(self.sets))
        return before - len(self.sets)

    def _held(self, entries: list[Any]) -> list[Any]:
        return [entry for entry in entries if sys.getrefcount(entry) > self.UNHELD_REFERENCES]


#: Every reader's label sets (one process reads one cluster's series: the sets are shared by all).
LABELS = LabelTable(MAX_SHARED_LABEL_SETS)


def shared_labels(pairs: Iterable[tuple[str, str]]) -> Labels:
    """One copy of a label set, of its pairs and of its strings for every family that holds the same
    series (`LabelTable`)."""
    return LABELS.shared(tuple(pairs))


def identity_of(labels: Mapping[str, str], keys: Sequence[str]) -> Labels:
    """A series' identity: its non-empty labels among `keys`, shared (`shared_labels`).

    Every answer brings the same identities back as new strings, once a family and a cycle; the
    identity is looked up by its values among `keys` (one C-level pass), and the label set is built
    only for an identity not seen before. The lookup keeps the shared strings, not the answer's."""
    names = keys if isinstance(keys, tuple) else tuple(keys)
    values = tuple(map(labels.get, names))
    found = LABELS.identities.get((names, values))
    if found is None:
        found = shared_labels((key, value) for key, value in zip(names, values, strict=True) if value)
        identities = LABELS.identities  # read after: a prune in `shared_labels` makes a new one
        if len(identities) >= LABELS.limit:
            identities.clear()
        shared = dict(found)  # the key keeps the shared strings, not the answer's
        identities[names, tuple(shared.get(key, value) for key, value in zip(names, values, strict=True))] = (
            found
        )
    return found


@dataclass(frozen=True)
class CounterRead:
    """How the reader computes a counter family from the raw samples of `selector`, as its PromQL
    expression would: `max(rate(), deriv())` of each series over the rate window
    (`logic.counters.rates_at`, `prometheus.counter_rate`), folded labels, then per pod:

    - "sum": the series summed (`sum by (namespace, pod)`, `_rate_by_pod`);
    - "interface": the largest per interface, summed over interfaces (the network counters, which
      every container of a pod reports for the pod's one network namespace);
    - "ratio": the sum of the `metrics[0]` series over the sum of the `metrics[1]` series, where
      that is above zero (the CPU throttled ratio);
    - "pressure": the largest `metrics[0]` series, or where a pod has none at a step the largest
      `metrics[1]` series (`pressure_by_pod`: waiting, else stalled).

    Every pod is kept only at the steps it requests a GPU, the join the expression ends with.
    Prometheus then only reads the samples, once: a range query of the expression evaluates three
    functions over every series at every step, most of a steady read's CPU (docs/scaling.md)."""

    selector: str
    combine: str = "sum"
    metrics: tuple[str, str] | None = None


#: How each `CounterRead.combine` groups a pod's series into parts (by a label), and which merge the
#: series of a part at a step by their largest value (the others sum them).
_PART_LABEL = {"sum": None, "interface": "interface", "ratio": "__name__", "pressure": "__name__"}
_WITHIN_PART_MAX = frozenset({"interface", "pressure"})


@dataclass(frozen=True)
class Family:
    """One signal family: one range query per chunk, one streaming window per series it returns."""

    name: str
    expression: str
    signal: Signal
    keys: tuple[str, ...]
    #: Exported value × scale = the signal's unit; samples are kept as exported (the assembly scales).
    scale: float = 1.0
    #: In the exported unit (the signal's floor / scale).
    activity_floor: float | None = None
    #: Pod families are joined on GPU pods and can be split by namespace; device families are not
    #: (their number follows the GPUs, and board-level series have no pod or namespace).
    per_pod: bool = False
    #: The expression is a bare selector whose raw series the reader folds (`folded_labels`) and
    #: merges per identity, keeping the largest value at each time: what `max by (keys)` of the folded
    #: selector gives (`_gpu_expr`), at a third of Prometheus' CPU (docs/scaling.md). Missing values
    #: (NaN, DCGM blanks) are dropped before the merge, as the sentinel filter drops them in PromQL.
    raw_series: bool = False
    #: A counter family the reader computes from raw samples when it can fetch them (`CounterRead`);
    #: `expression` is then what those samples give, kept for the label folds, the fingerprint and
    #: readers without raw fetches.
    counter: CounterRead | None = None
    #: Only the window's largest value is read (the XID codes): its windows keep no steps between
    #: samples, whatever `signal` says.
    largest_only: bool = False
    #: With `raw_series`: raw series of these metric names are clock-event bitmasks, read as 1 where a
    #: throttling bit is set, else 0 (`stats.throttle_flag`), before the merge (`throttle_raw_expr`).
    bitmasks: tuple[str, ...] = ()
    #: The whole PromQL form of a family whose `expression` leaves part of the work to the reader
    #: (`bitmasks`): what a recording rule records, since a rule cannot run the reader.
    whole_expression: str | None = None

    def query(self, namespace: str | None, within: Sequence[str] | None = None) -> str:
        """The range query for one chunk: GPU pods only for pod families, one namespace when split, a
        shard's namespaces when `within` is given (in the join, and in the cAdvisor selectors, so
        Prometheus selects only their series: `in_namespaces`). A shard's device families read its
        own pods' series and the board-level ones (`gpu_facts.held_in`): who else shares a GPU comes
        from the cluster-wide GPU facts, the idle floors of GPUs no pod holds from their own instant
        queries."""
        if not self.per_pod:
            return self.expression if within is None else held_in(self.expression, within)
        expression = self.expression if within is None else in_namespaces(self.expression, within)
        return f"({expression}) and on (namespace, pod) {gpu_pods(namespace, within)}"

    def rule_query(self) -> str:
        """What a recording rule of this family records: its cluster-wide query, in the whole PromQL
        form where the reader does part of the work."""
        whole = self if self.whole_expression is None else replace(self, expression=self.whole_expression)
        return whole.query(None)


def _raw_floor(signal: Signal, scale: float) -> float | None:
    floor = mn.ACTIVITY_FLOORS.get(signal)
    return floor / scale if floor is not None else None


def default_families(step_seconds: float, recorded: Mapping[str, str] | None = None) -> list[Family]:
    """The GPU, throttle, cAdvisor and serving families the engine reads, as instant-vector expressions.

    `recorded` maps a family's name to the recorded series that stand for its expression
    (`recording_rules.detect`); those families read that selector instead."""
    rate_window = rate_window_seconds(step_seconds)
    families = [
        Family(
            name=f"gpu:{source.metric}",
            expression=source.metric,
            signal=source.signal,
            keys=GPU_KEYS,
            scale=source.scale,
            activity_floor=_raw_floor(source.signal, source.scale),
            raw_series=True,
        )
        for source in mn.GPU_SIGNAL_SOURCES
    ]
    families.append(
        Family(
            name="gpu:throttle",
            expression=throttle_raw_expr(rate_window),
            signal=Signal.THROTTLE_FRACTION,
            keys=GPU_KEYS,
            activity_floor=0.0,
            raw_series=True,
            bitmasks=mn.DCGM_CLOCK_EVENT_METRICS,
            whole_expression=_throttle_expr("", rate_window),
        )
    )
    for source in mn.POD_SIGNAL_SOURCES:
        counter = None
        if source.counter:
            expression = _rate_by_pod(source.metric, rate_window, True)("")
            network = source.metric in mn.CADVISOR_NETWORK_METRICS
            counter = CounterRead(
                source.metric if network else f"{source.metric}{APP_CONTAINERS}",
                "interface" if network else "sum",
            )
        else:
            expression = _gauge_by_pod(f"{source.metric}{APP_CONTAINERS}", source.combine)("")
        families.append(
            Family(
                name=f"pod:{source.signal.value}",
                expression=expression,
                signal=source.signal,
                keys=POD_KEYS,
                activity_floor=mn.ACTIVITY_FLOORS.get(source.signal),
                per_pod=True,
                counter=counter,
            )
        )
    families.extend(
        Family(
            name=f"pod:{pressure.signal.value}",
            expression=pressure_by_pod(pressure, rate_window)(""),
            signal=pressure.signal,
            keys=POD_KEYS,
            per_pod=True,
            counter=CounterRead(
                f'{{__name__=~"{pressure.waiting}|{pressure.stalled}",{APP_CONTAINERS[1:]}',
                "pressure",
                (pressure.waiting, pressure.stalled),
            ),
        )
        for pressure in mn.PRESSURE_SOURCES
    )
    throttled = _rate_by_pod(mn.CADVISOR_CPU_THROTTLED_PERIODS, rate_window, True)("")
    periods = _rate_by_pod(mn.CADVISOR_CPU_PERIODS, rate_window, True)("")
    families.append(
        Family(
            name=f"pod:{Signal.CPU_THROTTLED_RATIO.value}",
            expression=f"({throttled}) / ({periods} > 0)",
            signal=Signal.CPU_THROTTLED_RATIO,
            keys=POD_KEYS,
            activity_floor=0.0,
            per_pod=True,
            counter=CounterRead(
                f'{{__name__=~"{mn.CADVISOR_CPU_THROTTLED_PERIODS}|{mn.CADVISOR_CPU_PERIODS}",'
                f"{APP_CONTAINERS[1:]}",
                "ratio",
                (mn.CADVISOR_CPU_THROTTLED_PERIODS, mn.CADVISOR_CPU_PERIODS),
            ),
        )
    )
    for signal, build in serving_exprs(rate_window).items():
        families.append(
            Family(
                name=f"pod:{signal.value}",
                expression=build(""),
                signal=signal,
                keys=POD_KEYS,
                activity_floor=mn.ACTIVITY_FLOORS.get(signal),
                per_pod=True,
            )
        )
    if recorded:
        families = [
            replace(family, expression=recorded[family.name], counter=None)
            if family.name in recorded
            else family
            for family in families
        ]
    return families


@dataclass(frozen=True)
class Chunk:
    """One range query: a family over `[start, end]`, cluster-wide or in one namespace."""

    family: Family
    start: float
    end: float
    namespace: str | None = None

    def describe(self) -> str:
        scope = f" in {self.namespace}" if self.namespace else ""
        return f"{self.family.name}{scope} {self.start:.0f}..{self.end:.0f}"


def align(start: float, end: float, step: float) -> tuple[float, float] | None:
    """`[start, end]` on the step grid (so successive reads never return one instant twice); None if empty."""
    first = math.ceil(start / step) * step
    last = math.floor(end / step) * step
    return (first, last) if last >= first else None


def plan(
    families: Sequence[Family],
    *,
    now: float,
    last_end: float | None,
    window_seconds: float,
    step_seconds: float,
    slice_seconds: float,
) -> list[Chunk]:
    """The chunks of one cycle: `(last_end, now]` in one piece, or the whole window in time slices.

    A read whose `last_end` is unknown or older than the window is a cold start and reads the window
    slice by slice (each spanning at most `slice_seconds`, ends included, and `MAX_POINTS_PER_SERIES`
    points), so a window as long as a slice is one query per family, not a slice and a one-point rest.
    """
    if last_end is None or last_end < now - window_seconds:
        start = now - window_seconds
    else:
        start = last_end + step_seconds
    span = align(start, now, step_seconds)
    if span is None:
        return []
    first, last = span
    longest = max(step_seconds, min(slice_seconds, (MAX_POINTS_PER_SERIES - 1) * step_seconds))
    longest = math.floor(longest / step_seconds) * step_seconds
    chunks: list[Chunk] = []
    slice_start = first
    while slice_start <= last:
        slice_end = min(last, slice_start + longest)  # `longest` apart: at most MAX_POINTS_PER_SERIES points
        chunks.extend(Chunk(family, slice_start, slice_end) for family in families)
        slice_start = slice_end + step_seconds
    return chunks


def split(chunk: Chunk, namespaces: Sequence[str], step_seconds: float) -> list[Chunk] | None:
    """Smaller chunks for one that was too big: by namespace first (pod families), then halves of time."""
    if chunk.family.per_pod and chunk.namespace is None and len(namespaces) > 1:
        return [Chunk(chunk.family, chunk.start, chunk.end, namespace) for namespace in namespaces]
    steps = round((chunk.end - chunk.start) / step_seconds)
    if steps < 1:
        return None
    middle = chunk.start + (steps // 2) * step_seconds
    return [
        Chunk(chunk.family, chunk.start, middle, chunk.namespace),
        Chunk(chunk.family, middle + step_seconds, chunk.end, chunk.namespace),
    ]


Progress = Callable[[CycleReport, Chunk], None]


class IncrementalReader:
    """Keeps the streaming windows of every GPU series up to date, one interval per cycle.

    After a start the window is backfilled over as many cycles as it takes, `budget_seconds` of
    queries per cycle at most, so the cycle keeps publishing its progress; once the backfill is done,
    each cycle reads `(last_end, now]`.
    """

    def __init__(
        self,
        query: RangeQuery,
        *,
        window_seconds: float,
        step_seconds: float,
        families: Sequence[Family] | None = None,
        slice_seconds: float = 3600.0,
        slots: int = DEFAULT_SLOTS,
        namespaces: Callable[[], Sequence[str]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        concurrency: int = 4,
        matrix_query: MatrixQuery | None = None,
    ) -> None:
        self.query = query
        #: Raw samples for the counter families (`CounterRead`); without it they send their expression.
        self.matrix_query = matrix_query
        self._gpu_pods_answers: dict[tuple[str | None, float, float], Future[Sequence[RangeSeries]]] = {}
        self._gpu_pods_lock = threading.Lock()
        #: Namespaces with GPU pods, listed once a read when a chunk must be split by namespace.
        self._split_namespaces: list[str] | None = None
        self.concurrency = max(1, concurrency)
        self.window_seconds = window_seconds
        self.step_seconds = step_seconds
        self.families = list(families) if families is not None else default_families(step_seconds)
        self.slice_seconds = slice_seconds
        self.namespaces = namespaces or (lambda: ())
        self.clock = clock
        self.store: StreamingStore[SeriesId] = StreamingStore(window_seconds, slots=slots)
        #: End of the last interval read completely; None until the backfill finished.
        self.last_end: float | None = None
        self._backlog: list[Chunk] = []  # backfill chunks still to read, next one last
        self._backfill_end = 0.0
        self._backfill_done = 0
        self._backfill_total = 0
        #: End of the reads a restored store holds: the backfill starts after it, not a window back.
        self._resume_from: float | None = None
        #: Series the saved state held when it was loaded (0 after a cold start).
        self.restored_series = 0
        #: A shard's namespaces: pod families read only these (None: every namespace).
        self.within: tuple[str, ...] | None = None
        #: Family name → called with each answer's series as they went into the windows (the coarse
        #: series that are the same points, `IncrementalSource.derive_coarse`).
        self.taps: dict[str, Callable[[Sequence[Decoded]], object]] = {}

    @property
    def complete(self) -> bool:
        """Whether the window has been read completely since the start (the backfill is done)."""
        return self.last_end is not None

    def save(self, fingerprint: str) -> bytes | None:
        """The windows and where the reads got to, as `logic.streaming.dump_store` bytes; None until the
        window is complete (a partly backfilled store would resume with a hole)."""
        if self.last_end is None:
            return None
        return dump_store(
            self.store,
            step_seconds=self.step_seconds,
            fingerprint=fingerprint,
            key_to_json=lambda key: [key[0], [list(pair) for pair in key[1]]],
            meta={"last_end": self.last_end},
        )

    def restore(self, data: bytes, *, now: float, fingerprint: str) -> float:
        """Carry on from saved state: the next reads backfill only `(saved last_end, now]`.

        Returns the saved `last_end`. Raises `StateError` (and changes nothing) when the state cannot
        be used: unreadable, saved under other settings or families, or ending more than a window
        before `now` (the gap would leave a hole in the window, so the start must be cold).
        """
        if self.last_end is not None or self._backlog:
            raise StateError("the reads have already started")
        store: StreamingStore[SeriesId]
        store, meta = load_store(
            data,
            window_seconds=self.window_seconds,
            slots=self.store.slots,
            step_seconds=self.step_seconds,
            fingerprint=fingerprint,
            key_from_json=_series_id,
        )
        last_end = meta.get("last_end")
        if not isinstance(last_end, int | float) or not math.isfinite(last_end):
            raise StateError(f"no usable end of reads in the saved state: {last_end!r}")
        if last_end < now - self.window_seconds:
            raise StateError(
                f"read up to {now - last_end:.0f} s ago, more than the {self.window_seconds:g} s window"
            )
        if last_end > now + self.step_seconds:
            raise StateError(f"saved reads end {last_end - now:.0f} s in the future (clock moved back?)")
        store.expire(now)
        self.store = store
        self.restored_series = len(store)
        self._resume_from = float(last_end)
        return float(last_end)

    def read(
        self, now: float, progress: Progress | None = None, budget_seconds: float | None = None
    ) -> CycleReport:
        """Fetch `(last_end, now]`, or the next backfill chunks, into the streaming windows.

        A steady chunk that fails even after splitting leaves `last_end` where it was, so the next cycle
        asks for the same interval again (the windows skip the samples they already hold). A backfill
        chunk that fails is reported and left out: the window has a gap, the backfill goes on.
        """
        started = self.clock()
        if self.last_end is None and not self._backlog:
            chunks = plan(
                self.families,
                now=now,
                last_end=self._resume_from,
                window_seconds=self.window_seconds,
                step_seconds=self.step_seconds,
                slice_seconds=self.slice_seconds,
            )
            self._backlog = list(reversed(chunks))
            self._backfill_end = max((chunk.end for chunk in chunks), default=now)
            self._backfill_done, self._backfill_total = 0, len(chunks)
        backfilling = self.last_end is None
        report = CycleReport(backfilling=backfilling, restored_series=self.restored_series)
        if backfilling:
            pending = self._backlog
        else:
            assert self.last_end is not None
            steady = plan(
                self.families,
                now=now,
                last_end=self.last_end,
                window_seconds=self.window_seconds,
                step_seconds=self.step_seconds,
                slice_seconds=self.slice_seconds,
            )
            pending = list(reversed(steady))
        self._split_namespaces = None
        self._gpu_pods_answers = {}
        in_flight: dict[Future[tuple[Sequence[RangeSeries] | CounterAnswer, float]], Chunk] = {}
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="gpurs-read") as pool:
            while pending or in_flight:
                over_budget = (
                    backfilling
                    and budget_seconds is not None
                    and report.queries > 0
                    and self.clock() - started > budget_seconds
                )
                # up to `concurrency` queries in flight all the time, so Prometheus answers the next
                # ones while this thread ingests one; never two of one family (each family's samples
                # must arrive in time order, and a chunk that is split goes back before the next)
                while not over_budget and len(in_flight) < self.concurrency:
                    chunk = _next_chunk(pending, {sent.family.name for sent in in_flight.values()})
                    if chunk is None:
                        break
                    in_flight[pool.submit(self._fetch, chunk)] = chunk
                if not in_flight:
                    break
                # the oldest first, so the windows (and the statuses' fields) fill in one order every time
                answer = next(iter(in_flight))
                chunk = in_flight.pop(answer)
                pending.extend(reversed(self._settle(report, chunk, answer, backfilling, progress)))
        report.queries += len(self._gpu_pods_answers)
        self._gpu_pods_answers = {}
        if backfilling:
            report.backfill_done, report.backfill_total = self._backfill_done, self._backfill_total
            if not self._backlog:
                self.last_end = self._backfill_end
                self._resume_from = None
                LOG.info("backfill done: %d chunks, %d failed", self._backfill_total, report.chunks_failed)
        elif report.chunks_failed == 0 and self.last_end is not None:
            span = align(self.last_end + self.step_seconds, now, self.step_seconds)
            if span is not None:
                self.last_end = span[1]
        self.store.expire(now)
        return report

    def _settle(
        self,
        report: CycleReport,
        chunk: Chunk,
        answer: Future[tuple[Sequence[RangeSeries] | CounterAnswer, float]],
        backfilling: bool,
        progress: Progress | None,
    ) -> list[Chunk]:
        """One chunk's answer into the windows and the report; the smaller chunks to read instead
        when Prometheus found it too big (`split`), else none."""
        report.queries += 1
        try:
            rows, seconds = answer.result()
        except PrometheusSourceError as error:
            if TOO_BIG.search(str(error)):
                if self._split_namespaces is None:
                    self._split_namespaces = list(self.namespaces())
                smaller = split(chunk, self._split_namespaces, self.step_seconds)
                if smaller:
                    LOG.info(
                        "%s was too big for Prometheus; reading it in %d parts",
                        chunk.describe(),
                        len(smaller),
                    )
                    if backfilling:
                        self._backfill_total += len(smaller) - 1
                    return smaller
            self._failed(report, chunk, error, backfilling)
            return []
        report.timed(chunk.family.name, seconds)
        try:
            report.samples += self._ingest(chunk.family, rows)
        except PrometheusSourceError as error:  # malformed: nothing of it was added
            self._failed(report, chunk, error, backfilling)
            return []
        report.chunks_done += 1
        if backfilling:
            self._backfill_done += 1
        report.backfill_done, report.backfill_total = self._backfill_done, self._backfill_total
        if progress is not None:
            progress(report, chunk)
        return []

    def _failed(self, report: CycleReport, chunk: Chunk, error: Exception, backfilling: bool) -> None:
        """A chunk left out of this cycle: counted and reported (a steady one is asked for again)."""
        report.chunks_failed += 1
        report.errors.append(f"{chunk.describe()}: {error}")
        LOG.debug("incremental read of %s failed: %s", chunk.describe(), error)
        if backfilling:
            self._backfill_done += 1

    def _fetch(self, chunk: Chunk) -> tuple[Sequence[RangeSeries] | CounterAnswer, float]:
        """One chunk's answer and how long it took (run in the wave's threads)."""
        started = self.clock()
        family = chunk.family
        if family.counter is not None and self.matrix_query is not None:
            return self._fetch_counter(
                chunk, family, family.counter, self.matrix_query
            ), self.clock() - started
        rows = self.query(
            family.name, family.query(chunk.namespace, self.within), chunk.start, chunk.end, self.step_seconds
        )
        return rows, self.clock() - started

    def _fetch_counter(
        self, chunk: Chunk, family: Family, counter: CounterRead, matrix_query: MatrixQuery
    ) -> CounterAnswer:
        """A counter chunk's raw samples from a rate window before its first step to its last, and
        the GPU pods at its steps (one range query per chunk span, shared by the counter families).

        The selector gets a matcher of the namespaces with GPU pods (the chunk's, or the shard's)
        only where no series of the family has a namespace label variant to fold (the expression
        kept no such fold): then cAdvisor's `namespace` is the pod's, and the join drops the rest."""
        pods = self._gpu_pods(chunk)
        first, last = round(chunk.start), round(chunk.end)  # as `range_series` sends them
        steps = int((last - first) // self.step_seconds) + 1
        grid = tuple(first + index * self.step_seconds for index in range(steps))
        if not pods:
            return CounterAnswer((), (), grid)
        selector = counter.selector
        if not any(f'"{source}", "(.+)")' in family.expression for source in NAMESPACE_FOLDS):
            selector = limited_to(selector, {row.metric.get("namespace", "") for row in pods} - {""})
        span_ms = round((grid[-1] - grid[0] + rate_window_seconds(self.step_seconds)) * 1000)
        raw = matrix_query(family.name, f"{selector}[{span_ms}ms]", grid[-1])
        return CounterAnswer(raw, pods, grid)

    def _gpu_pods(self, chunk: Chunk) -> Sequence[RangeSeries]:
        """The GPU pods at the steps of `chunk` (the join of the pod families), asked once per
        (namespace, span) a read, whichever counter family's thread asks first."""
        key = (chunk.namespace, chunk.start, chunk.end)
        with self._gpu_pods_lock:
            answer = self._gpu_pods_answers.get(key)
            mine = answer is None
            if answer is None:
                answer = self._gpu_pods_answers[key] = Future()
        if mine:
            try:
                answer.set_result(
                    self.query(
                        "GPU pods",
                        gpu_pods(chunk.namespace, self.within),
                        chunk.start,
                        chunk.end,
                        self.step_seconds,
                    )
                )
            except BaseException as error:
                answer.set_exception(error)
        return answer.result()

    def _ingest(self, family: Family, rows: Sequence[RangeSeries] | CounterAnswer) -> int:
        """Every series' samples into its window, decoded from the answer's bytes as typed arrays.

        Every series is decoded before any is added, so a malformed answer raises and changes no
        window (the arrays cost 16 bytes a sample, against about 150 as Python lists)."""
        series: list[Decoded]
        if isinstance(rows, CounterAnswer):
            assert family.counter is not None
            try:
                series = counter_series(
                    family.counter, rows, rate_window_seconds(self.step_seconds), family.keys
                )
            except AnswerError as error:
                raise PrometheusSourceError(f"malformed raw samples for {family.name}: {error}") from error
            return self._add(family, series)
        try:
            decoded = [(row.metric, *samples(row)) for row in rows]
        except AnswerError as error:
            raise PrometheusSourceError(f"malformed range answer for {family.name}: {error}") from error
        if family.raw_series:
            if family.bitmasks:
                decoded = [
                    (labels, times, flags_of(values) if labels.get("__name__") in family.bitmasks else values)
                    for labels, times, values in decoded
                ]
            series = largest_per_identity(decoded, family.keys)
        else:
            series = [(identity_of(labels, family.keys), times, values) for labels, times, values in decoded]
        return self._add(family, series)

    def _add(self, family: Family, series: Sequence[Decoded]) -> int:
        """The decoded series into their windows; the samples kept."""
        steps = family.signal in SAWTOOTH_SIGNALS and not family.largest_only
        sawtooth_floor = DEFAULT_SAWTOOTH_FLOOR if steps else None
        kept = 0
        for identity, times, values in series:
            window = self.store.window(
                (family.name, identity), activity_floor=family.activity_floor, sawtooth_floor=sawtooth_floor
            )
            kept += window.add_series(times, values)
        if (tap := self.taps.get(family.name)) is not None:
            tap(series)
        return kept


def summary_of(window: SeriesWindow, family: Family, now: float) -> SignalStats | None:
    """A series' statistics at `now` in the family's unit; None without a usable sample."""
    figures = window.figures(now)
    return None if figures is None else summary_from_figures(figures, family.scale, family.signal)


class DeferredSummary:
    """A device series' statistics, worked out when a chunk observes the device (`prometheus.Summary`).

    Why: summarised at once, the device families' `SignalStats` (a pydantic object each, about 240
    bytes and its fields) were a sixth of a 1,000-workload cycle's peak of Python objects and stayed
    alive through every chunk; deferred, only one chunk's are alive. The window is already expired
    to `now` and not empty; a read after the next cycle's samples would see those, so a deferred
    summary lives only as long as the cycle's assembly."""

    __slots__ = ("family", "now", "window")

    def __init__(self, window: SeriesWindow, family: Family, now: float) -> None:
        self.window, self.family, self.now = window, family, now

    def __call__(self) -> SignalStats | None:
        return summary_of(self.window, self.family, self.now)


def _next_chunk(pending: list[Chunk], busy: set[str]) -> Chunk | None:
    """The next chunk to send from `pending` (a stack, next one last): the first one whose family has
    no chunk in flight (`busy`). It is that family's earliest, so each family's chunks are still
    read in order; None when every family left is busy."""
    for index in range(len(pending) - 1, -1, -1):
        if pending[index].family.name not in busy:
            return pending.pop(index)
    return None


def limited_to(selector: str, namespaces: Iterable[str]) -> str:
    """One selector (`name`, `name{...}` or `{...}`) with a matcher of `namespaces`; unchanged past
    `MAX_NAMESPACE_REGEX` (the join filters then, as in `in_namespaces`) or with none."""
    alternatives = namespace_alternation(sorted(namespaces))
    if not alternatives or len(alternatives) > MAX_NAMESPACE_REGEX:
        return selector
    matcher = f'namespace=~"{alternatives}"'
    if not selector.endswith("}"):
        return f"{selector}{{{matcher}}}"
    body = selector[: selector.index("{") + 1]
    inner = selector[len(body) : -1]
    return f"{body}{inner + ',' if inner else ''}{matcher}}}"


def counter_series(
    counter: CounterRead, answer: CounterAnswer, window: float, keys: Sequence[str]
) -> list[Decoded]:
    """A counter family's series per pod from its raw samples, as its expression's range query
    answers them at `answer.grid` (`CounterRead`): each raw series' rate at every step, folded
    labels, combined per pod, kept at the steps the pod requests a GPU.

    Every series is decoded first, so a malformed one raises `AnswerError` and nothing is kept."""
    present: dict[Labels, set[int]] = {}
    for row in answer.gpu_pods:
        times, _ = samples(row)
        present[identity_of(row.metric, keys)] = {round(t * 1000) for t in times}
    decoded = [(row.metric, *samples(row)) for row in answer.raw]
    # (pod, part) → step (ms) → combined value; a part is a metric of a ratio, or an interface
    parts: dict[tuple[Labels, str], dict[int, float]] = defaultdict(dict)
    for labels, times, values in decoded:
        folded = folded_labels(labels)
        pod = identity_of(folded, keys)
        steps = present.get(pod)
        if not steps:
            continue
        kept = [(t, v) for t, v in zip(times, values, strict=True) if not is_missing(v)]
        part_label = _PART_LABEL[counter.combine]
        into = parts[(pod, "" if part_label is None else folded.get(part_label, ""))]
        largest = counter.combine in _WITHIN_PART_MAX
        for at, rate in rates_at(kept, answer.grid, window):
            step = round(at * 1000)
            if step not in steps:
                continue
            known = into.get(step)
            if known is None:
                into[step] = rate
            elif largest:
                into[step] = max(known, rate)
            else:
                into[step] = known + rate
    per_pod: dict[Labels, dict[int, float]] = defaultdict(dict)
    if counter.combine in {"ratio", "pressure"}:
        assert counter.metrics is not None
        first, second = counter.metrics
        for pod in {pod for pod, _ in parts}:
            one, other = parts.get((pod, first), {}), parts.get((pod, second), {})
            into = per_pod[pod]
            if counter.combine == "pressure":
                into.update(other)
                into.update(one)
                continue
            for step, value in one.items():
                total = other.get(step)
                if total is not None and total > 0:
                    into[step] = value / total
    else:
        for (pod, _), by_step in parts.items():
            into = per_pod[pod]
            for step, value in by_step.items():
                into[step] = into.get(step, 0.0) + value
    out: list[Decoded] = []
    for pod, by_step in per_pod.items():
        if by_step:
            ordered = sorted(by_step)
            out.append(
                (pod, array("d", (s / 1000 for s in ordered)), array("d", (by_step[s] for s in ordered)))
            )
    return out


def flags_of(bitmasks: array[float]) -> array[float]:
    """Clock-event bitmasks as throttle flags (`stats.throttle_flag`); a missing value stays missing
    (the windows and `largest_per_identity` drop it, as the sentinel filter does in PromQL)."""
    return array("d", (value if is_missing(value) else throttle_flag(value) for value in bitmasks))


def largest_per_identity(
    decoded: Sequence[tuple[Mapping[str, str], array[float], array[float]]], keys: Sequence[str]
) -> list[Decoded]:
    """Raw series (labels, times, values) as `max by (keys)` of their folded labels gives them: one
    series per identity, the largest value at each time, missing values (`stats.is_missing`) left out
    before the merge. Most identities have one raw series, which is kept as it came; several are
    one device scraped twice, or a label that changed (a driver version) within the read."""
    groups: dict[Labels, list[tuple[array[float], array[float]]]] = defaultdict(list)
    for labels, times, values in decoded:
        groups[identity_of(folded_labels(labels), keys)].append((times, values))
    out: list[Decoded] = []
    for identity, members in groups.items():
        if len(members) == 1:
            out.append((identity, *members[0]))
            continue
        largest: dict[float, float] = {}
        for times, values in members:
            for time_, value in zip(times, values, strict=True):
                if is_missing(value):
                    continue
                known = largest.get(time_)
                if known is None or value > known:
                    largest[time_] = value
        ordered = sorted(largest)
        out.append((identity, array("d", ordered), array("d", (largest[t] for t in ordered))))
    return out


def _series_id(raw: Any) -> SeriesId:
    """A saved series key back as the reader's (family, shared labels)."""
    name, labels = raw
    if not isinstance(name, str) or not all(
        isinstance(pair, list) and len(pair) == 2 and all(isinstance(part, str) for part in pair)
        for pair in labels
    ):
        raise ValueError(f"not a (family, labels) key: {raw!r}")
    return sys.intern(name), shared_labels((key, value) for key, value in labels)


#: Series names of the coarse range reads (GPU/CPU correlation, workload-level serving sums).
COARSE_POINTS = 240


class CoarseSeries:
    """Per-pod series at a coarse step (about `COARSE_POINTS` per window), read incrementally.

    The GPU/CPU correlation and the workload-level serving sums need aligned points, not summaries;
    at `window / 240` seconds a step they stay small: one flat array of (time, value) per pod.
    """

    def __init__(self, window_seconds: float, step_seconds: float) -> None:
        self.window_seconds = window_seconds
        self.step_seconds = max(step_seconds, window_seconds / COARSE_POINTS)
        self.points: dict[tuple[str, Labels], array[float]] = {}
        #: Series name → end of its last complete read.
        self.ends: dict[str, float] = {}

    def read(self, query: RangeQuery, queries: dict[str, str], now: float, report: CycleReport) -> None:
        """Add each series name's points since its last read (the whole window the first time).

        Each name keeps its own end: a query that fails is asked again from where it stopped next
        time, while the others go on with the new interval only (one end for all made every coarse
        query re-read the whole window each cycle after one of them failed once)."""
        spans: dict[str, tuple[float, float]] = {}
        for name in queries:
            end = self.ends.get(name)
            span = align(
                now - self.window_seconds if end is None else end + self.step_seconds, now, self.step_seconds
            )
            if span is not None:
                spans[name] = span

        def fetch(name: str) -> tuple[Sequence[RangeSeries] | PrometheusSourceError, float]:
            started = time.monotonic()
            first, last = spans[name]
            try:
                return query(name, queries[name], first, last, self.step_seconds), time.monotonic() - started
            except PrometheusSourceError as error:
                return error, time.monotonic() - started

        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="gpurs-coarse") as pool:
            answers = list(pool.map(fetch, spans))
        for name, (rows, seconds) in zip(spans, answers, strict=True):
            report.queries += 1
            report.timed(name, seconds)
            if isinstance(rows, PrometheusSourceError):
                report.chunks_failed += 1
                report.errors.append(f"{name}: {rows}")
                continue
            try:
                decoded = [(row.metric, *samples(row)) for row in rows]
            except AnswerError as error:
                report.chunks_failed += 1
                report.errors.append(f"{name}: malformed range answer: {error}")
                continue
            report.samples += self.append(
                name, [(identity_of(labels, POD_KEYS), times, values) for labels, times, values in decoded]
            )
            self.ends[name] = spans[name][1]
        self.expire(now)

    def append(self, name: str, series: Iterable[Decoded]) -> int:
        """Each series' points after the newest one it holds (a read that comes again adds nothing twice);
        how many were added."""
        added = 0
        for identity, times, values in series:
            flat = self.points.setdefault((name, identity), array("d"))
            newest = flat[-2] if flat else -math.inf
            for t, v in zip(times, values, strict=True):
                if t > newest:
                    flat.append(t)
                    flat.append(v)
                    added += 1
        return added

    def expire(self, now: float) -> None:
        horizon = now - self.window_seconds
        for key in list(self.points):
            flat = self.points[key]
            old = 0
            while old < len(flat) and flat[old] < horizon:
                old += 2
            if old:
                del flat[:old]
            if not flat:
                del self.points[key]

    def rows(self, name: str) -> list[dict[str, Any]]:
        """The points of one series name as PromQL matrix rows: views of the held arrays, not copies
        (the copies were 5.6 MiB of a steady cycle at 1,000 workloads), so valid until the next `read`
        or `append`; the assembly that takes them is done with them before that."""
        return [
            {"metric": dict(identity), "values": SamplePairs(flat)}
            for (series, identity), flat in self.points.items()
            if series == name
        ]


class BusyPoints:
    """`range:busy` from one read's engine-activity and utilisation family answers: per pod and time,
    the mean of its devices' engine activity, or where it has none then, of their utilisation as a
    ratio: what the coarse query (`avg by (namespace, pod) (engine) or avg by (namespace, pod) (util)
    / 100`) gives, over the families' merged device identities. Series without a pod (board-level)
    belong to no pod's mean."""

    def __init__(self) -> None:
        #: pod → time → [engine sum, engine count, utilisation sum, utilisation count]
        self.sums: dict[Labels, dict[float, list[float]]] = defaultdict(dict)

    def engine(self, series: Sequence[Decoded]) -> None:
        self._add(series, 0, 1.0)

    def utilisation(self, series: Sequence[Decoded]) -> None:
        self._add(series, 2, mn.GPU_SIGNAL_BY_METRIC[mn.DCGM_GPU_UTIL].scale)

    def _add(self, series: Sequence[Decoded], at: int, scale: float) -> None:
        for identity, times, values in series:
            labels = dict(identity)
            if not labels.get("pod"):
                continue
            points = self.sums[identity_of(labels, POD_KEYS)]
            for t, value in zip(times, values, strict=True):
                if is_missing(value):
                    continue
                entry = points.get(t)
                if entry is None:
                    points[t] = entry = [0.0, 0.0, 0.0, 0.0]
                entry[at] += value * scale
                entry[at + 1] += 1

    def series(self) -> list[Decoded]:
        out: list[Decoded] = []
        for pod, points in self.sums.items():
            times = sorted(points)
            entries = [points[t] for t in times]
            values = (e[0] / e[1] if e[1] else e[2] / e[3] for e in entries)
            out.append((pod, array("d", times), array("d", values)))
        return out


class KsmCache:
    """kube-state-metrics facts for the window, refreshed with short lookbacks after the first read.

    The full read asks `last_over_time(metric[window])` each cycle, which touches every sample of the
    window; here the first read does, later ones look back only to the previous read, and a fact not
    seen for a window is forgotten. Restarts are kept as the increases seen each read, summed over
    the window (what `increase(restarts[window])` gives).
    """

    def __init__(self, window_seconds: float, metrics: Sequence[str]) -> None:
        self.window_seconds = window_seconds
        self.metrics = tuple(metrics)
        self.facts: dict[tuple[str, Labels], tuple[float, float]] = {}  # → (value, seen at)
        self.restarts: StreamingStore[Labels] = StreamingStore(window_seconds, slots=DEFAULT_SLOTS)
        self.last_read: float | None = None

    def read(self, source: PrometheusSource, now: float, report: CycleReport) -> None:
        lookback = (
            self.window_seconds if self.last_read is None else min(self.window_seconds, now - self.last_read)
        )
        lookback = max(lookback, 1.0)
        queries = {f"ksm:{metric}": f"last_over_time({metric}[{lookback:.0f}s])" for metric in self.metrics}
        restarts = f"ksm:{mn.KSM_POD_RESTARTS}"
        queries[restarts] = f"increase({mn.KSM_POD_RESTARTS}[{lookback:.0f}s])"

        def fetch(item: tuple[str, str]) -> tuple[list[dict[str, Any]], float]:
            started = time.monotonic()
            return source.instant(item[0], item[1], now), time.monotonic() - started

        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="gpurs-ksm") as pool:
            answers = list(pool.map(fetch, queries.items()))  # a failure is raised: the cycle reports it
        for what, (rows, seconds) in zip(queries, answers, strict=True):
            report.queries += 1
            report.timed(what, seconds)
            for row in rows:
                labels = shared_labels(sorted((str(k), str(v)) for k, v in (row.get("metric") or {}).items()))
                if what == restarts:
                    self.restarts.window(labels, sawtooth_floor=None).add([(now, _value(row))])
                else:
                    self.facts[(what.removeprefix("ksm:"), labels)] = (_value(row), now)
        self.last_read = now
        horizon = now - self.window_seconds
        for key in [k for k, (_, seen) in self.facts.items() if seen < horizon]:
            del self.facts[key]
        self.restarts.expire(now)

    def facts_now(self) -> Iterator[KubeFact]:
        """The facts as the full read's `ksm:<metric>` answers give them (`ksm_facts`), taken one at a
        time: restarts as their increases summed over the window."""
        for (metric, labels), (value, _) in self.facts.items():
            yield metric, labels, value
        for labels, window in self.restarts.series.items():
            figures = window.figures()
            if figures is not None:
                yield mn.KSM_POD_RESTARTS, labels, figures["sum"]


class IdentityCache:
    """Facts about GPUs over the window, from short lookbacks after the first read, shared by every
    chunk and shard: which pods held each device (sharers, `holders`), which target and pod claim
    each device and which targets relabel their series (`gpu_targets`, with trusted targets only).

    Which pods held one device are facts about the GPU, not about one namespace, and a GPU may be
    shared by pods of namespaces that different shards own; one light cluster-wide instant query over
    the device identity labels (no samples come back) says who held what, so a shard reads the full
    device families only for its own pods' series and the board-level ones (`gpu_facts.held_in`).
    The full identity answers look back a whole window every cycle (`PrometheusSource.identity_answers`),
    touching every sample of every device's identity series each time. Here each label set is asked
    with the time of its newest sample (`step_seconds` given to the queries), the first read over the
    window and later ones back to the previous read only, and kept until that time leaves the window:
    the same label sets as the full answers. The relabelled targets are worked out from both sides
    kept apart (`gpu_targets.relabelled_sides`): targets seen on DCGM series in the window that `up`
    has not shown in the window."""

    def __init__(self, window_seconds: float, step_seconds: float) -> None:
        self.window_seconds = window_seconds
        self.step_seconds = step_seconds
        #: side → labels → time of the newest sample seen
        self.seen: dict[str, dict[Labels, float]] = {"claims": {}, "exported": {}, "targets": {}}
        self.last_read: float | None = None

    def read(
        self, source: PrometheusSource, now: float, report: CycleReport
    ) -> dict[str, list[dict[str, Any]]]:
        """Refresh the facts; the identity answers at `now` (none without trusted targets, as the full read)."""
        trusted = source.config.trusted_gpu_targets is not None
        lookback = (
            self.window_seconds if self.last_read is None else min(self.window_seconds, now - self.last_read)
        )
        lookback = max(lookback, self.step_seconds)
        claims = gpu_targets.claims_query(lookback, fold_labels, self.step_seconds, FACT_LABELS)
        queries = {"claims": ("GPU claims", claims)}
        if trusted:
            exported, targets = gpu_targets.relabelled_sides(lookback, self.step_seconds)
            queries["exported"] = ("GPU series' target labels", exported)
            queries["targets"] = ("scrape targets", targets)
        for side, (what, query) in queries.items():
            started = time.monotonic()
            rows = source.instant(what, query, now)  # a failure is raised: the cycle reports it
            report.queries += 1
            report.timed(what, time.monotonic() - started)
            seen = self.seen[side]
            for row in rows:
                labels = shared_labels(sorted((str(k), str(v)) for k, v in (row.get("metric") or {}).items()))
                seen[labels] = max(_value(row), seen.get(labels, -math.inf))
        self.last_read = now
        horizon = now - self.window_seconds
        for seen in self.seen.values():
            for labels in [labels for labels, at in seen.items() if at <= horizon]:
                del seen[labels]
        if not trusted:
            return {}
        by = gpu_targets.TARGET_LABELS
        up = {tuple(dict(labels).get(key, "") for key in by) for labels in self.seen["targets"]}
        return {
            gpu_targets.CLAIMS: [
                {"metric": dict(labels), "value": [now, "1"]} for labels in self.seen["claims"]
            ],
            gpu_targets.RELABELLED: [
                {"metric": dict(labels), "value": [now, "1"]}
                for labels in self.seen["exported"]
                if tuple(dict(labels).get(key, "") for key in by) not in up
            ],
        }

    def holders(self) -> dict[tuple[str, str], set[tuple[str, str]]]:
        """(node, device id) → the pods seen on it in the window (every namespace's)."""
        out: dict[tuple[str, str], set[tuple[str, str]]] = defaultdict(set)
        for identity in self.seen["claims"]:
            labels = dict(identity)
            if labels.get("pod"):
                out[(labels.get("hostname", ""), device_id_of(labels))].add(
                    (labels.get("namespace", ""), labels["pod"])
                )
        return dict(out)


def _source_families(step_seconds: float, recorded: Mapping[str, str] | None) -> list[Family]:
    """`default_families` but those no rule reads, and the XID codes: every family an
    `IncrementalSource` reads."""
    families = [f for f in default_families(step_seconds, recorded) if f.signal not in UNREAD_SIGNALS]
    xid_keys = (*GPU_KEYS, mn.XID_CODE_LABEL)
    families.append(
        Family(
            name="xid",
            expression=mn.DCGM_XID_ERRORS,
            signal=Signal.GR_ENGINE_ACTIVE,  # unused: XID codes are read from the maximum only
            keys=xid_keys,
            raw_series=True,
            largest_only=True,
        )
    )
    return families


class IncrementalSource:
    """Workload windows from incremental reads: the full read's answers, rebuilt from memory.

    Each `read` fetches the new interval (or the next backfill chunks), refreshes the
    kube-state-metrics facts and the coarse series, and hands the same stat-labelled answers the
    full-window queries give to the full read's assembly, so both paths build identical windows from
    identical figures. Until the backfill is complete it returns no window at all: a recommendation
    keeps its last status rather than one computed from part of a window.
    """

    def __init__(
        self,
        source: PrometheusSource,
        *,
        window_seconds: float,
        step_seconds: float,
        slice_seconds: float = 3600.0,
        slots: int = DEFAULT_SLOTS,
        recorded: Mapping[str, str] | None = None,
    ) -> None:
        self.source = source
        self.window_seconds = window_seconds
        self.step_seconds = step_seconds
        self.rate_window = rate_window_seconds(step_seconds)
        #: Family name → the recorded series read in place of its expression (`default_families`).
        self.recorded = dict(recorded or {})
        families = _source_families(step_seconds, self.recorded)
        #: The families with every label fold; each read sends them without the folds of label
        #: variants no series has (`without_folds`).
        self.families = list(families)
        self.reader = IncrementalReader(
            source.range_series,
            window_seconds=window_seconds,
            step_seconds=step_seconds,
            families=families,
            slice_seconds=slice_seconds,
            slots=slots,
            namespaces=self._namespaces,
            concurrency=source.config.max_concurrency,
            matrix_query=source.matrix_series,
        )
        self.ksm = KsmCache(window_seconds, _KSM_METRICS)
        self.coarse = CoarseSeries(window_seconds, step_seconds)
        self.identity = IdentityCache(window_seconds, step_seconds)
        self.report = CycleReport(backfilling=True)

    def fingerprint(self) -> str:
        """What the windows' samples mean: every family's raw definition (name, expression, labels,
        activity floor) and the extra label matchers, hashed. Saved state is only loaded under the
        same one, so a release that changes a query, or a switch to another cluster's series, reads
        the window afresh. The raw expressions, not the recorded ones: recorded series stand for
        the same samples (`use_recorded` keeps the windows too)."""
        definitions = [
            [family.name, family.expression, list(family.keys), family.activity_floor, family.per_pod]
            for family in _source_families(self.step_seconds, None)
        ]
        config = self.source.config
        trusted = (
            None if config.trusted_gpu_targets is None else [list(t) for t in config.trusted_gpu_targets]
        )
        layout = [config.shard.shard, config.shard.total] if config.shard.sharded else []
        text = json.dumps([definitions, list(config.extra_matchers), trusted, *layout], separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def save_state(self) -> bytes | None:
        """The reader's windows and where its reads got to (None until the window is complete).

        The coarse series and kube-state-metrics facts are not saved: they are small and read the
        whole window in a few queries the first time (coarse steps, instant queries)."""
        return self.reader.save(self.fingerprint())

    def restore_state(self, data: bytes, *, at: datetime) -> float:
        """Load saved windows before the first read (`IncrementalReader.restore`): the backfill then
        covers only the time since the saved reads ended. Returns that end; `StateError` when unusable."""
        return self.reader.restore(data, now=at.timestamp(), fingerprint=self.fingerprint())

    def use_recorded(self, recorded: Mapping[str, str]) -> None:
        """Read these families from recorded series from the next read on, the others raw (a new
        detection). Their windows keep their samples: a family's series keep their identities."""
        self.recorded = dict(recorded)
        fresh = {family.name: family for family in default_families(self.step_seconds, self.recorded)}
        self.families = [fresh.get(family.name, family) for family in self.families]
        self.reader.families = list(self.families)

    def absent_folds(self, now: float, queries: Mapping[str, str]) -> tuple[dict[str, frozenset[str]], int]:
        """Per query, the label variants (`LABEL_FOLDS` sources) that no series of the metrics it
        selects (`series_selected`) has from a window and a rate window before `now` on: their folds
        change nothing. A variant one exporter has (the DCGM series' `exported_pod` under
        `honor_labels: false`) keeps its fold in the queries of that exporter's metrics only. One
        label-names request per distinct set of metrics (their number is returned with the folds);
        where one fails, every fold is kept."""
        start = now - self.window_seconds - self.rate_window - 300.0 - self.step_seconds  # + lookback
        names_of: dict[str | None, list[str]] = defaultdict(list)
        for name, query in queries.items():
            if "label_replace(" in query:
                names_of[series_selected(query)].append(name)

        def present(match: str | None) -> set[str] | None:
            try:
                return self.source.label_names(start, now, () if match is None else (match,))
            except PrometheusSourceError as error:
                LOG.debug("label names of %s unknown, every label fold is kept: %s", match, error)
                return None

        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="gpurs-labels") as pool:
            answers = dict(zip(names_of, pool.map(present, names_of), strict=True))
        absent = dict.fromkeys(queries, frozenset[str]())
        for match, names in names_of.items():
            labels = answers[match]
            if labels is not None:
                for name in names:
                    absent[name] = frozenset(source for _, source in LABEL_FOLDS if source not in labels)
        return absent, len(answers)

    def _namespaces(self, at: float | None = None) -> list[str]:
        """Namespaces with GPU pods (where a chunk split by namespace has anything to read)."""
        rows = self.source.instant(
            "namespaces with GPU pods", f"count by (namespace) ({gpu_pods(None)})", at or time.time()
        )
        return sorted(
            {str(row["metric"]["namespace"]) for row in rows if row.get("metric", {}).get("namespace")}
        )

    @property
    def complete(self) -> bool:
        """Whether the window has been read completely since the start."""
        return self.reader.complete

    def derive_coarse(self) -> tuple[frozenset[str], BusyPoints | None]:
        """Coarse series that this read takes from the family answers instead of their own queries:
        the names, and the busy points to fill (`BusyPoints`, appended once the read has no failed
        chunk, so a failed interval is asked again whole).

        Only at the coarse step equal to the step (windows up to `COARSE_POINTS` steps), where the
        families' points are the coarse ones, and only once a coarse name has read its whole window
        itself (after a restart from saved state the families read only the gap). `range:cpu` is the
        CPU family's own query; `range:busy` the engine-activity and utilisation families' mean."""
        self.reader.taps = {}
        if self.coarse.step_seconds != self.step_seconds:
            return frozenset(), None
        names = {family.name for family in self.reader.families}
        derived: set[str] = set()
        cpu = f"pod:{Signal.CPU_USAGE_CORES.value}"
        if "range:cpu" in self.coarse.ends and cpu in names:
            self.reader.taps[cpu] = lambda series: self.coarse.append("range:cpu", series)
            derived.add("range:cpu")
        engine, utilisation = f"gpu:{mn.DCGM_GR_ENGINE_ACTIVE}", f"gpu:{mn.DCGM_GPU_UTIL}"
        busy = None
        if "range:busy" in self.coarse.ends and {engine, utilisation} <= names:
            busy = BusyPoints()
            self.reader.taps[engine], self.reader.taps[utilisation] = busy.engine, busy.utilisation
            derived.add("range:busy")
        return frozenset(derived), busy

    def coarse_queries(self, within: Sequence[str] | None = None) -> dict[str, str]:
        """The coarse series the assembly needs: GPU busy and CPU per pod, serving signals per pod."""
        # the serving sums stay raw: they count serving pods without a GPU too, the rules do not
        queries = {f"range:{s.value}": e("") for s, e in serving_exprs(self.rate_window).items()}
        queries["range:busy"] = (
            f"avg by (namespace, pod) ({fold_labels(f'{mn.DCGM_GR_ENGINE_ACTIVE} {_SENTINEL_FILTER}')}) or "
            f"avg by (namespace, pod) ({fold_labels(f'{mn.DCGM_GPU_UTIL} {_SENTINEL_FILTER}')}) / 100"
        )
        cpu = self.recorded.get(f"pod:{Signal.CPU_USAGE_CORES.value}") or _rate_by_pod(
            mn.CADVISOR_CPU_USAGE, self.rate_window, True
        )("")
        queries["range:cpu"] = f"({cpu}) and on (namespace, pod) {gpu_pods(None, within)}"
        return queries

    def read(self, **options: Any) -> list[WorkloadWindow]:
        """Windows over `[at - window, at]` once the window is complete; no window before that
        (`read_chunks`, all chunks at once)."""
        chunks = self.read_chunks(**options)
        return [] if chunks is None else [window for chunk in chunks for window in chunk]

    def read_chunks(
        self,
        *,
        at: datetime | None = None,
        namespace: str | None = None,
        workload: str | None = None,
        shard: ShardSlice | None = None,
        budget_seconds: float | None = None,
        progress: Progress | None = None,
        chunk_pods: int = CHUNK_PODS,
        **assembly: Any,
    ) -> Iterator[list[WorkloadWindow]] | None:
        """The windows over `[at - window, at]`, one chunk of namespaces (about `chunk_pods` pods) at
        a time, once the window is complete; None before that.

        The reads happen here; the chunks are assembled as they are taken, each from the pod
        families' statistics of its namespaces only (`PrometheusSource.assemble_chunks`), so a
        reader that lets a chunk go before taking the next never holds every window at once.
        With a `shard`, its pod families are read with a matcher of the namespaces it owns among
        those with GPU pods now (so a namespace that appears is read from the interval it appears
        in), and only its windows are assembled. `assembly` goes to the full read's assembly
        unchanged (e.g. `owners`)."""
        now = (at or datetime.now(tz=UTC)).timestamp()
        sharded = shard is not None and shard.sharded
        namespaces = shard.owned(self._namespaces(now)) if shard is not None and sharded else None
        self.reader.within = namespaces
        derived, busy = self.derive_coarse()
        coarse_queries = {
            name: query for name, query in self.coarse_queries(namespaces).items() if name not in derived
        }
        absent, labels_asked = self.absent_folds(
            now, {**{family.name: family.expression for family in self.families}, **coarse_queries}
        )
        self.reader.families = [
            replace(family, expression=without_folds(family.expression, absent[family.name]))
            for family in self.families
        ]
        self.report = self.reader.read(now, progress=progress, budget_seconds=budget_seconds)
        self.report.queries += labels_asked
        if busy is not None and self.report.chunks_failed == 0:
            self.coarse.append("range:busy", busy.series())
        self.reader.taps = {}  # what they filled is taken: they would hold it until the next read
        if not self.reader.complete:
            return None
        self.ksm.read(self.source, now, self.report)
        coarse = {name: without_folds(query, absent[name]) for name, query in coarse_queries.items()}
        self.coarse.read(self.source.range_series, coarse, now, self.report)
        results, summarised = self.results(now, pods=False)
        results.update(self.identity.read(self.source, now, self.report))
        by_namespace = self._pod_series_by_namespace()
        pods = PodSeries(
            namespaces={
                name: len({identity for _, identity, _ in series}) for name, series in by_namespace.items()
            },
            stats_of=lambda chunk: self._pod_summaries(by_namespace, chunk, now),
            chunk_series=chunk_pods,
        )
        return self.source.assemble_chunks(
            results,
            now - self.window_seconds,
            now,
            self.step_seconds,
            self.coarse.step_seconds,
            namespace,
            workload,
            series_stats=summarised,
            shard=shard if sharded else None,
            pods=pods,
            holders=self.identity.holders(),
            kube_facts=self.ksm.facts_now(),
            **assembly,
        )

    def _pod_series_by_namespace(self) -> dict[str, list[tuple[str, Labels, SeriesWindow]]]:
        """Namespace → (family, labels, window) of every pod-family series there."""
        per_pod = {family.name for family in self.reader.families if family.per_pod}
        out: dict[str, list[tuple[str, Labels, SeriesWindow]]] = defaultdict(list)
        for (name, identity), window in self.reader.store.series.items():
            if name in per_pod:
                out[dict(identity).get("namespace", "")].append((name, identity, window))
        return out

    def _pod_summaries(
        self,
        by_namespace: Mapping[str, list[tuple[str, Labels, SeriesWindow]]],
        chunk: frozenset[str],
        now: float,
    ) -> dict[str, dict[Labels, SignalStats]]:
        """Family → labels → statistics of the pod-family series in `chunk`'s namespaces."""
        families = {family.name: family for family in self.reader.families}
        summarised: dict[str, dict[Labels, SignalStats]] = defaultdict(dict)
        for namespace in chunk:
            for name, identity, window in by_namespace.get(namespace, ()):
                summary = summary_of(window, families[name], now)
                if summary is not None:
                    summarised[name][identity] = summary
        return dict(summarised)

    def results(
        self, now: float, *, pods: bool = True
    ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, dict[Labels, Summary]]]:
        """What the full read's assembly takes: answers for XIDs and the coarse series (the
        kube-state-metrics facts go to it as they are, `KsmCache.facts_now`), and every family's
        statistics (no stat-labelled rows to parse): the pod families' summarised, the device
        families' deferred (`DeferredSummary`); without `pods`, the device families' only (the pod
        families' are asked for per chunk)."""
        results: dict[str, list[dict[str, Any]]] = defaultdict(list)
        summarised: dict[str, dict[Labels, Summary]] = defaultdict(dict)
        families = {family.name: family for family in self.reader.families}
        for (name, identity), window in self.reader.store.series.items():
            family = families[name]
            if not pods and family.per_pod:
                continue
            if name == "xid":
                figures = window.figures(now)
                if figures is not None and figures["max"] > 0:
                    results["xid"].append({"metric": dict(identity), "value": [now, repr(figures["max"])]})
                continue
            if family.per_pod:
                summary = summary_of(window, family, now)
                if summary is not None:
                    summarised[name][identity] = summary
                    results.setdefault(name, [])
                continue
            window.expire(now)
            if not window.empty:
                summarised[name][identity] = DeferredSummary(window, family, now)
                results.setdefault(name, [])
        for coarse_name in self.coarse_queries():
            results[coarse_name] = self.coarse.rows(coarse_name)
        return dict(results), dict(summarised)
