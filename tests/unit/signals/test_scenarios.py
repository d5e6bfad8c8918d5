"""The simulator core: deterministic, shaped by the pod's actual resources."""

from __future__ import annotations

import itertools
from dataclasses import replace

from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.sim.library import scenario_library
from gpu_rightsizer.sim.scenarios import (
    EXPECTED_CODE,
    LabelStyle,
    PodContext,
    Scenario,
    SeriesSample,
    Shape,
    cluster_series,
    pod_contexts,
    pod_series,
)

T0 = 1_767_225_600.0


def _values(samples: list[SeriesSample], metric: str) -> list[float]:
    return [value for name, _, value, _ in samples if name == metric]


def _mean_busy(scenario: Scenario, ctx: PodContext, minutes: int = 60) -> float:
    values = [
        v
        for i in range(minutes)
        for v in _values(pod_series(scenario, ctx, T0 + 60 * i), mn.DCGM_GR_ENGINE_ACTIVE)
    ]
    return sum(values) / len(values)


def test_every_shape_has_an_expected_code_and_the_library_covers_each_three_times() -> None:
    assert set(EXPECTED_CODE) == set(Shape)
    counts: dict[str, int] = {}
    for scenario in scenario_library():
        counts[scenario.expected.value] = counts.get(scenario.expected.value, 0) + 1
    assert len(counts) == len(set(EXPECTED_CODE.values()))
    assert min(counts.values()) >= 3
    names = [s.name for s in scenario_library()]
    assert len(names) == len(set(names))


def test_same_inputs_give_same_series_and_seeds_differ() -> None:
    scenario = Scenario("a", Shape.HEALTHY, seed=1)
    ctx = pod_contexts(scenario, T0 - 3600, T0)[0]
    assert pod_series(scenario, ctx, T0) == pod_series(scenario, ctx, T0)
    other = pod_series(scenario.with_(seed=2), ctx, T0)
    assert _values(other, mn.DCGM_GR_ENGINE_ACTIVE) != _values(
        pod_series(scenario, ctx, T0), mn.DCGM_GR_ENGINE_ACTIVE
    )


def test_input_pipeline_pod_gets_busier_when_its_cpu_limit_rises() -> None:
    scenario = Scenario("loader", Shape.INPUT_CPU_BOUND, seed=3, cpu_limit=2.0, cpu_demand_per_gpu=12.0)
    ctx = pod_contexts(scenario, T0 - 3600, T0)[0]
    starved = _mean_busy(scenario, ctx)
    fed = _mean_busy(scenario, replace(ctx, cpu_limit=16.0))
    assert starved < 0.3
    assert fed > 0.85
    throttled = [
        v for name, labels, v, _ in pod_series(scenario, ctx, T0) if name == mn.CADVISOR_CPU_THROTTLED_PERIODS
    ]
    assert throttled and throttled[0] > 0


def test_under_replicated_queue_drains_with_more_replicas() -> None:
    scenario = Scenario(
        "svc", Shape.UNDER_REPLICATED, workload_type="inference", traffic_qps=60.0, replicas=2
    )
    ctx = pod_contexts(scenario, T0 - 3600, T0)[0]
    queue_now = _values(pod_series(scenario, ctx, T0), mn.VLLM_REQUESTS_WAITING)[0]
    queue_scaled = _values(pod_series(scenario, replace(ctx, replicas=6), T0), mn.VLLM_REQUESTS_WAITING)[0]
    assert queue_now > 5
    assert queue_scaled == 0


def test_counters_are_monotonic_within_a_pod_life() -> None:
    scenario = Scenario("svc", Shape.OVER_REPLICATED, workload_type="inference", traffic_qps=5.0, replicas=3)
    ctx = pod_contexts(scenario, T0 - 3600, T0)[0]
    for metric in (mn.CADVISOR_CPU_USAGE, mn.VLLM_REQUESTS_TOTAL, mn.CADVISOR_NET_RX):
        series = [_values(pod_series(scenario, ctx, T0 + 30 * i), metric)[0] for i in range(50)]
        assert series == sorted(series), metric


def test_mig_slice_has_no_gpu_util_and_board_fields_lack_pod_labels() -> None:
    scenario = Scenario(
        "slice", Shape.OVERSIZED, mig_profile="2g.20gb", workload_type="inference", traffic_qps=2
    )
    ctx = pod_contexts(scenario, T0 - 3600, T0)[0]
    samples = pod_series(scenario, ctx, T0)
    assert not _values(samples, mn.DCGM_GPU_UTIL)
    engine = [labels for name, labels, _, _ in samples if name == mn.DCGM_GR_ENGINE_ACTIVE]
    assert engine[0][mn.MIG_PROFILE_LABEL] == "2g.20gb"
    power = [labels for name, labels, _, _ in samples if name == mn.DCGM_POWER_USAGE]
    assert "pod" not in power[0]
    fb = _values(samples, mn.DCGM_FB_USED)[0] + _values(samples, mn.DCGM_FB_FREE)[0]
    assert 19000 < fb < 20480


