"""The CRD models: defaults, wire format, and validation that agrees with the API server's.

Every policy below is judged twice: by the pydantic models, and by a local stand-in for the API
server built from the *generated* CRD (structural defaulting, the OpenAPI schema via jsonschema, and
each `x-kubernetes-validations` rule evaluated with cel-python). Both must accept the valid ones and
reject the invalid ones; the e2e suite repeats the invalid ones against a real kube-apiserver.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any

import celpy
import pytest
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError
from jsonschema import Draft4Validator  # type: ignore[import-untyped]
from pydantic import ValidationError

from gpu_rightsizer.crdgen import build_crds
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import ActionType, ApplyState, DiagnosisCode, PolicyMode, Severity
from gpu_rightsizer.model.crd import (
    ALL_CEL_RULES,
    GPURecommendation,
    GPURightsizingPolicy,
    GPURightsizingPolicySpec,
    Thresholds,
)

# --------------------------------------------------------------------------------------------------
# A local stand-in for the API server's validation of custom resources
# --------------------------------------------------------------------------------------------------


def _crd_schema(plural: str) -> dict[str, Any]:
    for crd in build_crds().values():
        if crd["spec"]["names"]["plural"] == plural:
            schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
            return schema
    raise KeyError(plural)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _default_and_find_unknown(schema: dict[str, Any], value: Any, path: str, errors: list[str]) -> Any:
    """Apply schema defaults like the API server, recording fields the schema does not know."""
    if isinstance(value, dict) and schema.get("type") == "object":
        properties: dict[str, Any] = schema.get("properties", {})
        for name, sub in properties.items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
        if "additionalProperties" in schema:
            for key in value:
                value[key] = _default_and_find_unknown(
                    schema["additionalProperties"], value[key], path, errors
                )
        elif path != "metadata":  # metadata is validated by the API server itself
            for key in list(value):
                if key not in properties:
                    errors.append(f'unknown field "{_join(path, key)}"')
                else:
                    value[key] = _default_and_find_unknown(
                        properties[key], value[key], _join(path, key), errors
                    )
    elif isinstance(value, list) and "items" in schema:
        return [_default_and_find_unknown(schema["items"], item, f"{path}[]", errors) for item in value]
    return value


@cache
def _cel_program(rule: str) -> Any:
    environment = celpy.Environment()
    return environment.program(environment.compile(rule))


def _rule_holds(rule: str, value: Any) -> bool:
    """True when the rule evaluates to true; a missing field or type error counts as a violation."""
    try:
        result = _cel_program(rule).evaluate({"self": json_to_cel(value)})
    except CELEvalError:
        return False
    return not isinstance(result, Exception) and bool(result)


def _cel_errors(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    errors: list[str] = []
    if value is None:
        return errors
    for entry in schema.get("x-kubernetes-validations", []):
        if not _rule_holds(entry["rule"], value):
            errors.append(f"{path}{entry.get('fieldPath', '')}: {entry['message']}")
    if isinstance(value, dict):
        for name, sub in schema.get("properties", {}).items():
            if name in value:
                errors += _cel_errors(sub, value[name], _join(path, name))
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            errors += _cel_errors(schema["items"], item, f"{path}[{index}]")
    return errors


def _list_set_errors(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    errors: list[str] = []
    if isinstance(value, list):
        if schema.get("x-kubernetes-list-type") == "set" and len(set(map(str, value))) != len(value):
            errors.append(f"{path}: Duplicate value")
        for index, item in enumerate(value):
            errors += _list_set_errors(schema.get("items", {}), item, f"{path}[{index}]")
    elif isinstance(value, dict):
        for name, sub in schema.get("properties", {}).items():
            if name in value:
                errors += _list_set_errors(sub, value[name], _join(path, name))
    return errors


def local_server_errors(plural: str, obj: dict[str, Any]) -> list[str]:
    """Errors the API server would report for `obj`: defaulting, schema, list sets, then CEL."""
    schema = _crd_schema(plural)
    errors: list[str] = []
    defaulted = _default_and_find_unknown(schema, copy.deepcopy(obj), "", errors)
    for error in Draft4Validator(schema).iter_errors(defaulted):
        errors.append(".".join(str(part) for part in error.absolute_path) + ": " + error.message)
    errors += _list_set_errors(schema, defaulted, "")
    if not errors:  # like the API server, CEL runs only on objects that pass the schema
        errors += _cel_errors(schema, defaulted, "")
    return errors


def policy(spec: dict[str, Any], name: str = "p") -> dict[str, Any]:
    return {
        "apiVersion": "gpurightsizer.io/v1alpha1",
        "kind": "GPURightsizingPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


# --------------------------------------------------------------------------------------------------
# The cases (the e2e suite uses the same shapes against a real API server)
# --------------------------------------------------------------------------------------------------

VALID_SPECS: dict[str, dict[str, Any]] = {
    "all-defaults": {},
    "off": {"mode": "Off"},
    "recommend-with-actions": {"mode": "Recommend", "actions": ["cpu", "memory"]},
    "apply-full": {
        "namespaceSelector": {"matchLabels": {"team": "ml"}},
        "workloadSelector": {
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["batch", "training"]},
                {"key": "legacy", "operator": "DoesNotExist"},
            ]
        },
        "priority": 10,
        "mode": "Apply",
        "dryRun": True,
        "actions": ["cpu", "memory", "gpuCount", "migProfile", "replicas", "releaseIdle"],
        "observation": {
            "window": "24h",
            "minSamples": 100,
            "thresholds": {"idleBusyP95": 0.05, "lowBusy": 0.4},
        },
        "safety": {
            "maxChangesPerHour": {"cluster": 20, "perNamespace": 5},
            "cooldown": "1h30m",
            "maintenanceWindows": [
                {"days": ["Sat", "Sun"], "start": "22:00", "end": "04:00", "timezone": "Europe/Berlin"}
            ],
            "minReplicas": 2,
            "verifyFor": "45m",
            "rollbackOnRegression": True,
            "sharingStrategy": "mig-mixed",
            "allowedMigProfiles": ["1g.10gb", "3g.40gb", "1g.10gb.me"],
        },
    },
    "time-slicing-sharing": {
        "mode": "Apply",
        "actions": ["gpuSharing"],
        "safety": {"sharingStrategy": "time-slicing"},
    },
    # the one duration grammar: Go's units plus d and w, compound allowed (bounds: the operator's)
    "durations-in-days": {
        "observation": {"window": "1d12h"},
        "safety": {"cooldown": "1d", "verifyFor": "1h", "maxStaleness": "30m"},
    },
}


@dataclass(frozen=True)
class InvalidCase:
    """A spec the API server must reject; `field` and `message` must both appear in its error."""

    spec: dict[str, Any]
    field: str
    message: str = ""


INVALID_SPECS: dict[str, InvalidCase] = {
    # --- CEL rules -------------------------------------------------------------------------------
    "cooldown-overflowing": InvalidCase(
        {"safety": {"cooldown": "1000000h"}},
        "spec.safety.cooldown",
        "spec.safety.cooldown must be between 1m and 720h",
    ),
    "verify-for-zero": InvalidCase(
        {"safety": {"verifyFor": "0s"}},
        "spec.safety.verifyFor",
        "spec.safety.verifyFor must be between 10s and 24h",
    ),
    "max-staleness-too-long": InvalidCase(
        {"safety": {"maxStaleness": "48h"}},
        "spec.safety.maxStaleness",
        "spec.safety.maxStaleness must be between 1m and 24h",
    ),
    "apply-without-actions": InvalidCase(
        {"mode": "Apply"},
        "spec.actions",
        "spec.actions must name at least one action when spec.mode is Apply",
    ),
    "off-with-actions": InvalidCase(
        {"mode": "Off", "actions": ["cpu"]},
        "spec.actions",
        "spec.actions may only be non-empty when spec.mode is Recommend or Apply",
    ),
    "dry-run-without-apply": InvalidCase(
        {"dryRun": True}, "spec.dryRun", "spec.dryRun may only be true when spec.mode is Apply"
    ),
    "replicas-with-min-zero": InvalidCase(
        {"mode": "Apply", "actions": ["replicas"], "safety": {"minReplicas": 0}},
        "spec.safety.minReplicas",
        "spec.safety.minReplicas must be >= 1 when spec.actions contains replicas",
    ),
    "mig-profile-without-mig": InvalidCase(
        {"mode": "Apply", "actions": ["migProfile"]},
        "spec.actions",
        "spec.actions contains migProfile, which needs spec.safety.sharingStrategy mig-mixed or mig-single",
    ),
    "mig-profile-without-profiles": InvalidCase(
        {"mode": "Apply", "actions": ["migProfile"], "safety": {"sharingStrategy": "mig-single"}},
        "spec.actions",
        "a non-empty spec.safety.allowedMigProfiles",
    ),
    "gpu-sharing-without-sharing": InvalidCase(
        {"mode": "Apply", "actions": ["gpuSharing"], "safety": {"sharingStrategy": "mig-mixed"}},
        "spec.actions",
        "spec.actions contains gpuSharing, which needs spec.safety.sharingStrategy time-slicing or mps",
    ),
    "mig-profiles-without-mig": InvalidCase(
        {"safety": {"allowedMigProfiles": ["1g.10gb"]}},
        "spec.safety.allowedMigProfiles",
        "spec.safety.allowedMigProfiles may only be set when sharingStrategy is mig-mixed or mig-single",
    ),
    "window-end-equals-start": InvalidCase(
        {"safety": {"maintenanceWindows": [{"start": "02:00", "end": "02:00"}]}},
        "spec.safety.maintenanceWindows[0].end",
        "spec.safety.maintenanceWindows[].end must differ from start",
    ),
    "namespace-rate-above-cluster": InvalidCase(
        {"safety": {"maxChangesPerHour": {"cluster": 2, "perNamespace": 5}}},
        "spec.safety.maxChangesPerHour.perNamespace",
        "spec.safety.maxChangesPerHour.perNamespace must not exceed cluster",
    ),
    "window-too-short": InvalidCase(
        {"observation": {"window": "4m"}},
        "spec.observation.window",
        "spec.observation.window must be between 5m and 720h",
    ),
    "window-too-long": InvalidCase(
        {"observation": {"window": "721h"}},
        "spec.observation.window",
        "spec.observation.window must be between 5m and 720h",
    ),
    "window-of-centuries": InvalidCase(
        {"observation": {"window": "2562047h"}},
        "spec.observation.window",
        "spec.observation.window must be between 5m and 720h",
    ),
    "idle-not-below-low": InvalidCase(
        {"observation": {"thresholds": {"idleBusyP95": 0.5, "lowBusy": 0.3}}},
        "spec.observation.thresholds.idleBusyP95",
        "spec.observation.thresholds.idleBusyP95 must be below lowBusy",
    ),
    "in-without-values": InvalidCase(
        {"workloadSelector": {"matchExpressions": [{"key": "tier", "operator": "In"}]}},
        "spec.workloadSelector.matchExpressions[0].values",
        "matchExpressions[].values must be non-empty when operator is In or NotIn",
    ),
    "exists-with-values": InvalidCase(
        {"namespaceSelector": {"matchExpressions": [{"key": "tier", "operator": "Exists", "values": ["x"]}]}},
        "spec.namespaceSelector.matchExpressions[0].values",
        "empty when operator is Exists or DoesNotExist",
    ),
    # --- OpenAPI schema --------------------------------------------------------------------------
    "unknown-mode": InvalidCase({"mode": "Sometimes"}, "spec.mode"),
    "unknown-action": InvalidCase({"mode": "Apply", "actions": ["software"]}, "spec.actions[0]"),
    "duplicate-action": InvalidCase({"mode": "Apply", "actions": ["cpu", "cpu"]}, "spec.actions"),
    "bad-duration": InvalidCase({"safety": {"cooldown": "6 hours"}}, "spec.safety.cooldown"),
    "bad-clock": InvalidCase(
        {"safety": {"maintenanceWindows": [{"start": "25:00", "end": "02:00"}]}},
        "spec.safety.maintenanceWindows[0].start",
    ),
    "bad-day": InvalidCase(
        {"safety": {"maintenanceWindows": [{"days": ["Funday"], "start": "01:00", "end": "02:00"}]}},
        "spec.safety.maintenanceWindows[0].days[0]",
    ),
    "negative-priority": InvalidCase({"priority": -1}, "spec.priority"),
    "zero-min-samples": InvalidCase({"observation": {"minSamples": 0}}, "spec.observation.minSamples"),
    "bad-mig-profile": InvalidCase(
        {"safety": {"sharingStrategy": "mig-mixed", "allowedMigProfiles": ["big-slice"]}},
        "spec.safety.allowedMigProfiles[0]",
    ),
    # the device plugin writes NVML's '+' as '.': 'mig-1g.10gb+me' is no resource anywhere
    "plus-me-mig-profile": InvalidCase(
        {"safety": {"sharingStrategy": "mig-mixed", "allowedMigProfiles": ["1g.10gb+me"]}},
        "spec.safety.allowedMigProfiles[0]",
    ),
    "unknown-sharing": InvalidCase({"safety": {"sharingStrategy": "vgpu"}}, "spec.safety.sharingStrategy"),
    "threshold-above-one": InvalidCase(
        {"observation": {"thresholds": {"idleBusyP95": 1.5}}}, "spec.observation.thresholds.idleBusyP95"
    ),
    "bad-selector-operator": InvalidCase(
        {"workloadSelector": {"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["b"]}]}},
        "spec.workloadSelector.matchExpressions[0].operator",
    ),
    "unknown-field": InvalidCase({"maxChanges": 3}, "spec.maxChanges"),
    "label-value-too-long": InvalidCase(
        {"namespaceSelector": {"matchLabels": {"team": "x" * 64}}}, "spec.namespaceSelector.matchLabels.team"
    ),
    "too-many-mig-profiles": InvalidCase(
        {"safety": {"sharingStrategy": "mig-mixed", "allowedMigProfiles": [f"1g.{n}gb" for n in range(33)]}},
        "spec.safety.allowedMigProfiles",
    ),
}


def _last_field(path: str) -> str:
    """`spec.safety.maintenanceWindows[0].start` -> `start`."""
    return re.sub(r"\[\d+\]$", "", path.rsplit(".", 1)[-1])


# --------------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(VALID_SPECS))
def test_valid_policies_pass_models_and_server_rules(name: str) -> None:
    manifest = policy(VALID_SPECS[name])
    parsed = GPURightsizingPolicy.model_validate(manifest)
    assert parsed.spec.mode in set(PolicyMode)
    assert local_server_errors("gpurightsizingpolicies", manifest) == []


@pytest.mark.parametrize("name", sorted(INVALID_SPECS))
def test_invalid_policies_fail_models_naming_the_field(name: str) -> None:
    case = INVALID_SPECS[name]
    with pytest.raises(ValidationError) as raised:
        GPURightsizingPolicySpec.model_validate(case.spec)
    text = str(raised.value)
    if case.message:
        assert case.message in text
    else:
        locations = [".".join(str(part) for part in error["loc"]) for error in raised.value.errors()]
        assert any(_last_field(case.field) in location for location in locations), locations


@pytest.mark.parametrize("name", sorted(INVALID_SPECS))
def test_invalid_policies_fail_server_rules_naming_the_field(name: str) -> None:
    case = INVALID_SPECS[name]
    errors = local_server_errors("gpurightsizingpolicies", policy(case.spec))
    assert errors, f"{name}: the generated CRD accepts it"
    joined = "\n".join(errors)
    assert _last_field(case.field) in joined
    if case.message:
        assert case.message in joined


def test_every_cel_rule_has_a_rejecting_case_and_names_a_field() -> None:
    messages = [case.message for case in INVALID_SPECS.values() if case.message]
    for rule in ALL_CEL_RULES:
        assert any(message and message in rule.message for message in messages), (
            f"no case for {rule.message!r}"
        )
        assert re.search(r"spec\.|matchExpressions\[\]", rule.message), rule.message


def _schema_nodes(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path, node)]
    for name, sub in node.get("properties", {}).items():
        found += _schema_nodes(sub, _join(path, name))
    if isinstance(node.get("items"), dict):
        found += _schema_nodes(node["items"], f"{path}[]")
    return found


@pytest.mark.parametrize("plural", ["gpurecommendations", "gpurightsizingpolicies"])
def test_schema_defaults_pass_their_own_rules_as_written(plural: str) -> None:
    """The API server checks each `default` against its node's CEL rules *without* nested defaulting,
    and refuses the whole CRD if one fails; so every rule must cope with absent fields."""
    checked = 0
    for path, node in _schema_nodes(_crd_schema(plural)):
        if "default" in node:
            for entry in node.get("x-kubernetes-validations", []):
                checked += 1
                assert _rule_holds(entry["rule"], node["default"]), f"{path}: {entry['rule']}"
    assert checked > 0 or plural == "gpurecommendations"


def test_empty_policy_gets_documented_defaults() -> None:
    spec = GPURightsizingPolicySpec()
    assert spec.mode is PolicyMode.RECOMMEND
    assert spec.dry_run is False
    assert spec.priority == 0
    assert spec.observation.window is None  # absent: the operator's --window
    assert spec.safety.cooldown == "6h"
    assert spec.safety.rollback_on_regression is True


def test_server_defaults_equal_model_defaults() -> None:
    """An empty policy, defaulted by the schema, equals the models' own defaults."""
    defaulted = _default_and_find_unknown(_crd_schema("gpurightsizingpolicies"), policy({}), "", [])
    models = GPURightsizingPolicy.model_validate(policy({})).to_manifest()
    for key in ("maintenanceWindows", "allowedMigProfiles"):  # empty lists are left absent on the server
        models["spec"]["safety"].pop(key)
    models["spec"].pop("actions")
    assert defaulted["spec"] == models["spec"]


