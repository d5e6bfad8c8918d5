"""The chart's defaults work on a cluster as it is, and a wrong value is refused where it is set.

- the agent uses the node's default runtime unless a RuntimeClass is named;
- the ServiceMonitor that the dashboard and alerts depend on is created when prometheus-operator's API
  exists (serviceMonitor.enabled=auto);
- the operator pods avoid GPU nodes;
- a failed check names its value, and Helm points at the template of that value's object;
- analysis.window below the policy's 5m minimum is refused at install, not by the API server later.

The checks that need a cluster (RuntimeClass lookup, a second release) are in tests/e2e/test_helm_install.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.chart.chartlib import MONITORING_API, HelmResult, helm_template, pod_spec, require_helm

FULLNAME = "gpurs-gpu-rightsizer"
NOT_ON_GPU_NODES = [
    {"key": "nvidia.com/gpu.present", "operator": "NotIn", "values": ["true"]},
    {"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "NotIn", "values": ["true"]},
]


@pytest.fixture(scope="module")
def helm() -> Path:
    return require_helm()


def _operator_pods(render: HelmResult) -> dict[str, dict[str, Any]]:
    return {
        name: pod_spec(render.one("Deployment", f"{FULLNAME}-{name}")) for name in ("recommender", "actuator")
    }


def test_agent_uses_the_nodes_default_runtime_unless_one_is_named(helm: Path) -> None:
    agent = {"agent.enabled": True}
    default = pod_spec(helm_template(helm, values=agent).one("DaemonSet", f"{FULLNAME}-agent"))
    assert "runtimeClassName" not in default, "a RuntimeClass most clusters lack leaves the DaemonSet empty"
    named = helm_template(helm, values={**agent, "agent.runtimeClassName": "nvidia"})
    assert pod_spec(named.one("DaemonSet", f"{FULLNAME}-agent"))["runtimeClassName"] == "nvidia"


@pytest.mark.parametrize(
    ("enabled", "apis", "rendered"),
    [
        ("auto", [MONITORING_API], True),
        ("auto", [], False),
        (False, [MONITORING_API], False),
        (True, [], True),
    ],
    ids=["auto-with-api", "auto-without-api", "off", "on"],
)
def test_service_monitor_follows_the_prometheus_operator_api(
    helm: Path, enabled: object, apis: list[str], rendered: bool
) -> None:
    values = {} if enabled == "auto" else {"serviceMonitor.enabled": enabled}
    render = helm_template(helm, values=values, api_versions=apis)
    monitors = render.of_kind("ServiceMonitor")
    assert bool(monitors) is rendered
    if rendered:
        assert monitors[0]["spec"]["endpoints"][0]["port"] == "metrics"


def test_operator_pods_stay_off_gpu_nodes_by_default(helm: Path) -> None:
    values = {"actuator.enabled": True, "actuator.clusterWide": True}
    for name, pod in _operator_pods(helm_template(helm, values=values)).items():
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"] == [{"matchExpressions": NOT_ON_GPU_NODES}], name
    off = _operator_pods(helm_template(helm, values={**values, "avoidGPUNodes": False}))
    assert all("affinity" not in pod for pod in off.values())


def test_a_pods_own_node_affinity_replaces_the_gpu_rule_and_other_affinity_is_kept(helm: Path) -> None:
    own = {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [{"key": "infra", "operator": "Exists"}]}}
    ]}  # fmt: skip
    spread = {"preferredDuringSchedulingIgnoredDuringExecution": []}
    render = helm_template(
        helm,
        values={"recommender.affinity": {"nodeAffinity": own}, "actuator.enabled": True,
                "actuator.clusterWide": True, "actuator.affinity": {"podAntiAffinity": spread}},
    )  # fmt: skip
    pods = _operator_pods(render)
    assert pods["recommender"]["affinity"] == {"nodeAffinity": own}
    assert pods["actuator"]["affinity"]["podAntiAffinity"] == spread
    assert "requiredDuringSchedulingIgnoredDuringExecution" in pods["actuator"]["affinity"]["nodeAffinity"]


@pytest.mark.parametrize(
    ("values", "template", "value"),
    [
        ({"actuator.enabled": True}, "actuator-deployment.yaml", "actuator.namespaces"),
        (
            {"actuator.clusterWide": True, "actuator.namespaces": ["a"]},
            "actuator-deployment.yaml",
            "actuator.namespaces",
        ),
        ({"agent.profilingAsAdmin": True}, "agent-daemonset.yaml", "agent.profilingAsAdmin"),
        ({"agent.enabled": True, "agent.hostPID": True}, "agent-daemonset.yaml", "agent.hostPID"),
        (
            {"dcgmExporter.counters.enabled": True},
            "dcgm-counters-configmap.yaml",
            "dcgmExporter.counters.namespace",
        ),
        ({"analysis.window": "2m"}, "default-policy.yaml", "analysis.window"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_failed_check_names_its_value_at_its_own_template(
    helm: Path, values: dict[str, Any], template: str, value: str
) -> None:
    result = helm_template(helm, values=values, check=False)
    assert result.returncode != 0
    error = next(line for line in result.stderr.splitlines() if "execution error" in line)
    assert f"templates/{template}:" in error, error
    assert error.split("): ", 1)[1].startswith(value), error


@pytest.mark.parametrize("window", ["2m", "4m59s", "299s", "0.08h", "299999ms"])
def test_analysis_window_below_five_minutes_is_refused(helm: Path, window: str) -> None:
    result = helm_template(helm, values={"analysis.window": window}, check=False)
    assert result.returncode != 0
    assert f"analysis.window={window} is shorter than 5m" in result.stderr, result.stderr


@pytest.mark.parametrize("window", ["5m", "300s", "4m60s", "0.1h", "1h30m", "24h", "168h"])
def test_analysis_window_of_five_minutes_or_more_is_accepted(helm: Path, window: str) -> None:
    policy = helm_template(helm, values={"analysis.window": window}).one(
        "GPURightsizingPolicy", f"{FULLNAME}-default"
    )
    assert policy["spec"]["observation"]["window"] == window
