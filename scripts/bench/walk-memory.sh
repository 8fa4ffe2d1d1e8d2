#!/usr/bin/env bash
# The daemon's memory through a walk of a namespace it has not read since the mount (issue
# 50): mkfs of a 64 GiB sparse image on a loop device, mount, NFILES empty files made
# round-robin in NDIRS directories with names of 64 hex digits (as a content-addressed
# store names its objects: directory entries take about 75 bytes each), unmount, mount
# again (the mount reads the root only), then `find MOUNTPOINT -type f | wc -l` and the
# daemon's peak resident memory (VmHWM), its resident memory after the walk and after one
# more background commit, and the walk's time. One line:
#
#   sudo scripts/bench/walk-memory.sh BIN NFILES NDIRS [MOUNT OPTIONS...]
#   -> BIN files=N walk=S s hwm=M MiB rss_after=M MiB rss_after_commit=M MiB
#
# BIN is an extalloc binary (alternate two builds, several rounds, to compare them); the
# mount options go to the second mount (`--file-cache 16384`, for example). Needs root,
# /dev/fuse, losetup, python3, find; works under /var/tmp (WALK_MEMORY_DIR to change it).
set -euo pipefail
[[ $# -ge 3 ]] || { echo "usage: $0 BIN NFILES NDIRS [MOUNT OPTIONS...]" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "walk-memory.sh: needs root (loop device, mount)" >&2; exit 1; }
BIN=$(realpath "$1"); N=$2; D=$3; shift 3
[[ -x "$BIN" ]] || { echo "walk-memory.sh: $BIN is not an executable" >&2; exit 1; }
. "$(dirname "$0")/loop-volume.sh"
loop_volume walk-memory WALK_MEMORY_DIR
"$BIN" mount "$LOOP" "$W/mnt" >/dev/null
python3 "$(dirname "$0")/make-tree.py" "$W/mnt" "$N" "$D"
"$BIN" umount "$W/mnt" >/dev/null
OUT=$("$BIN" mount "$LOOP" "$W/mnt" "$@")
PID=$(sed -n 's/.*(process \([0-9]*\)).*/\1/p' <<<"$OUT")
[[ -n "$PID" ]] || { echo "walk-memory.sh: no daemon in: $OUT" >&2; exit 1; }
T0=$(date +%s.%N)
FOUND=$(find "$W/mnt" -type f | wc -l)
T1=$(date +%s.%N)
[[ "$FOUND" -eq "$N" ]] || { echo "walk-memory.sh: the walk found $FOUND of $N files" >&2; exit 1; }
kib() { awk -v k="$1" '$1 == k":" {print int($2 / 1024)}' "/proc/$PID/status"; }
HWM=$(kib VmHWM); RSS=$(kib VmRSS)
sleep 7 # one background commit (every 5 s by default)
RSS2=$(kib VmRSS)
"$BIN" umount "$W/mnt" >/dev/null
echo "$(basename "$BIN") files=$N walk=$(python3 -c "print(round($T1 - $T0, 1))")s hwm=${HWM}MiB rss_after=${RSS}MiB rss_after_commit=${RSS2}MiB"
