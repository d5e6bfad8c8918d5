"""Advice the cluster can schedule: node pools from GFD labels and allocatable, actions reduced to them."""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.logic.logic_builders import PROVEN, allocation
from tests.unit.logic.test_diagnose import cpu_bound, oversized
from tests.unit.logic.test_recommend import rare_job

from gpu_rightsizer.logic.capacity import ClusterCapacity, capacity_from_nodes, constrain_to_capacity
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.model.codes import ActionType, SharingStrategy
from gpu_rightsizer.model.result import Action, ActionTarget, Analysis

H100 = "NVIDIA-H100-80GB-HBM3"


def node(name: str, labels: dict[str, str], allocatable: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": H100, **labels}},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", **allocatable}},
    }


WHOLE = node("whole-1", {"nvidia.com/mig.strategy": "none"}, {"nvidia.com/gpu": "8"})
MIG_MIXED = node(
    "mig-1",
    {"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.config": "all-balanced"},
    {"nvidia.com/mig-1g.10gb": "16", "nvidia.com/mig-2g.20gb": "8", "nvidia.com/mig-3g.40gb": "8"},
)
MIG_SINGLE = node(
    "single-1",
    {
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/mig.config": "all-2g.20gb",
        "nvidia.com/gpu.product": f"{H100}-MIG-2g.20gb",
    },
    {"nvidia.com/gpu": "24"},
)
TIME_SLICED = node(
    "ts-1",
    {
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.product": f"{H100}-SHARED",
    },
    {"nvidia.com/gpu": "32"},
)
RENAMED = node(
    "tsr-1",
    {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"},
    {"nvidia.com/gpu.shared": "32"},
)
#: A default GPU Operator install: GFD writes mig.strategy=single on every GPU node, MIG or not.
OPERATOR_WHOLE = node(
    "op-1", {"nvidia.com/mig.strategy": "single", "nvidia.com/mig.capable": "false"}, {"nvidia.com/gpu": "8"}
)
OPERATOR_TIME_SLICED = node(
    "op-ts-1",
    {
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.config": "all-disabled",
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.product": f"{H100}-SHARED",
    },
    {"nvidia.com/gpu": "32"},
)


def test_pools_read_the_gfd_labels_and_allocatable() -> None:
    capacity = capacity_from_nodes(
        [WHOLE, MIG_MIXED, TIME_SLICED, {**WHOLE, "metadata": {**WHOLE["metadata"], "name": "whole-2"}}]
    )
    by_strategy = {(p.mig_strategy, p.sharing_strategy): p for p in capacity.pools}
    assert by_strategy[("none", "none")].nodes == ("whole-1", "whole-2")
    assert by_strategy[("mixed", "none")].gpu_resources["nvidia.com/mig-1g.10gb"] == 16
    assert by_strategy[("mixed", "none")].mig_config == "all-balanced"
    assert by_strategy[("none", "time-slicing")].replicas == 4
    assert capacity.max_cpu_cores == 64
    assert capacity.sharing_strategy(H100) is SharingStrategy.MIG_MIXED


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        ([WHOLE], SharingStrategy.NONE),
        ([WHOLE, MIG_SINGLE], SharingStrategy.MIG_SINGLE),
        ([WHOLE, TIME_SLICED], SharingStrategy.TIME_SLICING_NO_RENAME),
        ([WHOLE, RENAMED], SharingStrategy.TIME_SLICING),
        ([WHOLE, MIG_MIXED, TIME_SLICED], SharingStrategy.MIG_MIXED),
        ([OPERATOR_WHOLE], SharingStrategy.NONE),
        ([OPERATOR_WHOLE, OPERATOR_TIME_SLICED], SharingStrategy.TIME_SLICING_NO_RENAME),
        ([], SharingStrategy.NONE),
    ],
)
def test_the_sharing_strategy_comes_from_the_nodes(
    nodes: list[dict[str, Any]], expected: SharingStrategy
) -> None:
    assert capacity_from_nodes(nodes).sharing_strategy(H100) is expected


