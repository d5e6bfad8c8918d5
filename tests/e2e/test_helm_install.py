"""`helm install`, `upgrade` and `uninstall` of the chart on the real local API server.

The API server (not just a schema) accepts every object; `kubectl auth can-i` as each ServiceAccount
proves the grants: the recommender cannot patch workloads or read Secrets but can write
GPURecommendations, and the actuator cannot touch namespaces outside its list. Uninstall leaves
nothing of the release behind but the CRDs. (KWOK nodes do not run the image; that is not the point.)
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpu_rightsizer.testcluster.binaries import TestBinaries
from tests.e2e.conftest import Kube

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "gpu-rightsizer"


@dataclass
class Release:
    """One installed release and the helpers to drive it."""

    kube: Kube
    helm_bin: Path
    name: str
    namespace: str
    teams: list[str]
    agent_namespace: str

    @property
    def fullname(self) -> str:
        return f"{self.name}-gpu-rightsizer"

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.helm_bin), "--kubeconfig", str(self.kube.kubeconfig), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
        if check and proc.returncode != 0:
            pytest.fail(f"{' '.join(args[:2])} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def install_args(self, actuator_namespaces: list[str]) -> list[str]:
        return [
            str(CHART), "--namespace", self.namespace,
            "--set", "actuator.enabled=true",
            "--set-json", f"actuator.namespaces={_json_list(actuator_namespaces)}",
            "--set", "agent.enabled=true",
            "--set", f"agent.namespace={self.agent_namespace}",
            "--set", "prometheus.url=http://prometheus.monitoring.svc:9090",
            "--timeout", "120s",
        ]  # fmt: skip

    def can(
        self,
        account: str,
        verb: str,
        resource: str,
        namespace: str | None = None,
        *,
        subresource: str = "",
        name: str = "",
    ) -> bool:
        """`kubectl auth can-i` as one of the release's ServiceAccounts."""
        target = f"{resource}/{name}" if name else resource
        home = self.agent_namespace if account == "agent" else self.namespace
        as_account = f"--as=system:serviceaccount:{home}:{self.fullname}-{account}"
        args = ["auth", "can-i", verb, target, as_account]
        if subresource:
            args.append(f"--subresource={subresource}")
        args += ["--namespace", namespace] if namespace else ["--all-namespaces"]
        proc = self.kube.kubectl(*args, check=False)
        answer = proc.stdout.strip()
        assert answer in ("yes", "no"), f"kubectl auth can-i {verb} {resource}: {proc.stdout} {proc.stderr}"
        return answer == "yes"

    def owned(self, kinds: str, *, all_namespaces: bool = True) -> list[str]:
        """Names of objects of `kinds` labelled with this release."""
        args = ["get", kinds, "-l", f"app.kubernetes.io/instance={self.name}", "-o", "name"]
        if all_namespaces:
            args.append("--all-namespaces")
        proc = self.kube.kubectl(*args, check=False)
        assert proc.returncode == 0 or "the server doesn't have a resource type" in proc.stderr, proc.stderr
        return proc.stdout.split()


def _json_list(items: list[str]) -> str:
    return "[" + ",".join(f'"{item}"' for item in items) + "]"


@pytest.fixture(scope="module")
def release(kube: Kube, testbins: TestBinaries) -> Iterator[Release]:
    helm_bin = testbins.path("helm")
    namespace = kube.create_namespace("gpurs-system")
    teams = [kube.create_namespace(f"team{i}") for i in range(3)]
    agents = kube.create_namespace("gpurs-agent")
    rel = Release(kube, helm_bin, f"gpurs{uuid.uuid4().hex[:4]}", namespace, teams, agents)
    rel.helm("install", rel.name, *rel.install_args(teams[:2]))
    try:
        yield rel
    finally:
        rel.helm("uninstall", rel.name, "--namespace", namespace, "--wait", "--timeout", "120s", check=False)


def test_install_creates_every_object(release: Release) -> None:
    kube, ns, full = release.kube, release.namespace, release.fullname
    for kind, name in [("deployment", f"{full}-recommender"), ("deployment", f"{full}-actuator"),
                       ("service", f"{full}-metrics"),
                       ("serviceaccount", f"{full}-recommender"), ("serviceaccount", f"{full}-actuator"),
                       ("configmap", f"{full}-dashboard"), ("networkpolicy", full)]:  # fmt: skip
        kube.kubectl("get", kind, name, "--namespace", ns)
    # the agent in a namespace of its own (agent.namespace): only that one needs Pod Security "privileged"
    for kind in ("daemonset", "serviceaccount"):
        kube.kubectl("get", kind, f"{full}-agent", "--namespace", release.agent_namespace)
    assert kube.kubectl("get", "daemonset", f"{full}-agent", "--namespace", ns, check=False).returncode != 0
    kube.kubectl("get", "gpurightsizingpolicy", f"{full}-default")
    for team in release.teams[:2]:
        kube.kubectl("get", "role", f"{full}-actuator", "--namespace", team)
    assert (
        kube.kubectl(
            "get", "role", f"{full}-actuator", "--namespace", release.teams[2], check=False
        ).returncode
        != 0
    )
    kube.kubectl("get", "role", f"{full}-actuator-leader-election", "--namespace", ns)


