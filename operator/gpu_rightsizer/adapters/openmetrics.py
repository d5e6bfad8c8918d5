"""OpenMetrics / Prometheus text files → `WorkloadWindow`s.

Reads what a scrape, `promtool tsdb dump-openmetrics` or the simulator's backfill writes, plain or
gzipped, streamed by `exposition` (memory follows the samples inside the window). Pods are grouped by their owning workload through
kube-state-metrics (`kube_pod_owner`, `kube_replicaset_owner`, `kube_job_owner`); allocation comes from
the resource request/limit series and the GPU model from GPU feature discovery node labels or the
exporter's `modelName`. Every label variant of gpu-signals §0.5/§0.6 is read. Device series that
several pods see (time-slicing, MPS) are kept once per pod and counted in `shared_by_pods`, never
summed. Data problems become `WorkloadWindow.warnings`.

`Inventory` and `assemble_windows` are shared with the Prometheus source.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from gpu_rightsizer.adapters import exposition, gpu_targets
from gpu_rightsizer.adapters.capacity import capacity_from_file, unheld_gpus_from_file
from gpu_rightsizer.adapters.exposition import ParsedSample, ReadLimits
from gpu_rightsizer.adapters.source import (
    EVERYWHERE,
    ExtraOwners,
    Scope,
    WindowRead,
    rate_window_seconds,
)
from gpu_rightsizer.config import TrustedTarget
from gpu_rightsizer.logic import stats as st
from gpu_rightsizer.logic.capacity import ClusterCapacity
from gpu_rightsizer.logic.counters import rates_at
from gpu_rightsizer.logic.floors import UnheldGPU
from gpu_rightsizer.logic.gpu_identity import DeviceClaim, device_conflicts
from gpu_rightsizer.logic.owners import ObjectLink, api_version_for, resolve_workload
from gpu_rightsizer.logic.timeline import Timeline, timeline_of
from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.observation import (
    Allocation,
    GPUObservation,
    HPAInfo,
    PodObservation,
    Signal,
    SignalStats,
    WorkloadRef,
    WorkloadWindow,
)

#: Raised for every file that cannot be read (defined with the reader, `exposition`).
OpenMetricsError = exposition.OpenMetricsError
parse_text = exposition.parse_text

Key = tuple[str, str]  # (namespace, name)
Sample = tuple[float, float]
Samples = list[Sample]


# --- inventory: who owns which pod, and what it asked for ------------------------------------------------
@dataclass
class PodInfo:
    """What kube-state-metrics says about one pod."""

    namespace: str
    pod: str
    node: str | None = None
    owner_kind: str | None = None
    owner_name: str | None = None
    owner_is_controller: bool = False
    #: `leaderworkerset.sigs.k8s.io/name` when kube_pod_labels carries it (LWS puts it on every pod).
    leaderworkerset: str | None = None
    cpu_request: float | None = None
    cpu_limit: float | None = None
    memory_request: float | None = None
    memory_limit: float | None = None
    gpu_resource: str | None = None
    gpu_count: float = 0.0
    gpu_amounts: dict[tuple[str, str, bool], float] = field(
        default_factory=dict
    )  # (resource, container, limit)
    workload_type: str | None = None
    #: HAMi vGPU requests (nvidia.com/gpumem, gpucores, gpumem-percentage) -> amount
    hami: dict[str, float] = field(default_factory=dict)
    restarts: float = 0.0
    oom_killed: bool = False


@dataclass
class Inventory:
    """kube-state-metrics facts, fed one sample (latest value in the window) at a time."""

    pods: dict[Key, PodInfo] = field(default_factory=dict)
    replicaset_owner: dict[Key, tuple[str, str]] = field(default_factory=dict)
    job_owner: dict[Key, tuple[str, str]] = field(default_factory=dict)
    node_product: dict[str, str] = field(default_factory=dict)
    node_memory_mib: dict[str, float] = field(default_factory=dict)
    node_sharing: dict[str, str] = field(default_factory=dict)
    replicas: dict[tuple[str, str, str], int] = field(default_factory=dict)
    hpa_target: dict[Key, tuple[str, str]] = field(default_factory=dict)
    hpa_bounds: dict[Key, dict[str, int]] = field(default_factory=dict)
    extra_owners: ExtraOwners | None = None
    #: kube_pod_labels / kube_node_labels rows seen, and whether any carried a Kubernetes label.
    label_rows: dict[str, list[bool]] = field(default_factory=dict)

    def notes(self) -> list[str]:
        """What the label metrics lack: kube-state-metrics 2.x exports only allowlisted labels
        (`--metric-labels-allowlist`; the kube-state-metrics chart's `metricLabelsAllowlist` is empty by
        default), so a label metric without any `label_*` is said, not read as "no such label". Node
        labels are said by the capacity reader (`adapters.capacity`)."""
        found = []
        if (rows := self.label_rows.get(mn.KSM_POD_LABELS)) and not any(rows):
            found.append(
                "kube_pod_labels carries no pod labels: the gpurightsizer.io/workload-type and "
                "leaderworkerset.sigs.k8s.io/name labels are lost; set kube-state-metrics "
                'metricLabelsAllowlist "pods=[gpurightsizer.io/workload-type,leaderworkerset.sigs.k8s.io/name]"'
            )
        return found

    def pod(self, namespace: str, name: str) -> PodInfo:
        """The record of a pod, created on first use."""
        return self.pods.setdefault((namespace, name), PodInfo(namespace, name))

    def add(self, metric: str, labels: dict[str, str], value: float) -> None:
        """Take one kube-state-metrics sample into account (unknown metrics are ignored)."""
        if math.isnan(value):
            return
        namespace = mn.first_label(labels, mn.NAMESPACE_LABELS) or ""
        pod_name = mn.first_label(labels, mn.POD_LABELS)
        if metric in (mn.KSM_POD_LABELS, mn.KSM_NODE_LABELS):
            self.label_rows.setdefault(metric, []).append(any(k.startswith("label_") for k in labels))
        if metric == mn.KSM_POD_OWNER and pod_name and value > 0:
            info = self.pod(namespace, pod_name)
            kind = labels.get("owner_kind", mn.KSM_NO_OWNER)
            controller = labels.get("owner_is_controller", "true") == "true"
            if info.owner_kind is None or (
                kind != mn.KSM_NO_OWNER and (controller or not info.owner_is_controller)
            ):
                info.owner_kind, info.owner_name = kind, labels.get("owner_name", mn.KSM_NO_OWNER)
                info.owner_is_controller = controller and kind != mn.KSM_NO_OWNER
        elif (
            metric == mn.KSM_REPLICASET_OWNER
            and value > 0
            and labels.get("owner_kind", mn.KSM_NO_OWNER) != mn.KSM_NO_OWNER
        ):
            self.replicaset_owner[(namespace, labels.get("replicaset", ""))] = (
                labels["owner_kind"],
                labels["owner_name"],
            )
        elif (
            metric == mn.KSM_JOB_OWNER
            and value > 0
            and labels.get("owner_kind", mn.KSM_NO_OWNER) != mn.KSM_NO_OWNER
        ):
            self.job_owner[(namespace, labels.get("job_name", ""))] = (
                labels["owner_kind"],
                labels["owner_name"],
            )
        elif metric == mn.KSM_POD_INFO and pod_name:
            self.pod(namespace, pod_name).node = labels.get(mn.NODE_LABEL) or None
        elif metric == mn.KSM_POD_LABELS and pod_name:
            info = self.pod(namespace, pod_name)
            info.workload_type = labels.get(mn.POD_LABEL_WORKLOAD_TYPE) or info.workload_type
            info.leaderworkerset = labels.get(mn.POD_LABEL_LWS_NAME) or info.leaderworkerset
        elif metric in (mn.KSM_POD_REQUESTS, mn.KSM_POD_LIMITS) and pod_name:
            self._add_resource(self.pod(namespace, pod_name), metric == mn.KSM_POD_LIMITS, labels, value)
        elif metric == mn.KSM_POD_RESTARTS and pod_name:
            self.pod(namespace, pod_name).restarts += value
        elif metric == mn.KSM_POD_LAST_TERMINATED and pod_name and value > 0:
            if labels.get("reason") == "OOMKilled":
                self.pod(namespace, pod_name).oom_killed = True
        elif metric == mn.KSM_NODE_LABELS and labels.get(mn.NODE_LABEL):
            node = labels[mn.NODE_LABEL]
            if labels.get(mn.NODE_LABEL_GPU_PRODUCT):
                self.node_product[node] = labels[mn.NODE_LABEL_GPU_PRODUCT]
            if labels.get(mn.NODE_LABEL_GPU_MEMORY):
                with contextlib.suppress(ValueError):
                    self.node_memory_mib[node] = float(labels[mn.NODE_LABEL_GPU_MEMORY])
            if labels.get(mn.NODE_LABEL_GPU_SHARING):
                self.node_sharing[node] = labels[mn.NODE_LABEL_GPU_SHARING]
        elif metric == mn.KSM_DEPLOYMENT_REPLICAS and labels.get("deployment"):
            self.replicas[(namespace, "Deployment", labels["deployment"])] = int(value)
        elif metric == mn.KSM_STATEFULSET_REPLICAS and labels.get("statefulset"):
            self.replicas[(namespace, "StatefulSet", labels["statefulset"])] = int(value)
        elif metric == mn.KSM_HPA_INFO and labels.get("horizontalpodautoscaler"):
            self.hpa_target[(namespace, labels["horizontalpodautoscaler"])] = (
                labels.get("scaletargetref_kind", ""),
                labels.get("scaletargetref_name", ""),
            )
        elif metric in (mn.KSM_HPA_MIN_REPLICAS, mn.KSM_HPA_MAX_REPLICAS) and labels.get(
            "horizontalpodautoscaler"
        ):
            bound = "min" if metric == mn.KSM_HPA_MIN_REPLICAS else "max"
            self.hpa_bounds.setdefault((namespace, labels["horizontalpodautoscaler"]), {})[bound] = int(value)

    @staticmethod
    def _add_resource(info: PodInfo, is_limit: bool, labels: dict[str, str], value: float) -> None:
        resource = mn.resource_from_ksm(labels.get("resource", ""))
        if resource == "cpu":
            if is_limit:
                info.cpu_limit = (info.cpu_limit or 0.0) + value
            else:
                info.cpu_request = (info.cpu_request or 0.0) + value
        elif resource == "memory":
            if is_limit:
                info.memory_limit = (info.memory_limit or 0.0) + value
            else:
                info.memory_request = (info.memory_request or 0.0) + value
        elif resource.replace("_", "-") in mn.HAMI_RESOURCES:
            info.hami[resource.replace("_", "-")] = value
        elif mn.is_gpu_resource(resource):
            # Extended resources have request == limit; prefer limits, count each container once.
            container = labels.get("container", "")
            info.gpu_amounts[(resource, container, is_limit)] = value
            limits = {k: v for k, v in info.gpu_amounts.items() if k[2]}
            chosen = limits or info.gpu_amounts
            info.gpu_resource = max(chosen, key=lambda k: chosen[k])[0]
            info.gpu_count = sum(v for k, v in chosen.items() if k[0] == info.gpu_resource)

    def workload_of(self, namespace: str, pod: str) -> WorkloadRef:
        """The top-level owner of a pod, by the walk every entry point shares (`logic.owners`).

        kube-state-metrics gives the pod's owner, a ReplicaSet's and a Job's; `extra_owners` (API reads,
        in the operator) the rest. A pod of a LeaderWorkerSet belongs to it by its LWS label.
        """

        def parent_of(link: ObjectLink) -> ObjectLink | None:
            found: tuple[str, str] | None = None
            info = self.pods.get((namespace, link.name)) if link.kind == "Pod" else None
            if info is not None:
                if info.leaderworkerset:
                    return ObjectLink("LeaderWorkerSet", info.leaderworkerset)
                if info.owner_kind and info.owner_kind != mn.KSM_NO_OWNER and info.owner_name:
                    found = (info.owner_kind, info.owner_name)
            elif link.kind == "ReplicaSet":
                found = self.replicaset_owner.get((namespace, link.name))
            elif link.kind == "Job":
                found = self.job_owner.get((namespace, link.name))
            if found is not None:
                return ObjectLink(found[0], found[1], api_version_for(found[0]))
            if self.extra_owners is not None and link.kind != "Pod":
                return self.extra_owners(namespace, link)
            return None

        top = resolve_workload(ObjectLink("Pod", pod, "v1"), parent_of).workload
        return WorkloadRef(
            namespace=namespace, kind=top.kind, name=top.name, api_version=top.api_version or ""
        )

    def hpa_for(self, ref: WorkloadRef) -> HPAInfo | None:
        """The HPA that targets the workload, if any."""
        for (namespace, hpa_name), (kind, name) in self.hpa_target.items():
            if namespace == ref.namespace and kind == ref.kind and name == ref.name:
                bounds = self.hpa_bounds.get((namespace, hpa_name), {})
                if "max" in bounds:
                    return HPAInfo(
                        name=hpa_name, min_replicas=bounds.get("min", 1), max_replicas=max(1, bounds["max"])
                    )
        return None


# --- per-pod raw series --------------------------------------------------------------------------------
@dataclass
class DeviceSeries:
    """Raw samples of one GPU (or MIG instance) as seen by one pod."""

    uuid: str
    index: str | None = None
    node: str | None = None
    model_name: str | None = None
    mig_profile: str | None = None
    signals: dict[Signal, Samples] = field(default_factory=lambda: defaultdict(list))
    clock_events: Samples = field(default_factory=list)
    #: throttle-violation counter → raw samples (nanoseconds held down, cumulative)
    violations: dict[str, Samples] = field(default_factory=lambda: defaultdict(list))
    xid_codes: set[int] = field(default_factory=set)


@dataclass
class PodSeries:
    """Raw samples of one pod: its devices, its containers' counters and its serving series."""

    namespace: str
    pod: str
    devices: dict[str, DeviceSeries] = field(default_factory=dict)
    #: (metric, container or "" for pod level, extra label key) → samples
    cadvisor: dict[tuple[str, str, str], Samples] = field(default_factory=lambda: defaultdict(list))
    serving: dict[str, Samples] = field(default_factory=lambda: defaultdict(list))


