"""No window where a veto holds yields a shrink (hypothesis, on the engine's data model).

Issue 18 §A: a capacity-reducing action (a MIG slice of a whole GPU, a shared GPU, a release, fewer
GPUs, fewer replicas) is denied while any veto holds. Each property draws a lightly used GPU, the kind
of window that tempts a shrink, then makes one veto true at a random strength, and asserts that no
action (automatic or advice) takes capacity away, under every sharing strategy.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.logic.logic_builders import allocation, gpu, pod, window
from tests.unit.logic.safety import describe, reduces_capacity

from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.model.codes import SharingStrategy
from gpu_rightsizer.model.observation import Signal, SignalStats, WorkloadWindow

H200 = "NVIDIA H200"
H200_MIB = 143771.0
MIB = 2**20
GIB = 2**30
#: A 25 h window at a 30 s step: long enough for every kind's shortest automatic window.
SAMPLES = 3000
HOURS = 25.0
STEP = 30.0
CPU_LIMITS = [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0]
BOUNDED = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def spread(p50: float, p95: float, *, active: float | None = None) -> SignalStats:
    """A distribution with the given median and p95 (p99 and max a little above)."""
    top = max(p95, p50)
    return SignalStats(
        samples=SAMPLES,
        mean=(p50 + top) / 2,
        p50=p50,
        p95=top,
        p99=top * 1.02,
        max=top * 1.05,
        min=p50 * 0.5,
        active_fraction=active,
    )


class Base:
    """A lightly used whole H200 (the figures a shrink is proposed on), built from drawn numbers."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.busy = draw(st.floats(0.03, 0.45))
        self.width = draw(st.floats(0.3, 0.95))
        self.fb_mib = draw(st.floats(1024.0, 40 * 1024.0))
        self.cpu_limit = draw(st.sampled_from(CPU_LIMITS))
        self.cpu_p50 = draw(st.floats(0.05, 0.5)) * self.cpu_limit
        self.cpu_p95 = min(self.cpu_p50 * 1.2, self.cpu_limit - max(0.5, 0.1 * self.cpu_limit) - 0.05)
        self.cpu_p95 = max(self.cpu_p95, self.cpu_p50)
        self.kind = draw(st.sampled_from(["Job", "Deployment", "StatefulSet"]))
        self.serving = self.kind != "Job"
        self.replicas = draw(st.integers(1, 4)) if self.serving else 1
        self.gpu_extra: dict[str, SignalStats] = {}
        self.pod_extra: dict[str, SignalStats] = {}
        self.workload_extra: dict[Signal, SignalStats] = {}
        self.restarts = 0
        self.oom_killed = False
        self.memory_limit = 64.0 * GIB

    def build(self) -> WorkloadWindow:
        busy, sm = self.busy, self.busy * self.width
        gpu_signals = {
            "gr_engine_active": spread(busy, min(1.0, busy * 1.3)),
            "sm_active": spread(sm, min(1.0, sm * 1.3)),
            "sm_occupancy": spread(sm * 0.4, sm * 0.5),
            "tensor_active": spread(sm * 0.3, sm * 0.4),
            "dram_active": spread(sm * 0.4, sm * 0.5),
            "fb_used_mib": spread(self.fb_mib, self.fb_mib),
            "fb_free_mib": spread(H200_MIB - self.fb_mib, H200_MIB - self.fb_mib),
            **self.gpu_extra,
        }
        pod_signals = {"cpu_usage_cores": spread(self.cpu_p50, self.cpu_p95), **self.pod_extra}
        pods = []
        for index in range(self.replicas):
            device = gpu(f"GPU-{index}", model=H200, memory_mib=H200_MIB)
            device = device.model_copy(update={"stats": {Signal(k): v for k, v in gpu_signals.items()}})
            member = pod(f"app-{index}", [device], restarts=self.restarts, oom_killed=self.oom_killed)
            pods.append(member.model_copy(update={"stats": {Signal(k): v for k, v in pod_signals.items()}}))
        alloc = allocation(
            gpu_model="NVIDIA-H200",
            cpu_limit_cores=self.cpu_limit,
            cpu_request_cores=self.cpu_limit,
            memory_limit_bytes=self.memory_limit,
            memory_request_bytes=self.memory_limit,
            replicas=self.replicas,
            workload_type="inference" if self.serving else "training",
        )
        stats = {Signal.REQUESTS_PER_S: spread(20.0, 30.0)} if self.serving else {}
        stats.update(self.workload_extra)
        return window(pods, alloc=alloc, hours=HOURS, step=STEP, stats=stats, kind=self.kind)


