"""The counters ConfigMap on a real API server, as the GPU Operator consumes it.

The GPU Operator mounts the key `dcgm-metrics.csv` of the ConfigMap named by `dcgmExporter.config.name`
into every dcgm-exporter pod (gpu-operator controllers/object_controls.go). The ConfigMap must therefore
carry that key, live in the GPU Operator's namespace, and survive `helm uninstall` of gpu-rightsizer:
while the ClusterPolicy still names it, a restarted dcgm-exporter pod could not mount a missing one.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

from gpu_rightsizer.testcluster.binaries import TestBinaries
from tests.e2e.conftest import Kube

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "gpu-rightsizer"
COUNTERS = CHART / "files" / "dcgm-counters.csv"


def test_counters_configmap_has_the_gpu_operator_key_and_outlives_the_release(
    kube: Kube, testbins: TestBinaries
) -> None:
    helm = testbins.path("helm")
    release_ns = kube.create_namespace("gpurs-counters")
    operator_ns = kube.create_namespace("gpu-operator")
    name = f"gpurs{uuid.uuid4().hex[:4]}"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(helm), "--kubeconfig", str(kube.kubeconfig), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    run(
        "install", name, str(CHART), "--namespace", release_ns,
        "--set", "prometheus.url=http://prometheus.monitoring.svc:9090",
        "--set", "dcgmExporter.counters.enabled=true",
        "--set", f"dcgmExporter.counters.namespace={operator_ns}",
        "--set", "dcgmExporter.counters.name=gpu-rightsizer-dcgm-metrics",
        "--timeout", "120s",
    )  # fmt: skip
    configmap = kube.get_json("configmap", "gpu-rightsizer-dcgm-metrics", "--namespace", operator_ns)
    assert set(configmap["data"]) == {"dcgm-metrics.csv"}
    assert configmap["data"]["dcgm-metrics.csv"].strip() == COUNTERS.read_text().strip()

    run("uninstall", name, "--namespace", release_ns, "--wait", "--timeout", "120s")
    kept = kube.get_json("configmap", "gpu-rightsizer-dcgm-metrics", "--namespace", operator_ns)
    assert set(kept["data"]) == {"dcgm-metrics.csv"}
    kube.kubectl("delete", "configmap", "gpu-rightsizer-dcgm-metrics", "--namespace", operator_ns)
