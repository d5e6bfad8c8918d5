"""Upgrade from the versions that kept the actuator's state in the recommendation's `status.apply`:
its history, rollback count and regressions are carried into the new change record once, before
any gate runs, so nothing is lost and a rolled-back change is not tried again; a change that was in
flight is recorded as Abandoned, never resumed from there."""

from __future__ import annotations

from datetime import timedelta

from tests.unit.operator.test_changes import T0, Cluster, Driver

from gpu_rightsizer.actuator.legacy import NOT_RESUMED, converted_apply
from gpu_rightsizer.actuator.plan import CHANGE_ANNOTATION
from gpu_rightsizer.actuator.record import ChangeRecord

EARLIER = {
    "changeId": "c-old", "at": "2026-03-01T10:00:00Z", "finishedAt": "2026-03-01T10:20:00Z",
    "change": "containers[main].resources.limits[cpu] 1->4", "outcome": "RolledBack",
    "reason": "pods never started", "before": {"gpuBusy": 0.3}, "after": {},
}  # fmt: skip


def legacy_apply(**extra: object) -> dict[str, object]:
    """A `status.apply` as the last version before change records wrote it (no `change` pointer)."""
    return {
        "state": "RolledBack", "phase": "RolledBack", "reason": "change c-old rolled back", "policy": "apply",
        "changeId": "c-old", "appliedAt": "2026-03-01T10:20:00Z", "rollbacks": 1,
        "regressed": [{"changeId": "c-old", "workloadGeneration": 1, "at": "2026-03-01T10:20:00Z"}],
        "history": [EARLIER, {"changeId": "broken", "outcome": "NotAPhase"}], **extra,
    }  # fmt: skip


def planned_change_id() -> str:
    """The id the published change gets (ids are derived from the change itself)."""
    cluster = Cluster()
    cluster.publish()
    Driver(cluster).step(T0)
    return str(cluster.apply()["changeId"])


def test_history_rollbacks_and_regressions_are_carried_over_and_hold_the_change_back() -> None:
    cluster = Cluster()
    cluster.publish()
    same = planned_change_id()
    cluster.recommendation["status"]["apply"] = legacy_apply(
        regressed=[{"changeId": same, "workloadGeneration": 1, "at": "2026-03-01T10:20:00Z"}]
    )
    Driver(cluster).step(T0)
    record = cluster.apply()
    assert record["history"] == [EARLIER]  # the unreadable entry is dropped, the readable one kept
    assert record["rollbacks"] == 1 and record["regressed"][0]["changeId"] == same
    # the regression remembered before the upgrade still holds the same change back
    assert cluster.cpu() == "1" and "not retried" in record["reason"]
    assert "workload" not in cluster.writes


def test_a_change_in_flight_at_the_upgrade_is_recorded_abandoned_and_never_resumed() -> None:
    cluster = Cluster()
    cluster.publish()
    ours = ChangeRecord(
        change_id="c-flight", at=T0, target={"containers[main].resources.limits[cpu]": "8"},
        previous={"containers[main].resources.limits[cpu]": "1"}, actions=(), baseline={},
    )  # fmt: skip
    patch = f"metadata:\n  annotations:\n    {CHANGE_ANNOTATION}: '{ours.to_annotation()}'\n"
    cluster.workload["metadata"]["annotations"][CHANGE_ANNOTATION] = ours.to_annotation()  # it had landed
    cluster.human_sets_cpu("8")
    cluster.roll_out()
    cluster.publish()
    cluster.recommendation["status"]["apply"] = {
        "state": "Applied", "phase": "Applied", "changeId": "c-flight", "patch": patch,
        "appliedAt": "2026-03-04T11:00:00Z", "verifyAfter": "2026-03-04T11:10:00Z", "history": [EARLIER],
    }  # fmt: skip
    Driver(cluster).step(T0)
    history = cluster.apply()["history"]
    assert [entry["changeId"] for entry in history] == ["c-old", "c-flight"]
    assert history[-1]["outcome"] == "Abandoned" and history[-1]["reason"] == NOT_RESUMED
    assert "limits[cpu] 1->8" in history[-1]["change"]
    # the recorded intent is neither taken over nor undone, and its cooldown holds a new change back
    assert cluster.cpu() == "8" and "workload" not in cluster.writes
    assert cluster.apply().get("changeId") != "c-flight" or cluster.apply().get("phase") is None


def test_the_conversion_happens_once() -> None:
    cluster = Cluster()
    cluster.publish()
    cluster.recommendation["status"]["apply"] = legacy_apply()
    driver = Driver(cluster)
    driver.step(T0)
    assert cluster.recommendation["status"]["apply"]["change"] == "deployment-trainer"
    assert converted_apply(cluster.recommendation, T0) == {}  # the mirror names the record now
    first = list(cluster.apply()["history"])
    driver.step(T0 + timedelta(minutes=1))
    assert cluster.apply()["history"] == first


def test_nothing_is_carried_from_an_apply_state_with_nothing_to_keep() -> None:
    assert converted_apply({"status": {}}, T0) == {}
    assert converted_apply({"status": {"apply": {"state": "Blocked", "reason": "PDB"}}}, T0) == {}
    assert converted_apply({"status": {"apply": {"rollbacks": "many", "history": "x"}}}, T0) == {}
