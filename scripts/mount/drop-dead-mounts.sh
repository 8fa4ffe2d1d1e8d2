#!/usr/bin/env bash
# Drops the FUSE mounts a killed test run left behind: a mount-tests.sh run killed with
# SIGKILL (or a machine whose session ended) cannot run its cleanup, and its daemon is gone,
# so the kernel keeps a mount whose every stat fails with ENOTCONN. Tools that list every
# mount (df without arguments, which fstests runs) then fail on it. Only mounts under
# /var/tmp/extalloc-mount.* whose stat fails are dropped (lazily) with their directories; a
# live mount of a concurrent run is left alone. Root only; silent when there is nothing.
set -euo pipefail
[[ $(id -u) -eq 0 ]] || exit 0
while read -r _ mnt fstype _; do
  [[ "$mnt" == /var/tmp/extalloc-mount.*/* && "$fstype" == fuse* ]] || continue
  if ! stat "$mnt" >/dev/null 2>&1; then
    echo "drop-dead-mounts.sh: dropping $mnt (its daemon is gone: a killed run left it)" >&2
    umount -l "$mnt" || true
    dir=${mnt%/*}
    [[ -d "$dir" ]] && ! grep -q " $dir/" /proc/mounts && rm -rf "$dir"
  fi
done </proc/mounts
