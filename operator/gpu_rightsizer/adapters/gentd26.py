"""The Alibaba GenTD26 serving trace (cluster-trace-v2026-GenAI) → `WorkloadWindow`s.

The trace is a Stable Diffusion serving fleet: per container GPU duty cycle (the `DCGM_FI_DEV_GPU_UTIL`
idea, percent), GPU memory used (bytes), requests per second and gateway queueing time, plus the
gateway's queue length for the whole fleet. Values are anonymised by scaling, so shapes and ratios
matter, not absolutes. Two views:

- `container_windows`: every container as its own single-replica workload (idle? oversized?);
- `fleet_window`: the fleet as one Deployment whose replicas are the containers seen in the window,
  with fleet-level requests/s (sum), queue length (gateway) and queueing time (mean), to judge over-
  and under-replication.

The data is read in place (tar.gz of CSV, `value,timestamp_anon,container_ip`); it is never copied.
"""

from __future__ import annotations

import csv
import io
import tarfile
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from gpu_rightsizer.adapters.openmetrics import OpenMetricsError
from gpu_rightsizer.logic import stats as st
from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.observation import (
    Allocation,
    GPUObservation,
    PodObservation,
    Signal,
    SignalStats,
    WorkloadRef,
    WorkloadWindow,
)

Samples = list[tuple[float, float]]

FILES = {
    "duty": "pod_gpu_duty_cycle_anon",
    "memory": "pod_gpu_memory_used_bytes_anon",
    "qps": "qps",
    "queue_size": "queue_size_raw_anon",
    "queue_rt": "queue_rt_raw_anon",
}
MIB = 1024.0 * 1024.0
STEP_SECONDS = 57.0  # the trace's sampling period (README: about one sample every 57 s)


class TraceError(OpenMetricsError):
    """The trace folder or one of its files cannot be read."""


def default_location(repo_root: Path) -> Path:
    """Where the shared data lives relative to a checkout: `../shared/data/alibaba-gentd26`."""
    return repo_root.parent / "shared" / "data" / "alibaba-gentd26"


@dataclass
class Trace:
    """Per-container series of the trace (container key: the MD5 `container_ip`)."""

    duty: dict[str, Samples] = field(default_factory=lambda: defaultdict(list))
    memory: dict[str, Samples] = field(default_factory=lambda: defaultdict(list))
    qps: dict[str, Samples] = field(default_factory=lambda: defaultdict(list))
    queue_rt: dict[str, Samples] = field(default_factory=lambda: defaultdict(list))
    queue_size: Samples = field(default_factory=list)

    @property
    def containers(self) -> list[str]:
        """Containers that report a GPU duty cycle."""
        return sorted(self.duty)

    @property
    def span(self) -> tuple[float, float]:
        """First and last timestamp of the duty-cycle series."""
        stamps = [t for series in self.duty.values() for t, _ in series]
        if not stamps:
            raise TraceError("the trace has no duty-cycle samples")
        return min(stamps), max(stamps)


def _rows(directory: Path, stem: str) -> list[dict[str, str]]:
    archive = directory / f"{stem}.tar.gz"
    plain = directory / f"{stem}.csv"
    try:
        if plain.exists():
            return list(csv.DictReader(plain.open(encoding="utf-8")))
        with tarfile.open(archive, "r:gz") as tar:
            member = next((m for m in tar.getmembers() if m.name.endswith(".csv")), None)
            if member is None:
                raise TraceError(f"{archive}: holds no CSV file")
            handle = tar.extractfile(member)
            if handle is None:
                raise TraceError(f"{archive}: {member.name} is not a regular file")
            return list(csv.DictReader(io.TextIOWrapper(handle, encoding="utf-8")))
    except (OSError, tarfile.TarError, csv.Error, UnicodeDecodeError) as error:
        raise TraceError(f"{archive}: cannot read: {error}") from error


