"""The Prometheus source against recorded answers served from a local HTTP server."""

from __future__ import annotations

import base64
import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from gpu_rightsizer.adapters.prometheus import (
    PrometheusConfig,
    PrometheusSource,
    PrometheusSourceError,
    fold_labels,
    read_prometheus,
    summary_from_figures,
)
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.model.codes import DiagnosisCode
from gpu_rightsizer.model.observation import Signal

ANSWERS = json.loads(
    (Path(__file__).resolve().parents[2] / "fixtures" / "prometheus" / "answers.json").read_text()
)
END = datetime.fromtimestamp(1_767_225_600.0, tz=UTC)
EMPTY_VECTOR = {"status": "success", "data": {"resultType": "vector", "result": []}}
ONE = {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [0, "1"]}]}}

Answer = Callable[[str, str, dict[str, str]], tuple[int, bytes]]


class FakePrometheus:
    """A local HTTP server whose answers come from a function of (endpoint, query, headers)."""

    def __init__(self, answer: Answer) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                parsed = urlparse(self.path)
                fields = parse_qs(parsed.query)
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    fields.update(parse_qs(self.rfile.read(length).decode()))
                endpoint = parsed.path.rsplit("/api/v1/", 1)[-1]
                query = fields.get("query", [""])[0]
                headers = {k.lower(): v for k, v in self.headers.items()}
                owner.requests.append((endpoint, query, headers))
                status, body = answer(endpoint, query, headers)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

            do_GET = do_POST = _serve  # noqa: N815

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakePrometheus:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _replay(endpoint: str, query: str, _headers: dict[str, str]) -> tuple[int, bytes]:
    return 200, json.dumps(ANSWERS.get(f"{endpoint} {query}", EMPTY_VECTOR)).encode()


def _empty(endpoint: str, query: str, _headers: dict[str, str]) -> tuple[int, bytes]:
    if query == "vector(1)":
        return 200, json.dumps(ONE).encode()
    if endpoint == "query_range":
        return 200, json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode()
    return 200, json.dumps(EMPTY_VECTOR).encode()


@pytest.fixture
def recorded() -> Iterator[FakePrometheus]:
    with FakePrometheus(_replay) as server:
        yield server


def test_recorded_answers_give_each_workload_its_diagnosis(recorded: FakePrometheus) -> None:
    windows = {
        w.workload.name: w
        for w in read_prometheus(
            PrometheusConfig(recorded.url), window_seconds=1800, at=END, step_seconds=60.0
        )
    }
    assert set(windows) == {"trainer", "chat", "slice"}
    assert analyze_window(windows["trainer"]).primary is DiagnosisCode.INPUT_PIPELINE_CPU_BOUND
    assert analyze_window(windows["chat"]).primary is DiagnosisCode.UNDER_REPLICATED
    assert analyze_window(windows["slice"]).primary is DiagnosisCode.OVERSIZED_GPU
    slice_gpu = windows["slice"].pods[0].gpus[0]
    assert slice_gpu.mig_profile == "3g.40gb"
    assert Signal.GPU_UTIL not in slice_gpu.stats
    assert windows["slice"].allocation.gpu_resource == "nvidia.com/mig-3g.40gb"
    chat = windows["chat"]
    assert chat.allocation.replicas == 2
    assert {p.name for p in chat.pods} == {
        p.name for p in chat.pods if not p.name.startswith("dcgm-exporter")
    }
    assert chat.stats[Signal.REQUESTS_PER_S].mean == pytest.approx(50.0, rel=0.25)
    assert all(g.node for p in chat.pods for g in p.gpus)  # lowercase `hostname` was folded
    # A starved loader's CPU sits flat at its limit (1.96 of 2 cores): no correlation is defined.
    trainer = windows["trainer"].pods[0]
    assert trainer.gpu_cpu_correlation is None
    assert trainer.stats[Signal.CPU_USAGE_CORES].p50 == pytest.approx(1.96, rel=0.01)


