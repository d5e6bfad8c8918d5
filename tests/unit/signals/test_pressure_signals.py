"""PSI (cAdvisor's container_pressure_* counters) reaches the figures the CPU and I/O pressure vetoes read,
on every path: the OpenMetrics reader, the full-window Prometheus read and the incremental read.

The history is the plain fixture plus PSI counters for the trainer pod: CPU "waiting" (PSI some) at 0.30
of wall time and "stalled" (PSI full) at 0.05, I/O served only as "stalled" at 0.20, and a pod-level
cgroup series at 0.90 that must not be read as an application container. The Prometheus paths read it
from a real Prometheus (promtool backfill), so the PromQL itself is what is tested.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpu_rightsizer.adapters.incremental import IncrementalSource
from gpu_rightsizer.adapters.openmetrics import read_openmetrics
from gpu_rightsizer.adapters.prometheus import PrometheusConfig, PrometheusSource
from gpu_rightsizer.logic.figures import summarise
from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.observation import Signal, WorkloadWindow
from gpu_rightsizer.testcluster.prometheus import PrometheusServer

PLAIN = Path(__file__).resolve().parents[2] / "fixtures" / "openmetrics" / "plain.om"
POD = 'namespace="ml",pod="trainer-c5150820-c51500"'
FIRST, LAST, EVERY = 1_767_223_200, 1_767_225_540, 90
AT = datetime.fromtimestamp(1_767_225_600, tz=UTC)
WINDOW = 2400.0

#: metric → (container, share of wall time): the counters rise by share × seconds.
PRESSURE = {
    mn.CADVISOR_CPU_PRESSURE_WAITING: (("main", 0.30), ("", 0.90)),
    mn.CADVISOR_CPU_PRESSURE_STALLED: (("main", 0.05),),
    mn.CADVISOR_IO_PRESSURE_STALLED: (("main", 0.20),),
}

needs_prometheus = pytest.mark.skipif(
    not (shutil.which("prometheus") and shutil.which("promtool")),
    reason="prometheus/promtool not installed (Debian package `prometheus`)",
)


def pressure_lines() -> list[str]:
    lines: list[str] = []
    for metric, series in PRESSURE.items():
        lines.append(f"# TYPE {metric.removesuffix('_total')} counter")
        for container, share in series:
            for t in range(FIRST, LAST + 1, EVERY):
                lines.append(f'{metric}{{container="{container}",{POD}}} {7.0 + share * (t - FIRST):.3f} {t}')
    return lines


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    plain = PLAIN.read_text().splitlines()
    assert plain[-1] == "# EOF"
    path = tmp_path_factory.mktemp("psi") / "psi.om"
    path.write_text("\n".join([*plain[:-1], *pressure_lines(), "# EOF", ""]))
    return path


@pytest.fixture(scope="module")
def prometheus_url(history: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = PrometheusServer(workdir=tmp_path_factory.mktemp("psi-prometheus"), backfill=(history,))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def trainer(windows: list[WorkloadWindow] | None) -> WorkloadWindow:
    assert windows is not None
    found = [w for w in windows if w.workload.name == "trainer"]
    assert len(found) == 1, [w.workload.name for w in windows]
    return found[0]


def assert_pressure_read(window: WorkloadWindow) -> None:
    """CPU: the app container's waiting share, not its stalled one nor the pod cgroup's; I/O: stalled
    where no waiting series is served. The figures the vetoes read say the same."""
    stats = window.pods[0].stats
    assert stats[Signal.CPU_PRESSURE_RATIO].p50 == pytest.approx(0.30, abs=0.01)
    assert stats[Signal.IO_PRESSURE_RATIO].p50 == pytest.approx(0.20, abs=0.01)
    figures = summarise(window)
    assert figures.cpu_pressure_p50 == pytest.approx(0.30, abs=0.01)
    assert figures.io_pressure_p50 == pytest.approx(0.20, abs=0.01)


def test_the_openmetrics_reader_reads_psi(history: Path) -> None:
    assert_pressure_read(trainer(read_openmetrics(history, window_seconds=WINDOW, at=AT)))


def test_a_workload_without_psi_has_no_pressure_figures(history: Path) -> None:
    chat = next(
        w for w in read_openmetrics(history, window_seconds=WINDOW, at=AT) if w.workload.name == "chat"
    )
    assert all(Signal.CPU_PRESSURE_RATIO not in pod.stats for pod in chat.pods)
    assert summarise(chat).cpu_pressure_p50 is None  # missing evidence, never a zero


@needs_prometheus
def test_the_full_window_prometheus_read_reads_psi(prometheus_url: str) -> None:
    source = PrometheusSource(PrometheusConfig(url=prometheus_url))
    assert_pressure_read(trainer(source.read_windows(WINDOW, AT).windows))


@needs_prometheus
def test_the_incremental_read_reads_psi(prometheus_url: str) -> None:
    source = IncrementalSource(
        PrometheusSource(PrometheusConfig(url=prometheus_url)), window_seconds=WINDOW, step_seconds=60.0
    )
    windows = source.read(at=AT)
    assert source.complete
    assert_pressure_read(trainer(windows))
