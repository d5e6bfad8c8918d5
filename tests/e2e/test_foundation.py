"""The foundation end to end: a GPU Deployment on a fake H100 node, its GPURecommendation, the CRD
validation, and the simulated DCGM series in a real Prometheus."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from typing import Any

from tests.e2e.conftest import Kube
from tests.e2e.workloads import gpu_deployment


def _running_pods(kube: Kube, namespace: str, app: str) -> list[dict[str, Any]]:
    pods = kube.get_json("pods", "-n", namespace, "-l", f"app={app}")["items"]
    return [p for p in pods if p["status"].get("phase") == "Running"]


def _promql(url: str, query: str) -> list[dict[str, Any]]:
    full = f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    with urllib.request.urlopen(full, timeout=10) as answer:
        payload = json.load(answer)
    assert payload["status"] == "success", payload
    result: list[dict[str, Any]] = payload["data"]["result"]
    return result


def test_gpu_deployment_runs_on_fake_h100_and_gets_a_recommendation(kube: Kube, run_operator: Any) -> None:
    namespace = kube.create_namespace("foundation")
    kube.apply(gpu_deployment("trainer", namespace, scenario="input-cpu-bound", cpu="1"))
    pods = kube.wait_for(
        lambda: _running_pods(kube, namespace, "trainer"), timeout=90, what="a Running trainer pod"
    )
    node = kube.get_json("node", pods[0]["spec"]["nodeName"])
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"

    run_operator("-n", namespace)
    recommendation = kube.wait_for(
        lambda: kube.get_json("gpurecommendations", "-n", namespace)["items"],
        timeout=60,
        what="the operator to create a GPURecommendation",
    )[0]
    deployment = kube.get_json("deployment", "-n", namespace, "trainer")
    assert recommendation["metadata"]["name"] == "deployment-trainer"
    assert recommendation["spec"]["targetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "trainer",
    }
    owner = recommendation["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("Deployment", deployment["metadata"]["uid"])

    def status_written() -> dict[str, Any] | None:
        rec = kube.get_json("gpurecommendation", "-n", namespace, "deployment-trainer")
        return rec.get("status") if rec.get("status", {}).get("diagnosis") else None

    status = kube.wait_for(status_written, timeout=30, what="the recommendation status")
    # No metrics source given: the operator must say so, not invent a diagnosis.
    assert status["diagnosis"]["primary"] == "InsufficientData"
    assert status["allocation"]["gpuResource"] == "nvidia.com/gpu"
    assert status["allocation"]["cpuLimit"] == "1"

    table = kube.kubectl("get", "gpurecommendations", "-A").stdout.splitlines()
    header = table[0].split()
    for column in ("WORKLOAD", "DIAGNOSIS", "ACTION", "GPU", "BUSY", "SAVINGS", "STATE", "LAST-ANALYSED"):
        assert column in header, table[0]
    assert "AGE" not in header, table[0]  # freshness is LAST-ANALYSED; the creation time is in -o wide
    row = next(line for line in table[1:] if line.startswith(namespace))
    assert "Deployment/trainer" in row and "InsufficientData" in row
    wide = kube.kubectl("get", "gpurecommendations", "-A", "-o", "wide").stdout.splitlines()[0]
    assert "CONFIDENCE" in wide and "WINDOW" in wide and "AGE" in wide


def test_api_server_rejects_an_invalid_policy_naming_the_field(kube: Kube) -> None:
    bad = {
        "apiVersion": "gpurightsizer.io/v1alpha1",
        "kind": "GPURightsizingPolicy",
        "metadata": {"name": "bad-mode"},
        "spec": {"mode": "Sometimes"},
    }
    result = kube.kubectl("apply", "-f", "-", input_text=json.dumps(bad), check=False)
    assert result.returncode != 0
    assert "spec.mode" in result.stderr and "Sometimes" in result.stderr, result.stderr
    assert kube.kubectl("get", "gpupolicy", "bad-mode", check=False).returncode != 0


def test_prometheus_serves_simulated_dcgm_series_of_the_pod(kube: Kube, live_metrics: str) -> None:
    namespace = kube.create_namespace("metrics")
    kube.apply(gpu_deployment("server", namespace, scenario="oversized", product="NVIDIA-H200"))
    pod = kube.wait_for(lambda: _running_pods(kube, namespace, "server"), timeout=90, what="a Running pod")[0]
    name = pod["metadata"]["name"]
    series = kube.wait_for(
        lambda: _promql(
            live_metrics,
            f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{exported_namespace="{namespace}",exported_pod="{name}"}}',
        ),
        timeout=60,
        what="Prometheus to scrape the pod's simulated DCGM series",
    )
    labels = series[0]["metric"]
    assert labels["modelName"].startswith("NVIDIA H200")
    assert labels.get("Hostname", labels.get("hostname")) == pod["spec"]["nodeName"]
    assert 0.0 <= float(series[0]["value"][1]) <= 1.0
    # the cAdvisor series come from another scrape job than the DCGM ones: a scrape apart at most
    kube.wait_for(
        lambda: _promql(
            live_metrics, f'container_cpu_usage_seconds_total{{namespace="{namespace}",pod="{name}"}}'
        ),
        timeout=10,
        what="cAdvisor CPU series of the pod",
    )
