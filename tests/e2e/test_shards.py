"""Horizontal shards on the real local cluster: recommenders run as operator processes with their
shard and total as flags (KWOK runs no pods of the chart's StatefulSet), against a real Prometheus.

With 2 shards every workload's status is written by exactly one of them, its owner (managedFields
name the shard that wrote); after a resize to 3, every workload is analysed again by its new owner,
and no status ever grows older than one window in between."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_rightsizer.model.shards import shard_of_namespace
from gpu_rightsizer.testcluster.prometheus import free_port
from tests.e2e.conftest import Background, Kube, _wait_http, start_background, unique_name
from tests.e2e.workloads import gpu_deployment

WINDOW_SECONDS = 120
RUN = ("--window", f"{WINDOW_SECONDS}s", "--interval", "3s", "--role", "recommender")
SHARD_MANAGER = "gpu-rightsizer-shard-"


class Shards:
    """Recommender processes, one per shard, started together and stopped together."""

    def __init__(self, kube: Kube, prometheus: str, workdir: Path) -> None:
        self.kube, self.prometheus, self.workdir = kube, prometheus, workdir
        self.running: list[Background] = []

    def start(self, total: int) -> list[Background]:
        started = []
        for shard in range(total):
            health, metrics_port = free_port(), free_port()
            background = start_background(
                [sys.executable, "-m", "gpu_rightsizer", "run", "--prometheus-url", self.prometheus, *RUN,
                 "--shard", str(shard), "--total-shards", str(total), "--metrics-address", "127.0.0.1",
                 "--metrics-port", str(metrics_port), "--liveness", f"http://127.0.0.1:{health}/healthz"],
                self.workdir / f"shard-{shard}-of-{total}.log",
                env={"KUBECONFIG": str(self.kube.kubeconfig)},
            )  # fmt: skip
            background.url = f"http://127.0.0.1:{health}/healthz"
            started.append(background)
        self.running.extend(started)
        for background in started:
            try:
                _wait_http(background.url, timeout=90, process=background.process)
            except RuntimeError as error:
                pytest.fail(f"{error}; shard output:\n{background.output()[-4000:]}")
        return started

    def stop(self) -> None:
        for background in self.running:
            background.process.terminate()
        for background in self.running:
            background.stop()
        self.running.clear()

    def check_running(self) -> None:
        for background in self.running:
            if background.process.poll() is not None:
                pytest.fail(f"a shard exited:\n{background.output()[-4000:]}")


@pytest.fixture
def shards(kube: Kube, live_metrics: str, tmp_path: Path) -> Iterator[Shards]:
    running = Shards(kube, live_metrics, tmp_path)
    try:
        yield running
    finally:
        running.stop()


def statuses(kube: Kube, namespaces: set[str]) -> dict[str, dict[str, Any]]:
    """Namespace -> the one recommendation there (the test makes one workload per namespace)."""
    from kubernetes import client

    listed = client.CustomObjectsApi(kube.api).list_cluster_custom_object(
        "gpurightsizer.io", "v1alpha1", "gpurecommendations"
    )
    return {
        item["metadata"]["namespace"]: item
        for item in listed["items"]
        if item["metadata"]["namespace"] in namespaces
    }


def status_writers(recommendation: dict[str, Any]) -> list[tuple[str, str]]:
    """(shard field manager, time) of every status write managedFields remember, newest last."""
    entries = [
        (entry["manager"], entry.get("time", ""))
        for entry in recommendation["metadata"].get("managedFields") or []
        if entry.get("subresource") == "status" and entry["manager"].startswith(SHARD_MANAGER)
    ]
    return sorted(entries, key=lambda entry: entry[1])


def window_end(recommendation: dict[str, Any]) -> datetime | None:
    end = ((recommendation.get("status") or {}).get("window") or {}).get("end")
    return datetime.fromisoformat(end.replace("Z", "+00:00")) if end else None


def namespaces_for_both_layouts(kube: Kube, label: dict[str, str]) -> list[str]:
    """Five namespaces such that both shards of 2 and all three of 3 own one, and at least one changes
    owner from 2 to 3. The owner is a hash of the name, so names are drawn until five of them do, and
    only those are made (twelve names made at random missed a shard of three about once in 40 runs)."""
    for _ in range(1000):
        names = [unique_name("shard") for _ in range(5)]
        two = {shard_of_namespace(n, 2) for n in names}
        three = {shard_of_namespace(n, 3) for n in names}
        if (
            two == {0, 1}
            and three == {0, 1, 2}
            and any(shard_of_namespace(n, 2) != shard_of_namespace(n, 3) for n in names)
        ):
            return [kube.create_namespace("shard", labels=label, name=name) for name in names]
    pytest.fail("no five namespace names cover both layouts in 1000 draws")


@pytest.fixture
def shard_policy(kube: Kube) -> Iterator[str]:
    """A policy over this test's namespaces only (their label), deleted after: policies are cluster-wide,
    and a left-over one would show as an overlap in later tests' policy statuses."""
    name = f"shards-t{int(time.time())}"
    yield name
    kube.kubectl("delete", "gpurightsizingpolicy", name, "--ignore-not-found", check=False)


