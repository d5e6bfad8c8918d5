"""The engine decides the same for a workload whether one recommender reads the fleet or 2 or 3 shards.

A shard reads the device families only for its own namespaces' pods (and the board-level series);
who else held a device comes from the cluster-wide GPU facts. The fleet is the scenario library
(every shape, both exporter label styles, MIG boards) three workloads to a namespace, plus the
hard library's time-sliced GPUs, each shared by pods of two namespaces that different shards own,
backfilled into a real Prometheus (promtool)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from tests.unit.signals.test_chunked_assembly import END, STEP, WINDOW, needs_prometheus, serving

from gpu_rightsizer.adapters.incremental import IncrementalSource
from gpu_rightsizer.adapters.prometheus import PrometheusConfig, PrometheusSource
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.model.observation import WorkloadWindow
from gpu_rightsizer.model.shards import ShardSlice, shard_of_namespace
from gpu_rightsizer.sim.library import hard_scenario_library, scenario_library
from gpu_rightsizer.sim.scenarios import Scenario

PER_NAMESPACE = 3


def split_namespaces() -> tuple[str, str]:
    """Two namespaces that different shards own under 2 and under 3 shards."""
    names = [f"shared-{i}" for i in range(50)]
    for first in names:
        for second in names:
            if all(shard_of_namespace(first, n) != shard_of_namespace(second, n) for n in (2, 3)):
                return first, second
    raise AssertionError("no two namespaces on different shards")


def fleet() -> list[Scenario]:
    library = list(scenario_library())
    scenarios = [
        base.with_(name=f"{base.name}-{i}", namespace=f"team-{i // PER_NAMESPACE:02d}")
        for i, base in enumerate(library)
    ]
    first, second = split_namespaces()
    time_sliced = [s for s in hard_scenario_library() if s.pods_per_gpu > 1]  # both label styles
    assert time_sliced
    for i, base in enumerate(time_sliced):
        for namespace in (first, second):  # one node: the pods of both namespaces on one device
            scenarios.append(base.with_(name=f"ts-{i}", namespace=namespace, node_prefix=f"ts-shared-{i}"))
    return scenarios


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving(tmp_path_factory.mktemp("shards"), fleet()) as url:
        yield url


def read(url: str, shard: ShardSlice) -> tuple[list[WorkloadWindow], int]:
    """Every window a shard assembles at END, and how many device series it read."""
    source = IncrementalSource(
        PrometheusSource(PrometheusConfig(url=url, trusted_gpu_targets=())),
        window_seconds=WINDOW,
        step_seconds=STEP,
    )
    at = datetime.fromtimestamp(END, tz=UTC)
    chunks = None
    while chunks is None:
        chunks = source.read_chunks(at=at, shard=shard, chunk_pods=50)
    windows = [window for chunk in chunks for window in chunk]
    devices = sum(1 for name, _ in source.reader.store.series if name.startswith("gpu:"))
    return windows, devices


def decided(windows: list[WorkloadWindow]) -> dict[str, tuple[str, str]]:
    """Workload → (its window, the engine's analysis), as JSON."""
    at = datetime.fromtimestamp(END, tz=UTC)
    return {
        window.workload.key: (window.model_dump_json(), analyze_window(window, now=at).model_dump_json())
        for window in windows
    }


@needs_prometheus
@pytest.mark.parametrize("total", [2, 3])
def test_a_workload_gets_the_same_window_and_diagnosis_from_one_process_and_from_shards(
    prometheus_url: str, total: int
) -> None:
    whole, whole_devices = read(prometheus_url, ShardSlice())
    expected = decided(whole)
    assert len(expected) >= len(fleet()) * 0.9  # the fleet's windows, not an empty read
    first, second = split_namespaces()
    shared = [w for w in whole if w.workload.namespace in (first, second)]
    assert shared and all(g.shared_by_pods == 4 for w in shared for p in w.pods for g in p.gpus)

    found: dict[str, tuple[str, str]] = {}
    for number in range(total):
        windows, devices = read(prometheus_url, ShardSlice(number, total))
        assert devices < whole_devices  # its own pods' device series, not the cluster's
        mine = decided(windows)
        assert not set(mine) & set(found)  # every workload decided by one shard
        found.update(mine)
    assert found.keys() == expected.keys()
    for workload, (window, analysis) in expected.items():
        assert found[workload][0] == window, workload
        assert found[workload][1] == analysis, workload
