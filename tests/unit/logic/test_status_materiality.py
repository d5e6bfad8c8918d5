"""What makes a new analysis worth a status write: codes, actions and their targets, allocation and
generations exactly; figures within a relative tolerance and an absolute floor; texts by their words
and shown numbers; figures computed from compared ones and the window's times not at all."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpu_rightsizer.logic.status import (
    FIGURE_FLOOR,
    FIGURE_TOLERANCE,
    PEAK_TOLERANCE,
    SAMPLES_TOLERANCE,
    material_difference,
    materially_same,
    same_figure,
    same_text,
    sample_weight,
)


def status() -> dict[str, Any]:
    return {
        "observedGeneration": 3,
        "workloadGeneration": 7,
        "window": {"start": "2026-03-04T11:00:00Z", "end": "2026-03-04T12:00:00Z", "samples": 60},
        "allocation": {"gpuResource": "nvidia.com/gpu", "gpuCount": 1, "cpuRequest": "4", "replicas": 20},
        "diagnosis": {
            "primary": "OversizedGPU",
            "confidence": 0.8,
            "summary": "The GPU is 21% busy at p95.",
            "findings": [
                {
                    "code": "OversizedGPU", "severity": "Warning", "confidence": 0.8,
                    "message": "GPU busy p95 is 21%, memory 12.4 GiB.",
                    "evidence": {"gpuBusyP95": 0.21, "throttled": 0.0},
                }
            ],
        },
        "actions": [
            {
                "type": "migProfile", "from": "nvidia.com/gpu: 1", "to": "nvidia.com/mig-1g.18gb: 1",
                "reason": "needs about 21% of a GPU", "automatic": True,
                "target": {"requests": {"nvidia.com/mig-1g.18gb": "1"}, "gpuCapacityChange": True},
            }
        ],
        "savings": {"gpuHoursPerDay": 15.2, "shareOfAllocation": 0.63},
        "summary": {"action": "migProfile nvidia.com/gpu: 1->…", "gpuBusyP95": "21%", "savings": "15.2 GPUh/d",
                    "confidence": "0.80", "window": "1h"},
        "conditions": [
            {"type": "Analyzed", "status": "True", "reason": "Analyzed", "message": "The GPU is 21% busy at p95.",
             "lastTransitionTime": "2026-03-04T10:00:00Z", "observedGeneration": 3},
        ],
        "apply": {"state": "Skipped", "reason": "no Apply policy selects this workload"},
    }  # fmt: skip


def moved(**paths: Any) -> dict[str, Any]:
    """The status with values set at dotted paths (list indices as numbers)."""
    result = status()
    for dotted, value in paths.items():
        *parents, last = dotted.split("__")
        node: Any = result
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        node[int(last) if last.isdigit() else last] = value
    return result


def test_a_sliding_window_with_figures_within_the_tolerance_says_nothing_new() -> None:
    new = moved(
        window__start="2026-03-04T11:00:15Z", window__end="2026-03-04T12:00:15Z", window__samples=61,
        diagnosis__confidence=0.78, diagnosis__summary="The GPU is 22% busy at p95.",
        diagnosis__findings__0__confidence=0.78, diagnosis__findings__0__message="GPU busy p95 is 22%, memory 12.6 GiB.",
        diagnosis__findings__0__evidence={"gpuBusyP95": 0.216, "throttled": 0.003},
        actions__0__reason="needs about 22% of a GPU", savings__gpuHoursPerDay=14.9,
        summary__gpuBusyP95="22%", summary__savings="14.9 GPUh/d", summary__confidence="0.78",
    )  # fmt: skip
    assert materially_same(status(), new)


@pytest.mark.parametrize(
    "change",
    [
        {"diagnosis__primary": "LowOccupancy"},
        {"diagnosis__findings__0__code": "LowOccupancy"},
        {"diagnosis__findings__0__severity": "Critical"},
        {"actions__0__target": {"requests": {"nvidia.com/mig-2g.35gb": "1"}, "gpuCapacityChange": True}},
        {"actions__0__to": "nvidia.com/mig-2g.35gb: 1"},
        {"actions__0__automatic": False},
        {"actions": []},
        {"allocation__replicas": 21},  # 5 %: within the figures' tolerance, but not a figure
        {"allocation__cpuRequest": "4100m"},
        {"workloadGeneration": 8},
        {"observedGeneration": 4},
        {"conditions__0__status": "False"},
        {"conditions__0__message": "The GPU sat idle."},
        {"diagnosis__confidence": 0.6},
        {"diagnosis__findings__0__evidence": {"gpuBusyP95": 0.21}},  # a figure less
        {"diagnosis__findings__0__evidence": {"gpuBusyP95": 0.3, "throttled": 0.0}},
        {"savings__gpuHoursPerDay": 12.0},
        {"summary__gpuBusyP95": "30%"},
        {"diagnosis__summary": "The GPU is 21% busy at p95 on 2 pods."},
        {"apply": {"state": "Pending"}},
    ],
    ids=lambda change: next(iter(change)),
)
def test_what_makes_a_status_say_something_new(change: dict[str, Any]) -> None:
    assert not materially_same(status(), moved(**change))


def test_a_figure_drifting_by_the_tolerance_is_new_once_it_passes_it() -> None:
    assert same_figure(0.80, 0.80 * (1 - FIGURE_TOLERANCE * 0.99))
    assert not same_figure(0.80, 0.80 * (1 - FIGURE_TOLERANCE * 1.01))
    assert same_figure(0.0, 0.004), "noise around zero"
    assert same_figure(0.01, 0.01 + FIGURE_FLOOR), "two points around a small share are noise"
    assert not same_figure(0.01, 0.01 + FIGURE_FLOOR * 1.5)
    assert same_figure(1, 1.0), "the API server gives whole floats back as integers"


def test_texts_compare_words_exactly_and_shown_numbers_within_one_step() -> None:
    assert same_text("3% busy", "4% busy"), "one step of the digits shown: a rounding apart"
    assert same_text("3% busy", "5% busy"), "percentages within the figures' floor (two points)"
    assert not same_text("3% busy", "6% busy")
    assert not same_text("3 pods", "5 pods"), "the floor is for percentages only"
    assert not same_text("3% busy", "3 busy")
    assert same_text("0.87", "0.88")
    assert not same_text("0.87", "0.80")
    assert same_text("120 GiB", "124 GiB"), "within the relative tolerance"
    assert not same_text("busy", "idle")
    assert not same_text("2 pods", "2 pods on node-1")


def test_whole_floats_stored_as_integers_are_the_same_status() -> None:
    stored = copy.deepcopy(status())
    stored["diagnosis"]["findings"][0]["evidence"]["throttled"] = 0
    stored["savings"]["gpuHoursPerDay"] = 15
    new = moved(savings__gpuHoursPerDay=15.0)
    assert materially_same(stored, new)


def test_the_install_guide_states_the_tolerance_and_refresh_period_the_code_uses() -> None:
    from pathlib import Path

    from gpu_rightsizer.logic.status import FIGURE_FLOOR
    from gpu_rightsizer.recommender import writes

    text = " ".join((Path(__file__).parents[3] / "docs" / "install.md").read_text().split())
    assert f"more than {FIGURE_TOLERANCE * 100:g} % of the larger value" in text
    assert f"absolute differences below {FIGURE_FLOOR:g} do not count" in text
    assert f"`window.samples` by more than {SAMPLES_TOLERANCE * 100:g} %" in text
    assert (
        f"`memoryLookback.maxGib`, which slices are sized on and which the next cycle reads back, by more than {PEAK_TOLERANCE * 100:g} %"
        in text
    )
    assert writes.REFRESH_STALENESS_SHARE == 0.5
    assert (
        "refresh period: under an Apply policy (dry-run included) half of the governing policy's "
        "`spec.safety.maxStaleness`" in text
    )
    assert writes.REFRESH_WINDOW_SHARE == 0.75 and writes.REFRESH_WINDOW_MARGIN_INTERVALS == 3
    assert "at most three quarters of the observation window and three intervals short of it" in text
    assert f"at most {writes.REFRESH_AT_MOST.total_seconds() / 3600:g}h" in text
    assert f"shortened by up to {writes.REFRESH_SPREAD * 100:g} %" in text


def jittered() -> dict[str, Any]:
    """The status one cycle later on a steady workload: every figure moved as a sliding window moves
    them, nothing it says changed."""
    new = moved(
        window__start="2026-03-04T11:00:15Z", window__end="2026-03-04T12:00:15Z",
        window__samples=round(60 * (1 - SAMPLES_TOLERANCE * 0.9)),
        diagnosis__confidence=0.8 - FIGURE_FLOOR * 0.9, diagnosis__summary="The GPU is 23% busy at p95.",
        diagnosis__findings__0__evidence={"gpuBusyP95": 0.213, "throttled": FIGURE_FLOOR * 0.9},
    )  # fmt: skip
    new["waste"] = {"gpuHoursPerDay": 18.0, "allocatedGpus": 1.0, "busyFraction": 0.25}
    new["cost"] = {"pricePerGPUHour": 2.5, "perDay": 60.0, "wastePerDay": 45.0, "savingsPerDay": 38.0}
    new["memoryLookback"] = {"maxGib": 12.4 * (1 + PEAK_TOLERANCE * 0.9), "since": "2026-03-04T09:00:00Z"}
    new["vetoes"] = [{"name": "cpuNearLimit", "cause": "CPUStarved", "reason": "CPU at 91% of its limit",
                      "measureNext": "CPU throttling"}]  # fmt: skip
    new["actions"][0]["predictedSlowdown"] = 1.02
    return new


def stored_steady() -> dict[str, Any]:
    old = status()
    old["waste"] = {"gpuHoursPerDay": 17.0, "allocatedGpus": 1.0, "busyFraction": 0.24}
    old["cost"] = {"pricePerGPUHour": 2.5, "perDay": 60.0, "wastePerDay": 42.5, "savingsPerDay": 37.0}
    old["memoryLookback"] = {"maxGib": 12.4, "since": "2026-03-04T09:00:00Z"}
    old["vetoes"] = [{"name": "cpuNearLimit", "cause": "CPUStarved", "reason": "CPU at 89% of its limit",
                      "measureNext": "CPU throttling"}]  # fmt: skip
    old["actions"][0]["predictedSlowdown"] = 1.0
    return old


def test_figures_that_only_jitter_are_not_material() -> None:
    assert material_difference(stored_steady(), jittered()) is None


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        (("window", "samples"), round(60 * (1 - SAMPLES_TOLERANCE * 1.2)), "window.samples"),
        (("memoryLookback", "maxGib"), 12.4 * (1 + PEAK_TOLERANCE * 1.5), "memoryLookback.maxGib"),
        (("memoryLookback", "since"), "2026-03-04T10:00:00Z", "memoryLookback.since"),
        (("waste", "busyFraction"), 0.25 + FIGURE_FLOOR * 1.5, "waste.busyFraction"),
        (("waste", "allocatedGpus"), 0.5, "waste.allocatedGpus"),
        (("cost", "pricePerGPUHour"), 3.0, "cost.pricePerGPUHour"),
        (("diagnosis", "confidence"), 0.8 - FIGURE_FLOOR * 2, "diagnosis.confidence"),
        (("vetoes", 0, "reason"), "CPU at 99% of its limit", "vetoes.*.reason"),
        (("vetoes", 0, "cause"), "IOBound", "vetoes.*.cause"),
        (("actions", 0, "to"), "nvidia.com/mig-2g.35gb: 1", "actions.*.to"),
        (("actions", 0, "predictedSlowdown"), 1.2, "actions.*.predictedSlowdown"),
        (("conditions", 0, "reason"), "InsufficientData", "conditions.*.reason"),
    ],
    ids=lambda value: value if isinstance(value, str) and "." in value else None,
)
def test_the_first_material_difference_is_named_by_its_path(
    path: tuple[str | int, ...], value: Any, where: str
) -> None:
    new = jittered()
    node: Any = new
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    assert material_difference(stored_steady(), new) == where


def test_a_finding_or_action_more_or_less_is_a_difference_of_the_list() -> None:
    new = jittered()
    new["actions"] = []
    assert material_difference(stored_steady(), new) == "actions"
    new = jittered()
    del new["diagnosis"]["findings"][0]["evidence"]["throttled"]
    assert material_difference(stored_steady(), new) == "diagnosis.findings.*.evidence.throttled"


def throttled(fraction: float, samples: int) -> dict[str, Any]:
    """A throttled workload's status over a window of `samples`, flagged in `fraction` of them."""
    text = f"GPU-1 was clock-throttled for {fraction:.0%} of the window (limit 5%)."
    return moved(
        window__samples=samples,
        diagnosis__summary=text,
        diagnosis__findings__0__message=text,
        diagnosis__findings__0__evidence={"throttleFraction": fraction, "smClockRatio": 0.7},
        conditions__0__message=text,
    )


