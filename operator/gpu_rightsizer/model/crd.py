"""The two custom resources, as pydantic models: the single source of their CRD schemas.

`gpu_rightsizer.crdgen` turns these models into CustomResourceDefinitions (OpenAPI v3 schema plus
CEL rules), so every bound, enum, pattern and cross-field rule is written once, here. Each CEL rule
(`x-kubernetes-validations`) has a Python twin in a validator below with the same message, so an
object the API server accepts parses here and an object it rejects does not: the operator never
meets a policy it cannot read, and unit tests catch a rule before a cluster does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, StringConstraints, field_validator, model_validator
from pydantic.config import JsonDict, JsonValue

from gpu_rightsizer.model.codes import (
    APPLICABLE_ACTIONS,
    ActionType,
    ApplyState,
    DiagnosisCode,
    PolicyMode,
    SharingStrategy,
)
from gpu_rightsizer.model.durations import CEL_UNREADABLE, cel_readable, parse_duration
from gpu_rightsizer.model.durations import DURATION_PATTERN as _DURATION_GRAMMAR
from gpu_rightsizer.model.result import (
    Action,
    CamelModel,
    Cost,
    Finding,
    MemoryLookback,
    Savings,
    Veto,
    Waste,
)

GROUP = "gpurightsizer.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

#: The one duration grammar (model/durations.py): Go's units plus d and w, compound allowed.
DURATION_PATTERN = _DURATION_GRAMMAR
#: 24-hour wall-clock time of a maintenance window.
CLOCK_PATTERN = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
#: MIG profile names as the device plugin exposes them (`nvidia.com/mig-<profile>`): 1g.10gb, 1g.10gb.me,
#: 1g.24gb.gfx, 1g.24gb.me.all, 1g.24gb-me. The device plugin writes NVML's '+' as '.', so '+me' is no
#: resource anywhere and is refused.
MIG_PROFILE_PATTERN = r"^([1-7]c\.)?[1-7]g\.[0-9]+gb([.-][a-z][a-z0-9]*)*$"
#: IANA time-zone names (Europe/Berlin, UTC, America/Argentina/Buenos_Aires, Etc/GMT+2).
TIMEZONE_PATTERN = r"^[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+)*$"
#: metav1.Condition reason: CamelCase identifier.
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"

IGNORE_ANNOTATION = "gpurightsizer.io/ignore"
"""Workloads annotated `gpurightsizer.io/ignore: "true"` are never recommended on nor patched."""

#: Actions a policy may allow, in declaration order (the actuator can carry these out).
POLICY_ACTIONS: tuple[ActionType, ...] = tuple(a for a in ActionType if a in APPLICABLE_ACTIONS)


@dataclass(frozen=True)
class CelRule:
    """One `x-kubernetes-validations` entry; `field_path` points the API server's error at a field."""

    rule: str
    message: str
    field_path: str | None = None

    def to_schema(self) -> JsonDict:
        """The entry as it appears in the CRD schema."""
        entry: JsonDict = {"rule": self.rule, "message": self.message}
        if self.field_path is not None:
            entry["fieldPath"] = self.field_path
        return entry


def _with_cel(*rules: CelRule) -> ConfigDict:
    """Model config that puts `rules` into the model's schema (crdgen copies them into the CRD)."""
    return ConfigDict(json_schema_extra={"x-kubernetes-validations": [rule.to_schema() for rule in rules]})


#: Schema extra for a list of unique scalars (the API server rejects duplicates, pydantic twins check too).
_SET_LIST: JsonDict = {"x-kubernetes-list-type": "set"}

#: A label value (and a label selector value): at most 63 characters.
LabelValue = Annotated[str, StringConstraints(max_length=63)]
#: A MIG profile name as the device plugin spells it.
MigProfile = Annotated[str, StringConstraints(max_length=32, pattern=MIG_PROFILE_PATTERN)]


def _string_enum(values: list[str]) -> JsonDict:
    """Item schema for a list of strings restricted to `values`."""
    allowed: list[JsonValue] = list(values)
    return {"type": "string", "enum": allowed}


def _no_duplicates(values: list[Any], field: str) -> list[Any]:
    seen: set[Any] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"{field} must not repeat {value!r}")
        seen.add(value)
    return values


# --------------------------------------------------------------------------------------------------
# Shared Kubernetes shapes
# --------------------------------------------------------------------------------------------------

_REQUIREMENT_VALUES_RULE = CelRule(
    "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0)"
    " : (!has(self.values) || size(self.values) == 0)",
    "matchExpressions[].values must be non-empty when operator is In or NotIn, and empty when operator "
    "is Exists or DoesNotExist",
    field_path=".values",
)


