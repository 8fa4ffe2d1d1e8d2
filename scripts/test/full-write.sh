#!/usr/bin/env bash
# Writes past a full device through the mount (`crates/extalloc-fuse/src/fs/headroom.rs`):
#
# 1. `dd` of 200 MiB of random bytes into a fresh 64 MiB volume. The open comes with less
#    room than the margin, so its writes bypass the kernel's cache: a `write(2)` must fail
#    with ENOSPC (dd exits non-zero saying so), and every byte dd counts as copied must
#    read back, before and after a remount. Before the rule, all 200 writes succeeded and
#    only `close` failed.
# 2. A writer that opened a 1 GiB volume while it was empty (so with the cache) writes
#    2 GiB in 1 MiB pieces, as `cp` would. Near full the kernel may hold less and less
#    dirty for the mount (the cap), so it writes back as the writer goes; once a write
#    back finds no room, the writer's next `write(2)` must fail with ENOSPC (the latch)
#    before the 2 GiB are written. What the writer saw acknowledged beyond what the
#    volume holds is printed: at most the cap then. Without the cap every write succeeded
#    (the kernel held it all) and only `close` failed.
# 3. Root's share of the device (ext4's reserved blocks, docs/mount.md): on a fresh 64 MiB
#    volume an unprivileged user (nobody) writes 40 KiB files in a world-writable
#    directory until a write fails with ENOSPC; `df` must then show less available than
#    two such files, and root must then write at least half the share (5 % of the
#    device) more into new files. Before the rule, the user's writes went
#    on past `df`'s 0 available until 3 blocks were free.
#
# Each volume is then unmounted and must pass fsck.
#
#   sudo scripts/test/full-write.sh           # about 10 seconds
#
# Needs root, /dev/fuse and a built target/release/extalloc (or EXTALLOC_BIN). Exits
# non-zero at the first broken promise.
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $(id -u) -eq 0 ]] || { echo "full-write.sh: needs root (it mounts)" >&2; exit 1; }
[[ -c /dev/fuse ]] || { echo "full-write.sh: no /dev/fuse" >&2; exit 1; }
BIN="${EXTALLOC_BIN:-$PWD/target/release/extalloc}"
[[ -x "$BIN" ]] || { echo "full-write.sh: build first: cargo build --release -p extalloc-cli" >&2; exit 1; }
WORK=$(mktemp -d /var/tmp/extalloc-full-write.XXXXXX)
IMG="$WORK/fs.img"
MNT="$WORK/mnt"
mkdir -p "$MNT"
cleanup() {
  if mountpoint -q "$MNT"; then fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT" || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  echo "full-write.sh: FAILED: $1; the daemon's log:" >&2
  grep -m1 -A12 'panicked' "$WORK/mount.log" >&2 || tail -n 20 "$WORK/mount.log" >&2 || true
  exit 1
}
fresh() { # SIZE: a new volume of SIZE mounted on $MNT
  rm -f "$IMG"
  "$BIN" mkfs "$IMG" --size "$1" >/dev/null
  "$BIN" mount "$IMG" "$MNT" --log "$WORK/mount.log" >/dev/null
}
done_with() { # unmount, then fsck must be clean
  "$BIN" umount "$MNT" >/dev/null
  "$BIN" fsck "$IMG" >"$WORK/fsck.out" || { cat "$WORK/fsck.out" >&2; fail "fsck after $1"; }
}

# 1. dd into a small volume.
head -c 200M /dev/urandom >"$WORK/src"
fresh 64MiB
if dd if="$WORK/src" of="$MNT/big" bs=1M 2>"$WORK/dd.err"; then
  fail "dd wrote 200 MiB into a 64 MiB volume without an error"
