"""The `analyze -o html` report: one self-contained file (inline CSS and SVG, no script, no network).

Per namespace its totals; per workload its diagnosis, why it gets no automatic change, its actions,
findings and vetoes, plots of the window (GPU busy, SM activity, CPU against the limit, GPU memory
against the capacity) and, for a change that was applied, before and after with the verdict.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from gpu_rightsizer.logic.timeline import Sample, Timeline
from gpu_rightsizer.model.crd import ApplyStatus
from gpu_rightsizer.model.result import Analysis
from gpu_rightsizer.report import (
    ReportRow,
    Totals,
    action_text,
    advice_reason,
    by_namespace,
    has_cost,
    has_waste,
    hours_text,
    money_line,
    money_text,
    percent,
    savings_text,
    totals,
    why,
)

_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1d232a;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px}h3{font-size:16px;margin:0 0 6px}
h4{font-size:13px;margin:14px 0 4px;text-transform:uppercase;letter-spacing:.04em;color:#56606b}
.meta{color:#56606b;font-size:13px}
table{border-collapse:collapse;font-size:13px}th,td{border-bottom:1px solid #e3e6ea;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#f4f6f8}td.num,th.num{text-align:right}
tfoot td{font-weight:600;border-top:2px solid #1d232a}
article.workload{border:1px solid #d6dae0;border-radius:6px;padding:14px 16px;margin:14px 0}
.code{font-weight:600;padding:1px 6px;border-radius:4px;background:#eef1f4}
.code.Healthy{background:#e3f4e6}.code.InsufficientData{background:#fdf3d8}
.why{font-size:13px;color:#56606b;margin:4px 0}
.plots{display:flex;flex-wrap:wrap;gap:12px;margin:10px 0}
figure.plot{margin:0;border:1px solid #e3e6ea;border-radius:4px;padding:6px}
figure.plot figcaption{font-size:12px;color:#56606b}
.no-data{font-size:12px;color:#8a939c;width:320px;height:110px;display:flex;align-items:center;
justify-content:center;background:#f7f8fa;margin:0}
ul{font-size:13px;padding-left:20px}.finding{font-size:13px;margin:6px 0}.finding .line{margin:0 0 2px}.advice{color:#8a5a00}
.verdict-Verified{color:#1b7a2e;font-weight:600}.verdict-RolledBack{color:#b42318;font-weight:600}
.verdict-Inconclusive{color:#8a5a00;font-weight:600}
svg text{font-size:10px;fill:#56606b;font-family:inherit}
"""

#: One colour per plot (the Chromium test finds each one on the screenshot).
PLOT_COLOURS = {
    "gpu-busy": "#1f77b4",
    "sm-active": "#2ca02c",
    "cpu": "#d62728",
    "gpu-memory": "#9467bd",
}
_WIDTH, _HEIGHT = 320, 110
_LEFT, _RIGHT, _TOP, _BOTTOM = 40, 8, 8, 18


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


@dataclass(frozen=True)
class Plot:
    """One plot's series and the line it is read against."""

    name: str  # a key of PLOT_COLOURS
    title: str
    samples: list[Sample]
    unit_max: float  # top of the y axis
    label: str  # how a y value is written, with {value}
    scale: float = 1.0  # y value = sample value × scale
    reference: float | None = None  # in scaled units
    reference_label: str = ""
    missing: str = "no series in the window"


