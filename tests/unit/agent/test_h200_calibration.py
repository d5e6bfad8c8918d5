"""The engine on five H200 recordings where a wrong answer causes harm, at two resolutions.

Recorded by hack/gpu-proof/run_proof.py (figures in tests/fixtures/h200/summary.json, `calibration`):
125 s of 1 s samples each, the CPU limit enforced as a CPU set and a cgroup v2 quota.

Each case is checked on the raw 1 s samples and as dcgm-exporter's default collection would show it:
every gauge averaged over the 30 s before each point, points 60 s apart (a Prometheus range query's
step), counters read at the points. A 125 s recording gives two such points, so the minimum sample count
is lowered for that resolution; the minimum windows are lowered for both (the recordings are short).
Everything else is the engine's default. A control case checks that these settings still let the
engine call a truly idle GPU idle, so "not idle" below is not an artefact of the short window.
"""

from __future__ import annotations

import gzip
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from gpu_rightsizer.adapters.openmetrics import ParsedSample, parse_text, windows_from_samples
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.codes import ActionType, DiagnosisCode
from gpu_rightsizer.model.observation import Signal, WorkloadWindow
from gpu_rightsizer.model.result import Action, Analysis

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "h200"

#: dcgm-exporter's default collection interval and a typical Prometheus query step.
AVERAGE_SECONDS = 30.0
STEP_SECONDS = 60.0

FINE = EngineSettings(min_window_seconds=30.0, idle_min_window_seconds=30.0)
COARSE = EngineSettings(min_window_seconds=30.0, idle_min_window_seconds=30.0, min_samples=2)

#: Series read at each point rather than averaged: cumulative counters and bit masks / last-event codes.
_COUNTERS: frozenset[str] = frozenset(
    source.metric for source in (*mn.POD_SIGNAL_SOURCES, *mn.SERVING_SIGNAL_SOURCES) if source.counter
)
_POINT_VALUES: frozenset[str] = frozenset({mn.DCGM_CLOCKS_EVENT_REASONS, mn.DCGM_XID_ERRORS})

#: Actions that take GPU capacity away (or could: a replica or GPU-count change is checked by direction).
_SHRINKING: frozenset[ActionType] = frozenset(
    {ActionType.MIG_PROFILE, ActionType.GPU_SHARING, ActionType.RELEASE_IDLE, ActionType.GPU_MODEL}
)


def _is_counter(name: str) -> bool:
    return name in _COUNTERS or name.endswith("_total") or name.removesuffix("_total") in _COUNTERS


def coarse(samples: Iterable[ParsedSample], phase: float = 0.0) -> Iterator[ParsedSample]:
    """The samples as 30 s averages at a 60 s step (counters and bit masks read at each point).

    Points fall at first + 29 s + `phase` + k × 60 s, so each one averages 30 full 1 s samples.
    """
    series: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = defaultdict(list)
    for name, labels, value, timestamp in samples:
        assert timestamp is not None, name
        series[(name, tuple(sorted(labels.items())))].append((timestamp, value))
    first = min(points[0][0] for points in series.values())
    last = max(points[-1][0] for points in series.values())
    step_points = []
    at = first + AVERAGE_SECONDS - 1.0 + phase
    while at <= last + 1e-6:
        step_points.append(at)
        at += STEP_SECONDS
    for (name, labels), points in series.items():
        points.sort()
        for at in step_points:
            recent = [v for ts, v in points if at - AVERAGE_SECONDS < ts <= at + 1e-6]
            if not recent:
                continue
            point_value = name in _POINT_VALUES or _is_counter(name)
            value = recent[-1] if point_value else sum(recent) / len(recent)
            yield name, dict(labels), value, at


@cache
def _samples(name: str) -> tuple[ParsedSample, ...]:
    text = gzip.decompress((FIXTURES / f"{name}.om.gz").read_bytes()).decode()
    return tuple(parse_text(text, name))


@dataclass(frozen=True)
class Resolution:
    """How the recording is read: raw 1 s samples, or 30 s averages at a 60 s step."""

    name: str
    settings: EngineSettings
    window: Callable[[str], WorkloadWindow]


def _fine_window(name: str) -> WorkloadWindow:
    (window,) = windows_from_samples(_samples(name))
    return window


def _coarse_window(name: str) -> WorkloadWindow:
    (window,) = windows_from_samples(coarse(_samples(name)), step_seconds=STEP_SECONDS)
    return window


