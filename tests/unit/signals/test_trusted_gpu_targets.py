"""GPU series are believed by the scrape target that served them (adapters/gpu_targets.py) and one GPU
gets one story from its trusted targets (logic/gpu_identity.py)."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.unit.signals.test_attribution import T0, _ksm
from tests.unit.signals.test_attribution import _answers as attribution_answers
from tests.unit.signals.test_prometheus_adapter import FakePrometheus

from gpu_rightsizer.adapters import gpu_targets
from gpu_rightsizer.adapters.incremental import IncrementalSource, default_families
from gpu_rightsizer.adapters.openmetrics import read_openmetrics
from gpu_rightsizer.adapters.prometheus import (
    PrometheusConfig,
    PrometheusSource,
    add_matchers,
    fold_labels,
)
from gpu_rightsizer.adapters.recording_rules import detect, recording_rules
from gpu_rightsizer.commands import run
from gpu_rightsizer.config import (
    DEFAULT_TRUSTED_GPU_TARGETS,
    MatcherError,
    OperatorConfig,
    parse_trusted_targets,
)
from gpu_rightsizer.logic.gpu_identity import DeviceClaim, device_conflicts
from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.observation import Signal, WorkloadWindow

DCGM = DEFAULT_TRUSTED_GPU_TARGETS[0]
AGENT = ('namespace="gpurs"', 'pod=~"gpurs-agent-.*"')
#: A DCGM selector: the metric name, optionally with its braces, or a `__name__` regex selector.
_SELECTOR = re.compile(r'(?<![\w:"|])(DCGM_FI_\w+)(\{[^}]*\})?|\{[^{}]*__name__=~"DCGM_[^}]*\}')


def _dcgm_selectors(query: str) -> list[str]:
    return [m.group(0) for m in _SELECTOR.finditer(query)]


def test_parse_trusted_targets() -> None:
    assert parse_trusted_targets(["namespace=gpu-operator,service=nvidia-dcgm-exporter"]) == (DCGM,)
    assert parse_trusted_targets(['namespace=gpurs, pod=~"gpurs-agent-.*"']) == (AGENT,)
    assert parse_trusted_targets(['job=~"a,b"']) == (('job=~"a,b"',),)
    assert parse_trusted_targets(["any"]) == ()
    for bad in ("namespace", "namespace=a,,service=b", "=x", ""):
        with pytest.raises(MatcherError):
            parse_trusted_targets([bad])


def test_every_dcgm_selector_of_every_family_is_limited_to_the_trusted_targets() -> None:
    queries = [family.query(None) for family in default_families(60.0)]
    queries.append(gpu_targets.claims_query(3600, fold_labels))
    gpu_queries = [q for q in queries if "DCGM_" in q]
    assert len(gpu_queries) >= 10
    for query in gpu_queries:
        restricted = gpu_targets.restrict_to_trusted(query, (DCGM, AGENT), add_matchers)
        selectors = _dcgm_selectors(restricted)
        assert selectors
        for selector in selectors:
            assert ",".join(DCGM) in selector or ",".join(AGENT) in selector, selector
        assert restricted.count(",".join(DCGM)) == restricted.count(",".join(AGENT))


#: The node agent's per-container series, and a selector of one: the name, optionally with its braces.
AGENT_METRICS = (mn.AGENT_PROCESS_CPU_MAX, mn.AGENT_PROCESSES_PINNED)
_AGENT_SELECTOR = re.compile(r"(?<![\w:\"|])(" + "|".join(AGENT_METRICS) + r")(?![\w:])(\{[^}]*\})?")


def test_every_agent_container_selector_is_limited_to_the_trusted_targets() -> None:
    """A tenant's copy of the agent's per-process CPU series could make a starved loader look fed (or
    a fed one starved): they are read from the trusted targets only, like GPU series."""
    queries = [family.query(None) for family in default_families(60.0)]
    agent_queries = [q for q in queries if _AGENT_SELECTOR.search(q)]
    assert len(agent_queries) == len(AGENT_METRICS)
    for query in agent_queries:
        restricted = gpu_targets.restrict_to_trusted(query, (DCGM, AGENT), add_matchers)
        selectors = [m.group(0) for m in _AGENT_SELECTOR.finditer(restricted)]
        assert len(selectors) == 2 * len(_AGENT_SELECTOR.findall(query)) > 0
        for selector in selectors:
            assert ",".join(DCGM) in selector or ",".join(AGENT) in selector, selector
    source = PrometheusSource(PrometheusConfig(url="http://prometheus:9090", trusted_gpu_targets=(AGENT,)))
    assert source._scoped(f'max by (pod) ({mn.AGENT_PROCESS_CPU_MAX}{{container!=""}})') == (
        f'max by (pod) ({mn.AGENT_PROCESS_CPU_MAX}{{container!="",{",".join(AGENT)}}})'
    )


def test_queries_without_trusted_only_series_and_unset_targets_are_left_alone() -> None:
    pod_queries = [f.query(None) for f in default_families(60.0) if f.name.startswith("pod:")]
    untouched = [q for q in pod_queries if "DCGM_" not in q and not _AGENT_SELECTOR.search(q)]
    assert untouched and len(untouched) < len(pod_queries)
    for query in untouched:
        assert gpu_targets.restrict_to_trusted(query, (DCGM,), add_matchers) == query
    gpu = default_families(60.0)[0].query(None)
    assert gpu_targets.restrict_to_trusted(gpu, None, add_matchers) == gpu
    assert gpu_targets.restrict_to_trusted(gpu, (), add_matchers) == gpu
    # the check for relabelled series looks at every target on purpose
    relabelled = gpu_targets.relabelled_query(3600)
    assert gpu_targets.restrict_to_trusted(relabelled, (DCGM, AGENT), add_matchers) == relabelled


def test_the_source_sends_restricted_queries() -> None:
    sent: list[str] = []
    source = PrometheusSource(PrometheusConfig(url="http://prometheus:9090", trusted_gpu_targets=(DCGM,)))
    source._call = lambda what, send: sent.append(what) or []  # type: ignore[method-assign]
    assert source._scoped("max by (UUID) (DCGM_FI_DEV_FB_USED)") == (
        'max by (UUID) (DCGM_FI_DEV_FB_USED{namespace="gpu-operator",service="nvidia-dcgm-exporter"})'
    )
    assert sorted(source.identity_answers(0.0, 3600)) == [gpu_targets.CLAIMS, gpu_targets.RELABELLED]
    assert PrometheusSource(PrometheusConfig(url="http://p:9090")).identity_answers(0.0, 3600) == {}


def test_incremental_state_follows_the_trusted_targets() -> None:
    def fingerprint(targets: tuple[tuple[str, ...], ...] | None) -> str:
        source = PrometheusSource(PrometheusConfig(url="http://p:9090", trusted_gpu_targets=targets))
        return IncrementalSource(source, window_seconds=3600, step_seconds=60).fingerprint()

    assert fingerprint((DCGM,)) != fingerprint((DCGM, AGENT)) != fingerprint(None)


def _claim(target: str, pod: str, device: str = "GPU-1") -> DeviceClaim:
    return DeviceClaim(device=device, target=target, namespace="ml", pod=pod)


def test_dcgm_exporter_and_agent_reporting_the_same_pod_agree() -> None:
    claims = [_claim("dcgm 10.0.0.5:9400", "trainer-0"), _claim("agent 10.0.0.5:9500", "trainer-0")]
    assert device_conflicts(claims) == {}


def test_one_target_reporting_several_pods_is_sharing_not_a_conflict() -> None:
    claims = [_claim("dcgm 10.0.0.5:9400", "a"), _claim("dcgm 10.0.0.5:9400", "b")]
    assert device_conflicts(claims) == {}


def test_two_targets_reporting_one_gpu_for_different_pods_conflict() -> None:
    claims = [
        _claim("dcgm 10.0.0.5:9400", "trainer-0"),
        _claim("agent 10.0.0.7:9500", "tenant-0"),
        _claim("dcgm 10.0.0.5:9400", "other", device="GPU-2"),
        _claim("agent 10.0.0.7:9500", "", device="GPU-2"),  # board-level: says nothing of pods
    ]
    conflicts = device_conflicts(claims)
    assert list(conflicts) == ["GPU-1"]
    assert conflicts["GPU-1"].pods == {("ml", "trainer-0"), ("ml", "tenant-0")}
    message = conflicts["GPU-1"].message()
    assert "GPU-1" in message and "ml/trainer-0" in message and "ml/tenant-0" in message
    assert "refused" in message


def test_conflicts_are_keyed_like_the_assembly_devices() -> None:
    rows = [
        {"metric": {"UUID": "GPU-1", "GPU_I_ID": "3", "namespace": "ml", "pod": "a", "scrape_target": "x"}},
        {"metric": {"UUID": "GPU-1", "GPU_I_ID": "3", "namespace": "ml", "pod": "b", "scrape_target": "y"}},
        {"metric": {"UUID": "GPU-1", "GPU_I_ID": "4", "namespace": "ml", "pod": "c", "scrape_target": "x"}},
    ]
    assert list(gpu_targets.conflicts_in(rows)) == ["GPU-1-3"]


def test_trust_warnings() -> None:
    relabelled = {gpu_targets.RELABELLED: [{"metric": {"job": "tenant", "instance": "10.1.2.3:80"}}]}
    assert gpu_targets.trust_warnings(relabelled, None) == []
    assert gpu_targets.trust_warnings({}, (DCGM,)) == []
    [warning] = gpu_targets.trust_warnings(relabelled, (DCGM,))
    assert "job=tenant instance=10.1.2.3:80" in warning and "no automatic action" in warning
    assert "any" in gpu_targets.trust_warnings({}, ())[0]
    assert "declared" in gpu_targets.trust_warnings({}, (DCGM,), honor_labels_declared=True)[0]


def _answers_with_identity(
    claims: list[dict[str, str]], relabelled: list[dict[str, str]]
) -> Callable[[str, str, dict[str, str]], tuple[int, bytes]]:
    def answer(endpoint: str, query: str, headers: dict[str, str]) -> tuple[int, bytes]:
        rows = None
        if query.startswith("group by (UUID"):
            rows = claims
        elif query.startswith("group by (job"):
            rows = relabelled
        if rows is None:
            # the attribution test's answers, with the trusted matchers taken out again
            return attribution_answers(endpoint, query.replace(",".join(DCGM) + ",", "").replace(
                "{" + ",".join(DCGM) + "}", ""
            ), headers)  # fmt: skip
        result = [{"metric": labels, "value": [T0, "1"]} for labels in rows]
        return 200, json.dumps(
            {"status": "success", "data": {"resultType": "vector", "result": result}}
        ).encode()

    return answer


def _read(claims: list[dict[str, str]], relabelled: list[dict[str, str]]) -> list[WorkloadWindow]:
    with FakePrometheus(_answers_with_identity(claims, relabelled)) as server:
        return PrometheusSource(PrometheusConfig(server.url, trusted_gpu_targets=(DCGM,))).read(
            window_seconds=2400, at=datetime.fromtimestamp(T0, tz=UTC)
        )


def test_the_assembly_refuses_a_gpu_two_trusted_targets_disagree_on() -> None:
    claim = {"UUID": "GPU-busy", "namespace": "ml", "pod": "trainer-0", "scrape_target": "dcgm 10.0.0.5:9400"}
    [agreed] = _read([claim, {**claim, "scrape_target": "agent 10.0.0.5:9500"}], [])
    assert [g.uuid for p in agreed.pods for g in p.gpus] == ["GPU-busy"]
    assert agreed.warnings == []
    [refused] = _read([claim, {**claim, "pod": "tenant-0", "scrape_target": "agent 10.0.0.7:9500"}], [])
    assert [g.uuid for p in refused.pods for g in p.gpus] == []
    assert any("GPU GPU-busy is reported for different pods" in w for w in refused.warnings)


def test_relabelled_gpu_series_put_a_warning_on_every_window() -> None:
    [window] = _read([], [{"job": "tenant/app", "instance": "10.1.2.3:8080", "namespace": "ml"}])
    assert any("honor_labels: true" in w and "job=tenant/app" in w for w in window.warnings)


DCGM_TARGET = 'job="nvidia-dcgm-exporter",instance="10.0.0.5:9400",namespace="gpu-operator",service="nvidia-dcgm-exporter"'
AGENT_TARGET = 'job="gpurs/agent",instance="10.0.0.5:9500",namespace="gpurs",pod="gpurs-agent-x1"'
TENANT_TARGET = 'job="tenant/app",instance="10.1.2.3:8080",namespace="tenant",pod="tenant-0",service="app"'


def _dump(tmp_path: Path, *series: tuple[str, str, str, float]) -> Path:
    """A `/federate`-style dump: (target labels, exported pod labels, UUID, busy) per GPU series."""
    lines = ["# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge"]
    for target, pod_labels, uuid, busy in series:
        lines += [
            f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{target},{pod_labels},Hostname="n1",UUID="{uuid}",gpu="0"}} '
            f"{busy + 0.001 * (i % 3)} {T0 + 60 * i}"
            for i in range(40)
        ]
    lines += _ksm('namespace="ml",pod="trainer-0"', "StatefulSet", "trainer", gpu=True)
    path = tmp_path / "federate.om"
    path.write_text("\n".join(lines) + "\n# EOF\n")
    return path


def _trainer(path: Path, targets: tuple[tuple[str, ...], ...] | None) -> WorkloadWindow:
    [window] = read_openmetrics(
        path, window_seconds=3600, at=datetime.fromtimestamp(T0 + 2400, tz=UTC), trusted_gpu_targets=targets
    )
    return window


def test_a_file_keeps_only_the_trusted_targets_gpu_series(tmp_path: Path) -> None:
    victim = 'exported_namespace="ml",exported_pod="trainer-0"'
    path = _dump(
        tmp_path, (DCGM_TARGET, victim, "GPU-1", 0.97), (TENANT_TARGET, victim + ',vgpu="0"', "GPU-1", 0.02)
    )
    [gpu] = _trainer(path, (DCGM,)).pods[0].gpus
    assert gpu.stats[Signal.GR_ENGINE_ACTIVE].mean > 0.9
    assert [g.uuid for g in _trainer(path, (('namespace="nobody"',),)).pods[0].gpus] == []
    assert any("any" in w for w in _trainer(path, ()).warnings)


def test_a_file_gpu_two_trusted_targets_disagree_on_is_refused(tmp_path: Path) -> None:
    path = _dump(
        tmp_path,
        (DCGM_TARGET, 'exported_namespace="ml",exported_pod="trainer-0"', "GPU-1", 0.97),
        (AGENT_TARGET, 'exported_namespace="ml",exported_pod="other-0"', "GPU-1", 0.02),
    )
    window = _trainer(path, (DCGM, ('namespace="gpurs"',)))
    assert window.pods[0].gpus == []
    assert any("GPU GPU-1 is reported for different pods" in w for w in window.warnings)
    agreeing = _dump(
        tmp_path,
        (DCGM_TARGET, 'exported_namespace="ml",exported_pod="trainer-0"', "GPU-1", 0.97),
        (AGENT_TARGET, 'exported_namespace="ml",exported_pod="trainer-0"', "GPU-1", 0.97),
    )
    assert [g.uuid for g in _trainer(agreeing, (DCGM, ('namespace="gpurs"',))).pods[0].gpus] == ["GPU-1"]


def test_a_file_keeps_only_the_trusted_targets_agent_series(tmp_path: Path) -> None:
    """A tenant serving the trainer's per-process CPU series (a loader pinned at one core) is not read
    with trusted targets; the agent's own series is."""
    path = _dump(tmp_path, (DCGM_TARGET, 'exported_namespace="ml",exported_pod="trainer-0"', "GPU-1", 0.5))
    victim = 'exported_namespace="ml",exported_pod="trainer-0",exported_container="main"'
    lines = path.read_text().removesuffix("# EOF\n").splitlines()
    for name, agent_value, tenant_value in (
        (mn.AGENT_PROCESS_CPU_MAX, 0.3, 1.0),
        (mn.AGENT_PROCESSES_PINNED, 0.0, 3.0),
    ):
        lines.append(f"# TYPE {name} gauge")
        for i in range(40):
            lines.append(f"{name}{{{AGENT_TARGET},{victim}}} {agent_value} {T0 + 60 * i}")
            lines.append(f"{name}{{{TENANT_TARGET},{victim}}} {tenant_value} {T0 + 60 * i}")
    path.write_text("\n".join(lines) + "\n# EOF\n")

    def cpu(targets: tuple[tuple[str, ...], ...] | None) -> tuple[float, float]:
        stats = _trainer(path, targets).pods[0].stats
        return stats[Signal.PROCESS_CPU_MAX_CORES].max, stats[Signal.PROCESSES_PINNED].max

    assert cpu(None) == (1.0, 3.0)  # every target believed: the tenant's copy decides
    assert cpu((DCGM, AGENT)) == (0.3, 0.0)
    only_dcgm = _trainer(path, (DCGM,)).pods[0].stats
    assert Signal.PROCESS_CPU_MAX_CORES not in only_dcgm and Signal.PROCESSES_PINNED not in only_dcgm