def test_query_count_does_not_depend_on_pod_count(recorded: FakePrometheus) -> None:
    source = PrometheusSource(PrometheusConfig(recorded.url))
    source.read(window_seconds=1800, at=END, step_seconds=60.0)
    with FakePrometheus(_empty) as empty:
        other = PrometheusSource(PrometheusConfig(empty.url))
        assert other.read(window_seconds=1800, at=END, step_seconds=60.0) == []
        assert len(empty.requests) == other.queries_sent
    assert source.queries_sent == other.queries_sent == len(recorded.requests)
    assert source.queries_sent < 60


def test_every_instant_query_is_evaluated_at_the_window_end(recorded: FakePrometheus) -> None:
    seen_times: list[str] = []

    def answer(endpoint: str, query: str, headers: dict[str, str]) -> tuple[int, bytes]:
        return _empty(endpoint, query, headers)

    with FakePrometheus(answer) as server:
        original = server.server.RequestHandlerClass._serve  # type: ignore[attr-defined]

        def spy(handler: BaseHTTPRequestHandler) -> None:
            seen_times.extend(parse_qs(urlparse(handler.path).query).get("time", []))
            original(handler)

        server.server.RequestHandlerClass.do_POST = spy  # type: ignore[attr-defined]
        PrometheusSource(PrometheusConfig(server.url)).read(window_seconds=600, at=END)
    assert seen_times
    assert {float(t) for t in seen_times} == {END.timestamp()}


def test_bearer_token_and_basic_auth_are_sent() -> None:
    with FakePrometheus(_empty) as server:
        read_prometheus(PrometheusConfig(server.url, bearer_token="s3cret"), window_seconds=600, at=END)
        assert {h.get("authorization") for _, _, h in server.requests} == {"Bearer s3cret"}
    with FakePrometheus(_empty) as server:
        read_prometheus(
            PrometheusConfig(server.url, username="ops", password="pw"), window_seconds=600, at=END
        )
        expected = "Basic " + base64.b64encode(b"ops:pw").decode()
        assert {h.get("authorization") for _, _, h in server.requests} == {expected}


def test_answers_are_asked_for_uncompressed_unless_gzip_is_chosen() -> None:
    """Compressing a large answer is Prometheus' CPU: plain by default, gzip on request, every query
    (the client library's own too) asking the same way, and the windows the same either way."""

    def read(compressed: bool) -> tuple[set[str | None], list[dict[str, Any]]]:
        with FakePrometheus(_replay) as server:
            config = PrometheusConfig(server.url, compressed_answers=compressed)
            windows = read_prometheus(config, window_seconds=1800, at=END, step_seconds=60.0)
            return {h.get("accept-encoding") for _, _, h in server.requests}, [
                w.model_dump() for w in windows
            ]

    asked_plain, plain = read(False)
    asked_zipped, zipped = read(True)
    assert (asked_plain, asked_zipped) == ({"identity"}, {"gzip, deflate"})
    assert len(plain) == 3 and zipped == plain


def test_garbage_answers_are_clear_errors() -> None:
    with (
        FakePrometheus(lambda *_: (200, b"<html>login page</html>")) as server,
        pytest.raises(PrometheusSourceError, match="did not answer like Prometheus"),
    ):
        read_prometheus(PrometheusConfig(server.url), window_seconds=600, at=END)
    body = json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}).encode()
    with (
        FakePrometheus(lambda *_: (400, body)) as server,
        pytest.raises(PrometheusSourceError, match="refused"),
    ):
        read_prometheus(PrometheusConfig(server.url), window_seconds=600, at=END)
    odd = json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": [{"value": 3}]}}
    ).encode()
    with (
        FakePrometheus(lambda *_: (200, odd)) as server,
        pytest.raises(PrometheusSourceError, match="not a PromQL vector"),
    ):
        read_prometheus(PrometheusConfig(server.url), window_seconds=600, at=END)


