#!/usr/bin/env bash
# What polling /dev/fuse costs and gives (docs/mount.md, "Round trips"): for each round, a
# fresh 1 GiB image in /dev/shm mounted with the default polling and then with
# --poll-us 0, a python3 loop of N creates, stats, renames and unlinks in one directory,
# each phase's rate, the loop's wall time and the daemon's CPU time (utime + stime from
# /proc/PID/stat). Root, /dev/fuse; the release build of this checkout.
#
#   sudo scripts/bench/poll-cost.sh [ROUNDS (3)] [FILES (10000)]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-3}
FILES=${2:-10000}
[[ $EUID -eq 0 && -e /dev/fuse ]] || { echo "poll-cost.sh: needs root and /dev/fuse" >&2; exit 1; }
cargo build --release -q -p extalloc-cli
EXE=$PWD/target/release/extalloc
WORK=$(mktemp -d /tmp/extalloc-poll-cost.XXXXXX)
IMG=/dev/shm/extalloc-poll-cost-$$.img
trap 'mountpoint -q "$WORK/mnt" && "$EXE" umount "$WORK/mnt" >/dev/null; rm -rf "$WORK" "$IMG"' EXIT
mkdir -p "$WORK/mnt"
cat > "$WORK/loop.py" <<'EOF'
import os, sys, time
root, n = sys.argv[1], int(sys.argv[2])
os.makedirs(f"{root}/d", exist_ok=True)
out = []
for phase in ("create", "stat", "rename", "unlink"):
    t = time.perf_counter()
    for i in range(n):
        p = f"{root}/d/f{i}"
        if phase == "create":
            os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
        elif phase == "stat":
            os.stat(p)
        elif phase == "rename":
            os.rename(p, p + "r")
        else:
            os.unlink(p + "r")
    out.append(f"{phase} {n / (time.perf_counter() - t):.0f}/s")
print(", ".join(out))
EOF
one() { # LABEL MOUNT-ARGS...
  local label=$1; shift
  rm -f "$IMG"
  "$EXE" mkfs "$IMG" --size 1GiB >/dev/null
  local out pid t0 t1 ticks
  out=$("$EXE" mount "$IMG" "$WORK/mnt" "$@")
  pid=$(sed -n 's/.*(process \([0-9]*\)).*/\1/p' <<<"$out")
  [[ -n "$pid" ]] || { echo "no daemon pid in: $out" >&2; exit 1; }
  t0=$(date +%s%N)
  rates=$(python3 "$WORK/loop.py" "$WORK/mnt" "$FILES")
  t1=$(date +%s%N)
  ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  "$EXE" umount "$WORK/mnt" >/dev/null
  awk -v l="$label" -v r="$rates" -v ns=$((t1 - t0)) -v t="$ticks" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "%-8s %s; loop %.2f s, daemon CPU %.2f s\n", l, r, ns / 1e9, t / hz }'
}
for r in $(seq "$ROUNDS"); do
  echo "round $r of $ROUNDS ($FILES files)"
  one poll
  one nopoll --poll-us 0
done
