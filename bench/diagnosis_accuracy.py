"""Diagnosis accuracy on the labelled scenario libraries, through the whole offline path.

simulator → backfill (OpenMetrics file) → OpenMetrics source → engine. For each set prints a confusion
table (expected code × diagnosed code), the accuracy of primary diagnoses, every misclassified scenario
(expected, got, the engine's one-line summary and the label's reason) and the time each stage took.

Sets: `default` is `scenario_library()` (shapes far from every threshold); `hard` is
`hard_scenario_library()` (noise, bursts, missing profiling fields, gaps, label variants, shared GPUs,
MIG slices, near-threshold values and decoys); `review` is `review_scenario_library()` (the
engine review's harmful cases, from measured H200 figures); `real-1s` and `real-30s` are the real-GPU recordings
under tests/fixtures (labels in `sim.library.RECORDING_LABELS`) at their 1 s samples and at
dcgm-exporter's default resolution (30 s averages read at 60 s steps, `sim.resolution`).
`new-tuned-*` and `new-aside-*` are the H200 recordings of patterns labelled in
tests/fixtures/h200/labels.json (several accepted codes each; `set_aside` ones were kept out of tuning),
reported apart so the set-aside accuracy shows how the rules generalise.

Besides accuracy, every set prints its **harm** count: automatic actions that would be wrong on the
labelled case (`sim.harm`: a release on live work, a shrink on a starved job, a second capacity change,
an action on bad data, a CPU limit added, an action without a target). It is a benchmark: the exit
code is 0 whatever the figures.

    .venv/bin/python bench/diagnosis_accuracy.py [--set default|hard|review|real-1s|real-30s|
                                                       new-tuned-1s|new-tuned-30s|new-aside-1s|new-aside-30s|all]
                                                 [--window 1h] [--step 60] [--label-style plain|exported]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from gpu_rightsizer.adapters.openmetrics import parse_text, read_openmetrics, windows_from_samples
from gpu_rightsizer.config import parse_duration
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import DiagnosisCode
from gpu_rightsizer.model.observation import WorkloadWindow
from gpu_rightsizer.model.result import Analysis
from gpu_rightsizer.sim.backfill import write_openmetrics
from gpu_rightsizer.sim.harm import harms
from gpu_rightsizer.sim.library import (
    RECORDING_LABELS,
    hard_scenario_library,
    review_scenario_library,
    scenario_library,
)
from gpu_rightsizer.sim.resolution import coarsen, tile
from gpu_rightsizer.sim.scenarios import LabelStyle, Scenario

END = 1_767_225_600.0  # fixed: the figures are reproducible
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
#: The recordings last about a minute: at 1 s only the minimum window is lowered.
SHORT_RECORDING = EngineSettings(min_window_seconds=30.0)
#: Labels of the newer recordings: accepted codes, whether a shrink hurts, and the set-aside flag.
NEW_LABELS = FIXTURES / "h200" / "labels.json"
NEW_SETS = ("new-tuned-1s", "new-tuned-30s", "new-aside-1s", "new-aside-30s")
#: Harm is judged against this code where a label says a shrink hurts: `sim.harm` counts every slice,
#: share, release and scale-in under it (MemoryCapacityBound would let a bigger-or-smaller slice pass).
SHRINK_HURTS = DiagnosisCode.UNDER_REPLICATED

ABBREVIATIONS = {code: "".join(ch for ch in code.value if ch.isupper())[:4] for code in DiagnosisCode}

SETS = {
    "default": lambda: scenario_library("bench"),
    "hard": lambda: hard_scenario_library("bench-hard"),
    "review": lambda: review_scenario_library("bench-review"),
}


def _print_confusion(confusion: Counter[tuple[DiagnosisCode, DiagnosisCode | None]]) -> None:
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


def evaluate(
    set_name: str, scenarios: Sequence[Scenario], window: float, step: float, style: LabelStyle | None
) -> tuple[int, int]:
    """Run one set through the offline path and print its figures; returns (correct, total)."""
    expected = {s.name: s.expected for s in scenarios}
    reasons = {s.name: s.why for s in scenarios}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{set_name}.om"
        started = time.perf_counter()
        samples = write_openmetrics(path, scenarios, END - window - 600, END, step, style)
        backfill_s = time.perf_counter() - started
        size_mb = path.stat().st_size / 1e6
        started = time.perf_counter()
        windows = read_openmetrics(path, window_seconds=window, at=datetime.fromtimestamp(END, tz=UTC))
        read_s = time.perf_counter() - started
    started = time.perf_counter()
    results: dict[str, Analysis] = {w.workload.name: analyze_window(w) for w in windows}
    engine_s = time.perf_counter() - started
    by_name = {w.workload.name: w for w in windows}
    correct = _report(set_name, expected, reasons, results, by_name)
    print(
        f"\n{len(scenarios)} workloads, {samples} samples ({size_mb:.1f} MB), window {window:.0f}s step {step:.0f}s"
        f"\nbackfill {backfill_s:.2f}s, OpenMetrics read {read_s:.2f}s, engine {engine_s * 1000:.0f}ms "
        f"({engine_s / max(1, len(windows)) * 1000:.1f}ms per workload, "
        f"{len(windows) / max(engine_s, 1e-9):,.0f} windows/s)\n"
    )
    return correct, len(expected)


def recording_windows(coarse: bool, names: Iterable[str] = RECORDING_LABELS) -> dict[str, WorkloadWindow]:
    """Every named real-GPU recording as one window, at 1 s or at dcgm-exporter's resolution."""
    wanted = set(names)
    found: dict[str, WorkloadWindow] = {}
    for path in sorted(FIXTURES.glob("*/*.om.gz")):
        name = path.name.removesuffix(".om.gz")
        if name not in wanted:
            continue
        samples = list(parse_text(gzip.decompress(path.read_bytes()).decode(), str(path)))
        if coarse:
            samples = coarsen(tile(samples, 45 * 60))
        windows = windows_from_samples(samples, step_seconds=60.0 if coarse else None)
        if len(windows) == 1:
            found[name] = windows[0]
    return found


