"""Re-render a 1 s recording the way a real cluster's collection stores it.

The H200 recordings (tests/fixtures/h200/) are 40–125 s of 1 s samples from the node agent, with no
dcgm-exporter, cAdvisor or Prometheus in between. A `Variant` says how a cluster would have stored the
same work, and `render` writes that as an OpenMetrics file:

- **stretch:** a seeded moving-block bootstrap (8 s blocks) to an hour or more; every series follows
  one block sequence, so CPU and GPU stay aligned; counters are rebuilt from their 1 s increments;
- **dcgm-exporter:** profiling fields (`DCGM_FI_PROF_*`) as the mean over a 30 s collection, device
  fields as the value at collection time, or 1 s instantaneous readings; stamped with the scrape time;
- **cAdvisor:** housekeeping every U(10, 20) s; samples stamped with cAdvisor's own time (Prometheus
  `honor_timestamps`) or with the scrape time (kube-prometheus), so a stale value repeats;
- **perturbations:** 5 % missing scrapes per target, a container restart, a pod replaced on the same
  GPU, a second replica on another node, ±0.2-core CPU noise, a bursty sidecar, no node agent,
  dcgm-exporter's default counters only, another CPU limit, a server's request rate thinned.

`sim.resolution` keeps the simpler tile-and-coarsen used by the calibration tests.
"""

from __future__ import annotations

import gzip
import itertools
import math
import random
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_rightsizer.adapters import exposition
from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.sim.backfill import SeriesStore

if TYPE_CHECKING:
    from gpu_rightsizer.logic.thresholds import EngineSettings
    from gpu_rightsizer.model.observation import WorkloadWindow
    from gpu_rightsizer.model.result import Analysis

LabelKey = tuple[tuple[str, str], ...]
SeriesKey = tuple[str, LabelKey]

#: dcgm-exporter's default collection interval (`-c 30000`).
DCGM_COLLECT_SECONDS = 30.0
#: Length of the bootstrap's blocks: long enough to keep a loader's step pattern, short enough to mix.
BLOCK_SECONDS = 8
#: Idle floors measured on the H200 (tests/fixtures/h200/idle-holder): what a GPU with a context reads.
IDLE_FLOORS: dict[str, float] = {mn.DCGM_GR_ENGINE_ACTIVE: 6e-5}

#: Profiling fields dcgm-exporter's default-counters.csv leaves commented out.
NOT_IN_DEFAULT_COUNTERS: frozenset[str] = frozenset(
    {
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
    }
)
PERTURBATIONS = (
    "gaps",
    "container-restart",
    "pod-replaced",
    "second-replica",
    "noise",
    "sidecar",
    "no-agent",
    "default-counters",
)


@dataclass(frozen=True)
class Variant:
    """One way of collecting a recording; the defaults are a 30 s scrape of a default install."""

    scrape_seconds: float = 30.0
    #: "average": profiling fields averaged over dcgm-exporter's 30 s collection; "instant": 1 s readings.
    dcgm: str = "average"
    #: "honoured": cAdvisor's own sample time; "scrape": the scrape time (stale values repeat).
    cadvisor_timestamps: str = "honoured"
    housekeeping_seconds: tuple[float, float] = (10.0, 20.0)
    perturbation: str | None = None
    #: A new CPU limit (and request) in cores; usage above it is capped and counted as throttled.
    cpu_limit: float | None = None
    #: The request rate as a share of the recorded one (serving recordings; GPU work thinned per second).
    request_share: float | None = None
    seconds: float = 4000.0
    seed: int = 0

    def label(self) -> str:
        """Short name of what this variant changes from the base."""
        parts = []
        if self.scrape_seconds != 30.0:
            parts.append(f"scrape {self.scrape_seconds:g}s")
        if self.dcgm != "average":
            parts.append(f"dcgm {self.dcgm}")
        if self.cadvisor_timestamps != "honoured":
            parts.append("cadvisor scrape-ts")
        if self.perturbation:
            parts.append(self.perturbation)
        if self.cpu_limit is not None:
            parts.append(f"cpu limit {self.cpu_limit:g}")
        if self.request_share is not None:
            parts.append(f"requests 1/{1 / self.request_share:g}")
        return ", ".join(parts) or "base"


