"""Query hygiene: statistics only for GPU pods, an extra matcher on every selector, configurable limits."""

from __future__ import annotations

import argparse
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.unit.signals.test_prometheus_adapter import EMPTY_VECTOR, ONE, FakePrometheus

from gpu_rightsizer.adapters.capacity import ALLOWLIST_HINT, capacity_from_file, capacity_from_ksm
from gpu_rightsizer.adapters.prometheus import (
    PrometheusConfig,
    PrometheusSource,
    add_matchers,
    source_for,
)
from gpu_rightsizer.commands import run as run_command
from gpu_rightsizer.config import CompressionError, MatcherError, OperatorConfig, parse_matchers
from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.codes import SharingStrategy

END = datetime.fromtimestamp(1_767_225_600.0, tz=UTC)
MATRIX = {"status": "success", "data": {"resultType": "matrix", "result": []}}
SELECTED = re.compile(
    r'(?<![\w:"|])((?:DCGM_FI_|container_|kube_|gpu_rightsizer_container_)[a-zA-Z0-9_]+)(?![\w:])(\{[^}]*\})?'
)


def _answer_with_gpu_namespace(endpoint: str, query: str, _headers: dict[str, str]) -> tuple[int, bytes]:
    if query == "vector(1)":
        return 200, json.dumps(ONE).encode()
    if query.startswith("count by (namespace)"):
        vector = {"resultType": "vector", "result": [{"metric": {"namespace": "ml-team"}, "value": [0, "2"]}]}
        return 200, json.dumps({"status": "success", "data": vector}).encode()
    return 200, json.dumps(MATRIX if endpoint == "query_range" else EMPTY_VECTOR).encode()


def test_every_selector_carries_the_extra_matcher() -> None:
    with FakePrometheus(_answer_with_gpu_namespace) as server:
        source = PrometheusSource(PrometheusConfig(server.url, extra_matchers=('cluster="prod"',)))
        source.read(window_seconds=1800, at=END)
        source.read_capacity(END)
        queries = [query for _, query, _ in server.requests if query != "vector(1)"]
    assert queries
    for query in queries:
        for match in SELECTED.finditer(query):
            assert 'cluster="prod"' in (match.group(2) or ""), (match.group(0), query[:200])
        assert '{__name__=~"' not in query  # serving selectors got the matcher first


def test_pod_statistics_are_limited_to_gpu_pods() -> None:
    with FakePrometheus(_answer_with_gpu_namespace) as server:
        PrometheusSource(PrometheusConfig(server.url)).read(window_seconds=1800, at=END)
        queries = [query for _, query, _ in server.requests]
    cadvisor = [q for q in queries if "container_cpu_usage_seconds_total" in q or "container_fs_reads" in q]
    assert cadvisor
    for query in cadvisor:
        assert (
            "and on (namespace, pod) (max by (namespace, pod) (kube_pod_container_resource_requests" in query
        )
        # a regex literal inside a PromQL string: the backslash itself is escaped (Go string rules)
        assert 'namespace=~"ml\\\\-team"' in query
    dcgm = [q for q in queries if "DCGM_FI_DEV_FB_USED" in q]
    assert dcgm and all("namespace=~" not in q for q in dcgm)


def test_busiest_process_is_the_largest_of_the_containers_and_pinned_their_sum() -> None:
    """Two containers each with a process at one core: the pod's busiest process is one core, not two;
    the pinned processes add up."""
    with FakePrometheus(_answer_with_gpu_namespace) as server:
        PrometheusSource(PrometheusConfig(server.url)).read(window_seconds=1800, at=END)
        queries = [query for _, query, _ in server.requests]
    busiest = [q for q in queries if mn.AGENT_PROCESS_CPU_MAX in q]
    pinned = [q for q in queries if mn.AGENT_PROCESSES_PINNED in q]
    assert busiest and pinned
    for query in busiest:
        assert "max by (namespace, pod) (label_replace(" in query, query[:300]  # labels folded, then max
        assert "sum by (namespace, pod)" not in query, query[:300]
        assert (
            "and on (namespace, pod) (max by (namespace, pod) (kube_pod_container_resource_requests" in query
        )
        # the agent's `namespace` is its own under a PodMonitor scrape: the join alone scopes it
        assert "namespace=~" not in query.split(" and on (namespace, pod) ")[0], query[:300]
    for query in pinned:
        assert "sum by (namespace, pod) (label_replace(" in query, query[:300]


def test_add_matchers_leaves_strings_and_existing_matchers_intact() -> None:
    query = (
        'label_replace(rate(container_cpu_usage_seconds_total{container!=""}[3m]), "pod", "$1", "pod_name", "(.+)")'
        " and DCGM_FI_DEV_FB_USED < 1"
    )
    changed = add_matchers(query, ('cluster="a"',))
    assert 'container_cpu_usage_seconds_total{container!="",cluster="a"}[3m]' in changed
    assert 'DCGM_FI_DEV_FB_USED{cluster="a"} < 1' in changed
    assert '"pod_name"' in changed
    assert add_matchers(query, ()) == query


def test_matchers_parse_like_krr_prometheus_label() -> None:
    assert parse_matchers(["cluster=prod", 'region=~"eu-.*"']) == ('cluster="prod"', 'region=~"eu-.*"')
    with pytest.raises(MatcherError):
        parse_matchers(["not a matcher"])


