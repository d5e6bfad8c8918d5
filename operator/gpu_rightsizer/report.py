"""Render analyses as a terminal table, JSON, YAML or CSV (the `analyze` command's output formats).

Every format carries the same fields as `GPURecommendation.status`, so a user meets one vocabulary.
The table wraps long cells instead of cutting them (rich, as KRR does), says WHY a workload gets no
automatic change, and ends with a total row (per namespace too, with `group_by="namespace"`).
Money columns appear only when the analyses carry a price (`cost`); waste and savings stay apart.
The HTML report (`report_html`) builds on the helpers here.
"""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

import yaml
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text  # cells as plain text: "containers[trainer]" is no markup

from gpu_rightsizer.logic.timeline import Timeline
from gpu_rightsizer.model.codes import ActionType, DiagnosisCode
from gpu_rightsizer.model.crd import ApplyStatus
from gpu_rightsizer.model.result import Action, Analysis

FORMATS = ("table", "json", "yaml", "csv", "html")
#: What `group_by` may name: totals per namespace (table and HTML).
GROUPINGS = ("namespace",)
#: Terminal width when the output is not a terminal (a pipe, a file): wide enough for one line per
#: short row; longer cells wrap.
DEFAULT_WIDTH = 200


@dataclass(frozen=True)
class ReportRow:
    """One workload's analysis plus the data problems found while reading it.

    `timeline` holds the plotted series (HTML only); `apply` the workload's change record from its
    GPURecommendation (HTML: before/after and the verification verdict of applied changes).
    """

    analysis: Analysis
    warnings: list[str] = field(default_factory=list)
    window: str = ""
    timeline: Timeline | None = None
    apply: ApplyStatus | None = None

    @property
    def money(self) -> Mapping[str, Mapping[str, float]]:
        """`waste` and, when a price is known, `cost` of the analysis (camelCase), where present."""
        document = self.analysis.model_dump(by_alias=True, mode="json", include={"waste", "cost"})
        return {name: value for name, value in document.items() if isinstance(value, dict)}


# --- cells shared by every format ---------------------------------------------------------------------
def action_text(action: Action) -> str:
    """One action as people read it: type, from → to."""
    return f"{action.type.value}: {action.from_value} → {action.to_value}"


def first_action(analysis: Analysis) -> str:
    """The main action in full, with how many more there are; '-' without any."""
    action = analysis.main_action
    if action is None:
        return "-"
    more = len(analysis.actions) - 1
    return action_text(action) if more == 0 else f"{action_text(action)} (+{more} more)"


def percent(value: float | None) -> str:
    """A 0..1 share as a whole percentage; '-' when unknown."""
    return "-" if value is None else f"{value:.0%}"


def savings_text(analysis: Analysis) -> str:
    """GPU-hours a day the landable actions free, and apart what advice would free if offered."""
    hours = analysis.savings.gpu_hours_per_day
    text = "-" if hours <= 0 else f"{hours:.1f} GPU-h/d ({analysis.savings.share_of_allocation:.0%})"
    apart = analysis.savings.if_offered_gpu_hours_per_day
    return text if apart <= 0 else f"{text} [{apart:.1f} if offered]"


#: Phrases with which the engine's reasons say what an action that is advice only would need.
_ADVICE_MARKERS = ("Not applied automatically: ", "Not schedulable on this cluster as it is: ")
_OFFER_MARKER = "Whether the cluster offers "


def advice_reason(action: Action) -> str:
    """Why an action is advice only, from its reason: what holds it back, or what it needs."""
    for marker in _ADVICE_MARKERS:
        if marker in action.reason:
            return f"advice only: {action.reason.split(marker, 1)[1].strip().rstrip('.')}"
    if _OFFER_MARKER in action.reason:
        offered = action.reason.split(_OFFER_MARKER, 1)[1].split(" is unknown", 1)[0]
        return f"advice only: needs node data showing the cluster offers {offered}"
    if action.type is ActionType.SOFTWARE:
        return "advice only: needs a change to the code or its settings, by its owners"
    if action.type is ActionType.INFRASTRUCTURE:
        return "advice only: needs a platform change (storage, network, placement)"
    return "advice only: needs a person to apply it"


