"""Scoping the device families to a shard: facts about GPUs come from one light cluster-wide query.

Why: which pods held one device over the window (sharers) and which trusted targets report a device
for different pods (UUID collisions) are facts about the GPU, not about one namespace, and a GPU may
be shared by pods of namespaces that different shards own. Reading every device family cluster-wide
in every shard multiplied Prometheus' work by the number of shards. One instant query over the
device identity labels says who held what (`incremental.IdentityCache`, with the labels
`FACT_LABELS`); a shard then reads the full device families only for the series of its own
namespaces' pods and the board-level series (`held_in`).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpu_rightsizer.adapters.prometheus import (
    _SELECTED_NAMES,
    _promql_regex_literal,
    add_matchers,
)

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
