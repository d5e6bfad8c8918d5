"""Render analyses as a terminal table, JSON, YAML or CSV (the `analyze` command's output formats).

Every format carries the same fields as `GPURecommendation.status`, so a user meets one vocabulary.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpu_rightsizer.model.result import Analysis

FORMATS = ("table", "json", "yaml", "csv")


@dataclass(frozen=True)
class ReportRow:
    """One workload's analysis plus the data problems found while reading it."""

    analysis: Analysis
    warnings: list[str] = field(default_factory=list)
    window: str = ""


def _first_action(analysis: Analysis) -> str:
    action = analysis.main_action
    if action is None:
        return "-"
    text = f"{action.type.value}: {action.from_value} → {action.to_value}"
    return text if len(analysis.actions) == 1 else f"{text} (+{len(analysis.actions) - 1})"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _savings(analysis: Analysis) -> str:
    hours = analysis.savings.gpu_hours_per_day
    text = "-" if hours <= 0 else f"{hours:.1f} GPU-h/d ({analysis.savings.share_of_allocation:.0%})"
    apart = analysis.savings.if_offered_gpu_hours_per_day
    return text if apart <= 0 else f"{text} [{apart:.1f} if offered]"


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def render_table(rows: Sequence[ReportRow]) -> str:
    """A fixed-width table, one line per workload, for a terminal."""
    headers = ("WORKLOAD", "DIAGNOSIS", "ACTION", "GPU BUSY P95", "SAVINGS", "CONFIDENCE")
    lines = [
        (
            f"{r.analysis.workload.namespace}/{r.analysis.workload.kind}/{r.analysis.workload.name}",
            r.analysis.primary.value,
            _shorten(_first_action(r.analysis), 60),
            _percent(r.analysis.gpu_busy_p95),
            _savings(r.analysis),
            _percent(r.analysis.confidence),
        )
        for r in rows
    ]
    widths = [max([len(h), *(len(line[i]) for line in lines)]) for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    out.extend("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines)
    if not rows:
        out.append("(no GPU workloads in the window)")
    return "\n".join(out) + "\n"


def row_document(row: ReportRow) -> dict[str, Any]:
    """The analysis as camelCase JSON-able data, with the window and reading warnings."""
    document: dict[str, Any] = row.analysis.model_dump(by_alias=True, mode="json")
    document["window"] = row.window
    document["warnings"] = list(row.warnings)
    return document


def render_json(rows: Sequence[ReportRow]) -> str:
    """A JSON list of analyses."""
    return json.dumps([row_document(r) for r in rows], indent=2) + "\n"


def render_yaml(rows: Sequence[ReportRow]) -> str:
    """A YAML list of analyses."""
    return yaml.safe_dump([row_document(r) for r in rows], sort_keys=False, allow_unicode=True)


def render_csv(rows: Sequence[ReportRow]) -> str:
    """One CSV line per workload with the table's columns plus the summary and warnings."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(
        [
            "namespace",
            "kind",
            "name",
            "diagnosis",
            "confidence",
            "gpu_busy_p95",
            "action",
            "gpu_hours_per_day_saved",
            "share_of_allocation_saved",
            "gpu_hours_per_day_if_offered",
            "samples",
            "summary",
            "warnings",
        ]
    )
    for r in rows:
        a = r.analysis
        writer.writerow(
            [
                a.workload.namespace,
                a.workload.kind,
                a.workload.name,
                a.primary.value,
                f"{a.confidence:.3f}",
                "" if a.gpu_busy_p95 is None else f"{a.gpu_busy_p95:.4f}",
                _first_action(a) if a.actions else "",
                f"{a.savings.gpu_hours_per_day:.3f}",
                f"{a.savings.share_of_allocation:.3f}",
                f"{a.savings.if_offered_gpu_hours_per_day:.3f}",
                a.samples,
                a.summary,
                "; ".join(r.warnings),
            ]
        )
    return buffer.getvalue()


def render(rows: Sequence[ReportRow], output: str) -> str:
    """Render in one of `FORMATS`."""
    renderers = {"table": render_table, "json": render_json, "yaml": render_yaml, "csv": render_csv}
    if output not in renderers:
        raise ValueError(f"unknown output format {output!r}; choose one of {', '.join(FORMATS)}")
    return renderers[output](rows)
