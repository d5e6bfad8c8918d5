"""R10 UnderReplicated and R11 OverReplicated: serving fleets."""

from __future__ import annotations

from gpu_rightsizer.logic.figures import (
    WorkloadFigures,
    fleet_replicas_needed,
)
from gpu_rightsizer.logic.rules.common import (
    FindingBuilder,
    base_confidence,
    pct,
    window_factor,
)
from gpu_rightsizer.logic.rules.confidence import CONFIDENCE as C
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import DiagnosisCode, Severity


def check_serving(figures: WorkloadFigures, settings: EngineSettings, out: FindingBuilder) -> None:
    if not figures.is_serving:
        return
    base = base_confidence(figures, settings) * window_factor(
        figures.window.duration_seconds, settings.inference_window_seconds
    )
    queue_p50, queue_active = figures.queue_length_p50, figures.queue_active_fraction
    sustained = (
        queue_active is not None and queue_active >= settings.under_replicated.queue_sustained_fraction
    ) or (queue_active is None and queue_p50 is not None and queue_p50 > 0)
    # Latency spikes at peak (SPEC §1): a queue at the p95 (present in ≥ 5 % of the window) while the GPUs
    # saturate at those times is the same shortage, seen at the peaks only: lower confidence.
    at_peaks = not sustained and figures.queue_length_p95 is not None and figures.queue_length_p95 > 0
    saturation = figures.sm_p95 if figures.sm_p95 is not None else figures.busy_p95
    saturation_name = "SM activity" if figures.sm_p95 is not None else "GPU busy"
    hpa = figures.window.allocation.hpa
    if (
        (sustained or at_peaks)
        and saturation is not None
        and saturation >= settings.under_replicated.serving_saturation
    ):
        share = pct(queue_active) if queue_active is not None else ("the peaks" if at_peaks else "most")
        out.add(
            DiagnosisCode.UNDER_REPLICATED,
            Severity.WARNING,
            base
            * (C.under_replicated if figures.sm_p95 is not None else C.under_replicated_busy)
            * (settings.under_replicated.queue_at_peaks_confidence if at_peaks else 1.0),
            f"Seen: requests queue for {share} of the window "
            f"(queue p50 {queue_p50 or 0:.1f}, p95 {figures.queue_length_p95 or 0:.1f}"
            f"{', at the peaks only' if at_peaks else ''}) while {saturation_name} p95 is {pct(saturation)} "
            f"across {figures.replicas} replica(s). Meaning: too few replicas; latency grows at peak. Change: "
            f"{'raise the HPA maximum (it owns the replica count)' if hpa else 'add replicas'}; scale on SM "
            "activity or queue length, not GPU_UTIL.",
            {
                "queueP50": queue_p50,
                "queueP95": figures.queue_length_p95,
                "queueActiveFraction": queue_active,
                "saturationP95": saturation,
                "replicas": float(figures.replicas),
            },
        )
        return
    if sustained and saturation is not None:
        cpu_text = (
            f"; CPU p95 {figures.cpu_usage_p95:.2f} of {figures.cpu_reference_cores:g} cores"
            if figures.cpu_usage_p95 is not None and figures.cpu_reference_cores
            else ""
        )
        out.add(
            DiagnosisCode.SERVING_HOST_BOUND,
            Severity.WARNING,
            base * C.serving_host_bound,
            f"Seen: requests queue for {pct(queue_active) if queue_active is not None else 'most'} of the "
            f"window (queue p50 {queue_p50 or 0:.1f}) while {saturation_name} p95 is only {pct(saturation)}"
            f"{cpu_text}. Meaning: requests wait on the host side, not on the GPU: tokenisation or "
            "pre/post-processing on too little CPU, or batch settings that keep the GPU underfed. Change: "
            "more CPU or tokenizer workers, larger max batch / tokens in flight; more replicas or a larger "
            "GPU would not help. Nothing is shrunk while requests queue.",
            {
                "queueP50": queue_p50,
                "queueActiveFraction": queue_active,
                "saturationP95": saturation,
                "cpuSaturation": figures.cpu_saturation,
            },
        )
        return
    queue_quiet = figures.queue_length_p95 is None or figures.queue_length_p95 < 1.0
    # R11 is fleet-level: a few replicas that peak do not make a mostly idle fleet right-sized.
    fleet = figures.busy_p95
    needed = fleet_replicas_needed(figures, settings.replica_target_utilisation)
    busy_gpus = [g.busy for g in figures.gpus if g.busy is not None]
    idle_share = (
        sum(1 for b in busy_gpus if b.p50 < settings.active_busy) / len(busy_gpus) if busy_gpus else None
    )
    # A p95 alone flips on a few burst minutes (0.22 vs 0.2 with a median of 0.12): a low fleet median
    # also counts when the fleet, sized on its p95, fits on at most half its replicas.
    half_suffices = needed is not None and needed * 2 <= figures.replicas
    fleet_median = figures.busy_p50
    low_fleet = fleet is not None and fleet < settings.over_replicated.over_replicated_busy_p95
    quiet_median = (
        fleet_median is not None
        and fleet_median < settings.over_replicated.over_replicated_busy_p50
        and half_suffices
    )
    idle_fleet = (
        idle_share is not None
        and idle_share >= settings.over_replicated.over_replicated_idle_share
        and half_suffices
    )
    if (
        figures.replicas >= 2
        and fleet is not None
        and (low_fleet or quiet_median or idle_fleet)
        and queue_quiet
    ):
        out.add(
            DiagnosisCode.OVER_REPLICATED,
            Severity.INFO,
            base * (C.over_replicated_low if low_fleet else C.over_replicated),
            f"Seen: {figures.replicas} replicas, fleet busy p95 {pct(fleet)} (replicas' p95 averaged; "
            f"busiest {pct(figures.busy_p95_max or 0.0)}), fleet busy p50 {pct(fleet_median or 0.0)}, "
            f"{pct(idle_share or 0.0)} of replicas idle at the median, and "
            f"{'no queue' if figures.queue_length_p95 is not None else 'no queue signal'}"
            f"{f', {figures.requests_per_s:.1f} requests/s' if figures.requests_per_s is not None else ''}. "
            f"Meaning: the traffic fits on about {needed} replica(s) at "
            f"{pct(settings.replica_target_utilisation)} saturation. Change: "
            f"{'lower the HPA minimum' if hpa else 'scale in'}, or consolidate onto MIG slices / time-sliced "
            "GPUs.",
            {
                "fleetBusyP95": fleet,
                "fleetBusyP50": fleet_median,
                "gpuBusyP95Max": figures.busy_p95_max,
                "idleReplicaShare": idle_share,
                "replicasNeeded": float(needed) if needed is not None else None,
                "replicas": float(figures.replicas),
                "queueP95": figures.queue_length_p95,
            },
        )
