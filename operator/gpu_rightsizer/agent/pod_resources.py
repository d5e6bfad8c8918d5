"""GPU → pod through the kubelet's pod-resources API, as dcgm-exporter maps them.

The kubelet serves `v1.PodResourcesLister/List` on a unix socket
(`/var/lib/kubelet/pod-resources/kubelet.sock`): for every pod of the node, its containers and the device
IDs the device plugin gave each of them. The NVIDIA device plugin's IDs are GPU UUIDs (`GPU-…`), MIG
device UUIDs (`MIG-…`), or `GPU-…::<n>` for the n-th replica of a shared GPU (time-slicing, MPS). So the
agent names the pod of every GPU without the host's PID namespace and without the API server; per-process
figures (several pods on one GPU) still need hostPID (`cgroups.PidPodMapper`), the fallback.

Transport is grpcio (the reference gRPC implementation; HTTP/2 framing is not something to write by
hand). The three response messages are decoded here from the protobuf wire format (field numbers from
k8s.io/kubelet/pkg/apis/podresources/v1/api.proto), which spares a protobuf runtime and generated code.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_rightsizer.agent.cgroups import PodIdentity
from gpu_rightsizer.agent.sampler import DeviceSnapshot

log = logging.getLogger(__name__)

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
LIST_METHOD = "/v1.PodResourcesLister/List"
#: Resources of the NVIDIA device plugin (dcgm-exporter reads the same: nvidia.com/gpu, nvidia.com/mig-*).
NVIDIA_PREFIX = "nvidia.com/"
_SHARED_SEPARATOR = "::"


class WireError(ValueError):
    """Bytes that are not the protobuf message expected."""


# --- protobuf wire format (https://protobuf.dev/programming-guides/encoding/) --------------------------
def _varint(data: bytes, index: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if index >= len(data):
            raise WireError("truncated varint")
        byte = data[index]
        index += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, index
        shift += 7
        if shift > 63:
            raise WireError("varint longer than 10 bytes")


def fields(data: bytes) -> Iterator[tuple[int, int, bytes | int]]:
    """(field number, wire type, value) of each field of one message; unknown types are skipped over."""
    index = 0
    while index < len(data):
        key, index = _varint(data, index)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, index = _varint(data, index)
            yield number, wire, value
        elif wire == 2:
            length, index = _varint(data, index)
            if index + length > len(data):
                raise WireError("truncated length-delimited field")
            yield number, wire, data[index : index + length]
            index += length
        elif wire == 1:
            index += 8
        elif wire == 5:
            index += 4
        else:
            raise WireError(f"unsupported wire type {wire}")
        if index > len(data):
            raise WireError("truncated fixed-size field")


def _text(value: bytes | int) -> str:
    if not isinstance(value, bytes):
        raise WireError("a string field holds a number")
    return value.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class ContainerDevices:
    """Devices of one resource given to one container."""

    resource_name: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True)
class ContainerResources:
    name: str
    devices: tuple[ContainerDevices, ...]


@dataclass(frozen=True)
class PodResources:
    name: str
    namespace: str
    containers: tuple[ContainerResources, ...]


def _container_devices(data: bytes) -> ContainerDevices:
    resource, ids = "", []
    for number, wire, value in fields(data):
        if number == 1 and wire == 2:  # resource_name
            resource = _text(value)
        elif number == 2 and wire == 2:  # repeated device_ids
            ids.append(_text(value))
    return ContainerDevices(resource, tuple(ids))


def _container(data: bytes) -> ContainerResources:
    name, devices = "", []
    for number, wire, value in fields(data):
        if number == 1 and wire == 2:  # name
            name = _text(value)
        elif number == 2 and wire == 2 and isinstance(value, bytes):  # repeated ContainerDevices devices
            devices.append(_container_devices(value))
    return ContainerResources(name, tuple(devices))


def _pod(data: bytes) -> PodResources:
    name, namespace, containers = "", "", []
    for number, wire, value in fields(data):
        if number == 1 and wire == 2:
            name = _text(value)
        elif number == 2 and wire == 2:
            namespace = _text(value)
        elif number == 3 and wire == 2 and isinstance(value, bytes):  # repeated ContainerResources
            containers.append(_container(value))
    return PodResources(name, namespace, tuple(containers))


def decode_list_response(data: bytes) -> list[PodResources]:
    """`ListPodResourcesResponse` → its pods (field 1, `repeated PodResources pod_resources`)."""
    return [
        _pod(value)
        for number, wire, value in fields(data)
        if number == 1 and wire == 2 and isinstance(value, bytes)
    ]


# --- client ---------------------------------------------------------------------------------------------
Lister = Callable[[], list[PodResources]]


def grpc_lister(socket: Path, timeout_seconds: float = 5.0) -> Lister:
    """A `List` call on the kubelet's socket (one channel, reused; grpcio reconnects by itself)."""
    import grpc  # type: ignore[import-untyped]

    channel = grpc.insecure_channel(f"unix://{socket}")
    call = channel.unary_unary(
        LIST_METHOD, request_serializer=lambda _request: b"", response_deserializer=decode_list_response
    )

    def list_pods() -> list[PodResources]:
        try:
            result: list[PodResources] = call(None, timeout=timeout_seconds)
        except grpc.RpcError as error:
            raise OSError(
                f"pod-resources List on {socket} failed: {error.code()} {error.details()}"
            ) from error
        return result

    return list_pods


