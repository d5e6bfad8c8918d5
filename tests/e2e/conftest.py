"""Session fixtures for end-to-end tests: one real local cluster and helpers, always torn down.

The cluster is kube-apiserver, kube-controller-manager, kube-scheduler and etcd (real binaries,
built and cached by hack/testbins/build.sh) with KWOK fake GPU nodes, on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_rightsizer.testcluster.binaries import BinariesUnavailableError, TestBinaries, ensure_binaries
from gpu_rightsizer.testcluster.kwok import LocalCluster
from gpu_rightsizer.testcluster.processes import stop_process

REPO_ROOT = Path(__file__).resolve().parents[2]


def _interrupt_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """A terminated test run tears its cluster and servers down like Ctrl-C does (fixtures' finally)."""
    signal.signal(signal.SIGTERM, _interrupt_on_sigterm)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under tests/e2e is an e2e test."""
    for item in items:
        if "tests/e2e/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def testbins() -> TestBinaries:
    """The pinned cluster binaries (built on first use; cached outside the repository)."""
    try:
        return ensure_binaries(build=True)
    except BinariesUnavailableError as error:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"local cluster binaries unavailable: {error}")


def unique_name(prefix: str) -> str:
    """`prefix-` and six random hex digits: a name no other test or run on this machine takes."""
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@dataclass
class Kube:
    """What a test needs of the cluster: kubeconfig, kubectl, a Python API client."""

    cluster: LocalCluster
    #: Namespaces made through `create_namespace`, in order; the per-test cleanup deletes the ones a
    #: test made, so one session's cluster keeps GPUs free for the later tests.
    created_namespaces: list[str] = field(default_factory=list)

    @property
    def kubeconfig(self) -> Path:
        return self.cluster.kubeconfig

    def kubectl(
        self, *args: str, input_text: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self.cluster.kubectl(*args, input_text=input_text, check=check)

    def apply(self, *objects: dict[str, Any]) -> None:
        self.cluster.apply(objects)

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    @property
    def api(self) -> Any:
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))  # type: ignore[no-untyped-call]

    def wait_for(self, predicate: Callable[[], Any], *, timeout: float = 60, what: str = "condition") -> Any:
        """Poll until `predicate()` is truthy; fail the test with `what` otherwise, and at once, with
        the component's log, when a part of the cluster has exited."""
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            self.cluster.check_running()
            try:
                value = predicate()
                if value:
                    return value
            except Exception as error:  # keep polling through transient API errors
                last_error = error
            time.sleep(0.5)
        pytest.fail(
            f"timed out after {timeout:.0f} s waiting for {what}"
            + (f" (last error: {last_error})" if last_error else "")
        )

    def create_namespace(self, prefix: str, labels: dict[str, str] | None = None, *, name: str = "") -> str:
        """A namespace `unique_name(prefix)` (or exactly `name`), deleted after the test."""
        name = name or unique_name(prefix)
        self.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}
        )
        self.created_namespaces.append(name)
        return name