def _seen(message: str) -> str:
    """The 'Seen:' part of a finding's message (the whole message without that form)."""
    return message.split("Meaning:", 1)[0].removeprefix("Seen:").strip().rstrip(".")


def why(analysis: Analysis) -> str:
    """Why the workload gets no automatic change, or what holds part of it back; '-' for nothing.

    The InsufficientData reason, 'advice only: needs X' when the main action cannot be applied,
    and the first veto that keeps capacity-reducing actions out.
    """
    parts: list[str] = []
    if analysis.primary is DiagnosisCode.INSUFFICIENT_DATA:
        finding = next((f for f in analysis.findings if f.code is DiagnosisCode.INSUFFICIENT_DATA), None)
        parts.append(_seen(finding.message) if finding else "not enough data in the window")
    action = analysis.main_action
    if action is not None and not action.automatic:
        parts.append(advice_reason(action))
    if analysis.vetoes:
        veto = analysis.vetoes[0]
        more = f" (+{len(analysis.vetoes) - 1} more)" if len(analysis.vetoes) > 1 else ""
        parts.append(f"no capacity cut while {veto.name}: {veto.reason}{more}")
    return "; ".join(parts) or "-"


# --- totals -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Totals:
    """Sums over some rows: GPU-hours a day freed, apart if offered, wasted, and money when priced."""

    label: str
    workloads: int
    savings_gpu_hours: float
    if_offered_gpu_hours: float
    waste_gpu_hours: float | None
    waste_per_day: float | None
    savings_per_day: float | None


def _sum_present(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None and math.isfinite(v)]
    return math.fsum(present) if present else None


def _money_figure(row: ReportRow, part: str, name: str) -> float | None:
    value = row.money.get(part, {}).get(name)
    return float(value) if isinstance(value, int | float) else None


def totals(label: str, rows: Sequence[ReportRow]) -> Totals:
    """The sums of `rows`."""
    return Totals(
        label=label,
        workloads=len(rows),
        savings_gpu_hours=math.fsum(r.analysis.savings.gpu_hours_per_day for r in rows),
        if_offered_gpu_hours=math.fsum(r.analysis.savings.if_offered_gpu_hours_per_day for r in rows),
        waste_gpu_hours=_sum_present(_money_figure(r, "waste", "gpuHoursPerDay") for r in rows),
        waste_per_day=_sum_present(_money_figure(r, "cost", "wastePerDay") for r in rows),
        savings_per_day=_sum_present(_money_figure(r, "cost", "savingsPerDay") for r in rows),
    )


def by_namespace(rows: Sequence[ReportRow]) -> list[tuple[str, list[ReportRow]]]:
    """Rows grouped by namespace, namespaces in order, rows keeping their order within one."""
    ordered = sorted(rows, key=lambda r: r.analysis.workload.namespace)
    return [
        (name, list(group)) for name, group in groupby(ordered, key=lambda r: r.analysis.workload.namespace)
    ]


def has_waste(rows: Sequence[ReportRow]) -> bool:
    """Whether any row carries waste figures (the WASTE column shows)."""
    return any("waste" in r.money for r in rows)


def has_cost(rows: Sequence[ReportRow]) -> bool:
    """Whether any row carries a price (the money columns show): no price, no money column."""
    return any("cost" in r.money for r in rows)


def hours_text(hours: float | None) -> str:
    """GPU-hours a day, '-' for none."""
    return "-" if hours is None or hours <= 0 else f"{hours:.1f} GPU-h/d"


