"""What the engine concludes about one workload window.

The same models appear in `GPURecommendation.status` (serialised by alias, camelCase) and in every
`analyze` output format, so a user sees one vocabulary everywhere.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from gpu_rightsizer.model.codes import ActionType, DiagnosisCode, Severity
from gpu_rightsizer.model.observation import WorkloadRef


class CamelModel(BaseModel):
    """Base for models serialised into Kubernetes objects: camelCase on the wire, snake_case in Python."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class Finding(CamelModel):
    """One thing the engine noticed, in plain words, with the figures that made it fire."""

    code: DiagnosisCode
    severity: Severity
    confidence: float = Field(ge=0.0, le=1.0)
    message: str = Field(description="What was seen (with numbers), what it means, what to change.")
    evidence: dict[str, float] = Field(
        default_factory=dict, description="The figures behind the finding, e.g. {'gpuBusyP95': 0.21}."
    )


class ActionTarget(CamelModel):
    """What the actuator sets, in machine-readable form: the contract between engine and actuator.

    The engine fills it for every action it marks `automatic`; the actuator reads only this (never
    the display strings `from`/`to`). Quantities are in Kubernetes notation. A field left empty means
    "leave as it is": in particular a pod without a CPU limit is never given one unless `limits` says so.
    """

    container: str | None = Field(
        default=None, description="Container whose resources change; None for workload-level changes."
    )
    requests: dict[str, str] = Field(
        default_factory=dict, description="Resource name -> quantity to set in requests, e.g. {'cpu': '4'}."
    )
    limits: dict[str, str] = Field(
        default_factory=dict, description="Resource name -> quantity to set in limits, e.g. {'cpu': '4'}."
    )
    remove_resources: list[str] = Field(
        default_factory=list,
        description="Resource names to drop from requests and limits, e.g. 'nvidia.com/gpu' when moving "
        "to a MIG slice.",
    )
    replicas: int | None = Field(default=None, ge=0, description="Replica count to set.")
    min_replicas: int | None = Field(default=None, ge=0, description="HorizontalPodAutoscaler minReplicas.")
    max_replicas: int | None = Field(default=None, ge=1, description="HorizontalPodAutoscaler maxReplicas.")
    gpu_capacity_change: bool = Field(
        default=False,
        description="True when the change alters the GPU capacity the workload gets (slice, sharing, "
        "GPU count, replicas, release); at most one such action per recommendation.",
    )


class Action(CamelModel):
    """One change, from what the workload has to what it should have, and why."""

    type: ActionType
    from_value: str = Field(alias="from", description="Current value, human-readable.")
    to_value: str = Field(alias="to", description="Recommended value, human-readable.")
    reason: str
    resource: str | None = Field(
        default=None,
        description="Kubernetes resource name the change touches, e.g. 'cpu' or 'nvidia.com/gpu'.",
    )
    container: str | None = None
    automatic: bool = Field(
        default=False, description="True when the actuator can apply it (policy permitting)."
    )
    target: ActionTarget | None = Field(
        default=None,
        description="Machine-readable values the actuator sets; present on every automatic action.",
    )
    predicted_slowdown: float | None = Field(
        default=None,
        ge=0.0,
        description="Capacity-reducing actions: predicted step time (training) or GPU-phase latency "
        "(serving) after the change, as a multiple of today's (logic/width.py).",
    )


class Veto(CamelModel):
    """Why no capacity-reducing action is proposed: a signature of a GPU that waits or breaks."""

    name: str = Field(description="e.g. cpuNearLimit, ioReads, hostWait, crashLoop.")
    cause: DiagnosisCode = Field(description="The suspected cause the veto points at.")
    reason: str = Field(description="What was seen, with numbers.")
    measure_next: str = Field(description="What to measure to confirm or clear the cause.")


class MemoryLookback(CamelModel):
    """The GPU-memory high-water mark over a long look-back; slices are sized on it, not on one window."""

    max_gib: float = Field(ge=0.0, description="Highest GPU memory used on any device since `since`.")
    since: datetime = Field(description="Start of the look-back (the first window that saw the workload).")


class Savings(CamelModel):
    """Estimated GPU time the change frees, per day."""

    gpu_hours_per_day: float = Field(ge=0.0)
    share_of_allocation: float = Field(ge=0.0, le=1.0)
    if_offered_gpu_hours_per_day: float = Field(
        default=0.0,
        ge=0.0,
        description="GPU-hours per day that advice would free if the cluster offered the resource it "
        "names (unknown, or no node pool publishes it); counted apart, never in gpuHoursPerDay.",
    )


class Waste(CamelModel):
    """GPU time the workload holds but leaves idle, per day, as Kubecost counts idle cost.

    Waste is what the allocation costs in idle time today; savings are what a landable action frees.
    A CPU-starved trainer wastes most of its GPU-hours and frees none until its CPU is raised.
    """

    gpu_hours_per_day: float = Field(
        ge=0.0, description="Allocated GPU-hours per day times (1 - busy): idle GPU time held."
    )
    allocated_gpus: float = Field(
        alias="allocatedGpus",
        ge=0.0,
        description="Whole-GPU equivalents held: a MIG slice counts its compute share, a time-sliced "
        "share 1/N of its device.",
    )
    busy_fraction: float = Field(
        ge=0.0,
        le=1.0,
        description="Mean busy share over the window (GR_ENGINE_ACTIVE, or GPU_UTIL without profiling "
        "fields), weighted by each GPU's allocation.",
    )


class Cost(CamelModel):
    """Money per day, from a known price per GPU-hour; absent when no price is known."""

    price_per_gpu_hour: float = Field(
        alias="pricePerGPUHour", ge=0.0, description="Price of one whole GPU for one hour."
    )
    per_day: float = Field(ge=0.0, description="What the allocation costs per day.")
    waste_per_day: float = Field(ge=0.0, description="What its idle GPU time costs per day.")
    savings_per_day: float = Field(ge=0.0, description="What the landable actions would save per day.")


class Analysis(CamelModel):
    """The engine's full answer for one workload window."""

    workload: WorkloadRef
    primary: DiagnosisCode
    confidence: float = Field(ge=0.0, le=1.0)
    findings: list[Finding] = Field(default_factory=list)
    actions: list[Action] = Field(default_factory=list)
    savings: Savings = Field(default_factory=lambda: Savings(gpu_hours_per_day=0.0, share_of_allocation=0.0))
    gpu_busy_p95: float | None = Field(default=None, description="p95 of GPU busy over the window, 0..1.")
    samples: int = 0
    summary: str = Field(default="", description="One sentence for tables and Events.")
    vetoes: list[Veto] = Field(
        default_factory=list, description="Why capacity-reducing actions are denied in this window."
    )
    memory_lookback: MemoryLookback | None = Field(
        default=None, description="GPU-memory high-water mark to carry into the next cycle."
    )
    waste: Waste | None = Field(
        default=None, description="Idle GPU time held, per day; None without a busy figure."
    )
    cost: Cost | None = Field(default=None, description="Money per day; None when no price is known.")

    @property
    def main_action(self) -> Action | None:
        """The change to show first: the first one the actuator can apply, else the first advice."""
        return next((a for a in self.actions if a.automatic), next(iter(self.actions), None))
