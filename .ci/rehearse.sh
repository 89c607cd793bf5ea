#!/usr/bin/env bash
# Rehearses CI's first run on a new machine, on this one: a fresh clone of HEAD (committed work only)
# runs `.ci/run` in a private mount namespace where /run is an empty tmpfs (no /run/netns, no
# /run/xtables.lock, no /run/containerd: what the first `ip netns add`, iptables call and containerd
# start create), /var/lib/cni is empty (libcni's result cache) and every cache is empty: HOME (npm's
# cache), the e2e rig and upstream's build with their Go module and build caches (E2E_SHARED_CACHE in
# the scratch directory). Nothing leaks to the host's mounts; the scratch directory is removed at the
# end unless --keep. Kernel state (network namespaces, tables, cgroups) is the host's: run it on a
# quiet machine. As root. Usage: .ci/rehearse.sh [--keep]
set -euo pipefail

keep=false
[[ "${1:-}" == --keep ]] && keep=true
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"

if [[ "${ISTIO_CNI_REHEARSAL:-}" == "" ]]; then
  [[ "$(id -u)" == 0 ]] || { echo "rehearse.sh: needs root (a private mount namespace, the tests' netns)" >&2; exit 1; }
  scratch="$(mktemp -d /var/tmp/istio-cni-rehearsal.XXXXXX)"
  git clone --quiet --no-hardlinks "$repo" "$scratch/checkout"
  echo "rehearse.sh: $(git -C "$scratch/checkout" log -1 --format='%h %s') in $scratch/checkout" >&2
  status=0
  ISTIO_CNI_REHEARSAL="$scratch" unshare --mount --propagation private -- "$repo/.ci/rehearse.sh" || status=$?
  if $keep; then echo "rehearse.sh: kept $scratch" >&2; else rm -rf "$scratch"; fi
  exit "$status"
fi

# Inside the private mount namespace.
scratch="$ISTIO_CNI_REHEARSAL"
mount -t tmpfs -o mode=0755 istio-cni-rehearsal-run /run
mkdir -m 1777 /run/lock
[[ -d /var/lib/cni ]] && mount -t tmpfs -o mode=0755 istio-cni-rehearsal-cni /var/lib/cni
mkdir -p "$scratch/home" "$scratch/e2e-cache"
cd "$scratch/checkout"
HOME="$scratch/home" npm_config_cache="$scratch/home/.npm" E2E_SHARED_CACHE="$scratch/e2e-cache" CI=true bash .ci/run </dev/null
