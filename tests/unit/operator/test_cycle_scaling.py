"""The analysis cycle's API cost per workload: workloads and HPAs are listed once per cycle (per watched
namespace when the operator is namespace-scoped), and a status that says nothing new is not rewritten
until its window grows old."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import pytest
from tests.unit.operator.test_cycle_windows import NOW, FakeKube, cluster, memo_for, policy

from gpu_rightsizer.actuator import loop
from gpu_rightsizer.actuator.step import Actuator
from gpu_rightsizer.adapters.owner_cache import OwnerCache
from gpu_rightsizer.model.k8s import merge_patched
from gpu_rightsizer.model.observation import WorkloadRef, WorkloadWindow
from gpu_rightsizer.recommender import cycle, writes


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
        stored["status"] = merge_patched(stored.get("status") or {}, status)


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

    assert cycle.run_cycle(memo_for(kube), now=NOW) == 4

    assert sorted(kube.reads) == ["team-a/one", "team-a/two", "team-b/three", "team-c/solo"]
    assert sorted(kube.hpa_reads) == sorted(key for key, _ in kube.status_patches)


def watched(kube: ListingKube, *, skip: tuple[str, str] | None = None) -> OwnerCache:
    """An owner cache fed the fake cluster's Deployments as the watch's initial listing delivers them
    (`skip`: one the watch has not delivered yet)."""
    cache = OwnerCache()
    for key, obj in kube.workloads.items():
        if key != skip:
            cache.event(None, obj, "Deployment")
    kube.owner_cache = cache  # type: ignore[attr-defined]
    return cache


def test_with_the_watched_copies_a_cycle_lists_no_workloads() -> None:
    kube = listing_cluster()
    watched(kube)

    assert cycle.run_cycle(memo_for(kube), now=NOW) == 4

    assert kube.workload_lists == [] and kube.reads == []
    assert kube.hpa_lists == [()]
    assert len(kube.status_patches) == 4


def test_an_opt_out_the_watch_delivered_is_honoured_without_a_listing() -> None:
    kube = ListingKube(cluster(annotations={"gpurightsizer.io/ignore": "true"}))
    watched(kube)

    assert cycle.run_cycle(memo_for(kube), now=NOW) == 3

    assert kube.workload_lists == []
    assert kube.deleted == ["team-c/Deployment/solo"]
    assert "team-c/Deployment/solo" not in {key for key, _ in kube.status_patches}


def test_a_workload_the_watch_missed_costs_one_listing_for_the_cycle() -> None:
    kube = listing_cluster()
    watched(kube, skip=("team-b", "three"))

    assert cycle.run_cycle(memo_for(kube), now=NOW) == 4

    assert kube.workload_lists == [("Deployment", ())]  # once, whatever else misses after it
    assert kube.reads == []
    assert len(kube.status_patches) == 4


def test_a_refused_listing_after_a_miss_reads_only_the_missed_workload() -> None:
    kube = listing_cluster()
    watched(kube, skip=("team-b", "three"))
    kube.failing_lists = True

    assert cycle.run_cycle(memo_for(kube), now=NOW) == 4

    assert kube.reads == ["team-b/three"]


def test_an_unchanged_status_is_written_again_only_when_its_window_grows_old(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube = listing_cluster()
    memo = memo_for(kube, interval_seconds=60.0)
    cycle.run_cycle(memo, now=NOW)
    assert len(kube.status_patches) == 4
    first = dict(stored_status(kube, "team-a", "one"))

    kube.status_patches.clear()
    assert cycle.run_cycle(memo, now=NOW + timedelta(minutes=1)) == 4  # analysed, nothing new to say
    assert kube.status_patches == []
    assert stored_status(kube, "team-a", "one") == first

    kube.status_patches.clear()
    cycle.run_cycle(memo, now=NOW + timedelta(minutes=20))  # beyond half the default maxStaleness
    assert kube.status_patches == [], "no Apply policy: the refresh follows the hour's window"

    refreshed = NOW + timedelta(minutes=46)  # beyond three quarters of the hour's window
    cycle.run_cycle(memo, now=refreshed)
    assert len(kube.status_patches) == 4
    window = stored_status(kube, "team-a", "one")["window"]
    assert datetime.fromisoformat(window["end"].replace("Z", "+00:00")) == refreshed


def test_a_changed_diagnosis_is_written_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.unit.operator.test_cycle_windows import _analysis_with

    kube = listing_cluster()
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
    assert merge_patched(target, patch) == {"b": {"c": 4, "d": 3}, "e": [3], "f": {"g": 5}}
    assert target == {"a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2]}, "the target is not modified"


def test_status_unchanged_ignores_the_window_times_and_small_moves() -> None:
    old = {
        "window": {"start": "2026-03-04T11:00:00Z", "end": "2026-03-04T12:00:00Z", "samples": 60},
        "apply": {"state": "Skipped", "policy": "a"},
    }
    moved = {"window": {"start": "2026-03-04T11:01:00Z", "end": "2026-03-04T12:01:00Z", "samples": 60}}
    later = NOW + timedelta(minutes=1)
    fresh = timedelta(minutes=10)
    assert writes.status_unchanged(old, moved, later, fresh)
    assert writes.status_unchanged(old, {**moved, "apply": {"policy": "a"}}, later, fresh)
    assert not writes.status_unchanged(old, {**moved, "apply": {"policy": "b"}}, later, fresh)
    a_few_more = {"window": {**moved["window"], "samples": 61}}  # within the figures' tolerance
    assert writes.status_unchanged(old, a_few_more, later, fresh)
    more = {"window": {**moved["window"], "samples": 40}}
    assert not writes.status_unchanged(old, more, later, fresh)
    assert not writes.status_unchanged(old, moved, NOW + fresh, fresh), "an old window is refreshed"
    assert not writes.status_unchanged({}, moved, later, fresh), "nothing stored yet"


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


class NoRecords:
    """An actuator's change records before any change: none."""

    def list_changes(self, namespaces: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        return []

    def get_change(self, ref: WorkloadRef) -> None:
        return None


def actuator_for(kube: Any) -> Actuator:
    return Actuator(kube, NoRecords(), lambda: True, lambda ref, start, end: None)  # type: ignore[arg-type]


def test_the_actuator_acts_on_published_statuses_and_never_analyses(monkeypatch: pytest.MonkeyPatch) -> None:
    """The actuator's own loop steps every workload with a recommendation; the analysis cycle in an
    actuator-only process does nothing at all."""
    kube = listing_cluster()

    def no_analysis(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the actuator re-ran the analysis")

    monkeypatch.setattr(cycle, "analyse", no_analysis)
    stepped: list[str] = []
    monkeypatch.setattr(Actuator, "step", lambda self, case, recent: stepped.append(case.ref.key))
    ctx = memo_for(kube, role="actuator")
    ctx.elector = _Elector(leader=True)  # type: ignore[assignment]
    assert cycle.run_cycle(ctx, now=NOW) == 0
    loop.run_once(kube, NoRecords(), actuator_for(kube), NOW)  # type: ignore[arg-type]
    assert sorted(stepped) == sorted(f"{ns}/Deployment/{name}" for ns, name in kube.workloads)
    assert kube.status_patches == []  # the recommender's status is not written by an actuator


def test_a_change_started_in_a_cycle_counts_against_the_disruption_budget_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpu_rightsizer.model.crd import ChangePhase

    base = cluster(policy("a", "team-a"))
    kube = ListingKube(base)
    seen: list[tuple[str, int]] = []

    def step(self: Any, case: Any, recent: Any) -> ChangePhase:
        seen.append((case.ref.key, case.pods_in_disruption))
        return ChangePhase.APPLIED  # every step starts a change

    monkeypatch.setattr(Actuator, "step", step)
    kube.recommendations = {k: v for k, v in kube.recommendations.items() if k[0] == "team-a"}
    loop.run_once(kube, NoRecords(), actuator_for(kube), NOW)  # type: ignore[arg-type]
    assert [pods for _, pods in seen] == [0, 1]  # team-a/one's new change counts for team-a/two


def test_an_opted_out_workload_with_a_change_in_flight_is_settled_before_its_recommendation_goes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube = ListingKube(cluster(policy("a", "team-a"), annotations={"gpurightsizer.io/ignore": "true"}))
    kube.recommendations[("team-c", "solo")]["status"]["apply"] = {"phase": "Applied", "policy": "a"}
    ctx = memo_for(kube, role="all")
    ctx.elector = _Elector(leader=True)  # type: ignore[assignment]
    cycle.run_cycle(ctx, now=NOW)
    assert "team-c/Deployment/solo" not in kube.deleted
    kube.recommendations[("team-c", "solo")]["status"]["apply"] = {"phase": "Abandoned", "policy": "a"}
    cycle.run_cycle(ctx, now=NOW)
    assert "team-c/Deployment/solo" in kube.deleted


# --- writes only on material change -------------------------------------------------------------


def moving_analysis(figures: dict[str, Any]) -> Any:
    """Stands in for `cycle.analyse`: an OversizedGPU analysis with a MIG action whose figures (busy
    share, confidence, savings, samples) and target come from `figures`, read at each call."""
    from gpu_rightsizer.model.codes import ActionType, DiagnosisCode, Severity
    from gpu_rightsizer.model.result import Action, ActionTarget, Analysis, Finding, Savings

    def fake(window: WorkloadWindow, *args: Any) -> Analysis:
        busy, confidence = figures["busy"], figures["confidence"]
        profile = figures.get("profile", "nvidia.com/mig-1g.18gb")
        return Analysis(
            workload=window.workload,
            primary=DiagnosisCode(figures.get("primary", "OversizedGPU")),
            confidence=confidence,
            findings=[
                Finding(
                    code=DiagnosisCode(figures.get("primary", "OversizedGPU")),
                    severity=Severity.WARNING,
                    confidence=confidence,
                    message=f"GPU busy p95 is {busy:.0%}, memory used {busy * 140:.1f} GiB of 141 GiB.",
                    evidence={"gpuBusyP95": busy, "memoryUsedGiB": busy * 140, "throttled": 0.0},
                )
            ],
            actions=[
                Action(
                    type=ActionType.MIG_PROFILE,
                    from_value="nvidia.com/gpu: 1",
                    to_value=f"{profile}: 1",
                    reason=f"the work needs about {busy:.0%} of a GPU",
                    resource=profile,
                    automatic=True,
                    target=ActionTarget(
                        requests={profile: "1"}, limits={profile: "1"},
                        remove_resources=["nvidia.com/gpu"], gpu_capacity_change=True,
                    ),
                )
            ],
            savings=Savings(gpu_hours_per_day=24 * (1 - busy) * 0.8, share_of_allocation=(1 - busy) * 0.8),
            gpu_busy_p95=busy,
            samples=figures["samples"],
            summary=f"The GPU is {busy:.0%} busy at p95: a MIG slice would do.",
        )  # fmt: skip

    return fake


def _first_cycle(monkeypatch: pytest.MonkeyPatch) -> tuple[ListingKube, Any, dict[str, Any]]:
    """One cycle of four workloads whose analysis reads `figures`; the kube, the memo and the figures."""
    kube = listing_cluster()
    figures: dict[str, Any] = {"busy": 0.212, "confidence": 0.834, "samples": 60}
    monkeypatch.setattr(cycle, "analyse", moving_analysis(figures))
    memo = memo_for(kube, interval_seconds=15.0)
    cycle.run_cycle(memo, now=NOW)
    return kube, memo, figures


def test_a_window_whose_figures_move_a_little_is_not_rewritten(monkeypatch: pytest.MonkeyPatch) -> None:
    kube, memo, figures = _first_cycle(monkeypatch)
    assert len(kube.status_patches) == 4
    first = stored_status(kube, "team-a", "one")

    for minute, (busy, confidence, samples) in enumerate(
        [(0.218, 0.829, 59), (0.209, 0.851, 61), (0.221, 0.84, 60)], start=1
    ):  # the window slides: every figure moves, none by more than the tolerance
        kube.status_patches.clear()
        figures.update(busy=busy, confidence=confidence, samples=samples)
        assert cycle.run_cycle(memo, now=NOW + timedelta(seconds=15 * minute)) == 4
        assert kube.status_patches == [], f"cycle {minute} rewrote a status that says nothing new"
    assert stored_status(kube, "team-a", "one") == first
    assert memo.last_written == 0


def _second_cycle(monkeypatch: pytest.MonkeyPatch, **change: Any) -> tuple[ListingKube, dict[str, Any]]:
    """Two cycles 15 s apart, the second with `change` to the figures; the kube and the figures."""
    kube, memo, figures = _first_cycle(monkeypatch)
    kube.status_patches.clear()
    figures.update(change)
    cycle.run_cycle(memo, now=NOW + timedelta(seconds=15))
    return kube, figures


def test_a_changed_action_target_is_written(monkeypatch: pytest.MonkeyPatch) -> None:
    kube, _ = _second_cycle(monkeypatch, profile="nvidia.com/mig-2g.35gb")

    assert len(kube.status_patches) == 4
    action = stored_status(kube, "team-a", "one")["actions"][0]
    assert action["target"]["requests"] == {"nvidia.com/mig-2g.35gb": "1"}


def test_a_changed_diagnosis_with_the_same_figures_is_written(monkeypatch: pytest.MonkeyPatch) -> None:
    kube, _ = _second_cycle(monkeypatch, primary="LowOccupancy")

    assert len(kube.status_patches) == 4
    assert stored_status(kube, "team-b", "three")["diagnosis"]["primary"] == "LowOccupancy"


def test_a_confidence_beyond_the_tolerance_is_written(monkeypatch: pytest.MonkeyPatch) -> None:
    kube, _ = _second_cycle(monkeypatch, confidence=0.62)

    assert len(kube.status_patches) == 4
    assert stored_status(kube, "team-a", "one")["diagnosis"]["confidence"] == 0.62


def test_figures_drifting_slowly_are_written_once_they_pass_the_tolerance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube = listing_cluster()
    figures: dict[str, Any] = {"busy": 0.30, "confidence": 0.80, "samples": 60}
    monkeypatch.setattr(cycle, "analyse", moving_analysis(figures))
    memo = memo_for(kube, interval_seconds=15.0)
    cycle.run_cycle(memo, now=NOW)
    writes = []
    for step in range(1, 8):  # 2 % a cycle: each step is within the tolerance, the sum is not
        kube.status_patches.clear()
        figures["confidence"] = 0.80 * (1 - 0.02 * step)
        cycle.run_cycle(memo, now=NOW + timedelta(seconds=15 * step))
        writes.append(len(kube.status_patches) // 4)
    assert writes == [0, 0, 1, 0, 0, 1, 0], "compared with the stored figures, not the last analysis"


def test_a_status_saying_nothing_new_is_refreshed_within_half_the_max_staleness(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The actuator's freshness gate reads the stored window's end: a skipped write must never make it
    stale. With a 5 min interval, 10 intervals would be 50 min, far beyond maxStaleness (15 min).
    Workloads no Apply policy governs are refreshed as the window allows, less often."""
    apply_policy = policy("a", "team-a")
    apply_policy["spec"].update(mode="Apply", actions=["cpu"])
    kube = ListingKube(cluster(apply_policy))
    monkeypatch.setattr(cycle, "analyse", moving_analysis({"busy": 0.2, "confidence": 0.8, "samples": 60}))
    memo = memo_for(kube, interval_seconds=300.0)
    max_staleness = timedelta(minutes=15)  # the default spec.safety.maxStaleness
    cycle.run_cycle(memo, now=NOW)
    written: Counter[str] = Counter()
    for minutes in range(5, 65, 5):  # every cycle of an hour, 5 min apart
        kube.status_patches.clear()
        moment = NOW + timedelta(minutes=minutes)
        cycle.run_cycle(memo, now=moment)
        written.update(key.split("/")[0] for key, _ in kube.status_patches)
        for namespace, name in kube.workloads:
            end = stored_status(kube, namespace, name)["window"]["end"]
            age = moment - datetime.fromisoformat(end.replace("Z", "+00:00"))
            if namespace != "team-a":  # nothing acts on it: the window's overlap bounds it
                assert age < writes.window_overlap_limit(3600.0, 300.0), f"{namespace}/{name} is {age} old"
                continue
            assert age < max_staleness / 2, f"{namespace}/{name}: the stored window is {age} old"
            # an actuator in another process, up to one interval later, still finds it fresh
            assert age + timedelta(minutes=5) <= max_staleness
        acted = [key for key, _ in kube.status_patches if key.startswith("team-a/")]
        if minutes % 10 == 5:
            assert acted == [], f"at +{minutes} min the stored window was young"
        else:
            assert len(acted) == 2, f"at +{minutes} min the stored window was old"
    assert written["team-a"] == 2 * 6
    assert 2 <= written["team-b"] + written["team-c"] < 2 * 6, written


def test_refresh_periods_follow_the_policy_max_staleness_and_spread_over_cycles() -> None:
    fifteen = timedelta(minutes=15)
    draws = [f"ns/Deployment/wl-{i} 2026-03-04T12:00:{i % 60:02d}Z" for i in range(200)]
    periods = {writes.refresh_period(15.0, fifteen, key) for key in draws}
    assert max(periods) <= fifteen / 2, "never beyond half maxStaleness, whatever is drawn"
    assert min(periods) >= fifteen / 2 * (1 - writes.REFRESH_SPREAD)
    assert len(periods) > 100, "the refreshes are spread"
    # the chart's 5 min interval: every second cycle at most, never every cycle
    assert {writes.refresh_period(300.0, fifteen, key) for key in draws} == {timedelta(minutes=7.5)}
    # maxStaleness below two intervals: every cycle, as the gate needs
    assert writes.refresh_period(300.0, timedelta(minutes=2), "x") == timedelta(minutes=1)
    assert writes.refresh_period(15.0, timedelta(hours=24), "x") <= writes.REFRESH_AT_MOST


def test_write_reasons() -> None:
    old = {"window": {"start": "2026-03-04T11:00:00Z", "end": "2026-03-04T12:00:00Z", "samples": 60}}
    slid = {"window": {"start": "2026-03-04T11:01:00Z", "end": "2026-03-04T12:01:00Z", "samples": 60}}
    fresh = timedelta(minutes=5)
    assert writes.write_reason({}, slid, NOW, fresh) == "new"
    assert writes.write_reason(old, slid, NOW + timedelta(minutes=1), fresh) is None
    assert writes.write_reason(old, slid, NOW + fresh, fresh) == "refresh"
    assert writes.write_reason(old, {**slid, "workloadGeneration": 2}, NOW, fresh) == "changed"


def test_skipped_writes_never_make_the_actuators_freshness_gate_find_a_status_stale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Recommender and actuator in one process under an Apply policy with maxStaleness 20m, a cycle
    every 5 min for an hour, nothing new to say: the actuator's gates, on the published status, never
    find it stale (with a refresh after 10 intervals, 50 min, they did from +25 min on)."""
    from gpu_rightsizer.actuator.gates import Verdict
    from gpu_rightsizer.model.codes import ApplyState

    class ActingKube(ListingKube):
        def list_pdbs(self, namespace: str) -> list[dict[str, Any]]:
            return []

        def owned_pods(self, workload: dict[str, Any]) -> list[dict[str, Any]]:
            return []  # no pods to resize in place: the template path

    apply_policy = policy("a", "team-a")
    apply_policy["spec"].update(mode="Apply", actions=["cpu"], safety={"maxStaleness": "20m"})
    kube = ActingKube(cluster(apply_policy))
    for workload in kube.workloads.values():
        workload["metadata"]["generation"] = 3
    monkeypatch.setattr(cycle, "analyse", moving_analysis({"busy": 0.2, "confidence": 0.8, "samples": 60}))
    verdicts: list[tuple[str, str]] = []
    gates = Actuator._gates

    def recording(self: Any, case: Any, recent: Any, **kwargs: Any) -> Verdict:
        verdicts.append((case.ref.key, gates(self, case, recent, **kwargs).reason))
        return Verdict(False, ApplyState.SKIPPED, "recorded by the test")

    monkeypatch.setattr(Actuator, "_gates", recording)
    monkeypatch.setattr(Actuator, "_set_state", lambda *args: None)
    ctx = memo_for(kube, role="all", interval_seconds=300.0)
    ctx.elector = _Elector(leader=True)  # type: ignore[assignment]
    acted = []
    for minutes in range(0, 65, 5):
        kube.status_patches.clear()
        cycle.run_cycle(ctx, now=NOW + timedelta(minutes=minutes))
        acted.append(sum(1 for key, _ in kube.status_patches if key.startswith("team-a/")))
        loop.run_once(kube, NoRecords(), actuator_for(kube), NOW + timedelta(minutes=minutes))  # type: ignore[arg-type]
    governed = [reason for key, reason in verdicts if key.startswith("team-a/")]
    assert len(governed) == 13 * 2, "the actuator stepped team-a's two workloads every cycle"
    assert set(governed) == {"all safety gates passed"}, governed
    assert acted == [2] + [0, 2] * 6, "written at first, then every second cycle (10 min of the 20)"


def test_a_skipped_write_never_lets_the_stored_window_fall_out_of_the_next_one() -> None:
    """The memory look-back continues only from a stored window the next window overlaps
    (`continued_lookback`): the cycle that refreshes, an interval and a cycle's run (up to another
    interval) after the period ends, still reads a window that starts before the stored one ended,
    for short and long windows, intervals and maxStaleness, and whether or not an Apply policy acts."""
    from gpu_rightsizer.logic.engine import continued_lookback
    from gpu_rightsizer.model.result import MemoryLookback

    since = NOW - timedelta(hours=2)
    for window, interval in ((300.0, 15.0), (300.0, 60.0), (900.0, 300.0), (3600.0, 15.0), (3600.0, 300.0)):
        for acted_on in (True, False):
            for key in (f"team-a/Deployment/w{i}" for i in range(50)):
                period = writes.refresh_period(
                    interval, timedelta(minutes=15), key, window, acted_on=acted_on
                )
                assert period <= timedelta(seconds=window) * writes.REFRESH_WINDOW_SHARE
                gap = timedelta(seconds=2 * interval)  # the interval and a cycle as long as it
                at = NOW
                while at - NOW < period:  # the cycles that skip the write
                    at += gap
                stored = MemoryLookback(max_gib=10.0, since=since)
                lookback = continued_lookback(stored, NOW, at - timedelta(seconds=window))
                assert lookback is not None and lookback.since == since, (window, interval, key)
    assert writes.refresh_period(15.0, timedelta(minutes=15), "x", 24 * 3600.0) == writes.refresh_period(
        15.0, timedelta(minutes=15), "x"
    ), "a long window changes nothing"


def test_without_an_apply_policy_the_refresh_follows_the_window_not_max_staleness() -> None:
    """Nothing acts on the stored window's age of a workload no Apply policy governs: its refresh
    waits up to REFRESH_AT_MOST and what the window allows, not half maxStaleness."""
    fifteen = timedelta(minutes=15)
    draws = [f"ns/Deployment/wl-{i} 2026-03-04T12:00:{i % 60:02d}Z" for i in range(200)]
    hour = 3600.0
    acted = {writes.refresh_period(15.0, fifteen, key, hour) for key in draws}
    unacted = {writes.refresh_period(15.0, fifteen, key, hour, acted_on=False) for key in draws}
    assert max(acted) <= fifteen / 2
    assert timedelta(minutes=44) < max(unacted) <= timedelta(minutes=45), (
        "three quarters of the hour's window"
    )
    assert min(unacted) >= timedelta(minutes=45) * (1 - writes.REFRESH_SPREAD)
    day = {writes.refresh_period(15.0, fifteen, key, 24 * hour, acted_on=False) for key in draws}
    assert writes.REFRESH_AT_MOST * 0.98 < max(day) <= writes.REFRESH_AT_MOST
    # a short window: three quarters of it, never closer than three intervals to its end, never below half
    assert writes.window_overlap_limit(300.0, 15.0) == timedelta(seconds=225)
    assert writes.window_overlap_limit(300.0, 60.0) == timedelta(seconds=150)
    assert writes.window_overlap_limit(900.0, 300.0) == timedelta(seconds=450)