@dataclass
class Recording:
    """A recording on a 1 s grid: each series' value at every second (carried forward over holes)."""

    name: str
    seconds: int
    start: float
    series: dict[SeriesKey, list[float]]
    counters: frozenset[str]


def _is_counter(name: str) -> bool:
    return name.endswith("_total")


def load(path: Path) -> Recording:
    """A recording from an OpenMetrics file (plain or gzipped) of ~1 s samples."""
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()
    by_series: dict[SeriesKey, list[tuple[float, float]]] = defaultdict(list)
    for name, labels, value, stamp in exposition.parse_text(text, str(path)):
        if stamp is not None and not math.isnan(value):
            by_series[(name, tuple(sorted(labels.items())))].append((stamp, value))
    start = min(points[0][0] for points in by_series.values() if points)
    end = max(max(t for t, _ in points) for points in by_series.values())
    seconds = round(end - start) + 1
    grid: dict[SeriesKey, list[float]] = {}
    for key, points in by_series.items():
        points.sort()
        values: list[float | None] = [None] * seconds
        for stamp, value in points:
            values[min(seconds - 1, max(0, round(stamp - start)))] = value
        last = points[0][1]
        filled: list[float] = []
        for present in values:
            last = last if present is None else present
            filled.append(last)
        grid[key] = filled
    counters = frozenset(name for name, _ in grid if _is_counter(name))
    return Recording(path.name.split(".")[0], seconds, start, grid, counters)


def block_sequence(source_seconds: int, seconds: int, rng: random.Random) -> list[int]:
    """Source second for each output second: random 8 s blocks of the recording, one after another."""
    block = min(BLOCK_SECONDS, source_seconds)
    out: list[int] = []
    while len(out) < seconds:
        first = rng.randrange(0, source_seconds - block + 1)
        out.extend(range(first, first + block))
    return out[:seconds]


def _stretch(values: list[float], is_counter: bool, order: list[int]) -> list[float]:
    """The series along the block sequence; a counter is rebuilt from its 1 s increments."""
    if not is_counter:
        return [values[i] for i in order]
    increments = [0.0] + [max(0.0, b - a) for a, b in itertools.pairwise(values)]
    total = values[0]
    out = []
    for index in order:
        total += increments[index]
        out.append(total)
    return out


def _poisson(rng: random.Random, mean: float) -> int:
    if mean > 30:
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    threshold, count, product = math.exp(-mean), 0, rng.random()
    while product > threshold:
        count += 1
        product *= rng.random()
    return count


#: Recorded request rate of the serving recordings (req/s; tiny-inference from summary.json's step rate).
RECORDED_REQUEST_RATE: dict[str, float] = {"tiny-server": 5.0, "tiny-inference": 200.0}
_GPU_WORK_METRICS = frozenset(
    {
        mn.DCGM_GR_ENGINE_ACTIVE,
        mn.DCGM_GPU_UTIL,
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
    }
)


def _thin(series: dict[SeriesKey, list[float]], name: str, share: float, rng: random.Random) -> None:
    """Each second's GPU work scaled by N/λ₀, N ~ Poisson(share × λ₀): the same server at a lower rate."""
    rate = RECORDED_REQUEST_RATE.get(name)
    if rate is None:
        return
    length = len(next(iter(series.values())))
    factors = [_poisson(rng, share * rate) / rate for _ in range(length)]
    for (metric, _), values in series.items():
        if metric in _GPU_WORK_METRICS:
            floor = IDLE_FLOORS.get(metric, 0.0)
            for i, value in enumerate(values):
                values[i] = floor + max(0.0, value - floor) * factors[i]


def _is_cpu_counter(metric: str) -> bool:
    return metric == mn.CADVISOR_CPU_USAGE


