"""Every real H200 recording keeps its diagnosis at dcgm-exporter's default resolution.

The recordings are 1 s samples. dcgm-exporter exports 30 s averages of the profiling fields and
Prometheus reads them at up to 60 s steps: each recording is tiled to 45 min (the workloads are
stationary loops), coarsened to 30 s averages at 60 s steps, and analysed with the default settings,
as well as at 1 s with only the minimum window lowered.
"""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import pytest

from gpu_rightsizer.adapters.openmetrics import parse_text, windows_from_samples
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import ActionType, DiagnosisCode
from gpu_rightsizer.model.observation import WorkloadWindow
from gpu_rightsizer.sim.library import RECORDING_LABELS
from gpu_rightsizer.sim.resolution import coarsen, tile

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "h200"
SHORT_RECORDING = EngineSettings(min_window_seconds=30.0)

EXPECTED: dict[str, DiagnosisCode] = {name: label[0] for name, label in RECORDING_LABELS.items()}
#: Recorded for this calibration and kept out of the threshold tuning (idle line, CPU plateau): their
#: verdicts are a check on thresholds chosen without them.
SET_ASIDE = ("fp32-gemm", "bf16-trainer")


def test_every_recording_is_labelled() -> None:
    recorded = {path.name.removesuffix(".om.gz") for path in FIXTURES.glob("*.om.gz")}
    newer = set(json.loads((FIXTURES / "labels.json").read_text())["recordings"])
    assert recorded == set(EXPECTED) | newer
    assert not set(EXPECTED) & newer
    assert set(SET_ASIDE) <= recorded


def _samples(name: str) -> list[tuple[str, dict[str, str], float, float | None]]:
    text = gzip.decompress((FIXTURES / f"{name}.om.gz").read_bytes()).decode()
    return list(parse_text(text, name))


def window_at_1s(name: str) -> WorkloadWindow:
    (window,) = windows_from_samples(_samples(name))
    return window


def window_at_dcgm_default(name: str) -> WorkloadWindow:
    coarse = coarsen(tile(_samples(name), 45 * 60))
    (window,) = windows_from_samples(coarse, step_seconds=60.0)
    return window


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recording_diagnosis_holds_at_1s(name: str) -> None:
    analysis = analyze_window(window_at_1s(name), SHORT_RECORDING)
    assert analysis.primary is EXPECTED[name], analysis.summary


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recording_diagnosis_holds_at_30s_averages_and_60s_steps(name: str) -> None:
    window = window_at_dcgm_default(name)
    assert window.step_seconds == 60.0
    assert window.duration_seconds >= 40 * 60
    analysis = analyze_window(window)  # default settings: 30 min minimum window
    assert analysis.primary is EXPECTED[name], analysis.summary


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_no_harmful_action_at_either_resolution(name: str) -> None:
    for window, settings in ((window_at_1s(name), SHORT_RECORDING), (window_at_dcgm_default(name), None)):
        analysis = analyze_window(window, settings)
        automatic = [a for a in analysis.actions if a.automatic]
        capacity = [a for a in automatic if a.target is not None and a.target.gpu_capacity_change]
        assert len(capacity) <= 1, analysis.actions
        if name != "idle-holder":
            assert not any(a.type is ActionType.RELEASE_IDLE for a in analysis.actions), name


def test_coarsening_averages_profiling_fields_and_keeps_device_fields_instant() -> None:
    samples = [("DCGM_FI_PROF_SM_ACTIVE", {"gpu": "0"}, float(i % 2), float(i)) for i in range(1, 121)] + [
        ("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0"}, float(i), float(i)) for i in range(1, 121)
    ]
    coarse = coarsen(samples)
    sm = [value for name, _, value, _ in coarse if name == "DCGM_FI_PROF_SM_ACTIVE"]
    util = [(value, stamp) for name, _, value, stamp in coarse if name == "DCGM_FI_DEV_GPU_UTIL"]
    assert sm == [0.5, 0.5]
    assert util == [(60.0, 60.0), (120.0, 120.0)]


def test_tiling_keeps_counters_rising() -> None:
    samples = [("cpu_seconds_total", {}, float(i), float(i)) for i in range(10)]
    ordered = sorted(tile(samples, 30), key=lambda s: s[3] or 0.0)
    rises = [b[2] - a[2] for a, b in itertools.pairwise(ordered)]
    assert all(rise > 0 for rise in rises)
    assert len(ordered) == 30


@pytest.mark.parametrize("coarse", [False, True], ids=["1s", "30s-60s"])
def test_one_worker_loader_below_its_limit_keeps_its_gpu(coarse: bool) -> None:
    """Real H200: CPU flat at 1.1 of 2 cores, nothing throttled, busy 0.16: starved, never shrunk."""
    window = window_at_dcgm_default("loader-one-worker") if coarse else window_at_1s("loader-one-worker")
    analysis = analyze_window(window, None if coarse else SHORT_RECORDING)
    assert analysis.primary is DiagnosisCode.INPUT_PIPELINE_CPU_BOUND
    shrinking = {ActionType.MIG_PROFILE, ActionType.GPU_SHARING, ActionType.RELEASE_IDLE}
    assert not [a for a in analysis.actions if a.type in shrinking]
    assert "sched_getaffinity" in " ".join(a.to_value for a in analysis.actions)


@pytest.mark.parametrize("coarse", [False, True], ids=["1s", "30s-60s"])
def test_live_server_without_request_metric_is_never_idle(coarse: bool) -> None:
    """Real H200: 5 req/s, SM 0.00018, CPU 0.005 core, PCIe like an idle GPU: kernels decide."""
    window = window_at_dcgm_default("tiny-server") if coarse else window_at_1s("tiny-server")
    analysis = analyze_window(window, None if coarse else SHORT_RECORDING)
    assert DiagnosisCode.IDLE_ALLOCATION not in {f.code for f in analysis.findings}
    assert not any(a.type is ActionType.RELEASE_IDLE for a in analysis.actions)
