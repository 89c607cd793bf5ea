#!/usr/bin/env bash
# Builds the e2e rig (a real control plane and container runtime) from package registries only:
# Go modules through the module proxy (containerd, runc and the reference CNI plugins included) and
# libseccomp's headers from Debian for runc. Everything lands in the git-ignored .e2e-cache/, and
# each component is skipped when its stamp matches, so only the first run pays. Prints one line per
# component (its build time, or "cached"); the build output goes to $CACHE/build.log, whose last
# lines are printed when a component fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
RIG_SRC="$ROOT/test/e2e/rig"
CACHE="${E2E_CACHE:-$ROOT/.e2e-cache}"
BIN="$CACHE/bin"
WORK="$CACHE/work"
GO="${GO:-/usr/local/go/bin/go}"

ETCD_VERSION="v3.6.16"
KUBERNETES_VERSION="v1.34.12"
STAGING_VERSION="v0.34.12"
CRI_TOOLS_VERSION="v1.34.0"
CNI_VERSION="v1.3.0"
HELM_VERSION="v3.19.0"
# containerd 2.3 is the LTS line (until April 2028) and still runs on cgroup v1 (deprecated, not removed).
CONTAINERD_VERSION="v2.3.7"
# The runc release containerd's own CI pins for this containerd (its script/setup/runc-version).
RUNC_VERSION="v1.5.2"
# Reference plugins that answer the CNI 1.1.0 STATUS verb (Debian's 1.1.1 do not).
CNI_PLUGINS_VERSION="v1.10.0"
CNI_PLUGINS=(main/bridge main/loopback main/ptp ipam/host-local meta/portmap)
PAUSE_IMAGE="localhost/istio-cni-e2e/pause:v1"

# The staging modules k8s.io/kubernetes replaces with ./staging/src/k8s.io/*: a module zip
# cannot carry them, so the throwaway module pins each to its published twin.
STAGING_MODULES=(
  api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
  cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
  cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms
  kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
  mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller
)

mkdir -p "$BIN" "$WORK"
# The cache may be shared by several checkouts (mk/e2e.mk, E2E_SHARED_CACHE): one build at a time.
exec 9>"$CACHE/.build.lock"
if ! flock -n 9; then
  echo "e2e rig: another checkout is building into $CACHE; waiting for it" >&2
  flock 9
fi
export GOPATH="$CACHE/go"
export GOMODCACHE="$CACHE/go/pkg/mod"
export GOCACHE="$CACHE/go-build"
export GOBIN="$BIN"
export GOTOOLCHAIN=local
export GOFLAGS="-trimpath -buildvcs=false -mod=mod"
export CGO_ENABLED=0
LDFLAGS="-s -w"

TIMES_FILE="$CACHE/build-times.txt"
BUILD_LOG="$CACHE/build.log"
: >"$BUILD_LOG"

now() { date +%s.%N; }
since() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.1f", e - s }'; }

# run_step NAME KEY FUNCTION [KEY_FUNCTION]: skips FUNCTION when $BIN/.NAME.stamp holds KEY.
# FUNCTION's output goes to the build log. The stamp records KEY_FUNCTION's output when given (a
# key that is only known once the step ran, e.g. an installed package's version), else KEY.
run_step() {
  local name="$1" key="$2" fn="$3" key_fn="${4:-}"
  local stamp="$BIN/.$name.stamp"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$key" ]]; then
    printf '%-24s %8s (%s)\n' "$name" cached "$key" >&2
    return 0
  fi
  local start
  start="$(now)"
  echo "==> $name ($key)" >>"$BUILD_LOG"
  if ! "$fn" >>"$BUILD_LOG" 2>&1; then
    printf '%-24s FAILED after %ss (%s)\n' "$name" "$(since "$start")" "$key" >&2
    echo "---- last lines of $BUILD_LOG" >&2
    tail -n 30 "$BUILD_LOG" >&2
    exit 1
  fi
  local took
  took="$(since "$start")"
  [[ -z "$key_fn" ]] || key="$("$key_fn")"
  echo "$key" >"$stamp"
  printf '%-24s %7ss (%s)\n' "$name" "$took" "$key" >&2
  echo "$(date -u +%FT%TZ) $name $took $key" >>"$TIMES_FILE"
}

# runc links libseccomp through cgo; its headers are the one package the rig takes from Debian.
RUNC_BUILD_PACKAGES=(libseccomp-dev pkg-config)

