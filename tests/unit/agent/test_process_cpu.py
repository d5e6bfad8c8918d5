"""Per-process CPU from /proc: the busiest process of each container, and how many are pinned at a core."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from gpu_rightsizer.agent.cgroups import PodIdentity
from gpu_rightsizer.agent.process_cpu import (
    PINNED_CORES,
    PROCESS_CPU_MAX,
    PROCESSES_PINNED,
    ProcessCpuCollector,
    ProcessCpuTime,
    ProcessCpuTracker,
    container_process_cpu,
    parse_proc_stat,
)
from gpu_rightsizer.agent.runner import AgentRunner
from gpu_rightsizer.agent.sampler import NvmlSampler
from gpu_rightsizer.commands import agent as agent_command

from .fake_nvml import FakeGpu, FakeNvml

TRAINER = PodIdentity(pod_uid="uid-train", namespace="ml", pod="train-0", container="main")
SIDECAR = PodIdentity(pod_uid="uid-train", namespace="ml", pod="train-0", container="logs")
SERVER = PodIdentity(pod_uid="uid-serve", namespace="ml", pod="serve-0", container="main")
TICKS = 100


def _stat_line(pid: int, comm: str, utime: int, stime: int = 0, start: int = 5000) -> str:
    """A /proc/<pid>/stat line with the fields the reader uses set and the rest plausible."""
    after = ["S", "1", str(pid), str(pid), "0", "-1", "4194304", "0", "0", "0", "0"]
    after += [str(utime), str(stime), "0", "0", "20", "0", "1", "0", str(start), "1000000", "100"]
    after += ["0"] * 30
    return f"{pid} ({comm}) " + " ".join(after) + "\n"


class FakeProc:
    """A proc root in a temporary folder: one stat file per process, updated by the test."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def set(self, pid: int, comm: str, cpu_ticks: int, start: int = 5000) -> None:
        folder = self.root / str(pid)
        folder.mkdir(exist_ok=True)
        (folder / "stat").write_text(_stat_line(pid, comm, cpu_ticks, start=start))

    def remove(self, pid: int) -> None:
        (self.root / str(pid) / "stat").unlink()
        (self.root / str(pid)).rmdir()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_parse_reads_cpu_time_and_start_even_with_parentheses_in_the_name() -> None:
    reading = parse_proc_stat(42, _stat_line(42, "pt (data) worker", utime=250, start=777), TICKS)
    assert reading == ProcessCpuTime(pid=42, start_ticks=777, cpu_seconds=2.5, comm="pt (data) worker")
    assert parse_proc_stat(42, "42 (truncated", TICKS) is None
    assert parse_proc_stat(42, "42 (x) S 1 2", TICKS) is None


def test_parse_reads_this_process_from_the_real_proc() -> None:
    text = Path(f"/proc/{os.getpid()}/stat").read_text()
    reading = parse_proc_stat(os.getpid(), text, os.sysconf("SC_CLK_TCK"))
    assert reading is not None
    assert reading.cpu_seconds > 0.0
    assert reading.start_ticks > 0


def test_busiest_process_and_pinned_count_per_container() -> None:
    """A loader worker at one core and a light trainer in one container; a server elsewhere."""
    before = {
        10: ProcessCpuTime(10, 1, 5.0, "python"),
        11: ProcessCpuTime(11, 1, 5.0, "pt_data_worker"),
        12: ProcessCpuTime(12, 1, 0.0, "fluent-bit"),
        20: ProcessCpuTime(20, 1, 3.0, "tritonserver"),
        30: ProcessCpuTime(30, 1, 0.0, "sshd"),
    }
    after = {
        10: ProcessCpuTime(10, 1, 5.2, "python"),
        11: ProcessCpuTime(11, 1, 7.0, "pt_data_worker"),
        12: ProcessCpuTime(12, 1, 0.02, "fluent-bit"),
        20: ProcessCpuTime(20, 1, 3.1, "tritonserver"),
        30: ProcessCpuTime(30, 1, 9.0, "sshd"),  # not in a pod
    }
    pods = {10: TRAINER, 11: TRAINER, 12: SIDECAR, 20: SERVER}
    rows = {
        (r.identity.pod, r.identity.container): r for r in container_process_cpu(before, after, 2.0, pods.get)
    }
    assert set(rows) == {("train-0", "main"), ("train-0", "logs"), ("serve-0", "main")}
    trainer = rows[("train-0", "main")]
    assert trainer.max_cores == pytest.approx(1.0)
    assert trainer.busiest == "pt_data_worker"
    assert trainer.pinned == 1
    assert trainer.processes == 2
    assert rows[("serve-0", "main")].max_cores == pytest.approx(0.05)
    assert rows[("serve-0", "main")].pinned == 0


def test_a_reused_pid_is_not_diffed_against_the_process_before_it() -> None:
    before = {11: ProcessCpuTime(11, 1000, 500.0, "old")}
    after = {11: ProcessCpuTime(11, 2000, 1.0, "new")}
    assert container_process_cpu(before, after, 1.0, lambda pid: TRAINER) == []
    assert container_process_cpu(before, before, 0.0, lambda pid: TRAINER) == []


