"""Why one workload wastes its GPU, in the terminal: findings, evidence, vetoes, and the window drawn.

gpu-rightsizer explain trainer -n team-a                  (Prometheus found through the kubeconfig)
gpu-rightsizer explain Deployment/llm-serve -n serving --context prod --window 6h
gpu-rightsizer explain trainer -n team-a --prometheus http://127.0.0.1:9090 --at 2026-05-01T12:00:00Z

Sparklines show GPU busy and SM activity of the busiest GPU (0 to 100 %) and the busiest pod's CPU
against its CPU limit (the top of its line is the limit; `▔` marks a stretch at or over it), the
series the HTML report plots (`logic.timeline`). The exit code is 0 when the workload was explained, 1 when it was not found or the
source cannot be read, 2 for bad arguments. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import math
import sys
import textwrap
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from gpu_rightsizer.config import parse_duration

if TYPE_CHECKING:
    from gpu_rightsizer.logic.timeline import Timeline
    from gpu_rightsizer.model.observation import WorkloadWindow
    from gpu_rightsizer.model.result import Analysis

DEFAULT_WINDOW_SECONDS = 3600.0
DEFAULT_WIDTH = 60
#: Eight levels, lowest first; a blank is a step without data.
BLOCKS = "▁▂▃▄▅▆▇█"
#: A step at or above the top of its scale (CPU at its limit).
AT_LIMIT = "▔"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the `explain` options."""
    from gpu_rightsizer.commands.analyze import parse_time
    from gpu_rightsizer.commands.prometheus_access import add_connection_arguments

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("workload", metavar="WORKLOAD", help="the workload: NAME or KIND/NAME")
    parser.add_argument("-n", "--namespace", default="default", help="its namespace (default: default)")
    parser.add_argument(
        "--prometheus",
        metavar="URL",
        help="Prometheus base URL (env PROMETHEUS_URL); without it, Prometheus is found in the "
        "kubeconfig's cluster (--context)",
    )
    parser.add_argument(
        "--window",
        type=parse_duration,
        default=DEFAULT_WINDOW_SECONDS,
        help="observation window (default 1h)",
    )
    parser.add_argument("--at", type=parse_time, default=None, help="end of the window (default: now)")
    parser.add_argument(
        "--step",
        type=parse_duration,
        default=None,
        help="sample step (default: the operator's rule, window/60 between 1s and 60s)",
    )
    parser.add_argument(
        "--width",
        type=int,
        default=DEFAULT_WIDTH,
        help=f"characters per sparkline (default {DEFAULT_WIDTH})",
    )
    add_connection_arguments(parser)


def sparkline(
    samples: Sequence[tuple[float, float]], start: float, end: float, width: int, top: float
) -> str:
    """(unix seconds, value) samples over [start, end] as `width` characters: each the mean of the
    samples in its share of the time on a 0..`top` scale, blank where it has none, `AT_LIMIT` where
    the mean reaches `top`."""
    if width <= 0 or top <= 0 or end <= start:
        return ""
    cells: list[list[float]] = [[] for _ in range(width)]
    for at, value in samples:
        if math.isfinite(value) and start <= at <= end:
            cells[min(width - 1, int((at - start) / (end - start) * width))].append(value)
    line = []
    for values in cells:
        if not values:
            line.append(" ")
            continue
        level = sum(values) / len(values) / top
        line.append(
            AT_LIMIT if level >= 1.0 else BLOCKS[max(0, min(len(BLOCKS) - 1, int(level * len(BLOCKS))))]
        )
    return "".join(line)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _plot_lines(timeline: Timeline, window: WorkloadWindow, width: int) -> list[str]:
    start, end = window.start.timestamp(), window.end.timestamp()
    limit = timeline.cpu_limit_cores
    cpu_peak = max((v for _, v in timeline.cpu_cores), default=0.0)
    cpu_top = limit or cpu_peak or 1.0
    cpu_scale = f"0-{cpu_top:g} cores (the limit)" if limit else f"0-{cpu_top:.2g} cores (no limit: the peak)"
    rows = (
        ("GPU busy", timeline.gpu_busy, 1.0, "0-100%, busiest GPU"),
        ("SM active", timeline.sm_active, 1.0, "0-100%, busiest GPU"),
        ("CPU", timeline.cpu_cores, cpu_top, f"{cpu_scale}, busiest pod"),
    )
    hours = (end - start) / 3600
    lines = [f"{'':10}  {window.start:%H:%M}{'':{max(0, width - 10)}}{window.end:%H:%M}  ({hours:g}h)"]
    for label, samples, top, scale in rows:
        if not samples:
            lines.append(f"{label:10}  (no series in the window)")
            continue
        values = [v for _, v in samples]
        mean, peak = sum(values) / len(values), max(values)
        is_cpu = label == "CPU"
        figures = (
            f"mean {mean:.2f}, max {peak:.2f} cores" + (f", limit {limit:g}" if limit else "")
            if is_cpu
            else f"mean {mean:.0%}, max {peak:.0%}"
        )
        lines.append(f"{label:10}  {sparkline(samples, start, end, width, top)}  {figures}  [{scale}]")
    return lines