def test_mig_advice_on_a_cluster_without_mig_becomes_advice_that_says_what_a_pool_needs() -> None:
    analysis = analyze_window(oversized(), sharing=SharingStrategy.MIG_MIXED)
    assert analysis.savings.gpu_hours_per_day > 0
    constrained = constrain_to_capacity(analysis, capacity_from_nodes([WHOLE, TIME_SLICED]))
    mig = next(a for a in constrained.actions if a.type is ActionType.MIG_PROFILE)
    assert not mig.automatic and mig.target is None
    assert "MIG strategy mixed" in mig.reason and "nvidia.com/mig-2g.20gb" in mig.reason
    assert constrained.savings.gpu_hours_per_day == 0  # nothing that can land frees GPU time
    assert "advice only" in constrained.summary


def test_mig_advice_the_cluster_offers_is_left_alone() -> None:
    analysis = analyze_window(oversized(), sharing=SharingStrategy.MIG_MIXED)
    assert constrain_to_capacity(analysis, capacity_from_nodes([WHOLE, MIG_MIXED])) == analysis


def test_mig_single_advice_needs_a_pool_with_that_product_label() -> None:
    analysis = analyze_window(oversized(), sharing=SharingStrategy.MIG_SINGLE)
    offered = constrain_to_capacity(analysis, capacity_from_nodes([WHOLE, MIG_SINGLE]))
    assert offered == analysis
    missing = constrain_to_capacity(analysis, capacity_from_nodes([WHOLE]))
    mig = next(a for a in missing.actions if a.type is ActionType.MIG_PROFILE)
    assert not mig.automatic and f"{H100}-MIG-2g.20gb" in mig.reason


def test_gpu_shared_is_advice_unless_a_pool_renames_shared_gpus() -> None:
    analysis = analyze_window(rare_job(), PROVEN, sharing=SharingStrategy.TIME_SLICING)
    sharing = next(a for a in analysis.actions if a.type is ActionType.GPU_SHARING)
    assert sharing.automatic and sharing.resource == "nvidia.com/gpu.shared"
    not_renamed = constrain_to_capacity(analysis, capacity_from_nodes([WHOLE, TIME_SLICED]))
    advice = next(a for a in not_renamed.actions if a.type is ActionType.GPU_SHARING)
    assert not advice.automatic and "renameByDefault" in advice.reason
    renamed = constrain_to_capacity(analysis, capacity_from_nodes([WHOLE, RENAMED]))
    assert renamed == analysis


def _cpu_analysis(to_cores: float, current: float = 4.0) -> Analysis:
    base = analyze_window(oversized())
    action = Action(
        type=ActionType.CPU,
        from_value=f"{current:g} cores (limit)",
        to_value=f"{to_cores:g} cores (request and limit)",
        reason="Input pipeline is CPU-bound.",
        resource="cpu",
        automatic=True,
        target=ActionTarget(
            container="main", requests={"cpu": f"{to_cores:g}"}, limits={"cpu": f"{to_cores:g}"}
        ),
    )
    return base.model_copy(update={"actions": [action]})


def test_cpu_raises_are_capped_at_the_largest_allocatable() -> None:
    small = node("small", {}, {"nvidia.com/gpu": "8"})
    small["status"]["allocatable"]["cpu"] = "15500m"
    capped = constrain_to_capacity(_cpu_analysis(24), capacity_from_nodes([small]))
    cpu = capped.actions[0]
    assert cpu.automatic
    assert cpu.target is not None and cpu.target.requests == {"cpu": "15500m"} == cpu.target.limits
    assert cpu.to_value.startswith("15.5 cores") and "largest node" in cpu.reason
    assert constrain_to_capacity(_cpu_analysis(12), capacity_from_nodes([small])) == _cpu_analysis(12)


