"""Counter families read as raw samples give the windows of their rate queries.

The incremental reader fetches a counter family's raw samples (`metric[interval + rate window]`) and
computes `max(rate(), deriv())` per series, the per-pod combination and the GPU-pod join itself
(`incremental.CounterRead`), so Prometheus only reads the samples. Over a history served by a real
Prometheus (promtool backfill) with resets, late starts, unaligned scrapes, two containers, two
interfaces reported by two containers, an old label style, PSI "waiting" series that stop where
"stalled" ones go on, a pod that stops requesting a GPU and one that never did, every window equals the one the family's range query gives, series for series.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpu_rightsizer.adapters.incremental import (
    NAMESPACE_FOLDS,
    CounterAnswer,
    CounterRead,
    IncrementalReader,
    _source_families,
    counter_series,
    limited_to,
)
from gpu_rightsizer.adapters.prom_answers import AnswerError, RangeSeries, matrix_of
from gpu_rightsizer.adapters.prometheus import (
    POD_KEYS,
    PrometheusConfig,
    PrometheusSource,
    PrometheusSourceError,
    without_folds,
)
from gpu_rightsizer.logic.counters import deriv, extrapolated_rate, rates_at
from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.observation import Signal
from gpu_rightsizer.testcluster.prometheus import PrometheusServer

PLAIN = Path(__file__).resolve().parents[2] / "fixtures" / "openmetrics" / "plain.om"
FIRST, LAST = 1_767_223_200, 1_767_225_540
STEP = 60.0
WINDOW = 1800.0

needs_prometheus = pytest.mark.skipif(
    not (shutil.which("prometheus") and shutil.which("promtool")),
    reason="prometheus/promtool not installed (Debian package `prometheus`)",
)


def counter(
    metric: str, labels: str, start: int, every: int, rate: float, reset_at: int | None = None
) -> list[str]:
    """A counter's samples from `start` to LAST, `every` seconds, 7 s off the step grid, growing by
    `rate` a second (a little unevenly), restarting from 0 at `reset_at`."""
    lines = [f"# TYPE {metric.removesuffix('_total')} counter"]
    value, previous = 0.0, start
    for t in range(start + 7, LAST + 1, every):
        if reset_at is not None and previous < reset_at <= t:
            value = 0.0
        value += rate * (t - previous) * (1.0 + 0.2 * math.sin(t / 300))
        previous = t
        lines.append(f"{metric}{{{labels}}} {value:.3f} {t}")
    return lines


def requests(pod: str, until: int) -> list[str]:
    lines = ["# TYPE kube_pod_container_resource_requests gauge"]
    labels = f'container="a",namespace="ml",node="gpu-node-70",pod="{pod}",resource="nvidia_com_gpu",unit="integer"'
    lines.extend(
        f"kube_pod_container_resource_requests{{{labels}}} 1 {t}" for t in range(FIRST, until + 1, 90)
    )
    return lines


def history() -> list[str]:
    """Counter shapes the plain fixture lacks, for a GPU pod that stops requesting its GPU two thirds
    in (`multi`, two containers) and a pod that never requested one (`cpu-only`)."""
    middle = (FIRST + LAST) // 2
    multi = 'namespace="ml",pod="multi"'
    lines = requests("multi", FIRST + 2 * (LAST - FIRST) // 3)
    lines += counter(mn.CADVISOR_CPU_USAGE, f'container="a",{multi}', FIRST, 30, 1.5, reset_at=middle)
    lines += counter(mn.CADVISOR_CPU_USAGE, f'container="b",{multi}', middle, 30, 0.25)
    lines += counter(mn.CADVISOR_CPU_USAGE, 'container="a",namespace="ml",pod="cpu-only"', FIRST, 30, 3.0)
    lines += counter(mn.CADVISOR_FS_READS, 'container="a",namespace="ml",pod_name="multi"', FIRST, 45, 2e6)
    for container in ("POD", ""):
        for interface, rate in (("eth0", 1e6), ("eth1", 3e5)):
            scale = 1.0 if container == "POD" else 1.01
            labels = f'container="{container}",interface="{interface}",{multi}'
            lines += counter(mn.CADVISOR_NET_RX, labels, FIRST, 30, rate * scale)
    lines += counter(mn.CADVISOR_CPU_PERIODS, f'container="a",{multi}', FIRST, 30, 10.0)
    lines += counter(
        mn.CADVISOR_CPU_THROTTLED_PERIODS, f'container="a",{multi}', FIRST, 30, 2.0, reset_at=middle
    )
    lines += counter(mn.CADVISOR_CPU_PERIODS, f'container="b",{multi}', middle, 30, 10.0)
    lines += counter(mn.CADVISOR_CPU_THROTTLED_PERIODS, f'container="b",{multi}', middle, 30, 0.0)
    # PSI: "waiting" for one container up to the middle only, "stalled" for both all along
    waiting = counter(mn.CADVISOR_CPU_PRESSURE_WAITING, f'container="a",{multi}', FIRST, 30, 0.3)
    lines += [line for line in waiting if line.startswith("#") or int(line.rsplit(" ", 1)[1]) < middle]
    lines += counter(mn.CADVISOR_CPU_PRESSURE_STALLED, f'container="a",{multi}', FIRST, 30, 0.1)
    lines += counter(mn.CADVISOR_CPU_PRESSURE_STALLED, f'container="b",{multi}', FIRST, 30, 0.2)
    return lines


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    plain = PLAIN.read_text().splitlines()
    assert plain[-1] == "# EOF"
    path = tmp_path_factory.mktemp("raw-counters") / "history.om"
    path.write_text("\n".join([*plain[:-1], *history(), "# EOF", ""]))
    server = PrometheusServer(workdir=tmp_path_factory.mktemp("raw-counters-prometheus"), backfill=(path,))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def counter_families() -> list[Any]:
    families = [family for family in _source_families(STEP, None) if family.counter is not None]
    assert {family.counter.combine for family in families} == {"sum", "interface", "ratio", "pressure"}
    return families


def windows(reader: IncrementalReader, at: float) -> dict[Any, Any]:
    return {key: window.figures(at) for key, window in reader.store.series.items()}


def read_both(url: str, families: list[Any]) -> tuple[IncrementalReader, IncrementalReader]:
    """A cold read a steady interval before the end, then the steady read, by the range queries and
    by the raw samples."""
    source = PrometheusSource(PrometheusConfig(url=url))
    readers = []
    for matrix in (None, source.matrix_series):
        reader = IncrementalReader(
            source.range_series,
            window_seconds=WINDOW,
            step_seconds=STEP,
            families=families,
            matrix_query=matrix,
        )
        for at in (float(LAST - 600), float(LAST)):
            report = reader.read(at)
            assert report.chunks_failed == 0, report.errors
        readers.append(reader)
    return readers[0], readers[1]


def assert_same_windows(before: dict[Any, Any], after: dict[Any, Any]) -> None:
    assert after.keys() == before.keys()
    for key, figures in before.items():
        assert figures is not None and after[key] is not None, key
        assert after[key] == pytest.approx(figures, rel=1e-9, abs=1e-9), key


@needs_prometheus
def test_raw_counter_reads_give_the_windows_of_the_rate_queries(prometheus_url: str) -> None:
    families = counter_families()
    by_range, by_raw = read_both(prometheus_url, families)
    before, after = windows(by_range, float(LAST)), windows(by_raw, float(LAST))
    assert_same_windows(before, after)
    pods = {dict(labels)["pod"] for _, labels in before}
    assert "multi" in pods and "cpu-only" not in pods  # the join: GPU pods only
    expected = {f.name for f in families} - {f"pod:{Signal.IO_PRESSURE_RATIO.value}"}  # no I/O PSI here
    assert {name for name, labels in before if ("pod", "multi") in labels} == expected
    assert len(pods) >= 3  # the plain fixture's pods too


@needs_prometheus
def test_raw_counter_reads_with_a_namespace_matcher_give_the_same_windows(prometheus_url: str) -> None:
    """Where no series has a namespace variant to fold (the fold left out of the expression), the raw
    selector is limited to the GPU pods' namespaces; the windows stay the same."""
    families = [
        replace(family, expression=without_folds(family.expression, NAMESPACE_FOLDS))
        for family in counter_families()
    ]
    sent: list[str] = []
    source = PrometheusSource(PrometheusConfig(url=prometheus_url))

    def matrix(what: str, query: str, at: float) -> list[RangeSeries]:
        sent.append(query)
        return source.matrix_series(what, query, at)

    by_range, _ = read_both(prometheus_url, families)
    reader = IncrementalReader(
        source.range_series, window_seconds=WINDOW, step_seconds=STEP, families=families, matrix_query=matrix
    )
    for at in (float(LAST - 600), float(LAST)):
        assert reader.read(at).chunks_failed == 0
    assert sent and all('namespace=~"ml"' in query for query in sent)
    assert_same_windows(windows(by_range, float(LAST)), windows(reader, float(LAST)))