def device_key(labels: dict[str, str]) -> tuple[str, str | None] | None:
    """(device id, MIG profile) of a dcgm-exporter series: UUID, or '<UUID>-<GPU_I_ID>' for a MIG slice."""
    uuid = mn.first_label(labels, mn.UUID_LABELS)
    index = labels.get(mn.GPU_INDEX_LABEL)
    base = uuid or (f"gpu{index}" if index is not None else None)
    if base is None:
        return None
    instance = labels.get(mn.MIG_INSTANCE_LABEL)
    profile = labels.get(mn.MIG_PROFILE_LABEL) or None
    if instance:
        return f"{base}-{instance}", profile
    return base, profile


#: Device series the collector keeps (per GPU or MIG instance).
_DEVICE_METRICS: frozenset[str] = frozenset(
    {
        *mn.GPU_SIGNAL_BY_METRIC,
        *mn.DCGM_CLOCK_EVENT_METRICS,
        *mn.DCGM_THROTTLE_VIOLATION_COUNTERS,
        mn.DCGM_XID_ERRORS,
    }
)

#: Series kept only from the trusted targets when those are given (`gpu_targets`): the device series
#: and the node agent's per-container series.
_TRUSTED_ONLY_METRICS: frozenset[str] = _DEVICE_METRICS | frozenset(gpu_targets.AGENT_CONTAINER_METRICS)