def test_unreachable_and_slow_servers() -> None:
    with pytest.raises(PrometheusSourceError, match="cannot reach Prometheus"):
        read_prometheus(PrometheusConfig("http://127.0.0.1:9", retries=0), window_seconds=600, at=END)

    def slow(*_: object) -> tuple[int, bytes]:
        time.sleep(2.5)
        return 200, json.dumps(ONE).encode()

    with FakePrometheus(slow) as server, pytest.raises(PrometheusSourceError, match="did not answer within"):
        read_prometheus(
            PrometheusConfig(server.url, timeout_seconds=0.5, retries=0), window_seconds=600, at=END
        )


def test_label_folding_covers_every_variant() -> None:
    folded = fold_labels("up")
    for source in ("exported_pod", "pod_name", "exported_namespace", "pod_namespace", "Hostname", "uuid"):
        assert f'"{source}"' in folded


def test_a_window_ends_at_its_newest_sample_so_stopped_data_reads_stale() -> None:
    """The trainer's GPU series stopped 20 minutes before the query: its window ends there, and the
    engine (given the time now) calls it stale instead of diagnosing it as fresh."""
    stopped_at = END.timestamp() - 20 * 60

    def stopped(endpoint: str, query: str, headers: dict[str, str]) -> tuple[int, bytes]:
        answer = ANSWERS.get(f"{endpoint} {query}", EMPTY_VECTOR)
        if endpoint == "query_range" and query.startswith("avg by (namespace, pod)") and "GR_ENGINE" in query:
            answer = json.loads(json.dumps(answer))
            for row in answer["data"]["result"]:
                if row["metric"]["pod"].startswith("trainer-"):
                    row["values"] = [[t, v] for t, v in row["values"] if float(t) <= stopped_at]
        return 200, json.dumps(answer).encode()

    with FakePrometheus(stopped) as server:
        windows = {
            w.workload.name: w
            for w in read_prometheus(
                PrometheusConfig(server.url), window_seconds=1800, at=END, step_seconds=60.0
            )
        }

    assert windows["trainer"].end.timestamp() == stopped_at
    assert windows["chat"].end == END
    stale = analyze_window(windows["trainer"], now=END)
    assert stale.primary is DiagnosisCode.INSUFFICIENT_DATA
    assert not any(a.automatic for a in stale.actions)
    assert analyze_window(windows["chat"], now=END).primary is DiagnosisCode.UNDER_REPLICATED


def test_prometheus_warnings_mark_every_window_as_partial() -> None:
    """A partial answer (Prometheus's `warnings`, e.g. a store that did not respond) is kept: every
    window says so, which the actuator's gate refuses to act on."""

    def partial(endpoint: str, query: str, headers: dict[str, str]) -> tuple[int, bytes]:
        answer = dict(ANSWERS.get(f"{endpoint} {query}", EMPTY_VECTOR))
        if endpoint == "query_range":
            answer["warnings"] = ["store eu-1 did not respond: partial response"]
        return 200, json.dumps(answer).encode()

    with FakePrometheus(partial) as server:
        source = PrometheusSource(PrometheusConfig(server.url))
        windows = source.read(window_seconds=1800, at=END, step_seconds=60.0)
        assert windows and all(
            any("partial response" in w and "partial data" in w for w in window.warnings)
            for window in windows
        )
        assert source.answer_warnings == []  # carried by these windows, not by the next read's
    with FakePrometheus(_replay) as server:
        clean = PrometheusSource(PrometheusConfig(server.url)).read(
            window_seconds=1800, at=END, step_seconds=60.0
        )
    assert not any("partial data" in w for window in clean for w in window.warnings)


REPLACED = json.loads(
    (
        Path(__file__).resolve().parents[2] / "fixtures" / "prometheus" / "answers-pod-replaced.json"
    ).read_text()
)


