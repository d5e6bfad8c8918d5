"""MIG slices: every device-plugin spelling is a GPU resource, and the board's work stays off the slices.

The device plugin writes NVML's '+' as '.' (`nvidia.com/mig-1g.10gb.me`; Blackwell adds `.gfx`, `.me.all`,
`-me`). dcgm-exporter labels whole-board fields (utilisation, PCIe, NVLink) with every GPU instance, and
the simulator, like a node agent, exports them for the board without pod labels.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpu_rightsizer.adapters.openmetrics import read_openmetrics
from gpu_rightsizer.logic.diagnose import summarise
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.workloads import GPU_RESOURCE_PATTERN, allocation_from_pod_spec, gpu_resources
from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.codes import DiagnosisCode
from gpu_rightsizer.model.observation import Signal, WorkloadWindow
from gpu_rightsizer.sim.backfill import write_openmetrics
from gpu_rightsizer.sim.library import scenario_library

END = 1_767_225_600.0


@pytest.mark.parametrize(
    "resource",
    [
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-1g.10gb.me",
        "nvidia.com/mig-1g.24gb.gfx",
        "nvidia.com/mig-1g.24gb.me.all",
        "nvidia.com/mig-1g.24gb-me",
        "nvidia.com/mig-7g.141gb",
    ],
)
def test_every_device_plugin_spelling_is_a_gpu_resource(resource: str) -> None:
    assert GPU_RESOURCE_PATTERN.match(resource)
    spec = {"containers": [{"name": "main", "resources": {"limits": {resource: 1, "cpu": "2"}}}]}
    assert gpu_resources(spec) == {resource: 1}
    allocation = allocation_from_pod_spec(spec)
    if "mig-" in resource:
        assert allocation.sharing == "mig"
        assert allocation.mig_profile == resource.removeprefix("nvidia.com/mig-")


@pytest.mark.parametrize("resource", ["nvidia.com/mig-1g.10gb+me", "nvidia.com/mig-big", "nvidia.com/gpumem"])
def test_names_no_device_plugin_advertises_are_not_gpu_resources(resource: str) -> None:
    assert not GPU_RESOURCE_PATTERN.match(resource)


def _idle_mig_file(tmp_path: Path) -> tuple[Path, str]:
    scenarios = [s for s in scenario_library("m") if s.name == "idle-mig"]
    assert scenarios
    path = tmp_path / "mig.om"
    write_openmetrics(path, scenarios, END - 3600, END, 60.0)
    return path, path.read_text()


def _board_value(text: str, metric: str, value: float) -> str:
    """Every sample of a board series set to `value`."""
    return re.sub(rf"^({metric}\{{[^}}]*\}}) \S+ ", rf"\g<1> {value:g} ", text, flags=re.MULTILINE)


def _window(path: Path) -> WorkloadWindow:
    windows = read_openmetrics(path, window_seconds=3600)
    assert len(windows) == 1
    return windows[0]


def test_board_traffic_and_utilisation_are_not_given_to_a_mig_slice(tmp_path: Path) -> None:
    path, text = _idle_mig_file(tmp_path)
    # a neighbour saturates PCIe and NVLink, and the board is busy
    for metric in (
        mn.DCGM_PCIE_TX_BYTES,
        mn.DCGM_PCIE_RX_BYTES,
        mn.DCGM_NVLINK_TX_BYTES,
        mn.DCGM_NVLINK_RX_BYTES,
    ):
        text = _board_value(text, metric, 2.0e10)
    board_labels = re.search(rf"^{mn.DCGM_PCIE_TX_BYTES}(\{{[^}}]*\}})", text, flags=re.MULTILINE)
    assert board_labels is not None
    util = "\n".join(
        f"{mn.DCGM_GPU_UTIL}{board_labels.group(1)} 95 {int(t)}"
        for t in range(int(END) - 3600, int(END) + 1, 60)
    )
    text = text.replace("# EOF\n", f"# TYPE {mn.DCGM_GPU_UTIL} gauge\n{util}\n# EOF\n")
    path.write_text(text)
    window = _window(path)
    gpu = window.pods[0].gpus[0]
    assert gpu.mig_profile == "3g.40gb"
    assert not mn.BOARD_ACTIVITY_SIGNALS & gpu.stats.keys(), sorted(s.value for s in gpu.stats)
    # the board's condition still applies to every tenant
    assert Signal.SM_CLOCK_MHZ in gpu.stats and Signal.THROTTLE_FRACTION in gpu.stats
    assert analyze_window(window).primary is DiagnosisCode.IDLE_ALLOCATION


def test_whole_gpus_keep_their_traffic(tmp_path: Path) -> None:
    scenarios = [s for s in scenario_library("w") if s.name == "healthy-training"]
    path = tmp_path / "whole.om"
    write_openmetrics(path, scenarios, END - 3600, END, 60.0)
    gpu = _window(path).pods[0].gpus[0]
    assert gpu.mig_profile is None
    assert Signal.PCIE_TX_BYTES_PER_S in gpu.stats


def test_a_media_extension_slice_is_read_and_sized_against_its_profile(tmp_path: Path) -> None:
    """kube-state-metrics sanitises `nvidia.com/mig-1g.10gb.me` to `nvidia_com_mig_1g_10gb_me`."""
    path, text = _idle_mig_file(tmp_path)
    text = text.replace('resource="nvidia_com_mig_3g_40gb"', 'resource="nvidia_com_mig_1g_10gb_me"')
    text = text.replace('GPU_I_PROFILE="3g.40gb"', 'GPU_I_PROFILE="1g.10gb+me"')
    text = text.replace("NVIDIA-H100-80GB-HBM3-MIG-3g.40gb", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me")
    path.write_text(text)
    window = _window(path)
    assert window.allocation.gpu_resource == "nvidia.com/mig-1g.10gb.me"
    assert window.allocation.sharing == "mig"
    assert window.allocation.mig_profile == "1g.10gb.me"
    (gpu,) = summarise(window).gpus
    assert gpu.profile is not None and gpu.profile.media_extensions
