"""A dashboard with data: the chart's ServiceMonitor and PrometheusRule on kube-prometheus-stack's real
CRDs, and every expression of the chart's dashboard answered by a real Prometheus that scrapes a locally
run operator the way that ServiceMonitor would.

kube-prometheus-stack's ServiceMonitor and PrometheusRule CRDs (tests/fixtures/kube-prometheus-stack) are
installed into the local cluster for this module and removed after it. The chart is rendered by the real
helm against that cluster (`serviceMonitor.enabled: auto` sees the monitoring.coreos.com/v1 API) and its
ServiceMonitor and PrometheusRule are applied. No prometheus-operator runs here, so the test Prometheus
gets the static scrape job that ServiceMonitor stands for: prometheus-operator's job name, the Service's
name as `job`, its namespace, service and endpoint labels, the endpoint's path, interval and honorLabels.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.chartlib import CHART_DIR, require_helm
from tests.e2e.conftest import Background, Kube, start_simulator
from tests.e2e.test_foundation import _promql as instant
from tests.e2e.workloads import gpu_deployment

REPO_ROOT = Path(__file__).resolve().parents[2]
KPS_CRDS = sorted((REPO_ROOT / "tests" / "fixtures" / "kube-prometheus-stack").glob("crd-*.yaml"))
RELEASE = "gpurs"
FULLNAME = "gpurs-gpu-rightsizer"
KPS_RELEASE = "kps-e2e"
SCRAPE_INTERVAL = "2s"
#: What Grafana puts for $__rate_interval at a 2 s scrape interval (4 x the interval, at least).
RATE_INTERVAL = "20s"
#: A price for every model, and a per-model price for the idle notebook's A100.
GPU_HOUR_PRICE = 2.5
PRICE_MAP = {"NVIDIA-A100-SXM4-80GB": 1.75}
#: The alert threshold the render uses: below the starved trainer's waste, above its savings (0).
WASTE_THRESHOLD = 12


@pytest.fixture(scope="module")
def monitoring_api(kube: Kube) -> Iterator[None]:
    """kube-prometheus-stack's CRDs, installed for this module and removed after it (other modules
    expect a cluster that serves no monitoring.coreos.com API)."""
    assert [path.name for path in KPS_CRDS] == ["crd-prometheusrules.yaml", "crd-servicemonitors.yaml"]
    objects = [doc for path in KPS_CRDS for doc in yaml.safe_load_all(path.read_text()) if doc]
    kube.apply(*objects)
    names = [f"crd/{doc['metadata']['name']}" for doc in objects]
    kube.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
    try:
        yield
    finally:
        kube.kubectl("delete", "--wait=true", "--ignore-not-found", *names, check=False)


@pytest.fixture(scope="module")
def release_namespace(kube: Kube) -> Iterator[str]:
    """The namespace the chart is rendered into (shared by this module's tests)."""
    name = kube.create_namespace("monitoring")
    yield name
    kube.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


@pytest.fixture(scope="module")
def rendered(kube: Kube, monitoring_api: None, release_namespace: str) -> list[dict[str, Any]]:
    """The chart as the real helm renders it against this cluster (its API versions, validated)."""
    import subprocess

    helm = require_helm()
    proc = subprocess.run(
        [str(helm), "--kubeconfig", str(kube.kubeconfig), "template", RELEASE, str(CHART_DIR),
         "--namespace", release_namespace, "--validate",
         "--set", f"serviceMonitor.release={KPS_RELEASE}",
         "--set", f"serviceMonitor.interval={SCRAPE_INTERVAL}", "--set", "serviceMonitor.scrapeTimeout=1s",
         "--set", "prometheusRule.enabled=true", "--set", f"prometheusRule.release={KPS_RELEASE}",
         "--set", f"prometheusRule.wastedGPUHoursPerDayThreshold={WASTE_THRESHOLD}",
         "--set", f"pricing.gpuHourPrice={GPU_HOUR_PRICE}",
         "--set-json", f"pricing.gpuModelPrices={json.dumps(PRICE_MAP)}"],
        capture_output=True, text=True, check=False, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def _one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def test_servicemonitor_and_rules_are_rendered_and_accepted_by_the_kps_crds(
    kube: Kube, rendered: list[dict[str, Any]], release_namespace: str
) -> None:
    monitor = _one(rendered, "ServiceMonitor")
    rule = _one(rendered, "PrometheusRule", FULLNAME)
    assert monitor["metadata"]["labels"]["release"] == KPS_RELEASE  # what kps's Prometheus selects by
    assert rule["metadata"]["labels"]["release"] == KPS_RELEASE
    kube.apply(monitor, rule)  # validated by the API server against kube-prometheus-stack's schemas
    stored = kube.get_json("servicemonitors.monitoring.coreos.com", "-n", release_namespace)["items"]
    assert [m["metadata"]["name"] for m in stored] == [monitor["metadata"]["name"]]
    assert stored[0]["spec"]["endpoints"][0]["honorLabels"] is True
    rules = kube.get_json("prometheusrules.monitoring.coreos.com", "-n", release_namespace)["items"]
    alerts = [r.get("alert") for r in rules[0]["spec"]["groups"][0]["rules"]]
    assert "GPURightsizerWastedGPUHoursHigh" in alerts
    # a schema that refuses what it should: the real CRD rejects an endpoint with a mistyped field
    broken = {**monitor, "metadata": {**monitor["metadata"], "name": "broken"},
              "spec": {**monitor["spec"], "endpoints": [{"port": "metrics", "honorLabels": "yes"}]}}  # fmt: skip
    refused = kube.kubectl("apply", "-f", "-", input_text=yaml.safe_dump(broken), check=False)
    assert refused.returncode != 0 and "honorLabels" in refused.stderr, refused.stderr


def static_scrape_job(docs: list[dict[str, Any]], target: str) -> dict[str, Any]:
    """The scrape job prometheus-operator generates for the chart's ServiceMonitor, as a static config
    for one target: the labels its relabelling gives an endpoint of the selected Service."""
    monitor = _one(docs, "ServiceMonitor")
    [endpoint] = monitor["spec"]["endpoints"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    services = [
        d
        for d in docs
        if d["kind"] == "Service"
        and selector.items() <= d["metadata"].get("labels", {}).items()
        and d["metadata"]["namespace"] in monitor["spec"]["namespaceSelector"]["matchNames"]
        and any(p.get("name") == endpoint["port"] for p in d["spec"]["ports"])
    ]
    assert len(services) == 1, f"the ServiceMonitor selects {len(services)} Services of the chart"
    service = services[0]["metadata"]
    meta = monitor["metadata"]
    return {
        "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/0",
        "honor_labels": endpoint.get("honorLabels", False),
        "metrics_path": endpoint.get("path", "/metrics"),
        "scrape_interval": endpoint["interval"],
        "scrape_timeout": endpoint["scrapeTimeout"],
        "static_configs": [
            {
                "targets": [target],
                "labels": {
                    "job": service["name"],
                    "namespace": service["namespace"],
                    "service": service["name"],
                    "endpoint": endpoint["port"],
                    "pod": f"{FULLNAME}-recommender-0",
                    "container": "recommender",
                },
            }
        ],
    }


def dashboard_queries(docs: list[dict[str, Any]], namespaces: str) -> dict[str, str]:
    """Every query of the chart's dashboard (panel targets and template variables), by where it is, with
    Grafana's variables put in: $namespace as a regex of `namespaces`, $__rate_interval."""
    config_map = _one(docs, "ConfigMap", f"{FULLNAME}-dashboard")
    [text] = config_map["data"].values()
    dashboard = json.loads(text)
    queries = {
        f"panel {p['id']} {p['title']!r} {t['refId']}": t["expr"]
        for p in dashboard["panels"]
        for t in p.get("targets", [])
    }
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", variable["query"]["query"])
            assert match, variable["query"]
            queries[f"variable {variable['name']}"] = f"group by ({match.group(2)}) ({match.group(1)})"
    assert len(queries) > 25
    substituted = {}
    for where, expr in queries.items():
        filled = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$namespace", namespaces)
        assert "$" not in filled, f"{where}: a Grafana variable the test does not fill: {expr}"
        substituted[where] = filled
    return substituted


def _status(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    found = kube.kubectl("get", "gpurecommendation", "-n", namespace, name, "-o", "json", check=False)
    return (json.loads(found.stdout).get("status") or {}) if found.returncode == 0 else {}


def _diagnosed(status: dict[str, Any]) -> str | None:
    primary = (status.get("diagnosis") or {}).get("primary")
    return None if primary in (None, "InsufficientData") else str(primary)


def test_every_dashboard_expression_returns_data(
    kube: Kube, rendered: list[dict[str, Any]], run_operator: Any, tmp_path: Path
) -> None:
    from gpu_rightsizer.testcluster.prometheus import PrometheusServer, free_port

    trainers = kube.create_namespace("wasters")
    notebooks = kube.create_namespace("idlers")
    kube.apply(
        gpu_deployment("trainer-cpu-starved", trainers, scenario="input-cpu-bound", cpu="1"),
        gpu_deployment("notebook-idle", notebooks, scenario="idle", cpu="2", product="NVIDIA-A100-SXM4-80GB"),
    )
    simulator, simulator_port = start_simulator(kube, tmp_path)
    operator_port = free_port()
    prometheus = PrometheusServer(
        tmp_path / "prometheus",
        scrape_targets=[f"127.0.0.1:{simulator_port}"],
        scrape_interval=SCRAPE_INTERVAL,
        extra_scrape_configs=[static_scrape_job(rendered, f"127.0.0.1:{operator_port}")],
    )
    prices = tmp_path / "prices.yaml"
    prices.write_text(yaml.safe_dump(PRICE_MAP))
    operator: Background | None = None
    try:
        prometheus.start()
        operator = run_operator(
            "--prometheus-url", prometheus.url, "--window", "1m", "--interval", "5s",
            "--gpu-hour-price", str(GPU_HOUR_PRICE), "--gpu-prices", str(prices),
            "--metrics-port", str(operator_port),
        )  # fmt: skip
        kube.wait_for(
            lambda: (
                _diagnosed(_status(kube, trainers, "deployment-trainer-cpu-starved"))
                and _diagnosed(_status(kube, notebooks, "deployment-notebook-idle"))
            ),
            timeout=240,
            what="both workloads diagnosed",
        )
        trainer = _status(kube, trainers, "deployment-trainer-cpu-starved")
        assert trainer["diagnosis"]["primary"] == "InputPipelineCPUBound", trainer["diagnosis"]
        assert trainer["waste"]["gpuHoursPerDay"] > WASTE_THRESHOLD, trainer["waste"]
        assert trainer["savings"]["gpuHoursPerDay"] == 0.0
        assert trainer["cost"]["pricePerGPUHour"] == GPU_HOUR_PRICE
        notebook = _status(kube, notebooks, "deployment-notebook-idle")
        assert notebook["diagnosis"]["primary"] == "IdleAllocation", notebook["diagnosis"]
        assert notebook["cost"]["pricePerGPUHour"] == PRICE_MAP["NVIDIA-A100-SXM4-80GB"]

        queries = dashboard_queries(rendered, f"{trainers}|{notebooks}")
        empty: dict[str, str] = dict(queries)
        deadline = time.monotonic() + 180
        while empty and time.monotonic() < deadline:
            prometheus.check_running()
            for where, expr in list(empty.items()):
                if instant(prometheus.url, expr):
                    del empty[where]
            time.sleep(2)
        print(
            f"\n{len(queries) - len(empty)} of {len(queries)} dashboard queries returned data",
            file=sys.stderr,
        )
        assert not empty, "dashboard queries without data:\n" + "\n".join(
            f"{w}: {e}" for w, e in empty.items()
        )

        # the top-wasters table names the starved trainer with its diagnosis
        top = next(e for w, e in queries.items() if "'Top wasters' A" in w)
        rows = {r["metric"]["workload"]: r for r in instant(prometheus.url, top)}
        assert rows["trainer-cpu-starved"]["metric"]["diagnosis"] == "InputPipelineCPUBound"
        assert float(rows["trainer-cpu-starved"]["value"][1]) > WASTE_THRESHOLD

        # the alerts read what the ServiceMonitor's labels give: the operator is up under its selector,
        # and the waste alert fires on the trainer's namespace, whose savings are 0
        rule = _one(rendered, "PrometheusRule", FULLNAME)
        exprs = {r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}
        up = exprs["GPURightsizerAbsent"].removeprefix("absent(").removesuffix(")")
        assert instant(prometheus.url, up), up
        firing = {
            r["metric"]["namespace"]
            for r in instant(prometheus.url, exprs["GPURightsizerWastedGPUHoursHigh"])
        }
        assert trainers in firing, firing
        savings = instant(
            prometheus.url, f'gpu_rightsizer_savings_gpu_hours_per_day{{namespace="{trainers}"}}'
        )
        assert [float(s["value"][1]) for s in savings] == [0.0]
    finally:
        if operator is not None:
            operator.stop()
        prometheus.stop()
        simulator.stop()
