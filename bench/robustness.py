"""Robustness of the diagnosis to how a real cluster collects the H200 recordings, one factor at a time.

Every labelled recording under tests/fixtures/h200/ (labels in its labels*.json files: the accepted
codes and whether a shrink would hurt) is stretched to an hour by a seeded moving-block bootstrap and
re-rendered (`sim.rerender`) around a base of a 30 s scrape, dcgm-exporter's 30 s averages and cAdvisor
housekeeping every U(10, 20) s with its own timestamps, varying one factor at a time:

- scrape 10 / 15 / 30 (base) / 60 s; DCGM 30 s averages (base) or 1 s instantaneous readings;
- cAdvisor timestamps honoured (base) or replaced by the scrape time (kube-prometheus);
- 5 % missing scrapes, a container restart, a pod replaced on the same GPU, a second replica on
  another node, ±0.2-core CPU noise, a bursty 0.2 ± 0.2-core sidecar, no node agent, dcgm-exporter's
  default counters only;
- every CPU limit from 1 to 16 cores at or above what the recording uses (below it the GPU's work
  would change, which a re-render cannot know);
- a server's request rate thinned to 1/3, 1/16 and 1/50 (25 h windows: a release needs 24 h).

Each render goes through `analyze --openmetrics` (read_openmetrics → commands.analyze.diagnose).
Every render whose verdict differs from its recording's base verdict (same seed), and a seeded 10 %
of the rest, also goes through a real Prometheus backfilled with promtool and `analyze --prometheus`
(PrometheusSource → the same diagnose).

A result is **correct** when its primary is an accepted code, or when it is advice-only (no automatic
action), proposes nothing harmful and names an accepted code or a waiting cause. **Harm** is a render
with an automatic action that `sim.harm` counts as harmful for the recording's first accepted code,
or any automatic capacity-reducing action on a recording whose shrink would hurt.

    .venv/bin/python bench/robustness.py [--quick] [--jobs 2] [--seeds 3] [--no-prometheus]
                                         [--recordings DIR] [--only NAME ...]

A benchmark: the exit code is 0 whatever the figures. The full grid takes ≤ 45 min on 2 cores with
--jobs 2; --quick (one seed, a subset of the variants and recordings' Prometheus checks) about 3 min.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

from gpu_rightsizer.model.codes import DiagnosisCode
from gpu_rightsizer.model.observation import WorkloadWindow
from gpu_rightsizer.model.result import Analysis
from gpu_rightsizer.sim import rerender
from gpu_rightsizer.sim.harm import WAITING_CAUSES, harms, shrinks

RECORDINGS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "h200"
HOUR = 3600.0
RELEASE_WINDOW = 25 * HOUR
CPU_LIMITS = (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 8.0, 12.0, 16.0)
REQUEST_SHARES = (1 / 3, 1 / 16, 1 / 50)
PROMETHEUS_SAMPLE = 0.10


@dataclass(frozen=True)
class Label:
    """What is right for one recording."""

    accepted: tuple[str, ...]
    shrink_harmful: bool
    set_aside: bool


@dataclass(frozen=True)
class Cell:
    """One render: a recording under one variant, read over `window_seconds`."""

    recording: str
    variant: rerender.Variant
    window_seconds: float = HOUR

    @property
    def factor(self) -> str:
        return self.variant.label()


@dataclass
class Outcome:
    """What the engine said about one render, and how it scores."""

    cell: Cell
    primary: str
    automatic: tuple[str, ...]
    correct: bool
    harm: tuple[str, ...]
    error: str | None = None

    @property
    def verdict(self) -> str:
        return self.primary + "".join(f" +{a}*" for a in self.automatic)


def load_labels(folder: Path) -> dict[str, Label]:
    """Every labels*.json beside the recordings (the calibration set's and the device recordings')."""
    labels: dict[str, Label] = {}
    for path in sorted(folder.glob("labels*.json")):
        for name, entry in json.loads(path.read_text())["recordings"].items():
            labels[name] = Label(
                tuple(entry["accepted"]), bool(entry["shrink_harmful"]), bool(entry["set_aside"])
            )
    return labels


def recordings_in(folder: Path, labels: dict[str, Label], only: Sequence[str]) -> list[str]:
    names = sorted(p.name.removesuffix(".om.gz") for p in folder.glob("*.om.gz"))
    missing = [n for n in names if n not in labels]
    if missing:
        print(f"[robustness] no label, left out: {', '.join(missing)}", file=sys.stderr)
    return [n for n in names if n in labels and (not only or n in only)]


@cache
def _recording(folder: str, name: str) -> rerender.Recording:
    return rerender.load(Path(folder) / f"{name}.om.gz")


def _cpu_used(recording: rerender.Recording) -> float:
    """The recording's CPU p95 in cores (1 s rates of its app containers' counters)."""
    totals = [0.0] * recording.seconds
    for (metric, labels), values in recording.series.items():
        if metric == "container_cpu_usage_seconds_total" and dict(labels).get("container") not in ("", "POD"):
            for i in range(1, recording.seconds):
                totals[i] += max(0.0, values[i] - values[i - 1])
    ordered = sorted(totals[1:])
    return ordered[int(0.95 * (len(ordered) - 1))] if ordered else 0.0


def grid(folder: Path, names: Iterable[str], seeds: int, quick: bool) -> list[Cell]:
    """One factor at a time around the base, for every recording and seed."""
    cells: list[Cell] = []
    for name in names:
        recording = _recording(str(folder), name)
        used = _cpu_used(recording)
        for seed in range(seeds):
            base = rerender.Variant(seed=seed)
            variants = [base]
            if quick:
                variants += [
                    replace(base, scrape_seconds=15.0, cadvisor_timestamps="scrape"),
                    replace(base, perturbation="pod-replaced"),
                    replace(base, perturbation="second-replica"),
                ]
                variants += [
                    replace(base, cpu_limit=limit) for limit in (1.5, 2.5, 4.0) if limit >= used + 0.05
                ]
            else:
                variants += [replace(base, scrape_seconds=s) for s in (10.0, 15.0, 60.0)]
                variants.append(replace(base, dcgm="instant"))
                variants += [
                    replace(base, cadvisor_timestamps="scrape", scrape_seconds=s) for s in (15.0, 30.0)
                ]
                variants += [replace(base, perturbation=p) for p in rerender.PERTURBATIONS]
                variants += [replace(base, cpu_limit=limit) for limit in CPU_LIMITS if limit >= used + 0.05]
            cells += [Cell(name, v) for v in variants]
            if name in rerender.RECORDED_REQUEST_RATE:
                shares = REQUEST_SHARES[1:2] if quick else REQUEST_SHARES
                long = replace(base, seconds=RELEASE_WINDOW + 600.0)
                cells.append(Cell(name, long, RELEASE_WINDOW))
                cells += [Cell(name, replace(long, request_share=s), RELEASE_WINDOW) for s in shares]
    return cells


def score(cell: Cell, window: WorkloadWindow, analysis: Analysis, label: Label) -> Outcome:
    """Correct and harmful as the module docstring says."""
    automatic = [a for a in analysis.actions if a.automatic]
    codes = {f.code.value for f in analysis.findings}
    expected = next((DiagnosisCode(c) for c in label.accepted if c in DiagnosisCode._value2member_map_), None)
    found = list(harms(analysis, expected, window)) if expected is not None else []
    if label.shrink_harmful:
        found += [f"shrink-harmful: {a.type.value} → {a.to_value}" for a in automatic if shrinks(a, window)]
    harmful = tuple(sorted(set(found)))
    correct = analysis.primary.value in label.accepted or (
        not automatic and not harmful and bool(codes & (set(label.accepted) | WAITING_CAUSES))
    )
    return Outcome(cell, analysis.primary.value, tuple(a.type.value for a in automatic), correct, harmful)


def run_openmetrics(job: tuple[str, Cell, Label]) -> Outcome:
    """One render through `analyze --openmetrics`."""
    folder, cell, label = job
    try:
        window, analysis = rerender.analyze_openmetrics(
            _recording(folder, cell.recording), cell.variant, window_seconds=cell.window_seconds
        )
    except Exception as error:  # a render the reader rejects is a finding, not a crash of the bench
        return Outcome(cell, "error", (), False, (), error=f"{type(error).__name__}: {error}")
    return score(cell, window, analysis, label)


# --- the operator's read path: a real Prometheus ------------------------------------------------------
def run_prometheus(folder: Path, cells: Sequence[Cell], labels: dict[str, Label]) -> list[Outcome]:
    """The cells through a backfilled Prometheus and `analyze --prometheus`, one server per recording."""
    from gpu_rightsizer.adapters.prometheus import PrometheusConfig, PrometheusSource
    from gpu_rightsizer.commands.analyze import diagnose
    from gpu_rightsizer.logic.thresholds import EngineSettings
    from gpu_rightsizer.sim.backfill import SeriesStore
    from gpu_rightsizer.testcluster.prometheus import PrometheusServer

    outcomes: list[Outcome] = []
    groups: dict[tuple[str, float], list[Cell]] = defaultdict(list)
    for cell in cells:
        groups[(cell.recording, cell.window_seconds)].append(cell)
    for (name, window_seconds), members in sorted(groups.items()):
        recording = _recording(str(folder), name)
        ident = rerender.identity(recording)
        store = SeriesStore()
        by_namespace: dict[str, Cell] = {}
        for index, cell in enumerate(members):
            suffix = f"-r{index}"
            rename = {value: value + suffix for value in ident.values() if value}
            rerender.render(recording, cell.variant, rename=rename, store=store)
            by_namespace[ident.get("namespace", "") + suffix] = cell
        end = recording.start + max(c.variant.seconds for c in members)
        with tempfile.TemporaryDirectory() as workdir:
            source_file = Path(workdir) / f"{name}.om"
            with source_file.open("w", encoding="utf-8") as out:
                store.write(out)
            server = PrometheusServer(workdir=Path(workdir), backfill=(source_file,))
            started = time.monotonic()
            server.start()
            try:
                source = PrometheusSource(PrometheusConfig(url=server.url, timeout_seconds=120.0))
                at = datetime.fromtimestamp(end, tz=UTC)
                windows = source.read(window_seconds=window_seconds, at=at)
                capacity = source.read_capacity(at)
                for window, analysis, _ in diagnose(windows, capacity, EngineSettings()):
                    rendered = by_namespace.pop(window.workload.namespace, None)
                    if rendered is not None:
                        outcomes.append(score(rendered, window, analysis, labels[name]))
            finally:
                server.stop()
        for cell in by_namespace.values():
            outcomes.append(Outcome(cell, "missing", (), False, (), error="no window from Prometheus"))
        print(
            f"[robustness] prometheus {name} ({window_seconds / HOUR:.0f} h): {len(members)} renders in "
            f"{time.monotonic() - started:.0f} s",
            file=sys.stderr,
        )
    return outcomes


def pick_for_prometheus(outcomes: Sequence[Outcome], share: float, seed: int = 7) -> list[Cell]:
    """Renders whose verdict differs from their recording's base (same seed and window), plus `share`
    of the rest, seeded."""
    base: dict[tuple[str, int, float], str] = {}
    for outcome in outcomes:
        cell = outcome.cell
        if cell.variant.label() == "base":
            base[(cell.recording, cell.variant.seed, cell.window_seconds)] = outcome.verdict
    rng = random.Random(seed)
    picked = []
    for outcome in outcomes:
        cell = outcome.cell
        reference = base.get((cell.recording, cell.variant.seed, cell.window_seconds))
        if outcome.verdict != reference or rng.random() < share:
            picked.append(cell)
    return picked


# --- tables -------------------------------------------------------------------------------------------
@dataclass
class Tally:
    runs: int = 0
    correct: int = 0
    harmful: int = 0
    verdicts: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, outcome: Outcome) -> None:
        self.runs += 1
        self.correct += outcome.correct
        self.harmful += bool(outcome.harm)
        self.verdicts[outcome.verdict] += 1

    def text(self) -> str:
        return f"{self.correct}/{self.runs}" + (f" harm {self.harmful}" if self.harmful else "")


def _factor_group(factor: str) -> str:
    return "cpu limit" if factor.startswith("cpu limit") else factor


def print_tables(
    title: str, outcomes: Sequence[Outcome], labels: dict[str, Label], *, details: bool = True
) -> None:
    per_cell: dict[tuple[str, str], Tally] = defaultdict(Tally)
    per_recording: dict[str, Tally] = defaultdict(Tally)
    per_factor: dict[str, Tally] = defaultdict(Tally)
    total = Tally()
    for outcome in outcomes:
        factor = _factor_group(outcome.cell.factor)
        per_cell[(outcome.cell.recording, factor)].add(outcome)
        per_recording[outcome.cell.recording].add(outcome)
        per_factor[factor].add(outcome)
        total.add(outcome)
    factors = sorted(per_factor, key=lambda f: (f != "base", f))
    print(f"\n## {title}: accuracy (correct/runs) and harm (renders with a harmful automatic action)\n")
    print("| factor | " + " | ".join(sorted(per_recording)) + " | all |")
    print("|---" * (len(per_recording) + 2) + "|")
    for factor in factors:
        row = [
            per_cell[(r, factor)].text() if per_cell[(r, factor)].runs else "" for r in sorted(per_recording)
        ]
        print(f"| {factor} | " + " | ".join(row) + f" | {per_factor[factor].text()} |")
    print(
        "| **all** | "
        + " | ".join(per_recording[r].text() for r in sorted(per_recording))
        + f" | **{total.text()}** |"
    )
    tuned = Tally()
    aside = Tally()
    for outcome in outcomes:
        (aside if labels[outcome.cell.recording].set_aside else tuned).add(outcome)
    accuracy = total.correct / total.runs if total.runs else 0.0
    print(
        f"\n{title}: {total.runs} renders, accuracy {accuracy:.1%}, harm {total.harmful} "
        f"(tuned recordings {tuned.text()}; set aside {aside.text() if aside.runs else 'none'})"
    )
    if not details:
        return
    wrong = [o for o in outcomes if o.harm or not o.correct]
    if wrong:
        print(f"\n{title}: wrong or harmful renders (recording, variant, seed: verdict; harm)")
        for o in sorted(wrong, key=lambda o: (o.cell.recording, o.cell.factor, o.cell.variant.seed)):
            harm = f"; {', '.join(o.harm)}" if o.harm else ""
            error = f"; {o.error}" if o.error else ""
            print(
                f"- {o.cell.recording}, {o.cell.factor}, seed {o.cell.variant.seed}: {o.verdict}{harm}{error}"
            )


def print_agreement(openmetrics: Sequence[Outcome], prometheus: Sequence[Outcome]) -> None:
    by_cell = {o.cell: o for o in openmetrics}
    agree = sum(1 for p in prometheus if by_cell[p.cell].verdict == p.verdict)
    print(f"\n--openmetrics and --prometheus give the same verdict on {agree}/{len(prometheus)} renders")
    for p in prometheus:
        o = by_cell[p.cell]
        if o.verdict != p.verdict:
            print(
                f"- {p.cell.recording}, {p.cell.factor}, seed {p.cell.variant.seed}: {o.verdict} | {p.verdict}"
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="one seed and a subset of the variants (~3 min)")
    parser.add_argument("--jobs", type=int, default=2, help="renders analysed in parallel (default 2)")
    parser.add_argument(
        "--seeds", type=int, default=None, help="seeds per variant (default 3; 1 with --quick)"
    )
    parser.add_argument("--no-prometheus", action="store_true", help="skip the real-Prometheus check")
    parser.add_argument(
        "--recordings", type=Path, default=RECORDINGS, help="folder of *.om.gz and labels*.json"
    )
    parser.add_argument("--only", nargs="*", default=[], help="only these recordings")
    args = parser.parse_args(argv)
    seeds = args.seeds or (1 if args.quick else 3)
    labels = load_labels(args.recordings)
    names = recordings_in(args.recordings, labels, args.only)
    cells = grid(args.recordings, names, seeds, args.quick)
    print(
        f"grid: {len(cells)} renders = {len(names)} recordings × {seeds} seed(s) × one factor at a time "
        f"({'quick' if args.quick else 'full'})"
    )
    started = time.monotonic()
    jobs = [(str(args.recordings), cell, labels[cell.recording]) for cell in cells]
    if args.jobs > 1:
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            openmetrics = pool.map(run_openmetrics, jobs, chunksize=4)
    else:
        openmetrics = [run_openmetrics(job) for job in jobs]
    print(f"--openmetrics: {len(openmetrics)} renders in {time.monotonic() - started:.0f} s")
    print_tables("--openmetrics", openmetrics, labels)
    if args.no_prometheus:
        return 0
    picked = pick_for_prometheus(openmetrics, PROMETHEUS_SAMPLE)
    if args.quick:
        picked = [c for c in picked if c.window_seconds == HOUR or c.variant.request_share is not None]
    started = time.monotonic()
    prometheus = run_prometheus(args.recordings, picked, labels)
    print(f"\n--prometheus: {len(prometheus)} renders in {time.monotonic() - started:.0f} s")
    print_tables("--prometheus", prometheus, labels)
    print_agreement(openmetrics, prometheus)
    return 0


if __name__ == "__main__":
    sys.exit(main())
