"""The cheaper query shapes give the windows today's shapes give.

The throttle family read its clock-event bitmask once per bit and twice over, and its violation
counters three times (`((a) > (b)) or (b) or (a)`); it now reads each once (`throttle_flag`,
`largest_of`). Over the recorded fixture history plus counters that reset, start late and
throttle, served by a real Prometheus (promtool backfill), its range answer in the new shape equals
the one in today's shape, series for series and sample for sample. The incremental identity answers
(`IdentityCache`) are checked against the full-window answers over recorded rows.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpu_rightsizer.adapters import gpu_targets, prometheus
from gpu_rightsizer.adapters.incremental import (
    CoarseSeries,
    IdentityCache,
    IncrementalReader,
    IncrementalSource,
    _source_families,
    default_families,
)
from gpu_rightsizer.adapters.prom_answers import RangeSeries, matrix_of
from gpu_rightsizer.adapters.prometheus import (
    _SENTINEL_FILTER,
    GPU_KEYS,
    LABEL_FOLDS,
    PrometheusConfig,
    PrometheusSource,
    PrometheusSourceError,
    _duration,
    _gpu_expr,
    _throttle_expr,
    fold_labels,
    throttle_flag,
    without_folds,
)
from gpu_rightsizer.adapters.source import CycleReport, rate_window_seconds
from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.observation import Signal
from gpu_rightsizer.testcluster.prometheus import PrometheusServer

PLAIN = Path(__file__).resolve().parents[2] / "fixtures" / "openmetrics" / "plain.om"
FIRST, LAST, EVERY = 1_767_223_200, 1_767_225_540, 90
STEP = 60.0
DEVICE = (
    'Hostname="gpu-node-12",UUID="GPU-b52e3ed1-4937-c710-b52e-3ed14937c710",gpu="0",'
    'modelName="NVIDIA H100 80GB HBM3",namespace="ml",pod="chat-659df2aa-659df0"'
)
LONE_DEVICE = 'Hostname="gpu-node-13",UUID="GPU-0000",gpu="1",modelName="NVIDIA H100 80GB HBM3"'
POD = 'namespace="ml",pod="trainer-c5150820-c51500"'

needs_prometheus = pytest.mark.skipif(
    not (shutil.which("prometheus") and shutil.which("promtool")),
    reason="prometheus/promtool not installed (Debian package `prometheus`)",
)


def counter_lines(counters_per_device: int = 1) -> list[str]:
    """A counter that resets mid-window, one that starts late (younger than the rate window at its
    first samples), and throttle violation counters on a device with clock events and on one
    without (one counter each, or `counters_per_device`)."""
    lines = [f"# TYPE {mn.CADVISOR_FS_READS.removesuffix('_total')} counter"]
    middle = (FIRST + LAST) // 2
    for t in range(FIRST, LAST + 1, EVERY):
        value = 5e6 * (t - FIRST) if t < middle else 2e6 * (t - middle)
        lines.append(f'{mn.CADVISOR_FS_READS}{{container="main",{POD}}} {value:.1f} {t}')
    lines.append(f"# TYPE {mn.CADVISOR_FS_WRITES.removesuffix('_total')} counter")
    for t in range(middle, LAST + 1, EVERY):
        lines.append(f'{mn.CADVISOR_FS_WRITES}{{container="main",{POD}}} {3e5 * (t - middle):.1f} {t}')
    shares = (0.2, 0.05, 0.1)
    for index, metric in enumerate(mn.DCGM_THROTTLE_VIOLATION_COUNTERS):
        lines.append(f"# TYPE {metric} counter")
        for device, (labels, factor) in enumerate(((DEVICE, 1.0), (LONE_DEVICE, 3.0))):
            if counters_per_device == 1 and index != device:
                continue
            for t in range(FIRST, LAST + 1, EVERY):
                held = shares[index] * factor * (t - FIRST) * mn.VIOLATION_NS_PER_SECOND
                lines.append(f"{metric}{{{labels}}} {held:.0f} {t}")
    return lines


#: Gauges `raw_gauge_lines` adds renamed devices to (with a base value): the engine activity is a
#: family of the plain fixture too (its family lines come again further on, which promtool takes).
RENAMED_GAUGES = (
    (mn.DCGM_DRAM_ACTIVE, 0.3),
    (mn.DCGM_SM_CLOCK, 1400.0),
    (mn.DCGM_FB_USED, 20000.0),
    (mn.DCGM_GR_ENGINE_ACTIVE, 0.5),
)


def raw_gauge_lines() -> list[str]:
    """Gauges whose raw series fold and merge: a device renamed by `honor_labels: false` (exported
    labels) and scraped by two jobs, with DCGM blanks and NaN in each copy at other times, next to a
    device in the plain labels."""
    renamed = (
        'Hostname="gpu-node-14",UUID="GPU-1111",gpu="0",modelName="NVIDIA H100 80GB HBM3",'
        'namespace="gpu-operator",pod="dcgm-exporter-abc",exported_namespace="ml",exported_pod="chat-1"'
    )
    copies = (
        f'{renamed},instance="10.0.0.1:9400",job="dcgm"',
        f'{renamed},instance="10.0.0.2:9400",job="scrape"',
    )
    plain_device = f'{LONE_DEVICE},namespace="ml",pod="chat-2"'
    blank = "9223372036854775794"
    lines: list[str] = []
    for metric, base in RENAMED_GAUGES:
        lines.append(f"# TYPE {metric} gauge")
        for t in range(FIRST, LAST + 1, EVERY):
            phase = (t - FIRST) // EVERY
            for index, labels in enumerate(copies):
                value = base * (1 + 0.1 * ((phase + 3 * index) % 7))
                shown = blank if phase % 5 == index else "NaN" if phase % 11 == 4 + index else f"{value:g}"
                lines.append(f"{metric}{{{labels}}} {shown} {t}")
            lines.append(f"{metric}{{{plain_device}}} {base * (1 + 0.05 * (phase % 4)):g} {t}")
    # clock-event bitmasks with and without throttling bits (16 and those below 8 are not), above
    # the eighth bit, blank and NaN, on the renamed device's two copies and the plain one
    masks = (0, 1, 8, 16, 32, 17, 4, 64, 128, 24, 255, 256, 264, 20)
    lines.append(f"# TYPE {mn.DCGM_CLOCKS_EVENT_REASONS} gauge")
    for t in range(FIRST, LAST + 1, EVERY):
        phase = (t - FIRST) // EVERY
        for index, labels in enumerate(copies):
            mask = masks[(phase + 5 * index) % len(masks)]
            shown = blank if phase % 6 == index else "NaN" if phase % 13 == 4 + index else str(mask)
            lines.append(f"{mn.DCGM_CLOCKS_EVENT_REASONS}{{{labels}}} {shown} {t}")
        lines.append(f"{mn.DCGM_CLOCKS_EVENT_REASONS}{{{plain_device}}} {masks[phase % len(masks)]} {t}")
    lines.append("# TYPE DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL gauge")  # not read: another family's name
    lines.extend(
        f"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{{{copies[0]}}} 5 {t}" for t in range(FIRST, LAST + 1, EVERY)
    )
    return lines


def serve(
    tmp_path_factory: pytest.TempPathFactory, counters_per_device: int, extra: Sequence[str] = ()
) -> PrometheusServer:
    plain = PLAIN.read_text().splitlines()
    assert plain[-1] == "# EOF"
    history = tmp_path_factory.mktemp("shapes") / "shapes.om"
    history.write_text("\n".join([*plain[:-1], *counter_lines(counters_per_device), *extra, "# EOF", ""]))
    server = PrometheusServer(workdir=tmp_path_factory.mktemp("shapes-prometheus"), backfill=(history,))
    server.start()
    return server


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = serve(tmp_path_factory, 1, raw_gauge_lines())
    try:
        yield server.url
    finally:
        server.stop()


def todays_larger(*exprs: str) -> str:
    """The shape `largest_of` replaced: `((a) > (b)) or (b) or (a)`."""
    first, second = exprs
    return f"(({first}) > ({second})) or ({second}) or ({first})"


def todays_throttle(offset: str, rate_window: float) -> str:
    """Today's throttle family, as it was: the bitmask read once per bit and twice over, the
    violation counters in one `__name__` selector, read three times."""
    names = "|".join(mn.DCGM_CLOCK_EVENT_METRICS)
    raw = f'{{__name__=~"{names}"}}{offset} {_SENTINEL_FILTER}'
    bits = " + ".join(f"(floor(({raw}) / {bit}) % 2)" for bit in mn.THROTTLE_CLOCK_EVENT_BITS)
    keys = ", ".join(GPU_KEYS)
    flags = f"max by ({keys}) ({fold_labels(f'clamp_max({bits}, 1)')})"
    counters = '{__name__=~"' + "|".join(mn.DCGM_THROTTLE_VIOLATION_COUNTERS) + '"}'
    held = f"rate({counters}[{_duration(rate_window)}]{offset}) < {1.5 * mn.VIOLATION_NS_PER_SECOND:g}"
    violations = f"clamp_max(sum by ({keys}) ({fold_labels(held)}) / {mn.VIOLATION_NS_PER_SECOND:g}, 1)"
    return f"(({flags}) > ({violations})) or ({violations}) or ({flags})"


Answer = dict[tuple[tuple[str, str], ...], list[tuple[float, float]]]


def answer(source: PrometheusSource, query: str) -> Answer:
    rows = source.range("shape", query, FIRST + 600, LAST, STEP)
    return {
        tuple(sorted(row["metric"].items())): [(float(t), float(v)) for t, v in row["values"]] for row in rows
    }


def assert_same(name: str, before: Answer, after: Answer) -> None:
    assert after.keys() == before.keys(), name
    for labels, samples in before.items():
        assert [t for t, _ in after[labels]] == [t for t, _ in samples], (name, labels)
        for (_, was), (_, now) in zip(samples, after[labels], strict=True):
            assert now == pytest.approx(was, rel=1e-12, abs=1e-12, nan_ok=True), (name, labels)


@needs_prometheus
def test_every_family_answers_as_in_todays_shape(
    prometheus_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = PrometheusSource(PrometheusConfig(url=prometheus_url))
    new = {family.name: family.query(None) for family in default_families(STEP)}
    monkeypatch.setattr(prometheus, "largest_of", todays_larger)
    old = {family.name: family.query(None) for family in default_families(STEP)}
    monkeypatch.undo()
    assert new.keys() == old.keys()
    # no family reads `largest_of` (the throttle family's sides are merged by the reader); the
    # counters keep `rate > deriv or deriv` (fewer nodes)
    assert [name for name in new if new[name] != old[name]] == []
    rate_window = rate_window_seconds(STEP)
    throttle, todays = _throttle_expr("", rate_window), todays_throttle("", rate_window)
    assert throttle.count("DCGM_FI_DEV_CLOCKS_EVENT_REASONS") * 8 == todays.count(
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
    )
    queries = {"gpu:throttle": (todays, throttle)}
    for signal in (Signal.FS_READ_BYTES_PER_S, Signal.FS_WRITE_BYTES_PER_S):
        queries[f"pod:{signal.value}"] = (old[f"pod:{signal.value}"], new[f"pod:{signal.value}"])
    with_data = 0
    for name, (before_query, after_query) in queries.items():
        before, after = answer(source, before_query), answer(source, after_query)
        assert_same(name, before, after)
        with_data += bool(before)
    assert with_data == 3  # the throttle family and the reset and late counters have data
    throttled = answer(source, throttle)
    lone = [labels for labels in throttled if ("UUID", "GPU-0000") in labels]
    assert lone and max(v for _, v in throttled[lone[0]]) == pytest.approx(0.15, rel=0.05)


@needs_prometheus
def test_the_throttle_family_read_raw_gives_the_windows_of_the_whole_expression(prometheus_url: str) -> None:
    """The throttle family sends its clock-event bitmasks bare and the reader works out the flags and
    takes the larger of them and the violation share per device (`throttle_raw_expr`); over bitmasks
    with every kind of bit, blanks and NaN on a device scraped twice (`raw_gauge_lines`) and violation
    counters (`counter_lines`), served by a real Prometheus, every window equals the one the whole
    PromQL expression (`_throttle_expr`) gives."""
    source = PrometheusSource(PrometheusConfig(url=prometheus_url))
    (raw,) = [family for family in _source_families(STEP, None) if family.name == "gpu:throttle"]
    assert raw.raw_series and raw.bitmasks == mn.DCGM_CLOCK_EVENT_METRICS
    assert "floor(" not in raw.expression  # Prometheus evaluates no flag arithmetic
    whole = replace(
        raw, raw_series=False, bitmasks=(), expression=_throttle_expr("", rate_window_seconds(STEP))
    )
    stores = []
    for family in (whole, raw):
        reader = IncrementalReader(
            source.range_series, window_seconds=1800.0, step_seconds=STEP, families=[family]
        )
        report = reader.read(float(LAST))
        assert reader.complete and report.chunks_failed == 0
        stores.append({key: window.figures(float(LAST)) for key, window in reader.store.series.items()})
    before, after = stores
    assert after.keys() == before.keys()
    assert len(before) >= 4  # the plain devices, the renamed one merged, the board with counters only
    renamed = [labels for _, labels in after if ("UUID", "GPU-1111") in labels]
    assert len(renamed) == 1 and ("pod", "chat-1") in renamed[0]
    for key, figures in before.items():
        assert figures is not None and after[key] is not None, key
        assert after[key] == pytest.approx(figures, rel=1e-12, abs=1e-12), key
    flagged = after[("gpu:throttle", renamed[0])]
    assert flagged is not None and 0 < flagged["mean"] < 1 and flagged["max"] == 1.0


@needs_prometheus
def test_several_violation_counters_of_one_device_are_summed(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Today's shape fails outright when a device exports two violation counters (their rates lose
    the metric name and collide); each counter's rate is now tagged before it is summed."""
    server = serve(tmp_path_factory, 3)
    try:
        source = PrometheusSource(PrometheusConfig(url=server.url))
        with pytest.raises(PrometheusSourceError, match="same labelset"):
            answer(source, f"({todays_throttle('', 180.0)})")
        throttle = answer(source, _throttle_expr("", 180.0))
    finally:
        server.stop()
    lone = [labels for labels in throttle if ("UUID", "GPU-0000") in labels]
    # 3 × (0.2 + 0.05 + 0.1) of the time, clamped at all of it
    assert lone and max(v for _, v in throttle[lone[0]]) == pytest.approx(1.0)
    device = [labels for labels in throttle if ("UUID", "GPU-b52e3ed1-4937-c710-b52e-3ed14937c710") in labels]
    assert device and min(v for _, v in throttle[device[0]]) == pytest.approx(0.35, rel=0.05)


