"""The node agent's per-process CPU gauges, read from an exposition file, combine per pod as they mean."""

from __future__ import annotations

from gpu_rightsizer.adapters.exposition import parse_text
from gpu_rightsizer.adapters.openmetrics import windows_from_samples
from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.observation import Signal

POD = 'namespace="ml",pod="trainer-0"'


def _text(rows: list[tuple[str, str, float]]) -> str:
    """Two samples 60 s apart of each (metric, container, value), plus a GPU to own the pod."""
    lines = []
    for at in (1_767_225_540, 1_767_225_600):
        lines.append(f'{mn.DCGM_GR_ENGINE_ACTIVE}{{gpu="0",UUID="GPU-1",{POD}}} 0.2 {at}')
        for metric, container, value in rows:
            lines.append(f'{metric}{{container="{container}",{POD}}} {value} {at}')
    return "\n".join(lines) + "\n"


def test_busiest_process_is_the_largest_container_and_pinned_the_sum() -> None:
    text = _text(
        [
            (mn.AGENT_PROCESS_CPU_MAX, "main", 1.0),
            (mn.AGENT_PROCESS_CPU_MAX, "sidecar", 0.98),
            (mn.AGENT_PROCESS_CPU_MAX, "POD", 0.0),
            (mn.AGENT_PROCESSES_PINNED, "main", 1.0),
            (mn.AGENT_PROCESSES_PINNED, "sidecar", 1.0),
        ]
    )
    (window,) = windows_from_samples(parse_text(text, "test"), step_seconds=60.0)
    stats = window.pods[0].stats
    # a steady gauge read as a counter would give a rate of 0; summed, 1.98 cores
    assert stats[Signal.PROCESS_CPU_MAX_CORES].max == 1.0
    assert stats[Signal.PROCESSES_PINNED].p50 == 2.0
