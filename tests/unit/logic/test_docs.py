"""docs/diagnosis.md must match the code: every code, every rule position and every setting default."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic.alias_generators import to_camel

from gpu_rightsizer.logic.diagnose import PRIMARY_ORDER
from gpu_rightsizer.logic.thresholds import EngineSettings
from gpu_rightsizer.model.codes import ActionType, DiagnosisCode

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
