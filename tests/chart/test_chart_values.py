"""Bad values are rejected with a message that names the value, and the values are documented.

The schema checks run twice: through `helm template` (what users see) when helm is available, and
always through jsonschema directly, so a broken schema is caught even without helm.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml

from tests.chart.chartlib import CHART_DIR, REPO_ROOT, helm_template, require_helm
from tests.chart.gen_values_doc import FREE_FORM, leaf_paths

SCHEMA = json.loads((CHART_DIR / "values.schema.json").read_text())
DEFAULTS = yaml.safe_load((CHART_DIR / "values.yaml").read_text())

# (dotted value path, bad value, fragment that helm's schema error must contain)
SCHEMA_REJECTIONS: list[tuple[str, Any, str]] = [
    ("image.pullPolicy", "Sometimes", "pullPolicy"),
    ("image.digest", "sha256:abc", "digest"),
    ("prometheus.url", "prometheus:9090", "url"),
    ("watch.namespaces", ["Bad_Namespace"], "namespaces"),
    ("watch.namespaces", ["team-a", "team-a"], "namespaces"),
    ("analysis.window", "7days", "window"),
    ("analysis.interval", 300, "interval"),
    ("logLevel", "TRACE", "logLevel"),
    ("defaultPolicy.mode", "Apply", "mode"),
    ("actuator.enabled", "yes", "enabled"),
    ("podSecurityContext.runAsNonRoot", False, "runAsNonRoot"),
    ("podSecurityContext.runAsUser", 0, "runAsUser"),
    ("containerSecurityContext.allowPrivilegeEscalation", True, "allowPrivilegeEscalation"),
    ("containerSecurityContext.privileged", True, "privileged"),
    ("agent.port", 80, "port"),
    ("recommender.resources.requests.memory", None, "memory"),
    ("defaultPolicy.priority", 1001, "priority"),
    ("recommender.resources.limits.memory", "lots", "memory"),
    ("serviceMonitor.interval", "every minute", "interval"),
    ("prometheusRule.wastedGPUHoursPerDayThreshold", 0, "wastedGPUHoursPerDayThreshold"),
    ("recommender.replicas", 2, "replicas"),
    ("agent.runAsUser", 65532, "runAsUser"),
    ("agent.runAsUser", 0, "runAsUser"),
    ("agent.namespace", "Agents", "namespace"),
]

# Cross-field rules enforced by the templates with `fail`: (values, message fragment)
TEMPLATE_REJECTIONS: list[tuple[dict[str, Any], str]] = [
    (
        {"dcgmExporter.counters.enabled": True},
        "dcgmExporter.counters.namespace must name the GPU Operator's namespace",
    ),
    (
        {"agent.enabled": True, "agent.hostPID": True},
        "agent.hostPID=true needs the agent to run as its own non-root user",
    ),
    (
        {
            "agent.enabled": True,
            "agent.hostPID": True,
            "agent.podResources.enabled": False,
            "agent.profilingAsAdmin": True,
        },
        "agent.hostPID=true needs the agent to run as its own non-root user",
    ),
    ({"actuator.enabled": True}, "actuator.namespaces must list at least one namespace"),
    (
        {"actuator.enabled": True, "actuator.clusterWide": True, "actuator.namespaces": ["a"]},
        "actuator.namespaces and actuator.clusterWide=true contradict each other",
    ),
    (
        {"actuator.enabled": True, "actuator.namespaces": ["team-b"], "watch.namespaces": ["team-a"]},
        'actuator.namespaces contains "team-b", which is not in watch.namespaces',
    ),
    ({"agent.profilingAsAdmin": True}, "agent.profilingAsAdmin=true has no effect unless agent.enabled=true"),
]


def with_value(path: str, value: Any) -> dict[str, Any]:
    values: dict[str, Any] = json.loads(json.dumps(DEFAULTS))
    node = values
    *parents, leaf = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return values


@pytest.mark.parametrize(
    ("path", "value", "fragment"), SCHEMA_REJECTIONS, ids=[f"{p}={v!r}" for p, v, _ in SCHEMA_REJECTIONS]
)
def test_schema_rejects_bad_value_directly(path: str, value: Any, fragment: str) -> None:
    errors = list(jsonschema.Draft7Validator(SCHEMA).iter_errors(with_value(path, value)))
    assert errors, f"{path}={value!r} was accepted"
    described = " ".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)
    assert fragment in described


@pytest.mark.parametrize(
    ("path", "value", "fragment"), SCHEMA_REJECTIONS, ids=[f"{p}={v!r}" for p, v, _ in SCHEMA_REJECTIONS]
)
def test_helm_rejects_bad_value_with_its_path(path: str, value: Any, fragment: str) -> None:
    helm = require_helm()
    result = helm_template(helm, values={path: value}, check=False)
    assert result.returncode != 0, f"helm accepted {path}={value!r}"
    assert "values don't meet the specifications of the schema" in result.stderr
    assert fragment in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("values", "message"), TEMPLATE_REJECTIONS, ids=[m[:40] for _, m in TEMPLATE_REJECTIONS]
)
def test_helm_rejects_inconsistent_values(values: dict[str, Any], message: str) -> None:
    helm = require_helm()
    result = helm_template(helm, values=values, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_defaults_and_full_values_satisfy_the_schema() -> None:
    validator = jsonschema.Draft7Validator(SCHEMA)
    assert not list(validator.iter_errors(DEFAULTS))
    full = yaml.safe_load((Path(__file__).parent / "values-full.yaml").read_text())
    merged = _merge(json.loads(json.dumps(DEFAULTS)), full)
    assert not [e.message for e in validator.iter_errors(merged)]


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def test_schema_file_is_generated_from_gen_schema() -> None:
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).parent / "gen_schema.py"), "--check"], check=False
    )
    assert proc.returncode == 0, "values.schema.json is stale: run `python tests/chart/gen_schema.py`"


def test_every_value_has_a_comment() -> None:
    """Each leaf in values.yaml has a comment right above it, or sits inside a documented free-form block."""
    lines = (CHART_DIR / "values.yaml").read_text().splitlines()
    stack: list[tuple[int, str, bool]] = []  # (indent, key, documented) of the enclosing blocks
    undocumented = []
    for index, line in enumerate(lines):
        match = re.match(r"^(\s*)(?:- )?([A-Za-z][\w.\-/]*):(.*)$", line)
        if not match:
            continue
        indent = len(match.group(1))
        key, rest = match.group(2), match.group(3).strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        commented = index > 0 and lines[index - 1].strip().startswith("#")
        inside_documented_free_form = any(k in FREE_FORM and doc for _, k, doc in stack)
        if rest == "":
            stack.append((indent, key, commented or inside_documented_free_form))
        elif not (commented or inside_documented_free_form):
            undocumented.append(".".join([k for _, k, _ in stack] + [key]))
    assert not undocumented, f"values without a comment: {undocumented}"


def test_values_reference_matches_values_yaml() -> None:
    """docs/helm-values.md lists exactly the values in values.yaml, and is generated from it."""
    doc = (REPO_ROOT / "docs" / "helm-values.md").read_text()
    documented = set(re.findall(r"^\| `([A-Za-z0-9_.]+)` \|", doc, flags=re.MULTILINE))
    actual = set(leaf_paths(DEFAULTS))
    assert not actual - documented, f"missing from docs/helm-values.md: {sorted(actual - documented)}"
    assert not documented - actual, f"documented but not in values.yaml: {sorted(documented - actual)}"
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).parent / "gen_values_doc.py"), "--check"], check=False
    )
    assert proc.returncode == 0, "docs/helm-values.md is stale: run `python tests/chart/gen_values_doc.py`"