class LabelSelectorRequirement(CamelModel):
    """One `matchExpressions` entry of a metav1.LabelSelector."""

    model_config = _with_cel(_REQUIREMENT_VALUES_RULE)

    key: str = Field(min_length=1, max_length=317, description="The label key the requirement applies to.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="How the key relates to the values."
    )
    values: list[LabelValue] = Field(
        default_factory=list,
        max_length=64,
        description="Label values; non-empty for In and NotIn, empty for Exists and DoesNotExist.",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )

    @model_validator(mode="after")
    def _values_fit_operator(self) -> LabelSelectorRequirement:
        needs_values = self.operator in ("In", "NotIn")
        if needs_values != bool(self.values):
            raise ValueError(_REQUIREMENT_VALUES_RULE.message)
        return self


class LabelSelector(CamelModel):
    """metav1.LabelSelector: `matchLabels` and every `matchExpressions` entry must hold; empty selects all."""

    match_labels: dict[str, LabelValue] = Field(
        default_factory=dict,
        max_length=64,
        description="Labels that must be present with exactly these values.",
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list,
        max_length=32,
        description="Set-based requirements, all of which must hold.",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )


class Condition(CamelModel):
    """metav1.Condition: the standard status condition shape."""

    type: str = Field(
        min_length=1, max_length=316, description="Condition type, CamelCase, e.g. Ready, Applied, Degraded."
    )
    status: Literal["True", "False", "Unknown"]
    observed_generation: int | None = Field(default=None, ge=0)
    last_transition_time: datetime = Field(description="When the status last changed.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=CONDITION_REASON_PATTERN,
        description="Machine-readable CamelCase reason for the last transition.",
    )
    message: str = Field(default="", max_length=32768, description="Human-readable details.")


_CONDITIONS_EXTRA: JsonDict = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
}


# --------------------------------------------------------------------------------------------------
# GPURecommendation
# --------------------------------------------------------------------------------------------------


class TargetRef(CamelModel):
    """The workload a recommendation is about (its owner reference points at the same object)."""

    api_version: str = Field(min_length=1, max_length=253, description="e.g. apps/v1, batch/v1, v1.")
    kind: str = Field(
        min_length=1, max_length=63, description="Deployment, StatefulSet, Job, CronJob or Pod."
    )
    name: str = Field(min_length=1, max_length=253, description="Name of the workload, in this namespace.")


class GPURecommendationSpec(CamelModel):
    """What the recommendation is for; everything else is status, written by the operator."""

    target_ref: TargetRef


#: Warnings kept in `status.window.warnings` (the first ones, sorted).
MAX_WINDOW_WARNINGS = 20


class ObservedWindow(CamelModel):
    """The time range the diagnosis is based on."""

    start: datetime
    end: datetime = Field(
        description="End of the window the published figures come from. A status that says nothing "
        "materially new is not rewritten until this is a refresh period old (at most half of the "
        "policy's maxStaleness and half the window), so it may be older than the last analysis."
    )
    samples: int = Field(default=0, ge=0, description="Samples per series that survived cleaning.")
    warnings: list[Annotated[str, StringConstraints(max_length=1024)]] = Field(
        default_factory=list,
        max_length=MAX_WINDOW_WARNINGS,
        description="What the metrics lacked or said about this window (partial answers, missing series); "
        "a change is never applied on a window with warnings.",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )


class Baseline(CamelModel):
    """The window's figures a change would be judged on, for people to read. The actuator never
    verifies against these: it measures its own baseline, scoped to the workload, when it applies."""

    gpu_busy_p95: float | None = Field(default=None, ge=0.0, description="Busiest GPU's p95 busy share.")
    cpu_saturation_p95: float | None = Field(
        default=None, ge=0.0, description="Busiest pod's p95 CPU use over its limit (or request)."
    )


class AllocationStatus(CamelModel):
    """What the workload requests today, per pod (except replicas); quantities in Kubernetes notation."""

    gpu_resource: str = Field(
        default="nvidia.com/gpu", description="nvidia.com/gpu, nvidia.com/mig-1g.10gb, nvidia.com/gpu.shared."
    )
    gpu_count: int = Field(default=1, ge=0, description="GPUs (or slices) per pod.")
    gpu_model: str | None = Field(default=None, description="GPU product, e.g. NVIDIA-H100-80GB-HBM3.")
    mig_profile: str | None = Field(default=None, description="MIG profile when the GPU is a slice.")
    cpu_request: str | None = Field(default=None, description="CPU request per pod, e.g. 500m.")
    cpu_limit: str | None = Field(default=None, description="CPU limit per pod, e.g. 2.")
    memory_request: str | None = Field(default=None, description="Memory request per pod, e.g. 8Gi.")
    memory_limit: str | None = Field(default=None, description="Memory limit per pod, e.g. 16Gi.")
    replicas: int = Field(default=1, ge=0)