def test_served_by_trusted_matches_like_promql() -> None:
    targets = (('namespace="gpu-operator"', 'pod=~"dcgm-.*"'), ('job!="x"', 'service!~"a|b"'))
    assert gpu_targets.served_by_trusted({"namespace": "gpu-operator", "pod": "dcgm-1", "job": "x"}, targets)
    assert not gpu_targets.served_by_trusted(
        {"namespace": "gpu-operator", "pod": "a-dcgm-1", "job": "x"}, targets
    )
    assert gpu_targets.served_by_trusted({"job": "y", "service": "c"}, targets)
    assert not gpu_targets.served_by_trusted({"job": "y", "service": "a"}, targets)


def test_recorded_gpu_and_agent_series_are_not_used_with_trusted_targets() -> None:
    agent_families = {f"pod:{s.value}" for s in (Signal.PROCESS_CPU_MAX_CORES, Signal.PROCESSES_PINNED)}
    rules = [
        rule for rule in recording_rules() if rule.family.startswith("gpu:") or rule.family in agent_families
    ]
    assert agent_families <= {rule.family for rule in rules}
    source = PrometheusSource(PrometheusConfig(url="http://p:9090", trusted_gpu_targets=(DCGM,)))
    detection = detect(source, now=T0, window_seconds=3600, step_seconds=60, rules=rules)
    assert detection.used == {}
    assert all("trusted" in detection.fallback[rule.family] for rule in rules)


def test_the_run_flags_and_environment_set_the_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = argparse.ArgumentParser()
    run.add_arguments(parser)

    def config(*argv: str) -> OperatorConfig:
        return OperatorConfig.from_args(parser.parse_args(list(argv)))

    assert config().trusted_gpu_targets == DEFAULT_TRUSTED_GPU_TARGETS
    assert not config().gpu_honor_labels
    assert config("--trusted-gpu-target", "any").trusted_gpu_targets == ()
    both = config("--trusted-gpu-target", "namespace=a,service=b", "--trusted-gpu-target", 'job=~"x.*"')
    assert both.trusted_gpu_targets == (('namespace="a"', 'service="b"'), ('job=~"x.*"',))
    assert config("--gpu-honor-labels").gpu_honor_labels
    monkeypatch.setenv("GPURS_TRUSTED_GPU_TARGETS", "namespace=a;namespace=b")
    monkeypatch.setenv("GPURS_GPU_HONOR_LABELS", "true")
    from_env = config()
    assert (
        from_env.trusted_gpu_targets == (('namespace="a"',), ('namespace="b"',)) and from_env.gpu_honor_labels
    )
    with pytest.raises(MatcherError):
        config("--trusted-gpu-target", "gpu-operator")
