#!/usr/bin/env bash
# Full and fragmented volumes through the mount (issue 50): each case fills a fresh image
# to its first ENOSPC, removes every other file, churns (creates, overwrites, unlinks) to
# ENOSPC again, then kill -9 of the daemon; then mount read-write, mount read-only and
# `fsck --repair` must each succeed, every file synced before the kill must read back,
# and the report says at what use (df) the first failed write and the first failed
# fsync came. ext4 under the same script reaches 100 % before its first ENOSPC and its
# fsync never fails.
#
#   sudo scripts/bench/full-volume.sh [CASE...]   # cases: small4k (64 MiB, 4 KiB files),
#                                           # mid4k (256 MiB, 4 KiB files), churn (1 GiB,
#                                           # 1-128 KiB files); default: all three; and
#                                           # small1k (64 MiB of 1 KiB blocks, 1-4 KiB
#                                           # files: the tree's nodes span 4 blocks)
#
# Needs root, /dev/fuse, fusermount3 and target/release/extalloc (or EXTALLOC_BIN). One
# line per case; exits non-zero if a mount, the repair or a synced file failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $(id -u) -eq 0 ]] || { echo "full-volume.sh: needs root (it mounts)" >&2; exit 1; }
BIN="${EXTALLOC_BIN:-$PWD/target/release/extalloc}"
[[ -x "$BIN" ]] || { echo "full-volume.sh: build first: cargo build --release -p extalloc-cli" >&2; exit 1; }
WORK=$(mktemp -d /var/tmp/extalloc-full.XXXXXX)
MNT="$WORK/mnt"
mkdir -p "$MNT"
cleanup() {
  if mountpoint -q "$MNT"; then fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT" || true; fi
  [[ -n "${KEEP:-}" ]] && echo "full-volume.sh: kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT

cat >"$WORK/churn.py" <<'PY'
import errno, os, random, sys
mnt, lo, hi, seed, synced_list = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
rng = random.Random(seed)
d = os.path.join(mnt, "c"); os.makedirs(d, exist_ok=True)
def used():
    s = os.statvfs(mnt); return 100.0 * (1 - s.f_bfree / s.f_blocks)
first = {}
at = "open"  # the call put() is in: its ENOSPC came at the write(2) itself, or at close
def note(kind, e):
    first.setdefault(kind, (round(used(), 2), errno.errorcode.get(e.errno, e.errno), at))
names, synced, n = [], {}, 0
def put(name):
    global at
    size = rng.randint(lo, hi) * 1024
    body = rng.randbytes(size)
    synced.pop(name, None)  # truncated below: whatever it held, no longer what was synced
    at = "open"
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        at = "write"
        view = memoryview(body)
        while view:
            view = view[os.write(fd, view):]
        if rng.random() < 0.1:
            at = "fsync"
            try:
                os.fsync(fd); synced[name] = body
            except OSError as e:
                note("fsync", e); raise
    except OSError:
        try: os.close(fd)
        except OSError: pass
        raise
    at = "close"
    os.close(fd)
def fill():
    global n
    while True:
        name = os.path.join(d, f"f{n}"); n += 1
        try:
            put(name); names.append(name)
        except OSError as e:
            note("write", e)
            try: os.unlink(name)
            except OSError as e2: note("unlink", e2)
            return
fill()
fill_used = round(used(), 2)
for name in names[::2]:
    try:
        os.unlink(name); synced.pop(name, None)
    except OSError as e:
        note("unlink", e)
names = names[1::2]
half_used = round(used(), 2)
w = first.pop("write")
for _ in range(200000):
    r = rng.random()
    try:
        if r < 0.45 or not names:
            name = os.path.join(d, f"f{n}"); n += 1; put(name); names.append(name)
        elif r < 0.7:
            put(rng.choice(names))
        else:
            at = "unlink"
            name = names.pop(rng.randrange(len(names))); os.unlink(name); synced.pop(name, None)
    except OSError as e:
        note("write", e); break
try:
    os.sync()
except OSError as e:
    note("sync", e)
with open(synced_list, "w") as f:
    for name, body in synced.items():
        f.write(f"{name} {len(body)} {hash(body) & 0xffffffff}\n")
cw = first.get('write')
print(f"first ENOSPC at {w[0]} % (fill, at {w[2]}), {half_used} % after removing half, churn's "
      f"first failed write at {cw[0] if cw else 'none'} %{f' (at {cw[2]})' if cw else ''}, first failed fsync "
      f"{first.get('fsync', 'none')}, unlink {first.get('unlink', 'ok')}, sync "
      f"{first.get('sync', 'ok')}; {len(synced)} files fsync'd")
PY

cat >"$WORK/verify.py" <<'PY'
import sys
bad = 0
for line in open(sys.argv[1]):
    name, size, h = line.split()
    name = name.replace(sys.argv[2], sys.argv[3], 1)
    try:
        body = open(name, "rb").read()
    except OSError as e:
        bad += 1; print(f"{name}: {e}", file=sys.stderr); continue
    if len(body) != int(size) or hash(body) & 0xffffffff != int(h):
        bad += 1; print(f"{name}: {len(body)} bytes, not the {size} synced", file=sys.stderr)
sys.exit(1 if bad else 0)
PY

run_case() { # NAME SIZE LO_KIB HI_KIB [MKFS OPTION...]
  local name=$1 size=$2 lo=$3 hi=$4 img="$WORK/$1.img" out pid verdict=ok
  shift 4
  "$BIN" mkfs "$img" --size "$size" "$@" >/dev/null
  out=$("$BIN" mount "$img" "$MNT" --log "$WORK/$name.log")
  pid=$(sed -n 's/.*(process \([0-9]*\)).*/\1/p' <<<"$out")
  local said
  said=$(PYTHONHASHSEED=0 python3 "$WORK/churn.py" "$MNT" "$lo" "$hi" 1 "$WORK/$name.synced")
  kill -9 "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT"
  local rw=ok ro=ok rep=ok readback=ok
  if "$BIN" mount "$img" "$MNT" --log "$WORK/$name.log2" >/dev/null; then
    PYTHONHASHSEED=0 python3 "$WORK/verify.py" "$WORK/$name.synced" "$MNT" "$MNT" || readback=FAILED
    "$BIN" umount "$MNT" >/dev/null || rw="umount FAILED"
  else rw=FAILED; fi
  if "$BIN" mount "$img" "$MNT" --read-only >/dev/null 2>&1; then "$BIN" umount "$MNT" >/dev/null || true
  else ro=FAILED; fi
  "$BIN" fsck --repair "$img" >"$WORK/$name.fsck" 2>&1 || { [[ $? -le 1 ]] || rep=FAILED; }
  [[ "$rw$ro$rep$readback" == okokokok ]] || verdict=FAILED
  echo "full-volume $name ($size, $lo-$hi KiB files): $said; after kill -9: mount rw $rw, mount ro $ro, fsck --repair $rep, synced files $readback: $verdict"
  [[ $verdict == ok ]]
}

status=0
for c in "${@:-small4k mid4k churn}"; do
  for one in $c; do
    case $one in
      small4k) run_case small4k 64MiB 4 4 || status=1 ;;
      mid4k) run_case mid4k 256MiB 4 4 || status=1 ;;
      churn) run_case churn 1GiB 1 128 || status=1 ;;
      small1k) run_case small1k 64MiB 1 4 --block-size 1024 || status=1 ;;
      *) echo "full-volume.sh: unknown case $one" >&2; exit 2 ;;
    esac
  done
done
exit $status
