"""The actuator's loop reads recommendations and change records as models: an object that does not
parse is named in a warning and skipped (or read without its bad fields); the other workloads are
stepped as usual."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest
from tests.unit.operator.test_cycle_scaling import NoRecords, actuator_for
from tests.unit.operator.test_cycle_windows import NOW, cluster, policy

from gpu_rightsizer.actuator import loop
from gpu_rightsizer.actuator.step import Actuator
from gpu_rightsizer.adapters.store import parse_recommendation
from gpu_rightsizer.model.crd import ChangePhase


class Records(NoRecords):
    """Change records as listed: one readable change in flight, one damaged record."""

    def __init__(self, listed: list[dict[str, Any]]) -> None:
        self.listed = listed

    def list_changes(self, namespaces: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        return self.listed


def record(name: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "team-a", "name": f"deployment-{name}"},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "workloadUid": f"uid-{name}",
            "recommendation": f"deployment-{name}",
        },
        "status": status,
    }


def test_bad_objects_are_named_and_skipped_and_the_others_stepped(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    kube = cluster(policy("a", "team-a"))
    recommendations = kube.recommendations
    recommendations[("team-a", "broken")] = {  # names no workload: nothing to step
        "metadata": {"namespace": "team-a", "name": "deployment-broken"},
        "spec": {"targetRef": "Deployment/broken"},
    }
    two_status = cast(dict[str, Any], recommendations[("team-a", "two")]["status"])
    two_status["actions"] = "not a list"  # read without its actions
    seen: dict[str, Any] = {}

    def step(self: Any, case: Any, recent: Any) -> None:
        seen[case.ref.key] = case

    monkeypatch.setattr(Actuator, "step", step)
    records = Records([
        record("one", phase="Applied", policy="a", replicas=3, appliedAt="2026-03-04T11:30:00Z"),
        record("gone", phase="Applied", policy="a", appliedAt="2026-03-04T11:31:00Z"),
        {"metadata": {"namespace": "team-a", "name": "deployment-x"}, "spec": {"workloadUid": 7}},
        {"metadata": {"namespace": "team-a", "name": "deployment-y"}, "spec": None, "status": "garbage"},
    ])  # fmt: skip
    with caplog.at_level(logging.WARNING):
        stepped = loop.run_once(kube, records, actuator_for(kube), NOW)  # type: ignore[arg-type]
    assert sorted(seen) == sorted(f"{ns}/Deployment/{name}" for ns, name in kube.workloads)
    assert stepped == len(kube.workloads)
    assert "actions" not in seen["team-a/Deployment/two"].recommendation["status"]
    assert (
        seen["team-a/Deployment/one"].recommendation["status"]["diagnosis"]["primary"] == "InsufficientData"
    )
    # the readable change in flight counts against the policy's budget for the other workloads
    assert seen["team-a/Deployment/two"].pods_in_disruption == 3 + 1  # one's 3 pods, gone's 1
    text = caplog.text
    assert "deployment-broken names no readable target" in text
    assert "GPURecommendation team-a/deployment-two: status unreadable in part: actions" in text
    assert "GPURightsizingChange team-a/deployment-x is unreadable" in text
    assert "GPURightsizingChange team-a/deployment-y is unreadable" in text


def test_one_workload_whose_read_fails_does_not_stop_the_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = cluster(policy("a", "team-a"))
    stepped: list[str] = []
    monkeypatch.setattr(Actuator, "step", lambda self, case, recent: stepped.append(case.ref.name))
    original = kube.read

    def read(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if name == "one":
            raise RuntimeError("the API server hung up")
        return original(kind, namespace, name)

    monkeypatch.setattr(kube, "read", read)
    assert loop.run_once(kube, NoRecords(), actuator_for(kube), NOW) == len(kube.workloads) - 1  # type: ignore[arg-type]
    assert "one" not in stepped and "two" in stepped


def test_a_change_in_flight_is_stepped_without_its_recommendation(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = cluster(policy("a", "team-a"))
    del kube.recommendations[("team-a", "one")]
    seen: dict[str, Any] = {}

    def step(self: Any, case: Any, recent: Any) -> None:
        seen[case.ref.key] = case

    monkeypatch.setattr(Actuator, "step", step)
    records = Records([record("one", phase=ChangePhase.ROLLED_OUT.value, policy="a")])
    loop.run_once(kube, records, actuator_for(kube), NOW)  # type: ignore[arg-type]
    assert seen["team-a/Deployment/one"].recommendation["metadata"]["name"] == "deployment-one"


def test_a_step_sees_the_stored_fields_only_so_an_unchanged_mirror_is_not_rewritten() -> None:
    """No defaults are filled in: a mirror without `rollbacks` must not read as `rollbacks: 0`, or
    every pass would find the mirror stale and write it again."""
    status = {
        "diagnosis": {"primary": "InsufficientData", "confidence": 0.0},
        "apply": {"state": "Blocked", "reason": "PodDisruptionBudget keep-both", "change": "deployment-one"},
    }
    raw = {
        "metadata": {"namespace": "team-a", "name": "deployment-one"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "one"}},
        "status": status,
    }
    stored = parse_recommendation(raw)
    assert stored is not None
    ((_, published),) = loop._targets([stored], []).values()
    assert published["status"] == status and published["spec"] == raw["spec"]