@needs_prometheus
def test_throttle_flag_is_the_bits_test(prometheus_url: str) -> None:
    """`throttle_flag` evaluated by Prometheus against the bit test it replaces, for every bitmask
    below 2^12 (the bitmask is the evaluation time: one range query from 0 s to 4095 s)."""
    assert throttle_flag("BITMASK").count("BITMASK") == 1
    source = PrometheusSource(PrometheusConfig(url=prometheus_url))
    rows = source.range("flag", throttle_flag("vector(time())"), 0, 4095, 1)
    values = {int(float(t)): float(v) for t, v in rows[0]["values"]}
    assert len(values) == 4096
    for x, value in values.items():
        assert value == int(any(x & bit for bit in mn.THROTTLE_CLOCK_EVENT_BITS)), x


class RecordedSource:
    """`PrometheusSource.instant` over recorded identity samples: each answer has the label sets with
    samples inside the query's lookback (its first `[Ns`), valued with the newest sample's time."""

    def __init__(self, timeline: dict[str, list[tuple[float, dict[str, str]]]]) -> None:
        self.config = PrometheusConfig(url="http://recorded", trusted_gpu_targets=())
        self.timeline = timeline
        self.asked: list[str] = []

    def newest(self, side: str, lookback: float, at: float) -> dict[tuple[tuple[str, str], ...], float]:
        found: dict[tuple[tuple[str, str], ...], float] = {}
        for t, labels in self.timeline[side]:
            if at - lookback < t <= at:
                key = tuple(sorted(labels.items()))
                found[key] = max(t, found.get(key, t))
        return found

    def instant(self, what: str, query: str, at: float) -> list[dict[str, Any]]:
        self.asked.append(query)
        lookback = float(query.split("[", 1)[1].split("s", 1)[0])
        side = {"GPU claims": "claims", "GPU series' target labels": "exported", "scrape targets": "targets"}
        return [
            {"metric": dict(labels), "value": [at, repr(t)]}
            for labels, t in self.newest(side[what], lookback, at).items()
        ]

    def full_answers(self, window: float, at: float) -> tuple[set[Any], set[Any]]:
        """What the full-window identity queries answer: claims, and the relabelled targets."""
        by = gpu_targets.TARGET_LABELS
        up = {tuple(dict(k).get(key, "") for key in by) for k in self.newest("targets", window, at)}
        relabelled = {
            k
            for k in self.newest("exported", window, at)
            if tuple(dict(k).get(key, "") for key in by) not in up
        }
        return set(self.newest("claims", window, at)), relabelled


