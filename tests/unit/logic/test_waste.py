"""Waste (idle GPU time held) apart from savings, and money from a GPU-hour price."""

from __future__ import annotations

import math

import pytest
from tests.unit.logic.logic_builders import allocation, gpu, pod, stat, window

from gpu_rightsizer.logic.diagnose import summarise
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.waste import (
    GPUPrices,
    PriceError,
    cost_of,
    estimate_waste,
    gpu_models,
    model_key,
    totals_by,
    with_cost,
)
from gpu_rightsizer.model.codes import DiagnosisCode


def test_whole_gpu_wastes_its_idle_share_of_the_day() -> None:
    waste = estimate_waste(summarise(window([pod(gpus=[gpu(gr_engine_active=stat(0.25, 0.1))])])))
    assert waste is not None
    assert (waste.gpu_hours_per_day, waste.allocated_gpus, waste.busy_fraction) == (18.0, 1.0, 0.25)


def test_busy_is_the_mean_not_a_percentile() -> None:
    """A GPU busy at 0.2 on average with p95 at 0.9 leaves 80 % of its time idle."""
    waste = estimate_waste(summarise(window([pod(gpus=[gpu(gr_engine_active=stat(0.2, 0.7))])])))
    assert waste is not None and waste.busy_fraction == 0.2 and waste.gpu_hours_per_day == pytest.approx(19.2)


def test_gpu_util_stands_in_without_profiling_fields() -> None:
    waste = estimate_waste(summarise(window([pod(gpus=[gpu(gpu_util=stat(0.5))])])))
    assert waste is not None and waste.busy_fraction == 0.5 and waste.gpu_hours_per_day == 12.0


def test_gr_engine_active_wins_over_gpu_util() -> None:
    waste = estimate_waste(
        summarise(window([pod(gpus=[gpu(gr_engine_active=stat(0.1), gpu_util=stat(0.9))])]))
    )
    assert waste is not None and waste.busy_fraction == 0.1


def test_mig_slice_holds_its_compute_share() -> None:
    """A 3g.40gb slice of an H100 holds 3/7 of its compute; idle, it wastes 3/7 of 24 GPU-hours."""
    slice_ = gpu("MIG-0", mig_profile="3g.40gb", memory_mib=40000, gr_engine_active=stat(0.0))
    waste = estimate_waste(
        summarise(window([pod(gpus=[slice_])], alloc=allocation(gpu_resource="nvidia.com/mig-3g.40gb")))
    )
    assert waste is not None
    assert waste.allocated_gpus == pytest.approx(3 / 7, abs=1e-4)
    assert waste.gpu_hours_per_day == pytest.approx(24 * 3 / 7, abs=1e-3)


def test_time_sliced_share_holds_one_nth_of_its_device() -> None:
    """One pod of four on a time-sliced GPU that is busy 0.2 holds a quarter of its idle time."""
    shared = gpu("GPU-shared", shared_by=4, gr_engine_active=stat(0.2), fb_used_mib=stat(2000))
    waste = estimate_waste(summarise(window([pod(gpus=[shared])], alloc=allocation(sharing="time-slicing"))))
    assert waste is not None
    assert waste.allocated_gpus == 0.25
    assert waste.gpu_hours_per_day == pytest.approx(0.25 * 24 * 0.8)


def test_a_gpu_that_ran_no_kernel_counts_fully_idle() -> None:
    """A two-GPU pod with one busy and one unused GPU leaves half of the pair's time idle and more."""
    pair = [gpu("GPU-0", gr_engine_active=stat(0.9)), gpu("GPU-1", gr_engine_active=stat(0.0))]
    waste = estimate_waste(summarise(window([pod(gpus=pair)], alloc=allocation(gpu_count=2))))
    assert waste is not None
    assert (waste.allocated_gpus, waste.busy_fraction) == (2.0, 0.45)
    assert waste.gpu_hours_per_day == pytest.approx(2 * 24 * 0.55)


def test_no_busy_signal_is_no_waste_figure_and_no_cost() -> None:
    figures = summarise(window([pod(gpus=[gpu(fb_used_mib=stat(2000))])]))
    assert estimate_waste(figures) is None
    analysis = analyze_window(window([pod(gpus=[gpu(fb_used_mib=stat(2000))])]))
    assert analysis.waste is None
    assert with_cost(analysis, GPUPrices(default=2.0), [None]).cost is None


