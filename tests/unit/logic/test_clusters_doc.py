"""docs/clusters.md must match the code: the owner table, the flags and the metric names it names."""

from __future__ import annotations

from pathlib import Path

from gpu_rightsizer.logic.owners import KNOWN_CONTROLLERS

DOC = Path(__file__).resolve().parents[3] / "docs" / "clusters.md"
OPERATOR = Path(__file__).resolve().parents[3] / "operator" / "gpu_rightsizer"


def test_every_known_controller_is_in_the_owner_table() -> None:
    text = DOC.read_text()
    for kind, known in KNOWN_CONTROLLERS.items():
        assert kind in text, kind
        if "." in known.api_version:
            assert known.api_version.split("/")[0] in text, known.api_version


def test_flags_and_metrics_named_in_the_doc_exist() -> None:
    text = DOC.read_text()
    code = "".join(path.read_text() for path in OPERATOR.rglob("*.py"))
    for name in (
        "--prometheus-label", "--prometheus-timeout", "--prometheus-step", "GPURS_PROMETHEUS_LABELS",
        "GPURS_PROMETHEUS_TIMEOUT", "GPURS_PROMETHEUS_STEP", "gpu_rightsizer_metrics_source_up",
        "gpu_rightsizer_metrics_last_success_timestamp_seconds", "MetricsAvailable", "QueryFailed",
        "--sharing", "--trusted-gpu-target", "GPURS_TRUSTED_GPU_TARGETS", "--gpu-honor-labels",
        "GPURS_GPU_HONOR_LABELS",
    ):  # fmt: skip
        assert name in text and name in code, name


INSTALL = DOC.parent / "install.md"


def test_one_allowlist_recipe_in_the_docs_and_the_code() -> None:
    from gpu_rightsizer.adapters.capacity import ALLOWLIST_HINT, NODE_LABELS_ALLOWLIST

    assert NODE_LABELS_ALLOWLIST in ALLOWLIST_HINT
    for doc in (DOC, INSTALL):
        lines = [line for line in doc.read_text().splitlines() if "- nodes=[" in line]
        assert lines and all(line.strip() == f"- {NODE_LABELS_ALLOWLIST}" for line in lines), doc.name


def test_the_install_guide_has_an_apply_policy_that_validates() -> None:
    import re

    import yaml

    from gpu_rightsizer.logic.policy import policy_problems
    from gpu_rightsizer.model.crd import GPURightsizingPolicy

    text = INSTALL.read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    policies = [yaml.safe_load(b) for b in blocks if "kind: GPURightsizingPolicy" in b]
    assert policies
    policy = GPURightsizingPolicy.model_validate(policies[0])
    assert policy.spec.mode.value == "Apply" and policy.spec.actions and policy.spec.namespace_selector
    assert policy_problems(policy) == []
    assert "release=kube-prometheus-stack" not in text and "kps-kube-prometheus-stack-prometheus" not in text
    assert "prometheus-operated.monitoring.svc" in text