class SeriesCollector:
    """Sorts raw samples into pods, devices and the inventory."""

    def __init__(self) -> None:
        self.inventory = Inventory()
        self.pods: dict[Key, PodSeries] = {}
        #: board-level series without pod labels (MIG, unmapped GPUs): (node, uuid) → signal → samples
        self.boards: dict[tuple[str, str], DeviceSeries] = {}
        self.ksm_latest: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[float, float]] = {}
        self.gpu_metrics_seen: set[str] = set()

    def _pod(self, namespace: str, pod: str) -> PodSeries:
        return self.pods.setdefault((namespace, pod), PodSeries(namespace, pod))

    def add(self, name: str, labels: dict[str, str], timestamp: float, value: float) -> None:
        """Route one sample."""
        if name.startswith("kube_"):
            key = (name, tuple(sorted(labels.items())))
            previous = self.ksm_latest.get(key)
            if previous is None or timestamp >= previous[0]:
                self.ksm_latest[key] = (timestamp, value)
            return
        namespace = mn.first_label(labels, mn.NAMESPACE_LABELS) or ""
        pod = mn.first_label(labels, mn.POD_LABELS)
        if name in _DEVICE_METRICS:
            self._add_gpu(name, labels, namespace, pod, timestamp, value)
        elif (
            name in mn.POD_SIGNAL_BY_METRIC
            or name in mn.PRESSURE_METRICS
            or name in (mn.CADVISOR_CPU_PERIODS, mn.CADVISOR_CPU_THROTTLED_PERIODS)
        ):
            if pod:
                container = mn.first_label(labels, mn.CONTAINER_LABELS) or ""
                extra = labels.get("interface") or labels.get("device") or ""
                self._pod(namespace, pod).cadvisor[(name, container, extra)].append((timestamp, value))
        elif name in mn.SERVING_SIGNAL_BY_METRIC and pod:
            self._pod(namespace, pod).serving[name].append((timestamp, value))

    def _add_gpu(
        self,
        name: str,
        labels: dict[str, str],
        namespace: str,
        pod: str | None,
        timestamp: float,
        value: float,
    ) -> None:
        key = device_key(labels)
        if key is None:
            return
        uuid, profile = key
        node = mn.first_label(labels, mn.HOSTNAME_LABELS)
        if pod:
            pod_series = self._pod(namespace, pod)
            device = pod_series.devices.get(uuid)
            if device is None:
                device = pod_series.devices[uuid] = DeviceSeries(uuid=uuid)
        else:
            board_key = (node or "", mn.first_label(labels, mn.UUID_LABELS) or uuid)
            device = self.boards.setdefault(board_key, DeviceSeries(uuid=uuid))
        device.index = labels.get(mn.GPU_INDEX_LABEL, device.index)
        device.node = node or device.node
        device.model_name = mn.first_label(labels, mn.MODEL_NAME_LABELS) or device.model_name
        device.mig_profile = profile or device.mig_profile
        self.gpu_metrics_seen.add(name)
        if name in mn.DCGM_CLOCK_EVENT_METRICS:
            device.clock_events.append((timestamp, value))
        elif name in mn.DCGM_THROTTLE_VIOLATION_COUNTERS:
            device.violations[name].append((timestamp, value))
        elif name == mn.DCGM_XID_ERRORS:
            if not st.is_missing(value) and value > 0:
                device.xid_codes.add(int(value))
        else:
            source = mn.GPU_SIGNAL_BY_METRIC[name]
            device.signals[source.signal].append((timestamp, value * source.scale))

    def finish_inventory(self) -> None:
        """Feed the latest kube-state-metrics values into the inventory."""
        for (name, label_items), (_, value) in self.ksm_latest.items():
            self.inventory.add(name, dict(label_items), value)


# --- counter rates: the Prometheus source's window, on raw samples --------------------------------------
def without_stale_repeats(samples: Iterable[Sample], window_seconds: float) -> Samples:
    """A counter's clean samples without the repeats of a value that had not been refreshed.

    With the scrape's time on cAdvisor's samples (kube-prometheus ignores cAdvisor's timestamps), a
    counter that housekeeping has not updated since the last scrape repeats its value: differenced,
    that reads 0 and then twice the rate. A counter that stays flat for at least `window_seconds` is
    really flat (idle), so such runs are kept whole.
    """
    kept = st.clean(samples)
    out: Samples = []
    index = 0
    while index < len(kept):
        run_end = index
        while run_end + 1 < len(kept) and kept[run_end + 1][1] == kept[index][1]:
            run_end += 1
        if kept[run_end][0] - kept[index][0] >= window_seconds:
            out.extend(kept[index : run_end + 1])
        else:
            out.append(kept[index])
        index = run_end + 1
    return out


