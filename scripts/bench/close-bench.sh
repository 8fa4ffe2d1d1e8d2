#!/usr/bin/env bash
# Opens and closes through a mount: 20,000 files created, written 4 KiB and closed, then each
# opened and closed again, on a fresh 2 GiB image in /dev/shm. Prints files per second.
#
#   scripts/bench/close-bench.sh BIN [LABEL]     # BIN: an extalloc binary (root, /dev/fuse)
#
# Compare two builds by alternating them, three rounds each, and take the medians.
set -euo pipefail
B=${1:?usage: close-bench.sh BIN [LABEL]}
LABEL=${2:-$B}
IMG=/dev/shm/close-bench.$$.img
M=$(mktemp -d)
rm -f "$IMG"
"$B" mkfs "$IMG" --size 2GiB >/dev/null
"$B" mount "$IMG" "$M" >/dev/null
python3 - "$M" "$LABEL" <<'PY'
import os, sys, time
m = sys.argv[1]; os.mkdir(m + "/d")
data = b"x" * 4096
t = time.perf_counter()
for i in range(20000):
    fd = os.open(f"{m}/d/f{i}", os.O_CREAT | os.O_WRONLY, 0o644); os.write(fd, data); os.close(fd)
c = time.perf_counter() - t
t = time.perf_counter()
for i in range(20000):
    fd = os.open(f"{m}/d/f{i}", os.O_RDONLY); os.close(fd)
o = time.perf_counter() - t
print(f"{sys.argv[2]}: create+write+close {20000/c:.0f}/s, open+close {20000/o:.0f}/s")
PY
"$B" umount "$M" >/dev/null
rm -f "$IMG"
rmdir "$M"
