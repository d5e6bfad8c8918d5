"""Turn NVML snapshots into dcgm-exporter-shaped Prometheus metrics, live or recorded.

Names and labels are dcgm-exporter's (`model/metric_names.py`), so Prometheus queries, the OpenMetrics
reader and the engine cannot tell this agent from dcgm-exporter. A field NVML does not report is not
exported at all (never a zero). Device series carry the pod that holds the GPU: from the kubelet's
pod-resources API (`pod_resources`) as dcgm-exporter finds it, else from the GPU's processes through
their cgroups (hostPID). When several pods share one GPU (time-slicing, MPS), each pod gets a copy with
a `vgpu` label, as dcgm-exporter does, and, where its processes are visible, its own memory and SM
utilisation summed from them instead of the device totals.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import Collector, CollectorRegistry

from gpu_rightsizer.agent.cgroups import PodIdentity
from gpu_rightsizer.agent.sampler import DeviceField, DeviceSnapshot, NodeSnapshot, NvmlSampler
from gpu_rightsizer.model import metric_names as mn

log = logging.getLogger(__name__)

#: Sampled field → exported dcgm-exporter name. Fields sampled but without a name in
#: `metric_names` (memory clock, PCIe link, ECC, energy, ...) are not exported.
EXPORTED_FIELDS: dict[DeviceField, tuple[str, str]] = {
    DeviceField.GR_ENGINE_ACTIVE: (mn.DCGM_GR_ENGINE_ACTIVE, "Ratio of time the graphics engine is active."),
    DeviceField.SM_ACTIVE: (mn.DCGM_SM_ACTIVE, "Ratio of cycles an SM has at least 1 warp assigned."),
    DeviceField.SM_OCCUPANCY: (mn.DCGM_SM_OCCUPANCY, "Ratio of warps resident to the theoretical maximum."),
    DeviceField.TENSOR_ACTIVE: (mn.DCGM_TENSOR_ACTIVE, "Ratio of cycles any tensor pipe is active."),
    DeviceField.FP32_ACTIVE: (mn.DCGM_FP32_ACTIVE, "Ratio of cycles the FP32 pipe is active."),
    DeviceField.FP16_ACTIVE: (mn.DCGM_FP16_ACTIVE, "Ratio of cycles the FP16 pipe is active."),
    DeviceField.DRAM_ACTIVE: (
        mn.DCGM_DRAM_ACTIVE,
        "Ratio of DRAM bandwidth used to the theoretical maximum.",
    ),
    DeviceField.PCIE_TX_BYTES_PER_S: (mn.DCGM_PCIE_TX_BYTES, "PCIe bytes per second sent by the GPU."),
    DeviceField.PCIE_RX_BYTES_PER_S: (mn.DCGM_PCIE_RX_BYTES, "PCIe bytes per second received by the GPU."),
    DeviceField.NVLINK_TX_BYTES_PER_S: (mn.DCGM_NVLINK_TX_BYTES, "NVLink bytes per second sent."),
    DeviceField.NVLINK_RX_BYTES_PER_S: (mn.DCGM_NVLINK_RX_BYTES, "NVLink bytes per second received."),
    DeviceField.GPU_UTIL_PERCENT: (mn.DCGM_GPU_UTIL, "GPU utilization (in %)."),
    DeviceField.FB_USED_MIB: (mn.DCGM_FB_USED, "Framebuffer memory used (in MiB)."),
    DeviceField.FB_FREE_MIB: (mn.DCGM_FB_FREE, "Framebuffer memory free (in MiB)."),
    DeviceField.FB_RESERVED_MIB: (mn.DCGM_FB_RESERVED, "Framebuffer memory reserved (in MiB)."),
    DeviceField.POWER_WATTS: (mn.DCGM_POWER_USAGE, "Power draw (in W)."),
    DeviceField.SM_CLOCK_MHZ: (mn.DCGM_SM_CLOCK, "SM clock frequency (in MHz)."),
    DeviceField.GPU_TEMP_C: (mn.DCGM_GPU_TEMP, "GPU temperature (in C)."),
    DeviceField.CLOCK_EVENT_REASONS: (mn.DCGM_CLOCKS_EVENT_REASONS, "Current clock event reasons (bitmask)."),
    DeviceField.XID_LAST: (mn.DCGM_XID_ERRORS, "Value of the last XID error encountered."),
}

AGENT_UP = "gpu_rightsizer_agent_up"
AGENT_NVML_ERRORS = "gpu_rightsizer_agent_nvml_errors"  # counter; exposed with the _total suffix
AGENT_GPUS = "gpu_rightsizer_agent_gpus"
AGENT_SAMPLE_SECONDS = "gpu_rightsizer_agent_sample_duration_seconds"
AGENT_MIG_PROFILE = "gpu_rightsizer_agent_mig_profile_info"

PodResolver = Callable[[int], PodIdentity | None]
#: Device → (container, shared replica) the kubelet gave it to (`pod_resources.PodResourcesDirectory`).
DevicePods = Callable[[DeviceSnapshot], list[tuple[PodIdentity, str | None]]]


@dataclass(frozen=True)
class _Series:
    labels: dict[str, str]
    values: dict[DeviceField, float]


def _device_labels(device: DeviceSnapshot, hostname: str | None) -> dict[str, str]:
    labels = {
        mn.GPU_INDEX_LABEL: str(device.index),
        "UUID": device.uuid,
        mn.PCI_BUS_ID_LABEL: device.pci_bus_id or "",
        mn.DEVICE_LABEL: f"nvidia{device.index}",
        "modelName": device.model_name,
    }
    if device.gpu_instance_id is not None:
        labels[mn.MIG_PROFILE_LABEL] = device.mig_profile or ""
        labels[mn.MIG_INSTANCE_LABEL] = str(device.gpu_instance_id)
    if hostname:
        labels["Hostname"] = hostname
    return labels


def _pod_labels(identity: PodIdentity | None) -> dict[str, str]:
    if identity is None:
        return {"pod": "", "namespace": "", "container": ""}
    labels = {
        "pod": identity.pod or "",
        "namespace": identity.namespace or "",
        "container": identity.container or "",
    }
    if identity.pod_uid:
        labels["pod_uid"] = identity.pod_uid
    return labels


def device_series(
    device: DeviceSnapshot,
    resolve: PodResolver,
    hostname: str | None,
    device_pods: DevicePods | None = None,
) -> list[_Series]:
    """The series one device exports: one per pod on it (a plain one when no pod uses it).

    The kubelet's assignment (`device_pods`) names the pod of a GPU even while it runs nothing (an idle
    allocation) and without hostPID. Where several pods share the GPU, their processes (hostPID) split
    memory and utilisation between them; without processes each sharer gets a copy of the device values.
    """
    base = _device_labels(device, hostname)
    assigned: dict[tuple[str, str, str], tuple[PodIdentity, str | None]] = {}
    for holder, share in device_pods(device) if device_pods is not None else []:
        assigned.setdefault(
            (holder.namespace or "", holder.pod or "", holder.container or ""), (holder, share)
        )
    if len(assigned) == 1:
        holder = next(iter(assigned.values()))[0]
        return [_Series(labels={**base, **_pod_labels(holder)}, values=dict(device.values))]
    by_pod: dict[str, tuple[PodIdentity, list[int]]] = {}
    for position, process in enumerate(device.processes):
        identity = resolve(process.pid)
        if identity is None:
            continue
        key = f"{identity.pod_uid}/{identity.container or identity.container_id or ''}"
        by_pod.setdefault(key, (identity, []))[1].append(position)
    if not by_pod and assigned:
        return [
            _Series(
                labels={**base, **_pod_labels(holder), mn.VGPU_LABEL: share or str(position)},
                values=dict(device.values),
            )
            for position, (holder, share) in enumerate(assigned.values())
        ]
    if not by_pod:
        return [_Series(labels={**base, **_pod_labels(None)}, values=dict(device.values))]
    if len(by_pod) == 1:
        identity = next(iter(by_pod.values()))[0]
        return [_Series(labels={**base, **_pod_labels(identity)}, values=dict(device.values))]
    series: list[_Series] = []
    for replica, (identity, positions) in enumerate(by_pod.values()):
        values = dict(device.values)
        processes = [device.processes[i] for i in positions]
        memory = [p.used_memory_mib for p in processes]
        if all(m is not None for m in memory):
            values[DeviceField.FB_USED_MIB] = float(sum(m for m in memory if m is not None))
        else:
            values.pop(DeviceField.FB_USED_MIB, None)
        sm = [p.sm_util_percent for p in processes]
        if DeviceField.GPU_UTIL_PERCENT in values and all(s is not None for s in sm):
            values[DeviceField.GPU_UTIL_PERCENT] = min(100.0, float(sum(s for s in sm if s is not None)))
        else:
            values.pop(DeviceField.GPU_UTIL_PERCENT, None)
        labels = {**base, **_pod_labels(identity), mn.VGPU_LABEL: str(replica)}
        series.append(_Series(labels=labels, values=values))
    return series


def snapshot_families(
    snapshot: NodeSnapshot,
    resolve: PodResolver,
    hostname: str | None,
    timestamp: float | None = None,
    device_pods: DevicePods | None = None,
) -> list[Metric]:
    """dcgm-exporter metric families for one snapshot (`timestamp` set when recording)."""
    families: dict[DeviceField, GaugeMetricFamily] = {}
    for device in snapshot.devices:
        for series in device_series(device, resolve, hostname, device_pods):
            for device_field, value in series.values.items():
                if device_field not in EXPORTED_FIELDS or not math.isfinite(value):
                    continue
                family = families.get(device_field)
                if family is None:
                    name, documentation = EXPORTED_FIELDS[device_field]
                    family = GaugeMetricFamily(name, documentation)
                    families[device_field] = family
                family.add_sample(family.name, series.labels, value, timestamp)
    ordered = [families[f] for f in EXPORTED_FIELDS if f in families]
    return list(ordered)


@dataclass
class AgentState:
    """What the live collector serves: the latest snapshot and the agent's own health figures."""

    snapshot: NodeSnapshot | None = None
    sample_seconds: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class DcgmCompatibleCollector(Collector):
    """prometheus_client collector serving the latest snapshot plus agent health metrics."""

    def __init__(
        self,
        state: AgentState,
        sampler: NvmlSampler,
        resolve: PodResolver,
        hostname: str | None,
        device_pods: DevicePods | None = None,
    ) -> None:
        self._state = state
        self._sampler = sampler
        self._resolve = resolve
        self._hostname = hostname
        self._device_pods = device_pods

    def collect(self) -> Iterator[Metric]:
        with self._state.lock:
            snapshot = self._state.snapshot
            sample_seconds = self._state.sample_seconds
        if snapshot is not None and snapshot.nvml_up:
            yield from snapshot_families(
                snapshot, self._resolve, self._hostname, device_pods=self._device_pods
            )
        yield from agent_health_families(self._sampler, snapshot, sample_seconds, self._hostname)