def test_incremental_identity_answers_match_the_full_window() -> None:
    window, interval = 3600.0, 300.0
    start = 1_767_223_200.0
    claim_a = {"UUID": "GPU-a", "namespace": "ml", "pod": "p1", "scrape_target": "dcgm 10.0.0.1:9400"}
    claim_b = {"UUID": "GPU-a", "namespace": "ml", "pod": "p2", "scrape_target": "dcgm 10.0.0.2:9400"}
    relabelled = {"job": "dcgm", "instance": "10.0.0.9:9400", "namespace": "", "pod": "", "service": ""}
    honest = {"job": "dcgm", "instance": "10.0.0.1:9400", "namespace": "", "pod": "", "service": ""}
    timeline = {
        # claim_a throughout, claim_b only in the first 20 minutes (two targets claim GPU-a then)
        "claims": [(start + t, claim_a) for t in range(0, 9000, 60)]
        + [(start + t, claim_b) for t in range(0, 1200, 60)],
        "exported": [(start + t, labels) for t in range(0, 9000, 60) for labels in (honest, relabelled)],
        # the relabelled target's own `up` shows from 90 minutes on (it is not relabelled after)
        "targets": [(start + t, honest) for t in range(0, 9000, 60)]
        + [(start + t, relabelled) for t in range(5400, 9000, 60)],
    }
    recorded = RecordedSource(timeline)
    cache = IdentityCache(window, 60.0)
    report = CycleReport(backfilling=False)
    conflicted, relabelled_seen = [], []
    for now in [start + window + k * interval for k in range(0, 17)]:
        got = cache.read(recorded, now, report)  # type: ignore[arg-type]
        claims, relabelled_full = recorded.full_answers(window, now)
        assert {tuple(sorted(r["metric"].items())) for r in got[gpu_targets.CLAIMS]} == claims, now
        assert {tuple(sorted(r["metric"].items())) for r in got[gpu_targets.RELABELLED]} == relabelled_full, (
            now
        )
        conflicted.append(len(claims) > 1)
        relabelled_seen.append(bool(relabelled_full))
    # both changes happen inside the compared reads: claim_b leaves the window, `up` shows the target
    assert conflicted[0] and not conflicted[-1]
    assert relabelled_seen[0] and not relabelled_seen[-1]
    # the first read looks back a window, every later one an interval
    assert report.queries == 3 * 17
    assert all("[3600s:60s]" in query for query in recorded.asked[:3])
    assert all("[300s:60s]" in query for query in recorded.asked[3:])


