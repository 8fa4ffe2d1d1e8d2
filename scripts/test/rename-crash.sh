#!/usr/bin/env bash
# Renames killed mid-flight through the mount: a write-tmp / fsync / rename-over-`cfg`
# loop (`over`), the same without the fsync (`replace`: what editors and config writers
# do), a truncate-and-rewrite of `cfg` without fsync (`rewrite`), and a RENAME_EXCHANGE
# loop of two fsync'd 100-file directories (`exchange`), each killed with kill -9 of the
# daemon at a random point KILLS times. After each kill: unmount, mount (which recovers),
# then `cfg` must hold one whole version (never missing, never empty, never a mix: ext4's
# auto_da_alloc promise), both directories must exist with their 100 files each and their
# own marker, and fsck of the unmounted image must be clean.
#
#   sudo scripts/test/rename-crash.sh [KILLS]      # default 10 each (CI); docs/results.md: 100
#   RENAME_CRASH_MOUNT_ARGS=--io-uring sudo scripts/test/rename-crash.sh 100   # over io_uring
#   RENAME_MODES=rewrite sudo scripts/test/rename-crash.sh 100   # one loop only
#
# Needs root, /dev/fuse and a built target/release/extalloc (or EXTALLOC_BIN). Prints a line per kill and a
# summary; exits non-zero at the first loss.
set -euo pipefail
cd "$(dirname "$0")/../.."
KILLS=${1:-10}
[[ $(id -u) -eq 0 ]] || { echo "rename-crash.sh: needs root (it mounts)" >&2; exit 1; }
[[ -c /dev/fuse ]] || { echo "rename-crash.sh: no /dev/fuse" >&2; exit 1; }
BIN="${EXTALLOC_BIN:-$PWD/target/release/extalloc}"
[[ -x "$BIN" ]] || { echo "rename-crash.sh: build first: cargo build --release -p extalloc-cli" >&2; exit 1; }
WORK=$(mktemp -d /var/tmp/extalloc-rename.XXXXXX)
IMG="$WORK/fs.img"
MNT="$WORK/mnt"
mkdir -p "$MNT"
DAEMON=0
cleanup() {
  pkill -9 -f "rename-loop.py $MNT" 2>/dev/null || true
  if mountpoint -q "$MNT"; then fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT" || true; fi
  [[ "$DAEMON" != 0 ]] && while kill -0 "$DAEMON" 2>/dev/null; do sleep 0.1; done
  rm -rf "$WORK"
}
trap cleanup EXIT

do_mount() {
  local out
  # shellcheck disable=SC2086 # extra mount arguments, split on purpose
  out=$("$BIN" mount "$IMG" "$MNT" --log "$WORK/mount.log" ${RENAME_CRASH_MOUNT_ARGS:-})
  DAEMON=$(sed -n 's/.*(process \([0-9]*\)).*/\1/p' <<<"$out")
  [[ -n "$DAEMON" ]] || { echo "no daemon pid in: $out" >&2; exit 1; }
  echo "$out"
}
wait_daemon() { while kill -0 "$DAEMON" 2>/dev/null; do sleep 0.05; done; }

# The loops: `over`, `replace` and `rewrite` put new versions in cfg (see the header);
# `exchange` swaps two directories.
cat >"$WORK/rename-loop.py" <<'EOF'
import ctypes, os, sys
mnt, mode = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
def version(n):
    return (f"version {n}\n" * 400).encode()
if mode in ("over", "replace", "rewrite"):
    # over: tmp, fsync, rename; replace: tmp, close, rename; rewrite: O_TRUNC, write, close.
    target = f"{mnt}/cfg" if mode == "rewrite" else f"{mnt}/cfg.tmp"
    n = 0
    while True:
        n += 1
        with open(target, "wb") as f:
            f.write(version(n))
            if mode == "over":
                f.flush(); os.fsync(f.fileno())
        if mode != "rewrite":
            os.rename(target, f"{mnt}/cfg")