def money_text(amount: float | None) -> str:
    """An amount a day in the price's currency, '-' when unknown."""
    return "-" if amount is None else f"{amount:,.2f}/d"


def money_line(row: ReportRow) -> str:
    """' · waste ... · waste cost ... · savings value ...' for what the row carries; '' for none."""
    parts = []
    if "waste" in row.money:
        parts.append(f"waste {hours_text(_money_figure(row, 'waste', 'gpuHoursPerDay'))}")
    if "cost" in row.money:
        parts.append(f"waste cost {money_text(_money_figure(row, 'cost', 'wastePerDay'))}")
        parts.append(f"savings value {money_text(_money_figure(row, 'cost', 'savingsPerDay'))}")
    return "".join(f" · {part}" for part in parts)


# --- table --------------------------------------------------------------------------------------------
#: The table's columns; the waste and money columns go before CONFIDENCE, only when present.
TABLE_COLUMNS = ("WORKLOAD", "DIAGNOSIS", "ACTION", "WHY", "GPU BUSY P95", "SAVINGS", "CONFIDENCE")
TABLE_WASTE_COLUMNS = ("WASTE",)
TABLE_COST_COLUMNS = ("WASTE COST", "SAVINGS VALUE")


def _table_cells(row: ReportRow, waste: bool, cost: bool) -> list[str]:
    a = row.analysis
    cells = [
        a.workload.key,
        a.primary.value,
        first_action(a),
        why(a),
        percent(a.gpu_busy_p95),
        savings_text(a),
    ]
    if waste:
        cells.append(hours_text(_money_figure(row, "waste", "gpuHoursPerDay")))
    if cost:
        cells.append(money_text(_money_figure(row, "cost", "wastePerDay")))
        cells.append(money_text(_money_figure(row, "cost", "savingsPerDay")))
    cells.append(percent(a.confidence))
    return cells


def _total_cells(total: Totals, waste: bool, cost: bool) -> list[str]:
    apart = f" [{total.if_offered_gpu_hours:.1f} if offered]" if total.if_offered_gpu_hours > 0 else ""
    cells = [
        f"{total.label} ({total.workloads} workload{'' if total.workloads == 1 else 's'})",
        "",
        "",
        "",
        "",
        f"{hours_text(total.savings_gpu_hours)}{apart}",
    ]
    if waste:
        cells.append(hours_text(total.waste_gpu_hours))
    if cost:
        cells.extend([money_text(total.waste_per_day), money_text(total.savings_per_day)])
    cells.append("")
    return cells


def render_table(rows: Sequence[ReportRow], *, group_by: str | None = None, width: int | None = None) -> str:
    """A table for a terminal whose long cells wrap, with a total row (and one per namespace)."""
    if not rows:
        return "(no GPU workloads in the window)\n"
    waste, cost = has_waste(rows), has_cost(rows)
    headers = [
        *TABLE_COLUMNS[:-1],
        *(TABLE_WASTE_COLUMNS if waste else ()),
        *(TABLE_COST_COLUMNS if cost else ()),
    ]
    headers.append(TABLE_COLUMNS[-1])
    table = Table(box=box.SIMPLE_HEAD, show_lines=True, header_style="bold")
    # the workload key folds only past 64 characters; ACTION and WHY take the wrapping
    fixed = {
        "WORKLOAD": min(64, max(len(r.analysis.workload.key) for r in rows)),
        "DIAGNOSIS": max(len(r.analysis.primary.value) for r in rows),
    }
    for header in headers:
        table.add_column(header, overflow="fold", min_width=fixed.get(header))
    groups = by_namespace(rows) if group_by == "namespace" else [("", list(rows))]
    for name, members in groups:
        for row in members:
            table.add_row(*map(Text, _table_cells(row, waste, cost)))
        if group_by == "namespace":
            table.add_row(
                *map(Text, _total_cells(totals(f"namespace {name}", members), waste, cost)), style="bold"
            )
    table.add_row(*map(Text, _total_cells(totals("TOTAL", rows), waste, cost)), style="bold")
    buffer = io.StringIO()
    columns = width or shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    Console(file=buffer, width=columns, color_system=None, force_terminal=False, legacy_windows=False).print(
        table
    )
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()).strip("\n") + "\n"


