"""Which `WindowSource` the operator reads from: one line per source.

Adding a metric source: write one module whose class implements `adapters.source.WindowSource` and a
function that builds it from the operator's configuration, then add one line to `SOURCES`. Nothing
else names a source: the recommender and the actuator take whatever `open_source` returns.
"""

from __future__ import annotations

from collections.abc import Callable

from gpu_rightsizer.adapters import prometheus, windows
from gpu_rightsizer.adapters.source import WindowSource
from gpu_rightsizer.config import OperatorConfig

#: Source name -> how to build it from the operator's configuration.
SOURCES: dict[str, Callable[[OperatorConfig], WindowSource]] = {
    "prometheus": prometheus.source_for,  # whole windows, one batch of queries per read
    "incremental": windows.sources_for,  # Prometheus, only the interval since the last read
}


def source_name(cfg: OperatorConfig) -> str:
    """The recommender's source: incremental reads unless `--full-window-reads` asks for whole ones."""
    return "prometheus" if cfg.full_window_reads else "incremental"


def open_source(cfg: OperatorConfig, name: str | None = None) -> WindowSource | None:
    """The named source (else the configured one); None when no metrics backend is configured."""
    if not cfg.prometheus_url:
        return None
    return SOURCES[name or source_name(cfg)](cfg)
