"""Live mode: a /metrics endpoint with simulated series for the pods that run in a cluster now.

Each scrape lists the pods (Kubernetes client, KUBECONFIG), keeps those annotated with
`sim.gpurightsizer.io/scenario: <shape>` (set it in the pod template), reads each pod's *actual*
CPU/memory limits, GPU resource and count, node and start time, and emits the dcgm-exporter,
cAdvisor, serving and kube-state-metrics series of the scenario for that pod. Prometheus scrapes it
(`honor_labels: true`). Because the values follow the pod's real resources, a change the operator
makes (more CPU, more replicas, a MIG slice) shows up in the next scrapes.

Optional annotations: `sim.gpurightsizer.io/seed`, `.../traffic-qps`, `.../replica-capacity-qps`,
`.../memory-share`, `.../cpu-demand-per-gpu`, `.../workload-type`, `.../gpu-model`.

    python -m gpu_rightsizer.sim.live --kubeconfig KUBECONFIG --port 9400 [--exit-after 3600]
"""

from __future__ import annotations

import argparse
import contextlib
import re
import signal
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.sim.backfill import family_name
from gpu_rightsizer.sim.scenarios import (
    DEFAULT_GPU_MODEL,
    GPU_MODELS,
    LabelStyle,
    PodContext,
    Scenario,
    SeriesSample,
    Shape,
    cluster_series,
    pod_series,
)

ANNOTATION_PREFIX = "sim.gpurightsizer.io/"
SCENARIO_ANNOTATION = ANNOTATION_PREFIX + "scenario"
_FLOAT_KNOBS = {
    "traffic-qps": "traffic_qps",
    "replica-capacity-qps": "replica_capacity_qps",
    "memory-share": "memory_share",
    "cpu-demand-per-gpu": "cpu_demand_per_gpu",
}
#: Knob values a serving pod gets when its annotations name none, so that the bare scenario
#: annotation is enough: a fixed total traffic, which scaling the Deployment then splits (the
#: same figures as the scenario library's first variant of each shape).
_SHAPE_DEFAULTS: dict[Shape, dict[str, float]] = {
    Shape.OVERSIZED: {"traffic_qps": 3.0, "memory_share": 0.08},
    Shape.UNDER_REPLICATED: {"traffic_qps": 60.0, "memory_share": 0.6},
    Shape.OVER_REPLICATED: {"traffic_qps": 8.0, "memory_share": 0.6},
}
_QUANTITY = re.compile(r"^([0-9.]+)([a-zA-Z]*)$")
_SUFFIX = {
    "": 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
    "Ki": 1024.0, "Mi": 1024.0**2, "Gi": 1024.0**3, "Ti": 1024.0**4,
}  # fmt: skip


def parse_quantity(text: str | None) -> float | None:
    """A Kubernetes quantity ('500m', '4', '16Gi') as a number; None when absent or unreadable."""
    if text is None:
        return None
    match = _QUANTITY.match(str(text).strip())
    if not match or match.group(2) not in _SUFFIX:
        return None
    return float(match.group(1)) * _SUFFIX[match.group(2)]


@dataclass(frozen=True)
class SimulatedPod:
    """A running pod the simulator speaks for: its scenario and what it actually has."""

    scenario: Scenario
    context: PodContext


#: Resources a running container can be resized in; the kubelet reports the size it applied in
#: `status.containerStatuses[].resources`, which is what the container runs with.
_RESIZABLE = ("cpu", "memory")


def _resources(pod: Any) -> tuple[dict[str, float], dict[str, float]]:
    """Summed requests and limits; CPU and memory as the pod's status reports them (an in-place resize
    the kubelet has not applied, or refused as Infeasible, leaves the old size in force)."""
    requests: dict[str, float] = defaultdict(float)
    limits: dict[str, float] = defaultdict(float)
    applied = {
        status.name: status.resources
        for status in (pod.status.container_statuses if pod.status else None) or []
        if status.resources is not None
    }
    for container in pod.spec.containers or []:
        resources = container.resources
        reported = applied.get(container.name)
        for target, values, actual in (
            (requests, resources.requests if resources else None, reported.requests if reported else None),
            (limits, resources.limits if resources else None, reported.limits if reported else None),
        ):
            merged = dict(values or {})
            if reported is not None:
                for name in _RESIZABLE:
                    merged.pop(name, None)
                    if (applied_now := (actual or {}).get(name)) is not None:
                        merged[name] = applied_now
            for name, quantity in merged.items():
                amount = parse_quantity(quantity)
                if amount is not None:
                    target[name] += amount
    return dict(requests), dict(limits)


