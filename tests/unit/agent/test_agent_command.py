"""`gpu-rightsizer agent` flags and the --once / --record file modes (fake NVML)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from gpu_rightsizer.agent.runner import AgentRunner
from gpu_rightsizer.agent.sampler import NvmlSampler
from gpu_rightsizer.commands import agent
from gpu_rightsizer.model import metric_names as mn

from .fake_nvml import FakeGpu, FakeNvml


@pytest.mark.parametrize(
    ("text", "seconds"), [("1s", 1.0), ("500ms", 0.5), ("2m", 120.0), ("1h", 3600.0), ("3", 3.0)]
)
def test_durations(text: str, seconds: float) -> None:
    assert agent.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0s", "-1s", "1x", "abc"])
def test_bad_durations_are_rejected(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        agent.parse_duration(text)


def test_listen_addresses() -> None:
    assert agent.parse_listen("127.0.0.1:9400") == ("127.0.0.1", 9400)
    assert agent.parse_listen("[::1]:9400") == ("::1", 9400)
    for bad in ("9400", "host:", "host:99999"):
        with pytest.raises(argparse.ArgumentTypeError):
            agent.parse_listen(bad)


def test_defaults_and_once_needs_output() -> None:
    parser = argparse.ArgumentParser()
    agent.add_arguments(parser)
    args = parser.parse_args([])
    assert args.listen == ("127.0.0.1", 9400)
    assert args.interval == 1.0
    assert agent.run(parser.parse_args(["--once"])) == 2


def _runner(nvml: FakeNvml) -> AgentRunner:
    sampler = NvmlSampler(nvml)
    return AgentRunner(nvml=nvml, resolve=lambda pid: None, hostname="node-a", interval=0.15, sampler=sampler)


def test_once_writes_one_snapshot_with_gpm_fields(tmp_path: Path) -> None:
    gpu = FakeGpu(uuid="GPU-1")
    from gpu_rightsizer.adapters.nvml import GpmMetric

    gpu.gpm_values = {GpmMetric.SM_UTIL: 50.0}
    output = tmp_path / "snap.om"
    assert _runner(FakeNvml([gpu])).snapshot_to_file(output) == 0
    families = {f.name: f for f in text_string_to_metric_families(output.read_text())}
    assert families[mn.DCGM_SM_ACTIVE].samples[0].value == pytest.approx(0.5)  # second tick has a GPM delta
    assert len(families[mn.DCGM_FB_USED].samples) == 1


def test_record_writes_every_tick_in_order(tmp_path: Path) -> None:
    output = tmp_path / "rec.om"
    assert _runner(FakeNvml([FakeGpu(uuid="GPU-1")])).record_to_file(output, duration=0.5) == 0
    families = {f.name: f for f in text_string_to_metric_families(output.read_text())}
    stamps = [float(s.timestamp) for s in families[mn.DCGM_FB_USED].samples]
    assert len(stamps) >= 3
    assert stamps == sorted(stamps)


def test_no_nvml_writes_nothing_and_fails(tmp_path: Path) -> None:
    from gpu_rightsizer.adapters.nvml import NvmlErrorKind

    nvml = FakeNvml([FakeGpu(uuid="GPU-1")])
    nvml.init_failures = [NvmlErrorKind.DRIVER] * 10
    output = tmp_path / "none.om"
    assert _runner(nvml).snapshot_to_file(output) == 1
    assert not output.exists()
