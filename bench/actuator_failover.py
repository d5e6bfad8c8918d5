"""What a new actuator leader reads before its first change, against what the old design read.

Run: `python bench/actuator_failover.py [--workloads N] [--window 24h]`. In memory: N workloads behind
a metric source that counts every read (window length, scope, windows returned); one of them has a
published CPU action under an Apply policy. A fresh `Actuator` (a process that just won the lease,
no state of its own) steps that workload until the change is Applied. Printed: the reads it made,
their scope and length, the windows they returned, and the wall time, next to what the design before
the actuator wing needed for the same first change: the whole-cluster window of `--window` for every
workload (its baseline and warnings gate came from the recommender's cycle), which an incremental
source after a restart backfills first (20 s to 8 min in the review's runs; here counted in
windows and workload-seconds, not timed).
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.unit.fake_source import FakeSource
from tests.unit.operator.test_changes import REF, T0, Cluster, Driver, policy, window

from gpu_rightsizer.actuator.loop import scoped_measure
from gpu_rightsizer.actuator.step import Actuator
from gpu_rightsizer.logic.policy import parse_duration
from gpu_rightsizer.model.observation import WorkloadRef


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--window", default="24h", help="the recommender's observation window (old design)")
    args = parser.parse_args()
    refs = [
        REF,
        *(
            WorkloadRef(namespace=f"team-{i % 50}", kind="Deployment", name=f"w{i}")
            for i in range(args.workloads - 1)
        ),
    ]
    source = FakeSource(
        workloads=lambda: refs,
        shape=lambda ref, start, end: window(0.3, 0.98).model_copy(
            update={"workload": ref, "start": start, "end": end}
        ),
    )
    cluster = Cluster()
    cluster.publish()
    settings = policy()
    leader = Actuator(cluster, cluster, lambda: True, scoped_measure(source))  # type: ignore[arg-type]
    driver = Driver(cluster)
    driver.actuator = leader
    started = time.perf_counter()
    steps = 0
    while cluster.apply().get("phase") != "Applied" and steps < 10:
        driver.step(T0 + timedelta(seconds=steps), settings)
        steps += 1
    elapsed = time.perf_counter() - started
    windows_returned = sum(1 for _ in source.calls)  # one workload per scoped read
    seconds_read = sum(length for length, _ in source.calls)
    old_window = parse_duration(args.window).total_seconds()
    print(
        f"workloads behind the source: {args.workloads}; phase after {steps} step(s): {cluster.apply().get('phase')}"
    )
    print()
    print(
        f"{'design':<34} | {'reads':>5} | {'scope':<28} | {'windows':>7} | {'workload-seconds read':>21} | {'wall*':>8}"
    )
    print("-" * 118)
    scope = ", ".join(sorted({f"{s.namespace}/{s.workload}" for _, s in source.calls}))
    print(
        f"{'actuator wing (this branch)':<34} | {len(source.calls):>5} | {scope:<28} | {windows_returned:>7} | {seconds_read:>21,.0f} | {elapsed * 1000:>6.1f}ms"
    )
    print(
        f"{'recommender-fed (before)':<34} | {'1':>5} | {'every workload':<28} | {args.workloads:>7} | {old_window * args.workloads:>21,.0f} | {'backfill':>8}"
    )
    print("* the whole step to Applied, the fake source's building of its windows included")
    return 0 if cluster.apply().get("phase") == "Applied" and len(source.calls) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
