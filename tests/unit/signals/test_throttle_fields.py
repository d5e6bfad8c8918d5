"""The throttle gate reads every DCGM throttle field the counters file can enable.

dcgm-exporter names a series after its CSV line, so a DCGM older than 3.3 exports the clock-event bitmask
as `DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`; the `*_VIOLATION` counters are nanoseconds held down per reason
(dcgm_fields.h "Violation time in ns"). A gate that reads neither never fires on such clusters.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpu_rightsizer.adapters.openmetrics import read_openmetrics, throttle_series
from gpu_rightsizer.adapters.prometheus import _throttle_expr
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.codes import DiagnosisCode
from gpu_rightsizer.model.observation import Signal
from gpu_rightsizer.sim.backfill import write_openmetrics
from gpu_rightsizer.sim.library import scenario_library

END = 1_767_225_600.0
STEP = 60.0


def _throttled_file(tmp_path: Path) -> Path:
    scenarios = [s for s in scenario_library("t") if s.name == "hot-node"]
    assert scenarios, "the library has a thermally throttled scenario"
    path = tmp_path / "hot.om"
    write_openmetrics(path, scenarios, END - 3600, END, STEP)
    return path


def _bitmask_lines(text: str) -> list[tuple[str, float, str]]:
    """(labels, value, timestamp) of every clock-event bitmask sample."""
    pattern = re.compile(rf"^{mn.DCGM_CLOCKS_EVENT_REASONS}(\{{[^}}]*\}}) (\S+) (\S+)$", re.MULTILINE)
    return [(m.group(1), float(m.group(2)), m.group(3)) for m in pattern.finditer(text)]


def _without_bitmask(text: str) -> str:
    return (
        "\n".join(line for line in text.splitlines() if not line.startswith(mn.DCGM_CLOCKS_EVENT_REASONS))
        + "\n"
    )


def _primary(path: Path) -> DiagnosisCode:
    windows = read_openmetrics(path, window_seconds=3600)
    assert len(windows) == 1
    return analyze_window(windows[0]).primary


def test_current_bitmask_name_blocks_sizing(tmp_path: Path) -> None:
    assert _primary(_throttled_file(tmp_path)) is DiagnosisCode.THROTTLED


def test_pre_3_3_bitmask_name_blocks_sizing_too(tmp_path: Path) -> None:
    path = _throttled_file(tmp_path)
    text = path.read_text()
    assert _bitmask_lines(text)
    path.write_text(text.replace(mn.DCGM_CLOCKS_EVENT_REASONS, mn.DCGM_CLOCK_THROTTLE_REASONS))
    window = read_openmetrics(path, window_seconds=3600)[0]
    assert Signal.THROTTLE_FRACTION in window.pods[0].gpus[0].stats
    assert analyze_window(window).primary is DiagnosisCode.THROTTLED


def _as_violation_counter(text: str, metric: str) -> str:
    """The bitmask samples rewritten as a violation counter: each throttled step adds a step of ns.

    Typed as a gauge: dcgm-exporter's counters have no `_total` suffix, which OpenMetrics requires of a
    counter family, and Prometheus stores them under their plain name either way.
    """
    lines = [f"# TYPE {metric} gauge"]
    held = 0.0
    for labels, value, timestamp in _bitmask_lines(text):
        if int(value) & mn.THROTTLE_CLOCK_EVENT_MASK:
            held += STEP * mn.VIOLATION_NS_PER_SECOND
        lines.append(f"{metric}{labels} {held:.0f} {timestamp}")
    return _without_bitmask(text).replace("# EOF\n", "") + "\n".join(lines) + "\n# EOF\n"


@pytest.mark.parametrize("metric", mn.DCGM_THROTTLE_VIOLATION_COUNTERS)
def test_violation_counters_alone_block_sizing(tmp_path: Path, metric: str) -> None:
    path = _throttled_file(tmp_path)
    text = path.read_text()
    path.write_text(_as_violation_counter(text, metric))
    window = read_openmetrics(path, window_seconds=3600)[0]
    flags = [v for _, v, _ in _bitmask_lines(text)]
    expected = sum(1 for v in flags if int(v) & mn.THROTTLE_CLOCK_EVENT_MASK) / len(flags)
    fraction = window.pods[0].gpus[0].stats[Signal.THROTTLE_FRACTION].mean
    assert fraction == pytest.approx(expected, abs=0.05)
    assert analyze_window(window).primary is DiagnosisCode.THROTTLED


def test_power_cap_violation_time_is_not_throttling(tmp_path: Path) -> None:
    """Power violation time is the software power cap, as bitmask bit 0x4: normal at full load."""
    path = _throttled_file(tmp_path)
    text = path.read_text()
    path.write_text(_as_violation_counter(text, mn.DCGM_POWER_VIOLATION))
    window = read_openmetrics(path, window_seconds=3600)[0]
    assert Signal.THROTTLE_FRACTION not in window.pods[0].gpus[0].stats


def test_throttle_series_takes_the_larger_source_and_clamps() -> None:
    flags = [(0.0, 0.0), (60.0, 0.0), (120.0, float(mn.CLOCK_EVENT_HW_THERMAL))]
    ns = mn.VIOLATION_NS_PER_SECOND
    violations = {
        mn.DCGM_THERMAL_VIOLATION: [(0.0, 0.0), (60.0, 30 * ns), (120.0, 30 * ns)],
        mn.DCGM_BOARD_LIMIT_VIOLATION: [(0.0, 0.0), (60.0, 45 * ns), (120.0, 45 * ns)],
    }
    series = dict(throttle_series(flags, violations, 60.0))
    assert series[0.0] == 0.0
    assert series[60.0] == 1.0  # 30 s + 45 s held down in 60 s: overlapping reasons, clamped
    assert series[120.0] == 1.0  # the bitmask says throttled though the counters stood still
    # a DCGM blank value (int64 sentinel) is no measurement
    blank = {mn.DCGM_THERMAL_VIOLATION: [(0.0, 0.0), (60.0, float(0x7FFFFFFFFFFFFFF0))]}
    assert throttle_series([], blank, 60.0) == []


def test_prometheus_throttle_query_reads_both_names_and_the_counters() -> None:
    query = _throttle_expr("", 180.0)
    for name in (*mn.DCGM_CLOCK_EVENT_METRICS, *mn.DCGM_THROTTLE_VIOLATION_COUNTERS):
        assert name in query
    assert mn.DCGM_POWER_VIOLATION not in query
    assert "/ 1e+09" in query and "[180s]" in query
    assert query.count("(") == query.count(")")


def test_prometheus_throttle_query_evaluates_on_real_series(tmp_path: Path) -> None:
    """promtool evaluates the query: violation counters, the old bitmask name, the larger source wins."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (apt-get install prometheus)")
    query = _throttle_expr("", 180.0)
    gpu1 = 'Hostname="n1",UUID="GPU-1",gpu="0",exported_pod="p",exported_namespace="ns"'
    gpu2 = 'Hostname="n2",UUID="GPU-2",gpu="0",exported_pod="q",exported_namespace="ns"'
    test = {
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    # 30 s held down per 60 s, bitmask clear: the counters say 50 %
                    {"series": f"{mn.DCGM_THERMAL_VIOLATION}{{{gpu1}}}", "values": "0+30000000000x10"},
                    {"series": f"{mn.DCGM_CLOCKS_EVENT_REASONS}{{{gpu1}}}", "values": "0x10"},
                    # power-cap time all along: not throttling
                    {"series": f"{mn.DCGM_POWER_VIOLATION}{{{gpu2}}}", "values": "0+60000000000x10"},
                    # HW thermal bit under the pre-3.3 name
                    {"series": f"{mn.DCGM_CLOCK_THROTTLE_REASONS}{{{gpu2}}}", "values": "64x10"},
                ],
                "promql_expr_test": [
                    {
                        "expr": query,
                        "eval_time": "8m",
                        "exp_samples": [
                            {
                                "labels": '{hostname="n1",UUID="GPU-1",gpu="0",pod="p",namespace="ns"}',
                                "value": 0.5,
                            },
                            {
                                "labels": '{hostname="n2",UUID="GPU-2",gpu="0",pod="q",namespace="ns"}',
                                "value": 1,
                            },
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "throttle-test.yaml"
    path.write_text(yaml.safe_dump(test))
    proc = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
