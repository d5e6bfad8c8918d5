"""Windows assembled one chunk of namespaces at a time are the windows assembled all at once.

A small fleet of the scenario library (every shape), three workloads to a
namespace, is backfilled into a real Prometheus (promtool) and read by two incremental sources: one
assembling a pod's worth of namespaces per chunk, one assembling everything in one chunk. The GPU
facts (sharers, boards, identity) are cluster-wide in both; the pod statistics per chunk."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpu_rightsizer.adapters.incremental import DeferredSummary, IncrementalSource, summary_of
from gpu_rightsizer.adapters.prometheus import PrometheusConfig, PrometheusSource, namespace_chunks
from gpu_rightsizer.model.observation import SignalStats, WorkloadWindow
from gpu_rightsizer.model.shards import ShardSlice
from gpu_rightsizer.sim.backfill import write_openmetrics
from gpu_rightsizer.sim.library import scenario_library
from gpu_rightsizer.sim.scenarios import Scenario
from gpu_rightsizer.testcluster.prometheus import PrometheusServer

END = 1_767_225_600.0
WINDOW, STEP = 1800.0, 60.0
PER_NAMESPACE = 3

needs_prometheus = pytest.mark.skipif(
    not (shutil.which("prometheus") and shutil.which("promtool")),
    reason="prometheus/promtool not installed (Debian package `prometheus`)",
)


def fleet() -> list[Scenario]:
    """Each shape of the library once, `PER_NAMESPACE` to a namespace."""
    shapes = enumerate(scenario_library())
    return [
        base.with_(name=f"{base.name}-{i}", namespace=f"team-{i // PER_NAMESPACE:02d}") for i, base in shapes
    ]


@contextmanager
def serving(workdir: Path, scenarios: list[Scenario]) -> Iterator[str]:
    """A real Prometheus with the scenarios' window backfilled (and 10 minutes before it)."""
    history = workdir / "fleet.om"
    write_openmetrics(history, scenarios, END - WINDOW - 600, END, STEP)
    server = PrometheusServer(workdir=workdir / "prometheus", backfill=(history,))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving(tmp_path_factory.mktemp("chunks"), fleet()) as url:
        yield url


def source(url: str) -> IncrementalSource:
    return IncrementalSource(
        PrometheusSource(PrometheusConfig(url=url, trusted_gpu_targets=())),
        window_seconds=WINDOW,
        step_seconds=STEP,
    )


def read_to_completion(incremental: IncrementalSource, **options: object) -> Iterator[list[WorkloadWindow]]:
    """The source's chunks at END, read until the window is complete."""
    at = datetime.fromtimestamp(END, tz=UTC)
    chunks = None
    while chunks is None:
        chunks = incremental.read_chunks(at=at, **options)  # type: ignore[arg-type]
    return chunks


def as_json(chunk: list[WorkloadWindow]) -> list[str]:
    return sorted(window.model_dump_json() for window in chunk)


def chunks_of(url: str, **options: object) -> list[list[str]]:
    """Each chunk's windows as JSON, read to completion at END."""
    return [as_json(chunk) for chunk in read_to_completion(source(url), **options)]


def test_namespaces_are_packed_whole_into_chunks_of_about_the_size() -> None:
    chunks = list(namespace_chunks({"a": 2, "b": 2, "c": 5, "d": 1}, ["e"], 3))
    assert chunks == [frozenset({"a"}), frozenset({"b"}), frozenset({"c"}), frozenset({"d", "e"})]
    assert list(namespace_chunks({}, [], 3)) == []


@needs_prometheus
def test_windows_assembled_per_chunk_are_the_windows_assembled_at_once(prometheus_url: str) -> None:
    (whole,) = chunks_of(prometheus_url, chunk_pods=10**6)
    assert len(whole) >= len(fleet()) * 0.9  # the fleet's windows, not an empty read
    parts = chunks_of(prometheus_url, chunk_pods=1)
    assert len(parts) >= len(fleet()) // PER_NAMESPACE  # one namespace a chunk
    assert sorted(window for part in parts for window in part) == whole
    assert sum('"uuid":' in window for window in whole) >= len(whole) / 2  # with their GPUs' figures


@needs_prometheus
def test_a_shard_assembles_only_its_namespaces_and_the_same_windows(prometheus_url: str) -> None:
    (whole,) = chunks_of(prometheus_url, chunk_pods=10**6)
    shard = ShardSlice(1, 2)
    mine = [window for part in chunks_of(prometheus_url, chunk_pods=1, shard=shard) for window in part]
    expected = [w for w in whole if shard.owns(w.split('"namespace":"', 1)[1].split('"', 1)[0])]
    assert mine and sorted(mine) == sorted(expected)


@needs_prometheus
def test_device_statistics_are_worked_out_chunk_by_chunk_as_the_same_figures(
    prometheus_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The device families' statistics are deferred: the first chunk works out only its devices', the
    others come with their chunks, and the windows are those of statistics summarised at once."""
    resolved: list[DeferredSummary] = []
    work_out = DeferredSummary.__call__

    def counted(deferred: DeferredSummary) -> SignalStats | None:
        resolved.append(deferred)
        return work_out(deferred)

    monkeypatch.setattr(DeferredSummary, "__call__", counted)
    chunks = read_to_completion(source(prometheus_url), chunk_pods=1)
    deferred = [as_json(next(chunks))]
    with_first = len(resolved)
    deferred += [as_json(chunk) for chunk in chunks]
    assert 0 < with_first < len(resolved) / 3  # a chunk is about a tenth of the fleet

    monkeypatch.setattr("gpu_rightsizer.adapters.incremental.DeferredSummary", summary_of)  # at once
    at_once = [as_json(chunk) for chunk in read_to_completion(source(prometheus_url), chunk_pods=1)]
    assert deferred == at_once
    assert sum('"uuid":' in window for chunk in deferred for window in chunk) >= len(fleet()) / 2
