#!/usr/bin/env bash
# Run checkov from its own virtualenv, kept outside the repository because its dependency set is large
# and must not leak into the project venv. The venv is created on first use; a marker file records a
# complete install, so an interrupted one is redone instead of half-used.
#
#   tests/chart/checkov.sh --print           # install if missing, print the checkov executable path
#   tests/chart/checkov.sh [checkov args]    # run checkov (pass --skip-download to stay offline)
set -euo pipefail

CHECKOV_VERSION=3.3.30
cache_root="${GPU_RIGHTSIZER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-rightsizer}"
venv="$cache_root/checkov-venv-$CHECKOV_VERSION"
exe="$venv/bin/checkov"

if [[ ! -f "$venv/.complete" ]]; then
  echo "[checkov.sh] installing checkov==$CHECKOV_VERSION into $venv (once; takes a few minutes)" >&2
  rm -rf "$venv"
  mkdir -p "$cache_root"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "checkov==$CHECKOV_VERSION" >&2
  "$exe" --version >/dev/null
  touch "$venv/.complete"
fi

if [[ "${1:-}" == "--print" ]]; then
  echo "$exe"
  exit 0
fi
exec "$exe" "$@"