def test_timeout_step_and_matchers_come_from_the_operator_configuration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPURS_PROMETHEUS_TIMEOUT", "90s")
    monkeypatch.setenv("GPURS_PROMETHEUS_STEP", "30s")
    monkeypatch.setenv("GPURS_PROMETHEUS_LABELS", "cluster=prod")
    args = argparse.Namespace(
        namespace=None, role=None, liveness=None, metrics_port=None, prometheus_url="http://p:9090",
        prometheus_token_file=None, prometheus_ca_file=None, prometheus_insecure=False, interval=None,
        window=None, metrics_address=None,
    )  # fmt: skip
    cfg = OperatorConfig.from_args(args)
    assert (cfg.prometheus_timeout_seconds, cfg.prometheus_step_seconds) == (90.0, 30.0)
    source = source_for(cfg)
    assert source.config.timeout_seconds == 90.0
    assert not source.config.compressed_answers  # plain answers unless gzip is chosen
    assert source.config.extra_matchers == ('cluster="prod"',)


def test_node_labels_without_an_allowlist_are_said_and_allocatable_still_counts() -> None:
    allocatable = [
        ({"node": "n1", "resource": "nvidia_com_mig_1g_10gb", "unit": "integer"}, 7.0),
        ({"node": "n1", "resource": "cpu", "unit": "core"}, 32.0),
    ]
    bare = capacity_from_ksm(allocatable, [{"node": "n1"}])
    assert bare.notes == (ALLOWLIST_HINT,)
    assert bare.most_of("nvidia.com/mig-1g.10gb") == 7
    labelled = capacity_from_ksm(
        allocatable,
        [{"node": "n1", "label_nvidia_com_mig_strategy": "mixed", "label_nvidia_com_gpu_product": "X"}],
    )
    assert labelled.notes == ()
    assert labelled.sharing_strategy("X") is SharingStrategy.MIG_MIXED


def test_capacity_from_a_file_keeps_only_the_node_series(tmp_path: Path) -> None:
    path = tmp_path / "dump.om"
    path.write_text(
        "# TYPE kube_node_status_allocatable gauge\n"
        'kube_node_status_allocatable{node="n1",resource="nvidia_com_gpu",unit="integer"} 8 100\n'
        'kube_node_status_allocatable{node="n1",resource="cpu",unit="core"} 64 100\n'
        "# TYPE kube_node_labels gauge\n"
        'kube_node_labels{node="n1",label_nvidia_com_gpu_sharing_strategy="time-slicing",'
        'label_nvidia_com_gpu_replicas="4"} 1 100\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 5 100\n'
        "# EOF\n"
    )
    capacity = capacity_from_file(path)
    assert capacity.source == "kube-state-metrics"
    assert capacity.pools[0].sharing_strategy == "time-slicing" and capacity.pools[0].replicas == 4
    assert capacity.sharing_strategy() is SharingStrategy.TIME_SLICING_NO_RENAME  # shares stay nvidia.com/gpu


def test_pod_labels_without_an_allowlist_are_said() -> None:
    from gpu_rightsizer.adapters.openmetrics import Inventory
    from gpu_rightsizer.model import metric_names as mn

    bare = Inventory()
    bare.add(mn.KSM_POD_LABELS, {"namespace": "ml", "pod": "p", "uid": "u"}, 1.0)
    assert any("metricLabelsAllowlist" in note and "pods=[" in note for note in bare.notes())
    labelled = Inventory()
    labelled.add(
        mn.KSM_POD_LABELS, {"namespace": "ml", "pod": "p", mn.POD_LABEL_WORKLOAD_TYPE: "training"}, 1.0
    )
    assert labelled.notes() == []


def test_many_gpu_namespaces_do_not_blow_up_the_query() -> None:
    from gpu_rightsizer.adapters.prometheus import only_gpu_pods

    few = only_gpu_pods(lambda o: "container_cpu_usage_seconds_total", ["a", "b"])("")
    many = only_gpu_pods(
        lambda o: "container_cpu_usage_seconds_total", [f"team-{i:03d}" for i in range(200)]
    )("")
    assert 'namespace=~"a|b"' in few
    assert "namespace=~" not in many and "and on (namespace, pod)" in many  # the join still filters


def _run_config(*argv: str) -> OperatorConfig:
    """The configuration `run` parses from these flags (and the environment)."""
    parser = argparse.ArgumentParser()
    run_command.add_arguments(parser)
    return OperatorConfig.from_args(parser.parse_args(["--prometheus-url", "http://p:9090", *argv]))


@pytest.mark.parametrize(("given", "compressed"), [("gzip", True), ("GZIP", True), ("none", False)])
def test_answer_compression_is_chosen_by_flag_or_environment(
    monkeypatch: pytest.MonkeyPatch, given: str, compressed: bool
) -> None:
    assert source_for(_run_config("--prometheus-compression", given)).config.compressed_answers is compressed
    monkeypatch.setenv("GPURS_PROMETHEUS_COMPRESSION", given)
    assert source_for(_run_config()).config.compressed_answers is compressed


def test_an_unknown_answer_compression_is_refused_with_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPURS_PROMETHEUS_COMPRESSION", "brotli")
    with pytest.raises(CompressionError, match="one of none, gzip, not 'brotli'"):
        _run_config()
