"""The actuator end to end on the real local cluster: a policy in Apply mode, the live simulator and
Prometheus, and `gpu-rightsizer run --role all` patching, verifying and rolling back workloads."""

from __future__ import annotations

import json
import os
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import Kube, unique_name
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
        # no window: the operator's short --window applies; the shrink gate's minimum windows and
        # memory look-back lowered as a policy may (the defaults ask a day of a Deployment), and
        # minConfidence with them (a serving window far shorter than a day lowers confidence to ~0.6)
        "observation": {
            "minSamples": 10,
            "thresholds": {
                "minConfidence": 0.5,
                "shrinkMinWindowServiceSeconds": 0,
                "shrinkMinWindowJobSeconds": 0,
                "memoryLookbackMinSeconds": 0,
            },
        },
        # the workloads here have one replica: restarting it is accepted (never by default)
        "safety": {"cooldown": "1h", "verifyFor": "30s", "allowSingleReplica": True, **safety},
    }
    kube.apply(
        {
            "apiVersion": "gpurightsizer.io/v1alpha1",
            "kind": "GPURightsizingPolicy",
            "metadata": {"name": name},
            "spec": spec,
        }
    )


HOOKS = Path(__file__).parent / "hooks"


def fault(crash_at: str = "", renew_delay: float = 0) -> dict[str, str]:
    """Environment of an operator process with a fault injected (tests/e2e/hooks/sitecustomize.py)."""
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(HOOKS), os.environ.get("PYTHONPATH")]))}
    if crash_at:
        env["GPURS_E2E_CRASH_AT"] = crash_at
    if renew_delay:
        env["GPURS_E2E_RENEW_DELAY"] = str(renew_delay)
    return env


def operator_args(url: str, namespace: str) -> list[str]:
    return [
        "--role",
        "all",
        "--prometheus-url",
        url,
        "-n",
        namespace,
        "--lease-name",
        unique_name("lease"),
        *FAST,
    ]