#: Counters that move whenever their container runs (CPU time in ns): an exact repeat inside a rate
#: window is a sample cAdvisor had not refreshed. Throttling, network and disk counters stay flat for
#: real, so their repeats are kept.
ALWAYS_MOVING_COUNTERS: frozenset[str] = frozenset({mn.CADVISOR_CPU_USAGE})


def window_counter_rates(samples: Iterable[Sample], step: float, *, stale_repeats: bool = False) -> Samples:
    """Per-second rate of a counter at each step, as the Prometheus source reads it.

    At each multiple of `step` up to the first one at or after the last sample (a range query's
    evaluation times, which reach the window's end), the rate is `max(rate(), deriv())` over the
    preceding `rate_window_seconds(step)`
    (`prometheus.counter_rate`: rate() is right across a reset, deriv() for a series younger than the
    window), so both paths give one number for one history. `stale_repeats` drops the repeats of a
    counter that always moves (`without_stale_repeats`) first.
    """
    window = rate_window_seconds(step)
    kept = without_stale_repeats(samples, window) if stale_repeats else st.clean(samples)
    if len(kept) < 2:
        return []

    def evaluation_times() -> Iterator[float]:
        at = math.ceil(kept[0][0] / step) * step
        while at < kept[-1][0] + step - 1e-9:
            yield at
            at += step

    return rates_at(kept, evaluation_times(), window)


# --- statistics --------------------------------------------------------------------------------------
def _stats(samples: Samples, signal: Signal) -> SignalStats | None:
    floor = st.DEFAULT_SAWTOOTH_FLOOR if signal in mn.RATIO_SIGNALS else None
    return st.summarize(samples, activity_floor=mn.ACTIVITY_FLOORS.get(signal), sawtooth_floor=floor)


def throttle_series(clock_events: Samples, violations: dict[str, Samples], step: float) -> Samples:
    """Share of each step the GPU was throttled, from whichever of the two DCGM sources exists.

    The clock-event bitmask gives 1/0 per sample (a throttling bit set or not); the violation counters
    give the nanoseconds held down per second, summed over the throttling reasons (reasons can overlap,
    so the sum is clamped to 1: the gate errs towards "throttled"). Where both exist the larger wins.
    """
    flags = st.throttle_flags(clock_events)
    held = st.sum_aligned(
        [window_counter_rates(samples, step) for samples in violations.values() if samples], step
    )
    fractions = [(t, min(1.0, v / mn.VIOLATION_NS_PER_SECOND)) for t, v in held if v >= 0]
    if not flags or not fractions:
        return flags or fractions
    by_step: dict[int, Sample] = {}
    for t, v in [*flags, *fractions]:
        slot = st.bucket(t, step)
        if slot not in by_step or v > by_step[slot][1]:
            by_step[slot] = (t, v)
    return sorted(by_step.values())


def _busy_samples(device: DeviceSeries) -> Samples:
    return device.signals.get(Signal.GR_ENGINE_ACTIVE) or device.signals.get(Signal.GPU_UTIL) or []


def _cadvisor_rate(
    series: PodSeries, metric: str, step: float, *, counter: bool = True, combine: str = "sum"
) -> Samples:
    """Rate (or gauge) of a cAdvisor-labelled metric for the pod: its app containers combined (summed,
    or the largest for a per-container peak), else the pod level."""
    app: list[Samples] = []
    pod_level: list[Samples] = []
    for (name, container, _extra), samples in series.cadvisor.items():
        if name != metric:
            continue
        values = (
            window_counter_rates(samples, step, stale_repeats=metric in ALWAYS_MOVING_COUNTERS)
            if counter
            else st.clean(samples)
        )
        (pod_level if container in mn.CADVISOR_NON_APP_CONTAINERS else app).append(values)
    chosen = pod_level if metric in mn.CADVISOR_NETWORK_METRICS or not app else app
    if metric in mn.CADVISOR_NETWORK_METRICS and not pod_level:
        chosen = app
    if not chosen:
        return []
    return st.max_aligned(chosen, step) if combine == "max" else st.sum_aligned(chosen, step)


def _board_of(device: DeviceSeries, boards: dict[tuple[str, str], DeviceSeries]) -> DeviceSeries | None:
    """The board-level series of a pod's device (its GPU's, for a MIG slice), if any."""
    return boards.get(
        (device.node or "", device.uuid.rsplit("-", 1)[0] if device.mig_profile else device.uuid)
    )


def _device_signals(
    device: DeviceSeries, boards: dict[tuple[str, str], DeviceSeries]
) -> dict[Signal, Samples]:
    """A pod's device signals, completed by its board's series for the signals the pod's lack."""
    signals = dict(device.signals)
    board = _board_of(device, boards)
    if board is not None:
        for signal, samples in board.signals.items():
            signals.setdefault(signal, samples)
    return signals


def timelines_of(collector: SeriesCollector, keys: Iterable[Key], step: float) -> dict[str, Timeline]:
    """The plotted series of each workload (by `WorkloadRef.key`) from the pods `keys`' raw samples."""
    per_workload: dict[str, dict[str, list[Samples]]] = defaultdict(lambda: defaultdict(list))
    for key in keys:
        series = collector.pods[key]
        parts = per_workload[collector.inventory.workload_of(*key).key]
        for device in series.devices.values():
            signals = _device_signals(device, collector.boards)
            parts["busy"].append(signals.get(Signal.GR_ENGINE_ACTIVE) or signals.get(Signal.GPU_UTIL) or [])
            parts["sm"].append(signals.get(Signal.SM_ACTIVE, []))
            parts["memory"].append(signals.get(Signal.FB_USED_MIB, []))
        parts["cpu"].append(_cadvisor_rate(series, mn.CADVISOR_CPU_USAGE, step))
    return {
        ref_key: timeline_of(
            busy=parts["busy"],
            sm_active=parts["sm"],
            cpu_cores=parts["cpu"],
            memory_used_mib=parts["memory"],
            step_seconds=step,
        )
        for ref_key, parts in per_workload.items()
    }