@needs_prometheus
def test_a_steady_read_sends_one_raw_query_per_counter_family_and_one_for_the_gpu_pods(
    prometheus_url: str,
) -> None:
    families = counter_families()
    source = PrometheusSource(PrometheusConfig(url=prometheus_url))
    reader = IncrementalReader(
        source.range_series,
        window_seconds=WINDOW,
        step_seconds=STEP,
        families=families,
        matrix_query=source.matrix_series,
    )
    reader.read(float(LAST - 600))
    sent_before = source.queries_sent
    report = reader.read(float(LAST))
    assert source.queries_sent - sent_before == len(families) + 1 == report.queries


def test_rates_match_prometheus_formulas_at_each_time() -> None:
    """`rates_at` takes each time's closed range, needs two samples, counts a reset's value, and is
    the larger of rate() and deriv()."""
    kept = [(0.0, 0.0), (60.0, 60.0), (120.0, 120.0), (180.0, 10.0), (240.0, 70.0)]
    at = rates_at(kept, [0.0, 60.0, 180.0, 240.0, 600.0], 180.0)
    assert [t for t, _ in at] == [60.0, 180.0, 240.0]
    expected = max(extrapolated_rate(kept[0:4], 120.0, 0.0, 180.0), deriv(kept[0:4]))
    assert at[1][1] == pytest.approx(expected)
    assert at[0][1] == pytest.approx(1.0)  # a young series: deriv(), not rate() over the whole range
    assert deriv([(0.0, 5.0), (0.0, 5.0)]) == 0.0