def agent_health_families(
    sampler: NvmlSampler,
    snapshot: NodeSnapshot | None,
    sample_seconds: float | None,
    hostname: str | None,
    timestamp: float | None = None,
) -> list[Metric]:
    """The agent's own health: up, NVML errors by kind, GPUs seen, sampling cost, MIG profile table."""
    host = {"Hostname": hostname} if hostname else {}
    up = GaugeMetricFamily(AGENT_UP, "1 when NVML answered at the last sampling tick, else 0.")
    up.add_sample(AGENT_UP, host, 1.0 if (snapshot is not None and snapshot.nvml_up) else 0.0, timestamp)
    errors = CounterMetricFamily(AGENT_NVML_ERRORS, "NVML call failures since start, by kind.", labels=None)
    for kind, count in sorted(sampler.errors.items()):
        errors.add_sample(AGENT_NVML_ERRORS + "_total", {**host, "kind": kind}, float(count), timestamp)
    families: list[Metric] = [up, errors]
    if snapshot is not None and snapshot.nvml_up:
        gpus = GaugeMetricFamily(AGENT_GPUS, "GPUs (and MIG instances) sampled at the last tick.")
        gpus.add_sample(AGENT_GPUS, host, float(len(snapshot.devices)), timestamp)
        families.append(gpus)
    if sample_seconds is not None:
        cost = GaugeMetricFamily(AGENT_SAMPLE_SECONDS, "Wall time of the last NVML sampling tick.")
        cost.add_sample(AGENT_SAMPLE_SECONDS, host, sample_seconds, timestamp)
        families.append(cost)
    profiles = GaugeMetricFamily(
        AGENT_MIG_PROFILE, "MIG GPU-instance profiles NVML reports for the GPU (1 per profile)."
    )
    for uuid, table in sorted(sampler.mig_profiles.items()):
        for profile in table:
            labels = {
                **host,
                "UUID": uuid,
                "profile": profile.name,
                "profile_id": str(profile.profile_id),
                "memory_mib": str(profile.memory_mib),
                "multiprocessors": str(profile.multiprocessor_count),
                "max_instances": str(profile.instance_count),
            }
            profiles.add_sample(AGENT_MIG_PROFILE, labels, 1.0, timestamp)
    if profiles.samples:
        families.append(profiles)
    return families