def test_identity_answers_are_none_without_trusted_targets() -> None:
    recorded = RecordedSource({"claims": [], "exported": [], "targets": []})
    recorded.config = PrometheusConfig(url="http://recorded")
    report = CycleReport(backfilling=False)
    assert IdentityCache(3600.0, 60.0).read(recorded, 1_767_226_800.0, report) == {}  # type: ignore[arg-type]
    # the claims are still asked once (who held each GPU, for sharers), the target checks are not
    assert report.queries == 1
    assert len(recorded.asked) == 1 and "hostname" in recorded.asked[0]


def test_a_failed_coarse_query_alone_is_asked_again_from_where_it_stopped() -> None:
    """One coarse query that fails once is asked again from its own last end; the others go on
    with the new interval only (one end for all re-read the whole window for every one of them)."""
    asked: list[tuple[str, float, float]] = []
    failing = {"range:busy"}

    def query(what: str, _query: str, start: float, end: float, step: float) -> list[RangeSeries]:
        asked.append((what, start, end))
        if what in failing:
            raise PrometheusSourceError("Prometheus did not answer within 30s (range:busy)")
        points = [[t, "1"] for t in range(int(start), int(end) + 1, int(step))]
        return matrix_of([{"metric": {"namespace": "ml", "pod": "p"}, "values": points}])

    coarse = CoarseSeries(3600.0, 60.0)
    names = {"range:busy": "b", "range:cpu": "c"}
    now = 1_767_225_600.0
    coarse.read(query, names, now, CycleReport(backfilling=False))
    assert {what: (start, end) for what, start, end in asked} == {
        "range:busy": (now - 3600, now),
        "range:cpu": (now - 3600, now),
    }
    asked.clear()
    failing.clear()
    report = CycleReport(backfilling=False)
    coarse.read(query, names, now + 300, report)
    assert {what: (start, end) for what, start, end in asked} == {
        "range:busy": (now + 300 - 3600, now + 300),
        "range:cpu": (now + 60, now + 300),
    }
    assert report.chunks_failed == 0
    assert len(coarse.rows("range:busy")[0]["values"]) == len(coarse.rows("range:cpu")[0]["values"]) == 61


