"""End to end: the incremental read gives the engine the same diagnoses as the full window read.

Simulated history for every scenario of the labelled library → promtool backfill → a real Prometheus;
then one full-window read (`PrometheusSource.read`) and one incremental read (backfill in chunks into
streaming windows, `IncrementalSource.read`) at the same instant, and the engine on both. Needs
/usr/bin/prometheus and promtool.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from gpu_rightsizer.adapters.incremental import UNREAD_SIGNALS, IncrementalSource
from gpu_rightsizer.adapters.prom_answers import RangeSeries
from gpu_rightsizer.adapters.prometheus import PrometheusConfig, PrometheusSource
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.streaming import RELATIVE_ACCURACY
from gpu_rightsizer.sim.backfill import write_openmetrics
from gpu_rightsizer.sim.library import scenario_library
from gpu_rightsizer.testcluster.prometheus import PrometheusServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not (shutil.which("prometheus") and shutil.which("promtool")),
        reason="prometheus/promtool not installed",
    ),
]

END = 1_767_225_600.0
WINDOW = 3600.0
STEP = 60.0


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("prometheus-incremental")
    history = workdir / "history.om"
    write_openmetrics(history, scenario_library("inc"), END - WINDOW - 600, END, STEP)
    server = PrometheusServer(workdir=workdir, backfill=(history,))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


class Recording(PrometheusSource):
    """The real source, remembering the spans of its range queries."""

    def __init__(self, config: PrometheusConfig) -> None:
        super().__init__(config)
        self.spans: list[tuple[str, float, float]] = []

    def range_series(self, what: str, query: str, start: float, end: float, step: float) -> list[RangeSeries]:
        self.spans.append((what, start, end))
        return super().range_series(what, query, start, end, step)


def test_incremental_read_gives_the_full_reads_diagnoses(prometheus_url: str) -> None:
    at = datetime.fromtimestamp(END, tz=UTC)
    full = PrometheusSource(PrometheusConfig(url=prometheus_url)).read(
        window_seconds=WINDOW, at=at, step_seconds=STEP
    )
    source = Recording(PrometheusConfig(url=prometheus_url))
    incremental = IncrementalSource(source, window_seconds=WINDOW, step_seconds=STEP, slice_seconds=1200)
    streamed = incremental.read(at=at)
    assert incremental.complete and incremental.report.chunks_failed == 0
    assert incremental.report.backfill_total > len(incremental.reader.families)  # read in time slices
    by_key = {w.workload.key: w for w in streamed}
    assert set(by_key) == {w.workload.key for w in full}
    for window in full:
        mine = by_key[window.workload.key]
        expected, got = analyze_window(window), analyze_window(mine)
        assert got.primary == expected.primary, window.workload.key
        assert sorted(f.code for f in got.findings) == sorted(f.code for f in expected.findings)
        for pod, twin in zip(window.pods, mine.pods, strict=True):
            assert not set(twin.stats) & UNREAD_SIGNALS  # no rule reads them: not kept
            for signal, summary in pod.stats.items():
                if signal in UNREAD_SIGNALS:
                    continue
                other = twin.stats[signal]
                assert other.samples == summary.samples
                assert other.p95 == pytest.approx(summary.p95, rel=RELATIVE_ACCURACY, abs=1e-6)


def test_after_the_backfill_a_cycle_reads_only_the_new_interval(prometheus_url: str) -> None:
    source = Recording(PrometheusConfig(url=prometheus_url))
    incremental = IncrementalSource(source, window_seconds=WINDOW, step_seconds=STEP)
    incremental.read(at=datetime.fromtimestamp(END - 120, tz=UTC))
    assert incremental.complete
    source.spans.clear()
    windows = incremental.read(at=datetime.fromtimestamp(END, tz=UTC))
    assert windows
    assert source.spans and all(start >= END - 120 for _, start, _ in source.spans)


def _steps_asked(spans: list[tuple[str, float, float]], step: float) -> int:
    """Points per series the range queries asked for (coarse reads counted at the window's step)."""
    return sum(round((end - start) / step) + 1 for _, start, end in spans)


def test_a_restart_from_saved_state_reads_only_the_gap_and_diagnoses_the_same(prometheus_url: str) -> None:
    saved_at, at = END - 600, datetime.fromtimestamp(END, tz=UTC)
    uninterrupted = IncrementalSource(
        PrometheusSource(PrometheusConfig(url=prometheus_url)), window_seconds=WINDOW, step_seconds=STEP
    )
    uninterrupted.read(at=datetime.fromtimestamp(saved_at, tz=UTC))
    assert uninterrupted.complete
    started = time.perf_counter()
    state = uninterrupted.save_state()
    saved_in = time.perf_counter() - started
    assert state is not None
    expected = {w.workload.key: w for w in uninterrupted.read(at=at)}

    resumed_source = Recording(PrometheusConfig(url=prometheus_url))
    resumed = IncrementalSource(resumed_source, window_seconds=WINDOW, step_seconds=STEP)
    started = time.perf_counter()
    assert resumed.restore_state(state, at=at) == saved_at
    resumed_windows = resumed.read(at=at)
    resumed_in = time.perf_counter() - started
    assert resumed.complete and resumed.report.chunks_failed == 0
    reader_spans = [span for span in resumed_source.spans if not span[0].startswith("range:")]
    assert reader_spans and all(start > saved_at for _, start, _ in reader_spans)  # the gap only

    got = {w.workload.key: w for w in resumed_windows}
    assert got and set(got) == set(expected)
    for key, window in expected.items():
        mine = got[key]
        assert analyze_window(mine).primary == analyze_window(window).primary, key
        assert sorted(f.code for f in analyze_window(mine).findings) == sorted(
            f.code for f in analyze_window(window).findings
        )
        for pod, twin in zip(window.pods, mine.pods, strict=True):
            assert twin.stats == pod.stats, key  # the same windows: the same figures exactly

    cold_source = Recording(PrometheusConfig(url=prometheus_url))
    cold = IncrementalSource(cold_source, window_seconds=WINDOW, step_seconds=STEP)
    started = time.perf_counter()
    cold.read(at=at)
    cold_in = time.perf_counter() - started
    assert cold.complete
    resumed_steps, cold_steps = (
        _steps_asked(resumed_source.spans, STEP),
        _steps_asked(cold_source.spans, STEP),
    )
    print(
        f"\nstate {len(state)} bytes for {len(uninterrupted.reader.store)} series "
        f"({len(state) / max(1, len(uninterrupted.reader.store)):.0f} B each), saved in {saved_in * 1000:.1f} ms; "
        f"start from state: {resumed_steps} steps asked, {resumed.report.samples} samples, {resumed_in:.2f} s; "
        f"cold start: {cold_steps} steps asked, {cold.report.samples} samples, {cold_in:.2f} s"
    )
    assert resumed.report.samples * 2 < cold.report.samples


def test_steady_reads_take_cpu_and_busy_coarse_points_from_the_family_answers(prometheus_url: str) -> None:
    """After the coarse series have read their window once, `range:cpu` and `range:busy` come from the
    CPU, engine-activity and utilisation family answers: no query of their own, and the same points,
    pod for pod, as a reader that still sends their queries gets from Prometheus."""
    derived_source = Recording(PrometheusConfig(url=prometheus_url))
    derived = IncrementalSource(derived_source, window_seconds=WINDOW, step_seconds=STEP)
    queried = IncrementalSource(
        PrometheusSource(PrometheusConfig(url=prometheus_url)), window_seconds=WINDOW, step_seconds=STEP
    )
    queried.derive_coarse = lambda: (frozenset(), None)  # type: ignore[method-assign]
    for source in (derived, queried):
        source.read(at=datetime.fromtimestamp(END - 900, tz=UTC))
        assert source.complete
    derived_source.spans.clear()
    for at in (END - 600, END - 300, END):
        for source in (derived, queried):
            source.read(at=datetime.fromtimestamp(at, tz=UTC))
            assert source.report.chunks_failed == 0
    assert {what for what, _, _ in derived_source.spans}.isdisjoint({"range:cpu", "range:busy"})
    assert any(what == "range:requests_per_s" for what, _, _ in derived_source.spans)  # still queried
    for name in ("range:cpu", "range:busy"):
        mine = {tuple(sorted(r["metric"].items())): list(r["values"]) for r in derived.coarse.rows(name)}
        theirs = {tuple(sorted(r["metric"].items())): list(r["values"]) for r in queried.coarse.rows(name)}
        assert mine.keys() == theirs.keys() and len(mine) >= 5, name
        for pod, points in theirs.items():
            assert [t for t, _ in mine[pod]] == [t for t, _ in points], (name, pod)
            assert [v for _, v in mine[pod]] == pytest.approx([v for _, v in points], rel=1e-9), (name, pod)
            assert points[-1][0] == END, (name, pod)
