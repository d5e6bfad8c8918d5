"""The hard scenario library and the simulator's realism knobs: structure only, never accuracy.

Accuracy is measured by bench/diagnosis_accuracy.py; here we check that the library is well formed and
that every knob really changes (or, at its neutral default, leaves unchanged) the series a reader gets.
"""

from __future__ import annotations

import statistics

import pytest

from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.codes import DiagnosisCode
from gpu_rightsizer.sim.library import hard_scenario_library, scenario_library
from gpu_rightsizer.sim.scenarios import (
    NO_SM_FIELDS,
    PROFILING_FIELDS,
    LabelStyle,
    PodContext,
    Scenario,
    SeriesSample,
    Shape,
    levels,
    pod_contexts,
    pod_series,
)

T0 = 1_767_225_600.0
MINUTES = 60


def _history(scenario: Scenario, minutes: int = MINUTES) -> list[SeriesSample]:
    ctx = pod_contexts(scenario, T0 - 3600, T0 + 60 * minutes)[0]
    return [s for i in range(minutes) for s in pod_series(scenario, ctx, T0 + 60 * i)]


def _values(samples: list[SeriesSample], metric: str) -> list[float]:
    return [value for name, _, value, _ in samples if name == metric]


def _first_ctx(scenario: Scenario) -> PodContext:
    return pod_contexts(scenario, T0 - 3600, T0)[0]


def test_hard_library_covers_every_code_three_times_with_unique_names_and_reasons() -> None:
    library = hard_scenario_library()
    counts: dict[DiagnosisCode, int] = {}
    for scenario in library:
        counts[scenario.expected] = counts.get(scenario.expected, 0) + 1
        assert scenario.why, f"{scenario.name} has no `why`"
        assert "\n" not in scenario.why
    assert set(counts) == set(DiagnosisCode)
    assert min(counts.values()) >= 3
    names = [s.name for s in library]
    assert len(names) == len(set(names))
    assert not set(names) & {s.name for s in scenario_library()}


def test_hard_library_workloads_never_share_a_node_unless_time_sliced() -> None:
    owners: dict[str, str] = {}
    for scenario in hard_scenario_library():
        for ctx in pod_contexts(scenario, T0 - 3600, T0):
            assert owners.setdefault(ctx.node, scenario.name) == scenario.name, ctx.node


def test_hard_library_is_deterministic() -> None:
    first, second = hard_scenario_library(), hard_scenario_library()
    assert first == second
    for a, b in zip(first[:12], second[:12], strict=True):
        ctx = _first_ctx(a)
        assert pod_series(a, ctx, T0 + 120) == pod_series(b, ctx, T0 + 120)


def test_expected_code_override_replaces_the_shapes_code() -> None:
    scenario = Scenario("decoy", Shape.INPUT_CPU_BOUND)
    assert scenario.expected is DiagnosisCode.INPUT_PIPELINE_CPU_BOUND
    assert scenario.with_(expected_code=DiagnosisCode.HEALTHY).expected is DiagnosisCode.HEALTHY


def test_neutral_knobs_leave_the_series_unchanged() -> None:
    base = Scenario("neutral", Shape.INPUT_CPU_BOUND, seed=5, cpu_limit=2.0)
    explicit = base.with_(
        noise_amplitude=0.0,
        noise_additive=0.0,
        burst_probability=0.0,
        gap_fraction=0.0,
        dropped_metrics=frozenset(),
        level_overrides={},
        level_scales={},
        traffic_amplitude=0.2,
        traffic_period_seconds=86400.0,
    )
    assert _history(base, 10) == _history(explicit, 10)


def test_dropping_sm_fields_removes_only_those_series() -> None:
    base = Scenario("full", Shape.HEALTHY, seed=7)
    dropped = _history(base.with_(dropped_metrics=NO_SM_FIELDS), 5)
    names = {name for name, *_ in dropped}
    assert not names & NO_SM_FIELDS
    assert mn.DCGM_GR_ENGINE_ACTIVE in names
    assert mn.DCGM_TENSOR_ACTIVE in names
    assert {name for name, *_ in _history(base, 5)} - names == NO_SM_FIELDS


def test_dropping_profiling_fields_leaves_gpu_util_as_the_only_activity_signal() -> None:
    names = {
        name for name, *_ in _history(Scenario("util", Shape.HEALTHY, dropped_metrics=PROFILING_FIELDS), 5)
    }
    assert not names & PROFILING_FIELDS
    assert mn.DCGM_GPU_UTIL in names
    assert mn.DCGM_FB_USED in names


