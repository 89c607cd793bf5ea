#!/usr/bin/env bash
# Runs upstream's install-cni where its fixed paths are: upstream reads the image's plugins from
# /opt/cni/bin, installs them into /host/opt/cni/bin and takes its token from
# /var/run/secrets/kubernetes.io/serviceaccount, none of them settable. Call it as
#   unshare --mount --propagation private -- bash sandbox.sh ROOT IMAGE_BIN HOST_BIN SA_DIR -- COMMAND...
# so that every mount below lives in a private mount namespace and goes with the process. ROOT is
# an empty scratch dir that becomes the command's root: the host's /usr, /etc, /proc, /sys, /dev,
# /tmp and /run are bound into it, the three fixed paths are bound to the scratch dirs given.
set -euo pipefail
root="$1" image_bin="$2" host_bin="$3" sa_dir="$4"
shift 4
[[ "${1:-}" == "--" ]] && shift

mkdir -p "$root"/{usr,etc,proc,sys,dev,tmp,run,opt/cni/bin,host/opt/cni/bin,var/run/secrets/kubernetes.io/serviceaccount}
for link in bin sbin lib lib64; do
  [[ -e "$root/$link" || -L "$root/$link" ]] || ln -s "usr/$link" "$root/$link"
done
# /tmp first: ROOT usually lies under it, and a later recursive bind would carry the mounts below.
for dir in tmp usr etc proc sys dev run; do
  mount --rbind "/$dir" "$root/$dir"
done
mount --bind "$image_bin" "$root/opt/cni/bin"
mount --bind "$host_bin" "$root/host/opt/cni/bin"
mount --bind "$sa_dir" "$root/var/run/secrets/kubernetes.io/serviceaccount"
exec chroot "$root" "$@"
