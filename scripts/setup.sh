#!/usr/bin/env bash
# Installs what the tests, `make image` and `make up` need from the host (scripts/host-tools.txt),
# the kernel modules the capture rules use, and node_modules (`npm ci` when it is missing or older
# than package.json / package-lock.json). Idempotent; with everything in place it only looks.
#
# Usage: scripts/setup.sh [group...]   (groups of scripts/host-tools.txt; default: all)
# As root on Debian it apt-installs what is missing. Otherwise a missing tool fails at once with one
# message naming it and the command that installs it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

wanted=" $* "
is_root=false
[[ "$(id -u)" == 0 ]] && is_root=true
is_debian=false
[[ -r /etc/debian_version ]] && command -v apt-get >/dev/null && is_debian=true

# An executable regular file, by absolute path or on PATH. A non-root shell on Debian often lacks the
# sbin directories; the tools are there all the same.
present() {
  local dir
  if [[ "$1" == /* ]]; then
    [[ -f "$1" && -x "$1" ]]
    return
  fi
  local IFS=:
  for dir in $PATH /usr/sbin /sbin; do
    [[ -f "${dir:-.}/$1" && -x "${dir:-.}/$1" ]] && return 0
  done
  return 1
}

# Fills `missing_packages` and `missing_text` ("nft (package nftables), …") from the list.
check() {
  missing_packages=()
  missing_text=''
  local package group tools tool absent
  while read -r package group tools; do
    [[ -z "$package" || "$package" == \#* ]] && continue
    [[ "$wanted" == '  ' || "$wanted" == *" $group "* ]] || continue
    absent=()
    if [[ -z "$tools" ]]; then
      dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || absent=("$package")
    else
      for tool in $tools; do
        present "$tool" || absent+=("$tool")
      done
    fi
    ((${#absent[@]})) || continue
    missing_packages+=("$package")
    local shown="${absent[0]}"
    ((${#absent[@]} > 1)) && shown+=" and $((${#absent[@]} - 1)) more"
    missing_text+="${missing_text:+, }${shown} (package $package)"
  done <scripts/host-tools.txt
}

check
if ((${#missing_packages[@]})); then
  if ! $is_root || ! $is_debian; then
    if $is_debian; then
      how='sudo make setup'
    else
      how="your distribution's packages for: ${missing_packages[*]} (Debian names)"
    fi
    echo "setup: missing ${missing_text}; install with: ${how}" >&2
    exit 1
  fi
  echo "setup: installing ${missing_packages[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing_packages[@]}"
  check
  if ((${#missing_packages[@]})); then
    echo "setup: still missing after apt-get install: ${missing_text}" >&2
    exit 1
  fi
fi

# Kernels with these as modules need them loaded before rules using them can be created; built-in or
# absent (a kernel without modprobe) is not an error here: the tests say what fails.
if $is_root && command -v modprobe >/dev/null; then
  modprobe -a xt_REDIRECT xt_TPROXY xt_owner xt_conntrack xt_mark xt_connmark nft_tproxy 2>/dev/null || true
fi

# `npm ci` in DIR when its node_modules is missing or older than its package.json / package-lock.json.
npm_ci() {
  local dir="$1"
  shift
  [[ ! -d "$dir/node_modules" || "$dir/package-lock.json" -nt "$dir/node_modules" || "$dir/package.json" -nt "$dir/node_modules" ]] || return 0
  command -v npm >/dev/null || { echo "setup: missing npm (it runs npm ci); install Node.js's npm, e.g. sudo apt-get install npm" >&2; exit 1; }
  # Under sudo, node_modules belongs to the user who owns the checkout, not to root.
  local as_user=()
  if $is_root && [[ -n "${SUDO_USER:-}" && "${SUDO_USER}" != root ]]; then
    as_user=(runuser -u "$SUDO_USER" -- env HOME="$(getent passwd "$SUDO_USER" | cut -d: -f6)")
  fi
  (cd "$dir" && "${as_user[@]}" npm ci --no-audit --no-fund "$@" && "${as_user[@]}" touch node_modules)
}

npm_ci .
# The linux/arm64 runtimes the arm64 executables embed (toolchain/linux-arm64/package.json): npm
# installs another platform's packages only as optional dependencies of that platform.
npm_ci toolchain/linux-arm64 --cpu=arm64 --os=linux --libc=glibc
