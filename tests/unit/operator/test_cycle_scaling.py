"""The analysis cycle's API cost per workload: workloads and HPAs are listed once per cycle (per watched
namespace when the operator is namespace-scoped), and a status that says nothing new is not rewritten
until its window grows old."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import pytest
from tests.unit.operator.test_cycle_windows import NOW, FakeKube, FetchRecorder, cluster, memo_for, policy

from gpu_rightsizer.handlers import cycle
from gpu_rightsizer.model.observation import WorkloadRef, WorkloadWindow


class ListingKube(FakeKube):
    """FakeKube with the cycle's LIST calls, counting every read and keeping the statuses it is sent."""

    def __init__(self, base: FakeKube, hpas: dict[tuple[str, str, str], dict[str, Any]] | None = None):
        super().__init__(base.workloads, base.namespaces, base.policies)
        self.hpas = hpas or {}
        self.reads: list[str] = []
        self.hpa_reads: list[str] = []
        self.workload_lists: list[tuple[str, tuple[str, ...]]] = []
        self.hpa_lists: list[tuple[str, ...]] = []
        self.failing_lists = False

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads.append(f"{namespace}/{name}")
        return super().read(kind, namespace, name)

    def hpa_for(self, ref: WorkloadRef) -> None:
        self.hpa_reads.append(ref.key)

    def list_workloads(
        self, kind: str, namespaces: tuple[str, ...] = ()
    ) -> dict[tuple[str, str], dict[str, Any]]:
        if self.failing_lists:
            raise PermissionError("forbidden: cannot list deployments")
        self.workload_lists.append((kind, namespaces))
        return {key: obj for key, obj in self.workloads.items() if not namespaces or key[0] in namespaces}

    def list_hpas(self, namespaces: tuple[str, ...] = ()) -> dict[tuple[str, str, str], dict[str, Any]]:
        if self.failing_lists:
            raise PermissionError("forbidden: cannot list horizontalpodautoscalers")
        self.hpa_lists.append(namespaces)
        return {key: hpa for key, hpa in self.hpas.items() if not namespaces or key[0] in namespaces}

    def patch_recommendation_status(self, ref: WorkloadRef, status: Mapping[str, Any]) -> None:
        super().patch_recommendation_status(ref, status)
        stored = self.recommendations[(ref.namespace, ref.name)]
        stored["status"] = cycle.merge_patched(stored.get("status") or {}, status)


def stored_status(kube: FakeKube, namespace: str, name: str) -> dict[str, Any]:
    """The status the fake API server holds for a workload's recommendation."""
    status = kube.recommendations[(namespace, name)]["status"]
    assert isinstance(status, dict)
    return status


def listing_cluster() -> ListingKube:
    return ListingKube(cluster(policy("a", "team-a")), hpas={("team-a", "Deployment", "one"): hpa()})


def hpa() -> dict[str, Any]:
    return {
        "metadata": {"namespace": "team-a", "name": "one-hpa"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "one"}, "minReplicas": 2, "maxReplicas": 5},
    }


def test_workloads_and_hpas_are_listed_once_per_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = listing_cluster()
    monkeypatch.setattr(cycle, "fetch_windows", FetchRecorder(kube))
    seen: dict[str, Any] = {}
    original = cycle.analyse

    def recording(window: WorkloadWindow, *args: Any) -> Any:
        seen[window.workload.key] = window.allocation.hpa
        return original(window, *args)

    monkeypatch.setattr(cycle, "analyse", recording)

    assert cycle.run_cycle(memo_for(kube), now=NOW) == 4

    assert kube.workload_lists == [("Deployment", ())]  # cluster-wide: one LIST for all four
    assert kube.hpa_lists == [()]
    assert kube.reads == [] and kube.hpa_reads == []
    assert seen["team-a/Deployment/one"] is not None
    assert (seen["team-a/Deployment/one"].name, seen["team-a/Deployment/one"].max_replicas) == ("one-hpa", 5)
    assert seen["team-a/Deployment/two"] is None
    assert len(kube.status_patches) == 4