@pytest.fixture(scope="session")
def kube(testbins: TestBinaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    """One real cluster for the whole session, with the project's CRDs installed."""
    workdir = tmp_path_factory.mktemp("cluster")
    cluster = LocalCluster(name=unique_name("gpurs"), workdir=workdir, bins=testbins)
    try:
        cluster.up()
        crds = sorted((REPO_ROOT / "crds").glob("*.yaml"))
        if crds:
            objects = [doc for path in crds for doc in yaml.safe_load_all(path.read_text()) if doc]
            cluster.apply(objects)
            for doc in objects:
                cluster.kubectl(
                    "wait", "--for=condition=Established", "--timeout=60s", f"crd/{doc['metadata']['name']}"
                )
        yield Kube(cluster)
    finally:
        cluster.down()


@pytest.fixture(autouse=True)
def _delete_the_tests_namespaces(request: pytest.FixtureRequest) -> Iterator[None]:
    """Delete the namespaces a test made once it ends (after its operators stopped): the session shares
    one cluster, and the workloads of earlier tests would otherwise hold its GPUs, leaving later tests'
    pods Pending. Namespaces made by module fixtures predate this fixture and stay."""
    if "kube" not in request.fixturenames:
        yield
        return
    kube: Kube = request.getfixturevalue("kube")
    before = len(kube.created_namespaces)
    yield
    made = kube.created_namespaces[before:]
    if made:
        kube.kubectl("delete", "namespace", *made, "--wait=false", "--ignore-not-found", check=False)


def _wait_http(url: str, *, timeout: float, process: subprocess.Popen[bytes] | None = None) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"process exited with {process.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except Exception:
            time.sleep(0.3)
    raise RuntimeError(f"{url} did not answer within {timeout:.0f} s")


@dataclass
class Background:
    """A background process started by a fixture, with its log file."""

    process: subprocess.Popen[bytes]
    log: Path
    url: str = ""
    metrics_url: str = ""

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        stop_process(self.process)


def start_background(args: list[str], log: Path, env: dict[str, str] | None = None) -> Background:
    """Start a process with stdout+stderr into `log`."""
    handle = log.open("wb")
    process = subprocess.Popen(
        args, stdout=handle, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
    )
    return Background(process=process, log=log)


def start_simulator(kube: Kube, workdir: Path) -> tuple[Background, int]:
    """The live workload-metrics simulator following the cluster's pods, and its port."""
    from gpu_rightsizer.testcluster.prometheus import free_port

    port = free_port()
    simulator = start_background(
        [sys.executable, "-m", "gpu_rightsizer.sim.live", "--kubeconfig", str(kube.kubeconfig),
         "--host", "127.0.0.1", "--port", str(port)],
        workdir / "simulator.log",
    )  # fmt: skip
    return simulator, port


@pytest.fixture(scope="session")
def live_metrics(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The live workload-metrics simulator following the cluster's pods, scraped by a real Prometheus.

    Yields the Prometheus URL.
    """
    from gpu_rightsizer.testcluster.prometheus import PrometheusServer

    workdir = tmp_path_factory.mktemp("live-metrics")
    simulator, port = start_simulator(kube, workdir)
    prometheus = PrometheusServer(
        workdir / "prometheus", scrape_targets=[f"127.0.0.1:{port}"], scrape_interval="2s"
    )
    try:
        try:
            _wait_http(f"http://127.0.0.1:{port}/metrics", timeout=60, process=simulator.process)
        except RuntimeError as error:
            pytest.fail(f"{error}; simulator output:\n{simulator.output()[-4000:]}")
        prometheus.workdir.mkdir(parents=True, exist_ok=True)
        prometheus.start()
        yield prometheus.url
    finally:
        prometheus.stop()
        simulator.stop()


@pytest.fixture
def run_operator(kube: Kube, tmp_path: Path) -> Iterator[Callable[..., Background]]:
    """Start `gpu-rightsizer run` against the cluster (as users run it); stopped after the test."""
    from gpu_rightsizer.testcluster.prometheus import free_port

    started: list[Background] = []

    def start(*extra: str, name: str = "operator", env: dict[str, str] | None = None) -> Background:
        health, metrics_port = free_port(), free_port()
        background = start_background(
            [sys.executable, "-m", "gpu_rightsizer", "run", "--metrics-address", "127.0.0.1",
             "--metrics-port", str(metrics_port), "--liveness", f"http://127.0.0.1:{health}/healthz", *extra],
            tmp_path / f"{name}.log",
            env={"KUBECONFIG": str(kube.kubeconfig), **(env or {})},
        )  # fmt: skip
        background.url = f"http://127.0.0.1:{health}/healthz"
        background.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        started.append(background)
        try:
            _wait_http(background.url, timeout=60, process=background.process)
        except RuntimeError as error:
            pytest.fail(f"{error}; operator output:\n{background.output()[-4000:]}")
        return background

    yield start
    for background in started:
        background.stop()