def pod_observation(
    series: PodSeries,
    info: PodInfo | None,
    shared: dict[tuple[str | None, str], int],
    boards: dict[tuple[str, str], DeviceSeries],
    step: float,
    warnings: list[str],
) -> PodObservation:
    """Statistics of one pod from its raw samples."""
    gpus: list[GPUObservation] = []
    node = info.node if info and info.node else None
    for device in series.devices.values():
        node = node or device.node
        signals = _device_signals(device, boards)
        clock_events = device.clock_events
        violations = dict(device.violations)
        board = _board_of(device, boards)
        if board is not None:
            clock_events = clock_events or board.clock_events
            violations = violations or dict(board.violations)
        gpu_stats: dict[Signal, SignalStats] = {}
        for signal, samples in signals.items():
            summary = _stats(samples, signal)
            if summary is not None:
                gpu_stats[signal] = summary
            elif samples:
                warnings.append(
                    f"{series.namespace}/{series.pod}: {signal.value} on {device.uuid} has only NaN or DCGM "
                    "blank values"
                )
        holes = st.gaps([t for t, v in _busy_samples(device) if not st.is_missing(v)], step)
        if holes:
            longest = max(b - a for a, b in holes)
            warnings.append(
                f"{series.namespace}/{series.pod}: {len(holes)} gap(s) in the GPU series of {device.uuid}, "
                f"the longest {longest:.0f}s"
            )
        throttle = _stats(throttle_series(clock_events, violations, step), Signal.THROTTLE_FRACTION)
        if throttle is not None:
            gpu_stats[Signal.THROTTLE_FRACTION] = throttle
        memory_total = None
        used, free = gpu_stats.get(Signal.FB_USED_MIB), gpu_stats.get(Signal.FB_FREE_MIB)
        if used is not None and free is not None:
            totals = st.sum_aligned([signals[Signal.FB_USED_MIB], signals[Signal.FB_FREE_MIB]], step)
            memory_total = max(v for _, v in totals) if totals else None
        gpus.append(
            GPUObservation(
                uuid=device.uuid,
                index=device.index,
                node=device.node,
                model_name=device.model_name,
                mig_profile=device.mig_profile,
                shared_by_pods=max(1, shared.get((device.node, device.uuid), 1)),
                stats=gpu_stats,
                xid_codes=sorted(device.xid_codes),
                memory_total_mib=memory_total,
            )
        )
    pod_stats: dict[Signal, SignalStats] = {}
    rates: dict[Signal, Samples] = {}
    for source in mn.POD_SIGNAL_SOURCES:
        rates[source.signal] = _cadvisor_rate(
            series, source.metric, step, counter=source.counter, combine=source.combine
        )
        summary = _stats(rates[source.signal], source.signal)
        if summary is not None:
            pod_stats[source.signal] = summary
    for pressure in mn.PRESSURE_SOURCES:  # waiting ("some"), else stalled ("full"): mn.PressureSource
        pressed = _cadvisor_rate(series, pressure.waiting, step, combine="max") or _cadvisor_rate(
            series, pressure.stalled, step, combine="max"
        )
        summary = _stats(pressed, pressure.signal)
        if summary is not None:
            pod_stats[pressure.signal] = summary
    throttled = st.ratio_series(
        _cadvisor_rate(series, mn.CADVISOR_CPU_THROTTLED_PERIODS, step),
        _cadvisor_rate(series, mn.CADVISOR_CPU_PERIODS, step),
        step,
    )
    throttled_stats = _stats(throttled, Signal.CPU_THROTTLED_RATIO)
    if throttled_stats is not None:
        pod_stats[Signal.CPU_THROTTLED_RATIO] = throttled_stats
    for signal, samples in _serving_rates(series, step).items():
        summary = _stats(samples, signal)
        if summary is not None:
            pod_stats[signal] = summary
    correlation = None
    busy = st.mean_aligned([_busy_samples(d) for d in series.devices.values()], step)
    cpu = rates.get(Signal.CPU_USAGE_CORES) or []
    if busy and cpu:
        limit = info.cpu_limit if info and info.cpu_limit else None
        saturation = [(t, v / limit) for t, v in cpu] if limit else cpu
        correlation = st.aligned_correlation(busy, saturation, step)
    return PodObservation(
        name=series.pod,
        node=node,
        stats=pod_stats,
        gpus=gpus,
        restarts=int(info.restarts) if info else 0,
        oom_killed=info.oom_killed if info else False,
        gpu_cpu_correlation=correlation,
    )


def _serving_rates(series: PodSeries, step: float) -> dict[Signal, Samples]:
    out: dict[Signal, Samples] = {}
    for metric, samples in series.serving.items():
        source = mn.SERVING_SIGNAL_BY_METRIC[metric]
        values = window_counter_rates(samples, step) if source.counter else st.clean(samples)
        out.setdefault(source.signal, values)
    return out


# --- assembly ------------------------------------------------------------------------------------------
def allocation_for(
    ref: WorkloadRef, infos: list[PodInfo], pods: list[PodObservation], inventory: Inventory
) -> Allocation:
    """The workload's current allocation (per pod) from its pods' requests and limits."""
    gpu_pods = [i for i in infos if i.gpu_resource] or infos
    first = gpu_pods[0] if gpu_pods else None
    node = first.node if first else None
    if node is None:
        node = next((p.node for p in pods if p.node), None)
    product = inventory.node_product.get(node or "")
    mig_profile = None
    gpu_resource = first.gpu_resource if first and first.gpu_resource else "nvidia.com/gpu"
    if gpu_resource.startswith("nvidia.com/mig-"):
        mig_profile = gpu_resource.removeprefix("nvidia.com/mig-")
    elif gpu_resource == "nvidia.com/gpu" and product and "-MIG-" in product:
        mig_profile = product.split("-MIG-", 1)[1]
    if mig_profile is None:
        mig_profile = next((g.mig_profile for p in pods for g in p.gpus if g.mig_profile), None)
    model_name = next((g.model_name for p in pods for g in p.gpus if g.model_name), None)
    gpu_count = (
        int(first.gpu_count) if first and first.gpu_count else max((len(p.gpus) for p in pods), default=0)
    )
    memory = next((g.memory_total_mib for p in pods for g in p.gpus if g.memory_total_mib), None)
    if memory is None and node in inventory.node_memory_mib and mig_profile is None:
        memory = inventory.node_memory_mib[node or ""]
    shared = any(g.shared_by_pods > 1 for p in pods for g in p.gpus)
    sharing_label = inventory.node_sharing.get(node or "", "none")
    if mig_profile:
        sharing = "mig"
    elif any(i.hami for i in infos):
        sharing = "hami"
    elif gpu_resource == "nvidia.com/gpu.shared" or shared or sharing_label in ("time-slicing", "mps"):
        sharing = sharing_label if sharing_label in ("time-slicing", "mps") else "time-slicing"
    else:
        sharing = "exclusive"
    workload_type = next((i.workload_type for i in infos if i.workload_type), None)
    if workload_type is None and ref.kind in ("Job", "CronJob"):
        workload_type = "training"
    if workload_type is None and any(Signal.REQUESTS_PER_S in p.stats for p in pods):
        workload_type = "inference"
    replicas = inventory.replicas.get((ref.namespace, ref.kind, ref.name), max(1, len(pods)))
    return Allocation(
        gpu_resource=gpu_resource,
        gpu_count=max(0, gpu_count),
        gpu_model=product.split("-MIG-", 1)[0]
        if product
        else (model_name.replace(" ", "-") if model_name else None),
        gpu_memory_mib=memory,
        mig_profile=mig_profile,
        sharing=sharing,
        cpu_request_cores=first.cpu_request if first else None,
        cpu_limit_cores=first.cpu_limit if first else None,
        memory_request_bytes=first.memory_request if first else None,
        memory_limit_bytes=first.memory_limit if first else None,
        replicas=max(0, replicas),
        hpa=inventory.hpa_for(ref),
        workload_type=workload_type,
    )


