"""One-shot report: why do the GPU workloads waste their GPUs, and what to change.

gpu-rightsizer analyze --prometheus http://127.0.0.1:9090 --window 1h
gpu-rightsizer analyze --context prod --window 6h     (finds Prometheus in the cluster, via the API server)
gpu-rightsizer analyze --openmetrics dump.om -n team-a -o json
gpu-rightsizer analyze --prometheus URL --at 2026-05-01T12:00:00Z --workload trainer -o csv
gpu-rightsizer analyze --openmetrics recording.om.gz --min-window 30s --set cpuSaturation=0.8 -o json

The exit code reflects errors only (0 whatever the diagnoses; 1 when the source cannot be read, 2 for
bad arguments). Progress goes to stderr, the report to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from gpu_rightsizer.config import parse_duration

if TYPE_CHECKING:
    from collections.abc import Iterator

    from gpu_rightsizer.logic.capacity import ClusterCapacity
    from gpu_rightsizer.logic.thresholds import EngineSettings
    from gpu_rightsizer.model.codes import SharingStrategy
    from gpu_rightsizer.model.crd import ApplyStatus
    from gpu_rightsizer.model.observation import WorkloadWindow
    from gpu_rightsizer.model.result import Analysis
    from gpu_rightsizer.report import ReportRow

DEFAULT_WINDOW_SECONDS = 3600.0
DEFAULT_MAX_INPUT_MIB = 4096


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from error
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def parse_time(text: str) -> datetime:
    """An RFC 3339 time ('2026-05-01T12:00:00Z') or Unix seconds."""
    try:
        return datetime.fromtimestamp(float(text), tz=UTC)
    except (OverflowError, OSError) as error:  # inf, 1e300: no time a datetime can hold
        raise argparse.ArgumentTypeError(f"invalid time {text!r}: out of range") from error
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"invalid time {text!r}: use RFC 3339 or Unix seconds") from error
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def parse_setting(text: str) -> tuple[str, object]:
    """A `NAME=VALUE` engine-setting override; VALUE is JSON when it parses, else a comma list or text."""
    name, separator, raw = text.partition("=")
    if not separator or not name.strip():
        raise argparse.ArgumentTypeError(f"invalid setting {text!r}: use NAME=VALUE, e.g. cpuSaturation=0.8")
    raw = raw.strip()
    try:
        return name.strip(), json.loads(raw)
    except ValueError:
        pass
    if "," in raw:
        return name.strip(), [item.strip() for item in raw.split(",") if item.strip()]
    return name.strip(), raw


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the `analyze` options."""
    from gpu_rightsizer.commands.prometheus_access import add_connection_arguments
    from gpu_rightsizer.model.codes import SharingStrategy

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--prometheus",
        metavar="URL",
        help="Prometheus base URL (env PROMETHEUS_URL); without it and --openmetrics, Prometheus is found "
        "in the kubeconfig's cluster (--context)",
    )
    source.add_argument(
        "--openmetrics", metavar="FILE", help="OpenMetrics or Prometheus text file, plain or gzipped"
    )
    parser.add_argument(
        "--window",
        type=parse_duration,
        default=None,
        help="observation window (default 1h, or an OpenMetrics file's span when that is shorter)",
    )
    parser.add_argument(
        "--at", type=parse_time, default=None, help="end of the window (default: now / newest sample)"
    )
    parser.add_argument(
        "--step",
        type=parse_duration,
        default=None,
        help="sample step (default: the operator's rule, window/60 between 1s and 60s; a file's own spacing)",
    )
    parser.add_argument(
        "--min-window",
        type=parse_duration,
        default=None,
        help="shortest window worth diagnosing (default 30m; e.g. 30s for short recordings)",
    )
    parser.add_argument(
        "--set",
        dest="settings",
        metavar="NAME=VALUE",
        type=parse_setting,
        action="append",
        default=[],
        help="override an engine threshold by its policy name (camelCase) or snake_case name; repeatable",
    )
    parser.add_argument(
        "--max-input-mib",
        type=_positive_int,
        default=DEFAULT_MAX_INPUT_MIB,
        help=f"largest --openmetrics text to read, after gzip expansion (default {DEFAULT_MAX_INPUT_MIB} MiB)",
    )
    parser.add_argument("-n", "--namespace", default=None, help="only this namespace")
    parser.add_argument("--workload", default=None, help="only this workload (NAME or KIND/NAME)")
    add_output_arguments(parser)
    parser.add_argument(
        "--sharing",
        choices=("auto", *(strategy.value for strategy in SharingStrategy)),
        default="auto",
        help="the cluster's GPU-sharing strategy (what a smaller allocation may be); auto (default) "
        "reads it from the nodes' GPU feature discovery labels and allocatable resources in the data "
        "(kube-state-metrics), and assumes mig-mixed only when the data has no node at all (its MIG or "
        "share then is advice, its savings counted apart); time-slicing names nvidia.com/gpu.shared "
        "(renameByDefault: true), time-slicing-no-rename the device plugin's default (nvidia.com/gpu on "
        "a -SHARED product); none: no MIG or sharing action",
    )
    add_connection_arguments(parser)
    parser.add_argument(
        "--trusted-gpu-target",
        dest="trusted_gpu_targets",
        metavar="MATCHERS",
        action="append",
        default=[],
        help="believe GPU series only from this scrape target, as matchers on its target labels, e.g. "
        "namespace=gpu-operator,service=nvidia-dcgm-exporter (repeatable; default: every target, "
        "unlike `run`; for --openmetrics, only a file whose series carry target labels, such as a "
        "/federate dump; docs/clusters.md)",
    )
    money = parser.add_argument_group("money (no price: no money)")
    money.add_argument(
        "--gpu-hour-price",
        metavar="PRICE",
        help="price of one GPU for one hour, for the GPU models --gpu-prices does not name; adds cost "
        "(per day, of the waste, of the savings) to each workload",
    )
    money.add_argument(
        "--gpu-prices",
        metavar="FILE",
        help="YAML or JSON map of GPU model to price per GPU-hour, e.g. 'NVIDIA-H100-80GB-HBM3: 2.5'",
    )


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the report's output options (format, file, grouping, the change records to show)."""
    from gpu_rightsizer.report import FORMATS, GROUPINGS

    parser.add_argument(
        "-o",
        "--output",
        choices=FORMATS,
        default="table",
        help="report format (default table; html: one self-contained file with plots, best with "
        "--output-file)",
    )
    parser.add_argument(
        "--output-file", metavar="FILE", default=None, help="write the report to FILE instead of stdout"
    )
    parser.add_argument(
        "--group-by",
        choices=GROUPINGS,
        default=None,
        help="table: a total row per namespace besides the grand total (the HTML report always has them)",
    )
    parser.add_argument(
        "--recommendations",
        metavar="FILE",
        default=None,
        help="GPURecommendations as `kubectl get gpurecommendations -A -o yaml` (or json) writes them: "
        "the HTML report shows each workload's applied changes, before and after, with the verdict",
    )


