"""One `Rule` per diagnosis code: its rule id, family, severity, the actions it may propose, the vetoes
that name it as their suspected cause, and its settings (a nested model of `EngineSettings`).

The primary order, the data-path and breaking gates, the harm kinds and waiting causes (`sim/harm.py`),
the docs tables (docs/diagnosis.md: the settings table is written by hack/gen-docs-tables.py, the others
checked by tests) and the CRD's diagnosis-code enums (`crdgen`) all derive from `RULES`. `recommend`
drops any action a finding's rule does not list. Adding a rule: one module with its check, its
settings model in `logic/thresholds.py`, one line here, one row in the rule tables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel
from pydantic.alias_generators import to_camel

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
from gpu_rightsizer.logic.thresholds import RULE_SETTING_GROUPS, EngineSettings, documented_settings
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
class Rule:
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
    #: Its settings: the `EngineSettings` field holding its nested model (None: engine-wide ones only).
    settings: str | None = None

    @property
    def settings_model(self) -> type[BaseModel] | None:
        """The pydantic model of its own settings."""
        return RULE_SETTING_GROUPS[self.settings] if self.settings else None

    def settings_of(self, engine: EngineSettings) -> BaseModel | None:
        """Its settings as `engine` sets them."""
        return getattr(engine, self.settings) if self.settings else None


_A = ActionType
_SOFTWARE = frozenset({_A.SOFTWARE})
_CPU_VETOES = frozenset({"cpuPinnedCore", "cpuNearLimit", "cpuThrottled", "cpuPressure", "cpuPlateau"})
_R, _F, _S = Rule, Family, Severity

#: Severity first: health, missing data, what breaks users now, what starves the GPU, idle (no kernels),
#: efficiency, sizing last (issue "Engine v2", rule 6).
RULES: tuple[Rule, ...] = (
    _R(DiagnosisCode.HARDWARE_FAULT, "H0", _F.HEALTH, _S.CRITICAL, check=check_health, settings="health"),
    _R(DiagnosisCode.THROTTLED, "H1", _F.HEALTH, _S.CRITICAL, check=check_health, settings="health"),
    _R(DiagnosisCode.INSUFFICIENT_DATA, "D", _F.DATA, _S.INFO),
    _R(DiagnosisCode.MEMORY_CAPACITY_BOUND, "R9", _F.BREAKING, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.MIG_PROFILE, _A.GPU_MODEL, _A.GPU_COUNT}), frozenset({"gpuMemoryFull"}),
       check=check_sizing, settings="memory_capacity"),
    _R(DiagnosisCode.CRASH_LOOPING, "R12", _F.BREAKING, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.MEMORY}), frozenset({"crashLoop", "containerRestart", "hostMemoryNearLimit"}),
       check=check_failures, settings="crash_looping"),
    _R(DiagnosisCode.UNDER_REPLICATED, "R10", _F.BREAKING, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.REPLICAS, _A.HPA_BOUNDS}), frozenset({"sustainedQueue"}),
       check=check_serving, settings="under_replicated"),
    _R(DiagnosisCode.SERVING_HOST_BOUND, "R13", _F.BREAKING, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.CPU}), _CPU_VETOES | {"sustainedQueue"},
       check=check_serving, settings="under_replicated"),
    _R(DiagnosisCode.INPUT_PIPELINE_CPU_BOUND, "R2", _F.DATA_PATH, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.CPU, _A.MEMORY}), _CPU_VETOES,
       check=check_data_path, settings="input_pipeline"),
    _R(DiagnosisCode.LAUNCH_BOUND, "R14", _F.DATA_PATH, _S.WARNING, _SOFTWARE,
       check=check_data_path, settings="launch_bound"),
    _R(DiagnosisCode.INPUT_PIPELINE_IO_BOUND, "R2b", _F.DATA_PATH, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.INFRASTRUCTURE}), frozenset({"ioReads", "ioPressure"}),
       check=check_data_path, settings="input_pipeline"),
    _R(DiagnosisCode.HOST_TRANSFER_BOUND, "R3", _F.DATA_PATH, _S.WARNING, _SOFTWARE,
       frozenset({"hostTransfers"}), check=check_data_path, settings="host_transfer"),
    _R(DiagnosisCode.COMMUNICATION_BOUND, "R4", _F.DATA_PATH, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.INFRASTRUCTURE}), frozenset({"communication"}),
       check=check_data_path, settings="communication"),
    _R(DiagnosisCode.HOST_WAIT_BOUND, "R15", _F.DATA_PATH, _S.WARNING, _SOFTWARE, frozenset({"hostWait"}),
       settings="host_wait"),
    _R(DiagnosisCode.IDLE_ALLOCATION, "R1", _F.IDLE, _S.WARNING,
       frozenset({_A.RELEASE_IDLE, _A.MIG_PROFILE, _A.GPU_SHARING}), check=check_idle, settings="idle"),
    _R(DiagnosisCode.NO_TENSOR_CORES, "R7", _F.EFFICIENCY, _S.INFO, _SOFTWARE,
       check=check_efficiency, settings="no_tensor_cores"),
    _R(DiagnosisCode.MEMORY_BANDWIDTH_BOUND, "R6", _F.EFFICIENCY, _S.INFO, frozenset({_A.SOFTWARE, _A.GPU_MODEL}),
       check=check_efficiency, settings="memory_bandwidth"),
    _R(DiagnosisCode.LOW_OCCUPANCY, "R5", _F.EFFICIENCY, _S.WARNING, _SOFTWARE,
       check=check_efficiency, settings="occupancy"),
    _R(DiagnosisCode.OVERSIZED_GPU, "R8", _F.SIZING, _S.WARNING,
       frozenset({_A.SOFTWARE, _A.MIG_PROFILE, _A.GPU_SHARING}), check=check_sizing, settings="oversized"),
    _R(DiagnosisCode.OVER_REPLICATED, "R11", _F.SIZING, _S.INFO, frozenset({_A.REPLICAS, _A.HPA_BOUNDS}),
       check=check_serving, settings="over_replicated"),
    _R(DiagnosisCode.HEALTHY, "—", _F.NONE, _S.INFO, check=check_healthy),
)  # fmt: skip

BY_CODE: dict[DiagnosisCode, Rule] = {entry.code: entry for entry in RULES}

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

#: What the GPU waits on: the data path, and a server's host. An advice-only result that names one of
#: these withholds a shrink rightly (`sim.harm.WAITING_CAUSES`).
WAITING_CODES: frozenset[DiagnosisCode] = DATA_PATH_CODES | {DiagnosisCode.SERVING_HOST_BOUND}


def _default_text(value: object) -> str:
    if isinstance(value, frozenset):
        return ", ".join(str(v) for v in sorted(value))
    return str(value)


def settings_table() -> str:
    """docs/diagnosis.md's settings table, from the settings models and the rules that own them."""
    owners: dict[str, list[str]] = {}
    for rule in RULES:
        if rule.settings:
            owners.setdefault(rule.settings, []).append(rule.rule_id)
    lines = [
        "| Setting (policy name) | Rule (nested under) | Default | Meaning and source |",
        "|---|---|---|---|",
    ]
    for group, name, info in documented_settings():
        owner = f"{', '.join(owners[group])} (`{to_camel(group)}`)" if group else "engine-wide"
        description = (info.description or "").replace("|", "\\|")
        lines.append(
            f"| `{to_camel(name)}` | {owner} | {_default_text(info.get_default())} | {description} |"
        )
    return "\n".join(lines) + "\n"