def _owner(pod: Any) -> tuple[str, str, str]:
    """(workload kind, workload name, direct controller kind) of a pod."""
    refs = [r for r in (pod.metadata.owner_references or []) if getattr(r, "controller", False)]
    if not refs:
        return "Pod", pod.metadata.name, "Pod"
    ref = refs[0]
    labels = pod.metadata.labels or {}
    if ref.kind == "ReplicaSet" and labels.get("rollouts-pod-template-hash"):  # an Argo Rollout's
        return "Rollout", ref.name.removesuffix(f"-{labels['rollouts-pod-template-hash']}"), "ReplicaSet"
    if ref.kind == "ReplicaSet":
        template_hash = labels.get("pod-template-hash")
        name = ref.name.removesuffix(f"-{template_hash}") if template_hash else ref.name.rsplit("-", 1)[0]
        return "Deployment", name, "ReplicaSet"
    return ref.kind, ref.name, ref.kind


def _gpu_model(product: str | None, annotation: str | None) -> str:
    for candidate in (annotation, product):
        if not candidate:
            continue
        base = candidate.split("-MIG-", 1)[0].removesuffix("-SHARED")
        if base in GPU_MODELS:
            return base
        for key in GPU_MODELS:
            if key in base or base in key:
                return key
    return DEFAULT_GPU_MODEL


def simulated_pods(pods: Iterable[Any], node_products: dict[str, str]) -> list[SimulatedPod]:
    """The annotated, scheduled, running pods as (scenario, actual context) pairs."""
    chosen: list[tuple[Any, str, str, str]] = []
    for pod in pods:
        annotations = pod.metadata.annotations or {}
        shape_name = annotations.get(SCENARIO_ANNOTATION)
        if not shape_name or not pod.spec.node_name:
            continue
        if pod.status is None or pod.status.phase != "Running" or pod.metadata.deletion_timestamp is not None:
            continue
        kind, workload, controller = _owner(pod)
        chosen.append((pod, kind, workload, controller))
    members: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for pod, kind, workload, _ in chosen:
        members[(pod.metadata.namespace, kind, workload)].append(pod.metadata.name)
    out: list[SimulatedPod] = []
    for pod, kind, workload, controller in chosen:
        annotations = pod.metadata.annotations or {}
        try:
            shape = Shape(annotations[SCENARIO_ANNOTATION])
        except ValueError:
            print(
                f"[sim] {pod.metadata.namespace}/{pod.metadata.name}: unknown scenario "
                f"{annotations[SCENARIO_ANNOTATION]!r}; known: {', '.join(s.value for s in Shape)}",
                file=sys.stderr,
            )
            continue
        requests, limits = _resources(pod)
        gpu_resource = next((r for r in (*limits, *requests) if mn.is_gpu_resource(r)), "nvidia.com/gpu")
        gpu_count = int(limits.get(gpu_resource) or requests.get(gpu_resource) or 0)
        knobs: dict[str, Any] = dict(_SHAPE_DEFAULTS.get(shape, {}))
        for annotation, field_name in _FLOAT_KNOBS.items():
            value = annotations.get(ANNOTATION_PREFIX + annotation)
            if value is not None:
                try:
                    knobs[field_name] = float(value)
                except ValueError:
                    print(f"[sim] ignoring {annotation}={value!r}: not a number", file=sys.stderr)
        seed_text = annotations.get(ANNOTATION_PREFIX + "seed", "0")
        siblings = sorted(members[(pod.metadata.namespace, kind, workload)])
        default_type = (
            "inference"
            if shape in (Shape.OVERSIZED, Shape.UNDER_REPLICATED, Shape.OVER_REPLICATED)
            else "training"
        )
        scenario = Scenario(
            name=workload,
            shape=shape,
            seed=int(seed_text) if seed_text.isdigit() else 0,
            namespace=pod.metadata.namespace,
            kind=kind,
            workload_type=annotations.get(ANNOTATION_PREFIX + "workload-type", default_type),
            gpu_model=_gpu_model(
                node_products.get(pod.spec.node_name), annotations.get(ANNOTATION_PREFIX + "gpu-model")
            ),
            gpu_count=max(1, gpu_count),
            mig_profile=gpu_resource.removeprefix("nvidia.com/mig-")
            if gpu_resource.startswith("nvidia.com/mig-")
            else None,
            cpu_request=requests.get("cpu", 0.0),
            cpu_limit=limits.get("cpu"),
            memory_request_bytes=requests.get("memory", 0.0),
            memory_limit_bytes=limits.get("memory"),
            replicas=len(siblings),
            **knobs,
        )
        started = pod.status.start_time or pod.metadata.creation_timestamp
        controller_name = next(
            (r.name for r in (pod.metadata.owner_references or []) if getattr(r, "controller", False)),
            workload,
        )
        context = PodContext(
            namespace=pod.metadata.namespace,
            pod=pod.metadata.name,
            workload=workload,
            node=pod.spec.node_name,
            started_at=started.timestamp() if started else time.time(),
            pod_index=siblings.index(pod.metadata.name),
            container=pod.spec.containers[0].name if pod.spec.containers else "main",
            cpu_request=requests.get("cpu"),
            cpu_limit=limits.get("cpu"),
            memory_request_bytes=requests.get("memory"),
            memory_limit_bytes=limits.get("memory"),
            gpu_count=max(1, gpu_count),
            replicas=len(siblings),
            owner_kind=controller,
            owner_name=controller_name,
            gpu_resource=gpu_resource,
        )
        out.append(SimulatedPod(scenario, context))
    return out


