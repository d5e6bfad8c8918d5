"""A metrics outage a person can see: one ERROR line per cycle naming the URL and the value to check,
the per-window lines at DEBUG, a METRICS printer column, 401/403 explained, quiet libraries."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import generate_latest

from gpu_rightsizer.adapters.prometheus import PrometheusConfig, PrometheusSource, PrometheusSourceError
from gpu_rightsizer.adapters.source import EVERYWHERE
from gpu_rightsizer.commands.run import quiet_libraries
from gpu_rightsizer.crdgen import RECOMMENDATION_COLUMNS
from gpu_rightsizer.recommender.windows import fetch_chunks
from gpu_rightsizer.runtime import metrics  # noqa: F401  (registers the operator metrics)

URL = "http://prometheus.wrong.svc:9090"


class DownSource:
    """A metrics source whose every read fails, as a wrong URL does."""

    where = URL

    def read_windows(self, window_seconds: float, at: datetime, **_: Any) -> Any:
        raise PrometheusSourceError(f"cannot reach Prometheus at {URL}: Name or service not known")


def test_one_error_line_per_cycle_names_the_url_and_the_value_to_check(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    failures: dict[float, str] = {}
    batches = fetch_chunks(
        DownSource(),
        [300.0, 3600.0, 86400.0],
        datetime(2026, 5, 1, tzinfo=UTC),
        EVERYWHERE,
        failures=failures,
    )  # type: ignore[arg-type]
    assert batches == {} and set(failures) == {300.0, 3600.0, 86400.0}
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1 and errors[0].levelno == logging.ERROR
    text = errors[0].getMessage()
    assert URL in text and "prometheus.url" in text and "--prometheus-url" in text and "METRICS" in text
    assert sum(r.levelno == logging.DEBUG and URL in r.getMessage() for r in caplog.records) == 3


def test_a_401_names_the_token_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from prometheus_api_client.exceptions import PrometheusApiClientException

    source = PrometheusSource(PrometheusConfig(url=URL))

    def refuse() -> Any:
        raise PrometheusApiClientException("HTTP Status Code 401 (b'Unauthorized\\n')")

    with pytest.raises(PrometheusSourceError) as raised:
        source._call("connectivity check", refuse)
    text = str(raised.value)
    assert "HTTP 401 (Unauthorized)" in text and "b'" not in text
    assert "--bearer-token-file" in text and "prometheus.bearerToken.secretName" in text


def test_the_metrics_printer_column_reads_the_condition() -> None:
    column = next(c for c in RECOMMENDATION_COLUMNS if c["name"] == "Metrics")
    assert column["jsonPath"] == '.status.conditions[?(@.type=="MetricsAvailable")].status'
    assert column.get("priority", 0) == 0  # in the default `kubectl get`


def test_chatty_libraries_are_quiet_and_errors_are_exported_from_the_start() -> None:
    quiet_libraries()
    assert logging.getLogger("urllib3").level == logging.ERROR
    assert logging.getLogger("kopf.objects").level == logging.WARNING
    exported = generate_latest().decode()  # the default registry the operator serves
    for kind in ("metrics_source", "kubernetes", "analysis"):
        assert f'gpu_rightsizer_errors_total{{kind="{kind}"}}' in exported
