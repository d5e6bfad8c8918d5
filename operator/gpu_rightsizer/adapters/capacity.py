"""Reads what the nodes offer: from the API server, else from kube-state-metrics series.

The API server is the first source (the recommender may list nodes); kube-state-metrics'
`kube_node_status_allocatable` and `kube_node_labels` are the fallback, and the only source of the
CLI on a Prometheus. `kube_node_labels` carries only labels allowlisted with
`--metric-labels-allowlist` (kube-state-metrics 2.x; the chart's `metricLabelsAllowlist` defaults to
none), so an empty one is said, not read as "no MIG, no sharing".
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpu_rightsizer.adapters.exposition import ReadLimits
from gpu_rightsizer.logic.capacity import (
    LABEL_MIG_CAPABLE,
    LABEL_MIG_CONFIG,
    LABEL_MIG_STRATEGY,
    LABEL_PRODUCT,
    LABEL_REPLICAS,
    LABEL_SHARING,
    ClusterCapacity,
    capacity_from_nodes,
)
from gpu_rightsizer.logic.floors import UnheldGPU, learn_idle_floors
from gpu_rightsizer.model import metric_names as mn

LOG = logging.getLogger(__name__)

#: kube_node_labels label -> the node label it stands for (kube-state-metrics sanitises the names).
KSM_NODE_LABELS: dict[str, str] = {
    mn.NODE_LABEL_GPU_PRODUCT: LABEL_PRODUCT,
    mn.NODE_LABEL_GPU_SHARING: LABEL_SHARING,
    mn.NODE_LABEL_GPU_REPLICAS: LABEL_REPLICAS,
    mn.NODE_LABEL_MIG_STRATEGY: LABEL_MIG_STRATEGY,
    mn.NODE_LABEL_MIG_CONFIG: LABEL_MIG_CONFIG,
    mn.NODE_LABEL_MIG_CAPABLE: LABEL_MIG_CAPABLE,
    mn.NODE_LABEL_GPU_MEMORY: "nvidia.com/gpu.memory",
}
#: The one allowlist recipe (docs/install.md and docs/clusters.md quote it): the node labels read above.
NODE_LABELS_ALLOWLIST = "nodes=[" + ",".join(KSM_NODE_LABELS.values()) + "]"
ALLOWLIST_HINT = (
    "kube_node_labels carries no node labels (kube-state-metrics exports only allowlisted labels): set "
    f'kube-state-metrics metricLabelsAllowlist "{NODE_LABELS_ALLOWLIST}"; MIG strategy and GPU '
    "sharing are read from the allocatable resources only"
)


def read_nodes_capacity(kube: Any) -> ClusterCapacity:
    """Pools from the API server's nodes (`kube.list_nodes()`, `adapters.kube.KubeAdapter`)."""
    return capacity_from_nodes(kube.list_nodes(), source="api")


def capacity_from_ksm(
    allocatable: Iterable[tuple[Mapping[str, str], float]],
    node_labels: Iterable[Mapping[str, str]],
) -> ClusterCapacity:
    """Pools from kube-state-metrics samples: (labels, value) of kube_node_status_allocatable, and the
    label sets of kube_node_labels."""
    nodes: dict[str, dict[str, Any]] = {}

    def entry(name: str) -> dict[str, Any]:
        return nodes.setdefault(
            name, {"metadata": {"name": name, "labels": {}}, "status": {"allocatable": {}}}
        )

    for labels, value in allocatable:
        name, resource = labels.get(mn.NODE_LABEL), labels.get("resource")
        if name and resource and math.isfinite(value):
            entry(name)["status"]["allocatable"][mn.resource_from_ksm(resource)] = value
    carried = False
    for labels in node_labels:
        name = labels.get(mn.NODE_LABEL)
        if not name:
            continue
        carried = carried or any(key.startswith("label_") for key in labels)
        node_entry = entry(name)
        for ksm_label, node_label in KSM_NODE_LABELS.items():
            if labels.get(ksm_label):
                node_entry["metadata"]["labels"][node_label] = labels[ksm_label]
    if not any(node["status"]["allocatable"] for node in nodes.values()):
        return ClusterCapacity()  # labels alone say nothing of what can be scheduled
    capacity = capacity_from_nodes(list(nodes.values()), source="kube-state-metrics")
    if nodes and not carried:
        return ClusterCapacity(pools=capacity.pools, source=capacity.source, notes=(ALLOWLIST_HINT,))
    return capacity


