"""Which GPURightsizingPolicy governs a workload, and what it lets the operator do there.

Pure functions over the models in `model/crd.py` and plain label maps, so the operator, the
`analyze` command and the tests share one answer. The rules (SPEC §3):

- a policy selects a workload when its `namespaceSelector` matches the namespace's labels and its
  `workloadSelector` matches the workload's labels; an absent or empty selector matches everything;
- among the policies that select a workload, the highest `priority` wins; equal priorities are
  decided by name (alphabetically first wins), so the choice never depends on listing order;
- policies are never merged: the winner's settings apply whole, and overlaps are reported;
- a workload annotated `gpurightsizer.io/ignore: "true"` is left alone whatever the policies say.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gpu_rightsizer.model.codes import ActionType, PolicyMode, SharingStrategy
from gpu_rightsizer.model.crd import (
    IGNORE_ANNOTATION,
    GPURightsizingPolicy,
    GPURightsizingPolicySpec,
    InconclusiveAction,
    LabelSelector,
    LabelSelectorRequirement,
    MaintenanceWindow,
    OnDisableAction,
    duration_bound_problems,
)
from gpu_rightsizer.model.durations import parse_duration as duration_in_seconds
from gpu_rightsizer.model.k8s import requirement_holds

_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def parse_duration(text: str) -> timedelta:
    """A policy duration ('30m', '1h30m', '1.5h', '7d', '1d12h') as a timedelta; ValueError names the input."""
    return timedelta(seconds=duration_in_seconds(text))


# --------------------------------------------------------------------------------------------------
# Label selectors
# --------------------------------------------------------------------------------------------------


def requirement_matches(requirement: LabelSelectorRequirement, labels: Mapping[str, str]) -> bool:
    """One `matchExpressions` entry against a label map (`model.k8s.requirement_holds`)."""
    return requirement_holds(requirement.key, requirement.operator, requirement.values, labels)


def selector_matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """True when every `matchLabels` pair and every expression holds; None or empty matches everything."""
    if selector is None:
        return True
    if any(labels.get(key) != value for key, value in selector.match_labels.items()):
        return False
    return all(requirement_matches(requirement, labels) for requirement in selector.match_expressions)


@dataclass
class _KeyConstraint:
    """Everything a set of selectors demands of one label key."""

    must_exist: bool = False
    must_not_exist: bool = False
    allowed: set[str] | None = None  # None: any value
    forbidden: set[str] = field(default_factory=set)

    def restrict_to(self, values: Iterable[str]) -> None:
        self.must_exist = True
        self.allowed = set(values) if self.allowed is None else self.allowed & set(values)

    def satisfiable(self) -> bool:
        if self.must_not_exist:
            return not self.must_exist
        # Label values are an open set: only an explicit allow-list can be exhausted.
        return self.allowed is None or bool(self.allowed - self.forbidden)


def selectors_can_overlap(*selectors: LabelSelector | None) -> bool:
    """True when some label map satisfies all `selectors` at once (decided exactly, per key)."""
    constraints: dict[str, _KeyConstraint] = {}
    for selector in selectors:
        if selector is None:
            continue
        for key, value in selector.match_labels.items():
            constraints.setdefault(key, _KeyConstraint()).restrict_to([value])
        for requirement in selector.match_expressions:
            constraint = constraints.setdefault(requirement.key, _KeyConstraint())
            if requirement.operator == "In":
                constraint.restrict_to(requirement.values)
            elif requirement.operator == "NotIn":
                constraint.forbidden.update(requirement.values)
            elif requirement.operator == "Exists":
                constraint.must_exist = True
            else:
                constraint.must_not_exist = True
    return all(constraint.satisfiable() for constraint in constraints.values())


# --------------------------------------------------------------------------------------------------
# Choosing a policy
# --------------------------------------------------------------------------------------------------


def policy_selects(
    policy: GPURightsizingPolicy, namespace_labels: Mapping[str, str], workload_labels: Mapping[str, str]
) -> bool:
    """True when both of the policy's selectors match."""
    return selector_matches(policy.spec.namespace_selector, namespace_labels) and selector_matches(
        policy.spec.workload_selector, workload_labels
    )


def ranked(policies: Iterable[GPURightsizingPolicy]) -> list[GPURightsizingPolicy]:
    """Policies in decision order: highest priority first, then by name."""
    return sorted(policies, key=lambda policy: (-policy.spec.priority, policy.name))