def _series(rows: list[dict[str, str]], origin: str, *, keep_empty: bool = False) -> dict[str, Samples]:
    out: dict[str, Samples] = defaultdict(list)
    for number, row in enumerate(rows, start=2):
        container = row.get("container_ip") or ""
        if not container and not keep_empty:
            continue
        try:
            out[container].append((float(row["timestamp_anon"]), float(row["value"])))
        except (KeyError, TypeError, ValueError) as error:
            raise TraceError(
                f"{origin}: line {number}: expected value,timestamp_anon,container_ip: {error}"
            ) from error
    for samples in out.values():
        samples.sort()
    return out


def load_trace(directory: Path) -> Trace:
    """Read the trace files that the replay uses."""
    if not directory.is_dir():
        raise TraceError(f"{directory}: no such folder")
    trace = Trace()
    trace.duty = _series(_rows(directory, FILES["duty"]), FILES["duty"])
    trace.memory = _series(_rows(directory, FILES["memory"]), FILES["memory"])
    qps_rows = [r for r in _rows(directory, FILES["qps"]) if r.get("request_type", "") != "API Requests"]
    trace.qps = _series(qps_rows, FILES["qps"])
    trace.queue_rt = _series(_rows(directory, FILES["queue_rt"]), FILES["queue_rt"])
    trace.queue_size = _series(
        _rows(directory, FILES["queue_size"]), FILES["queue_size"], keep_empty=True
    ).get("", [])
    return trace


def _within(samples: Samples, start: float, end: float) -> Samples:
    return [(t, v) for t, v in samples if start <= t <= end]


def _stats(samples: Samples, signal: Signal) -> SignalStats | None:
    floor = st.DEFAULT_SAWTOOTH_FLOOR if signal in mn.RATIO_SIGNALS else None
    return st.summarize(samples, activity_floor=mn.ACTIVITY_FLOORS.get(signal), sawtooth_floor=floor)


def _regular_rate(samples: Samples, start: float, end: float, step: float) -> Samples:
    """A sparse per-container QPS series (reported only while requests arrive) on a regular grid, 0 elsewhere."""
    by_step = {round(t / step): v for t, v in samples}
    first, last = round(start / step), round(end / step)
    return [(index * step, by_step.get(index, 0.0)) for index in range(first, last + 1)]


def _pod(
    trace: Trace, container: str, start: float, end: float, memory_total_mib: float, node: str
) -> PodObservation:
    duty = [(t, v / 100.0) for t, v in _within(trace.duty.get(container, []), start, end)]
    used = [(t, v / MIB) for t, v in _within(trace.memory.get(container, []), start, end)]
    gpu_stats: dict[Signal, SignalStats] = {}
    for signal, samples in (
        (Signal.GPU_UTIL, duty),
        (Signal.FB_USED_MIB, used),
        (Signal.FB_FREE_MIB, [(t, max(0.0, memory_total_mib - v)) for t, v in used]),
    ):
        summary = _stats(samples, signal)
        if summary is not None:
            gpu_stats[signal] = summary
    pod_stats: dict[Signal, SignalStats] = {}
    qps = _regular_rate(_within(trace.qps.get(container, []), start, end), start, end, STEP_SECONDS)
    for signal, samples in (
        (Signal.REQUESTS_PER_S, qps),
        (Signal.QUEUE_TIME_MS, _within(trace.queue_rt.get(container, []), start, end)),
    ):
        summary = _stats(samples, signal)
        if summary is not None:
            pod_stats[signal] = summary
    name = f"gentd26-{container[:12]}"
    return PodObservation(
        name=name,
        node=node,
        stats=pod_stats,
        gpus=[
            GPUObservation(
                uuid=f"GPU-{container[:8]}-{container[8:12]}-{container[12:16]}-{container[16:20]}-{container[20:32]}",
                index="0",
                node=node,
                stats=gpu_stats,
                memory_total_mib=memory_total_mib,
            )
        ],
    )


