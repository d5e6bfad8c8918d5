"""The metric-name vocabulary and its helpers."""

from __future__ import annotations

import pytest

from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.observation import Signal


@pytest.mark.parametrize(
    "resource",
    [
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-3g.40gb",
        "nvidia.com/gpu.shared",
        "cpu",
        "memory",
    ],
)
def test_ksm_resource_names_round_trip(resource: str) -> None:
    assert mn.resource_from_ksm(mn.resource_to_ksm(resource)) == resource
    assert mn.resource_from_ksm(resource) == resource


def test_mig_suffixes_come_back_as_the_device_plugin_spells_them() -> None:
    """The device plugin writes NVML's '+' as '.': a '+' is never a resource name."""
    assert mn.resource_from_ksm("nvidia_com_mig_1g_10gb_me") == "nvidia.com/mig-1g.10gb.me"
    assert mn.resource_from_ksm("nvidia_com_mig_1g_24gb_gfx") == "nvidia.com/mig-1g.24gb.gfx"
    assert mn.resource_from_ksm("nvidia_com_mig_1g_24gb_me_all") == "nvidia.com/mig-1g.24gb.me.all"


def test_exported_labels_win_over_the_exporters_own() -> None:
    labels = {"pod": "dcgm-exporter-x", "exported_pod": "trainer-0", "Hostname": "n1"}
    assert mn.first_label(labels, mn.POD_LABELS) == "trainer-0"
    assert mn.first_label({"pod": "trainer-0"}, mn.POD_LABELS) == "trainer-0"
    assert mn.first_label({"hostname": "n2"}, mn.HOSTNAME_LABELS) == "n2"
    assert mn.first_label({"exported_pod": ""}, mn.POD_LABELS) is None


def test_gpu_util_is_scaled_to_a_ratio_and_every_gpu_metric_maps_once() -> None:
    assert mn.GPU_SIGNAL_BY_METRIC[mn.DCGM_GPU_UTIL].scale == 0.01
    assert mn.GPU_SIGNAL_BY_METRIC[mn.DCGM_GPU_UTIL].signal is Signal.GPU_UTIL
    signals = [s.signal for s in mn.GPU_SIGNAL_SOURCES]
    assert len(signals) == len(set(signals))
    assert all(s.metric in mn.DCGM_METRICS for s in mn.GPU_SIGNAL_SOURCES)


def test_throttle_mask_excludes_idle_and_power_cap() -> None:
    assert not mn.THROTTLE_CLOCK_EVENT_MASK & (mn.CLOCK_EVENT_GPU_IDLE | mn.CLOCK_EVENT_SW_POWER_CAP)
    assert mn.THROTTLE_CLOCK_EVENT_MASK == 0x8 | 0x20 | 0x40 | 0x80