def _change_cpu_limit(series: dict[SeriesKey, list[float]], limit: float) -> None:
    """Requests/limits say `limit`; usage above it is capped, and those periods count as throttled."""
    for (metric, labels), values in series.items():
        if metric in (mn.KSM_POD_LIMITS, mn.KSM_POD_REQUESTS) and dict(labels).get("resource") == "cpu":
            values[:] = [limit] * len(values)
    capped: dict[LabelKey, list[bool]] = {}
    for (metric, labels), values in series.items():
        if not _is_cpu_counter(metric):
            continue
        out, flags, total = [values[0]], [False], values[0]
        for a, b in itertools.pairwise(values):
            used = max(0.0, b - a)
            flags.append(used > limit)
            total += min(used, limit)
            out.append(total)
        values[:] = out
        capped[labels] = flags
    for (metric, labels), values in series.items():
        if metric == mn.CADVISOR_CPU_THROTTLED_PERIODS and labels in capped:
            periods = series.get((mn.CADVISOR_CPU_PERIODS, labels))
            if periods is None:
                continue
            flags, total, out = capped[labels], values[0], [values[0]]
            for i in range(1, len(values)):
                step_periods = max(0.0, periods[i] - periods[i - 1])
                total += step_periods if flags[i] else max(0.0, values[i] - values[i - 1])
                out.append(total)
            values[:] = out


def _add_cpu(series: dict[SeriesKey, list[float]], extra: list[float], container: str | None) -> None:
    """Add `extra` cores per second to the app container's CPU counter, or as a new container's."""
    for (metric, labels), values in list(series.items()):
        if not _is_cpu_counter(metric) or dict(labels).get("container") in ("", "POD", None):
            continue
        if container is None:
            total, out = values[0], [values[0]]
            for i in range(1, len(values)):
                total += max(0.0, values[i] - values[i - 1] + extra[i])
                out.append(total)
            values[:] = out
        else:
            new_labels = tuple(sorted({**dict(labels), "container": container}.items()))
            total, out = 0.0, []
            for value in extra:
                total += max(0.0, value)
                out.append(total)
            series[(metric, new_labels)] = out
        return


def stretched(recording: Recording, variant: Variant, seed_offset: int = 0) -> dict[SeriesKey, list[float]]:
    """Every series at 1 s over `variant.seconds`, with the per-second perturbations applied."""
    rng = random.Random(variant.seed * 7919 + seed_offset)
    seconds = int(variant.seconds)
    order = block_sequence(recording.seconds, seconds, rng)
    series = {
        key: _stretch(values, key[0] in recording.counters, order) for key, values in recording.series.items()
    }
    if variant.request_share is not None:
        _thin(series, recording.name, variant.request_share, rng)
    if variant.cpu_limit is not None:
        _change_cpu_limit(series, variant.cpu_limit)
    if variant.perturbation == "noise":
        _add_cpu(series, [rng.uniform(-0.2, 0.2) for _ in range(seconds)], None)
    elif variant.perturbation == "sidecar":
        bursts: list[float] = []
        while len(bursts) < seconds:
            bursts.extend([max(0.0, rng.gauss(0.2, 0.2))] * rng.randint(5, 20))
        _add_cpu(series, bursts[:seconds], "sidecar")
    elif variant.perturbation == "container-restart":
        _restart_container(series, seconds, rng)
    if variant.perturbation == "no-agent":
        series = {k: v for k, v in series.items() if not k[0].startswith("gpu_rightsizer_")}
    if variant.perturbation == "default-counters":
        series = {k: v for k, v in series.items() if k[0] not in NOT_IN_DEFAULT_COUNTERS}
    return series


