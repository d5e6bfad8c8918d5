"""Horizontal shards of the recommender: who owns a namespace, how a process learns its shard, and
that a shard's cycle reads, analyses and writes only its own namespaces while leaving every other
status as it is (team-a and team-c hash to shard 0 of 2, team-b to shard 1)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.unit.operator.test_cycle_scaling import ListingKube, stored_status
from tests.unit.operator.test_cycle_windows import NOW, cluster, memo_for, policy

from gpu_rightsizer.adapters.incremental import Family, gpu_pods
from gpu_rightsizer.adapters.windows import UnheldMaxima
from gpu_rightsizer.config import OperatorConfig, ShardError, shard_of
from gpu_rightsizer.logic.floors import UnheldGPU
from gpu_rightsizer.model.observation import Signal
from gpu_rightsizer.model.shards import ShardSlice, fnv1a_64, shard_of_namespace
from gpu_rightsizer.recommender import cycle


def test_fnv1a_is_the_64_bit_hash_kube_state_metrics_shards_with() -> None:
    assert fnv1a_64("") == 0xCBF29CE484222325
    assert fnv1a_64("a") == 0xAF63DC4C8601EC8C
    assert fnv1a_64("foobar") == 0x85944171F73967E8


def test_every_namespace_has_exactly_one_owner_and_the_owners_spread() -> None:
    namespaces = [f"team-{i}" for i in range(300)]
    for total in (1, 2, 3, 5):
        owners = [shard_of_namespace(namespace, total) for namespace in namespaces]
        assert all(0 <= owner < total for owner in owners)
        counts = [owners.count(shard) for shard in range(total)]
        assert min(counts) > 300 / total * 0.7, counts  # no shard starves
        for namespace, owner in zip(namespaces, owners, strict=True):
            assert [ShardSlice(s, total).owns(namespace) for s in range(total)].count(True) == 1
            assert ShardSlice(owner, total).owns(namespace)


def args(**values: Any) -> argparse.Namespace:
    return argparse.Namespace(**{"shard": None, "total_shards": None, **values})


def test_the_shard_comes_from_flags_then_environment_then_the_statefulset_pod_name() -> None:
    assert shard_of(args(shard="1", total_shards="3"), {}) == (1, 3)
    assert shard_of(args(), {"GPURS_SHARD": "2", "GPURS_TOTAL_SHARDS": "4"}) == (2, 4)
    assert shard_of(args(), {"GPURS_TOTAL_SHARDS": "4", "POD_NAME": "gpurs-recommender-3"}) == (3, 4)
    assert shard_of(args(), {"POD_NAME": "gpurs-recommender-3"}) == (0, 1)  # unsharded: no ordinal read


@pytest.mark.parametrize(
    ("values", "env", "message"),
    [
        ({"shard": "3", "total_shards": "3"}, {}, "must be in 0..2"),
        ({"shard": "-1", "total_shards": "2"}, {}, "must be in 0..1"),
        ({"total_shards": "0"}, {}, "must be in 0..-1"),
        ({"total_shards": "two"}, {}, "whole numbers"),
        ({"total_shards": "2"}, {"POD_NAME": "recommender-abc12"}, "needs --shard"),
    ],
)
def test_a_shard_setting_that_cannot_be_used_is_refused(
    values: dict[str, str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ShardError, match=message):
        shard_of(args(**values), env)
    with pytest.raises(ValueError, match="must be in"):
        OperatorConfig(shard=2, total_shards=2)


def test_a_shards_pod_queries_join_only_its_namespaces() -> None:
    family = Family(
        name="pod:cpu", expression="rate(x[1m])", signal=Signal.CPU_USAGE_CORES, keys=(), per_pod=True
    )
    query = family.query(None, ("team-c", "team-a"))
    assert 'namespace=~"team\\\\-a|team\\\\-c"' in query  # sorted literals (RE2 takes "\\-")
    assert query.endswith(gpu_pods(None, ("team-a", "team-c")))
    assert "namespace=~" not in family.query(None)
    cadvisor = Family(
        name="pod:cpu",
        expression="sum by (namespace, pod) (rate(container_cpu_usage_seconds_total[1m]))",
        signal=Signal.CPU_USAGE_CORES,
        keys=(),
        per_pod=True,
    )  # the shard's containers are selected, not only joined
    assert 'container_cpu_usage_seconds_total{namespace=~"team\\\\-a"}[1m]' in cadvisor.query(
        None, ("team-a",)
    )
    device = Family(
        name="gpu:x",
        expression="max by (pod) (DCGM_FI_DEV_GPU_UTIL)",
        signal=Signal.GR_ENGINE_ACTIVE,
        keys=(),
    )
    assert device.query(None) == device.expression  # unsharded: cluster-wide
    held = device.query(None, ("team-a",))
    # the shard's pods, whichever label names their namespace, and the boards no pod label names
    assert 'DCGM_FI_DEV_GPU_UTIL{namespace=~"team\\\\-a",exported_namespace="",pod_namespace=""}' in held
    assert 'DCGM_FI_DEV_GPU_UTIL{exported_namespace=~"team\\\\-a"}' in held
    assert 'DCGM_FI_DEV_GPU_UTIL{pod="",exported_pod="",pod_name=""}' in held
    assert held.count("DCGM_FI_DEV_GPU_UTIL{") == 5 and "DCGM_FI_DEV_GPU_UTIL)" not in held
    assert "namespace=~" not in device.query(None, ())  # no namespace of its own: the boards only
    assert 'namespace=~"a\\\\.b"' in gpu_pods(None, ("a.b",))  # a regex literal, escaped for PromQL


def sharded(shard: int, kube: ListingKube) -> Any:
    return memo_for(kube, shard=shard, total_shards=2)


def test_each_shard_writes_only_its_namespaces_and_leaves_the_others_as_they_are() -> None:
    kube = ListingKube(cluster(policy("a", "team-a"), policy("b", "team-b")))
    before = {key: dict(rec["status"]) for key, rec in kube.recommendations.items()}

    assert cycle.run_cycle(sharded(1, kube), now=NOW) == 1
    assert [key for key, _ in kube.status_patches] == ["team-b/Deployment/three"]
    for key in [("team-a", "one"), ("team-a", "two"), ("team-c", "solo")]:
        assert stored_status(kube, *key) == before[key]  # not blanked, not deleted
    assert kube.deleted == [] and kube.policy_patches == {}  # policy statuses: shard 0's alone

    assert cycle.run_cycle(sharded(0, kube), now=NOW) == 3
    written = [key for key, _ in kube.status_patches]
    assert sorted(written) == sorted(
        [
            "team-b/Deployment/three",
            "team-a/Deployment/one",
            "team-a/Deployment/two",
            "team-c/Deployment/solo",
        ]
    )
    assert len(written) == len(set(written))  # every workload written by exactly one shard
    # shard 0 counts every shard's workloads for the policies, not only its own
    assert kube.policy_patches["b"]["matchedWorkloads"] == 1
    assert kube.policy_patches["a"]["matchedWorkloads"] == 2


def test_a_shard_reads_its_slice_of_the_metrics() -> None:
    kube = ListingKube(cluster())
    memo = sharded(1, kube)
    cycle.run_cycle(memo, now=NOW)
    scopes = [scope for _, scope in memo.source.calls]  # type: ignore[union-attr]
    assert scopes and all(scope.shard == ShardSlice(1, 2) for scope in scopes)


def test_an_opted_out_workload_of_another_shard_is_not_removed_by_this_one() -> None:
    kube = ListingKube(cluster(annotations={"gpurightsizer.io/ignore": "true"}))
    cycle.run_cycle(sharded(1, kube), now=NOW)
    assert kube.deleted == []  # team-c is shard 0's
    cycle.run_cycle(sharded(0, kube), now=NOW)
    assert kube.deleted == ["team-c/Deployment/solo"]


class UnheldAnswers:
    """`read_unheld_gpus` of a Prometheus source: answers in turn, and the look-backs asked for."""

    def __init__(self, *answers: list[UnheldGPU]) -> None:
        self.answers = list(answers)
        self.lookbacks: list[float] = []

    def read_unheld_gpus(self, at: datetime, window_seconds: float) -> list[UnheldGPU]:
        self.lookbacks.append(window_seconds)
        return self.answers.pop(0)


def test_the_unheld_gpus_maxima_are_read_back_to_the_previous_read_and_kept_for_a_window() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    answers = UnheldAnswers(
        [UnheldGPU("n1", "H200", 0.002, None)],
        [UnheldGPU("n1", "H200", 0.001, 5e6), UnheldGPU("n2", "L4", None, 1e6)],
        [UnheldGPU("n1", "H200", 0.0005, 1e6)],
        [UnheldGPU("n1", "H200", 0.0004, 2e6)],
    )
    maxima = UnheldMaxima()
    read = lambda minutes: sorted(  # noqa: E731
        maxima.read(answers, start + timedelta(minutes=minutes), 3600.0),  # type: ignore[arg-type]
        key=lambda gpu: gpu.node,
    )
    assert read(0) == [UnheldGPU("n1", "H200", 0.002, None)]
    assert read(1) == [UnheldGPU("n1", "H200", 0.002, 5e6), UnheldGPU("n2", "L4", None, 1e6)]
    assert read(45) == [UnheldGPU("n1", "H200", 0.002, 5e6), UnheldGPU("n2", "L4", None, 1e6)]
    assert answers.lookbacks == [3600.0, 60.0, 2640.0]  # the window once, then back to the last read
    assert read(62) == [UnheldGPU("n1", "H200", 0.0005, 2e6)]  # the reads ending before 0:02 are gone
    assert answers.lookbacks[-1] == 1020.0