def recommendation(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = kube.get_json("gpurecommendation", "-n", namespace, name)
    return result


def apply_state(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return (recommendation(kube, namespace, name).get("status") or {}).get("apply") or {}


def change_status(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    """The actuator's own record (GPURightsizingChange status: patch, rollback, history); {} when none."""
    found = kube.kubectl("get", "gpurightsizingchange", "-n", namespace, name, "-o", "json", check=False)
    return (json.loads(found.stdout).get("status") or {}) if found.returncode == 0 else {}


def container_resources(kube: Kube, namespace: str, deployment: str) -> dict[str, Any]:
    obj = kube.get_json("deployment", "-n", namespace, deployment)
    resources: dict[str, Any] = obj["spec"]["template"]["spec"]["containers"][0]["resources"]
    return resources


def running_pods(kube: Kube, namespace: str, app: str) -> list[dict[str, Any]]:
    pods = kube.get_json("pods", "-n", namespace, "-l", f"app={app}")["items"]
    return [
        p
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def settled(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    """The apply status once the change is Verified or RolledBack."""
    state = apply_state(kube, namespace, name)
    return state if state.get("state") in ("Verified", "RolledBack") else None


def promql(url: str, query: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(
        f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}", timeout=10
    ) as answer:
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


def test_cpu_starved_trainer_is_patched_and_verified(
    kube: Kube, live_metrics: str, run_operator: Any
) -> None:
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
        lambda: promql(
            live_metrics,
            f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{exported_namespace="{namespace}",exported_pod="{pod_name}"}}',
        ),
        timeout=60,
        what="GPU series of the new pod",
    )
    assert float(busy[0]["value"][1]) > record["baseline"]["gpuBusyP95"]

    final = wait(
        kube,
        lambda: settled(kube, namespace, "deployment-trainer"),
        240,
        "the change to be verified",
        namespace,
        operator,
    )
    assert final["state"] == "Verified", final.get("reason")
    assert record["changeId"] in final["reason"]
    reasons = {e["reason"] for e in events_for(kube, namespace, "trainer")}
    assert {"ChangeApplied", "ChangeVerified"} <= reasons, reasons


def gpu_series_node(url: str, namespace: str) -> set[str]:
    rows = promql(url, f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{exported_namespace="{namespace}"}}')
    return {r["metric"].get("Hostname", r["metric"].get("hostname", "")) for r in rows}


def test_small_inference_on_a_whole_h200_moves_to_a_mig_slice(
    kube: Kube, live_metrics: str, run_operator: Any
) -> None:
    namespace = kube.create_namespace("act-mig")
    apply_policy(
        kube, f"apply-{namespace}", namespace, ["migProfile"],
        sharingStrategy="mig-mixed", allowedMigProfiles=["1g.18gb", "2g.35gb", "3g.71gb"],
    )  # fmt: skip
    create(kube, gpu_deployment("server", namespace, scenario="oversized", product="NVIDIA-H200", cpu="4"))
    kube.wait_for(lambda: running_pods(kube, namespace, "server"), timeout=90, what="a Running server")
    operator = run_operator(*operator_args(live_metrics, namespace))

    def on_mig() -> dict[str, Any] | None:
        limits = container_resources(kube, namespace, "server")["limits"]
        return limits if any(k.startswith("nvidia.com/mig-") for k in limits) else None

    limits = wait(kube, on_mig, 180, "the server to be patched to a MIG resource", namespace, operator)
    assert "nvidia.com/gpu" not in limits
    status = recommendation(kube, namespace, "deployment-server")["status"]
    assert status["diagnosis"]["primary"] == "OversizedGPU"
    mig_action = next(a for a in status["actions"] if a["type"] == "migProfile")
    resource = next(k for k in limits if k.startswith("nvidia.com/mig-"))
    assert resource in mig_action["to"]

    def rescheduled() -> list[dict[str, Any]] | None:
        pods = running_pods(kube, namespace, "server")
        return pods if pods and all(p["spec"]["nodeName"] == "gpu-h200-mig-0" for p in pods) else None

    wait(kube, rescheduled, 90, "the server pods to run on the MIG node", namespace, operator)
    final = wait(
        kube, lambda: settled(kube, namespace, "deployment-server"), 240, "verification", namespace, operator
    )
    assert final["state"] == "Verified", final.get("reason")


def test_a_change_that_leaves_pods_unschedulable_is_rolled_back(
    kube: Kube, live_metrics: str, run_operator: Any
) -> None:
    namespace = kube.create_namespace("act-rollback")
    apply_policy(kube, f"apply-{namespace}", namespace, ["cpu"])
    # Fill the A100 node's CPUs so that the trainer fits with 1 CPU but not with more.
    create(kube, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cpu-filler", "namespace": namespace},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "gpu-a100-0"},
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "126"}, "limits": {"cpu": "126"}}}],
        },
    })  # fmt: skip
    create(
        kube,
        gpu_deployment(
            "trainer", namespace, scenario="input-cpu-bound", cpu="1", product="NVIDIA-A100-SXM4-80GB"
        ),
    )
    kube.wait_for(lambda: running_pods(kube, namespace, "trainer"), timeout=90, what="a Running trainer")
    operator = run_operator(*operator_args(live_metrics, namespace))
    final = wait(
        kube,
        lambda: settled(kube, namespace, "deployment-trainer"),
        300,
        "the change to be settled",
        namespace,
        operator,
    )
    assert final["state"] == "RolledBack", final
    assert "cannot start" in final["reason"]
    resources = container_resources(kube, namespace, "trainer")
    assert resources["limits"]["cpu"] == "1" and resources["requests"]["cpu"] == "1"
    record = json.loads(
        kube.get_json("deployment", "-n", namespace, "trainer")["metadata"]["annotations"][
            "gpurightsizer.io/previous"
        ]
    )
    assert record["rollbackOf"] in final["reason"]
    assert "ChangeRolledBack" in {e["reason"] for e in events_for(kube, namespace, "trainer")}