def test_recommender_reads_and_writes_recommendations_only(release: Release) -> None:
    team = release.teams[0]
    assert release.can("recommender", "list", "deployments.apps")
    assert release.can("recommender", "watch", "pods")
    assert release.can("recommender", "create", "gpurecommendations.gpurightsizer.io", team)
    assert release.can(
        "recommender", "patch", "gpurecommendations.gpurightsizer.io", team, subresource="status"
    )
    assert release.can("recommender", "create", "events", team)
    for verb, resource in [("patch", "deployments.apps"), ("update", "statefulsets.apps"), ("delete", "pods"),
                           ("patch", "jobs.batch"), ("patch", "horizontalpodautoscalers.autoscaling"),
                           ("get", "secrets"), ("list", "secrets")]:  # fmt: skip
        assert not release.can("recommender", verb, resource, team), f"recommender can {verb} {resource}"
    assert not release.can("recommender", "get", "secrets", release.namespace)
    assert not release.can("recommender", "patch", "gpurightsizingpolicies.gpurightsizer.io")


def test_only_the_actuators_identity_writes_change_records_proven_by_impersonation(release: Release) -> None:
    """The trust boundary (review-2 H-A): as the recommender's ServiceAccount, a change record cannot
    be created or patched, nor a workload patched; as the actuator's, the same record is created."""
    team, home, full = release.teams[0], release.namespace, release.fullname
    record = json.dumps({
        "apiVersion": "gpurightsizer.io/v1alpha1", "kind": "GPURightsizingChange",
        "metadata": {"name": "deployment-forged", "namespace": team},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "forged"}, "workloadUid": "u-1"},
    })  # fmt: skip

    def as_account(account: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        who = f"--as=system:serviceaccount:{home}:{full}-{account}"
        return release.kube.kubectl(*args, who, "--namespace", team, check=False, input_text=stdin)

    release.kube.apply({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "forged", "namespace": team},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "forged"}}, "template": {
            "metadata": {"labels": {"app": "forged"}}, "spec": {"containers": [{"name": "main", "image": "busybox"}]}}},
    })  # fmt: skip
    forged = as_account("recommender", "create", "-f", "-", stdin=record)
    assert forged.returncode != 0 and "forbidden" in forged.stderr.lower(), forged.stderr
    created = as_account("actuator", "create", "-f", "-", stdin=record)
    assert created.returncode == 0, created.stderr
    for args in (
        ("patch", "gpurightsizingchange", "deployment-forged", "--type=merge", "-p", '{"spec":{"workloadUid":"u-2"}}'),
        ("patch", "gpurightsizingchange", "deployment-forged", "--subresource=status", "--type=merge",
         "-p", '{"status":{"phase":"RollbackIntentRecorded"}}'),
        ("patch", "deployment", "forged", "--type=merge", "-p", '{"spec":{"replicas":0}}'),
    ):  # fmt: skip
        answer = as_account("recommender", *args)
        assert answer.returncode != 0 and "forbidden" in answer.stderr.lower(), (args, answer.stderr)
    shown = release.kube.kubectl("get", "gpurightsizingchange", "deployment-forged", "-n", team, "-o", "json")
    assert json.loads(shown.stdout)["spec"]["workloadUid"] == "u-1"  # the recommender changed nothing
    assert release.kube.get_json("deployment", "forged", "-n", team)["spec"]["replicas"] == 1
    release.kube.kubectl("delete", "gpurightsizingchange", "deployment-forged", "-n", team)
    release.kube.kubectl("delete", "deployment", "forged", "-n", team)


def test_actuator_is_bounded_to_its_namespaces(release: Release) -> None:
    inside, outside = release.teams[:2], release.teams[2]
    for team in inside:
        assert release.can("actuator", "patch", "deployments.apps", team)
        assert release.can("actuator", "patch", "statefulsets.apps", team)
        assert not release.can("actuator", "patch", "pods", team, subresource="resize")  # no code uses it yet
        assert not release.can("actuator", "create", "deployments.apps", team)
        assert not release.can("actuator", "delete", "deployments.apps", team)
        assert not release.can("actuator", "get", "secrets", team)
    for namespace in (outside, "default", "kube-system", release.namespace):
        assert not release.can("actuator", "patch", "deployments.apps", namespace)
        assert not release.can("actuator", "get", "deployments.apps", namespace)
    assert not release.can("actuator", "patch", "deployments.apps")  # not cluster-wide
    # leader election: its own Lease only
    lease = "gpu-rightsizer-actuator"
    assert release.can("actuator", "create", "leases.coordination.k8s.io", release.namespace)
    assert release.can("actuator", "update", "leases.coordination.k8s.io", release.namespace, name=lease)
    assert not release.can(
        "actuator", "update", "leases.coordination.k8s.io", release.namespace, name="other"
    )
    assert not release.can("actuator", "update", "leases.coordination.k8s.io", "kube-system", name=lease)


