"""A new actuated kind is one row of the kinds table: registered there (and nowhere else), a kind
that follows an existing rollout rule is planned, patched, gated and verified like the kinds the
operator ships with. And the actuator's modules name no kind of their own."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from gpu_rightsizer.actuator import (
    checks,
    fields,
    gates,
    inplace,
    loop,
    plan,
    record,
    resize,
    step,
    verify,
    writes,
)
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


def test_the_actuators_modules_name_no_kind() -> None:
    """Kind names in the code (not the docstrings) of the actuator's modules would be kind knowledge
    outside the table. plan.py keeps one: the refusal text for a Job's immutable template; the
    in-place modules keep a Job's backoffLimit and a ReplicaSet's template path, borrowed to read a
    pod or a Job as a template. Which kinds resize in place, or may, is asked of the table."""
    names = set(KINDS)
    found: dict[str, list[str]] = {}
    for module in (fields, gates, verify, plan, step, writes, checks, record, loop, inplace, resize):
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
    assert found == {
        "plan.py": ["Job"],
        "inplace.py": ["ReplicaSet", "Job"],
        "resize.py": ["Job", "ReplicaSet"],
    }


def test_a_kind_that_offers_in_place_resize_is_one_column_of_its_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-place path asks the table whether a template kind's changes may go in place: a pool
    whose row says so is resized in place when annotated `InPlace`, its CPU raise that fits goes in
    place, and its manifest advice is a template kind's; the same row without the column is not."""
    from dataclasses import replace

    from gpu_rightsizer.model.kinds import offers_in_place_resize

    annotated = {
        **pool(),
        "metadata": {**pool()["metadata"], "annotations": {inplace.RESIZE_ANNOTATION: "InPlace"}},
    }
    monkeypatch.setitem(KINDS, POOL.kind, POOL)
    assert not offers_in_place_resize(POOL.kind) and not inplace.resizes_in_place(annotated)
    monkeypatch.setitem(KINDS, POOL.kind, replace(POOL, resize_opt_in=True))
    assert offers_in_place_resize(POOL.kind) and inplace.resizes_in_place(annotated)
    running = {
        "metadata": {"name": "llm-0"},
        "spec": {"nodeName": "n1", "containers": pool()["spec"]["template"]["spec"]["containers"]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "main", "ready": True}]},
    }
    assert inplace.resize_fits(pool(), [running], [CPU], settings())
    assert offers_in_place_resize("Deployment") and offers_in_place_resize("StatefulSet")
    assert not offers_in_place_resize("CronJob") and not offers_in_place_resize("Unknown")


def test_the_in_place_paths_table_in_the_docs_is_generated_from_the_kinds_table() -> None:
    from gpu_rightsizer.actuator.inplace import resize_paths_table

    table = resize_paths_table()
    doc = (Path(__file__).resolve().parents[3] / "docs" / "in-place-resize.md").read_text()
    assert table in doc, "docs/in-place-resize.md is stale: run hack/gen-docs-tables.py"
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines()[2:]}
    in_place_only, opt_in = list(rows)[:2]
    assert set(in_place_only.split(", ")) == {k for k, row in KINDS.items() if row.resized_in_place}
    assert set(opt_in.split(":")[0].split(", ")) == {k for k, row in KINDS.items() if row.resize_opt_in}
