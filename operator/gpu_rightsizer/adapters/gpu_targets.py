"""GPU series are believed by the scrape target that served them, never by the labels they carry.

A DCGM series says which pod holds a GPU through its own `pod`/`namespace` labels (after Prometheus's
`honor_labels: false` renaming, `exported_pod`/`exported_namespace`). Any target can serve such
labels: a tenant's pod that exposes a copy of another pod's series, with that pod's `exported_*`
labels and GPU UUID, would otherwise give that pod its figures. What a series cannot choose under
`honor_labels: false` are its *target labels*: `namespace`, `pod`, `service`, `job` and `instance`,
set by Prometheus from service discovery (a series label of the same name is renamed `exported_*`).

The node agent's per-container CPU series (`AGENT_CONTAINER_METRICS`) name their pod the same way and
follow the same rule: what is said below of DCGM selectors holds for them too.

So every PromQL selector of a DCGM metric is limited to the trusted targets' matchers
(`restrict_to_trusted`: one place, applied to every query the Prometheus source sends, which the
incremental reads use too), and two checks run on each read:

- `claims_query`: which target reports which device for which pod, for `gpu_identity.device_conflicts`
  (one GPU reported by two trusted targets for different pods is refused);
- `relabelled_query`: DCGM series from *any* target whose target labels differ from those of their
  target's `up` series. Only a target scraped with `honor_labels: true` can serve those, and such a
  target can set any label, `job` and `namespace` included: no selector can tell its series from a
  trusted target's. Then no GPU series' identity is proof, and every window carries a warning,
  which blocks automatic actions. A target that copies every target label of a trusted target
  (`job`, `instance`, `namespace`, `pod`, `service`) is not detectable this way; `honor_labels_declared`
  (the user says so) refuses automatic actions as well.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpu_rightsizer.config import TrustedTarget
from gpu_rightsizer.logic.gpu_identity import DeviceClaim, DeviceConflict, device_conflicts
from gpu_rightsizer.model import metric_names as mn

#: Result names of the identity queries in a read's answers.
CLAIMS = "identity:claims"
RELABELLED = "identity:relabelled"
#: Labels naming a scrape target, set by Prometheus from service discovery.
TARGET_LABELS = ("job", "instance", "namespace", "pod", "service")
#: Series every GPU exporter sends for every device, MIG instances included (dcgm-exporter's default
#: counters, the agent): enough to see who reports what, at the cost of one series per device.
_IDENTITY_METRICS = (mn.DCGM_FB_USED,)
_DCGM_NAMES = tuple(
    sorted(
        {v for v in vars(mn).values() if isinstance(v, str) and v.startswith("DCGM_FI_")},
        key=len,
        reverse=True,
    )
)
#: The node agent's per-container series (`agent/process_cpu.py`). They name their pod with labels of
#: their own, like a DCGM series, and decide the CPU rules (a loader pinned at one core, or not): a
#: tenant's copy could make a starved loader look fed, or a fed one starved. Same rule as GPU series.
AGENT_CONTAINER_METRICS = (mn.AGENT_PROCESS_CPU_MAX, mn.AGENT_PROCESSES_PINNED)
#: Every metric believed only from the trusted targets, longest first (a name is never matched
#: inside a longer one).
TRUSTED_ONLY_METRICS = tuple(sorted({*_DCGM_NAMES, *AGENT_CONTAINER_METRICS}, key=len, reverse=True))


def selects_trusted_only(query: str) -> bool:
    """Whether `query` reads a series believed only from the trusted targets (a DCGM or agent series)."""
    return any(name in query for name in TRUSTED_ONLY_METRICS)


#: `prometheus.add_matchers`: (query, matchers, metric names) → the query with the matchers added to
#: every selector of those names (passed in, so this module does not import the Prometheus source).
AddMatchers = Callable[[str, Sequence[str], Sequence[str]], str]


def restrict_to_trusted(
    query: str, targets: Sequence[TrustedTarget] | None, add_matchers: AddMatchers
) -> str:
    """`query` with every selector of a trusted-only metric (DCGM, the agent's per-container series)
    limited to the trusted targets (one copy of the query per target, joined by `or`: where two
    targets give the same result labels, the first one's is kept).

    None or an empty list leaves the query as it is; so does a query without such a selector."""
    if not targets or not selects_trusted_only(query):
        return query
    copies = dict.fromkeys(  # a query that selects every target on purpose comes back unchanged
        add_matchers(query, target, TRUSTED_ONLY_METRICS).replace(
            '{__name__=~"DCGM_', "{" + ",".join(target) + ',__name__=~"DCGM_'
        )
        for target in targets
    )
    return next(iter(copies)) if len(copies) == 1 else " or ".join(f"({copy})" for copy in copies)


_MATCHER = re.compile(r'^([a-zA-Z_][a-zA-Z0-9_]*)(=~|!=|!~|=)"((?:[^"\\]|\\.)*)"$')


def served_by_trusted(labels: Mapping[str, str], targets: Sequence[TrustedTarget]) -> bool:
    """Whether a sample's labels match one trusted target's matchers, as PromQL matches them (regexes
    anchored; a missing label is the empty string). For files whose series carry their target labels
    (a `/federate` or remote-read dump): the same rule as the queries."""
    for target in targets:
        ok = True
        for matcher in target:
            found = _MATCHER.match(matcher)
            if found is None:
                raise ValueError(f"not a normalised label matcher: {matcher!r}")
            name, op, raw = found.groups()
            value = re.sub(r"\\(.)", r"\1", raw)
            have = labels.get(name, "")
            if op == "=":
                ok = have == value
            elif op == "!=":
                ok = have != value
            else:
                ok = (re.fullmatch(value, have) is not None) == (op == "=~")
            if not ok:
                break
        if ok:
            return True
    return False


def claim_of(labels: Mapping[str, str], device: str, namespace: str, pod: str) -> DeviceClaim:
    """The claim a sample's series makes: its target is `job instance`, as in `claims_query`."""
    return DeviceClaim(device, f"{labels.get('job', '')} {labels.get('instance', '')}", namespace, pod)


def _seen(selector: str, window_seconds: float, step_seconds: float | None) -> tuple[str, str]:
    """(aggregation, expression) for the series of `selector` in the window: each one once
    (`group`), or, with a step, valued with the time of its newest sample there (`max` of the
    sample timestamps at every step), so that answers over short lookbacks can be kept for a window."""
    span = f"{max(1, round(window_seconds))}s"
    if step_seconds is None:
        return "group", f"last_over_time({selector}[{span}])"
    return "max", f"max_over_time(timestamp({selector})[{span}:{max(1, round(step_seconds))}s])"


def claims_query(
    window_seconds: float,
    fold_labels: Callable[[str], str],
    step_seconds: float | None = None,
    also: Sequence[str] = (),
) -> str:
    """(device, scrape target, pod) of every trusted device series in the window (the transport adds
    the trusted matchers; the target is `job instance`, both target labels; `fold_labels` is the
    Prometheus source's label fold, so pods are named as in its other queries). With a step, each
    valued with when it was last seen (`_seen`); grouped by the labels `also` too."""
    names = "|".join(_IDENTITY_METRICS)
    aggregation, seen = _seen(f'{{__name__=~"{names}"}}', window_seconds, step_seconds)
    tagged = f'label_join({seen}, "scrape_target", " ", "job", "instance")'
    by = ", ".join(("UUID", "GPU_I_ID", "namespace", "pod", "scrape_target", *also))
    return f"{aggregation} by ({by}) ({fold_labels(tagged)})"


def relabelled_sides(window_seconds: float, step_seconds: float | None = None) -> tuple[str, str]:
    """The target labels of every target's DCGM series, and of every target (`up`), in the window:
    the relabelled targets are those of the first the second lacks (`relabelled_query`). With a
    step, each valued with when it was last seen (`_seen`).

    The first selector starts with a matcher that selects every series, so that `restrict_to_trusted`
    leaves it alone: this check looks at every target on purpose."""
    names = "|".join(_IDENTITY_METRICS)
    by = ", ".join(TARGET_LABELS)
    exported = _seen(f'{{instance=~".*",__name__=~"{names}"}}', window_seconds, step_seconds)
    targets = _seen("up", window_seconds, step_seconds)
    return f"{exported[0]} by ({by}) ({exported[1]})", f"{targets[0]} by ({by}) ({targets[1]})"


def relabelled_query(window_seconds: float) -> str:
    """DCGM series of any target whose target labels are not their target's (`up`'s) in the window."""
    exported, targets = relabelled_sides(window_seconds)
    return f"{exported} unless on ({', '.join(TARGET_LABELS)}) {targets}"


def conflicts_in(rows: Sequence[Mapping[str, Any]]) -> dict[str, DeviceConflict]:
    """The devices two trusted targets report for different pods, from the claims answer, by the
    device id the assembly uses (UUID, with `-<GPU_I_ID>` for a MIG instance)."""
    claims = []
    for row in rows:
        labels = row.get("metric") or {}
        uuid = labels.get("UUID") or ""
        device = f"{uuid}-{labels['GPU_I_ID']}" if uuid and labels.get("GPU_I_ID") else uuid
        claims.append(
            DeviceClaim(
                device, labels.get("scrape_target", ""), labels.get("namespace", ""), labels.get("pod", "")
            )
        )
    return device_conflicts(claims)


def trust_warnings(
    results: Mapping[str, Sequence[Mapping[str, Any]]],
    targets: Sequence[TrustedTarget] | None,
    *,
    honor_labels_declared: bool = False,
) -> list[str]:
    """Warnings every window of the read carries (each blocks automatic actions): GPU series not
    limited to trusted targets, declared or detected `honor_labels: true`."""
    if targets is None:
        return []
    out = []
    if not targets:
        out.append(
            "GPU and agent series are read from every scrape target (trusted GPU targets: any): a pod's "
            "GPU and per-process CPU figures rest on labels any target can serve; no automatic action"
        )
    if honor_labels_declared:
        out.append(
            "GPU exporters are scraped with honorLabels: true (declared): a series can set its own target "
            "labels, so no GPU series' identity is proof; no automatic action"
        )
    relabelled = sorted(
        {
            f"job={labels.get('job', '')} instance={labels.get('instance', '')}"
            for labels in (row.get("metric") or {} for row in results.get(RELABELLED, []))
        }
    )
    if relabelled:
        shown = ", ".join(relabelled[:3]) + (
            f" and {len(relabelled) - 3} more" if len(relabelled) > 3 else ""
        )
        out.append(
            f"GPU series carry target labels their scrape target does not have ({shown}): that target "
            "honours its series' labels (honor_labels: true), so no GPU series' identity is proof; "
            "no automatic action"
        )
    return out
