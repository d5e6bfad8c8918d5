"""End to end: simulated history → promtool backfill → a real Prometheus → `gpu-rightsizer analyze`.

Every simulated workload must come out with the diagnosis its scenario was built for, through the
PromQL aggregation path (label variants included). Needs /usr/bin/prometheus and promtool.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_rightsizer.commands import analyze
from gpu_rightsizer.sim.backfill import write_openmetrics
from gpu_rightsizer.sim.library import scenario_library
from gpu_rightsizer.sim.scenarios import LabelStyle, Scenario
from gpu_rightsizer.testcluster.prometheus import PrometheusServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not (shutil.which("prometheus") and shutil.which("promtool")),
        reason="prometheus/promtool not installed",
    ),
]

END = 1_767_225_600.0  # 2026-01-01T00:00:00Z: fixed, so the run is deterministic
WINDOW = 3600.0


def main(argv: list[str]) -> int:
    """`gpu-rightsizer <argv>` for the analyze subcommand, parsed by its own argument declarations."""
    assert argv[0] == "analyze"
    parser = argparse.ArgumentParser(prog="gpu-rightsizer analyze")
    analyze.add_arguments(parser)
    return analyze.run(parser.parse_args(argv[1:]))


def _scenarios() -> list[Scenario]:
    """One variant per diagnosis code in one namespace, plus a second namespace with exported_* labels."""
    picked: dict[str, Scenario] = {}
    for scenario in scenario_library("e2e"):
        picked.setdefault(scenario.expected.value, scenario)
    return list(picked.values())


@pytest.fixture(scope="module")
def prometheus(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, list[Scenario], list[Scenario]]]:
    """A Prometheus holding backfilled history in both label styles; always stopped."""
    workdir = tmp_path_factory.mktemp("prometheus")
    plain = _scenarios()
    exported = [s.with_(namespace="e2e-exported") for s in scenario_library("e2e-exported")[::7]]
    plain_file = workdir / "plain.om"
    exported_file = workdir / "exported.om"
    write_openmetrics(plain_file, plain, END - WINDOW - 600, END, 60.0)
    write_openmetrics(
        exported_file,
        exported,
        END - WINDOW - 600,
        END,
        60.0,
        LabelStyle(exported_pod_labels=True, hostname_label="hostname"),
    )
    server = PrometheusServer(workdir=workdir, backfill=(plain_file, exported_file))
    server.start()
    try:
        yield server.url, plain, exported
    finally:
        server.stop()


def _analyze(url: str, namespace: str, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    code = main(
        ["analyze", "--prometheus", url, "--window", "1h", "--at", str(END), "-n", namespace, "-o", "json"]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return {row["workload"]["name"]: row["primary"] for row in json.loads(captured.out)}


def test_each_scenario_gets_its_diagnosis(
    prometheus: tuple[str, list[Scenario], list[Scenario]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, plain, _ = prometheus
    got = _analyze(url, "e2e", capsys)
    expected = {s.name: s.expected.value for s in plain}
    assert got == expected


def test_exported_labels_and_lowercase_hostname(
    prometheus: tuple[str, list[Scenario], list[Scenario]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, _, exported = prometheus
    got = _analyze(url, "e2e-exported", capsys)
    assert got == {s.name: s.expected.value for s in exported}


def test_unreachable_prometheus_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["analyze", "--prometheus", "http://127.0.0.1:9", "--timeout", "2", "-o", "json"])
    captured = capsys.readouterr()
    assert code == 1
    assert "cannot reach Prometheus" in captured.err
    assert captured.out == ""


def test_table_output_lists_every_workload(
    prometheus: tuple[str, list[Scenario], list[Scenario]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, plain, _ = prometheus
    assert main(["analyze", "--prometheus", url, "--at", str(END), "-n", "e2e"]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split()[:2] == ["WORKLOAD", "DIAGNOSIS"]
    for scenario in plain:
        assert f"e2e/{scenario.kind}/{scenario.name}" in table


def test_html_output_plots_every_workload_from_prometheus(
    prometheus: tuple[str, list[Scenario], list[Scenario]], tmp_path: Path
) -> None:
    """The plotted series' range queries run on a real Prometheus: every workload gets its plots."""
    url, plain, _ = prometheus
    report = tmp_path / "report.html"
    argv = ["analyze", "--prometheus", url, "--window", "1h", "--at", str(END), "-n", "e2e", "-o", "html"]
    assert main([*argv, "--output-file", str(report)]) == 0
    text = report.read_text()
    article = r'<article class="workload" id="e2e/[^/]+/([^"]+)">.*?data-plot="gpu-busy" data-points="(\d+)"'
    points = {name: int(n) for name, n in re.findall(article, text, re.DOTALL)}
    assert set(points) == {scenario.name for scenario in plain}
    assert all(n == 61 for name, n in points.items() if name != "new-pod")  # 1 h at 60 s steps
    assert 2 <= points["new-pod"] < 61  # its pod started inside the window
    for plot in ("cpu", "gpu-memory", "sm-active"):  # each from its own range query
        assert text.count(f'data-plot="{plot}" data-points=') == len(plain), plot