def _clock(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%H:%M:%S")


def svg_plot(plot: Plot, start: float, end: float) -> str:
    """The plot as inline SVG over [start, end], or a note when it has no samples."""
    if not plot.samples:
        return f'<p class="no-data" data-plot="{plot.name}">{_e(plot.missing)}</p>'
    inner_w, inner_h = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM
    span = max(end - start, 1e-9)
    top = plot.unit_max or 1.0

    def x(t: float) -> float:
        return _LEFT + (min(max(t, start), end) - start) / span * inner_w

    def y(value: float) -> float:
        return _TOP + inner_h - min(max(value, 0.0), top) / top * inner_h

    points = " ".join(f"{x(t):.1f},{y(v * plot.scale):.1f}" for t, v in plot.samples)
    colour = PLOT_COLOURS[plot.name]
    parts = [
        f'<svg class="plot" data-plot="{plot.name}" data-points="{len(plot.samples)}" '
        f'width="{_WIDTH}" height="{_HEIGHT}" viewBox="0 0 {_WIDTH} {_HEIGHT}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{_e(plot.title)}">',
        f'<rect x="{_LEFT}" y="{_TOP}" width="{inner_w}" height="{inner_h}" fill="#fafbfc" stroke="#e3e6ea"/>',
        f'<text x="{_LEFT - 4}" y="{_TOP + 8}" text-anchor="end">{_e(plot.label.format(value=top))}</text>',
        f'<text x="{_LEFT - 4}" y="{_TOP + inner_h}" text-anchor="end">0</text>',
        f'<text x="{_LEFT}" y="{_HEIGHT - 4}">{_clock(start)}</text>',
        f'<text x="{_WIDTH - _RIGHT}" y="{_HEIGHT - 4}" text-anchor="end">{_clock(end)} UTC</text>',
    ]
    if plot.reference is not None:
        ref_y = y(plot.reference)
        parts.append(
            f'<line class="reference" x1="{_LEFT}" x2="{_LEFT + inner_w}" y1="{ref_y:.1f}" y2="{ref_y:.1f}" '
            'stroke="#56606b" stroke-dasharray="4 3"/>'
        )
        parts.append(
            f'<text x="{_LEFT + inner_w - 2}" y="{max(ref_y - 3, _TOP + 9):.1f}" text-anchor="end">'
            f"{_e(plot.reference_label)}</text>"
        )
    parts.append(
        f'<polyline class="series" points="{points}" fill="none" stroke="{colour}" stroke-width="2" '
        'stroke-linejoin="round"/>'
    )
    parts.append("</svg>")
    return "".join(parts)


def plots_of(timeline: Timeline) -> list[Plot]:
    """The four plots of a workload's timeline."""
    cpu_peak = max((v for _, v in timeline.cpu_cores), default=0.0)
    cpu_top = max(cpu_peak, timeline.cpu_limit_cores or 0.0) * 1.1 or 1.0
    used_peak = max((v for _, v in timeline.gpu_memory_used_mib), default=0.0) / 1024
    capacity = None if timeline.gpu_memory_capacity_mib is None else timeline.gpu_memory_capacity_mib / 1024
    memory_top = max(used_peak, capacity or 0.0) * 1.05 or 1.0
    return [
        Plot("gpu-busy", "GPU busy, busiest GPU", timeline.gpu_busy, 1.0, "{value:.0%}"),
        Plot(
            "sm-active",
            "SM activity, busiest GPU",
            timeline.sm_active,
            1.0,
            "{value:.0%}",
            missing="no SM activity series (the profiling fields are off, or a MIG slice)",
        ),
        Plot(
            "cpu",
            "CPU cores, busiest pod, against its limit",
            timeline.cpu_cores,
            cpu_top,
            "{value:.1f}",
            reference=timeline.cpu_limit_cores,
            reference_label=f"limit {timeline.cpu_limit_cores:g}" if timeline.cpu_limit_cores else "",
            missing="no CPU series (cAdvisor)",
        ),
        Plot(
            "gpu-memory",
            "GPU memory used (GiB), fullest GPU, against its capacity",
            timeline.gpu_memory_used_mib,
            memory_top,
            "{value:.0f}",
            scale=1 / 1024,
            reference=capacity,
            reference_label=f"capacity {capacity:.0f} GiB" if capacity else "",
        ),
    ]


def _plots_html(timeline: Timeline | None) -> str:
    if timeline is None or timeline.empty:
        return '<p class="no-data" data-plot="none">no series to plot for this workload</p>'
    plots = plots_of(timeline)
    stamps = [t for p in plots for t, _ in p.samples]
    start, end = min(stamps), max(stamps)
    figures = [
        f'<figure class="plot">{svg_plot(p, start, end)}<figcaption>{_e(p.title)}</figcaption></figure>'
        for p in plots
    ]
    return f'<div class="plots">{"".join(figures)}</div>'


# --- tables -------------------------------------------------------------------------------------------
def _totals_cells(total: Totals, waste: bool, cost: bool) -> str:
    apart = f"{total.if_offered_gpu_hours:.1f} GPU-h/d" if total.if_offered_gpu_hours > 0 else "-"
    cells = [
        f"<td>{_e(total.label)}</td>",
        f'<td class="num">{total.workloads}</td>',
        f'<td class="num">{_e(hours_text(total.savings_gpu_hours))}</td>',
        f'<td class="num">{_e(apart)}</td>',
    ]
    if waste:
        cells.append(f'<td class="num">{_e(hours_text(total.waste_gpu_hours))}</td>')
    if cost:
        cells.append(f'<td class="num">{_e(money_text(total.waste_per_day))}</td>')
        cells.append(f'<td class="num">{_e(money_text(total.savings_per_day))}</td>')
    return "".join(cells)


def _totals_table(rows: Sequence[ReportRow]) -> str:
    waste, cost = has_waste(rows), has_cost(rows)
    headers = ["namespace", "workloads", "savings", "savings if offered"]
    headers += ["waste"] if waste else []
    headers += ["waste cost", "savings value"] if cost else []
    head = "".join(f'<th class="{"" if i == 0 else "num"}">{_e(h)}</th>' for i, h in enumerate(headers))
    body = "".join(
        f'<tr data-namespace="{_e(name)}">{_totals_cells(totals(name, members), waste, cost)}</tr>'
        for name, members in by_namespace(rows)
    )
    foot = f"<tr>{_totals_cells(totals('total', rows), waste, cost)}</tr>"
    return (
        f'<table class="totals"><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
        f"<tfoot>{foot}</tfoot></table>"
    )


def _actions_html(analysis: Analysis) -> str:
    if not analysis.actions:
        return ""
    rows = []
    for action in analysis.actions:
        mode = "automatic" if action.automatic else advice_reason(action)
        slowdown = (
            ""
            if action.predicted_slowdown is None
            else f" Predicted slowdown × {action.predicted_slowdown:.3f}."
        )
        rows.append(
            f"<tr><td>{_e(action_text(action))}</td>"
            f'<td class="{"" if action.automatic else "advice"}">{_e(mode)}</td>'
            f"<td>{_e(action.reason)}{_e(slowdown)}</td></tr>"
        )
    return (
        '<h4>Changes</h4><table class="actions"><thead><tr><th>change</th><th>applied</th>'
        f"<th>reason</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


_PARTS = re.compile(r"\s*(Seen:|Meaning:|Change:)\s*")


def _finding_lines(message: str) -> str:
    """A finding's message with its Seen / Meaning / Change parts on their own lines."""
    pieces = _PARTS.split(message)
    if len(pieces) < 3:
        return f'<p class="line">{_e(message)}</p>'
    lines = [f'<p class="line">{_e(pieces[0])}</p>'] if pieces[0].strip() else []
    lines.extend(
        f'<p class="line"><b>{_e(label)}</b> {_e(text)}</p>'
        for label, text in zip(pieces[1::2], pieces[2::2], strict=True)
    )
    return "".join(lines)


def _findings_html(analysis: Analysis) -> str:
    items = []
    for finding in analysis.findings:
        evidence = ", ".join(f"{_e(k)} {v:g}" for k, v in sorted(finding.evidence.items()))
        items.append(
            f'<div class="finding"><span class="code {_e(finding.code.value)}">{_e(finding.code.value)}</span> '
            f"{_e(finding.severity.value)}, confidence {percent(finding.confidence)}"
            f"{_finding_lines(finding.message)}"
            + (f'<p class="line meta">evidence: {evidence}</p>' if evidence else "")
            + "</div>"
        )
    vetoes = "".join(
        f"<li><b>{_e(v.name)}</b> ({_e(v.cause.value)}): {_e(v.reason)}. Measure next: {_e(v.measure_next)}</li>"
        for v in analysis.vetoes
    )
    out = f"<h4>Findings</h4>{''.join(items)}" if items else ""
    return out + (f"<h4>Why nothing shrinks</h4><ul>{vetoes}</ul>" if vetoes else "")


def _history_html(apply: ApplyStatus | None) -> str:
    """Applied changes: the one under way, then each finished one with before, after and its verdict."""
    if apply is None or not (apply.history or apply.applied_at):
        return ""
    parts = ["<h4>Applied changes</h4>"]
    phase = apply.change_phase()
    if phase is not None and apply.in_flight:
        parts.append(
            f'<p class="meta">under way: {_e(phase.value)} since {_e(apply.applied_at or "")}; {_e(apply.reason)}</p>'
        )
    for entry in reversed(apply.history):
        names = sorted(set(entry.before) | set(entry.after))
        figures = "".join(
            f'<tr><td>{_e(n)}</td><td class="num">{_fig(entry.before.get(n))}</td>'
            f'<td class="num">{_fig(entry.after.get(n))}</td></tr>'
            for n in names
        )
        parts.append(
            f'<div class="change" data-outcome="{_e(entry.outcome.value)}"><p>{_e(entry.change or entry.change_id)}, '
            f"applied {_e(entry.at.isoformat())}: "
            f'<span class="verdict-{_e(entry.outcome.value)}">{_e(entry.outcome.value)}</span> '
            f"{_e(entry.reason)}</p>"
            + (
                '<table class="before-after"><thead><tr><th>figure</th><th class="num">before</th>'
                f'<th class="num">after</th></tr></thead><tbody>{figures}</tbody></table>'
                if figures
                else ""
            )
            + "</div>"
        )
    return "".join(parts)


def _fig(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _workload_html(row: ReportRow) -> str:
    a = row.analysis
    reason = why(a)
    warnings = "".join(f"<li>{_e(w)}</li>" for w in row.warnings)
    return (
        f'<article class="workload" id="{_e(a.workload.key)}"><h3>{_e(a.workload.key)}</h3>'
        f'<p><span class="code {_e(a.primary.value)}">{_e(a.primary.value)}</span> confidence '
        f"{percent(a.confidence)} · GPU busy p95 {percent(a.gpu_busy_p95)} · savings {_e(savings_text(a))}"
        f"{_e(money_line(row))}</p>"
        f'<p class="meta">{_e(a.summary)}</p>'
        + (f'<p class="why">Why: {_e(reason)}</p>' if reason != "-" else "")
        + _plots_html(row.timeline)
        + _actions_html(a)
        + _findings_html(a)
        + _history_html(row.apply)
        + (f'<h4>Data warnings</h4><ul class="meta">{warnings}</ul>' if warnings else "")
        + "</article>"
    )


def render_html(rows: Sequence[ReportRow], *, generated: datetime | None = None) -> str:
    """The whole report as one HTML document that needs nothing else to open."""
    when = (generated or datetime.now(tz=UTC)).strftime("%Y-%m-%d %H:%M UTC")
    windows = sorted({r.window for r in rows if r.window})
    window = windows[0] if len(windows) == 1 else f"{len(windows)} windows"
    sections = "".join(
        f'<section class="namespace" data-namespace="{_e(name)}"><h2>{_e(name)}</h2>'
        + "".join(_workload_html(r) for r in members)
        + "</section>"
        for name, members in by_namespace(rows)
    )
    body = _totals_table(rows) + sections if rows else '<p class="no-data">no GPU workloads in the window</p>'
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>gpu-rightsizer report</title><style>{_STYLE}</style></head><body>"
        f'<h1>GPU rightsizing report</h1><p class="meta">{len(rows)} GPU workload(s); window {_e(window)}; '
        f"generated {when} by gpu-rightsizer analyze</p>"
        f"<h2>Totals by namespace</h2>{body}</body></html>\n"
    )