def _restart_container(series: dict[SeriesKey, list[float]], seconds: int, rng: random.Random) -> None:
    """One container restart: counters reset, 20 s down, 40 s warm-up, restart count 1 afterwards."""
    at = rng.randrange(seconds // 4, 3 * seconds // 4)
    for (metric, _), values in series.items():
        if metric in recording_counter_metrics(series) and metric.startswith("container_"):
            base = values[at]
            values[at:] = [max(0.0, v - base) for v in values[at:]]
            for i in range(at, min(seconds, at + 20)):
                values[i] = 0.0
        elif metric in _GPU_WORK_METRICS:
            floor = IDLE_FLOORS.get(metric, 0.0)
            for i in range(at, min(seconds, at + 60)):
                ramp = 0.0 if i < at + 20 else (i - at - 20) / 40
                values[i] = floor + (values[i] - floor) * ramp
    restarts = [(k, v) for k, v in series.items() if k[0] == mn.KSM_POD_RESTARTS]
    template = next((k for k in series if k[0] == mn.KSM_POD_INFO), None)
    if not restarts and template is not None:
        labels = {k: v for k, v in template[1] if k in ("namespace", "pod")}
        labels["container"] = "main"
        series[(mn.KSM_POD_RESTARTS, tuple(sorted(labels.items())))] = [0.0] * at + [1.0] * (seconds - at)


def recording_counter_metrics(series: dict[SeriesKey, list[float]]) -> frozenset[str]:
    return frozenset(name for name, _ in series if _is_counter(name))


# --- collection: what a scrape stores --------------------------------------------------------------------
def _target(metric: str) -> str:
    if metric.startswith("DCGM_"):
        return "dcgm"
    if metric.startswith("container_"):
        return "cadvisor"
    if metric.startswith("gpu_rightsizer_"):
        return "agent"
    return "ksm"


def _scrapes(start: float, seconds: float, step: float, rng: random.Random, gaps: bool) -> list[float]:
    offset = rng.uniform(0.0, step)
    times = []
    t = start + offset
    while t < start + seconds:
        if not (gaps and rng.random() < 0.05):
            times.append(t)
        t += step
    return times


def collect(
    series: dict[SeriesKey, list[float]],
    start: float,
    variant: Variant,
    store: SeriesStore,
    rng: random.Random,
    *,
    active: tuple[float, float] | None = None,
) -> None:
    """Scrape 1 s series into `store` as `variant` says (only samples whose time lies in `active`)."""
    seconds = len(next(iter(series.values())))
    step = variant.scrape_seconds
    gaps = variant.perturbation == "gaps"
    scrapes = {t: _scrapes(start, seconds, step, rng, gaps) for t in ("dcgm", "cadvisor", "agent", "ksm")}
    low, high = active or (start, start + seconds)
    collect_phase = rng.uniform(0.0, DCGM_COLLECT_SECONDS)
    housekeeping: list[float] = []
    t = start + rng.uniform(0.0, variant.housekeeping_seconds[1])
    while t < start + seconds:
        housekeeping.append(t)
        t += rng.uniform(*variant.housekeeping_seconds)
    for (metric, labels), values in series.items():
        is_counter = _is_counter(metric)
        label_dict = dict(labels)
        target = _target(metric)
        last_stamp: float | None = None
        for scrape in scrapes[target]:
            if not low <= scrape <= high:
                continue
            index = min(seconds - 1, int(scrape - start))
            stamp = scrape
            if target == "dcgm" and variant.dcgm == "average":
                collected = start + collect_phase + math.floor((scrape - start - collect_phase) / 30.0) * 30.0
                end_index = min(seconds - 1, max(0, int(collected - start)))
                if metric.startswith("DCGM_FI_PROF_"):
                    first = max(0, end_index - int(DCGM_COLLECT_SECONDS) + 1)
                    window = values[first : end_index + 1]
                    value = math.fsum(window) / len(window)
                else:
                    value = values[end_index]
            elif target == "cadvisor":
                done = [h for h in housekeeping if h <= scrape]
                if not done:
                    continue
                sampled = done[-1]
                value = values[min(seconds - 1, int(sampled - start))]
                if variant.cadvisor_timestamps == "honoured":
                    if sampled == last_stamp or sampled < low:
                        continue
                    stamp = sampled
            else:
                value = values[index]
            last_stamp = stamp
            store.add([(metric, label_dict, value, is_counter)], round(stamp, 3))


def _renamed(series: dict[SeriesKey, list[float]], changes: dict[str, str]) -> dict[SeriesKey, list[float]]:
    """The series with label values swapped (pod name, node, UUID) wherever they occur."""
    out = {}
    for (metric, labels), values in series.items():
        new = tuple((k, changes.get(v, v)) for k, v in labels)
        out[(metric, new)] = values
    return out


def _pod_names(series: dict[SeriesKey, list[float]]) -> tuple[str, str | None, str | None]:
    """The recording's pod name, node and GPU UUID."""
    pod = node = uuid = None
    for metric, labels in series:
        found = dict(labels)
        if metric == mn.KSM_POD_INFO:
            pod = found.get("pod", pod)
            node = found.get("node", node)
        if metric.startswith("DCGM_") and "UUID" in found:
            uuid = found["UUID"]
            node = node or found.get("Hostname")
    if pod is None:
        raise ValueError("recording has no kube_pod_info series")
    return pod, node, uuid


def identity(recording: Recording) -> dict[str, str]:
    """The recording's namespace, node and GPU UUID (the label values a `rename` may swap)."""
    found: dict[str, str] = {}
    for metric, labels in recording.series:
        values = dict(labels)
        if metric == mn.KSM_POD_INFO:
            found.setdefault("namespace", values.get("namespace", ""))
            found.setdefault("node", values.get("node", ""))
        if metric.startswith("DCGM_") and "UUID" in values:
            found.setdefault("uuid", values["UUID"])
    return found


def render(
    recording: Recording,
    variant: Variant,
    *,
    rename: dict[str, str] | None = None,
    store: SeriesStore | None = None,
) -> SeriesStore:
    """The recording as a cluster would have stored it under `variant` (into `store` when given).

    `rename` swaps label values (namespace, node, GPU UUID), so several renders of one recording can
    share one Prometheus without their series meeting.
    """
    rng = random.Random(variant.seed * 104729 + 17)
    store = store if store is not None else SeriesStore()
    base = stretched(recording, variant)
    if rename:
        base = _renamed(base, rename)
    start = recording.start
    end = start + variant.seconds
    if variant.perturbation == "pod-replaced":
        pod, _, _ = _pod_names(base)
        cut = start + variant.seconds / 2
        collect(base, start, variant, store, rng, active=(start, cut))
        successor = _renamed(base, {pod: f"{pod}-retry"})
        collect(successor, start, variant, store, rng, active=(cut + 60.0, end))
    elif variant.perturbation == "second-replica":
        pod, node, uuid = _pod_names(base)
        for (metric, _), values in base.items():
            if metric in (mn.KSM_DEPLOYMENT_REPLICAS, mn.KSM_STATEFULSET_REPLICAS):
                values[:] = [2 * v for v in values]
        collect(base, start, variant, store, rng)
        other = stretched(recording, variant, seed_offset=1)
        if rename:
            other = _renamed(other, rename)
        changes = {pod: f"{pod}-b"}
        if node:
            changes[node] = f"{node}-b"
        if uuid:
            changes[uuid] = f"{uuid[:-4]}beef"
        collect(_renamed(other, changes), start, variant, store, rng)
    else:
        collect(base, start, variant, store, rng)
    return store


def write(recording: Recording, variant: Variant, path: Path) -> int:
    """Render into an OpenMetrics file; returns the sample count."""
    with path.open("w", encoding="utf-8") as out:
        return render(recording, variant).write(out)


# --- analysis: the render through `analyze --openmetrics` -----------------------------------------------
def analyze_openmetrics(
    source: Path | Recording,
    variant: Variant,
    *,
    window_seconds: float = 3600.0,
    settings: EngineSettings | None = None,
    workdir: Path | None = None,
) -> tuple[WorkloadWindow, Analysis]:
    """Render, then read and diagnose the file as `analyze --openmetrics FILE --window` does."""
    from gpu_rightsizer.adapters.capacity import capacity_from_file
    from gpu_rightsizer.adapters.openmetrics import read_openmetrics
    from gpu_rightsizer.commands.analyze import diagnose
    from gpu_rightsizer.logic.thresholds import EngineSettings

    recording = source if isinstance(source, Recording) else load(source)
    with tempfile.TemporaryDirectory(dir=workdir) as folder:
        path = Path(folder) / f"{recording.name}.om"
        write(recording, variant, path)
        windows = read_openmetrics(path, window_seconds=window_seconds)
        capacity = capacity_from_file(path)
    if len(windows) != 1:
        raise ValueError(f"{recording.name} ({variant.label()}): {len(windows)} workload windows, not 1")
    window, analysis, _ = next(diagnose(windows, capacity, settings or EngineSettings()))
    return window, analysis
