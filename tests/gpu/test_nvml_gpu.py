"""The agent against the real NVML: runs only where a GPU and its driver are present, else skips."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pynvml = pytest.importorskip("pynvml")

from gpu_rightsizer.adapters.nvml import PynvmlLibrary  # noqa: E402
from gpu_rightsizer.agent.exporter import snapshot_families  # noqa: E402
from gpu_rightsizer.agent.runner import AgentRunner  # noqa: E402
from gpu_rightsizer.agent.sampler import DeviceField, NvmlSampler  # noqa: E402
from gpu_rightsizer.model import metric_names as mn  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def nvml() -> PynvmlLibrary:
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as exc:
        pytest.skip(f"no NVIDIA driver/GPU: {exc}")
    if count == 0:
        pytest.skip("no NVIDIA GPU")
    return PynvmlLibrary()


def test_sampler_reads_every_gpu(nvml: PynvmlLibrary) -> None:
    sampler = NvmlSampler(nvml)
    try:
        first = sampler.sample()
        time.sleep(0.3)
        second = sampler.sample()
    finally:
        sampler.close()
    assert first.nvml_up and second.nvml_up
    assert second.devices
    for device in second.devices:
        assert device.uuid.startswith(("GPU-", "MIG-"))
        assert device.values[DeviceField.FB_TOTAL_MIB] > 0
    for uuid, table in sampler.mig_profiles.items():
        for profile in table:  # rows NVML answered are real: a name, SMs and memory
            assert profile.multiprocessor_count > 0 and profile.memory_mib > 0, (uuid, profile)


def test_gpm_fields_appear_on_hopper_and_newer(nvml: PynvmlLibrary) -> None:
    sampler = NvmlSampler(nvml)
    try:
        sampler.sample()
        time.sleep(0.3)
        snapshot = sampler.sample()
        gpm_gpus = [
            g
            for g in snapshot.devices
            if g.gpu_instance_id is None and nvml.gpm_supported(nvml.device_handle(g.index))
        ]
    finally:
        sampler.close()
    if not gpm_gpus:
        pytest.skip("no GPM-capable GPU (pre-Hopper)")
    families = {f.name: f for f in snapshot_families(snapshot, lambda pid: None, "test")}
    for name in (mn.DCGM_GR_ENGINE_ACTIVE, mn.DCGM_SM_ACTIVE, mn.DCGM_TENSOR_ACTIVE, mn.DCGM_DRAM_ACTIVE):
        assert name in families
        assert all(0.0 <= s.value <= 1.0 for s in families[name].samples)


def test_once_mode_writes_a_snapshot(nvml: PynvmlLibrary, tmp_path: Path) -> None:
    runner = AgentRunner(nvml=nvml, resolve=lambda pid: None, hostname="test", interval=0.3)
    try:
        assert runner.snapshot_to_file(tmp_path / "snap.om") == 0
    finally:
        runner.close()
    assert mn.DCGM_FB_USED in (tmp_path / "snap.om").read_text()