def test_agent_needs_no_api_access(release: Release) -> None:
    """By default the agent names pods through the kubelet's pod-resources socket: no RBAC at all."""
    assert not release.can("agent", "list", "pods")
    assert not release.can("agent", "get", "secrets", release.teams[0])
    assert not release.can("agent", "patch", "pods", release.teams[0])


def test_recommender_is_scheduled_off_the_gpu_nodes(release: Release) -> None:
    """avoidGPUNodes (default): the real scheduler puts it on a node without nvidia.com/gpu.present."""
    selector = f"app.kubernetes.io/instance={release.name},app.kubernetes.io/component=recommender"

    def node() -> str:
        pods = release.kube.get_json("pods", "-n", release.namespace, "-l", selector)["items"]
        return str(pods[0]["spec"].get("nodeName", "")) if pods else ""

    name = release.kube.wait_for(node, timeout=60, what="the recommender pod to be scheduled")
    labels = release.kube.get_json("node", name)["metadata"]["labels"]
    assert labels.get("nvidia.com/gpu.present") != "true", f"recommender on GPU node {name}"


def test_a_second_release_over_the_same_namespaces_is_refused_by_name(release: Release) -> None:
    """The fixture's release watches every namespace: another one, anywhere, would write the same
    GPURecommendations (lookup of the recommender Deployments; --dry-run=server sends nothing)."""
    other_namespace = release.kube.create_namespace("gpurs-second")
    for scope in ([], [release.teams[2]]):
        proc = release.helm(
            "install", "second", str(CHART), "--namespace", other_namespace, "--dry-run=server",
            "--set-json", f"watch.namespaces={_json_list(scope)}",
            "--set", "prometheus.url=http://prometheus.monitoring.svc:9090", check=False,
        )  # fmt: skip
        assert proc.returncode != 0, proc.stdout
        assert f'release "{release.name}" in namespace "{release.namespace}"' in proc.stderr, proc.stderr
        assert "already analyses every namespace" in proc.stderr
        assert f"helm uninstall {release.name} -n {release.namespace}" in proc.stderr


def test_agent_runtime_class_must_exist_and_notes_say_what_to_expect(release: Release) -> None:
    """A RuntimeClass the cluster lacks would leave the DaemonSet at 0 pods: refused, naming the value.
    The same release's upgrade (dry run) is not refused as a second release, and prints the NOTES."""
    upgrade = ["upgrade", release.name, *release.install_args(release.teams[:2]), "--dry-run=server"]
    refused = release.helm(*upgrade, "--set", "agent.runtimeClassName=nvidia", check=False)
    assert refused.returncode != 0
    assert 'agent.runtimeClassName=nvidia: the cluster has no RuntimeClass "nvidia"' in refused.stderr
    runtime_class = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                     "metadata": {"name": "nvidia"}, "handler": "nvidia"}  # fmt: skip
    release.kube.apply(runtime_class)
    try:
        accepted = release.helm(*upgrade, "--set", "agent.runtimeClassName=nvidia")
    finally:
        release.kube.kubectl("delete", "runtimeclass", "nvidia")
    notes = accepted.stdout
    assert "Its pods use RuntimeClass nvidia." in notes
    assert "backfills the window from Prometheus' history" in notes
    assert "No image is published for this project" in notes
    # the local cluster has no prometheus-operator: serviceMonitor.enabled=auto created none, and says so
    assert "No ServiceMonitor was created (the cluster serves no monitoring.coreos.com/v1 API)" in notes
    assert "ServiceMonitor" not in {doc.split("\n", 1)[0] for doc in notes.split("kind: ")[1:]}


def test_upgrade_moves_the_actuator_bound(release: Release) -> None:
    """Runs after the checks above (module order): narrow the actuator to one namespace."""
    keep, dropped = release.teams[0], release.teams[1]
    release.helm("upgrade", release.name, *release.install_args([keep]))
    assert release.can("actuator", "patch", "deployments.apps", keep)
    assert not release.can("actuator", "patch", "deployments.apps", dropped)
    assert release.kube.kubectl("get", "role", f"{release.fullname}-actuator", "--namespace", dropped,
                                check=False).returncode != 0  # fmt: skip
    status = release.helm("status", release.name, "--namespace", release.namespace)
    assert "STATUS: deployed" in status.stdout and "REVISION: 2" in status.stdout


def test_uninstall_leaves_only_crds(release: Release) -> None:
    release.helm("uninstall", release.name, "--namespace", release.namespace, "--wait", "--timeout", "120s")
    leftovers = release.owned(
        "deployments,daemonsets,services,serviceaccounts,configmaps,roles,rolebindings,networkpolicies"
    )
    leftovers += release.owned(
        "clusterroles,clusterrolebindings,gpurightsizingpolicies", all_namespaces=False
    )
    assert leftovers == [], f"left behind after uninstall: {leftovers}"
    # the chart's CRDs stay (Helm never deletes crds/)
    release.kube.kubectl(
        "get", "crd", "gpurecommendations.gpurightsizer.io", "gpurightsizingpolicies.gpurightsizer.io"
    )
