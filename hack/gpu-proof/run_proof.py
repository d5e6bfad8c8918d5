"""Run the controlled workloads one at a time while the agent samples the GPU at 1 s, and record.

For each workload: start it pinned to its CPU set, wait for its warm-up, record `--duration` seconds of
OpenMetrics through the agent's own sampler and exporter (dcgm-exporter names), and add the
kube-state-metrics-like and cAdvisor-like series the offline analyzer needs (there is no Kubernetes on
the GPU machine): pod/namespace labels come from the workload name, the CPU limit is the CPU-set size,
CPU usage is the process tree's CPU time from /proc. With --cgroup the limit is also enforced as a cgroup v2
`cpu.max` quota and its throttled/total periods are recorded as cAdvisor's counters. The agent's
per-process CPU (agent/process_cpu.py) is recorded for the workload's processes. Also measures the agent
CLI's own CPU cost and the loader's throughput at several CPU-set sizes and worker counts (--sweep 4:1,4:4).

Run from the repository root:  python3 hack/gpu-proof/run_proof.py --out DIR [--workloads a,b] ...
The calibration set was recorded with:
  --workloads loader-one-worker,fp32-gemm,tiny-server --duration 125 --cgroup
  --workloads host-wait,bf16-trainer --duration 125 --cgroup --sweep 4:1,4:4,8:8 --sweep-extra "--cpu-ms 1.0"
then make_fixtures.py and summarize.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "operator"))

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric  # noqa: E402

from gpu_rightsizer.adapters.nvml import PynvmlLibrary  # noqa: E402
from gpu_rightsizer.agent.cgroups import PodIdentity  # noqa: E402
from gpu_rightsizer.agent.process_cpu import ProcessCpuTracker, process_cpu_families  # noqa: E402
from gpu_rightsizer.agent.runner import AgentRunner  # noqa: E402
from gpu_rightsizer.agent.sampler import NodeSnapshot, ProcessSample  # noqa: E402
from gpu_rightsizer.model import metric_names as mn  # noqa: E402

log = logging.getLogger("gpu-proof")
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
NAMESPACE = "gpu-proof"
NODE = "h200-proof-node"


@dataclass(frozen=True)
class Spec:
    """One workload: its script name, CPU-set size, owner kind and kind of work."""

    name: str
    script: str
    cores: int
    owner_kind: str
    workload_type: str
    extra: tuple[str, ...] = ()
    #: Deployments: the pod is owned by this ReplicaSet, which the Deployment `name` owns.
    replicaset: str | None = None
    #: The pod's CPU limit (cgroup quota with --cgroup) where it differs from the CPU-set size.
    cpu_limit: float | None = None
    #: Restart the process when it exits, with kubelet's crash-loop back-off (10 s, doubling).
    restart: bool = False
    #: Serving metrics the workload exports: "triton" (request counter) or "vllm" (counter and queue).
    serving: str | None = None


SPECS: dict[str, Spec] = {
    "starved-loader": Spec("starved-loader", "starved-loader", 2, "Job", "training"),
    "fed-loader": Spec("fed-loader", "fed-loader", 14, "Job", "training"),
    "tiny-inference": Spec("tiny-inference", "tiny-inference", 2, "StatefulSet", "inference"),
    "idle-holder": Spec("idle-holder", "idle-holder", 1, "StatefulSet", "inference"),
    "membw": Spec("membw", "membw", 2, "Job", "training"),
    "pageable-h2d": Spec("pageable-h2d", "pageable-h2d", 2, "Job", "training"),
    "bf16-train": Spec("bf16-train", "bf16-train", 4, "Job", "training"),
    # The engine-calibration set: each case where a wrong answer would cause harm.
    "loader-one-worker": Spec(
        "loader-one-worker",
        "starved-loader",
        2,
        "Job",
        "training",
        ("--workers", "1", "--cpu-ms", "1.0"),
    ),
    "fp32-gemm": Spec("fp32-gemm", "fp32-gemm", 4, "Job", "training"),
    "tiny-server": Spec(
        "tiny-server",
        "tiny-inference",
        2,
        "Deployment",
        "inference",
        ("--rate", "5", "--model-gib", "4"),
        replicaset="tiny-server-7c9d5f6b8",
    ),
    "host-wait": Spec("host-wait", "host-wait", 2, "Job", "training", ("--inner", "3", "--wait-ms", "50")),
    "bf16-trainer": Spec("bf16-trainer", "bf16-train", 4, "Job", "training"),
    # Patterns the engine had no recording of (issue: do no harm on workloads nobody recorded).
    "loader-3w-4cpu": Spec(
        "loader-3w-4cpu", "starved-loader", 4, "Job", "training", ("--workers", "3", "--cpu-ms", "1.5")
    ),
    "loader-6w-q5": Spec(
        "loader-6w-q5",
        "starved-loader",
        6,
        "Job",
        "training",
        ("--workers", "6", "--cpu-ms", "1.5"),
        cpu_limit=5.0,
    ),
    "slow-read-loader": Spec(
        "slow-read-loader",
        "slow-read-loader",
        8,
        "Job",
        "training",
        ("--workers", "4", "--read-mib-per-s", "10", "--batch", "128"),
    ),
    "launch-bound": Spec("launch-bound", "launch-bound", 4, "Job", "training"),
    "h2d-train": Spec("h2d-train", "h2d-train", 2, "Job", "training"),
    "wide-duty": Spec("wide-duty", "wide-duty", 2, "Job", "training", ("--inner", "8", "--wait-ms", "75")),
    "idle-context": Spec(
        "idle-context", "idle-context", 1, "Deployment", "inference", replicaset="idle-context-5f7d9c4b6"
    ),
    "gpu-oom-crashloop": Spec(
        "gpu-oom-crashloop", "gpu-oom", 4, "Job", "training", ("--steps-before-oom", "30"), restart=True
    ),
    "memory-full-server": Spec(
        "memory-full-server",
        "tiny-inference",
        2,
        "Deployment",
        "inference",
        ("--rate", "20", "--model-gib", "120"),
        replicaset="memory-full-server-6d8f7b5c9",
        serving="triton",
    ),
    "tokenizer-server": Spec(
        "tokenizer-server",
        "tokenizer-server",
        2,
        "Deployment",
        "inference",
        ("--rate", "150", "--tokenize-ms", "8"),
        replicaset="tokenizer-server-8b6c4d7f5",
        serving="vllm",
    ),
}

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cpu_quota_cgroup(name: str, cores: float) -> Path | None:
    """A cgroup v2 group with `cpu.max` = `cores` (the pod's CFS quota), or None where none can be made."""
    if not (CGROUP_ROOT / "cgroup.controllers").exists():
        return None
    try:
        controllers = (CGROUP_ROOT / "cgroup.subtree_control").read_text().split()
        if "cpu" not in controllers:
            (CGROUP_ROOT / "cgroup.subtree_control").write_text("+cpu")
        group = CGROUP_ROOT / f"gpu-proof-{name}"
        group.mkdir(exist_ok=True)
        (group / "cpu.max").write_text(f"{round(cores * 100000)} 100000")
        return group
    except OSError as exc:
        log.warning("no CPU quota cgroup (%s): the CPU set alone stands in for the limit", exc)
        return None


def cgroup_cpu_stat(group: Path) -> dict[str, int]:
    try:
        return {
            k: int(v) for k, v in (line.split() for line in (group / "cpu.stat").read_text().splitlines())
        }
    except (OSError, ValueError):
        return {}


def proc_stat(pid: int) -> tuple[int, float, float, int] | None:
    """(ppid, own CPU s, reaped children's CPU s, rss bytes) of one process, None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    ppid = int(fields[1])
    own = (int(fields[11]) + int(fields[12])) / CLK_TCK
    children = (int(fields[13]) + int(fields[14])) / CLK_TCK
    rss = int(fields[21]) * PAGE
    return ppid, own, children, rss


def process_tree(root: int) -> set[int]:
    """`root` and all its live descendants."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = proc_stat(int(entry.name))
            if stat is not None:
                parents[int(entry.name)] = stat[0]
    tree = {root}
    changed = True
    while changed:
        changed = False
        for pid, ppid in parents.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                changed = True
    return tree


@dataclass
class PodRun:
    """A running workload seen as a pod."""

    spec: Spec
    process: subprocess.Popen[bytes]
    cores: list[int]
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    tree: set[int] = field(default_factory=set)
    nvml_pids_seen: set[int] = field(default_factory=set)
    ticks_without_process: int = 0
    requests_file: Path | None = None
    cgroup: Path | None = None
    busiest_process: list[tuple[float, str, int]] = field(default_factory=list)
    restarts: int = 0
    exited_at: float | None = None
    start_command: list[str] = field(default_factory=list)

    @property
    def pod(self) -> str:
        if self.spec.replicaset:
            return f"{self.spec.replicaset}-x7k2q"
        return f"{self.spec.name}-0"

    def identity(self) -> PodIdentity:
        return PodIdentity(pod_uid=self.uid, namespace=NAMESPACE, pod=self.pod, container="main")

    @property
    def cpu_limit(self) -> float:
        return self.spec.cpu_limit or float(len(self.cores))

    def cpu_and_rss(self) -> tuple[float, int]:
        """CPU seconds of the whole tree (live + reaped children) and summed RSS."""
        self.tree = process_tree(self.process.pid)
        cpu = 0.0
        rss = 0
        for pid in self.tree:
            stat = proc_stat(pid)
            if stat is None:
                continue
            cpu += stat[1]
            rss += stat[3]
            if pid == self.process.pid:
                cpu += stat[2]
        return cpu, rss

    def read_bytes(self) -> float:
        """Bytes the live tree read from block devices (/proc/PID/io read_bytes): cAdvisor's fs reads."""
        total = 0
        for pid in self.tree:
            try:
                for line in Path(f"/proc/{pid}/io").read_text().splitlines():
                    if line.startswith("read_bytes:"):
                        total += int(line.split()[1])
            except (OSError, ValueError):
                continue
        return float(total)

    def supervise(self) -> None:
        """Kubelet's part for a crash-looping container: restart after 10 s, 20 s, 40 s … of back-off."""
        if not self.spec.restart or self.process.poll() is None:
            return
        now = time.monotonic()
        if self.exited_at is None:
            self.exited_at = now
            log.info("%s exited with %s (restart %d)", self.spec.name, self.process.returncode, self.restarts)
        if now - self.exited_at >= 10.0 * 2 ** min(self.restarts, 4):
            self.process = subprocess.Popen(self.start_command)
            if self.cgroup is not None:
                with contextlib.suppress(OSError):
                    (self.cgroup / "cgroup.procs").write_text(str(self.process.pid))
            self.restarts += 1
            self.exited_at = None


def ksm_and_cadvisor(run: PodRun, timestamp: float) -> list[Metric]:
    """kube-state-metrics-like and cAdvisor-like series of the workload's pod at one tick."""
    pod = {"namespace": NAMESPACE, "pod": run.pod}
    container = {**pod, "container": "main"}
    out: list[Metric] = []

    def gauge(name: str, labels: dict[str, str], value: float) -> None:
        family = GaugeMetricFamily(name, name)
        family.add_sample(name, labels, value, timestamp)
        out.append(family)

    owner_kind, owner_name = run.spec.owner_kind, run.spec.name
    if run.spec.replicaset:
        gauge(
            mn.KSM_REPLICASET_OWNER,
            {
                "namespace": NAMESPACE,
                "replicaset": run.spec.replicaset,
                "owner_kind": owner_kind,
                "owner_name": owner_name,
                "owner_is_controller": "true",
            },
            1.0,
        )
        gauge(mn.KSM_DEPLOYMENT_REPLICAS, {"namespace": NAMESPACE, "deployment": owner_name}, 1.0)
        owner_kind, owner_name = "ReplicaSet", run.spec.replicaset
    gauge(
        mn.KSM_POD_OWNER,
        {**pod, "owner_kind": owner_kind, "owner_name": owner_name, "owner_is_controller": "true"},
        1.0,
    )
    gauge(mn.KSM_POD_INFO, {**pod, "node": NODE, "uid": run.uid}, 1.0)
    gauge(mn.KSM_POD_LABELS, {**pod, mn.POD_LABEL_WORKLOAD_TYPE: run.spec.workload_type}, 1.0)
    gauge(
        mn.KSM_NODE_LABELS,
        {"node": NODE, mn.NODE_LABEL_GPU_PRODUCT: "NVIDIA-H200", mn.NODE_LABEL_GPU_MEMORY: "143771"},
        1.0,
    )
    cores = run.cpu_limit
    for family_name in (mn.KSM_POD_REQUESTS, mn.KSM_POD_LIMITS):
        family = GaugeMetricFamily(family_name, family_name)
        family.add_sample(
            family_name, {**container, "node": NODE, "resource": "cpu", "unit": "core"}, cores, timestamp
        )
        family.add_sample(
            family_name,
            {**container, "node": NODE, "resource": "memory", "unit": "byte"},
            32.0 * 2**30,
            timestamp,
        )
        family.add_sample(
            family_name,
            {**container, "node": NODE, "resource": "nvidia_com_gpu", "unit": "integer"},
            1.0,
            timestamp,
        )
        out.append(family)
    cpu, rss = run.cpu_and_rss()
    usage = CounterMetricFamily(mn.CADVISOR_CPU_USAGE, "CPU time of the pod's processes (from /proc).")
    usage.add_sample(mn.CADVISOR_CPU_USAGE, {**container, "cpu": "total"}, cpu, timestamp)
    out.append(usage)
    gauge(mn.CADVISOR_MEMORY_WORKING_SET, container, float(rss))
    if run.cgroup is not None:
        stat = cgroup_cpu_stat(run.cgroup)
        for name, key in (
            (mn.CADVISOR_CPU_PERIODS, "nr_periods"),
            (mn.CADVISOR_CPU_THROTTLED_PERIODS, "nr_throttled"),
        ):
            if key in stat:
                family = CounterMetricFamily(name, f"cgroup cpu.stat {key}.")
                family.add_sample(name, container, float(stat[key]), timestamp)
                out.append(family)
    if run.spec.restart or run.spec.name not in LEGACY_SERIES:
        reads = CounterMetricFamily(mn.CADVISOR_FS_READS, "Block-device reads of the pod's processes.")
        reads.add_sample(
            mn.CADVISOR_FS_READS, {**container, "device": "/dev/vda"}, run.read_bytes(), timestamp
        )
        out.append(reads)
        restarts = CounterMetricFamily(mn.KSM_POD_RESTARTS, "Container restarts (kubelet stand-in).")
        restarts.add_sample(mn.KSM_POD_RESTARTS, container, float(run.restarts), timestamp)
        out.append(restarts)
        if run.restarts or run.exited_at is not None:
            gauge(mn.KSM_POD_LAST_TERMINATED, {**container, "reason": "Error"}, 1.0)
    if run.requests_file is not None:
        try:
            fields = (run.requests_file.read_text() or "0").split()
            served, waiting = float(fields[0]), (float(fields[1]) if len(fields) > 1 else None)
        except (OSError, ValueError, IndexError):
            served, waiting = 0.0, None
        if run.spec.serving == "vllm":
            requests = CounterMetricFamily(
                mn.VLLM_REQUESTS_TOTAL.removesuffix("_total"), "Requests served by the inference server."
            )
            requests.add_sample(mn.VLLM_REQUESTS_TOTAL, {**pod, "model_name": "mlp"}, served, timestamp)
            out.append(requests)
            if waiting is not None:
                gauge(mn.VLLM_REQUESTS_WAITING, {**pod, "model_name": "mlp"}, waiting)
        else:
            # Triton's counter name, exposed as Triton does (no _total suffix), so typed 'unknown' here.
            requests = Metric(
                mn.SERVING_REQUEST_COUNTERS[1], "Requests served by the inference server.", "unknown"
            )
            requests.add_sample(mn.SERVING_REQUEST_COUNTERS[1], {**pod, "model": "mlp"}, served, timestamp)
            out.append(requests)
    return out


#: The recordings made before fs reads and restarts were recorded: re-recording them keeps their series.
LEGACY_SERIES = frozenset(
    {"starved-loader", "fed-loader", "tiny-inference", "idle-holder", "membw", "pageable-h2d", "bf16-train",
     "loader-one-worker", "fp32-gemm", "tiny-server", "host-wait", "bf16-trainer"}
)  # fmt: skip


def record_workload(spec: Spec, args: argparse.Namespace, workdir: Path) -> dict[str, object]:
    """Start, warm up, record, stop one workload; returns its summary."""
    cores = list(range(args.first_core, args.first_core + spec.cores))
    ready = workdir / f"{spec.name}.ready"
    result = workdir / f"{spec.name}.json"
    command = [
        sys.executable,
        str(HERE / "workloads.py"),
        spec.script,
        "--cores",
        ",".join(map(str, cores)),
        "--duration",
        str(args.duration + 60),
        "--ready",
        str(ready),
        "--result",
        str(result),
        *spec.extra,
    ]
    requests_file = None
    if spec.workload_type == "inference" and (spec.name == "tiny-inference" or spec.serving):
        requests_file = workdir / "requests.count"
        command += ["--requests-file", str(requests_file)]
    group = cpu_quota_cgroup(spec.name, spec.cpu_limit or spec.cores) if args.cgroup else None
    log.info("start %s on cores %s (quota cgroup %s)", spec.name, cores, group)
    process = subprocess.Popen(command)
    if group is not None:
        try:
            (group / "cgroup.procs").write_text(str(process.pid))
        except OSError as exc:
            log.warning("cannot move %s into %s: %s", spec.name, group, exc)
            group = None
    run = PodRun(
        spec=spec,
        process=process,
        cores=cores,
        requests_file=requests_file,
        cgroup=group,
        start_command=command,
    )
    deadline = time.monotonic() + 120
    while not ready.exists():
        if (process.poll() is not None and not spec.restart) or time.monotonic() > deadline:
            raise RuntimeError(f"{spec.name} did not get ready (exit {process.poll()})")
        time.sleep(0.2)

    def resolve(pid: int) -> PodIdentity | None:
        return run.identity() if pid in run.tree or pid == run.process.pid else None

    runner = AgentRunner(nvml=PynvmlLibrary(), resolve=resolve, hostname=NODE, interval=args.interval)
    original_sample = runner.sampler.sample

    def sample_with_pod() -> NodeSnapshot:
        snapshot = original_sample()
        run.supervise()
        run.tree = process_tree(run.process.pid) if run.process.poll() is None else set()
        for device in snapshot.devices:
            pids = {p.pid for p in device.processes}
            run.nvml_pids_seen |= pids & run.tree
            # A crash-looping pod keeps its GPU through the back-off (kubelet's pod-resources still lists
            # it), so dcgm-exporter keeps labelling the device with the pod while no process runs.
            if (run.tree or spec.restart) and not pids & run.tree:
                # NVML did not list the process (PID namespace); the GPU runs only this workload.
                run.ticks_without_process += 1
                device.processes.append(
                    ProcessSample(pid=run.process.pid, used_memory_mib=None, sm_util_percent=None)
                )
        return snapshot

    runner.sampler.sample = sample_with_pod  # type: ignore[method-assign]
    output = workdir / f"{spec.name}.om"

    process_cpu = ProcessCpuTracker(resolve=resolve)
    process_cpu.sample(run.tree)

    def hook(snapshot: NodeSnapshot) -> Iterable[Metric]:
        families = ksm_and_cadvisor(run, snapshot.timestamp)
        rows = process_cpu.sample(run.tree)
        for row in rows:
            run.busiest_process.append((row.max_cores, row.busiest, row.pinned))
        return [*families, *process_cpu_families(rows, NODE, snapshot.timestamp)]

    started = time.monotonic()
    runner.record_to_file(output, args.duration, hook=hook)
    recorded = time.monotonic() - started
    runner.close()
    process = run.process
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    summary: dict[str, object] = {
        "workload": spec.name,
        "cores": cores,
        "recorded_seconds": recorded,
        "nvml_listed_process": bool(run.nvml_pids_seen),
        "ticks_without_nvml_process": run.ticks_without_process,
        "nvml_errors": dict(runner.sampler.errors),
        "cpu_quota_cgroup": str(group) if group else None,
        "busiest_process": _busiest_summary(run.busiest_process),
        "restarts": run.restarts,
    }
    if group is not None:
        summary["cgroup_cpu_stat"] = cgroup_cpu_stat(group)
    if result.exists():
        summary["result"] = json.loads(result.read_text())
    log.info("done %s: %s", spec.name, summary)
    return summary


def _busiest_summary(rows: list[tuple[float, str, int]]) -> dict[str, object]:
    """Median busiest-process cores, the most frequent busiest process, and ticks with one pinned."""
    if not rows:
        return {}
    cores = sorted(r[0] for r in rows)
    names: dict[str, int] = {}
    for _, comm, _ in rows:
        names[comm] = names.get(comm, 0) + 1
    return {
        "median_cores": cores[len(cores) // 2],
        "max_cores": cores[-1],
        "busiest": max(names, key=lambda n: names[n]),
        "ticks_with_pinned": sum(1 for r in rows if r[2] > 0),
        "ticks": len(rows),
    }


def throughput_sweep(
    points: list[str],
    args: argparse.Namespace,
    workdir: Path,
    results: list[dict[str, object]],
    save: Callable[[], None],
) -> None:
    """Loader steps/s at several CPU-set sizes ("cores" or "cores:workers"; no recording)."""
    for point in points:
        count, _, workers = point.partition(":")
        cores = list(range(args.first_core, args.first_core + int(count)))
        tag = point.replace(":", "w")
        result = workdir / f"sweep-{tag}.json"
        ready = workdir / f"sweep-{tag}.ready"
        subprocess.run(
            [
                sys.executable,
                str(HERE / "workloads.py"),
                "starved-loader",
                "--cores",
                ",".join(map(str, cores)),
                "--duration",
                str(args.sweep_duration),
                "--ready",
                str(ready),
                "--result",
                str(result),
                *args.sweep_extra.split(),
                *(("--workers", workers) if workers else ()),
            ],
            check=False,
            timeout=args.sweep_duration + 120,
        )
        if result.exists():
            results.append(json.loads(result.read_text()))
            log.info("sweep %s: %s", point, results[-1])
        save()


def agent_cpu_cost(pid: int, start_cpu: float, start_wall: float) -> dict[str, float]:
    stat = proc_stat(pid)
    if stat is None:
        return {}
    wall = time.monotonic() - start_wall
    cpu = stat[1] - start_cpu
    return {"cpu_seconds": cpu, "wall_seconds": wall, "cpu_seconds_per_second": cpu / wall if wall else 0.0}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workloads", default=",".join(SPECS))
    parser.add_argument("--duration", type=float, default=45.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--first-core", type=int, default=0)
    parser.add_argument("--agent-core", type=int, default=15)
    parser.add_argument(
        "--sweep", default="", help="loader sweep points: cores or cores:workers, comma-separated"
    )
    parser.add_argument("--sweep-duration", type=float, default=20.0)
    parser.add_argument(
        "--sweep-extra", default="", help="extra workload arguments for the sweep, space-separated"
    )
    parser.add_argument(
        "--cgroup", action="store_true", help="also enforce the CPU limit as a cgroup v2 quota"
    )
    parser.add_argument(
        "--agent-cost", action="store_true", help="run the agent CLI alongside and measure it"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    workdir = Path("/tmp/gpu-proof")
    workdir.mkdir(parents=True, exist_ok=True)
    summary: dict[str, object] = {"workloads": [], "sweep": []}

    agent_process = None
    if args.agent_cost:
        names = [n for n in args.workloads.split(",") if n]
        total = len(names) * (args.duration + 25)
        agent_process = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "agent_cli.py"),
                "agent",
                "--record",
                f"{total:.0f}s",
                "--interval",
                f"{args.interval}s",
                "--node-name",
                NODE,
                "--output",
                str(workdir / "agent-cli.om"),
            ],
            env={**os.environ, "GPU_PROOF_CPU": str(args.agent_core)},
        )
        time.sleep(5)  # past imports and NVML init: measure the steady state
        stat = proc_stat(agent_process.pid)
        agent_start = (stat[1] if stat else 0.0, time.monotonic())

    def save() -> None:
        """Write what exists so far, so a run cut short still returns its results."""
        (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
        with tarfile.open(args.out / "recordings.tar.gz", "w:gz") as tar:
            for path in sorted(workdir.glob("*.om")):
                tar.add(path, arcname=path.name)

    for name in [n for n in args.workloads.split(",") if n]:
        try:
            summary["workloads"].append(record_workload(SPECS[name], args, workdir))  # type: ignore[union-attr]
        except Exception as exc:
            log.exception("workload %s failed", name)
            summary["workloads"].append({"workload": name, "error": str(exc)})  # type: ignore[union-attr]
        save()

    if agent_process is not None:
        summary["agent_cli_cost"] = agent_cpu_cost(agent_process.pid, *agent_start)
        agent_process.send_signal(signal.SIGTERM)
        agent_process.wait(timeout=60)
        summary["agent_cli_exit"] = agent_process.returncode

    if args.sweep:
        save()
        throughput_sweep(args.sweep.split(","), args, workdir, summary["sweep"], save)  # type: ignore[arg-type]

    save()
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