def evaluate_recordings(set_name: str, coarse: bool) -> tuple[int, int]:
    """The real-GPU recordings through the engine; returns (correct, total)."""
    windows = recording_windows(coarse)
    settings = None if coarse else SHORT_RECORDING
    started = time.perf_counter()
    results = {name: analyze_window(w, settings) for name, w in windows.items()}
    engine_s = time.perf_counter() - started
    expected = {name: RECORDING_LABELS[name][0] for name in windows}
    reasons = {name: RECORDING_LABELS[name][1] for name in windows}
    correct = _report(set_name, expected, reasons, results, windows)
    resolution = "30 s averages at 60 s steps (tiled to 45 min)" if coarse else "1 s samples"
    print(
        f"\n{len(windows)} recordings at {resolution}, engine {engine_s * 1000:.0f}ms "
        f"({len(windows) / max(engine_s, 1e-9):,.0f} windows/s)\n"
    )
    return correct, len(expected)


def evaluate_new_recordings(set_name: str) -> tuple[int, int]:
    """The labelled new recordings, tuned or set-aside, at 1 s or 30 s; returns (correct, total).

    A primary is right when it is one of the recording's accepted codes (codes this engine does not know
    yet count only when it names them). Harm is judged against a no-shrink code where a shrink hurts.
    """
    set_aside, coarse = set_name.startswith("new-aside"), set_name.endswith("-30s")
    labels = {
        name: label
        for name, label in json.loads(NEW_LABELS.read_text())["recordings"].items()
        if bool(label["set_aside"]) == set_aside
    }
    windows = recording_windows(coarse, labels)
    settings = None if coarse else SHORT_RECORDING
    results = {name: analyze_window(w, settings) for name, w in windows.items()}
    known = {code.value: code for code in DiagnosisCode}
    expected: dict[str, DiagnosisCode] = {}
    harm_expected: dict[str, DiagnosisCode] = {}
    for name in windows:
        accepted = [known[c] for c in labels[name]["accepted"] if c in known]
        if not accepted:
            print(f"  {name}: no accepted code is known to this engine ({labels[name]['accepted']}); skipped")
            continue
        primary = results[name].primary
        expected[name] = primary if primary in accepted else accepted[0]
        harm_expected[name] = SHRINK_HURTS if labels[name]["shrink_harmful"] else expected[name]
    reasons = {name: f"accepted {labels[name]['accepted']}: {labels[name]['why']}" for name in expected}
    correct = _report(set_name, expected, reasons, results, windows, harm_expected)
    resolution = "30 s averages at 60 s steps (tiled to 45 min)" if coarse else "1 s samples"
    print(f"\n{len(expected)} recordings ({'set aside' if set_aside else 'tuned'}) at {resolution}\n")
    return correct, len(expected)


