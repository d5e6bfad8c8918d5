"""What the GPU gauge families' range queries cost Prometheus, by expression node.

Against a TSDB that `bench/fleet_backfill.py` has cached (`--tsdb DIR`, one of the directories under
`~/.cache/gpu-rightsizer/fleet-backfill/`), this sends the gauge families' queries over one steady
interval (the last `--interval` seconds before the history's end, at `--step`) in several shapes, in
turn, `--runs` times: as the operator sends them (`incremental.default_families`: bare selectors, whose
series the reader folds and merges), in the shape it sent before (`max by` of the folded selector with
the sentinel filter, without the folds of label variants no series has, as a steady read sent them),
without each of that shape's nodes in turn, and as one query for all of them grouped by `__name__`. Around each set it reads
Prometheus' own `process_cpu_seconds_total`, and prints the CPU-seconds, the series returned, the
raw samples touched (`stats=all`) and the answers' size (what the operator decodes). It shows which nodes of a query shape cost what, before a
shape is changed in the operator:

    .venv/bin/python bench/gauge_query_cost.py --tsdb ~/.cache/gpu-rightsizer/fleet-backfill/KEY
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from operator_scale import prometheus_cpu_seconds

from gpu_rightsizer.adapters.incremental import default_families
from gpu_rightsizer.adapters.prometheus import GPU_KEYS, LABEL_FOLDS, _gpu_expr, fold_labels, without_folds
from gpu_rightsizer.testcluster.prometheus import PrometheusServer


def range_query(url: str, query: str, start: float, end: float, step: float) -> tuple[int, int, int]:
    """(series returned, raw samples touched, answer bytes) of one range query, sent as a POST form."""
    form = urllib.parse.urlencode({"query": query, "start": start, "end": end, "step": step, "stats": "all"})
    with urllib.request.urlopen(f"{url}/api/v1/query_range", data=form.encode(), timeout=600) as answer:
        content = answer.read()
    body = json.loads(content)
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus refused {query[:80]}...: {body.get('error')}")
    touched = body["data"].get("stats", {}).get("samples", {}).get("totalQueryableSamples", 0)
    return len(body["data"]["result"]), int(touched), len(content)


def shapes(url: str, step: float) -> dict[str, list[str]]:
    """Every shape's queries: the operator's, the one before it, that one without one node each, merged."""
    families = [family for family in default_families(step) if family.name.startswith("gpu:DCGM")]
    names = [family.name.removeprefix("gpu:") for family in families]
    with urllib.request.urlopen(f"{url}/api/v1/labels", timeout=60) as answer:
        present = set(json.loads(answer.read())["data"])
    absent = {source for _, source in LABEL_FOLDS if source not in present}
    sent = [family.query(None) for family in families]
    before = [without_folds(_gpu_expr(name)(""), absent) for name in names]
    keys = ", ".join(GPU_KEYS)

    def folded(selector: str) -> str:
        return without_folds(fold_labels(selector), absent)

    merged = (
        before[-1]
        .replace("max by (", "max by (__name__, ", 1)
        .replace(names[-1], '{__name__=~"' + "|".join(names) + '"}', 1)
    )
    return {
        "as sent (bare, merged by the reader)": sent,
        "before (max by, fold, filter)": before,
        "without the max by": [folded(f"{n} < 9.2e18") for n in names],
        "without the label fold": [f"max by ({keys}) ({n} < 9.2e18)" for n in names],
        "without the sentinel filter": [f"max by ({keys}) ({folded(n)})" for n in names],
        "one query by __name__": [merged],
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--tsdb", required=True, help="a fleet_backfill cache directory (holds data/, complete.json)"
    )
    parser.add_argument(
        "--interval", type=float, default=300.0, help="seconds of one steady read (default 300)"
    )
    parser.add_argument("--step", type=float, default=60.0, help="query step, seconds (default 60)")
    parser.add_argument("--runs", type=int, default=2, help="times each shape is sent (default 2)")
    args = parser.parse_args()
    workdir = Path(args.tsdb).expanduser()
    complete = workdir / "complete.json"
    if not complete.is_file():
        parser.error(f"{workdir} is not a finished fleet_backfill TSDB (no complete.json)")
    history_end = float(json.loads(complete.read_text())["params"]["end"])
    end = history_end - (history_end % args.step)
    start = end - args.interval
    server = PrometheusServer(workdir=workdir, keep_data=True, extra_args=("--query.timeout=10m",))
    server.start(timeout=600)
    try:
        queries = shapes(server.url, args.step)
        print(
            f"{len(queries['before (max by, fold, filter)'])} gauge families, {start:.0f}..{end:.0f} step {args.step:g} s"
        )
        print(
            f"{'shape':38s}{'run':>4s}{'series':>10s}{'samples':>12s}{'MB':>8s}{'P CPU-s':>9s}{'wall s':>8s}"
        )
        for run in range(1, args.runs + 1):
            for label, sent in queries.items():
                before, started = prometheus_cpu_seconds(server.url), time.monotonic()
                answers = [range_query(server.url, query, start, end, args.step) for query in sent]
                cpu = prometheus_cpu_seconds(server.url) - before
                series, touched = sum(a[0] for a in answers), sum(a[1] for a in answers)
                size = sum(a[2] for a in answers) / 1e6
                print(f"{label:38s}{run:>4d}{series:>10,}{touched:>12,}{size:>8.1f}{cpu:>9.2f}{time.monotonic() - started:>8.2f}", flush=True)  # fmt: skip
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
