"""The process's startup, whichever wings it runs: kopf settings, the shared context, the liveness probe.

Why here: the role chooses which wing's wiring is imported (`commands.run`), and each wing's kopf
handlers register when their module is imported, so an actuator process registers no pod or owner
watches. Both wings import this module first, so its startup handler runs before theirs and they
find the context in kopf's memo. The hook a wing needs is the context: the Kubernetes adapter, the
stop event, and its metric source (the recommender's cluster-wide one; the actuator's, for whole
windows scoped to one workload).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import kopf

from gpu_rightsizer.adapters.kube import KubeAdapter, api_client
from gpu_rightsizer.adapters.source_registry import open_source
from gpu_rightsizer.config import OperatorConfig
from gpu_rightsizer.runtime.context import OperatorContext, context_of

#: Set by `commands.run` before kopf starts.
CONFIG = OperatorConfig()


def runs(config: OperatorConfig, wing: str) -> bool:
    """Whether this process runs the wing ("recommender" or "actuator")."""
    return config.role in (wing, "all")


def context_for(config: OperatorConfig, kube: KubeAdapter) -> OperatorContext:
    """The shared context: each wing gets its metric source only when this process runs it."""
    return OperatorContext(
        config=config,
        kube=kube,
        source=open_source(config) if runs(config, "recommender") else None,
        verify_source=open_source(config, "prometheus") if runs(config, "actuator") else None,
    )


@kopf.on.startup()
async def process_startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Tune kopf and put the shared context into the memo (before any wing's startup)."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="gpurightsizer.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="gpurightsizer.io", key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.networking.connect_timeout = 10  # kopf's own calls, as adapters.kube.REQUEST_TIMEOUT ours
    settings.networking.request_timeout = settings.watching.server_timeout + 60
    settings.networking.error_backoffs = [1, 2, 5, 10, 30]
    memo.context = context_for(CONFIG, KubeAdapter(api_client()))


@kopf.on.probe(id="secondsSinceLastCycle")
def last_cycle_age(memo: kopf.Memo, **_: Any) -> float:
    """Readiness/liveness detail: how long ago the analysis cycle last completed (or started waiting)."""
    return round(time.monotonic() - context_of(memo).last_cycle, 1)