def test_without_folds_removes_exactly_the_absent_folds() -> None:
    inner = 'max by (pod) (foo{namespace=~"a(b|c)\\")", pod!=""} < 1)'
    folded = fold_labels(inner)
    assert without_folds(folded, [source for _, source in LABEL_FOLDS]) == inner
    kept = without_folds(folded, ["pod_name", "uuid"])
    assert '"pod_name"' not in kept and '"uuid"' not in kept
    assert kept.count("label_replace(") == len(LABEL_FOLDS) - 2 and inner in kept
    assert without_folds(folded, []) == folded


@needs_prometheus
def test_every_query_answers_the_same_without_the_folds_of_labels_its_series_lack(
    prometheus_url: str,
) -> None:
    """The folds of label variants that no series of a query's metrics has change no answer: every
    family and coarse query that folds in PromQL (the bare-selector families fold in the reader),
    with and without them, over the fixture history. Its DCGM series have `Hostname`, the renamed
    engine-activity ones `exported_*` too: the cAdvisor queries lose those folds, the DCGM ones keep them."""
    config = PrometheusConfig(url=prometheus_url)
    source = PrometheusSource(config)
    incremental = IncrementalSource(source, window_seconds=1800.0, step_seconds=STEP)
    queries = {
        family.name: family.query(None)
        for family in incremental.families
        if not family.raw_series or family.bitmasks  # the throttle family folds its violation side
    }
    queries.update(incremental.coarse_queries())
    absent, asked = incremental.absent_folds(float(LAST), queries)
    assert 1 < asked < len(queries)  # one request per distinct set of metrics
    variants = {source for _, source in LABEL_FOLDS}
    cpu = f"pod:{Signal.CPU_USAGE_CORES.value}"
    assert absent[cpu] == variants  # cAdvisor series have none of them
    assert {"Hostname", "exported_pod", "exported_namespace"}.isdisjoint(absent["range:busy"])
    assert {"pod_name", "uuid"} <= absent["range:busy"]
    assert "Hostname" not in absent["gpu:throttle"]
    with_data = 0
    for name, query in queries.items():
        lean = without_folds(query, absent[name])
        assert lean.count("label_replace(") < query.count("label_replace("), name
        before, after = answer(source, query), answer(source, lean)
        assert_same(name, before, after)
        with_data += bool(before)
    assert with_data >= 10


