"""Facts about GPUs, from one light cluster-wide query each cycle, shared by every chunk and shard.

Why: which pods held one device over the window (sharers) and which trusted targets report a device
for different pods (UUID collisions) are facts about the GPU, not about one namespace, and a GPU may
be shared by pods of namespaces that different shards own. Reading every device family cluster-wide
in every shard multiplied Prometheus' work by the number of shards. Here one instant query over the
device identity labels (`group by`, no samples come back) says who held what; it looks back only to
the previous read (the whole window the first time), and a holder not seen for a window is
forgotten, as `incremental.KsmCache` does. A shard then reads the full device families only for the
series of its own namespaces' pods and the board-level series (`held_in`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from gpu_rightsizer.adapters import gpu_targets
from gpu_rightsizer.adapters.prometheus import (
    _SELECTED_NAMES,
    _promql_regex_literal,
    add_matchers,
    device_id_of,
    fold_labels,
)
from gpu_rightsizer.adapters.source import CycleReport

Key = tuple[str, str]
Labels = tuple[tuple[str, str], ...]
#: `PrometheusSource.instant`: (what, query, at) → PromQL vector rows.
InstantQuery = Callable[[str, str, float], list[dict[str, Any]]]

#: The labels the facts keep: the claim's (device, scrape target, pod) and the device's node and index.
FACT_LABELS = ("hostname", "gpu")
_DCGM_NAMES = tuple(name for name in _SELECTED_NAMES if name.startswith("DCGM_"))
#: Where a device series names the pod's namespace (before `fold_labels`): its own label, or the
#: `honor_labels: false` renaming (`namespace` is then the exporter's), or the older cAdvisor-style one.
_HELD_IN = (
    ('namespace=~"{}"', 'exported_namespace=""', 'pod_namespace=""'),
    ('exported_namespace=~"{}"',),
    ('pod_namespace=~"{}"',),
)
#: Board-level series (no pod; a MIG GPU's PCIe, power, clocks): merged into its slices' figures. Under
#: the renaming their `pod` is the exporter's own, as `PrometheusSource.read_unheld_gpus` reads them.
_BOARDS = (
    ('pod=""', 'exported_pod=""', 'pod_name=""'),
    ('exported_pod=""', 'pod_name=""', 'pod=~".*dcgm-exporter.*"'),
)


def held_in(expression: str, namespaces: Sequence[str]) -> str:
    """A device family's `expression` over the series of pods in `namespaces` and the board-level
    series only: one copy per label variant, each with the matchers in its DCGM selectors (so
    Prometheus selects only those series), joined by `or` (a series two copies select gives the same
    result labels, and the first is kept)."""
    alternatives = "|".join(_promql_regex_literal(namespace) for namespace in sorted(set(namespaces)))
    variants = [
        *([tuple(m.format(alternatives) for m in variant) for variant in _HELD_IN] if alternatives else []),
        *_BOARDS,
    ]
    copies = [with_matchers(expression, variant) for variant in variants]
    return " or ".join(f"({copy})" for copy in copies)


def with_matchers(expression: str, matchers: Sequence[str]) -> str:
    """`expression` with `matchers` in every DCGM selector, by name or `__name__` regex (raw or recorded)."""
    extra = ",".join(matchers)
    scoped = add_matchers(expression, matchers, _DCGM_NAMES)
    for prefix in ('{__name__=~"DCGM_', '{__name__=~"gpu:'):
        scoped = scoped.replace(prefix, "{" + extra + "," + prefix[1:])
    return scoped


def facts_query(lookback_seconds: float) -> str:
    """(device, node, index, pod, scrape target) of every device identity series seen in the lookback."""
    return gpu_targets.claims_query(lookback_seconds, fold_labels, FACT_LABELS)


class GPUFacts:
    """Who held each GPU over the window, and the claims the UUID-collision check reads."""

    def __init__(self, window_seconds: float) -> None:
        self.window_seconds = window_seconds
        self.seen: dict[Labels, float] = {}  # identity labels → when last seen
        self.last_read: float | None = None

    def read(self, instant: InstantQuery, now: float, report: CycleReport) -> None:
        """Refresh the facts: one instant query back to the previous read (a failure is raised)."""
        lookback = self.window_seconds if self.last_read is None else now - self.last_read
        lookback = max(1.0, min(self.window_seconds, lookback))
        rows = instant("gpu facts", facts_query(lookback), now)
        report.queries += 1
        for row in rows:
            labels = row.get("metric") or {}
            self.seen[tuple(sorted((str(k), str(v)) for k, v in labels.items()))] = now
        self.last_read = now
        horizon = now - self.window_seconds
        for labels in [labels for labels, seen in self.seen.items() if seen < horizon]:
            del self.seen[labels]

    def holders(self) -> dict[tuple[str, str], set[Key]]:
        """(node, device id) → the pods seen on it in the window (every namespace's)."""
        out: dict[tuple[str, str], set[Key]] = defaultdict(set)
        for identity in self.seen:
            labels = dict(identity)
            if labels.get("pod"):
                out[(labels.get("hostname", ""), device_id_of(labels))].add(
                    (labels.get("namespace", ""), labels["pod"])
                )
        return dict(out)

    def claims(self) -> list[dict[str, Any]]:
        """The facts as `gpu_targets.claims_query`'s answer over the window."""
        return [{"metric": dict(identity)} for identity in self.seen]
