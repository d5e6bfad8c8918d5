"""Vetoes and evidence for the shrink gate: a capacity-reducing action is denied unless proven safe.

A capacity-reducing action (a smaller MIG profile, a shared GPU, a release, fewer GPUs, fewer
replicas) is proposed only with positive evidence that the work is narrow (logic/width.py), no veto,
complete evidence, and, when automatic, the proposing finding's confidence at or above `minConfidence`.

Vetoes are broad on purpose: a starvation signature that no rule claims exactly must not fall through
to a slice. Each veto names its suspected cause, what was seen and what to measure next; every veto of
a window is written into the recommendation's status.
"""

from __future__ import annotations

from gpu_rightsizer.logic.figures import WorkloadFigures
from gpu_rightsizer.logic.rules.common import pct
from gpu_rightsizer.logic.rules.failures import host_memory_share
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import DiagnosisCode
from gpu_rightsizer.model.result import Veto

#: Kinds with a replica count that run as services: a day-long window before any shrink.
SERVICE_KINDS = frozenset({"Deployment", "StatefulSet"})

__all__ = ["SERVICE_KINDS", "missing_evidence", "shrink_vetoes", "veto_cause"]


def _add(found: list[Veto], name: str, cause: DiagnosisCode, reason: str, measure_next: str) -> None:
    found.append(Veto(name=name, cause=cause, reason=reason, measure_next=measure_next))


def serves(figures: WorkloadFigures) -> bool:
    """A server, or a Deployment/StatefulSet not labelled training: low duty there is low traffic."""
    kind_serves = figures.window.workload.kind in SERVICE_KINDS
    return figures.is_serving or (kind_serves and figures.window.allocation.workload_type != "training")


def _gpu_waits(figures: WorkloadFigures, settings: EngineSettings) -> bool:
    """The GPU waits: busy p50 below `low_busy` (NV: below 0.5 the GPU is likely used ineffectively)."""
    busy = figures.busy_p50
    return busy is not None and busy < settings.low_busy


def _cpu_cause(figures: WorkloadFigures) -> DiagnosisCode:
    """A server's CPU starves its requests (tokenizer, pre-processing); a job's its input pipeline."""
    return DiagnosisCode.SERVING_HOST_BOUND if figures.is_serving else DiagnosisCode.INPUT_PIPELINE_CPU_BOUND


def _cpu_vetoes(figures: WorkloadFigures, settings: EngineSettings) -> list[Veto]:
    if not _gpu_waits(figures, settings):
        return []
    cause = _cpu_cause(figures)
    found: list[Veto] = []
    process = figures.process_cpu_max_p50
    if process is not None and process >= settings.input_pipeline.cpu_process_pinned_cores:
        _add(
            found,
            "cpuPinnedCore",
            cause,
            f"a process sits at {process:.2f} cores (node agent, median): one thread is pinned "
            f"at a core while GPU busy p50 is {pct(figures.busy_p50 or 0.0)}",
            "which process is pinned (py-spy dump, or the node agent's process list): a "
            "DataLoader worker means too few workers, the CUDA-context thread a launch-bound loop",
        )
    usage = figures.cpu_usage_p95
    limit = figures.window.allocation.cpu_limit_cores
    if usage is not None and limit is not None:
        margin = max(settings.veto_cpu_near_limit_cores, settings.veto_cpu_near_limit_share * limit)
        if usage >= limit - margin:
            _add(
                found,
                "cpuNearLimit",
                cause,
                f"CPU p95 {usage:.2f} cores is within {margin:.2f} of the {limit:g}-core limit",
                "CFS throttling at 1 s (cpu.stat) and steps/s with a higher CPU limit",
            )
    throttled = figures.cpu_throttled
    if throttled is not None and throttled >= settings.veto_cpu_throttled:
        _add(
            found,
            "cpuThrottled",
            cause,
            f"CFS throttled in {pct(throttled)} of periods (p50)",
            "steps/s or latency with a higher CPU limit",
        )
    return found


