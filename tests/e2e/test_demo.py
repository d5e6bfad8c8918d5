"""`gpu-rightsizer demo` end to end: its own local cluster, recommendations printed, one change verified.

Two demos run at once under one cache folder, as two runs of one user would: each has its own cluster
name, ports and state folder, so neither deletes nor collides with the other, and a left-over folder of
a run that has exited is cleaned up while the running ones are left alone.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from gpu_rightsizer.testcluster.binaries import TestBinaries

DEMO = [sys.executable, "-m", "gpu_rightsizer", "demo"]


def _start(args: list[str], env: dict[str, str], log: Path) -> tuple[subprocess.Popen[str], Path]:
    out = log.with_suffix(".out")
    process = subprocess.Popen([*DEMO, *args], env=env, stdout=out.open("w"), stderr=log.open("w"), text=True)
    return process, out


def _finish(process: subprocess.Popen[str], timeout: float) -> int:
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.terminate()  # the demo tears its cluster down on SIGTERM
        return process.wait(timeout=120)


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_two_demos_side_by_side_print_recommendations_and_verify_a_change(
    testbins: TestBinaries, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "GPU_RIGHTSIZER_TESTBINS": str(testbins.bin_dir),
    }
    clusters = tmp_path / "cache" / "gpu-rightsizer" / "clusters"
    left_over = clusters / "gpu-rightsizer-demo-exited"
    left_over.mkdir(parents=True)
    (left_over / "owner.pid").write_text(str(_dead_pid()))

    full, full_out = _start(
        ["--window", "1m", "--interval", "5s", "--timeout", "480"], env, tmp_path / "full.log"
    )
    beside, beside_out = _start(
        ["--window", "30s", "--interval", "5s", "--no-apply", "--timeout", "300"],
        env,
        tmp_path / "beside.log",
    )
    beside_rc = _finish(beside, 420)
    full_rc = _finish(full, 600)
    stderr, stdout = (tmp_path / "full.log").read_text(), full_out.read_text()
    beside_stderr, beside_stdout = (tmp_path / "beside.log").read_text(), beside_out.read_text()

    assert full_rc == 0, stderr[-4000:]
    assert beside_rc == 0, beside_stderr[-4000:]
    names = {
        re.search(r"local cluster (\S+) with", text).group(1)  # type: ignore[union-attr]
        for text in (stderr, beside_stderr)
    }
    assert len(names) == 2, names
    header = stdout.splitlines()[0].split()
    for column in ("WORKLOAD", "DIAGNOSIS", "ACTION", "STATE"):
        assert column in header
    assert "InputPipelineCPUBound" in stdout
    assert "CONFIDENCE" in stdout  # the -o wide table
    assert "Verified: change" in stderr, stderr[-4000:]
    assert "Job train-job: Verified" in stderr, stderr[-4000:]  # resized in place
    assert "tearing down" in stderr
    assert "WORKLOAD" in beside_stdout.splitlines()[0]
    assert "Apply policy" not in beside_stderr  # --no-apply
    # the exited run's folder was cleaned up, the finished runs removed their own
    assert not left_over.exists()
    assert sorted(path.name for path in clusters.iterdir()) == []
    down = subprocess.run(
        [*DEMO, "--down"], env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert down.returncode == 0, down.stderr
    assert "no left-over demo cluster" in down.stderr