def assert_no_shrink(subject: WorkloadWindow, veto: str) -> None:
    for sharing in (SharingStrategy.MIG_MIXED, SharingStrategy.TIME_SLICING, SharingStrategy.NONE):
        analysis = analyze_window(subject, sharing=sharing)
        shrinking = [a for a in analysis.actions if reduces_capacity(a, subject)]
        assert not shrinking, f"{veto}, {sharing.value}: {describe(analysis)}"


@st.composite
def throttled(draw: st.DrawFn) -> WorkloadWindow:
    base = Base(draw)
    ratio = draw(st.floats(0.05, 0.6))
    base.pod_extra["cpu_throttled_ratio"] = spread(ratio, min(1.0, ratio * 1.5))
    return base.build()


@st.composite
def cpu_near_limit(draw: st.DrawFn) -> WorkloadWindow:
    base = Base(draw)
    margin = max(0.5, 0.1 * base.cpu_limit)
    base.cpu_p95 = draw(st.floats(max(0.05, base.cpu_limit - margin), base.cpu_limit))
    base.cpu_p50 = draw(st.floats(0.5, 1.0)) * base.cpu_p95
    return base.build()


@st.composite
def reads_while_starved(draw: st.DrawFn) -> WorkloadWindow:
    base = Base(draw)
    base.kind, base.serving, base.replicas = "Job", False, 1
    rate = draw(st.floats(5.0, 99.0)) * MIB
    signal = draw(st.sampled_from(["net_rx_bytes_per_s", "fs_read_bytes_per_s"]))
    base.pod_extra[signal] = spread(rate, rate * 1.3)
    return base.build()


@st.composite
def restarting(draw: st.DrawFn) -> WorkloadWindow:
    base = Base(draw)
    base.restarts = draw(st.integers(1, 12))
    base.oom_killed = draw(st.booleans())
    return base.build()


@st.composite
def memory_near_full(draw: st.DrawFn) -> WorkloadWindow:
    base = Base(draw)
    if draw(st.booleans()):
        used = draw(st.floats(0.95, 0.995)) * H200_MIB
        base.gpu_extra["fb_used_mib"] = spread(used * 0.98, used)
        base.gpu_extra["fb_free_mib"] = spread(H200_MIB - used, H200_MIB - used * 0.98)
    else:
        working_set = draw(st.floats(0.95, 0.999)) * base.memory_limit
        base.pod_extra["memory_working_set_bytes"] = spread(working_set * 0.98, working_set)
    return base.build()


@st.composite
def sustained_queue(draw: st.DrawFn) -> WorkloadWindow:
    base = Base(draw)
    base.kind, base.serving = draw(st.sampled_from(["Deployment", "StatefulSet"])), True
    base.replicas = draw(st.integers(1, 4))
    depth = draw(st.floats(1.0, 40.0))
    active = draw(st.floats(0.5, 1.0))
    base.workload_extra[Signal.QUEUE_LENGTH] = spread(depth, depth * 1.8, active=active)
    return base.build()


@BOUNDED
@given(throttled())
def test_cpu_throttling_of_five_percent_or_more_vetoes_a_shrink(subject: WorkloadWindow) -> None:
    assert_no_shrink(subject, "CPU throttled ≥ 5 %")


@BOUNDED
@given(cpu_near_limit())
def test_cpu_within_half_a_core_or_ten_percent_of_the_limit_vetoes_a_shrink(subject: WorkloadWindow) -> None:
    assert_no_shrink(subject, "CPU p95 within max(0.5 core, 10 %) of the limit")


@BOUNDED
@given(reads_while_starved())
def test_reads_of_five_mib_per_second_while_the_gpu_starves_veto_a_shrink(subject: WorkloadWindow) -> None:
    assert_no_shrink(subject, "reads ≥ 5 MiB/s while busy < 0.5")


@BOUNDED
@given(restarting())
def test_restarts_or_oom_veto_a_shrink(subject: WorkloadWindow) -> None:
    assert_no_shrink(subject, "restarts / OOM")


@BOUNDED
@given(memory_near_full())
def test_memory_near_full_vetoes_a_shrink(subject: WorkloadWindow) -> None:
    assert_no_shrink(subject, "memory near full")


@BOUNDED
@given(sustained_queue())
def test_a_sustained_queue_vetoes_a_shrink(subject: WorkloadWindow) -> None:
    assert_no_shrink(subject, "sustained queue")
