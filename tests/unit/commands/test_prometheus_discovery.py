"""Prometheus discovery and the API server's service-proxy path, on recorded API server answers.

A local HTTP server answers as kube-apiserver does (the Service lists recorded in
tests/fixtures/discovery) and as Prometheus answers through the service proxy; the real kube
client, discovery and Prometheus source talk to it. The e2e test (test_discovery_e2e) proves
discovery against a real API server; this one proves the proxy URL, its credentials and the order
of the selectors, which a loopback Prometheus cannot be reached through.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from gpu_rightsizer.adapters.prometheus import PrometheusSource
from gpu_rightsizer.adapters.prometheus_discovery import (
    SELECTORS,
    PrometheusNotFoundError,
    pick_endpoint,
    pick_service,
)
from gpu_rightsizer.commands import analyze
from gpu_rightsizer.commands.prometheus_access import prometheus_config

RECORDED = Path(__file__).resolve().parents[2] / "fixtures" / "discovery"
TOKEN = "recorded-user-token"


def _recorded(name: str) -> dict[str, Any]:
    return dict(json.loads((RECORDED / name).read_text()))


@dataclass
class FakeAPIServer:
    """Answers Service lists by label selector, and PromQL behind the service-proxy path."""

    services: dict[str, dict[str, Any]]
    seen: list[tuple[str, str, str]] = field(default_factory=list)  # method, path, Authorization

    def handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                url = urlparse(self.path)
                server.seen.append((self.command, url.path, self.headers.get("Authorization", "")))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                if url.path == "/api/v1/services":
                    selector = parse_qs(url.query).get("labelSelector", [""])[0]
                    body = server.services.get(selector, _recorded("services-empty.json"))
                elif url.path.endswith("/proxy/api/v1/query"):
                    body = _recorded("query-vector-1.json")
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer  # noqa: N815

            def log_message(self, *_: Any) -> None:
                pass

        return Handler


@pytest.fixture
def api_server(tmp_path: Path) -> Iterator[tuple[FakeAPIServer, Path]]:
    """A fake API server holding kube-prometheus-stack's and prometheus-operator's Services, and a
    kubeconfig with a token user and two contexts (one pointing nowhere)."""
    fake = FakeAPIServer(
        services={
            "app=kube-prometheus-stack-prometheus": _recorded("services-kube-prometheus-stack.json"),
            "operated-prometheus=true": _recorded("services-prometheus-operated.json"),
        }
    )
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), fake.handler())
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "lab", "cluster": {"server": f"http://127.0.0.1:{httpd.server_port}"}},
                    {"name": "gone", "cluster": {"server": "http://127.0.0.1:9"}},
                ],
                "users": [{"name": "me", "user": {"token": TOKEN}}],
                "contexts": [
                    {"name": "lab", "context": {"cluster": "lab", "user": "me"}},
                    {"name": "gone", "context": {"cluster": "gone", "user": "me"}},
                ],
                "current-context": "gone",
            }
        )
    )
    try:
        yield fake, kubeconfig
    finally:
        httpd.shutdown()
        httpd.server_close()


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    analyze.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_kube_prometheus_stack_is_reached_through_the_service_proxy_with_the_kube_token(
    api_server: tuple[FakeAPIServer, Path],
) -> None:
    fake, kubeconfig = api_server
    notes: list[str] = []
    config = prometheus_config(_args("--kubeconfig", str(kubeconfig), "--context", "lab"), notes.append)
    proxy = "/api/v1/namespaces/monitoring/services/http:kube-prometheus-stack-prometheus:9090/proxy"
    assert config.url.endswith(proxy), config.url
    assert config.bearer_token == TOKEN
    assert "monitoring/kube-prometheus-stack-prometheus:9090" in notes[0]
    PrometheusSource(config).check(1_764_633_600.0)
    method, path, authorization = fake.seen[-1]
    assert (method, path, authorization) == ("POST", f"{proxy}/api/v1/query", f"Bearer {TOKEN}")


def test_prometheus_operated_is_found_when_no_chart_service_exists(
    api_server: tuple[FakeAPIServer, Path],
) -> None:
    fake, kubeconfig = api_server
    del fake.services["app=kube-prometheus-stack-prometheus"]
    config = prometheus_config(_args("--kubeconfig", str(kubeconfig), "--context", "lab"), lambda _: None)
    assert "/services/http:prometheus-operated:9090/proxy" in config.url
    selectors = [parse for _, parse, _ in fake.seen]
    assert len(selectors) == 2, "stops at the first selector that finds a Service"


def test_prometheus_url_wins_and_the_cluster_is_not_asked(api_server: tuple[FakeAPIServer, Path]) -> None:
    fake, kubeconfig = api_server
    config = prometheus_config(
        _args(
            "--prometheus", "http://prom.example:9090", "--kubeconfig", str(kubeconfig), "--context", "lab"
        ),
        lambda _: None,
    )
    assert config.url == "http://prom.example:9090"
    assert config.bearer_token is None, "the kube token is for the API server, never sent to a given URL"
    assert fake.seen == []


def test_nothing_found_names_every_selector_tried(api_server: tuple[FakeAPIServer, Path]) -> None:
    fake, kubeconfig = api_server
    fake.services.clear()
    with pytest.raises(PrometheusNotFoundError) as caught:
        prometheus_config(_args("--kubeconfig", str(kubeconfig), "--context", "lab"), lambda _: None)
    message = str(caught.value)
    assert all(selector in message for selector, _ in SELECTORS)
    assert "all namespaces" in message and "--prometheus URL" in message
    assert len(fake.seen) == len(SELECTORS)


def test_analyze_without_a_reachable_cluster_is_a_clear_error(
    api_server: tuple[FakeAPIServer, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, kubeconfig = api_server
    code = analyze.run(_args("--kubeconfig", str(kubeconfig), "--context", "gone", "--timeout", "2"))
    captured = capsys.readouterr()
    assert code == 1
    assert "cannot reach the API server at http://127.0.0.1:9" in captured.err
    assert captured.out == ""


def test_the_web_port_is_chosen_over_the_config_reloader() -> None:
    services = _recorded("services-kube-prometheus-stack.json")["items"]
    found = pick_service([("app=kube-prometheus-stack-prometheus", "kube-prometheus-stack", services)])
    assert found is not None
    assert (found.port, found.port_name, found.scheme) == (9090, "http-web", "http")


def test_endpoint_address_is_the_first_ready_one_on_the_named_port() -> None:
    services = _recorded("services-prometheus-operated.json")["items"]
    found = pick_service([("operated-prometheus=true", "prometheus-operator", services)])
    assert found is not None
    slices = [
        {
            "metadata": {"name": "prometheus-operated-abcde"},
            "ports": [{"name": "grpc", "port": 10901}, {"name": "web", "port": 9090}],
            "endpoints": [
                {"addresses": ["10.244.1.7"], "conditions": {"ready": False}},
                {"addresses": ["10.244.2.9"], "conditions": {"ready": True}},
            ],
        }
    ]
    assert pick_endpoint(slices, found) == "http://10.244.2.9:9090"
    assert pick_endpoint([{**slices[0], "ports": [{"name": "grpc", "port": 10901}]}], found) is None


def test_an_external_name_service_is_reached_at_the_host_it_names() -> None:
    services = [
        {
            "metadata": {"name": "prometheus", "namespace": "monitoring"},
            "spec": {
                "type": "ExternalName",
                "externalName": "prometheus.example.internal",
                "ports": [{"name": "web", "port": 9091}],
            },
        }
    ]
    found = pick_service([("app.kubernetes.io/name=prometheus", "Prometheus", services)])
    assert found is not None
    assert found.external_name == "prometheus.example.internal"
    assert found.service_url() == found.external_url() == "http://prometheus.example.internal:9091"
    plain = pick_service([("s", "i", [{**services[0], "spec": {"ports": [{"name": "web", "port": 9091}]}}])])
    assert plain is not None and plain.external_name == ""
    assert plain.service_url() == "http://prometheus.monitoring.svc:9091"
