"""GPUs belong to the pods that request them, never to the exporter's (or agent's) own pod.

A ServiceMonitor/PodMonitor scrape adds the exporter pod's `namespace`/`pod` to series that carry none
(idle GPUs, dcgm-exporter's device-level copies), so those series look like the exporter's devices.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from tests.unit.signals.test_prometheus_adapter import EMPTY_VECTOR, ONE, FakePrometheus

from gpu_rightsizer.adapters.openmetrics import read_openmetrics
from gpu_rightsizer.adapters.prometheus import PrometheusConfig, PrometheusSource

T0 = 1_767_225_600
EXPORTER = 'namespace="gpu-operator",pod="nvidia-dcgm-exporter-abcde"'
TRAINER = 'namespace="ml",pod="trainer-0"'


def _gpu(pod_labels: str, uuid: str, value: float) -> list[str]:
    return [
        f'DCGM_FI_DEV_GPU_UTIL{{Hostname="n1",UUID="{uuid}",gpu="0",modelName="NVIDIA H100 80GB HBM3",'
        f"{pod_labels}}} {value} {T0 + 60 * i}"
        for i in range(40)
    ]


def _ksm(pod_labels: str, owner: str, name: str, gpu: bool) -> list[str]:
    lines = [
        f'kube_pod_owner{{{pod_labels},owner_kind="{owner}",owner_name="{name}",owner_is_controller="true"}} 1 {T0}',
        f'kube_pod_info{{{pod_labels},node="n1"}} 1 {T0}',
    ]
    if gpu:
        lines.append(
            f'kube_pod_container_resource_requests{{{pod_labels},container="main",resource="nvidia_com_gpu",'
            f'unit="integer"}} 1 {T0}'
        )
    return lines


def test_an_unassigned_gpu_scraped_through_the_exporter_pod_is_no_workload(tmp_path: Path) -> None:
    text = "\n".join(
        [
            "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
            *_gpu(EXPORTER, "GPU-idle", 0.0),  # an idle, unassigned GPU: the scrape named the exporter
            *_gpu(TRAINER, "GPU-busy", 70.0),
            *_ksm(EXPORTER, "DaemonSet", "nvidia-dcgm-exporter", gpu=False),
            *_ksm(TRAINER, "StatefulSet", "trainer", gpu=True),
        ]
    )
    path = tmp_path / "scrape.om"  # OpenMetrics: timestamps in seconds
    path.write_text(text + "\n# EOF\n")
    windows = read_openmetrics(path, window_seconds=3600, at=datetime.fromtimestamp(T0 + 2400, tz=UTC))
    assert [w.workload.key for w in windows] == ["ml/StatefulSet/trainer"]
    assert [g.uuid for p in windows[0].pods for g in p.gpus] == ["GPU-busy"]


def _stat_rows(labels: dict[str, str], value: float) -> list[dict[str, object]]:
    stats = ("mean", "p05", "p50", "p95", "p99", "max", "min", "count", "trend", "absstep", "active")
    return [
        {"metric": {**labels, "stat": s}, "value": [T0, str(40 if s == "count" else value)]} for s in stats
    ]


def _answers(endpoint: str, query: str, _headers: dict[str, str]) -> tuple[int, bytes]:
    def vector(rows: list[dict[str, object]]) -> tuple[int, bytes]:
        return 200, json.dumps(
            {"status": "success", "data": {"resultType": "vector", "result": rows}}
        ).encode()

    device = {"hostname": "n1", "UUID": "GPU-idle", "gpu": "0", "modelName": "NVIDIA H100 80GB HBM3"}
    if query == "vector(1)":
        return 200, json.dumps(ONE).encode()
    if endpoint == "query_range":
        return 200, json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode()
    if "DCGM_FI_DEV_GPU_UTIL" in query and query.startswith("label_replace(avg_over_time"):
        return vector(
            _stat_rows({**device, "namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-abcde"}, 0.0)
            + _stat_rows({**device, "UUID": "GPU-busy", "namespace": "ml", "pod": "trainer-0"}, 70.0)
        )
    owners = {
        ("gpu-operator", "nvidia-dcgm-exporter-abcde"): ("DaemonSet", "nvidia-dcgm-exporter"),
        ("ml", "trainer-0"): ("StatefulSet", "trainer"),
    }
    if query.startswith("last_over_time(kube_pod_owner["):
        return vector(
            [
                {"metric": {"namespace": ns, "pod": pod, "owner_kind": kind, "owner_name": name},
                 "value": [T0, "1"]}
                for (ns, pod), (kind, name) in owners.items()
            ]
        )  # fmt: skip
    if query.startswith("last_over_time(kube_pod_container_resource_requests["):
        labels = {"namespace": "ml", "pod": "trainer-0", "container": "main", "resource": "nvidia_com_gpu"}
        return vector([{"metric": labels, "value": [T0, "1"]}])
    return 200, json.dumps(EMPTY_VECTOR).encode()


def test_the_prometheus_path_gives_devices_only_to_requesting_pods() -> None:
    with FakePrometheus(_answers) as server:
        windows = PrometheusSource(PrometheusConfig(server.url)).read(
            window_seconds=2400, at=datetime.fromtimestamp(T0, tz=UTC)
        )
    assert [w.workload.key for w in windows] == ["ml/StatefulSet/trainer"]
    assert [g.uuid for p in windows[0].pods for g in p.gpus] == ["GPU-busy"]
