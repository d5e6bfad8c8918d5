"""R2/R2c InputPipelineCPUBound, R2b InputPipelineIOBound, R3 HostTransferBound, R4 CommunicationBound.

The data-path rules share their figures (what is copying, reading or pinned), so they are evaluated
together; every one of them gates every GPU-shrinking action.
"""

from __future__ import annotations

import math

from gpu_rightsizer.logic.figures import WorkloadFigures
from gpu_rightsizer.logic.rules.common import (
    FindingBuilder,
    base_confidence,
    compute_is_low,
    pct,
)
from gpu_rightsizer.logic.rules.confidence import CONFIDENCE as C
from gpu_rightsizer.logic.rules.idle import no_kernels
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import DiagnosisCode, Severity


def cpu_plateau_cores(figures: WorkloadFigures, settings: EngineSettings) -> int | None:
    """Whole cores a CPU plateau sits at (k pinned processes below the limit), or None without one.

    One data-loader process cannot use more than one core, so a 2-core quota is never exhausted: no
    throttling, no saturation. What shows is a flat container CPU at ≈ k cores with headroom left. When
    the node agent reports per-process CPU, a process at one core confirms the plateau; a reading
    without one does not rule it out (a reader that misses the process, or an agent without hostPID,
    would otherwise turn a starved job into a shrink), so the container's own plateau still counts.
    """
    usage_p50, usage_p95 = figures.cpu_usage_p50, figures.cpu_usage_p95
    if usage_p50 is None or usage_p95 is None:
        return None
    process = figures.process_cpu_max_p50
    if process is not None and process >= settings.input_pipeline.cpu_process_pinned_cores:
        return max(1, math.floor(usage_p50 + 0.05))  # the agent sees the pinned process: no headroom test
    limit = figures.window.allocation.cpu_limit_cores
    if limit is not None and limit - usage_p95 < settings.input_pipeline.cpu_plateau_min_headroom:
        return None  # at the limit: the saturation/throttling rule speaks
    throttled = figures.cpu_throttled
    if throttled is not None and throttled >= settings.input_pipeline.cpu_plateau_max_throttled:
        return None
    cores = math.floor(usage_p50 + 0.05)
    if cores < 1 or usage_p50 - cores > settings.input_pipeline.cpu_plateau_max_excess:
        return None
    if usage_p95 - usage_p50 > settings.input_pipeline.cpu_plateau_max_spread:
        return None
    return cores