else:
    a, b = f"{mnt}/a".encode(), f"{mnt}/b".encode()
    while True:
        if libc.renameat2(-100, a, -100, b, 2) != 0:
            raise OSError(ctypes.get_errno(), "renameat2")
EOF

check_over() { # the file `cfg`: one whole version
  [[ -f "$MNT/cfg" ]] || { echo "cfg is gone: $(ls -la "$MNT")" >&2; return 1; }
  python3 - "$MNT/cfg" <<'EOF'
import sys
data = open(sys.argv[1], "rb").read()
lines = data.split(b"\n")[:-1]
ok = len(lines) == 400 and len(set(lines)) == 1 and lines[0].startswith(b"version ")
sys.exit(0 if ok else f"cfg holds {len(data)} bytes that are not one whole version")
EOF
}
check_exchange() { # a and b: 100 files and their own marker each, one of each set
  python3 - "$MNT" <<'EOF'
import os, sys
mnt = sys.argv[1]
seen = set()
for d in ("a", "b"):
    names = sorted(os.listdir(f"{mnt}/{d}"))
    marker = open(f"{mnt}/{d}/marker").read()
    want = sorted(["marker"] + [f"{marker}{i}" for i in range(100)])
    if names != want:
        sys.exit(f"{d} holds {len(names)} entries, not the 100 files of set {marker}")
    for i in range(100):
        if open(f"{mnt}/{d}/{marker}{i}").read() != f"{marker}{i}\n":
            sys.exit(f"{d}/{marker}{i} holds the wrong data")
    seen.add(marker)
sys.exit(0 if seen == {"A", "B"} else f"both directories hold set {seen}")
EOF
}

"$BIN" mkfs "$IMG" --size 1GiB >/dev/null
do_mount >/dev/null
for set in A B; do
  d="$MNT/$(tr AB ab <<<"$set")"
  mkdir "$d"
  echo -n "$set" >"$d/marker"
  for i in $(seq 0 99); do echo "$set$i" >"$d/$set$i"; done
done
printf 'version 0\n%.0s' $(seq 1 400) >"$MNT/cfg"
python3 -c 'import os, sys
fd = os.open(f"{sys.argv[1]}/cfg", os.O_RDONLY); os.fsync(fd); os.close(fd)
for d in ("a", "b"):
    for n in os.listdir(f"{sys.argv[1]}/{d}"):
        fd = os.open(f"{sys.argv[1]}/{d}/{n}", os.O_RDONLY); os.fsync(fd); os.close(fd)
    fd = os.open(f"{sys.argv[1]}/{d}", os.O_RDONLY); os.fsync(fd); os.close(fd)' "$MNT"

total=0
for mode in ${RENAME_MODES:-over replace rewrite exchange}; do
  for k in $(seq 1 "$KILLS"); do
    python3 "$WORK/rename-loop.py" "$MNT" "$mode" 2>/dev/null &
    loop=$!
    sleep "$(awk -v s="$RANDOM" 'BEGIN { srand(s); printf "%.3f", 0.05 + rand() * 0.6 }')"
    kill -9 "$DAEMON"
    wait "$loop" 2>/dev/null || true
    fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT"
    wait_daemon
    do_mount >"$WORK/mount.out"
    out=$(cat "$WORK/mount.out")
    if [[ "$mode" == exchange ]]; then check_exchange; else check_over; fi || {
      echo "rename-crash: $mode kill $k LOST DATA; mount said: $out" >&2
      exit 1
    }
    fusermount3 -u "$MNT"
    wait_daemon
    "$BIN" fsck "$IMG" >"$WORK/fsck.out" 2>&1 || {
      cat "$WORK/fsck.out" >&2
      echo "rename-crash: $mode kill $k: fsck not clean" >&2
      exit 1
    }
    do_mount >/dev/null
    total=$((total + 1))
    echo "rename-crash: $mode kill $k: nothing lost, fsck clean (${out##*(clean; }"
  done
done
echo "rename-crash: $total kills ($KILLS each of ${RENAME_MODES:-over replace rewrite exchange}): nothing lost"
