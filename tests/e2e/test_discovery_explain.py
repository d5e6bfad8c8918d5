"""End to end: `analyze --context` and `explain` find the test Prometheus through the real API server.

A real Prometheus holds backfilled history and listens on 127.0.0.1, as every server a test starts
does. A selector-less Service labelled as kube-prometheus-stack's stands for it in the local
cluster: an ExternalName Service naming `localhost`, as a Prometheus outside the cluster is named
(the API server admits no loopback address in endpoints, nor a one-label name in an FQDN slice). The commands get no URL: they find the Service by its labels with the
context given on the command line (the kubeconfig's current context points nowhere), and connect to
the discovered endpoint directly. The API server does not proxy to loopback, so the service-proxy
path is tested on recorded answers (tests/unit/commands/test_prometheus_discovery.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gpu_rightsizer.commands import analyze, explain
from gpu_rightsizer.sim.backfill import write_openmetrics
from gpu_rightsizer.sim.library import scenario_library
from gpu_rightsizer.sim.scenarios import Scenario
from gpu_rightsizer.testcluster.prometheus import PrometheusServer
from tests.e2e.conftest import Kube

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not (shutil.which("prometheus") and shutil.which("promtool")),
        reason="prometheus/promtool not installed",
    ),
]

END = 1_767_225_600.0  # 2026-01-01T00:00:00Z
WINDOW = 3600.0
PICKED = ("loader-starved", "healthy-training", "idle-notebook")


@dataclass(frozen=True)
class Discoverable:
    kubeconfig: Path
    context: str
    namespace: str
    prometheus_url: str
    scenarios: list[Scenario]
    port: int


@pytest.fixture(scope="module")
def discoverable(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Discoverable]:
    workdir = tmp_path_factory.mktemp("discovery")
    scenarios = [s for s in scenario_library("e2e") if s.name in PICKED]
    scenarios = list({s.name: s for s in scenarios}.values())
    assert sorted(s.name for s in scenarios) == sorted(PICKED)
    history = workdir / "history.om"
    write_openmetrics(history, scenarios, END - WINDOW - 600, END, 60.0)
    server = PrometheusServer(workdir=workdir, backfill=(history,))
    server.start()
    namespace = kube.create_namespace("monitoring")
    labels = {"app": "kube-prometheus-stack-prometheus", "release": "kube-prometheus-stack"}
    name = "kube-prometheus-stack-prometheus"
    kube.apply(
        {  # a Prometheus outside the cluster, named by DNS: the API server admits no loopback endpoint
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {
                "type": "ExternalName",
                "externalName": "localhost",
                "ports": [
                    {"name": "http-web", "port": server.port},
                    {"name": "reloader-web", "port": 8080},
                ],
            },
        },
    )
    original = yaml.safe_load(kube.kubeconfig.read_text())
    context = original["current-context"]
    user = next(c["context"]["user"] for c in original["contexts"] if c["name"] == context)
    original["clusters"].append({"name": "nowhere", "cluster": {"server": "https://127.0.0.1:9"}})
    original["contexts"].append({"name": "nowhere", "context": {"cluster": "nowhere", "user": user}})
    original["current-context"] = "nowhere"
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(original))
    try:
        yield Discoverable(
            kubeconfig, context, namespace, f"http://localhost:{server.port}", scenarios, server.port
        )
    finally:
        server.stop()
        kube.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found", check=False)


def _run(module: object, argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)  # type: ignore[attr-defined]
    return int(module.run(parser.parse_args(argv)))  # type: ignore[attr-defined]


def _discovery_flags(found: Discoverable) -> list[str]:
    return [
        "--kubeconfig",
        str(found.kubeconfig),
        "--context",
        found.context,
        "--prometheus-access",
        "endpoint",
    ]


def test_analyze_finds_prometheus_with_no_url(
    discoverable: Discoverable, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run(analyze, [*_discovery_flags(discoverable), "--at", str(END), "-n", "e2e", "-o", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert (
        f"found Prometheus {discoverable.namespace}/kube-prometheus-stack-prometheus:{discoverable.port}"
        in captured.err
    )
    assert f"reaching it at {discoverable.prometheus_url}" in captured.err
    got = {row["workload"]["name"]: row["primary"] for row in json.loads(captured.out)}
    assert got == {s.name: s.expected.value for s in discoverable.scenarios}


def test_analyze_without_the_context_flag_names_the_unreachable_cluster(
    discoverable: Discoverable, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run(analyze, ["--kubeconfig", str(discoverable.kubeconfig), "--timeout", "2", "-o", "json"])
    captured = capsys.readouterr()
    assert code == 1
    assert "cannot reach the API server at https://127.0.0.1:9" in captured.err


def test_explain_prints_the_sparklines(
    discoverable: Discoverable, capsys: pytest.CaptureFixture[str]
) -> None:
    width = 40
    argv = ["loader-starved", "-n", "e2e", *_discovery_flags(discoverable), "--at", str(END)]
    code = _run(explain, [*argv, "--width", str(width)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    text = captured.out
    assert text.startswith("e2e/Deployment/loader-starved: InputPipelineCPUBound"), text
    lines = {line.split("  ")[0].strip(): line for line in text.splitlines() if "  " in line}
    drawn = set(explain.BLOCKS + explain.AT_LIMIT + " ")
    for label in ("GPU busy", "SM active", "CPU"):
        line = lines[label]
        spark = line[12 : 12 + width]
        assert set(spark) <= drawn and spark.strip(), line
    # the starved loader's CPU sits at its limit while its GPU idles: the CPU line is at the top,
    # the GPU busy line low
    cpu = lines["CPU"][12 : 12 + width]
    busy = lines["GPU busy"][12 : 12 + width]
    assert cpu.count(explain.AT_LIMIT) + cpu.count("█") > width // 2, cpu
    assert all(cell in "▁▂▃ " for cell in busy), busy
    for section in ("Findings", "Actions", "Vetoes (why nothing shrinks)"):
        assert section in text
    assert "cpu limit" in text and "→" in text


def test_explain_of_an_unknown_workload_is_a_clear_error(
    discoverable: Discoverable, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run(explain, ["no-such-thing", "-n", "e2e", *_discovery_flags(discoverable), "--at", str(END)])
    captured = capsys.readouterr()
    assert code == 1
    assert "no GPU workload 'no-such-thing' in namespace e2e" in captured.err
    assert captured.out == ""
