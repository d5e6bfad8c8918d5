"""Write simulated history as an OpenMetrics file.

The file suits `promtool tsdb create-blocks-from openmetrics` (test-cluster §5: every family grouped
under its `# TYPE`, one series' samples together in time order, timestamps in seconds, `# EOF` last)
and the OpenMetrics source of `gpu-rightsizer analyze`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TextIO

from gpu_rightsizer.sim.scenarios import (
    LabelStyle,
    Scenario,
    SeriesSample,
    cluster_series,
    pod_contexts,
    pod_series,
)

LabelKey = tuple[tuple[str, str], ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def family_name(metric: str, is_counter: bool) -> str:
    """OpenMetrics family of a sample name: counters drop their `_total` suffix."""
    return metric.removesuffix("_total") if is_counter else metric


class SeriesStore:
    """Samples grouped by family and series, ready to be written in OpenMetrics order."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[bool, dict[str, dict[LabelKey, dict[float, float]]]]] = {}

    def add(self, samples: Iterable[SeriesSample], timestamp: float) -> None:
        """Record samples taken at `timestamp` (a repeated series at one instant keeps the last value)."""
        for metric, labels, value, is_counter in samples:
            family = family_name(metric, is_counter)
            _, by_name = self._families.setdefault(family, (is_counter, {}))
            series = by_name.setdefault(metric, {})
            series.setdefault(tuple(sorted(labels.items())), {})[timestamp] = value

    def write(self, out: TextIO) -> int:
        """Write everything in OpenMetrics text format; returns the number of sample lines."""
        lines = 0
        for family in sorted(self._families):
            is_counter, by_name = self._families[family]
            out.write(f"# TYPE {family} {'counter' if is_counter else 'gauge'}\n")
            for metric in sorted(by_name):
                for key in sorted(by_name[metric]):
                    label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in key)
                    prefix = f"{metric}{{{label_text}}}" if label_text else metric
                    for ts, value in sorted(by_name[metric][key].items()):
                        out.write(f"{prefix} {_format_value(value)} {_format_value(ts)}\n")
                        lines += 1
        out.write("# EOF\n")
        return lines


def generate(
    scenarios: Sequence[Scenario],
    start: float,
    end: float,
    step_seconds: float = 60.0,
    style: LabelStyle | None = None,
) -> SeriesStore:
    """History of every scenario's pods over [start, end] at `step_seconds`."""
    if end <= start:
        raise ValueError(f"window end {end} is not after its start {start}")
    if step_seconds <= 0:
        raise ValueError("step must be positive")
    store = SeriesStore()
    steps = int((end - start) // step_seconds)
    for scenario in scenarios:
        pods = pod_contexts(scenario, start, end)
        for index in range(steps + 1):
            t = start + index * step_seconds
            store.add(cluster_series(scenario, pods, t), t)
            for ctx in pods:
                store.add(pod_series(scenario, ctx, t, style), t)
    return store


def write_openmetrics(
    path: Path,
    scenarios: Sequence[Scenario],
    start: float,
    end: float,
    step_seconds: float = 60.0,
    style: LabelStyle | None = None,
) -> int:
    """Backfill the scenarios into `path`; returns the number of samples written."""
    store = generate(scenarios, start, end, step_seconds, style)
    with path.open("w", encoding="utf-8") as out:
        return store.write(out)
