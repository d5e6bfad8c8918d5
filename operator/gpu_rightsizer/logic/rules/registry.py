"""One entry per diagnosis code: its rule id, family, severity and whether it may shrink GPU capacity.

The primary order, the data-path gate, the docs table (docs/diagnosis.md, checked by a test) and the
CRD's `primary` enum (`DiagnosisCode`, every member registered exactly once) all derive from `RULES`.
Adding a rule: one module with its check, one line here, one row in the docs table.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpu_rightsizer.model.codes import DiagnosisCode, Severity


class Family(StrEnum):
    """What kind of finding a rule makes; the order of families is the severity order."""

    HEALTH = "health"
    DATA = "data"
    BREAKING = "breaking"  # users suffer now: OOM crashes, queueing
    DATA_PATH = "data-path"  # the GPU is starved: every GPU-shrinking action waits
    IDLE = "idle"
    EFFICIENCY = "efficiency"
    SIZING = "sizing"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class RuleEntry:
    """A diagnosis rule as the registry knows it."""

    code: DiagnosisCode
    rule_id: str  # as in docs/diagnosis.md ("R1", "H0"; "—" for Healthy)
    family: Family
    severity: Severity


#: Severity first: health, missing data, what breaks users now, what starves the GPU, idle (no kernels),
#: efficiency, sizing last (issue "Engine v2", rule 6).
RULES: tuple[RuleEntry, ...] = (
    RuleEntry(DiagnosisCode.HARDWARE_FAULT, "H0", Family.HEALTH, Severity.CRITICAL),
    RuleEntry(DiagnosisCode.THROTTLED, "H1", Family.HEALTH, Severity.CRITICAL),
    RuleEntry(DiagnosisCode.INSUFFICIENT_DATA, "D", Family.DATA, Severity.INFO),
    RuleEntry(DiagnosisCode.MEMORY_CAPACITY_BOUND, "R9", Family.BREAKING, Severity.WARNING),
    RuleEntry(DiagnosisCode.CRASH_LOOPING, "R12", Family.BREAKING, Severity.WARNING),
    RuleEntry(DiagnosisCode.UNDER_REPLICATED, "R10", Family.BREAKING, Severity.WARNING),
    RuleEntry(DiagnosisCode.SERVING_HOST_BOUND, "R13", Family.BREAKING, Severity.WARNING),
    RuleEntry(DiagnosisCode.INPUT_PIPELINE_CPU_BOUND, "R2", Family.DATA_PATH, Severity.WARNING),
    RuleEntry(DiagnosisCode.LAUNCH_BOUND, "R14", Family.DATA_PATH, Severity.WARNING),
    RuleEntry(DiagnosisCode.INPUT_PIPELINE_IO_BOUND, "R2b", Family.DATA_PATH, Severity.WARNING),
    RuleEntry(DiagnosisCode.HOST_TRANSFER_BOUND, "R3", Family.DATA_PATH, Severity.WARNING),
    RuleEntry(DiagnosisCode.COMMUNICATION_BOUND, "R4", Family.DATA_PATH, Severity.WARNING),
    RuleEntry(DiagnosisCode.HOST_WAIT_BOUND, "R15", Family.DATA_PATH, Severity.WARNING),
    RuleEntry(DiagnosisCode.IDLE_ALLOCATION, "R1", Family.IDLE, Severity.WARNING),
    RuleEntry(DiagnosisCode.NO_TENSOR_CORES, "R7", Family.EFFICIENCY, Severity.INFO),
    RuleEntry(DiagnosisCode.MEMORY_BANDWIDTH_BOUND, "R6", Family.EFFICIENCY, Severity.INFO),
    RuleEntry(DiagnosisCode.LOW_OCCUPANCY, "R5", Family.EFFICIENCY, Severity.WARNING),
    RuleEntry(DiagnosisCode.OVERSIZED_GPU, "R8", Family.SIZING, Severity.WARNING),
    RuleEntry(DiagnosisCode.OVER_REPLICATED, "R11", Family.SIZING, Severity.INFO),
    RuleEntry(DiagnosisCode.HEALTHY, "—", Family.NONE, Severity.INFO),
)

BY_CODE: dict[DiagnosisCode, RuleEntry] = {entry.code: entry for entry in RULES}

#: The first code of this order among a window's findings is its primary diagnosis.
PRIMARY_ORDER: tuple[DiagnosisCode, ...] = tuple(entry.code for entry in RULES)

#: Findings that mean the GPU is starved: while one holds, no action shrinks GPU capacity.
DATA_PATH_CODES: frozenset[DiagnosisCode] = frozenset(
    entry.code for entry in RULES if entry.family is Family.DATA_PATH
)

#: Findings that break users now (OOM, crash loops, queueing): while one holds, nothing shrinks either.
BREAKING_CODES: frozenset[DiagnosisCode] = frozenset(
    entry.code for entry in RULES if entry.family is Family.BREAKING
)

#: Hardware health: blocks every action (SPEC §6).
HEALTH_CODES: frozenset[DiagnosisCode] = frozenset(
    entry.code for entry in RULES if entry.family is Family.HEALTH
)