def test_tracker_over_a_proc_root(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path)
    clock = Clock()
    proc.set(10, "python", cpu_ticks=100)
    proc.set(11, "pt_data_worker", cpu_ticks=100)
    retained: list[set[int]] = []
    tracker = ProcessCpuTracker(
        resolve={10: TRAINER, 11: TRAINER}.get,
        proc_root=tmp_path,
        monotonic=clock,
        clock_ticks=TICKS,
        retain=lambda pids: retained.append(set(pids)),
    )
    assert tracker.sample() == []  # the first reading has no interval yet
    clock.now += 1.0
    proc.set(10, "python", cpu_ticks=110)
    proc.set(11, "pt_data_worker", cpu_ticks=199)
    (row,) = tracker.sample()
    assert row.max_cores == pytest.approx(0.99)
    assert row.max_cores >= PINNED_CORES
    assert row.pinned == 1
    clock.now += 1.0
    proc.remove(11)  # the worker exited: the light trainer is the busiest now
    proc.set(10, "python", cpu_ticks=120)
    (row,) = tracker.sample()
    assert row.busiest == "python"
    assert row.max_cores == pytest.approx(0.1)
    assert row.pinned == 0
    assert retained == [{10, 11}, {10, 11}, {10}]


def test_tracker_measures_a_real_busy_loop() -> None:
    """This process burns 0.2 s of CPU between two readings; the tracker sees it, within one core."""
    me = os.getpid()
    tracker = ProcessCpuTracker(resolve=lambda pid: TRAINER if pid == me else None)
    tracker.sample([me])
    started = time.process_time()
    while time.process_time() - started < 0.2:
        pass
    (row,) = tracker.sample([me])
    assert 0.0 < row.max_cores <= 1.5  # the test runner may use a second thread briefly


def _runner_with_tracker(tmp_path: Path, clock: Clock | None) -> tuple[AgentRunner, FakeProc]:
    """An agent over a fake GPU and a fake proc root; `clock` None means real time."""
    proc = FakeProc(tmp_path)
    proc.set(11, "pt_data_worker", cpu_ticks=0)
    nvml = FakeNvml([FakeGpu(uuid="GPU-1")])
    tracker = ProcessCpuTracker(
        resolve={11: TRAINER}.get,
        proc_root=tmp_path,
        monotonic=clock or time.monotonic,
        clock_ticks=TICKS,
    )
    sampler = NvmlSampler(nvml, clock=clock, monotonic=clock) if clock else NvmlSampler(nvml)
    runner = AgentRunner(
        nvml=nvml,
        resolve=lambda pid: None,
        hostname="node-a",
        interval=0.1,
        sampler=sampler,
    )
    runner.process_cpu = tracker
    return runner, proc


def test_served_metrics_carry_the_busiest_process_of_each_container(tmp_path: Path) -> None:
    clock = Clock()
    runner, proc = _runner_with_tracker(tmp_path, clock)
    runner.tick()
    clock.now += 2.0
    proc.set(11, "pt_data_worker", cpu_ticks=200)
    runner.tick()
    assert runner.process_cpu is not None
    collector = ProcessCpuCollector(runner.process_cpu, "node-a")
    families = {family.name: family for family in collector.collect()}
    (busiest,) = families[PROCESS_CPU_MAX].samples
    assert busiest.value == pytest.approx(1.0)
    assert busiest.labels == {
        "Hostname": "node-a",
        "namespace": "ml",
        "pod": "train-0",
        "container": "main",
        "pod_uid": "uid-train",
    }
    assert families[PROCESSES_PINNED].samples[0].value == 1.0


def test_recording_holds_the_per_process_series_at_every_tick(tmp_path: Path) -> None:
    runner, _ = _runner_with_tracker(tmp_path / "proc", None)
    output = tmp_path / "agent.om"
    assert runner.record_to_file(output, duration=0.35) == 0
    families = {f.name: f for f in text_string_to_metric_families(output.read_text())}
    samples = families[PROCESS_CPU_MAX].samples
    assert len(samples) >= 2  # every tick after the first
    assert all(s.timestamp is not None and s.labels["pod"] == "train-0" for s in samples)


def test_agent_command_turns_per_process_cpu_on_by_default() -> None:
    parser = argparse.ArgumentParser()
    agent_command.add_arguments(parser)
    assert parser.parse_args([]).process_cpu is True
    assert parser.parse_args(["--no-process-cpu"]).process_cpu is False


def test_agent_command_records_the_busiest_process_of_a_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gpu-rightsizer agent --record`: the process is mapped to its pod through its cgroup file."""
    import gpu_rightsizer.adapters.nvml as nvml_module

    monkeypatch.setattr(nvml_module, "PynvmlLibrary", lambda: FakeNvml([FakeGpu(uuid="GPU-1")]))
    proc = FakeProc(tmp_path / "proc")
    proc.set(11, "pt_data_worker", cpu_ticks=0)
    uid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    container = "a" * 64
    (tmp_path / "proc" / "11" / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid.replace('-', '_')}.slice"
        f"/cri-containerd-{container}.scope\n"
    )
    output = tmp_path / "agent.om"
    parser = argparse.ArgumentParser()
    agent_command.add_arguments(parser)
    args = ["--record", "0.35s", "--interval", "0.1s", "--output", str(output)]
    assert agent_command.run(parser.parse_args([*args, "--proc-root", str(tmp_path / "proc")])) == 0
    families = {f.name: f for f in text_string_to_metric_families(output.read_text())}
    samples = families[PROCESS_CPU_MAX].samples
    assert samples, "no per-process series recorded"
    assert {s.labels["pod_uid"] for s in samples} == {uid}
    assert agent_command.run(parser.parse_args([*args, "--no-process-cpu"])) == 0
    families = {f.name: f for f in text_string_to_metric_families(output.read_text())}
    assert PROCESS_CPU_MAX not in families
