"""Our analysis and KRR's `simple` strategy against one Prometheus: queries, samples, CPU, wall time.

Run against a cluster and a Prometheus that are already up, with the workloads to size:

    python bench/krr_side_by_side.py --prometheus http://127.0.0.1:9090 --kubeconfig KUBECONFIG \\
        --krr-python KRR_VENV/bin/python --krr-dir KRR_CHECKOUT --window 1h

KRR (robusta-dev/krr) is run from its own checkout and virtualenv, never installed next to us. Each
side runs `--repeat` times in turn; before and after each run the bench reads Prometheus' own
`/metrics`: `prometheus_http_requests_total` of the query endpoints (queries),
`prometheus_engine_query_samples_total` (samples touched, when Prometheus exports it) and
`process_cpu_seconds_total` (its CPU-seconds). It prints both sides and their ratios.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from operator_scale import http_text, samples

QUERY_HANDLERS = ("/api/v1/query", "/api/v1/query_range")


@dataclass(frozen=True)
class Snapshot:
    """Prometheus' own counters at one instant."""

    queries: float
    samples_touched: float | None
    cpu_seconds: float


@dataclass(frozen=True)
class Run:
    """What one side cost Prometheus in one run."""

    name: str
    wall_seconds: float
    queries: float
    samples_touched: float | None
    cpu_seconds: float
    exit_code: int


def snapshot(prometheus: str) -> Snapshot:
    text = http_text(f"{prometheus.rstrip('/')}/metrics")
    queries = sum(
        v
        for labels, v in samples(text, "prometheus_http_requests_total")
        if labels.get("handler") in QUERY_HANDLERS
    )
    touched = samples(text, "prometheus_engine_query_samples_total")
    cpu = samples(text, "process_cpu_seconds_total")
    return Snapshot(queries, sum(v for _, v in touched) if touched else None, cpu[0][1] if cpu else 0.0)


def measure(name: str, command: list[str], prometheus: str, log: Path) -> Run:
    """Run `command` once and read what it cost Prometheus."""
    before = snapshot(prometheus)
    started = time.monotonic()
    with log.open("ab") as out:
        out.write(f"\n$ {shlex.join(command)}\n".encode())
        out.flush()
        code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    wall = time.monotonic() - started
    time.sleep(1.0)  # Prometheus' CPU counter is read from /proc: let the last query's work land
    after = snapshot(prometheus)
    touched = (
        after.samples_touched - before.samples_touched
        if after.samples_touched is not None and before.samples_touched is not None
        else None
    )
    return Run(
        name, wall, after.queries - before.queries, touched, after.cpu_seconds - before.cpu_seconds, code
    )


def krr_command(args: argparse.Namespace) -> list[str]:
    hours = max(1, round(parse_duration(args.window) / 3600))
    return [
        args.krr_python,
        str(Path(args.krr_dir) / "krr.py"),
        "simple",
        "--prometheus-url",
        args.prometheus,
        "--kubeconfig",
        args.kubeconfig,
        "--history_duration",
        str(hours),
        "--formatter",
        "json",
        "--fileoutput",
        str(Path(args.log).with_suffix(".krr.json")),
        *[item for ns in args.namespace or [] for item in ("--namespace", ns)],
    ]


def ours_command(args: argparse.Namespace) -> list[str]:
    if args.ours:
        return shlex.split(args.ours)
    return [
        sys.executable,
        "-m",
        "gpu_rightsizer",
        "analyze",
        "--prometheus",
        args.prometheus,
        "--window",
        args.window,
        "-o",
        "json",
    ]


def parse_duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
    if text and text[-1] in units:
        return float(text[:-1]) * units[text[-1]]
    return float(text)


def summarize(runs: list[Run]) -> Run:
    count = len(runs)
    touched = [r.samples_touched for r in runs if r.samples_touched is not None]
    return Run(
        runs[0].name,
        sum(r.wall_seconds for r in runs) / count,
        sum(r.queries for r in runs) / count,
        sum(touched) / len(touched) if touched else None,
        sum(r.cpu_seconds for r in runs) / count,
        max(r.exit_code for r in runs),
    )


def ratio(ours: float | None, theirs: float | None) -> str:
    if ours is None or theirs is None or ours <= 0:
        return "-"
    return f"{theirs / ours:.1f}x"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prometheus", required=True, help="Prometheus base URL")
    parser.add_argument(
        "--kubeconfig", required=True, help="kubeconfig of the cluster KRR lists workloads from"
    )
    parser.add_argument("--krr-python", required=True, help="python of KRR's own virtualenv")
    parser.add_argument("--krr-dir", required=True, help="checkout of robusta-dev/krr (holds krr.py)")
    parser.add_argument("--window", default="1h", help="history both sides read (default 1h)")
    parser.add_argument("--namespace", action="append", help="limit KRR to these namespaces (repeatable)")
    parser.add_argument("--ours", default=None, help="command line of our side (default: one `analyze` run)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per side (default 1)")
    parser.add_argument(
        "--log", default="krr-side-by-side.log", help="both sides' output (default %(default)s)"
    )
    args = parser.parse_args()
    log = Path(args.log)
    sides = {"ours": ours_command(args), "krr simple": krr_command(args)}
    results: dict[str, list[Run]] = {name: [] for name in sides}
    for _ in range(args.repeat):
        for name, command in sides.items():
            run = measure(name, command, args.prometheus, log)
            print(
                f"[bench] {name}: {run.wall_seconds:.1f} s, {run.queries:.0f} queries, "
                f"{run.cpu_seconds:.2f} Prometheus CPU-s, exit {run.exit_code}",
                file=sys.stderr,
                flush=True,
            )
            results[name].append(run)
    ours, krr = summarize(results["ours"]), summarize(results["krr simple"])
    print(f"\n{'':28}{'ours':>14}{'krr simple':>14}{'krr / ours':>12}")
    rows = [
        ("wall time (s)", ours.wall_seconds, krr.wall_seconds),
        ("Prometheus queries", ours.queries, krr.queries),
        ("Prometheus samples touched", ours.samples_touched, krr.samples_touched),
        ("Prometheus CPU-seconds", ours.cpu_seconds, krr.cpu_seconds),
    ]
    for label, mine, theirs in rows:
        left = "-" if mine is None else f"{mine:,.1f}"
        right = "-" if theirs is None else f"{theirs:,.1f}"
        print(f"{label:28}{left:>14}{right:>14}{ratio(mine, theirs):>12}")
    print(f"exit codes: ours {ours.exit_code}, krr {krr.exit_code} (output in {log})")
    return 0 if ours.exit_code == 0 and krr.exit_code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
