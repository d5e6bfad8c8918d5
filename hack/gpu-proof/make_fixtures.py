"""Turn full recordings from run_proof.py into small, commit-ready test fixtures.

Keeps only the series the offline analyzer reads (dcgm-exporter, cAdvisor, kube-state-metrics and
serving names from `model/metric_names.py`, plus the agent's `up`), optionally thins them to every
N-th tick, and writes gzip-compressed OpenMetrics: tests/fixtures/h200/<workload>.om.gz.

Run: python hack/gpu-proof/make_fixtures.py RECORDINGS_DIR tests/fixtures/h200 [--every 1] [--held-gpu NAME,...]
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "operator"))

from prometheus_client.core import Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from gpu_rightsizer.agent.exporter import AGENT_UP, OpenMetricsRecording
from gpu_rightsizer.agent.process_cpu import PROCESS_CPU_MAX, PROCESSES_PINNED
from gpu_rightsizer.model import metric_names as mn

KEEP: frozenset[str] = frozenset(
    {
        *mn.DCGM_METRICS,
        *(source.metric for source in mn.POD_SIGNAL_SOURCES),
        mn.CADVISOR_CPU_THROTTLED_PERIODS,
        mn.CADVISOR_CPU_PERIODS,
        mn.KSM_POD_OWNER,
        mn.KSM_REPLICASET_OWNER,
        mn.KSM_DEPLOYMENT_REPLICAS,
        mn.KSM_POD_INFO,
        mn.KSM_POD_LABELS,
        mn.KSM_POD_REQUESTS,
        mn.KSM_POD_LIMITS,
        mn.KSM_NODE_LABELS,
        *mn.SERVING_REQUEST_COUNTERS,
        *mn.SERVING_QUEUE_GAUGES,
        mn.KSM_POD_RESTARTS,
        mn.KSM_POD_LAST_TERMINATED,
        AGENT_UP,
        PROCESS_CPU_MAX,
        PROCESSES_PINNED,
    }
)


def thin(path: Path, every: int) -> OpenMetricsRecording:
    """The kept families of one recording, every `every`-th timestamp."""
    families = list(text_string_to_metric_families(restore_colons(path.read_bytes()).decode()))
    for family in families:  # the parser gives Timestamp objects; the recorder wants float seconds
        family.samples = [s._replace(timestamp=float(s.timestamp)) for s in family.samples if s.timestamp]
    stamps = sorted({float(s.timestamp) for f in families for s in f.samples})
    kept_stamps = set(stamps[::every])
    recording = OpenMetricsRecording()
    for family in families:
        if family.name not in KEEP and family.name + "_total" not in KEEP:  # counters lose `_total`
            continue
        copy = Metric(family.name, family.documentation, family.type, family.unit)
        copy.samples = [s for s in family.samples if s.timestamp in kept_stamps]
        recording.add([copy])
    return recording


def label_held_gpu(recording: OpenMetricsRecording) -> None:
    """Give the pod's labels to device samples taken while its crash-looping process was down.

    In Kubernetes the pod keeps its GPU through CrashLoopBackOff (kubelet's pod-resources lists it), so
    dcgm-exporter labels those samples with the pod; the recorder labelled only samples with a live process.
    """
    for family in recording._families.values():
        if not family.name.startswith("DCGM_"):
            continue
        owners = {tuple(sorted(s.labels.items())) for s in family.samples if s.labels.get("pod")}
        if len(owners) != 1:
            continue
        labels = dict(next(iter(owners)))
        family.samples = [
            s if s.labels.get("pod") else s._replace(labels={**s.labels, **labels}) for s in family.samples
        ]


def restore_colons(text: bytes) -> bytes:
    """Sample names as vLLM writes them (`vllm:…`): prometheus_client escapes ':' to '_' in sample lines.

    Applied before parsing (so the samples stay in their family) and after rendering.
    """
    for name in (*mn.SERVING_REQUEST_COUNTERS, *mn.SERVING_QUEUE_GAUGES):
        if ":" in name:
            text = text.replace(b"\n" + name.replace(":", "_").encode(), b"\n" + name.encode())
    return text


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("recordings", type=Path)
    parser.add_argument("fixtures", type=Path)
    parser.add_argument("--every", type=int, default=1)
    parser.add_argument(
        "--held-gpu",
        default="",
        help="comma-separated crash-looping recordings whose pod keeps its GPU while its process is down",
    )
    args = parser.parse_args()
    args.held_gpu = set(filter(None, args.held_gpu.split(",")))
    args.fixtures.mkdir(parents=True, exist_ok=True)
    for path in sorted(args.recordings.glob("*.om")):
        if path.name.startswith("agent-cli"):
            continue
        recording = thin(path, args.every)
        if path.stem in args.held_gpu:
            label_held_gpu(recording)
        data = restore_colons(recording.render())
        target = args.fixtures / f"{path.stem}.om.gz"
        target.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
        print(f"{target}: {len(data)} bytes of text, {target.stat().st_size} gzipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
