"""The actuator's own record of a workload's changes: one namespaced `GPURightsizingChange` per workload.

Only the actuator's ServiceAccount may create or write it (the chart's RBAC); the recommender's can
neither create nor patch it, so nothing the recommender (or anyone with rights on GPURecommendation
statuses) writes can become the actuator's intent, baseline or history. The GPURecommendation's
`status.apply` only mirrors the state and names this object in `change`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from gpu_rightsizer.model.crd import _CONDITIONS_EXTRA, ApplyStatus, Condition, TargetRef
from gpu_rightsizer.model.result import CamelModel

#: Condition type set False when a recorded change failed validation before a write.
RECORD_VALID_CONDITION = "RecordValid"


class GPURightsizingChangeSpec(CamelModel):
    """Which workload the record belongs to; a recreated workload (new uid) does not inherit it."""

    target_ref: TargetRef
    workload_uid: str = Field(
        max_length=64, description="metadata.uid of the workload the changes were made to."
    )
    recommendation: str = Field(
        default="", max_length=253, description="The GPURecommendation it carries out."
    )


class GPURightsizingChangeStatus(ApplyStatus):
    """The change in flight (intent, patch, rollback), its verification bookkeeping and the history."""

    failed_reads: int = Field(
        default=0, ge=0, description="Consecutive verification reads that gave no usable figures."
    )
    last_read_error: str | None = Field(default=None, description="Why the last verification read failed.")
    template_hash: str | None = Field(
        default=None,
        max_length=64,
        description="Digest of the pod template our last write left (superseded when it differs).",
    )
    replicas: int | None = Field(
        default=None, ge=0, description="Pods the change restarts (the disruption budget)."
    )
    rollback_counts: bool | None = Field(
        default=None,
        description="Whether the recorded rollback counts toward maxRollbacks (not for inconclusive changes).",
    )
    conditions: list[Condition] = Field(default_factory=list, json_schema_extra=_CONDITIONS_EXTRA)


class GPURightsizingChange(CamelModel):
    """The actuator's change record for one workload: written only by the actuator's identity."""

    KIND: ClassVar[str] = "GPURightsizingChange"
    PLURAL: ClassVar[str] = "gpurightsizingchanges"
    SINGULAR: ClassVar[str] = "gpurightsizingchange"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("gpuchange",)
    SCOPE: ClassVar[str] = "Namespaced"

    api_version: Literal["gpurightsizer.io/v1alpha1"] = "gpurightsizer.io/v1alpha1"
    kind: Literal["GPURightsizingChange"] = "GPURightsizingChange"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: GPURightsizingChangeSpec
    status: GPURightsizingChangeStatus | None = None
