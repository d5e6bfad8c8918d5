"""Sampler and exporter behaviour against a fake NVML: names, labels, omissions, failures, MIG."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest
from prometheus_client.core import Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from gpu_rightsizer.adapters.nvml import (
    GpmMetric,
    MemoryInfo,
    MigDevice,
    MigProfileInfo,
    NvmlErrorKind,
    ProcessMemory,
    ProcessUtilization,
    XidEvent,
)
from gpu_rightsizer.agent.cgroups import PodIdentity
from gpu_rightsizer.agent.exporter import (
    AGENT_NVML_ERRORS,
    AGENT_UP,
    DcgmCompatibleCollector,
    OpenMetricsRecording,
    agent_health_families,
    snapshot_families,
)
from gpu_rightsizer.agent.runner import AgentRunner
from gpu_rightsizer.agent.sampler import DeviceField, NodeSnapshot, NvmlSampler
from gpu_rightsizer.model import metric_names as mn

from .fake_nvml import GIB, FakeGpu, FakeNvml, MigHandle

UUID = "GPU-11111111-2222-3333-4444-555555555555"
POD = PodIdentity(
    pod_uid="0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", namespace="ml", pod="train-0", container="main"
)


class Clock:
    """Monotonic fake clock the test advances."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _sampler(nvml: FakeNvml, clock: Clock) -> NvmlSampler:
    return NvmlSampler(nvml, clock=clock, monotonic=clock, reinit_backoff_seconds=5.0)


def _two_ticks(sampler: NvmlSampler, clock: Clock) -> NodeSnapshot:
    sampler.sample()
    clock.now += 1.0
    return sampler.sample()


def _gpu(**kwargs: object) -> FakeGpu:
    gpu = FakeGpu(uuid=UUID, **kwargs)  # type: ignore[arg-type]
    gpu.gpm_values = {
        GpmMetric.GRAPHICS_UTIL: 90.0,
        GpmMetric.SM_UTIL: 70.0,
        GpmMetric.SM_OCCUPANCY: 30.0,
        GpmMetric.ANY_TENSOR_UTIL: 40.0,
        GpmMetric.DRAM_BW_UTIL: 25.0,
        GpmMetric.PCIE_RX_MIB_PER_S: 100.0,
    }
    return gpu


def _by_name(families: Iterable[Metric]) -> dict[str, Metric]:
    return {f.name: f for f in families}


def test_gpm_metrics_are_ratios_and_need_two_samples() -> None:
    nvml, clock = FakeNvml([_gpu()]), Clock()
    sampler = _sampler(nvml, clock)
    first = sampler.sample()
    assert DeviceField.SM_ACTIVE not in first.devices[0].values  # one sample: no interval, nothing made up
    clock.now += 1.0
    second = sampler.sample()
    values = second.devices[0].values
    assert values[DeviceField.GR_ENGINE_ACTIVE] == pytest.approx(0.9)
    assert values[DeviceField.SM_ACTIVE] == pytest.approx(0.7)
    assert values[DeviceField.PCIE_RX_BYTES_PER_S] == pytest.approx(100.0 * 1024 * 1024)
    assert DeviceField.FP32_ACTIVE not in values  # the fake GPU does not report it: omitted
    assert nvml.freed_samples == 1  # the older sample is released after use


def test_gpm_samples_closer_than_100ms_keep_the_older_base() -> None:
    nvml, clock = FakeNvml([_gpu()]), Clock()
    sampler = _sampler(nvml, clock)
    sampler.sample()
    clock.now += 0.05
    too_close = sampler.sample()
    assert DeviceField.SM_ACTIVE not in too_close.devices[0].values
    clock.now += 0.5
    assert DeviceField.SM_ACTIVE in sampler.sample().devices[0].values


