"""Prometheus source: aggregated PromQL over the window → `WorkloadWindow`s.

Every statistic is computed by Prometheus (`*_over_time`, `quantile_over_time` over subqueries at the
sample step, evaluated at an explicit `time=`), one query per metric with all statistics joined by
`or` under a `stat` label, so an analysis sends a fixed number of queries whatever the number of pods
(architecture-anchors §B.4): one per GPU field and per cAdvisor/serving signal, one per
kube-state-metrics series, and a few coarse range queries for the workload-level serving sums and the
GPU/CPU correlation. Queries run with bounded concurrency and a timeout. Label variants
(`exported_pod`, `pod_name`, `Hostname`/`hostname`, `uuid`) are folded in PromQL with
`label_replace`; NaN and DCGM blank sentinels are dropped with a comparison filter.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from gpu_rightsizer.adapters import gpu_targets
from gpu_rightsizer.adapters.capacity import capacity_from_ksm
from gpu_rightsizer.adapters.openmetrics import (
    Inventory,
    Key,
    assemble_windows,
    replaced_note,
    successions,
)
from gpu_rightsizer.adapters.prom_answers import (
    AnswerError,
    RangeSeries,
    SamplePairs,
    decode_matrix,
    decode_result,
)
from gpu_rightsizer.adapters.source import (
    EVERYWHERE,
    ExtraOwners,
    Scope,
    WindowRead,
    rate_window_seconds,
    step_for,
)
from gpu_rightsizer.config import OperatorConfig, TrustedTarget
from gpu_rightsizer.logic import stats as st
from gpu_rightsizer.logic.capacity import ClusterCapacity
from gpu_rightsizer.logic.floors import UnheldGPU
from gpu_rightsizer.logic.timeline import Timeline, timeline_of
from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.observation import (
    GPUObservation,
    PodObservation,
    Signal,
    SignalStats,
    WorkloadWindow,
)
from gpu_rightsizer.model.shards import ShardSlice

Progress = Callable[[str], None]
T = TypeVar("T")
LOG = logging.getLogger(__name__)

#: Keys that identify one device series after label folding.
GPU_KEYS = ("namespace", "pod", "hostname", "UUID", "gpu", "GPU_I_ID", "GPU_I_PROFILE", "modelName", "vgpu")
POD_KEYS = ("namespace", "pod")
_SENTINEL_FILTER = "< 9.2e18"  # drops NaN (comparisons with NaN are false) and DCGM blank sentinels
_KSM_METRICS = (
    mn.KSM_POD_OWNER,
    mn.KSM_REPLICASET_OWNER,
    mn.KSM_JOB_OWNER,
    mn.KSM_POD_INFO,
    mn.KSM_POD_LABELS,
    mn.KSM_POD_REQUESTS,
    mn.KSM_POD_LIMITS,
    mn.KSM_POD_LAST_TERMINATED,
    mn.KSM_NODE_LABELS,
    mn.KSM_DEPLOYMENT_REPLICAS,
    mn.KSM_STATEFULSET_REPLICAS,
    mn.KSM_HPA_INFO,
    mn.KSM_HPA_MIN_REPLICAS,
    mn.KSM_HPA_MAX_REPLICAS,
)


@dataclass(frozen=True)
class QueryStats:
    """What one query cost Prometheus, from its own `stats=all` answer (`PrometheusSource.query_stats`)."""

    what: str
    #: Raw samples the query read from storage (`stats.samples.totalQueryableSamples`).
    samples: int
    #: Series in the answer.
    series: int
    #: Prometheus' own evaluation time (`stats.timings.execTotalTime`), seconds.
    seconds: float


def answer_stats(what: str, content: bytes) -> QueryStats | None:
    """The `stats` object of a `stats=all` answer, read from the answer's tail (Prometheus writes it
    after the result, so the result is never decoded twice); None when the answer has none."""
    at = content.rfind(b'"stats":')
    if at < 0:
        return None
    try:
        stats, _ = json.JSONDecoder().raw_decode(content[at + len(b'"stats":') :].decode())
        samples = int(stats["samples"]["totalQueryableSamples"])
        seconds = float(stats["timings"]["execTotalTime"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None
    return QueryStats(what, samples, content.count(b'"metric":'), seconds)


class PrometheusSourceError(RuntimeError):
    """Prometheus is unreachable, refused the query, or answered something that is not a PromQL result."""


@dataclass(frozen=True)
class PrometheusConfig:
    """Where Prometheus is and how to talk to it."""

    url: str
    bearer_token: str | None = None
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None
    #: Client certificate and key files (a kubeconfig user reaching Prometheus through the API
    #: server's service proxy).
    client_cert: tuple[str, str] | None = None
    insecure: bool = False
    timeout_seconds: float = 30.0
    #: Ask for gzip-compressed answers. Off by default: compressing is about a quarter of Prometheus'
    #: CPU for a large range answer (docs/scaling.md), and the recommender and its Prometheus
    #: normally share a cluster network; turn it on to read a store across a metered link.
    compressed_answers: bool = False
    max_concurrency: int = 4
    retries: int = 1
    #: Label matchers added to every selector, e.g. ('cluster="prod"',): one cluster of a shared store.
    extra_matchers: tuple[str, ...] = ()
    #: The scrape targets whose GPU series are believed (`gpu_targets`); None reads every target's
    #: without a check (a library default for recorded test data), empty reads every target's with a
    #: warning that blocks automatic actions.
    trusted_gpu_targets: tuple[TrustedTarget, ...] | None = None
    #: The user says GPU exporters are scraped with honorLabels: true (no identity is proof then).
    honor_labels_declared: bool = False
    #: The recommender's shard: saved windows are only loaded under the same layout (its slice
    #: differs under another one).
    shard: ShardSlice = field(default_factory=ShardSlice)


#: Where a person sets the token, named in the 401/403 message (CLI, operator flag, chart value).
TOKEN_SETTINGS = (
    "--bearer-token / --bearer-token-file (analyze), --prometheus-token-file (run), "
    "prometheus.bearerToken.secretName (chart)"
)
_HTTP_STATUS = re.compile(r"HTTP Status Code (\d+) \((b?)(['\"])(.*)\3\)$", re.S)


def refusal_text(url: str, what: str, error: str) -> str:
    """prometheus-api-client's `HTTP Status Code 401 (b'Unauthorized\\n')` as a sentence a person can act on."""
    match = _HTTP_STATUS.search(error)
    if match is None:
        return f"Prometheus at {url} refused the query for {what}: {error}"
    code, body = int(match.group(1)), match.group(4).replace("\\n", " ").strip()
    text = f"Prometheus at {url} refused the query for {what}: HTTP {code}" + (
        f" ({body[:200]})" if body else ""
    )
    if code in (401, 403):
        text += (
            ". It wants credentials (401) or refuses these (403): check the bearer token, set with "
            f"{TOKEN_SETTINGS}"
        )
    return text


def _duration(seconds: float) -> str:
    return f"{max(1, round(seconds))}s"


#: (target, source) of every label variant `fold_labels` folds, innermost first.
LABEL_FOLDS: tuple[tuple[str, str], ...] = (
    ("pod", "pod_name"),
    ("pod", "exported_pod"),
    ("namespace", "pod_namespace"),
    ("namespace", "exported_namespace"),
    ("container", "exported_container"),
    ("hostname", "Hostname"),
    ("UUID", "uuid"),
)


def fold_labels(expr: str) -> str:
    """Fold the label variants onto `namespace`, `pod`, `container`, `hostname`, `UUID` in PromQL."""
    for target, source in LABEL_FOLDS:
        expr = f'label_replace({expr}, "{target}", "$1", "{source}", "(.+)")'
    return expr


def folded_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """One series' labels as `fold_labels` leaves them (the same `LABEL_FOLDS`, in the same order), for
    the answers of bare selectors, whose series the reader folds instead of Prometheus.

    `label_replace(..., "(.+)")` is an anchored RE2 match whose `.` stops at a newline: a source
    value that is empty or holds one leaves the target as it was."""
    out = dict(labels)
    for target, source in LABEL_FOLDS:
        value = out.get(source)
        if value and "\n" not in value:
            out[target] = value
    return out


def without_folds(query: str, absent: Iterable[str]) -> str:
    """`query` without the `fold_labels` steps whose source label no series has (`absent`).

    Such a `label_replace` changes nothing, yet Prometheus hashes every series' labels at every step
    for it, and each selector has seven: most of a steady read's CPU (docs/scaling.md)."""
    for target, source in LABEL_FOLDS:
        if source not in absent:
            continue
        tail = f', "{target}", "$1", "{source}", "(.+)")'
        while (end := query.find(tail)) >= 0:
            start = _call_start(query, end, "label_replace(")
            query = query[:start] + query[start + len("label_replace(") : end] + query[end + len(tail) :]
    return query