def test_a_cpu_raise_no_node_can_hold_is_advice() -> None:
    small = node("small", {}, {"nvidia.com/gpu": "8"})
    small["status"]["allocatable"]["cpu"] = "4"
    cpu = constrain_to_capacity(_cpu_analysis(12, current=4), capacity_from_nodes([small])).actions[0]
    assert not cpu.automatic and cpu.target is None and "largest node" in cpu.reason


def test_engine_cpu_action_is_capped_too() -> None:
    analysis = analyze_window(cpu_bound())
    cpu = next(a for a in analysis.actions if a.type is ActionType.CPU)
    small = node("small", {}, {"nvidia.com/gpu": "8"})
    small["status"]["allocatable"]["cpu"] = "2"
    capped = next(
        a
        for a in constrain_to_capacity(analysis, capacity_from_nodes([small])).actions
        if a.type is ActionType.CPU
    )
    assert capped != cpu and ("2 cores" in capped.to_value or not capped.automatic)


def test_more_gpus_than_one_node_holds_is_advice() -> None:
    base = analyze_window(oversized())
    action = Action(
        type=ActionType.GPU_COUNT,
        from_value="8",
        to_value="16",
        reason="split the model",
        resource="nvidia.com/gpu",
        automatic=False,
    )
    result = constrain_to_capacity(
        base.model_copy(update={"actions": [action]}), capacity_from_nodes([WHOLE])
    )
    assert (
        "16 × nvidia.com/gpu" in result.actions[0].reason
        and "largest node offers 8" in result.actions[0].reason
    )


def test_without_node_facts_a_slice_is_advice_counted_apart_unless_the_sharing_was_stated() -> None:
    analysis = analyze_window(oversized(), sharing=SharingStrategy.MIG_MIXED)
    assert analysis.savings.gpu_hours_per_day > 0
    stated = constrain_to_capacity(analysis, ClusterCapacity(), stated=True)
    assert stated.actions == analysis.actions and stated.savings.gpu_hours_per_day == 0
    unknown = constrain_to_capacity(analysis, ClusterCapacity())
    mig = next(a for a in unknown.actions if a.type is ActionType.MIG_PROFILE)
    assert not mig.automatic and mig.target is None and "unknown (no node data)" in mig.reason
    assert unknown.savings.gpu_hours_per_day == 0
    assert unknown.savings.if_offered_gpu_hours_per_day == analysis.savings.gpu_hours_per_day
    assert "If the cluster offered nvidia.com/mig-2g.20gb" in mig.reason
    assert allocation().gpu_resource == "nvidia.com/gpu"


def test_unlandable_savings_are_counted_apart() -> None:
    analysis = analyze_window(oversized(), sharing=SharingStrategy.MIG_MIXED)
    constrained = constrain_to_capacity(analysis, capacity_from_nodes([WHOLE]))
    assert constrained.savings.gpu_hours_per_day == 0
    assert constrained.savings.if_offered_gpu_hours_per_day == analysis.savings.gpu_hours_per_day


def test_a_default_gpu_operator_pool_is_not_mig_single() -> None:
    capacity = capacity_from_nodes([OPERATOR_WHOLE, OPERATOR_TIME_SLICED])
    assert capacity.mig_profiles(H100) == []
    described = " ".join(p.describe() for p in capacity.pools)
    assert "MIG single" not in described and "time-slicing ×4 without rename" in described
    enabled = node(
        "cap-1",
        {
            "nvidia.com/mig.strategy": "single",
            "nvidia.com/mig.capable": "true",
            "nvidia.com/mig.config": "all-1g.10gb",
        },
        {"nvidia.com/gpu": "56"},
    )
    assert capacity_from_nodes([enabled]).sharing_strategy(H100) is SharingStrategy.MIG_SINGLE