def _write_report(rows: list[ReportRow], args: argparse.Namespace) -> int:
    """Render the rows as asked and write them to the output file or stdout; 1 when that fails."""
    from gpu_rightsizer.report import render
    from gpu_rightsizer.report_html import render_html

    try:
        if args.output == "html":
            text = render_html(rows)
        else:
            text = render(rows, args.output, group_by=getattr(args, "group_by", None))
        output_file = getattr(args, "output_file", None)
        if output_file:
            Path(output_file).write_text(text, encoding="utf-8")
            _progress(f"report written to {output_file}")
        else:
            sys.stdout.write(text)
    except OSError as error:
        print(f"error: cannot write the report: {error}", file=sys.stderr)
        return 1
    return 0


def _change_records(path: str) -> dict[str, ApplyStatus]:
    """Each workload's `status.apply` (by `namespace/Kind/name`) from GPURecommendations in a file:
    a kubectl List, one object, or several YAML documents."""
    from gpu_rightsizer.model.crd import GPURecommendation

    text = Path(path).read_text(encoding="utf-8")
    try:
        documents = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as error:
        raise ValueError(f"{path} is not YAML or JSON: {error}") from error
    items = [
        i
        for d in documents
        if isinstance(d, dict)
        for i in (d.get("items") or [] if d.get("kind") == "List" else [d])
    ]
    records: dict[str, ApplyStatus] = {}
    for item in items:
        if not isinstance(item, dict) or item.get("kind") != GPURecommendation.KIND:
            continue
        try:
            recommendation = GPURecommendation.model_validate(item)
        except ValueError as error:
            name = item.get("metadata", {}).get("name")
            raise ValueError(f"{path}: GPURecommendation {name!r} does not read: {error}") from error
        status, target = recommendation.status, recommendation.spec.target_ref
        if status is not None and status.apply is not None:
            namespace = recommendation.metadata.get("namespace", "")
            records[f"{namespace}/{target.kind}/{target.name}"] = status.apply
    return records


