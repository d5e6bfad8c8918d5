"""One duration grammar (Go's units plus d and w, compound) for the CLI, the chart, the CRDs and the
operator, and one step rule for the CLI and the operator."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from gpu_rightsizer.adapters.prometheus import PrometheusConfig, PrometheusSource
from gpu_rightsizer.adapters.source import step_for
from gpu_rightsizer.config import parse_duration as cli_duration
from gpu_rightsizer.logic.policy import parse_duration as policy_duration
from gpu_rightsizer.logic.policy import policy_problems
from gpu_rightsizer.model.crd import DURATION_PATTERN, GPURightsizingPolicy
from gpu_rightsizer.model.durations import DurationError, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("1h30m", 5400), ("1.5h", 5400), ("250ms", 0.25), ("7d", 604800), ("1w", 604800),
     ("1d12h", 129600), ("2w3d", 1468800)],
)  # fmt: skip
def test_every_reader_gives_the_same_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)
    assert cli_duration(text) == pytest.approx(seconds)
    assert policy_duration(text).total_seconds() == pytest.approx(seconds)
    assert re.fullmatch(DURATION_PATTERN, text)


@pytest.mark.parametrize("text", ["", "1x", "d", "1d 2h", "-1h", "h1"])
def test_bad_durations_are_refused_naming_the_input(text: str) -> None:
    with pytest.raises(DurationError, match=re.escape(repr(text))):
        parse_duration(text)
    assert not re.fullmatch(DURATION_PATTERN, text)


def _policy(spec: dict[str, Any]) -> GPURightsizingPolicy:
    return GPURightsizingPolicy.model_validate(
        {
            "apiVersion": "gpurightsizer.io/v1alpha1",
            "kind": "GPURightsizingPolicy",
            "metadata": {"name": "p"},
            "spec": spec,
        }
    )


def test_a_window_in_days_is_a_policy_window() -> None:
    policy = _policy({"observation": {"window": "1d"}, "safety": {"cooldown": "1d12h"}})
    assert policy_problems(policy) == []


def test_bounds_cel_cannot_compute_on_days_are_the_operators_on_the_policy() -> None:
    policy = _policy(
        {"observation": {"window": "40d"}, "safety": {"verifyFor": "2d"}}
    )  # the API server admits it
    problems = policy_problems(policy)
    assert "spec.observation.window must be between 5m and 720h (got 40d)" in problems
    assert "spec.safety.verifyFor must be between 10s and 24h (got 2d)" in problems


def test_the_cli_steps_as_the_operator_does_on_the_same_window(monkeypatch: pytest.MonkeyPatch) -> None:
    source = PrometheusSource(PrometheusConfig(url="http://127.0.0.1:9"))
    queries: list[str] = []
    monkeypatch.setattr(source, "check", lambda at: None)
    monkeypatch.setattr(source, "gpu_namespaces", lambda at, window: [])
    monkeypatch.setattr(source, "instant", lambda what, query, at: queries.append(query) or [])
    monkeypatch.setattr(source, "range", lambda what, query, start, end, step: queries.append(query) or [])
    source.read(window_seconds=180.0, at=datetime(2026, 5, 1, tzinfo=UTC))
    assert step_for(180.0) == 3.0
    assert any("[180s:3s]" in query for query in queries)
    assert not any(":60s]" in query for query in queries)
