#!/usr/bin/env bash
# Install what gpu-rightsizer's tests and demo need on a fresh Debian machine, idempotently:
# Debian packages (prometheus + promtool, GNU time), the Python virtualenv .venv with the package
# and its test extras, and the pinned cluster binaries (built once, cached outside the repository).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
log() { printf '[bootstrap %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

missing_debs=()
command -v prometheus >/dev/null 2>&1 || missing_debs+=(prometheus)
command -v promtool >/dev/null 2>&1 || missing_debs+=(prometheus)
[[ -x /usr/bin/time ]] || missing_debs+=(time)
if [[ ${#missing_debs[@]} -gt 0 ]]; then
  log "installing Debian packages: ${missing_debs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing_debs[@]}" >/dev/null
fi

stamp=".venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [[ ! -f "$stamp" ]]; then
  log "creating the virtualenv .venv (package + test extras) ..."
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test]'
  rm -f .venv/.installed-*
  touch "$stamp"
  log "virtualenv ready"
fi

hack/testbins/build.sh >/dev/null