def _recorded_span(windows: list[WorkloadWindow]) -> float | None:
    """Seconds the longest busy series covers (samples × step), or None without GPU series."""
    spans = [
        stats.samples * window.step_seconds
        for window in windows
        for pod in window.pods
        for gpu in pod.gpus
        for signal, stats in gpu.stats.items()
        if signal.value in {"gr_engine_active", "gpu_util"}
    ]
    return max(spans) if spans else None


def _progress(message: str) -> None:
    print(f"[analyze] {message}", file=sys.stderr, flush=True)


def diagnose(
    windows: list[WorkloadWindow],
    capacity: ClusterCapacity,
    settings: EngineSettings,
    explicit: SharingStrategy | None = None,
) -> Iterator[tuple[WorkloadWindow, Analysis, tuple[str, ...]]]:
    """Each window as the engine saw it (after `observe_sharing`), its analysis and the sharing notes.

    What `analyze` runs per workload, shared with the re-rendering bench (`sim.rerender`).
    """
    from gpu_rightsizer.logic.capacity import analyze_within, sharing_for
    from gpu_rightsizer.logic.engine import analyze_window
    from gpu_rightsizer.logic.floors import floor_for, with_idle_floor
    from gpu_rightsizer.logic.sharing import observe_sharing, with_notes

    for read_window in windows:
        sharing = sharing_for(capacity, read_window.allocation.gpu_model, explicit)
        window, notes = observe_sharing(read_window, capacity)

        def run(
            profiles: list[str] | None, window: WorkloadWindow = window, sharing: SharingStrategy = sharing
        ) -> Analysis:
            floored = with_idle_floor(settings, floor_for(capacity.idle_floors, window))
            return analyze_window(window, floored, sharing=sharing, allowed_mig_profiles=profiles)

        stated = explicit is not None
        analysis = with_notes(
            analyze_within(capacity, window.allocation.gpu_model, run, stated=stated), notes
        )
        yield window, analysis, notes


