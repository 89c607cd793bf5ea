#!/usr/bin/env bash
# Builds upstream Istio's Go CNI agent (`istio-cni` plugin and `install-cni` daemon) from the Go
# module proxy for the side-by-side figures of `make bench`, the way upstream's own build does it:
# CGO off, `-trimpath -s -w`, tags agent,disable_pgv,grpcnotrace,retrynotrace. The module is
# pinned by pseudo-version in a throwaway module; everything lands in the git-ignored
# .bench-cache/ (BENCH_CACHE overrides it) and is skipped when its stamp matches.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${BENCH_CACHE:-$ROOT/.bench-cache}"
BIN="$CACHE/bin"
WORK="$CACHE/work"
GO="${GO:-/usr/local/go/bin/go}"

ISTIO_VERSION="${ISTIO_VERSION:-v0.0.0-20260827124520-eed52ebb66ad}"
TAGS="agent,disable_pgv,grpcnotrace,retrynotrace"

mkdir -p "$BIN" "$WORK"
# The cache may be shared by several checkouts (mk/e2e.mk, E2E_SHARED_CACHE): one build at a time.
exec 9>"$CACHE/.build.lock"
if ! flock -n 9; then
  echo "upstream build: another checkout is building into $CACHE; waiting for it" >&2
  flock 9
fi
export GOPATH="$CACHE/go"
export GOMODCACHE="$CACHE/go/pkg/mod"
export GOCACHE="$CACHE/go-build"
export GOTOOLCHAIN=local
export GOFLAGS="-trimpath -buildvcs=false -mod=mod"
export CGO_ENABLED=0

key="istio.io/istio $ISTIO_VERSION tags $TAGS $("$GO" env GOVERSION) $(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)"
stamp="$BIN/.upstream-istio-cni.stamp"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$key" && -x "$BIN/istio-cni" && -x "$BIN/install-cni" ]]; then
  echo "upstream istio-cni cached ($key)" >&2
  exit 0
fi

echo "==> building upstream istio-cni and install-cni ($key)" >&2
start="$(date +%s)"
dir="$WORK/istio"
rm -rf "$dir" && mkdir -p "$dir"
cat >"$dir/go.mod" <<MOD
module bench.peer/istio

go 1.26.0
MOD
cat >"$dir/tools.go" <<'SRC'
//go:build tools

package tools

import (
	_ "istio.io/istio/cni/cmd/install-cni"
	_ "istio.io/istio/cni/cmd/istio-cni"
)
SRC
cd "$dir"
"$GO" get "istio.io/istio@$ISTIO_VERSION"
"$GO" mod tidy -e >/dev/null 2>&1 || true
for cmd in istio-cni install-cni; do
  "$GO" build -tags "$TAGS" -ldflags "-s -w" -o "$BIN/$cmd.tmp" "istio.io/istio/cni/cmd/$cmd"
  mv "$BIN/$cmd.tmp" "$BIN/$cmd"
done
echo "$key" >"$stamp"
echo "upstream istio-cni built in $(( $(date +%s) - start ))s" >&2