def test_exported_names_and_labels_match_dcgm_exporter() -> None:
    gpu = _gpu(processes=[ProcessMemory(pid=42, used_bytes=2 * GIB)])
    nvml, clock = FakeNvml([gpu]), Clock()
    snapshot = _two_ticks(_sampler(nvml, clock), clock)
    families = _by_name(snapshot_families(snapshot, lambda pid: POD if pid == 42 else None, "node-a"))
    sample = families[mn.DCGM_SM_ACTIVE].samples[0]
    assert sample.value == pytest.approx(0.7)
    assert sample.labels == {
        "gpu": "0",
        "UUID": UUID,
        "pci_bus_id": "00000000:19:00.0",
        "device": "nvidia0",
        "modelName": "NVIDIA H200",
        "Hostname": "node-a",
        "pod": "train-0",
        "namespace": "ml",
        "container": "main",
        "pod_uid": POD.pod_uid,
    }
    assert families[mn.DCGM_FB_USED].samples[0].value == pytest.approx(10 * 1024)
    assert families[mn.DCGM_GPU_UTIL].samples[0].value == pytest.approx(50.0)
    assert families[mn.DCGM_POWER_USAGE].samples[0].value == pytest.approx(300.0)


def test_unsupported_field_is_omitted_and_not_asked_again() -> None:
    gpu = _gpu()
    gpu.unsupported = {"utilization_percent", "power_mw"}
    nvml, clock = FakeNvml([gpu]), Clock()
    sampler = _sampler(nvml, clock)
    for _ in range(3):
        snapshot = sampler.sample()
        clock.now += 1.0
    names = {f.name for f in snapshot_families(snapshot, lambda pid: None, None)}
    assert mn.DCGM_GPU_UTIL not in names
    assert mn.DCGM_POWER_USAGE not in names
    assert mn.DCGM_FB_USED in names
    assert nvml.calls["utilization_percent"] == 1
    assert nvml.calls["power_mw"] == 1
    assert sum(sampler.errors.values()) == 0  # unsupported is not an error


def test_failing_field_is_counted_and_omitted() -> None:
    gpu = _gpu()
    gpu.failing = {"temperature_c": NvmlErrorKind.OTHER}
    nvml, clock = FakeNvml([gpu]), Clock()
    sampler = _sampler(nvml, clock)
    snapshot = _two_ticks(sampler, clock)
    assert DeviceField.GPU_TEMP_C not in snapshot.devices[0].values
    assert sampler.errors["other"] == 2
    health = _by_name(agent_health_families(sampler, snapshot, 0.01, None))
    assert health[AGENT_NVML_ERRORS].samples[0].value == 2
    assert health[AGENT_UP].samples[0].value == 1.0


def test_lost_gpu_marks_down_then_reinitialises_after_backoff() -> None:
    gpu = _gpu()
    nvml, clock = FakeNvml([gpu]), Clock()
    sampler = _sampler(nvml, clock)
    assert sampler.sample().nvml_up
    gpu.failing = {"memory": NvmlErrorKind.GPU_LOST}
    lost = sampler.sample()
    assert not lost.nvml_up
    assert not sampler.up
    assert not nvml.initialised  # shut down to re-initialise cleanly
    gpu.failing = {}
    clock.now += 1.0
    assert not sampler.sample().nvml_up  # still backing off: no NVML calls
    clock.now += 5.0
    assert sampler.sample().nvml_up
    assert nvml.init_count == 2
    health = _by_name(agent_health_families(sampler, lost, None, None))
    assert health[AGENT_UP].samples[0].value == 0.0


def test_driver_missing_at_start_is_retried() -> None:
    nvml, clock = FakeNvml([_gpu()]), Clock()
    nvml.init_failures = [NvmlErrorKind.DRIVER]
    sampler = _sampler(nvml, clock)
    assert not sampler.sample().nvml_up
    assert sampler.errors["driver"] == 1
    clock.now += 6.0
    assert sampler.sample().nvml_up


def test_shared_gpu_gets_one_copy_per_pod_with_its_own_memory_and_util() -> None:
    other = PodIdentity(
        pod_uid="aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", namespace="ml", pod="serve-0", container="c"
    )
    gpu = _gpu(
        processes=[ProcessMemory(pid=1, used_bytes=GIB), ProcessMemory(pid=2, used_bytes=3 * GIB)],
        process_util=[
            ProcessUtilization(pid=1, timestamp_us=10, sm_percent=5.0, memory_percent=1.0),
            ProcessUtilization(pid=2, timestamp_us=11, sm_percent=30.0, memory_percent=1.0),
        ],
    )
    nvml, clock = FakeNvml([gpu]), Clock()
    snapshot = _sampler(nvml, clock).sample()
    pods = {1: POD, 2: other}
    families = _by_name(snapshot_families(snapshot, pods.get, None))
    fb = {s.labels["pod"]: (s.value, s.labels[mn.VGPU_LABEL]) for s in families[mn.DCGM_FB_USED].samples}
    assert fb == {"train-0": (1024.0, "0"), "serve-0": (3072.0, "1")}
    util = {s.labels["pod"]: s.value for s in families[mn.DCGM_GPU_UTIL].samples}
    assert util == {"train-0": 5.0, "serve-0": 30.0}


