"""Retries of Kubernetes API calls on 429 and 5xx, with capped exponential backoff.

Why: at a thousand workloads a cycle writes hundreds of statuses; an API server under load answers
429 (Too Many Requests, with `Retry-After`) or a 5xx, and the official client retries neither. A
write that fails this way is retried after the server's `Retry-After` (capped), else after an
exponentially growing delay with jitter, so the bounded pool of writers slows down instead of
hammering the server. Any other error (404, 409, 422, 403) is raised at once: retrying cannot fix it.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from kubernetes.client.exceptions import ApiException

LOG = logging.getLogger(__name__)

#: Statuses worth another attempt: throttling and server-side failures.
RETRIABLE = frozenset({429, 500, 502, 503, 504})
Result = TypeVar("Result")


def retry_after(error: ApiException) -> float | None:
    """The server's `Retry-After` in seconds, when it sent one as a number."""
    headers = getattr(error, "headers", None) or {}
    value = headers.get("Retry-After") or headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None  # an HTTP date: fall back to our own backoff


def with_backoff(
    call: Callable[[], Result],
    *,
    what: str,
    attempts: int = 5,
    base_seconds: float = 0.5,
    max_seconds: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
    jitter: Callable[[], float] = random.random,
    on_retry: Callable[[int], None] | None = None,
) -> Result:
    """`call()`, retried on 429/5xx up to `attempts` times in all; the last error is raised.

    `on_retry(status)` is told of every retry (for the operator's metrics).
    """
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    for attempt in range(attempts):
        try:
            return call()
        except ApiException as error:
            status = int(error.status or 0)
            if status not in RETRIABLE or attempt == attempts - 1:
                raise
            asked = retry_after(error)
            delay = (
                min(max_seconds, asked)
                if asked is not None
                else min(max_seconds, base_seconds * 2**attempt) * (0.5 + 0.5 * jitter())
            )
            LOG.info(
                "%s: API answered %s; retrying in %.1f s (attempt %d of %d)",
                what,
                status,
                delay,
                attempt + 2,
                attempts,
            )
            if on_retry is not None:
                on_retry(status)
            sleep(delay)
    raise AssertionError("unreachable: the loop returns or raises")