def test_gaps_remove_gpu_samples_but_keep_container_samples() -> None:
    base = Scenario("gappy", Shape.HEALTHY, seed=9)
    full, gappy = _history(base), _history(base.with_(gap_fraction=0.5))
    assert len(_values(gappy, mn.DCGM_GR_ENGINE_ACTIVE)) < len(_values(full, mn.DCGM_GR_ENGINE_ACTIVE))
    assert _values(gappy, mn.DCGM_GR_ENGINE_ACTIVE)  # not everything is gone
    assert len(_values(gappy, mn.CADVISOR_CPU_USAGE)) == len(_values(full, mn.CADVISOR_CPU_USAGE))


def test_noise_widens_the_spread_of_busy() -> None:
    base = Scenario("steady", Shape.HEALTHY, seed=11)
    quiet = _values(_history(base), mn.DCGM_SM_ACTIVE)
    noisy = _values(_history(base.with_(noise_amplitude=0.3)), mn.DCGM_SM_ACTIVE)
    assert statistics.pstdev(noisy) > 2 * statistics.pstdev(quiet)
    assert all(0.0 <= v <= 1.0 for v in noisy)


def test_bursts_scale_activity_only_in_burst_minutes() -> None:
    base = Scenario("calm", Shape.HEALTHY, seed=13)
    dips = base.with_(burst_probability=0.3, burst_scale=0.3)
    ctx = _first_ctx(base)
    ratios = [
        levels(dips, ctx, T0 + 60 * i).busy / levels(base, ctx, T0 + 60 * i).busy for i in range(MINUTES)
    ]
    assert any(r == pytest.approx(0.3) for r in ratios)
    assert any(r == pytest.approx(1.0) for r in ratios)
    assert all(r == pytest.approx(0.3) or r == pytest.approx(1.0) for r in ratios)


def test_level_overrides_and_scales_reach_the_series() -> None:
    base = Scenario("placed", Shape.MEMORY_BANDWIDTH_BOUND, seed=15)
    placed = base.with_(level_overrides={"dram": 0.63}, level_scales={"tensor": 0.5})
    ctx = _first_ctx(base)
    assert levels(placed, ctx, T0).dram == pytest.approx(0.63)
    assert levels(placed, ctx, T0).tensor == pytest.approx(levels(base, ctx, T0).tensor * 0.5)
    dram = _values(_history(placed, 10), mn.DCGM_DRAM_ACTIVE)
    assert 0.55 < statistics.mean(dram) < 0.7


def test_unknown_level_field_or_bad_knob_is_rejected_with_its_name() -> None:
    with pytest.raises(ValueError, match="bogus"):
        Scenario("bad", Shape.HEALTHY, level_overrides={"bogus": 1.0})
    with pytest.raises(ValueError, match="gap_fraction"):
        Scenario("bad", Shape.HEALTHY, gap_fraction=1.5)
    with pytest.raises(ValueError, match="burst_seconds"):
        Scenario("bad", Shape.HEALTHY, burst_seconds=0.0)


def test_scenario_label_style_wins_over_the_callers() -> None:
    scenario = Scenario(
        "styled", Shape.HEALTHY, label_style=LabelStyle(exported_pod_labels=True, hostname_label="hostname")
    )
    ctx = _first_ctx(scenario)
    samples = pod_series(scenario, ctx, T0, LabelStyle())
    busy_labels = next(labels for name, labels, _, _ in samples if name == mn.DCGM_GR_ENGINE_ACTIVE)
    assert busy_labels["exported_pod"] == ctx.pod
    assert "hostname" in busy_labels
    assert "Hostname" not in busy_labels


def test_short_traffic_period_puts_a_trough_and_a_peak_in_one_hour() -> None:
    base = Scenario("svc", Shape.HEALTHY, workload_type="inference", traffic_qps=22.0, replicas=2)
    cycled = base.with_(traffic_amplitude=0.6, traffic_period_seconds=3600.0)
    ctx = _first_ctx(base)
    flat = [levels(base, ctx, T0 + 60 * i).busy for i in range(MINUTES)]
    wave = [levels(cycled, ctx, T0 + 60 * i).busy for i in range(MINUTES)]
    assert max(flat) - min(flat) < 0.05
    assert max(wave) - min(wave) > 0.5


def test_time_sliced_pods_share_noise_and_bursts() -> None:
    scenario = Scenario(
        "sliced", Shape.HEALTHY, replicas=2, pods_per_gpu=2, noise_amplitude=0.3, burst_probability=0.3
    )
    first, second = pod_contexts(scenario, T0 - 3600, T0)
    for i in range(10):
        assert levels(scenario, first, T0 + 60 * i).busy == levels(scenario, second, T0 + 60 * i).busy