def _cpu_plateau_veto(figures: WorkloadFigures, settings: EngineSettings) -> list[Veto]:
    """The weakest CPU evidence: container CPU holding at k cores, flat or noisy, below the limit."""
    if not _gpu_waits(figures, settings):
        return []
    usage, usage_p50 = figures.cpu_usage_p95, figures.cpu_usage_p50
    limit = figures.window.allocation.cpu_limit_cores
    cause = _cpu_cause(figures)
    found: list[Veto] = []
    if (
        usage is not None
        and usage_p50 is not None
        and usage_p50 >= settings.veto_plateau_min_cores
        and (limit is None or usage_p50 < limit)
        and usage - usage_p50 <= settings.veto_plateau_max_spread
    ):
        _add(
            found,
            "cpuPlateau",
            cause,
            f"container CPU holds at {usage_p50:.2f} cores (p50; p95 {usage:.2f}) below its "
            f"{'limit' if limit is not None else 'request (no limit)'}: k busy processes may feed the GPU",
            "per-process CPU (the node agent's gpu_rightsizer_container_process_cpu_max_cores)",
        )
    return found


def _cpu_pressure_veto(figures: WorkloadFigures, settings: EngineSettings) -> list[Veto]:
    cause = _cpu_cause(figures)
    found: list[Veto] = []
    if (
        _gpu_waits(figures, settings)
        and figures.cpu_pressure_p50 is not None
        and figures.cpu_pressure_p50 >= settings.veto_pressure_share
    ):
        _add(
            found,
            "cpuPressure",
            cause,
            f"tasks stalled on CPU {pct(figures.cpu_pressure_p50)} of the time (PSI, p50)",
            "which threads wait (PSI per container, py-spy)",
        )
    return found


def _io_vetoes(figures: WorkloadFigures, settings: EngineSettings) -> list[Veto]:
    busy = figures.busy_p50
    if busy is None or busy >= settings.low_busy:
        return []
    found: list[Veto] = []
    reads = (figures.fs_read_p50 or 0.0) + (0.0 if figures.is_serving else (figures.net_rx_p50 or 0.0))
    has_series = figures.fs_read_p50 is not None or (
        figures.net_rx_p50 is not None and not figures.is_serving
    )
    if has_series and reads >= settings.veto_io_bytes_per_s:
        _add(
            found,
            "ioReads",
            DiagnosisCode.INPUT_PIPELINE_IO_BOUND,
            f"the pod reads {reads / 2**20:.1f} MiB/s (median, file system"
            f"{'' if figures.is_serving else ' + network'}) while GPU busy p50 is {pct(busy)}",
            "I/O pressure (cgroup io.pressure, container_pressure_io_waiting_seconds_total) "
            "and the volume's read ceiling",
        )
    if figures.io_pressure_p50 is not None and figures.io_pressure_p50 >= settings.veto_pressure_share:
        _add(
            found,
            "ioPressure",
            DiagnosisCode.INPUT_PIPELINE_IO_BOUND,
            f"tasks stalled on I/O {pct(figures.io_pressure_p50)} of the time (PSI, p50)",
            "which volume the reads come from, and its throughput ceiling",
        )
    return found


