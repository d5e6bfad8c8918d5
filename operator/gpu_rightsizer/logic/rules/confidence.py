"""Every rule's confidence bases and factors, named, with their source: no rule holds a literal.

Confidence is how sure a finding is that its code names the cause, before the window's factors
(`rules.common.window_factors`) multiply it. The numbers are engineering defaults (Heur) unless said
otherwise; a finding never claims more than `max_confidence`. An automatic action needs its
finding's confidence at or above the policy's `minConfidence` (EngineSettings.min_confidence).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


def _c(value: float, source: str) -> Any:
    return Field(default=value, ge=0.0, le=1.0, description=source)


class RuleConfidence(BaseModel):
    """Per rule: the base of each variant and the factors that lower it. Descriptions give the source."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_confidence: float = _c(0.95, "No finding claims certainty: samples miss what happens between them.")
    gappy_window: float = _c(
        0.85, "Factor when samples cover less than goodCoverage: gaps may hide it. Heur."
    )
    source_warnings: float = _c(0.9, "Factor when the metric source reported data warnings: Heur.")
    short_window: float = _c(
        0.7, "Factor of a window of length 0, rising linearly to 1 at the recommended length: Heur."
    )
    # H0 / H1 / D
    hardware_fault: float = _c(0.95, "A critical Xid is the driver's own verdict (NV Xid catalog).")
    throttled_corroborated: float = _c(0.9, "Clock events and a low SM clock agree (nvml.h).")
    throttled: float = _c(0.75, "Clock events alone: Heur.")
    insufficient_data: float = _c(0.9, "The data's defects are measured, not inferred: Heur.")
    # R1
    idle_short_window: float = _c(0.8, "Factor for an idle window under idleMinWindowSeconds: Heur.")
    # R2 / R2c / R2b
    cpu_bound_clear: float = _c(0.8, "R2 with busy p50 < lowBusy: Heur.")
    cpu_bound: float = _c(0.7, "R2 with busy p50 between lowBusy and inputBoundMaxBusy: Heur.")
    cpu_sawtooth_bonus: float = _c(0.1, "Added with a busy sawtooth ≥ sawtoothStrong (Lit: Mohan et al.).")
    cpu_anticorrelated_bonus: float = _c(0.05, "Added when GPU busy and CPU saturation move apart: Heur.")
    plateau_pinned: float = _c(0.8, "R2c confirmed by the node agent's pinned process: Heur.")
    plateau_sawtooth: float = _c(0.75, "R2c with a busy sawtooth: Heur.")
    plateau: float = _c(0.6, "R2c from the container's flat CPU alone: Heur.")
    io_bound_clear: float = _c(0.6, "R2b with busy p50 < lowBusy; no I/O wait signal: Heur.")
    io_bound: float = _c(0.5, "R2b on a sawtooth only: Heur.")
    io_sawtooth_bonus: float = _c(0.1, "Added to R2b with a busy sawtooth: Heur.")
    # R3 / R4
    transfer_link_saturated: float = _c(0.75, "R3: the link's p95 at its line: Heur.")
    transfer_sustained: float = _c(0.7, "R3b: a sustained median rate: Heur.")
    communication_strong: float = _c(0.8, "R4 with the link at ≥ 1.4 × its line: Heur.")
    communication: float = _c(0.7, "R4 at its line: Heur.")
    nominal_unknown: float = _c(0.85, "Factor when the NVLink nominal is assumed: Heur.")
    # R14 / R15 and suspected causes
    launch_bound: float = _c(0.75, "Two signals agree (narrow phases, one pinned thread): Heur.")
    suspected_cause: float = _c(0.5, "A cause named only by a veto: suspected, advice only. Heur.")
    # R5 / R6 / R7
    low_occupancy: float = _c(0.8, "R5 with low or unknown occupancy: Heur.")
    low_occupancy_occupied: float = _c(0.7, "R5 with occupancy above lowOccupancy: Heur.")
    bandwidth_bound: float = _c(0.8, "R6: Heur (NV practical DRAM peak 0.8).")
    no_tensor_field: float = _c(0.8, "Factor for R6 without the tensor field: Heur.")
    no_tensor_cores: float = _c(0.8, "R7 with the FP32 pipe field: Heur.")
    no_tensor_cores_no_fp32: float = _c(0.5, "R7 without the FP32 pipe field: Heur.")
    # R8 / R8b / R9
    oversized: float = _c(0.85, "R8: memory and compute both measured: Heur.")
    no_slice_fits: float = _c(0.7, "R8b: compute measured, the advice is indirect: Heur.")
    memory_crash_full: float = _c(0.8, "R9: restarts with memory ≥ memoryFullShare: Heur.")
    memory_crash: float = _c(0.7, "R9: restarts with memory ≥ memoryCrashShare: Heur.")
    memory_small_batches: float = _c(0.65, "R9: memory full and forced small batches: Heur.")
    # R10 / R11 / R12 / R13
    under_replicated: float = _c(0.85, "R10 on SM activity: Heur.")
    under_replicated_busy: float = _c(0.7, "R10 on busy (no SM fields): Heur.")
    over_replicated_low: float = _c(0.8, "R11 with the fleet busy p95 under its line: Heur.")
    over_replicated: float = _c(0.7, "R11 on the median or idle-share tests: Heur.")
    crash_looping: float = _c(0.85, "R12: restarts are counted by the kubelet, not inferred. Heur.")
    serving_host_bound: float = _c(0.7, "R13: where the host spends the time is inferred. Heur.")
    # Healthy
    healthy: float = _c(0.9, "Nothing fired: Heur.")
    healthy_no_sm: float = _c(0.8, "Factor without SM fields (R5 unchecked): Heur.")
    healthy_missing: float = _c(0.9, "Factor when further signals are missing: Heur.")
    healthy_near_threshold: float = _c(0.85, "Factor when a figure lies within 10 % of a line: Heur.")


CONFIDENCE = RuleConfidence()
