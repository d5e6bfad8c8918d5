"""Pod-manifest helpers and the status builder: what users read in `kubectl get gpurec`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpu_rightsizer.logic.status import (
    action_column,
    analysed_status,
    describe_action,
    format_duration,
    merge_conditions,
    waiting_status,
)
from gpu_rightsizer.logic.workloads import (
    QuantityError,
    allocation_from_pod_spec,
    format_cpu,
    format_memory,
    gpu_resources,
    is_ignored,
    parse_quantity,
    recommendation_name,
    requests_gpu,
    resources_of,
)
from gpu_rightsizer.model.codes import ActionType, ApplyState, DiagnosisCode
from gpu_rightsizer.model.observation import Allocation, WorkloadRef
from gpu_rightsizer.model.result import Action, ActionTarget, Analysis, Savings

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
REF = WorkloadRef(namespace="ml", kind="Deployment", name="trainer")


def container(limits: dict[str, str], requests: dict[str, str] | None = None) -> dict[str, object]:
    return {"name": "main", "resources": {"limits": limits, "requests": requests or {}}}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", 0.5),
        ("2", 2.0),
        ("16Gi", 16 * 2**30),
        ("1e3", 1000.0),
        ("1.5", 1.5),
        ("128974848", 128974848.0),
    ],
)
def test_quantities_parse(text: str, value: float) -> None:
    assert parse_quantity(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "abc", "1Qi", "--1", "1 Gi"])
def test_bad_quantities_are_rejected_by_name(text: str) -> None:
    with pytest.raises(QuantityError, match="not a Kubernetes quantity"):
        parse_quantity(text)


def test_quantities_format_as_kubernetes_writes_them() -> None:
    assert (format_cpu(4), format_cpu(1.5), format_cpu(0.25)) == ("4", "1500m", "250m")
    assert (format_memory(16 * 2**30), format_memory(1536 * 2**20)) == ("16Gi", "1536Mi")


def test_gpu_resources_sum_over_containers_and_ignore_other_resources() -> None:
    spec = {
        "containers": [
            container({"nvidia.com/gpu": "2", "cpu": "4"}),
            container({"nvidia.com/gpu": "1"}),
            container({"example.com/fpga": "1"}),
        ]
    }
    assert gpu_resources(spec) == {"nvidia.com/gpu": 3}
    assert gpu_resources({"containers": [container({"nvidia.com/mig-1g.18gb": "1"})]}) == {
        "nvidia.com/mig-1g.18gb": 1
    }
    assert not requests_gpu({"spec": {"containers": [container({"cpu": "1"})]}})
    assert requests_gpu({"spec": {"containers": [container({}, {"nvidia.com/gpu.shared": "1"})]}})


def test_opt_out_annotation_and_names() -> None:
    assert is_ignored({"metadata": {"annotations": {"gpurightsizer.io/ignore": "True"}}})
    assert not is_ignored({"metadata": {"annotations": {"gpurightsizer.io/ignore": "no"}}})
    assert recommendation_name(REF) == "deployment-trainer"


def test_allocation_of_a_mig_pod_knows_its_profile_and_not_the_whole_gpu_memory() -> None:
    spec = {"containers": [container({"nvidia.com/mig-1g.18gb": "1", "cpu": "2", "memory": "8Gi"})]}
    labels = {"nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/gpu.memory": "143771"}
    allocation = allocation_from_pod_spec(spec, replicas=3, node_labels=labels)
    assert (allocation.mig_profile, allocation.sharing, allocation.gpu_count) == ("1g.18gb", "mig", 1)
    assert allocation.gpu_memory_mib is None  # the slice is not the whole GPU
    assert (allocation.cpu_limit_cores, allocation.replicas, allocation.gpu_model) == (2.0, 3, "NVIDIA-H200")


def test_the_kept_part_of_a_pod_spec_gives_the_same_allocation() -> None:
    spec = {
        "containers": [
            {**container({"nvidia.com/gpu": "2", "cpu": "4", "memory": "16Gi"}), "env": [{"name": "A"}]},
            {**container({"cpu": "500m", "memory": "1Gi"}), "image": "sidecar:1"},
        ],
        "volumes": [{"name": "token", "projected": {"sources": [{"serviceAccountToken": {}}]}}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
    }
    kept = resources_of(spec)
    assert set(kept) == {"containers"}
    assert all(set(kept_container) == {"name", "resources"} for kept_container in kept["containers"])
    assert allocation_from_pod_spec(kept, replicas=2) == allocation_from_pod_spec(spec, replicas=2)
    assert resources_of({}) == {"containers": []}


def test_waiting_status_is_honest_insufficient_data_with_no_action() -> None:
    status = waiting_status(
        Allocation(cpu_limit_cores=1.0), "no metrics yet", workload=REF, now=NOW, generation=1
    )
    assert status.diagnosis is not None and status.diagnosis.primary == DiagnosisCode.INSUFFICIENT_DATA
    assert status.actions == [] and status.apply is not None and status.apply.state == ApplyState.SKIPPED
    assert status.allocation is not None and status.allocation.cpu_limit == "1"
    assert status.conditions[0].status == "False"


def test_analysed_status_fills_the_printer_columns() -> None:
    analysis = Analysis(
        workload=REF,
        primary=DiagnosisCode.INPUT_PIPELINE_CPU_BOUND,
        confidence=0.82,
        actions=[
            Action(
                type=ActionType.CPU,
                from_value="1 cores (limit)",
                to_value="8 cores (request and limit)",
                reason="starved loader",
                target=ActionTarget(requests={"cpu": "8"}, limits={"cpu": "8"}),
            )
        ],
        savings=Savings(gpu_hours_per_day=3.25, share_of_allocation=0.14),
        gpu_busy_p95=0.214,
        samples=120,
        summary="GPU waits on the data loader",
    )
    status = analysed_status(
        analysis,
        Allocation(),
        window_start=NOW - timedelta(hours=2),
        window_end=NOW,
        workload=REF,
        now=NOW,
        generation=4,
    )
    assert status.summary is not None
    assert (status.summary.workload, status.summary.action) == ("Deployment/trainer", "cpu limit 1 → 8 cores")
    assert (status.summary.gpu_busy_p95, status.summary.savings, status.summary.window) == (
        "21%",
        "3.2 GPUh/d",
        "2h",
    )
    assert status.apply is not None and status.apply.state == ApplyState.ADVISED
    assert status.observed_generation == 4


def test_durations_read_as_people_say_them() -> None:
    assert [format_duration(s) for s in (0, 45 * 60, 6 * 3600, 36 * 3600 + 60)] == [
        "0m",
        "45m",
        "6h",
        "1d12h1m",
    ]


def test_conditions_keep_their_transition_time_unless_their_status_changes() -> None:
    old = [
        {"type": "Analyzed", "status": "True", "lastTransitionTime": "t0"},
        {"type": "Applied", "status": "True", "lastTransitionTime": "t1"},
    ]
    new = [{"type": "Analyzed", "status": "True", "lastTransitionTime": "t2"}]
    merged = {c["type"]: c for c in merge_conditions(old, new)}
    assert merged["Analyzed"]["lastTransitionTime"] == "t0"  # unchanged status: time kept
    assert merged["Applied"]["lastTransitionTime"] == "t1"  # the other role's condition stays
    flipped = merge_conditions(old, [{"type": "Analyzed", "status": "False", "lastTransitionTime": "t3"}])
    assert {c["type"]: c for c in flipped}["Analyzed"]["lastTransitionTime"] == "t3"


def test_action_column_prefers_the_change_the_actuator_can_make_and_stays_short() -> None:
    advice = Action(
        type=ActionType.SOFTWARE,
        from_value="current code and settings",
        to_value="more DataLoader workers, pin_memory=True, prefetching; GPU decoding (DALI)",
        reason="starved loader",
    )
    change = Action(
        type=ActionType.CPU, from_value="1", to_value="8", reason="starved loader", automatic=True
    )
    analysis = Analysis(
        workload=REF, primary=DiagnosisCode.INPUT_PIPELINE_CPU_BOUND, confidence=0.8, actions=[advice, change]
    )
    status = analysed_status(
        analysis, Allocation(), window_start=NOW, window_end=NOW, workload=REF, now=NOW, generation=1
    )
    assert status.summary is not None and status.summary.action == "cpu request 1 → 8 cores"
    only_advice = analysis.model_copy(update={"actions": [advice]})
    column = analysed_status(
        only_advice, Allocation(), window_start=NOW, window_end=NOW, workload=REF, now=NOW, generation=1
    ).summary
    assert column is not None and len(column.action) <= 48 and column.action.startswith("code change: ")


def test_action_column_says_where_a_gpu_change_goes() -> None:
    mig = Action(
        type=ActionType.MIG_PROFILE,
        from_value="nvidia.com/gpu: 1 (NVIDIA H200 141GB)",
        to_value="nvidia.com/mig-2g.35gb: 1",
        reason="small model",
    )
    assert action_column(mig) == "MIG slice → nvidia.com/mig-2g.35gb: 1"
    assert (
        describe_action(mig) == "MIG slice nvidia.com/gpu: 1 (NVIDIA H200 141GB) → nvidia.com/mig-2g.35gb: 1"
    )
    memory = Action(
        type=ActionType.MEMORY,
        from_value="8.0Gi",
        to_value="12.0Gi",
        reason="tight",
        target=ActionTarget(limits={"memory": "12Gi"}),
    )
    assert action_column(memory) == "memory limit 8.0 → 12.0 Gi"
    replicas = Action(type=ActionType.REPLICAS, from_value="3", to_value="5", reason="queue")
    assert action_column(replicas) == "replicas 3 → 5"