class Diagnosis(CamelModel):
    """The primary bottleneck and every finding behind it."""

    primary: DiagnosisCode
    confidence: float = Field(ge=0.0, le=1.0)
    summary: str = Field(
        default="", description="One sentence: what was seen, what it means, what to change."
    )
    findings: list[Finding] = Field(default_factory=list)


#: Entries kept in `status.apply.history` and `status.apply.regressed`.
HISTORY_LENGTH = 20


class ChangePhase(StrEnum):
    """The life of one change: proposed -> intent recorded -> applied -> rolled out -> verified |
    inconclusive | (rollback intent recorded -> rolled back) -> done. Abandoned: never sent, or left
    in place unverified because its policy no longer applies it."""

    PROPOSED = "Proposed"
    INTENT_RECORDED = "IntentRecorded"
    APPLIED = "Applied"
    ROLLED_OUT = "RolledOut"
    VERIFIED = "Verified"
    INCONCLUSIVE = "Inconclusive"
    ROLLBACK_INTENT_RECORDED = "RollbackIntentRecorded"
    ROLLED_BACK = "RolledBack"
    ABANDONED = "Abandoned"
    DONE = "Done"


#: Phases of a change that is under way: sent or about to be, not yet settled.
IN_FLIGHT_PHASES = frozenset(
    {
        ChangePhase.INTENT_RECORDED,
        ChangePhase.APPLIED,
        ChangePhase.ROLLED_OUT,
        ChangePhase.ROLLBACK_INTENT_RECORDED,
    }
)


class RegressedChange(CamelModel):
    """A change that was rolled back, remembered with the workload generation it left behind."""

    change_id: str
    workload_generation: int | None = None
    at: datetime


class ChangeHistoryEntry(CamelModel):
    """One finished (or abandoned) change, for the audit trail."""

    change_id: str
    at: datetime = Field(description="When the change was applied (or recorded, when never sent).")
    finished_at: datetime | None = None
    change: str = Field(
        default="", description="What changed, e.g. containers[main].resources.limits[cpu] 1->4."
    )
    outcome: ChangePhase
    reason: str = ""
    before: dict[str, float] = Field(default_factory=dict, description="Figures before the change.")
    after: dict[str, float] = Field(default_factory=dict, description="Figures of the new pods.")


class ApplyStatus(CamelModel):
    """Where the recommendation stands on its way into the workload, with what is needed to undo it."""

    state: ApplyState = ApplyState.PENDING
    reason: str = Field(default="", description="Why the state is what it is, in plain words.")
    policy: str | None = Field(
        default=None, description="The GPURightsizingPolicy that governs the workload."
    )
    dry_run: bool = Field(default=False, description="True when the patch was computed but not sent.")
    patch: str | None = Field(
        default=None, description="The exact patch (YAML) applied or, in dry-run, proposed."
    )
    previous: dict[str, str] = Field(
        default_factory=dict,
        description="Values before the change, by field (e.g. containers[trainer].resources.limits.cpu), "
        "used for rollback.",
    )
    applied_at: datetime | None = None
    verify_after: datetime | None = Field(
        default=None, description="When the change is compared with before."
    )
    change_id: str | None = Field(default=None, description="The change this state is about.")
    rollback: str | None = Field(
        default=None, description="The exact rollback patch (YAML), recorded before it is sent."
    )
    phase: ChangePhase | None = Field(default=None, description="Where the change is in its life.")
    change: str | None = Field(
        default=None, description="The GPURightsizingChange holding the change record and its history."
    )
    workload_generation: int | None = Field(
        default=None, description="The workload's generation our last write produced."
    )
    rolled_out_at: datetime | None = Field(
        default=None, description="When the new revision was first seen fully rolled out."
    )
    last_error: str | None = Field(default=None, description="The last API error, kept until the next step.")
    manifest_advice: str | None = Field(
        default=None,
        description="After an in-place resize: what to set in the workload's manifest so that new pods "
        "(a rollout, a Job's next run) start at the new size.",
    )
    rollbacks: int = Field(default=0, ge=0, description="Changes of this workload rolled back so far.")
    regressed: list[RegressedChange] = Field(
        default_factory=list,
        max_length=HISTORY_LENGTH,
        description="Changes that were rolled back: not retried until the workload's spec changes.",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )
    cleared_token: str | None = Field(
        default=None, description="The last gpurightsizer.io/clear-regressions value acted on."
    )
    history: list[ChangeHistoryEntry] = Field(
        default_factory=list,
        max_length=HISTORY_LENGTH,
        description="The last changes, newest last: what, when, figures before and after, outcome.",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )

    def change_phase(self) -> ChangePhase | None:
        """The change's phase; statuses written before phases existed map from their state."""
        if self.phase is not None:
            return self.phase
        if self.state == ApplyState.PENDING and self.patch and self.applied_at and not self.dry_run:
            return ChangePhase.INTENT_RECORDED
        if self.state == ApplyState.APPLIED and self.verify_after:
            return ChangePhase.APPLIED
        return None

    @property
    def in_flight(self) -> bool:
        """Whether a change is under way (the actuator settles it before anything else happens)."""
        return self.change_phase() in IN_FLIGHT_PHASES