def test_a_pod_replaced_on_its_gpu_is_not_a_sharer_and_reads_as_one_pod() -> None:
    """Recorded answers: the launch-bound H200 recording, its pod replaced half-way on the same GPU.

    In Prometheus a series runs on for the 5 min look-back after its last sample, so the busy range
    series of the pod and its successor overlap; their samples do not. Read as two sharers, the GPU
    looked time-sliced (confidence × 0.7) and the Job looked like two half-observed replicas.
    """
    from gpu_rightsizer.logic.figures import summarise
    from gpu_rightsizer.sim import rerender

    recording = rerender.load(
        Path(__file__).resolve().parents[2] / "fixtures" / "h200" / "launch-bound.om.gz"
    )
    end = datetime.fromtimestamp(recording.start + rerender.Variant().seconds, tz=UTC)

    def replay(endpoint: str, query: str, _headers: dict[str, str]) -> tuple[int, bytes]:
        return 200, json.dumps(REPLACED.get(f"{endpoint} {query}", EMPTY_VECTOR)).encode()

    with FakePrometheus(replay) as server:
        windows = read_prometheus(PrometheusConfig(server.url), window_seconds=3600, at=end)
    assert len(windows) == 1
    window = windows[0]
    assert [p.name for p in window.pods] == ["launch-bound-0-retry"]
    assert all(g.shared_by_pods == 1 for p in window.pods for g in p.gpus)
    assert window.allocation.sharing == "exclusive" and window.allocation.replicas == 1
    assert any("was replaced by launch-bound-0-retry" in w for w in window.warnings)
    busy = window.pods[0].gpus[0].stats[Signal.GR_ENGINE_ACTIVE]
    assert busy.samples > 55  # both pods' samples, one hour at the 60 s step
    analysis = analyze_window(window)
    assert analysis.primary is DiagnosisCode.LAUNCH_BOUND
    assert not summarise(window).is_shared  # no sharedGpu confidence factor


FIGURES = {"count": 4.0, "mean": 0.5, "p05": 0.1, "p50": 0.5, "p95": 0.9, "p99": 0.95, "max": 1.0, "min": 0.0}


@pytest.mark.parametrize(
    "broken",
    [
        {"count": 0.0},
        {"count": math.nan},
        {"p95": math.nan},
        {"mean": math.inf, "min": -math.inf},  # the figures' sum is NaN, no figure is
        {"max": math.nan},
    ],
)
def test_figures_without_a_usable_sample_give_no_statistics(broken: dict[str, float]) -> None:
    """A missing or NaN figure, or no sample, is no `SignalStats`; infinities alone are figures
    (the model's own validation decides on them), never a NaN taken for one."""
    figures = {**FIGURES, **broken}
    summary = summary_from_figures(figures, 1.0, Signal.SM_ACTIVE)
    if any(isinstance(v, float) and math.isnan(v) for v in figures.values()) or figures["count"] < 1:
        assert summary is None
    else:
        assert summary is not None and summary.mean == math.inf and summary.min == -math.inf


@pytest.mark.parametrize("absent", ["mean", "p50", "p95", "p99", "max", "min"])
def test_a_figure_left_out_gives_no_statistics(absent: str) -> None:
    assert (
        summary_from_figures({k: v for k, v in FIGURES.items() if k != absent}, 1.0, Signal.SM_ACTIVE) is None
    )


def test_figures_become_statistics_in_the_families_unit() -> None:
    summary = summary_from_figures({**FIGURES, "active": 0.75, "absstep": 0.4}, 100.0, Signal.SM_ACTIVE)
    assert summary is not None
    assert (summary.samples, summary.mean, summary.p95, summary.max, summary.active_fraction) == (
        4,
        50.0,
        90.0,
        100.0,
        0.75,
    )
    assert summary.sawtooth == pytest.approx(0.4 / 0.8)
