"""model.k8s: the RFC 3339 times and the one label-selector matcher both wings use."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from gpu_rightsizer.model.k8s import parse_time, selector_matches, stamp


def test_a_stamp_is_utc_whole_seconds_with_a_z_and_parses_back() -> None:
    moment = datetime(2026, 3, 4, 13, 0, 7, 900_000, tzinfo=timezone(timedelta(hours=1)))
    assert stamp(moment) == "2026-03-04T12:00:07Z"
    assert parse_time(stamp(moment)) == datetime(2026, 3, 4, 12, 0, 7, tzinfo=UTC)
    assert parse_time("2026-03-04T12:00:07") == datetime(2026, 3, 4, 12, 0, 7, tzinfo=UTC)
    assert parse_time("yesterday") is None and parse_time(None) is None


def test_selector_semantics_and_an_unknown_operator_selects_nothing() -> None:
    labels = {"app": "llm", "tier": "gpu"}
    assert selector_matches(None, labels) and selector_matches({}, labels)
    assert selector_matches({"matchLabels": {"app": "llm"}}, labels)
    assert not selector_matches({"matchLabels": {"app": "web"}}, labels)
    assert selector_matches(
        {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}, labels
    )
    assert not selector_matches(
        {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["cpu"]}]}, labels
    )
    assert selector_matches({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, labels)
    assert not selector_matches(
        {"matchExpressions": [{"key": "tier", "operator": "Gt", "values": ["1"]}]}, labels
    )