RESOLUTIONS = [
    Resolution("1s", FINE, _fine_window),
    Resolution("30s-avg-60s-step", COARSE, _coarse_window),
]


def _analyze(name: str, resolution: Resolution) -> tuple[WorkloadWindow, Analysis]:
    window = resolution.window(name)
    assert window.workload.name == name
    return window, analyze_window(window, resolution.settings)


def _leading_number(text: str) -> float | None:
    head = text.strip().split(" ", 1)[0]
    try:
        return float(head)
    except ValueError:
        return None


def _shrinks_gpu(action: Action) -> bool:
    """True for an action that takes GPU capacity away from the workload."""
    if action.type in _SHRINKING:
        return True
    if action.type in (ActionType.GPU_COUNT, ActionType.REPLICAS):
        before, after = _leading_number(action.from_value), _leading_number(action.to_value)
        return before is not None and after is not None and after < before
    return False


def _codes(analysis: Analysis) -> set[DiagnosisCode]:
    return {finding.code for finding in analysis.findings}


def _case(name: str, resolution: Resolution, *marks: pytest.MarkDecorator) -> object:
    return pytest.param(name, resolution, id=f"{name}-{resolution.name}", marks=marks)


FINE_RES, COARSE_RES = RESOLUTIONS

# --- sanity: the resampler and the recordings ----------------------------------------------------------


def test_coarse_points_average_thirty_fine_samples() -> None:
    fine = [s for s in _samples("bf16-trainer") if s[0] == mn.DCGM_TENSOR_ACTIVE]
    points = [s for s in coarse(_samples("bf16-trainer")) if s[0] == mn.DCGM_TENSOR_ACTIVE]
    assert len(points) == 2
    assert points[1][3] - points[0][3] == STEP_SECONDS
    for _, _, value, at in points:
        assert at is not None
        averaged = [v for _, _, v, ts in fine if ts is not None and at - AVERAGE_SECONDS < ts <= at + 1e-6]
        assert 28 <= len(averaged) <= 30  # the first GPM values need two ticks
        assert value == pytest.approx(sum(averaged) / len(averaged))


def test_idle_holder_is_still_idle_under_these_settings() -> None:
    """Control: a process that only holds memory is idle at 1 s, so 'not idle' below means something.

    (Its 40 s recording is too short for two 60 s points, so it is checked at 1 s only.)
    """
    _, analysis = _analyze("idle-holder", FINE_RES)
    assert analysis.primary is DiagnosisCode.IDLE_ALLOCATION, analysis.summary
    assert any(a.type is ActionType.RELEASE_IDLE for a in analysis.actions), analysis.actions


@pytest.mark.parametrize(
    "name", ["loader-one-worker", "fp32-gemm", "tiny-server", "host-wait", "bf16-trainer"]
)
def test_recordings_hold_what_the_issue_describes(name: str) -> None:
    """The measured figures are the cases asked for (not an accident of the workload scripts)."""
    window = _fine_window(name)
    pod = window.pods[0]
    gpu = pod.gpus[0].stats
    assert gpu[Signal.SM_ACTIVE].samples >= 120
    cpu = pod.stats[Signal.CPU_USAGE_CORES]
    busiest = [v for n, _, v, _ in _samples(name) if n == mn.AGENT_PROCESS_CPU_MAX]
    assert len(busiest) >= 120  # the agent's per-process figure, every tick after the first
    if name == "loader-one-worker":
        assert window.allocation.cpu_limit_cores == 2.0
        assert 1.0 <= cpu.p50 <= 1.25  # one worker pinned, under a 2-core limit
        assert min(busiest) >= 0.9  # ... the worker at one core in every tick
        assert 0.08 <= gpu[Signal.GR_ENGINE_ACTIVE].p50 <= 0.25
    elif name == "fp32-gemm":
        assert gpu[Signal.SM_ACTIVE].p50 > 0.9
        assert gpu[Signal.TENSOR_ACTIVE].p95 < 0.01
        assert gpu[Signal.SM_OCCUPANCY].p50 < 0.2
    elif name == "tiny-server":
        assert window.workload.kind == "Deployment"
        assert gpu[Signal.SM_ACTIVE].p50 > 0.0  # kernels every second
        assert gpu[Signal.GR_ENGINE_ACTIVE].p95 < 0.01
        assert gpu[Signal.FB_USED_MIB].max > 4096  # the model stays in memory
        assert Signal.REQUESTS_PER_S not in window.stats
    elif name == "host-wait":
        assert gpu[Signal.SM_ACTIVE].min > 0.0  # kernels in every sample
        assert 0.01 <= gpu[Signal.GR_ENGINE_ACTIVE].p95 <= 0.06
    else:
        assert gpu[Signal.TENSOR_ACTIVE].p50 > 0.5
        assert gpu[Signal.GR_ENGINE_ACTIVE].p50 > 0.95
        # A GPU-bound trainer's launching process sits at one core too: a pinned process alone is no
        # starvation, only together with an underfed GPU.
        assert min(busiest) >= 0.9


