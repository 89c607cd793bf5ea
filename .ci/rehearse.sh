#!/usr/bin/env bash
# Rehearses CI's first run on a new machine, on this one: a fresh clone of HEAD (committed work only)
# runs `.ci/run` in a private mount namespace where /run is a new tmpfs holding only the host's
# top-level directories, empty (no /run/netns, no /run/xtables.lock, no /run/containerd: what the
# first `ip netns add`, iptables call and containerd start create), /var/lib/cni is empty (libcni's result cache) and every cache is empty: HOME (npm's
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
  # The checkout sits one level down: .ci/isolate.sh covers its parent with an empty tmpfs, which
  # must not be where HOME and the rig cache are (the rig, several GB, went to memory and was lost).
  git clone --quiet --no-hardlinks "$repo" "$scratch/clone/checkout"
  echo "rehearse.sh: $(git -C "$scratch/clone/checkout" log -1 --format='%h %s') in $scratch/clone/checkout" >&2
  status=0
  ISTIO_CNI_REHEARSAL="$scratch" unshare --mount --propagation private -- "$repo/.ci/rehearse.sh" || status=$?
  if $keep; then echo "rehearse.sh: kept $scratch" >&2; else rm -rf "$scratch"; fi
  exit "$status"
fi

# Inside the private mount namespace.
scratch="$ISTIO_CNI_REHEARSAL"
# The host's mounts under /run (its /run/netns and the netns in it) were copied into this namespace:
# drop them here, or they stay listed under the new /run and the run starts from a used machine.
for dir in /run /var/lib/cni; do
  awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r | while read -r mp; do umount -l "$mp"; done
done
# A booted machine's /run has its top-level directories (lock, mount, user, …), empty here, but not
# the ones the project's tools create (test/e2e/support/firstUseArtefacts.ts) or the agent's own.
skeleton=()
for entry in /run/*/; do
  name="$(basename "$entry")"
  case "$name" in netns | containerd | istio-cni | ztunnel) ;; *) skeleton+=("$name:$(stat -c %a "$entry")") ;; esac
done
mount -t tmpfs -o mode=0755 istio-cni-rehearsal-run /run
for entry in "${skeleton[@]}"; do mkdir -m "${entry##*:}" "/run/${entry%:*}"; done
[[ -d /var/lib/cni ]] && mount -t tmpfs -o mode=0755 istio-cni-rehearsal-cni /var/lib/cni
mkdir -p "$scratch/home" "$scratch/e2e-cache"
cd "$scratch/clone/checkout"
HOME="$scratch/home" npm_config_cache="$scratch/home/.npm" E2E_SHARED_CACHE="$scratch/e2e-cache" CI=true bash .ci/run </dev/null