# --- documents ----------------------------------------------------------------------------------------
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


#: CSV columns, in order; ratios are 0..1 fractions (machine-readable), not percentages.
CSV_COLUMNS = (
    "namespace",
    "kind",
    "name",
    "diagnosis",
    "confidence",
    "gpu_busy_p95",
    "action",
    "automatic",
    "resource",
    "target",
    "predicted_slowdown",
    "why",
    "gpu_hours_per_day_saved",
    "share_of_allocation_saved",
    "gpu_hours_per_day_if_offered",
    "samples",
    "summary",
    "warnings",
)
#: Money columns, added after `CSV_COLUMNS` only when some row carries them.
CSV_WASTE_COLUMNS = ("waste_gpu_hours_per_day", "allocated_gpus", "busy_fraction")
CSV_COST_COLUMNS = ("price_per_gpu_hour", "cost_per_day", "waste_per_day", "savings_per_day")
_CSV_MONEY_FIELDS = {
    "waste_gpu_hours_per_day": ("waste", "gpuHoursPerDay"),
    "allocated_gpus": ("waste", "allocatedGpus"),
    "busy_fraction": ("waste", "busyFraction"),
    "price_per_gpu_hour": ("cost", "pricePerGPUHour"),
    "cost_per_day": ("cost", "perDay"),
    "waste_per_day": ("cost", "wastePerDay"),
    "savings_per_day": ("cost", "savingsPerDay"),
}


def _number(value: float | None, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def render_csv(rows: Sequence[ReportRow]) -> str:
    """One CSV line per workload: the table's columns, the main action's machine-readable fields
    (automatic, resource, target as compact JSON, predicted slowdown), the summary and warnings."""
    money = [
        *(CSV_WASTE_COLUMNS if has_waste(rows) else ()),
        *(CSV_COST_COLUMNS if has_cost(rows) else ()),
    ]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*CSV_COLUMNS, *money])
    for r in rows:
        a = r.analysis
        action = a.main_action
        target = (
            json.dumps(
                action.target.model_dump(by_alias=True, mode="json", exclude_defaults=True),
                separators=(",", ":"),
            )
            if action is not None and action.target is not None
            else ""
        )
        writer.writerow(
            [
                a.workload.namespace,
                a.workload.kind,
                a.workload.name,
                a.primary.value,
                f"{a.confidence:.3f}",
                _number(a.gpu_busy_p95, 4),
                first_action(a) if action is not None else "",
                "" if action is None else str(action.automatic).lower(),
                "" if action is None else action.resource or "",
                target,
                "" if action is None else _number(action.predicted_slowdown, 4),
                why(a) if why(a) != "-" else "",
                f"{a.savings.gpu_hours_per_day:.3f}",
                f"{a.savings.share_of_allocation:.3f}",
                f"{a.savings.if_offered_gpu_hours_per_day:.3f}",
                a.samples,
                a.summary,
                "; ".join(r.warnings),
                *(_number(_money_figure(r, *_CSV_MONEY_FIELDS[column]), 4) for column in money),
            ]
        )
    return buffer.getvalue()


def render(rows: Sequence[ReportRow], output: str, *, group_by: str | None = None) -> str:
    """Render in one of the text `FORMATS` (HTML: `report_html.render_html`)."""
    if output == "table":
        return render_table(rows, group_by=group_by)
    renderers = {"json": render_json, "yaml": render_yaml, "csv": render_csv}
    if output not in renderers:
        raise ValueError(f"unknown output format {output!r}; choose one of {', '.join(FORMATS)}")
    return renderers[output](rows)
