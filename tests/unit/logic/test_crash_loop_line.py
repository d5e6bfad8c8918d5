"""CrashLooping needs a crash loop: restarts repeating in the window (or an OOM kill). One restart is
not one, yet it still withholds every shrink (the `containerRestart` veto names no cause)."""

from __future__ import annotations

from tests.unit.logic.logic_builders import PROVEN
from tests.unit.logic.test_diagnose import healthy, idle, oversized

from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.vetoes import CAUSELESS_VETOES
from gpu_rightsizer.model.codes import ActionType, DiagnosisCode
from gpu_rightsizer.model.observation import WorkloadWindow
from gpu_rightsizer.model.result import Analysis

_SHRINKS = {ActionType.MIG_PROFILE, ActionType.GPU_SHARING, ActionType.RELEASE_IDLE, ActionType.REPLICAS}


def restarted(window: WorkloadWindow, restarts: int, *, oom_killed: bool = False) -> WorkloadWindow:
    pods = [p.model_copy(update={"restarts": restarts, "oom_killed": oom_killed}) for p in window.pods]
    return window.model_copy(update={"pods": pods})


def codes(analysis: Analysis) -> set[DiagnosisCode]:
    return {finding.code for finding in analysis.findings}


def automatic_shrinks(analysis: Analysis) -> list[str]:
    return [a.type.value for a in analysis.actions if a.automatic and a.type in _SHRINKS]


def test_one_restart_of_a_fed_workload_is_not_a_crash_loop_and_still_blocks_shrinks() -> None:
    analysis = analyze_window(restarted(healthy(), 1), PROVEN)
    assert analysis.primary is DiagnosisCode.HEALTHY
    assert DiagnosisCode.CRASH_LOOPING not in codes(analysis)
    assert [v.name for v in analysis.vetoes] == ["containerRestart"]


def test_one_restart_of_an_idle_allocation_keeps_its_diagnosis_and_releases_nothing() -> None:
    analysis = analyze_window(restarted(idle(), 1), PROVEN)
    assert analysis.primary is DiagnosisCode.IDLE_ALLOCATION
    assert DiagnosisCode.CRASH_LOOPING not in codes(analysis)
    assert "containerRestart" in {v.name for v in analysis.vetoes}
    assert not automatic_shrinks(analysis)  # the veto holds: the window mixes container lives


def test_one_restart_still_withholds_a_slice_it_would_otherwise_get() -> None:
    assert automatic_shrinks(analyze_window(oversized(), PROVEN))  # the slice the restart must block
    analysis = analyze_window(restarted(oversized(), 1), PROVEN)
    assert not [a for a in analysis.actions if a.type in _SHRINKS]  # dropped by the gate, not advice
    assert analysis.primary is DiagnosisCode.OVERSIZED_GPU  # what the window shows; the veto says why not
    assert [v.name for v in analysis.vetoes] == ["containerRestart"]


def test_repeated_restarts_or_an_oom_kill_are_a_crash_loop() -> None:
    for window in (restarted(healthy(), 2), restarted(idle(), 5), restarted(healthy(), 1, oom_killed=True)):
        analysis = analyze_window(window, PROVEN)
        assert analysis.primary is DiagnosisCode.CRASH_LOOPING, window.pods[0].restarts
        assert "crashLoop" in {v.name for v in analysis.vetoes}
        assert not automatic_shrinks(analysis)


def test_a_causeless_veto_never_becomes_a_suspected_cause() -> None:
    assert frozenset({"containerRestart"}) == CAUSELESS_VETOES
    analysis = analyze_window(restarted(healthy(), 1), PROVEN)
    assert not any(f.evidence.get("suspected") for f in analysis.findings)
