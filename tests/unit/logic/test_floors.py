"""Idle floors per node and model, learned from unheld GPUs, as the idle rule's input."""

from __future__ import annotations

from tests.unit.logic.logic_builders import allocation, gpu, pod, stat, window

from gpu_rightsizer.logic.capacity import ClusterCapacity
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.floors import UnheldGPU, floor_for, learn_idle_floors, with_idle_floor
from gpu_rightsizer.logic.policy import settings_for_workload
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import DiagnosisCode
from gpu_rightsizer.model.observation import Signal, WorkloadWindow
from gpu_rightsizer.recommender import cycle

MODEL = "NVIDIA RTX 4000 Ada Generation"


def held_at_the_floor(fb_mib: float = 900.0) -> WorkloadWindow:
    """A pod with a CUDA context that runs nothing, on a platform whose idle floor is GR 0.5 %, 78 MB/s."""
    device = gpu(gr_engine_active=stat(0.0047), fb_used_mib=stat(fb_mib), memory_mib=20475)
    device = device.model_copy(
        update={
            "node": "lke-0",
            "model_name": MODEL,
            "stats": {
                **{s: v for s, v in device.stats.items() if s is not Signal.SM_ACTIVE},
                Signal.PCIE_TX_BYTES_PER_S: stat(78e6),
                Signal.PCIE_RX_BYTES_PER_S: stat(46e6),
                Signal.GPU_UTIL: stat(0.0),
            },
        }
    )
    held = pod(gpus=[device]).model_copy(update={"node": "lke-0"})
    return window([held], alloc=allocation(gpu_model="NVIDIA-RTX-4000-Ada-Generation"), hours=1.0, step=60.0)


FLOORS = learn_idle_floors(
    [
        UnheldGPU("lke-0", MODEL, 0.0046, 78.4e6),
        UnheldGPU("lke-0", MODEL, 0.0044, 70e6),
        UnheldGPU("other", MODEL, 0.5, 9e9),
    ]
)


def test_floors_are_the_highest_reading_per_node_and_model() -> None:
    floor = FLOORS[("lke-0", "NVIDIA-RTX-4000-ADA-GENERATION")]
    assert (floor.gr, floor.transfer_bytes_per_s, floor.gpus) == (0.0046, 78.4e6, 2)


def test_a_floor_applies_only_where_it_was_learned() -> None:
    assert floor_for(FLOORS, held_at_the_floor()) == FLOORS[("lke-0", "NVIDIA-RTX-4000-ADA-GENERATION")]
    elsewhere = learn_idle_floors([UnheldGPU("lke-1", MODEL, 0.0046, 78.4e6)])
    assert floor_for(elsewhere, held_at_the_floor()) is None
    assert with_idle_floor(EngineSettings(), None) == EngineSettings()


def test_the_platform_floor_makes_a_held_gpu_at_that_floor_idle() -> None:
    held = held_at_the_floor()
    assert analyze_window(held).primary is not DiagnosisCode.IDLE_ALLOCATION  # H200 thresholds: busy
    floored = with_idle_floor(EngineSettings(), floor_for(FLOORS, held))
    assert floored.idle.idle_gr_floor is not None and floored.idle.idle_transfer_bytes_per_s > 78e6
    assert analyze_window(held, floored).primary is DiagnosisCode.IDLE_ALLOCATION


def test_the_cycle_gives_the_floors_of_the_capacity_to_the_idle_rule() -> None:
    held = held_at_the_floor()
    settings = settings_for_workload([], {}, {}, {})
    without = cycle.analyse(held, settings, held.end)
    with_floors = cycle.analyse(held, settings, held.end, None, ClusterCapacity(idle_floors=FLOORS))
    assert without.primary is not DiagnosisCode.IDLE_ALLOCATION
    assert with_floors.primary is DiagnosisCode.IDLE_ALLOCATION
