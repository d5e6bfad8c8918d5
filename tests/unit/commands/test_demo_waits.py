"""The demo's waits end on a real failure at once and name it; only kubectl's errors are waited through."""

from __future__ import annotations

import json

import pytest

from gpu_rightsizer.commands import demo
from gpu_rightsizer.testcluster.kwok import ClusterError


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo.time, "sleep", lambda seconds: None)


def test_a_part_that_exited_ends_the_wait_with_its_error() -> None:
    calls = []

    def alive() -> None:
        if calls:
            raise RuntimeError("the operator exited with code 1; its log ends:\nTraceback ...")

    def predicate() -> bool:
        calls.append(1)
        return False

    with pytest.raises(RuntimeError, match="the operator exited with code 1"):
        demo._wait(predicate, timeout=600, what="recommendations", alive=alive)
    assert len(calls) == 1


def test_an_error_that_is_not_kubectls_is_raised_not_waited_through() -> None:
    def predicate() -> bool:
        return bool(json.loads("<html>"))

    with pytest.raises(json.JSONDecodeError):
        demo._wait(predicate, timeout=600, what="recommendations")


def test_kubectl_errors_are_waited_through_and_named_on_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter(range(0, 10_000, 5))
    monkeypatch.setattr(demo.time, "monotonic", lambda: float(next(clock)))
    answers = iter([ClusterError("kubectl get x failed (1): Error from server (NotFound): not found")] * 3)

    def predicate() -> bool:
        error = next(answers, None)
        if error:
            raise error
        raise ClusterError("kubectl get x failed (1): The connection to the server was refused")

    with pytest.raises(TimeoutError, match=r"latest error: .*connection to the server was refused"):
        demo._wait(predicate, timeout=60, what="recommendations")


def test_a_value_ends_the_wait_after_transient_errors() -> None:
    answers = iter([ClusterError("NotFound"), ClusterError("NotFound"), {"state": "Verified"}])

    def predicate() -> object:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert demo._wait(predicate, timeout=600, what="verification") == {"state": "Verified"}
