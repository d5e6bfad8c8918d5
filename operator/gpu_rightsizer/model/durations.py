"""The one duration grammar of the CLI, the chart, the CRDs and the operator.

Go's units (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`) plus `d` (24 h) and `w` (7 d), compound allowed
(`1d12h`, `1h30m`, `1.5h`). The CRDs check the grammar with `DURATION_PATTERN`; their CEL bounds use
CEL's `duration()`, which knows Go's units only, so a value with `d` or `w` is bounded by the operator
(`logic.policy.policy_problems`, the policy's Ready condition) instead of by the API server.
"""

from __future__ import annotations

import re

_UNITS = r"ns|us|µs|ms|s|m|h|d|w"
DURATION_PATTERN = rf"^([0-9]+(\.[0-9]+)?({_UNITS}))+$"
#: A duration CEL's duration() cannot read (it has a day or week part); used in the CRDs' rules.
CEL_UNREADABLE = "[dw]"
_PART = re.compile(rf"([0-9]+(?:\.[0-9]+)?)({_UNITS})")
_FULL = re.compile(DURATION_PATTERN)
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
}


class DurationError(ValueError):
    """A duration that does not follow the grammar."""


def parse_duration(text: str) -> float:
    """Seconds in a duration such as `90s`, `1h30m`, `1.5h`, `7d` or `1d12h`; DurationError names the input."""
    if not isinstance(text, str) or not _FULL.fullmatch(text.strip()):
        raise DurationError(
            f"{text!r} is not a duration like 30m, 1h30m, 7d or 1d12h (units: ms, s, m, h, d, w)"
        )
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in _PART.findall(text.strip()))


def cel_readable(text: str) -> bool:
    """True when CEL's duration() reads `text` (no day or week part), so the API server bounds it."""
    return re.search(CEL_UNREADABLE, text) is None
