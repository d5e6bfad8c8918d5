"""Live mode: pods read from the Kubernetes API become a /metrics endpoint that follows their resources."""

from __future__ import annotations

import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client import (
    V1Container,
    V1ContainerStatus,
    V1Node,
    V1NodeList,
    V1ObjectMeta,
    V1OwnerReference,
    V1Pod,
    V1PodList,
    V1PodSpec,
    V1PodStatus,
    V1ResourceRequirements,
)

from gpu_rightsizer.adapters.openmetrics import parse_text, windows_from_samples
from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.observation import Signal
from gpu_rightsizer.sim.live import parse_quantity, series_at, serve, simulated_pods

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _pod(
    name: str, scenario: str | None, cpu: str = "2", gpu: str = "nvidia.com/gpu", count: str = "1"
) -> V1Pod:
    annotations = {"sim.gpurightsizer.io/scenario": scenario} if scenario else {}
    return V1Pod(
        metadata=V1ObjectMeta(
            name=name,
            namespace="ml",
            annotations=annotations,
            labels={"pod-template-hash": "5d8f"},
            owner_references=[
                V1OwnerReference(
                    api_version="apps/v1", kind="ReplicaSet", name="trainer-5d8f", uid="u", controller=True
                )
            ],
            creation_timestamp=NOW - timedelta(hours=2),
        ),
        spec=V1PodSpec(
            node_name="gpu-node-1",
            containers=[
                V1Container(
                    name="main",
                    resources=V1ResourceRequirements(
                        requests={"cpu": "500m", "memory": "8Gi", gpu: count},
                        limits={"cpu": cpu, "memory": "16Gi", gpu: count},
                    ),
                )
            ],
        ),
        status=V1PodStatus(phase="Running", start_time=NOW - timedelta(hours=2)),
    )


def test_quantities() -> None:
    assert parse_quantity("500m") == 0.5
    assert parse_quantity("16Gi") == 16 * 1024**3
    assert parse_quantity("4") == 4.0
    assert parse_quantity("lots") is None
    assert parse_quantity(None) is None


def test_only_annotated_running_pods_are_simulated_with_their_actual_resources() -> None:
    pending = _pod("trainer-5d8f-c", "input-cpu-bound")
    assert pending.status is not None
    pending.status.phase = "Pending"
    pods = simulated_pods(
        [_pod("trainer-5d8f-a", "input-cpu-bound", cpu="3"), _pod("other", None), pending,
         _pod("trainer-5d8f-b", "no-such-shape")],
        {"gpu-node-1": "NVIDIA-A100-SXM4-80GB"},
    )  # fmt: skip
    assert [p.context.pod for p in pods] == ["trainer-5d8f-a"]
    sim = pods[0]
    assert (sim.scenario.kind, sim.scenario.name) == ("Deployment", "trainer")
    assert sim.context.cpu_limit == 3.0
    assert sim.context.memory_limit_bytes == 16 * 1024**3
    assert sim.scenario.gpu_model == "NVIDIA-A100-SXM4-80GB"
    assert sim.context.owner_name == "trainer-5d8f"


def test_raising_the_cpu_limit_raises_gpu_busy() -> None:
    def busy(cpu: str) -> float:
        pods = simulated_pods([_pod("trainer-5d8f-a", "input-cpu-bound", cpu=cpu)], {})
        values = [
            v
            for i in range(30)
            for name, _, v, _ in series_at(pods, NOW.timestamp() + 60 * i)
            if name == mn.DCGM_GR_ENGINE_ACTIVE
        ]
        return sum(values) / len(values)

    assert busy("32") > 2 * busy("2")


def test_an_in_place_resize_counts_only_once_the_pod_status_reports_it() -> None:
    """The spec says 8 cores after a resize; the status still reports 2 (pending, or Infeasible): the
    simulated trainer runs with 2. Once the status reports 8, it runs with 8."""

    def resized(reported_cpu: str) -> float | None:
        pod = _pod("trainer-5d8f-a", "input-cpu-bound", cpu="8")
        assert pod.status is not None
        pod.status.container_statuses = [
            V1ContainerStatus(
                name="main", image="x", image_id="", ready=True, restart_count=0,
                resources=V1ResourceRequirements(
                    requests={"cpu": "500m", "memory": "8Gi"}, limits={"cpu": reported_cpu, "memory": "16Gi"}
                ),
            )
        ]  # fmt: skip
        return simulated_pods([pod], {})[0].context.cpu_limit

    assert resized("2") == 2.0
    assert resized("8") == 8.0


def test_a_resized_pod_s_cpu_counter_goes_on_at_the_new_rate_without_a_jump() -> None:
    """A resize 50 s into the simulator's 60 s integration cell: the CPU counter goes on from its last
    value at the new rate (a real container's counter does); re-integrating the cell at the new rate
    would add ~150 CPU seconds at once, which a rate() over the resize reads as more cores than the
    pod has."""

    def cpu_total(cpu: str, at: float) -> float:
        pods = simulated_pods([_pod("trainer-5d8f-r", "input-cpu-bound", cpu=cpu)], {})
        return next(
            v
            for name, labels, v, _ in series_at(pods, at)
            if name == mn.CADVISOR_CPU_USAGE and labels.get("container") == "main"
        )

    start = (NOW - timedelta(hours=2)).timestamp()
    before = cpu_total("1", start + 3600 + 50)
    after = cpu_total("4", start + 3600 + 55)
    later = cpu_total("4", start + 3600 + 125)
    assert 0 < after - before <= 4 * 5 + 1e-6  # at most 4 cores over 5 s
    assert 3.0 * 70 < later - after <= 4 * 70 + 1e-6  # the new rate from then on


def test_mig_pods_get_their_slice() -> None:
    pods = simulated_pods([_pod("trainer-5d8f-a", "oversized", gpu="nvidia.com/mig-2g.20gb")], {})
    assert pods[0].scenario.mig_profile == "2g.20gb"
    names = {name for name, *_ in series_at(pods, NOW.timestamp())}
    assert mn.DCGM_GPU_UTIL not in names
    assert mn.DCGM_GR_ENGINE_ACTIVE in names


class FakeCoreApi:
    """The two list calls the exporter makes."""

    def __init__(self, pods: list[V1Pod]) -> None:
        self.pods = pods
        self.calls = 0

    def list_pod_for_all_namespaces(self, **_: Any) -> V1PodList:
        self.calls += 1
        return V1PodList(items=self.pods)

    def list_node(self, **_: Any) -> V1NodeList:
        return V1NodeList(items=[V1Node(metadata=V1ObjectMeta(name="gpu-node-1", labels={}))])


def test_http_endpoint_serves_series_the_openmetrics_source_can_read() -> None:
    api = FakeCoreApi([_pod("trainer-5d8f-a", "healthy"), _pod("trainer-5d8f-b", "healthy")])
    server = serve(api, 0)
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    finally:
        server.shutdown()
    assert api.calls == 1
    windows = windows_from_samples(parse_text(text, "scrape"), window_seconds=60, at=NOW)
    assert [w.workload.key for w in windows] == ["ml/Deployment/trainer"]
    window = windows[0]
    assert window.allocation.replicas == 2
    assert window.allocation.cpu_limit_cores == 2.0
    assert {p.name for p in window.pods} == {"trainer-5d8f-a", "trainer-5d8f-b"}
    assert all(Signal.GR_ENGINE_ACTIVE in g.stats for p in window.pods for g in p.gpus)
