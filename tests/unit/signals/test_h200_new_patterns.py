"""The H200 recordings of patterns the engine had none of hold what their labels say.

Labels live in tests/fixtures/h200/labels.json (accepted codes, whether a shrink hurts, set-aside).
These tests check the labels are usable and that each recording carries the physical signature that
justifies its label, read through the same OpenMetrics path the engine uses; they say nothing about
what the engine answers (bench/diagnosis_accuracy.py --set new-* reports that).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from gpu_rightsizer.adapters.openmetrics import parse_text, windows_from_samples
from gpu_rightsizer.logic.width import PhaseShape, predicted_slowdown
from gpu_rightsizer.model.codes import DiagnosisCode
from gpu_rightsizer.model.observation import Signal, SignalStats, WorkloadWindow

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "h200"
LABELS: dict[str, dict[str, Any]] = json.loads((FIXTURES / "labels.json").read_text())["recordings"]
H200_SMS = 132
MIB = 2**20


def _window(name: str) -> WorkloadWindow:
    text = gzip.decompress((FIXTURES / f"{name}.om.gz").read_bytes()).decode()
    (window,) = windows_from_samples(list(parse_text(text, name)))
    return window


def _gpu(window: WorkloadWindow, signal: Signal) -> SignalStats:
    return window.pods[0].gpus[0].stats[signal]


def _pod(window: WorkloadWindow, signal: Signal) -> SignalStats:
    return window.pods[0].stats[signal]


def _shape(window: WorkloadWindow) -> PhaseShape | None:
    return PhaseShape.from_means(
        _gpu(window, Signal.GR_ENGINE_ACTIVE).mean,
        _gpu(window, Signal.SM_ACTIVE).mean,
        H200_SMS,
        _gpu(window, Signal.DRAM_ACTIVE).mean,
    )


def test_labels_are_usable_and_some_are_set_aside() -> None:
    known = {code.value for code in DiagnosisCode}
    assert len(LABELS) >= 8
    assert sum(1 for label in LABELS.values() if label["set_aside"]) >= 3
    for name, label in LABELS.items():
        assert (FIXTURES / f"{name}.om.gz").stat().st_size < 2**20, name
        assert label["accepted"], name
        assert known & set(label["accepted"]), f"{name}: no accepted code the bench can score"
        assert isinstance(label["shrink_harmful"], bool), name
        assert label["why"], name


@pytest.mark.parametrize("name", sorted(LABELS))
def test_recording_is_one_minute_of_one_second_samples(name: str) -> None:
    window = _window(name)
    assert len(window.pods) == 1
    assert _gpu(window, Signal.GR_ENGINE_ACTIVE).samples >= 55


def test_cpu_starved_loaders_use_their_cpu_while_the_gpu_waits() -> None:
    three = _window("loader-3w-4cpu")
    assert _pod(three, Signal.CPU_USAGE_CORES).p50 >= 3.0  # of 4 cores
    assert _gpu(three, Signal.GR_ENGINE_ACTIVE).p50 < 0.5
    quota = _window("loader-6w-q5")
    assert quota.allocation.cpu_limit_cores == pytest.approx(5.0)
    assert _pod(quota, Signal.CPU_THROTTLED_RATIO).p50 >= 0.5
    assert _gpu(quota, Signal.GR_ENGINE_ACTIVE).p50 < 0.7


def test_slow_reads_starve_the_loader_with_the_cpu_idle() -> None:
    window = _window("slow-read-loader")
    assert _pod(window, Signal.FS_READ_BYTES_PER_S).p50 >= 5 * MIB
    assert _pod(window, Signal.CPU_USAGE_CORES).p95 < 1.0  # of 8 cores
    assert _gpu(window, Signal.GR_ENGINE_ACTIVE).p50 < 0.1


def test_launch_bound_loop_is_narrow_with_one_pinned_thread() -> None:
    window = _window("launch-bound")
    shape = _shape(window)
    assert shape is not None
    assert shape.width_fraction < 0.05  # a loader's wide ResNet kernels read 0.89
    assert _pod(window, Signal.PROCESSES_PINNED).p50 >= 1
    assert predicted_slowdown(shape, 16) == pytest.approx(1.0)


def test_wide_phases_at_low_duty_would_stretch_on_a_small_slice() -> None:
    shape = _shape(_window("wide-duty"))
    assert shape is not None
    assert shape.duty < 0.25
    assert shape.width_sms >= 100
    assert predicted_slowdown(shape, 16) > 1.5  # mig-1g: 16 of 132 SMs


def test_pageable_copies_feed_the_training_step() -> None:
    window = _window("h2d-train")
    assert _gpu(window, Signal.PCIE_RX_BYTES_PER_S).p50 >= 5e9
    assert _gpu(window, Signal.GR_ENGINE_ACTIVE).p50 < 0.2


def test_idle_context_runs_no_kernel() -> None:
    """No kernel, yet GPM's SM_ACTIVE read 2.7e-9 in one of 60 samples: 'exactly 0' needs a floor."""
    window = _window("idle-context")
    assert _gpu(window, Signal.SM_ACTIVE).p95 == 0.0
    assert _gpu(window, Signal.SM_ACTIVE).max < 1e-6
    assert _gpu(window, Signal.FB_USED_MIB).max < 2048


def test_crash_loop_restarts_after_filling_gpu_memory() -> None:
    window = _window("gpu-oom-crashloop")
    assert window.pods[0].restarts >= 2
    used = _gpu(window, Signal.FB_USED_MIB).max
    free = _gpu(window, Signal.FB_FREE_MIB).min
    assert used / (used + free) >= 0.95


def test_memory_full_server_holds_most_of_the_gpu_at_little_compute() -> None:
    window = _window("memory-full-server")
    used = _gpu(window, Signal.FB_USED_MIB).p50
    free = _gpu(window, Signal.FB_FREE_MIB).p50
    assert used / (used + free) >= 0.8
    assert _gpu(window, Signal.SM_ACTIVE).p95 < 0.01
    assert _pod(window, Signal.REQUESTS_PER_S).p50 > 5


def test_tokenizer_server_queues_with_the_gpu_idle() -> None:
    window = _window("tokenizer-server")
    assert _pod(window, Signal.QUEUE_LENGTH).p50 >= 100
    assert _pod(window, Signal.PROCESSES_PINNED).p50 >= 1
    assert _gpu(window, Signal.GR_ENGINE_ACTIVE).p95 < 0.05
