"""Diagnosis accuracy on the labelled scenario library, through the whole offline path.

simulator → backfill (OpenMetrics file) → OpenMetrics source → engine. Prints a confusion table
(expected code × diagnosed code), the accuracy of primary diagnoses and the time each stage took.

    .venv/bin/python bench/diagnosis_accuracy.py [--window 1h] [--step 60] [--label-style exported]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from gpu_rightsizer.adapters.openmetrics import read_openmetrics
from gpu_rightsizer.commands.analyze import parse_duration
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.model.codes import DiagnosisCode
from gpu_rightsizer.sim.backfill import write_openmetrics
from gpu_rightsizer.sim.library import scenario_library
from gpu_rightsizer.sim.scenarios import LabelStyle

END = 1_767_225_600.0  # fixed: the figures are reproducible

ABBREVIATIONS = {code: "".join(ch for ch in code.value if ch.isupper())[:4] for code in DiagnosisCode}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--window", type=parse_duration, default=3600.0)
    parser.add_argument("--step", type=float, default=60.0)
    parser.add_argument("--label-style", choices=("plain", "exported"), default="plain")
    args = parser.parse_args()
    style = (
        LabelStyle(exported_pod_labels=True, hostname_label="hostname")
        if args.label_style == "exported"
        else None
    )
    scenarios = scenario_library("bench")
    expected = {s.name: s.expected for s in scenarios}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "library.om"
        started = time.perf_counter()
        samples = write_openmetrics(path, scenarios, END - args.window - 600, END, args.step, style)
        backfill_s = time.perf_counter() - started
        size_mb = path.stat().st_size / 1e6
        started = time.perf_counter()
        windows = read_openmetrics(path, window_seconds=args.window, at=datetime.fromtimestamp(END, tz=UTC))
        read_s = time.perf_counter() - started
    started = time.perf_counter()
    results = {w.workload.name: analyze_window(w).primary for w in windows}
    engine_s = time.perf_counter() - started
    missing = sorted(set(expected) - set(results))
    confusion: Counter[tuple[DiagnosisCode, DiagnosisCode | None]] = Counter(
        (expected[name], results.get(name)) for name in expected
    )
    codes = list(DiagnosisCode)
    header = "expected \\ got".ljust(24) + " ".join(ABBREVIATIONS[c].rjust(4) for c in codes) + "  miss"
    print(header)
    for row in codes:
        cells = [confusion.get((row, col), 0) for col in codes]
        if not any(cells) and not confusion.get((row, None)):
            continue
        print(row.value.ljust(24) + " ".join((str(n) if n else ".").rjust(4) for n in cells)
              + str(confusion.get((row, None), 0) or ".").rjust(6))  # fmt: skip
    print("columns: " + ", ".join(f"{ABBREVIATIONS[c]}={c.value}" for c in codes))
    correct = sum(1 for name in expected if results.get(name) == expected[name])
    print(f"\nprimary diagnosis accuracy: {correct}/{len(expected)} = {correct / len(expected):.1%}")
    for name in sorted(expected):
        if results.get(name) != expected[name]:
            got = results[name].value if name in results else "(no window)"
            print(f"  miss: {name}: expected {expected[name].value}, got {got}")
    if missing:
        print(f"  workloads without a window: {', '.join(missing)}")
    print(
        f"\n{len(scenarios)} workloads, {samples} samples ({size_mb:.1f} MB), window {args.window:.0f}s step {args.step:.0f}s"
        f"\nbackfill {backfill_s:.2f}s, OpenMetrics read {read_s:.2f}s, engine {engine_s * 1000:.0f}ms "
        f"({engine_s / max(1, len(windows)) * 1000:.1f}ms per workload)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
