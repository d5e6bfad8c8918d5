"""A real Kubernetes control plane on 127.0.0.1 with fake GPU nodes, through kwokctl's binary runtime.

kube-apiserver, kube-controller-manager, kube-scheduler and etcd are the real binaries; KWOK fakes
the kubelets, so Deployments roll out and pods reach Running without containers. The kubelet's
behaviour comes from the KWOK Stages in `stages/`: kwok's default node and pod stages, plus the
kubelet's answer to an in-place resize (`pod-resize.yaml`; see docs/test-cluster.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpu_rightsizer.testcluster.binaries import TestBinaries
from gpu_rightsizer.testcluster.nodes import NodeSpec, default_nodes

KUBE_VERSION = "v1.36.3"

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


@dataclass
class LocalCluster:
    """One kwokctl cluster; `up()` creates it, `down()` deletes it and every process it started."""

    name: str
    workdir: Path
    bins: TestBinaries
    nodes: list[NodeSpec] = field(default_factory=default_nodes)

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig of the cluster."""
        return self.workdir / "kubeconfig"

    @property
    def _kwok_home(self) -> Path:
        return self.workdir / "kwok"

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
            },
        }
        path = self.workdir / "kwokctl.yaml"
        path.write_text(yaml.safe_dump_all([config, *stages()]))
        return path

    def kwokctl(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run kwokctl for this cluster."""
        cmd = [str(self.bins.path("kwokctl")), "--name", self.name, *args]
        return subprocess.run(
            cmd, env=self._env(), capture_output=True, text=True, timeout=timeout, check=False
        )

    def kubectl(
        self, *args: str, input_text: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against this cluster; raise with its stderr when `check` and it fails."""
        cmd = [str(self.bins.path("kubectl")), "--kubeconfig", str(self.kubeconfig), *args]
        result = subprocess.run(
            cmd,
            input=input_text,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=self._env(),
        )
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
        """Create the cluster, write its kubeconfig and register the fake nodes."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        _progress(f"creating cluster {self.name!r} (kube {KUBE_VERSION}, binary runtime, 127.0.0.1) ...")
        config = self._config_file()
        result = subprocess.run(
            [str(self.bins.path("kwokctl")), "--config", str(config), "--name", self.name,
             "create", "cluster", "--wait", f"{int(timeout)}s"],
            env=self._env(), capture_output=True, text=True, timeout=timeout + 60, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            logs = self.kwokctl("logs", "kube-apiserver", timeout=30).stdout[-3000:]
            self.down()
            raise ClusterError(
                f"kwokctl create cluster failed ({result.returncode}):\n{result.stderr[-4000:]}\n"
                f"kube-apiserver log tail:\n{logs}"
            )
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

    def down(self) -> None:
        """Delete the cluster and stop its processes; safe to call twice."""
        result = self.kwokctl("delete", "cluster", timeout=120)
        if result.returncode == 0:
            _progress(f"cluster {self.name!r} deleted")
        elif "not exist" not in (result.stderr + result.stdout):
            _progress(f"kwokctl delete cluster: {result.stderr.strip()}")

    def __enter__(self) -> LocalCluster:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()
