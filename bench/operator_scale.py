"""Operator at scale on the real local cluster: time to recommend and diagnose, cycle cost, query count.

Run: `python bench/operator_scale.py [--workloads N] [--small N0] [--nodes M]`. One invocation brings up
a local cluster (real control plane, M fake GPU nodes), the live metrics simulator, Prometheus and the
operator, then measures two sizes in turn: first N0 GPU Deployments (default 50), then N in all
(default 250). For each size it prints the time until every workload has a GPURecommendation and a
real (not InsufficientData) diagnosis, the cycle duration (p50/max, from the operator's log), the
statuses each cycle wrote and of them refreshed (from the same log line: while a window fills, its
sample counts and confidences grow and every status is rewritten, so steady figures need a --budget
and --timeout that outlast the window, e.g. `--window 5m --budget 780 --timeout 480`), the
Prometheus queries per cycle (from Prometheus's own `prometheus_http_requests_total`), the
kube-apiserver requests per cycle by verb and resource, and the operator's RSS (from /proc). The
queries-per-cycle ratio between the sizes shows whether Prometheus load grows with the workload count;
Prometheus' CPU-seconds per steady cycle come from its own `process_cpu_seconds_total`. With
`--krr-python` and `--krr-dir` (robusta-dev/krr in its own checkout and virtualenv), the operator is
then stopped and KRR's `simple` strategy runs once against the same Prometheus, printed next to our
steady cycle with the ratios. Everything is torn down on exit, on Ctrl-C and on SIGTERM.
"""

from __future__ import annotations

import argparse
import itertools
import re
import signal
import statistics
import sys
import time
import urllib.request
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import yaml
from prometheus_client.parser import text_string_to_metric_families

from gpu_rightsizer.commands.cluster import crd_objects, state_dir
from gpu_rightsizer.commands.demo import deployment, managed_process
from gpu_rightsizer.model.durations import parse_duration
from gpu_rightsizer.sim.scenarios import Shape
from gpu_rightsizer.testcluster.binaries import ensure_binaries
from gpu_rightsizer.testcluster.kwok import LocalCluster
from gpu_rightsizer.testcluster.nodes import H100_80GB, H200, NodeSpec
from gpu_rightsizer.testcluster.prometheus import PrometheusServer, free_port

#: Each run brings up its own cluster (its own name, files and ports): two runs on one machine, or a
#: run next to the e2e tests, never share or tear down each other's.
CLUSTER_PREFIX = "gpurs-bench"
NAMESPACES = ("team-a", "team-b", "team-c", "team-d", "team-e")
GROUP, VERSION, PLURAL = "gpurightsizer.io", "v1alpha1", "gpurecommendations"
#: Shapes that end in a real diagnosis (insufficient-data by design never does).
SHAPES = [shape for shape in Shape if shape is not Shape.INSUFFICIENT_DATA]
CYCLE_LINE = re.compile(
    r"analysis cycle: (\d+) recommendations updated in ([0-9.]+) s"
    r"(?:, (\d+) statuses written(?: \((\d+) refreshed\))?)?"
)
#: The line before a cycle's own: which part of the status said something new first, counted.
CHANGED_LINE = re.compile(r"status writes by what changed first: (.*)$")
#: The line before those: seconds each part of the cycle took (`recommender.cycle`).
PHASES_LINE = re.compile(
    r"cycle phases: listing ([0-9.]+) s, metrics ([0-9.]+) s, analysis and writes ([0-9.]+) s, policies ([0-9.]+) s"
)
PHASE_NAMES = ("listing", "metrics", "analysis and writes", "policies")
APISERVER_LINE = re.compile(r"^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$", re.MULTILINE)
LABEL = re.compile(r'(\w+)="([^"]*)"')


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


# --- cluster shape -------------------------------------------------------------------------------


@dataclass
class Pool:
    """Nodes of one product and GPU resource, with the GPUs still free for our workloads."""

    product: str
    resource: str
    cpu: str
    free: int


