"""The Dockerfile builds a small, pinned, non-root image whose entry point works.

No container engine is needed: the Dockerfile is parsed and checked statically, and the install step it
performs (build a wheel, install it with its runtime dependencies only into a fresh virtualenv, run
`gpu-rightsizer --help`) is reproduced on the host.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO_ROOT / "Dockerfile"
PINNED_PYTHON = re.compile(r"^python:3\.11\.\d+-slim-(bookworm|trixie)$")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    argument: str
    line: int


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped (parser directives included)."""
    instructions: list[Instruction] = []
    buffer, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not buffer and (not stripped or stripped.startswith("#")):
            continue
        if buffer and stripped.startswith("#"):
            continue  # comment lines inside a continued instruction are ignored by Docker
        if not buffer:
            start = number
        if stripped.endswith("\\"):
            buffer += stripped[:-1].rstrip() + " "
            continue
        buffer += stripped
        keyword, _, argument = buffer.partition(" ")
        instructions.append(Instruction(keyword.upper(), argument.strip(), start))
        buffer = ""
    assert not buffer, "Dockerfile ends inside a continued line"
    return instructions


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    result: list[list[Instruction]] = []
    for instruction in instructions:
        if instruction.keyword == "FROM":
            result.append([])
        assert result, f"line {instruction.line}: {instruction.keyword} before the first FROM"
        result[-1].append(instruction)
    return result


@pytest.fixture(scope="module")
def parsed() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE.read_text())


def test_parser_handles_continuations_and_comments() -> None:
    text = "# syntax=docker/dockerfile:1\nFROM a AS b\nRUN one \\\n  # note\n  && two\nUSER 1\n"
    assert parse_dockerfile(text) == [
        Instruction("FROM", "a AS b", 2),
        Instruction("RUN", "one && two", 3),
        Instruction("USER", "1", 6),
    ]


def test_multi_stage_with_pinned_python_base(parsed: list[Instruction]) -> None:
    all_stages = stages(parsed)
    assert len(all_stages) >= 2, "builder and runtime stages expected"
    for stage in all_stages:
        image = stage[0].argument.split()[0]
        assert PINNED_PYTHON.match(image), (
            f"line {stage[0].line}: base image {image!r} is not an exact pinned tag"
        )
    assert all_stages[0][0].argument.split()[-1] == "builder"


def test_runtime_stage_runs_as_non_root_with_the_cli_entrypoint(parsed: list[Instruction]) -> None:
    runtime = stages(parsed)[-1]
    users = [i.argument for i in runtime if i.keyword == "USER"]
    assert users, "the runtime stage sets no USER"
    uid = users[-1].split(":")[0]
    assert uid == "65532", f"USER {users[-1]} must be the numeric non-root uid 65532 (the chart's runAsUser)"
    entrypoints = [i.argument for i in runtime if i.keyword == "ENTRYPOINT"]
    assert entrypoints and json.loads(entrypoints[-1]) == ["gpu-rightsizer"], "ENTRYPOINT must be exec form"
    # the USER comes after every RUN, so nothing after it runs as root by accident
    last_run = max(n for n, i in enumerate(runtime) if i.keyword == "RUN")
    assert last_run < max(n for n, i in enumerate(runtime) if i.keyword == "USER")


def test_no_remote_add_and_no_build_tools_in_runtime(parsed: list[Instruction]) -> None:
    for instruction in parsed:
        if instruction.keyword == "ADD":
            assert not re.search(r"(https?|git)://|git@", instruction.argument), (
                f"line {instruction.line}: ADD of a URL"
            )
    runtime_runs = " ".join(i.argument for i in stages(parsed)[-1] if i.keyword == "RUN")
    assert "--no-index" in runtime_runs, "the runtime stage must install from the builder's wheels only"
    for tool in ("apt-get install", "gcc", "build-essential", "[test]"):
        assert tool not in runtime_runs


def test_dockerignore_keeps_the_context_small() -> None:
    lines = [
        ln.strip()
        for ln in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert lines[0] == "*", "start from an empty context and re-include what the build needs"
    included = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    copied = {
        part.rstrip("/").removeprefix("./")
        for i in parse_dockerfile(DOCKERFILE.read_text())
        if i.keyword == "COPY" and "--from" not in i.argument
        for part in i.argument.split()[:-1]
    }
    assert copied <= included, f"COPY sources excluded by .dockerignore: {copied - included}"


@pytest.mark.slow
def test_wheel_installs_alone_and_cli_runs(tmp_path: Path) -> None:
    """What the image's install step does: wheel -> fresh venv (runtime deps only) -> `gpu-rightsizer --help`."""
    if not (REPO_ROOT / "README.md").exists():
        pytest.skip("README.md (the package's readme) does not exist yet")
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(wheels), str(REPO_ROOT)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = wheels.glob("gpu_rightsizer-*.whl")

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True, clear=True)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", str(wheel)],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]

    clean_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    helped = subprocess.run(
        [str(env_dir / "bin" / "gpu-rightsizer"), "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=tmp_path,
        env=clean_env,
    )
    assert helped.returncode == 0, helped.stderr
    for command in ("run", "analyze", "agent", "demo"):
        assert command in helped.stdout

    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True, check=True
    )
    installed = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert {"kopf", "kubernetes", "pydantic"} <= installed
    assert not installed & {"pytest", "ruff", "mypy", "hypothesis", "kmock", "checkov"}, (
        "test tools leaked into runtime"
    )