def test_engine_keeps_waste_and_savings_apart() -> None:
    """An idle allocation frees what it wastes; a CPU-starved trainer wastes and frees nothing yet."""
    idle = analyze_window(window([pod(gpus=[gpu(gr_engine_active=stat(0.0), fb_used_mib=stat(10))])]))
    assert idle.primary is DiagnosisCode.IDLE_ALLOCATION
    assert idle.waste is not None and idle.waste.gpu_hours_per_day == 24.0
    starved = analyze_window(
        window(
            [
                pod(
                    gpus=[
                        gpu(gr_engine_active=stat(0.11, 0.05), sm_active=stat(0.1), fb_used_mib=stat(30000))
                    ],
                    cpu_usage_cores=stat(1.0, 0.01),
                )
            ],
            alloc=allocation(cpu_limit_cores=1.0, cpu_request_cores=1.0),
        )
    )
    assert starved.primary is DiagnosisCode.INPUT_PIPELINE_CPU_BOUND, starved.summary
    assert starved.waste is not None and starved.waste.gpu_hours_per_day == pytest.approx(24 * 0.89)
    assert starved.savings.gpu_hours_per_day == 0.0


# --- money ------------------------------------------------------------------------------------------


def test_model_names_read_alike_across_gfd_and_dcgm_spellings() -> None:
    key = model_key("NVIDIA-H100-80GB-HBM3")
    assert model_key("NVIDIA H100 80GB HBM3") == key
    assert model_key(" nvidia_h100_80gb_hbm3 ") == key
    assert model_key("NVIDIA-H100-80GB-HBM3-SHARED") == key
    assert model_key("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb") == key
    assert model_key("NVIDIA-A100-SXM4-80GB") != key


def test_price_map_wins_and_the_default_fills_in() -> None:
    prices = GPUPrices.parse("1.5", {"NVIDIA H100 80GB HBM3": 4.5, "NVIDIA-A100-SXM4-80GB": "3"})
    assert prices.price_for(["NVIDIA-H100-80GB-HBM3"]) == 4.5
    assert prices.price_for([None, "NVIDIA A100-SXM4-80GB"]) == 3.0
    assert prices.price_for(["Tesla-T4"]) == 1.5
    assert GPUPrices.parse(None, {"Tesla-T4": 0.5}).price_for(["NVIDIA-H200"]) is None
    assert not GPUPrices().known and GPUPrices.parse("", None) == GPUPrices()


@pytest.mark.parametrize(
    ("default", "by_model", "message"),
    [
        ("cheap", None, "GPU-hour price: a price per GPU-hour must be a number, got 'cheap'"),
        (-1, None, "finite number ≥ 0"),
        (math.nan, None, "finite number ≥ 0"),
        (None, ["NVIDIA-H200"], "must map GPU models to prices"),
        (None, {"NVIDIA-H200": True}, "entry 'NVIDIA-H200': a price per GPU-hour must be a number"),
        (None, {"NVIDIA-H200": {"on-demand": 3}}, "entry 'NVIDIA-H200'"),
        (None, {"": 3}, "no GPU model name"),
    ],
)
def test_bad_prices_are_refused_with_the_entry_at_fault(
    default: object, by_model: object, message: str
) -> None:
    with pytest.raises(PriceError, match=message.replace("(", r"\(")):
        GPUPrices.parse(default, by_model)


def test_cost_prices_the_allocation_its_waste_and_its_savings() -> None:
    analysis = analyze_window(window([pod(gpus=[gpu(gr_engine_active=stat(0.0), fb_used_mib=stat(10))])]))
    assert analysis.cost is None  # the engine knows no price
    assert cost_of(analysis, None) is None
    priced = with_cost(analysis, GPUPrices.parse(2.0, None), gpu_models(window()))
    assert priced.cost is not None
    assert priced.cost.model_dump(by_alias=True) == {
        "pricePerGPUHour": 2.0,
        "perDay": 48.0,
        "wastePerDay": 48.0,
        "savingsPerDay": 48.0,
    }
    assert with_cost(priced, GPUPrices(), [None]).cost is None


def test_totals_add_money_only_where_a_price_was_known() -> None:
    idle = analyze_window(window([pod(gpus=[gpu(gr_engine_active=stat(0.0), fb_used_mib=stat(10))])]))
    priced = with_cost(idle, GPUPrices(default=1.0), [None])
    totals = totals_by([("a", idle), ("a", priced), ("b", idle)])
    assert totals["a"].waste_gpu_hours_per_day == 48.0 and totals["a"].savings_gpu_hours_per_day == 48.0
    assert totals["a"].waste_cost_per_day == 24.0
    assert totals["b"].cost_per_day is None
