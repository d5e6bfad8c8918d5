"""Recording rules for the per-pod aggregates, and which of them a Prometheus has (detected at start).

Why: on a Prometheus shared with other tenants, the pod families (cAdvisor rates over every container
of the cluster, the CPU throttle ratio, the serving metrics found by a `__name__` regex) and the GPU
throttle family are the expensive part of every read, above all the backfill of a long window.
Recorded once per evaluation interval, the operator reads small precomputed series instead.

One source of truth: each rule's expression *is* the family's query (`incremental.default_families`
at the rules' step, joined on GPU pods like the operator's query), so the chart's rules file
(`charts/gpu-rightsizer/files/recording-rules.yaml`, written by `hack/gen-recording-rules.py`) and the
operator cannot drift. Every recorded series carries `gpu_rightsizer_expr`, a hash of its expression:
the operator selects that exact hash, so rules from an older or newer chart are not mistaken for its
own (the family falls back to the raw expression instead).

Detection (`detect`) asks, per family: does the rule's expression equal the one the operator would
send at its step (the rate window follows the step); does `/api/v1/rules` show it healthy and
evaluated at least once per step (when the API answers); and do recorded series exist both now and
at the start of the window (rules only record from the moment they are loaded, so a rule younger
than the window would leave most of it empty). A family that fails any check reads the raw
expression, and the reason is logged. `adapters.windows` asks again every 15 minutes, so rules that
come to cover the window are picked up, and rules removed are left, without a restart.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from gpu_rightsizer.adapters import gpu_targets
from gpu_rightsizer.adapters.incremental import Family, default_families
from gpu_rightsizer.adapters.prometheus import PrometheusSource, PrometheusSourceError, _duration
from gpu_rightsizer.adapters.source import rate_window_seconds
from gpu_rightsizer.model.observation import Signal

LOG = logging.getLogger(__name__)

#: How often the chart's rules are evaluated; the operator uses them only at a step at least this long.
RULE_INTERVAL_SECONDS: Final = 60.0
#: The operator's step the rules are written for: its rate window is then max(3 × 60 s, 180 s) = 3 m,
#: the rate window of every step up to 60 s (the step of every window of an hour or more).
RULE_STEP_SECONDS: Final = 60.0
#: The rule group's name (one group: Prometheus evaluates a group's rules one after another).
GROUP_NAME: Final = "gpu-rightsizer.recording"
#: Label on every recorded series: the first 12 hex digits of the SHA-256 of the rule's expression.
HASH_LABEL: Final = "gpu_rightsizer_expr"

_RATE = f"rate{round(rate_window_seconds(RULE_STEP_SECONDS) / 60)}m"
_POD = "namespace_pod:gpu_rightsizer_"
#: Family name → recorded series name (`level:metric:operations`). The level is the labels kept:
#: `namespace_pod` for pod families, `gpu` for the per-device throttle family (the DCGM device labels).
#: The plain DCGM gauge families are not recorded: a recorded copy would cost as much as the series.
RECORD_NAMES: Final[Mapping[str, str]] = {
    "gpu:throttle": f"gpu:gpu_rightsizer_throttle_fraction:max_{_RATE}",
    f"pod:{Signal.CPU_USAGE_CORES.value}": f"{_POD}cpu_usage_cores:{_RATE}",
    f"pod:{Signal.MEMORY_WORKING_SET_BYTES.value}": f"{_POD}memory_working_set_bytes:sum",
    f"pod:{Signal.FS_READ_BYTES_PER_S.value}": f"{_POD}fs_read_bytes:{_RATE}",
    f"pod:{Signal.FS_WRITE_BYTES_PER_S.value}": f"{_POD}fs_write_bytes:{_RATE}",
    f"pod:{Signal.NET_RX_BYTES_PER_S.value}": f"{_POD}net_rx_bytes:{_RATE}",
    f"pod:{Signal.NET_TX_BYTES_PER_S.value}": f"{_POD}net_tx_bytes:{_RATE}",
    f"pod:{Signal.PROCESS_CPU_MAX_CORES.value}": f"{_POD}process_cpu_max_cores:max",
    f"pod:{Signal.PROCESSES_PINNED.value}": f"{_POD}processes_pinned:sum",
    f"pod:{Signal.CPU_THROTTLED_RATIO.value}": f"{_POD}cpu_throttled_periods:ratio_{_RATE}",
    f"pod:{Signal.CPU_PRESSURE_RATIO.value}": f"{_POD}cpu_pressure_waiting:max_{_RATE}",
    f"pod:{Signal.IO_PRESSURE_RATIO.value}": f"{_POD}io_pressure_waiting:max_{_RATE}",
    f"pod:{Signal.REQUESTS_PER_S.value}": f"{_POD}serving_requests:{_RATE}",
    f"pod:{Signal.QUEUE_LENGTH.value}": f"{_POD}serving_queue_length:sum",
    f"pod:{Signal.QUEUE_TIME_MS.value}": f"{_POD}serving_queue_time_ms:avg",
}


@dataclass(frozen=True)
class RecordingRule:
    """One recording rule: the family it stands for, its series name, expression and hash label."""

    family: str
    record: str
    expr: str

    @property
    def digest(self) -> str:
        """The value of `HASH_LABEL` on the series this rule records."""
        return expression_digest(self.expr)

    @property
    def selector(self) -> str:
        """The recorded series of exactly this expression. Written as a `__name__` matcher so the
        configured extra matchers (`cluster="…"` on a multi-cluster store) are added to it too."""
        return f'{{__name__=~"{self.record}",{HASH_LABEL}="{self.digest}"}}'

    def as_rule(self) -> dict[str, Any]:
        """The rule as Prometheus' rules file (and a PrometheusRule's spec) writes it."""
        return {"record": self.record, "expr": self.expr, "labels": {HASH_LABEL: self.digest}}


def expression_digest(expr: str) -> str:
    """First 12 hex digits of the expression's SHA-256 (collisions between our dozen rules: none)."""
    return hashlib.sha256(expr.encode()).hexdigest()[:12]