def test_mig_instances_are_separate_series_with_profile_labels() -> None:
    profile = MigProfileInfo(0, 19, "1g.18gb", 1, 7, 16, 16384)
    mig = MigDevice(
        handle=MigHandle(processes=[ProcessMemory(pid=7, used_bytes=GIB)]),
        uuid="MIG-abc",
        gpu_instance_id=9,
        compute_instance_id=0,
        profile_name="1g.18gb",
        memory=MemoryInfo(16 * GIB, GIB, 15 * GIB),
    )
    gpu = _gpu(mig_mode=(1, 1), mig_profiles=[profile], mig_devices=[mig])
    nvml, clock = FakeNvml([gpu]), Clock()
    sampler = _sampler(nvml, clock)
    snapshot = _two_ticks(sampler, clock)
    assert nvml.calls.get("utilization_percent", 0) == 0  # not supported under MIG: never asked
    families = _by_name(snapshot_families(snapshot, lambda pid: POD if pid == 7 else None, None))
    slices = [s for s in families[mn.DCGM_SM_ACTIVE].samples if mn.MIG_PROFILE_LABEL in s.labels]
    assert len(slices) == 1
    assert slices[0].labels[mn.MIG_PROFILE_LABEL] == "1g.18gb"
    assert slices[0].labels[mn.MIG_INSTANCE_LABEL] == "9"
    assert slices[0].labels["pod"] == "train-0"
    assert mn.DCGM_GPU_UTIL not in families
    pcie_slices = [s for s in families[mn.DCGM_PCIE_RX_BYTES].samples if mn.MIG_PROFILE_LABEL in s.labels]
    assert pcie_slices == []  # board-level only
    assert sampler.mig_profiles[UUID] == [profile]


def test_xid_event_is_exported_as_last_xid() -> None:
    nvml, clock = FakeNvml([_gpu()]), Clock()
    sampler = _sampler(nvml, clock)
    assert sampler.sample().devices[0].values[DeviceField.XID_LAST] == 0.0
    nvml.xid_queue.append(XidEvent(device_uuid=UUID, xid=79))
    assert sampler.sample().devices[0].values[DeviceField.XID_LAST] == 79.0


def test_no_xid_support_means_no_xid_series() -> None:
    nvml, clock = FakeNvml([_gpu()]), Clock()
    nvml.xid_supported = False
    snapshot = _sampler(nvml, clock).sample()
    assert DeviceField.XID_LAST not in snapshot.devices[0].values


def test_collector_serves_latest_snapshot() -> None:
    nvml, clock = FakeNvml([_gpu()]), Clock()
    runner = AgentRunner(nvml=nvml, resolve=lambda pid: None, hostname="n", sampler=_sampler(nvml, clock))
    runner.tick()
    names = {
        f.name for f in DcgmCompatibleCollector(runner.state, runner.sampler, runner.resolve, "n").collect()
    }
    assert {mn.DCGM_FB_USED, AGENT_UP} <= names


def test_recording_is_valid_openmetrics_with_series_in_time_order(tmp_path: Path) -> None:
    nvml, clock = FakeNvml([_gpu()]), Clock()
    sampler = _sampler(nvml, clock)
    recording = OpenMetricsRecording()
    for step in range(3):
        gpu = nvml.gpus[0]
        gpu.util = (10.0 * step, 0.0)
        snapshot = sampler.sample()
        recording.add(snapshot_families(snapshot, lambda pid: None, "n", timestamp=snapshot.timestamp))
        clock.now += 1.0
    path = tmp_path / "rec.om"
    recording.write(path)
    text = path.read_text()
    assert text.endswith("# EOF\n")
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    util = parsed[mn.DCGM_GPU_UTIL].samples
    assert [s.value for s in util] == [0.0, 10.0, 20.0]
    assert [s.timestamp for s in util] == sorted(s.timestamp for s in util)