def test_workloads_the_actuator_must_leave_alone(kube: Kube, live_metrics: str, run_operator: Any) -> None:
    limited = kube.create_namespace("act-limit")
    outside = kube.create_namespace("act-outside")
    hpa_ns = kube.create_namespace("act-hpa")
    declared = kube.create_namespace("act-declared")
    apply_policy(
        kube, f"apply-{limited}", limited, ["cpu"], maxChangesPerHour={"cluster": 10, "perNamespace": 1}
    )
    apply_policy(kube, f"apply-{hpa_ns}", hpa_ns, ["replicas"])
    apply_policy(kube, f"apply-{declared}", declared, ["cpu"])
    for name in ("trainer-a", "trainer-b"):
        create(kube, gpu_deployment(name, limited, scenario="input-cpu-bound", cpu="1"))
    create(kube, gpu_deployment("hot", limited, scenario="throttled", cpu="8"))
    create(kube, gpu_deployment("trainer", outside, scenario="input-cpu-bound", cpu="1"))
    kube.apply(
        gpu_deployment("trainer", declared, scenario="input-cpu-bound", cpu="1")
    )  # owned by `kubectl` (SSA)
    create(
        kube,
        gpu_deployment(
            "serve", hpa_ns, scenario="under-replicated", cpu="4", replicas=2, product="NVIDIA-H200"
        ),
    )
    create(kube, {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "serve", "namespace": hpa_ns},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "serve"},
                 "minReplicas": 2, "maxReplicas": 2,
                 "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]},
    })  # fmt: skip
    operator = run_operator(
        "--role", "all", "--prometheus-url", live_metrics, "--lease-name", unique_name("lease"), *FAST,
        *[arg for ns in (limited, outside, hpa_ns, declared) for arg in ("-n", ns)],
    )  # fmt: skip

    # Rate limit: one of the two trainers changes, the other is blocked.
    def one_changed() -> list[str] | None:
        states = {
            n: apply_state(kube, limited, f"deployment-{n}").get("state") for n in ("trainer-a", "trainer-b")
        }
        blocked = [n for n, s in states.items() if s == "Blocked"]
        changed = [n for n, s in states.items() if s in ("Applied", "Verified")]
        return blocked if len(blocked) == 1 and len(changed) == 1 else None

    blocked = wait(kube, one_changed, 180, "one change and one rate-limited trainer", limited, operator)[0]
    assert "rate limit" in apply_state(kube, limited, f"deployment-{blocked}")["reason"]
    assert container_resources(kube, limited, blocked)["limits"]["cpu"] == "1"

    # Health finding: never sized. While its first windows fill, the throttled workload may be
    # blocked by the rate limit first (another gate); it must end up blocked by its health finding.
    hot = wait(
        kube,
        lambda: (
            state
            if (state := apply_state(kube, limited, "deployment-hot")).get("state") == "Blocked"
            and "health finding" in state.get("reason", "")
            else None
        ),
        90,
        "the throttled workload to be blocked by its health finding",
        limited,
        operator,
    )
    assert "Throttled" in hot["reason"]
    assert container_resources(kube, limited, "hot")["limits"]["cpu"] == "8"

    # Outside every Apply policy: recommended, not applied.
    outside_state = wait(
        kube,
        lambda: (
            status
            if (status := recommendation(kube, outside, "deployment-trainer").get("status") or {}).get(
                "actions"
            )
            and status.get("apply", {}).get("reason")
            else None
        ),
        60,
        "a recommendation outside the policy",
        outside,
        operator,
    )
    assert (
        outside_state["apply"]["state"] == "Advised" and "no Apply policy" in outside_state["apply"]["reason"]
    )
    assert container_resources(kube, outside, "trainer")["limits"]["cpu"] == "1"

    # A declarative owner (server-side apply by `kubectl`) holds the CPU fields: reported, not fought.
    conflict = wait(
        kube,
        lambda: (
            apply_state(kube, declared, "deployment-trainer")
            if "conflict" in apply_state(kube, declared, "deployment-trainer").get("reason", "")
            else None
        ),
        60,
        "the field-manager conflict",
        declared,
        operator,
    )
    assert conflict["state"] == "Blocked" and "'kubectl'" in conflict["reason"]
    assert container_resources(kube, declared, "trainer")["limits"]["cpu"] == "1"

    # HPA: the replica count belongs to the HPA; the deployment's replicas are never written by us.
    def hpa_decided() -> dict[str, Any] | None:
        status = recommendation(kube, hpa_ns, "deployment-serve").get("status") or {}
        return (
            status
            if status.get("diagnosis", {}).get("primary") == "UnderReplicated"
            and status.get("apply", {}).get("state") not in (None, "Pending")
            else None
        )

    hpa_status = wait(kube, hpa_decided, 90, "the under-replicated service to be handled", hpa_ns, operator)
    assert all(a["type"] != "replicas" for a in hpa_status["actions"]), hpa_status["actions"]
    deployment = kube.get_json("deployment", "-n", hpa_ns, "serve")
    managers = {entry["manager"] for entry in deployment["metadata"].get("managedFields", [])}
    assert "gpu-rightsizer" not in managers
    if hpa_status["apply"]["state"] in ("Applied", "Verified"):
        assert kube.get_json("hpa", "-n", hpa_ns, "serve")["spec"]["maxReplicas"] > 2

    # Policy status shows what it governs.
    policy = kube.get_json("gpupolicy", f"apply-{limited}")
    assert policy["status"]["matchedWorkloads"] == 3