class RecommendationSummary(CamelModel):
    """Pre-formatted strings for `kubectl get` columns; the structured fields are the truth."""

    workload: str = Field(default="", description="Kind/name of the target, e.g. Deployment/llm-serve.")
    action: str = Field(
        default="", description="The main change as people say it, e.g. 'cpu limit 2 → 6 cores' or 'none'."
    )
    gpu_busy_p95: str = Field(default="", description="p95 GPU busy over the window, e.g. 21%.")
    savings: str = Field(default="", description="Estimated GPU-hours per day freed, e.g. 12.0 GPUh/d.")
    confidence: str = Field(
        default="", description="Confidence of the primary diagnosis, e.g. 82% (as the CLI shows it)."
    )
    window: str = Field(default="", description="Length of the observed window, e.g. 24h.")


class GPURecommendationStatus(CamelModel):
    """Everything the operator concluded about the target; written only through the status subresource."""

    observed_generation: int | None = Field(default=None, ge=0)
    workload_generation: int | None = Field(
        default=None, ge=0, description="The target workload's metadata.generation the analysis saw."
    )
    window: ObservedWindow | None = None
    allocation: AllocationStatus | None = None
    diagnosis: Diagnosis | None = None
    actions: list[Action] = Field(
        default_factory=list, json_schema_extra={"x-kubernetes-list-type": "atomic"}
    )
    savings: Savings | None = None
    waste: Waste | None = None
    cost: Cost | None = Field(default=None, description="Present only when a GPU-hour price is known.")
    baseline: Baseline | None = None
    apply: ApplyStatus | None = None
    summary: RecommendationSummary | None = None
    # The shrink gate's record: why nothing shrinks, and the memory peak slices are sized on.
    vetoes: list[Veto] = Field(default_factory=list, json_schema_extra={"x-kubernetes-list-type": "atomic"})
    memory_lookback: MemoryLookback | None = None
    conditions: list[Condition] = Field(default_factory=list, json_schema_extra=_CONDITIONS_EXTRA)


