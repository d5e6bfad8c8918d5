"""The local cluster fails fast and says why: a component that exits during the start is named, with
its log, instead of a silent wait that ends in a traceback minutes later."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpu_rightsizer.testcluster.binaries import TestBinaries
from gpu_rightsizer.testcluster.kwok import ClusterError, ClusterPorts, LocalCluster
from tests.e2e.conftest import Kube, unique_name


def test_a_component_that_cannot_bind_fails_the_start_with_its_log(
    testbins: TestBinaries, tmp_path: Path
) -> None:
    """The API server's port is taken (as when two clusters picked the same ports): it exits on its bind."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = ClusterPorts.pick(kube_apiserver=taken.getsockname()[1])
        cluster = LocalCluster(name=unique_name("exits"), workdir=tmp_path, bins=testbins, ports=ports)
        started = time.monotonic()
        with pytest.raises(ClusterError) as caught:
            cluster.up(timeout=240)
        print(f"start failed after {time.monotonic() - started:.1f} s (timeout 240 s)")
    message = str(caught.value)
    assert "kube-apiserver exited while the control plane started" in message, message
    assert "--- kube-apiserver log, last lines ---" in message
    assert "address already in use" in message, message
    # torn down: etcd, which did start, no longer holds its port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # its closed connections may linger
        probe.bind(("127.0.0.1", ports.etcd))


def test_cluster_up_refuses_a_name_that_is_already_running(kube: Kube, tmp_path: Path) -> None:
    """`gpu-rightsizer cluster up` on the session cluster's name and folder: refused, nothing touched."""
    name = kube.cluster.name
    folder = tmp_path / "gpu-rightsizer" / "clusters" / name
    folder.parent.mkdir(parents=True)
    folder.symlink_to(kube.cluster.workdir)
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(tmp_path),
        "GPU_RIGHTSIZER_TESTBINS": str(kube.cluster.bins.bin_dir),
    }

    result = subprocess.run(
        [sys.executable, "-m", "gpu_rightsizer", "cluster", "up", "--name", name],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert result.returncode == 1, result.stdout + result.stderr
    assert f"cluster {name!r} is already running" in result.stderr and "kube-apiserver" in result.stderr
    assert "creating cluster" not in result.stderr
    kube.cluster.check_running()
    assert kube.get_json("nodes")["items"]
