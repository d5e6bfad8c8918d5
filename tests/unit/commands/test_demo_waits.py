"""The demo's waits end on a real failure at once and name it, and only kubectl's errors are waited
through; its clean-up of left-over clusters never touches a running demo's."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

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


def test_left_over_clean_up_removes_only_clusters_whose_run_has_exited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two demos beside each other: neither deletes the other's cluster, only an exited run's."""
    from gpu_rightsizer.testcluster.kwok import LocalCluster

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    deleted: list[str] = []
    monkeypatch.setattr(LocalCluster, "down", lambda self: deleted.append(self.name))
    monkeypatch.setattr(LocalCluster, "running_components", lambda self: [])
    root = tmp_path / "gpu-rightsizer" / "clusters"
    exited = subprocess.Popen(["true"])
    exited.wait()
    owners = {"gpu-rightsizer-demo-exited": exited.pid, "gpu-rightsizer-demo-running": os.getpid()}
    for name, pid in owners.items():
        (root / name).mkdir(parents=True)
        (root / name / demo.OWNER_FILE).write_text(str(pid))
    (root / "gpu-rightsizer-demo-starting").mkdir()  # created a moment ago, owner not yet written
    (root / "gpu-rightsizer-demo").mkdir()  # the fixed-name folder of earlier versions, stopped
    (root / "gpu-rightsizer").mkdir()  # `cluster up`'s default cluster: not a demo

    running = demo.clean_left_overs(bins=None)

    assert sorted(deleted) == ["gpu-rightsizer-demo", "gpu-rightsizer-demo-exited"]
    assert running == [f"gpu-rightsizer-demo-running (pid {os.getpid()})"]
    assert sorted(path.name for path in root.iterdir()) == [
        "gpu-rightsizer",
        "gpu-rightsizer-demo-running",
        "gpu-rightsizer-demo-starting",
    ]