class GPURecommendation(CamelModel):
    """One per workload: why its GPUs are wasted and what to change."""

    KIND: ClassVar[str] = "GPURecommendation"
    PLURAL: ClassVar[str] = "gpurecommendations"
    SINGULAR: ClassVar[str] = "gpurecommendation"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("gpurec",)
    SCOPE: ClassVar[str] = "Namespaced"

    api_version: Literal["gpurightsizer.io/v1alpha1"] = "gpurightsizer.io/v1alpha1"
    kind: Literal["GPURecommendation"] = "GPURecommendation"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: GPURecommendationSpec
    status: GPURecommendationStatus | None = None

    def to_manifest(self) -> dict[str, Any]:
        """The object as the API server stores it: camelCase keys, no null fields."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# --------------------------------------------------------------------------------------------------
# GPURightsizingPolicy
# --------------------------------------------------------------------------------------------------

_IDLE_BELOW_LOW_RULE = CelRule(
    "!has(self.idleBusyP95) || !has(self.lowBusy) || self.idleBusyP95 < self.lowBusy",
    "spec.observation.thresholds.idleBusyP95 must be below lowBusy",
    field_path=".idleBusyP95",
)


class Thresholds(CamelModel):
    """Optional overrides of the engine's thresholds, named as in `logic.thresholds.EngineSettings`.

    Ratios are 0..1 unless said otherwise; an absent field keeps the engine's default.
    """

    model_config = _with_cel(_IDLE_BELOW_LOW_RULE)

    active_busy: float | None = Field(
        default=None, ge=0.0, le=1.0, description="GPU busy above this counts as the job being active."
    )
    idle_busy_p95: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Every GPU's busy p95 below this means the allocation is idle.",
    )
    low_busy: float | None = Field(
        default=None, ge=0.0, le=1.0, description="GPU busy below this counts as ineffective GPU use."
    )
    cpu_saturation: float | None = Field(
        default=None, ge=0.0, le=2.0, description="CPU usage p95 / CPU limit at or above this is saturated."
    )
    cpu_throttled_ratio: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Share of CFS periods throttled at or above this is a bottleneck.",
    )
    memory_full_share: float | None = Field(
        default=None, ge=0.0, le=1.0, description="p99 GPU memory at or above this share of capacity is full."
    )
    min_delta_ratio: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="CPU/memory changes smaller than this share are not proposed.",
    )
    # The shrink gate (logic/vetoes.py): who may lower what, and how sure an automatic action must be.
    min_confidence: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Automatic actions need at least this confidence (0.6)."
    )
    max_slowdown: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Largest predicted step slowdown of a shrink (0.05)."
    )
    max_serving_latency_ratio: float | None = Field(
        default=None, ge=1.0, le=10.0, description="Largest predicted GPU-phase latency ratio (1.25)."
    )
    shrink_min_window_job_seconds: float | None = Field(
        default=None, ge=0.0, description="Shortest window for shrinking a Job or training CRD (1800)."
    )
    shrink_min_window_service_seconds: float | None = Field(
        default=None, ge=0.0, description="Shortest window for shrinking a Deployment/StatefulSet (86400)."
    )
    memory_lookback_min_seconds: float | None = Field(
        default=None, ge=0.0, description="Shortest GPU-memory look-back a slice is sized on (86400)."
    )

    @model_validator(mode="after")
    def _idle_below_low(self) -> Thresholds:
        if (
            self.idle_busy_p95 is not None
            and self.low_busy is not None
            and self.idle_busy_p95 >= self.low_busy
        ):
            raise ValueError(_IDLE_BELOW_LOW_RULE.message)
        return self

    def overrides(self) -> dict[str, float]:
        """The fields that are set, by camelCase name, for `EngineSettings.with_overrides`."""
        return self.model_dump(by_alias=True, exclude_none=True)


#: The longest observation window: 30 days. A longer one is a typo more often than a wish (2562047h
#: was accepted, and 100000h took 387 MiB to plan), and no retention setting we know keeps more.
MAX_WINDOW_SECONDS = 720 * 3600.0
_WINDOW_MIN_RULE = CelRule(
    f"!has(self.window) || self.window.matches('{CEL_UNREADABLE}') || (duration(self.window) >= duration('5m')"
    " && duration(self.window) <= duration('720h'))",
    "spec.observation.window must be between 5m and 720h",
    field_path=".window",
)


class Observation(CamelModel):
    """How much data a diagnosis needs."""

    model_config = _with_cel(_WINDOW_MIN_RULE)

    window: str | None = Field(
        default=None,
        max_length=32,
        pattern=DURATION_PATTERN,
        description="How far back to look, e.g. 30m, 1h, 24h (5m to 720h); absent: the operator's --window.",
    )
    min_samples: int = Field(
        default=30, ge=1, le=1_000_000, description="Fewer samples than this yields InsufficientData."
    )
    thresholds: Thresholds | None = Field(default=None, description="Overrides of the engine's thresholds.")

    @field_validator("window")
    @classmethod
    def _window_long_enough(cls, value: str | None) -> str | None:
        if (
            value is not None
            and cel_readable(value)
            and not 300 <= parse_duration(value) <= MAX_WINDOW_SECONDS
        ):
            raise ValueError(_WINDOW_MIN_RULE.message)
        return value


_CLUSTER_CAP_RULE = CelRule(
    "!has(self.perNamespace) || !has(self.cluster) || self.perNamespace <= self.cluster",
    "spec.safety.maxChangesPerHour.perNamespace must not exceed cluster",
    field_path=".perNamespace",
)


class MaxChangesPerHour(CamelModel):
    """Rate limits on applied changes (token buckets refilled hourly)."""

    model_config = _with_cel(_CLUSTER_CAP_RULE)

    cluster: int = Field(default=10, ge=0, le=10_000, description="Changes per hour across the cluster.")
    per_namespace: int = Field(default=3, ge=0, le=10_000, description="Changes per hour in one namespace.")

    @model_validator(mode="after")
    def _namespace_within_cluster(self) -> MaxChangesPerHour:
        if self.per_namespace > self.cluster:
            raise ValueError(_CLUSTER_CAP_RULE.message)
        return self


Weekday = Literal["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]

_WINDOW_END_RULE = CelRule(
    "self.end != self.start",
    "spec.safety.maintenanceWindows[].end must differ from start",
    field_path=".end",
)


class MaintenanceWindow(CamelModel):
    """A weekly time range in which changes may be applied; a window may cross midnight (22:00-02:00)."""

    model_config = _with_cel(_WINDOW_END_RULE)

    days: list[Weekday] = Field(
        default_factory=list,
        max_length=7,
        description="Days the window starts on; empty means every day.",
        json_schema_extra=_SET_LIST,
    )
    start: str = Field(max_length=5, pattern=CLOCK_PATTERN, description="Start, HH:MM (24-hour clock).")
    end: str = Field(
        max_length=5, pattern=CLOCK_PATTERN, description="End, HH:MM; before start crosses midnight."
    )
    timezone: str = Field(
        default="UTC", min_length=1, max_length=64, pattern=TIMEZONE_PATTERN, description="IANA time zone."
    )

    @field_validator("days")
    @classmethod
    def _unique_days(cls, days: list[str]) -> list[str]:
        return _no_duplicates(days, "spec.safety.maintenanceWindows[].days")

    @model_validator(mode="after")
    def _end_differs(self) -> MaintenanceWindow:
        if self.end == self.start:
            raise ValueError(_WINDOW_END_RULE.message)
        return self


_MIG_PROFILES_NEED_MIG_RULE = CelRule(
    "!has(self.allowedMigProfiles) || size(self.allowedMigProfiles) == 0"
    " || (has(self.sharingStrategy) && self.sharingStrategy in ['mig-mixed', 'mig-single'])",
    "spec.safety.allowedMigProfiles may only be set when sharingStrategy is mig-mixed or mig-single",
    field_path=".allowedMigProfiles",
)


#: Bounds of the policy's durations (seconds): (CEL rule, message, field, low, high). A huge duration
#: would overflow the operator's arithmetic, a tiny one removes the guard it stands for.
_DURATION_BOUNDS: tuple[tuple[str, str, str, float], ...] = (
    ("cooldown", "1m", "720h", 60.0),
    ("verifyFor", "10s", "24h", 10.0),
    ("maxStaleness", "1m", "24h", 60.0),
)
_DURATION_HIGH_SECONDS = {"720h": 720 * 3600.0, "24h": 24 * 3600.0}


def _duration_rule(name: str, low: str, high: str) -> CelRule:
    return CelRule(
        f"!has(self.{name}) || self.{name}.matches('{CEL_UNREADABLE}')"
        f" || (duration(self.{name}) >= duration('{low}')"
        f" && duration(self.{name}) <= duration('{high}'))",
        f"spec.safety.{name} must be between {low} and {high}",
        field_path=f".{name}",
    )


_SNAKE = {"cooldown": "cooldown", "verifyFor": "verify_for", "maxStaleness": "max_staleness"}
_SAFETY_DURATION_RULES: tuple[CelRule, ...] = tuple(
    _duration_rule(name, low, high) for name, low, high, _ in _DURATION_BOUNDS
)


class InconclusiveAction(StrEnum):
    """What the actuator does with a change it could not verify (no data, rollout never completed)."""

    HOLD = "Hold"
    ROLL_BACK = "RollBack"


class OnDisableAction(StrEnum):
    """What the actuator does with a change in flight when its policy leaves Apply (Off or Recommend)."""

    FINISH = "Finish"
    KEEP = "Keep"
    ROLL_BACK = "RollBack"


class Safety(CamelModel):
    """Guards around applying changes: rate limits, cooldown, maintenance windows, verification, sharing."""

    model_config = _with_cel(_MIG_PROFILES_NEED_MIG_RULE, *_SAFETY_DURATION_RULES)

    max_changes_per_hour: MaxChangesPerHour = Field(default_factory=MaxChangesPerHour)
    cooldown: str = Field(
        default="6h",
        max_length=32,
        pattern=DURATION_PATTERN,
        description="Minimum time between two changes to the same workload.",
    )
    maintenance_windows: list[MaintenanceWindow] = Field(
        default_factory=list,
        max_length=16,
        description="When changes may be applied; empty means any time.",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )
    min_replicas: int = Field(
        default=1, ge=0, le=10_000, description="Scale-in never goes below this many replicas."
    )
    verify_for: str = Field(
        default="30m",
        max_length=32,
        pattern=DURATION_PATTERN,
        description="How long after a change the same signals are compared with before.",
    )
    rollback_on_regression: bool = Field(default=True, description="Undo a change that made things worse.")
    on_inconclusive: InconclusiveAction = Field(
        default=InconclusiveAction.HOLD,
        description="A change that cannot be verified (no data, rollout not complete in time) is held "
        "in place with a warning (Hold) or undone (RollBack); it is never reported Verified.",
    )
    max_staleness: str = Field(
        default="15m",
        max_length=32,
        pattern=DURATION_PATTERN,
        description="The newest data a recommendation is based on must be at most this old to be acted on.",
    )
    allow_single_replica: bool = Field(
        default=False,
        description="Allow changes that restart the only pod of a single-replica workload (an outage).",
    )
    max_pods_in_disruption: int = Field(
        default=10,
        ge=1,
        le=10_000,
        description="Pods of this policy's workloads that may be restarting because of changes at once.",
    )
    max_rollbacks: int = Field(
        default=2,
        ge=1,
        le=100,
        description="After this many rollbacks of a workload's changes, it is Blocked until a person sets "
        "the gpurightsizer.io/clear-regressions annotation on the workload.",
    )
    # the actuator's own settings (the actuator wing): leaving Apply, Recreate Deployments
    on_disable: OnDisableAction = Field(
        default=OnDisableAction.FINISH,
        description="A change in flight when the policy leaves Apply: Finish measures it to the end, then "
        "rolls it back if it failed and keeps it if it verified (a failing rollout is rolled back at once); "
        "Keep leaves it in place unverified; RollBack undoes it. The history is kept in every case.",
    )
    allow_recreate: bool = Field(
        default=False,
        description="Allow changes to Deployments with strategy Recreate, which stop every replica at once.",
    )
    sharing_strategy: SharingStrategy = Field(
        default=SharingStrategy.NONE,
        description="How this cluster shares GPUs (device plugin configuration).",
    )
    allowed_mig_profiles: list[MigProfile] = Field(
        default_factory=list,
        max_length=32,
        description="MIG profiles the actuator may move workloads to, as the device plugin spells them "
        "(nvidia.com/mig-<profile>), e.g. 1g.10gb or 1g.10gb.me; empty allows none.",
        json_schema_extra=_SET_LIST,
    )

    @field_validator("allowed_mig_profiles")
    @classmethod
    def _unique_profiles(cls, profiles: list[str]) -> list[str]:
        return _no_duplicates(profiles, "spec.safety.allowedMigProfiles")

    @model_validator(mode="after")
    def _durations_bounded(self) -> Safety:
        for name, low, high, low_seconds in _DURATION_BOUNDS:
            value = getattr(self, _SNAKE[name])
            if (
                cel_readable(value)
                and not low_seconds <= parse_duration(value) <= _DURATION_HIGH_SECONDS[high]
            ):
                raise ValueError(f"spec.safety.{name} must be between {low} and {high}")
        return self

    @model_validator(mode="after")
    def _mig_profiles_need_mig(self) -> Safety:
        if self.allowed_mig_profiles and self.sharing_strategy not in (
            SharingStrategy.MIG_MIXED,
            SharingStrategy.MIG_SINGLE,
        ):
            raise ValueError(_MIG_PROFILES_NEED_MIG_RULE.message)
        return self


def duration_bound_problems(observation: Observation, safety: Safety) -> list[str]:
    """The bounds of the policy's durations, checked whatever their units: the operator's twin of the
    CEL rules for values CEL's duration() cannot read (with d or w), reported on the policy."""
    problems = []
    window = observation.window
    if window is not None and not 300 <= parse_duration(window) <= MAX_WINDOW_SECONDS:
        problems.append(f"{_WINDOW_MIN_RULE.message} (got {window})")
    for name, low, high, low_seconds in _DURATION_BOUNDS:
        value = getattr(safety, _SNAKE[name])
        if not low_seconds <= parse_duration(value) <= _DURATION_HIGH_SECONDS[high]:
            problems.append(f"spec.safety.{name} must be between {low} and {high} (got {value})")
    return problems


