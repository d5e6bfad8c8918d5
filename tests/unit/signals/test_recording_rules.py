"""Recording rules: written from the operator's own queries, detected family by family, with fallbacks."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gpu_rightsizer.adapters.incremental import IncrementalSource, default_families
from gpu_rightsizer.adapters.prometheus import PrometheusConfig, PrometheusSource, PrometheusSourceError
from gpu_rightsizer.adapters.recording_rules import (
    HASH_LABEL,
    RECORD_NAMES,
    RULE_STEP_SECONDS,
    Detection,
    RecordingRule,
    detect,
    recording_rules,
    rules_file,
)
from gpu_rightsizer.model.observation import Signal

NOW = 1_767_225_600.0
WINDOW = 86_400.0


class FakeSource(PrometheusSource):
    """Answers the rules API and the series counts from tables; remembers the instant queries."""

    def __init__(
        self,
        *,
        groups: list[dict[str, Any]] | None = None,
        now: set[tuple[str, str]] | None = None,
        then: set[tuple[str, str]] | None = None,
    ) -> None:
        super().__init__(PrometheusConfig(url="http://prometheus.invalid"))
        self.groups = groups
        self.now, self.then = now or set(), then or set()
        self.asked: list[tuple[str, float]] = []

    def rule_groups(self) -> list[dict[str, Any]]:
        if self.groups is None:
            raise PrometheusSourceError("http://prometheus.invalid did not list its rules: 404")
        return self.groups

    def instant(self, what: str, query: str, at: float) -> list[dict[str, Any]]:
        self.asked.append((query, at))
        return [
            {"metric": {"__name__": name, HASH_LABEL: digest}, "value": [at, "3"]}
            for name, digest in sorted(self.now if at == NOW else self.then)
        ]


def _all() -> set[tuple[str, str]]:
    return {(rule.record, rule.digest) for rule in recording_rules()}


def _group(interval: float = 60.0, **overrides: Any) -> dict[str, Any]:
    rules = [
        {"name": r.record, "labels": {HASH_LABEL: r.digest}, "health": "ok", "type": "recording"}
        | overrides.get(r.family, {})
        for r in recording_rules()
    ]
    return {"name": "gpu-rightsizer.recording", "interval": interval, "rules": rules}


def test_every_pod_family_and_the_gpu_throttle_have_a_conventional_unique_name() -> None:
    families = default_families(RULE_STEP_SECONDS)
    recorded = {f.name for f in families if f.per_pod} | {"gpu:throttle"}
    assert set(RECORD_NAMES) == recorded
    assert len(set(RECORD_NAMES.values())) == len(RECORD_NAMES)
    for name in RECORD_NAMES.values():
        assert re.fullmatch(r"(namespace_pod|gpu):gpu_rightsizer_[a-z0-9_]+:[a-z0-9_]+", name), name
        if "rate" in name:
            assert name.endswith("rate3m")  # the rate window of a 60 s step


def test_each_rule_records_the_query_the_operator_sends_for_its_family() -> None:
    by_name = {f.name: f for f in default_families(RULE_STEP_SECONDS)}
    rules = recording_rules()
    assert [r.family for r in rules] == [name for name in by_name if name in RECORD_NAMES]
    for rule in rules:
        family = by_name[rule.family]
        assert rule.expr == family.rule_query()
        # a rule cannot run the reader: the throttle flags the reader works out are recorded whole
        assert (rule.expr == family.query(None)) is not bool(family.bitmasks), rule.family
        assert ("floor(" in rule.expr) is (rule.family == "gpu:throttle")
        if family.per_pod:  # only GPU pods are recorded
            assert (
                "and on (namespace, pod) (max by (namespace, pod) (kube_pod_container_resource" in rule.expr
            )
    group = rules_file()["groups"][0]
    assert group["interval"] == "60s"
    assert group["rules"][0]["labels"] == {HASH_LABEL: rules[0].digest}


def test_recorded_families_read_the_selector_with_its_hash_and_the_extra_matchers() -> None:
    rule = next(r for r in recording_rules() if r.family == f"pod:{Signal.CPU_USAGE_CORES.value}")
    families = {f.name: f for f in default_families(60.0, {rule.family: rule.selector})}
    query = families[rule.family].query("team-a")
    assert query.startswith(f'({{__name__=~"{rule.record}",{HASH_LABEL}="{rule.digest}"}}) and on')
    assert 'namespace="team-a"' in query
    assert "container_cpu_usage_seconds_total" not in families[rule.family].expression
    assert families["pod:memory_working_set_bytes"].expression.startswith("sum by (namespace, pod)")
    scoped = PrometheusSource(PrometheusConfig(url="http://p", extra_matchers=('cluster="prod"',)))
    from gpu_rightsizer.adapters.prometheus import add_matchers

    assert add_matchers(rule.selector, scoped.config.extra_matchers).startswith('{cluster="prod",__name__=~')


def test_coarse_cpu_reads_the_recorded_series_too() -> None:
    rule = next(r for r in recording_rules() if r.family == f"pod:{Signal.CPU_USAGE_CORES.value}")
    source = IncrementalSource(
        FakeSource(), window_seconds=WINDOW, step_seconds=60.0, recorded={rule.family: rule.selector}
    )
    assert source.coarse_queries()["range:cpu"].startswith(f"({rule.selector}) and on")
    assert "rate(" in source.coarse_queries()["range:requests_per_s"]  # serving sums stay raw


def test_all_families_are_used_when_rules_are_healthy_and_cover_the_window() -> None:
    source = FakeSource(groups=[_group()], now=_all(), then=_all())
    found = detect(source, now=NOW, window_seconds=WINDOW, step_seconds=60.0)
    assert found.method == "rules API and series"
    assert found.used == {r.family: r.selector for r in recording_rules()}
    assert not found.fallback
    assert [at for _, at in source.asked] == [NOW, NOW - WINDOW + 60]
    assert "count by (__name__, gpu_rightsizer_expr)" in source.asked[0][0]


def test_without_the_rules_api_the_series_decide() -> None:
    found = detect(FakeSource(now=_all(), then=_all()), now=NOW, window_seconds=WINDOW, step_seconds=60.0)
    assert found.method.startswith("series only") and "404" in found.method
    assert set(found.used) == set(RECORD_NAMES)


def test_rules_younger_than_the_window_or_not_yet_evaluated_fall_back() -> None:
    cpu = f"pod:{Signal.CPU_USAGE_CORES.value}"
    memory = f"pod:{Signal.MEMORY_WORKING_SET_BYTES.value}"
    by_family = {r.family: r for r in recording_rules()}
    now = _all() - {(by_family[memory].record, by_family[memory].digest)}
    then = now - {(by_family[cpu].record, by_family[cpu].digest)}
    found = detect(
        FakeSource(groups=[_group()], now=now, then=then), now=NOW, window_seconds=WINDOW, step_seconds=60.0
    )
    assert cpu not in found.used and "does not reach back to the window's start" in found.fallback[cpu]
    assert memory not in found.used and "not evaluated yet" in found.fallback[memory]
    assert len(found.used) == len(RECORD_NAMES) - 2
    assert "raw expressions for" in found.describe()


def test_failing_or_slow_rules_and_rules_of_another_version_are_not_used() -> None:
    cpu = f"pod:{Signal.CPU_USAGE_CORES.value}"
    broken = _group(**{cpu: {"health": "err", "lastError": "many-to-many matching not allowed"}})
    found = detect(
        FakeSource(groups=[broken], now=_all(), then=_all()), now=NOW, window_seconds=WINDOW, step_seconds=60
    )
    assert "many-to-many" in found.fallback[cpu] and len(found.used) == len(RECORD_NAMES) - 1
    found = detect(
        FakeSource(groups=[_group(interval=120.0)], now=_all(), then=_all()),
        now=NOW,
        window_seconds=WINDOW,
        step_seconds=60.0,
    )
    assert not found.used and "every 120s" in found.fallback[cpu]
    other = {(name, "0123456789ab") for name, _ in _all()}  # an older chart's expressions
    found = detect(FakeSource(now=other, then=other), now=NOW, window_seconds=WINDOW, step_seconds=60.0)
    assert not found.used and "not found" in found.fallback[cpu]


def test_a_step_the_rules_were_not_written_for_keeps_the_raw_expressions() -> None:
    cpu, memory = f"pod:{Signal.CPU_USAGE_CORES.value}", f"pod:{Signal.MEMORY_WORKING_SET_BYTES.value}"
    # 120 s: the rate window is 6 m, not the rules' 3 m; gauges are the same expression, read every 2nd
    found = detect(FakeSource(now=_all(), then=_all()), now=NOW, window_seconds=WINDOW, step_seconds=120.0)
    assert "written for a 60s step" in found.fallback[cpu] and memory in found.used
    # 10 s: the rules are evaluated every 60 s, one recorded value would be read six times
    source = FakeSource(now=_all(), then=_all())
    found = detect(source, now=NOW, window_seconds=600.0, step_seconds=10.0)
    assert not found.used and "every 60s" in found.fallback[memory]
    assert not source.asked


def test_an_unanswered_count_means_raw_expressions_not_a_failed_start() -> None:
    class Down(FakeSource):
        def instant(self, what: str, query: str, at: float) -> list[dict[str, Any]]:
            raise PrometheusSourceError("cannot reach Prometheus")

    found = detect(Down(), now=NOW, window_seconds=WINDOW, step_seconds=60.0)
    assert not found.used and all("could not be counted" in why for why in found.fallback.values())
    assert isinstance(found, Detection)


@pytest.mark.parametrize("rule", recording_rules(), ids=lambda r: r.family)
def test_digest_is_of_the_expression(rule: RecordingRule) -> None:
    assert re.fullmatch(r"[0-9a-f]{12}", rule.digest)
    assert RecordingRule(rule.family, rule.record, rule.expr + " ").digest != rule.digest


def test_a_new_detection_switches_families_and_keeps_the_others() -> None:
    rule = next(r for r in recording_rules() if r.family == f"pod:{Signal.CPU_USAGE_CORES.value}")
    source = IncrementalSource(FakeSource(), window_seconds=WINDOW, step_seconds=60.0)
    names = [f.name for f in source.reader.families]
    raw = {f.name: f.expression for f in source.reader.families}
    source.use_recorded({rule.family: rule.selector})
    now = {f.name: f.expression for f in source.reader.families}
    assert [f.name for f in source.reader.families] == names and "xid" in names
    assert now[rule.family] == rule.selector
    assert {k: v for k, v in now.items() if k != rule.family} == {
        k: v for k, v in raw.items() if k != rule.family
    }
    source.use_recorded({})
    assert {f.name: f.expression for f in source.reader.families} == raw
