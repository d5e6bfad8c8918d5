"""One entry per diagnosis code: its rule id, family, severity, the actions it may propose and the vetoes
that name it as their suspected cause.

The primary order, the data-path and breaking gates, the harm kinds (`sim/harm.py`), the docs tables
(docs/diagnosis.md, checked by tests) and the CRD's `primary` enum (`DiagnosisCode`, every member
registered exactly once) all derive from `RULES`. `recommend` drops any action a finding's entry does
not list. Adding a rule: one module with its check, one line here, one row in each docs table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from gpu_rightsizer.logic.figures import WorkloadFigures
from gpu_rightsizer.logic.rules.common import FindingBuilder
from gpu_rightsizer.logic.rules.data_path import check_data_path
from gpu_rightsizer.logic.rules.efficiency import check_efficiency
from gpu_rightsizer.logic.rules.failures import check_failures
from gpu_rightsizer.logic.rules.health import check_health
from gpu_rightsizer.logic.rules.healthy import check_healthy
from gpu_rightsizer.logic.rules.idle import check_idle
from gpu_rightsizer.logic.rules.serving import check_serving
from gpu_rightsizer.logic.rules.sizing import check_sizing
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import ActionType, DiagnosisCode, Severity

#: A rule module's check: adds its findings for the window's figures (one module may find several codes).
Check = Callable[[WorkloadFigures, EngineSettings, FindingBuilder], None]


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
    #: The check that finds it; None where only a veto's suspected cause (HostWaitBound) or the data
    #: gate (InsufficientData, logic/rules/insufficient_data.py) does.
    check: Check | None = None


_A = ActionType
_SOFTWARE = frozenset({_A.SOFTWARE})
_CPU_VETOES = frozenset({"cpuPinnedCore", "cpuNearLimit", "cpuThrottled", "cpuPressure", "cpuPlateau"})
_R, _F, _S = RuleEntry, Family, Severity

#: Severity first: health, missing data, what breaks users now, what starves the GPU, idle (no kernels),
#: efficiency, sizing last (issue "Engine v2", rule 6).
RULES: tuple[RuleEntry, ...] = (
    _R(DiagnosisCode.HARDWARE_FAULT, "H0", _F.HEALTH, _S.CRITICAL, check=check_health),
    _R(DiagnosisCode.THROTTLED, "H1", _F.HEALTH, _S.CRITICAL, check=check_health),
    _R(DiagnosisCode.INSUFFICIENT_DATA, "D", _F.DATA, _S.INFO),
    _R(DiagnosisCode.MEMORY_CAPACITY_BOUND, "R9", _F.BREAKING, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.MIG_PROFILE, _A.GPU_MODEL, _A.GPU_COUNT}), frozenset({"gpuMemoryFull"}),
       check=check_sizing),
    _R(DiagnosisCode.CRASH_LOOPING, "R12", _F.BREAKING, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.MEMORY}), frozenset({"crashLoop", "containerRestart", "hostMemoryNearLimit"}),
       check=check_failures),
    _R(DiagnosisCode.UNDER_REPLICATED, "R10", _F.BREAKING, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.REPLICAS, _A.HPA_BOUNDS}), frozenset({"sustainedQueue"}),
       check=check_serving),
    _R(DiagnosisCode.SERVING_HOST_BOUND, "R13", _F.BREAKING, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.CPU}), _CPU_VETOES | {"sustainedQueue"}, check=check_serving),
    _R(DiagnosisCode.INPUT_PIPELINE_CPU_BOUND, "R2", _F.DATA_PATH, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.CPU, _A.MEMORY}), _CPU_VETOES, check=check_data_path),
    _R(DiagnosisCode.LAUNCH_BOUND, "R14", _F.DATA_PATH, _S.WARNING, _SOFTWARE, check=check_data_path),
    _R(DiagnosisCode.INPUT_PIPELINE_IO_BOUND, "R2b", _F.DATA_PATH, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.INFRASTRUCTURE}), frozenset({"ioReads", "ioPressure"}), check=check_data_path),
    _R(DiagnosisCode.HOST_TRANSFER_BOUND, "R3", _F.DATA_PATH, _S.WARNING, _SOFTWARE,
       frozenset({"hostTransfers"}), check=check_data_path),
    _R(DiagnosisCode.COMMUNICATION_BOUND, "R4", _F.DATA_PATH, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.INFRASTRUCTURE}), frozenset({"communication"}), check=check_data_path),
    _R(DiagnosisCode.HOST_WAIT_BOUND, "R15", _F.DATA_PATH, _S.WARNING, _SOFTWARE, frozenset({"hostWait"})),
    _R(DiagnosisCode.IDLE_ALLOCATION, "R1", _F.IDLE, _S.WARNING,
       frozenset({_A.RELEASE_IDLE, _A.MIG_PROFILE, _A.GPU_SHARING}), check=check_idle),
    _R(DiagnosisCode.NO_TENSOR_CORES, "R7", _F.EFFICIENCY, _S.INFO, _SOFTWARE, check=check_efficiency),
    _R(DiagnosisCode.MEMORY_BANDWIDTH_BOUND, "R6", _F.EFFICIENCY, _S.INFO, frozenset({_A.SOFTWARE, _A.GPU_MODEL}),
       check=check_efficiency),
    _R(DiagnosisCode.LOW_OCCUPANCY, "R5", _F.EFFICIENCY, _S.WARNING, _SOFTWARE, check=check_efficiency),
    _R(DiagnosisCode.OVERSIZED_GPU, "R8", _F.SIZING, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.MIG_PROFILE, _A.GPU_SHARING}), check=check_sizing),
    _R(DiagnosisCode.OVER_REPLICATED, "R11", _F.SIZING, _S.INFO, frozenset({_A.REPLICAS, _A.HPA_BOUNDS}),
       check=check_serving),
    _R(DiagnosisCode.HEALTHY, "—", _F.NONE, _S.INFO, check=check_healthy),
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


def _checks_of(families: frozenset[Family]) -> tuple[Check, ...]:
    """The distinct checks of the rules in `families`, in registry order."""
    return tuple(dict.fromkeys(e.check for e in RULES if e.family in families and e.check is not None))


#: Hardware health checks: they run first, and a finding stops evaluation.
HEALTH_CHECKS: tuple[Check, ...] = _checks_of(frozenset({Family.HEALTH}))
#: Workload checks: they run once the window is healthy and its data complete (their findings are
#: ranked by `PRIMARY_ORDER` afterwards, so their order does not matter).
WORKLOAD_CHECKS: tuple[Check, ...] = _checks_of(frozenset(Family) - {Family.HEALTH, Family.DATA, Family.NONE})
#: Run when nothing else found anything.
HEALTHY_CHECKS: tuple[Check, ...] = _checks_of(frozenset({Family.NONE}))