def test_a_share_on_a_non_renamed_pool_is_schedulable_advice() -> None:
    analysis = analyze_window(rare_job(), PROVEN, sharing=SharingStrategy.TIME_SLICING_NO_RENAME)
    constrained = constrain_to_capacity(analysis, capacity_from_nodes([WHOLE, TIME_SLICED]), H100)
    assert constrained == analysis  # the -SHARED product exists: nothing to demote
    elsewhere = constrain_to_capacity(analysis, capacity_from_nodes([WHOLE]), H100)
    advice = next(a for a in elsewhere.actions if a.type is ActionType.GPU_SHARING)
    assert f"{H100}-SHARED" in advice.reason and "time-slicing without rename" in advice.reason


def test_a_share_of_another_gpu_model_does_not_count() -> None:
    l4_shared = {
        "metadata": {
            "name": "l4",
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-L4-SHARED",
                "nvidia.com/gpu.sharing-strategy": "time-slicing",
            },
        },
        "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "16"}},
    }
    analysis = analyze_window(rare_job(), PROVEN, sharing=SharingStrategy.TIME_SLICING)  # an H100 workload
    # RENAMED is an H100 pool publishing nvidia.com/gpu.shared: the H100 workload can move there
    assert constrain_to_capacity(analysis, capacity_from_nodes([RENAMED, l4_shared]), H100) == analysis
    renamed_a100 = {
        **RENAMED,
        "metadata": {
            **RENAMED["metadata"],
            "labels": {**RENAMED["metadata"]["labels"], "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"},
        },
    }
    other_model = constrain_to_capacity(analysis, capacity_from_nodes([WHOLE, renamed_a100]), H100)
    advice = next(a for a in other_model.actions if a.type is ActionType.GPU_SHARING)
    assert not advice.automatic and f"no pool with {H100}" in advice.reason


def test_the_slice_is_chosen_among_the_profiles_the_pool_offers() -> None:
    from gpu_rightsizer.logic.capacity import analyze_within

    window = oversized()
    only_3g = node("mig-3g", {"nvidia.com/mig.strategy": "mixed"}, {"nvidia.com/mig-3g.40gb": "16"})
    capacity = capacity_from_nodes([WHOLE, only_3g])
    assert capacity.mig_profiles(H100) == ["3g.40gb"]

    def run(profiles: list[str] | None) -> Analysis:
        return analyze_window(
            window, PROVEN, sharing=SharingStrategy.MIG_MIXED, allowed_mig_profiles=profiles
        )

    unrestricted = constrain_to_capacity(run(None), capacity, H100)
    assert not next(a for a in unrestricted.actions if a.type is ActionType.MIG_PROFILE).automatic  # 2g.20gb
    chosen = analyze_within(capacity, H100, run)
    mig = next(a for a in chosen.actions if a.type is ActionType.MIG_PROFILE)
    assert mig.automatic and mig.resource == "nvidia.com/mig-3g.40gb"
    assert chosen.savings.gpu_hours_per_day > 0
    single = capacity_from_nodes([MIG_SINGLE])
    assert single.mig_profiles(H100) == ["2g.20gb"]


def test_the_sizing_finding_names_the_slice_the_final_action_proposes() -> None:
    from gpu_rightsizer.logic.capacity import analyze_within
    from gpu_rightsizer.model.codes import DiagnosisCode

    only_3g = node("mig-3g", {"nvidia.com/mig.strategy": "mixed"}, {"nvidia.com/mig-3g.40gb": "16"})
    window = oversized()

    def run(profiles: list[str] | None) -> Analysis:
        return analyze_window(
            window, PROVEN, sharing=SharingStrategy.MIG_MIXED, allowed_mig_profiles=profiles
        )

    # the sizing rule names the smallest slice that fits; the action, bound by slowdown and pools, another
    assert (
        "slice 1g.20gb"
        in next(f for f in run(None).findings if f.code is DiagnosisCode.OVERSIZED_GPU).message
    )
    chosen = analyze_within(capacity_from_nodes([WHOLE, only_3g]), H100, run)
    finding = next(f for f in chosen.findings if f.code is DiagnosisCode.OVERSIZED_GPU)
    assert "Change: migProfile → nvidia.com/mig-3g.40gb: 1." in finding.message
    assert "1g.20gb" not in finding.message
