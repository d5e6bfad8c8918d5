"""The README's commands on a brand-new machine: no caches, no Go build cache, nothing built before.

`build.sh --plan` and `bootstrap.sh --plan` run every check the real commands run, against empty
temporary HOME/XDG/Go folders, and compile nothing. A `set -e` trap that ends a script silently on a
fresh machine (a command substitution over a folder that does not exist yet) fails these tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD = REPO_ROOT / "hack" / "testbins" / "build.sh"
BOOTSTRAP = REPO_ROOT / "hack" / "bootstrap.sh"
LIB = REPO_ROOT / "hack" / "lib.sh"
EXPECTED_PLAN = [
    "plan: build kube-apiserver kube-controller-manager kube-scheduler: kubernetes v1.36.3",
    "plan: build etcd: v3.6.16",
    "plan: build kwok kwokctl: v0.8.0",
    "plan: build helm: v3.22.0",
    "plan: fetch kubectl: 1.36.3",
]


def _fresh_environment(tmp_path: Path) -> tuple[dict[str, str], list[Path]]:
    """The environment of a new user: every cache folder points at a path that does not exist yet."""
    folders = {name: tmp_path / name.lower() / "not-yet" for name in ("GOCACHE", "GOMODCACHE", "GOPATH")}
    home = tmp_path / "home"
    xdg = tmp_path / "xdg-cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_RIGHTSIZER_", "GO"))}
    env.update({name: str(path) for name, path in folders.items()})
    env.update({"HOME": str(home), "XDG_CACHE_HOME": str(xdg)})
    return env, [*folders.values(), xdg]


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_build_plan_passes_on_a_fresh_machine_and_builds_nothing(tmp_path: Path) -> None:
    env, cache_folders = _fresh_environment(tmp_path)

    result = _run([str(BUILD), "--plan"], env)

    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    for line in EXPECTED_PLAN:
        assert line in result.stdout, f"missing {line!r} in:\n{result.stdout}"
    assert f"cache {tmp_path / 'xdg-cache' / 'gpu-rightsizer' / 'testbins'}" in result.stdout
    assert "(will be created)" in result.stdout
    assert "free disk:" in result.stdout
    for folder in cache_folders:
        assert not folder.exists(), f"--plan created {folder}"


def test_bootstrap_plan_passes_on_a_fresh_machine(tmp_path: Path) -> None:
    env, cache_folders = _fresh_environment(tmp_path)

    result = _run([str(BOOTSTRAP), "--plan"], env)

    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "plan: " in result.stdout and "virtualenv" in result.stdout
    for line in EXPECTED_PLAN:
        assert line in result.stdout
    for folder in cache_folders:
        assert not folder.exists()


def test_build_plan_failing_check_says_what_and_what_to_do(tmp_path: Path) -> None:
    env, _ = _fresh_environment(tmp_path)
    env["GPU_RIGHTSIZER_MIN_FREE_GB"] = str(10**9)

    result = _run([str(BUILD), "--plan"], env)

    assert result.returncode == 1
    failed = [line for line in result.stderr.splitlines() if "FAILED" in line]
    assert len(failed) == 1, result.stderr
    assert "checking free disk" in failed[0] and "GiB free" in failed[0] and "What to do:" in failed[0]


def test_unknown_argument_is_refused_with_a_message(tmp_path: Path) -> None:
    env, _ = _fresh_environment(tmp_path)

    result = _run([str(BUILD), "--bogus"], env)

    assert result.returncode == 1
    assert "unknown argument '--bogus'" in result.stderr and "--plan" in result.stderr


@pytest.mark.parametrize(
    ("body", "failing"),
    [
        (
            'value="$(df -Pk /does/not/exist | tail -1)"',
            "exited with code 1 (line 3)",
        ),
        ("false | cat", "pipeline exit codes 1 0"),
    ],
)
def test_lib_reports_a_silent_set_e_exit(tmp_path: Path, body: str, failing: str) -> None:
    """The class of failure behind a silent exit: a failing substitution or pipeline under set -e."""
    script = tmp_path / "script.sh"
    script.write_text(f'source "{LIB}"\nstep "doing the thing" "fix the thing"\n{body}\necho reached\n')

    result = _run([str(script)], dict(os.environ))

    assert result.returncode != 0 and "reached" not in result.stdout
    lines = [line for line in result.stderr.splitlines() if "FAILED" in line]
    assert len(lines) == 1, result.stderr
    assert "doing the thing" in lines[0] and "fix the thing" in lines[0] and failing in lines[0]


def test_free_gib_measures_the_nearest_existing_parent(tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    missing = tmp_path / "a" / "b" / "c"
    script.write_text(f'source "{LIB}"\nnearest_existing "{missing}"\nfree_gib "{missing}"\n')

    result = _run([str(script)], dict(os.environ))

    assert result.returncode == 0, result.stderr
    nearest, free = result.stdout.split()
    assert nearest == str(tmp_path) and int(free) >= 0


def _stub(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/usr/bin/env bash\n{body}\n")
    path.chmod(0o755)


@pytest.mark.parametrize(
    ("failing", "phase"),
    [
        ("pytest", "running the tests (pytest)"),
        ("lint-imports", "checking import contracts (lint-imports)"),
        ("mypy", "type checking (mypy --strict)"),
    ],
)
def test_test_sh_names_the_phase_that_failed(tmp_path: Path, failing: str, phase: str) -> None:
    """hack/test.sh itself, with every tool it runs stubbed: exactly one FAILED line, naming the phase
    whose command failed (a pytest failure was once blamed on the import-linter phase before it)."""
    root = tmp_path / "checkout"
    (root / "hack").mkdir(parents=True)
    for script in ("test.sh", "lib.sh"):
        shutil.copy2(REPO_ROOT / "hack" / script, root / "hack" / script)
    _stub(root / "hack" / "bootstrap.sh", "exit 0")
    _stub(root / "hack" / "testbins" / "build.sh", f"echo {tmp_path / 'bins'}")
    for tool in ("ruff", "mypy", "lint-imports", "pytest"):
        _stub(root / ".venv" / "bin" / tool, f"echo {tool} ran; exit {1 if tool == failing else 0}")

    result = _run([str(root / "hack" / "test.sh")], dict(os.environ))

    assert result.returncode == 1, result.stdout + result.stderr
    failed = [line for line in result.stderr.splitlines() if "FAILED" in line]
    assert len(failed) == 1, result.stderr
    assert f"FAILED while {phase}" in failed[0] and f"`{failing}" in failed[0], failed[0]
    assert "pytest ran" in result.stdout if failing == "pytest" else "pytest ran" not in result.stdout
