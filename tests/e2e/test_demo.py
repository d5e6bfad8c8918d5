"""`gpu-rightsizer demo` end to end: its own local cluster, recommendations printed, one change verified."""

from __future__ import annotations

import subprocess
import sys

from gpu_rightsizer.testcluster.binaries import TestBinaries


def test_demo_prints_recommendations_and_verifies_a_change(testbins: TestBinaries) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gpu_rightsizer", "demo", "--window", "1m", "--interval", "5s", "--timeout", "480"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    header = result.stdout.splitlines()[0].split()
    for column in ("WORKLOAD", "DIAGNOSIS", "ACTION", "STATE"):
        assert column in header
    assert "InputPipelineCPUBound" in result.stdout
    assert "CONFIDENCE" in result.stdout  # the -o wide table
    assert "Verified: change" in result.stderr, result.stderr[-4000:]
    assert "Job train-job: Verified" in result.stderr, result.stderr[-4000:]  # resized in place
    assert "tearing down" in result.stderr
    down = subprocess.run(
        [sys.executable, "-m", "gpu_rightsizer", "demo", "--down"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert down.returncode == 0, down.stderr
