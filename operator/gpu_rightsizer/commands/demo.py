"""`gpu-rightsizer demo`: the whole product on this machine in a few minutes.

A local cluster (real control plane, fake GPU nodes), simulated GPU workloads (one per common
diagnosis) in namespace `demo`, their live metrics in a real Prometheus, the operator (recommender
and actuator) against it; prints `kubectl get gpurecommendations`, then puts namespace `demo-apply`
under an Apply policy and shows its CPU-starved trainer being patched and verified (its container
restarts on a CPU resize, so new pods roll out), and its CPU-starved training Job given more CPU in
place (pods/resize, no pod restarted), verified on the same pod, with the advice for its next run
(in the reason).
Everything stops on exit or Ctrl-C; `gpu-rightsizer demo --down` cleans up left-over clusters.

Each run has its own cluster name, ports and state folder (`<cache>/gpu-rightsizer/clusters/
gpu-rightsizer-demo-<id>`, with the owner's pid in `owner.pid`), so runs beside each other, or beside the
test suite's cluster, never touch each other; only clusters whose owner has exited are cleaned up.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: Name prefix of the demo's clusters; each run appends its own id.
DEMO_CLUSTER = "gpu-rightsizer-demo"
#: File in a demo's state folder that holds the pid of the process that owns the cluster.
OWNER_FILE = "owner.pid"
SCENARIO_ANNOTATION = "sim.gpurightsizer.io/scenario"

#: (name, scenario, GPU product, GPU resource, cpu, replicas): one workload per common diagnosis.
DEMO_WORKLOADS: tuple[tuple[str, str, str, str, str, int], ...] = (
    ("trainer-cpu-starved", "input-cpu-bound", "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu", "1", 1),
    ("trainer-io-stalled", "input-io-bound", "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu", "16", 1),
    ("notebook-idle", "idle", "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu", "2", 1),
    ("chat-small-model", "oversized", "NVIDIA-H200", "nvidia.com/gpu", "4", 1),
    ("finetune-fp32", "no-tensor-cores", "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu", "16", 1),
    ("llm-memory-full", "memory-capacity-bound", "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu", "16", 1),
    ("trainer-throttled", "throttled", "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu", "16", 1),
    ("trainer-healthy", "healthy", "NVIDIA-H200", "nvidia.com/gpu", "16", 1),
)


def _say(message: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `gpu-rightsizer demo`."""
    parser.add_argument(
        "--down", action="store_true", help="delete left-over demo clusters (whose run has exited) and exit"
    )
    parser.add_argument("--window", default="2m", help="observation window of the operator (default 2m)")
    parser.add_argument("--interval", default="15s", help="analysis interval (default 15s)")
    parser.add_argument("--no-apply", action="store_true", help="skip the Apply-policy part")
    parser.add_argument(
        "--keep", action="store_true", help="leave everything running until Ctrl-C at the end"
    )
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="give up after this many seconds (default 600)"
    )


