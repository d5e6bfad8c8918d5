"""Waste, savings and money where people read them: the operator's metrics, the status, the flags."""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from tests.unit.logic.logic_builders import START, allocation, gpu, pod, stat, window

from gpu_rightsizer.commands import analyze
from gpu_rightsizer.commands import run as run_command
from gpu_rightsizer.config import OperatorConfig, load_gpu_prices
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.status import analysed_status
from gpu_rightsizer.logic.waste import GPUPrices, PriceError, with_cost
from gpu_rightsizer.model.observation import WorkloadRef
from gpu_rightsizer.model.result import Analysis
from gpu_rightsizer.runtime import metrics

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "openmetrics"


def _idle() -> Analysis:
    return analyze_window(window([pod(gpus=[gpu(gr_engine_active=stat(0.0), fb_used_mib=stat(10))])]))


def _starved() -> Analysis:
    starved = pod(
        gpus=[gpu(gr_engine_active=stat(0.11, 0.05), sm_active=stat(0.1), fb_used_mib=stat(30000))],
        cpu_usage_cores=stat(1.0, 0.01),
    )
    return analyze_window(window([starved], alloc=allocation(cpu_limit_cores=1.0, cpu_request_cores=1.0)))


def _value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def _series(name: str) -> list[dict[str, str]]:
    return [
        dict(sample.labels)
        for family in REGISTRY.collect()
        for sample in family.samples
        if sample.name == name
    ]


def test_waste_and_savings_are_published_apart_per_workload_and_namespace() -> None:
    trainer = WorkloadRef(namespace="ml", kind="Job", name="trainer")
    notebook = WorkloadRef(namespace="ml", kind="Deployment", name="notebook")
    metrics.publish_recommendations([(trainer, _starved()), (notebook, _idle())])
    labels = {"namespace": "ml", "kind": "Job", "workload": "trainer", "diagnosis": "InputPipelineCPUBound"}
    assert _value("gpu_rightsizer_workload_wasted_gpu_hours_per_day", **labels) == pytest.approx(24 * 0.89)
    assert _value("gpu_rightsizer_workload_savings_gpu_hours_per_day", **labels) == 0.0
    assert _value("gpu_rightsizer_workload_gpu_busy_ratio", **labels) == pytest.approx(0.11)
    assert _value("gpu_rightsizer_workload_allocated_gpus", **labels) == 1.0
    assert _value("gpu_rightsizer_wasted_gpu_hours_per_day", namespace="ml") == pytest.approx(24 * 0.89 + 24)
    assert _value("gpu_rightsizer_savings_gpu_hours_per_day", namespace="ml") == 24.0
    assert _value("gpu_rightsizer_recommendations", diagnosis="IdleAllocation", namespace="ml") == 1
    # no price: no money series at all
    assert _series("gpu_rightsizer_cost_per_day") == []
    assert _series("gpu_rightsizer_workload_wasted_cost_per_day") == []


def test_money_series_appear_with_a_price_and_a_cycle_replaces_the_last() -> None:
    team = WorkloadRef(namespace="team-a", kind="Deployment", name="notebook")
    metrics.publish_recommendations([(team, with_cost(_idle(), GPUPrices(default=2.0), [None]))])
    labels = {
        "namespace": "team-a",
        "kind": "Deployment",
        "workload": "notebook",
        "diagnosis": "IdleAllocation",
    }
    assert _value("gpu_rightsizer_workload_cost_per_day", **labels) == 48.0
    assert _value("gpu_rightsizer_workload_wasted_cost_per_day", **labels) == 48.0
    assert _value("gpu_rightsizer_savings_cost_per_day", namespace="team-a") == 48.0
    assert [s["namespace"] for s in _series("gpu_rightsizer_wasted_gpu_hours_per_day")] == ["team-a"]
    metrics.publish_recommendations([])
    assert _series("gpu_rightsizer_workload_wasted_gpu_hours_per_day") == []
    assert _series("gpu_rightsizer_cost_per_day") == []