def test_a_namespace_scoped_operator_lists_only_its_namespaces(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = listing_cluster()
    monkeypatch.setattr(cycle, "fetch_windows", FetchRecorder(kube))
    memo = memo_for(kube, namespaces=("team-a", "team-b"), all_namespaces=False)

    assert cycle.run_cycle(memo, now=NOW) == 3

    assert kube.workload_lists == [("Deployment", ("team-a", "team-b"))]
    assert kube.hpa_lists == [("team-a", "team-b")]
    assert {key for key, _ in kube.status_patches} == {
        "team-a/Deployment/one",
        "team-a/Deployment/two",
        "team-b/Deployment/three",
    }


def test_when_listing_is_refused_each_workload_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = listing_cluster()
    kube.failing_lists = True
    monkeypatch.setattr(cycle, "fetch_windows", FetchRecorder(kube))

    assert cycle.run_cycle(memo_for(kube), now=NOW) == 4

    assert sorted(kube.reads) == ["team-a/one", "team-a/two", "team-b/three", "team-c/solo"]
    assert sorted(kube.hpa_reads) == sorted(key for key, _ in kube.status_patches)


def test_an_unchanged_status_is_written_again_only_when_its_window_grows_old(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube = listing_cluster()
    monkeypatch.setattr(cycle, "fetch_windows", FetchRecorder(kube))
    memo = memo_for(kube, interval_seconds=60.0)
    cycle.run_cycle(memo, now=NOW)
    assert len(kube.status_patches) == 4
    first = dict(stored_status(kube, "team-a", "one"))

    kube.status_patches.clear()
    assert cycle.run_cycle(memo, now=NOW + timedelta(minutes=1)) == 4  # analysed, nothing new to say
    assert kube.status_patches == []
    assert stored_status(kube, "team-a", "one") == first

    refreshed = NOW + timedelta(minutes=10)  # 10 intervals after the stored window's end
    cycle.run_cycle(memo, now=refreshed)
    assert len(kube.status_patches) == 4
    window = stored_status(kube, "team-a", "one")["window"]
    assert datetime.fromisoformat(window["end"].replace("Z", "+00:00")) == refreshed


def test_a_changed_diagnosis_is_written_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.unit.operator.test_cycle_windows import _analysis_with

    kube = listing_cluster()
    monkeypatch.setattr(cycle, "fetch_windows", FetchRecorder(kube))
    memo = memo_for(kube, interval_seconds=60.0)
    cycle.run_cycle(memo, now=NOW)
    kube.status_patches.clear()

    monkeypatch.setattr(cycle, "analyse", _analysis_with("IdleAllocation", "The GPU sat idle."))
    cycle.run_cycle(memo, now=NOW + timedelta(minutes=1))

    assert len(kube.status_patches) == 4
    stored = stored_status(kube, "team-b", "three")
    assert stored["diagnosis"]["primary"] == "IdleAllocation"


def test_merge_patch_follows_rfc_7386() -> None:
    target = {"a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2]}
    patch = {"a": None, "b": {"c": 4}, "e": [3], "f": {"g": 5}}
    assert cycle.merge_patched(target, patch) == {"b": {"c": 4, "d": 3}, "e": [3], "f": {"g": 5}}
    assert target == {"a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2]}, "the target is not modified"


def test_status_unchanged_ignores_only_the_window_times() -> None:
    old = {
        "window": {"start": "2026-03-04T11:00:00Z", "end": "2026-03-04T12:00:00Z", "samples": 60},
        "apply": {"state": "Skipped", "policy": "a"},
    }
    moved = {"window": {"start": "2026-03-04T11:01:00Z", "end": "2026-03-04T12:01:00Z", "samples": 60}}
    later = NOW + timedelta(minutes=1)
    fresh = timedelta(minutes=10)
    assert cycle.status_unchanged(old, moved, later, fresh)
    assert cycle.status_unchanged(old, {**moved, "apply": {"policy": "a"}}, later, fresh)
    assert not cycle.status_unchanged(old, {**moved, "apply": {"policy": "b"}}, later, fresh)
    more = {"window": {**moved["window"], "samples": 61}}
    assert not cycle.status_unchanged(old, more, later, fresh)
    assert not cycle.status_unchanged(old, moved, NOW + fresh, fresh), "an old window is refreshed"
    assert not cycle.status_unchanged({}, moved, later, fresh), "nothing stored yet"


class _Elector:
    def __init__(self, leader: bool) -> None:
        self.leader = leader

    def is_leader(self) -> bool:
        return self.leader


def test_a_standby_actuator_does_nothing_at_all() -> None:
    class Untouchable(FakeKube):
        def list_recommendations(self, namespaces: tuple[str, ...] = ()) -> list[dict[str, Any]]:
            raise AssertionError("a standby actuator must not even list recommendations")

    kube = Untouchable({}, {}, [])
    ctx = memo_for(kube, role="actuator")
    ctx.elector = _Elector(leader=False)  # type: ignore[assignment]
    assert cycle.run_cycle(ctx, now=NOW) == 0


def test_the_actuator_acts_on_published_statuses_and_never_analyses(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = listing_cluster()
    monkeypatch.setattr(cycle, "fetch_windows", FetchRecorder(kube))

    def no_analysis(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the actuator re-ran the analysis")

    monkeypatch.setattr(cycle, "analyse", no_analysis)
    stepped: list[str] = []
    monkeypatch.setattr(
        cycle.changes.Actuator, "step", lambda self, case, recent: stepped.append(case.ref.key)
    )
    ctx = memo_for(kube, role="actuator")
    ctx.elector = _Elector(leader=True)  # type: ignore[assignment]
    cycle.run_cycle(ctx, now=NOW)
    assert sorted(stepped) == sorted(f"{ns}/Deployment/{name}" for ns, name in kube.workloads)
    assert kube.status_patches == []  # the recommender's status is not written by an actuator


def test_a_change_started_in_a_cycle_counts_against_the_disruption_budget_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpu_rightsizer.model.crd import ChangePhase

    base = cluster(policy("a", "team-a"))
    kube = ListingKube(base)
    monkeypatch.setattr(cycle, "fetch_windows", FetchRecorder(kube))
    seen: list[tuple[str, int]] = []

    def step(self: Any, case: Any, recent: Any) -> ChangePhase:
        seen.append((case.ref.key, case.pods_in_disruption))
        return ChangePhase.APPLIED  # every step starts a change

    monkeypatch.setattr(cycle.changes.Actuator, "step", step)
    ctx = memo_for(kube, role="actuator", namespaces=("team-a",), all_namespaces=False)
    ctx.elector = _Elector(leader=True)  # type: ignore[assignment]
    cycle.run_cycle(ctx, now=NOW)
    assert [pods for _, pods in seen] == [0, 1]  # team-a/one's new change counts for team-a/two


def test_an_opted_out_workload_with_a_change_in_flight_is_settled_before_its_recommendation_goes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube = ListingKube(cluster(policy("a", "team-a"), annotations={"gpurightsizer.io/ignore": "true"}))
    monkeypatch.setattr(cycle, "fetch_windows", FetchRecorder(kube))
    kube.recommendations[("team-c", "solo")]["status"]["apply"] = {"phase": "Applied", "policy": "a"}
    stepped: list[str] = []
    monkeypatch.setattr(
        cycle.changes.Actuator, "step", lambda self, case, recent: stepped.append(case.ref.key)
    )
    ctx = memo_for(kube, role="all")
    ctx.elector = _Elector(leader=True)  # type: ignore[assignment]
    cycle.run_cycle(ctx, now=NOW)
    assert "team-c/Deployment/solo" in stepped and "team-c/Deployment/solo" not in kube.deleted
    kube.recommendations[("team-c", "solo")]["status"]["apply"] = {"phase": "Abandoned", "policy": "a"}
    cycle.run_cycle(ctx, now=NOW)
    assert "team-c/Deployment/solo" in kube.deleted