def device_key(device_id: str) -> tuple[str, str | None]:
    """(GPU or MIG UUID, shared replica) of a device plugin ID: 'GPU-x::3' → ('GPU-x', '3')."""
    uuid, separator, replica = device_id.partition(_SHARED_SEPARATOR)
    return uuid, (replica if separator else None)


@dataclass(frozen=True)
class Assignment:
    """One container holding one device (a shared GPU has one per replica handed out)."""

    identity: PodIdentity
    resource_name: str
    replica: str | None


class PodResourcesDirectory:
    """Device UUID → the containers the kubelet gave it to, refreshed at most every `min_refresh_seconds`.

    In the agent a background thread refreshes it (`start`), so a slow kubelet never delays a scrape or a
    sampling tick; without the thread, a lookup refreshes it first.
    """

    def __init__(
        self,
        lister: Lister,
        min_refresh_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._list = lister
        self._min_refresh = min_refresh_seconds
        self._clock = clock
        self._last: float | None = None
        self._by_device: dict[str, list[Assignment]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.available = False

    def start(self, stop: threading.Event) -> threading.Thread:
        """Refresh every `min_refresh_seconds` in a daemon thread until `stop` is set."""

        def loop() -> None:
            while not stop.is_set():
                self.refresh()
                stop.wait(self._min_refresh)

        self._thread = threading.Thread(target=loop, name="pod-resources", daemon=True)
        self._thread.start()
        return self._thread

    def refresh(self) -> None:
        """Ask the kubelet again, unless it was asked less than `min_refresh_seconds` ago."""
        now = self._clock()
        if self._last is not None and now - self._last < self._min_refresh:
            return
        self._last = now
        try:
            pods = self._list()
        except (OSError, WireError) as error:  # the kubelet restarting must not stop the exporter
            if self.available:
                log.warning("%s; keeping the last device map", error)
            else:
                log.debug("%s", error)
            return
        table: dict[str, list[Assignment]] = {}
        for pod in pods:
            for container in pod.containers:
                for devices in container.devices:
                    if not devices.resource_name.startswith(NVIDIA_PREFIX):
                        continue
                    for device_id in devices.device_ids:
                        uuid, replica = device_key(device_id)
                        identity = PodIdentity(
                            pod_uid="", namespace=pod.namespace, pod=pod.name, container=container.name
                        )
                        table.setdefault(uuid, []).append(
                            Assignment(identity, devices.resource_name, replica)
                        )
        with self._lock:
            self._by_device = table
        self.available = True

    def device_pods(self, device: DeviceSnapshot) -> list[tuple[PodIdentity, str | None]]:
        """`exporter.DevicePods`: a MIG slice by its MIG UUID, a whole GPU by its UUID."""
        uuid = device.mig_uuid if device.gpu_instance_id is not None else device.uuid
        return [(a.identity, a.replica) for a in self.pods_of(uuid)]

    def pods_of(self, *uuids: str | None) -> list[Assignment]:
        """Containers holding the device known by any of `uuids` (a MIG slice: its MIG UUID first)."""
        if self._thread is None:
            self.refresh()
        with self._lock:
            table = self._by_device
        for uuid in uuids:
            if uuid and uuid in table:
                return list(table[uuid])
        return []


def open_directory(socket: Path, **kwargs: Any) -> PodResourcesDirectory:
    """A directory on the kubelet's socket."""
    return PodResourcesDirectory(grpc_lister(socket), **kwargs)