def load_capacity(kube: Any, fallback: Any = None) -> ClusterCapacity:
    """The cluster's capacity from the API (`kube.list_nodes`), else from `fallback()` (kube-state-metrics),
    else unknown (nothing is then constrained, and the log says why)."""
    try:
        return read_nodes_capacity(kube)
    except Exception as error:  # RBAC, network: the analysis goes on without node facts
        LOG.warning("cannot list nodes (%s); trying kube-state-metrics for node capacity", error)
    if fallback is not None:
        try:
            found: ClusterCapacity = fallback()
            return found
        except Exception as error:
            LOG.warning("no node capacity from kube-state-metrics either: %s", error)
    return ClusterCapacity()


#: The look-back the idle floors are learned over: long enough for DCGM's polling to show its highs.
IDLE_FLOOR_LOOKBACK_SECONDS = 3600.0


def with_idle_floors(
    capacity: ClusterCapacity, read: Callable[[], list[UnheldGPU]] | None
) -> ClusterCapacity:
    """The capacity with the idle floors learned from `read()` (the unheld GPUs); unchanged when that
    fails or finds none, so the engine's fixed idle thresholds apply."""
    if read is None:
        return capacity
    try:
        floors = learn_idle_floors(read())
    except Exception as error:  # a metrics outage: the fixed thresholds apply, the cycle goes on
        LOG.debug("no idle floors this cycle: %s", error)
        return capacity
    return dataclasses.replace(capacity, idle_floors=floors) if floors else capacity


def capacity_from_file(path: Path, limits: ReadLimits | None = None) -> ClusterCapacity:
    """Node pools from the kube-state-metrics node series of an OpenMetrics/Prometheus text file
    (plain or gzipped), streamed: only the node samples are kept, the latest per series."""
    from gpu_rightsizer.adapters.exposition import OpenMetricsError, samples_of

    latest: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[float, float]] = {}
    try:
        for name, labels, value, timestamp in samples_of(
            path, frozenset({mn.KSM_NODE_ALLOCATABLE, mn.KSM_NODE_LABELS}), limits
        ):
            key = (name, tuple(sorted(labels.items())))
            moment = timestamp if timestamp is not None else 0.0
            if key not in latest or moment >= latest[key][0]:
                latest[key] = (moment, value)
    except (OpenMetricsError, OSError) as error:
        LOG.warning("node series of %s unreadable, no node capacity: %s", path, error)
        return ClusterCapacity()
    allocatable = [(dict(k[1]), v) for k, (_, v) in latest.items() if k[0] == mn.KSM_NODE_ALLOCATABLE]
    labels_rows = [dict(k[1]) for k, (_, v) in latest.items() if k[0] == mn.KSM_NODE_LABELS and v > 0]
    return capacity_from_ksm(allocatable, labels_rows)


_FLOOR_METRICS = frozenset({mn.DCGM_GR_ENGINE_ACTIVE, mn.DCGM_PCIE_TX_BYTES, mn.DCGM_PCIE_RX_BYTES})


def unheld(labels: Mapping[str, str]) -> bool:
    """A dcgm-exporter series of a GPU no pod holds: no pod label, or under kube-prometheus-stack's
    renaming only the exporter's own pod (no `exported_pod`)."""
    if labels.get("exported_pod"):
        return False
    pod = labels.get("pod") or labels.get("pod_name") or ""
    return not pod or "dcgm-exporter" in pod


def unheld_gpus_from_file(path: Path, limits: ReadLimits | None = None) -> list[UnheldGPU]:
    """The GR and PCIe maxima of the GPUs no pod holds in an OpenMetrics/Prometheus text file."""
    from gpu_rightsizer.adapters.exposition import samples_of

    gr: dict[tuple[str, str], float] = {}
    pcie: dict[tuple[str, str], float] = {}
    for name, labels, value, _ in samples_of(path, _FLOOR_METRICS, limits):
        node = mn.first_label(labels, mn.HOSTNAME_LABELS) or ""
        model = mn.first_label(labels, mn.MODEL_NAME_LABELS) or ""
        if node and model and unheld(labels) and math.isfinite(value):
            into = gr if name == mn.DCGM_GR_ENGINE_ACTIVE else pcie
            into[(node, model)] = max(into.get((node, model), 0.0), value)
    return [
        UnheldGPU(node, model, gr.get((node, model)), pcie.get((node, model))) for node, model in gr | pcie
    ]