# "debian pkg=version ..." as installed now; a package that is not installed reads pkg=none, which
# no stamp holds (a stamp is written after the install), so the install runs.
runc_build_packages_key() {
  local p status key="debian"
  for p in "${RUNC_BUILD_PACKAGES[@]}"; do
    status="$(dpkg-query -W -f='${db:Status-Status} ${Version}' "$p" 2>/dev/null || true)"
    if [[ "$status" == "installed "* ]]; then key+=" $p=${status#installed }"; else key+=" $p=none"; fi
  done
  echo "$key"
}

install_runc_build_packages() {
  local install=(env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${RUNC_BUILD_PACKAGES[@]}")
  "${install[@]}" || { apt-get update && "${install[@]}"; }
}

# containerd, its runc shim and ctr, without the snapshotters the rig disables (btrfs, devmapper
# and zfs would need cgo and their libraries).
build_containerd() {
  local m="github.com/containerd/containerd/v2" v="$CONTAINERD_VERSION"
  "$GO" install -tags "no_btrfs no_devmapper no_zfs" \
    -ldflags="$LDFLAGS -X $m/version.Version=$v -X $m/version.Package=$m" \
    "$m/cmd/containerd@$v" "$m/cmd/containerd-shim-runc-v2@$v" "$m/cmd/ctr@$v"
}

# runc needs cgo (its nsexec is C) and libseccomp (the `seccomp` tag, as its Makefile builds it);
# without libpathrs (a Rust library) it uses its pure-Go path resolution.
build_runc() {
  CGO_ENABLED=1 "$GO" install -tags "seccomp urfave_cli_no_docs" \
    -ldflags="$LDFLAGS -X main.version=${RUNC_VERSION#v}" "github.com/opencontainers/runc@$RUNC_VERSION"
}

build_cni_plugins() {
  local p pkgs=()
  for p in "${CNI_PLUGINS[@]}"; do pkgs+=("github.com/containernetworking/plugins/plugins/$p@$CNI_PLUGINS_VERSION"); done
  mkdir -p "$BIN/cni"
  GOBIN="$BIN/cni" "$GO" install \
    -ldflags="$LDFLAGS -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION" "${pkgs[@]}"
}

build_etcd() {
  # The etcd server binary is etcdmain.Main from the server module; the root module
  # (go.etcd.io/etcd/v3) only wraps that call and replaces its siblings with local paths.
  local dir="$WORK/etcd"
  rm -rf "$dir" && mkdir -p "$dir"
  cat >"$dir/go.mod" <<EOF
module e2e.rig/etcd

go 1.24
EOF
  cat >"$dir/main.go" <<'EOF'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
  (cd "$dir" && "$GO" get "go.etcd.io/etcd/server/v3/etcdmain@$ETCD_VERSION" \
    && "$GO" build -ldflags="$LDFLAGS" -o "$BIN/etcd" .)
}

# The throwaway module every Kubernetes binary builds from. Written once per version; the build
# cache then shares the compiled packages between the four binaries.
prepare_kubernetes_module() {
  local dir="$WORK/kubernetes"
  local key="$KUBERNETES_VERSION staging $STAGING_VERSION"
  if [[ -f "$dir/.key" && "$(cat "$dir/.key")" == "$key" ]]; then
    return 0
  fi
  rm -rf "$dir" && mkdir -p "$dir"
  {
    echo "module e2e.rig/kubernetes"
    echo
    echo "go 1.25.0"
    echo
    echo "godebug default=go1.24"
    echo
    echo "replace ("
    local m
    for m in "${STAGING_MODULES[@]}"; do
      echo "	k8s.io/$m => k8s.io/$m $STAGING_VERSION"
    done
    echo ")"
  } >"$dir/go.mod"
  (cd "$dir" && "$GO" get "k8s.io/kubernetes@$KUBERNETES_VERSION") && echo "$key" >"$dir/.key"
}

# The Kubernetes binaries the rig runs, from k8s.io/kubernetes/cmd: the control plane, and the kubelet
# and kubectl of `make up` (and the e2e cluster scenarios).
KUBERNETES_BINARIES=(kube-apiserver kube-scheduler kube-controller-manager kubelet kubectl)

# All of them in one `go build`: the packages they share compile once, and the links (the longest
# single-threaded part) run side by side. Versions stamped the way the release build does
# (otherwise every binary reports v0.0.0-master).
build_kubernetes() {
  local dir="$WORK/kubernetes" name pkgs=() gets=()
  prepare_kubernetes_module || return 1
  local minor="${KUBERNETES_VERSION#v1.}"
  minor="${minor%%.*}"
  local x="-X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION"
  x+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  x+=" -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES_VERSION"
  x+=" -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  for name in "${KUBERNETES_BINARIES[@]}"; do
    pkgs+=("k8s.io/kubernetes/cmd/$name")
    gets+=("k8s.io/kubernetes/cmd/$name@$KUBERNETES_VERSION")
  done
  (cd "$dir" && "$GO" get "${gets[@]}" \
    && "$GO" build -ldflags="$LDFLAGS $x" -o "$BIN/" "${pkgs[@]}")
}

build_crictl() {
  "$GO" install -ldflags="$LDFLAGS -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRI_TOOLS_VERSION" \
    "sigs.k8s.io/cri-tools/cmd/crictl@$CRI_TOOLS_VERSION"
}

build_cnitool() {
  "$GO" install -ldflags="$LDFLAGS" "github.com/containernetworking/cni/cnitool@$CNI_VERSION"
}

build_helm() {
  "$GO" install -ldflags="$LDFLAGS -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
}

# A single static binary in a one-layer OCI image, imported per run with
# `ctr -n k8s.io images import` because no registry can be reached.
build_pause_image() {
  local dir="$WORK/pause"
  rm -rf "$dir" && mkdir -p "$dir/rootfs" "$dir/oci/blobs/sha256"
  gcc -static -Os -s -o "$dir/rootfs/pause" "$RIG_SRC/pause.c"
  cp "$dir/rootfs/pause" "$BIN/pause"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$dir/rootfs" -cf "$dir/layer.tar" pause
  local layer_digest layer_size config_digest config_size manifest_digest manifest_size
  layer_digest="$(sha256sum "$dir/layer.tar" | cut -d' ' -f1)"
  layer_size="$(stat -c %s "$dir/layer.tar")"
  mv "$dir/layer.tar" "$dir/oci/blobs/sha256/$layer_digest"
  printf '%s' "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Entrypoint\":[\"/pause\"],\"User\":\"65535:65535\"},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:$layer_digest\"]}}" >"$dir/config.json"
  config_digest="$(sha256sum "$dir/config.json" | cut -d' ' -f1)"
  config_size="$(stat -c %s "$dir/config.json")"
  mv "$dir/config.json" "$dir/oci/blobs/sha256/$config_digest"
  printf '%s' "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"sha256:$config_digest\",\"size\":$config_size},\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"sha256:$layer_digest\",\"size\":$layer_size}]}" >"$dir/manifest.json"
  manifest_digest="$(sha256sum "$dir/manifest.json" | cut -d' ' -f1)"
  manifest_size="$(stat -c %s "$dir/manifest.json")"
  mv "$dir/manifest.json" "$dir/oci/blobs/sha256/$manifest_digest"
  printf '%s' "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:$manifest_digest\",\"size\":$manifest_size,\"platform\":{\"architecture\":\"amd64\",\"os\":\"linux\"},\"annotations\":{\"io.containerd.image.name\":\"$PAUSE_IMAGE\",\"org.opencontainers.image.ref.name\":\"${PAUSE_IMAGE##*:}\"}}]}" >"$dir/oci/index.json"
  printf '%s' '{"imageLayoutVersion":"1.0.0"}' >"$dir/oci/oci-layout"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$dir/oci" -cf "$BIN/pause-image.tar" oci-layout index.json blobs
  echo "$PAUSE_IMAGE" >"$BIN/pause-image.ref"
}

# Keyed on the source and on the function that packs it, not on the whole script.
pause_key="$PAUSE_IMAGE $(sha256sum "$RIG_SRC/pause.c" | cut -c1-12) $(declare -f build_pause_image | sha256sum | cut -c1-12)"

TOTAL_START="$(now)"
run_step runc-build-deps "$(runc_build_packages_key)" install_runc_build_packages runc_build_packages_key
run_step containerd "$CONTAINERD_VERSION" build_containerd
run_step runc "$RUNC_VERSION" build_runc
run_step cni-plugins "$CNI_PLUGINS_VERSION ${CNI_PLUGINS[*]}" build_cni_plugins
run_step pause-image "$pause_key" build_pause_image
run_step etcd "$ETCD_VERSION" build_etcd
run_step crictl "$CRI_TOOLS_VERSION" build_crictl
run_step cnitool "$CNI_VERSION" build_cnitool
run_step helm "$HELM_VERSION" build_helm
run_step kubernetes "$KUBERNETES_VERSION staging $STAGING_VERSION ${KUBERNETES_BINARIES[*]}" build_kubernetes
printf '%-24s %7ss (log: %s)\n' total "$(since "$TOTAL_START")" "$BUILD_LOG" >&2
