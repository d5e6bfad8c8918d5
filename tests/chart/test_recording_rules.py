"""The chart's recording rules are the operator's own queries: generated, valid, rendered unchanged.

The rules file is written by hack/gen-recording-rules.py from `gpu_rightsizer.adapters.recording_rules`;
these tests fail when it is stale, when promtool rejects it, or when the chart renders something else
than that file (as a PrometheusRule or as a ConfigMap). The render tests need helm, the promtool ones
promtool (Debian package `prometheus`); each skips with the reason when its tool is missing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpu_rightsizer.adapters.recording_rules import recording_rules, rules_file
from tests.chart.chartlib import (
    CHART_DIR,
    FULL_VALUES,
    NAMESPACE,
    RELEASE,
    REPO_ROOT,
    helm_template,
    require_helm,
)

RULES_FILE = CHART_DIR / "files" / "recording-rules.yaml"
FULLNAME = f"{RELEASE}-gpu-rightsizer"


def _promtool_check(path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not found (Debian package `prometheus`, installed by hack/bootstrap.sh)")
    proc = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(recording_rules())} rules found" in proc.stdout


def test_rules_file_is_generated_from_the_operators_queries() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "hack" / "gen-recording-rules.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(RULES_FILE.read_text()) == rules_file()


def test_rules_file_passes_promtool() -> None:
    _promtool_check(RULES_FILE)


def test_default_render_has_no_recording_rules() -> None:
    render = helm_template(require_helm())
    names = {doc["metadata"]["name"] for doc in render.docs}
    assert f"{FULLNAME}-recording" not in names and f"{FULLNAME}-recording-rules" not in names


def test_rendered_rules_equal_the_python_definitions(tmp_path: Path) -> None:
    render = helm_template(require_helm(), values_files=[FULL_VALUES])
    rule = render.one("PrometheusRule", f"{FULLNAME}-recording", NAMESPACE)
    assert rule["spec"]["groups"] == rules_file()["groups"]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    config_map = render.one("ConfigMap", f"{FULLNAME}-recording-rules", NAMESPACE)
    text = config_map["data"]["gpu-rightsizer-recording-rules.yaml"]
    assert yaml.safe_load(text) == rules_file()
    path = tmp_path / "rendered-rules.yaml"
    path.write_text(text)
    _promtool_check(path)


def test_each_form_can_be_left_out() -> None:
    render = helm_template(
        require_helm(),
        values={"recordingRules.enabled": True, "recordingRules.prometheusRule": False},
    )
    assert not [d for d in render.of_kind("PrometheusRule") if d["metadata"]["name"].endswith("-recording")]
    render.one("ConfigMap", f"{FULLNAME}-recording-rules", NAMESPACE)
    render = helm_template(
        require_helm(), values={"recordingRules.enabled": True, "recordingRules.configMap": False}
    )
    render.one("PrometheusRule", f"{FULLNAME}-recording", NAMESPACE)
    assert not [d for d in render.of_kind("ConfigMap") if d["metadata"]["name"].endswith("-recording-rules")]
