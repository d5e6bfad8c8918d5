"""GPU → pod through the kubelet's pod-resources API, over a real gRPC unix socket.

The server below answers `/v1.PodResourcesLister/List` with protobuf bytes written by an encoder that
follows the wire format independently of the decoder under test; one answer is also checked byte for byte.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]
import pytest

from gpu_rightsizer.agent.cgroups import PodIdentity
from gpu_rightsizer.agent.exporter import device_series
from gpu_rightsizer.agent.pod_resources import (
    LIST_METHOD,
    ContainerDevices,
    ContainerResources,
    PodResources,
    PodResourcesDirectory,
    decode_list_response,
    device_key,
    grpc_lister,
)
from gpu_rightsizer.agent.sampler import DeviceField, DeviceSnapshot, ProcessSample
from gpu_rightsizer.model import metric_names as mn


# --- an independent encoder (protobuf wire format: tag = field << 3 | type; type 2 = length-delimited) -----
def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _encode(pods: list[PodResources], cpu_ids: bool = True) -> bytes:
    out = b""
    for pod in pods:
        body = _field(1, pod.name.encode()) + _field(2, pod.namespace.encode())
        for container in pod.containers:
            inner = _field(1, container.name.encode())
            for devices in container.devices:
                dev = _field(1, devices.resource_name.encode())
                dev += b"".join(_field(2, d.encode()) for d in devices.device_ids)
                dev += _field(3, _field(1, _varint(0) + b""))  # TopologyInfo (ignored)
                inner += _field(2, dev)
            if cpu_ids:  # repeated int64 cpu_ids = 3, packed
                inner += _field(3, _varint(2) + _varint(3) + _varint(300))
            inner += _varint(6 << 3 | 0) + _varint(1)  # an unknown varint field
            body += _field(3, inner)
        out += _field(1, body)
    return out


def _pod(name: str, namespace: str, container: str, resource: str, *ids: str) -> PodResources:
    return PodResources(name, namespace, (ContainerResources(container, (ContainerDevices(resource, ids),)),))


PODS = [
    _pod("trainer-0", "ml", "main", "nvidia.com/gpu", "GPU-aaaa"),
    _pod("idle-nb", "lab", "notebook", "nvidia.com/gpu", "GPU-bbbb"),
    _pod("slice-0", "ml", "main", "nvidia.com/mig-1g.10gb.me", "MIG-cccc"),
    _pod("share-a", "web", "srv", "nvidia.com/gpu", "GPU-dddd::0"),
    _pod("share-b", "web", "srv", "nvidia.com/gpu", "GPU-dddd::1"),
    _pod("nic-user", "net", "main", "rdma/hca", "mlx5_0"),
]


def test_decoding_matches_hand_computed_bytes() -> None:
    golden = bytes.fromhex(
        "0a24"  # pod_resources, 36 bytes
        "0a0170" "12016e"  # name "p", namespace "n"
        "1a1c" "0a0163"  # containers, 28 bytes: name "c"
        "1217" "0a0e" + b"nvidia.com/gpu".hex() + "1205" + b"GPU-1".hex()  # devices
    )  # fmt: skip
    assert decode_list_response(golden) == [_pod("p", "n", "c", "nvidia.com/gpu", "GPU-1")]
    assert decode_list_response(_encode(PODS)) == PODS
    assert decode_list_response(b"") == []


def test_device_ids_of_shared_gpus_carry_the_replica() -> None:
    assert device_key("GPU-dddd::1") == ("GPU-dddd", "1")
    assert device_key("MIG-cccc") == ("MIG-cccc", None)


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """A gRPC server on a unix socket answering List like the kubelet."""
    state: dict[str, Any] = {"pods": PODS, "calls": 0, "fail": False}
    socket = tmp_path / "kubelet.sock"

    def list_pods(_request: bytes, context: grpc.ServicerContext) -> bytes:
        state["calls"] += 1
        if state["fail"]:
            context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet restarting")
        return _encode(state["pods"])

    handler = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister",
        {"List": grpc.unary_unary_rpc_method_handler(list_pods, lambda b: b, lambda b: b)},
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    try:
        yield socket, state
    finally:
        server.stop(grace=None)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _gpu(uuid: str, *, mig_uuid: str | None = None, pids: tuple[int, ...] = ()) -> DeviceSnapshot:
    return DeviceSnapshot(
        index=0,
        uuid=uuid,
        model_name="NVIDIA H100 80GB HBM3",
        gpu_instance_id=1 if mig_uuid else None,
        mig_profile="1g.10gb+me" if mig_uuid else None,
        mig_uuid=mig_uuid,
        values={DeviceField.FB_USED_MIB: 1000.0, DeviceField.GR_ENGINE_ACTIVE: 0.0},
        processes=[ProcessSample(pid, 500.0, 0.0) for pid in pids],
    )


def test_every_gpu_is_named_from_the_kubelet_without_processes(kubelet: tuple[Path, dict[str, Any]]) -> None:
    socket, state = kubelet
    clock = _Clock()
    directory = PodResourcesDirectory(grpc_lister(socket), min_refresh_seconds=10.0, clock=clock)
    no_pids: Any = lambda _pid: None  # noqa: E731 - no hostPID: processes are not visible

    (idle,) = device_series(_gpu("GPU-bbbb"), no_pids, "node-1", directory.device_pods)
    assert (idle.labels["namespace"], idle.labels["pod"], idle.labels["container"]) == (
        "lab",
        "idle-nb",
        "notebook",
    )
    assert "pod_uid" not in idle.labels and mn.VGPU_LABEL not in idle.labels

    (mig,) = device_series(_gpu("GPU-parent", mig_uuid="MIG-cccc"), no_pids, "node-1", directory.device_pods)
    assert mig.labels["pod"] == "slice-0" and mig.labels[mn.MIG_PROFILE_LABEL] == "1g.10gb+me"

    shared = device_series(_gpu("GPU-dddd"), no_pids, "node-1", directory.device_pods)
    assert sorted((s.labels["pod"], s.labels[mn.VGPU_LABEL]) for s in shared) == [
        ("share-a", "0"),
        ("share-b", "1"),
    ]
    assert all(s.values[DeviceField.FB_USED_MIB] == 1000.0 for s in shared)  # copies of the device

    (free,) = device_series(_gpu("GPU-ffff"), no_pids, "node-1", directory.device_pods)
    assert free.labels["pod"] == ""
    assert state["calls"] == 1  # one List per refresh interval, not per device


def test_shared_gpu_split_by_processes_where_they_are_visible(kubelet: tuple[Path, dict[str, Any]]) -> None:
    socket, _ = kubelet
    directory = PodResourcesDirectory(grpc_lister(socket))
    owners = {
        11: PodIdentity("uid-a", "web", "share-a", "srv"),
        12: PodIdentity("uid-b", "web", "share-b", "srv"),
    }
    series = device_series(_gpu("GPU-dddd", pids=(11, 12)), owners.get, "node-1", directory.device_pods)
    assert sorted(s.labels["pod"] for s in series) == ["share-a", "share-b"]
    assert all(s.values[DeviceField.FB_USED_MIB] == 500.0 for s in series)  # per-process, not the device


def test_a_kubelet_outage_keeps_the_last_map_and_never_raises(kubelet: tuple[Path, dict[str, Any]]) -> None:
    socket, state = kubelet
    clock = _Clock()
    directory = PodResourcesDirectory(
        grpc_lister(socket, timeout_seconds=2.0), min_refresh_seconds=10.0, clock=clock
    )
    assert [a.identity.pod for a in directory.pods_of("GPU-aaaa")] == ["trainer-0"]
    state["fail"] = True
    clock.now = 60.0
    assert [a.identity.pod for a in directory.pods_of("GPU-aaaa")] == ["trainer-0"]
    assert directory.available


def test_no_socket_means_no_assignments(tmp_path: Path) -> None:
    directory = PodResourcesDirectory(grpc_lister(tmp_path / "absent.sock", timeout_seconds=0.5))
    assert directory.pods_of("GPU-aaaa") == []
    assert not directory.available


def test_rpc_method_is_the_kubelets() -> None:
    assert LIST_METHOD == "/v1.PodResourcesLister/List"


def test_background_refresh_keeps_lookups_off_the_kubelet(kubelet: tuple[Path, dict[str, Any]]) -> None:
    socket, state = kubelet
    directory = PodResourcesDirectory(grpc_lister(socket), min_refresh_seconds=0.05)
    stop = threading.Event()
    thread = directory.start(stop)
    try:
        deadline = time.monotonic() + 5
        while not directory.available and time.monotonic() < deadline:
            time.sleep(0.01)
        calls = state["calls"]
        assert calls >= 1
        state["fail"] = True  # the kubelet hangs up: lookups still answer from the last map, at once
        started = time.monotonic()
        for _ in range(100):
            assert [a.identity.pod for a in directory.pods_of("GPU-aaaa")] == ["trainer-0"]
        assert time.monotonic() - started < 0.5
    finally:
        stop.set()
        thread.join(timeout=5)
    assert not thread.is_alive()