def deployment(
    name: str, namespace: str, scenario: str, product: str, resource: str, cpu: str, replicas: int
) -> dict[str, Any]:
    """A GPU Deployment whose pods the live simulator gives the named behaviour."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": {SCENARIO_ANNOTATION: scenario}},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.product": product},
                    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{
                        "name": "main", "image": "registry.example/gpu-app:1.0",
                        "resources": {"requests": {"cpu": cpu, "memory": "16Gi", resource: "1"},
                                      "limits": {"cpu": cpu, "memory": "16Gi", resource: "1"}},
                    }],
                },
            },
        },
    }  # fmt: skip


def restarting_on_resize(manifest: dict[str, Any]) -> dict[str, Any]:
    """The Deployment with containers that restart when their CPU is resized (`resizePolicy`
    RestartContainer): its CPU change rolls out new pods through the pod template, under the
    rollout gates, instead of resizing the running pods in place."""
    for container in manifest["spec"]["template"]["spec"]["containers"]:
        container["resizePolicy"] = [{"resourceName": "cpu", "restartPolicy": "RestartContainer"}]
    return manifest


def training_job(name: str, namespace: str) -> dict[str, Any]:
    """A long-running CPU-starved training Job (its pod template is immutable: resized in place)."""
    template = deployment(
        name, namespace, "input-cpu-bound", "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu", "1", 1
    )
    pod = template["spec"]["template"]
    pod["metadata"]["annotations"]["sim.gpurightsizer.io/runs"] = "Forever"
    pod["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace},
            "spec": {"backoffLimit": 0, "template": pod}}  # fmt: skip


def apply_policy(namespace: str) -> dict[str, Any]:
    """An Apply policy for one namespace: CPU and memory only, fast verification for the demo."""
    return {
        "apiVersion": "gpurightsizer.io/v1alpha1",
        "kind": "GPURightsizingPolicy",
        "metadata": {"name": "demo-apply"},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "mode": "Apply",
            "actions": ["cpu", "memory"],
            "observation": {"minSamples": 10},  # no window: the operator's --window applies
            # the demo's trainer has one replica: restarting it is accepted here, never by default
            "safety": {"cooldown": "1h", "verifyFor": "45s", "allowSingleReplica": True},
        },
    }


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _wait(
    predicate: Callable[[], Any],
    *,
    timeout: float,
    what: str,
    every: float = 3.0,
    alive: Callable[[], None] = lambda: None,
) -> Any:
    """Poll `predicate` until it is truthy.

    `alive` raises when a part of the demo has exited, which ends the wait at once with that error. A
    kubectl error (ClusterError: the object does not exist yet, the API server is briefly busy) is
    waited through but shown in the progress lines and in the timeout's message; any other error is
    a real one and is raised.
    """
    from gpu_rightsizer.testcluster.kwok import ClusterError

    deadline = time.monotonic() + timeout
    started = time.monotonic()
    last_note = 0.0
    last_error = ""
    while time.monotonic() < deadline:
        alive()
        try:
            value = predicate()
        except ClusterError as error:
            last_error = str(error).strip().splitlines()[-1]
        else:
            if value:
                return value
        if time.monotonic() - last_note > 15:
            latest = f"; latest error: {last_error}" if last_error else ""
            _say(f"waiting for {what} ({time.monotonic() - started:.0f} s{latest})")
            last_note = time.monotonic()
        time.sleep(every)
    latest = f" (latest error: {last_error})" if last_error else ""
    raise TimeoutError(f"gave up waiting for {what} after {timeout:.0f} s{latest}")


@contextlib.contextmanager
def managed_process(
    args: list[str], log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A child process with its output in `log`, terminated (then killed) when the block ends."""
    from gpu_rightsizer.testcluster.processes import stop_process

    handle = log.open("wb")
    process = subprocess.Popen(
        args, stdout=handle, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
    )
    try:
        yield process
    finally:
        stop_process(process)
        handle.close()


