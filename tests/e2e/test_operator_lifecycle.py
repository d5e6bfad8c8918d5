"""The recommendation lifecycle end to end on the real local cluster: garbage collection, opt-out,
Events on diagnosis changes, dry-run, the operator's own metrics and probes, policy status, and a
failing metrics source."""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import Background, Kube, unique_name
from tests.e2e.test_actuation_e2e import change_status
from tests.e2e.workloads import gpu_deployment

FAST = ("--window", "1m", "--interval", "3s")
IGNORE = {"gpurightsizer.io/ignore": "true"}


def create(kube: Kube, obj: dict[str, Any]) -> None:
    kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump(obj))


def recommendation(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    """The GPURecommendation, or None when it does not exist."""
    found = kube.kubectl("get", "gpurecommendation", "-n", namespace, name, "-o", "json", check=False)
    if found.returncode != 0:
        if "NotFound" in found.stderr:
            return None
        raise RuntimeError(found.stderr)
    result: dict[str, Any] = json.loads(found.stdout)
    return result


def primary(kube: Kube, namespace: str, name: str) -> str | None:
    rec = recommendation(kube, namespace, name) or {}
    return ((rec.get("status") or {}).get("diagnosis") or {}).get("primary")


def events_on(kube: Kube, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kube.get_json("events", "-n", namespace)["items"]
    return [
        e for e in items if (e["involvedObject"].get("kind"), e["involvedObject"].get("name")) == (kind, name)
    ]


def wait(predicate: Callable[[], Any], timeout: float, what: str, operator: Background | None = None) -> Any:
    """Poll until truthy; on timeout fail with the operator's log tail."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as error:  # transient API errors: keep polling
            last_error = error
        time.sleep(1)
    log = f"\n--- operator log ---\n{operator.output()[-5000:]}" if operator else ""
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (last error: {last_error}){log}")


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)] from a /metrics endpoint."""
    with urllib.request.urlopen(url, timeout=5) as answer:
        text = answer.read().decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return samples


def metric(url: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels` (0 when none)."""
    return sum(
        value
        for found, value in scrape(url).get(name, [])
        if all(found.get(key) == wanted for key, wanted in labels.items())
    )


def policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "gpurightsizer.io/v1alpha1",
        "kind": "GPURightsizingPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


def in_namespace(namespace: str) -> dict[str, Any]:
    return {"matchLabels": {"kubernetes.io/metadata.name": namespace}}


def test_recommendation_of_a_deleted_workload_is_garbage_collected(kube: Kube, run_operator: Any) -> None:
    namespace = kube.create_namespace("life-gc")
    create(kube, gpu_deployment("trainer", namespace))
    operator = run_operator("-n", namespace)
    rec = wait(
        lambda: recommendation(kube, namespace, "deployment-trainer"), 60, "a recommendation", operator
    )
    deployment = kube.get_json("deployment", "-n", namespace, "trainer")
    assert rec["metadata"]["ownerReferences"][0]["uid"] == deployment["metadata"]["uid"]

    kube.kubectl("delete", "deployment", "-n", namespace, "trainer", "--wait=false")
    wait(
        lambda: recommendation(kube, namespace, "deployment-trainer") is None,
        90,
        "kube-controller-manager to garbage-collect the recommendation",
        operator,
    )
    assert operator.process.poll() is None


def test_opt_out_annotation_prevents_and_removes_recommendations(kube: Kube, run_operator: Any) -> None:
    namespace = kube.create_namespace("life-optout")
    create(kube, gpu_deployment("skipped", namespace, annotations=IGNORE))
    create(kube, gpu_deployment("later", namespace))
    # A short interval: without a metrics source the cycle still does its housekeeping.
    operator = run_operator("-n", namespace, "--interval", "3s")
    wait(
        lambda: recommendation(kube, namespace, "deployment-later"),
        60,
        "the later one's recommendation",
        operator,
    )
    wait(
        lambda: kube.get_json("pods", "-n", namespace, "-l", "app=skipped")["items"],
        60,
        "pods of the opted-out Deployment",
    )
    time.sleep(3)  # the operator has seen them
    assert recommendation(kube, namespace, "deployment-skipped") is None

    kube.kubectl("annotate", "deployment", "-n", namespace, "later", "gpurightsizer.io/ignore=true")
    wait(
        lambda: recommendation(kube, namespace, "deployment-later") is None,
        60,
        "the opted-out recommendation to be removed",
        operator,
    )
    assert "opt-out annotation" in operator.output()
    time.sleep(5)  # a few more pod events and cycles: it must not come back
    assert recommendation(kube, namespace, "deployment-later") is None
    assert operator.process.poll() is None


def test_diagnosis_change_posts_an_event_and_metrics_are_served(
    kube: Kube, live_metrics: str, run_operator: Any
) -> None:
    namespace = kube.create_namespace("life-event")
    create(kube, gpu_deployment("trainer", namespace, scenario="input-cpu-bound", cpu="1"))
    operator = run_operator("-n", namespace, "--prometheus-url", live_metrics, *FAST)
    wait(
        lambda: primary(kube, namespace, "deployment-trainer") == "InputPipelineCPUBound",
        180,
        "the real diagnosis",
        operator,
    )
    status = (recommendation(kube, namespace, "deployment-trainer") or {})["status"]
    deployment = kube.get_json("deployment", "-n", namespace, "trainer")
    events = wait(
        lambda: [
            e
            for e in events_on(kube, namespace, "Deployment", "trainer")
            if e["reason"] == "DiagnosisChanged"
        ],
        30,
        "a DiagnosisChanged Event on the Deployment",
        operator,
    )
    event = events[-1]
    assert event["involvedObject"]["uid"] == deployment["metadata"]["uid"]
    assert event["type"] == "Warning"
    message = event["message"]
    assert "from InsufficientData to InputPipelineCPUBound" in message
    assert status["diagnosis"]["summary"] and status["diagnosis"]["summary"] in message

    # The operator's own metrics, once a cycle with an analysis has been recorded.
    def analysed() -> dict[str, list[tuple[dict[str, str], float]]] | None:
        samples = scrape(operator.metrics_url)
        total = sum(v for _, v in samples.get("gpu_rightsizer_workloads_analyzed_total", []))
        return samples if total > 0 else None

    samples = wait(analysed, 30, "gpu_rightsizer_workloads_analyzed_total > 0", operator)
    recs = {
        (labels["diagnosis"], labels["namespace"]): v
        for labels, v in samples["gpu_rightsizer_recommendations"]
    }
    assert recs.get(("InputPipelineCPUBound", namespace)) == 1, recs
    wasted = [
        v
        for labels, v in samples["gpu_rightsizer_wasted_gpu_hours_per_day"]
        if labels["namespace"] == namespace
    ]
    assert len(wasted) == 1 and wasted[0] >= 0
    cycles = [v for _, v in samples["gpu_rightsizer_cycle_duration_seconds_count"]]
    assert cycles and cycles[0] >= 1
    with urllib.request.urlopen(operator.url, timeout=5) as answer:
        assert answer.status == 200
        health = json.load(answer)
    assert "secondsSinceLastCycle" in health, health


def test_dry_run_shows_the_patch_and_changes_nothing(
    kube: Kube, live_metrics: str, run_operator: Any
) -> None:
    namespace = kube.create_namespace("life-dry")
    kube.apply(
        policy(
            f"dry-{namespace}",
            {
                "namespaceSelector": in_namespace(namespace),
                "mode": "Apply",
                "dryRun": True,
                "actions": ["cpu"],
                "observation": {"window": "5m", "minSamples": 10},
                "safety": {"allowSingleReplica": True},  # a dry run passes the same gates as a change
            },
        )
    )
    create(kube, gpu_deployment("trainer", namespace, scenario="input-cpu-bound", cpu="1"))
    before = wait(
        lambda: (
            kube.get_json("deployment", "-n", namespace, "trainer")
            if kube.get_json("deployment", "-n", namespace, "trainer").get("status", {}).get("readyReplicas")
            else None
        ),
        90,
        "a ready trainer",
    )
    operator = run_operator(
        "-n", namespace, "--role", "all", "--prometheus-url", live_metrics, "--lease-name",
        unique_name("lease"), *FAST,
    )  # fmt: skip

    def dry_run_apply() -> dict[str, Any] | None:
        apply = change_status(kube, namespace, "deployment-trainer")
        return apply if apply.get("dryRun") and apply.get("patch") else None

    apply = wait(dry_run_apply, 240, "a dry-run patch in the change record", operator)
    assert apply["state"] == "Pending" and "dry run" in apply["reason"]
    patch = yaml.safe_load(apply["patch"])
    container = patch["spec"]["template"]["spec"]["containers"][0]
    assert container["name"] == "main"
    assert container["resources"]["limits"]["cpu"] != "1"
    events = wait(
        lambda: [e for e in events_on(kube, namespace, "Deployment", "trainer") if e["reason"] == "DryRun"],
        30,
        "a DryRun Event",
        operator,
    )
    assert apply["patch"].strip() in events[-1]["message"]

    time.sleep(8)  # a few more cycles: still nothing applied
    after = kube.get_json("deployment", "-n", namespace, "trainer")
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["spec"]["template"] == before["spec"]["template"]
    assert "gpurightsizer.io/previous" not in (after["metadata"].get("annotations") or {})
    assert "ChangeApplied" not in {e["reason"] for e in events_on(kube, namespace, "Deployment", "trainer")}


def test_policy_status_counts_workloads_and_reports_overlaps(kube: Kube, run_operator: Any) -> None:
    namespace = kube.create_namespace("life-policy")
    broad, narrow = f"broad-{namespace}", f"narrow-{namespace}"
    kube.apply(
        policy(broad, {"namespaceSelector": in_namespace(namespace), "mode": "Recommend"}),
        policy(
            narrow,
            {
                "namespaceSelector": in_namespace(namespace),
                "workloadSelector": {"matchLabels": {"app": "a"}},
                "priority": 10,
                "mode": "Recommend",
            },
        ),
    )
    for name in ("a", "b", "c"):
        create(kube, gpu_deployment(name, namespace))
    operator = run_operator("-n", namespace, "--interval", "3s")

    def statuses() -> tuple[dict[str, Any], dict[str, Any]] | None:
        first = kube.get_json("gpupolicy", broad).get("status") or {}
        second = kube.get_json("gpupolicy", narrow).get("status") or {}
        done = first.get("matchedWorkloads") == 2 and second.get("matchedWorkloads") == 1
        return (first, second) if done else None

    broad_status, narrow_status = wait(statuses, 90, "matchedWorkloads 2 (broad) and 1 (narrow)", operator)
    assert narrow in broad_status["overlaps"] and broad in narrow_status["overlaps"]
    assert broad_status["conditions"][0]["status"] == "True"


class _FlakyPrometheus:
    """A local HTTP front for the real Prometheus: forwards, answers garbage, or is gone."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.mode = "forward"
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self._answer()

            def _answer(self) -> None:
                if outer.mode == "garbage":
                    body = b"<html>upstream proxy error: \x00\xff not JSON</html>"
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length) if length else None
                request = urllib.request.Request(
                    outer.upstream + self.path,
                    data=data,
                    method=self.command,
                    headers={"Content-Type": self.headers.get("Content-Type", "")},
                )
                try:
                    with urllib.request.urlopen(request, timeout=20) as answer:
                        status, payload = answer.status, answer.read()
                except urllib.error.HTTPError as error:
                    status, payload = error.code, error.read()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def flaky_prometheus(live_metrics: str) -> Iterator[_FlakyPrometheus]:
    front = _FlakyPrometheus(live_metrics)
    try:
        yield front
    finally:
        if front.thread.is_alive():
            front.close()


def test_a_failing_metrics_source_loses_nothing(
    kube: Kube, flaky_prometheus: _FlakyPrometheus, run_operator: Any
) -> None:
    namespace = kube.create_namespace("life-flaky")
    create(kube, gpu_deployment("trainer", namespace, scenario="input-cpu-bound", cpu="1"))
    operator = run_operator("-n", namespace, "--prometheus-url", flaky_prometheus.url, *FAST)
    wait(
        lambda: primary(kube, namespace, "deployment-trainer") == "InputPipelineCPUBound",
        180,
        "the real diagnosis through the front",
        operator,
    )

    def errors() -> float:
        return metric(operator.metrics_url, "gpu_rightsizer_errors_total", kind="metrics_source")

    def status() -> dict[str, Any]:
        found: dict[str, Any] = (recommendation(kube, namespace, "deployment-trainer") or {})["status"]
        return found

    for mode in ("garbage", "unreachable"):
        start = errors()
        if mode == "unreachable":
            flaky_prometheus.close()
        else:
            flaky_prometheus.mode = mode
        # After the first failure no good cycle is left in flight: the status now is the last analysis.
        wait(lambda: errors() >= start + 1, 60, f"a failed cycle with a {mode} source", operator)  # noqa: B023
        last = status()
        wait(lambda: errors() >= start + 3, 60, f"two more failed cycles ({mode})", operator)  # noqa: B023
        assert status()["diagnosis"] == last["diagnosis"], mode
        assert last["diagnosis"]["primary"] == "InputPipelineCPUBound", mode
        assert status()["window"] == last["window"], f"the {mode} source changed the status"
        assert operator.process.poll() is None, f"the operator died on a {mode} source"
        with urllib.request.urlopen(operator.url, timeout=5) as answer:
            assert answer.status == 200
    log = operator.output()
    assert "metrics source" in log and flaky_prometheus.url in log and "keep their last analysis" in log