def rules_for(families: Sequence[Family]) -> list[RecordingRule]:
    """The rules of the families that have a recorded name: each records the family's own query
    (cluster-wide; pod families already joined on GPU pods, so only GPU pods are recorded), in its
    whole PromQL form (`Family.rule_query`: the throttle flags worked out by Prometheus)."""
    return [
        RecordingRule(family.name, RECORD_NAMES[family.name], family.rule_query())
        for family in families
        if family.name in RECORD_NAMES
    ]


def recording_rules() -> list[RecordingRule]:
    """The chart's rules: the families' queries at `RULE_STEP_SECONDS`."""
    return rules_for(default_families(RULE_STEP_SECONDS))


def rules_file() -> dict[str, Any]:
    """The chart's rules as a Prometheus rules file (`promtool check rules` reads it)."""
    return {
        "groups": [
            {
                "name": GROUP_NAME,
                "interval": _duration(RULE_INTERVAL_SECONDS),
                "rules": [rule.as_rule() for rule in recording_rules()],
            }
        ]
    }


@dataclass
class Detection:
    """Which families read recorded series (family → selector), and why the others do not."""

    used: dict[str, str] = field(default_factory=dict)
    fallback: dict[str, str] = field(default_factory=dict)
    #: What answered: "rules API and series", or "series only (…why the rules API did not…)".
    method: str = ""

    def describe(self) -> str:
        """One log line: what is used, and each fallback's reason."""
        used = ", ".join(sorted(self.used)) or "none"
        parts = [f"recorded series ({self.method}): using {used}"]
        if self.fallback:
            reasons = "; ".join(f"{name}: {why}" for name, why in sorted(self.fallback.items()))
            parts.append(f"raw expressions for {reasons}")
        return ". ".join(parts)


def _interval_seconds(group: Mapping[str, Any]) -> float | None:
    try:
        return float(group["interval"])
    except (KeyError, TypeError, ValueError):
        return None


