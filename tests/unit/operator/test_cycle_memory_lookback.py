"""The cycle sizes slices on the GPU-memory look-back its stored status carries (review H7): a peak seen
in an earlier window still holds a later slice, and the look-back's start survives the cycles."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from tests.unit.fake_source import FakeSource
from tests.unit.logic.logic_builders import gpu, pod, stat, window
from tests.unit.operator.test_cycle_windows import NOW, FakeKube, cluster, memo_for, policy

from gpu_rightsizer.logic.engine import merge_lookback
from gpu_rightsizer.logic.figures import summarise
from gpu_rightsizer.model.k8s import merge_patched
from gpu_rightsizer.model.observation import WorkloadRef, WorkloadWindow
from gpu_rightsizer.model.result import MemoryLookback
from gpu_rightsizer.recommender import cycle

WORKLOAD = ("team-a", "one")
KEY = "team-a/Deployment/one"


class StoringKube(FakeKube):
    """The fake cluster, keeping each status patch as the API server would (a JSON merge patch)."""

    def patch_recommendation_status(self, ref: WorkloadRef, status: Mapping[str, Any]) -> None:
        super().patch_recommendation_status(ref, status)
        stored = self.recommendations[(ref.namespace, ref.name)]
        stored["status"] = merge_patched(stored.get("status") or {}, status)


def oversized_using(fb_mib: float) -> Any:
    """A narrow, lightly used H100 whose GPU memory peaks at `fb_mib` in the window read."""

    def shape(ref: WorkloadRef, start: datetime, end: datetime) -> WorkloadWindow:
        used = gpu(
            gr_engine_active=stat(0.2, 0.1),
            sm_active=stat(0.055, 0.02),
            dram_active=stat(0.05, 0.02),
            fb_used_mib=stat(fb_mib - 500, 500),
        )
        built = window([pod(gpus=[used])])
        return built.model_copy(
            update={
                "workload": ref,
                "start": start,
                "end": end,
                "step_seconds": (end - start).total_seconds() / 60,
            }
        )

    return shape


def mig_cluster() -> StoringKube:
    """The fake cluster under a MIG policy whose one-hour windows may shrink (a day of memory is kept)."""
    chosen = policy("p", "team-a", {"window": "1h", "thresholds": {"shrinkMinWindowServiceSeconds": 0}})
    chosen["spec"]["safety"] = {"sharingStrategy": "mig-mixed"}
    plain = cluster(chosen)
    return StoringKube(plain.workloads, plain.namespaces, plain.policies)


def one_workload() -> list[WorkloadRef]:
    return [WorkloadRef(namespace="team-a", kind="Deployment", name="one")]


def slice_gib(action: Mapping[str, Any]) -> int:
    """The memory of a MIG profile action's target, e.g. 40 for `3g.40gb`."""
    found = re.search(r"(\d+)gb", str(action["to"]))
    assert found is not None, action
    return int(found.group(1))


def run_hourly(kube: StoringKube, first: float, then: float, hours: int) -> None:
    """One cycle at NOW whose window peaks at `first` MiB, then one an hour for `hours` at `then` MiB."""
    cycle.run_cycle(memo_for(kube, source=FakeSource(one_workload, shape=oversized_using(first))), now=NOW)
    for hour in range(1, hours + 1):
        source = FakeSource(one_workload, shape=oversized_using(then))
        cycle.run_cycle(memo_for(kube, source=source), now=NOW + timedelta(hours=hour))


def test_a_peak_seen_in_an_earlier_window_still_sizes_the_slice() -> None:
    """Cycle 1 sees 30 GiB; the next 25 hourly windows peak at 8 GiB. The slice must still hold 30 GiB
    (× the headroom), and the look-back counts from cycle 1's window, so the day it needs is there."""
    kube = mig_cluster()
    run_hourly(kube, 30 * 1024, 8 * 1024, 25)

    status = kube.recommendations[WORKLOAD]["status"]
    assert status["memoryLookback"]["maxGib"] == 30.0
    since = datetime.fromisoformat(status["memoryLookback"]["since"].replace("Z", "+00:00"))
    assert since == NOW - timedelta(hours=1)  # cycle 1's window start, carried through status
    slices = [a for a in status["actions"] if a["type"] == "migProfile"]
    assert slices, status["actions"]
    assert all(slice_gib(a) >= 36 for a in slices)  # 1.2 × 30 GiB, not 1.2 × 8 GiB
    assert any(a["automatic"] for a in slices)  # 26 h of memory peaks: the look-back gate is met


def test_unobserved_time_restarts_the_lookback_but_keeps_its_peak() -> None:
    """A day passes with no cycle (the operator was down): the peak stays, the day is counted again."""
    kube = mig_cluster()
    cycle.run_cycle(
        memo_for(kube, source=FakeSource(one_workload, shape=oversized_using(30 * 1024))), now=NOW
    )
    later = NOW + timedelta(hours=25)
    cycle.run_cycle(
        memo_for(kube, source=FakeSource(one_workload, shape=oversized_using(8 * 1024))), now=later
    )

    status = kube.recommendations[WORKLOAD]["status"]
    assert status["memoryLookback"]["maxGib"] == 30.0
    since = datetime.fromisoformat(status["memoryLookback"]["since"].replace("Z", "+00:00"))
    assert since == later - timedelta(hours=1)  # this window's start: the 24 h before were not seen
    slices = [a for a in status["actions"] if a["type"] == "migProfile"]
    assert slices and all(slice_gib(a) >= 36 for a in slices)
    assert not any(a["automatic"] for a in slices)
    assert "GPU memory was tracked for 1.0 h" in slices[0]["reason"]


def test_without_a_stored_lookback_a_day_of_memory_is_still_asked_for() -> None:
    """The same 8 GiB window with no earlier status: the slice stays advice (one hour of peaks)."""
    kube = mig_cluster()
    cycle.run_cycle(memo_for(kube, source=FakeSource(one_workload, shape=oversized_using(8 * 1024))), now=NOW)
    status = kube.recommendations[WORKLOAD]["status"]
    slices = [a for a in status["actions"] if a["type"] == "migProfile"]
    assert slices and not any(a["automatic"] for a in slices)
    assert "GPU memory was tracked for 1.0 h" in slices[0]["reason"]


def test_a_stored_lookback_that_starts_after_the_window_is_not_trusted() -> None:
    """A status whose look-back starts in the future (a clock jump, a forged status) lends no history."""
    built = oversized_using(8 * 1024)(one_workload()[0], NOW - timedelta(hours=1), NOW)
    forged = MemoryLookback(max_gib=1.0, since=NOW + timedelta(days=1))
    merged = merge_lookback(forged, summarise(built))
    assert merged is not None and merged.since == NOW - timedelta(hours=1)
    assert merged.max_gib == 8.0