def test_policy_manifest_round_trips_in_camel_case() -> None:
    manifest = policy(VALID_SPECS["apply-full"], name="gpu-batch")
    parsed = GPURightsizingPolicy.model_validate(manifest)
    assert parsed.name == "gpu-batch"
    assert parsed.spec.safety.max_changes_per_hour.per_namespace == 5
    assert ActionType.MIG_PROFILE in parsed.spec.actions
    dumped = parsed.to_manifest()
    assert dumped["spec"]["safety"]["maintenanceWindows"][0]["timezone"] == "Europe/Berlin"
    assert "max_changes_per_hour" not in str(dumped)
    assert GPURightsizingPolicy.model_validate(dumped) == parsed


def test_recommendation_status_round_trips_and_validates_against_crd() -> None:
    now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    manifest = {
        "apiVersion": "gpurightsizer.io/v1alpha1",
        "kind": "GPURecommendation",
        "metadata": {"name": "deployment-llm", "namespace": "ml"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm"}},
        "status": {
            "observedGeneration": 1,
            "window": {"start": "2026-05-01T11:00:00Z", "end": "2026-05-01T12:00:00Z", "samples": 60},
            "allocation": {"gpuResource": "nvidia.com/gpu", "gpuCount": 1, "cpuRequest": "2", "replicas": 2},
            "diagnosis": {
                "primary": "InputPipelineCPUBound",
                "confidence": 0.82,
                "findings": [
                    {
                        "code": "InputPipelineCPUBound",
                        "severity": "Warning",
                        "confidence": 0.82,
                        "message": "GPU busy p95 21% while CPU ran at 98% of its limit.",
                        "evidence": {"gpuBusyP95": 0.21, "cpuSaturation": 0.98},
                    }
                ],
            },
            "actions": [{"type": "cpu", "from": "2", "to": "6", "reason": "CPU-bound input pipeline"}],
            "savings": {"gpuHoursPerDay": 12.0, "shareOfAllocation": 0.5},
            "apply": {"state": "Applied", "previous": {"cpu": "2"}, "appliedAt": "2026-05-01T12:00:00Z"},
            "summary": {"workload": "Deployment/llm", "action": "cpu 2->6", "gpuBusyP95": "21%"},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "lastTransitionTime": "2026-05-01T12:00:00Z",
                    "reason": "Analyzed",
                }
            ],
        },
    }
    parsed = GPURecommendation.model_validate(manifest)
    assert parsed.status is not None
    assert parsed.status.diagnosis is not None
    assert parsed.status.diagnosis.primary is DiagnosisCode.INPUT_PIPELINE_CPU_BOUND
    assert parsed.status.diagnosis.findings[0].severity is Severity.WARNING
    assert parsed.status.apply is not None
    assert parsed.status.apply.state is ApplyState.APPLIED
    assert parsed.status.apply.applied_at == now
    dumped = parsed.to_manifest()
    assert dumped["status"]["actions"][0]["from"] == "2"
    assert "migProfile" not in dumped["status"]["allocation"]  # None is left out, never null
    assert local_server_errors("gpurecommendations", dumped) == []
    assert GPURecommendation.model_validate(dumped) == parsed


def test_recommendation_rejects_bad_condition_status() -> None:
    with pytest.raises(ValidationError, match="status"):
        GPURecommendation.model_validate(
            {
                "spec": {"targetRef": {"apiVersion": "v1", "kind": "Pod", "name": "p"}},
                "status": {
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "Maybe",
                            "lastTransitionTime": "2026-05-01T12:00:00Z",
                            "reason": "X",
                        }
                    ]
                },
            }
        )


def test_threshold_overrides_are_understood_by_the_engine() -> None:
    thresholds = Thresholds.model_validate(
        {
            "activeBusy": 0.04,
            "idleBusyP95": 0.03,
            "lowBusy": 0.4,
            "cpuSaturation": 1.2,
            "cpuThrottledRatio": 0.3,
            "memoryFullShare": 0.9,
            "minDeltaRatio": 0.15,
        }
    )
    settings = EngineSettings().with_overrides(thresholds.overrides())
    assert settings.idle.idle_busy_p95 == 0.03
    assert settings.low_busy == 0.4
    assert settings.input_pipeline.cpu_saturation == 1.2
    assert settings.min_delta_ratio == 0.15
    assert Thresholds().overrides() == {}
