"""Incremental reads: what each cycle asks Prometheus for, backfill in bounded chunks, splitting, gaps."""

from __future__ import annotations

import itertools
import math
import re
import threading
import time
from dataclasses import replace
from typing import Any

import pytest

from gpu_rightsizer.adapters import prometheus
from gpu_rightsizer.adapters.incremental import (
    MAX_POINTS_PER_SERIES,
    UNREAD_SIGNALS,
    Chunk,
    CycleReport,
    Family,
    IncrementalReader,
    KsmCache,
    _source_families,
    default_families,
    plan,
)
from gpu_rightsizer.adapters.prom_answers import RangeSeries, matrix_of
from gpu_rightsizer.adapters.prometheus import PrometheusSourceError
from gpu_rightsizer.logic import stats as st
from gpu_rightsizer.logic.streaming import RECORD_WITH_STEPS, RECORD_WITHOUT_STEPS
from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.observation import Signal

STEP = 30.0
WINDOW = 3600.0
NOW = 1_767_225_600.0
NAMESPACES = ("team-a", "team-b")
PODS = {"team-a": ("a-0", "a-1"), "team-b": ("b-0",)}

GPU = Family(
    name="gpu:busy",
    expression="max by (namespace, pod, UUID) (DCGM_FI_PROF_GR_ENGINE_ACTIVE)",
    signal=Signal.GR_ENGINE_ACTIVE,
    keys=("namespace", "pod", "UUID"),
    activity_floor=0.05,
)
CPU = Family(
    name="pod:cpu",
    expression="sum by (namespace, pod) (rate(container_cpu_usage_seconds_total[3m]))",
    signal=Signal.CPU_USAGE_CORES,
    keys=("namespace", "pod"),
    per_pod=True,
)


def value(family: str, pod: str, timestamp: float) -> float:
    """A deterministic signal per family and pod."""
    phase = sum(map(ord, pod)) + (7 if family == CPU.name else 0)
    return 0.5 + 0.4 * math.sin(timestamp / 600.0 + phase)


class FakeTSDB:
    """Answers range queries like Prometheus from `value`, refusing chunks judged too big."""

    def __init__(self, too_big: Any = None, fail: Any = None) -> None:
        self.calls: list[tuple[str, str, float, float, float]] = []
        self.too_big = too_big or (lambda _query, _start, _end: False)
        self.fail = fail or (lambda _query, _start, _end: False)

    def __call__(self, what: str, query: str, start: float, end: float, step: float) -> list[RangeSeries]:
        self.calls.append((what, query, start, end, step))
        if self.too_big(query, start, end):
            raise PrometheusSourceError(
                f"Prometheus refused the query for {what}: query timed out in query execution"
            )
        if self.fail(query, start, end):
            raise PrometheusSourceError(f"cannot reach Prometheus: connection refused ({what})")
        scope = re.search(r'namespace="([^"]+)"', query)
        rows = []
        for namespace, pods in PODS.items():
            if scope and scope.group(1) != namespace:
                continue
            for pod in pods:
                labels = {"namespace": namespace, "pod": pod}
                if what == GPU.name:
                    labels["UUID"] = f"GPU-{pod}"
                points = [
                    [start + i * step, str(value(what, pod, start + i * step))]
                    for i in range(round((end - start) / step) + 1)
                ]
                rows.append({"metric": labels, "values": points})
        return matrix_of(rows)


def exact(family: Family, pod: str, start: float, end: float) -> st.SignalStats:
    first = math.ceil(start / STEP) * STEP
    samples = [(t, value(family.name, pod, t)) for t in _grid(first, end)]
    summary = st.summarize(samples, activity_floor=family.activity_floor)
    assert summary is not None
    return summary


