"""Recordings of controlled workloads on a real H200, fed to the offline analyzer.

The fixtures were recorded by hack/gpu-proof/run_proof.py: the agent sampled the GPU at 1 s through NVML
(GPM) while each workload ran alone, pinned to a CPU set that stands in for its pod's CPU limit; the
kube-state-metrics/cAdvisor-like series were written next to them (see docs/agent.md). Each recording is
40 s long, so the minimum window is lowered for these tests only; everything else is the engine's default.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_rightsizer.adapters.openmetrics import read_openmetrics
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.mig import find_profile, profiles_for, spec_for_product
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import ActionType, DiagnosisCode
from gpu_rightsizer.model.observation import Signal, WorkloadWindow
from gpu_rightsizer.model.result import Analysis

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "h200"
#: Recordings are 40 s of 1 s samples; the default 30 min minimum window would (rightly) say InsufficientData.
SHORT_RECORDING = EngineSettings(min_window_seconds=30.0)

EXPECTED: dict[str, DiagnosisCode] = {
    "starved-loader": DiagnosisCode.INPUT_PIPELINE_CPU_BOUND,
    "fed-loader": DiagnosisCode.HEALTHY,
    "tiny-inference": DiagnosisCode.OVERSIZED_GPU,
    "idle-holder": DiagnosisCode.IDLE_ALLOCATION,
    "membw": DiagnosisCode.MEMORY_BANDWIDTH_BOUND,
    "bf16-train": DiagnosisCode.HEALTHY,
}


def _window(name: str, tmp_path: Path) -> WorkloadWindow:
    path = tmp_path / f"{name}.om"
    path.write_bytes(gzip.decompress((FIXTURES / f"{name}.om.gz").read_bytes()))
    windows = read_openmetrics(path)
    assert len(windows) == 1, f"{name}: expected one workload, got {[w.workload.key for w in windows]}"
    return windows[0]


def _analyze(name: str, tmp_path: Path) -> tuple[WorkloadWindow, Analysis]:
    window = _window(name, tmp_path)
    return window, analyze_window(window, SHORT_RECORDING)


def _gpu_p95(window: WorkloadWindow, signal: Signal) -> float:
    return window.pods[0].gpus[0].stats[signal].p95


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recording_yields_the_expected_diagnosis(name: str, tmp_path: Path) -> None:
    window, analysis = _analyze(name, tmp_path)
    assert window.workload.name == name
    assert window.allocation.gpu_model == "NVIDIA-H200"
    assert analysis.primary is EXPECTED[name], analysis.summary


@pytest.mark.parametrize("name", sorted([*EXPECTED, "pageable-h2d"]))
def test_agent_exported_the_profiling_signals(name: str, tmp_path: Path) -> None:
    """GPM on Hopper gives the DCGM profiling fields; the engine sees them under dcgm-exporter names."""
    window = _window(name, tmp_path)
    stats = window.pods[0].gpus[0].stats
    for signal in (Signal.GR_ENGINE_ACTIVE, Signal.SM_ACTIVE, Signal.TENSOR_ACTIVE, Signal.DRAM_ACTIVE):
        assert stats[signal].samples >= 30, f"{name}: {signal} has {stats[signal].samples} samples"
    assert Signal.CPU_USAGE_CORES in window.pods[0].stats


def test_starved_loader_gets_more_cpu_and_it_pays_off(tmp_path: Path) -> None:
    """Closing the loop: the engine's CPU recommendation, measured on the same GPU, speeds the loader up."""
    window, analysis = _analyze("starved-loader", tmp_path)
    cpu = [a for a in analysis.actions if a.type is ActionType.CPU]
    assert cpu, analysis.actions
    recommended = float(cpu[0].to_value.split()[0])
    assert recommended > (window.allocation.cpu_limit_cores or 0.0)
    summary = json.loads((FIXTURES / "summary.json").read_text())
    steps_per_s = {int(r["cores"]): float(r["steps_per_s"]) for r in summary["sweep"]}
    current = int(window.allocation.cpu_limit_cores or 0)
    nearest = min(steps_per_s, key=lambda cores: abs(cores - recommended))
    assert steps_per_s[nearest] > 1.3 * steps_per_s[current]


def test_starved_loader_cpu_is_sized_from_the_busy_deficit(tmp_path: Path) -> None:
    """2.0 cores used at busy p95 0.22 → 2.0 × 0.8 / 0.22 ≈ 7.3 → 8 cores, which measured 4× faster.

    CPU is the counter's rate over the Prometheus source's window (3 min), so the 1 s jitter of the
    recording (2.03 at p95 between consecutive samples) is averaged out as a range query would."""
    window, analysis = _analyze("starved-loader", tmp_path)
    assert 0.2 < _gpu_p95(window, Signal.GR_ENGINE_ACTIVE) < 0.24
    assert 1.95 <= window.pods[0].stats[Signal.CPU_USAGE_CORES].p95 <= 2.1
    cpu = next(a for a in analysis.actions if a.type is ActionType.CPU)
    assert cpu.to_value == "8 cores (request and limit)"
    summary = json.loads((FIXTURES / "summary.json").read_text())
    steps_per_s = {int(r["cores"]): float(r["steps_per_s"]) for r in summary["sweep"]}
    assert steps_per_s[8] > 3.5 * steps_per_s[2]