def check_data_path(figures: WorkloadFigures, settings: EngineSettings, out: FindingBuilder) -> None:
    busy = figures.busy_p50
    if busy is None:
        return
    # A saturated input pipeline rarely drives busy all the way down: a starved GPU alternates between
    # bursts and stalls, so anything below "looks busy" counts, with more confidence below 0.5.
    low_busy = busy < settings.input_pipeline.input_bound_max_busy
    clearly_low = busy < settings.low_busy
    pcie = figures.pcie_utilisation
    cpu_sat, thr = figures.cpu_saturation, figures.cpu_throttled
    # Without a limit, use above the request is bursting, not saturation: only a limit can starve. The
    # saturation line meets the plateau's headroom test (min of the two), so no CPU use between them
    # is claimed by neither rule (engine-review-2 H2).
    limit = figures.window.allocation.cpu_limit_cores
    saturated = (
        limit is not None
        and figures.cpu_usage_p95 is not None
        and figures.cpu_usage_p95
        >= min(
            settings.input_pipeline.cpu_saturation * limit,
            limit - settings.input_pipeline.cpu_plateau_min_headroom,
        )
    )
    cpu_bound = saturated or (thr is not None and thr >= settings.input_pipeline.cpu_throttled_ratio)
    sawtooth = (
        figures.busy_sawtooth is not None and figures.busy_sawtooth >= settings.input_pipeline.sawtooth_strong
    )
    anti = (
        figures.gpu_cpu_correlation is not None
        and figures.gpu_cpu_correlation <= settings.input_pipeline.cpu_anticorrelation
    )
    base = base_confidence(figures, settings)
    compute_low, compute, compute_name = compute_is_low(figures, settings)
    p50_bytes, p50_share = figures.pcie_bytes_p50, figures.pcie_utilisation_p50
    absolute_rate = p50_bytes is not None and p50_bytes >= settings.host_transfer.transfer_bound_bytes_per_s
    link_share = p50_share is not None and p50_share >= settings.host_transfer.transfer_bound_link_share
    sustained_transfer = absolute_rate and (link_share or not figures.pcie_link_known)
    link_saturated = pcie is not None and pcie >= settings.host_transfer.pcie_utilisation
    copying = pcie is not None and (link_saturated or (sustained_transfer and clearly_low)) and compute_low
    reading = (
        figures.io_bytes_p50 is not None and figures.io_bytes_p50 >= settings.input_pipeline.io_bytes_per_s
    )
    kernels = not no_kernels(figures, settings)
    plateau = (
        cpu_plateau_cores(figures, settings)
        if not cpu_bound and clearly_low and not copying and not reading and kernels
        else None
    )
    # R14: narrow GPU phases with one thread pinned at a core: a loop of tiny kernels that one thread
    # launches. More workers or more cores do not help it; fewer, larger launches do.
    ratio = figures.phase_width_ratio
    one_thread = (
        figures.process_cpu_max_p50 is not None
        and figures.process_cpu_max_p50 >= settings.input_pipeline.cpu_process_pinned_cores
    ) or plateau == 1
    launch_bound = (
        ratio is not None
        and ratio < settings.launch_bound.narrow_phase_ratio
        and one_thread
        and busy < settings.high_busy
        and not cpu_bound
        and not copying
        and not reading
        and kernels
    )
    if launch_bound and ratio is not None:
        plateau = None
        out.add(
            DiagnosisCode.LAUNCH_BOUND,
            Severity.WARNING,
            base * C.launch_bound,
            f"Seen: GPU busy p50 {pct(busy)} but only {pct(ratio)} of the SMs busy while the GPU is "
            f"(SM/GR), and one thread at a core (busiest process "
            f"{figures.process_cpu_max_p50 or figures.cpu_usage_p50 or 0.0:.2f} cores). Meaning: one thread "
            "launches a stream of tiny kernels; the GPU waits on launch overhead, not on data. Change: CUDA "
            "Graphs, torch.compile (fused kernels) or a larger batch per launch; more CPU or DataLoader "
            "workers will not help. Shrinking the GPU is withheld: a launch-bound loop runs no faster on "
            "fewer SMs.",
            {
                "gpuBusyP50": busy,
                "phaseWidthRatio": ratio,
                "processCpuMaxP50": figures.process_cpu_max_p50,
                "cpuUsageP50": figures.cpu_usage_p50,
            },
        )

    # R2: input pipeline CPU-bound (at the limit), or R2c: a CPU plateau below it
    if low_busy and cpu_bound and (pcie is None or pcie < settings.host_transfer.pcie_utilisation):
        confidence = (
            base * (C.cpu_bound_clear if clearly_low else C.cpu_bound)
            + (C.cpu_sawtooth_bonus if sawtooth else 0.0)
            + (C.cpu_anticorrelated_bonus if anti else 0.0)
        )
        reference = figures.cpu_reference_cores
        sat_text = (
            f"CPU use p95 {figures.cpu_usage_p95:.2f} of {reference:g} cores "
            f"({pct(cpu_sat)} of the {'limit' if figures.cpu_reference_is_limit else 'request'})"
            if cpu_sat is not None and figures.cpu_usage_p95 is not None and reference
            else "CPU use unknown"
        )
        thr_text = f", CFS throttled in {pct(thr)} of periods" if thr is not None else ""
        out.add(
            DiagnosisCode.INPUT_PIPELINE_CPU_BOUND,
            Severity.WARNING,
            confidence,
            f"Seen: GPU busy p50 {pct(busy)} while {sat_text}{thr_text}"
            f"{'; busy alternates high/low (sawtooth)' if sawtooth else ''}. Meaning: the GPU waits for the "
            "CPU-side input pipeline (data loading/preprocessing); training typically needs 3–24 CPU cores "
            "per GPU. Change: raise the CPU request/limit together with the DataLoader workers (size them "
            "from os.sched_getaffinity(0) or the cgroup's cpu.max, not os.cpu_count()), pinned memory and "
            "prefetch.",
            {
                "gpuBusyP50": busy,
                "cpuUsageP95": figures.cpu_usage_p95,
                "cpuSaturation": cpu_sat,
                "cpuThrottledRatio": thr,
                "busySawtooth": figures.busy_sawtooth,
                "gpuCpuCorrelation": figures.gpu_cpu_correlation,
            },
        )
    elif plateau is not None:
        limit = figures.window.allocation.cpu_limit_cores
        process_pinned = (
            figures.process_cpu_max_p50 is not None
            and figures.process_cpu_max_p50 >= settings.input_pipeline.cpu_process_pinned_cores
        )
        process_text = (
            f"; its busiest process uses {figures.process_cpu_max_p50:.2f} cores (node agent)"
            if figures.process_cpu_max_p50 is not None
            else ""
        )
        limit_text = f" of a {limit:g}-core limit" if limit is not None else " (no CPU limit)"
        out.add(
            DiagnosisCode.INPUT_PIPELINE_CPU_BOUND,
            Severity.WARNING,
            base * (C.plateau_pinned if process_pinned else (C.plateau_sawtooth if sawtooth else C.plateau)),
            f"Seen: container CPU flat at {figures.cpu_usage_p50 or 0.0:.2f} cores (p50; p95 "
            f"{figures.cpu_usage_p95 or 0.0:.2f}){limit_text}, not throttled, while GPU busy p50 is "
            f"{pct(busy)}{'; busy alternates high/low (sawtooth)' if sawtooth else ''}"
            f"{process_text}. Meaning: {plateau} "
            f"process(es) pinned at one core each feed the GPU (a DataLoader with too few workers, or a "
            "single-threaded loop); the limit is not reached, so more cores alone change nothing. Change: "
            "more DataLoader workers (about the cores available minus one; read them from "
            "os.sched_getaffinity(0) or the cgroup's cpu.max, not os.cpu_count()), or CUDA Graphs for a "
            "launch-bound loop. Shrinking the GPU is withheld: fed, the job needs it.",
            {
                "gpuBusyP50": busy,
                "cpuUsageP50": figures.cpu_usage_p50,
                "cpuUsageP95": figures.cpu_usage_p95,
                "cpuPlateauCores": float(plateau),
                "processCpuMaxP50": figures.process_cpu_max_p50,
                "cpuThrottledRatio": thr,
                "busySawtooth": figures.busy_sawtooth,
            },
        )
    # R2b: fetch stall (storage / network I/O)
    io = figures.io_bytes_p50
    # R2b is an input-pipeline (training) pattern: a service's network receive is its request traffic.
    # The median, not p95, so counter resets and bursts do not pass for a sustained fetch stall. Reads
    # alone are normal (image training reads ~300 MB/s at busy 0.75): the GPU must also look starved.
    starved = clearly_low or sawtooth
    if (
        starved
        and not cpu_bound
        and plateau is None
        and not figures.is_serving
        and io is not None
        and io >= settings.input_pipeline.io_bytes_per_s
    ):
        confidence = base * (C.io_bound_clear if clearly_low else C.io_bound) + (
            C.io_sawtooth_bonus if sawtooth else 0.0
        )
        out.add(
            DiagnosisCode.INPUT_PIPELINE_IO_BOUND,
            Severity.WARNING,
            confidence,
            f"Seen: GPU busy p50 {pct(busy)}{' with a sawtooth' if sawtooth else ''}, CPU not saturated"
            f"{f' ({pct(cpu_sat)} of its cores)' if cpu_sat is not None else ''}, while the pod reads "
            f"{io / 2**20:.0f} MiB/s (median) from disk and network. Meaning: the GPU probably waits for data "
            "to arrive (fetch stall). Missing for certainty: an I/O wait signal (cgroup io.pressure) or the "
            "volume's read ceiling. Change: cache the data set locally or in RAM, prefetch more, use faster "
            "storage.",
            {
                "gpuBusyP50": busy,
                "ioBytesP50": io,
                "cpuSaturation": cpu_sat,
                "busySawtooth": figures.busy_sawtooth,
            },
        )
    multi_gpu = figures.gpus_per_pod >= 2  # one distributed pod; never independent replicas
    # R4: NVLink per direction at the median; PCIe stands in only when its traffic is symmetric (a
    # collective), never for one-way host copies.
    link = figures.nvlink_utilisation
    link_name = "NVLink"
    if link is None and multi_gpu and figures.pcie_symmetric and figures.pcie_utilisation_p50 is not None:
        link, link_name = figures.pcie_utilisation_p50, "PCIe (symmetric, no NVLink series)"
    math_p50 = figures.math_p50
    pipes_idle = (
        math_p50 < settings.communication.communication_max_math_p50 if math_p50 is not None else compute_low
    )
    link_busy = link is not None and link >= settings.communication.nvlink_utilisation
    comm = multi_gpu and link_busy and pipes_idle
    tensor_p50 = figures.tensor_p50
    # R3: host <-> device transfer-bound (R3b: a sustained rate with idle compute; see thresholds).
    if pcie is not None and copying and not (comm and figures.nvlink_utilisation is None):
        out.add(
            DiagnosisCode.HOST_TRANSFER_BOUND,
            Severity.WARNING,
            base * (C.transfer_link_saturated if link_saturated else C.transfer_sustained),
            f"Seen: PCIe transfers at {pct(pcie)} of link capacity (p95)"
            f"{f', {p50_bytes / 1e9:.1f} GB/s median' if p50_bytes is not None else ''} while {compute_name} "
            f"p50 is "
            f"{pct(compute or 0.0)}. Meaning: the GPU waits for host↔device copies. Change: pinned memory "
            "and "
            "asynchronous copies, keep data resident on the GPU, larger batches; avoid co-locating "
            "transfer-heavy pods on MIG slices of one GPU (they share PCIe).",
            {"pcieUtilisation": pcie, "pcieBytesP50": p50_bytes, "computeP50": compute},
        )
    # R4: communication-bound
    if comm and link is not None:
        math_text = (
            f"the math pipes (tensor + FP16 + FP32) work only {pct(math_p50)} of the time (p50)"
            if math_p50 is not None
            else f"{compute_name} p50 is {pct(compute or 0.0)} (no pipe fields)"
        )
        nominal_text = "" if figures.nvlink_nominal_known else "; GPU model unknown, NVLink 4 nominal assumed"
        out.add(
            DiagnosisCode.COMMUNICATION_BOUND,
            Severity.WARNING,
            base
            * (
                C.communication_strong
                if link
                >= settings.communication.nvlink_utilisation * settings.communication.nvlink_strong_factor
                else C.communication
            )
            * (1.0 if math_p50 is not None else settings.busy_as_sm_proxy_penalty)
            * (1.0 if figures.nvlink_nominal_known else C.nominal_unknown),
            f"Seen: {figures.gpus_per_pod} GPUs per pod, {link_name} traffic at {pct(link)} of the nominal "
            f"per-direction bandwidth (busier direction, p50){nominal_text} while {math_text}. Meaning: the "
            "GPUs wait on each other (communication and synchronisation; NCCL kernels count as SM-active, so "
            "SM activity does not show it). Change: pack the pods on one node / NVLink domain, overlap "
            "communication with compute, gradient accumulation or larger per-GPU batches; fewer, larger "
            "GPUs. Never MIG for this work (no P2P/NVLink on slices).",
            {
                "linkUtilisation": link,
                "mathPipesP50": math_p50,
                "tensorActiveP50": tensor_p50,
                "computeP50": compute,
                "gpusPerPod": float(figures.gpus_per_pod),
            },
        )
