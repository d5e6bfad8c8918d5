"""End to end: simulated history → promtool backfill → a real Prometheus → `gpu-rightsizer analyze`.

Every simulated workload must come out with the diagnosis its scenario was built for, through the
PromQL aggregation path (label variants included). Needs /usr/bin/prometheus and promtool.
"""

from __future__ import annotations

import argparse
import json
import shutil
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
        not (shutil.which("prometheus") and shutil.which("promtool")), reason="prometheus/promtool not installed"
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
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[Scenario], list[Scenario]]]:
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