def _grid(first: float, last: float) -> list[float]:
    return [first + i * STEP for i in range(int((last - first) // STEP) + 1)]


def test_a_cold_start_reads_the_window_in_bounded_time_slices_on_the_step_grid() -> None:
    chunks = plan(
        [GPU, CPU], now=NOW + 7, last_end=None, window_seconds=WINDOW, step_seconds=STEP, slice_seconds=900
    )
    per_family = [c for c in chunks if c.family is GPU]
    assert len(per_family) == 4
    assert per_family[0].start == math.ceil((NOW + 7 - WINDOW) / STEP) * STEP
    assert per_family[-1].end == NOW  # the last whole step before now
    for before, after in itertools.pairwise(per_family):
        assert after.start == before.end + STEP  # no instant twice, none left out
    assert all(c.end - c.start <= 900 and c.start % STEP == 0 for c in chunks)


def test_slices_never_exceed_prometheus_points_per_series() -> None:
    chunks = plan(
        [GPU], now=NOW, last_end=None, window_seconds=86_400 * 30, step_seconds=60.0, slice_seconds=10**9
    )
    assert max((c.end - c.start) / 60.0 + 1 for c in chunks) <= MAX_POINTS_PER_SERIES


def test_a_steady_cycle_asks_only_for_the_interval_since_the_last_one() -> None:
    chunks = plan(
        [GPU, CPU], now=NOW, last_end=NOW - 120, window_seconds=WINDOW, step_seconds=STEP, slice_seconds=900
    )
    assert [(c.family.name, c.start, c.end) for c in chunks] == [
        (GPU.name, NOW - 90, NOW),
        (CPU.name, NOW - 90, NOW),
    ]


def test_pod_families_are_joined_on_gpu_pods_and_scoped_to_a_namespace_when_split() -> None:
    query = CPU.query("team-a")
    assert "and on (namespace, pod)" in query
    assert mn.KSM_POD_REQUESTS in query and 'resource=~"nvidia.com.(gpu|mig).*"' in query
    assert 'namespace="team-a"' in query
    assert GPU.query("team-a") == GPU.expression  # device series are not joined (boards have no pod)
    families = default_families(60.0)
    assert {f.name for f in families if f.per_pod} >= {f"pod:{Signal.CPU_USAGE_CORES.value}"}
    assert all("and on (namespace, pod)" in f.query(None) for f in families if f.per_pod)


def test_backfill_runs_over_cycles_within_a_budget_then_reads_increments() -> None:
    """The window is backfilled chunk by chunk, progress reported, then only new intervals are read."""
    tsdb = FakeTSDB()
    ticks = iter(range(10_000))
    reader = IncrementalReader(
        tsdb,
        window_seconds=WINDOW,
        step_seconds=STEP,
        families=[GPU, CPU],
        slice_seconds=900,
        clock=lambda: float(next(ticks)),
    )
    seen: list[tuple[int, int]] = []
    reports: list[CycleReport] = []
    while not reader.complete:
        reports.append(
            reader.read(
                NOW, progress=lambda r, _c: seen.append((r.backfill_done, r.backfill_total)), budget_seconds=3
            )
        )
    assert len(reports) > 1 and all(r.backfilling for r in reports)
    total = len(
        plan([GPU, CPU], now=NOW, last_end=None, window_seconds=WINDOW, step_seconds=STEP, slice_seconds=900)
    )
    assert seen[-1] == (total, total) and [done for done, _ in seen] == list(range(1, total + 1))
    assert reader.last_end == NOW
    tsdb.calls.clear()
    later = NOW + 95
    steady = reader.read(later)
    assert not steady.backfilling
    assert {(start, end) for _, _, start, end, _ in tsdb.calls} == {(NOW + STEP, NOW + 90)}
    assert steady.samples == 2 * 3 * 3  # two families, three pods, three new steps
    summaries = reader.store.summaries(later)
    for family in (GPU, CPU):
        for namespace, pods in PODS.items():
            for pod in pods:
                keys = (("namespace", namespace), ("pod", pod))
                if family is GPU:
                    keys = (*keys, ("UUID", f"GPU-{pod}"))
                streamed = summaries[(family.name, keys)]
                oldest = reader.store.series[(family.name, keys)].first_time
                assert oldest is not None
                full = exact(family, pod, max(oldest, NOW - WINDOW), NOW + 90)
                assert streamed.samples == full.samples
                assert streamed.mean == pytest.approx(full.mean)
                assert streamed.max == full.max
                assert streamed.p95 == pytest.approx(full.p95, rel=0.02)


def test_a_chunk_too_big_is_split_by_namespace_then_in_halves_of_time() -> None:
    def too_big(query: str, start: float, end: float) -> bool:
        return ('namespace="' not in query and "and on" in query) or end - start > 300

    tsdb = FakeTSDB(too_big=too_big)
    reader = IncrementalReader(
        tsdb,
        window_seconds=WINDOW,
        step_seconds=STEP,
        families=[CPU],
        slice_seconds=900,
        namespaces=lambda: NAMESPACES,
    )
    report = reader.read(NOW)
    assert reader.complete and report.chunks_failed == 0
    answered = [c for c in tsdb.calls if not too_big(c[1], c[2], c[3])]
    assert all('namespace="' in query and end - start <= 300 for _, query, start, end, _ in answered)
    summary = reader.store.summaries(NOW)[(CPU.name, (("namespace", "team-b"), ("pod", "b-0")))]
    assert summary.samples == len(_grid(math.ceil((NOW - WINDOW) / STEP) * STEP, NOW))
    assert report.backfill_done == report.backfill_total


def test_a_failed_steady_read_is_asked_again_next_cycle_without_double_counting() -> None:
    broken = {"on": True}
    tsdb = FakeTSDB(fail=lambda _q, start, _e: broken["on"] and start > NOW)
    reader = IncrementalReader(
        tsdb, window_seconds=WINDOW, step_seconds=STEP, families=[GPU], slice_seconds=WINDOW
    )
    reader.read(NOW)
    failed = reader.read(NOW + 60)
    assert failed.chunks_failed == 1 and reader.last_end == NOW
    broken["on"] = False
    reader.read(NOW + 120)
    assert reader.last_end == NOW + 120
    key = (GPU.name, (("namespace", "team-a"), ("pod", "a-0"), ("UUID", "GPU-a-0")))
    window = reader.store.series[key]
    summary = window.summary(NOW + 120)
    assert summary is not None and window.first_time is not None
    assert summary.samples == len(
        _grid(max(window.first_time, math.ceil((NOW - WINDOW) / STEP) * STEP), NOW + 120)
    )


def test_a_backfill_chunk_that_keeps_failing_is_reported_and_the_backfill_goes_on() -> None:
    tsdb = FakeTSDB(fail=lambda _q, start, _e: start < NOW - 1800)
    reader = IncrementalReader(
        tsdb, window_seconds=WINDOW, step_seconds=STEP, families=[GPU], slice_seconds=900
    )
    report = reader.read(NOW)
    assert reader.complete
    assert report.chunks_failed == 2 and len(report.errors) == 2
    assert "connection refused" in report.errors[0]


def test_chunk_description_names_family_scope_and_span() -> None:
    assert Chunk(CPU, 0.0, 30.0, "team-a").describe() == "pod:cpu in team-a 0..30"


def test_the_busiest_process_family_takes_the_max_over_containers_and_pinned_the_sum() -> None:
    """Incremental reads aggregate the agent's per-process series like the full read does."""
    by_signal = {family.signal: family.expression for family in default_families(60.0)}

    busiest = by_signal[Signal.PROCESS_CPU_MAX_CORES]
    assert busiest.startswith("max by (namespace, pod)") and "sum by" not in busiest
    assert mn.AGENT_PROCESS_CPU_MAX in busiest
    assert by_signal[Signal.PROCESSES_PINNED].startswith("sum by (namespace, pod)")


def test_a_window_as_long_as_a_slice_is_one_query_per_family() -> None:
    """A 1 h window at a 60 s step has 61 grid points; slices of 3600 s hold them all, so the cold start
    is one query per family and not a 60-point slice plus a 1-point rest (twice the queries)."""
    chunks = plan(
        [GPU, CPU], now=NOW, last_end=None, window_seconds=3600.0, step_seconds=60.0, slice_seconds=3600.0
    )
    assert [(c.family.name, c.end - c.start) for c in chunks] == [(GPU.name, 3600.0), (CPU.name, 3600.0)]


RAW = Family(
    name="gpu:raw",
    expression=mn.DCGM_GR_ENGINE_ACTIVE,
    signal=Signal.GR_ENGINE_ACTIVE,
    keys=prometheus.GPU_KEYS,
    activity_floor=0.05,
    raw_series=True,
)


def raw_rows(rows: list[tuple[dict[str, str], list[tuple[float, float]]]]) -> list[RangeSeries]:
    return matrix_of(
        [{"metric": labels, "values": [[t, repr(v)] for t, v in points]} for labels, points in rows]
    )


def test_bare_selector_series_are_folded_and_merged_per_identity_keeping_the_largest_value() -> None:
    """What `max by (GPU_KEYS)` of the folded, sentinel-filtered selector gives: the exported pod is
    the identity, two scrapes of one device merge to the larger value at each time, a DCGM blank or a
    NaN in one of them leaves the other's value, and a device of its own stays apart."""
    device = {"__name__": mn.DCGM_GR_ENGINE_ACTIVE, "UUID": "GPU-1", "gpu": "0", "Hostname": "node-a"}
    renamed = {**device, "namespace": "gpu-operator", "pod": "dcgm-exporter-x", "exported_namespace": "ml",
               "exported_pod": "trainer-0", "instance": "10.0.0.1:9400", "job": "dcgm"}  # fmt: skip
    twice = {**renamed, "instance": "10.0.0.2:9400", "job": "dcgm-copy"}
    alone = {**renamed, "UUID": "GPU-2", "gpu": "1"}
    times = [NOW - 120, NOW - 60, NOW]
    blank = float(0x7FFFFFFFFFFFFFF0)
    answer = raw_rows(
        [
            (renamed, [(times[0], 0.2), (times[1], blank), (times[2], 0.9)]),
            (twice, [(times[0], 0.4), (times[1], 0.3), (times[2], math.nan)]),
            (alone, [(t, 0.7) for t in times]),
        ]
    )
    reader = IncrementalReader(lambda *_: answer, window_seconds=WINDOW, step_seconds=60.0, families=[RAW])
    reader.read(NOW)
    series = {dict(labels)["UUID"]: window for (_, labels), window in reader.store.series.items()}
    assert set(series) == {"GPU-1", "GPU-2"}
    identity = next(labels for (_, labels) in reader.store.series if dict(labels)["UUID"] == "GPU-1")
    assert dict(identity) == {"namespace": "ml", "pod": "trainer-0", "hostname": "node-a", "UUID": "GPU-1",
                              "gpu": "0"}  # fmt: skip
    merged = series["GPU-1"].figures(NOW)
    assert merged is not None
    assert merged["count"] == 3 and merged["max"] == pytest.approx(0.9, rel=0.02)
    assert merged["min"] == pytest.approx(0.3, rel=0.02) and merged["mean"] == pytest.approx(
        1.6 / 3, rel=0.02
    )
    lone = series["GPU-2"].figures(NOW)
    assert lone is not None and lone["count"] == 3 and lone["mean"] == pytest.approx(0.7, rel=0.02)


def test_folded_labels_follow_label_replace() -> None:
    """Each fold sets its target from a non-empty source, in `LABEL_FOLDS` order; an empty source, or
    one with a newline (RE2's `.` stops there), leaves the target; other labels are kept."""
    labels = {"pod": "exporter", "exported_pod": "trainer", "pod_name": "old", "Hostname": "", "uuid": "a\nb",
              "UUID": "GPU-1", "job": "dcgm"}  # fmt: skip
    assert prometheus.folded_labels(labels) == {**labels, "pod": "trainer"}
    assert prometheus.folded_labels({"Hostname": "n", "uuid": "GPU-9"}) == {
        "Hostname": "n", "hostname": "n", "uuid": "GPU-9", "UUID": "GPU-9"}  # fmt: skip


def test_queries_stay_in_flight_while_an_answer_is_ingested_and_windows_fill_in_one_order() -> None:
    """The reader keeps `concurrency` queries in flight, never two of one family, and takes the
    answers oldest first: each answer taken is replaced by the next query before the next answer is
    ingested, and two reads of one history fill their windows in the same order whatever answers
    first."""
    families = [replace(GPU, name=f"gpu:busy-{i}") for i in range(6)]
    tsdb = FakeTSDB()
    lock = threading.Lock()
    in_flight: list[int] = [0, 0]  # now, most at once
    asked: list[str] = []

    def slow(what: str, query: str, start: float, end: float, step: float) -> list[RangeSeries]:
        with lock:
            asked.append(what)
            in_flight[0] += 1
            in_flight[1] = max(in_flight[1], in_flight[0])
        time.sleep(0.05 if what.endswith("0") else 0.01)  # the first family answers last
        try:
            return tsdb(what, query, start, end, step)
        finally:
            with lock:
                in_flight[0] -= 1

    def read_once() -> tuple[list[str], list[int]]:
        reader = IncrementalReader(
            slow, window_seconds=WINDOW, step_seconds=STEP, families=families, concurrency=4
        )
        sent_at_ingest: list[int] = []
        ingest = reader._ingest

        def counting(family: Family, rows: Any) -> int:
            time.sleep(0.05)  # an ingest long enough for a query sent before it to have started
            sent_at_ingest.append(len(asked))
            kept: int = ingest(family, rows)
            return kept

        reader._ingest = counting  # type: ignore[method-assign]
        asked.clear()
        reader.read(NOW)
        assert reader.complete
        return [name for name, _ in reader.store.series], sent_at_ingest

    (first, sent_first), (second, sent_second) = read_once(), read_once()
    for sent in (sent_first, sent_second):
        assert sent[0] == 4  # the others were asked before the first answer went in
        assert sent[1] == 5  # and one more once it had: not a wave of four, then the next wave
    assert in_flight[1] == 4
    assert first == second and first[0] == "gpu:busy-0"


def test_only_busy_windows_keep_the_steps_between_samples_and_the_xid_codes_keep_none() -> None:
    """The sawtooth score is read from the busy families only; the XID family names the engine signal
    as a placeholder but is read from its largest value, so its windows keep no steps."""
    xid = next(family for family in _source_families(60.0, None) if family.name == "xid")
    assert xid.largest_only and xid.signal is RAW.signal
    device = {"UUID": "GPU-1", "gpu": "0", "Hostname": "node-a", "namespace": "ml", "pod": "trainer-0"}
    times = [NOW - 120, NOW - 60, NOW]
    answers = {
        RAW.name: raw_rows([(device, [(t, 0.5) for t in times])]),
        xid.name: raw_rows([({**device, mn.XID_CODE_LABEL: "79"}, [(t, 79.0) for t in times])]),
    }
    reader = IncrementalReader(
        lambda what, *_: answers[what], window_seconds=WINDOW, step_seconds=60.0, families=[RAW, xid]
    )
    reader.read(NOW)
    shapes = {name: window._shape for (name, _), window in reader.store.series.items()}
    assert shapes[RAW.name].sawtooth_floor is not None and shapes[RAW.name].record == RECORD_WITH_STEPS
    assert shapes[xid.name].sawtooth_floor is None and shapes[xid.name].record == RECORD_WITHOUT_STEPS
    figures = next(w for (name, _), w in reader.store.series.items() if name == xid.name).figures(NOW)
    assert figures is not None and figures["max"] == 79.0 and "absstep" not in figures


def test_the_streaming_windows_leave_out_the_signals_no_rule_reads() -> None:
    """Temperature, power and the write/transmit rates are read by no rule: no family of the
    incremental source asks for them, so they cost no query, no window and no summary."""
    read = {family.signal for family in _source_families(60.0, None)}
    assert Signal.GPU_TEMP_C in UNREAD_SIGNALS and Signal.POWER_WATTS in UNREAD_SIGNALS
    assert not read & UNREAD_SIGNALS
    every = {family.signal for family in default_families(60.0)}
    assert every >= UNREAD_SIGNALS  # they exist as families: leaving them out is a choice, not a gap


class KsmAnswers:
    """Instant answers of the kube-state-metrics reads: each query's rows by metric, per read."""

    def __init__(self) -> None:
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self.asked: list[str] = []

    def instant(self, what: str, query: str, at: float) -> list[dict[str, Any]]:
        self.asked.append(query)
        return self.rows.get(what.removeprefix("ksm:"), [])


def test_kube_state_facts_go_to_the_assembly_as_facts_with_restarts_summed_over_the_window() -> None:
    pod = {"namespace": "ml", "pod": "trainer-0"}
    answers = KsmAnswers()
    cache = KsmCache(WINDOW, [mn.KSM_POD_INFO])
    answers.rows = {
        mn.KSM_POD_INFO: [{"metric": {**pod, "node": "n1"}, "value": [NOW, "1"]}],
        mn.KSM_POD_RESTARTS: [{"metric": pod, "value": [NOW, "2"]}],
    }
    cache.read(answers, NOW, CycleReport(backfilling=False))
    answers.rows = {mn.KSM_POD_RESTARTS: [{"metric": pod, "value": [NOW + 300, "1"]}]}
    cache.read(answers, NOW + 300, CycleReport(backfilling=False))
    facts = {(metric, tuple(labels)): value for metric, labels, value in cache.facts_now()}
    assert facts == {
        (mn.KSM_POD_INFO, (("namespace", "ml"), ("node", "n1"), ("pod", "trainer-0"))): 1.0,
        (mn.KSM_POD_RESTARTS, (("namespace", "ml"), ("pod", "trainer-0"))): 3.0,
    }
    assert "[300s]" in answers.asked[-1]  # the later read looks back to the one before only
    answers.rows = {}
    cache.read(answers, NOW + WINDOW + 600, CycleReport(backfilling=False))
    assert [metric for metric, _, _ in cache.facts_now()] == []  # not seen for a window: forgotten
