"""Which GPUs' figures can be believed: one device, one story from every scrape target that reports it.

A GPU is in one node, and the exporters on that node (dcgm-exporter, the project's agent) see the same
pods on it. When two trusted scrape targets report one GPU (UUID, and MIG instance) for different
pods, at least one of them is wrong or lying, and nothing in the series says which: the device's
figures are refused for every pod that claims it, with a warning, rather than given to either.

Data in, data out: the adapters turn their answers into `DeviceClaim`s.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceClaim:
    """One scrape target says: this device was held by this pod (in the window)."""

    device: str
    target: str
    namespace: str
    pod: str


@dataclass(frozen=True)
class DeviceConflict:
    """A device whose trusted targets disagree on the pods that hold it."""

    device: str
    #: target → the pods (namespace/name) it reports on the device
    pods_by_target: Mapping[str, frozenset[str]]

    @property
    def pods(self) -> frozenset[tuple[str, str]]:
        """Every (namespace, pod) any target reports on the device."""
        return frozenset(
            (text.partition("/")[0], text.partition("/")[2])
            for pods in self.pods_by_target.values()
            for text in pods
        )

    def message(self) -> str:
        """The warning shown with each claiming pod's window."""
        reports = "; ".join(
            f"{target} reports {', '.join(sorted(pods))}"
            for target, pods in sorted(self.pods_by_target.items())
        )
        return (
            f"GPU {self.device} is reported for different pods by two trusted scrape targets ({reports}): "
            "its figures are refused"
        )


def device_conflicts(claims: Iterable[DeviceClaim]) -> dict[str, DeviceConflict]:
    """Devices that two or more targets report for different sets of pods, by device.

    One target reporting several pods on a device is GPU sharing (time-slicing, MPS), not a conflict.
    Claims without a pod (board-level series) say nothing about who holds the device and are left out.
    Sets are compared over the whole window, so a target that started later than another while the
    device changed hands also counts as a disagreement: refusing is the safe side of that doubt.
    """
    by_device: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for claim in claims:
        if claim.pod and claim.device:
            by_device[claim.device][claim.target].add(f"{claim.namespace}/{claim.pod}")
    conflicts: dict[str, DeviceConflict] = {}
    for device, per_target in by_device.items():
        distinct = {frozenset(pods) for pods in per_target.values()}
        if len(per_target) > 1 and len(distinct) > 1:
            conflicts[device] = DeviceConflict(
                device, {target: frozenset(pods) for target, pods in per_target.items()}
            )
    return conflicts