fi
grep -q 'No space left on device' "$WORK/dd.err" || { cat "$WORK/dd.err" >&2; fail "dd's error is not ENOSPC"; }
grep -q '^dd: error writing' "$WORK/dd.err" || { cat "$WORK/dd.err" >&2; fail "ENOSPC did not come at a write"; }
copied=$(sed -n 's/^\([0-9]*\) bytes.*copied.*/\1/p' "$WORK/dd.err")
size=$(stat -c %s "$MNT/big")
[[ "$size" == "$copied" ]] || fail "dd copied $copied bytes, the file holds $size"
cmp -n "$size" "$WORK/src" "$MNT/big" || fail "the bytes dd copied do not read back"
"$BIN" umount "$MNT" >/dev/null
"$BIN" mount "$IMG" "$MNT" --log "$WORK/mount.log" >/dev/null
cmp -n "$size" "$WORK/src" "$MNT/big" || fail "the bytes dd copied do not read back after a remount"
done_with "dd"
echo "dd 200 MiB into 64 MiB: ENOSPC at a write after $((size >> 20)) MiB; every byte copied reads back, after a remount too; fsck clean"
rm -f "$WORK/src"

# 2. A writer opened with the cache, then the device fills under it.
fresh 1GiB
python3 - "$MNT/big" $((2 << 30)) >"$WORK/latch.out" <<'EOF' || { cat "$WORK/latch.out" >&2; fail "the cached writer was never refused"; }
import errno, os, sys
path, total = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
piece = os.urandom(1 << 20)
acked, refused = 0, None
while acked < total:
    try:
        acked += os.write(fd, piece)
    except OSError as e:
        refused = e.errno
        break
try:
    os.close(fd)
    closed = "ok"
except OSError as e:
    closed = errno.errorcode[e.errno]
placed = os.stat(path).st_blocks * 512
st = os.statvfs(os.path.dirname(path))
held = (st.f_blocks - st.f_bfree) * st.f_frsize
print(f"{acked >> 20} MiB acknowledged, then {errno.errorcode.get(refused, 'no error')} at a write;"
      f" close {closed}; the file has {placed >> 20} MiB placed, the volume {held >> 20} MiB in use")
sys.exit(0 if refused == errno.ENOSPC else 1)
EOF
done_with "the cached writer"
echo "a cached writer on 1 GiB: $(cat "$WORK/latch.out"); fsck clean"

# 3. An unprivileged writer leaves root's share.
chmod o+x "$WORK" # nobody walks to the mount point
fresh 64MiB
mkdir "$MNT/pub"
chmod 1777 "$MNT/pub"
python3 - "$MNT" >"$WORK/share.out" <<'EOF' || { cat "$WORK/share.out" >&2; fail "root's share"; }
import errno, os, sys
mnt = sys.argv[1]
piece = os.urandom(40 << 10)
def fill(dir, uid):
    # Files of 40 KiB, each fsync'd, until one fails with ENOSPC: the whole files written.
    pid = os.fork()
    if pid == 0:
        if uid:
            os.setgid(uid)
            os.setuid(uid)
        n = 0
        while True:
            try:
                fd = os.open(f"{dir}/f{uid}-{n}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                try:
                    os.write(fd, piece)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    print(f"uid {uid}: {e}", file=sys.stderr)
                os._exit(0 if e.errno == errno.ENOSPC else 2)
            n += 1
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"uid {uid}: an error but ENOSPC"
    names = [n for n in os.listdir(dir) if n.startswith(f"f{uid}-")]
    return sum(os.stat(f"{dir}/{n}").st_size == len(piece) for n in names)
users = fill(f"{mnt}/pub", 65534)
st = os.statvfs(mnt)
share = st.f_blocks * st.f_frsize // 20  # 5 % of the device, about the share
print(f"nobody wrote {users} files of 40 KiB; then df: {st.f_bavail * st.f_frsize >> 10} KiB available;")
# The user stopped where a file no longer fits what df shows available.
ok = st.f_bavail * st.f_frsize < 2 * len(piece)
roots = fill(mnt, 0)
print(f"root wrote {roots} files more into its share (5 % of the device: {share >> 10} KiB);")
ok = ok and roots * len(piece) >= share // 2
sys.exit(0 if ok else 1)
EOF
done_with "root's share"
echo "root's share on 64 MiB: $(tr '\n' ' ' <"$WORK/share.out")fsck clean"
