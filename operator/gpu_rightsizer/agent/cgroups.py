"""Map a host PID to the Kubernetes pod and container that own it, through `/proc/<pid>/cgroup`.

NVML reports host PIDs; the kubelet puts every container in a cgroup whose path names the pod UID
and the container ID. Layouts handled (cgroup v1 and v2):

- cgroupfs driver: `/kubepods/burstable/pod<uid>/<container-id>`
- systemd driver:  `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>
  .slice/cri-containerd-<id>.scope` (containerd), `crio-<id>.scope` (CRI-O), `docker-<id>.scope`

Pod UID → namespace/pod/container names come from an optional `PodDirectory` (the API server); without
one, only `pod_uid` is known and exported.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
_POD_RE = re.compile(rf"pod({_UID})(?:\.slice)?(?:/|$)")
_CONTAINER_RE = re.compile(r"^(?:cri-containerd-|crio-|docker-|containerd-)?([0-9a-f]{64})(?:\.scope)?$")
_RUNTIME_PREFIXES = {"cri-containerd-": "containerd", "crio-": "cri-o", "docker-": "docker"}


@dataclass(frozen=True)
class CgroupIdentity:
    """What a cgroup path says about its process: the pod UID and, when present, the container."""

    pod_uid: str
    container_id: str | None = None
    runtime: str | None = None


@dataclass(frozen=True)
class PodIdentity:
    """A process's pod, as far as it is known; names are None without a pod directory."""

    pod_uid: str
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None
    container_id: str | None = None


def parse_cgroup_path(path: str) -> CgroupIdentity | None:
    """Pod UID and container ID from one cgroup path; None when it is not a kubepods path."""
    match = _POD_RE.search(path)
    if match is None:
        return None
    pod_uid = match.group(1).replace("_", "-")
    tail = path[match.end() :].strip("/")
    container_id: str | None = None
    runtime: str | None = None
    if tail:
        leaf = tail.split("/")[0]
        if "conmon" not in leaf:
            leaf_match = _CONTAINER_RE.match(leaf)
            if leaf_match is not None:
                container_id = leaf_match.group(1)
                runtime = next(
                    (rt for prefix, rt in _RUNTIME_PREFIXES.items() if leaf.startswith(prefix)), None
                )
    return CgroupIdentity(pod_uid=pod_uid, container_id=container_id, runtime=runtime)


def parse_cgroup_file(text: str) -> CgroupIdentity | None:
    """Parse the content of `/proc/<pid>/cgroup` (v1: many `id:controllers:path` lines, v2: `0::path`).

    The identity with a container ID wins over one without (v1 lists the pod in several hierarchies;
    some hierarchies stop at the pod level).
    """
    best: CgroupIdentity | None = None
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not line:
            continue
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        identity = parse_cgroup_path(parts[2])
        if identity is None:
            continue
        if best is None or (best.container_id is None and identity.container_id is not None):
            best = identity
    return best


class PodDirectory(Protocol):
    """Looks up a pod's names from its UID (and the container name from its container ID)."""

    def lookup(self, pod_uid: str, container_id: str | None) -> PodIdentity | None: ...


class PidPodMapper:
    """PID → pod, with a small cache keyed by PID (entries for exited PIDs are dropped on `retain`)."""

    def __init__(
        self,
        proc_root: Path = Path("/proc"),
        directory: PodDirectory | None = None,
        read_text: Callable[[Path], str] | None = None,
    ) -> None:
        self._proc_root = proc_root
        self._directory = directory
        self._read_text = read_text or (lambda path: path.read_text(encoding="utf-8", errors="replace"))
        self._cache: dict[int, PodIdentity | None] = {}

    def identity(self, pid: int) -> PodIdentity | None:
        """The pod of `pid`, or None when the process is gone or not in a pod."""
        if pid in self._cache:
            return self._cache[pid]
        try:
            text = self._read_text(self._proc_root / str(pid) / "cgroup")
        except OSError as exc:
            log.debug("cannot read the cgroup of PID %d: %s", pid, exc)
            return None  # not cached: the process may be visible next time (hostPID race)
        cgroup = parse_cgroup_file(text)
        result: PodIdentity | None = None
        if cgroup is not None:
            result = PodIdentity(pod_uid=cgroup.pod_uid, container_id=cgroup.container_id)
            if self._directory is not None:
                named = self._directory.lookup(cgroup.pod_uid, cgroup.container_id)
                if named is not None:
                    result = named
        self._cache[pid] = result
        return result

    def retain(self, live_pids: Iterable[int]) -> None:
        """Forget PIDs that no longer run on a GPU, so a reused PID is looked up again."""
        keep = set(live_pids)
        for pid in [p for p in self._cache if p not in keep]:
            del self._cache[pid]


class StaticPodDirectory:
    """A fixed UID → identity table (tests, and nodes where names come from a file)."""

    def __init__(self, pods: Iterable[PodIdentity]) -> None:
        self._pods = {pod.pod_uid: pod for pod in pods}

    def lookup(self, pod_uid: str, container_id: str | None) -> PodIdentity | None:
        pod = self._pods.get(pod_uid)
        if pod is None:
            return None
        return PodIdentity(
            pod_uid=pod.pod_uid,
            namespace=pod.namespace,
            pod=pod.pod,
            container=pod.container,
            container_id=container_id or pod.container_id,
        )


def container_name_from_statuses(
    statuses: Iterable[tuple[str, str | None]], container_id: str | None
) -> str | None:
    """Container name whose status `containerID` (`containerd://<id>`) ends with `container_id`."""
    if container_id is None:
        return None
    for name, status_id in statuses:
        if status_id and status_id.rsplit("/", 1)[-1] == container_id:
            return name
    return None
