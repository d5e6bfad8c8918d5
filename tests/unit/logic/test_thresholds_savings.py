"""Engine settings (documented, overridable) and savings arithmetic."""

from __future__ import annotations

import math

import pytest

from gpu_rightsizer.logic.savings import combined_share, estimate_savings
from gpu_rightsizer.logic.thresholds import EngineSettings


def test_every_setting_is_documented_with_its_source() -> None:
    for name, field in EngineSettings.model_fields.items():
        assert field.description, name
        assert any(tag in field.description for tag in ("NV", "Lit", "Heur", "SPEC")), name


def test_overrides_accept_policy_camel_case_and_snake_case() -> None:
    settings = EngineSettings().with_overrides({"minSamples": 5, "window_seconds": 7200, "idleBusyP95": 0.1})
    assert (settings.min_samples, settings.window_seconds, settings.idle_busy_p95) == (5, 7200, 0.1)


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
