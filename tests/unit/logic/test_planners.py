"""recommend's planners and the registry agree: a code may propose actions exactly when it has a planner,
and a planner's actions outside the registry's list for its code never reach the analysis."""

from __future__ import annotations

from tests.unit.logic.test_diagnose import cpu_bound, idle, io_bound, oversized

from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.recommend import PLANNERS
from gpu_rightsizer.logic.rules.registry import BY_CODE, RULES


def test_a_code_has_a_planner_exactly_when_the_registry_lets_it_propose_actions() -> None:
    assert set(PLANNERS) == {entry.code for entry in RULES if entry.actions}


def test_every_proposed_action_is_one_its_finding_may_propose() -> None:
    for window in (cpu_bound(), idle(), io_bound(), oversized()):
        analysis = analyze_window(window)
        allowed = set().union(*(BY_CODE[f.code].actions for f in analysis.findings))
        assert analysis.actions, window.pods[0].gpus[0].stats
        assert {a.type for a in analysis.actions} <= allowed  # one-GPU pods: no per-GPU gpuCount advice