def test_tiny_inference_slice_covers_what_was_measured(tmp_path: Path) -> None:
    window, analysis = _analyze("tiny-inference", tmp_path)
    mig = [a for a in analysis.actions if a.type is ActionType.MIG_PROFILE]
    assert mig, analysis.actions
    spec = spec_for_product(window.allocation.gpu_model)
    assert spec is not None
    profile = find_profile(profiles_for(spec), mig[0].to_value.split(":")[0])
    assert profile is not None, mig[0].to_value
    assert profile.memory_gib * 1024 >= 1.2 * window.pods[0].gpus[0].stats[Signal.FB_USED_MIB].p99
    assert profile.sms >= _gpu_p95(window, Signal.SM_ACTIVE) * spec.sms / 0.8
    assert profile.compute_slices < 7  # an actual slice, not the whole GPU


def test_idle_holder_is_released_and_busy_workloads_never_are(tmp_path: Path) -> None:
    _, idle = _analyze("idle-holder", tmp_path)
    assert any(a.type is ActionType.RELEASE_IDLE for a in idle.actions)
    for name in ("tiny-inference", "starved-loader", "bf16-train"):
        _, analysis = _analyze(name, tmp_path)
        assert not any(a.type is ActionType.RELEASE_IDLE for a in analysis.actions), name


def test_pageable_copy_loop_is_host_transfer_bound(tmp_path: Path) -> None:
    """~9 GB/s of pageable H2D copies (~15 % of a Gen5 x16 link) at 0.4 % SM activity: the GPU works."""
    window, analysis = _analyze("pageable-h2d", tmp_path)
    assert window.pods[0].gpus[0].stats[Signal.PCIE_RX_BYTES_PER_S].p50 > 4e9  # really moving data
    assert analysis.primary is DiagnosisCode.HOST_TRANSFER_BOUND, analysis.summary
    assert DiagnosisCode.IDLE_ALLOCATION not in {finding.code for finding in analysis.findings}
    assert not any(a.type is ActionType.RELEASE_IDLE for a in analysis.actions)


def test_analyze_command_refuses_a_short_recording(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`gpu-rightsizer analyze --openmetrics FILE -o json` with default settings: 40 s is too short to act on."""
    from gpu_rightsizer.commands import analyze

    path = tmp_path / "membw.om"
    path.write_bytes(gzip.decompress((FIXTURES / "membw.om.gz").read_bytes()))
    parser = argparse.ArgumentParser()
    analyze.add_arguments(parser)
    assert analyze.run(parser.parse_args(["--openmetrics", str(path), "-o", "json"])) == 0
    report = json.loads(capsys.readouterr().out)
    text = json.dumps(report)
    assert "membw" in text
    assert DiagnosisCode.INSUFFICIENT_DATA.value in text


#: What each recording deserves, including the transfer-bound copy loop (the CLI reads the .gz directly).
CLI_EXPECTED: dict[str, DiagnosisCode] = {**EXPECTED, "pageable-h2d": DiagnosisCode.HOST_TRANSFER_BOUND}


@pytest.mark.parametrize("name", sorted(CLI_EXPECTED))
def test_real_cli_diagnoses_each_gzipped_recording(name: str) -> None:
    """`python -m gpu_rightsizer analyze --openmetrics X.om.gz --min-window 30s -o json`, as a user runs it."""
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(root / "operator")}
    answer = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpu_rightsizer",
            "analyze",
            "--openmetrics",
            str(FIXTURES / f"{name}.om.gz"),
            "--min-window",
            "30s",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert answer.returncode == 0, answer.stderr
    report = json.loads(answer.stdout)
    assert [row["workload"]["name"] for row in report] == [name]
    assert report[0]["primary"] == CLI_EXPECTED[name].value, report[0]["summary"]


def test_cli_rejects_an_unknown_setting_with_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_rightsizer.commands import analyze

    parser = argparse.ArgumentParser()
    analyze.add_arguments(parser)
    args = parser.parse_args(["--openmetrics", str(FIXTURES / "membw.om.gz"), "--set", "noSuchThreshold=1"])
    assert analyze.run(args) == 2
    assert "noSuchThreshold" in capsys.readouterr().err


def test_cli_threshold_override_changes_the_diagnosis(capsys: pytest.CaptureFixture[str]) -> None:
    """Raising the absolute transfer threshold above 9 GB/s turns the copy loop back into no transfer finding."""
    from gpu_rightsizer.commands import analyze

    parser = argparse.ArgumentParser()
    analyze.add_arguments(parser)
    base = ["--openmetrics", str(FIXTURES / "pageable-h2d.om.gz"), "--min-window", "30s", "-o", "json"]
    overrides = ["--set", "transferBoundBytesPerS=2e10", "--set", "transfer_bound_link_share=0.5"]
    assert analyze.run(parser.parse_args(base + overrides)) == 0
    report = json.loads(capsys.readouterr().out)
    assert report[0]["primary"] != DiagnosisCode.HOST_TRANSFER_BOUND.value
