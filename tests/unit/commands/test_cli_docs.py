"""docs/cli.md and README's commands table must match the code: every discovery and explain option,
every discovery selector, every GPURecommendation printer column."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from gpu_rightsizer.adapters.prometheus_discovery import ACCESS_MODES, SELECTORS
from gpu_rightsizer.cli import SUBCOMMANDS
from gpu_rightsizer.commands import explain
from gpu_rightsizer.commands.prometheus_access import add_connection_arguments
from gpu_rightsizer.crdgen import RECOMMENDATION_COLUMNS

ROOT = Path(__file__).resolve().parents[3]
CLI_DOC = (ROOT / "docs" / "cli.md").read_text()
README = (ROOT / "README.md").read_text()


def _long_options(parser: argparse.ArgumentParser) -> set[str]:
    return {
        option
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }


def _commands_row(command: str) -> str:
    rows = [line for line in README.splitlines() if line.startswith(f"| `gpu-rightsizer {command}")]
    assert len(rows) == 1, f"README's commands table has no single row for {command}"
    return rows[0]


def test_every_subcommand_has_a_readme_row() -> None:
    for command in SUBCOMMANDS:
        _commands_row(command)


def test_every_connection_and_explain_option_is_in_the_cli_doc() -> None:
    parser = argparse.ArgumentParser()
    explain.add_arguments(parser)
    for option in _long_options(parser):
        assert f"`{option}" in CLI_DOC, option
    connection = argparse.ArgumentParser()
    add_connection_arguments(connection)
    assert _long_options(connection) <= _long_options(parser)


def test_discovery_flags_and_explain_are_in_the_readme_table() -> None:
    analyze_row = _commands_row("analyze")
    for option in ("--kubeconfig", "--context", "--prometheus-namespace", "--prometheus-access"):
        assert f"`{option}" in analyze_row, option
    explain_row = _commands_row("explain")
    for option in ("-n", "--context", "--width"):
        assert f"`{option}`" in explain_row, option


def test_every_selector_and_access_mode_is_documented() -> None:
    for selector, _ in SELECTORS:
        assert f"| `{selector}` |" in CLI_DOC, selector
    for mode in ACCESS_MODES:
        assert f"**`{mode}`**" in CLI_DOC, mode


def test_every_printer_column_is_in_the_columns_table() -> None:
    section = CLI_DOC.split("## `kubectl get gpurecommendations`", 1)[1]
    table = re.findall(r"^\| `([A-Z0-9 -]+)`", section, flags=re.MULTILINE)
    assert table == [column["name"].upper() for column in RECOMMENDATION_COLUMNS]