def _report(
    set_name: str,
    expected: dict[str, DiagnosisCode],
    reasons: dict[str, str],
    results: dict[str, Analysis],
    windows: dict[str, WorkloadWindow],
    harm_expected: dict[str, DiagnosisCode] | None = None,
) -> int:
    """Print the confusion table, accuracy, misses and harm of one set; returns the correct count."""
    confusion: Counter[tuple[DiagnosisCode, DiagnosisCode | None]] = Counter(
        (expected[name], results[name].primary if name in results else None) for name in expected
    )
    print(f"=== set: {set_name} ({len(expected)} cases) ===")
    _print_confusion(confusion)
    correct = sum(1 for name in expected if name in results and results[name].primary == expected[name])
    print(
        f"\nprimary diagnosis accuracy ({set_name}): {correct}/{len(expected)} = {correct / len(expected):.1%}"
    )
    misses = [
        name for name in sorted(expected) if name not in results or results[name].primary != expected[name]
    ]
    if misses:
        print("misclassified:")
    for name in misses:
        if name in results:
            got = f"{results[name].primary.value} (confidence {results[name].confidence:.2f})"
            summary = results[name].summary
        else:
            got, summary = "(no window)", "the OpenMetrics source produced no window for this workload"
        print(f"  {name}: expected {expected[name].value}, got {got}")
        print(f"      engine: {summary}")
        if reasons[name]:
            print(f"      label:  {reasons[name]}")
    harmed = {
        name: found
        for name in sorted(expected)
        if name in results
        and (found := harms(results[name], (harm_expected or expected)[name], windows[name]))
    }
    print(f"harm ({set_name}): {sum(len(v) for v in harmed.values())} harmful automatic action(s) in "
          f"{len(harmed)}/{len(expected)} cases")  # fmt: skip
    for name, found in harmed.items():
        print(f"  {name}: " + "; ".join(found))
    return correct


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--set",
        dest="which",
        choices=("default", "hard", "review", "real-1s", "real-30s", *NEW_SETS, "all"),
        default="all",
    )
    parser.add_argument("--window", type=parse_duration, default=3600.0)
    parser.add_argument("--step", type=float, default=60.0)
    parser.add_argument(
        "--label-style",
        choices=("plain", "exported"),
        default="plain",
        help="label style of scenarios that do not set their own",
    )
    args = parser.parse_args()
    style = (
        LabelStyle(exported_pod_labels=True, hostname_label="hostname")
        if args.label_style == "exported"
        else None
    )
    names = [*SETS, "real-1s", "real-30s", *NEW_SETS] if args.which == "all" else [args.which]
    totals = [
        evaluate_recordings(name, name == "real-30s")
        if name.startswith("real-")
        else evaluate_new_recordings(name)
        if name in NEW_SETS
        else evaluate(name, SETS[name](), args.window, args.step, style)
        for name in names
    ]
    if len(totals) > 1:
        correct, total = sum(c for c, _ in totals), sum(n for _, n in totals)
        print(f"overall primary diagnosis accuracy: {correct}/{total} = {correct / total:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
