"""Retries of API calls: 429 waits the server's Retry-After, 5xx backs off, other errors are raised."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubernetes.client.exceptions import ApiException

from gpu_rightsizer.adapters.backoff import with_backoff


def failing(statuses: list[int], headers: dict[str, str] | None = None) -> Callable[[], str]:
    """A call that fails with these statuses in turn, then answers 'ok'."""
    remaining = list(statuses)

    def call() -> str:
        if remaining:
            error = ApiException(status=remaining.pop(0), reason="test")
            error.headers = headers or {}
            raise error
        return "ok"

    return call


def test_429_waits_what_the_server_asks_capped() -> None:
    slept: list[float] = []
    retried: list[int] = []
    result = with_backoff(
        failing([429, 429], {"Retry-After": "45"}),
        what="status",
        sleep=slept.append,
        max_seconds=30,
        on_retry=retried.append,
    )
    assert result == "ok"
    assert slept == [30, 30]
    assert retried == [429, 429]


def test_5xx_backs_off_exponentially_with_jitter() -> None:
    slept: list[float] = []
    with_backoff(
        failing([503, 500, 502]), what="status", sleep=slept.append, base_seconds=1, jitter=lambda: 1.0
    )
    assert slept == [1, 2, 4]
    slept.clear()
    with_backoff(failing([503]), what="status", sleep=slept.append, base_seconds=1, jitter=lambda: 0.0)
    assert slept == [0.5]


@pytest.mark.parametrize("status", [403, 404, 409, 422])
def test_errors_retrying_cannot_fix_are_raised_at_once(status: int) -> None:
    slept: list[float] = []
    with pytest.raises(ApiException) as raised:
        with_backoff(failing([status]), what="status", sleep=slept.append)
    assert raised.value.status == status
    assert slept == []


def test_the_last_error_is_raised_when_attempts_run_out() -> None:
    slept: list[float] = []
    with pytest.raises(ApiException) as raised:
        with_backoff(failing([503] * 5), what="status", attempts=3, sleep=slept.append, jitter=lambda: 1.0)
    assert raised.value.status == 503
    assert len(slept) == 2


def test_an_http_date_retry_after_falls_back_to_backoff() -> None:
    slept: list[float] = []
    with_backoff(
        failing([429], {"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}),
        what="status",
        sleep=slept.append,
        base_seconds=2,
        jitter=lambda: 1.0,
    )
    assert slept == [2]


class ThrottlingCustomObjects:
    """The custom-objects API answering 429 a few times before it accepts a status patch."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.calls = 0

    def patch_namespaced_custom_object_status(self, *args: object) -> dict[str, str]:
        self.calls += 1
        if self.calls <= self.refusals:
            error = ApiException(status=429, reason="Too Many Requests")
            error.headers = {"Retry-After": "2"}
            raise error
        return {"status": "patched"}


def test_status_writes_wait_out_a_throttling_api_server() -> None:
    from gpu_rightsizer.adapters.kube import KubeAdapter
    from gpu_rightsizer.model.observation import WorkloadRef

    adapter = KubeAdapter()
    fake = ThrottlingCustomObjects(refusals=2)
    adapter.custom = fake  # type: ignore[assignment]
    slept: list[float] = []
    adapter.sleep = slept.append
    ref = WorkloadRef(namespace="ml", kind="Deployment", name="web")
    assert adapter.patch_recommendation_status(ref, {"phase": "x"}) == {"status": "patched"}
    assert fake.calls == 3 and slept == [2.0, 2.0]