def series_at(pods: Sequence[SimulatedPod], t: float, style: LabelStyle | None = None) -> list[SeriesSample]:
    """Every series of the simulated pods at time t (kube-state-metrics ones once per workload)."""
    out: list[SeriesSample] = []
    workloads: dict[tuple[str, str, str], list[SimulatedPod]] = defaultdict(list)
    for item in pods:
        out.extend(pod_series(item.scenario, item.context, t, style))
        workloads[(item.scenario.namespace, item.scenario.kind, item.scenario.name)].append(item)
    for members in workloads.values():
        out.extend(cluster_series(members[0].scenario, [m.context for m in members], t))
    return out


def to_families(samples: Iterable[SeriesSample]) -> list[Metric]:
    """prometheus_client metric families from series samples (repeated series keep the last value)."""
    families: dict[str, Metric] = {}
    seen: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(dict)
    kinds: dict[str, bool] = {}
    for metric, labels, value, is_counter in samples:
        name = family_name(metric, is_counter)
        kinds.setdefault(name, is_counter)
        seen[name][tuple(sorted(labels.items()))] = value
    for name, series in seen.items():
        label_names = sorted({k for key in series for k, _ in key})
        family: Metric
        if kinds[name]:
            family = CounterMetricFamily(name, f"simulated {name}", labels=label_names)
        else:
            family = GaugeMetricFamily(name, f"simulated {name}", labels=label_names)
        for key, value in series.items():
            values = dict(key)
            family.add_metric([values.get(label, "") for label in label_names], value)
        families[name] = family
    return list(families.values())


class ClusterSimulator(Collector):
    """A prometheus_client collector that lists the cluster's pods on each scrape (cached briefly)."""

    def __init__(self, core_api: Any, style: LabelStyle | None = None, cache_seconds: float = 2.0) -> None:
        self.core_api = core_api
        self.style = style
        self.cache_seconds = cache_seconds
        self._cached: tuple[float, list[SimulatedPod]] | None = None
        self._lock = threading.Lock()

    def pods(self) -> list[SimulatedPod]:
        """The simulated pods now (re-listed when the cache is older than `cache_seconds`)."""
        with self._lock:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] > self.cache_seconds:
                nodes = self.core_api.list_node().items
                products = {
                    n.metadata.name: (n.metadata.labels or {}).get("nvidia.com/gpu.product", "")
                    for n in nodes
                }
                pods = self.core_api.list_pod_for_all_namespaces().items
                self._cached = (now, simulated_pods(pods, products))
            return self._cached[1]

    def collect(self) -> Iterator[Metric]:
        """Called by prometheus_client on each scrape."""
        try:
            pods = self.pods()
        except Exception as error:
            print(f"[sim] listing pods failed: {error}", file=sys.stderr)
            pods = []
        yield from to_families(series_at(pods, time.time(), self.style))


def serve(core_api: Any, port: int, host: str = "127.0.0.1", style: LabelStyle | None = None) -> Any:
    """Start the exporter in a background thread; returns the HTTP server (call `.shutdown()`)."""
    from prometheus_client import start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterSimulator(core_api, style))
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `python -m gpu_rightsizer.sim.live`."""
    parser = argparse.ArgumentParser(prog="python -m gpu_rightsizer.sim.live", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument(
        "--kubeconfig", default=None, help="kubeconfig file (default: KUBECONFIG / in-cluster)"
    )
    parser.add_argument("--port", type=int, default=9400)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--exported-labels", action="store_true", help="emit exported_pod/... like honor_labels false"
    )
    parser.add_argument("--hostname-label", choices=("Hostname", "hostname"), default="Hostname")
    parser.add_argument(
        "--exit-after", type=float, default=3600.0, help="stop after this many seconds (0 = never)"
    )
    args = parser.parse_args(argv)
    from kubernetes import client, config

    load_kube_config: Callable[..., None] = config.load_kube_config
    load_incluster_config: Callable[[], None] = config.load_incluster_config
    try:
        load_kube_config(config_file=args.kubeconfig)
    except Exception:  # fall back to the in-cluster service account
        load_incluster_config()
    style = LabelStyle(exported_pod_labels=args.exported_labels, hostname_label=args.hostname_label)
    server = serve(client.CoreV1Api(), args.port, args.host, style)
    print(
        f"[sim] serving simulated metrics on http://{args.host}:{args.port}/metrics",
        file=sys.stderr,
        flush=True,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait(args.exit_after if args.exit_after > 0 else None)
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
