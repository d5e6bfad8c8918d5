#!/usr/bin/env bash
# The whole test suite: installs what it needs, then lint (ruff, mypy, import-linter) and pytest
# (unit, chart and end-to-end tests on a real local cluster and Prometheus). Extra arguments go to pytest.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib.sh
source "$root/hack/lib.sh"
cd "$root"
start=$SECONDS
phase_start=$SECONDS
# Name the phase that runs now: the timing line, and the step that a failure names (lib.sh's `step`),
# are set together, so a failing command is always blamed on its own phase.
phase() { # phase NAME WHAT FIX
  echo "== $1 (previous phase: $((SECONDS - phase_start)) s)"
  phase_start=$SECONDS
  step "$2" "$3"
}

step "installing what the tests need" "see the line above from bootstrap.sh"
hack/bootstrap.sh
export GPU_RIGHTSIZER_TESTBINS="$(hack/testbins/build.sh --print)"
export PATH="$root/.venv/bin:$GPU_RIGHTSIZER_TESTBINS:$PATH"

phase ruff "linting (ruff check)" "fix the findings above; 'ruff check --fix operator tests bench hack' fixes many"
ruff check operator tests bench hack
phase "ruff format" "checking the format (ruff format)" "run 'ruff format operator tests bench hack'"
ruff format --check operator tests bench hack
phase mypy "type checking (mypy --strict)" "fix the type errors above"
mypy
phase import-linter "checking import contracts (lint-imports)" "keep model/ and logic/ free of I/O libraries; see [tool.importlinter] in pyproject.toml"
lint-imports

phase pytest "running the tests (pytest)" "see the failures listed above; re-run one with 'hack/test.sh -k NAME'"
set +e
pytest -p no:cacheprovider "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then # pytest: no test collected
  if [[ $# -gt 0 ]]; then
    echo "pytest: the selection '$*' matched no test" >&2
    rc=0
  else
    echo "[test.sh] FAILED while collecting tests: pytest collected no test at all. What to do: the suite is broken; run 'pytest --collect-only' to see why" >&2
    rc=1
  fi
fi
echo "== test.sh finished in $((SECONDS - start)) s with exit code $rc (pytest: $((SECONDS - phase_start)) s)"
exit $rc
