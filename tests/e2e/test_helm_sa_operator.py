"""The operator runs with the Helm chart's own ServiceAccount credentials, and that is enough.

`kubectl auth can-i` (test_helm_install.py) checks single grants; this module checks the whole: the
chart is installed, a token is minted for each of its ServiceAccounts, and the real operator runs
with nothing but that token, the role and the namespaces the chart's Deployments pass. The
recommender must create and analyse GPURecommendations, the actuator must patch a CPU-starved
workload in its namespace, and neither may hit a single 403 on the way. Outside its namespaces the
actuator is refused and says so, and patches nothing.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_rightsizer.testcluster.binaries import TestBinaries
from tests.e2e.conftest import Background, Kube
from tests.e2e.test_actuation_e2e import (
    apply_state,
    container_resources,
    create,
    recommendation,
    running_pods,
    wait,
)
from tests.e2e.workloads import gpu_deployment

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "gpu-rightsizer"
FAST = ("--window", "1m", "--interval", "5s")
#: An RBAC refusal as the Kubernetes client and kopf log it; a millisecond ",403" in a timestamp is not one.
FORBIDDEN = re.compile(r"forbidden|(?<![,.:\d])403(?!\d)", re.IGNORECASE)


@dataclass
class ChartInstall:
    """One installed release: its namespaces and a kubeconfig per ServiceAccount."""

    kube: Kube
    helm_bin: Path
    name: str
    namespace: str
    #: watched by the recommender, patchable by the actuator
    allowed: str
    #: watched by the recommender, not in the actuator's list
    outside: str
    workdir: Path

    @property
    def fullname(self) -> str:
        return f"{self.name}-gpu-rightsizer"

    def helm(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.helm_bin), "--kubeconfig", str(self.kube.kubeconfig), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
        if proc.returncode != 0:
            pytest.fail(
                f"helm {' '.join(args[:2])} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def kubeconfig_for(self, component: str) -> Path:
        """A kubeconfig that authenticates with a fresh token of the chart's `component` account only."""
        account = f"{self.fullname}-{component}"
        token = self.kube.kubectl(
            "create", "token", account, "--namespace", self.namespace, "--duration", "1h"
        ).stdout.strip()
        assert token, f"no token minted for {account}"
        admin = yaml.safe_load(self.kube.kubeconfig.read_text())
        context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
        cluster = next(c for c in admin["clusters"] if c["name"] == context["cluster"])["cluster"]
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "cluster", "cluster": cluster}],
            "users": [{"name": account, "user": {"token": token}}],
            "contexts": [{"name": account, "context": {"cluster": "cluster", "user": account}}],
            "current-context": account,
        }
        path = self.workdir / f"{component}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def deployment_container(self, component: str) -> dict[str, Any]:
        deployment = self.kube.get_json("deployment", f"{self.fullname}-{component}", "-n", self.namespace)
        container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
        return container

    def scope_args(self, component: str) -> list[str]:
        """The role and namespace flags the chart's Deployment passes (its other flags are in-cluster
        ports and durations, replaced by the test's own)."""
        args = [str(a) for a in self.deployment_container(component)["args"]]
        keep = [a for a in args if a.startswith(("--role=", "--namespace=", "--all-namespaces"))]
        assert any(a.startswith("--role=") for a in keep), args
        return keep

    def actuator_env(self) -> dict[str, str]:
        """The actuator Deployment's leader-election settings, POD_NAMESPACE as the kubelet sets it."""
        env = {
            e["name"]: str(e["value"]) for e in self.deployment_container("actuator")["env"] if "value" in e
        }
        return {
            "POD_NAMESPACE": self.namespace,
            "GPURS_LEASE_NAME": env["GPURS_LEASE_NAME"],
            "GPURS_LEASE_SECONDS": "6",
        }

    def as_account(self, component: str, *args: str) -> subprocess.CompletedProcess[str]:
        """kubectl with a ServiceAccount's kubeconfig (no admin credentials involved)."""
        cmd = [
            str(self.kube.cluster.bins.path("kubectl")),
            "--kubeconfig",
            str(self.kubeconfig_for(component)),
        ]
        return subprocess.run([*cmd, *args], capture_output=True, text=True, check=False, timeout=60)


