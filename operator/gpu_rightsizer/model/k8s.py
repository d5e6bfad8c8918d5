"""Kubernetes vocabulary both wings speak: RFC 3339 times, JSON merge patches, label selectors.

Why one module: these were written twice (two stampers, two selector matchers, one parser borrowed
sideways from the actuator), and the copies disagreed (an unknown selector operator matched in one
and did not in the other). Pure functions over plain data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any


def stamp(moment: datetime) -> str:
    """`moment` as the API server writes times: RFC 3339, UTC, whole seconds, with a Z."""
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def parse_time(text: Any) -> datetime | None:
    """An RFC 3339 time from a status or annotation (naive ones taken as UTC); None when absent or garbled."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def merge_patched(target: Any, patch: Any) -> Any:
    """`target` after a JSON merge patch (RFC 7386), as the API server applies it to a status."""
    if not isinstance(patch, Mapping):
        return patch
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patched(result.get(key), value)
    return result


def requirement_holds(key: str, operator: str, values: Iterable[str], labels: Mapping[str, str]) -> bool:
    """One `matchExpressions` entry with Kubernetes semantics (NotIn matches absence). An operator
    Kubernetes does not know matches nothing: a selector we cannot read selects no workload."""
    present = key in labels
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator == "In":
        return present and labels[key] in set(values)
    if operator == "NotIn":
        return not present or labels[key] not in set(values)
    return False


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector (as the API serves it) against labels; None or empty matches everything."""
    if not selector:
        return True
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    return all(
        requirement_holds(
            str(expression.get("key")),
            str(expression.get("operator")),
            expression.get("values") or (),
            labels,
        )
        for expression in selector.get("matchExpressions") or ()
    )
