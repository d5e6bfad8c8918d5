#!/usr/bin/env bash
# The demo on a fresh machine: install what it needs, then `gpu-rightsizer demo` (extra arguments go to it).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
hack/bootstrap.sh
export GPU_RIGHTSIZER_TESTBINS="$(hack/testbins/build.sh --print)"
exec .venv/bin/gpu-rightsizer demo "$@"