@pytest.fixture(scope="module")
def chart(
    kube: Kube, testbins: TestBinaries, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChartInstall]:
    namespace = kube.create_namespace("gpurs-sa")
    allowed = kube.create_namespace("sa-allowed")
    outside = kube.create_namespace("sa-outside")
    install = ChartInstall(
        kube, testbins.path("helm"), f"sa{uuid.uuid4().hex[:4]}", namespace, allowed, outside,
        tmp_path_factory.mktemp("helm-sa"),
    )  # fmt: skip
    install.helm(
        "install", install.name, str(CHART), "--namespace", namespace,
        "--set-json", f"watch.namespaces={json.dumps([allowed, outside])}",
        "--set", "actuator.enabled=true",
        "--set-json", f"actuator.namespaces={json.dumps([allowed])}",
        "--set", "analysis.window=5m",
        "--set", "prometheus.url=http://prometheus.monitoring.svc:9090",
        "--timeout", "120s",
    )  # fmt: skip
    # Apply in both namespaces: the actuator is allowed in one only, and must act there alone. Created
    # imperatively (`kubectl create`) so that no declarative owner holds the workloads' fields.
    create(kube, {
        "apiVersion": "gpurightsizer.io/v1alpha1", "kind": "GPURightsizingPolicy",
        "metadata": {"name": f"apply-{install.name}"},
        "spec": {
            "namespaceSelector": {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [allowed, outside]}]},
            "mode": "Apply", "priority": 10, "actions": ["cpu"],
            "observation": {"minSamples": 10},  # no window: the operator's short --window applies
            "safety": {"cooldown": "1h", "verifyFor": "30s", "allowSingleReplica": True},
        },
    })  # fmt: skip
    try:
        yield install
    finally:
        kube.kubectl(
            "delete", "gpurightsizingpolicy", f"apply-{install.name}", "--ignore-not-found", check=False
        )
        subprocess.run(
            [str(install.helm_bin), "--kubeconfig", str(kube.kubeconfig), "uninstall", install.name,
             "--namespace", namespace, "--wait", "--timeout", "120s"],
            capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip


def start_as(
    run_operator: Any, chart: ChartInstall, component: str, prometheus_url: str, *extra: str
) -> Background:
    env = {"KUBECONFIG": str(chart.kubeconfig_for(component))}
    if component == "actuator":
        env.update(chart.actuator_env())
    operator: Background = run_operator(
        *chart.scope_args(component),
        "--prometheus-url",
        prometheus_url,
        *FAST,
        *extra,
        name=component,
        env=env,
    )
    return operator


def assert_never_forbidden(*operators: Background) -> None:
    for operator in operators:
        refused = [line for line in operator.output().splitlines() if FORBIDDEN.search(line)]
        assert not refused, "RBAC refusals in the operator log:\n" + "\n".join(refused[:20])


def diagnosed(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    status = recommendation(kube, namespace, name).get("status") or {}
    return status if (status.get("diagnosis") or {}).get("primary") == "InputPipelineCPUBound" else None


def test_recommender_token_is_enough_to_recommend(
    chart: ChartInstall, kube: Kube, live_metrics: str, run_operator: Any
) -> None:
    assert chart.scope_args("recommender") == [
        "--role=recommender", f"--namespace={chart.allowed}", f"--namespace={chart.outside}",
    ]  # fmt: skip
    create(kube, gpu_deployment("trainer", chart.outside, scenario="input-cpu-bound", cpu="1"))
    kube.wait_for(lambda: running_pods(kube, chart.outside, "trainer"), timeout=90, what="a Running trainer")
    recommender = start_as(run_operator, chart, "recommender", live_metrics)

    wait(
        kube, lambda: recommendation(kube, chart.outside, "deployment-trainer").get("status"),
        60, "the GPURecommendation and its first status", chart.outside, recommender,
    )  # fmt: skip
    created = recommendation(kube, chart.outside, "deployment-trainer")
    assert created["spec"]["targetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "trainer"}
    status = wait(
        kube, lambda: diagnosed(kube, chart.outside, "deployment-trainer"),
        150, "InputPipelineCPUBound on the trainer", chart.outside, recommender,
    )  # fmt: skip
    assert any(a["type"] == "cpu" for a in status["actions"]), status["actions"]
    # under an Apply policy the recommender leaves the change to the actuator: it never patches the
    # workload and never writes the actuator's state (status.apply)
    assert "apply" not in status, status["apply"]
    assert container_resources(kube, chart.outside, "trainer")["limits"]["cpu"] == "1"
    # the Event on the workload and the policy status were written with the same token
    reasons = {
        e["reason"] for e in kube.get_json("events", "-n", chart.outside)["items"]
        if e["involvedObject"].get("name") == "trainer"
    }  # fmt: skip
    assert "DiagnosisChanged" in reasons, reasons
    kube.wait_for(
        lambda: (kube.get_json("gpurightsizingpolicy", f"apply-{chart.name}").get("status") or {}).get(
            "matchedWorkloads"
        ),
        timeout=30,
        what="the policy status written by the recommender",
    )
    assert recommender.process.poll() is None
    assert_never_forbidden(recommender)


def test_actuator_token_patches_only_its_namespaces(
    chart: ChartInstall, kube: Kube, live_metrics: str, run_operator: Any
) -> None:
    assert chart.scope_args("actuator") == ["--role=actuator", f"--namespace={chart.allowed}"]
    create(kube, gpu_deployment("trainer", chart.allowed, scenario="input-cpu-bound", cpu="1"))
    kube.wait_for(lambda: running_pods(kube, chart.allowed, "trainer"), timeout=90, what="a Running trainer")
    recommender = start_as(run_operator, chart, "recommender", live_metrics)
    actuator = start_as(run_operator, chart, "actuator", live_metrics)

    def patched() -> dict[str, Any] | None:
        limits = container_resources(kube, chart.allowed, "trainer")["limits"]
        return limits if limits["cpu"] != "1" else None

    limits = wait(kube, patched, 240, "the actuator to raise the trainer's CPU", chart.allowed, actuator)
    new_cpu = str(limits["cpu"])
    assert float(new_cpu.rstrip("m")) / (1000 if new_cpu.endswith("m") else 1) > 1
    assert limits["nvidia.com/gpu"] == "1"
    managers = {
        m["manager"] for m in kube.get_json("deployment", "-n", chart.allowed, "trainer", "--show-managed-fields")["metadata"][
            "managedFields"
        ]
    }  # fmt: skip
    assert "gpu-rightsizer" in managers, managers
    wait(
        kube, lambda: apply_state(kube, chart.allowed, "deployment-trainer").get("state") in ("Applied", "Verified"),
        60, "the actuator's apply status", chart.allowed, actuator,
    )  # fmt: skip
    lease = kube.get_json("lease", chart.actuator_env()["GPURS_LEASE_NAME"], "-n", chart.namespace)
    assert lease["spec"].get("holderIdentity"), lease

    # The same Apply policy covers the outside namespace: no actuator acts there, nothing is touched.
    outside = apply_state(kube, chart.outside, "deployment-trainer")
    assert outside == {}, outside
    assert container_resources(kube, chart.outside, "trainer")["limits"]["cpu"] == "1"
    assert actuator.process.poll() is None and recommender.process.poll() is None
    assert_never_forbidden(recommender, actuator)

    # With its own token, the actuator cannot patch a workload outside its list.
    refused = chart.as_account(
        "actuator", "patch", "deployment", "trainer", "-n", chart.outside, "--type", "merge",
        "-p", '{"spec": {"template": {"spec": {"containers": [{"name": "main", "resources": {"limits": {"cpu": "2"}}}]}}}}',
    )  # fmt: skip
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused
    assert container_resources(kube, chart.outside, "trainer")["limits"]["cpu"] == "1"


def test_actuator_pointed_outside_its_namespaces_is_refused_and_says_so(
    chart: ChartInstall, kube: Kube, live_metrics: str, run_operator: Any
) -> None:
    """Misconfigured (a namespace it has no Role in): every attempt is refused and logged, nothing is
    patched. The actuator runs no recommender watches (it has its own loop), so nothing gives up and
    exits: every pass logs the refusal, a visible error for as long as it is misconfigured."""
    actuator = run_operator(
        "--role=actuator", f"--namespace={chart.outside}", "--prometheus-url", live_metrics, *FAST,
        name="actuator-outside",
        env={"KUBECONFIG": str(chart.kubeconfig_for("actuator")), **chart.actuator_env()},
    )  # fmt: skip
    refused_pass = "actuator pass failed"  # the actuator's own loop (actuator.loop), not the analysis cycle
    wait(
        kube, lambda: actuator.output().count(refused_pass) >= 2,
        60, "two actuator passes to report the refusal", chart.outside, actuator,
    )  # fmt: skip
    assert actuator.process.poll() is None, "a refused actuator pass must not stop the operator"
    assert "ForbiddenException" in actuator.output()
    assert container_resources(kube, chart.outside, "trainer")["limits"]["cpu"] == "1"

    log = actuator.output()
    refusal = f'cannot list resource \\"gpurecommendations\\" in API group \\"gpurightsizer.io\\" in the namespace \\"{chart.outside}\\"'
    assert refusal in log, log[-3000:]
    assert container_resources(kube, chart.outside, "trainer")["limits"]["cpu"] == "1"
    assert apply_state(kube, chart.outside, "deployment-trainer") == {}


def test_cluster_wide_recommender_token_is_enough(
    chart: ChartInstall, kube: Kube, live_metrics: str, run_operator: Any
) -> None:
    """The chart's default scope (watch.namespaces empty): one ClusterRoleBinding, `--all-namespaces`."""
    chart.helm(
        "upgrade", chart.name, str(CHART), "--namespace", chart.namespace, "--reuse-values",
        "--set-json", "watch.namespaces=[]", "--timeout", "120s",
    )  # fmt: skip
    assert chart.scope_args("recommender") == ["--role=recommender", "--all-namespaces"]
    anywhere = kube.create_namespace("sa-anywhere")
    create(kube, gpu_deployment("trainer", anywhere, scenario="input-cpu-bound", cpu="1"))
    kube.wait_for(lambda: running_pods(kube, anywhere, "trainer"), timeout=90, what="a Running trainer")
    recommender = start_as(run_operator, chart, "recommender", live_metrics)
    status = wait(
        kube, lambda: recommendation(kube, anywhere, "deployment-trainer").get("status"),
        60, "a GPURecommendation in a namespace no RoleBinding names", anywhere, recommender,
    )  # fmt: skip
    assert status["conditions"], status
    # the namespaces of the earlier tests are still analysed, from the one cluster-wide binding
    wait(
        kube, lambda: diagnosed(kube, chart.outside, "deployment-trainer"),
        60, "the earlier trainer's diagnosis", chart.outside, recommender,
    )  # fmt: skip
    assert recommender.process.poll() is None
    assert_never_forbidden(recommender)