def _wait_vetoes(figures: WorkloadFigures, settings: EngineSettings) -> list[Veto]:
    """Host copies, communication and a sustained queue: vetoes whether or not the GPU is saturated."""
    found: list[Veto] = []
    p50_bytes, p50_share = figures.pcie_bytes_p50, figures.pcie_utilisation_p50
    if (
        p50_bytes is not None
        and p50_bytes >= settings.host_transfer.transfer_bound_bytes_per_s
        and (
            (p50_share is not None and p50_share >= settings.host_transfer.transfer_bound_link_share)
            or not figures.pcie_link_known
        )
    ) or (
        figures.pcie_utilisation is not None
        and figures.pcie_utilisation >= settings.host_transfer.pcie_utilisation
    ):
        _add(
            found,
            "hostTransfers",
            DiagnosisCode.HOST_TRANSFER_BOUND,
            f"host↔device copies at {(p50_bytes or 0.0) / 1e9:.1f} GB/s (median), "
            f"{pct(figures.pcie_utilisation or 0.0)} of the link at p95",
            "whether copies are pageable (Nsight Systems memcpy rows) and overlap compute",
        )
    link = figures.nvlink_utilisation
    if figures.gpus_per_pod >= 2 and link is not None and link >= settings.communication.nvlink_utilisation:
        math_p50 = figures.math_p50
        if math_p50 is None or math_p50 < settings.communication.communication_max_math_p50:
            _add(
                found,
                "communication",
                DiagnosisCode.COMMUNICATION_BOUND,
                f"NVLink at {pct(link)} of nominal per direction (median) with the math pipes idle",
                "NCCL time per step (NCCL_DEBUG=INFO, profiler) and the placement of the pods",
            )
    queue_active, queue_p50 = figures.queue_active_fraction, figures.queue_length_p50
    sustained = (
        queue_active is not None and queue_active >= settings.under_replicated.queue_sustained_fraction
    ) or (queue_active is None and queue_p50 is not None and queue_p50 > 0)
    if sustained:
        saturation = figures.sm_p95 if figures.sm_p95 is not None else figures.busy_p95
        saturated = saturation is not None and saturation >= settings.under_replicated.serving_saturation
        _add(
            found,
            "sustainedQueue",
            DiagnosisCode.UNDER_REPLICATED if saturated else DiagnosisCode.SERVING_HOST_BOUND,
            f"requests queue for {pct(queue_active) if queue_active is not None else 'most'} of the "
            f"window (queue p50 {queue_p50 or 0.0:.1f})",
            "where requests wait: tokenizer/CPU time per request, the server's batch "
            "settings (max batch size, max tokens in flight)",
        )
    return found


def _failure_vetoes(figures: WorkloadFigures, settings: EngineSettings) -> list[Veto]:
    found: list[Veto] = []
    if figures.restarts >= settings.crash_looping.crash_loop_restarts or figures.oom_killed:
        _add(
            found,
            "crashLoop",
            DiagnosisCode.CRASH_LOOPING,
            f"{figures.restarts} container restart(s) in the window"
            f"{', OOMKilled' if figures.oom_killed else ''}",
            "the last termination reason and the container log before each restart",
        )
    elif figures.restarts >= settings.veto_restarts:
        _add(
            found,
            "containerRestart",
            DiagnosisCode.CRASH_LOOPING,
            f"{figures.restarts} container restart(s) in the window: it mixes container lives",
            "whether the restarts repeat (kube_pod_container_status_restarts_total over the next windows) "
            "and the last termination reason",
        )
    host_share = host_memory_share(figures)
    if host_share is not None and host_share >= settings.memory_tight_share:
        _add(
            found,
            "hostMemoryNearLimit",
            DiagnosisCode.CRASH_LOOPING,
            f"the working set reached {pct(host_share)} of the memory limit: the next allocation "
            "can OOM-kill the container",
            "the working set's growth (container_memory_working_set_bytes) and the process's resident memory",
        )
    fb_max, capacity = figures.fb_used_max_gib, figures.capacity_gib
    if (
        _gpu_waits(figures, settings)
        and fb_max is not None
        and capacity
        and fb_max >= settings.memory_capacity.memory_full_share * capacity
    ):
        _add(
            found,
            "gpuMemoryFull",
            DiagnosisCode.MEMORY_CAPACITY_BOUND,
            f"GPU memory reached {fb_max:.1f} of {capacity:.0f} GiB",
            "the allocator's peak (torch.cuda.max_memory_allocated) against the reservation",
        )
    return found


def _on_smallest_slice(figures: WorkloadFigures) -> bool:
    """Already on the GPU's smallest MIG profile: no slice-level shrink exists to veto."""
    current = next((g.profile for g in figures.gpus if g.profile), None)
    smallest = min((p.gpu_fraction for p in figures.profiles), default=None)
    return current is not None and smallest is not None and current.gpu_fraction <= smallest