def test_time_sliced_pods_see_identical_device_values() -> None:
    scenario = Scenario("shared", Shape.HEALTHY, replicas=2, pods_per_gpu=2)
    first, second = pod_contexts(scenario, T0 - 3600, T0)
    a = [
        (labels["UUID"], v)
        for n, labels, v, _ in pod_series(scenario, first, T0)
        if n == mn.DCGM_GR_ENGINE_ACTIVE
    ]
    b = [
        (labels["UUID"], v)
        for n, labels, v, _ in pod_series(scenario, second, T0)
        if n == mn.DCGM_GR_ENGINE_ACTIVE
    ]
    assert a == b


def test_exported_label_style_keeps_the_workload_pod_in_exported_pod() -> None:
    scenario = Scenario("a", Shape.HEALTHY)
    ctx = pod_contexts(scenario, T0 - 3600, T0)[0]
    style = LabelStyle(exported_pod_labels=True, hostname_label="hostname")
    labels = next(lab for n, lab, _, _ in pod_series(scenario, ctx, T0, style) if n == mn.DCGM_SM_ACTIVE)
    assert labels["exported_pod"] == ctx.pod
    assert labels["pod"].startswith("dcgm-exporter")
    assert labels["hostname"] == ctx.node
    assert "Hostname" not in labels


def test_pods_emit_nothing_before_they_start_and_ksm_describes_owner_chain() -> None:
    scenario = Scenario("web", Shape.HEALTHY, replicas=2)
    pods = pod_contexts(scenario, T0 - 3600, T0)
    assert pod_series(scenario, pods[0], pods[0].started_at - 1) == []
    ksm = cluster_series(scenario, pods, T0)
    owners = [labels for name, labels, _, _ in ksm if name == mn.KSM_POD_OWNER]
    assert {o["owner_kind"] for o in owners} == {"ReplicaSet"}
    rs = [labels for name, labels, _, _ in ksm if name == mn.KSM_REPLICASET_OWNER]
    assert rs[0]["owner_name"] == "web"
    gpu_limits = [
        v
        for name, labels, v, _ in ksm
        if name == mn.KSM_POD_LIMITS and labels["resource"] == "nvidia_com_gpu"
    ]
    assert gpu_limits == [1.0, 1.0]


def test_counters_stay_monotonic_over_a_daily_traffic_wave() -> None:
    """rate(t) × elapsed went down with the diurnal wave (readers saw resets and ~600 MiB/s rates)."""
    scenario = Scenario(
        "svc-day", Shape.OVER_REPLICATED, workload_type="inference", traffic_qps=40.0, replicas=2
    )
    ctx = pod_contexts(scenario, T0 - 3600, T0)[0]
    metrics = (mn.CADVISOR_CPU_USAGE, mn.CADVISOR_NET_RX, mn.CADVISOR_NET_TX, mn.VLLM_REQUESTS_TOTAL)
    series = {m: [] for m in metrics}  # type: dict[str, list[float]]
    for i in range(0, 26 * 3600, 900):
        samples = pod_series(scenario, ctx, T0 + i)
        for metric in metrics:
            series[metric].append(_values(samples, metric)[0])
    for metric, values in series.items():
        assert values == sorted(values), metric
        rates = [(b - a) / 900 for a, b in itertools.pairwise(values)]
        assert max(rates) < 10 * (sum(rates) / len(rates)) + 1e-9, metric


def test_counters_are_the_same_whatever_the_order_of_reads() -> None:
    scenario = Scenario("svc-order", Shape.INPUT_CPU_BOUND, cpu_limit=2.0, seed=9)
    ctx = pod_contexts(scenario, T0 - 3600, T0)[0]
    late = _values(pod_series(scenario, ctx, T0 + 7200), mn.CADVISOR_CPU_USAGE)[0]
    early = _values(pod_series(scenario, ctx, T0), mn.CADVISOR_CPU_USAGE)[0]
    again = _values(pod_series(scenario, ctx, T0 + 7200), mn.CADVISOR_CPU_USAGE)[0]
    assert early < late == again


def test_cpu_counter_follows_the_pods_actual_limit() -> None:
    """Live mode: the same scenario on a pod with a higher CPU limit burns CPU faster."""
    scenario = Scenario("loader-live", Shape.INPUT_CPU_BOUND, cpu_limit=2.0, seed=10)
    ctx = pod_contexts(scenario, T0 - 3600, T0)[0]
    small = _values(pod_series(scenario, ctx, T0 + 3600), mn.CADVISOR_CPU_USAGE)[0]
    big_ctx = replace(ctx, pod=ctx.pod + "-big", cpu_limit=8.0)
    big = _values(pod_series(scenario, big_ctx, T0 + 3600), mn.CADVISOR_CPU_USAGE)[0]
    assert big > 2 * small


def test_counters_cross_a_long_pause_between_reads_and_stay_monotonic() -> None:
    """Live mode: a pod read once, then again months later (the exporter was down), keeps counting up."""
    scenario = Scenario("svc-pause", Shape.HEALTHY, seed=12)
    ctx = pod_contexts(scenario, T0 - 3600, T0)[0]
    reads = [T0, T0 + 200 * 86400, T0 + 200 * 86400 + 600]
    values = [_values(pod_series(scenario, ctx, t), mn.CADVISOR_CPU_USAGE)[0] for t in reads]
    assert values == sorted(values)
    assert values[1] > values[0] + 100 * 86400 * 0.1  # the pause was counted, not dropped
