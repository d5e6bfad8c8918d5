#!/usr/bin/env bash
# The demo on a fresh machine: install what it needs, then `gpu-rightsizer demo` (extra arguments go to it).
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib.sh
source "$root/hack/lib.sh"
cd "$root"
step "installing what the demo needs" "see the line above from bootstrap.sh"
hack/bootstrap.sh
export GPU_RIGHTSIZER_TESTBINS="$(hack/testbins/build.sh --print)"
exec .venv/bin/gpu-rightsizer demo "$@"
