#!/bin/bash
# What `fsck --repair` costs when the file tree's root is lost and the repair scans the
# device for the nodes under it (docs/results.md, "The repair's scans read the device
# once"), for one or more builds, alternated.
#
#   sudo scripts/bench/repair-scan.sh IMAGE ROUNDS BUILD [BUILD ...]
#
# Each round, for each BUILD (an `extalloc` binary): a fresh sparse copy of IMAGE (an
# extalloc file system, unmounted) beside it, the tree's root zeroed in the copy
# (scripts/bench/tree-node.py), the page cache dropped, then `BUILD fsck --repair COPY` run
# in a memory cgroup of CACHE_MIB (default 512) MiB, so the page cache cannot hold what the
# scan read (as on a device larger than the machine's memory), timed with /usr/bin/time
# (wall s, peak RSS KiB, user and system s); then `BUILD fsck COPY` (0: clean). Prints one
# line per run; the repair's stdout and stderr of the last run of each build are left in
# COPY.buildK.out and .err (K: the build's place in the list). Needs root (the cgroup,
# drop_caches). With LEAF_AT set (a place in key order, 0 to 1), the leaf there is zeroed
# too (a root lost with a leaf under it: docs/results.md, "A lost root and leaf"). With
# NEWEST=1, every node of the root's generation is zeroed with it (the whole path the last
# checkpoint wrote: docs/results.md, "A root made over the leaves").
set -euo pipefail
[ $# -ge 3 ] || { sed -n 2,20p "$0" >&2; exit 2; }
IMAGE=$1 ROUNDS=$2
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
COPY=$IMAGE.copy
ROOT=$(python3 "$HERE/tree-node.py" "$IMAGE" --level root 2>/dev/null)
LEAF=
if [ -n "${LEAF_AT:-}" ]; then
  LEAF=$(python3 "$HERE/tree-node.py" "$IMAGE" --level leaf --at "$LEAF_AT" 2>/dev/null)
fi
if [ -n "${NEWEST:-}" ]; then
  ROOT=$(python3 "$HERE/tree-node.py" "$IMAGE" --level newest 2>/dev/null)
fi
CACHE=$(( ${CACHE_MIB:-512} << 20 ))
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  CG=/sys/fs/cgroup/extalloc-repair-scan
  mkdir -p $CG && echo $CACHE > $CG/memory.max
else
  CG=/sys/fs/cgroup/memory/extalloc-repair-scan
  mkdir -p $CG && echo $CACHE > $CG/memory.limit_in_bytes
fi
trap 'rm -f "$COPY"; rmdir $CG 2>/dev/null || true' EXIT
for r in $(seq 1 "$ROUNDS"); do
  k=0
  for b in "$@"; do
    k=$((k + 1))
    name=build$k
    cp --sparse=always "$IMAGE" "$COPY"
    for blk in $ROOT $LEAF; do
      dd if=/dev/zero of="$COPY" bs=4096 seek="$blk" count=1 conv=notrunc status=none
    done
    sync
    echo 3 > /proc/sys/vm/drop_caches
    set +e
    bash -c 'echo $$ > "$0/cgroup.procs"; exec /usr/bin/time -f "%e s %M KiB %U user %S sys" \
      "$1" fsck --repair "$2"' $CG "$b" "$COPY" > "$COPY.$name.out" 2> "$COPY.$name.err"
    rc=$?
    "$b" fsck "$COPY" > /dev/null 2>&1
    check=$?
    set -e
    echo "round $r $b: repair exit $rc, $(tail -1 "$COPY.$name.err"); check after exit $check"
  done
done
