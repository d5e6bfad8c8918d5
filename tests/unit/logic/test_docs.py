"""docs/diagnosis.md must match the code: every code, every rule position and every setting default."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic.alias_generators import to_camel

from gpu_rightsizer.logic.diagnose import PRIMARY_ORDER
from gpu_rightsizer.logic.rules.registry import HEALTH_CODES as REGISTRY_HEALTH
from gpu_rightsizer.logic.rules.registry import RULES, settings_table
from gpu_rightsizer.logic.thresholds import RULE_SETTING_GROUPS, EngineSettings, documented_settings
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


def test_settings_table_is_the_generated_one() -> None:
    """The table is hack/gen-docs-tables.py's output: every setting, its owning rule and its default."""
    text = DOC.read_text()
    assert settings_table() in text, "docs/diagnosis.md is stale: run hack/gen-docs-tables.py"
    table = {row[0].strip("`"): row for row in _rows() if len(row) == 4 and row[0].startswith("`")}
    defaults = EngineSettings()
    for group, name, _ in documented_settings():
        value = getattr(getattr(defaults, group) if group else defaults, name)
        row = table[to_camel(name)]
        assert row[1] == "engine-wide" if group is None else row[1].endswith(f"(`{to_camel(group)}`)")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            assert float(row[2]) == float(value), name


def test_every_rule_settings_group_belongs_to_a_registered_rule() -> None:
    """A rule's settings are a nested model its registry line names; no group is left without a rule."""
    claimed = {rule.settings for rule in RULES if rule.settings}
    assert claimed == set(RULE_SETTING_GROUPS)
    for rule in RULES:
        if rule.settings_model is not None:
            assert isinstance(rule.settings_of(EngineSettings()), rule.settings_model)


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
