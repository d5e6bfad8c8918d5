"""Policy matching: selectors, priority, overlaps, effective settings, maintenance windows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_rightsizer.logic.policy import (
    choose_policy,
    count_governed,
    effective_settings,
    find_overlaps,
    in_maintenance_window,
    in_window,
    parse_duration,
    policy_problems,
    ranked,
    selector_matches,
    selectors_can_overlap,
    settings_for_workload,
)
from gpu_rightsizer.model.codes import ActionType, PolicyMode, SharingStrategy
from gpu_rightsizer.model.crd import GPURightsizingPolicy, LabelSelector, MaintenanceWindow


def make_policy(name: str, priority: int = 0, **spec: Any) -> GPURightsizingPolicy:
    return GPURightsizingPolicy.model_validate(
        {"metadata": {"name": name}, "spec": {"priority": priority, **spec}}
    )


def selector(
    match_labels: dict[str, str] | None = None, *expressions: tuple[str, str, list[str]]
) -> LabelSelector:
    return LabelSelector.model_validate(
        {
            "matchLabels": match_labels or {},
            "matchExpressions": [
                {"key": key, "operator": operator, "values": values} for key, operator, values in expressions
            ],
        }
    )


# --------------------------------------------------------------------------------------------------
# Selectors
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sel", "labels", "expected"),
    [
        (None, {}, True),
        (selector(), {"any": "thing"}, True),
        (selector({"team": "ml"}), {"team": "ml", "x": "y"}, True),
        (selector({"team": "ml"}), {"team": "web"}, False),
        (selector({"team": "ml"}), {}, False),
        (selector(None, ("tier", "In", ["batch", "train"])), {"tier": "train"}, True),
        (selector(None, ("tier", "In", ["batch"])), {}, False),
        (selector(None, ("tier", "NotIn", ["batch"])), {}, True),
        (selector(None, ("tier", "NotIn", ["batch"])), {"tier": "batch"}, False),
        (selector(None, ("gpu", "Exists", [])), {"gpu": ""}, True),
        (selector(None, ("gpu", "Exists", [])), {}, False),
        (selector(None, ("gpu", "DoesNotExist", [])), {}, True),
        (selector(None, ("gpu", "DoesNotExist", [])), {"gpu": "a"}, False),
        (selector({"team": "ml"}, ("tier", "In", ["batch"])), {"team": "ml", "tier": "web"}, False),
    ],
)
def test_selector_matches_with_kubernetes_semantics(
    sel: LabelSelector | None, labels: dict[str, str], expected: bool
) -> None:
    assert selector_matches(sel, labels) is expected


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        (None, selector({"team": "ml"}), True),
        (selector({"team": "ml"}), selector({"team": "web"}), False),
        (selector({"team": "ml"}), selector({"tier": "batch"}), True),
        (selector({"team": "ml"}), selector(None, ("team", "NotIn", ["ml"])), False),
        (selector({"team": "ml"}), selector(None, ("team", "DoesNotExist", [])), False),
        (selector(None, ("team", "In", ["a", "b"])), selector(None, ("team", "In", ["b", "c"])), True),
        (selector(None, ("team", "In", ["a"])), selector(None, ("team", "In", ["c"])), False),
        (selector(None, ("team", "Exists", [])), selector(None, ("team", "NotIn", ["a"])), True),
        (selector(None, ("team", "Exists", [])), selector(None, ("team", "DoesNotExist", [])), False),
        (selector(None, ("team", "NotIn", ["a"])), selector(None, ("team", "DoesNotExist", [])), True),
    ],
)
def test_selectors_can_overlap(
    first: LabelSelector | None, second: LabelSelector | None, expected: bool
) -> None:
    assert selectors_can_overlap(first, second) is expected
    assert selectors_can_overlap(second, first) is expected


_KEYS = st.sampled_from(["a", "b"])
_VALUES = st.sampled_from(["x", "y", "z"])
_REQUIREMENTS: st.SearchStrategy[tuple[str, str, list[str]]] = st.one_of(
    st.tuples(
        _KEYS, st.sampled_from(["In", "NotIn"]), st.lists(_VALUES, min_size=1, max_size=2, unique=True)
    ),
    st.tuples(_KEYS, st.sampled_from(["Exists", "DoesNotExist"]), st.just([])),
)
_SELECTORS = st.builds(
    lambda labels, expressions: selector(labels, *expressions),
    st.dictionaries(_KEYS, _VALUES, max_size=2),
    st.lists(_REQUIREMENTS, max_size=3),
)
#: Every label map over the small alphabet: enough to decide overlap by brute force.
_ALL_LABEL_MAPS = [
    {k: v for k, v in (("a", a), ("b", b)) if v is not None}
    for a in (None, "x", "y", "z", "w")
    for b in (None, "x", "y", "z", "w")
]


@settings(max_examples=300, deadline=None)
@given(_SELECTORS, _SELECTORS)
def test_overlap_agrees_with_brute_force(first: LabelSelector, second: LabelSelector) -> None:
    """`selectors_can_overlap` is exact: it says yes iff some label map matches both."""
    witnessed = any(selector_matches(first, m) and selector_matches(second, m) for m in _ALL_LABEL_MAPS)
    assert selectors_can_overlap(first, second) is witnessed


# --------------------------------------------------------------------------------------------------
# Choosing a policy and reporting overlaps
# --------------------------------------------------------------------------------------------------

ML_NAMESPACE = {"team": "ml"}


def _policies() -> list[GPURightsizingPolicy]:
    return [
        make_policy("catch-all", priority=0),
        make_policy("ml-team", priority=10, namespaceSelector={"matchLabels": {"team": "ml"}}),
        make_policy(
            "ml-batch",
            priority=10,
            namespaceSelector={"matchLabels": {"team": "ml"}},
            workloadSelector={"matchLabels": {"tier": "batch"}},
            mode="Apply",
            actions=["cpu"],
        ),
        make_policy("web", priority=50, namespaceSelector={"matchLabels": {"team": "web"}}),
    ]


def test_highest_priority_wins_and_ties_go_to_the_first_name() -> None:
    choice = choose_policy(_policies(), ML_NAMESPACE, {"tier": "batch"})
    assert choice is not None
    assert choice.policy.name == "ml-batch"  # 10 == 10, "ml-batch" < "ml-team"
    assert choice.outranked == ("ml-team", "catch-all")


def test_choice_does_not_depend_on_listing_order() -> None:
    policies = _policies()
    forward = choose_policy(policies, ML_NAMESPACE, {"tier": "batch"})
    backward = choose_policy(list(reversed(policies)), ML_NAMESPACE, {"tier": "batch"})
    assert forward == backward


def test_unselected_workload_falls_back_and_no_policy_means_none() -> None:
    choice = choose_policy(_policies(), {"team": "data"}, {})
    assert choice is not None
    assert choice.policy.name == "catch-all"
    assert choose_policy(_policies()[1:], {"team": "data"}, {}) is None
    assert choose_policy([], {}, {}) is None


def test_ranked_orders_by_priority_then_name() -> None:
    assert [p.name for p in ranked(_policies())] == ["web", "ml-batch", "ml-team", "catch-all"]


def test_find_overlaps_is_symmetric_and_static() -> None:
    overlaps = find_overlaps(_policies())
    assert overlaps == {
        "catch-all": ["ml-batch", "ml-team", "web"],
        "ml-team": ["catch-all", "ml-batch"],
        "ml-batch": ["catch-all", "ml-team"],
        "web": ["catch-all"],
    }
    for name, others in overlaps.items():
        for other in others:
            assert name in overlaps[other]


def test_count_governed_counts_winners_only() -> None:
    workloads = [(ML_NAMESPACE, {"tier": "batch"}), (ML_NAMESPACE, {}), ({"team": "web"}, {}), ({}, {})]
    assert count_governed(_policies(), workloads) == {"catch-all": 1, "ml-team": 1, "ml-batch": 1, "web": 1}


# --------------------------------------------------------------------------------------------------
# Effective settings
# --------------------------------------------------------------------------------------------------


def test_settings_without_policy_are_recommend_defaults() -> None:
    settings_ = effective_settings(None)
    assert settings_.policy is None
    assert settings_.mode is PolicyMode.RECOMMEND
    assert settings_.recommends
    assert not settings_.may_apply(ActionType.CPU)
    assert settings_.window is None  # the operator's --window decides
    assert settings_.cooldown == timedelta(hours=6)
    assert settings_.threshold_overrides == {}


def test_settings_take_the_winning_policy_whole() -> None:
    settings_ = settings_for_workload(_policies(), ML_NAMESPACE, {"tier": "batch"})
    assert settings_.policy == "ml-batch"
    assert settings_.mode is PolicyMode.APPLY
    assert settings_.may_apply(ActionType.CPU)
    assert not settings_.may_apply(ActionType.MEMORY)


def test_ignore_annotation_switches_the_workload_off() -> None:
    settings_ = settings_for_workload(
        _policies(), ML_NAMESPACE, {"tier": "batch"}, {"gpurightsizer.io/ignore": "True"}
    )
    assert settings_.ignored
    assert settings_.mode is PolicyMode.OFF
    assert not settings_.recommends
    assert not settings_.may_apply(ActionType.CPU)
    not_ignored = settings_for_workload(_policies(), ML_NAMESPACE, {}, {"gpurightsizer.io/ignore": "false"})
    assert not not_ignored.ignored


def test_effective_settings_parse_every_field() -> None:
    policy = make_policy(
        "full",
        mode="Apply",
        dryRun=True,
        actions=["migProfile", "replicas"],
        observation={"window": "24h", "minSamples": 90, "thresholds": {"idleBusyP95": 0.02}},
        safety={
            "cooldown": "90m",
            "verifyFor": "1h30m",
            "minReplicas": 2,
            "maxChangesPerHour": {"cluster": 4, "perNamespace": 2},
            "sharingStrategy": "mig-single",
            "allowedMigProfiles": ["1g.10gb"],
            "rollbackOnRegression": False,
        },
    )
    settings_ = effective_settings(policy)
    assert settings_.dry_run
    assert settings_.actions == frozenset({ActionType.MIG_PROFILE, ActionType.REPLICAS})
    assert settings_.window == timedelta(hours=24)
    assert settings_.min_samples == 90
    assert settings_.threshold_overrides == {"idleBusyP95": 0.02}
    assert settings_.cooldown == settings_.verify_for == timedelta(minutes=90)
    assert (settings_.max_changes_per_hour_cluster, settings_.max_changes_per_hour_namespace) == (4, 2)
    assert settings_.min_replicas == 2
    assert settings_.sharing_strategy is SharingStrategy.MIG_SINGLE
    assert settings_.allowed_mig_profiles == ("1g.10gb",)
    assert not settings_.rollback_on_regression


@pytest.mark.parametrize(
    ("text", "expected"),
    [("30m", timedelta(minutes=30)), ("1h30m", timedelta(minutes=90)), ("2.5s", timedelta(seconds=2.5))],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["1x", "", "abc", "5"])
def test_parse_duration_rejects_bad_input_with_its_text(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


# --------------------------------------------------------------------------------------------------
# Maintenance windows
# --------------------------------------------------------------------------------------------------


def window(start: str, end: str, days: list[str] | None = None, timezone: str = "UTC") -> MaintenanceWindow:
    return MaintenanceWindow.model_validate(
        {"start": start, "end": end, "days": days or [], "timezone": timezone}
    )


SATURDAY_2330 = datetime(2026, 5, 2, 23, 30, tzinfo=UTC)  # 2026-05-02 is a Saturday


@pytest.mark.parametrize(
    ("win", "now", "inside"),
    [
        (window("22:00", "02:00", ["Sat"]), SATURDAY_2330, True),
        (window("22:00", "02:00", ["Sat"]), SATURDAY_2330 + timedelta(hours=2), True),  # Sunday 01:30
        (window("22:00", "02:00", ["Sat"]), SATURDAY_2330 + timedelta(hours=3), False),  # Sunday 02:30
        (window("22:00", "02:00", ["Sun"]), SATURDAY_2330, False),
        (window("01:00", "03:00"), SATURDAY_2330, False),
        (window("23:00", "23:59"), SATURDAY_2330, True),
        (window("23:30", "23:59"), SATURDAY_2330, True),  # start is inclusive
        (window("22:00", "23:30"), SATURDAY_2330, False),  # end is exclusive
        # 23:30 UTC is 01:30 on Sunday in Berlin (CEST, +02:00)
        (window("01:00", "02:00", ["Sun"], "Europe/Berlin"), SATURDAY_2330, True),
        (window("01:00", "02:00", ["Sat"], "Europe/Berlin"), SATURDAY_2330, False),
    ],
)
def test_in_window(win: MaintenanceWindow, now: datetime, inside: bool) -> None:
    assert in_window(win, now) is inside
    assert in_window(win, now.astimezone(ZoneInfo("America/New_York"))) is inside


def test_no_windows_means_any_time_and_several_mean_any_of_them() -> None:
    assert in_maintenance_window([], SATURDAY_2330)
    assert in_maintenance_window([window("01:00", "02:00"), window("23:00", "00:00")], SATURDAY_2330)
    assert not in_maintenance_window([window("01:00", "02:00")], SATURDAY_2330)


def test_naive_time_and_unknown_zone_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        in_window(window("01:00", "02:00"), datetime(2026, 5, 2, 1, 30))
    bad_zone = window("01:00", "02:00", timezone="Mars/Olympus_Mons")
    with pytest.raises(ValueError, match="Mars/Olympus_Mons"):
        in_window(bad_zone, SATURDAY_2330)
    policy = make_policy("p", safety={"maintenanceWindows": [bad_zone.model_dump(by_alias=True)]})
    assert policy_problems(policy) == [
        "spec.safety.maintenanceWindows[0].timezone 'Mars/Olympus_Mons' is not a known IANA time zone"
    ]
    assert policy_problems(make_policy("fine")) == []
