#!/usr/bin/env bash
# Install what gpu-rightsizer's tests and demo need on a fresh Debian machine, idempotently:
# Debian packages (prometheus + promtool, GNU time, chromium for the HTML report's test), the Python
# virtualenv .venv with the package and its test extras, and the pinned cluster binaries (built once,
# cached outside the repository).
#
#   hack/bootstrap.sh          # install what is missing
#   hack/bootstrap.sh --plan   # run every check, print what it would install, install nothing
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib.sh
source "$root/hack/lib.sh"
cd "$root"
log() { printf '[bootstrap %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

mode=install
case "${1:-}" in
  "") ;;
  --plan) mode=plan ;;
  *) die "unknown argument '$1'" "run it with no argument or --plan" ;;
esac

step "checking Python" "install Python 3.11 or newer as python3"
command -v python3 >/dev/null 2>&1 || die "python3 is not on PATH"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "$(python3 --version 2>&1) is older than 3.11"

missing_debs=()
command -v prometheus >/dev/null 2>&1 || missing_debs+=(prometheus)
command -v promtool >/dev/null 2>&1 || [[ " ${missing_debs[*]} " == *" prometheus "* ]] || missing_debs+=(prometheus)
[[ -x /usr/bin/time ]] || missing_debs+=(time)
command -v chromium >/dev/null 2>&1 || missing_debs+=(chromium) # headless: tests/unit/commands/test_report_html.py

stamp=".venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)"

if [[ $mode == plan ]]; then
  if [[ ${#missing_debs[@]} -gt 0 ]]; then
    command -v apt-get >/dev/null 2>&1 || die "Debian packages ${missing_debs[*]} are missing and apt-get is not available" "install them with your package manager"
    echo "plan: install Debian packages: ${missing_debs[*]}"
  else
    echo "plan: Debian packages present (prometheus, promtool, time, chromium)"
  fi
  if [[ -f $stamp ]]; then echo "plan: virtualenv .venv up to date"; else echo "plan: create the virtualenv .venv (pip install -e '.[test]')"; fi
  step "planning the cluster binaries" "see the line above"
  hack/testbins/build.sh --plan
  exit 0
fi

if [[ ${#missing_debs[@]} -gt 0 ]]; then
  step "installing Debian packages ${missing_debs[*]}" "run 'apt-get update && apt-get install -y ${missing_debs[*]}' as root, then re-run"
  [[ $(id -u) -eq 0 ]] || die "installing Debian packages needs root"
  log "installing Debian packages: ${missing_debs[*]}"
  phase_start=$SECONDS
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing_debs[@]}" >/dev/null
  log "Debian packages installed in $((SECONDS - phase_start)) s"
fi

if [[ ! -f $stamp ]]; then
  step "creating the virtualenv .venv" "check that PyPI is reachable and that python3 has the venv module (Debian: apt-get install python3-venv); delete .venv and re-run"
  log "creating the virtualenv .venv (package + test extras) ..."
  phase_start=$SECONDS
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test]'
  rm -f .venv/.installed-*
  touch "$stamp"
  log "virtualenv ready in $((SECONDS - phase_start)) s"
fi

step "building the cluster binaries" "see the line above from build.sh"
hack/testbins/build.sh >/dev/null