def _call_start(text: str, argument_end: int, call: str) -> int:
    """Where the call whose first argument ends at `argument_end` opens (`call` included): the
    nearest unmatched `(` before it, outside string literals."""
    depth, index = 0, argument_end - 1
    while index >= 0:
        char = text[index]
        if char == '"':  # skip back over a string literal (label values are escaped with \)
            index -= 1
            while index >= 0 and not (text[index] == '"' and text[index - 1] != "\\"):
                index -= 1
        elif char == ")":
            depth += 1
        elif char == "(":
            if depth == 0:
                start = index + 1 - len(call)
                if text[start : index + 1] != call:
                    raise ValueError(f"not a {call}...) argument at {argument_end}")
                return start
            depth -= 1
        index -= 1
    raise ValueError(f"no {call}...) around position {argument_end}")


def stats_query(inner: Callable[[str], str], window: float, step: float, activity_floor: float | None) -> str:
    """One query returning every statistic of the instant-vector expression `inner(offset)`.

    `inner("")` is the expression, `inner(" offset 60s")` the same one step earlier (for the mean
    absolute step, the sawtooth numerator). Each result carries a `stat` label.
    """
    current = inner("")
    previous = inner(f" offset {_duration(step)}")
    span = f"[{_duration(window)}:{_duration(step)}]"
    parts = {
        "mean": f"avg_over_time(({current}){span})",
        "p05": f"quantile_over_time(0.05, ({current}){span})",
        "p50": f"quantile_over_time(0.5, ({current}){span})",
        "p95": f"quantile_over_time(0.95, ({current}){span})",
        "p99": f"quantile_over_time(0.99, ({current}){span})",
        "max": f"max_over_time(({current}){span})",
        "min": f"min_over_time(({current}){span})",
        "count": f"count_over_time(({current}){span})",
        "trend": f"deriv(({current}){span}) * 3600",
        "absstep": f"avg_over_time(abs(({current}) - ({previous})){span})",
    }
    if activity_floor is not None:
        parts["active"] = f"avg_over_time((({current}) > bool {activity_floor}){span})"
    return " or ".join(f'label_replace({expr}, "stat", "{name}", "", "")' for name, expr in parts.items())


def _gpu_expr(metric: str, keys: Sequence[str] = GPU_KEYS) -> Callable[[str], str]:
    by = ", ".join(keys)
    return lambda offset: f"max by ({by}) ({fold_labels(f'{metric}{offset} {_SENTINEL_FILTER}')})"


def _throttle_expr(offset: str, rate_window: float) -> str:
    """Share of time throttled per device: the clock-event bitmask (either DCGM name) or, where larger or
    alone, the throttling violation counters (ns held down per second / 1e9); see `throttle_series`.

    Every series is read once: the bitmask through `throttle_flag`, each violation counter through
    its own rate (summed per device), the two sides through `largest_of`."""
    raw = f"{_CLOCK_EVENTS}{offset} {_SENTINEL_FILTER}"
    flags = f"max by ({', '.join(GPU_KEYS)}) ({fold_labels(throttle_flag(raw))})"
    return largest_of(flags, _violations_expr(offset, rate_window))


#: The clock-event bitmask, under either DCGM name.
_CLOCK_EVENTS = f'{{__name__=~"{"|".join(mn.DCGM_CLOCK_EVENT_METRICS)}"}}'


def _violations_expr(offset: str, rate_window: float) -> str:
    """Share of time held down per device from the throttling violation counters, at most 1."""
    # a rate above 1 s/s is a DCGM blank value or a wrapped counter, not a measurement; each counter
    # is tagged before its rate loses the name, so a device with several counters sums them
    held = " or ".join(
        f"label_replace(rate({counter}[{_duration(rate_window)}]{offset}) < "
        f'{1.5 * mn.VIOLATION_NS_PER_SECOND:g}, "{_SIDE_LABEL}", "{counter}", "", "")'
        for counter in mn.DCGM_THROTTLE_VIOLATION_COUNTERS
    )
    keys = ", ".join(GPU_KEYS)
    return f"clamp_max(sum by ({keys}) ({fold_labels(held)}) / {mn.VIOLATION_NS_PER_SECOND:g}, 1)"


def throttle_raw_expr(rate_window: float) -> str:
    """The throttle family for a reader that works out the flags itself (`incremental.Family.bitmasks`):
    the clock-event bitmasks as raw series, beside the violation side as `_throttle_expr` has it.

    Why: Prometheus evaluates every operator of `throttle_flag` at every step of a range query; at
    10,000 workloads over one steady read that was 1.3-1.7 s of evaluation, against 0.13 s for the
    bare selector over the same 82,350 samples (docs/scaling.md). The reader then takes, per device
    and time, the largest of its flags and its violation share, as `largest_of` does."""
    return f"{_CLOCK_EVENTS} or {_violations_expr('', rate_window)}"


def throttle_flag(bitmask: str) -> str:
    """1 where the clock-event bitmask has any of `mn.THROTTLE_CLOCK_EVENT_BITS` (8, 32, 64, 128)
    set, else 0, reading the bitmask once (a sum of `floor(x / bit) % 2` reads it once per bit).

    With k = floor((x mod 256) / 8), no throttle bit is set exactly when k is 0 or 2 (only bits
    below 8 and bit 16), and |(k - 1)² - 1| is 0 for those k and at least 1 for every other."""
    if tuple(mn.THROTTLE_CLOCK_EVENT_BITS) != (8, 32, 64, 128):
        raise AssertionError("throttle_flag is written for the clock-event bits 8, 32, 64 and 128")
    return f"clamp_max(abs((floor((({bitmask}) % 256) / 8) - 1) ^ 2 - 1), 1)"


#: Label that tells apart the sides of `largest_of` (removed again by its `max without`).
_SIDE_LABEL = "gpu_rightsizer_side"


def largest_of(*exprs: str) -> str:
    """Per series, the largest of instant-vector expressions whose series have the same labels; a
    series only one side has keeps that side's value. Each side is evaluated once: `(a > b) or b`
    evaluates `b` twice (PromQL shares no subexpressions), which pays where a side is a deep
    expression (the throttle family's), not where it is one function of a selector."""
    sides = " or ".join(
        f'label_replace({expr}, "{_SIDE_LABEL}", "{i}", "", "")' for i, expr in enumerate(exprs)
    )
    return f"max without ({_SIDE_LABEL}) ({sides})"


def counter_rate(selector: str, rate_window: float, offset: str) -> str:
    """Per-second rate of a counter that stays right for series younger than the rate window.

    `rate()` divides by the whole window, so a pod started 60 s ago reads a third of its real rate
    under a 3-minute window (exactly when a change is verified); `deriv()` fits only the samples there
    are but breaks at a counter reset, where `rate()` is right. The larger of the two is right in both
    cases (the labels of both sides are the same, so `or` picks per series).
    """
    window = f"[{_duration(rate_window)}]{offset}"
    # `a > b or b` evaluates deriv() twice, but has fewer PromQL nodes than `largest_of` (two
    # label_replace and an aggregation more); Prometheus' cost follows the nodes times the series
    # times the steps, not the samples (docs/scaling.md), so the counters keep this shape
    return f"(rate({selector}{window}) > deriv({selector}{window}) or deriv({selector}{window}))"


def _rate_by_pod(metric: str, rate_window: float, app_containers: bool) -> Callable[[str], str]:
    selector = f'{metric}{{container!="",container!="POD"}}' if app_containers else metric
    if metric in mn.CADVISOR_NETWORK_METRICS:
        return lambda offset: (
            "sum by (namespace, pod) (max by (namespace, pod, interface) "
            f"({fold_labels(counter_rate(metric, rate_window, offset))}))"
        )
    return lambda offset: (
        f"sum by (namespace, pod) ({fold_labels(counter_rate(selector, rate_window, offset))})"
    )


def pressure_by_pod(source: mn.PressureSource, rate_window: float) -> Callable[[str], str]:
    """A PSI share of time per pod (`mn.PressureSource`): the most-pressed app container's waiting
    rate, else (no waiting series for the pod) its stalled rate."""

    def one(metric: str, offset: str) -> str:
        selector = f'{metric}{{container!="",container!="POD"}}'
        return f"max by (namespace, pod) ({fold_labels(counter_rate(selector, rate_window, offset))})"

    return lambda offset: f"({one(source.waiting, offset)}) or ({one(source.stalled, offset)})"


