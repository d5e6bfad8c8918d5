"""The Helm chart renders valid, least-privilege, Pod Security "restricted" manifests.

Renders with `helm template` (default values, and tests/chart/values-full.yaml with every option on),
then checks: `helm lint --strict`, Kubernetes schema validation (kubernetes-validate, for each supported
version), custom resources against the chart's own CRD schemas, Pod Security restricted settings,
exact RBAC grants per ServiceAccount, and the PromQL of alerts and dashboard through promtool.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from tests.chart.chartlib import (
    CHART_DIR,
    FULL_VALUES,
    KUBE_VERSIONS,
    NAMESPACE,
    RELEASE,
    HelmResult,
    Manifest,
    helm_template,
    pod_spec,
    require_helm,
    workloads,
)

FULLNAME = f"{RELEASE}-gpu-rightsizer"
OPERATOR_COMPONENTS = ("recommender", "actuator")


@pytest.fixture(scope="module")
def helm() -> Path:
    return require_helm()


@pytest.fixture(scope="module")
def default_render(helm: Path) -> HelmResult:
    return helm_template(helm)


@pytest.fixture(scope="module")
def full_render(helm: Path) -> HelmResult:
    return helm_template(helm, values_files=[FULL_VALUES])


@pytest.fixture(scope="module", params=["default", "full"])
def any_render(
    request: pytest.FixtureRequest, default_render: HelmResult, full_render: HelmResult
) -> HelmResult:
    return default_render if request.param == "default" else full_render


# --------------------------------------------------------------------------------------------- lint


@pytest.mark.parametrize("values_files", [[], [FULL_VALUES]], ids=["default", "full"])
def test_helm_lint_strict_passes(helm: Path, values_files: list[Path]) -> None:
    cmd = [
        str(helm),
        "lint",
        "--strict",
        str(CHART_DIR),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        KUBE_VERSIONS[-1],
    ]
    for path in values_files:
        cmd += ["--values", str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


# ------------------------------------------------------------------------------------ what renders


def test_default_render_is_recommend_only(default_render: HelmResult) -> None:
    kinds = sorted({doc["kind"] for doc in default_render.docs})
    deployments = [doc["metadata"]["name"] for doc in default_render.of_kind("Deployment")]
    assert deployments == [f"{FULLNAME}-recommender"]
    assert not default_render.of_kind("DaemonSet"), "the NVML agent is off by default"
    assert "PrometheusRule" not in kinds
    # serviceMonitor.enabled=auto, and the render declares the monitoring.coreos.com/v1 API
    assert "ServiceMonitor" in kinds
    policy = default_render.one("GPURightsizingPolicy", f"{FULLNAME}-default")
    assert policy["spec"]["mode"] == "Recommend"
    dashboard = default_render.one("ConfigMap", f"{FULLNAME}-dashboard", NAMESPACE)
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    # the chart's CRDs are part of the render (crds/), and no other CRD
    crds = {doc["metadata"]["name"] for doc in default_render.of_kind("CustomResourceDefinition")}
    assert crds == {
        "gpurecommendations.gpurightsizer.io",
        "gpurightsizingchanges.gpurightsizer.io",
        "gpurightsizingpolicies.gpurightsizer.io",
    }


def test_full_render_has_every_optional_part(full_render: HelmResult) -> None:
    kinds = {doc["kind"] for doc in full_render.docs}
    assert {"ServiceMonitor", "PodMonitor", "PrometheusRule", "DaemonSet", "NetworkPolicy"} <= kinds
    actuator = full_render.one("Deployment", f"{FULLNAME}-actuator", NAMESPACE)
    assert actuator["spec"]["replicas"] == 2
    counters = full_render.one("ConfigMap", f"{FULLNAME}-dcgm-counters", "gpu-operator")
    assert "DCGM_FI_PROF_SM_ACTIVE" in counters["data"]["dcgm-metrics.csv"]


def test_operator_args_follow_values(full_render: HelmResult) -> None:
    recommender = pod_spec(full_render.one("Deployment", f"{FULLNAME}-recommender"))["containers"][0]
    assert recommender["image"].endswith("@sha256:" + "0123456789abcdef" * 4)
    args = recommender["args"]
    assert args[:2] == ["run", "--role=recommender"]
    assert [a for a in args if a.startswith("--namespace=")] == [
        "--namespace=ml-training",
        "--namespace=ml-serving",
        "--namespace=research",
    ]
    assert "--all-namespaces" not in args
    assert "--prometheus-url=https://prometheus.monitoring.svc:9091" in args
    assert "--prometheus-token-file=/var/run/secrets/gpu-rightsizer/prometheus/token" in args
    assert "--prometheus-ca-file=/etc/gpu-rightsizer/prometheus-ca/ca.crt" in args
    assert {"--prometheus-timeout=90s", "--prometheus-step=30s", "--prometheus-compression=none"} <= set(args)
    assert [a for a in args if a.startswith("--prometheus-label=")] == [
        "--prometheus-label=cluster=prod",
        '--prometheus-label=region=~"eu-.*"',
    ]
    assert {"--interval=10m", "--window=6h", "--metrics-port=9090", "--verbose"} <= set(args)
    assert "--liveness=http://0.0.0.0:8080/healthz" in args
    policy = full_render.one("GPURightsizingPolicy", "cluster-default")
    assert policy["spec"]["observation"]["window"] == "6h"

    actuator = pod_spec(full_render.one("Deployment", f"{FULLNAME}-actuator"))["containers"][0]
    assert actuator["args"][:2] == ["run", "--role=actuator"]
    assert [a for a in actuator["args"] if a.startswith("--namespace=")] == [
        "--namespace=ml-training",
        "--namespace=ml-serving",
    ]
    env = {e["name"]: e.get("value") for e in actuator["env"]}
    assert env["GPURS_LEASE_NAME"] == "gpurs-actuator-lease" and env["GPURS_LEASE_SECONDS"] == "20"
    pod_namespace = next(e for e in actuator["env"] if e["name"] == "POD_NAMESPACE")
    assert pod_namespace["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_default_watches_all_namespaces(default_render: HelmResult) -> None:
    args = pod_spec(default_render.one("Deployment", f"{FULLNAME}-recommender"))["containers"][0]["args"]
    assert "--all-namespaces" in args
    assert not [a for a in args if a.startswith("--namespace=") or a.startswith("--prometheus-token-file")]


def test_persistence_mounts_a_claim_at_the_state_dir_of_the_recommender_only(
    default_render: HelmResult, full_render: HelmResult
) -> None:
    assert not default_render.of_kind("PersistentVolumeClaim")
    default_args = pod_spec(default_render.one("Deployment", f"{FULLNAME}-recommender"))["containers"][0][
        "args"
    ]
    assert not [a for a in default_args if a.startswith("--state-")]

    claim = full_render.one("PersistentVolumeClaim", f"{FULLNAME}-recommender-state", NAMESPACE)
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    deployment = full_render.one("Deployment", f"{FULLNAME}-recommender")
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    spec = pod_spec(deployment)
    container = spec["containers"][0]
    assert {"--state-dir=/var/lib/gpu-rightsizer", "--state-save-interval=10m"} <= set(container["args"])
    volume = next(v for v in spec["volumes"] if v["name"] == "state")
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "state")
    assert mount["mountPath"] == "/var/lib/gpu-rightsizer" and not mount.get("readOnly")
    assert spec["securityContext"]["fsGroup"] == 65532  # the non-root operator can write the volume
    actuator = pod_spec(full_render.one("Deployment", f"{FULLNAME}-actuator"))
    assert "state" not in {v["name"] for v in actuator["volumes"]}
    assert not [a for a in actuator["containers"][0]["args"] if a.startswith("--state-")]


def test_secret_is_mounted_not_granted(full_render: HelmResult) -> None:
    """The Prometheus token reaches the pod as a kubelet-mounted file; no ServiceAccount may read Secrets."""
    spec = pod_spec(full_render.one("Deployment", f"{FULLNAME}-recommender"))
    secret_volumes = [v for v in spec["volumes"] if "secret" in v]
    assert [v["secret"]["secretName"] for v in secret_volumes] == ["prometheus-reader-token"]
    for doc in full_render.of_kind("Role") + full_render.of_kind("ClusterRole"):
        for rule in doc.get("rules", []):
            assert "secrets" not in rule.get("resources", []), doc["metadata"]["name"]


def test_service_selects_both_operator_pods(full_render: HelmResult) -> None:
    service = full_render.one("Service", f"{FULLNAME}-metrics", NAMESPACE)
    selector = service["spec"]["selector"].items()
    selected = [
        doc["metadata"]["name"]
        for doc in full_render.of_kind("Deployment") + full_render.of_kind("DaemonSet")
        if selector <= doc["spec"]["template"]["metadata"]["labels"].items()
    ]
    assert sorted(selected) == [f"{FULLNAME}-actuator", f"{FULLNAME}-recommender"]
    monitor = full_render.one("ServiceMonitor", FULLNAME, NAMESPACE)
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True


# ------------------------------------------------------------------------------ schema validation


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("values_files", [[], [FULL_VALUES]], ids=["default", "full"])
def test_builtin_kinds_pass_kubernetes_validate(
    helm: Path, kube_version: str, values_files: list[Path]
) -> None:
    rendered = helm_template(helm, values_files=values_files, kube_version=kube_version)
    custom_kinds = {
        "GPURightsizingPolicy",
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
    }
    validated = 0
    for doc in rendered.docs:
        if doc["kind"] in custom_kinds:
            continue
        try:
            kubernetes_validate.validate(doc, kube_version, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(
                f"{doc['kind']}/{doc['metadata']['name']} invalid for {kube_version}: {error.message}"
            )
        validated += 1
    assert validated >= 10


def _crd_validators(docs: list[Manifest]) -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    """kind/apiVersion -> validator built from the CRD's openAPIV3Schema (CEL rules are the API server's)."""
    validators = {}
    for crd in (doc for doc in docs if doc["kind"] == "CustomResourceDefinition"):
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = _structural_to_jsonschema(version["schema"]["openAPIV3Schema"])
            validators[(kind, f"{group}/{version['name']}")] = jsonschema.Draft7Validator(schema)
    return validators


def _structural_to_jsonschema(node: Any) -> Any:
    """Drop OpenAPI-only keywords and honour `nullable`, so jsonschema can check instances."""
    if isinstance(node, list):
        return [_structural_to_jsonschema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {
        k: _structural_to_jsonschema(v)
        for k, v in node.items()
        if not k.startswith("x-kubernetes") and k != "nullable"
    }
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if node.get("x-kubernetes-preserve-unknown-fields"):
        out.pop("additionalProperties", None)
    return out


def test_custom_resources_match_their_crds(full_render: HelmResult) -> None:
    validators = _crd_validators(full_render.docs)
    checked = []
    for doc in full_render.docs:
        validator = validators.get((doc["kind"], doc["apiVersion"]))
        if validator is None:
            continue
        errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(doc)]
        assert not errors, f"{doc['kind']}/{doc['metadata']['name']}: {errors}"
        checked.append(doc["kind"])
    assert checked == ["GPURightsizingPolicy"]


# ----------------------------------------------------------------------------- Pod Security


def restricted_violations(spec: Manifest) -> list[str]:
    """What in a pod spec breaks Pod Security "restricted" (and our stricter house rules)."""
    problems = []
    for host in ("hostPID", "hostIPC", "hostNetwork"):
        if spec.get(host):
            problems.append(host)
    pod_ctx = spec.get("securityContext", {})
    if any(v.get("hostPath") for v in spec.get("volumes", [])):
        problems.append("hostPath volume")
    for container in spec.get("initContainers", []) + spec["containers"]:
        ctx = container.get("securityContext", {})
        name = container["name"]

        def effective(key: str, ctx: Manifest = ctx) -> Any:
            return ctx.get(key, pod_ctx.get(key))

        if effective("runAsNonRoot") is not True:
            problems.append(f"{name}: runAsNonRoot")
        if effective("runAsUser") in (0, None):
            problems.append(f"{name}: runAsUser")
        if ctx.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation")
        if ctx.get("privileged"):
            problems.append(f"{name}: privileged")
        if ctx.get("capabilities", {}).get("drop") != ["ALL"] or ctx.get("capabilities", {}).get("add"):
            problems.append(f"{name}: capabilities")
        if (effective("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{name}: seccompProfile")
        if ctx.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{name}: readOnlyRootFilesystem")
        resources = container.get("resources", {})
        if not {"cpu", "memory"} <= resources.get("requests", {}).keys() or "memory" not in resources.get(
            "limits", {}
        ):
            problems.append(f"{name}: resources")
        if not any(m["mountPath"] == "/tmp" for m in container.get("volumeMounts", [])):
            problems.append(f"{name}: no /tmp emptyDir")
    return problems


def test_operator_pods_are_restricted(any_render: HelmResult) -> None:
    for doc in any_render.of_kind("Deployment"):
        assert restricted_violations(pod_spec(doc)) == [], doc["metadata"]["name"]
        assert pod_spec(doc)["securityContext"]["runAsUser"] == 65532


def test_agent_per_process_mode_needs_only_host_pid_under_its_own_uid(
    full_render: HelmResult, helm: Path
) -> None:
    agent = pod_spec(full_render.one("DaemonSet", f"{FULLNAME}-agent"))
    assert restricted_violations(agent) == ["hostPID"]
    # never the operator's uid: with hostPID it could read the operator's /proc, token included
    assert (
        agent["securityContext"]["runAsUser"]
        == agent["containers"][0]["securityContext"]["runAsUser"]
        == 65533
    )
    assert agent["securityContext"]["runAsGroup"] == 65533
    assert agent["automountServiceAccountToken"] is True
    assert agent["runtimeClassName"] == "nvidia"
    assert agent["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    env = {e["name"]: e.get("value") for e in agent["containers"][0]["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "nvidia.com/gpu" not in agent["containers"][0]["resources"].get("limits", {})
    args = agent["containers"][0]["args"]
    assert args == ["agent", "--listen=0.0.0.0:9400", "--kubernetes", "--log-level=DEBUG"]


def test_agent_default_names_pods_through_the_kubelet_socket_without_host_pid(helm: Path) -> None:
    """The default agent maps GPUs to pods like dcgm-exporter: pod-resources socket, no hostPID, no API."""
    rendered = helm_template(helm, values={"agent.enabled": True})
    agent = pod_spec(rendered.one("DaemonSet", f"{FULLNAME}-agent"))
    assert not agent["hostPID"]
    # root only to connect to the kubelet's root-only socket: no capability, read-only everything
    assert restricted_violations(agent) == ["hostPath volume", "agent: runAsNonRoot", "agent: runAsUser"]
    container = agent["containers"][0]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    (volume,) = [v for v in agent["volumes"] if "hostPath" in v]
    assert volume["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert mount == {"name": volume["name"], "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True}
    assert "--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock" in container["args"]
    # no API access at all: no token, no --kubernetes, no agent RBAC
    assert agent["automountServiceAccountToken"] is False
    assert "--kubernetes" not in container["args"]
    assert not [
        d for d in rendered.docs if d["kind"].startswith("ClusterRole") and "agent" in d["metadata"]["name"]
    ]


def test_agent_in_its_own_namespace(helm: Path) -> None:
    rendered = helm_template(
        helm,
        values={
            "agent.enabled": True,
            "agent.namespace": "gpu-agents",
            "agent.hostPID": True,
            "agent.podResources.enabled": False,
            "agent.podMonitor.enabled": True,
        },
    )
    rendered.one("DaemonSet", f"{FULLNAME}-agent", "gpu-agents")
    rendered.one("ServiceAccount", f"{FULLNAME}-agent", "gpu-agents")
    monitor = rendered.one("PodMonitor", f"{FULLNAME}-agent", "gpu-agents")
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["gpu-agents"]}
    binding = rendered.one("ClusterRoleBinding", f"{FULLNAME}-agent")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": f"{FULLNAME}-agent", "namespace": "gpu-agents"}
    ]
    rendered.one("Deployment", f"{FULLNAME}-recommender", NAMESPACE)
    rendered.one("ServiceAccount", f"{FULLNAME}-recommender", NAMESPACE)


def test_agent_admin_profiling_adds_exactly_sys_admin(helm: Path) -> None:
    rendered = helm_template(
        helm,
        values={"agent.enabled": True, "agent.profilingAsAdmin": True, "agent.podResources.enabled": False},
    )
    ctx = pod_spec(rendered.one("DaemonSet", f"{FULLNAME}-agent"))["containers"][0]["securityContext"]
    assert ctx["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert ctx["runAsUser"] == 0 and ctx["allowPrivilegeEscalation"] is False and ctx["privileged"] is False


# ------------------------------------------------------------------------------------------- RBAC

Grant = tuple[str, str, str, str]  # (apiGroup, resource, verb, resourceName or "")


def effective_grants(docs: list[Manifest], service_account: str) -> dict[str, set[Grant]]:
    """Scope ("*" cluster-wide, else a namespace) -> grants the ServiceAccount gets through bindings."""
    roles = {
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
        for d in docs
        if d["kind"] in ("Role", "ClusterRole")
    }
    out: dict[str, set[Grant]] = {}
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == service_account and s["namespace"] == NAMESPACE
            for s in binding["subjects"]
        ):
            continue
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        role = roles[(ref["kind"], namespace if ref["kind"] == "Role" else None, ref["name"])]
        scope = namespace or "*"
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames") or [""]:
                            out.setdefault(scope, set()).add((group, resource, verb, name))
    return out


def can(grants: dict[str, set[Grant]], verb: str, group: str, resource: str, namespace: str | None) -> bool:
    scopes = ["*"] + ([namespace] if namespace else [])
    return any((group, resource, verb, "") in grants.get(scope, set()) for scope in scopes)


WORKLOAD_WRITES = [
    (g, r, v)
    for g, r in [
        ("apps", "deployments"),
        ("apps", "statefulsets"),
        ("apps", "replicasets"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
        ("", "pods"),
        ("", "pods/resize"),  # in-place resize is the actuator's alone
        ("autoscaling", "horizontalpodautoscalers"),
    ]
    for v in ("create", "update", "patch", "delete")
]
FORBIDDEN_EVERYWHERE = [
    ("", "secrets", "get"),
    ("", "secrets", "list"),
    ("", "pods/exec", "create"),
    ("", "serviceaccounts/token", "create"),
]


def test_no_wildcards_or_escalation_verbs(any_render: HelmResult) -> None:
    for role in any_render.of_kind("Role") + any_render.of_kind("ClusterRole"):
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], f"{role['metadata']['name']}: wildcard in {key}"
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), role["metadata"]["name"]


@pytest.mark.parametrize("render_name", ["default", "full"])
def test_recommender_reads_and_writes_only_recommendations(
    render_name: str, default_render: HelmResult, full_render: HelmResult
) -> None:
    rendered = default_render if render_name == "default" else full_render
    grants = effective_grants(rendered.docs, f"{FULLNAME}-recommender")
    watched = [None] if render_name == "default" else ["ml-training", "ml-serving", "research"]
    for namespace in watched:
        for group, resource in [
            ("apps", "deployments"),
            ("apps", "statefulsets"),
            ("batch", "jobs"),
            ("batch", "cronjobs"),
            ("", "pods"),
            ("autoscaling", "horizontalpodautoscalers"),
        ]:
            assert can(grants, "watch", group, resource, namespace), (group, resource, namespace)
        for verb in ("create", "patch", "delete"):
            assert can(grants, verb, "gpurightsizer.io", "gpurecommendations", namespace)
        assert can(grants, "create", "", "events", namespace)
        # the owner walk reads the known custom controllers by name (logic/owners.py)
        for group, resource in [
            ("kubeflow.org", "pytorchjobs"),
            ("trainer.kubeflow.org", "trainjobs"),
            ("jobset.x-k8s.io", "jobsets"),
            ("ray.io", "rayclusters"),
            ("leaderworkerset.x-k8s.io", "leaderworkersets"),
            ("argoproj.io", "rollouts"),
            ("serving.kserve.io", "inferenceservices"),
            ("serving.knative.dev", "services"),
        ]:
            assert can(grants, "get", group, resource, namespace), (group, resource, namespace)
            assert not can(grants, "patch", group, resource, namespace), (group, resource, namespace)
        for group, resource, verb in WORKLOAD_WRITES + FORBIDDEN_EVERYWHERE:
            assert not can(grants, verb, group, resource, namespace), (verb, group, resource, namespace)
        for resource in ("gpurightsizingchanges", "gpurightsizingchanges/status"):  # the actuator's alone
            for verb in ("create", "patch", "update", "delete"):
                assert not can(grants, verb, "gpurightsizer.io", resource, namespace), (verb, resource)
    assert can(grants, "list", "", "nodes", None)
    assert can(grants, "watch", "gpurightsizer.io", "gpurightsizingpolicies", None)
    assert not can(grants, "patch", "gpurightsizer.io", "gpurightsizingpolicies", None)
    if render_name == "full":
        # writes are bound per watched namespace, not cluster-wide
        assert not can(grants, "create", "gpurightsizer.io", "gpurecommendations", "kube-system")
        assert sorted(k for k in grants if k != "*") == ["ml-serving", "ml-training", "research"]


def test_actuator_patches_only_its_namespaces(full_render: HelmResult) -> None:
    grants = effective_grants(full_render.docs, f"{FULLNAME}-actuator")
    for namespace in ("ml-training", "ml-serving"):
        for resource in ("deployments", "statefulsets"):
            assert can(grants, "patch", "apps", resource, namespace)
            assert not can(grants, "create", "apps", resource, namespace)
            assert not can(grants, "delete", "apps", resource, namespace)
        assert can(grants, "patch", "autoscaling", "horizontalpodautoscalers", namespace)
        assert can(grants, "patch", "", "pods/resize", namespace)  # in-place resize, through the subresource
        assert not can(grants, "patch", "", "pods", namespace)  # never the pods themselves
        assert can(grants, "get", "kubeflow.org", "pytorchjobs", namespace)  # gates of a CRD trainer
        assert can(grants, "patch", "gpurightsizer.io", "gpurecommendations/status", namespace)
        assert can(grants, "create", "gpurightsizer.io", "gpurightsizingchanges", namespace)
        assert can(grants, "patch", "gpurightsizer.io", "gpurightsizingchanges/status", namespace)
        assert can(grants, "list", "policy", "poddisruptionbudgets", namespace)  # availability gate
        assert can(grants, "delete", "", "pods", namespace)  # a StatefulSet's stuck pod after a rollback
        # CronJob is in values-full's workloadKinds; ReplicaSet is not
        assert can(grants, "patch", "batch", "cronjobs", namespace)
        assert not can(grants, "patch", "apps", "replicasets", namespace)
        assert not can(grants, "patch", "apps", "daemonsets", namespace)
    for namespace in ("research", "kube-system", "default"):
        assert not can(grants, "patch", "apps", "deployments", namespace)
        assert not can(grants, "get", "apps", "deployments", namespace)
    for group, resource, verb in FORBIDDEN_EVERYWHERE:
        assert not can(grants, verb, group, resource, "ml-training")
    # leader election: may create Leases in the release namespace, and renew only its own
    assert can(grants, "create", "coordination.k8s.io", "leases", NAMESPACE)
    assert ("coordination.k8s.io", "leases", "update", "gpurs-actuator-lease") in grants[NAMESPACE]
    assert not can(grants, "update", "coordination.k8s.io", "leases", NAMESPACE)
    assert not can(grants, "get", "apps", "deployments", NAMESPACE)
    # cluster-wide it only reads
    assert {g for g in grants["*"] if g[2] not in ("get", "list", "watch")} == set()


def test_actuator_cluster_wide_only_when_asked(helm: Path) -> None:
    rendered = helm_template(helm, values={"actuator.enabled": True, "actuator.clusterWide": True})
    grants = effective_grants(rendered.docs, f"{FULLNAME}-actuator")
    assert can(grants, "patch", "apps", "deployments", None)
    assert [r["metadata"]["name"] for r in rendered.of_kind("Role")] == [
        f"{FULLNAME}-actuator-leader-election"
    ]
    args = pod_spec(rendered.one("Deployment", f"{FULLNAME}-actuator"))["containers"][0]["args"]
    assert "--all-namespaces" in args


def test_optional_grants_can_be_removed(helm: Path) -> None:
    rendered = helm_template(
        helm,
        values={
            "actuator.enabled": True,
            "actuator.namespaces": ["team-a"],
            "actuator.patchHorizontalPodAutoscalers": False,
            "actuator.resizePodsInPlace": False,
        },
    )
    grants = effective_grants(rendered.docs, f"{FULLNAME}-actuator")
    assert can(grants, "watch", "autoscaling", "horizontalpodautoscalers", "team-a")
    assert not can(grants, "patch", "autoscaling", "horizontalpodautoscalers", "team-a")
    assert not can(grants, "patch", "", "pods/resize", "team-a")


def test_agent_only_reads_pods(full_render: HelmResult) -> None:
    grants = effective_grants(full_render.docs, f"{FULLNAME}-agent")
    assert grants == {"*": {("", "pods", verb, "") for verb in ("get", "list", "watch")}}


def test_service_accounts_are_separate_and_token_opt_in(full_render: HelmResult) -> None:
    accounts = {doc["metadata"]["name"]: doc for doc in full_render.of_kind("ServiceAccount")}
    assert sorted(accounts) == sorted(f"{FULLNAME}-{c}" for c in ("recommender", "actuator", "agent"))
    assert all(doc["automountServiceAccountToken"] is False for doc in accounts.values())
    used = sorted(pod_spec(doc)["serviceAccountName"] for doc in workloads(full_render.docs))
    assert used == sorted(accounts)


# ---------------------------------------------------------------------------- alerts and dashboard


def _promtool() -> str:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not found (Debian package `prometheus`)")
    return promtool


def test_alert_rules_pass_promtool(full_render: HelmResult, tmp_path: Path) -> None:
    rule = full_render.one("PrometheusRule", FULLNAME, NAMESPACE)
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert alerts == [
        "GPURightsizerIdleGPUs",
        "GPURightsizerWastedGPUHoursHigh",
        "GPURightsizerAbsent",
        "GPURightsizerErrors",
        "GPURightsizerCycleStalled",
        "GPURightsizerRollbacks",
    ]
    exprs = " ".join(r["expr"] for g in rule["spec"]["groups"] for r in g["rules"])
    for metric in (
        "gpu_rightsizer_recommendations",
        "gpu_rightsizer_wasted_gpu_hours_per_day",
        "gpu_rightsizer_errors_total",
        "gpu_rightsizer_cycle_duration_seconds_count",
        "gpu_rightsizer_actions_applied_total",
    ):
        assert metric in exprs
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    proc = subprocess.run(
        [_promtool(), "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dashboard_queries_pass_promtool(default_render: HelmResult, tmp_path: Path) -> None:
    config_map = default_render.one("ConfigMap", f"{FULLNAME}-dashboard", NAMESPACE)
    dashboard = json.loads(config_map["data"]["gpu-rightsizer.json"])
    titles = [p["title"] for p in dashboard["panels"]]
    for wanted in (
        "Wasted GPU-hours per day by namespace",
        "Recommendations by diagnosis",
        "Idle GPU allocations by namespace",
    ):
        assert wanted in titles
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    grafana_vars: dict[str, str] = {"$__rate_interval": "5m", "$namespace": ".*"}

    def substitute(expr: str) -> str:
        for var, value in grafana_vars.items():
            expr = expr.replace(var, value)
        return expr

    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:panel_{i}", "expr": substitute(e)} for i, e in enumerate(exprs)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    proc = subprocess.run(
        [_promtool(), "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dcgm_counters_csv_is_well_formed() -> None:
    lines = [ln.strip() for ln in (CHART_DIR / "files" / "dcgm-counters.csv").read_text().splitlines()]
    fields = [[part.strip() for part in ln.split(",", 2)] for ln in lines if ln and not ln.startswith("#")]
    assert all(
        len(f) == 3 and f[0].startswith("DCGM_FI_") and f[1] in ("gauge", "counter") and f[2] for f in fields
    )
    names = [f[0] for f in fields]
    assert len(names) == len(set(names)), "duplicate counters"
    for required in (
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_XID_ERRORS",
    ):
        assert required in names


def test_no_hooks(full_render: HelmResult) -> None:
    """Everything is an ordinary release object, so `helm uninstall` removes all of it (but the CRDs)."""
    hooked = [
        d["metadata"]["name"]
        for d in full_render.docs
        if "helm.sh/hook" in d["metadata"].get("annotations", {})
    ]
    assert hooked == []
