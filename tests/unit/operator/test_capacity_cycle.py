"""The operator cycle plans with the cluster's sharing strategy and keeps advice to what nodes offer."""

from __future__ import annotations

from tests.unit.logic.logic_builders import window
from tests.unit.logic.test_capacity import MIG_MIXED, TIME_SLICED, WHOLE
from tests.unit.logic.test_diagnose import oversized as narrow_oversized
from tests.unit.logic.test_recommend import rare_job

from gpu_rightsizer.logic.capacity import capacity_from_nodes
from gpu_rightsizer.logic.policy import settings_for_workload
from gpu_rightsizer.model.codes import ActionType
from gpu_rightsizer.model.observation import WorkloadWindow
from gpu_rightsizer.recommender import cycle


def oversized() -> WorkloadWindow:
    """The narrow oversized Deployment watched for a day: what a shrink needs under the default policy."""
    return window(narrow_oversized().pods, hours=25.0, step=1500.0)


def rare_day_job() -> WorkloadWindow:
    """A 1 %-duty training Job watched for a day: a time-sliced share is within its slowdown bound."""
    job = rare_job()
    return window(job.pods, alloc=job.allocation, hours=25.0, step=1500.0, kind="Job")


NOW = oversized().end


def test_no_mig_on_the_nodes_means_no_automatic_mig_advice_and_no_savings() -> None:
    settings = settings_for_workload([], {}, {}, {})
    window = oversized()
    before = cycle.analyse(window, settings, NOW)  # no node facts, no policy: mig-mixed, as advice
    assert any(a.type is ActionType.MIG_PROFILE and not a.automatic for a in before.actions)
    assert before.savings.gpu_hours_per_day == 0 < before.savings.if_offered_gpu_hours_per_day
    after = cycle.analyse(window, settings, NOW, None, capacity_from_nodes([WHOLE]))
    assert not any(
        a.automatic and a.type in (ActionType.MIG_PROFILE, ActionType.GPU_SHARING) for a in after.actions
    )
    assert after.savings.gpu_hours_per_day == 0


def test_a_time_slicing_pool_without_renaming_gets_its_shared_product_and_nvidia_com_gpu() -> None:
    settings = settings_for_workload([], {}, {}, {})
    analysis = cycle.analyse(rare_day_job(), settings, NOW, None, capacity_from_nodes([WHOLE, TIME_SLICED]))
    sharing = next(a for a in analysis.actions if a.type is ActionType.GPU_SHARING)
    assert not sharing.automatic and sharing.resource == "nvidia.com/gpu"
    assert (
        "gpu.product=NVIDIA-H100-80GB-HBM3-SHARED" in sharing.to_value
        and "gpu.shared" not in sharing.to_value
    )


def test_a_mig_mixed_pool_keeps_the_automatic_slice() -> None:
    settings = settings_for_workload([], {}, {}, {})
    analysis = cycle.analyse(oversized(), settings, NOW, None, capacity_from_nodes([WHOLE, MIG_MIXED]))
    mig = next(a for a in analysis.actions if a.type is ActionType.MIG_PROFILE)
    assert mig.automatic and mig.resource == "nvidia.com/mig-2g.20gb"
    assert analysis.savings.gpu_hours_per_day > 0