_POLICY_SPEC_RULES: tuple[CelRule, ...] = (
    CelRule(
        "!has(self.mode) || self.mode != 'Apply' || (has(self.actions) && size(self.actions) > 0)",
        "spec.actions must name at least one action when spec.mode is Apply",
        field_path=".actions",
    ),
    CelRule(
        "!has(self.mode) || self.mode != 'Off' || !has(self.actions) || size(self.actions) == 0",
        "spec.actions may only be non-empty when spec.mode is Recommend or Apply",
        field_path=".actions",
    ),
    CelRule(
        "!has(self.dryRun) || !self.dryRun || (has(self.mode) && self.mode == 'Apply')",
        "spec.dryRun may only be true when spec.mode is Apply",
        field_path=".dryRun",
    ),
    CelRule(
        "!has(self.actions) || !('replicas' in self.actions) || !has(self.safety)"
        " || !has(self.safety.minReplicas) || self.safety.minReplicas >= 1",
        "spec.safety.minReplicas must be >= 1 when spec.actions contains replicas",
        field_path=".safety.minReplicas",
    ),
    CelRule(
        "!has(self.actions) || !('migProfile' in self.actions) || (has(self.safety)"
        " && has(self.safety.sharingStrategy) && self.safety.sharingStrategy in ['mig-mixed', 'mig-single']"
        " && has(self.safety.allowedMigProfiles) && size(self.safety.allowedMigProfiles) > 0)",
        "spec.actions contains migProfile, which needs spec.safety.sharingStrategy mig-mixed or mig-single "
        "and a non-empty spec.safety.allowedMigProfiles",
        field_path=".actions",
    ),
    CelRule(
        "!has(self.actions) || !('gpuSharing' in self.actions) || (has(self.safety)"
        " && has(self.safety.sharingStrategy) && self.safety.sharingStrategy in ['time-slicing', 'mps'])",
        "spec.actions contains gpuSharing, which needs spec.safety.sharingStrategy time-slicing or mps",
        field_path=".actions",
    ),
)


