"""End to end: the incremental read gives the engine the same diagnoses as the full window read.

Simulated history for every scenario of the labelled library → promtool backfill → a real Prometheus;
then one full-window read (`PrometheusSource.read`) and one incremental read (backfill in chunks into
streaming windows, `IncrementalSource.read`) at the same instant, and the engine on both. Needs
/usr/bin/prometheus and promtool.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from gpu_rightsizer.adapters.incremental import IncrementalSource
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

    def range(self, what: str, query: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        self.spans.append((what, start, end))
        return super().range(what, query, start, end, step)


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
            for signal, summary in pod.stats.items():
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