def test_actions_applied_read_zero_before_the_first_change() -> None:
    assert _value("gpu_rightsizer_actions_applied_total", action="cpu", result="rolled_back") is not None
    assert _value("gpu_rightsizer_actions_applied_total", action="releaseIdle", result="applied") is not None


def test_status_carries_waste_and_cost_only_with_a_price() -> None:
    ref = WorkloadRef(namespace="team-a", kind="Deployment", name="app")
    analysis = _starved()
    built = window()

    def status(of: Analysis) -> dict[str, object]:
        written = analysed_status(
            of, built.allocation, window_start=START, window_end=START + timedelta(hours=2),
            workload=ref, now=START, generation=1,
        )  # fmt: skip
        return written.model_dump(mode="json", by_alias=True, exclude_none=True)

    plain = status(analysis)
    assert set(plain["waste"]) == {"gpuHoursPerDay", "allocatedGpus", "busyFraction"}  # type: ignore[arg-type]
    assert "cost" not in plain
    priced = status(with_cost(analysis, GPUPrices(default=3.0), [None]))
    assert priced["cost"] == {  # type: ignore[comparison-overlap]
        "pricePerGPUHour": 3.0,
        "perDay": 72.0,
        "wastePerDay": round(3.0 * 24 * 0.89, 2),
        "savingsPerDay": 0.0,
    }


def test_price_file_is_read_and_a_bad_one_named(tmp_path: Path) -> None:
    good = tmp_path / "prices.yaml"
    good.write_text("NVIDIA-H100-80GB-HBM3: 4.5\nNVIDIA A100-SXM4-80GB: '3'\n")
    prices = load_gpu_prices("1", str(good))
    assert prices.price_for(["NVIDIA H100 80GB HBM3"]) == 4.5 and prices.price_for(["Tesla-T4"]) == 1.0
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_gpu_prices(None, str(empty)) == GPUPrices(None, {})
    bad = tmp_path / "bad.yaml"
    bad.write_text("NVIDIA-H200: lots\n")
    with pytest.raises(PriceError, match=r"bad.yaml: GPU price map entry 'NVIDIA-H200': .* got 'lots'"):
        load_gpu_prices(None, str(bad))
    with pytest.raises(PriceError, match="cannot read the GPU price map"):
        load_gpu_prices(None, str(tmp_path / "missing.yaml"))


def test_run_takes_prices_from_flags_or_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    run_command.add_arguments(parser)
    assert OperatorConfig.from_args(parser.parse_args([])).gpu_prices == GPUPrices()
    assert OperatorConfig.from_args(parser.parse_args(["--gpu-hour-price", "2.5"])).gpu_prices.default == 2.5
    monkeypatch.setenv("GPURS_GPU_HOUR_PRICE", "-3")
    with pytest.raises(ValueError, match="finite number ≥ 0"):
        OperatorConfig.from_args(parser.parse_args([]))


def test_analyze_prices_each_workload_and_refuses_a_bad_price(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    analyze.add_arguments(parser)
    source = ["--openmetrics", str(FIXTURES / "plain.om"), "--window", "40m", "-o", "json"]
    assert analyze.run(parser.parse_args(source)) == 0
    rows = json.loads(capsys.readouterr().out)
    assert all(row.get("cost") is None for row in rows) and all(row["waste"] for row in rows)
    assert analyze.run(parser.parse_args([*source, "--gpu-hour-price", "2"])) == 0
    rows = json.loads(capsys.readouterr().out)
    for row in rows:
        assert row["cost"]["wastePerDay"] == round(2 * row["waste"]["gpuHoursPerDay"], 2)
    assert analyze.run(parser.parse_args([*source, "--gpu-hour-price", "free"])) == 2
    assert "a price per GPU-hour must be a number" in capsys.readouterr().err
