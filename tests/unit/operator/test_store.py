"""The typed RecommendationStore: what it reads from damaged statuses, and that it never writes apply."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_rightsizer.adapters.store import ParsedRecommendations, RecommendationStore, parse_recommendation
from gpu_rightsizer.model.crd import ApplyStatus, ChangePhase, GPURecommendationStatus
from gpu_rightsizer.model.observation import WorkloadRef

REF = WorkloadRef(namespace="team-a", kind="Deployment", name="trainer")


def stored(status: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "team-a", "name": "deployment-trainer", "generation": 3},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "trainer"}},
        "status": status,
    }


class Api:
    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = list(objects)
        self.patches: list[Mapping[str, Any]] = []

    def list_recommendations(self, namespaces: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        return self.objects

    def get_recommendation(self, ref: WorkloadRef) -> dict[str, Any] | None:
        return self.objects[0] if self.objects else None

    def patch_recommendation_status(self, ref: WorkloadRef, status: Mapping[str, Any]) -> None:
        self.patches.append(status)

    def delete_recommendation(self, ref: WorkloadRef) -> bool:
        return False

    def ensure_recommendation(self, workload: Any) -> dict[str, Any]:
        return self.objects[0]


def test_a_readable_status_is_typed_with_its_target_and_generation() -> None:
    found = parse_recommendation(stored({"apply": {"phase": "Applied", "policy": "p"}}))
    assert found is not None and found.problem is None
    assert found.ref == REF and found.generation == 3
    assert found.status.apply is not None and found.status.apply.change_phase() is ChangePhase.APPLIED
    assert found.status.apply.in_flight


def test_a_damaged_field_reads_as_absent_and_is_named_the_rest_is_kept() -> None:
    found = parse_recommendation(
        stored({"apply": {"phase": "Sent-ish"}, "workloadGeneration": 4, "conditions": "garbage"})
    )
    assert found is not None
    assert found.unreadable == {"apply", "conditions"}
    assert found.problem is not None and "status unreadable in part" in found.problem
    assert found.status.workload_generation == 4 and found.status.apply is None


def test_an_object_naming_no_target_is_left_out_of_the_list() -> None:
    store = RecommendationStore(Api({"metadata": {"name": "x"}, "spec": {}}, stored(None)))
    assert [s.ref for s in store.list()] == [REF]


def test_the_store_never_writes_the_apply_state() -> None:
    api = Api(stored(None))
    status = GPURecommendationStatus(
        workload_generation=2, apply=ApplyStatus(phase=ChangePhase.APPLIED, policy="forged")
    )
    body = RecommendationStore(api).patch_status(REF, status)
    assert api.patches == [body]
    assert "apply" not in body and body["workloadGeneration"] == 2


def test_a_partial_patch_sends_only_the_fields_asked_for() -> None:
    api = Api(stored(None))
    RecommendationStore(api).patch_status(
        REF, GPURecommendationStatus(workload_generation=2), fields={"conditions"}
    )
    assert api.patches == [{"conditions": []}]


def versioned(name: str, version: str | None, status: Any) -> dict[str, Any]:
    raw = stored(status)
    raw["metadata"] = {**raw["metadata"], "name": f"deployment-{name}"}
    raw["spec"] = {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}}
    if version is not None:
        raw["metadata"]["resourceVersion"] = version
    return raw


def test_a_listed_recommendation_is_parsed_again_only_when_its_version_moved() -> None:
    parsed = ParsedRecommendations()
    api = Api(
        versioned("a", "10", {"workloadGeneration": 1}), versioned("b", "11", {"workloadGeneration": 2})
    )
    store = RecommendationStore(api, parsed)
    first = {found.ref.name: found for found in store.list()}

    api.objects[1] = versioned("b", "12", {"workloadGeneration": 5})  # b was written since
    second = {found.ref.name: found for found in store.list()}

    assert second["a"] is first["a"]  # the same parse: the object did not change
    assert second["b"] is not first["b"] and second["b"].status.workload_generation == 5
    assert (parsed.parsed, parsed.reused) == (3, 1)


def test_a_recommendation_gone_from_the_listing_is_forgotten_and_parsed_anew_when_back() -> None:
    parsed = ParsedRecommendations()
    api = Api(versioned("a", "10", {"workloadGeneration": 1}), versioned("b", "11", {}))
    store = RecommendationStore(api, parsed)
    store.list()
    api.objects = api.objects[:1]
    store.list()
    assert len(parsed) == 1

    api.objects.append(versioned("b", "11", {"workloadGeneration": 7}))  # same version, new content
    back = {found.ref.name: found for found in store.list()}
    assert back["b"].status.workload_generation == 7


def test_without_a_resource_version_every_listing_parses() -> None:
    parsed = ParsedRecommendations()
    store = RecommendationStore(Api(versioned("a", None, {"workloadGeneration": 1})), parsed)
    one, two = store.list(), store.list()
    assert one[0] is not two[0] and len(parsed) == 0 and parsed.parsed == 2


def test_an_unreadable_listed_recommendation_stays_unreadable_when_reused() -> None:
    parsed = ParsedRecommendations()
    damaged = versioned("a", "10", {"apply": {"phase": "Sent-ish"}})
    store = RecommendationStore(Api(damaged, {"metadata": {"resourceVersion": "9"}, "spec": {}}), parsed)
    for _ in range(2):
        found = store.list()
        assert [item.ref.name for item in found] == ["a"]
        assert found[0].unreadable == {"apply"}
    assert parsed.reused == 2  # the damaged one and the one that names no target, each once
