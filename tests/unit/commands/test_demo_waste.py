"""The demo's CPU-starved trainer, on the data the demo's simulator serves: its waste shows, with 0.0
savings until its fix (more CPU) lands; once it has, it wastes less."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client import (
    V1Container,
    V1ObjectMeta,
    V1OwnerReference,
    V1Pod,
    V1PodSpec,
    V1PodStatus,
    V1ResourceRequirements,
)

from gpu_rightsizer.adapters.openmetrics import windows_from_samples
from gpu_rightsizer.commands.demo import DEMO_WORKLOADS, deployment
from gpu_rightsizer.logic.engine import analyze_window
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.logic.waste import GPUPrices, gpu_models, with_cost
from gpu_rightsizer.model.codes import DiagnosisCode
from gpu_rightsizer.model.result import Analysis
from gpu_rightsizer.sim.live import series_at, simulated_pods

NOW = datetime(2026, 1, 1, tzinfo=UTC)
WINDOW_SECONDS = 1800.0
STEP_SECONDS = 30.0


def _demo_pod(name: str, cpu: str | None = None) -> V1Pod:
    """The first pod of one of the demo's Deployments, as the demo creates it (`cpu` overrides its limit)."""
    row = next(row for row in DEMO_WORKLOADS if row[0] == name)
    template: dict[str, Any] = deployment(row[0], "demo", *row[1:])["spec"]["template"]  # type: ignore[arg-type]
    container = template["spec"]["containers"][0]
    resources = container["resources"]
    limits = {**resources["limits"], **({"cpu": cpu} if cpu else {})}
    return V1Pod(
        metadata=V1ObjectMeta(
            name=f"{name}-5d8f-a",
            namespace="demo",
            annotations=template["metadata"]["annotations"],
            labels={**template["metadata"]["labels"], "pod-template-hash": "5d8f"},
            owner_references=[
                V1OwnerReference(
                    api_version="apps/v1", kind="ReplicaSet", name=f"{name}-5d8f", uid="u", controller=True
                )
            ],
            creation_timestamp=NOW - timedelta(hours=2),
        ),
        spec=V1PodSpec(
            node_name="gpu-node-1",
            containers=[
                V1Container(
                    name=container["name"],
                    resources=V1ResourceRequirements(requests=resources["requests"], limits=limits),
                )
            ],
        ),
        status=V1PodStatus(phase="Running", start_time=NOW - timedelta(hours=2)),
    )


def _analysed(name: str, cpu: str | None = None) -> Analysis:
    """The engine's analysis of the simulator's series of that pod over a 30-minute window."""
    row = next(row for row in DEMO_WORKLOADS if row[0] == name)
    pods = simulated_pods([_demo_pod(name, cpu)], {"gpu-node-1": row[2]})
    end = NOW.timestamp()
    samples = [
        (metric, labels, value, t)
        for i in range(int(WINDOW_SECONDS / STEP_SECONDS) + 1)
        for t in [end - WINDOW_SECONDS + i * STEP_SECONDS]
        for metric, labels, value, _ in series_at(pods, t)
    ]
    [window] = windows_from_samples(samples, window_seconds=WINDOW_SECONDS, at=NOW, step_seconds=STEP_SECONDS)
    settings = EngineSettings().with_overrides(
        {"windowSeconds": WINDOW_SECONDS, "minWindowSeconds": WINDOW_SECONDS * 0.9}
    )
    return with_cost(analyze_window(window, settings), GPUPrices(default=3.0), gpu_models(window))


def test_cpu_starved_trainer_shows_its_waste_with_no_savings_until_its_fix_lands() -> None:
    starved = _analysed("trainer-cpu-starved")
    assert starved.primary is DiagnosisCode.INPUT_PIPELINE_CPU_BOUND, starved.summary
    assert starved.waste is not None
    print(
        f"\ndemo trainer-cpu-starved (1 core): busy {starved.waste.busy_fraction:.2f}, "
        f"waste {starved.waste.gpu_hours_per_day:.1f} GPU-h/d, savings {starved.savings.gpu_hours_per_day:.1f}"
    )
    assert starved.waste.allocated_gpus == 1.0
    assert starved.waste.busy_fraction < 0.5
    assert starved.waste.gpu_hours_per_day > 12.0  # most of its GPU's day is idle
    assert starved.savings.gpu_hours_per_day == 0.0  # more CPU frees no GPU: nothing to save yet
    assert starved.cost is not None
    assert starved.cost.waste_per_day == round(3.0 * starved.waste.gpu_hours_per_day, 2)
    assert starved.cost.savings_per_day == 0.0

    fixed = _analysed("trainer-cpu-starved", cpu="16")
    assert fixed.waste is not None
    print(
        f"after the fix (16 cores): busy {fixed.waste.busy_fraction:.2f}, waste {fixed.waste.gpu_hours_per_day:.1f}"
    )
    assert fixed.waste.gpu_hours_per_day < starved.waste.gpu_hours_per_day / 2
