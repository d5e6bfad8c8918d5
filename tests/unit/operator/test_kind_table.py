"""A new actuated kind is one row of the kinds table: registered there (and nowhere else), a kind
that follows an existing rollout rule is planned, patched, gated and verified like the kinds the
operator ships with. And the actuator's modules name no kind of their own."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from gpu_rightsizer.actuator import checks, fields, gates, loop, plan, record, step, verify, writes
from gpu_rightsizer.actuator.gates import Availability, check_availability, rollout_incomplete
from gpu_rightsizer.actuator.plan import PlanError, plan_change, workload_patch
from gpu_rightsizer.actuator.verify import new_revision_pods
from gpu_rightsizer.logic.policy import effective_settings
from gpu_rightsizer.model.codes import ActionType, ApplyState
from gpu_rightsizer.model.crd import GPURightsizingPolicy
from gpu_rightsizer.model.kinds import KINDS, Rollout, WorkloadKind
from gpu_rightsizer.model.result import Action, ActionTarget

#: A serving controller that rolls out like a StatefulSet, under its own label and group.
POOL = WorkloadKind(
    "InferencePool", "serving.example.com/v1", "inferencepools", "an example serving pool",
    template_path=("spec", "template"), scalable=True, owns_pods=True, patchable=True,
    rollout=Rollout.STATEFULSET, revision_label="serving.example.com/revision", pausable=True,
    replaces_stuck_pods=True,
)  # fmt: skip
CPU = Action(
    type=ActionType.CPU, from_value="1 cores", to_value="4 cores", reason="starved", automatic=True,
    resource="cpu", target=ActionTarget(container="main", requests={"cpu": "4"}, limits={"cpu": "4"}),
)  # fmt: skip


def settings() -> Any:
    spec = {"mode": "Apply", "actions": ["cpu"], "safety": {"cooldown": "1h", "allowSingleReplica": True}}
    return effective_settings(GPURightsizingPolicy.model_validate({"metadata": {"name": "p"}, "spec": spec}))


def pool(**status: Any) -> dict[str, Any]:
    container = {"name": "main", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}
    return {
        "apiVersion": POOL.api_version, "kind": POOL.kind,
        "metadata": {"namespace": "team-a", "name": "llm", "uid": "u1", "generation": 2},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [container]}}},
        "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2,
                   "currentRevision": "r2", "updateRevision": "r2", **status},
    }  # fmt: skip


def pod(name: str, revision: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {POOL.revision_label: revision}},
        "status": {"phase": "Running"},
    }


def test_an_unregistered_kind_is_never_patched() -> None:
    with pytest.raises(PlanError):
        plan_change(pool(), [CPU], settings())
    with pytest.raises(PlanError):
        workload_patch(POOL.kind, {"containers[main].resources.limits[cpu]": "4"}, None)


def test_a_kind_registered_in_the_table_flows_through_plan_gates_and_verification(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(KINDS, POOL.kind, POOL)
    planned = plan_change(pool(), [CPU], settings())
    assert planned is not None and planned.target["containers[main].resources.limits[cpu]"] == "4"
    body = workload_patch(POOL.kind, planned.target, None)
    assert body["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "4"}
    # gates: a complete rollout passes; the row's rule says what an incomplete one is
    assert check_availability(planned, Availability(pool()), settings()) is None
    assert rollout_incomplete(pool(currentRevision="r1")) == (
        "the InferencePool's current revision is not the update revision yet"
    )
    assert rollout_incomplete(pool(readyReplicas=1)) == "1/2 replicas available"
    paused = pool()
    paused["spec"]["paused"] = True
    verdict = check_availability(planned, Availability(paused), settings())
    assert (
        verdict is not None
        and verdict.state == ApplyState.BLOCKED
        and "InferencePool is paused" in verdict.reason
    )
    # verification measures only the pods of the update revision, told apart by the row's label
    pods = [pod("llm-0", "r2"), pod("llm-1", "r1")]
    assert [p["metadata"]["name"] for p in new_revision_pods(pool(), pods)] == ["llm-0"]
    # field ownership reads the row's template path
    assert fields._managed_key_paths(POOL.kind, "containers[main].resources.limits[cpu]") is not None


def test_the_actuators_pure_modules_name_no_kind() -> None:
    """Kind names in the code (not the docstrings) of the actuator's modules would be kind knowledge
    outside the table. plan.py keeps one: the refusal text for a Job's immutable template. (The
    in-place modules, inplace.py and resize.py, are not covered here.)"""
    names = set(KINDS)
    found: dict[str, list[str]] = {}
    for module in (fields, gates, verify, plan, step, writes, checks, record, loop):
        tree = ast.parse(Path(str(module.__file__)).read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef)
            and node.body and isinstance(node.body[0], ast.Expr)
        }  # fmt: skip
        literals = [
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in docstrings
        ]
        if literals:
            found[Path(str(module.__file__)).name] = literals
    assert found == {"plan.py": ["Job"]}
