"""One entry per diagnosis code: its rule id, family, severity, the actions it may propose and the vetoes
that name it as their suspected cause.

The primary order, the data-path and breaking gates, the harm kinds (`sim/harm.py`), the docs tables
(docs/diagnosis.md, checked by tests) and the CRD's `primary` enum (`DiagnosisCode`, every member
registered exactly once) all derive from `RULES`. `recommend` drops any action a finding's entry does
not list. Adding a rule: one module with its check, one line here, one row in each docs table.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpu_rightsizer.model.codes import ActionType, DiagnosisCode, Severity


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
    actions: frozenset[ActionType] = frozenset()  # what its findings may propose
    vetoes: frozenset[str] = frozenset()  # logic/vetoes.py names whose suspected cause is this code


_A = ActionType
_SOFTWARE = frozenset({_A.SOFTWARE})
_CPU_VETOES = frozenset({"cpuPinnedCore", "cpuNearLimit", "cpuThrottled", "cpuPressure", "cpuPlateau"})
_R, _F, _S = RuleEntry, Family, Severity

#: Severity first: health, missing data, what breaks users now, what starves the GPU, idle (no kernels),
#: efficiency, sizing last (issue "Engine v2", rule 6).
RULES: tuple[RuleEntry, ...] = (
    _R(DiagnosisCode.HARDWARE_FAULT, "H0", _F.HEALTH, _S.CRITICAL),
    _R(DiagnosisCode.THROTTLED, "H1", _F.HEALTH, _S.CRITICAL),
    _R(DiagnosisCode.INSUFFICIENT_DATA, "D", _F.DATA, _S.INFO),
    _R(DiagnosisCode.MEMORY_CAPACITY_BOUND, "R9", _F.BREAKING, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.MIG_PROFILE, _A.GPU_MODEL, _A.GPU_COUNT}), frozenset({"gpuMemoryFull"})),
    _R(DiagnosisCode.CRASH_LOOPING, "R12", _F.BREAKING, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.MEMORY}), frozenset({"crashLoop", "hostMemoryNearLimit"})),
    _R(DiagnosisCode.UNDER_REPLICATED, "R10", _F.BREAKING, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.REPLICAS, _A.HPA_BOUNDS}), frozenset({"sustainedQueue"})),
    _R(DiagnosisCode.SERVING_HOST_BOUND, "R13", _F.BREAKING, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.CPU}), _CPU_VETOES | {"sustainedQueue"}),
    _R(DiagnosisCode.INPUT_PIPELINE_CPU_BOUND, "R2", _F.DATA_PATH, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.CPU, _A.MEMORY}), _CPU_VETOES),
    _R(DiagnosisCode.LAUNCH_BOUND, "R14", _F.DATA_PATH, _S.WARNING, _SOFTWARE),
    _R(DiagnosisCode.INPUT_PIPELINE_IO_BOUND, "R2b", _F.DATA_PATH, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.INFRASTRUCTURE}), frozenset({"ioReads", "ioPressure"})),
    _R(DiagnosisCode.HOST_TRANSFER_BOUND, "R3", _F.DATA_PATH, _S.WARNING, _SOFTWARE,
       frozenset({"hostTransfers"})),
    _R(DiagnosisCode.COMMUNICATION_BOUND, "R4", _F.DATA_PATH, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.INFRASTRUCTURE}), frozenset({"communication"})),
    _R(DiagnosisCode.HOST_WAIT_BOUND, "R15", _F.DATA_PATH, _S.WARNING, _SOFTWARE, frozenset({"hostWait"})),
    _R(DiagnosisCode.IDLE_ALLOCATION, "R1", _F.IDLE, _S.WARNING,
       frozenset({_A.RELEASE_IDLE, _A.MIG_PROFILE, _A.GPU_SHARING})),
    _R(DiagnosisCode.NO_TENSOR_CORES, "R7", _F.EFFICIENCY, _S.INFO, _SOFTWARE),
    _R(DiagnosisCode.MEMORY_BANDWIDTH_BOUND, "R6", _F.EFFICIENCY, _S.INFO, frozenset({_A.SOFTWARE, _A.GPU_MODEL})),
    _R(DiagnosisCode.LOW_OCCUPANCY, "R5", _F.EFFICIENCY, _S.WARNING, _SOFTWARE),
    _R(DiagnosisCode.OVERSIZED_GPU, "R8", _F.SIZING, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.MIG_PROFILE, _A.GPU_SHARING})),
    _R(DiagnosisCode.OVER_REPLICATED, "R11", _F.SIZING, _S.INFO, frozenset({_A.REPLICAS, _A.HPA_BOUNDS})),
    _R(DiagnosisCode.HEALTHY, "—", _F.NONE, _S.INFO),
)  # fmt: skip

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