def test_two_actuators_and_a_crash_between_intent_and_patch(
    kube: Kube, live_metrics: str, run_operator: Any
) -> None:
    namespace = kube.create_namespace("act-crash")
    apply_policy(kube, f"apply-{namespace}", namespace, ["cpu"])
    create(kube, gpu_deployment("trainer", namespace, scenario="input-cpu-bound", cpu="1"))
    kube.wait_for(lambda: running_pods(kube, namespace, "trainer"), timeout=90, what="a Running trainer")
    args = operator_args(live_metrics, namespace)
    crashing = run_operator(*args, name="crashing", env=fault("intent"))
    wait(
        kube,
        lambda: crashing.process.poll() is not None,
        180,
        "the actuator to exit after recording its intent",
        namespace,
        crashing,
    )
    assert crashing.process.returncode == 17, crashing.output()[-3000:]
    intent = apply_state(kube, namespace, "deployment-trainer")
    assert intent["state"] == "Pending" and "recorded" in intent["reason"]
    assert container_resources(kube, namespace, "trainer")["limits"]["cpu"] == "1"  # the patch never left

    first = run_operator(*args, name="replica-1")
    second = run_operator(*args, name="replica-2")
    final = wait(
        kube,
        lambda: settled(kube, namespace, "deployment-trainer"),
        240,
        "the interrupted change to finish",
        namespace,
        first,
    )
    assert final["state"] == "Verified", final.get("reason")
    deployment = kube.get_json("deployment", "-n", namespace, "trainer")
    record = json.loads(deployment["metadata"]["annotations"]["gpurightsizer.io/previous"])
    assert record["changeId"] in intent["reason"]  # the recorded change, not a new one
    replica_sets = kube.get_json("replicasets", "-n", namespace, "-l", "app=trainer")["items"]
    assert len(replica_sets) == 2, [
        rs["metadata"]["name"] for rs in replica_sets
    ]  # one change: one new rollout
    logs = [first.output(), second.output()]
    senders = [
        log
        for log in logs
        if "was recorded but not sent; sending it now" in log or "had landed before the restart" in log
    ]
    assert len(senders) == 1, "exactly one actuator finished the change"
    assert sum(log.count("now the leader") for log in logs) >= 1