# --- the diagnoses -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "resolution"),
    [
        _case("loader-one-worker", FINE_RES),
        _case("loader-one-worker", COARSE_RES),
    ],
)
def test_one_worker_loader_is_cpu_bound_and_keeps_its_gpu(name: str, resolution: Resolution) -> None:
    """1.1 cores used of 2, one process at 100 % of a core, GPU busy ~15 %: starved below its limit."""
    _, analysis = _analyze(name, resolution)
    assert analysis.primary is DiagnosisCode.INPUT_PIPELINE_CPU_BOUND, analysis.summary
    assert not [a for a in analysis.actions if _shrinks_gpu(a)], analysis.actions


@pytest.mark.parametrize(
    ("name", "resolution"),
    [_case("fp32-gemm", FINE_RES), _case("fp32-gemm", COARSE_RES)],
)
def test_fp32_gemm_is_not_low_occupancy(name: str, resolution: Resolution) -> None:
    """SM 0.97, occupancy 0.13, tensor 0: big GEMMs run one block per SM by design."""
    _, analysis = _analyze(name, resolution)
    assert analysis.primary in (DiagnosisCode.NO_TENSOR_CORES, DiagnosisCode.HEALTHY), analysis.summary
    assert not [a for a in analysis.actions if _shrinks_gpu(a)], analysis.actions


@pytest.mark.parametrize(
    ("name", "resolution"),
    [_case("tiny-server", FINE_RES), _case("tiny-server", COARSE_RES)],
)
def test_tiny_live_server_is_oversized_never_released(name: str, resolution: Resolution) -> None:
    """A live server with a few requests a second and no request metric: oversized, not idle."""
    _, analysis = _analyze(name, resolution)
    assert DiagnosisCode.IDLE_ALLOCATION not in _codes(analysis), analysis.summary
    assert not any(a.type is ActionType.RELEASE_IDLE for a in analysis.actions), analysis.actions
    assert analysis.primary is DiagnosisCode.OVERSIZED_GPU, analysis.summary


@pytest.mark.parametrize(
    ("name", "resolution"),
    [_case("host-wait", FINE_RES), _case("host-wait", COARSE_RES)],
)
def test_host_wait_loop_is_not_idle(name: str, resolution: Resolution) -> None:
    """Kernels in every sample at busy ~2 %: the job runs, it waits on the host; never released."""
    _, analysis = _analyze(name, resolution)
    assert analysis.primary is not DiagnosisCode.IDLE_ALLOCATION, analysis.summary
    assert DiagnosisCode.IDLE_ALLOCATION not in _codes(analysis), analysis.summary
    assert not any(a.type is ActionType.RELEASE_IDLE for a in analysis.actions), analysis.actions


@pytest.mark.parametrize(
    ("name", "resolution"), [_case("bf16-trainer", FINE_RES), _case("bf16-trainer", COARSE_RES)]
)
def test_bf16_trainer_is_healthy_and_left_alone(name: str, resolution: Resolution) -> None:
    _, analysis = _analyze(name, resolution)
    assert analysis.primary is DiagnosisCode.HEALTHY, analysis.summary
    assert not [a for a in analysis.actions if _shrinks_gpu(a)], analysis.actions


@pytest.mark.parametrize("resolution", RESOLUTIONS, ids=lambda r: r.name)
def test_one_worker_loader_reads_its_pinned_process(resolution: Resolution) -> None:
    """The agent's per-process gauges are read as gauges: one process at a core, at both resolutions.

    (Read as counters, as the cAdvisor CPU counter is, a steady 1.0 gives a rate near 0 at a 60 s step.)
    """
    stats = resolution.window("loader-one-worker").pods[0].stats
    assert stats[Signal.PROCESS_CPU_MAX_CORES].p50 == pytest.approx(1.0, abs=0.05)
    assert stats[Signal.PROCESSES_PINNED].p50 >= 1