class OpenMetricsRecording:
    """Accumulates timestamped metric families and writes one valid OpenMetrics file.

    A file holds each family once with all its samples, grouped by series and in time order (what
    `promtool tsdb dump-openmetrics` produces), so concatenating scrapes is avoided.
    """

    def __init__(self) -> None:
        self._families: dict[str, Metric] = {}

    def add(self, families: Iterable[Metric]) -> None:
        """Append the samples of `families` (each sample must carry a timestamp)."""
        for family in families:
            target = self._families.get(family.name)
            if target is None:
                target = Metric(family.name, family.documentation, family.type, family.unit)
                self._families[family.name] = target
            elif target.type != family.type:
                raise ValueError(f"metric {family.name} recorded as {target.type} and {family.type}")
            target.samples.extend(family.samples)

    @property
    def sample_count(self) -> int:
        """Samples held so far."""
        return sum(len(f.samples) for f in self._families.values())

    def render(self) -> bytes:
        """The OpenMetrics text (with `# EOF`)."""
        recording = self

        class _Replay(Collector):
            def collect(self) -> Iterator[Metric]:
                for family in recording._families.values():
                    ordered = Metric(family.name, family.documentation, family.type, family.unit)
                    ordered.samples = sorted(
                        family.samples,
                        key=lambda s: (s.name, sorted(s.labels.items()), s.timestamp or 0.0),
                    )
                    yield ordered

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Replay())
        return bytes(generate_openmetrics(registry))  # type: ignore[no-untyped-call]

    def write(self, path: Path) -> None:
        """Write atomically (temp file + rename) so a reader never sees half a file."""
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(self.render())
        tmp.replace(path)


def families_from_sampler(
    sampler: NvmlSampler,
    snapshot: NodeSnapshot,
    resolve: PodResolver,
    hostname: str | None,
    sample_seconds: float,
    device_pods: DevicePods | None = None,
) -> Sequence[Metric]:
    """Device and health families of one snapshot, timestamped with the snapshot's time (recording)."""
    return [
        *snapshot_families(snapshot, resolve, hostname, snapshot.timestamp, device_pods),
        *agent_health_families(sampler, snapshot, sample_seconds, hostname, snapshot.timestamp),
    ]
