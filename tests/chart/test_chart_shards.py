"""`recommender.shards`: one recommender runs as a Deployment; several run as a StatefulSet whose pods
take their shard from their ordinal (POD_NAME) and the total from GPURS_TOTAL_SHARDS, each with its own
state claim; the actuator stays one Deployment whatever the shards."""

from __future__ import annotations

import argparse
from pathlib import Path

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from gpu_rightsizer.commands.run import add_arguments
from gpu_rightsizer.config import OperatorConfig
from tests.chart.chartlib import KUBE_VERSIONS, NAMESPACE, helm_template, pod_spec, require_helm

FULLNAME = "gpurs-gpu-rightsizer"


@pytest.fixture(scope="module")
def helm() -> Path:
    return require_helm()


def env_of(container: dict[str, object]) -> dict[str, object]:
    return {item["name"]: item for item in container["env"]}  # type: ignore[attr-defined,index]


def test_one_shard_is_a_deployment_and_no_total_is_passed(helm: Path) -> None:
    rendered = helm_template(helm)
    assert not rendered.of_kind("StatefulSet")
    container = pod_spec(rendered.one("Deployment", f"{FULLNAME}-recommender"))["containers"][0]
    assert "GPURS_TOTAL_SHARDS" not in env_of(container)


@pytest.mark.parametrize("kube_version", [KUBE_VERSIONS[0], KUBE_VERSIONS[-1]])
def test_shards_run_a_statefulset_whose_pods_know_their_shard(helm: Path, kube_version: str) -> None:
    rendered = helm_template(
        helm,
        values={"recommender.shards": 3, "persistence.enabled": True, "actuator.enabled": True,
                "actuator.namespaces": ["team-a"]},
        kube_version=kube_version,
    )  # fmt: skip
    assert [d["metadata"]["name"] for d in rendered.of_kind("Deployment")] == [f"{FULLNAME}-actuator"]
    statefulset = rendered.one("StatefulSet", f"{FULLNAME}-recommender", NAMESPACE)
    kubernetes_validate.validate(statefulset, kube_version, strict=True)
    spec = statefulset["spec"]
    assert spec["replicas"] == 3 and spec["podManagementPolicy"] == "Parallel"
    service = rendered.one("Service", spec["serviceName"], NAMESPACE)
    labels = spec["template"]["metadata"]["labels"]
    assert all(labels.get(key) == value for key, value in service["spec"]["selector"].items())
    container = spec["template"]["spec"]["containers"][0]
    env = env_of(container)
    assert env["GPURS_TOTAL_SHARDS"] == {"name": "GPURS_TOTAL_SHARDS", "value": "3"}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}  # type: ignore[index]
    # what the operator makes of it, in pod 2 of the StatefulSet
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(container["args"][1:])
    pod_env = {"GPURS_TOTAL_SHARDS": "3", "POD_NAME": f"{FULLNAME}-recommender-2"}
    with pytest.MonkeyPatch.context() as patch:
        for key, value in pod_env.items():
            patch.setenv(key, value)
        config = OperatorConfig.from_args(args)
    assert (config.shard, config.total_shards, config.role) == (2, 3, "recommender")
    # each shard keeps its slice's windows on a claim of its own, not the one shared claim
    assert not rendered.of_kind("PersistentVolumeClaim")
    (template,) = spec["volumeClaimTemplates"]
    assert template["metadata"]["name"] == "state"
    assert template["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert "state" not in {v["name"] for v in spec["template"]["spec"]["volumes"]}
    assert {"name": "state", "mountPath": "/var/lib/gpu-rightsizer"} in container["volumeMounts"]
    actuator = pod_spec(rendered.one("Deployment", f"{FULLNAME}-actuator"))["containers"][0]
    assert "GPURS_TOTAL_SHARDS" not in env_of(actuator)  # one actuator, elected on its Lease


def test_zero_shards_is_refused(helm: Path) -> None:
    rendered = helm_template(helm, values={"recommender.shards": 0}, check=False)
    assert rendered.returncode != 0 and "shards" in rendered.stderr