def _allocation(gpu_model: str, memory_total_mib: float, replicas: int) -> Allocation:
    return Allocation(
        gpu_resource="nvidia.com/gpu",
        gpu_count=1,
        gpu_model=gpu_model,
        gpu_memory_mib=memory_total_mib,
        replicas=replicas,
        workload_type="inference",
    )


def container_windows(
    trace: Trace,
    *,
    start: float | None = None,
    end: float | None = None,
    gpu_model: str = "NVIDIA-H100-80GB-HBM3",
    memory_total_mib: float = 81559.0,
    namespace: str = "gentd26",
) -> list[WorkloadWindow]:
    """Every container as its own single-replica workload over [start, end] (default: the whole trace)."""
    first, last = trace.span
    start, end = start if start is not None else first, end if end is not None else last
    windows = []
    for container in trace.containers:
        pod = _pod(trace, container, start, end, memory_total_mib, node=f"node-{container[:6]}")
        warnings = ["GenTD26 values are anonymised by scaling: shapes and ratios hold, absolutes do not"]
        if not trace.qps.get(container):
            warnings.append("no QPS series for this container")
        windows.append(
            WorkloadWindow(
                workload=WorkloadRef(namespace=namespace, kind="Pod", name=pod.name, api_version="v1"),
                start=datetime.fromtimestamp(start, tz=UTC),
                end=datetime.fromtimestamp(end, tz=UTC),
                step_seconds=STEP_SECONDS,
                allocation=_allocation(gpu_model, memory_total_mib, 1),
                pods=[pod],
                stats=dict(pod.stats),
                source="gentd26",
                warnings=warnings,
            )
        )
    return windows


def fleet_window(
    trace: Trace,
    start: float,
    end: float,
    *,
    gpu_model: str = "NVIDIA-H100-80GB-HBM3",
    memory_total_mib: float = 81559.0,
    namespace: str = "gentd26",
    name: str = "sd-serving",
    min_coverage: float = 0.5,
) -> WorkloadWindow:
    """The whole fleet as one Deployment over [start, end]: replicas are the containers that ran through it.

    A container counts as a replica when it reported at least `min_coverage` of the window's samples;
    containers that came or went during the window are left out (and counted in a warning).
    """
    expected = (end - start) / STEP_SECONDS
    seen = [c for c in trace.containers if _within(trace.duty[c], start, end)]
    active = [c for c in seen if len(_within(trace.duty[c], start, end)) >= min_coverage * expected]
    pods = [_pod(trace, c, start, end, memory_total_mib, node=f"node-{c[:6]}") for c in active]
    qps_parts = [
        _regular_rate(_within(trace.qps.get(c, []), start, end), start, end, STEP_SECONDS) for c in active
    ]
    workload_stats: dict[Signal, SignalStats] = {}
    for signal, samples in (
        (Signal.REQUESTS_PER_S, st.sum_aligned(qps_parts, STEP_SECONDS)),
        (Signal.QUEUE_LENGTH, _within(trace.queue_size, start, end)),
        (
            Signal.QUEUE_TIME_MS,
            st.mean_aligned([_within(trace.queue_rt.get(c, []), start, end) for c in active], STEP_SECONDS),
        ),
    ):
        summary = _stats(samples, signal)
        if summary is not None:
            workload_stats[signal] = summary
    return WorkloadWindow(
        workload=WorkloadRef(namespace=namespace, kind="Deployment", name=name),
        start=datetime.fromtimestamp(start, tz=UTC),
        end=datetime.fromtimestamp(end, tz=UTC),
        step_seconds=STEP_SECONDS,
        allocation=_allocation(gpu_model, memory_total_mib, len(active)),
        pods=pods,
        stats=workload_stats,
        source="gentd26",
        warnings=[
            "GenTD26 values are anonymised by scaling: shapes and ratios hold, absolutes do not",
            *(
                [f"{len(seen) - len(active)} container(s) ran for only part of the window and are left out"]
                if len(seen) > len(active)
                else []
            ),
        ],
    )
