"""One steady cycle's Prometheus reads, warm, with whichever `gpu_rightsizer` comes first on the path.

`fleet_backfill.py --baseline SRC` runs this once with `PYTHONPATH=SRC` (another checkout's
`operator/` directory, e.g. `git archive main operator | tar -x -C /tmp/main`) and once with this
checkout's, one after another against the same Prometheus, so the old and new queries are measured on
one machine state without a second cold start. The incremental source is made as the operator makes
it (`adapters.windows.sources_for`), then told that the previous cycle read everything up to `--end`
(the reader's, the coarse series' and the kube-state-metrics facts' last reads), so its next read at
`--end + --interval` sends exactly the queries of a steady cycle, plus the node capacity's two.
It uses only what both checkouts have, and asks Prometheus for every query's own cost (`stats=all`)
by wrapping the HTTP session, so both sides are measured the same way. Prints one JSON object:
queries, raw samples touched, per query family.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gpu_rightsizer.adapters.prometheus import PrometheusSource, source_for
from gpu_rightsizer.adapters.windows import sources_for
from gpu_rightsizer.config import OperatorConfig


def measured(source: PrometheusSource, families: dict[str, list[int]]) -> PrometheusSource:
    """`source`, its queries sent with `stats=all` and their samples added to `families`."""
    session = source.client._session
    send: Callable[..., Any] = session.request

    def request(*args: Any, params: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        response = send(*args, params={**(params or {}), "stats": "all"}, **kwargs)
        what = str((params or {}).get("query", ""))
        try:
            samples = int(response.json()["data"]["stats"]["samples"]["totalQueryableSamples"])
        except (ValueError, KeyError, TypeError):
            samples = -1
        families.setdefault(what, []).append(samples)
        return response

    session.request = request  # type: ignore[method-assign]
    return source


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--window", type=float, required=True)
    parser.add_argument("--step", type=float, required=True)
    parser.add_argument("--interval", type=float, required=True)
    parser.add_argument("--end", type=float, required=True, help="where the previous cycle's reads ended")
    args = parser.parse_args()
    cfg = OperatorConfig(
        prometheus_url=args.url,
        interval_seconds=args.interval,
        window_seconds=args.window,
        prometheus_step_seconds=args.step,
        trusted_gpu_targets=(),
    )
    by_query: dict[str, list[int]] = {}
    sources = sources_for(cfg)
    make_source = sources.make_source
    sources.make_source = lambda: measured(make_source(), by_query)  # type: ignore[method-assign]
    incremental = sources.source(args.window, datetime.fromtimestamp(args.end, tz=UTC))
    by_query.clear()  # the recorded-series detection runs once per start, not per cycle
    incremental.reader.last_end = math.floor(args.end / args.step) * args.step
    coarse_step = incremental.coarse.step_seconds
    coarse_end = math.floor(args.end / coarse_step) * coarse_step
    if hasattr(incremental.coarse, "ends"):  # one end per coarse series name
        incremental.coarse.ends = dict.fromkeys(incremental.coarse_queries(), coarse_end)
    else:
        incremental.coarse.last_end = coarse_end
    incremental.ksm.last_read = args.end
    if hasattr(incremental, "identity"):  # the incremental identity answers
        incremental.identity.last_read = args.end
    moment = datetime.fromtimestamp(args.end + args.interval, tz=UTC)
    chunks = incremental.read_chunks(at=moment)
    for _ in chunks or ():
        pass
    measured(source_for(cfg), by_query).read_capacity(moment)
    answers = [samples for found in by_query.values() for samples in found]
    print(
        json.dumps(
            {
                "queries": len(answers),
                "samples": sum(answers),
                "complete": incremental.complete,
                "errors": incremental.report.errors[:3],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
