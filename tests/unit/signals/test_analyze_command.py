"""`gpu-rightsizer analyze` on files: output formats, filters, exit codes."""

from __future__ import annotations

import argparse
import csv
import io
import json
from pathlib import Path

import pytest
import yaml

from gpu_rightsizer.commands import analyze
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.model.codes import DiagnosisCode
from gpu_rightsizer.model.observation import WorkloadRef
from gpu_rightsizer.model.result import Analysis
from gpu_rightsizer.report import ReportRow, render, render_table

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "openmetrics"


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    analyze.add_arguments(parser)
    return analyze.run(parser.parse_args(argv))


def test_json_output_has_every_workload_with_its_diagnosis(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["--openmetrics", str(FIXTURES / "plain.om"), "--window", "40m", "-o", "json"]) == 0
    captured = capsys.readouterr()
    rows = {row["workload"]["name"]: row for row in json.loads(captured.out)}
    assert rows["trainer"]["primary"] == "InputPipelineCPUBound"
    assert rows["chat"]["primary"] == "UnderReplicated"
    assert rows["chat"]["gpuBusyP95"] > 0.8
    assert "reading" in captured.err


@pytest.mark.parametrize("output", ["table", "yaml", "csv"])
def test_other_formats_parse_and_agree_with_json(output: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["--openmetrics", str(FIXTURES / "plain.om"), "--window", "40m", "-o", output]) == 0
    text = capsys.readouterr().out
    if output == "yaml":
        names = {row["workload"]["name"]: row["primary"] for row in yaml.safe_load(text)}
    elif output == "csv":
        names = {row["name"]: row["diagnosis"] for row in csv.DictReader(io.StringIO(text))}
    else:
        lines = text.splitlines()
        assert lines[0].split()[:2] == ["WORKLOAD", "DIAGNOSIS"]
        first_lines = [line.split() for line in lines[1:] if line.split() and line.split()[0].count("/") == 2]
        names = {cells[0].rsplit("/", 1)[1]: cells[1] for cells in first_lines}
        assert lines[-1].split()[:3] == ["TOTAL", "(2", "workloads)"]
    assert names == {"trainer": "InputPipelineCPUBound", "chat": "UnderReplicated"}


def test_filters_and_at(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "--openmetrics",
        str(FIXTURES / "plain.om"),
        "--workload",
        "chat",
        "-o",
        "json",
        "--at",
        "2026-01-01T00:00:00Z",
    ]
    assert _run(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["workload"]["name"] for r in rows] == ["chat"]
    assert rows[0]["window"].endswith("2026-01-01T00:00:00+00:00")


@pytest.mark.parametrize("name", ["bad_labels.om", "does-not-exist.om"])
def test_unreadable_sources_exit_1_with_a_message(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["--openmetrics", str(FIXTURES / name)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[-1].startswith("error: ")
    assert name in captured.err


def test_diagnoses_do_not_change_the_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["--openmetrics", str(FIXTURES / "nan_and_sentinels.om"), "--window", "40m"]) == 0
    assert "InsufficientData" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90.0), ("1h30m", 5400.0), ("7d", 604800.0), ("500ms", 0.5)]
)
def test_durations(text: str, seconds: float) -> None:
    assert analyze.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "1x", "h", "1h 2m", "-5m"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        analyze.parse_duration(text)


def test_times() -> None:
    assert analyze.parse_time("1767225600").isoformat() == "2026-01-01T00:00:00+00:00"
    assert analyze.parse_time("2026-01-01T01:00:00+01:00").timestamp() == 1767225600.0
    with pytest.raises(argparse.ArgumentTypeError):
        analyze.parse_time("yesterday")


def test_empty_table_says_so_and_unknown_format_is_rejected() -> None:
    assert "no GPU workloads" in render_table([])
    ref = WorkloadRef(namespace="a", kind="Deployment", name="b")
    row = ReportRow(analysis=Analysis(workload=ref, primary=DiagnosisCode.HEALTHY, confidence=0.5))
    assert "a/Deployment/b" in render([row], "table")
    with pytest.raises(ValueError, match="unknown output format"):
        render([row], "xml")


def test_engine_is_the_one_analyze_uses() -> None:
    assert analyze_window.__module__ == "gpu_rightsizer.logic.engine"
