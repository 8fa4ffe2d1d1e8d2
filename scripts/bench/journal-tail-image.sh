#!/bin/bash
# Makes OUT from the file-system image BASE (e.g. the 1M-file image of docs/results.md:
# 1M empty files in 100 directories made through a mount, as scripts/bench/make-tree.py
# makes them): 200 files of 16 fragmented blocks
# in a new directory /late (their maps in map segments), a clean unmount; then, mounted
# again, every other one's block 1 rewritten, every tenth unlinked and 100 files of 5,000
# bytes made, each fsync'd, and the daemon killed, so that the changes live in the
# journal only (about 200 records) and the newest ids lie under the file tree's last
# internal node (`scripts/bench/tree-node.py OUT --level internal --at 1.0`). For the
# measurement "fsck --repair of a lost node over maps in segments and journal changes"
# in docs/results.md. Needs root (FUSE) and the release build (EXTALLOC to override).
#
#     scripts/bench/journal-tail-image.sh BASE OUT
set -euo pipefail
base=${1:?usage: journal-tail-image.sh BASE OUT}
out=${2:?usage: journal-tail-image.sh BASE OUT}
bin=${EXTALLOC:-$(dirname "$0")/../../target/release/extalloc}
mnt=$(mktemp -d /var/tmp/extalloc-jt.XXXXXX)
trap 'umount -l "$mnt" 2>/dev/null || true; rmdir "$mnt" 2>/dev/null || true' EXIT
cp --sparse=always "$base" "$out"
"$bin" mount "$out" "$mnt"
mkdir "$mnt/late"
python3 - "$mnt" <<'EOF'
import os, sys
late = os.path.join(sys.argv[1], "late")
for i in range(200):
    fd = os.open(f"{late}/s{i}", os.O_CREAT | os.O_WRONLY, 0o644)
    for b in range(0, 32, 2):
        os.pwrite(fd, bytes([i % 251 + 1]) * 4096, b * 4096)
    os.close(fd)
EOF
"$bin" umount "$mnt"
"$bin" mount "$out" "$mnt"
python3 - "$mnt" <<'EOF'
import os, sys
late = os.path.join(sys.argv[1], "late")
for i in range(0, 200, 2):
    fd = os.open(f"{late}/s{i}", os.O_WRONLY)
    os.pwrite(fd, b"x" * 4096, 4096)
    os.fsync(fd)
    os.close(fd)
for i in range(1, 200, 10):
    os.unlink(f"{late}/s{i}")
for i in range(100):
    fd = os.open(f"{late}/n{i}", os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"n" * 5000)
    os.fsync(fd)
    os.close(fd)
fd = os.open(late, os.O_RDONLY)
os.fsync(fd)
os.close(fd)
EOF
pid=$(pgrep -f "mount.*$(basename "$out")" | head -1)
echo "journal-tail-image: killing the daemon (process $pid)" >&2
kill -9 "$pid"
sleep 1
"$bin" fsck "$out" 2>&1 | grep -o "journal: [0-9]* records\? to replay" >&2 || true