def test_series_selected_covers_every_metric_a_query_names() -> None:
    """The `match[]` of a query names every metric it selects, by name or `__name__` regex, and none
    that only appears in a label value; a query of no known metric has none (the whole store's)."""
    query = (
        'sum by (namespace, pod) (rate(container_cpu_usage_seconds_total{container!=""}[3m])) '
        'or {__name__=~"vllm:request_success_total|tgi_request_count"} '
        'and on (namespace, pod) kube_pod_container_resource_requests{resource=~"nvidia.com.(gpu|mig).*"}'
    )
    assert prometheus.series_selected(query) == (
        '{__name__=~"(?:vllm:request_success_total|tgi_request_count)|container_cpu_usage_seconds_total|'
        'kube_pod_container_resource_requests"}'
    )
    assert prometheus.series_selected('namespace_pod:gpu_rightsizer_cpu{gpu_rightsizer_expr="x"}') is None


@needs_prometheus
def test_bare_gauge_selectors_give_the_windows_of_max_by_over_folded_series(prometheus_url: str) -> None:
    """The gauge and XID families are sent as bare selectors and folded and merged by the reader; over
    the fixture history plus renamed devices scraped twice with blanks and NaN (`raw_gauge_lines`),
    served by a real Prometheus, every window equals the one today's shape (`max by` of the folded,
    sentinel-filtered selector, `_gpu_expr`) gives, series for series."""
    source = PrometheusSource(PrometheusConfig(url=prometheus_url))
    raw = [family for family in _source_families(STEP, None) if family.raw_series and not family.bitmasks]
    assert {family.expression for family in raw} >= {mn.DCGM_GR_ENGINE_ACTIVE, mn.DCGM_XID_ERRORS}
    assert all(family.expression.isidentifier() for family in raw)  # bare selectors
    aggregated = [
        replace(family, raw_series=False, expression=_gpu_expr(family.expression, family.keys)(""))
        for family in raw
    ]
    stores = []
    for families in (aggregated, raw):
        reader = IncrementalReader(
            source.range_series, window_seconds=1800.0, step_seconds=STEP, families=families
        )
        report = reader.read(float(LAST))
        assert reader.complete and report.chunks_failed == 0
        stores.append({key: window.figures(float(LAST)) for key, window in reader.store.series.items()})
    before, after = stores
    assert after.keys() == before.keys()
    merged = [key for key in after if ("UUID", "GPU-1111") in key[1]]
    assert {name for name, _ in merged} == {f"gpu:{metric}" for metric, _ in RENAMED_GAUGES}
    assert all(("pod", "chat-1") in labels and ("namespace", "ml") in labels for _, labels in merged)
    for key, figures in before.items():
        assert figures is not None and after[key] is not None, key
        assert after[key] == pytest.approx(figures, rel=1e-12, abs=1e-12), key
    assert len({name for name, _ in before}) >= 7  # the plain fixture's gauges and the added ones
