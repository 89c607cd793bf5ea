#!/usr/bin/env bash
# Extracts upstream Istio's own Helm chart for the CNI agent (`manifests/charts/istio-cni`) unchanged
# from the istio.io/istio module pinned in build.sh (the Go module cache, downloaded through the
# module proxy when missing) into $BENCH_CACHE/upstream-chart/<version>/istio-cni, and prints that
# path. The copy is compared byte for byte with the module's files.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${BENCH_CACHE:-$ROOT/.bench-cache}"
GO="${GO:-/usr/local/go/bin/go}"
# The pin lives in build.sh (editing it there changes both).
ISTIO_VERSION="${ISTIO_VERSION:-$(sed -n 's/^ISTIO_VERSION="\${ISTIO_VERSION:-\(.*\)}"$/\1/p' "$ROOT/bench/upstream/build.sh")}"
[[ -n "$ISTIO_VERSION" ]] || { echo "chart.sh: no ISTIO_VERSION in bench/upstream/build.sh" >&2; exit 1; }

export GOPATH="$CACHE/go"
export GOMODCACHE="$CACHE/go/pkg/mod"
export GOTOOLCHAIN=local
export GOFLAGS=-mod=mod

module="$GOMODCACHE/istio.io/istio@$ISTIO_VERSION"
if [[ ! -d "$module/manifests/charts/istio-cni" ]]; then
  (cd "$CACHE" && "$GO" mod download "istio.io/istio@$ISTIO_VERSION")
fi
src="$module/manifests/charts/istio-cni"
dst="$CACHE/upstream-chart/$ISTIO_VERSION/istio-cni"
if [[ ! -d "$dst" ]] || ! diff -r "$src" "$dst" >/dev/null; then
  rm -rf "$dst.tmp"
  mkdir -p "$(dirname "$dst")"
  cp -R "$src" "$dst.tmp"
  chmod -R u+w "$dst.tmp" # the module cache is read-only; the copy's contents stay as they are
  diff -r "$src" "$dst.tmp" >/dev/null
  rm -rf "$dst"
  mv "$dst.tmp" "$dst"
fi
echo "$dst"