def detect(
    source: PrometheusSource,
    *,
    now: float,
    window_seconds: float,
    step_seconds: float,
    rules: Sequence[RecordingRule] | None = None,
) -> Detection:
    """Which recorded series the operator can use at `step_seconds` over a window ending `now`.

    Three cheap questions: `/api/v1/rules` (health, interval; optional), and one instant
    `count by (__name__, gpu_rightsizer_expr)` over the recorded names now and one at the start of
    the window. A failing query means "raw expressions", never a failed start.
    """
    rules = recording_rules() if rules is None else rules
    detection = Detection()
    wanted = {family.name: family.rule_query() for family in default_families(step_seconds)}
    candidates: list[RecordingRule] = []
    for rule in rules:
        if source.config.trusted_gpu_targets is not None and gpu_targets.selects_trusted_only(rule.expr):
            detection.fallback[rule.family] = (
                "recorded GPU and agent series mix every scrape target's; they are read raw from the "
                "trusted targets"
            )
        elif wanted.get(rule.family) != rule.expr:
            detection.fallback[rule.family] = (
                f"the rule is written for a {_duration(RULE_STEP_SECONDS)} step, "
                f"this window reads at {_duration(step_seconds)}"
            )
        else:
            candidates.append(rule)
    if not candidates:
        detection.method = "not asked"
        return detection
    interval = RULE_INTERVAL_SECONDS  # the chart's, unless the rules API says otherwise
    listed: dict[tuple[str, str], tuple[dict[str, Any], float | None]] = {}
    try:
        for group in source.rule_groups():
            for entry in group.get("rules") or []:
                if isinstance(entry, dict):
                    labels = entry.get("labels") or {}
                    listed[(str(entry.get("name")), str(labels.get(HASH_LABEL)))] = (
                        entry,
                        _interval_seconds(group),
                    )
        detection.method = "rules API and series"
    except PrometheusSourceError as error:
        detection.method = f"series only, as the rules API did not answer: {error}"
        listed = {}
        rules_api = False
    else:
        rules_api = True
    healthy: list[RecordingRule] = []
    for rule in candidates:
        found = listed.get((rule.record, rule.digest))
        if found is not None:
            entry, every = found
            if entry.get("health") == "err":
                detection.fallback[rule.family] = (
                    f"its rule fails: {entry.get('lastError') or 'unknown error'}"
                )
                continue
            if every is not None and every > step_seconds:
                detection.fallback[rule.family] = (
                    f"its rule is evaluated every {_duration(every)}, less often than the "
                    f"{_duration(step_seconds)} step"
                )
                continue
        elif not rules_api and interval > step_seconds:
            detection.fallback[rule.family] = (
                f"the chart evaluates it every {_duration(interval)}, less often than the "
                f"{_duration(step_seconds)} step"
            )
            continue
        healthy.append(rule)
    if not healthy:
        return detection
    names = "|".join(sorted({rule.record for rule in healthy}))
    query = f'count by (__name__, {HASH_LABEL}) ({{__name__=~"{names}"}})'
    # a sample within one evaluation (or step) of the window's start: the series cover the window
    probe_start = now - window_seconds + max(step_seconds, interval)
    try:
        present_now = _present(source.instant("recorded series now", query, now))
        present_then = _present(source.instant("recorded series at the window start", query, probe_start))
    except PrometheusSourceError as error:
        for rule in healthy:
            detection.fallback[rule.family] = f"the recorded series could not be counted: {error}"
        return detection
    for rule in healthy:
        key = (rule.record, rule.digest)
        if key not in present_now:
            why = "not evaluated yet" if (key in listed) else "not found"
            detection.fallback[rule.family] = f"{rule.record} has no series now ({why})"
        elif key not in present_then:
            detection.fallback[rule.family] = (
                f"{rule.record} does not reach back to the window's start yet (rules record only from "
                "when they are loaded)"
            )
        else:
            detection.used[rule.family] = rule.selector
    return detection


def _present(rows: Sequence[Mapping[str, Any]]) -> set[tuple[str, str]]:
    return {
        (str(row["metric"].get("__name__")), str(row["metric"].get(HASH_LABEL)))
        for row in rows
        if isinstance(row.get("metric"), Mapping)
    }