def without_board_activity(pod: PodObservation) -> PodObservation:
    """The pod with the board's utilisation and PCIe/NVLink traffic removed from its MIG slices.

    dcgm-exporter labels those whole-board fields with each GPU instance, so on a slice they are every
    tenant's sum (`mn.DCGM_BOARD_ACTIVITY_METRICS`); whole GPUs keep them.
    """
    if not any(g.mig_profile and mn.BOARD_ACTIVITY_SIGNALS & g.stats.keys() for g in pod.gpus):
        return pod
    gpus = [
        g.model_copy(
            update={"stats": {s: v for s, v in g.stats.items() if s not in mn.BOARD_ACTIVITY_SIGNALS}}
        )
        if g.mig_profile
        else g
        for g in pod.gpus
    ]
    return pod.model_copy(update={"gpus": gpus})


def assemble_windows(
    inventory: Inventory,
    pods: dict[Key, PodObservation],
    workload_stats: dict[str, dict[Signal, SignalStats]],
    start: datetime,
    end: datetime,
    step_seconds: float,
    source: str,
    pod_warnings: dict[Key, list[str]] | None = None,
    namespace: str | None = None,
    workload: str | None = None,
) -> list[WorkloadWindow]:
    """Group pod observations by owning workload into `WorkloadWindow`s (GPU workloads only)."""
    groups: dict[str, tuple[WorkloadRef, list[Key]]] = {}
    for key in sorted(pods):
        ref = inventory.workload_of(*key)
        groups.setdefault(ref.key, (ref, []))[1].append(key)
    windows: list[WorkloadWindow] = []
    for ref_key, (ref, keys) in sorted(groups.items()):
        if namespace is not None and ref.namespace != namespace:
            continue
        if workload is not None and workload not in (ref.name, f"{ref.kind}/{ref.name}"):
            continue
        observations = [without_board_activity(pods[k]) for k in keys]
        infos = [inventory.pods[k] for k in keys if k in inventory.pods]
        if not any(o.gpus for o in observations) and not any(i.gpu_resource for i in infos):
            continue  # not a GPU workload
        warnings: list[str] = []
        for k in keys:
            warnings.extend((pod_warnings or {}).get(k, []))
            if k not in inventory.pods or inventory.pods[k].owner_kind is None:
                warnings.append(f"{k[0]}/{k[1]}: no kube_pod_owner series; treated as a bare pod")
        if not any(o.gpus for o in observations):
            warnings.append("no GPU series for any pod of this workload (is dcgm-exporter mapping pods?)")
        windows.append(
            WorkloadWindow(
                workload=ref,
                start=start,
                end=end,
                step_seconds=step_seconds,
                allocation=allocation_for(ref, infos, observations, inventory),
                pods=observations,
                stats=workload_stats.get(ref_key, {}),
                source=source,
                warnings=sorted(set(warnings)),
            )
        )
    return windows