def run(args: argparse.Namespace) -> int:
    """Read the source, run the engine on every workload window, print the report; returns the exit code."""
    from gpu_rightsizer.adapters.capacity import capacity_from_file, unheld_gpus_from_file, with_idle_floors
    from gpu_rightsizer.adapters.exposition import ReadLimits
    from gpu_rightsizer.adapters.openmetrics import OpenMetricsError, read_openmetrics
    from gpu_rightsizer.adapters.prometheus import PrometheusSource, PrometheusSourceError
    from gpu_rightsizer.adapters.prometheus_discovery import PrometheusNotFoundError
    from gpu_rightsizer.commands.prometheus_access import prometheus_config
    from gpu_rightsizer.config import MatcherError, load_gpu_prices, parse_trusted_targets
    from gpu_rightsizer.logic.thresholds import EngineSettings, setting_names
    from gpu_rightsizer.logic.timeline import Timeline, with_allocation
    from gpu_rightsizer.logic.waste import gpu_models, with_cost
    from gpu_rightsizer.model.codes import SharingStrategy
    from gpu_rightsizer.report import ReportRow

    overrides: dict[str, object] = dict(getattr(args, "settings", None) or [])
    if getattr(args, "min_window", None) is not None:
        overrides["minWindowSeconds"] = args.min_window
    try:
        settings = EngineSettings().with_overrides(overrides)
    except ValueError as error:
        names = ", ".join(sorted(setting_names()))
        print(f"error: {error}\nknown settings: {names}", file=sys.stderr)
        return 2
    try:
        prices = load_gpu_prices(getattr(args, "gpu_hour_price", None), getattr(args, "gpu_prices", None))
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    plotted: dict[str, Timeline] | None = {} if args.output == "html" else None
    try:
        records = _change_records(args.recommendations) if getattr(args, "recommendations", None) else {}
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    started = time.monotonic()
    try:
        texts = list(getattr(args, "trusted_gpu_targets", []) or [])
        trusted = parse_trusted_targets(texts) if texts else None
        if args.openmetrics:
            _progress(f"reading {args.openmetrics}")
            path = Path(args.openmetrics)
            limits = ReadLimits(max_bytes=getattr(args, "max_input_mib", DEFAULT_MAX_INPUT_MIB) * 2**20)
            window_seconds = args.window or DEFAULT_WINDOW_SECONDS
            capacity = with_idle_floors(
                capacity_from_file(path, limits), lambda: unheld_gpus_from_file(path, limits)
            )

            def read(seconds: float) -> list[WorkloadWindow]:
                return read_openmetrics(
                    path,
                    window_seconds=seconds,
                    at=args.at,
                    step_seconds=args.step,
                    namespace=args.namespace,
                    workload=args.workload,
                    limits=limits,
                    trusted_gpu_targets=trusted,
                    timelines=plotted,
                )

            windows = read(window_seconds)
            recorded = _recorded_span(windows)
            if args.window is None and recorded is not None and recorded < window_seconds:
                _progress(
                    f"the file spans {recorded:.0f}s, less than the {window_seconds:.0f}s window; using its span"
                )
                windows = read(recorded)
        else:
            config = prometheus_config(args, _progress)
            source = PrometheusSource(config)
            windows = source.read(
                window_seconds=args.window or DEFAULT_WINDOW_SECONDS,
                at=args.at,
                step_seconds=args.step,
                namespace=args.namespace,
                workload=args.workload,
                progress=_progress,
                timelines=plotted,
            )
            window_end = args.at or datetime.now(tz=UTC)
            span = args.window or DEFAULT_WINDOW_SECONDS
            capacity = with_idle_floors(
                source.read_capacity(args.at), lambda: source.read_unheld_gpus(window_end, span)
            )
            for note in source.notes:
                _progress(f"note: {note}")
    except (OpenMetricsError, PrometheusSourceError, PrometheusNotFoundError, MatcherError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    _progress(f"{len(windows)} GPU workload(s) read in {time.monotonic() - started:.1f}s; diagnosing")
    explicit = None if args.sharing == "auto" else SharingStrategy(args.sharing)
    for note in capacity.notes:
        _progress(f"note: {note}")
    if explicit is None and not capacity.known:
        _progress("no node capacity in the data: assuming MIG mixed; pass --sharing to say otherwise")
    elif capacity.known:
        _progress(f"node pools ({capacity.source}): " + "; ".join(p.describe() for p in capacity.pools))
    rows = []
    for index, (window, analysis, notes) in enumerate(
        diagnose(windows, capacity, settings, explicit), start=1
    ):
        span = f"{window.start.isoformat()}/{window.end.isoformat()}"
        warnings = sorted(set(window.warnings) | set(notes))
        timeline = (plotted or {}).get(window.workload.key)
        rows.append(
            ReportRow(
                analysis=with_cost(analysis, prices, gpu_models(window)),
                warnings=warnings,
                window=span,
                timeline=None if timeline is None else with_allocation(timeline, window),
                apply=records.get(window.workload.key),
            )
        )
        if len(windows) > 50 and index % 50 == 0:
            _progress(f"diagnosed {index}/{len(windows)}")
    return _write_report(rows, args)
