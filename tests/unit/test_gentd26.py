"""Replay of the Alibaba GenTD26 serving trace (skipped when the shared data folder is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_rightsizer.adapters.gentd26 import (
    Trace,
    TraceError,
    container_windows,
    default_location,
    fleet_window,
    load_trace,
)
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.model.codes import ActionType, DiagnosisCode
from gpu_rightsizer.model.observation import Signal

DATA = default_location(Path(__file__).resolve().parents[2])

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"GenTD26 data not present at {DATA}")


@pytest.fixture(scope="module")
def trace() -> Trace:
    return load_trace(DATA)


def test_trace_shape_matches_its_description(trace: Trace) -> None:
    first, last = trace.span
    assert len(trace.containers) == 143
    assert 22 * 3600 < last - first < 24 * 3600
    assert trace.queue_size, "the gateway queue series is fleet-wide (no container)"
    assert len(set(trace.qps) & set(trace.duty)) > 100


def test_per_container_windows_are_well_formed(trace: Trace) -> None:
    windows = container_windows(trace)
    assert len(windows) == 143
    for window in windows:
        busy = window.pods[0].gpus[0].stats.get(Signal.GPU_UTIL)
        if busy is not None:
            assert 0.0 <= busy.min <= busy.max <= 1.0
        assert window.allocation.workload_type == "inference"
        assert window.warnings


def test_idle_diagnoses_agree_with_the_traces_own_qps(trace: Trace) -> None:
    results = [(w, analyze_window(w)) for w in container_windows(trace)]
    codes = {a.primary for _, a in results}
    # Duty cycles of a few percent are kernels, not idleness: tiny live work is OversizedGPU, never idle.
    assert DiagnosisCode.OVERSIZED_GPU in codes
    assert not any(a.automatic and a.type is ActionType.RELEASE_IDLE for _, r in results for a in r.actions)
    for window, analysis in results:
        if analysis.primary is DiagnosisCode.IDLE_ALLOCATION:
            qps = window.pods[0].stats.get(Signal.REQUESTS_PER_S)
            assert qps is None or qps.mean < 0.01, window.workload.name


def test_fleet_windows_carry_fleet_qps_and_the_gateway_queue(trace: Trace) -> None:
    first, _ = trace.span
    window = fleet_window(trace, first + 3600, first + 7200)
    assert window.allocation.replicas > 50
    assert window.stats[Signal.REQUESTS_PER_S].mean > 0
    assert Signal.QUEUE_LENGTH in window.stats
    quiet = fleet_window(trace, first + 19 * 3600, first + 20 * 3600)
    assert quiet.stats[Signal.REQUESTS_PER_S].mean < window.stats[Signal.REQUESTS_PER_S].mean
    assert analyze_window(window).primary is not DiagnosisCode.OVER_REPLICATED  # busiest hours


def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such folder"):
        load_trace(tmp_path / "absent")
    (tmp_path / "pod_gpu_duty_cycle_anon.csv").write_text("value,timestamp_anon,container_ip\nlots,1,abc\n")
    with pytest.raises(TraceError, match="line 2"):
        load_trace(tmp_path)


def test_quiet_fleet_hours_are_over_replicated_with_a_bounded_count(trace: Trace) -> None:
    """Night hours: ~110 replicas with a median duty cycle of 0 % and no queue are over-replicated."""
    _first, last = trace.span
    window = fleet_window(trace, last - 3 * 3600, last - 2 * 3600)
    analysis = analyze_window(window)
    assert analysis.primary is DiagnosisCode.OVER_REPLICATED, analysis.summary
    scale_in = next(a for a in analysis.actions if a.type is ActionType.REPLICAS)
    to = int(scale_in.to_value)
    assert 1 <= to < window.allocation.replicas
    assert to >= window.allocation.replicas / 3  # one bounded step
