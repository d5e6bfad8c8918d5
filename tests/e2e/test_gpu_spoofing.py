"""A tenant's scrape target serving copies of another pod's GPU series does not replace that pod's figures.

A real Prometheus scrapes the live simulator as kube-prometheus-stack scrapes the GPU Operator's
dcgm-exporter (`testcluster.prometheus`: target labels namespace=gpu-operator,
service=nvidia-dcgm-exporter, honor_labels false), and a tenant's own target (namespace `tenant`,
honor_labels false). The tenant serves the victim's DCGM series with the victim's `exported_*` labels,
GPU UUID and hostname, plus `vgpu="0"`, at 2 % busy and 1.5 GiB of memory: the attack of review H-C.
The tenant also serves the node agent's per-process CPU series for the victim (a loader pinned at one
core), next to a trusted agent target's own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpu_rightsizer.adapters.gpu_targets import CLAIMS, RELABELLED, trust_warnings
from gpu_rightsizer.adapters.prometheus import PrometheusConfig, PrometheusSource, read_prometheus
from gpu_rightsizer.config import DEFAULT_TRUSTED_GPU_TARGETS
from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.observation import Signal
from tests.e2e.conftest import Kube, _wait_http, start_simulator
from tests.e2e.test_actuation_e2e import create, promql, running_pods
from tests.e2e.workloads import gpu_deployment

#: The tenant's pod as service discovery names it.
TENANT_TARGET = {
    "namespace": "tenant",
    "pod": "tenant-metrics-0",
    "service": "tenant-app",
    "container": "app",
}
#: What the tenant's copies say: an idle-looking GPU with a small model on it.
SPOOFED_VALUES = {
    mn.DCGM_GR_ENGINE_ACTIVE: 0.02,
    mn.DCGM_SM_ACTIVE: 0.02,
    mn.DCGM_SM_OCCUPANCY: 0.01,
    mn.DCGM_TENSOR_ACTIVE: 0.01,
    mn.DCGM_DRAM_ACTIVE: 0.01,
    mn.DCGM_GPU_UTIL: 2.0,
    mn.DCGM_FB_USED: 1536.0,
}
_TARGET_LABELS = {"job", "instance", "namespace", "pod", "service", "container", "endpoint"}
#: The node agent's pod as service discovery names it, and the trusted target that matches it.
AGENT_TARGET = {"namespace": "gpurs", "pod": "gpurs-agent-x1", "container": "agent"}
TRUSTED_AGENT = ('namespace="gpurs"', 'pod=~"gpurs-agent-.*"')


@dataclass
class TenantTarget:
    """An HTTP /metrics endpoint whose text the test sets."""

    port: int
    text: str = ""
    server: ThreadingHTTPServer | None = field(default=None, repr=False)

    def start(self) -> None:
        target = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = target.text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()

    def copy_gpu_series_of(self, url: str, namespace: str) -> int:
        """Serve spoofed copies of every DCGM series the trusted exporter reports for `namespace`'s pods;
        returns how many."""
        rows = promql(url, f'{{__name__=~"DCGM_.*",exported_namespace="{namespace}"}}')
        lines = []
        for row in rows:
            labels = dict(row["metric"])
            name = labels.pop("__name__")
            if name not in SPOOFED_VALUES:
                continue
            own = {k.removeprefix("exported_"): v for k, v in labels.items() if k not in _TARGET_LABELS}
            own["vgpu"] = "0"
            body = ",".join(f'{k}="{v}"' for k, v in sorted(own.items()))
            lines.append(f"{name}{{{body}}} {SPOOFED_VALUES[name]}")
        self.text = "\n".join(sorted(set(lines))) + "\n"
        return len(lines)

    def serve_process_cpu_of(self, namespace: str, pod: str, busiest_cores: float, pinned: int) -> None:
        """Serve the agent's per-process CPU series for `namespace/pod`'s container `main`."""
        labels = f'namespace="{namespace}",pod="{pod}",container="main"'
        self.text = f"{mn.AGENT_PROCESS_CPU_MAX}{{{labels}}} {busiest_cores}\n{mn.AGENT_PROCESSES_PINNED}{{{labels}}} {pinned}\n"


@dataclass
class SpoofedMetrics:
    url: str
    tenant: TenantTarget
    agent: TenantTarget


@pytest.fixture(scope="session")
def spoofed_metrics(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoofedMetrics]:
    """The simulator (as the GPU Operator's dcgm-exporter) and a tenant's target, scraped by one Prometheus."""
    from gpu_rightsizer.testcluster.prometheus import PrometheusServer, free_port

    workdir = tmp_path_factory.mktemp("spoofed-metrics")
    simulator, port = start_simulator(kube, workdir)
    tenant, agent = TenantTarget(free_port()), TenantTarget(free_port())
    tenant.start()
    agent.start()
    prometheus = PrometheusServer(
        workdir / "prometheus",
        scrape_targets=[f"127.0.0.1:{port}"],
        scrape_interval="2s",
        extra_scrape_configs=[
            {
                "job_name": job,
                "scrape_interval": "2s",
                "honor_labels": False,
                "static_configs": [{"targets": [f"127.0.0.1:{target.port}"], "labels": labels}],
            }
            for job, target, labels in (
                ("tenant/app", tenant, TENANT_TARGET),
                ("gpurs/agent", agent, AGENT_TARGET),
            )
        ],
    )
    try:
        _wait_http(f"http://127.0.0.1:{port}/metrics", timeout=60, process=simulator.process)
        prometheus.workdir.mkdir(parents=True, exist_ok=True)
        prometheus.start()
        yield SpoofedMetrics(prometheus.url, tenant, agent)
    finally:
        prometheus.stop()
        agent.stop()
        tenant.stop()
        simulator.stop()


def spoof_a_busy_trainer(kube: Kube, metrics: SpoofedMetrics, namespace: str, **options: Any) -> None:
    """A busy trainer in `namespace` (`gpu_deployment` options), and the tenant serving idle-looking
    copies of its GPU series (seen by Prometheus when this returns)."""
    create(kube, gpu_deployment("trainer", namespace, scenario="healthy", **options))
    kube.wait_for(lambda: running_pods(kube, namespace, "trainer"), timeout=90, what="a Running trainer")
    kube.wait_for(
        lambda: metrics.tenant.copy_gpu_series_of(metrics.url, namespace) >= 3,
        timeout=60,
        what="the trainer's GPU series from the trusted exporter",
    )
    kube.wait_for(
        lambda: promql(
            metrics.url, f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{job="tenant/app",exported_namespace="{namespace}"}}'
        ),
        timeout=30,
        what="the tenant's copies in Prometheus",
    )


def _replaced_signals(url: str, namespace: str, *, trusted: bool) -> list[str] | None:
    """The trainer's GPU signals whose window mean is exactly the tenant's constant (None: no figures
    with 5 samples yet). Real series are noisy; the tenant's never change."""
    windows = read_prometheus(
        PrometheusConfig(url, trusted_gpu_targets=DEFAULT_TRUSTED_GPU_TARGETS if trusted else None),
        window_seconds=60,
        step_seconds=2,
        namespace=namespace,
        at=datetime.now(tz=UTC),
    )
    window = next((w for w in windows if w.workload.name == "trainer"), None)
    if window is None or not window.pods or not window.pods[0].gpus:
        return None
    assert not [w for w in window.warnings if "honor_labels" in w or "two trusted" in w], window.warnings
    stats = window.pods[0].gpus[0].stats
    replaced = []
    for metric, value in SPOOFED_VALUES.items():
        source = mn.GPU_SIGNAL_BY_METRIC[metric]
        found = stats.get(source.signal)
        if found is None or found.samples < 5:
            return None
        if abs(found.mean - value * source.scale) <= 1e-9 * max(1.0, value):
            replaced.append(source.signal.value)
    return replaced


def test_a_tenant_series_with_another_pods_labels_does_not_replace_its_figures(
    kube: Kube, spoofed_metrics: SpoofedMetrics
) -> None:
    namespace = kube.create_namespace("spoof")
    spoof_a_busy_trainer(kube, spoofed_metrics, namespace)
    # which of two series of one device wins depends on the order of Prometheus's answer, so every
    # read is checked: the tenant must have replaced something where every target is believed, and
    # nothing in any of several reads where only the GPU Operator's exporter is
    attack_landed: list[str] = []
    trusted_reads: list[list[str]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (attack_landed and len(trusted_reads) >= 5):
        time.sleep(1)
        everyone = _replaced_signals(spoofed_metrics.url, namespace, trusted=False)
        attack_landed.extend(everyone or [])
        trusted = _replaced_signals(spoofed_metrics.url, namespace, trusted=True)
        if trusted is not None:
            trusted_reads.append(trusted)
    assert attack_landed, "the tenant's copies never reached the trainer's figures: the test proves nothing"
    assert len(trusted_reads) >= 5, trusted_reads
    assert all(replaced == [] for replaced in trusted_reads), trusted_reads


def _process_cpu(
    url: str, namespace: str, trusted: tuple[tuple[str, ...], ...] | None
) -> tuple[float | None, float | None] | None:
    """The trainer's busiest-process cores and pinned processes, window maxima (None: no window for the
    trainer yet; a None figure: not 5 samples of it)."""
    windows = read_prometheus(
        PrometheusConfig(url, trusted_gpu_targets=trusted),
        window_seconds=60,
        step_seconds=2,
        namespace=namespace,
        at=datetime.now(tz=UTC),
    )
    window = next((w for w in windows if w.workload.name == "trainer"), None)
    if window is None or not window.pods:
        return None
    stats = window.pods[0].stats
    busiest, pinned = (stats.get(s) for s in (Signal.PROCESS_CPU_MAX_CORES, Signal.PROCESSES_PINNED))
    figures = [found.max if found is not None and found.samples >= 5 else None for found in (busiest, pinned)]
    return figures[0], figures[1]


def test_a_tenant_copy_of_the_agents_cpu_series_does_not_decide_a_loaders_cpu(
    kube: Kube, spoofed_metrics: SpoofedMetrics
) -> None:
    """The agent reports a fed loader (0.3 core, nothing pinned); the tenant serves the same pod's
    series with a loader pinned at one core, which would call for more CPU."""
    namespace = kube.create_namespace("spoof-cpu")
    create(kube, gpu_deployment("trainer", namespace, scenario="healthy"))
    [pod] = kube.wait_for(
        lambda: running_pods(kube, namespace, "trainer"), timeout=90, what="a Running trainer"
    )
    name = pod["metadata"]["name"]
    spoofed_metrics.agent.serve_process_cpu_of(namespace, name, 0.3, 0)
    spoofed_metrics.tenant.serve_process_cpu_of(namespace, name, 1.0, 3)
    trusted = (*DEFAULT_TRUSTED_GPU_TARGETS, TRUSTED_AGENT)
    everyone: set[tuple[float | None, float | None]] = set()
    trusted_reads: list[tuple[float | None, float | None]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (everyone and len(trusted_reads) >= 5):
        time.sleep(1)
        read = _process_cpu(spoofed_metrics.url, namespace, None)
        if read is not None and None not in read:
            everyone.add(read)
        read = _process_cpu(spoofed_metrics.url, namespace, trusted)
        if read is not None and None not in read:
            trusted_reads.append(read)
    assert (1.0, 3.0) in everyone, f"the tenant's copies never reached the trainer's figures: {everyone}"
    assert len(trusted_reads) >= 5 and set(trusted_reads) == {(0.3, 0.0)}, trusted_reads
    # the GPU Operator's exporter alone serves no agent series: the trainer has none, not the tenant's
    assert _process_cpu(spoofed_metrics.url, namespace, DEFAULT_TRUSTED_GPU_TARGETS) == (None, None)


def test_series_that_set_their_own_target_labels_are_found_on_a_real_prometheus(tmp_path: Path) -> None:
    """honor_labels: true lets a series keep its own `namespace`/`pod`; the check sees it by `up`."""
    from gpu_rightsizer.testcluster.prometheus import PrometheusServer, free_port

    text = 'DCGM_FI_DEV_FB_USED{UUID="GPU-1",namespace="ml",pod="trainer-0",Hostname="n1"} 100\n'
    honest, honouring = TenantTarget(free_port(), text), TenantTarget(free_port(), text)
    target_labels = {"namespace": "gpu-operator", "service": "nvidia-dcgm-exporter", "pod": "dcgm-0"}
    jobs = [
        {"job_name": "honest", "honor_labels": False, "scrape_interval": "1s",
         "static_configs": [{"targets": [f"127.0.0.1:{honest.port}"], "labels": target_labels}]},
        {"job_name": "honouring", "honor_labels": True, "scrape_interval": "1s",
         "static_configs": [{"targets": [f"127.0.0.1:{honouring.port}"], "labels": {"namespace": "tenant"}}]},
    ]  # fmt: skip
    server = PrometheusServer(workdir=tmp_path, extra_scrape_configs=jobs, scrape_interval="1s")
    for target in (honest, honouring):
        target.start()
    try:
        server.start()
        source = PrometheusSource(
            PrometheusConfig(server.url, trusted_gpu_targets=DEFAULT_TRUSTED_GPU_TARGETS)
        )
        deadline = time.monotonic() + 30
        answers: dict[str, list[dict[str, Any]]] = {}
        while time.monotonic() < deadline and not all(answers.get(k) for k in (CLAIMS, RELABELLED)):
            time.sleep(1)
            answers = source.identity_answers(time.time(), 60)
    finally:
        server.stop()
        for target in (honest, honouring):
            target.stop()
    assert [row["metric"]["job"] for row in answers[RELABELLED]] == ["honouring"]
    [claim] = answers[CLAIMS]  # only the trusted target's, with the workload's pod folded in
    assert claim["metric"] == {
        "UUID": "GPU-1", "namespace": "ml", "pod": "trainer-0", "scrape_target": f"honest 127.0.0.1:{honest.port}"
    }  # fmt: skip
    [warning] = trust_warnings(answers, DEFAULT_TRUSTED_GPU_TARGETS)
    assert "job=honouring" in warning and "no automatic action" in warning