#: Every metric name the queries select by name (serving metrics are selected by `__name__` regex).
_SELECTED_NAMES: tuple[str, ...] = tuple(
    sorted(
        {
            value
            for value in vars(mn).values()
            if isinstance(value, str)
            and value.startswith(("DCGM_FI_", "container_", "kube_", "gpu_rightsizer_container_"))
        },
        key=len,
        reverse=True,
    )
)
#: cAdvisor's names, whose `namespace` is the container's (kubelet is scraped with honor_labels). Not
#: the agent's: a PodMonitor scrape sets its `namespace` to the agent's own (the pod's is
#: `exported_namespace`), so a namespace matcher on its selectors would drop every series.
_CADVISOR_NAMES: tuple[str, ...] = tuple(n for n in _SELECTED_NAMES if n.startswith("container_"))
#: GPU pods as kube-state-metrics sees them: a container requests an NVIDIA GPU, MIG slice or share
#: (`nvidia_com_gpu`, `nvidia_com_mig_1g_10gb`, or the unsanitised names of newer releases).
GPU_REQUEST_SELECTOR = f'{mn.KSM_POD_REQUESTS}{{resource=~"nvidia.com.(gpu|mig).*"}}'
GPU_PODS = f"(max by (namespace, pod) ({GPU_REQUEST_SELECTOR}) > 0)"


def add_matchers(query: str, matchers: Sequence[str], names: Sequence[str] = _SELECTED_NAMES) -> str:
    """`query` with `matchers` added to every selector of the metrics `names` (and `{__name__=~...}`).

    Used for the extra matcher of multi-cluster stores (krr's `--prometheus-label`): on Thanos,
    Mimir or VictoriaMetrics, same-named pods of different clusters would otherwise merge.
    """
    if not matchers:
        return query
    extra = ",".join(matchers)
    pattern = _selectors_of(tuple(names))

    def add(match: re.Match[str]) -> str:
        body = (match.group(2) or "{}")[1:-1].strip()
        return f"{match.group(1)}{{{body + ',' if body else ''}{extra}}}"

    query = pattern.sub(add, query)
    if names is _SELECTED_NAMES:
        query = query.replace("{__name__=~", "{" + extra + ",__name__=~")
    return query


@functools.cache
def _selectors_of(names: tuple[str, ...]) -> re.Pattern[str]:
    """Selectors of these metric names (not inside a `__name__` regex or another name), with their
    matchers if any: group 1 the name, group 2 the `{...}`."""
    return re.compile(r'(?<![\w:"|])(' + "|".join(map(re.escape, names)) + r")(?![\w:])(\{[^}]*\})?")


_NAME_REGEX = re.compile(r'__name__=~"((?:[^"\\]|\\.)*)"')


def series_selected(query: str) -> str | None:
    """A `match[]` selector of at least every series `query` selects: the metric names it selects by
    name (`_SELECTED_NAMES`) or by `__name__` regex; None when it names none of them (a recorded
    series), for which the whole store's label names stand."""
    names = {match.group(1) for match in _selectors_of(_SELECTED_NAMES).finditer(query)}
    names.update(f"(?:{regex})" for regex in _NAME_REGEX.findall(query))
    if not names:
        return None
    return '{__name__=~"' + "|".join(sorted(names)) + '"}'


#: Longest namespace alternation put into every cAdvisor selector (characters).
MAX_NAMESPACE_REGEX = 256


def _promql_regex_literal(text: str) -> str:
    """`text` matched literally by a regex inside a PromQL double-quoted string: backslashes doubled,
    since PromQL strings take Go escapes and a single backslash before a dash is a parse error."""
    return re.escape(text).replace("\\", "\\\\").replace('"', '\\"')


def only_gpu_pods(inner: Callable[[str], str], namespaces: Sequence[str]) -> Callable[[str], str]:
    """Pod statistics for the containers of GPU pods only, and cAdvisor selectors limited to the
    namespaces that have GPU pods: without this each statistic ran over every container of the cluster."""
    return lambda offset: f"({in_namespaces(inner(offset), namespaces)}) and on (namespace, pod) {GPU_PODS}"


def in_namespaces(query: str, namespaces: Sequence[str]) -> str:
    """`query` with its cAdvisor selectors limited to `namespaces` (cAdvisor's `namespace` is the pod's),
    so Prometheus selects only their containers' series; unchanged past `MAX_NAMESPACE_REGEX`: the
    matcher is repeated in every selector, and past a few namespaces the join alone filters, so the
    query stays far below URL length limits (the client sends the query in the URL)."""
    alternatives = "|".join(_promql_regex_literal(n) for n in sorted(set(namespaces)))
    if not namespaces or len(alternatives) > MAX_NAMESPACE_REGEX:
        return query
    return add_matchers(query, (f'namespace=~"{alternatives}"',), _CADVISOR_NAMES)


def _gauge_by_pod(selector: str, combine: str = "sum") -> Callable[[str], str]:
    """A gauge per pod: its series summed, or their maximum for a per-container peak (`combine`)."""
    return lambda offset: (
        f"{combine} by (namespace, pod) ({fold_labels(f'{selector}{offset} {_SENTINEL_FILTER}')})"
    )


def serving_exprs(rate_window: float) -> dict[Signal, Callable[[str], str]]:
    """Per-pod serving signals (request rate, queue length, queue time), shared by the full and the
    incremental reads."""
    requests_selector = '{__name__=~"' + "|".join(mn.SERVING_REQUEST_COUNTERS) + '"}'
    queue_selector = '{__name__=~"' + "|".join(mn.SERVING_QUEUE_GAUGES) + '"}'
    queue_time_selector = '{__name__=~"' + "|".join(mn.SERVING_QUEUE_TIME_MS_GAUGES) + '"}'
    return {
        Signal.REQUESTS_PER_S: lambda o: (
            f"sum by (namespace, pod) ({fold_labels(f'rate({requests_selector}[{_duration(rate_window)}]{o})')})"
        ),
        Signal.QUEUE_LENGTH: _gauge_by_pod(queue_selector),
        Signal.QUEUE_TIME_MS: lambda o: (
            f"avg by (namespace, pod) ({fold_labels(f'{queue_time_selector}{o} {_SENTINEL_FILTER}')})"
        ),
    }


