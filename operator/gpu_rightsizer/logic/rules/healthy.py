"""Healthy: nothing fired; what was measured, what was missing and which verdicts were close."""

from __future__ import annotations

from gpu_rightsizer.logic.figures import WorkloadFigures
from gpu_rightsizer.logic.rules.common import (
    FindingBuilder,
    base_confidence,
    pct,
)
from gpu_rightsizer.logic.rules.confidence import CONFIDENCE as C
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import DiagnosisCode, Severity

#: Rules whose figure lies within this share of its threshold (on the quiet side) count as near misses.
_NEAR_THRESHOLD = 0.1


def _near_misses(figures: WorkloadFigures, settings: EngineSettings) -> list[str]:
    """Rules that did not fire but whose figure is within 10 % of the threshold: the verdict is fragile."""
    checks: list[tuple[str, float | None, float]] = [
        ("CPU saturation", figures.cpu_saturation, settings.input_pipeline.cpu_saturation),
        ("CPU throttling", figures.cpu_throttled, settings.input_pipeline.cpu_throttled_ratio),
        ("PCIe p95 share of the link", figures.pcie_utilisation, settings.host_transfer.pcie_utilisation),
        ("GPU memory p99 share", figures.memory_share_p99, settings.memory_capacity.memory_full_share),
        ("DRAM activity p95", figures.dram_p95, settings.memory_bandwidth.dram_bound),
    ]
    if figures.total_gpus >= 2:
        checks.append(
            ("NVLink p95 share", figures.nvlink_utilisation, settings.communication.nvlink_utilisation)
        )
    if not figures.is_serving:
        checks.append(
            (
                "file-system + network read median",
                figures.io_bytes_p50,
                settings.input_pipeline.io_bytes_per_s,
            )
        )
    near = [
        f"{name} {value:.3g} vs {threshold:.3g}"
        for name, value, threshold in checks
        if value is not None and threshold > 0 and threshold * (1 - _NEAR_THRESHOLD) <= value < threshold
    ]
    # Rules that fire below their line: SM activity (R5 while busy looks high) and the fleet's load (R11).
    below: list[tuple[str, float | None, float]] = [
        ("SM activity p50", figures.sm_p50, settings.low_busy),
    ]
    if figures.is_serving and figures.replicas >= 2:
        below.append(("fleet busy p95", figures.busy_p95, settings.over_replicated.over_replicated_busy_p95))
    near.extend(
        f"{name} {value:.3g} vs {threshold:.3g}"
        for name, value, threshold in below
        if value is not None and threshold > 0 and threshold <= value <= threshold * (1 + _NEAR_THRESHOLD)
    )
    return near


def check_healthy(figures: WorkloadFigures, settings: EngineSettings, out: FindingBuilder) -> None:
    """Nothing fired: say what was measured, what was missing and which verdicts were close."""
    figures_text = [f"GPU busy p50 {pct(figures.busy_p50 or 0.0)}, p95 {pct(figures.busy_p95 or 0.0)}"]
    missing: list[str] = []
    if figures.sm_p50 is not None:
        figures_text.append(f"SM activity p50 {pct(figures.sm_p50)}")
    else:
        missing.append("SM_ACTIVE")
    if figures.tensor_p95 is not None:
        figures_text.append(f"tensor activity p95 {pct(figures.tensor_p95)}")
    else:
        missing.append("tensor-pipe activity")
    if figures.cpu_saturation is not None:
        figures_text.append(f"CPU p95 at {pct(figures.cpu_saturation)} of its cores")
    else:
        missing.append("CPU use against a CPU limit/request")
    if figures.memory_share_p99 is not None:
        figures_text.append(
            f"GPU memory p99 {figures.fb_used_p99_gib or 0.0:.1f} GiB ({pct(figures.memory_share_p99)})"
        )
    else:
        missing.append("GPU memory used")
    near = _near_misses(figures, settings)
    confidence = base_confidence(figures, settings) * C.healthy
    if not figures.profiling_fields:
        confidence *= C.healthy_no_sm
    if len(missing) > (0 if figures.profiling_fields else 1):
        confidence *= C.healthy_missing
    if near:
        confidence *= C.healthy_near_threshold
    notes = ""
    if not figures.profiling_fields:
        notes += " No SM_ACTIVE: LowOccupancy was not checked, and busy stood in for SM activity elsewhere."
    if missing:
        notes += f" Missing: {', '.join(missing)}."
    if near:
        notes += f" Near a threshold (within 10 %): {'; '.join(near)}."
    out.add(
        DiagnosisCode.HEALTHY,
        Severity.INFO,
        confidence,
        f"Seen: {', '.join(figures_text)}; no rule fired. Meaning: no waste pattern found. "
        f"Change: nothing.{notes}",
        {
            "gpuBusyP50": figures.busy_p50,
            "gpuBusyP95": figures.busy_p95,
            "smActiveP50": figures.sm_p50,
            "tensorActiveP95": figures.tensor_p95,
            "cpuSaturation": figures.cpu_saturation,
            "memoryShareP99": figures.memory_share_p99,
            "nearThresholds": float(len(near)),
        },
    )
