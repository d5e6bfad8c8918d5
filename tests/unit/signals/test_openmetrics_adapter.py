"""The OpenMetrics source on recorded files: label variants, MIG, shared GPUs, NaN, malformed input."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpu_rightsizer.adapters.openmetrics import OpenMetricsError, read_openmetrics
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.model.codes import DiagnosisCode
from gpu_rightsizer.model.observation import Signal, WorkloadWindow
from gpu_rightsizer.sim.backfill import write_openmetrics
from gpu_rightsizer.sim.library import scenario_library

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "openmetrics"
WINDOW = 2400.0


def _read(name: str) -> dict[str, WorkloadWindow]:
    return {w.workload.name: w for w in read_openmetrics(FIXTURES / name, window_seconds=WINDOW)}


def test_plain_labels_group_pods_by_deployment_with_allocation() -> None:
    windows = _read("plain.om")
    assert set(windows) == {"trainer", "chat"}
    chat = windows["chat"]
    assert chat.workload.kind == "Deployment"
    assert len(chat.pods) == 2
    assert chat.allocation.replicas == 2
    assert chat.allocation.gpu_model == "NVIDIA-H100-80GB-HBM3"
    assert chat.allocation.workload_type == "inference"
    assert chat.stats[Signal.QUEUE_LENGTH].p50 > 0
    trainer = windows["trainer"]
    assert trainer.allocation.cpu_limit_cores == 2.0
    assert trainer.allocation.gpu_count == 1
    assert trainer.pods[0].stats[Signal.CPU_THROTTLED_RATIO].mean > 0.25
    assert trainer.pods[0].gpus[0].stats[Signal.GPU_UTIL].max <= 1.0


def test_exported_labels_and_lowercase_hostname_read_the_same_as_plain() -> None:
    plain, exported = _read("plain.om"), _read("exported_hostname.om")
    assert set(plain) == set(exported)
    for name in plain:
        a, b = plain[name], exported[name]
        assert [p.name for p in a.pods] == [p.name for p in b.pods]
        assert [p.node for p in a.pods] == [p.node for p in b.pods]
        assert [g.node for p in b.pods for g in p.gpus] == [p.node for p in b.pods]
        assert a.pods[0].gpus[0].stats == b.pods[0].gpus[0].stats
        assert analyze_window(a).primary == analyze_window(b).primary


def test_mig_slice_without_gpu_util_and_shared_devices_not_summed() -> None:
    windows = _read("mig_and_shared.om")
    mig = windows["slice"]
    gpu = mig.pods[0].gpus[0]
    assert gpu.mig_profile == "3g.40gb"
    assert Signal.GPU_UTIL not in gpu.stats
    assert Signal.GR_ENGINE_ACTIVE in gpu.stats
    assert Signal.POWER_WATTS not in gpu.stats or gpu.stats[Signal.POWER_WATTS].samples > 0
    assert mig.allocation.mig_profile == "3g.40gb"
    assert mig.allocation.sharing == "mig"
    shared = windows["shared"]
    devices = [g for p in shared.pods for g in p.gpus]
    assert {g.uuid for g in devices} == {devices[0].uuid}
    assert all(g.shared_by_pods == 2 for g in devices)
    assert shared.allocation.sharing == "time-slicing"
    busy = [g.stats[Signal.GR_ENGINE_ACTIVE].mean for g in devices]
    assert busy[0] == busy[1] <= 1.0


def test_nan_and_sentinels_become_warnings_and_insufficient_data() -> None:
    windows = _read("nan_and_sentinels.om")
    for window in windows.values():
        gpu = window.pods[0].gpus[0]
        assert Signal.GR_ENGINE_ACTIVE not in gpu.stats
        assert Signal.FB_USED_MIB in gpu.stats
        assert any("NaN or DCGM blank" in w for w in window.warnings)
        assert analyze_window(window).primary is DiagnosisCode.INSUFFICIENT_DATA


def test_scrape_without_timestamps_or_kube_state_metrics_is_a_bare_pod() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    windows = read_openmetrics(FIXTURES / "scrape_no_ksm.prom", window_seconds=3600, at=at)
    assert [w.workload.key for w in windows] == ["ml/Pod/lonely-pod"]
    window = windows[0]
    assert window.pods[0].gpus[0].stats[Signal.GPU_UTIL].p50 == pytest.approx(0.37)
    assert Signal.FB_USED_MIB not in window.pods[0].gpus[0].stats
    assert any("kube_pod_owner" in w for w in window.warnings)
    assert analyze_window(window).primary is DiagnosisCode.INSUFFICIENT_DATA


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("bad_labels.om", "Invalid labels"),
        ("bad_value.om", "bad number"),
        ("interleaved_families.om", "Clashing name"),
    ],
)
def test_malformed_files_raise_a_clear_error(name: str, fragment: str) -> None:
    with pytest.raises(OpenMetricsError, match=fragment) as caught:
        read_openmetrics(FIXTURES / name, window_seconds=WINDOW)
    assert name in str(caught.value)


def test_missing_empty_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(OpenMetricsError, match="cannot read"):
        read_openmetrics(tmp_path / "absent.om")
    (tmp_path / "empty.om").write_text("")
    with pytest.raises(OpenMetricsError, match="empty"):
        read_openmetrics(tmp_path / "empty.om")
    (tmp_path / "binary.om").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(OpenMetricsError):
        read_openmetrics(tmp_path / "binary.om")


def test_namespace_and_workload_filters() -> None:
    assert [w.workload.name for w in read_openmetrics(FIXTURES / "plain.om", workload="chat")] == ["chat"]
    assert read_openmetrics(FIXTURES / "plain.om", namespace="other") == []
    assert [
        w.workload.name for w in read_openmetrics(FIXTURES / "plain.om", workload="Deployment/trainer")
    ] == ["trainer"]


def test_window_ends_at_the_requested_time(tmp_path: Path) -> None:
    end = 1_767_225_600.0
    path = tmp_path / "lib.om"
    scenarios = [s for s in scenario_library("w") if s.name in ("healthy-training", "idle-notebook")]
    write_openmetrics(path, scenarios, end - 7200, end, 60.0)
    at = datetime.fromtimestamp(end - 3600, tz=UTC)
    windows = read_openmetrics(path, window_seconds=1800, at=at)
    assert {w.end for w in windows} == {at}
    for window in windows:
        busy = window.pods[0].gpus[0].stats[Signal.GR_ENGINE_ACTIVE]
        assert busy.samples == 31


def test_gaps_in_gpu_series_are_reported(tmp_path: Path) -> None:
    lines = ["# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge"]
    stamps = [*range(0, 1200, 60), *range(2400, 3600, 60)]
    lines += [f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{pod="p",namespace="ml",UUID="GPU-1"}} 0.5 {t}' for t in stamps]
    (tmp_path / "gappy.om").write_text("\n".join([*lines, "# EOF", ""]))
    window = read_openmetrics(tmp_path / "gappy.om")[0]
    assert any("1 gap(s)" in w and "1260s" in w for w in window.warnings)
