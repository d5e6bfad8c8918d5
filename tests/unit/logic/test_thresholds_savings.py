"""Engine settings (documented, overridable) and savings arithmetic."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError
from tests.unit.logic.logic_builders import allocation, gpu, pod, stat, window

from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.savings import combined_share, estimate_savings
from gpu_rightsizer.logic.thresholds import EngineSettings, documented_settings, setting_names
from gpu_rightsizer.model.codes import DiagnosisCode
from gpu_rightsizer.model.observation import WorkloadWindow


def test_every_setting_is_documented_with_its_source() -> None:
    for _, name, field in documented_settings():
        assert field.description, name
        assert any(tag in field.description for tag in ("NV", "Lit", "Heur", "SPEC")), name


def test_overrides_accept_policy_camel_case_and_snake_case() -> None:
    settings = EngineSettings().with_overrides({"minSamples": 5, "window_seconds": 7200, "idleBusyP95": 0.1})
    assert (settings.min_samples, settings.window_seconds, settings.idle.idle_busy_p95) == (5, 7200, 0.1)


def test_a_rule_setting_nests_under_its_rule_by_flat_name_or_path() -> None:
    """The old flat names (policies, --set, keyword arguments) set the rule's nested field."""
    by_path = EngineSettings().with_overrides({"idle.idleBusyP95": 0.1, "inputPipeline.cpuSaturation": 0.8})
    by_flat = EngineSettings().with_overrides({"idleBusyP95": 0.1, "cpu_saturation": 0.8})
    assert by_path == by_flat == EngineSettings(idle_busy_p95=0.1, cpuSaturation=0.8)
    assert by_flat.idle.idle_busy_p95 == 0.1 and by_flat.input_pipeline.cpu_saturation == 0.8
    with pytest.raises(ValueError, match=r"unknown engine setting\(s\): idle.lowBusy"):
        EngineSettings().with_overrides({"idle.lowBusy": 0.1})  # a path names the rule that owns it
    with pytest.raises(ValidationError):
        EngineSettings(idle_busy_p95=0.1, idle={"idleBusyP95": 0.2})  # two values: neither is dropped
    assert set(setting_names()) >= {"idleBusyP95", "lowBusy", "crashLoopRestarts", "windowSeconds"}


def test_unknown_or_invalid_override_is_rejected_and_changes_nothing() -> None:
    base = EngineSettings()
    with pytest.raises(ValueError, match="unknown engine setting"):
        base.with_overrides({"idleBusy": 0.1})
    with pytest.raises(ValueError, match="invalid engine setting"):
        base.with_overrides({"idleBusyP95": 3.0})
    assert base == EngineSettings()


def test_combined_share_compounds_and_clamps() -> None:
    assert combined_share([]) == 0.0
    assert combined_share([0.5, 0.5]) == pytest.approx(0.75)
    assert combined_share([1.5]) == 1.0
    with pytest.raises(ValueError, match="finite"):
        combined_share([math.nan])


def test_savings_in_gpu_hours_per_day() -> None:
    savings = estimate_savings(4.0, [0.5])
    assert savings.gpu_hours_per_day == pytest.approx(48.0)
    assert savings.share_of_allocation == pytest.approx(0.5)
    assert estimate_savings(0.0, [1.0]).gpu_hours_per_day == 0.0
    with pytest.raises(ValueError, match="finite number"):
        estimate_savings(-1.0, [])


# --- savings of GPUs shared by time-slicing / MPS ----------------------------------------------------
def _idle_shared(pods_on_device: int, shared_by: int, sharing: str = "time-slicing") -> WorkloadWindow:
    pods = [
        pod(
            f"pod-{i}",
            gpus=[gpu("GPU-shared", shared_by=shared_by, gr_engine_active=stat(0.0), fb_used_mib=stat(2000))],
        )
        for i in range(pods_on_device)
    ]
    return window(pods, alloc=allocation(replicas=pods_on_device, sharing=sharing))


def test_time_sliced_pod_is_credited_only_its_share_of_the_gpu() -> None:
    """One idle pod of four on a time-sliced GPU frees a quarter of it, not a whole GPU."""
    analysis = analyze_window(_idle_shared(1, shared_by=4))
    assert analysis.primary is DiagnosisCode.IDLE_ALLOCATION
    assert analysis.savings.gpu_hours_per_day == 6.0


def test_pods_sharing_one_gpu_count_that_gpu_once() -> None:
    """Two pods of one workload on one device, even when the source did not count the sharers (was 48)."""
    assert analyze_window(_idle_shared(2, shared_by=1)).savings.gpu_hours_per_day == 24.0
    assert analyze_window(_idle_shared(2, shared_by=2)).savings.gpu_hours_per_day == 24.0


def test_shared_pod_without_visible_neighbours_gets_at_most_half_a_gpu() -> None:
    assert analyze_window(_idle_shared(1, shared_by=1)).savings.gpu_hours_per_day == 12.0
