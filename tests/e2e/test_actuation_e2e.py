"""The actuator end to end on the real local cluster: a policy in Apply mode, the live simulator and
Prometheus, and `gpu-rightsizer run --role all` patching, verifying and rolling back workloads."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
import uuid
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import Kube
from tests.e2e.workloads import gpu_deployment

FAST = ("--window", "1m", "--interval", "5s", "--lease-seconds", "6")


def create(kube: Kube, obj: dict[str, Any]) -> None:
    """Create as `kubectl create` does (an imperative writer, not a declarative field owner)."""
    kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump(obj))


def apply_policy(kube: Kube, name: str, namespace: str, actions: list[str], **safety: Any) -> None:
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "mode": "Apply",
        "actions": actions,
        "observation": {"window": "5m", "minSamples": 10},
        "safety": {"cooldown": "1h", "verifyFor": "30s", **safety},
    }
    kube.apply({"apiVersion": "gpurightsizer.io/v1alpha1", "kind": "GPURightsizingPolicy", "metadata": {"name": name}, "spec": spec})


def operator_args(url: str, namespace: str) -> list[str]:
    return ["--role", "all", "--prometheus-url", url, "-n", namespace, "--lease-name", f"lease-{uuid.uuid4().hex[:6]}", *FAST]


def recommendation(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = kube.get_json("gpurecommendation", "-n", namespace, name)
    return result


def apply_state(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return (recommendation(kube, namespace, name).get("status") or {}).get("apply") or {}


def container_resources(kube: Kube, namespace: str, deployment: str) -> dict[str, Any]:
    obj = kube.get_json("deployment", "-n", namespace, deployment)
    resources: dict[str, Any] = obj["spec"]["template"]["spec"]["containers"][0]["resources"]
    return resources


def running_pods(kube: Kube, namespace: str, app: str) -> list[dict[str, Any]]:
    pods = kube.get_json("pods", "-n", namespace, "-l", f"app={app}")["items"]
    return [p for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


def settled(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    """The apply status once the change is Verified or RolledBack."""
    state = apply_state(kube, namespace, name)
    return state if state.get("state") in ("Verified", "RolledBack") else None


def promql(url: str, query: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}", timeout=10) as answer:
        result: list[dict[str, Any]] = json.load(answer)["data"]["result"]
    return result


def show(kube: Kube, namespace: str, operator: Any) -> str:
    """Diagnostics for a failed wait: the recommendations and the operator's log tail."""
    recs = kube.kubectl("get", "gpurecommendations", "-n", namespace, "-o", "yaml", check=False).stdout
    return f"\n--- recommendations ---\n{recs[-4000:]}\n--- operator log ---\n{operator.output()[-5000:]}"


def wait(kube: Kube, predicate: Any, timeout: float, what: str, namespace: str, operator: Any) -> Any:
    """`kube.wait_for` that shows the recommendations and the operator's log when it times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception:  # keep polling through transient API errors
            pass
        time.sleep(1)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}{show(kube, namespace, operator)}")


def events_for(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kube.get_json("events", "-n", namespace)["items"]
    return [e for e in items if e["involvedObject"].get("name") == name]


def test_cpu_starved_trainer_is_patched_and_verified(kube: Kube, live_metrics: str, run_operator: Any) -> None:
    namespace = kube.create_namespace("act-cpu")
    apply_policy(kube, f"apply-{namespace}", namespace, ["cpu"])
    create(kube, gpu_deployment("trainer", namespace, scenario="input-cpu-bound", cpu="1"))
    kube.wait_for(lambda: running_pods(kube, namespace, "trainer"), timeout=90, what="a Running trainer")
    operator = run_operator(*operator_args(live_metrics, namespace))

    def diagnosed() -> dict[str, Any] | None:
        status = recommendation(kube, namespace, "deployment-trainer").get("status") or {}
        return status if (status.get("diagnosis") or {}).get("primary") == "InputPipelineCPUBound" else None

    status = wait(kube, diagnosed, 150, "InputPipelineCPUBound on the trainer", namespace, operator)
    cpu_action = next(a for a in status["actions"] if a["type"] == "cpu")
    assert "1" in cpu_action["from"]

    def patched() -> dict[str, Any] | None:
        limits = container_resources(kube, namespace, "trainer")["limits"]
        return limits if limits["cpu"] != "1" else None

    limits = wait(kube, patched, 120, "the Deployment's CPU limit to be raised", namespace, operator)
    new_cpu = limits["cpu"]
    assert float(new_cpu.rstrip("m")) / (1000 if new_cpu.endswith("m") else 1) > 1
    assert container_resources(kube, namespace, "trainer")["requests"]["cpu"] == new_cpu
    assert limits["nvidia.com/gpu"] == "1"  # the GPU is untouched

    def new_pods_run() -> list[dict[str, Any]] | None:
        pods = running_pods(kube, namespace, "trainer")
        fresh = [p for p in pods if p["spec"]["containers"][0]["resources"]["limits"]["cpu"] == new_cpu]
        return fresh if fresh and len(fresh) == len(pods) else None

    pods = kube.wait_for(new_pods_run, timeout=90, what="new trainer pods with the new CPU limit")
    deployment = kube.get_json("deployment", "-n", namespace, "trainer")
    record = json.loads(deployment["metadata"]["annotations"]["gpurightsizer.io/previous"])
    assert record["previous"]["containers[main].resources.limits[cpu]"] == "1"
    assert record["target"]["containers[main].resources.limits[cpu]"] == new_cpu

    # The simulator follows the real limit: the new pod's GPU gets busier than before the change.
    pod_name = pods[0]["metadata"]["name"]
    busy = kube.wait_for(
        lambda: promql(live_metrics, f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{namespace="{namespace}",pod="{pod_name}"}}'),
        timeout=60,
        what="GPU series of the new pod",
    )
    assert float(busy[0]["value"][1]) > record["baseline"]["gpuBusyP95"]

    final = wait(kube, lambda: settled(kube, namespace, "deployment-trainer"), 240, "the change to be verified", namespace, operator)
    assert final["state"] == "Verified", final
    assert record["changeId"] in final["reason"]
    reasons = {e["reason"] for e in events_for(kube, namespace, "trainer")}
    assert {"ChangeApplied", "ChangeVerified"} <= reasons, reasons
