#!/usr/bin/env bash
# The daemon's memory after a create storm (issue 50): mkfs of a 64 GiB sparse image on a
# loop device, mount, NFILES empty files made round-robin in NDIRS directories (as
# namespace-scale.py makes them), `sync`, then the daemon's peak resident memory (VmHWM)
# and CPU from /proc, `extalloc umount` (timed) and `extalloc fsck`. One line:
#
#   sudo scripts/bench/daemon-memory.sh BIN NFILES NDIRS
#   -> BIN files=N rate=R/s hwm=M MiB daemon_cpu=S s umount=T s
#
# BIN is an extalloc binary (alternate two builds, several rounds, to compare them). The
# environment reaches the daemon (LD_PRELOAD of another malloc, for example). Needs root,
# /dev/fuse, losetup, python3; works under /var/tmp (DAEMON_MEMORY_DIR to change it).
set -euo pipefail
[[ $# -eq 3 ]] || { echo "usage: $0 BIN NFILES NDIRS" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "daemon-memory.sh: needs root (loop device, mount)" >&2; exit 1; }
BIN=$(realpath "$1"); N=$2; D=$3
[[ -x "$BIN" ]] || { echo "daemon-memory.sh: $BIN is not an executable" >&2; exit 1; }
. "$(dirname "$0")/loop-volume.sh"
loop_volume daemon-memory DAEMON_MEMORY_DIR
OUT=$("$BIN" mount "$LOOP" "$W/mnt")
PID=$(sed -n 's/.*(process \([0-9]*\)).*/\1/p' <<<"$OUT")
[[ -n "$PID" ]] || { echo "daemon-memory.sh: no daemon in: $OUT" >&2; exit 1; }
RATE=$(python3 - "$W/mnt" "$N" "$D" <<'PY'
import os, sys, time
mnt, n, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(d):
    os.mkdir(f"{mnt}/d{i}")
t = time.monotonic()
for i in range(n):
    os.close(os.open(f"{mnt}/d{i % d}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
print(round(n / (time.monotonic() - t)))
PY
)
sync "$W/mnt/d0"
HWM=$(awk '/VmHWM/{print $2}' "/proc/$PID/status")
CPU=$(awk -v hz="$(getconf CLK_TCK)" '{printf "%.1f", ($14+$15)/hz}' "/proc/$PID/stat")
T0=$(date +%s.%N); "$BIN" umount "$W/mnt" >/dev/null; T1=$(date +%s.%N)
"$BIN" fsck "$LOOP" >/dev/null
echo "$(basename "$BIN") files=$N rate=$RATE/s hwm=$((HWM / 1024))MiB daemon_cpu=${CPU}s umount=$(python3 -c "print(round($T1 - $T0, 2))")s"