def _host_wait_veto(figures: WorkloadFigures, settings: EngineSettings) -> list[Veto]:
    """Wide GPU phases at low duty with no named cause: the GPU waits on the host."""
    ratio, busy = figures.phase_width_ratio, figures.busy_p50
    if serves(figures) or ratio is None or busy is None or figures.sm_max is None or figures.sm_max <= 0:
        return []
    if (
        ratio < settings.host_wait.wide_phase_ratio
        or busy >= settings.low_busy
        or _on_smallest_slice(figures)
    ):
        return []
    return [
        Veto(
            name="hostWait",
            cause=DiagnosisCode.HOST_WAIT_BOUND,
            reason=f"the GPU phases are wide (SM/GR {ratio:.2f}: {pct(ratio)} of the SMs busy while the "
            f"engine is) but the GPU is busy only {pct(busy)} of the time (p50)",
            measure_next="what the loop does between GPU phases: a profiler timeline (Nsight Systems, "
            "torch.profiler), per-process CPU from the node agent, fs/network reads, PSI",
        )
    ]


def shrink_vetoes(figures: WorkloadFigures, settings: EngineSettings) -> tuple[Veto, ...]:
    """Every veto on capacity-reducing actions that holds in this window, the strongest evidence first.

    Order: failures, host copies / communication / queue, a pinned or limited CPU, I/O, CPU pressure, a
    CPU plateau; the unknown host wait only when nothing else is named.
    """
    named = [
        *_failure_vetoes(figures, settings),
        *_wait_vetoes(figures, settings),
        *_cpu_vetoes(figures, settings),
        *_io_vetoes(figures, settings),
        *_cpu_pressure_veto(figures, settings),
        *_cpu_plateau_veto(figures, settings),
    ]
    return tuple(named or _host_wait_veto(figures, settings))


#: Vetoes that withhold every shrink on the window's evidence without pointing at a cause: a single
#: container restart is not a crash loop, so it never becomes a suspected CrashLooping finding.
CAUSELESS_VETOES: frozenset[str] = frozenset({"containerRestart"})


def veto_cause(vetoes: tuple[Veto, ...]) -> DiagnosisCode | None:
    """The suspected cause: the first veto's that names one (the failure family first, then waits, CPU,
    I/O); None when none does."""
    return next((veto.cause for veto in vetoes if veto.name not in CAUSELESS_VETOES), None)


def _min_window(figures: WorkloadFigures, settings: EngineSettings) -> float:
    kind = figures.window.workload.kind
    return (
        settings.shrink_min_window_service_seconds
        if kind in SERVICE_KINDS
        else settings.shrink_min_window_job_seconds
    )


def missing_evidence(
    figures: WorkloadFigures, settings: EngineSettings, memory_lookback_seconds: float
) -> list[str]:
    """Why the evidence for a capacity-reducing action is incomplete; empty when it is complete."""
    missing: list[str] = []
    window = figures.window
    if not figures.profiling_fields:
        missing.append("no SM_ACTIVE: how wide the GPU work is cannot be measured")
    expected = window.allocation.replicas
    if expected and figures.pods < expected:
        missing.append(f"only {figures.pods} of {expected} replicas were observed")
    minimum = _min_window(figures, settings)
    if window.duration_seconds < minimum:
        missing.append(
            f"the window is {window.duration_seconds / 3600:.1f} h; a {window.workload.kind} is shrunk only "
            f"after {minimum / 3600:g} h"
        )
    if memory_lookback_seconds + 1e-6 < settings.memory_lookback_min_seconds:
        missing.append(
            f"GPU memory was tracked for {memory_lookback_seconds / 3600:.1f} h; a slice is sized on "
            f"{settings.memory_lookback_min_seconds / 3600:g} h of memory peaks"
        )
    if figures.coverage is not None and figures.coverage < settings.good_coverage:
        missing.append(f"samples cover only {pct(figures.coverage)} of the window")
    return missing
