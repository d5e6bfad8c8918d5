"""docs/diagnosis.md must match the code: every code, every rule position and every setting default."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic.alias_generators import to_camel

from gpu_rightsizer.logic.diagnose import PRIMARY_ORDER
from gpu_rightsizer.logic.rules.registry import HEALTH_CODES as REGISTRY_HEALTH
from gpu_rightsizer.logic.rules.registry import RULES
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import HEALTH_CODES, ActionType, DiagnosisCode

DOC = Path(__file__).resolve().parents[3] / "docs" / "diagnosis.md"


def _rows() -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in DOC.read_text().splitlines()
        if line.startswith("|")
    ]


def test_rule_table_lists_every_code_in_engine_order() -> None:
    ordered = [row[2].strip("`") for row in _rows() if len(row) == 5 and row[0].isdigit()]
    assert ordered == [code.value for code in PRIMARY_ORDER]
    assert set(ordered) == {code.value for code in DiagnosisCode}


def test_rule_table_matches_the_registry() -> None:
    """Order, rule id, code and severity of every row come from `logic.rules.registry.RULES`."""
    table = [
        (int(row[0]), row[1], row[2].strip("`"), row[4])
        for row in _rows()
        if len(row) == 5 and row[0].isdigit()
    ]
    expected = [
        (index, entry.rule_id, entry.code.value, entry.severity.value)
        for index, entry in enumerate(RULES, start=1)
    ]
    assert table == expected


def test_registry_covers_every_code_once_and_agrees_with_the_health_gate() -> None:
    codes = [entry.code for entry in RULES]
    assert len(codes) == len(set(codes)) == len(DiagnosisCode)
    assert REGISTRY_HEALTH == HEALTH_CODES


def test_settings_table_matches_defaults() -> None:
    table = {row[0].strip("`"): row[1] for row in _rows() if len(row) == 3 and row[0].startswith("`")}
    defaults = EngineSettings()
    for name in EngineSettings.model_fields:
        camel = to_camel(name)
        assert camel in table, camel
        value = getattr(defaults, name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            assert float(table[camel]) == float(value), camel


def test_every_action_type_is_documented() -> None:
    text = DOC.read_text()
    for action in ActionType:
        assert re.search(rf"`{action.value}`", text), action.value


def test_actions_and_vetoes_table_matches_the_registry() -> None:
    table = {
        row[1].strip("`"): (row[3], row[4])
        for row in _rows()
        if len(row) == 5 and row[1].startswith("`") and not row[0].isdigit()
    }
    for entry in RULES:
        actions, vetoes = table[entry.code.value]
        assert {a.strip().strip("`") for a in actions.split(",")} - {"nothing"} == {
            a.value for a in entry.actions
        }, entry.code
        assert {v.strip().strip("`") for v in vetoes.split(",")} - {"—"} == set(entry.vetoes), entry.code
