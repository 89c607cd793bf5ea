#!/usr/bin/env bash
# Runs a command with nothing beside the checkout visible, so a test or benchmark that reads outside
# the repository fails instead of passing by accident. CI runs as root, for whom permissions stop
# nothing; so the command runs in a private mount namespace where the checkout's parent directory is
# covered by an empty tmpfs and only the checkout is bound back at its own path. Nothing leaks to the
# host's mounts (propagation private); everything else (/tmp, /run, /proc, network namespaces) is as
# before. Usage (as root): .ci/isolate.sh <command> [args...]; the command runs from the checkout.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
parent="$(dirname "$repo")"

if [[ "${ISTIO_CNI_ISOLATED:-}" != "$repo" ]]; then
  if [[ "$parent" == / ]]; then
    echo "isolate.sh: $repo sits directly under /, which cannot be hidden; running without the guard" >&2
    exec "$@"
  fi
  ISTIO_CNI_ISOLATED="$repo" exec unshare --mount --propagation private -- "$repo/.ci/isolate.sh" "$@"
fi

# Inside the new mount namespace. Park the checkout on a mount point outside its parent (and outside
# the checkout), cover the parent, then bind the checkout back where it was.
stash=''
for base in /run /var/tmp /tmp /dev/shm; do
  [[ -d "$base" && -w "$base" ]] || continue
  b="$(cd "$base" && pwd -P)"
  case "$b/" in "$parent"/* | "$repo"/*) continue ;; esac
  stash="$(mktemp -d "$b/istio-cni-isolate.XXXXXX")"
  break
done
[[ -n "$stash" ]] || { echo "isolate.sh: no temporary directory outside $parent" >&2; exit 1; }

mount --rbind "$repo" "$stash"
mount -t tmpfs -o mode=0755 istio-cni-isolate "$parent"
mkdir -p "$repo"
mount --rbind "$stash" "$repo"
umount --lazy "$stash" 2>/dev/null || true
rmdir "$stash" 2>/dev/null || true

cd "$repo"
exec "$@"