def test_live_exporter_scraped_by_prometheus(tmp_path: Path) -> None:
    """Live mode: pods from the API → simulated /metrics → a real Prometheus scrape → the Prometheus source."""
    from datetime import UTC, datetime, timedelta
    from typing import Any

    from kubernetes.client import (
        V1Container,
        V1NodeList,
        V1ObjectMeta,
        V1OwnerReference,
        V1Pod,
        V1PodList,
        V1PodSpec,
        V1PodStatus,
        V1ResourceRequirements,
    )

    from gpu_rightsizer.adapters.prometheus import PrometheusConfig, read_prometheus
    from gpu_rightsizer.model.observation import Signal
    from gpu_rightsizer.sim.live import serve
    from gpu_rightsizer.testcluster.prometheus import free_port

    started = datetime.now(tz=UTC) - timedelta(hours=1)
    pod = V1Pod(
        metadata=V1ObjectMeta(
            name="loader-7c9-x1",
            namespace="live",
            annotations={"sim.gpurightsizer.io/scenario": "input-cpu-bound"},
            labels={"pod-template-hash": "7c9"},
            owner_references=[
                V1OwnerReference(
                    api_version="apps/v1", kind="ReplicaSet", name="loader-7c9", uid="u", controller=True
                )
            ],
            creation_timestamp=started,
        ),
        spec=V1PodSpec(
            node_name="gpu-node-1",
            containers=[
                V1Container(
                    name="main",
                    resources=V1ResourceRequirements(limits={"cpu": "2", "nvidia.com/gpu": "1"}),
                )
            ],
        ),
        status=V1PodStatus(phase="Running", start_time=started),
    )

    class CoreApi:
        def list_pod_for_all_namespaces(self, **_: Any) -> V1PodList:
            return V1PodList(items=[pod])

        def list_node(self, **_: Any) -> V1NodeList:
            return V1NodeList(items=[])

    port = free_port()
    exporter = serve(CoreApi(), port)
    server = PrometheusServer(workdir=tmp_path, scrape_targets=[f"127.0.0.1:{port}"], scrape_interval="1s")
    try:
        server.start()
        deadline = time.monotonic() + 60
        windows: list[Any] = []
        while time.monotonic() < deadline:
            time.sleep(2)
            windows = read_prometheus(PrometheusConfig(server.url), window_seconds=60, step_seconds=1)
            if windows and windows[0].pods and windows[0].pods[0].gpus:
                gpu = windows[0].pods[0].gpus[0]
                if gpu.stats.get(Signal.GR_ENGINE_ACTIVE) and gpu.stats[Signal.GR_ENGINE_ACTIVE].samples >= 5:
                    break
    finally:
        server.stop()
        exporter.shutdown()
    assert [w.workload.key for w in windows] == ["live/Deployment/loader"]
    window = windows[0]
    assert window.allocation.cpu_limit_cores == 2.0
    busy = window.pods[0].gpus[0].stats[Signal.GR_ENGINE_ACTIVE]
    assert busy.samples >= 5
    assert busy.p95 < 0.5  # starved of CPU