class GPURightsizingPolicySpec(CamelModel):
    """Which workloads a policy governs and what it lets the operator do with them."""

    model_config = _with_cel(*_POLICY_SPEC_RULES)

    namespace_selector: LabelSelector | None = Field(
        default=None, description="Namespaces whose labels match; absent or empty selects every namespace."
    )
    workload_selector: LabelSelector | None = Field(
        default=None, description="Workloads whose labels match; absent or empty selects every workload."
    )
    priority: int = Field(
        default=0,
        ge=0,
        le=1000,
        description="Decides between overlapping policies: the highest wins, ties go to the first name.",
    )
    mode: PolicyMode = Field(
        default=PolicyMode.RECOMMEND,
        description="Off ignores the workloads, Recommend only writes "
        "GPURecommendations, Apply also patches the workloads.",
    )
    dry_run: bool = Field(
        default=False,
        description="With Apply: compute the exact patch and show it in status and Events, "
        "but do not send it.",
    )
    actions: list[ActionType] = Field(
        default_factory=list,
        max_length=len(POLICY_ACTIONS),
        description="Changes the operator may apply: " + ", ".join(a.value for a in POLICY_ACTIONS) + ".",
        json_schema_extra={**_SET_LIST, "items": _string_enum([a.value for a in POLICY_ACTIONS])},
    )
    observation: Observation = Field(default_factory=Observation)
    safety: Safety = Field(default_factory=Safety)

    @field_validator("actions")
    @classmethod
    def _applicable_actions(cls, actions: list[ActionType]) -> list[ActionType]:
        for action in actions:
            if action not in APPLICABLE_ACTIONS:
                allowed = ", ".join(a.value for a in POLICY_ACTIONS)
                raise ValueError(f"spec.actions has {action.value!r}; allowed: {allowed}")
        return _no_duplicates(actions, "spec.actions")

    @model_validator(mode="after")
    def _cross_field_rules(self) -> GPURightsizingPolicySpec:
        """Python twins of `_POLICY_SPEC_RULES`, same order, same messages."""
        actions = set(self.actions)
        mig = (SharingStrategy.MIG_MIXED, SharingStrategy.MIG_SINGLE)
        shared = (SharingStrategy.TIME_SLICING, SharingStrategy.MPS)
        checks = [
            self.mode != PolicyMode.APPLY or bool(actions),
            self.mode != PolicyMode.OFF or not actions,
            not self.dry_run or self.mode == PolicyMode.APPLY,
            ActionType.REPLICAS not in actions or self.safety.min_replicas >= 1,
            ActionType.MIG_PROFILE not in actions
            or (self.safety.sharing_strategy in mig and bool(self.safety.allowed_mig_profiles)),
            ActionType.GPU_SHARING not in actions or self.safety.sharing_strategy in shared,
        ]
        failed = [rule.message for ok, rule in zip(checks, _POLICY_SPEC_RULES, strict=True) if not ok]
        if failed:
            raise ValueError("; ".join(failed))
        return self


