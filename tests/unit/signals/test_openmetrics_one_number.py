"""`analyze --openmetrics` reads the same numbers as the Prometheus source (issue 18 §E).

- Counter rates over the Prometheus source's window, max(3 × step, 180 s), as `max(rate(), deriv())`,
  with the repeats of a stale cAdvisor sample dropped (kube-prometheus stamps cAdvisor's samples with
  the scrape time, so a value housekeeping had not refreshed repeats).
- Pods count as sharers of a GPU only while their series overlap in time; a pod replaced on the same
  GPU is the same workload's next pod, not a time-slicing neighbour.
- The step is inferred per series, so replicas scraped at different instants on several nodes keep it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from gpu_rightsizer.adapters.exposition import ParsedSample
from gpu_rightsizer.adapters.openmetrics import (
    window_counter_rates,
    windows_from_samples,
)
from gpu_rightsizer.adapters.prometheus import _sample_spans, sharers_in_time
from gpu_rightsizer.adapters.source import rate_window_seconds
from gpu_rightsizer.model.observation import Signal, WorkloadWindow

START = 1_767_225_600.0
HOUR = 3600.0


def _pod(
    pod: str,
    *,
    node: str = "node-a",
    uuid: str = "GPU-aaaa",
    span: tuple[float, float] = (0.0, HOUR),
    scrape: float = 30.0,
    offset: float = 0.0,
    cpu_at: dict[float, float] | None = None,
    cpu_stamps: list[float] | None = None,
    owner: tuple[str, str] = ("Job", "trainer"),
) -> Iterator[ParsedSample]:
    """One GPU pod's kube-state-metrics, DCGM and cAdvisor samples over `span` (seconds from START).

    `cpu_at` maps a cAdvisor sample time to the CPU counter (seconds of CPU); `cpu_stamps` are the
    times it is stored at (default: its own), so a scrape-stamped stale value can be written.
    """
    ident = {"namespace": "team", "pod": pod}
    first, last = START + span[0], START + span[1]
    yield ("kube_pod_info", {**ident, "node": node}, 1.0, last)
    yield ("kube_pod_owner", {**ident, "owner_kind": owner[0], "owner_name": owner[1]}, 1.0, last)
    gpu_request = {**ident, "container": "main", "resource": "nvidia_com_gpu"}
    yield ("kube_pod_container_resource_requests", gpu_request, 1.0, last)
    yield ("kube_pod_container_resource_limits", gpu_request, 1.0, last)
    cpu = {**ident, "container": "main", "resource": "cpu"}
    yield ("kube_pod_container_resource_limits", cpu, 4.0, last)
    device = {**ident, "UUID": uuid, "gpu": "0", "Hostname": node, "modelName": "NVIDIA H200"}
    t = first + offset
    while t <= last + 1e-9:
        yield ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", device, 0.5, t)
        yield ("DCGM_FI_PROF_SM_ACTIVE", device, 0.4, t)
        yield ("DCGM_FI_DEV_FB_USED", device, 20000.0, t)
        t += scrape
    if cpu_at is not None:
        stamps = cpu_stamps or list(cpu_at)
        for (_, value), stamp in zip(sorted(cpu_at.items()), stamps, strict=True):
            yield ("container_cpu_usage_seconds_total", {**ident, "container": "main"}, value, START + stamp)


def _windows(*pods: Iterator[ParsedSample]) -> list[WorkloadWindow]:
    samples = [sample for pod in pods for sample in pod]
    return windows_from_samples(samples, window_seconds=HOUR, at=datetime.fromtimestamp(START + HOUR, UTC))


def _cpu_p95(window: WorkloadWindow) -> float:
    return window.pods[0].stats[Signal.CPU_USAGE_CORES].p95


def test_the_rate_window_is_the_prometheus_sources() -> None:
    assert rate_window_seconds(15.0) == 180.0
    assert rate_window_seconds(60.0) == 180.0
    assert rate_window_seconds(120.0) == 360.0


def test_a_steady_counter_reads_its_rate_and_a_reset_is_not_a_drop() -> None:
    samples = [(START + 15.0 * i, 10.0 * i) for i in range(40)]
    rates = window_counter_rates(samples, 15.0)
    assert rates and all(v == pytest.approx(10.0 / 15.0, rel=1e-6) for _, v in rates)
    reset = [(t, v if t < START + 300 else v - 200.0 + 5.0) for t, v in samples]
    after = window_counter_rates(reset, 15.0)
    assert min(v for _, v in after) > 0.9 * 10.0 / 15.0, after


def test_cpu_is_a_rate_over_the_window_not_between_two_samples() -> None:
    """A loader alternating 2 cores / idle every 30 s uses 1 core over any 3-minute range query."""
    counter, at = 0.0, {}
    for i in range(121):
        at[30.0 * i] = counter
        counter += 60.0 if i % 2 == 0 else 0.0
    (window,) = _windows(_pod("trainer-0", cpu_at=at))
    assert window.step_seconds == 30.0
    assert 0.8 <= _cpu_p95(window) <= 1.25, window.pods[0].stats[Signal.CPU_USAGE_CORES]


def test_stale_scrape_stamped_cadvisor_samples_are_not_spikes() -> None:
    """1.1 cores; cAdvisor refreshes every 20 s, Prometheus scrapes every 15 s and stamps the scrape."""
    housekeeping = [20.0 * i for i in range(181)]
    at: dict[float, float] = {}
    stamps: list[float] = []
    for k in range(int(HOUR // 15) + 1):
        scrape = 15.0 * k + 1.0
        sampled = max(h for h in housekeeping if h <= scrape)
        at[scrape] = 1.1 * sampled
        stamps.append(scrape)
    (window,) = _windows(_pod("trainer-0", scrape=15.0, cpu_at=at, cpu_stamps=stamps))
    assert _cpu_p95(window) == pytest.approx(1.1, abs=0.12), window.pods[0].stats[Signal.CPU_USAGE_CORES]


def test_an_idle_counter_still_reads_zero() -> None:
    at = {30.0 * i: 5.0 for i in range(121)}
    (window,) = _windows(_pod("trainer-0", cpu_at=at))
    stats = window.pods[0].stats[Signal.CPU_USAGE_CORES]
    assert stats.samples > 60 and stats.max == pytest.approx(0.0, abs=1e-9)


def test_a_pod_replaced_on_the_same_gpu_is_not_a_sharer() -> None:
    (window,) = _windows(
        _pod("trainer-a", span=(0.0, 1800.0)),
        _pod("trainer-b", span=(1860.0, HOUR)),
    )
    assert [p.name for p in window.pods] == ["trainer-b"]
    gpu = window.pods[0].gpus[0]
    assert gpu.shared_by_pods == 1
    assert window.allocation.sharing == "exclusive"
    assert window.allocation.replicas == 1
    assert gpu.stats[Signal.GR_ENGINE_ACTIVE].samples > 110, "both pods' samples are read"
    assert Signal.SM_ACTIVE in gpu.stats
    assert any("replaced by trainer-b" in w for w in window.warnings)


def test_pods_that_overlap_on_one_gpu_still_share_it() -> None:
    windows = _windows(
        _pod("trainer-a", span=(0.0, HOUR)),
        _pod("server-0", span=(600.0, HOUR), owner=("StatefulSet", "server")),
    )
    devices = [g for w in windows for p in w.pods for g in p.gpus]
    assert len(devices) == 2 and all(g.shared_by_pods == 2 for g in devices)


def test_the_step_stays_right_with_replicas_on_two_nodes() -> None:
    (window,) = _windows(
        _pod("trainer-0", node="node-a", uuid="GPU-aaaa", offset=0.0),
        _pod("trainer-1", node="node-b", uuid="GPU-bbbb", offset=13.0),
    )
    assert len(window.pods) == 2
    assert window.step_seconds == 30.0
    coverage = [g.stats[Signal.GR_ENGINE_ACTIVE].samples for p in window.pods for g in p.gpus]
    assert all(math.isclose(c, 120, abs_tol=2) for c in coverage), coverage


def test_the_prometheus_source_counts_sharers_by_the_same_rule() -> None:
    """Its pods' busy range series give their time: successors on one device are not sharers."""
    device = {"GPU-aaaa": {"labels": {"hostname": "node-a"}}}
    devices = {("team", "a"): device, ("team", "b"): device, ("team", "c"): device}
    busy = {
        ("team", "a"): [(START + t, 0.5) for t in range(0, 1800, 60)],
        ("team", "b"): [(START + t, 0.5) for t in range(1860, 3600, 60)],
        ("team", "c"): [(START + t, 0.5) for t in range(0, 3600, 60)],
    }
    shared = sharers_in_time(devices, _sample_spans([], busy), 60.0)
    assert shared[(("team", "a"), "node-a", "GPU-aaaa")] == 2  # a and c
    assert shared[(("team", "b"), "node-a", "GPU-aaaa")] == 2  # b and c
    assert shared[(("team", "c"), "node-a", "GPU-aaaa")] == 3
