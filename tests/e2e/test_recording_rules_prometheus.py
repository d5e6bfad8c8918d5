"""End to end: the chart's recording rules on a real Prometheus give the incremental read the raw figures.

Simulated history for every scenario of the labelled library → promtool backfill → a real Prometheus;
then the chart's rules file (charts/gpu-rightsizer/files/recording-rules.yaml, as committed) is
evaluated over the same history (`promtool tsdb create-blocks-from rules`, at the rules' 60 s
interval) and the server restarted on those blocks. Detection must pick every recorded family that
has data, and the incremental read through the recorded series must hold the same series with the
same figures as the read through the raw expressions, and give the same diagnoses. Needs only
/usr/bin/prometheus and promtool.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests

from gpu_rightsizer.adapters.incremental import UNREAD_SIGNALS, IncrementalSource
from gpu_rightsizer.adapters.prometheus import PrometheusConfig, PrometheusSource
from gpu_rightsizer.adapters.recording_rules import (
    HASH_LABEL,
    RECORD_NAMES,
    Detection,
    RecordingRule,
    detect,
    recording_rules,
)
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.sim.backfill import write_openmetrics
from gpu_rightsizer.sim.library import scenario_library
from gpu_rightsizer.testcluster.prometheus import PrometheusServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not (shutil.which("prometheus") and shutil.which("promtool")),
        reason="prometheus/promtool not installed (Debian package `prometheus`, installed by hack/bootstrap.sh)",
    ),
]

RULES_FILE = (
    Path(__file__).resolve().parents[2] / "charts" / "gpu-rightsizer" / "files" / "recording-rules.yaml"
)
END = 1_767_225_600.0
WINDOW = 3600.0
STEP = 60.0
HISTORY_START = END - WINDOW - 600
AT = datetime.fromtimestamp(END, tz=UTC)


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("prometheus-recording-rules")
    history = workdir / "history.om"
    write_openmetrics(history, scenario_library("rr"), HISTORY_START, END, STEP)
    server = PrometheusServer(workdir=workdir, backfill=(history,))
    server.start()
    try:
        server.backfill_rules(RULES_FILE, HISTORY_START, END)
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def detection(prometheus_url: str) -> Detection:
    source = PrometheusSource(PrometheusConfig(url=prometheus_url))
    return detect(source, now=END, window_seconds=WINDOW, step_seconds=STEP)


def test_detection_picks_every_recorded_family_that_has_data(
    prometheus_url: str, detection: Detection
) -> None:
    source = PrometheusSource(PrometheusConfig(url=prometheus_url))
    with_data = {
        rule.family for rule in recording_rules() if source.instant(rule.family, f"count({rule.expr})", END)
    }
    assert {"pod:cpu_usage_cores", "pod:memory_working_set_bytes", "gpu:throttle"} <= with_data
    # the promtool-made blocks are not listed by /api/v1/rules: detection goes by the series
    assert set(detection.used) == with_data, detection.describe()
    for family in set(RECORD_NAMES) - with_data:
        assert "has no series now" in detection.fallback[family]


def _evaluation_times(source: PrometheusSource, rule: RecordingRule) -> list[float]:
    rows = source.instant(rule.family, f"{rule.selector}[{WINDOW:.0f}s]", END)
    return sorted({float(t) for row in rows for t, _ in row["values"]})


def test_recorded_samples_are_the_raw_expressions_at_their_evaluation_times(
    prometheus_url: str, detection: Detection
) -> None:
    """The chart's rules compute exactly the operator's raw expressions (on real data, every sample)."""
    source = PrometheusSource(PrometheusConfig(url=prometheus_url))
    compared = 0
    for rule in recording_rules():
        if rule.family not in detection.used:
            continue
        times = _evaluation_times(source, rule)
        assert times and all(b - a == pytest.approx(STEP) for a, b in itertools.pairwise(times))
        recorded = _query_range(prometheus_url, rule.selector, times[0], times[-1])
        raw = {
            _identity(row): dict(row["values"])
            for row in _query_range(prometheus_url, rule.expr, times[0], times[-1])
        }
        assert {_identity(row) for row in recorded} == set(raw), rule.family
        for row in recorded:
            want = raw[_identity(row)]
            assert [t for t, _ in row["values"]] == list(want), (rule.family, row["metric"])
            for t, value in row["values"]:
                assert float(value) == pytest.approx(float(want[t]), rel=1e-12), (
                    rule.family,
                    row["metric"],
                    t,
                )
                compared += 1
    assert compared > 1000


def _query_range(url: str, query: str, start: float, end: float) -> list[dict[str, Any]]:
    """A range query at millisecond times (the client rounds its start to seconds)."""
    answer = requests.get(
        f"{url}/api/v1/query_range",
        params={"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{STEP:.0f}"},
        timeout=30,
    )
    answer.raise_for_status()
    rows: list[dict[str, Any]] = answer.json()["data"]["result"]
    return rows


def _identity(row: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in row["metric"].items() if k not in ("__name__", HASH_LABEL)))


def test_recorded_series_give_the_raw_figures_and_diagnoses(
    prometheus_url: str, detection: Detection
) -> None:
    """Read through recorded series, the operator's windows hold the same series and figures as read
    through the raw expressions, up to the rules' evaluation offset: a group is evaluated at a fixed
    offset into each interval, so the value read at a step is the raw one of up to one interval
    earlier. The raw read is taken that much earlier; gauges then match exactly, rates within the
    extrapolation of a window shifted by the sub-second offset."""
    source = PrometheusSource(PrometheusConfig(url=prometheus_url))
    offset = _evaluation_times(source, recording_rules()[0])[0] % STEP
    lag = STEP if offset > 0 else 0.0
    raw = IncrementalSource(source, window_seconds=WINDOW, step_seconds=STEP)
    recorded = IncrementalSource(
        PrometheusSource(PrometheusConfig(url=prometheus_url)),
        window_seconds=WINDOW,
        step_seconds=STEP,
        recorded=detection.used,
    )
    raw_windows = raw.read(at=datetime.fromtimestamp(END - lag, tz=UTC))
    recorded_windows = recorded.read(at=AT)
    assert raw.complete and recorded.complete
    assert raw.report.chunks_failed == 0 and recorded.report.chunks_failed == 0
    read = {f.name: f.expression for f in recorded.reader.families}
    # the incremental source leaves out the families no rule reads (`incremental.UNREAD_SIGNALS`)
    used = {name: selector for name, selector in detection.used.items() if name in read}
    assert len(used) >= len(detection.used) - len(UNREAD_SIGNALS)
    assert all(read[name] == selector for name, selector in used.items())
    worst: dict[str, float] = {}
    for family in detection.used:
        expected, got = _figures(raw, family, END - lag), _figures(recorded, family, END)
        assert set(got) == set(expected), family
        for identity, figures in expected.items():
            assert got[identity]["count"] == figures["count"], (family, identity)
            scale = max(abs(figures["max"]), abs(figures["min"]), 1e-9)
            for stat in ("mean", "min", "p50", "p95", "max"):
                off = abs(got[identity][stat] - figures[stat]) / scale
                worst[family] = max(worst.get(family, 0.0), off)
    print("largest difference relative to the series' scale, by family:", worst)
    rates = {family for family in worst if "rate" in RECORD_NAMES[family]}
    assert all(worst[family] <= 1e-12 for family in set(worst) - rates), worst  # gauges: exact
    assert all(worst[family] <= 0.01 for family in rates), worst  # rates: extrapolation
    by_key = {w.workload.key: w for w in recorded_windows}
    assert set(by_key) == {w.workload.key for w in raw_windows}
    for window in raw_windows:
        expected_analysis, got_analysis = analyze_window(window), analyze_window(by_key[window.workload.key])
        assert got_analysis.primary == expected_analysis.primary, window.workload.key
        assert sorted(f.code for f in got_analysis.findings) == sorted(
            f.code for f in expected_analysis.findings
        )


def _figures(source: IncrementalSource, family: str, now: float) -> dict[Any, dict[str, float]]:
    out: dict[Any, dict[str, float]] = {}
    for (name, identity), window in source.reader.store.series.items():
        figures = window.figures(now)
        if name == family and figures is not None:
            out[identity] = figures
    return out
