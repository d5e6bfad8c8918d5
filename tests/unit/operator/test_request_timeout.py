"""Every Kubernetes call the operator makes carries a request timeout."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from gpu_rightsizer.adapters.kube import REQUEST_TIMEOUT, KubeAdapter, TimedApiClient


class SilentError(Exception):
    """Stands in for the read timeout of a server that accepted the connection and said nothing."""


@pytest.mark.parametrize("given", [None, 2.0])
def test_a_call_without_a_timeout_gets_the_default_and_one_with_keeps_its_own(given: float | None) -> None:
    api = TimedApiClient(client.Configuration())
    seen: list[Any] = []

    def request(*args: Any, _request_timeout: Any = None, **kwargs: Any) -> Any:
        seen.append(_request_timeout)
        raise SilentError

    api.rest_client.request = request  # type: ignore[method-assign]
    if given is None:
        with pytest.raises(SilentError):
            KubeAdapter(api).read("Deployment", "team-a", "trainer")
    else:
        with pytest.raises(SilentError):
            client.CoreV1Api(api).read_namespace("team-a", _request_timeout=given)
    assert seen == [REQUEST_TIMEOUT if given is None else given]


def test_the_adapter_makes_a_timed_client_by_default() -> None:
    assert isinstance(KubeAdapter().api_client, TimedApiClient)
