"""PID → pod mapping from /proc/<pid>/cgroup in each kubelet/runtime layout (files under cgroup_samples/).

The samples follow the documented path shapes (gpu-signals §2.1); `v2_process_api.txt` was read on the
GPU machine used for the H200 recordings (no Kubernetes there).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_rightsizer.agent.cgroups import (
    PidPodMapper,
    PodIdentity,
    StaticPodDirectory,
    container_name_from_statuses,
    parse_cgroup_file,
    parse_cgroup_path,
)
from gpu_rightsizer.agent.kube_directory import KubernetesPodDirectory

SAMPLES = Path(__file__).parent / "cgroup_samples"


@pytest.mark.parametrize(
    ("sample", "pod_uid", "container_id", "runtime"),
    [
        (
            "v1_cgroupfs_containerd",
            "3a5b1c2d-4e6f-4a1b-9c8d-7e6f5a4b3c2d",
            "8f3e2d1c0b9a8f7e" + "6d5c4b3a29180716f5e4d3c2b1a09f8e7d6c5b4a39281701",
            None,
        ),
        (
            "v1_systemd_containerd",
            "9b8a7c6d-5e4f-4321-8abc-def012345678",
            "0123456789abcdef" * 4,
            "containerd",
        ),
        (
            "v2_systemd_containerd",
            "c0ffee00-1234-4abc-9def-0123456789ab",
            "fedcba9876543210" * 4,
            "containerd",
        ),
        (
            "v2_systemd_crio",
            "11112222-3333-4444-5555-666677778888",
            "aaaabbbbccccddddeeeeffff00001111" + "22223333444455556666777788889999",
            "cri-o",
        ),
    ],
)
def test_pod_uid_and_container_from_each_layout(
    sample: str, pod_uid: str, container_id: str, runtime: str | None
) -> None:
    identity = parse_cgroup_file((SAMPLES / f"{sample}.txt").read_text())
    assert identity is not None
    assert identity.pod_uid == pod_uid  # underscores of the systemd slice name become dashes
    assert identity.container_id == container_id
    assert identity.runtime == runtime


def test_crio_conmon_is_the_pod_but_not_a_container() -> None:
    identity = parse_cgroup_file((SAMPLES / "v2_systemd_crio_conmon.txt").read_text())
    assert identity is not None
    assert identity.pod_uid == "11112222-3333-4444-5555-666677778888"
    assert identity.container_id is None


@pytest.mark.parametrize("sample", ["v2_host_process", "v2_process_api"])
def test_processes_outside_kubepods_have_no_pod(sample: str) -> None:
    assert parse_cgroup_file((SAMPLES / f"{sample}.txt").read_text()) is None


@pytest.mark.parametrize("text", ["", "garbage", "0::", "1:cpu:/kubepods/podnot-a-uid/abc"])
def test_malformed_input_yields_nothing(text: str) -> None:
    assert parse_cgroup_file(text) is None


def test_pod_level_path_without_container() -> None:
    identity = parse_cgroup_path("/kubepods/besteffort/pod91a8fc3a-0ecf-48b4-81bf-78a7275d348c")
    assert identity is not None
    assert identity.pod_uid == "91a8fc3a-0ecf-48b4-81bf-78a7275d348c"
    assert identity.container_id is None


def test_mapper_reads_proc_names_pods_and_forgets_exited_pids(tmp_path: Path) -> None:
    (tmp_path / "100").mkdir()
    (tmp_path / "100" / "cgroup").write_text((SAMPLES / "v2_systemd_containerd.txt").read_text())
    named = PodIdentity(
        pod_uid="c0ffee00-1234-4abc-9def-0123456789ab", namespace="ml", pod="train-0", container="main"
    )
    reads: list[Path] = []

    def read(path: Path) -> str:
        reads.append(path)
        return path.read_text()

    mapper = PidPodMapper(proc_root=tmp_path, directory=StaticPodDirectory([named]), read_text=read)
    identity = mapper.identity(100)
    assert identity is not None
    assert (identity.namespace, identity.pod, identity.container) == ("ml", "train-0", "main")
    assert identity.container_id == "fedcba9876543210" * 4
    mapper.identity(100)
    assert len(reads) == 1  # cached
    assert mapper.identity(999) is None  # no such process
    mapper.retain([])
    mapper.identity(100)
    assert [p.parent.name for p in reads].count("100") == 2  # looked up again after the PID left the GPU


def test_mapper_without_directory_knows_only_the_uid(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").write_text((SAMPLES / "v1_cgroupfs_containerd.txt").read_text())
    identity = PidPodMapper(proc_root=tmp_path).identity(7)
    assert identity == PodIdentity(
        pod_uid="3a5b1c2d-4e6f-4a1b-9c8d-7e6f5a4b3c2d",
        container_id="8f3e2d1c0b9a8f7e6d5c4b3a29180716f5e4d3c2b1a09f8e7d6c5b4a39281701",
    )


def test_container_name_from_pod_statuses() -> None:
    statuses = [("sidecar", "containerd://" + "1" * 64), ("main", "containerd://" + "2" * 64), ("init", None)]
    assert container_name_from_statuses(statuses, "2" * 64) == "main"
    assert container_name_from_statuses(statuses, "3" * 64) is None
    assert container_name_from_statuses(statuses, None) is None


class _Obj:
    def __init__(self, **kwargs: object) -> None:
        self.__dict__.update(kwargs)


class _FakeCoreApi:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def list_pod_for_all_namespaces(self, field_selector: str) -> _Obj:
        self.calls.append(field_selector)
        pod = _Obj(
            metadata=_Obj(uid="u-1", namespace="ml", name="train-0"),
            status=_Obj(container_statuses=[_Obj(name="main", container_id="containerd://" + "a" * 64)]),
        )
        return _Obj(items=[pod])


def test_kubernetes_directory_lists_this_node_and_rate_limits_refreshes() -> None:
    api = _FakeCoreApi()
    now = [0.0]
    directory = KubernetesPodDirectory("node-a", core_api=api, min_refresh_seconds=30.0, clock=lambda: now[0])
    found = directory.lookup("u-1", "a" * 64)
    assert found == PodIdentity(
        pod_uid="u-1", namespace="ml", pod="train-0", container="main", container_id="a" * 64
    )
    assert api.calls == ["spec.nodeName=node-a"]
    assert directory.lookup("unknown", None) is None
    assert len(api.calls) == 1  # an unknown UID within 30 s does not LIST again
    now[0] = 31.0
    assert directory.lookup("unknown", None) is None
    assert len(api.calls) == 2