def test_a_share_of_the_samples_moving_by_one_sample_says_nothing_new() -> None:
    """One sample entering and one leaving a 10-sample window moves the throttle fraction, and the
    percentage its texts print, by 0.1: the same status."""
    assert sample_weight(throttled(0.3, 10), throttled(0.4, 10)) == pytest.approx(0.1)
    assert materially_same(throttled(0.3, 10), throttled(0.4, 10))
    assert materially_same(throttled(0.7, 10), throttled(0.6, 10))


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        (throttled(0.3, 10), throttled(0.5, 10), "conditions.*.message"),  # two samples
        (throttled(0.3, 60), throttled(0.4, 60), "conditions.*.message"),  # 6 samples of 60
        (throttled(0.3, 10), throttled(0.4, 100), "conditions.*.message"),  # the larger count rules
    ],
)
def test_a_share_of_the_samples_moving_by_more_than_one_sample_is_written(
    old: dict[str, Any], new: dict[str, Any], where: str
) -> None:
    assert material_difference(old, new) == where


def test_one_samples_weight_loosens_only_shares_and_percentages() -> None:
    """The evidence that is not a share of the samples keeps FIGURE_FLOOR in a short window."""
    old, new = throttled(0.3, 10), throttled(0.3, 10)
    new["diagnosis"]["findings"][0]["evidence"]["smClockRatio"] = 0.7 + FIGURE_FLOOR * 2
    assert material_difference(old, new) == "diagnosis.findings.*.evidence.smClockRatio"
    old, new = throttled(0.3, 10), throttled(0.3, 10)
    new["diagnosis"]["findings"][0]["evidence"]["throttleFraction"] = 0.3 + 0.1 * 1.5
    assert material_difference(old, new) == "diagnosis.findings.*.evidence.throttleFraction"
    assert not same_text("3 pods", "5 pods", share_floor=0.1), "counts are not shares"
    assert same_text("30% busy", "40% busy", share_floor=0.1)
    assert not same_text("30% busy", "45% busy", share_floor=0.1)


def test_without_a_sample_count_shares_keep_the_floor() -> None:
    old, new = throttled(0.3, 10), throttled(0.4, 10)
    for each in (old, new):
        del each["window"]["samples"]
    assert sample_weight(old, new) == 0.0
    assert material_difference(old, new) == "conditions.*.message"
