#!/usr/bin/env bash
# The whole test suite: installs what it needs, then lint (ruff, mypy, import-linter) and pytest
# (unit, chart and end-to-end tests on a real local cluster and Prometheus). Extra arguments go to pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
start=$SECONDS
hack/bootstrap.sh
export GPU_RIGHTSIZER_TESTBINS="$(hack/testbins/build.sh --print)"
export PATH="$root/.venv/bin:$GPU_RIGHTSIZER_TESTBINS:$PATH"

echo "== ruff"; ruff check operator tests bench hack
echo "== ruff format"; ruff format --check operator tests bench hack
echo "== mypy"; mypy
echo "== import-linter"; lint-imports

echo "== pytest"
set +e
pytest -p no:cacheprovider "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then  # pytest: no test collected
  if [[ $# -gt 0 ]]; then
    echo "pytest: the selection '$*' matched no test" >&2; rc=0
  else
    echo "pytest collected no test at all: the suite is broken" >&2; rc=1
  fi
fi
echo "== test.sh finished in $((SECONDS - start)) s with exit code $rc"
exit $rc
