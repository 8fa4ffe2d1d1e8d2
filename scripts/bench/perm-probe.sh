#!/usr/bin/env bash
# Can a FUSE daemon check permissions itself instead of the kernel's default_permissions?
# (issue 53, "one round trip less per namespace change"; docs/results.md, "Permission
# checks in the daemon".) Mounts the FUSE floor (scripts/bench/floor-memfs.c) with or without
# default_permissions, or extalloc's mount; as root makes /d (mode 0700) and /d/f and stats
# /d/f (the kernel caches both dentries and their attributes); then, with the kernel's fuse
# tracepoints on, user nobody stats and reads /d/f. Prints whether each succeeded and every
# request the kernel sent the daemon meanwhile: a request it never sends is a check the
# daemon cannot make.
#
#   sudo scripts/bench/perm-probe.sh floor-dp | floor-nodp | extalloc   [EXTALLOC=path/to/extalloc]
set -euo pipefail
mode=${1:?floor-dp, floor-nodp or extalloc}
here="$(cd "$(dirname "$0")" && pwd)"
work=$(mktemp -d /var/tmp/perm-probe.XXXXXX)
m=$work/mnt
mkdir -p "$m"
chmod 755 "$work" "$m"
T=/sys/kernel/tracing
case $mode in
  floor-dp | floor-nodp)
    floor=$("$here/build-floor.sh" 2>/dev/null | tail -1)
    opts=allow_other
    [[ $mode == floor-dp ]] && opts=default_permissions,allow_other
    "$floor" "$m" -f -s -o "$opts" &
    sleep 1
    ;;
  extalloc)
    x=${EXTALLOC:-extalloc}
    "$x" mkfs "$work/fs.img" --size 256M >/dev/null
    "$x" mount "$work/fs.img" "$m" >/dev/null
    ;;
  *) echo "perm-probe.sh: unknown mode $mode" >&2; exit 2 ;;
esac
mkdir "$m/d"
echo data > "$m/d/f"
chmod 700 "$m/d"
stat "$m/d/f" >/dev/null
echo > "$T/trace"
echo 1 > "$T/events/fuse/fuse_request_send/enable"
for what in "stat $m/d/f" "cat $m/d/f"; do
  if su nobody -s /bin/sh -c "$what >/dev/null 2>&1"; then r=succeeded; else r=refused; fi
  echo "$mode: nobody's ${what%% *} of /d/f (d is 0700, root's): $r"
done
echo 0 > "$T/events/fuse/fuse_request_send/enable"
echo "$mode: requests the kernel sent meanwhile: $(grep -c fuse_request_send "$T/trace" || true)"
grep -o "([A-Z_]*)" "$T/trace" | sort | uniq -c || true
case $mode in
  extalloc) "${EXTALLOC:-extalloc}" umount "$m" >/dev/null ;;
  *) fusermount3 -u "$m"; wait ;;
esac
rm -rf "$work"
