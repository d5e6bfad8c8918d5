"""GPU series are believed by the scrape target that served them, never by the labels they carry.

A DCGM series says which pod holds a GPU through its own `pod`/`namespace` labels (after Prometheus's
`honor_labels: false` renaming, `exported_pod`/`exported_namespace`). Any target can serve such
labels: a tenant's pod that exposes a copy of another pod's series, with that pod's `exported_*`
labels and GPU UUID, would otherwise give that pod its figures. What a series cannot choose under
`honor_labels: false` are its *target labels*: `namespace`, `pod`, `service`, `job` and `instance`,
set by Prometheus from service discovery (a series label of the same name is renamed `exported_*`).

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


#: `prometheus.add_matchers`: (query, matchers, metric names) → the query with the matchers added to
#: every selector of those names (passed in, so this module does not import the Prometheus source).
AddMatchers = Callable[[str, Sequence[str], Sequence[str]], str]


def restrict_to_trusted(
    query: str, targets: Sequence[TrustedTarget] | None, add_matchers: AddMatchers
) -> str:
    """`query` with every DCGM selector limited to the trusted targets (one copy of the query per
    target, joined by `or`: where two targets give the same result labels, the first one's is kept).

    None or an empty list leaves the query as it is; so does a query without a DCGM selector."""
    if not targets or not any(name in query for name in _DCGM_NAMES):
        return query
    copies = dict.fromkeys(  # a query that selects every target on purpose comes back unchanged
        add_matchers(query, target, _DCGM_NAMES).replace(
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


def claims_query(window_seconds: float, fold_labels: Callable[[str], str], also: Sequence[str] = ()) -> str:
    """(device, scrape target, pod) of every trusted device series in the window (the transport adds
    the trusted matchers; the target is `job instance`, both target labels; `fold_labels` is the
    Prometheus source's label fold, so pods are named as in its other queries), and the labels `also`."""
    names = "|".join(_IDENTITY_METRICS)
    seen = f'last_over_time({{__name__=~"{names}"}}[{max(1, round(window_seconds))}s])'
    tagged = f'label_join({seen}, "scrape_target", " ", "job", "instance")'
    by = ", ".join(("UUID", "GPU_I_ID", "namespace", "pod", "scrape_target", *also))
    return f"group by ({by}) ({fold_labels(tagged)})"


def relabelled_query(window_seconds: float) -> str:
    """DCGM series of any target whose target labels are not their target's (`up`'s) in the window.

    The selector starts with a matcher that selects every series, so that `restrict_to_trusted` leaves
    it alone: this check looks at every target on purpose."""
    names = "|".join(_IDENTITY_METRICS)
    span = f"[{max(1, round(window_seconds))}s]"
    by = ", ".join(TARGET_LABELS)
    return (
        f'group by ({by}) (last_over_time({{instance=~".*",__name__=~"{names}"}}{span})) '
        f"unless on ({by}) group by ({by}) (last_over_time(up{span}))"
    )


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
            "GPU series are read from every scrape target (trusted GPU targets: any): a pod's GPU figures "
            "rest on labels any target can serve; no automatic action"
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
