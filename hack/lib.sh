# Sourced by every hack/*.sh script: strict mode, and one line saying what failed and what to do
# whenever a script stops early, instead of a silent `set -e` exit.
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   step "building etcd" "check that the Go module proxy is reachable, then re-run"
#   die "only 3 GiB free" "free some disk and re-run"   # explicit early exit, same one-line format
set -Eeuo pipefail

_hack_script="$(basename "$0")"
_hack_what="starting"
_hack_fix="re-run with 'bash -x $0' to see the failing command"

# Name the step that runs now and what a user should do if it fails.
step() {
  _hack_what="$1"
  _hack_fix="${2:-re-run with 'bash -x $0' to see the failing command}"
}

# Stop with one line: what failed, and what to do.
die() {
  printf '[%s] FAILED while %s: %s. What to do: %s\n' "$_hack_script" "$_hack_what" "$1" "${2:-$_hack_fix}" >&2
  exit 1
}

_hack_on_error() {
  local rc=$1 line=$2 cmd=$3 statuses=$4 where
  # A failing subshell or command substitution is reported once, by the shell that started it.
  [[ $BASH_SUBSHELL -gt 0 ]] && return 0
  where="line $line"
  [[ $statuses == *" "* ]] && where="$where, pipeline exit codes $statuses"
  printf '[%s] FAILED while %s: `%s` exited with code %s (%s). What to do: %s\n' \
    "$_hack_script" "$_hack_what" "$cmd" "$rc" "$where" "$_hack_fix" >&2
}
trap '_hack_on_error $? $LINENO "$BASH_COMMAND" "${PIPESTATUS[*]}"' ERR

# The path itself if it exists, else its nearest existing parent (a fresh machine has no caches yet).
nearest_existing() {
  local path="$1"
  while [[ ! -e "$path" && "$path" != "/" && "$path" != "." ]]; do
    path="$(dirname "$path")"
  done
  printf '%s\n' "$path"
}

# Whole GiB free on the file system that holds (or will hold) the path; empty when df cannot tell.
free_gib() {
  df -Pk "$(nearest_existing "$1")" 2>/dev/null | awk 'NR == 2 {print int($4 / 1048576)}' || true
}