class PrometheusSource:
    """Reads workload windows from one Prometheus server."""

    def __init__(self, config: PrometheusConfig, *, step_seconds: float | None = None) -> None:
        self.config = config
        #: A fixed sample step for `read_windows` (`--prometheus-step`), else `step_for` the window.
        self.step_seconds = step_seconds
        session = requests.Session()
        session.verify = False if config.insecure else (config.ca_file or True)
        session.cert = config.client_cert
        # every request of the session, the client library's own too (requests asks for gzip otherwise)
        session.headers["Accept-Encoding"] = "gzip, deflate" if config.compressed_answers else "identity"
        headers = {"Authorization": f"Bearer {config.bearer_token}"} if config.bearer_token else None
        auth = (config.username, config.password or "") if config.username else None
        self.client = PrometheusConnect(
            url=config.url.rstrip("/"),
            headers=headers,
            auth=auth,
            session=session,
            retry=Retry(total=config.retries, backoff_factor=0.2, status_forcelist=(502, 503, 504)),
            timeout=math.ceil(config.timeout_seconds),
            method="POST",
        )
        self.queries_sent = 0
        #: What the last read found missing in the data (label allowlists), for people to fix.
        self.notes: list[str] = []
        #: Prometheus's own `warnings` (partial answers) since the last assembly; prometheus_api_client
        #: drops them, so a response hook keeps them. Every window assembled next carries them.
        self.answer_warnings: list[str] = []
        #: When a list, every query asks for `stats=all` and its `QueryStats` are appended here (the
        #: benchmarks' per-family cost; Prometheus 2.42 and newer answer it).
        self.query_stats: list[QueryStats] | None = None
        self._asking = threading.local()  # what the query in this thread is (for its stats)
        session.hooks["response"].append(self._keep_answer_warnings)

    def _keep_answer_warnings(self, response: requests.Response, *_: Any, **__: Any) -> None:
        if self.query_stats is not None:
            stats = answer_stats(getattr(self._asking, "what", "?"), response.content)
            if stats is not None:
                self.query_stats.append(stats)
        if (
            b'"warnings"' not in response.content
        ):  # a byte scan, so answers without warnings are not parsed twice
            return
        try:
            body = response.json()
        except ValueError:
            return
        if isinstance(body, dict) and isinstance(body.get("warnings"), list):
            self.answer_warnings.extend(str(warning) for warning in body["warnings"])

    # -- transport ----------------------------------------------------------------------------------
    def _call(self, what: str, send: Callable[[], Any]) -> list[dict[str, Any]]:
        result = self._send(what, send)
        if not isinstance(result, list) or not all(isinstance(r, dict) and "metric" in r for r in result):
            raise PrometheusSourceError(
                f"{self.config.url} returned something that is not a PromQL vector ({what})"
            )
        return result

    def _send(self, what: str, send: Callable[[], T]) -> T:
        """`send()`'s answer; every way it fails as a `PrometheusSourceError` a person can act on."""
        self.queries_sent += 1
        self._asking.what = what
        try:
            return send()
        except requests.exceptions.JSONDecodeError as error:
            raise PrometheusSourceError(
                f"{self.config.url} did not answer like Prometheus ({what}): the answer is not JSON: {error}"
            ) from error
        except requests.exceptions.SSLError as error:
            raise PrometheusSourceError(f"TLS error talking to {self.config.url}: {error}") from error
        except requests.exceptions.Timeout as error:
            raise PrometheusSourceError(
                f"Prometheus at {self.config.url} did not answer within {self.config.timeout_seconds:.0f}s ({what})"
            ) from error
        except requests.exceptions.RequestException as error:
            raise PrometheusSourceError(f"cannot reach Prometheus at {self.config.url}: {error}") from error
        except PrometheusApiClientException as error:
            raise PrometheusSourceError(refusal_text(self.config.url, what, str(error))) from error
        except (ValueError, KeyError, TypeError) as error:
            raise PrometheusSourceError(
                f"{self.config.url} did not answer like Prometheus ({what}): {error}"
            ) from error

    def instant(self, what: str, query: str, at: float) -> list[dict[str, Any]]:
        """An instant query at `at` (with the configured extra matchers)."""
        return self._call(what, lambda: self._request("query", query, {"time": f"{at:.3f}"}, decode_result))

    def _stats_params(self) -> dict[str, str]:
        return {"stats": "all"} if self.query_stats is not None else {}

    def _scoped(self, query: str) -> str:
        """`query` with the extra matchers, and its GPU selectors limited to the trusted targets."""
        return gpu_targets.restrict_to_trusted(
            add_matchers(query, self.config.extra_matchers), self.config.trusted_gpu_targets, add_matchers
        )

    def identity_answers(self, at: float, window_seconds: float) -> dict[str, list[dict[str, Any]]]:
        """The answers the assembly checks GPU identity with (`gpu_targets`); none without trusted targets."""
        if self.config.trusted_gpu_targets is None:
            return {}
        return {
            gpu_targets.CLAIMS: self.instant(
                "GPU claims", gpu_targets.claims_query(window_seconds, fold_labels), at
            ),
            gpu_targets.RELABELLED: self.instant(
                "relabelled GPU series", gpu_targets.relabelled_query(window_seconds), at
            ),
        }

    def gpu_namespaces(self, at: float, window_seconds: float) -> list[str]:
        """Namespaces where kube-state-metrics shows a pod requesting a GPU resource in the window."""
        rows = self.instant(
            "namespaces with GPU pods",
            f"count by (namespace) (max_over_time({GPU_REQUEST_SELECTOR}[{_duration(window_seconds)}]) > 0)",
            at,
        )
        return sorted({str(row["metric"]["namespace"]) for row in rows if row["metric"].get("namespace")})

    def range(self, what: str, query: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """A range query (with the configured extra matchers)."""
        query = self._scoped(query)
        return self._call(
            what,
            lambda: self.client.custom_query_range(
                query,
                start_time=datetime.fromtimestamp(start, tz=UTC),
                end_time=datetime.fromtimestamp(end, tz=UTC),
                step=_duration(step),
                params=self._stats_params(),
            ),
        )

    def range_series(self, what: str, query: str, start: float, end: float, step: float) -> list[RangeSeries]:
        """A range query's series, their samples kept as the answer's bytes (`prom_answers`).

        The request is prometheus-api-client's `custom_query_range`, sent on its session (same
        parameters, retries, authentication and errors); only the decoding differs: its JSON decoding
        holds every sample as Python objects, several times the answer's size."""
        params = {"start": round(start), "end": round(end), "step": _duration(step)}
        return self._matrix(what, "query_range", query, params)

    def matrix_series(self, what: str, query: str, at: float) -> list[RangeSeries]:
        """The raw samples of a range selector (`metric{...}[range]`) as an instant query at `at`: its
        series as `range_series` gives them, each with the samples' own times. Prometheus evaluates
        no function over them (`incremental.CounterRead` computes the rates)."""
        return self._matrix(what, "query", query, {"time": f"{at:.3f}"})

    def _matrix(self, what: str, path: str, query: str, params: Mapping[str, Any]) -> list[RangeSeries]:
        """A matrix answer of `/api/v1/{path}`, decoded by `prom_answers.decode_matrix`."""
        return self._send(what, lambda: self._request(path, query, params, decode_matrix))

    def _request(self, path: str, query: str, params: Mapping[str, Any], decode: Callable[[bytes], T]) -> T:
        """`/api/v1/{path}` with `query` (scoped) sent on prometheus-api-client's session (its method,
        retries, authentication and TLS settings), the body decoded by `decode` (msgspec: the stdlib
        decoder the client uses costs several times the time and memory). Raised errors are turned
        into `PrometheusSourceError` by `_send`."""
        client = self.client
        response = client._session.request(
            method=client._method,
            url=f"{client.url}/api/v1/{path}",
            params={"query": self._scoped(query), **params, **self._stats_params()},
            verify=client._session.verify,
            headers=client.headers,
            auth=client.auth,
            cert=client._session.cert,
            timeout=client._timeout,
        )
        if response.status_code != 200:
            raise PrometheusApiClientException(
                f"HTTP Status Code {response.status_code} ({response.content!r})"
            )
        return decode(response.content)

    def label_names(self, start: float, end: float, match: Sequence[str] = ()) -> set[str]:
        """Label names of the series with samples in `[start, end]`, of those `match` selects when
        given (`/api/v1/labels`: read from the index, no samples). A store that also holds other
        clusters answers a superset."""
        params: dict[str, Any] = {"start": f"{start:.3f}", "end": f"{end:.3f}"}
        if match:
            params["match[]"] = list(match)
        names = self._send("label names", lambda: self.client.get_label_names(params=params))
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise PrometheusSourceError(f"{self.config.url} did not answer like Prometheus (label names)")
        return set(names)

    def rule_groups(self) -> list[dict[str, Any]]:
        """The recording-rule groups Prometheus evaluates (`/api/v1/rules?type=record`, as answered).

        Not every store has this API (a Thanos Querier without rule stores, some proxies): callers
        treat a `PrometheusSourceError` as "unknown", not as "no rules"."""
        self.queries_sent += 1
        client = self.client
        try:
            response = client._session.get(
                f"{client.url}/api/v1/rules",
                params={"type": "record"},
                headers=client.headers,
                auth=client.auth,
                timeout=self.config.timeout_seconds,
            )
            response.raise_for_status()
            groups = response.json()["data"]["groups"]
        except (requests.exceptions.RequestException, ValueError, KeyError, TypeError) as error:
            raise PrometheusSourceError(f"{self.config.url} did not list its rules: {error}") from error
        if not isinstance(groups, list) or not all(isinstance(group, dict) for group in groups):
            raise PrometheusSourceError(f"{self.config.url} listed its rules in an unknown form")
        return groups

    def check(self, at: float) -> None:
        """Fail early, with a clear message, when the server is unreachable or not Prometheus."""
        result = self.instant("connectivity check", "vector(1)", at)
        if not result or not isinstance(result[0].get("value"), list):
            raise PrometheusSourceError(f"{self.config.url} answered `vector(1)` with {result!r}")

    # -- reading ------------------------------------------------------------------------------------
    def read(
        self,
        *,
        window_seconds: float,
        at: datetime | None = None,
        step_seconds: float | None = None,
        namespace: str | None = None,
        workload: str | None = None,
        progress: Progress | None = None,
        owners: ExtraOwners | None = None,
        shard: ShardSlice | None = None,
        timelines: dict[str, Timeline] | None = None,
    ) -> list[WorkloadWindow]:
        """Workload windows over [at - window, at]; `owners` resolves owners kube-state-metrics cannot;
        with a `shard`, only the windows of the namespaces it owns (its pod statistics limited to them).
        A `timelines` dict is filled with each workload's plotted series (three more range queries)."""
        end = (at or datetime.now(tz=UTC)).timestamp()
        start = end - window_seconds
        step = step_seconds or self.step_seconds or step_for(window_seconds)  # the operator's one rule
        rate_window = rate_window_seconds(step)
        say = progress or (lambda _message: None)
        self.check(end)
        gpu_namespaces = self.gpu_namespaces(end, window_seconds)
        if namespace is not None:
            gpu_namespaces = [n for n in gpu_namespaces if n == namespace] or gpu_namespaces
        if shard is not None and shard.sharded:
            gpu_namespaces = list(shard.owned(gpu_namespaces))
        if not gpu_namespaces:
            say(
                "kube-state-metrics shows no pod requesting an NVIDIA GPU resource: pod statistics are "
                "not limited to GPU pods"
            )

        def scoped(inner: Callable[[str], str]) -> Callable[[str], str]:
            return only_gpu_pods(inner, gpu_namespaces) if gpu_namespaces else inner

        jobs: dict[str, tuple[str, str]] = {}  # name → (kind, query)
        for source in mn.GPU_SIGNAL_SOURCES:
            floor = mn.ACTIVITY_FLOORS.get(source.signal)
            raw_floor = floor / source.scale if floor is not None else None
            jobs[f"gpu:{source.metric}"] = (
                "gpu",
                stats_query(_gpu_expr(source.metric), window_seconds, step, raw_floor),
            )
        jobs["gpu:throttle"] = (
            "gpu",
            stats_query(lambda o: _throttle_expr(o, rate_window), window_seconds, step, 0.0),
        )
        xid_keys = (*GPU_KEYS, mn.XID_CODE_LABEL)
        jobs["xid"] = (
            "xid",
            f"max_over_time(({_gpu_expr(mn.DCGM_XID_ERRORS, xid_keys)('')})[{_duration(window_seconds)}:{_duration(step)}]) > 0",
        )
        for pod_source in mn.POD_SIGNAL_SOURCES:
            if pod_source.counter:
                expr = _rate_by_pod(pod_source.metric, rate_window, True)
            else:
                expr = _gauge_by_pod(
                    f'{pod_source.metric}{{container!="",container!="POD"}}', pod_source.combine
                )
            floor = mn.ACTIVITY_FLOORS.get(pod_source.signal)
            jobs[f"pod:{pod_source.signal.value}"] = (
                "pod",
                stats_query(scoped(expr), window_seconds, step, floor),
            )
        for pressure in mn.PRESSURE_SOURCES:
            jobs[f"pod:{pressure.signal.value}"] = (
                "pod",
                stats_query(scoped(pressure_by_pod(pressure, rate_window)), window_seconds, step, None),
            )
        throttled = _rate_by_pod(mn.CADVISOR_CPU_THROTTLED_PERIODS, rate_window, True)
        periods = _rate_by_pod(mn.CADVISOR_CPU_PERIODS, rate_window, True)
        jobs[f"pod:{Signal.CPU_THROTTLED_RATIO.value}"] = (
            "pod",
            stats_query(
                scoped(lambda o: f"({throttled(o)}) / ({periods(o)} > 0)"), window_seconds, step, 0.0
            ),
        )
        serving = serving_exprs(rate_window)
        for signal, expr in serving.items():
            jobs[f"pod:{signal.value}"] = (
                "pod",
                stats_query(expr, window_seconds, step, mn.ACTIVITY_FLOORS.get(signal)),
            )
        for metric in _KSM_METRICS:
            jobs[f"ksm:{metric}"] = ("ksm", f"last_over_time({metric}[{_duration(window_seconds)}])")
        jobs[f"ksm:{mn.KSM_POD_RESTARTS}"] = (
            "ksm",
            f"increase({mn.KSM_POD_RESTARTS}[{_duration(window_seconds)}])",
        )
        coarse = max(step, window_seconds / 240.0)
        ranges: dict[str, str] = {f"range:{s.value}": e("") for s, e in serving.items()}
        ranges["range:busy"] = (
            f"avg by (namespace, pod) ({fold_labels(f'{mn.DCGM_GR_ENGINE_ACTIVE} {_SENTINEL_FILTER}')}) or "
            f"avg by (namespace, pod) ({fold_labels(f'{mn.DCGM_GPU_UTIL} {_SENTINEL_FILTER}')}) / 100"
        )
        # When each pod's GPU series had samples: the samples' own times, so the look-back that extends
        # a series for 5 min after its last sample does not make a pod and its successor overlap.
        ranges["range:seen"] = (
            f"max by (namespace, pod) ({fold_labels(f'timestamp({mn.DCGM_GR_ENGINE_ACTIVE})')}) or "
            f"max by (namespace, pod) ({fold_labels(f'timestamp({mn.DCGM_GPU_UTIL})')})"
        )
        ranges["range:cpu"] = scoped(_rate_by_pod(mn.CADVISOR_CPU_USAGE, rate_window, True))("")
        if timelines is not None:
            ranges.update(_plot_ranges())
        total = len(jobs) + len(ranges)
        say(
            f"sending {total} queries to {self.config.url} (window {_duration(window_seconds)}, step {_duration(step)})"
        )
        results: dict[str, list[dict[str, Any]]] = {}
        done = 0
        with ThreadPoolExecutor(max_workers=max(1, self.config.max_concurrency)) as pool:
            futures = {name: pool.submit(self.instant, name, query, end) for name, (_, query) in jobs.items()}
            futures.update(
                {
                    name: pool.submit(self.range, name, query, start, end, coarse)
                    for name, query in ranges.items()
                }
            )
            for name, future in futures.items():
                results[name] = future.result()
                done += 1
                if done % 10 == 0 or done == total:
                    say(f"{done}/{total} queries answered")
        results.update(self.identity_answers(end, window_seconds))
        chunks = self.assemble_chunks(
            results, start, end, step, coarse, namespace, workload, owners, shard=shard
        )
        windows = [window for chunk in chunks for window in chunk]
        if timelines is not None:
            timelines.update(_timelines(results, windows, coarse))
        return windows

    @property
    def where(self) -> str:
        return self.config.url

    def read_windows(
        self,
        window_seconds: float,
        at: datetime,
        *,
        scope: Scope = EVERYWHERE,
        owners: ExtraOwners | None = None,
    ) -> WindowRead:
        """`WindowSource.read_windows`: one batch of whole-window queries (`read`)."""
        windows = self.read(
            window_seconds=window_seconds,
            at=at,
            step_seconds=self.step_seconds or step_for(window_seconds),
            namespace=scope.namespace,
            workload=scope.workload,
            owners=owners,
            shard=scope.shard,
        )
        return WindowRead(windows=windows)

    def read_capacity(self, at: datetime | None = None) -> ClusterCapacity:
        """Node pools from kube-state-metrics' allocatable and node labels (the API-less fallback)."""
        end = (at or datetime.now(tz=UTC)).timestamp()
        allocatable = self.instant(
            "node allocatable",
            f"max by (node, resource) (last_over_time({mn.KSM_NODE_ALLOCATABLE}[15m]))",
            end,
        )
        labels = self.instant("node labels", f"last_over_time({mn.KSM_NODE_LABELS}[15m])", end)
        return capacity_from_ksm(
            ((dict(row["metric"]), _value(row)) for row in allocatable),
            (dict(row["metric"]) for row in labels),
        )

    def read_unheld_gpus(self, at: datetime, window_seconds: float) -> list[UnheldGPU]:
        """GR and largest PCIe direction maxima of the GPUs no pod holds, per node and model.

        An unheld GPU's series has no pod label; under kube-prometheus-stack's renaming the `pod` label
        is the exporter's own and `exported_pod` is absent.
        """
        end = at.timestamp()
        span = _duration(window_seconds)

        def unheld(names: str) -> str:
            by = "Hostname, hostname, modelName"
            return (
                f'max by ({by}) (max_over_time({{__name__=~"{names}", pod=""}}[{span}])) or '
                f'max by ({by}) (max_over_time({{__name__=~"{names}", exported_pod="", '
                f'pod=~".*dcgm-exporter.*"}}[{span}]))'
            )

        def rows(what: str, metric: str) -> dict[tuple[str, str], float]:
            found: dict[tuple[str, str], float] = {}
            for row in self.instant(what, unheld(metric), end):
                labels = row["metric"]
                key = (labels.get("Hostname") or labels.get("hostname") or "", labels.get("modelName") or "")
                value = _value(row)
                if all(key) and math.isfinite(value):
                    found[key] = max(found.get(key, 0.0), value)
            return found

        gr = rows("idle floor GR", mn.DCGM_GR_ENGINE_ACTIVE)
        pcie = rows("idle floor PCIe", f"{mn.DCGM_PCIE_TX_BYTES}|{mn.DCGM_PCIE_RX_BYTES}")
        return [
            UnheldGPU(node, model, gr.get((node, model)), pcie.get((node, model)))
            for node, model in gr | pcie
        ]

    # -- assembly -----------------------------------------------------------------------------------
    def assemble_chunks(
        self,
        results: dict[str, list[dict[str, Any]]],
        start: float,
        end: float,
        step: float,
        coarse: float,
        namespace: str | None,
        workload: str | None,
        owners: ExtraOwners | None = None,
        series_stats: Mapping[str, Mapping[tuple[tuple[str, str], ...], Summary]] | None = None,
        shard: ShardSlice | None = None,
        pods: PodSeries | None = None,
        holders: Mapping[tuple[str, str], Iterable[Key]] | None = None,
        kube_facts: Iterable[KubeFact] | None = None,
    ) -> Iterator[list[WorkloadWindow]]:
        """Windows from the answers, one chunk of namespaces at a time. `series_stats` gives a family's
        statistics already summarised (the incremental reads), in place of its `stat`-labelled rows;
        a device family's may be deferred (`Summary`), worked out when a chunk observes the device.
        With a `shard`, only the pods of its namespaces are observed.

        Why chunks: the GPU facts are about GPUs, not namespaces (which pods share a device, which trusted
        targets disagree about one, the boards no pod holds), so they are worked out once from the
        device families and the kube-state-metrics inventory and shared by every chunk; with `pods`
        the pod families' statistics are asked for per chunk, and a chunk's windows (and their
        statistics) are let go before the next is built. Without `pods` everything is one chunk.
        `holders` ((node, device id) → pods, `incremental.IdentityCache.holders`) adds the pods of every
        namespace that held a device, so a shard whose device reads are its own pods' counts the
        sharers of other shards' namespaces too. `kube_facts` gives the kube-state-metrics facts in
        place of the `ksm:` answers (`incremental.KsmCache.facts_now`: no answer rows rebuilt each
        cycle only to be parsed again).
        """
        inventory = Inventory(extra_owners=owners)
        for metric, labels, value in ksm_facts(results) if kube_facts is None else kube_facts:
            inventory.add(metric, dict(labels), value)
        self.notes = inventory.notes()
        for note in self.notes:
            LOG.warning("%s", note)
        # device stats: (ns, pod) → device id → signal → stats; board-level series have no pod
        devices: dict[Key, dict[str, dict[str, Any]]] = defaultdict(dict)
        boards: dict[tuple[str, str], dict[str, Any]] = {}
        warnings: dict[Key, list[str]] = defaultdict(list)
        for name, rows in results.items():
            kind, _, what = name.partition(":")
            if kind == "gpu":
                signal, scale = _gpu_signal(what)
                summarised = (series_stats or {}).get(name)
                if summarised is None:
                    summarised = _stats_by_series(rows, GPU_KEYS, scale, signal)
                for labels, summary in summarised.items():
                    label_map = dict(labels)
                    uuid = label_map.get("UUID") or f"gpu{label_map.get('gpu', '?')}"
                    device_id = device_id_of(label_map)
                    if label_map.get("pod"):
                        key = (label_map.get("namespace", ""), label_map["pod"])
                        entry = devices[key].setdefault(
                            device_id, {"labels": label_map, "stats": {}, "xids": set()}
                        )
                    else:
                        entry = boards.setdefault(
                            (label_map.get("hostname", ""), uuid),
                            {"labels": label_map, "stats": {}, "xids": set()},
                        )
                    entry["stats"][signal] = summary
        for row in results.get("xid", []):
            xid_labels: dict[str, str] = dict(row["metric"])
            if not xid_labels.get("pod"):
                continue
            key = (xid_labels.get("namespace", ""), xid_labels["pod"])
            device_id = device_id_of(xid_labels)
            entry = devices[key].setdefault(device_id, {"labels": xid_labels, "stats": {}, "xids": set()})
            value = _value(row)
            if not st.is_missing(value):
                entry["xids"].add(int(value))
        conflicts = gpu_targets.conflicts_in(results.get(gpu_targets.CLAIMS, []))
        for key, per_pod in devices.items():  # one GPU, two trusted targets, two stories: neither is kept
            for device_id in sorted(set(per_pod) & set(conflicts)):
                del per_pod[device_id]
                warnings[key].append(conflicts[device_id].message())
        requesting = {key for key, info in inventory.pods.items() if info.gpu_resource}
        if requesting:  # a device belongs to a pod that requests a GPU, never to the exporter's own pod
            for key in [k for k in devices if k not in requesting]:
                for device_id, entry in devices.pop(key).items():
                    board_of_device = boards.setdefault(
                        (entry["labels"].get("hostname", ""), entry["labels"].get("UUID") or device_id),
                        {"labels": entry["labels"], "stats": {}, "xids": set()},
                    )
                    for signal, summary in entry["stats"].items():
                        board_of_device["stats"].setdefault(signal, summary)
        busy_series = _range_by_pod(results.get("range:busy", []))
        spans = _sample_spans(results.get("range:seen", []), busy_series)
        # who else held this shard's devices: every namespace's pods, from the cluster-wide GPU facts
        held = {
            device: {key for key in keys if not requesting or key in requesting}
            for device, keys in (holders or {}).items()
        }
        shared = sharers_in_time(devices, spans, coarse, held)
        cpu_series = _range_by_pod(results.get("range:cpu", []))
        has_ksm = bool(inventory.pods)
        workload_stats = self._workload_serving(results, inventory, coarse)
        trust = gpu_targets.trust_warnings(
            results, self.config.trusted_gpu_targets, honor_labels_declared=self.config.honor_labels_declared
        )
        answer_warnings = sorted(set(self.answer_warnings))
        self.answer_warnings.clear()
        for warning in answer_warnings:
            LOG.warning("Prometheus answered with a warning (partial data): %s", warning)
        partial = [f"Prometheus: {warning} (partial data)" for warning in answer_warnings]
        gpu_pods = set(devices) | {k for k, i in inventory.pods.items() if i.gpu_resource}
        if pods is None:
            plan: list[frozenset[str] | None] = [None]
        else:
            plan = list(namespace_chunks(pods.namespaces, {key[0] for key in gpu_pods}, pods.chunk_series))
        for chunk in plan:
            # the pod families' statistics of this chunk's namespaces only
            chunk_stats = series_stats if pods is None or chunk is None else pods.stats_of(chunk)
            pod_stats = _pod_stats(results, chunk_stats)
            keys = {key for key in gpu_pods | set(pod_stats) if chunk is None or key[0] in chunk}
            observations = self._observe(
                keys, inventory, devices, boards, pod_stats, shared, busy_series, cpu_series, warnings,
                has_ksm=has_ksm, requesting=requesting, shard=shard, coarse=coarse,
            )  # fmt: skip
            # a pod and its successor on the same GPUs read as one: both are of one workload, one chunk
            for key, notes in merge_successive_observations(observations, spans, inventory, coarse).items():
                warnings[key].extend(notes)
            windows = assemble_windows(
                inventory,
                observations,
                workload_stats,
                datetime.fromtimestamp(start, tz=UTC),
                datetime.fromtimestamp(end, tz=UTC),
                step,
                "prometheus",
                dict(warnings),
                namespace,
                workload,
            )
            if trust:
                windows = [w.model_copy(update={"warnings": [*w.warnings, *trust]}) for w in windows]
            windows = [ending_at_newest_sample(w, busy_series, end, coarse) for w in windows]
            if partial:
                windows = [w.model_copy(update={"warnings": [*w.warnings, *partial]}) for w in windows]
            yield windows

    @staticmethod
    def _observe(
        keys: set[Key],
        inventory: Inventory,
        devices: Mapping[Key, Mapping[str, Mapping[str, Any]]],
        boards: Mapping[tuple[str, str], Mapping[str, Any]],
        pod_stats: Mapping[Key, dict[Signal, SignalStats]],
        shared: Mapping[tuple[Key, str, str], int],
        busy_series: Mapping[Key, Sequence[tuple[float, float]]],
        cpu_series: Mapping[Key, Sequence[tuple[float, float]]],
        warnings: dict[Key, list[str]],
        *,
        has_ksm: bool,
        requesting: set[Key],
        shard: ShardSlice | None,
        coarse: float,
    ) -> dict[Key, PodObservation]:
        """The pod observations of `keys` (GPU pods the inventory knows, within the shard)."""
        observations: dict[Key, PodObservation] = {}
        for key in keys:
            if (has_ksm and key not in inventory.pods) or (requesting and key not in requesting):
                continue
            if shard is not None and not shard.owns(key[0]):
                continue
            info = inventory.pods.get(key)
            gpus = []
            for device_id, entry in sorted(devices.get(key, {}).items()):
                labels = entry["labels"]
                gpu_stats = resolved_stats(entry["stats"])
                board = boards.get((labels.get("hostname", ""), labels.get("UUID", "")))
                if board is not None:
                    for signal, summary in board["stats"].items():  # only what the device lacks
                        if signal not in gpu_stats and (value := resolved(summary)) is not None:
                            gpu_stats[signal] = value
                used, free = gpu_stats.get(Signal.FB_USED_MIB), gpu_stats.get(Signal.FB_FREE_MIB)
                gpus.append(
                    GPUObservation(
                        uuid=device_id,
                        index=labels.get("gpu"),
                        node=labels.get("hostname") or None,
                        model_name=labels.get("modelName") or None,
                        mig_profile=labels.get("GPU_I_PROFILE") or None,
                        shared_by_pods=max(1, shared.get((key, labels.get("hostname", ""), device_id), 1)),
                        stats=gpu_stats,
                        xid_codes=sorted(entry["xids"]),
                        memory_total_mib=(used.max + free.min) if used and free else None,
                    )
                )
            correlation = None
            if key in busy_series and key in cpu_series:
                limit = info.cpu_limit if info and info.cpu_limit else None
                cpu = [(t, v / limit) for t, v in cpu_series[key]] if limit else cpu_series[key]
                correlation = st.aligned_correlation(busy_series[key], cpu, coarse)
            if info and info.gpu_resource and not gpus:
                warnings[key].append(f"{key[0]}/{key[1]}: requests {info.gpu_resource} but has no GPU series")
            observations[key] = PodObservation(
                name=key[1],
                node=(info.node if info else None) or next((g.node for g in gpus if g.node), None),
                stats=pod_stats.get(key, {}),
                gpus=gpus,
                restarts=int(info.restarts) if info else 0,
                oom_killed=info.oom_killed if info else False,
                gpu_cpu_correlation=correlation,
            )
        return observations

    @staticmethod
    def _workload_serving(
        results: dict[str, list[dict[str, Any]]], inventory: Inventory, coarse: float
    ) -> dict[str, dict[Signal, SignalStats]]:
        out: dict[str, dict[Signal, SignalStats]] = {}
        for signal in (Signal.REQUESTS_PER_S, Signal.QUEUE_LENGTH, Signal.QUEUE_TIME_MS):
            per_workload: dict[str, list[Sequence[tuple[float, float]]]] = defaultdict(list)
            for key, samples in _range_by_pod(results.get(f"range:{signal.value}", [])).items():
                per_workload[inventory.workload_of(*key).key].append(samples)
            for ref_key, parts in per_workload.items():
                combined = (
                    st.mean_aligned(parts, coarse)
                    if signal is Signal.QUEUE_TIME_MS
                    else st.sum_aligned(parts, coarse)
                )
                summary = st.summarize(
                    combined, activity_floor=mn.ACTIVITY_FLOORS.get(signal), sawtooth_floor=None
                )
                if summary is not None:
                    out.setdefault(ref_key, {})[signal] = summary
        return out


@dataclass(frozen=True)
class PodSeries:
    """The pod families' statistics, asked for one chunk of namespaces at a time (`assemble_chunks`)."""

    #: Namespace → its pods' series: how the namespaces are packed into chunks.
    namespaces: Mapping[str, int]
    #: Family name → series labels → statistics, of the pods in these namespaces.
    stats_of: Callable[[frozenset[str]], Mapping[str, Mapping[tuple[tuple[str, str], ...], SignalStats]]]
    #: About this many pod series a chunk (a namespace is never split).
    chunk_series: int


def namespace_chunks(weights: Mapping[str, int], also: Iterable[str], size: int) -> Iterator[frozenset[str]]:
    """Namespaces (those weighed and `also`) packed in name order into chunks of about `size` weight;
    a namespace heavier than `size` is a chunk of its own."""
    chunk: list[str] = []
    weight = 0
    for name in sorted(set(weights) | set(also)):
        if chunk and weight + weights.get(name, 1) > size:
            yield frozenset(chunk)
            chunk, weight = [], 0
        chunk.append(name)
        weight += weights.get(name, 1)
    if chunk:
        yield frozenset(chunk)


#: A series' statistics, or what works them out when first read: the incremental reader defers the
#: device families' (`incremental.DeferredSummary`), so a cycle holds the `SignalStats` of one chunk's
#: devices at a time, not of every device in the cluster (a fifth of a 10,000-workload cycle's peak).
Summary = SignalStats | Callable[[], SignalStats | None]


def resolved_stats(stats: Mapping[Signal, Summary]) -> dict[Signal, SignalStats]:
    """Signal → statistics, deferred ones worked out (a series without a usable sample left out)."""
    out: dict[Signal, SignalStats] = {}
    for signal, summary in stats.items():
        value = resolved(summary)
        if value is not None:
            out[signal] = value
    return out


def resolved(summary: Summary) -> SignalStats | None:
    """The statistics of one series, a deferred summary worked out."""
    return summary if isinstance(summary, SignalStats) else summary()


def _pod_stats(
    results: Mapping[str, list[dict[str, Any]]],
    series_stats: Mapping[str, Mapping[tuple[tuple[str, str], ...], Summary]] | None,
) -> dict[Key, dict[Signal, SignalStats]]:
    """(namespace, pod) → signal → statistics of the pod families: already summarised in
    `series_stats`, else from their `stat`-labelled rows."""
    pod_stats: dict[Key, dict[Signal, SignalStats]] = defaultdict(dict)
    names = dict.fromkeys([*results, *(series_stats or {})])
    for name in (n for n in names if n.startswith("pod:")):
        signal = Signal(name.removeprefix("pod:"))
        summarised = (series_stats or {}).get(name)
        if summarised is None:
            summarised = _stats_by_series(results.get(name, []), POD_KEYS, 1.0, signal)
        for labels, summary in summarised.items():
            value = resolved(summary)
            if value is not None:
                label_map = dict(labels)
                pod_stats[(label_map.get("namespace", ""), label_map.get("pod", ""))][signal] = value
    return pod_stats


def _gpu_signal(what: str) -> tuple[Signal, float]:
    if what == "throttle":
        return Signal.THROTTLE_FRACTION, 1.0
    source = mn.GPU_SIGNAL_BY_METRIC[what]
    return source.signal, source.scale


#: One kube-state-metrics fact: (metric, labels, its value in the window).
KubeFact = tuple[str, Iterable[tuple[str, str]] | Mapping[str, str], float]


def ksm_facts(results: Mapping[str, list[dict[str, Any]]]) -> Iterator[KubeFact]:
    """The kube-state-metrics facts of the full read's `ksm:<metric>` answers."""
    for name, rows in results.items():
        if name.startswith("ksm:"):
            metric = name.removeprefix("ksm:")
            for row in rows:
                yield metric, row["metric"], _value(row)


def _value(row: dict[str, Any]) -> float:
    try:
        return float(row["value"][1])
    except (KeyError, IndexError, TypeError, ValueError) as error:
        raise PrometheusSourceError(f"malformed sample in a Prometheus answer: {row!r}") from error


def _stats_by_series(
    rows: list[dict[str, Any]], keys: Sequence[str], scale: float, signal: Signal
) -> dict[tuple[tuple[str, str], ...], SignalStats]:
    """Group `stat`-labelled rows by series and build one `SignalStats` per series."""
    grouped: dict[tuple[tuple[str, str], ...], dict[str, float]] = defaultdict(dict)
    for row in rows:
        labels = row["metric"]
        stat = labels.get("stat")
        if stat is None:
            continue
        identity = tuple((k, labels[k]) for k in keys if labels.get(k))
        grouped[identity][stat] = _value(row)
    out: dict[tuple[tuple[str, str], ...], SignalStats] = {}
    for identity, values in grouped.items():
        summary = summary_from_figures(values, scale, signal)
        if summary is not None:
            out[identity] = summary
    return out


def summary_from_figures(values: Mapping[str, float], scale: float, signal: Signal) -> SignalStats | None:
    """One series' `SignalStats` from its figures by `stat` name, in the exported unit × `scale`.

    The figures are what `stats_query` computes (or what the incremental reads keep): count, mean,
    p05..p99, min, max, and optionally active, trend and absstep. None without a usable sample.
    """
    count = values.get("count", 0.0)
    if not count >= 1:  # also NaN
        return None
    try:
        mean, p50, p95, p99 = values["mean"], values["p50"], values["p95"], values["p99"]
        high, low = values["max"], values["min"]
    except KeyError:
        return None
    if math.isnan(mean + p50 + p95 + p99 + high + low) and any(
        math.isnan(figure) for figure in (mean, p50, p95, p99, high, low)
    ):  # a sum is NaN also when infinities cancel: then ask each figure
        return None
    sawtooth = None
    absstep = values.get("absstep")
    if signal in mn.RATIO_SIGNALS and count >= 3 and absstep is not None and not math.isnan(absstep):
        spread = (p95 - values.get("p05", 0.0)) * abs(scale)
        sawtooth = 0.0 if spread < st.DEFAULT_SAWTOOTH_FLOOR else min(1.0, absstep * abs(scale) / spread)
    active = values.get("active")
    trend = values.get("trend")
    return SignalStats(
        samples=int(count),
        mean=mean * scale,
        p50=p50 * scale,
        p95=p95 * scale,
        p99=p99 * scale,
        max=high * scale,
        min=low * scale,
        active_fraction=None if active is None or math.isnan(active) else min(1.0, max(0.0, active)),
        trend_per_hour=None if trend is None or math.isnan(trend) else trend * scale,
        sawtooth=sawtooth,
    )


def ending_at_newest_sample(
    window: WorkloadWindow,
    busy_series: Mapping[Key, Sequence[tuple[float, float]]],
    end: float,
    coarse: float,
) -> WorkloadWindow:
    """The window ends at its newest GPU busy point when that lies clearly before the query time.

    The query time says nothing about the data: a workload whose series stopped arriving would look
    fresh. With the end at the newest point, the engine's and the actuator's stale-data gates see how
    old the data is (the point can trail the last sample by Prometheus's lookback, 5 min by default).
    """
    newest = [
        series[-1][0]
        for pod in window.pods
        if (series := busy_series.get((window.workload.namespace, pod.name)))
    ]
    if not newest or max(newest) >= end - 2 * coarse:
        return window
    return window.model_copy(update={"end": datetime.fromtimestamp(max(newest), tz=UTC)})


def _sample_spans(
    seen: list[dict[str, Any]], busy: Mapping[Key, Sequence[tuple[float, float]]]
) -> dict[Key, tuple[float, float]]:
    """(first, last) sample time of each pod's GPU series.

    From `range:seen` (the samples' own timestamps) where it answered; else from the busy range
    series, whose points run on for Prometheus' look-back (5 min by default) after the last sample.
    """
    spans = {key: (samples[0][0], samples[-1][0]) for key, samples in busy.items() if samples}
    for key, stamps in _range_by_pod(seen).items():
        times = [value for _, value in stamps if math.isfinite(value)]
        if times:
            spans[key] = (min(times), max(times))
    return spans


def _merged(earlier: PodObservation, later: PodObservation) -> PodObservation:
    """A pod and its successor on the same GPUs as one pod (the later one's name)."""

    def combined(
        first: Mapping[Signal, SignalStats], second: Mapping[Signal, SignalStats]
    ) -> dict[Signal, SignalStats]:
        out: dict[Signal, SignalStats] = {}
        for signal in {*first, *second}:
            merged = st.combine_successive([s for s in (first.get(signal), second.get(signal)) if s])
            if merged is not None:
                out[signal] = merged
        return out

    before = {g.uuid: g for g in earlier.gpus}
    gpus = [
        g.model_copy(
            update={
                "stats": combined(before[g.uuid].stats, g.stats),
                "xid_codes": sorted({*before[g.uuid].xid_codes, *g.xid_codes}),
            }
        )
        if g.uuid in before
        else g
        for g in later.gpus
    ]
    return later.model_copy(
        update={
            "stats": combined(earlier.stats, later.stats),
            "gpus": gpus,
            "restarts": earlier.restarts + later.restarts,
            "oom_killed": earlier.oom_killed or later.oom_killed,
        }
    )


def merge_successive_observations(
    observations: dict[Key, PodObservation],
    spans: Mapping[Key, tuple[float, float]],
    inventory: Inventory,
    step: float,
) -> dict[Key, list[str]]:
    """Read a workload's pods that followed each other on the same GPUs as one pod (the latest), as
    the OpenMetrics source does (`merge_successive_pods`); returns the warnings, by surviving pod.

    A Job retry or a Recreate rollout starts a new pod on the device the old one left; two pods of a
    one-replica workload, each over half the window, would read as two half-observed replicas.
    """
    pods = [
        (key, inventory.workload_of(*key).key, frozenset((g.node, g.uuid) for g in pod.gpus), span)
        for key, pod in observations.items()
        if pod.gpus and (span := spans.get(key)) is not None
    ]
    notes: dict[Key, list[str]] = defaultdict(list)
    for current, key in successions(pods, step):
        observations[key] = _merged(observations.pop(current), observations[key])
        inventory.pods.pop(current, None)
        notes[key].extend(notes.pop(current, []))
        notes[key].append(replaced_note(current, key))
    return notes


def device_id_of(labels: Mapping[str, str]) -> str:
    """The id the assembly gives a device series: its UUID (`gpu<index>` without one), with
    `-<GPU_I_ID>` for a MIG instance."""
    uuid = labels.get("UUID") or f"gpu{labels.get('gpu', '?')}"
    return f"{uuid}-{labels['GPU_I_ID']}" if labels.get("GPU_I_ID") else uuid


def sharers_in_time(
    devices: Mapping[Key, Mapping[str, Mapping[str, Any]]],
    spans: Mapping[Key, tuple[float, float]],
    step: float,
    held: Mapping[tuple[str, str], Iterable[Key]] | None = None,
) -> dict[tuple[Key, str, str], int]:
    """(pod, node, device) → the pods that saw the device while this one did (itself included);
    `held` ((node, device) → pods) adds holders the device reads do not include.

    A pod's time is the span of its GPU samples (`_sample_spans`); pods overlapping by at most two
    steps follow each other (a Job retry, a Recreate rollout) and do not share the device. A pod
    without a span overlaps every other (it cannot be told apart).
    """
    on_device: dict[tuple[str, str], set[Key]] = defaultdict(set)
    for key, per_pod in devices.items():
        for device_id, entry in per_pod.items():
            on_device[(entry["labels"].get("hostname", ""), device_id)].add(key)
    for device, keys in on_device.items():
        keys.update((held or {}).get(device, ()))
    out: dict[tuple[Key, str, str], int] = {}
    for (node, device_id), keys in on_device.items():
        for key in keys:
            mine = spans.get(key)
            out[(key, node, device_id)] = sum(
                1
                for other in keys
                if other == key
                or mine is None
                or (theirs := spans.get(other)) is None
                or min(mine[1], theirs[1]) - max(mine[0], theirs[0]) > 2 * step
            )
    return out


def _plot_ranges() -> dict[str, str]:
    """Range queries of the plotted series the other reads do not have: per pod, its busiest GPU."""

    def busiest(metric: str) -> str:
        return f"max by (namespace, pod) ({fold_labels(f'{metric} {_SENTINEL_FILTER}')})"

    return {
        "plot:busy": f"{busiest(mn.DCGM_GR_ENGINE_ACTIVE)} or {busiest(mn.DCGM_GPU_UTIL)} / 100",
        "plot:sm": busiest(mn.DCGM_SM_ACTIVE),
        "plot:memory": busiest(mn.DCGM_FB_USED),
    }


def _timelines(
    results: dict[str, list[dict[str, Any]]], windows: Sequence[WorkloadWindow], step: float
) -> dict[str, Timeline]:
    """Each window's plotted series from the range answers of its pods."""
    by_pod = {name: _range_by_pod(results.get(name, [])) for name in ("plot:busy", "plot:sm", "plot:memory")}
    cpu = _range_by_pod(results.get("range:cpu", []))
    out: dict[str, Timeline] = {}
    for window in windows:
        keys = [(window.workload.namespace, pod.name) for pod in window.pods]

        def of(
            series: Mapping[Key, Sequence[tuple[float, float]]], keys: list[Key] = keys
        ) -> list[Sequence[tuple[float, float]]]:
            return [series[key] for key in keys if key in series]

        out[window.workload.key] = timeline_of(
            busy=of(by_pod["plot:busy"]),
            sm_active=of(by_pod["plot:sm"]),
            cpu_cores=of(cpu),
            memory_used_mib=of(by_pod["plot:memory"]),
            step_seconds=step,
        )
    return out


def _range_by_pod(rows: list[dict[str, Any]]) -> dict[Key, SamplePairs]:
    """Each pod's series of a range answer, as flat arrays (the incremental reads' are already)."""
    out: dict[Key, SamplePairs] = {}
    for row in rows:
        labels = row.get("metric", {})
        if not labels.get("pod"):
            continue
        values = row.get("values", [])
        try:
            samples = values if isinstance(values, SamplePairs) else SamplePairs.of(values)
        except AnswerError as error:
            raise PrometheusSourceError(f"malformed range answer from Prometheus: {error}") from error
        out[(labels.get("namespace", ""), labels["pod"])] = samples
    return out


def source_for(cfg: OperatorConfig) -> PrometheusSource:
    """The operator's Prometheus source from its configuration (token file, TLS, timeout, matchers)."""
    token = Path(cfg.prometheus_token_file).read_text().strip() if cfg.prometheus_token_file else None
    return PrometheusSource(
        PrometheusConfig(
            url=cfg.prometheus_url or "",
            bearer_token=token,
            ca_file=cfg.prometheus_ca_file,
            insecure=cfg.prometheus_insecure,
            timeout_seconds=cfg.prometheus_timeout_seconds,
            compressed_answers=cfg.prometheus_compression == "gzip",
            extra_matchers=cfg.prometheus_matchers,
            trusted_gpu_targets=cfg.trusted_gpu_targets,
            honor_labels_declared=cfg.gpu_honor_labels,
            shard=ShardSlice(cfg.shard, cfg.total_shards),
        ),
        step_seconds=cfg.prometheus_step_seconds,
    )


def read_prometheus(
    config: PrometheusConfig,
    *,
    window_seconds: float,
    at: datetime | None = None,
    step_seconds: float | None = None,
    namespace: str | None = None,
    workload: str | None = None,
    progress: Progress | None = None,
) -> list[WorkloadWindow]:
    """Workload windows from Prometheus (see `PrometheusSource.read`)."""
    return PrometheusSource(config).read(
        window_seconds=window_seconds,
        at=at,
        step_seconds=step_seconds,
        namespace=namespace,
        workload=workload,
        progress=progress,
    )