class GPURightsizingPolicyStatus(CamelModel):
    """What the operator found when it matched the policy against the cluster."""

    observed_generation: int | None = Field(default=None, ge=0)
    matched_workloads: int = Field(
        default=0, ge=0, description="Workloads this policy governs (it wins for)."
    )
    overlaps: list[str] = Field(
        default_factory=list,
        description="Other policies that can select the same workloads; priority decides, nothing is merged.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    conditions: list[Condition] = Field(default_factory=list, json_schema_extra=_CONDITIONS_EXTRA)


class GPURightsizingPolicy(CamelModel):
    """Cluster-wide rules: which workloads are right-sized, how, and how carefully."""

    KIND: ClassVar[str] = "GPURightsizingPolicy"
    PLURAL: ClassVar[str] = "gpurightsizingpolicies"
    SINGULAR: ClassVar[str] = "gpurightsizingpolicy"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("gpupolicy",)
    SCOPE: ClassVar[str] = "Cluster"

    api_version: Literal["gpurightsizer.io/v1alpha1"] = "gpurightsizer.io/v1alpha1"
    kind: Literal["GPURightsizingPolicy"] = "GPURightsizingPolicy"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: GPURightsizingPolicySpec = Field(default_factory=GPURightsizingPolicySpec)
    status: GPURightsizingPolicyStatus | None = None

    @property
    def name(self) -> str:
        """metadata.name, or '' for an object not yet named."""
        return str(self.metadata.get("name", ""))

    def to_manifest(self) -> dict[str, Any]:
        """The object as the API server stores it: camelCase keys, no null fields."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


#: Every CEL rule in both CRDs, each with a Python twin above that raises the same message.
ALL_CEL_RULES: tuple[CelRule, ...] = (
    _REQUIREMENT_VALUES_RULE,
    _IDLE_BELOW_LOW_RULE,
    _WINDOW_MIN_RULE,
    _CLUSTER_CAP_RULE,
    _WINDOW_END_RULE,
    _MIG_PROFILES_NEED_MIG_RULE,
    *_SAFETY_DURATION_RULES,
    *_POLICY_SPEC_RULES,
)
