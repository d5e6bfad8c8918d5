"""Shared GPUs: diagnoses are not made from device-wide copies, and the status says why."""

from __future__ import annotations

from tests.unit.logic.logic_builders import allocation, busy_gpu, pod, stat, window
from tests.unit.logic.test_capacity import TIME_SLICED, WHOLE
from tests.unit.logic.test_diagnose import no_tensor_cores

from gpu_rightsizer.adapters.openmetrics import Inventory, allocation_for
from gpu_rightsizer.logic.capacity import capacity_from_nodes
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.sharing import DEVICE_WIDE_SIGNALS, observe_sharing, with_notes
from gpu_rightsizer.model import metric_names as mn
from gpu_rightsizer.model.codes import DiagnosisCode
from gpu_rightsizer.model.observation import Signal, WorkloadRef, WorkloadWindow


def _copied_no_tensor_window(shared_by: int) -> WorkloadWindow:
    gpu = busy_gpu(
        gr_engine_active=stat(0.95), sm_active=stat(0.8), tensor_active=stat(0.01), fp32_active=stat(0.6),
        dram_active=stat(0.35),
    ).model_copy(update={"shared_by_pods": shared_by})  # fmt: skip
    return window([pod(gpus=[gpu])])


def test_device_copies_do_not_make_compute_diagnoses() -> None:
    copied = _copied_no_tensor_window(shared_by=3)
    assert analyze_window(copied).primary is DiagnosisCode.NO_TENSOR_CORES  # made from another pod's copy
    seen, notes = observe_sharing(copied)
    assert not set(seen.pods[0].gpus[0].stats) & DEVICE_WIDE_SIGNALS
    assert Signal.GR_ENGINE_ACTIVE in seen.pods[0].gpus[0].stats
    analysis = with_notes(analyze_window(seen), notes)
    assert analysis.primary is not DiagnosisCode.NO_TENSOR_CORES
    assert "3 pods see the same device" in analysis.summary and "#307" in analysis.summary


def test_an_exclusive_gpu_is_left_alone() -> None:
    exclusive = no_tensor_cores()
    assert observe_sharing(exclusive) == (exclusive, ())


def test_the_node_pool_says_a_gpu_is_time_sliced_when_the_series_cannot() -> None:
    """Without KUBERNETES_VIRTUAL_GPUS one sharer gets the whole device's series (#307): shared_by 1."""
    single = _copied_no_tensor_window(shared_by=1)
    on_node = single.model_copy(update={"pods": [single.pods[0].model_copy(update={"node": "ts-1"})]})
    seen, notes = observe_sharing(on_node, capacity_from_nodes([WHOLE, TIME_SLICED]))
    assert seen.allocation.sharing == "time-slicing"
    assert notes and not set(seen.pods[0].gpus[0].stats) & DEVICE_WIDE_SIGNALS
    elsewhere = single.model_copy(update={"pods": [single.pods[0].model_copy(update={"node": "whole-1"})]})
    assert observe_sharing(elsewhere, capacity_from_nodes([WHOLE, TIME_SLICED]))[1] == ()


def test_hami_pods_are_recognised_and_said() -> None:
    inventory = Inventory()
    for resource, value in (
        ("nvidia_com_gpu", 1.0),
        ("nvidia_com_gpumem", 3000.0),
        ("nvidia_com_gpucores", 30.0),
    ):
        inventory.add(
            mn.KSM_POD_LIMITS,
            {"namespace": "ml", "pod": "p", "container": "main", "resource": resource},
            value,
        )
    info = inventory.pods[("ml", "p")]
    assert info.hami == {"nvidia.com/gpumem": 3000.0, "nvidia.com/gpucores": 30.0}
    ref = WorkloadRef(namespace="ml", kind="Pod", name="p", api_version="v1")
    alloc = allocation_for(ref, [info], [], inventory)
    assert alloc.sharing == "hami"
    hami = window([pod()], alloc=allocation(sharing="hami"))
    _, notes = observe_sharing(hami)
    assert notes and "HAMi" in notes[0]
