"""A real Kubernetes control plane on 127.0.0.1 with fake GPU nodes, through kwokctl's binary runtime.

kube-apiserver, kube-controller-manager, kube-scheduler and etcd are the real binaries; KWOK fakes
the kubelets, so Deployments roll out and pods reach Running without containers. The kubelet's
behaviour comes from the KWOK Stages in `stages/`: kwok's default node and pod stages, plus the
kubelet's answer to an in-place resize (`pod-resize.yaml`; see docs/test-cluster.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from gpu_rightsizer.testcluster.binaries import TestBinaries
from gpu_rightsizer.testcluster.nodes import NodeSpec, default_nodes
from gpu_rightsizer.testcluster.processes import free_ports, log_tail, process_running, stop_process

KUBE_VERSION = "v1.36.3"
#: Seconds between two progress lines while the control plane starts.
PROGRESS_EVERY = 15.0

#: The KWOK Stages the cluster runs (given in the kwokctl config, they replace kwok's defaults).
STAGES_DIR = Path(__file__).parent / "stages"


def stages() -> list[dict[str, Any]]:
    """Every Stage document in `stages/`, in file order."""
    documents: list[dict[str, Any]] = []
    for path in sorted(STAGES_DIR.glob("*.yaml")):
        documents.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return documents


class ClusterError(RuntimeError):
    """The local cluster could not be created or driven."""


def _progress(message: str) -> None:
    print(f"[cluster] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class ClusterPorts:
    """The 127.0.0.1 ports of one cluster's components, picked by the kernel (`pick`).

    kwokctl itself counts down from port 32766 and skips only the ports bound right now, so two
    clusters created at the same moment get the same ports and one of them dies on its binds.
    """

    etcd: int
    etcd_peer: int
    kube_apiserver: int
    kube_controller_manager: int
    kube_scheduler: int
    kwok_controller: int

    @classmethod
    def pick(cls, **fixed: int) -> ClusterPorts:
        """Distinct free ports for every component not given in `fixed`."""
        names = [spec.name for spec in fields(cls) if spec.name not in fixed]
        return cls(**fixed, **dict(zip(names, free_ports(len(names)), strict=True)))

    def options(self) -> dict[str, int]:
        """The kwokctl configuration options that pin these ports."""
        return {
            "etcdPort": self.etcd,
            "etcdPeerPort": self.etcd_peer,
            "kubeApiserverPort": self.kube_apiserver,
            "kubeControllerManagerPort": self.kube_controller_manager,
            "kubeSchedulerPort": self.kube_scheduler,
            "kwokControllerPort": self.kwok_controller,
        }


@dataclass
class LocalCluster:
    """One kwokctl cluster; `up()` creates it, `down()` deletes it and every process it started."""

    name: str
    workdir: Path
    bins: TestBinaries
    nodes: list[NodeSpec] = field(default_factory=default_nodes)
    ports: ClusterPorts = field(default_factory=ClusterPorts.pick)
    #: Components this object started again itself (`restart_apiserver`), reaped by `down()`.
    _restarted: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig of the cluster."""
        return self.workdir / "kubeconfig"

    @property
    def _kwok_home(self) -> Path:
        return self.workdir / "kwok"

    @property
    def _cluster_dir(self) -> Path:
        """kwokctl's folder of this cluster: pids/<component>.pid and logs/<component>.log."""
        return self._kwok_home / "clusters" / self.name

    def _component_pids(self) -> dict[str, int]:
        pids: dict[str, int] = {}
        for pid_file in sorted((self._cluster_dir / "pids").glob("*.pid")):
            try:
                pids[pid_file.stem] = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                continue  # being written or removed by kwokctl right now
        return pids

    def running_components(self) -> list[str]:
        """Components kwokctl started whose process still runs."""
        return [name for name, pid in self._component_pids().items() if process_running(pid)]

    def exited_components(self) -> list[str]:
        """Components kwokctl started whose process has exited (their pid file is still there)."""
        return [name for name, pid in self._component_pids().items() if not process_running(pid)]

    def component_log(self, component: str) -> str:
        """The tail of one component's log."""
        return log_tail(self._cluster_dir / "logs" / f"{component}.log")

    def check_running(self) -> None:
        """Raise ClusterError, with the log tails, if a component of the running cluster has exited."""
        exited = self.exited_components()
        if exited:
            raise ClusterError(self._describe_failure(f"{', '.join(exited)} exited", exited))

    def _describe_failure(self, what: str, components: Iterable[str], extra: str = "") -> str:
        parts = [f"cluster {self.name!r}: {what}"]
        parts += [f"--- {name} log, last lines ---\n{self.component_log(name)}" for name in components]
        if extra:
            parts.append(extra)
        return "\n".join(parts)

    def _env(self) -> dict[str, str]:
        return {**self.bins.env(), "KWOK_WORKDIR": str(self._kwok_home), "KUBECONFIG": str(self.kubeconfig)}

    def _config_file(self) -> Path:
        config = {
            "kind": "KwokctlConfiguration",
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "options": {
                "runtime": "binary",
                "bindAddress": "127.0.0.1",
                "kubeVersion": KUBE_VERSION,
                "kubeBinaryPrefix": str(self.bins.bin_dir),
                "kubeApiserverBinary": str(self.bins.path("kube-apiserver")),
                "kubeControllerManagerBinary": str(self.bins.path("kube-controller-manager")),
                "kubeSchedulerBinary": str(self.bins.path("kube-scheduler")),
                "kubectlBinary": str(self.bins.path("kubectl")),
                "etcdBinary": str(self.bins.path("etcd")),
                "kwokControllerBinary": str(self.bins.path("kwok")),
                "kubeAuthorization": True,
                "quietPull": True,
                "disableQPSLimits": True,
                "cacheDir": str(self.workdir / "kwok-cache"),
                **self.ports.options(),
            },
            # One control-plane member needs no leader election; with it, the controller manager and
            # the scheduler exit when the API server is away past their renew deadline (10 s), and
            # kwokctl, unlike a kubelet, does not start them again (`restart_apiserver`).
            "componentsPatches": [
                {"name": name, "extraArgs": [{"key": "leader-elect", "value": "false"}]}
                for name in ("kube-controller-manager", "kube-scheduler")
            ],
        }
        path = self.workdir / "kwokctl.yaml"
        path.write_text(yaml.safe_dump_all([config, *stages()]))
        return path

    def kwokctl(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run kwokctl for this cluster."""
        cmd = [str(self.bins.path("kwokctl")), "--name", self.name, *args]
        try:
            return subprocess.run(
                cmd, env=self._env(), capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise ClusterError(f"kwokctl {' '.join(args)} did not finish within {timeout:.0f} s") from None

    def kubectl(
        self, *args: str, input_text: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against this cluster; raise with its stderr when `check` and it fails."""
        cmd = [str(self.bins.path("kubectl")), "--kubeconfig", str(self.kubeconfig), *args]
        try:
            result = subprocess.run(
                cmd,
                input=input_text,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                env=self._env(),
            )
        except subprocess.TimeoutExpired:
            raise ClusterError(
                f"kubectl {' '.join(args)} got no answer within {timeout:.0f} s from the API server "
                f"on 127.0.0.1:{self.ports.kube_apiserver}"
            ) from None
        if check and result.returncode != 0:
            raise ClusterError(
                f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}"
            )
        return result

    def apply(self, objects: Iterable[dict[str, Any]], *, server_side: bool = True) -> None:
        """Apply manifests (as dicts) with the real kubectl."""
        text = yaml.safe_dump_all(list(objects))
        args = ["apply", "-f", "-"] + (["--server-side", "--force-conflicts"] if server_side else [])
        self.kubectl(*args, input_text=text)

    def up(self, *, timeout: float = 300) -> LocalCluster:
        """Create the cluster, write its kubeconfig and register the fake nodes.

        A component that exits while the control plane starts fails the call at once, with its log
        tail; so does a start that takes longer than `timeout`. Either way nothing is left running.
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        _progress(
            f"creating cluster {self.name!r} (kube {KUBE_VERSION}, binary runtime, "
            f"API server on 127.0.0.1:{self.ports.kube_apiserver}) ..."
        )
        config = self._config_file()
        output = self.workdir / "kwokctl-create.log"
        with output.open("wb") as handle:
            creating = subprocess.Popen(
                [str(self.bins.path("kwokctl")), "--config", str(config), "--name", self.name,
                 "create", "cluster", "--wait", f"{int(timeout)}s"],
                env=self._env(), stdout=handle, stderr=subprocess.STDOUT,
            )  # fmt: skip
            try:
                failure = self._watch_creation(creating, start=start, timeout=timeout, output=output)
            finally:
                stop_process(creating)
        if failure:
            self.down()
            raise ClusterError(failure)
        kubeconfig = self.kwokctl("get", "kubeconfig", timeout=30)
        if kubeconfig.returncode != 0:
            raise ClusterError(f"kwokctl get kubeconfig failed: {kubeconfig.stderr}")
        self.kubeconfig.write_text(kubeconfig.stdout)
        _progress(f"control plane ready in {time.monotonic() - start:.0f} s; adding {len(self.nodes)} nodes")
        self.apply((node.manifest() for node in self.nodes), server_side=False)
        self.wait_nodes_ready(timeout=120)
        _progress(
            f"cluster {self.name!r} ready in {time.monotonic() - start:.0f} s (kubeconfig {self.kubeconfig})"
        )
        return self

    def _watch_creation(
        self, creating: subprocess.Popen[bytes], *, start: float, timeout: float, output: Path
    ) -> str:
        """Follow `kwokctl create cluster` until it ends; the failure's description, or "" on success."""
        last_note = start
        while creating.poll() is None:
            exited = self.exited_components()
            if exited:
                return self._describe_failure(
                    f"{', '.join(exited)} exited while the control plane started", exited
                )
            now = time.monotonic()
            if now - start > timeout:
                return self._describe_failure(
                    f"the control plane was not ready after {timeout:.0f} s",
                    self.running_components(),
                    f"--- kwokctl create cluster ---\n{log_tail(output)}",
                )
            if now - last_note >= PROGRESS_EVERY:
                running = ", ".join(self.running_components()) or "none yet"
                _progress(f"still starting after {now - start:.0f} s; running: {running}")
                last_note = now
            time.sleep(0.5)
        if creating.returncode != 0:
            return self._describe_failure(
                f"kwokctl create cluster failed with exit code {creating.returncode}",
                [*self.exited_components(), *self.running_components()] or ["kube-apiserver"],
                f"--- kwokctl create cluster ---\n{log_tail(output)}",
            )
        return ""

    def wait_nodes_ready(self, *, timeout: float) -> None:
        """Wait until every fake node reports Ready (KWOK's node stages)."""
        deadline = time.monotonic() + timeout
        expected = {node.name for node in self.nodes}
        while True:
            listed = json.loads(self.kubectl("get", "nodes", "-o", "json").stdout)
            ready = {
                item["metadata"]["name"]
                for item in listed["items"]
                if any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in item["status"].get("conditions", [])
                )
            }
            if expected <= ready:
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"nodes not Ready after {timeout:.0f} s: {sorted(expected - ready)}")
            time.sleep(1)

    def restart_apiserver(
        self, *, down_seconds: float = 0.0, grace_seconds: float = 10.0, timeout: float = 120
    ) -> float:
        """Stop kube-apiserver and start it again with the same command line: the same etcd, port,
        certificates and flags, as a control-plane upgrade or a crash of the API server does. The
        other components stay up and reconnect. It gets SIGTERM, and SIGKILL after `grace_seconds`
        (its graceful shutdown waits on open watches for longer). Returns the seconds the API server
        was unreachable.

        kwokctl has no per-component restart, so the process is started again from its own
        /proc entries, its log appended to, and its pid file pointed at the new process.
        """
        pid_file = self._cluster_dir / "pids" / "kube-apiserver.pid"
        pid = int(pid_file.read_text().strip())
        proc = Path(f"/proc/{pid}")
        argv = [part.decode() for part in (proc / "cmdline").read_bytes().split(b"\0") if part]
        environ = dict(
            entry.decode().partition("=")[::2]
            for entry in (proc / "environ").read_bytes().split(b"\0")
            if entry
        )
        cwd = os.readlink(proc / "cwd")
        stopped = time.monotonic()
        os.kill(pid, signal.SIGTERM)
        self._wait_exit(pid, timeout=grace_seconds)
        _progress(
            f"kube-apiserver (pid {pid}) stopped in {time.monotonic() - stopped:.1f} s; "
            f"starting it again in {down_seconds:.0f} s"
        )
        time.sleep(down_seconds)
        with (self._cluster_dir / "logs" / "kube-apiserver.log").open("ab") as log:
            started = subprocess.Popen(
                argv, cwd=cwd, env=environ, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._restarted.append(started)
        pid_file.write_text(str(started.pid))
        deadline = time.monotonic() + timeout
        while True:
            if started.poll() is not None:
                raise ClusterError(
                    self._describe_failure("kube-apiserver exited after its restart", ["kube-apiserver"])
                )
            try:
                if self.kubectl("get", "--raw", "/readyz", check=False, timeout=10).returncode == 0:
                    break
            except ClusterError:  # no answer yet: still starting
                pass
            if time.monotonic() > deadline:
                raise ClusterError(f"kube-apiserver not ready {timeout:.0f} s after its restart")
            time.sleep(0.5)
        down = time.monotonic() - stopped
        _progress(f"kube-apiserver restarted (pid {started.pid}); unreachable for {down:.1f} s")
        return down

    @staticmethod
    def _wait_exit(pid: int, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while process_running(pid):
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                deadline += timeout
            time.sleep(0.2)

    def down(self) -> None:
        """Delete the cluster and stop its processes; safe to call twice."""
        result = self.kwokctl("delete", "cluster", timeout=120)
        for process in self._restarted:  # kwokctl stopped them by their pid file; reap them
            stop_process(process)
        if result.returncode == 0:
            _progress(f"cluster {self.name!r} deleted")
        elif "not exist" not in (result.stderr + result.stdout):
            _progress(f"kwokctl delete cluster: {result.stderr.strip()}")

    def __enter__(self) -> LocalCluster:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()