@dataclass(frozen=True)
class PolicyChoice:
    """The policy that governs a workload, and the ones that also select it but lost."""

    policy: GPURightsizingPolicy
    outranked: tuple[str, ...] = ()


def choose_policy(
    policies: Iterable[GPURightsizingPolicy],
    namespace_labels: Mapping[str, str],
    workload_labels: Mapping[str, str],
) -> PolicyChoice | None:
    """The winning policy for a workload (priority, then name), or None when no policy selects it."""
    matching = [p for p in ranked(policies) if policy_selects(p, namespace_labels, workload_labels)]
    if not matching:
        return None
    return PolicyChoice(policy=matching[0], outranked=tuple(p.name for p in matching[1:]))


def policies_can_overlap(first: GPURightsizingPolicy, second: GPURightsizingPolicy) -> bool:
    """True when some namespace and workload could be selected by both policies."""
    return selectors_can_overlap(
        first.spec.namespace_selector, second.spec.namespace_selector
    ) and selectors_can_overlap(first.spec.workload_selector, second.spec.workload_selector)


def find_overlaps(policies: Sequence[GPURightsizingPolicy]) -> dict[str, list[str]]:
    """Policy name -> sorted names of the other policies that can select the same workloads.

    This is what `status.overlaps` shows: a static answer from the selectors, so it does not flicker
    as workloads come and go. Every policy has an entry, empty when it overlaps with none.
    """
    overlaps: dict[str, list[str]] = {policy.name: [] for policy in policies}
    for index, first in enumerate(policies):
        for second in policies[index + 1 :]:
            if first.name != second.name and policies_can_overlap(first, second):
                overlaps[first.name].append(second.name)
                overlaps[second.name].append(first.name)
    return {name: sorted(set(others)) for name, others in overlaps.items()}


def count_governed(
    policies: Sequence[GPURightsizingPolicy],
    workloads: Iterable[tuple[Mapping[str, str], Mapping[str, str]]],
) -> dict[str, int]:
    """Policy name -> workloads it wins for, from (namespace labels, workload labels) pairs."""
    counts = {policy.name: 0 for policy in policies}
    for namespace_labels, workload_labels in workloads:
        choice = choose_policy(policies, namespace_labels, workload_labels)
        if choice is not None:
            counts[choice.policy.name] += 1
    return counts


# --------------------------------------------------------------------------------------------------
# Effective settings
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EffectiveSettings:
    """What the operator may do with one workload, with every duration parsed."""

    policy: str | None
    mode: PolicyMode
    dry_run: bool
    actions: frozenset[ActionType]
    window: timedelta | None  # None: the operator's --window
    min_samples: int
    threshold_overrides: Mapping[str, float]
    cooldown: timedelta
    verify_for: timedelta
    max_changes_per_hour_cluster: int
    max_changes_per_hour_namespace: int
    min_replicas: int
    rollback_on_regression: bool
    sharing_strategy: SharingStrategy
    allowed_mig_profiles: tuple[str, ...]
    maintenance_windows: tuple[MaintenanceWindow, ...]
    ignored: bool = False
    max_staleness: timedelta = timedelta(minutes=15)
    allow_single_replica: bool = False
    max_pods_in_disruption: int = 10
    max_rollbacks: int = 2
    roll_back_inconclusive: bool = False
    on_disable: OnDisableAction = OnDisableAction.FINISH
    allow_recreate: bool = False

    @property
    def recommends(self) -> bool:
        """True unless the workload is switched off (mode Off or the ignore annotation)."""
        return self.mode != PolicyMode.OFF and not self.ignored

    @property
    def may_change(self) -> bool:
        """True when an Apply policy governs the workload (dry-run included)."""
        return self.recommends and self.mode == PolicyMode.APPLY

    def may_apply(self, action: ActionType) -> bool:
        """True when an Apply policy allows this action (dry-run included: the patch is still computed)."""
        return self.recommends and self.mode == PolicyMode.APPLY and action in self.actions


def readable_policies(raw: Iterable[Mapping[str, Any]]) -> tuple[list[GPURightsizingPolicy], list[str]]:
    """The policies that validate, and one message per unreadable one: an unreadable policy governs
    nothing (its workloads are neither recommended under it nor changed), it is never guessed."""
    policies, problems = [], []
    for item in raw:
        try:
            policies.append(GPURightsizingPolicy.model_validate(item))
        except ValueError as error:
            problems.append(
                f"policy {(item.get('metadata') or {}).get('name')} is unreadable and ignored: {error}"
            )
    return policies, problems