def test_two_shards_write_disjoint_halves_and_a_resize_to_three_loses_no_window(
    kube: Kube, shards: Shards, shard_policy: str
) -> None:
    label = {"gpurightsizer.io/shards-test": shard_policy}
    namespaces = namespaces_for_both_layouts(kube, label)
    kube.kubectl("apply", "-f", "-", input_text=yaml.safe_dump({
        "apiVersion": "gpurightsizer.io/v1alpha1", "kind": "GPURightsizingPolicy",
        "metadata": {"name": shard_policy},
        # maxStaleness 1m: an unchanged status is written again within 30 s, so its window end shows
        # how long ago it was analysed
        "spec": {"mode": "Recommend", "namespaceSelector": {"matchLabels": label},
                 "safety": {"maxStaleness": "1m"}},
    }))  # fmt: skip
    for namespace in namespaces:
        kube.kubectl("create", "-f", "-", input_text=yaml.safe_dump(gpu_deployment("trainer", namespace)))
    wanted = set(namespaces)

    shards.start(2)

    def all_analysed(owners: int) -> dict[str, dict[str, Any]] | None:
        shards.check_running()
        found = statuses(kube, wanted)
        if set(found) != wanted:
            return None
        for namespace, recommendation in found.items():
            writers = status_writers(recommendation)
            owner = f"{SHARD_MANAGER}{shard_of_namespace(namespace, owners)}"
            if window_end(recommendation) is None or not writers or writers[-1][0] != owner:
                return None
        return found

    found = kube.wait_for(lambda: all_analysed(2), timeout=180, what="every workload analysed by 2 shards")
    for namespace, recommendation in found.items():
        writers = {manager for manager, _ in status_writers(recommendation)}
        assert writers == {f"{SHARD_MANAGER}{shard_of_namespace(namespace, 2)}"}, (namespace, writers)

    def matched_workloads() -> int | None:
        # the policy's status is written after the cycle's recommendations, so it may trail them
        return (kube.get_json("gpurightsizingpolicy", shard_policy).get("status") or {}).get(
            "matchedWorkloads"
        )

    kube.wait_for(
        lambda: matched_workloads() == len(namespaces),
        timeout=60,
        what="the policy's status to count every workload",
    )  # shard 0 counts both halves

    # resize: the two stop, three start (as a StatefulSet rolls its pods with the new total)
    ages: dict[str, float] = {}

    def record_ages() -> None:
        now = datetime.now(UTC)
        for namespace, recommendation in statuses(kube, wanted).items():
            end = window_end(recommendation)
            assert end is not None
            ages[namespace] = max(ages.get(namespace, 0.0), (now - end).total_seconds())

    record_ages()
    shards.stop()
    record_ages()
    shards.start(3)
    deadline = time.monotonic() + 180
    done = None
    while time.monotonic() < deadline and done is None:
        record_ages()
        done = all_analysed(3)
        time.sleep(1)
    assert done is not None, f"not every workload was analysed by its owner of 3 in time: {ages}"
    record_ages()
    worst = max(ages.values())
    print(f"oldest status across the resize: {worst:.0f} s (window {WINDOW_SECONDS} s)")
    assert worst <= WINDOW_SECONDS, ages
    for namespace, recommendation in done.items():
        newest = status_writers(recommendation)[-1][0]
        assert newest == f"{SHARD_MANAGER}{shard_of_namespace(namespace, 3)}"