def infer_step(timestamps: Iterable[float]) -> float:
    """Median spacing between distinct timestamps (60 s when there are too few to tell)."""
    ordered = sorted(set(timestamps))
    if len(ordered) < 2:
        return 60.0
    diffs = sorted(b - a for a, b in itertools.pairwise(ordered))
    return max(1.0, diffs[len(diffs) // 2])


def infer_step_of_series(series: Iterable[Iterable[float]]) -> float:
    """The step of several series: the median of each one's own step (60 s without any).

    Replicas on several nodes are scraped at different instants, so the union of their timestamps is
    spaced far closer than any one series; each series' own spacing is the scrape's.
    """
    steps = sorted(infer_step(one) for one in series)
    return steps[(len(steps) - 1) // 2] if steps else 60.0


# --- pods over time: sharers overlap, successors do not ----------------------------------------------
#: Pods on one device that overlap for at most this many steps follow each other (a terminating pod
#: and its successor), they do not share it.
_OVERLAP_STEPS = 2.0


def _device_span(device: DeviceSeries) -> tuple[float, float] | None:
    stamps = [t for samples in device.signals.values() for t, _ in samples]
    return (min(stamps), max(stamps)) if stamps else None


def _pod_span(series: PodSeries) -> tuple[float, float] | None:
    spans = [span for device in series.devices.values() if (span := _device_span(device)) is not None]
    return (min(a for a, _ in spans), max(b for _, b in spans)) if spans else None


def _overlap(first: tuple[float, float], second: tuple[float, float]) -> float:
    return min(first[1], second[1]) - max(first[0], second[0])


def _absorb(earlier: PodSeries, later: PodSeries) -> None:
    """Put an earlier pod's samples in front of its successor's (same devices, same workload)."""
    for uuid, device in earlier.devices.items():
        target = later.devices.setdefault(uuid, device)
        if target is device:
            continue
        for signal, samples in device.signals.items():
            target.signals[signal] = [*samples, *target.signals.get(signal, [])]
        target.clock_events = [*device.clock_events, *target.clock_events]
        for name, samples in device.violations.items():
            target.violations[name] = [*samples, *target.violations.get(name, [])]
        target.xid_codes |= device.xid_codes
    for key, samples in earlier.cadvisor.items():
        later.cadvisor[key] = [*samples, *later.cadvisor.get(key, [])]
    for metric, samples in earlier.serving.items():
        later.serving[metric] = [*samples, *later.serving.get(metric, [])]


def replaced_note(earlier: Key, later: Key) -> str:
    """The warning both sources give when they read a pod and its successor as one pod."""
    return f"{earlier[0]}/{earlier[1]} was replaced by {later[1]} on the same GPU (no overlap in time): read as one pod"


#: A pod as `successions` groups it: (pod, its workload's key, the GPUs it saw, its span in time).
PodSpan = tuple[Key, str, frozenset[tuple[str | None, str]], tuple[float, float]]


def successions(pods: Iterable[PodSpan], step: float) -> list[tuple[Key, Key]]:
    """(earlier, later) pods of one workload that followed each other on the same GPUs, in time order.

    Pods on the same devices that overlap for at most `_OVERLAP_STEPS` steps follow each other (a Job
    retry, a Recreate rollout); a chain a → b → c gives (a, b), (b, c). Both sources read each pair as
    one pod, the later one.
    """
    groups: dict[tuple[str, frozenset[tuple[str | None, str]]], list[tuple[tuple[float, float], Key]]] = (
        defaultdict(list)
    )
    for key, workload, devices, span in pods:
        groups[(workload, devices)].append((span, key))
    pairs: list[tuple[Key, Key]] = []
    for members in groups.values():
        members.sort()
        current_span, current = members[0]
        for span, key in members[1:]:
            follows = _overlap(current_span, span) <= _OVERLAP_STEPS * step
            if follows:
                pairs.append((current, key))
            current_span, current = ((current_span[0], span[1]) if follows else span), key
    return pairs


def merge_successive_pods(collector: SeriesCollector, step: float) -> dict[Key, list[str]]:
    """Read a workload's pods that followed each other on the same GPUs as one pod (the latest).

    A Job retry or a Recreate rollout starts a new pod on the device the old one left; counting both
    as sharers would read the GPU as time-sliced and take the profiling fields away. Returns the
    warnings that say which pods were joined, by the surviving pod.
    """
    pods: list[PodSpan] = []
    for key, series in collector.pods.items():
        span = _pod_span(series)
        if span is not None:
            devices = frozenset((d.node, d.uuid) for d in series.devices.values())
            pods.append((key, collector.inventory.workload_of(*key).key, devices, span))
    notes: dict[Key, list[str]] = defaultdict(list)
    for current, key in successions(pods, step):
        _absorb(collector.pods.pop(current), collector.pods[key])
        earlier = collector.inventory.pods.pop(current, None)
        if earlier is not None and key in collector.inventory.pods:
            collector.inventory.pods[key].restarts += earlier.restarts
            collector.inventory.pods[key].oom_killed |= earlier.oom_killed
        notes[key].extend(notes.pop(current, []))
        notes[key].append(replaced_note(current, key))
    return notes


def sharers_in_time(collector: SeriesCollector, step: float) -> dict[Key, dict[tuple[str | None, str], int]]:
    """For each pod and device: how many pods saw the device at the same time (itself included)."""
    spans: dict[tuple[str | None, str], list[tuple[Key, tuple[float, float]]]] = defaultdict(list)
    for key, series in collector.pods.items():
        for device in series.devices.values():
            span = _device_span(device)
            if span is not None:
                spans[(device.node, device.uuid)].append((key, span))
    out: dict[Key, dict[tuple[str | None, str], int]] = defaultdict(dict)
    for device_key, members in spans.items():
        for key, span in members:
            out[key][device_key] = sum(
                1
                for other, other_span in members
                if other == key or _overlap(span, other_span) > _OVERLAP_STEPS * step
            )
    return out


def windows_from_samples(
    samples: Iterable[ParsedSample],
    *,
    window_seconds: float | None = None,
    at: datetime | None = None,
    step_seconds: float | None = None,
    namespace: str | None = None,
    workload: str | None = None,
    source: str = "openmetrics",
) -> list[WorkloadWindow]:
    """Workload windows from parsed samples in memory (the window ends at `at`, else at the newest sample)."""
    rows = list(samples)
    now = (at or datetime.now(tz=UTC)).timestamp()
    stamps = [ts if ts is not None else now for *_, ts in rows]
    if not stamps:
        return []
    return _windows(
        lambda: iter(rows),
        oldest=min(stamps),
        newest=max(stamps),
        now=now,
        window_seconds=window_seconds,
        at=at,
        step_seconds=step_seconds,
        namespace=namespace,
        workload=workload,
        source=source,
    )


def _windows(
    read_samples: Callable[[], Iterator[ParsedSample]],
    *,
    oldest: float,
    newest: float,
    now: float,
    window_seconds: float | None,
    at: datetime | None,
    step_seconds: float | None,
    namespace: str | None,
    workload: str | None,
    source: str,
    trusted_gpu_targets: Sequence[TrustedTarget] | None = None,
    timelines: dict[str, Timeline] | None = None,
) -> list[WorkloadWindow]:
    """Workload windows from one pass over the samples; only those inside the window are kept, and
    GPU and agent samples only from the trusted targets when those are given (`gpu_targets`). A `timelines`
    dict is filled with each workload's plotted series (`timelines_of`)."""
    end = at.timestamp() if at is not None else newest
    start = max(exposition.TIMESTAMP_MIN, end - window_seconds) if window_seconds is not None else oldest
    collector = SeriesCollector()
    step_candidates: dict[tuple[str, frozenset[tuple[str, str]]], list[float]] = defaultdict(list)
    claims: set[DeviceClaim] = set()
    for name, labels, value, stamp in read_samples():
        ts = stamp if stamp is not None else now
        if start <= ts <= end:
            if trusted_gpu_targets and name in _TRUSTED_ONLY_METRICS:
                if not gpu_targets.served_by_trusted(labels, trusted_gpu_targets):
                    continue
                identity = device_key(labels) if name in _DEVICE_METRICS else None
                pod = mn.first_label(labels, mn.POD_LABELS)
                if identity and pod:
                    namespace_of = mn.first_label(labels, mn.NAMESPACE_LABELS) or ""
                    claims.add(gpu_targets.claim_of(labels, identity[0], namespace_of, pod))
            collector.add(name, labels, ts, value)
            if name in (mn.DCGM_GR_ENGINE_ACTIVE, mn.DCGM_GPU_UTIL):
                step_candidates[(name, frozenset(labels.items()))].append(ts)
    collector.finish_inventory()
    conflicts = device_conflicts(claims)
    refused: dict[Key, list[str]] = defaultdict(list)
    for key, pod_series in collector.pods.items():  # one GPU, two trusted targets, two stories
        for device_id in sorted(set(pod_series.devices) & set(conflicts)):
            del pod_series.devices[device_id]
            refused[key].append(conflicts[device_id].message())
    step = step_seconds or infer_step_of_series(step_candidates.values())
    requesting = attribute_devices(collector)
    replaced = merge_successive_pods(collector, step)
    shared = sharers_in_time(collector, step)
    # Pods known only from GPU series while kube-state-metrics describes other pods: exporter's own pod
    # or an unmapped device; their series are board-level data, not a workload.
    has_ksm = bool(collector.inventory.pods)
    observations: dict[Key, PodObservation] = {}
    pod_warnings: dict[Key, list[str]] = {}
    for key, series in collector.pods.items():
        if (has_ksm and key not in collector.inventory.pods) or (requesting and key not in requesting):
            continue
        warnings: list[str] = [*replaced.get(key, []), *refused.get(key, [])]
        info = collector.inventory.pods.get(key)
        observations[key] = pod_observation(series, info, shared[key], collector.boards, step, warnings)
        if info and info.gpu_resource and not series.devices:
            warnings.append(f"{key[0]}/{key[1]}: requests {info.gpu_resource} but has no GPU series")
        pod_warnings[key] = warnings
    for key, info in collector.inventory.pods.items():
        if key not in observations and info.gpu_resource:
            observations[key] = PodObservation(name=key[1], node=info.node, restarts=int(info.restarts))
            pod_warnings[key] = [
                f"{key[0]}/{key[1]}: requests {info.gpu_resource} but has no GPU or container series"
            ]
    workload_stats = _workload_serving_stats(collector, step)
    if timelines is not None:
        timelines.update(timelines_of(collector, [k for k in observations if k in collector.pods], step))
    windows = assemble_windows(
        collector.inventory,
        observations,
        workload_stats,
        datetime.fromtimestamp(start, tz=UTC),
        datetime.fromtimestamp(end, tz=UTC),
        step,
        source,
        pod_warnings,
        namespace,
        workload,
    )
    trust = gpu_targets.trust_warnings({}, trusted_gpu_targets)
    return [w.model_copy(update={"warnings": [*w.warnings, *trust]}) for w in windows] if trust else windows


def attribute_devices(collector: SeriesCollector) -> set[Key]:
    """Pods that request a GPU resource (kube-state-metrics); other pods' device series become board data.

    A ServiceMonitor or PodMonitor adds the scraped pod's own `namespace`/`pod` to series that have
    none: idle GPUs and dcgm-exporter's device-level copies then look like the exporter's (or the
    agent's) devices. Only pods that request a GPU own devices; without any request series (no
    kube-state-metrics) nothing changes.
    """
    requesting = {key for key, info in collector.inventory.pods.items() if info.gpu_resource}
    if not requesting:
        return requesting
    for key in [k for k, series in collector.pods.items() if k not in requesting and series.devices]:
        for uuid, device in collector.pods[key].devices.items():
            board = collector.boards.setdefault((device.node or "", uuid), device)
            if board is not device:
                for signal, samples in device.signals.items():
                    board.signals.setdefault(signal, samples)
        collector.pods[key].devices.clear()
    return requesting


def _workload_serving_stats(collector: SeriesCollector, step: float) -> dict[str, dict[Signal, SignalStats]]:
    """Serving signals of each workload: the sum over its pods at each step (queue time: the mean)."""
    per_workload: dict[str, dict[Signal, list[Samples]]] = defaultdict(lambda: defaultdict(list))
    for key, series in collector.pods.items():
        ref = collector.inventory.workload_of(*key)
        for signal, samples in _serving_rates(series, step).items():
            per_workload[ref.key][signal].append(samples)
    out: dict[str, dict[Signal, SignalStats]] = {}
    for ref_key, signals in per_workload.items():
        for signal, parts in signals.items():
            combined = (
                st.mean_aligned(parts, step)
                if signal is Signal.QUEUE_TIME_MS
                else st.sum_aligned(parts, step)
            )
            summary = _stats(combined, signal)
            if summary is not None:
                out.setdefault(ref_key, {})[signal] = summary
    return out


def read_openmetrics(
    path: Path,
    *,
    window_seconds: float | None = None,
    at: datetime | None = None,
    step_seconds: float | None = None,
    namespace: str | None = None,
    workload: str | None = None,
    limits: ReadLimits | None = None,
    trusted_gpu_targets: Sequence[TrustedTarget] | None = None,
    timelines: dict[str, Timeline] | None = None,
) -> list[WorkloadWindow]:
    """Workload windows from an OpenMetrics (or Prometheus text) file, plain or gzipped.

    Streamed in two passes (`exposition.scan`, then `exposition.samples`): memory follows the samples
    inside the window, not the file's size. `trusted_gpu_targets` keeps only the GPU and agent series of
    those targets, for files whose series carry their target labels (a `/federate` dump). A `timelines`
    dict is filled with each workload's plotted series, for the HTML report.
    """
    bounds = limits or ReadLimits()
    facts = exposition.scan(path, bounds)
    now = (at or datetime.now(tz=UTC)).timestamp()
    stamps = [t for t in (facts.oldest, facts.newest) if t is not None] + (
        [now] if facts.untimestamped else []
    )
    if not facts.samples or not stamps:
        return []
    return _windows(
        lambda: exposition.samples(path, facts, bounds),
        oldest=min(stamps),
        newest=max(stamps),
        now=now,
        window_seconds=window_seconds,
        at=at,
        step_seconds=step_seconds,
        namespace=namespace,
        workload=workload,
        source="openmetrics",
        trusted_gpu_targets=trusted_gpu_targets,
        timelines=timelines,
    )


class OpenMetricsFile:
    """`WindowSource` over one OpenMetrics (or Prometheus text) file (`read_openmetrics`)."""

    def __init__(
        self,
        path: Path,
        *,
        limits: ReadLimits | None = None,
        step_seconds: float | None = None,
        trusted_gpu_targets: Sequence[TrustedTarget] | None = None,
    ):
        self.path = path
        self.limits = limits
        self.step_seconds = step_seconds
        self.trusted_gpu_targets = trusted_gpu_targets

    @property
    def where(self) -> str:
        return str(self.path)

    def read_windows(
        self,
        window_seconds: float,
        at: datetime | None = None,
        *,
        scope: Scope = EVERYWHERE,
        owners: ExtraOwners | None = None,
    ) -> WindowRead:
        """The file's windows (a file has no API owners to add: `owners` is not used)."""
        windows = read_openmetrics(
            self.path,
            window_seconds=window_seconds,
            at=at,
            step_seconds=self.step_seconds,
            namespace=scope.namespace,
            workload=scope.workload,
            limits=self.limits,
            trusted_gpu_targets=self.trusted_gpu_targets,
        )
        return WindowRead(windows=windows)

    def read_capacity(self, at: datetime | None = None) -> ClusterCapacity:
        """Node pools from the file's kube-state-metrics series (`capacity.capacity_from_file`)."""
        return capacity_from_file(self.path, self.limits)

    def read_unheld_gpus(self, at: datetime, window_seconds: float) -> list[UnheldGPU]:
        """The unheld GPUs' maxima over the whole file (`capacity.unheld_gpus_from_file`)."""
        return unheld_gpus_from_file(self.path, self.limits)