def fleet(node_count: int) -> tuple[list[NodeSpec], list[Pool]]:
    """About 84% whole-GPU H100 nodes, 12% H200, the rest MIG-mixed H200 (at least one), 8 GPUs each."""
    mig = max(1, node_count // 25)
    h200 = max(1, (node_count - mig) // 8)
    h100 = max(1, node_count - mig - h200)
    nodes = [NodeSpec(f"gpu-h100-{i}", H100_80GB) for i in range(h100)]
    nodes += [NodeSpec(f"gpu-h200-{i}", H200) for i in range(h200)]
    nodes += [NodeSpec(f"gpu-h200-mig-{i}", H200, mig_mixed=True) for i in range(mig)]
    pools = [
        Pool(H100_80GB.product, "nvidia.com/gpu", "16", 8 * h100),
        Pool(H200.product, "nvidia.com/gpu", "16", 8 * h200),
        Pool(H200.product, "nvidia.com/mig-1g.18gb", "2", 28 * mig),
    ]
    return nodes, pools


def replicas_of(index: int) -> int:
    """Mostly 1 replica; some 2, 3 or 4."""
    if index % 29 == 11:
        return 4
    if index % 13 == 5:
        return 3
    if index % 7 == 3:
        return 2
    return 1


def workloads(first: int, count: int, pools: list[Pool]) -> list[dict[str, Any]]:
    """Deployments `wl-<first>`... with mixed scenarios, products and replica counts; fails if they don't fit."""
    manifests = []
    for index in range(first, first + count):
        replicas = replicas_of(index)
        preferred = 2 if index % 20 == 9 else (1 if index % 10 in (4, 8) else 0)
        order = [preferred] + [i for i in range(len(pools)) if i != preferred]
        pool = next((pools[i] for i in order if pools[i].free >= replicas), None)
        if pool is None:
            raise SystemExit(f"workload {index} does not fit on the fleet: raise --nodes")
        pool.free -= replicas
        shape = SHAPES[index % len(SHAPES)]
        namespace = NAMESPACES[index % len(NAMESPACES)]
        manifests.append(
            deployment(
                f"wl-{index:04d}", namespace, shape.value, pool.product, pool.resource, pool.cpu, replicas
            )
        )
    return manifests


# --- observation ---------------------------------------------------------------------------------


def http_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        text: str = answer.read().decode()
        return text


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample `name` (counter `_total` included) of a Prometheus text exposition."""
    found = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found.append((dict(sample.labels), float(sample.value)))
    return found


def prometheus_queries(prometheus_url: str) -> float:
    """Instant plus range queries Prometheus has answered so far (its own HTTP counter)."""
    rows = samples(http_text(f"{prometheus_url}/metrics"), "prometheus_http_requests_total")
    return sum(v for labels, v in rows if labels.get("handler") in ("/api/v1/query", "/api/v1/query_range"))


def prometheus_cpu_seconds(prometheus_url: str) -> float:
    """CPU-seconds Prometheus has spent so far (its own `process_cpu_seconds_total`)."""
    rows = samples(http_text(f"{prometheus_url}/metrics"), "process_cpu_seconds_total")
    return rows[0][1] if rows else 0.0


def apiserver_requests(cluster: LocalCluster) -> dict[str, float]:
    """kube-apiserver's request counter, summed by `VERB resource[/subresource]` (WATCH excluded)."""
    text = cluster.kubectl("get", "--raw", "/metrics", timeout=60).stdout
    totals: defaultdict[str, float] = defaultdict(float)
    for labels_text, value in APISERVER_LINE.findall(text):
        labels = dict(LABEL.findall(labels_text))
        if labels.get("verb") == "WATCH":
            continue
        resource = labels.get("resource", "") + (
            f"/{labels['subresource']}" if labels.get("subresource") else ""
        )
        totals[f"{labels.get('verb')} {resource or labels.get('component', '-')}"] += float(value)
    return totals


def rss_mib(pid: int) -> tuple[float, float]:
    """(current, peak) resident set size of a process, MiB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


@dataclass(frozen=True)
class FinishedCycle:
    """One finished analysis cycle as its log line tells it."""

    updated: int  # recommendations updated
    seconds: float
    #: "statuses written/of them refreshed"; None when the line does not say.
    written: str | None


def finished_cycles(log: Path) -> list[FinishedCycle]:
    """Each finished analysis cycle in the operator log, in order (one entry per cycle line, so the
    lists of `lines_before_cycles` and `cycle_phases` index as this one does)."""
    return [
        FinishedCycle(int(n), float(s), f"{w}/{r or '?'}" if w else None)
        for n, s, w, r in CYCLE_LINE.findall(log.read_text(errors="replace"))
    ]


def cycle_lines(log: Path) -> list[tuple[int, float]]:
    """(recommendations updated, seconds) of each finished analysis cycle in the operator log."""
    return [(cycle.updated, cycle.seconds) for cycle in finished_cycles(log)]


def lines_before_cycles(log: Path, pattern: re.Pattern[str]) -> list[tuple[int, list[re.Match[str]]]]:
    """(recommendations updated, the lines matching `pattern` since the cycle before) of each finished
    cycle: one entry per cycle line, so the list indexes as `cycle_lines` does."""
    found: list[tuple[int, list[re.Match[str]]]] = []
    pending: list[re.Match[str]] = []
    for line in log.read_text(errors="replace").splitlines():
        match = pattern.search(line)
        if match:
            pending.append(match)
            continue
        done = CYCLE_LINE.search(line)
        if done:
            found.append((int(done.group(1)), pending))
            pending = []
    return found


def cycle_phases(log: Path) -> list[tuple[int, tuple[float, ...] | None]]:
    """(recommendations updated, seconds of each of PHASE_NAMES; None when the cycle did not log them)
    of each finished cycle."""
    return [
        (n, tuple(float(s) for s in spans[-1].groups()) if spans else None)
        for n, spans in lines_before_cycles(log, PHASES_LINE)
    ]


def cycle_changes(log: Path) -> list[tuple[int, Counter[str]]]:
    """(recommendations updated, status paths that changed first -> writes) of each finished cycle
    (empty for a cycle that wrote nothing it counted as changed, or an operator that does not say)."""
    found: list[tuple[int, Counter[str]]] = []
    for n, lines in lines_before_cycles(log, CHANGED_LINE):
        changed: Counter[str] = Counter()
        for part in (part for line in lines for part in line.group(1).split(", ")):
            path, _, count = part.rpartition(" ")
            if count.isdigit():
                changed[path] += int(count)
        found.append((n, changed))
    return found


@dataclass
class Phase:
    """What one size measured."""

    workloads: int
    pods: int
    time_to_recommendations: float | None = None
    time_to_diagnoses: float | None = None
    cycles: list[tuple[int, float]] = field(default_factory=list)  # steady cycles: (updated, seconds)
    written: list[str] = field(default_factory=list)  # "written/refreshed" statuses of those cycles
    changed: list[Counter[str]] = field(default_factory=list)  # what changed first, per such cycle
    #: PHASE_NAMES seconds per such cycle (None: the cycle did not log them)
    phase_spans: list[tuple[float, ...] | None] = field(default_factory=list)
    queries_per_cycle: list[float] = field(default_factory=list)
    prometheus_cpu_per_cycle: list[float] = field(default_factory=list)
    cycle_spans: list[float] = field(default_factory=list)  # seconds between the steady cycles' ends
    apiserver_per_cycle: dict[str, float] = field(default_factory=dict)
    apiserver_rate: float = 0.0
    steady_cycle_count: int = 0
    rss: tuple[float, float] = (0.0, 0.0)
    codes: Counter[str] = field(default_factory=Counter)
    #: How the operator ran, when not as the other phases did.
    label: str = ""


class Bench:
    """Drives one size: waits for recommendations and diagnoses, then measures steady cycles."""

    def __init__(self, cluster: LocalCluster, prometheus_url: str, operator: Any, log: Path) -> None:
        from kubernetes import client, config

        config.load_kube_config(config_file=str(cluster.kubeconfig))  # type: ignore[no-untyped-call]
        self.custom = client.CustomObjectsApi()
        self.cluster = cluster
        self.prometheus_url = prometheus_url
        self.operator = operator
        self.log = log
        self.own_lists = 0  # our own LISTs of GPURecommendations, subtracted from the apiserver figures
        self.marks: list[tuple[int, float]] = []  # (workloads in the cycle, Prometheus queries) at cycle ends
        self.lines_seen = 0
        self.deadline = float("inf")  # the whole benchmark's end: every wait stops there
        #: When the operator's first window has filled: until then every status changes as its sample
        #: counts grow, so the steady cycles are measured after it.
        self.window_filled = 0.0
        #: The observation window (seconds): every pod's own window is full that long after it exists.
        self.window_seconds = 0.0

    def recommendations(self) -> list[dict[str, Any]]:
        self.own_lists += 1
        answer: Any = self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        items: list[dict[str, Any]] = answer["items"]
        return items

    def mark_cycles(self) -> None:
        """Snapshot Prometheus's query counter whenever a cycle has just ended (between cycles it is idle)."""
        lines = cycle_lines(self.log)
        if len(lines) > self.lines_seen:
            self.marks.append((lines[-1][0] if len(lines) == self.lines_seen + 1 else -1,
                               prometheus_queries(self.prometheus_url)))  # fmt: skip
            self.lines_seen = len(lines)

    def queries_per_cycle(self, workloads: int) -> list[float]:
        """Queries sent by each whole cycle that covered `workloads` workloads."""
        return [b[1] - a[1] for a, b in itertools.pairwise(self.marks) if b[0] == workloads and a[0] >= 0]

    def alive(self) -> None:
        if self.operator.poll() is not None:
            raise RuntimeError(f"the operator exited with {self.operator.returncode}; see {self.log}")

    def measure(self, expected: set[tuple[str, str]], pods: int, started: float, timeout: float,
                steady_cycles: int) -> Phase:  # fmt: skip
        phase = Phase(workloads=len(expected), pods=pods)
        first_line = len(cycle_lines(self.log))
        deadline = min(started + timeout, self.deadline)
        while time.monotonic() < deadline:
            self.alive()
            self.mark_cycles()
            items = self.recommendations()
            present = {(i["metadata"]["namespace"], i["spec"]["targetRef"]["name"]): i for i in items}
            mine = [present[key] for key in expected if key in present]
            diagnosed = [
                i for i in mine
                if ((i.get("status") or {}).get("diagnosis") or {}).get("primary") not in (None, "InsufficientData")
            ]  # fmt: skip
            now = time.monotonic() - started
            if phase.time_to_recommendations is None and len(mine) == len(expected):
                phase.time_to_recommendations = now
                # every workload's pods exist now (their events made the recommendations): their
                # windows are full one window later
                self.window_filled = max(self.window_filled, time.monotonic() + self.window_seconds)
                say(f"all {len(expected)} workloads have a GPURecommendation after {now:.1f} s")
            if len(diagnosed) == len(expected):
                phase.time_to_diagnoses = now
                phase.codes = Counter(i["status"]["diagnosis"]["primary"] for i in mine)
                say(f"all {len(expected)} workloads diagnosed after {now:.1f} s")
                break
            say(f"{now:5.0f} s: {len(mine)}/{len(expected)} recommendations, {len(diagnosed)} diagnosed")
            time.sleep(3)
        else:
            say(f"not every workload was diagnosed within {timeout:.0f} s; measuring cycles anyway")
        if time.monotonic() < self.window_filled:
            wait = min(self.window_filled, self.deadline) - time.monotonic()
            say(f"waiting {max(wait, 0):.0f} s for every pod's window to fill before the steady cycles")
            while time.monotonic() < min(self.window_filled, self.deadline):
                self.alive()
                self.mark_cycles()
                time.sleep(2)
        self.steady(phase, steady_cycles)
        # Every cycle of this size that covered all its workloads, steady or not.
        covering = [c for c in finished_cycles(self.log)[first_line:] if c.updated == len(expected)]
        phase.cycles = [(c.updated, c.seconds) for c in covering]
        phase.written = [c.written for c in covering if c.written]
        phase.changed = [c for n, c in cycle_changes(self.log)[first_line:] if n == len(expected)]
        phase.phase_spans = [c for n, c in cycle_phases(self.log)[first_line:] if n == len(expected)]
        phase.queries_per_cycle = self.queries_per_cycle(len(expected))
        if phase.rss == (0.0, 0.0):
            phase.rss = rss_mib(self.operator.pid)
        return phase

    def wait_for_full_cycle(self, workloads: int, timeout: float) -> None:
        """Until one cycle has analysed every workload (a restarted operator backfills first)."""
        deadline = min(time.monotonic() + timeout, self.deadline)
        while time.monotonic() < deadline:
            self.alive()
            if any(n == workloads for n, _ in cycle_lines(self.log)):
                return
            time.sleep(2)
        say(f"no cycle analysed all {workloads} workloads within {timeout:.0f} s")

    def steady(self, phase: Phase, cycles: int) -> None:
        """Watch `cycles` whole cycles: Prometheus queries and apiserver requests between cycle ends."""
        self.mark_cycles()
        seen = len(cycle_lines(self.log))
        lists_before = self.own_lists
        marks: list[tuple[float, float]] = []  # (monotonic, prometheus queries) at each cycle end
        cpu_marks: list[float] = []  # Prometheus CPU-seconds at each cycle end
        api_before: dict[str, float] | None = None
        api_started = 0.0
        limit = min(time.monotonic() + 30 * (cycles + 2), self.deadline + 60)
        while len(marks) <= cycles and time.monotonic() < limit:
            self.alive()
            lines = cycle_lines(self.log)
            if len(lines) > seen:
                queries = prometheus_queries(self.prometheus_url)
                if api_before is None:
                    api_before, api_started = apiserver_requests(self.cluster), time.monotonic()
                marks.append((time.monotonic(), queries))
                cpu_marks.append(prometheus_cpu_seconds(self.prometheus_url))
                self.marks.append((lines[-1][0] if len(lines) == seen + 1 else -1, queries))
                seen = self.lines_seen = len(lines)
            time.sleep(0.25)
        if len(marks) < 2 or api_before is None:
            return
        api_after = apiserver_requests(self.cluster)
        span = time.monotonic() - api_started
        phase.steady_cycle_count = len(marks) - 1
        phase.prometheus_cpu_per_cycle = [b - a for a, b in itertools.pairwise(cpu_marks)]
        phase.cycle_spans = [b[0] - a[0] for a, b in itertools.pairwise(marks)]
        delta = {key: value - api_before.get(key, 0.0) for key, value in api_after.items()}
        own = self.own_lists - lists_before
        delta[f"LIST {PLURAL}"] = delta.get(f"LIST {PLURAL}", 0.0) - own
        phase.apiserver_rate = sum(v for v in delta.values() if v > 0) / span
        phase.apiserver_per_cycle = {k: v / phase.steady_cycle_count for k, v in delta.items() if v > 0.5}
        phase.rss = rss_mib(self.operator.pid)


# --- report --------------------------------------------------------------------------------------


def fmt(value: float | None, unit: str = " s") -> str:
    return "n/a" if value is None else f"{value:.1f}{unit}"


def report(phases: list[Phase], args: argparse.Namespace, nodes: int, gpus: int) -> None:
    print()
    print(f"operator at scale: {nodes} fake GPU nodes ({gpus} GPUs + MIG slices), window {args.window}, "
          f"interval {args.interval}, scrape {args.scrape}")  # fmt: skip
    print(f"{'':38s}" + "".join(f"{f'N={p.workloads} ({p.pods} pods)':>22s}" for p in phases))
    if any(p.label for p in phases):
        print(f"{'':38s}" + "".join(f"{p.label or 'chunked':>22s}" for p in phases))

    def row(label: str, values: list[str]) -> None:
        print(f"{label:38s}" + "".join(f"{v:>22s}" for v in values))

    row("time to all GPURecommendations", [fmt(p.time_to_recommendations) for p in phases])
    row("time to all real diagnoses", [fmt(p.time_to_diagnoses) for p in phases])
    row("full cycles at this size", [str(len(p.cycles)) for p in phases])
    row("steady cycles measured", [str(p.steady_cycle_count) for p in phases])
    row(
        "cycle duration p50",
        [fmt(statistics.median(s for _, s in p.cycles) if p.cycles else None) for p in phases],
    )
    row("cycle duration max", [fmt(max((s for _, s in p.cycles), default=None)) for p in phases])
    steady = [
        [s for _, s in p.cycles[-p.steady_cycle_count :]] if p.steady_cycle_count else [] for p in phases
    ]
    row("steady cycle duration p50 / max", [
        f"{statistics.median(s):.1f} / {max(s):.1f} s" if s else "n/a" for s in steady
    ])  # fmt: skip
    row("cycle seconds per workload (p50)", [
        fmt(statistics.median(s for _, s in p.cycles) / p.workloads * 1000, " ms") if p.cycles else "n/a"
        for p in phases
    ])  # fmt: skip
    row("recommendations updated per cycle", [",".join(str(n) for n, _ in p.cycles) or "n/a" for p in phases])
    row("statuses written/refreshed per cycle", [",".join(p.written) or "n/a" for p in phases])
    row("  of them in the steady cycles", [
        ",".join(p.written[-p.steady_cycle_count:]) if p.steady_cycle_count else "n/a" for p in phases
    ])  # fmt: skip
    for p in phases:
        late = (
            sum((c for c in p.changed[-p.steady_cycle_count :]), Counter()) if p.steady_cycle_count else None
        )
        if late:
            print(f"what changed first in the steady cycles at N={p.workloads}: "
                  + ", ".join(f"{path} {n}" for path, n in late.most_common(8)))  # fmt: skip
        phase_rows = p.phase_spans[-p.steady_cycle_count :] if p.steady_cycle_count else []
        logged = [s for s in phase_rows if s is not None]
        if logged:
            print(f"steady cycle phases at N={p.workloads} (median s): "
                  + ", ".join(f"{name} {statistics.median(s[i] for s in logged):.1f}"
                              for i, name in enumerate(PHASE_NAMES)))  # fmt: skip
    row(
        "Prometheus queries per cycle",
        [",".join(f"{q:.0f}" for q in p.queries_per_cycle) or "n/a" for p in phases],
    )
    row(
        "Prometheus CPU-seconds per cycle",
        [",".join(f"{c:.2f}" for c in p.prometheus_cpu_per_cycle) or "n/a" for p in phases],
    )
    row("kube-apiserver requests/s (all)", [fmt(p.apiserver_rate, "") for p in phases])
    row("operator RSS now / peak (MiB)", [f"{p.rss[0]:.0f} / {p.rss[1]:.0f}" for p in phases])
    keys = sorted({k for p in phases for k in p.apiserver_per_cycle if PLURAL in k or "deployments" in k
                   or k.startswith("LIST ") or "pods" in k or "replicasets" in k})  # fmt: skip
    print("kube-apiserver requests per cycle (steady; our own polling LISTs removed):")
    for key in keys:
        row(f"  {key}", [f"{p.apiserver_per_cycle.get(key, 0.0):.1f}" for p in phases])
    for p in phases:
        print(f"diagnoses at N={p.workloads}: " + ", ".join(f"{c} {n}" for c, n in p.codes.most_common()))
    chunked = [p for p in phases if not p.label]
    one_chunk = [p for p in phases if p.label == "one chunk"]
    if chunked and one_chunk and chunked[-1].rss[0] and one_chunk[0].rss[0]:
        after, before = chunked[-1].rss, one_chunk[0].rss
        print(f"operator RSS at N={chunked[-1].workloads}, chunked / one chunk: now {after[0]:.0f} / {before[0]:.0f} "
              f"= {after[0] / before[0]:.2f}x, peak {after[1]:.0f} / {before[1]:.0f} = {after[1] / before[1]:.2f}x")  # fmt: skip
    phases = chunked
    if len(phases) == 2 and all(p.queries_per_cycle for p in phases):
        small, large = (statistics.median(p.queries_per_cycle) for p in phases)
        print(f"Prometheus queries per cycle, N={phases[1].workloads} / N={phases[0].workloads}: "
              f"{large:.0f} / {small:.0f} = {large / small:.2f}x for {phases[1].workloads / phases[0].workloads:.1f}x "
              "the workloads")  # fmt: skip
    if len(phases) == 2 and all(p.cycles for p in phases):
        small_c, large_c = (statistics.median(s for _, s in p.cycles) for p in phases)
        print(f"cycle duration p50 ratio: {large_c / small_c:.2f}x for "
              f"{phases[1].workloads / phases[0].workloads:.1f}x the workloads")  # fmt: skip
    sys.stdout.flush()


def krr_side_by_side(
    args: argparse.Namespace, cluster: LocalCluster, prometheus_url: str, phase: Phase, logs: Path
) -> None:
    """One KRR `simple` run against the same Prometheus, next to one of our steady cycles."""
    from krr_side_by_side import measure

    command = [
        args.krr_python, str(Path(args.krr_dir) / "krr.py"), "simple",
        "--prometheus-url", prometheus_url, "--kubeconfig", str(cluster.kubeconfig),
        "--history_duration", args.krr_history, "--formatter", "json",
        "--fileoutput", str(logs / "krr.json"),
    ]  # fmt: skip
    # Prometheus also scrapes and compacts: its idle CPU rate is taken away from both sides
    idle_started, idle_cpu = time.monotonic(), prometheus_cpu_seconds(prometheus_url)
    time.sleep(15)
    idle_rate = (prometheus_cpu_seconds(prometheus_url) - idle_cpu) / (time.monotonic() - idle_started)
    say("running KRR's simple strategy against the same Prometheus")
    krr = measure("krr simple", command, prometheus_url, logs / "krr.log")
    krr_cpu = krr.cpu_seconds - idle_rate * krr.wall_seconds
    ours_wall = statistics.median(s for _, s in phase.cycles) if phase.cycles else None
    ours_queries = statistics.median(phase.queries_per_cycle) if phase.queries_per_cycle else None
    ours_cpu = (
        statistics.median(
            c - idle_rate * span
            for c, span in zip(phase.prometheus_cpu_per_cycle, phase.cycle_spans, strict=True)
        )
        if phase.prometheus_cpu_per_cycle
        else None
    )
    print(f"\nKRR side by side at N={phase.workloads} ({phase.pods} pods); KRR exit code {krr.exit_code}")
    print(f"Prometheus CPU without queries: {idle_rate:.3f} CPU-s per second, taken away from both sides")
    print(f"{'':32s}{'ours (cycle p50)':>18s}{'krr simple':>14s}{'krr / ours':>12s}")
    for label, ours, theirs in (
        ("wall time (s)", ours_wall, krr.wall_seconds),
        ("Prometheus queries", ours_queries, krr.queries),
        ("Prometheus CPU-seconds", ours_cpu, krr_cpu),
    ):
        ratio = f"{theirs / ours:.1f}x" if ours else "n/a"
        print(f"{label:32s}{fmt(ours, ''):>18s}{theirs:>14.1f}{ratio:>12s}")
    sys.stdout.flush()


# --- orchestration -------------------------------------------------------------------------------


#: Manifests per `kubectl create`: a thousand in one call outlast its 120 s answer on a busy machine.
CREATE_BATCH = 100


def create(cluster: LocalCluster, manifests: list[dict[str, Any]]) -> None:
    """Create the workloads, `CREATE_BATCH` to a call."""
    for first in range(0, len(manifests), CREATE_BATCH):
        cluster.kubectl(
            "create", "-f", "-", input_text=yaml.safe_dump_all(manifests[first : first + CREATE_BATCH])
        )


#: The environment the operator's image sets for it (Dockerfile), so its resident set is the deployed one.
IMAGE_ENV = {"MALLOC_ARENA_MAX": "2"}


def operator_command(args: argparse.Namespace, prometheus_url: str, *extra: str) -> list[str]:
    """The recommender as the bench runs it (`extra`: more flags)."""
    return [sys.executable, "-m", "gpu_rightsizer", "run", "--role", "recommender",
            "--prometheus-url", prometheus_url, "--window", args.window, "--interval", args.interval,
            "--metrics-address", "127.0.0.1", "--metrics-port", str(free_port()),
            "--liveness", f"http://127.0.0.1:{free_port()}/healthz", *args.operator_arg, *extra]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--workloads", type=int, default=250, help="workloads at the large size (default 250)"
    )
    parser.add_argument(
        "--small", type=int, default=50, help="workloads at the small size (default 50; 0 = skip)"
    )
    parser.add_argument("--nodes", type=int, default=48, help="fake GPU nodes (default 48)")
    parser.add_argument("--window", default="2m", help="operator observation window (default 2m)")
    parser.add_argument("--interval", default="15s", help="operator analysis interval (default 15s)")
    parser.add_argument("--scrape", default="10s", help="Prometheus scrape interval (default 10s)")
    parser.add_argument("--steady-cycles", type=int, default=2, help="cycles measured per size (default 2)")
    parser.add_argument(
        "--timeout", type=float, default=150, help="per-size wait for diagnoses (default 150 s)"
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=240,
        help="stop waiting this long after the operator starts (default 240 s)",
    )
    parser.add_argument(
        "--krr-python", default=None, help="python of KRR's own virtualenv: run KRR side by side"
    )
    parser.add_argument("--krr-dir", default=None, help="checkout of robusta-dev/krr (holds krr.py)")
    parser.add_argument("--krr-history", default="1", help="KRR --history_duration in hours (default 1)")
    parser.add_argument(
        "--one-chunk-too",
        action="store_true",
        help="then run the largest size again with every window assembled in one chunk (memory before/after)",
    )
    parser.add_argument(
        "--operator-arg", action="append", default=[], help="one more flag for the operator (repeatable)"
    )
    parser.add_argument(
        "--cluster-name",
        default=None,
        help=f"local cluster name (default: {CLUSTER_PREFIX}-<random>, per run)",
    )
    args = parser.parse_args()
    if bool(args.krr_python) != bool(args.krr_dir):
        parser.error("--krr-python and --krr-dir go together")
    if not 0 <= args.small < args.workloads:
        parser.error("--small must be below --workloads")

    nodes, pools = fleet(args.nodes)
    sizes = [n for n in (args.small, args.workloads) if n > 0]
    batches = [workloads(0, sizes[0], pools)]
    if len(sizes) == 2:
        batches.append(workloads(sizes[0], sizes[1] - sizes[0], pools))
    gpus = sum(n.gpus for n in nodes if not n.mig_mixed)

    name = args.cluster_name or f"{CLUSTER_PREFIX}-{uuid.uuid4().hex[:6]}"
    workdir = state_dir(name)
    say(f"cluster {name}, files in {workdir}")
    cluster = LocalCluster(name=name, workdir=workdir, bins=ensure_binaries(build=False), nodes=nodes)
    signal.signal(signal.SIGTERM, interrupt)
    began = time.monotonic()
    phases: list[Phase] = []
    try:
        cluster.down()
        cluster.up()
        cluster.apply(crd_objects())
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{PLURAL}.{GROUP}")
        cluster.apply(
            [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in NAMESPACES]
        )
        logs = workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        say(f"creating {len(batches[0])} workloads")
        create(cluster, batches[0])
        port = free_port()
        with managed_process(
            [sys.executable, "-m", "gpu_rightsizer.sim.live", "--kubeconfig", str(cluster.kubeconfig),
             "--host", "127.0.0.1", "--port", str(port), "--exit-after", "900"],
            logs / "simulator.log",
        ), PrometheusServer(workdir / "prometheus", scrape_targets=[f"127.0.0.1:{port}"],
                            scrape_interval=args.scrape) as prometheus:  # fmt: skip
            operator_log = logs / "operator.log"
            say(f"starting the operator; logs in {logs}")
            with managed_process(
                operator_command(args, prometheus.url),
                operator_log,
                env={"KUBECONFIG": str(cluster.kubeconfig), **IMAGE_ENV},
            ) as operator:
                bench = Bench(cluster, prometheus.url, operator, operator_log)
                bench.deadline = time.monotonic() + args.budget
                bench.window_seconds = parse_duration(args.window)
                bench.window_filled = time.monotonic() + bench.window_seconds
                started = time.monotonic()
                expected: set[tuple[str, str]] = set()
                for number, batch in enumerate(batches):
                    if number > 0:
                        say(f"creating {len(batch)} more workloads")
                        started = time.monotonic()
                        create(cluster, batch)
                    expected |= {(m["metadata"]["namespace"], m["metadata"]["name"]) for m in batch}
                    pods = sum(m["spec"]["replicas"] for b in batches[: number + 1] for m in b)
                    phases.append(bench.measure(expected, pods, started, args.timeout, args.steady_cycles))
            if args.one_chunk_too and phases:  # the same size again, every window assembled at once
                say("restarting the operator with every window in one chunk (--chunk-pods 1000000)")
                one_chunk_log = logs / "operator-one-chunk.log"
                with managed_process(
                    operator_command(args, prometheus.url, "--chunk-pods", "1000000"), one_chunk_log,
                    env={"KUBECONFIG": str(cluster.kubeconfig), **IMAGE_ENV},
                ) as operator:  # fmt: skip
                    bench = Bench(cluster, prometheus.url, operator, one_chunk_log)
                    bench.deadline = time.monotonic() + args.budget
                    bench.wait_for_full_cycle(len(expected), args.timeout)  # its backfill done
                    phase = bench.measure(expected, pods, time.monotonic(), args.timeout, args.steady_cycles)
                    phase.label = "one chunk"
                    phases.append(phase)
            if args.krr_python and phases:  # the operator is stopped: Prometheus serves KRR alone
                krr_side_by_side(args, cluster, prometheus.url, phases[-1], logs)
    except KeyboardInterrupt:
        say("interrupted")
    finally:
        say("tearing down")
        cluster.down()
    if phases:
        report(phases, args, len(nodes), gpus)
    say(f"total {time.monotonic() - began:.0f} s")
    return 0 if phases and all(p.time_to_diagnoses is not None for p in phases) else 1


if __name__ == "__main__":
    sys.exit(main())