def test_counter_series_keeps_a_pod_only_at_its_gpu_steps_and_rejects_garbage() -> None:
    grid = (120.0, 180.0, 240.0)
    raw = matrix_of(
        [
            {
                "metric": {"namespace": "ml", "pod": "p", "container": "a"},
                "values": [[t, str(t)] for t in range(0, 241, 30)],
            },
            {
                "metric": {"namespace": "ml", "pod": "q"},
                "values": [[t, str(2 * t)] for t in range(0, 241, 30)],
            },
        ]
    )
    pods = matrix_of([{"metric": {"namespace": "ml", "pod": "p"}, "values": [[120, "1"], [240, "1"]]}])
    [(identity, times, values)] = counter_series(
        CounterRead("x"), CounterAnswer(raw, pods, grid), 180.0, POD_KEYS
    )
    assert identity == (("namespace", "ml"), ("pod", "p"))
    assert list(times) == [120.0, 240.0] and list(values) == pytest.approx([1.0, 1.0])
    garbage = matrix_of([{"metric": {"namespace": "ml", "pod": "p"}, "values": [[0, "x"], [30, "y"]]}])
    with pytest.raises(AnswerError):
        counter_series(CounterRead("x"), CounterAnswer(garbage, pods, grid), 180.0, POD_KEYS)


def test_a_malformed_raw_answer_fails_the_chunk_and_changes_no_window() -> None:
    family = next(
        f for f in _source_families(STEP, None) if f.counter is not None and f.counter.combine == "sum"
    )
    good = [{"metric": {"namespace": "ml", "pod": "p"}, "values": [[t, "1"] for t in range(0, 3601, 60)]}]

    def range_query(what: str, query: str, start: float, end: float, step: float) -> list[RangeSeries]:
        return matrix_of(good)

    def matrix(what: str, query: str, at: float) -> list[RangeSeries]:
        return matrix_of([{"metric": {"namespace": "ml", "pod": "p"}, "values": [[at, "not a number"]]}])

    reader = IncrementalReader(
        range_query, window_seconds=WINDOW, step_seconds=STEP, families=[family], matrix_query=matrix
    )
    report = reader.read(3600.0)
    assert report.chunks_failed == 1 and "malformed raw samples" in report.errors[0]
    assert not reader.store.series


def test_a_failed_gpu_pods_query_fails_every_counter_chunk_of_the_span() -> None:
    families = counter_families()
    asked: list[str] = []

    def range_query(what: str, query: str, start: float, end: float, step: float) -> list[RangeSeries]:
        asked.append(what)
        raise PrometheusSourceError("Prometheus at http://x refused the query (bad_data)")

    def matrix(what: str, query: str, at: float) -> list[RangeSeries]:
        raise AssertionError("no raw query without the GPU pods")

    reader = IncrementalReader(
        range_query, window_seconds=WINDOW, step_seconds=STEP, families=families, matrix_query=matrix
    )
    report = reader.read(3600.0)
    assert report.chunks_failed == len(families)
    assert asked == ["GPU pods"]  # asked once for the span, not once per family


def test_limited_to_adds_one_namespace_matcher_to_any_selector_shape() -> None:
    assert limited_to("x", ["b", "a"]) == 'x{namespace=~"a|b"}'
    assert limited_to('x{container!=""}', ["a"]) == 'x{container!="",namespace=~"a"}'
    assert limited_to('{__name__=~"x|y",c="1"}', ["a.b"]) == '{__name__=~"x|y",c="1",namespace=~"a\\\\.b"}'
    assert limited_to("x{}", ["a"]) == 'x{namespace=~"a"}'
    assert limited_to("x", []) == "x"
    assert (
        limited_to("x", [f"namespace-{i}" for i in range(100)]) == "x"
    )  # past the regex limit: the join filters


def test_recorded_counter_families_read_their_recorded_series_as_range_queries() -> None:
    name = "pod:cpu_usage_cores"
    recorded = {name: 'namespace_pod:gpu_rightsizer_cpu{gpu_rightsizer_expr="x"}'}
    families = {family.name: family for family in _source_families(STEP, recorded)}
    assert families[name].counter is None
    assert families[name].expression == recorded[name]
    assert families["pod:net_rx_bytes_per_s"].counter is not None