def _owner(workdir: Path) -> int | None:
    """The pid that owns a demo's state folder, or None when the folder names none."""
    try:
        return int((workdir / OWNER_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def demo_folders() -> list[Path]:
    """State folders of every demo cluster of this user (this cache root)."""
    from gpu_rightsizer.commands.cluster import state_dir

    root = state_dir(DEMO_CLUSTER).parent
    return sorted(root.glob(f"{DEMO_CLUSTER}*")) if root.is_dir() else []


def clean_left_overs(bins: Any) -> list[str]:
    """Delete the demo clusters whose owning run has exited; leave running ones alone.

    A folder without an owner is one being created right now, or the single fixed-name folder of
    earlier versions, which is removed only once its cluster has stopped. Returns the names of the
    clusters still running.
    """
    from gpu_rightsizer.testcluster.kwok import LocalCluster
    from gpu_rightsizer.testcluster.processes import process_running

    running = []
    for folder in demo_folders():
        owner = _owner(folder)
        cluster = LocalCluster(name=folder.name, workdir=folder, bins=bins)
        if owner is not None and process_running(owner):
            running.append(f"{folder.name} (pid {owner})")
            continue
        if owner is None and folder.name != DEMO_CLUSTER:
            continue
        if owner is None and cluster.running_components():
            running.append(f"{folder.name} (an earlier version's demo)")
            continue
        cluster.down()
        shutil.rmtree(folder, ignore_errors=True)
        _say(f"removed left-over demo cluster {folder.name}")
    return running


def run(args: argparse.Namespace) -> int:
    """Bring everything up, show the recommendations and one verified change, tear down."""
    from gpu_rightsizer.commands.cluster import crd_objects, state_dir
    from gpu_rightsizer.testcluster.binaries import BinariesUnavailableError, ensure_binaries
    from gpu_rightsizer.testcluster.kwok import ClusterError, LocalCluster
    from gpu_rightsizer.testcluster.processes import exited_child
    from gpu_rightsizer.testcluster.prometheus import PrometheusError, PrometheusServer, free_port

    try:
        bins = ensure_binaries(build=not args.down)
    except BinariesUnavailableError as error:
        print(f"gpu-rightsizer demo: {error}", file=sys.stderr)
        return 1
    running = clean_left_overs(bins)
    if args.down:
        for name in running:
            _say(f"left alone, still running: {name}; stop that run with Ctrl-C")
        _say("no left-over demo cluster" if not running else f"{len(running)} demo(s) still running")
        return 0
    cluster_name = f"{DEMO_CLUSTER}-{uuid.uuid4().hex[:6]}"
    workdir = state_dir(cluster_name)
    workdir.mkdir(parents=True)
    (workdir / OWNER_FILE).write_text(str(os.getpid()))
    cluster = LocalCluster(name=cluster_name, workdir=workdir, bins=bins)
    logs = workdir / "logs"
    logs.mkdir()
    children: list[tuple[str, subprocess.Popen[bytes], Path]] = []
    servers: list[PrometheusServer] = []

    def alive() -> None:
        """Raise as soon as any part of the demo has exited, with the end of its log."""
        cluster.check_running()
        for server in servers:
            server.check_running()
        for label, process, log in children:
            if exited := exited_child(label, process, log):
                raise RuntimeError(exited)

    deadline = time.monotonic() + args.timeout
    signal.signal(signal.SIGTERM, _interrupt)  # `kill` tears down like Ctrl-C does
    failed = False
    try:
        _say(f"step 1/5: local cluster {cluster_name} with fake GPU nodes (H100, H200, A100, MIG H200)")
        cluster.up()
        cluster.apply(crd_objects())
        for crd in ("gpurecommendations.gpurightsizer.io", "gpurightsizingpolicies.gpurightsizer.io"):
            cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd}")
        _say("step 2/5: simulated GPU workloads in namespaces demo and demo-apply")
        cluster.apply(
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                for ns in ("demo", "demo-apply")
            ]
        )
        workloads = [deployment(name, "demo", *rest) for name, *rest in DEMO_WORKLOADS]  # type: ignore[arg-type]
        workloads.append(
            restarting_on_resize(
                deployment(
                    "trainer",
                    "demo-apply",
                    "input-cpu-bound",
                    "NVIDIA-H100-80GB-HBM3",
                    "nvidia.com/gpu",
                    "1",
                    1,
                )
            )
        )
        workloads.append(training_job("train-job", "demo-apply"))
        import yaml

        cluster.kubectl("create", "-f", "-", input_text=yaml.safe_dump_all(workloads))
        port = free_port()
        _say("step 3/5: live metrics simulator and Prometheus (scrape every 5 s)")
        with managed_process(
            [sys.executable, "-m", "gpu_rightsizer.sim.live", "--kubeconfig", str(cluster.kubeconfig),
             "--host", "127.0.0.1", "--port", str(port), "--exit-after", str(int(args.timeout) + 120)],
            logs / "simulator.log",
        ) as simulator, PrometheusServer(workdir / "prometheus", scrape_targets=[f"127.0.0.1:{port}"], scrape_interval="5s") as prometheus:  # fmt: skip
            children.append(("metrics simulator", simulator, logs / "simulator.log"))
            servers.append(prometheus)
            _say(f"Prometheus at {prometheus.url}; logs in {logs}")
            _say(
                f"step 4/5: the operator (recommender + actuator), window {args.window}, interval {args.interval}"
            )
            with managed_process(
                [sys.executable, "-m", "gpu_rightsizer", "run", "--role", "all", "--prometheus-url", prometheus.url,
                 "--window", args.window, "--interval", args.interval, "--metrics-address", "127.0.0.1",
                 "--metrics-port", str(free_port()), "--liveness", f"http://127.0.0.1:{free_port()}/healthz"],
                logs / "operator.log", env={"KUBECONFIG": str(cluster.kubeconfig)},
            ) as operator:  # fmt: skip
                children.append(("operator", operator, logs / "operator.log"))
                _show_recommendations(cluster, alive, deadline, args.window, args.interval)
                if not args.no_apply:
                    _show_apply(cluster, alive, deadline, args.window)
                if args.keep:
                    _say(f"running; KUBECONFIG={cluster.kubeconfig}; Ctrl-C to stop")
                    while True:
                        alive()
                        time.sleep(2)
    except KeyboardInterrupt:
        _say("interrupted")
    except (ClusterError, PrometheusError, TimeoutError, RuntimeError) as error:
        print(f"gpu-rightsizer demo: {error}", file=sys.stderr)
        failed = True
        return 1
    finally:
        _say("tearing down")
        cluster.down()
        if failed:
            _say(f"logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


def _recommendations(cluster: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(
        cluster.kubectl("get", "gpurecommendations", "-A", "-o", "json").stdout
    )["items"]
    return items


def _diagnosed(item: dict[str, Any]) -> bool:
    diagnosis = (item.get("status") or {}).get("diagnosis") or {}
    return bool(diagnosis) and diagnosis.get("primary") != "InsufficientData"


def _show_recommendations(
    cluster: Any, alive: Callable[[], None], deadline: float, window: str, interval: str
) -> None:
    from gpu_rightsizer.config import parse_duration

    expected = len(DEMO_WORKLOADS) + 1

    def diagnosed() -> bool:
        return sum(_diagnosed(item) for item in _recommendations(cluster)) >= expected

    # A diagnosis needs a full window of metrics: wait for it (and a few cycles), not just the first status.
    patience = parse_duration(window) + 4 * parse_duration(interval) + 60
    try:
        _wait(
            diagnosed,
            timeout=min(patience, max(30.0, deadline - time.monotonic())),
            what="a full window of metrics",
            alive=alive,
        )
    except TimeoutError as error:
        _say(f"{error}; showing what is known (InsufficientData means the window is not full yet)")
    _say("step 5/5: recommendations")
    print(cluster.kubectl("get", "gpurecommendations", "-A").stdout, flush=True)
    print(cluster.kubectl("get", "gpurecommendations", "-A", "-o", "wide").stdout, flush=True)


def _show_apply(cluster: Any, alive: Callable[[], None], deadline: float, window: str) -> None:
    cluster.apply([apply_policy("demo-apply")])
    _say("Apply policy on namespace demo-apply: the CPU-starved trainer gets more CPU, then is verified")

    def state() -> dict[str, Any]:
        rec = json.loads(
            cluster.kubectl(
                "get", "gpurecommendation", "-n", "demo-apply", "deployment-trainer", "-o", "json"
            ).stdout
        )
        apply: dict[str, Any] = (rec.get("status") or {}).get("apply") or {}
        return apply

    seen: set[str] = set()

    def settled() -> dict[str, Any] | None:
        current = state()
        label = f"{current.get('state')}: {current.get('reason')}"
        if label not in seen:
            seen.add(label)
            _say(label)
        return current if current.get("state") in ("Verified", "RolledBack") else None

    _wait(
        settled,
        timeout=max(60.0, deadline - time.monotonic()),
        what="the trainer's change to be verified",
        every=2.0,
        alive=alive,
    )
    limits = json.loads(
        cluster.kubectl("get", "deployment", "-n", "demo-apply", "trainer", "-o", "json").stdout
    )
    cpu = limits["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"]
    _say(f"trainer CPU limit is now {cpu}; waiting for a full window of the new pods to re-diagnose")
    _show_job_resize(cluster, deadline)
    from gpu_rightsizer.config import parse_duration

    def rediagnosed() -> bool:
        rec = json.loads(
            cluster.kubectl(
                "get", "gpurecommendation", "-n", "demo-apply", "deployment-trainer", "-o", "json"
            ).stdout
        )
        return _diagnosed(rec)

    try:
        _wait(
            rediagnosed,
            timeout=min(parse_duration(window) + 90, max(30.0, deadline - time.monotonic())),
            what="the new diagnosis",
            alive=alive,
        )
    except TimeoutError as error:
        _say(str(error))
    print(cluster.kubectl("get", "gpurecommendations", "-n", "demo-apply", "-o", "wide").stdout, flush=True)


def _show_job_resize(cluster: Any, deadline: float) -> None:
    """The training Job's change: its running pod resized in place, the manifest advice for its next run."""

    def settled() -> dict[str, Any] | None:
        rec = json.loads(
            cluster.kubectl(
                "get", "gpurecommendation", "-n", "demo-apply", "job-train-job", "-o", "json"
            ).stdout
        )
        apply: dict[str, Any] = (rec.get("status") or {}).get("apply") or {}
        return apply if apply.get("state") in ("Verified", "RolledBack", "Blocked") else None

    try:
        apply = _wait(
            settled, timeout=max(30.0, deadline - time.monotonic()), what="the Job's in-place change"
        )
    except TimeoutError as error:
        _say(str(error))
        return
    pods = json.loads(
        cluster.kubectl("get", "pods", "-n", "demo-apply", "-l", "job-name=train-job", "-o", "json").stdout
    )
    for pod in pods["items"]:
        asked = pod["spec"]["containers"][0]["resources"]["limits"]["cpu"]
        running = ((pod["status"].get("containerStatuses") or [{}])[0].get("resources") or {}).get(
            "limits", {}
        )
        _say(
            f"Job pod {pod['metadata']['name']} (not restarted): cpu {asked}, running with {running.get('cpu')}"
        )
    _say(f"Job train-job: {apply.get('state')}: {apply.get('reason')}")
