"""The generated CRDs: committed copies are current, schemas are structural, columns are complete."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from pydantic import BaseModel, Field

from gpu_rightsizer.commands import crds as crds_command
from gpu_rightsizer.crdgen import SchemaTranslationError, build_crds, openapi_schema, render_all
from gpu_rightsizer.logic.rules.registry import RULES
from gpu_rightsizer.model.codes import DiagnosisCode

REPO_ROOT = Path(__file__).resolve().parents[2]
COMMITTED_DIRS = [REPO_ROOT / "crds", REPO_ROOT / "charts" / "gpu-rightsizer" / "crds"]
REGENERATE = "gpu-rightsizer crds --output-dir crds --output-dir charts/gpu-rightsizer/crds"


def _schema(plural: str) -> dict[str, Any]:
    for crd in build_crds().values():
        if crd["spec"]["names"]["plural"] == plural:
            version = crd["spec"]["versions"][0]
            schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
            return schema
    raise KeyError(plural)


def _version(plural: str) -> dict[str, Any]:
    for crd in build_crds().values():
        if crd["spec"]["names"]["plural"] == plural:
            version: dict[str, Any] = crd["spec"]["versions"][0]
            return version
    raise KeyError(plural)


# --------------------------------------------------------------------------------------------------
# Drift
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("directory", COMMITTED_DIRS, ids=lambda d: str(d.relative_to(REPO_ROOT)))
def test_committed_crds_equal_generated(directory: Path) -> None:
    for name, text in render_all().items():
        path = directory / name
        assert path.is_file(), f"{path} is missing; run: {REGENERATE}"
        assert path.read_text(encoding="utf-8") == text, (
            f"{path} drifted from model/crd.py; run: {REGENERATE}"
        )


def _run_command(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    crds_command.add_arguments(parser)
    return crds_command.run(parser.parse_args(list(argv)))


def test_crds_command_writes_then_check_passes_then_detects_drift(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run_command("--output-dir", str(tmp_path)) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(render_all())
    assert _run_command("--check", "--output-dir", str(tmp_path)) == 0

    drifted = tmp_path / "gpurightsizer.io_gpurightsizingpolicies.yaml"
    drifted.write_text(drifted.read_text().replace("Recommend", "Apply", 1))
    (tmp_path / "gpurightsizer.io_gpurecommendations.yaml").unlink()
    capsys.readouterr()
    assert _run_command("--check", "--output-dir", str(tmp_path)) == 1
    err = capsys.readouterr().err
    assert "gpurightsizer.io_gpurightsizingpolicies.yaml: differs" in err
    assert "gpurightsizer.io_gpurecommendations.yaml: missing" in err
    assert drifted.read_text() != render_all()[drifted.name], "--check must not write"


def test_crds_command_prints_all_documents_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run_command() == 0
    documents = [doc for doc in yaml.safe_load_all(capsys.readouterr().out) if doc]
    assert sorted(doc["metadata"]["name"] for doc in documents) == [
        "gpurecommendations.gpurightsizer.io",
        "gpurightsizingchanges.gpurightsizer.io",
        "gpurightsizingpolicies.gpurightsizer.io",
    ]


def test_check_without_output_dir_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run_command("--check") == 2
    assert "--output-dir" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# Structural schema
# --------------------------------------------------------------------------------------------------

_FORBIDDEN = ("$ref", "anyOf", "oneOf", "allOf", "not", "uniqueItems", "title", "const", "$defs")


def _structural_violations(node: dict[str, Any], path: str) -> list[str]:
    """The rules of https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#specifying-a-structural-schema
    that our generator could break, plus what the API server rejects on top."""
    problems = [f"{path}: has {key}" for key in _FORBIDDEN if key in node]
    if not node.get("type") and not node.get("x-kubernetes-preserve-unknown-fields"):
        problems.append(f"{path}: no type")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: properties and additionalProperties together")
    if isinstance(node.get("additionalProperties"), bool):
        problems.append(f"{path}: boolean additionalProperties")
    if node.get("type") == "array" and not isinstance(node.get("items"), dict):
        problems.append(f"{path}: array without one items schema")
    if "nullable" in node and node["nullable"] is not True:
        problems.append(f"{path}: nullable must be true or absent")
    if node.get("x-kubernetes-list-type") == "set" and node["items"].get("type") in ("object", "array"):
        problems.append(f"{path}: list-type set of non-scalars")
    if node.get("x-kubernetes-list-type") == "map":
        item = node["items"]
        for key in node.get("x-kubernetes-list-map-keys", []):
            if key not in item.get("required", []) and "default" not in item["properties"].get(key, {}):
                problems.append(f"{path}: map key {key} neither required nor defaulted")
    for key in node.get("required", []):
        if key not in node.get("properties", {}):
            problems.append(f"{path}: required {key} is not a property")
    for name, sub in node.get("properties", {}).items():
        problems += _structural_violations(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        problems += _structural_violations(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        problems += _structural_violations(node["additionalProperties"], f"{path}.*")
    return problems


@pytest.mark.parametrize("plural", ["gpurecommendations", "gpurightsizingpolicies"])
def test_schema_is_structural(plural: str) -> None:
    schema = _schema(plural)
    assert _structural_violations(schema, plural) == []
    assert schema["properties"]["metadata"] == {"type": "object"}


def _walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path, node)]
    for name, sub in node.get("properties", {}).items():
        found += _walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        found += _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        found += _walk(node["additionalProperties"], f"{path}.*")
    return found


def test_preserve_unknown_fields_is_used_nowhere() -> None:
    for plural in ("gpurecommendations", "gpurightsizingpolicies"):
        assert [p for p, n in _walk(_schema(plural)) if "x-kubernetes-preserve-unknown-fields" in n] == []


def test_optional_fields_are_nullable_and_defaults_are_in_spec_only() -> None:
    nodes = dict(_walk(_schema("gpurightsizingpolicies")))
    assert nodes[".spec.namespaceSelector"]["nullable"] is True
    assert nodes[".spec.observation.thresholds.idleBusyP95"]["nullable"] is True
    assert nodes[".spec.mode"]["default"] == "Recommend"
    assert nodes[".spec.safety"]["default"] == {}, "nested defaults apply only when the object exists"
    assert nodes[".spec"]["default"] == {}
    recommendation = _walk(_schema("gpurecommendations"))
    assert [p for p, n in recommendation if p.startswith(".status") and "default" in n] == []


def test_every_rule_carries_field_naming_message_and_cost_bounds() -> None:
    """CEL cost estimates need maxItems/maxLength on lists and strings, or the API server refuses the CRD."""
    for plural in ("gpurecommendations", "gpurightsizingpolicies"):
        for path, node in _walk(_schema(plural)):
            for rule in node.get("x-kubernetes-validations", []):
                assert rule["message"]
                assert rule["rule"]
            if node.get("type") == "array" and path.startswith(".spec"):
                assert "maxItems" in node, path
            if node.get("type") == "string" and path.startswith(".spec") and "enum" not in node:
                assert "maxLength" in node, path


def test_enums_patterns_and_bounds_reach_the_schema() -> None:
    nodes = dict(_walk(_schema("gpurightsizingpolicies")))
    assert nodes[".spec.mode"]["enum"] == ["Off", "Recommend", "Apply"]
    assert set(nodes[".spec.actions[]"]["enum"]) >= {
        "cpu", "memory", "gpuCount", "migProfile", "gpuSharing", "replicas", "releaseIdle"
    }  # fmt: skip
    assert "software" not in nodes[".spec.actions[]"]["enum"]
    assert nodes[".spec.actions"]["x-kubernetes-list-type"] == "set"
    assert nodes[".spec.safety.cooldown"]["pattern"] == r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h|d|w))+$"
    assert nodes[".spec.safety.maintenanceWindows[].start"]["pattern"].startswith("^([01][0-9]|2[0-3])")
    assert nodes[".spec.safety.sharingStrategy"]["enum"] == [
        "mig-mixed",
        "mig-single",
        "time-slicing",
        "time-slicing-no-rename",
        "mps",
        "none",
    ]
    assert nodes[".spec.priority"]["minimum"] == 0
    assert nodes[".spec.observation.thresholds.idleBusyP95"]["maximum"] == 1.0
    recommendation = dict(_walk(_schema("gpurecommendations")))
    registry_order = [rule.code.value for rule in RULES]  # every code, in the rule registry's order
    assert sorted(registry_order) == sorted(code.value for code in DiagnosisCode)
    assert recommendation[".status.diagnosis.primary"]["enum"] == registry_order
    assert recommendation[".status.diagnosis.findings[].code"]["enum"] == registry_order
    assert recommendation[".status.conditions"]["x-kubernetes-list-map-keys"] == ["type"]
    assert recommendation[".status.diagnosis.findings[].evidence"]["additionalProperties"] == {
        "type": "number"
    }
    assert recommendation[".status.window.start"]["format"] == "date-time"
    assert recommendation[".spec"]["required"] == ["targetRef"]


@pytest.mark.parametrize("name", sorted(render_all()))
def test_crd_documents_pass_kubernetes_validate(name: str) -> None:
    manifest = build_crds()[name]
    kubernetes_validate.validate(manifest, "1.36.0", strict=True)


# --------------------------------------------------------------------------------------------------
# Names, scope, columns
# --------------------------------------------------------------------------------------------------


def test_names_scope_and_subresources() -> None:
    crds = {crd["spec"]["names"]["kind"]: crd for crd in build_crds().values()}
    recommendation, policy = crds["GPURecommendation"]["spec"], crds["GPURightsizingPolicy"]["spec"]
    assert recommendation["group"] == policy["group"] == "gpurightsizer.io"
    assert recommendation["scope"] == "Namespaced"
    assert policy["scope"] == "Cluster"
    assert recommendation["names"]["shortNames"] == ["gpurec"]
    assert policy["names"]["shortNames"] == ["gpupolicy"]
    assert recommendation["names"]["categories"] == policy["names"]["categories"] == ["gpurightsizer"]
    for spec in (recommendation, policy):
        (version,) = spec["versions"]
        assert version["name"] == "v1alpha1"
        assert version["served"]
        assert version["storage"]
        assert version["subresources"] == {"status": {}}


def test_recommendation_printer_columns() -> None:
    columns = {c["name"]: c for c in _version("gpurecommendations")["additionalPrinterColumns"]}
    default = [name for name, c in columns.items() if not c.get("priority")]
    assert default == [
        "Workload",
        "Diagnosis",
        "Metrics",
        "Action",
        "GPU Busy P95",
        "Savings",
        "State",
        "Last-Analysed",
    ]
    assert {name for name, c in columns.items() if c.get("priority") == 1} == {"Confidence", "Window", "Age"}
    # freshness is the analysed window's end, not the object's creation
    assert (columns["Last-Analysed"]["jsonPath"], columns["Last-Analysed"]["type"]) == (
        ".status.window.end",
        "date",
    )
    nodes = dict(_walk(_schema("gpurecommendations")))
    for column in columns.values():
        if column["jsonPath"].startswith(".status"):
            path = column["jsonPath"].replace('[?(@.type=="MetricsAvailable")]', "[]")  # a list filter
            assert path in nodes, f"{column['name']} points at a field the schema lacks"


# --------------------------------------------------------------------------------------------------
# Translation errors are loud
# --------------------------------------------------------------------------------------------------


class _Union(BaseModel):
    value: int | str


class _Unique(BaseModel):
    values: set[str] = Field(default_factory=set)


@pytest.mark.parametrize(("model", "problem"), [(_Union, "unions"), (_Unique, "uniqueItems")])
def test_untranslatable_schemas_are_refused(model: type[BaseModel], problem: str) -> None:
    with pytest.raises(SchemaTranslationError, match=problem):
        openapi_schema(model)
