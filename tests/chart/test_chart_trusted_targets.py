"""The chart passes the trusted GPU scrape targets to both operator roles, in a form the operator parses."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_rightsizer.config import parse_trusted_targets
from tests.chart.chartlib import RELEASE, HelmResult, helm_template, pod_spec, require_helm

FULLNAME = f"{RELEASE}-gpu-rightsizer"
GPU_OPERATOR = "namespace=gpu-operator,service=nvidia-dcgm-exporter"


@pytest.fixture(scope="module")
def helm() -> Path:
    return require_helm()


def _targets(rendered: HelmResult, role: str) -> list[str]:
    args = pod_spec(rendered.one("Deployment", f"{FULLNAME}-{role}"))["containers"][0]["args"]
    return [a.removeprefix("--trusted-gpu-target=") for a in args if a.startswith("--trusted-gpu-target=")]


def test_default_trusts_the_gpu_operator_exporter_and_the_agent_when_deployed(helm: Path) -> None:
    plain = helm_template(helm, values={"actuator.enabled": True, "actuator.namespaces": ["ml"]})
    assert _targets(plain, "recommender") == _targets(plain, "actuator") == [GPU_OPERATOR]
    with_agent = helm_template(
        helm,
        values={"agent.enabled": True, "agent.namespace": "gpu-agents", "agent.podMonitor.enabled": True},
    )
    targets = _targets(with_agent, "recommender")
    assert targets == [GPU_OPERATOR, f'namespace=gpu-agents,pod=~"{FULLNAME}-agent-.*"']
    assert parse_trusted_targets(targets)[1] == ('namespace="gpu-agents"', f'pod=~"{FULLNAME}-agent-.*"')
    monitor = with_agent.one("PodMonitor", f"{FULLNAME}-agent", "gpu-agents")
    # the agent's own pod/namespace labels must arrive as exported_*: its target labels are its identity
    assert monitor["spec"]["podMetricsEndpoints"][0]["honorLabels"] is False
    assert (
        "--gpu-honor-labels"
        not in pod_spec(with_agent.one("Deployment", f"{FULLNAME}-recommender"))["containers"][0]["args"]
    )


def test_values_replace_the_default_targets(helm: Path) -> None:
    rendered = helm_template(
        helm,
        values={
            "prometheus.trustedGpuTargets": ['job="dcgm",kubernetes_namespace="gpu"'],
            "prometheus.gpuHonorLabels": True,
        },
    )
    assert _targets(rendered, "recommender") == ['job="dcgm",kubernetes_namespace="gpu"']
    args = pod_spec(rendered.one("Deployment", f"{FULLNAME}-recommender"))["containers"][0]["args"]
    assert "--gpu-honor-labels" in args
    assert parse_trusted_targets(_targets(rendered, "recommender")) == (
        ('job="dcgm"', 'kubernetes_namespace="gpu"'),
    )


def test_schema_refuses_a_target_that_is_not_matchers(helm: Path) -> None:
    result = helm_template(helm, values={"prometheus.trustedGpuTargets": ["gpu-operator"]}, check=False)
    assert result.returncode != 0 and "trustedGpuTargets" in result.stderr