def render_explanation(
    window: WorkloadWindow,
    analysis: Analysis,
    timeline: Timeline,
    *,
    step: float,
    width: int,
    notes: Sequence[str] = (),
) -> str:
    """The terminal text for one workload."""
    from gpu_rightsizer.logic.status import confidence_text, describe_action

    ref = analysis.workload
    allocation = window.allocation
    wrap = textwrap.TextWrapper(width=100, initial_indent="    ", subsequent_indent="    ")
    heading = textwrap.TextWrapper(width=100, initial_indent="  ", subsequent_indent="      ")
    out = [
        f"{ref.namespace}/{ref.kind}/{ref.name}: {analysis.primary.value} "
        f"(confidence {confidence_text(analysis.confidence)})",
        f"  window {window.start.isoformat()} → {window.end.isoformat()}, step {step:g}s, "
        f"{analysis.samples} samples; GPU busy p95 {_percent(analysis.gpu_busy_p95)}",
        f"  allocation: {allocation.gpu_count} × {allocation.gpu_resource}"
        + (f" ({allocation.gpu_model})" if allocation.gpu_model else "")
        + (f", cpu limit {allocation.cpu_limit_cores:g} cores" if allocation.cpu_limit_cores else "")
        + f", {allocation.replicas} replica(s), {len(window.pods)} pod(s) seen",
    ]
    if analysis.summary:
        out += heading.wrap(analysis.summary)
    out += ["", *_plot_lines(timeline, window, width), "", "Findings"]
    for finding in analysis.findings or []:
        out.append(
            f"  {finding.code.value} ({finding.severity.value}, confidence {confidence_text(finding.confidence)})"
        )
        out += wrap.wrap(finding.message)
        if finding.evidence:
            evidence = ", ".join(f"{name} {value:.3g}" for name, value in finding.evidence.items())
            out += wrap.wrap(f"evidence: {evidence}")
    if not analysis.findings:
        out.append("  (none)")
    out.append("Actions")
    for action in analysis.actions:
        how = "automatic under an Apply policy" if action.automatic else "advice for people"
        out += heading.wrap(f"{describe_action(action)}  ({how})")
        out += wrap.wrap(action.reason)
    if not analysis.actions:
        out.append("  (none)")
    out.append("Vetoes (why nothing shrinks)")
    for veto in analysis.vetoes:
        out.append(f"  {veto.name} → {veto.cause.value}")
        out += wrap.wrap(f"{veto.reason}. Measure next: {veto.measure_next}")
    if not analysis.vetoes:
        out.append("  (none)")
    savings = analysis.savings
    out.append(
        f"Savings: {savings.gpu_hours_per_day:.1f} GPU-h/day ({savings.share_of_allocation:.0%} of the allocation)"
    )
    warnings = sorted(set(window.warnings) | set(notes))
    if warnings:
        out.append("Data warnings")
        for warning in warnings:
            out += wrap.wrap(warning)
    return "\n".join(out) + "\n"


def _progress(message: str) -> None:
    print(f"[explain] {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Read the workload's window, diagnose it as `analyze` does, and print its explanation."""
    from gpu_rightsizer.adapters.capacity import with_idle_floors
    from gpu_rightsizer.adapters.prometheus import PrometheusSource, PrometheusSourceError
    from gpu_rightsizer.adapters.prometheus_discovery import PrometheusNotFoundError
    from gpu_rightsizer.adapters.source import step_for
    from gpu_rightsizer.commands.analyze import diagnose
    from gpu_rightsizer.commands.prometheus_access import prometheus_config
    from gpu_rightsizer.config import MatcherError
    from gpu_rightsizer.logic.thresholds import EngineSettings
    from gpu_rightsizer.logic.timeline import Timeline, with_allocation

    if args.width < 10:
        print("error: --width must be at least 10", file=sys.stderr)
        return 2
    end = args.at or datetime.now(tz=UTC)
    step = args.step or step_for(args.window)
    try:
        source = PrometheusSource(prometheus_config(args, _progress))
        plotted: dict[str, Timeline] = {}
        windows = source.read(
            window_seconds=args.window,
            at=end,
            step_seconds=step,
            namespace=args.namespace,
            workload=args.workload,
            progress=_progress,
            timelines=plotted,
        )
        windows = [w for w in windows if w.workload.namespace == args.namespace]
        if not windows:
            print(
                f"error: no GPU workload {args.workload!r} in namespace {args.namespace} in the "
                f"{args.window:g}s ending {end.isoformat()} at {source.config.url}",
                file=sys.stderr,
            )
            return 1
        capacity = with_idle_floors(
            source.read_capacity(end), lambda: source.read_unheld_gpus(end, args.window)
        )
        texts = []
        for window, analysis, notes in diagnose(windows, capacity, EngineSettings()):
            timeline = with_allocation(plotted.get(window.workload.key) or Timeline(), window)
            texts.append(
                render_explanation(window, analysis, timeline, step=step, width=args.width, notes=notes)
            )
    except (PrometheusSourceError, PrometheusNotFoundError, MatcherError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    sys.stdout.write("\n".join(texts))
    return 0
