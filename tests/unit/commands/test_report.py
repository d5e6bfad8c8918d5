"""The `analyze` report: a table that wraps instead of cutting, says why, and totals; the CSV's
machine-readable action fields; money columns only with a price; the output file."""

from __future__ import annotations

import argparse
import csv
import io
import json
from pathlib import Path

import pytest
import yaml

from gpu_rightsizer.commands import analyze
from gpu_rightsizer.logic.timeline import Timeline, downsample
from gpu_rightsizer.model.codes import ActionType, DiagnosisCode, Severity
from gpu_rightsizer.model.observation import WorkloadRef
from gpu_rightsizer.model.result import Action, ActionTarget, Analysis, Cost, Finding, Savings, Veto, Waste
from gpu_rightsizer.report import (
    CSV_COLUMNS,
    CSV_COST_COLUMNS,
    CSV_WASTE_COLUMNS,
    FORMATS,
    TABLE_COLUMNS,
    TABLE_COST_COLUMNS,
    TABLE_WASTE_COLUMNS,
    ReportRow,
    render,
    render_csv,
    render_table,
    why,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "openmetrics"
LONG_REASON_ACTION = Action(
    type=ActionType.CPU,
    from_value="2 cores (limit) on containers[trainer] of the data-loading sidecar",
    to_value="8 cores (request and limit) on containers[trainer], with num_workers raised to match",
    reason="CPU-bound.",
    resource="cpu",
    automatic=True,
    target=ActionTarget(container="trainer", requests={"cpu": "8"}, limits={"cpu": "8"}),
)


def _analysis(namespace: str, name: str, **fields: object) -> Analysis:
    values: dict[str, object] = {"primary": DiagnosisCode.HEALTHY, "confidence": 0.73, **fields}
    return Analysis.model_validate(
        {"workload": WorkloadRef(namespace=namespace, kind="Deployment", name=name), **values}
    )


def _joined(text: str) -> str:
    """Text with every space and line break removed (wrapped cells read whole)."""
    return "".join(text.split())


def _column(table: str, header: str, next_header: str) -> str:
    """One column of a rendered table, its wrapped lines joined, from the header's offsets."""
    lines = table.splitlines()
    start, end = lines[0].index(header), lines[0].index(next_header)
    return _joined("".join(line[start:end] for line in lines[2:]))


def test_the_action_wraps_whole_and_confidence_is_a_percentage() -> None:
    row = ReportRow(analysis=_analysis("a", "trainer", actions=[LONG_REASON_ACTION]))
    text = render_table([row], width=100)
    assert "…" not in text
    action = _joined(f"{LONG_REASON_ACTION.from_value} → {LONG_REASON_ACTION.to_value}")
    assert action in _column(text, "ACTION", "WHY")
    assert "73%" in text and "0.73" not in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_why_names_the_missing_data_the_veto_and_what_advice_needs() -> None:
    short = _analysis(
        "a",
        "short",
        primary=DiagnosisCode.INSUFFICIENT_DATA,
        confidence=0.9,
        findings=[
            Finding(
                code=DiagnosisCode.INSUFFICIENT_DATA,
                severity=Severity.INFO,
                confidence=0.9,
                message="Seen: the window is 1 min long, shorter than the 30 min minimum. Meaning: x. Change: y.",
            )
        ],
    )
    assert why(short) == "the window is 1 min long, shorter than the 30 min minimum"
    vetoed = _analysis(
        "a",
        "vetoed",
        vetoes=[
            Veto(
                name="cpuNearLimit",
                cause=DiagnosisCode.INPUT_PIPELINE_CPU_BOUND,
                reason="CPU p95 1.99 of 2",
                measure_next="m",
            )
        ],
    )
    assert why(vetoed) == "no capacity cut while cpuNearLimit: CPU p95 1.99 of 2"
    withheld = LONG_REASON_ACTION.model_copy(
        update={
            "automatic": False,
            "target": None,
            "reason": "Shrink. Not applied automatically: the window is 0.7 h; a Deployment is shrunk only after 24 h.",
        }
    )
    advice = _analysis("a", "advice", actions=[withheld])
    assert why(advice) == "advice only: the window is 0.7 h; a Deployment is shrunk only after 24 h"
    software = withheld.model_copy(update={"type": ActionType.SOFTWARE, "reason": "Use tensor cores."})
    assert why(_analysis("a", "code", actions=[software])).startswith(
        "advice only: needs a change to the code"
    )
    assert why(_analysis("a", "fine")) == "-"
    table = render_table([ReportRow(analysis=a) for a in (short, vetoed, advice)], width=160)
    reasons = _column(table, "WHY", "GPU BUSY P95")
    assert _joined("the window is 1 min long, shorter than the 30 min minimum") in reasons
    assert _joined("no capacity cut while cpuNearLimit: CPU p95 1.99 of 2") in reasons


def _saving(hours: float, apart: float = 0.0) -> Savings:
    return Savings(gpu_hours_per_day=hours, share_of_allocation=0.5, if_offered_gpu_hours_per_day=apart)


def test_total_row_and_namespace_totals() -> None:
    rows = [
        ReportRow(analysis=_analysis("team-a", "one", savings=_saving(12.0))),
        ReportRow(analysis=_analysis("team-b", "two", savings=_saving(3.5, apart=6.0))),
        ReportRow(analysis=_analysis("team-a", "three", savings=_saving(0.5))),
    ]
    plain = render_table(rows, width=160).splitlines()
    assert plain[-1].split()[:5] == ["TOTAL", "(3", "workloads)", "16.0", "GPU-h/d"]
    assert "[6.0 if offered]" in plain[-1]
    assert not any("namespace team-a" in line for line in plain)
    grouped = render_table(rows, group_by="namespace", width=160).splitlines()
    team_a = next(line for line in grouped if "namespace team-a" in line)
    assert "(2 workloads)" in team_a and "12.5 GPU-h/d" in team_a
    team_b = next(line for line in grouped if "namespace team-b" in line)
    assert "3.5 GPU-h/d" in team_b and "[6.0 if offered]" in team_b
    # grouped: team-a's rows come before team-b's, each followed by its total
    order = [
        next(i for i, line in enumerate(grouped) if word in line)
        for word in ("three", "namespace team-a", "two", "namespace team-b")
    ]
    assert order == sorted(order)


def test_csv_has_the_main_actions_machine_fields() -> None:
    shrink = Action(
        type=ActionType.MIG_PROFILE,
        from_value="1 × NVIDIA-H100-80GB-HBM3",
        to_value="nvidia.com/mig-3g.40gb",
        reason="r",
        resource="nvidia.com/mig-3g.40gb",
        automatic=True,
        target=ActionTarget(
            limits={"nvidia.com/mig-3g.40gb": "1"},
            remove_resources=["nvidia.com/gpu"],
            gpu_capacity_change=True,
        ),
        predicted_slowdown=1.184,
    )
    rows = [
        ReportRow(analysis=_analysis("a", "slice", actions=[shrink])),
        ReportRow(analysis=_analysis("a", "none")),
    ]
    records = list(csv.DictReader(io.StringIO(render_csv(rows))))
    assert tuple(records[0]) == CSV_COLUMNS
    first, second = records
    assert first["automatic"] == "true" and first["resource"] == "nvidia.com/mig-3g.40gb"
    assert json.loads(first["target"]) == {
        "limits": {"nvidia.com/mig-3g.40gb": "1"},
        "removeResources": ["nvidia.com/gpu"],
        "gpuCapacityChange": True,
    }
    assert float(first["predicted_slowdown"]) == pytest.approx(1.184)
    assert second["automatic"] == second["target"] == second["predicted_slowdown"] == second["why"] == ""


def _priced(name: str, waste_hours: float, price: float | None) -> ReportRow:
    cost = (
        None
        if price is None
        else Cost(
            price_per_gpu_hour=price,
            per_day=24 * price,
            waste_per_day=waste_hours * price,
            savings_per_day=0.0,
        )
    )
    analysis = Analysis(
        workload=WorkloadRef(namespace="ml", kind="Job", name=name),
        primary=DiagnosisCode.INPUT_PIPELINE_CPU_BOUND,
        confidence=0.9,
        waste=Waste(gpu_hours_per_day=waste_hours, allocated_gpus=1.0, busy_fraction=1 - waste_hours / 24),
        cost=cost,
    )
    return ReportRow(analysis=analysis)


def test_waste_and_money_columns_only_when_present() -> None:
    assert "WASTE" not in render_table([ReportRow(analysis=_analysis("a", "b"))], width=160)
    unpriced = [_priced("trainer", 21.4, None)]
    table = render_table(unpriced, width=200)
    assert "WASTE" in table and "21.4 GPU-h/d" in table and "WASTE COST" not in table
    header = next(csv.reader(io.StringIO(render_csv(unpriced))))
    assert "waste_gpu_hours_per_day" in header and "waste_per_day" not in header
    priced = [_priced("trainer", 21.4, 2.5), _priced("loader", 10.0, 2.5)]
    table = render_table(priced, width=220)
    assert "WASTE COST" in table and "SAVINGS VALUE" in table
    total = table.splitlines()[-1]
    assert "31.4 GPU-h/d" in total and "78.50/d" in total  # waste apart from savings: 0.00/d
    assert "0.00/d" in total
    records = list(csv.DictReader(io.StringIO(render_csv(priced))))
    assert float(records[0]["waste_per_day"]) == pytest.approx(53.5)
    assert float(records[0]["price_per_gpu_hour"]) == pytest.approx(2.5)


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    analyze.add_arguments(parser)
    return analyze.run(parser.parse_args(argv))


def test_output_file_and_group_by_from_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "report.txt"
    argv = ["--openmetrics", str(FIXTURES / "plain.om"), "--window", "40m", "--group-by", "namespace"]
    assert _run([*argv, "--output-file", str(target)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"report written to {target}" in captured.err
    text = target.read_text()
    assert "namespace ml (2 workloads)" in text and "TOTAL (2 workloads)" in text
    assert _run([*argv, "--output-file", str(tmp_path / "missing" / "x.txt")]) == 1
    assert "cannot write the report" in capsys.readouterr().err


def test_html_is_not_a_text_format() -> None:
    with pytest.raises(ValueError, match="unknown output format"):
        render([], "xml")


ROOT = Path(__file__).resolve().parents[3]


def _analyze_row_of_readme() -> str:
    readme = (ROOT / "README.md").read_text()
    return next(line for line in readme.splitlines() if line.startswith("| `gpu-rightsizer analyze`"))


def test_every_output_flag_format_and_column_is_documented() -> None:
    parser = argparse.ArgumentParser()
    analyze.add_output_arguments(parser)
    flags = [f for action in parser._actions for f in action.option_strings if f not in ("-h", "--help")]
    doc = (ROOT / "docs" / "report.md").read_text()
    row = _analyze_row_of_readme()
    for flag in flags:
        assert f"`{flag}" in doc, flag
        assert flag in row or flag == "--output", flag  # README names -o
    assert all(fmt in row and f"`{fmt}`" in doc for fmt in FORMATS)
    for column in (*CSV_COLUMNS, *CSV_WASTE_COLUMNS, *CSV_COST_COLUMNS):
        assert f"`{column}`" in doc, column
    for header in (*TABLE_COLUMNS, *TABLE_WASTE_COLUMNS, *TABLE_COST_COLUMNS):
        assert f"`{header}`" in doc, header
    assert "docs/report.md" in row


def test_downsample_keeps_the_shape_in_few_points() -> None:
    samples = [(float(t), 1.0 if (t // 100) % 2 else 0.0) for t in range(1000)]
    kept = downsample([*samples, (1000.0, float("nan"))], points=10)
    assert len(kept) == 10
    assert [round(v) for _, v in kept] == [0, 1] * 5
    assert downsample(samples[:5]) == samples[:5]


def _matrix(pod: str, value: float) -> dict[str, object]:
    rows = [
        {
            "metric": {"namespace": "ml", "pod": pod},
            "values": [[END_S - 60 * i, str(value)] for i in range(5)],
        }
    ]
    return {"status": "success", "data": {"resultType": "matrix", "result": rows}}


END_S = 1_767_225_600.0


def test_prometheus_reads_the_plotted_series_only_when_asked() -> None:
    from datetime import UTC, datetime

    from tests.unit.signals.test_prometheus_adapter import FakePrometheus, _replay

    from gpu_rightsizer.adapters.prometheus import PrometheusConfig, PrometheusSource

    def answer(endpoint: str, query: str, headers: dict[str, str]) -> tuple[int, bytes]:
        if (
            endpoint == "query_range"
            and "DCGM_FI_PROF_SM_ACTIVE" in query
            and "max by (namespace, pod)" in query
        ):
            return 200, json.dumps(_matrix("trainer-c5150820-c51500", 0.4)).encode()
        if endpoint == "query_range" and "DCGM_FI_DEV_FB_USED" in query:
            return 200, json.dumps(_matrix("trainer-c5150820-c51500", 2048.0)).encode()
        return _replay(endpoint, query, headers)

    at = datetime.fromtimestamp(END_S, tz=UTC)
    with FakePrometheus(answer) as server:
        plain = PrometheusSource(PrometheusConfig(server.url))
        plain.read(window_seconds=1800, at=at, step_seconds=60.0)
        plotted: dict[str, Timeline] = {}
        asked = PrometheusSource(PrometheusConfig(server.url))
        windows = asked.read(window_seconds=1800, at=at, step_seconds=60.0, timelines=plotted)
    assert asked.queries_sent == plain.queries_sent + 3
    trainer = next(w for w in windows if w.workload.name == "trainer")
    timeline = plotted[trainer.workload.key]
    assert [v for _, v in timeline.sm_active] == [0.4] * 5
    assert [v for _, v in timeline.gpu_memory_used_mib] == [2048.0] * 5
    assert timeline.cpu_cores  # the CPU series the source reads anyway
    assert set(plotted) == {w.workload.key for w in windows}


def test_bad_recommendations_file_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "recs.yaml"
    argv = ["--openmetrics", str(FIXTURES / "plain.om"), "-o", "html", "--recommendations", str(bad)]
    bad.write_text("items: [unclosed\n")
    assert _run(argv) == 1
    assert "is not YAML or JSON" in capsys.readouterr().err
    bad.write_text(
        yaml.safe_dump(
            {
                "kind": "List",
                "items": [
                    {"kind": "GPURecommendation", "metadata": {"name": "r"}, "spec": {"targetRef": {}}}
                ],
            }
        )
    )
    assert _run(argv) == 1
    assert "GPURecommendation 'r' does not read" in capsys.readouterr().err
    assert _run([*argv[:-2], "--recommendations", str(tmp_path / "absent.yaml")]) == 1


def test_html_money_columns_only_with_a_price_and_text_is_escaped() -> None:
    from gpu_rightsizer.report_html import render_html

    unpriced = render_html([_priced("trainer", 21.4, None)])
    assert '<th class="num">waste</th>' in unpriced and "waste cost" not in unpriced
    assert "waste 21.4 GPU-h/d" in unpriced
    priced = render_html([_priced("trainer", 21.4, 2.5), _priced("loader", 10.0, 2.5)])
    assert '<th class="num">waste cost</th>' in priced and "78.50/d" in priced  # the total row
    hostile = _analysis(
        "a",
        "b",
        findings=[
            Finding(
                code=DiagnosisCode.HEALTHY,
                severity=Severity.INFO,
                confidence=0.5,
                message="Seen: <script>alert(1)</script> & more. Meaning: m. Change: c.",
            )
        ],
    )
    page = render_html([ReportRow(analysis=hostile)])
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page
    assert "no series to plot for this workload" in page


def test_a_price_from_the_command_adds_the_money_columns(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--openmetrics", str(FIXTURES / "plain.om"), "--window", "40m", "-o", "csv"]
    assert _run(argv) == 0
    assert "waste_per_day" not in capsys.readouterr().out
    assert _run([*argv, "--gpu-hour-price", "2.5"]) == 0
    records = {r["name"]: r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    trainer = records["trainer"]  # CPU-starved: wastes most of its GPU and frees none until its fix lands
    assert float(trainer["waste_gpu_hours_per_day"]) > 15.0
    assert float(trainer["gpu_hours_per_day_saved"]) == 0.0
    assert float(trainer["waste_per_day"]) == pytest.approx(
        2.5 * float(trainer["waste_gpu_hours_per_day"]), rel=1e-3
    )