def effective_settings(policy: GPURightsizingPolicy | None, *, ignored: bool = False) -> EffectiveSettings:
    """Settings from one policy (no merging); without a policy, the defaults in Recommend mode."""
    spec = policy.spec if policy is not None else GPURightsizingPolicySpec()
    safety = spec.safety
    thresholds = spec.observation.thresholds
    return EffectiveSettings(
        policy=policy.name if policy is not None else None,
        mode=PolicyMode.OFF if ignored else spec.mode,
        dry_run=spec.dry_run,
        actions=frozenset(spec.actions),
        window=None if spec.observation.window is None else parse_duration(spec.observation.window),
        min_samples=spec.observation.min_samples,
        threshold_overrides=thresholds.overrides() if thresholds is not None else {},
        cooldown=parse_duration(safety.cooldown),
        verify_for=parse_duration(safety.verify_for),
        max_changes_per_hour_cluster=safety.max_changes_per_hour.cluster,
        max_changes_per_hour_namespace=safety.max_changes_per_hour.per_namespace,
        min_replicas=safety.min_replicas,
        rollback_on_regression=safety.rollback_on_regression,
        sharing_strategy=safety.sharing_strategy,
        allowed_mig_profiles=tuple(safety.allowed_mig_profiles),
        maintenance_windows=tuple(safety.maintenance_windows),
        ignored=ignored,
        max_staleness=parse_duration(safety.max_staleness),
        allow_single_replica=safety.allow_single_replica,
        max_pods_in_disruption=safety.max_pods_in_disruption,
        max_rollbacks=safety.max_rollbacks,
        roll_back_inconclusive=safety.on_inconclusive == InconclusiveAction.ROLL_BACK,
        on_disable=safety.on_disable,
        allow_recreate=safety.allow_recreate,
    )


def settings_for_workload(
    policies: Iterable[GPURightsizingPolicy],
    namespace_labels: Mapping[str, str],
    workload_labels: Mapping[str, str],
    workload_annotations: Mapping[str, str] | None = None,
) -> EffectiveSettings:
    """The effective settings of one workload: the winning policy's, or the defaults."""
    ignored = str((workload_annotations or {}).get(IGNORE_ANNOTATION, "")).strip().lower() == "true"
    choice = choose_policy(policies, namespace_labels, workload_labels)
    return effective_settings(choice.policy if choice is not None else None, ignored=ignored)


# --------------------------------------------------------------------------------------------------
# Maintenance windows
# --------------------------------------------------------------------------------------------------


def _zone(window: MaintenanceWindow) -> ZoneInfo:
    try:
        return ZoneInfo(window.timezone)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise ValueError(
            f"spec.safety.maintenanceWindows[].timezone {window.timezone!r} is not a known IANA time zone"
        ) from error


def _minutes(clock: str) -> int:
    hours, minutes = clock.split(":")
    return int(hours) * 60 + int(minutes)


def in_window(window: MaintenanceWindow, now: datetime) -> bool:
    """True when `now` (timezone-aware) is inside; a window crossing midnight belongs to its start day."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("maintenance windows need a timezone-aware time, got a naive datetime")
    local = now.astimezone(_zone(window))
    minute = local.hour * 60 + local.minute
    start, end = _minutes(window.start), _minutes(window.end)
    days: set[str] = set(window.days) or set(_WEEKDAYS)
    today = _WEEKDAYS[local.weekday()]
    yesterday = _WEEKDAYS[(local.weekday() - 1) % 7]
    if start < end:
        return today in days and start <= minute < end
    return (today in days and minute >= start) or (yesterday in days and minute < end)


def in_maintenance_window(windows: Sequence[MaintenanceWindow], now: datetime) -> bool:
    """True when changes may be made now: no windows means any time, else inside at least one."""
    return not windows or any(in_window(window, now) for window in windows)


def policy_problems(policy: GPURightsizingPolicy) -> list[str]:
    """What the API server cannot check but the operator must: unknown time zones, and the bounds of
    durations with a day or week part (CEL's duration() reads Go's units only). Empty when usable."""
    problems = duration_bound_problems(policy.spec.observation, policy.spec.safety)
    for index, window in enumerate(policy.spec.safety.maintenance_windows):
        try:
            _zone(window)
        except ValueError:
            field_name = f"spec.safety.maintenanceWindows[{index}].timezone"
            problems.append(f"{field_name} {window.timezone!r} is not a known IANA time zone")
    return problems
