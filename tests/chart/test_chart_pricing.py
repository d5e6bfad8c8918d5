"""The chart's prices reach the recommender only when set, and its monitoring objects carry the label
kube-prometheus-stack selects them by."""

from __future__ import annotations

import yaml

from tests.chart.chartlib import FULL_VALUES, NAMESPACE, HelmResult, helm_template, pod_spec, require_helm

FULLNAME = "gpurs-gpu-rightsizer"


def _recommender_args(render: HelmResult) -> list[str]:
    deployment = render.one("Deployment", f"{FULLNAME}-recommender", NAMESPACE)
    args: list[str] = pod_spec(deployment)["containers"][0]["args"]
    return args


def test_no_price_no_money_flags_and_no_configmap() -> None:
    render = helm_template(require_helm())
    args = _recommender_args(render)
    assert not [a for a in args if a.startswith("--gpu-")]
    assert not [d for d in render.of_kind("ConfigMap") if d["metadata"]["name"].endswith("-gpu-prices")]


def test_prices_reach_the_recommender_as_a_flag_and_a_mounted_file() -> None:
    render = helm_template(require_helm(), values_files=[FULL_VALUES])
    args = _recommender_args(render)
    assert "--gpu-hour-price=2.5" in args
    assert "--gpu-prices=/etc/gpu-rightsizer/gpu-prices/prices.yaml" in args
    config_map = render.one("ConfigMap", f"{FULLNAME}-gpu-prices", NAMESPACE)
    assert yaml.safe_load(config_map["data"]["prices.yaml"]) == {
        "NVIDIA-H100-80GB-HBM3": 4.5,
        "NVIDIA A100-SXM4-80GB": 3,
    }
    spec = pod_spec(render.one("Deployment", f"{FULLNAME}-recommender", NAMESPACE))
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["gpu-prices"] == "/etc/gpu-rightsizer/gpu-prices"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["gpu-prices"]["configMap"]["name"] == f"{FULLNAME}-gpu-prices"
    actuator = pod_spec(render.one("Deployment", f"{FULLNAME}-actuator", NAMESPACE))
    assert not [a for a in actuator["containers"][0]["args"] if a.startswith("--gpu-")]


def test_a_price_given_with_set_as_text_is_accepted_and_garbage_refused() -> None:
    helm = require_helm()
    accepted = helm_template(helm, extra=["--set", "pricing.gpuHourPrice=1.25"])
    assert "--gpu-hour-price=1.25" in _recommender_args(accepted)
    refused = helm_template(helm, extra=["--set", "pricing.gpuHourPrice=cheap"], check=False)
    assert refused.returncode != 0 and "/pricing/gpuHourPrice" in refused.stderr


def test_servicemonitor_and_rules_carry_the_kps_release_label() -> None:
    helm = require_helm()
    render = helm_template(helm, values={"prometheusRule.enabled": True})
    assert render.one("ServiceMonitor", FULLNAME, NAMESPACE)["metadata"]["labels"]["release"] == "kps"
    assert render.one("PrometheusRule", FULLNAME, NAMESPACE)["metadata"]["labels"]["release"] == "kps"
    custom = helm_template(helm, values_files=[FULL_VALUES])
    labels = custom.one("ServiceMonitor", FULLNAME, NAMESPACE)["metadata"]["labels"]
    assert (labels["release"], labels["team"]) == ("kps-prod", "platform")
    # an explicit labels.release wins over the value, and the label appears once
    both = helm_template(helm, values={"serviceMonitor.labels": {"release": "mine"}})
    assert both.one("ServiceMonitor", FULLNAME, NAMESPACE)["metadata"]["labels"]["release"] == "mine"
    assert both.stdout.count("release: mine") == 1
    off = helm_template(helm, values={"serviceMonitor.release": ""})
    assert "release" not in off.one("ServiceMonitor", FULLNAME, NAMESPACE)["metadata"]["labels"]
