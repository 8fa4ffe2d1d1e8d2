#!/usr/bin/env bash
# The file system under tools nobody on the project wrote: `extalloc mount` on a fresh
# device, then fsx (several seeds), pjdfstest, fio with verify=crc32c (seed 003's
# random-write job, sequential writes, mixed reads and writes), O_DIRECT against buffered
# I/O and mmap (both ways, checksums), durability without fsync
# (kill -9 right after `sync; sync MOUNTPOINT`, and after the background commit's
# interval, under -o sync and -o dirsync, and in a chattr +S directory), a shutdown ioctl, `extalloc umount` followed at once by fsck and a new mount, SIGTERM with the
# mount copied into another mount namespace, and kill -9 crashes of the mount in the
# middle of fio: each followed by `fusermount3 -u`, a new mount (which repairs), fio's
# verify of every round that finished (and so was fsync'd), and fsck; writes past a full
# device (scripts/test/full-write.sh: ENOSPC at the write(2)).
#
#   scripts/test/mount-tests.sh            # CI: 2 fsx seeds x 100,000 ops, 3 crashes, 4x5 rename
#                                     # kills (scripts/test/rename-crash.sh) (~5 min)
#   scripts/test/mount-tests.sh --lab      # 4 fsx seeds, 20 crashes, 100+100 rename kills (~25 min)
#   scripts/test/mount-tests.sh --smoke    # mkfs, mount, one fsx seed x 20,000 ops, umount, fsck
#                                     # (scripts/test.sh's quick tier, ~1 min)
#
# EXTALLOC_MOUNT_ARGS adds options to every mount: by default "--file-cache 0", so that every
# background commit drops the volume's clean files and the inodes only the kernel holds,
# and the tools run against inodes read back (docs/format.md, "On-demand files", step 5);
# EXTALLOC_MOUNT_ARGS= tests the mount's own defaults.
#
# Needs root and /dev/fuse. Without them it says so loudly and stops; under CI=true it
# fails instead. Tools come from scripts/ci/fs-tools.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
FSX_OPS=${FSX_OPS:-100000}
FSX_SEEDS="1 2"
CRASHES=${CRASHES:-3}
RENAME_KILLS=${RENAME_KILLS:-5}
SMOKE=0
case "${1:-}" in
  --lab)
    FSX_SEEDS="1 2 3 4"
    CRASHES=20
    RENAME_KILLS=100
    ;;
  --smoke)
    SMOKE=1
    FSX_SEEDS="1"
    FSX_OPS=${FSX_OPS_SMOKE:-20000}
    ;;
  "") ;;
  *)
    echo "mount-tests.sh: unknown option $1 (--lab, --smoke or none)" >&2
    exit 2
    ;;
esac

skip() {
  if [[ "${CI:-}" == "true" ]]; then
    echo "mount-tests.sh: FAILED: $1 (CI may not skip)" >&2
    exit 1
  fi
  echo "############################################################" >&2
  echo "mount-tests.sh: SKIPPED, the mount was NOT tested: $1" >&2
  echo "############################################################" >&2
  exit 0
}
[[ $(id -u) -eq 0 ]] || skip "not root (the mount tests switch users and mount)"
[[ -c /dev/fuse ]] || skip "no /dev/fuse"
./scripts/ci/fs-tools.sh
./scripts/mount/drop-dead-mounts.sh
PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
# The build under test: release, or the profile EXTALLOC_PROFILE names (scripts/test.sh
# runs the suite under `checked`: release with debug assertions and overflow checks on).
# EXTALLOC_TEST_BIN: a binary built already (test.sh passes the one its workspace tests
# built: a build of the CLI alone unifies other features and would compile it all again).
PROFILE=${EXTALLOC_PROFILE:-release}
if [[ -n "${EXTALLOC_TEST_BIN:-}" ]]; then
  BIN="$EXTALLOC_TEST_BIN"
else
  cargo build --profile "$PROFILE" -q -p extalloc-cli
  BIN="$PWD/target/$PROFILE/extalloc"
fi
REPO="$PWD"
TOOLS="$PWD/crates/extalloc-fuse/tools"

WORK=$(mktemp -d /var/tmp/extalloc-mount.XXXXXX)
chmod 755 "$WORK" # pjdfstest works as other users below it
IMG="$WORK/fs.img"
MNT="$WORK/mnt"
mkdir -p "$MNT" "$WORK/second"
cd "$WORK" # fio leaves its verify state files in the working directory
cleanup() {
  pkill -9 -f "fio.*$WORK" 2>/dev/null || true
  pkill -9 -f "fsx.*$WORK" 2>/dev/null || true
  if mountpoint -q "$MNT"; then umount "$MNT" 2>/dev/null || fusermount3 -uz "$MNT" || true; fi
  sleep 0.5
  cd /
  rm -rf "$WORK"
}
trap cleanup EXIT
step() { printf '\n== %s (%s)\n' "$1" "$(date +%T)"; }

DAEMON=0
do_mount() { # [MOUNT OPTIONS...]
  local out
  # shellcheck disable=SC2086 # EXTALLOC_MOUNT_ARGS is a list of options
  out=$("$BIN" mount "$IMG" "$MNT" --log "$WORK/mount.log" ${EXTALLOC_MOUNT_ARGS---file-cache 0} "$@")
  echo "$out"
  DAEMON=$(sed -n 's/.*(process \([0-9]*\)).*/\1/p' <<<"$out")
  [[ -n "$DAEMON" ]] || { echo "no daemon pid in: $out" >&2; exit 1; }
}
do_umount() {
  # Not plain umount: it returns before the daemon has written everything back and
  # released the device; extalloc umount waits for that.
  "$BIN" umount "$MNT" >/dev/null
}
killed() { # after kill -9 of the daemon: drop its dead mount, wait for it to let go
  fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT"
  # The signal is asynchronous: the process (and its hold on the device) may outlive the
  # kill by a moment on a loaded machine, and the next mount would find the device busy.
  released 30
}
released() { # SECONDS: wait until no daemon holds the device, or fail
  local deadline=$((SECONDS + $1))
  until flock -n -x "$IMG" true; do
    ((SECONDS < deadline)) || { echo "the daemon still holds $IMG after $1 s" >&2; exit 1; }
    sleep 0.05
  done
}

step "mkfs and mount"
"$BIN" mkfs "$IMG" --size 4GiB
do_mount

step "fsx: seeds $FSX_SEEDS, $FSX_OPS operations each, side by side"
# The seeds run at once, each on its own file of the one mount: the daemon serves them
# together (concurrency it must handle anyway), and on 2 cores they take about the time of
# one seed instead of the sum.
read -r -a seeds <<<"$FSX_SEEDS"
pids=()
for seed in "${seeds[@]}"; do
  mkdir -p "$WORK/fsx-$seed"
  (cd "$WORK/fsx-$seed" && exec fsx -q -f "$TOOLS/fsx.toml" -N "$FSX_OPS" -S "$seed" \
    -P "$WORK/fsx-$seed" "$MNT/fsx-$seed.bin") >"$WORK/fsx-$seed.log" 2>&1 &
  pids+=("$!")
done
for i in "${!seeds[@]}"; do
  if ! wait "${pids[$i]}"; then
    tail -n 40 "$WORK/fsx-${seeds[$i]}.log" >&2
    echo "fsx seed ${seeds[$i]} FAILED" >&2
    exit 1
  fi
  echo "fsx seed ${seeds[$i]}: $FSX_OPS operations passed"
done
if ((SMOKE)); then
  do_umount
  "$BIN" fsck "$IMG" >/dev/null || { echo "smoke: fsck after the umount FAILED" >&2; exit 1; }
  echo "mount-tests.sh --smoke: mounted, fsx passed, unmounted, fsck clean (the full run: no option)"
  exit 0
fi

step "pjdfstest"
mkdir -p "$MNT/pjd"
(cd "$MNT/pjd" && pjdfstest -c "$TOOLS/pjdfstest.toml" -p "$MNT/pjd" -s "$WORK/second") \
  >"$WORK/pjdfstest.out" 2>&1 || true
summary=$(grep '^Summary:' "$WORK/pjdfstest.out" || true)
echo "pjdfstest: ${summary:-no summary}"
if [[ -z "$summary" ]] || ! grep -q '^Summary: 0 failed' <<<"$summary"; then
  grep -B2 -A8 -i 'failed' "$WORK/pjdfstest.out" | head -80 >&2
  echo "pjdfstest FAILED" >&2
  exit 1
fi
grep -A1 'skipped$' "$WORK/pjdfstest.out" | grep -v -- '^--' | paste - - | sed 's/  */ /g' || true

step "FUSE over io_uring: fsx and a tree through the rings"
# The kernel offers the rings only with the fuse module's enable_uring set before the mount;
# the step sets it and puts the old value back. A kernel without it: said, not run.
URING=/sys/module/fuse/parameters/enable_uring
if [[ -w "$URING" ]]; then
  was=$(cat "$URING")
  do_umount
  released 30
  echo 1 >"$URING"
  do_mount --io-uring
  echo "$was" >"$URING"
  rings=$(cat /proc/"$DAEMON"/task/*/comm | grep -c '^extalloc-fuse-r' || true)
  [[ "$rings" -ge 1 ]] || { echo "io_uring asked for, but the daemon runs no ring thread" >&2; exit 1; }
  mkdir -p "$WORK/fsx-uring"
  (cd "$WORK/fsx-uring" && fsx -q -f "$TOOLS/fsx.toml" -N 20000 -S 7 -P "$WORK/fsx-uring" \
    "$MNT/fsx-uring.bin") >"$WORK/fsx-uring.log" 2>&1 ||
    { tail -n 40 "$WORK/fsx-uring.log" >&2; echo "fsx through io_uring FAILED" >&2; exit 1; }
  cp -a "$REPO/crates/extalloc-fuse/src" "$MNT/uring-tree"
  diff -r "$REPO/crates/extalloc-fuse/src" "$MNT/uring-tree"
  rm -r "$MNT/uring-tree"
  echo "io_uring: $rings ring threads; fsx seed 7, 20000 operations passed; a tree copied, compared, removed"
  do_umount
  released 30
  "$BIN" fsck "$IMG" | tail -n 1
  do_mount
else
  echo "io_uring: NOT RUN: this kernel has no $URING (FUSE over io_uring needs Linux 6.14+)"
fi

fio_job() { # NAME DIR EXTRA...: a fio job file on stdout
  local name=$1 dir=$2
  shift 2
  printf '[global]\ndirectory=%s\nioengine=io_uring\niodepth=32\ndirect=0\nverify=crc32c\nrandrepeat=1\nrandseed=42\n' "$dir"
  printf '%s\n' "$@"
  printf '[%s]\n' "$name"
}

step "fio with verify=crc32c"
mkdir -p "$MNT/fio"
for d in 1 2 3 4; do mkdir -p "$MNT/fio/dir$d"; done
{
  printf '[global]\nbs=4k\niodepth=32\nrw=randwrite\nioengine=io_uring\nnrfiles=1\nsize=64m\n'
  printf 'direct=0\nverify=crc32c\ndo_verify=1\n'
  for d in 1 2 3 4; do printf '[job%s]\ndirectory=%s/fio/dir%s\n' "$d" "$MNT" "$d"; done
} >"$WORK/seed003.fio"
fio_job seq "$MNT/fio" "rw=write" "bs=1m" "size=256m" "end_fsync=1" >"$WORK/seq.fio"
fio_job mixed "$MNT/fio" "rw=randrw" "rwmixread=50" "bsrange=4k-64k" "size=128m" \
  "numjobs=2" >"$WORK/mixed.fio"
for job in seed003 seq mixed; do
  fio --output="$WORK/$job.out" "$WORK/$job.fio" || { cat "$WORK/$job.out" >&2; echo "fio $job FAILED" >&2; exit 1; }
  grep -qi 'verify.*bad\|crc32c.*mismatch' "$WORK/$job.out" && { cat "$WORK/$job.out" >&2; exit 1; }
  echo "fio $job: written and verified ($(grep -m1 -o 'WRITE: bw=[^ ]*' "$WORK/$job.out"))"
done

step "extended attributes: set, copied by cp -a and tar --xattrs, kept across a remount"
mkdir "$MNT/xa"
echo data >"$MNT/xa/f"
setfattr -n user.small -v hello "$MNT/xa/f"
setfattr -n trusted.t -v 1 "$MNT/xa/f"
head -c 45000 /dev/urandom | base64 -w0 >"$WORK/big.txt" # 60,000 bytes: spills out of the inode
setfattr -n user.big -v "$(cat "$WORK/big.txt")" "$MNT/xa/f"
cp -a "$MNT/xa/f" "$MNT/xa/copy"
(cd "$MNT/xa" && tar --xattrs --xattrs-include='*' -cf "$WORK/xa.tar" f)
mkdir "$MNT/xa/untar"
tar --xattrs --xattrs-include='*' -xf "$WORK/xa.tar" -C "$MNT/xa/untar"
if setfattr -n user.x -v 1 "$MNT/xa/none" 2>/dev/null; then
  echo "setfattr on a missing file succeeded" >&2; exit 1
fi
do_umount
do_mount
for f in f copy untar/f; do
  [[ $(getfattr --only-values -n user.small "$MNT/xa/$f") == hello ]] \
    || { echo "user.small of xa/$f lost" >&2; exit 1; }
  [[ $(getfattr --only-values -n user.big "$MNT/xa/$f") == "$(cat "$WORK/big.txt")" ]] \
    || { echo "user.big of xa/$f lost" >&2; exit 1; }
done
[[ $(getfattr --only-values -n trusted.t "$MNT/xa/f") == 1 ]] || { echo "trusted.t lost" >&2; exit 1; }
setfattr -x user.big "$MNT/xa/f"
if getfattr -n user.big "$MNT/xa/f" 2>/dev/null; then echo "user.big not removed" >&2; exit 1; fi
echo "extended attributes: inline and spilled values kept through cp -a, tar and a remount"

step "POSIX ACLs: enforced by the kernel, the mask kept with the mode, default ACLs inherited"
mkdir "$MNT/acl"
echo secret >"$MNT/acl/f"
chmod 600 "$MNT/acl/f"
reads() { su nobody -s /bin/sh -c "cat $MNT/acl/f" >/dev/null 2>&1; }
if reads; then echo "nobody read a 0600 file of root's" >&2; exit 1; fi
setfacl -m u:nobody:r "$MNT/acl/f"
reads || { echo "an ACL entry for nobody did not let it read" >&2; exit 1; }
[[ $(stat -c %a "$MNT/acl/f") == 640 ]] || { echo "the mode's group bits are not the mask" >&2; exit 1; }
chmod 600 "$MNT/acl/f" # the mask goes to ---
if reads; then echo "chmod 600 did not mask nobody's entry" >&2; exit 1; fi
setfacl -d -m u:nobody:rwx "$MNT/acl"
(umask 077 && touch "$MNT/acl/new" && mkdir "$MNT/acl/sub")
[[ $(stat -c %a "$MNT/acl/new") == 664 ]] || { echo "a new file did not take the default ACL" >&2; exit 1; }
getfacl -p "$MNT/acl/sub" | grep '^default:user:nobody:rwx' >/dev/null \
  || { echo "a new directory did not take the default ACL" >&2; exit 1; }
do_umount
do_mount
getfacl -p "$MNT/acl/f" | grep '^user:nobody:r--' >/dev/null || { echo "an ACL was lost in a remount" >&2; exit 1; }
echo "ACLs: enforced, masked by chmod, inherited, kept across a remount"
step "O_DIRECT: direct writes read back buffered, through mmap and direct, and the reverse"
# fstests' _require_odirect and databases open with O_DIRECT: a mount that refuses it fails
# here, never skips. The kernel bypasses its page cache for a direct open but writes back
# and drops the range first, so each check below crosses the page cache and direct I/O.
mkdir -p "$MNT/direct"
head -c $((8 << 20)) /dev/urandom >"$WORK/direct1.ref"
head -c $((8 << 20)) /dev/urandom >"$WORK/direct2.ref"
if ! dd if="$WORK/direct1.ref" of="$MNT/direct/f" bs=1M oflag=direct status=none \
  2>"$WORK/direct.err"; then
  cat "$WORK/direct.err" >&2
  echo "O_DIRECT FAILED: the mount refused a direct write (dd oflag=direct)" >&2
  exit 1
fi
want=$(sha256sum <"$WORK/direct1.ref" | cut -d' ' -f1)
buffered=$(sha256sum <"$MNT/direct/f" | cut -d' ' -f1)
direct=$(dd if="$MNT/direct/f" bs=1M iflag=direct status=none | sha256sum | cut -d' ' -f1)
mapped=$(python3 -c 'import hashlib, mmap, sys
with open(sys.argv[1], "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
    print(hashlib.sha256(m).hexdigest())' "$MNT/direct/f")
if [[ "$buffered" != "$want" || "$direct" != "$want" || "$mapped" != "$want" ]]; then
  echo "O_DIRECT FAILED: written $want, read buffered $buffered, direct $direct, mmap $mapped" >&2
  exit 1
fi
echo "O_DIRECT: 8 MiB written direct, read back buffered, direct and through mmap: $want"
# Against pages the kernel holds: a mapping read before a direct write sees the new data;
# a mapping's and a buffered write's dirty pages (no msync, no fsync) are seen by a direct
# read; a direct write at an unaligned offset and size lands too.
python3 - "$MNT/direct/f" "$WORK/direct2.ref" <<'EOF' \
  || { echo "O_DIRECT coherence FAILED" >&2; exit 1; }
import mmap, os, subprocess, sys
path, ref = sys.argv[1], sys.argv[2]
new = bytearray(open(ref, "rb").read())
def direct_read():
    return subprocess.run(["dd", "if=" + path, "bs=1M", "iflag=direct", "status=none"],
                          check=True, stdout=subprocess.PIPE).stdout
fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, 0)
old = bytes(m)
subprocess.run(["dd", "if=" + ref, "of=" + path, "bs=1M", "oflag=direct", "conv=notrunc",
                "status=none"], check=True)
assert m[:] == new, "a mapping read before a direct write kept the old data"
assert os.pread(fd, len(new), 0) == new, "a buffered read after a direct write: old data"
m[12288:20480] = b"\x5a" * 8192
new[12288:20480] = b"\x5a" * 8192
os.pwrite(fd, b"\xa5" * 5000, 100000)
new[100000:105000] = b"\xa5" * 5000
assert direct_read() == new, "a direct read missed dirty pages of a mapping or a write"
dfd = os.open(path, os.O_RDWR | os.O_DIRECT)
os.pwrite(dfd, b"unaligned", 1000)
new[1000:1009] = b"unaligned"
os.close(dfd)
assert m[:] == new and os.pread(fd, len(new), 0) == new, "an unaligned direct write"
assert old != bytes(new)
m.close()
os.close(fd)
open(ref, "wb").write(new)
EOF
want=$(sha256sum <"$WORK/direct2.ref" | cut -d' ' -f1)
do_umount
do_mount >/dev/null
after=$(dd if="$MNT/direct/f" bs=1M iflag=direct status=none | sha256sum | cut -d' ' -f1)
if [[ "$after" != "$want" ]]; then
  echo "O_DIRECT FAILED: after a remount $after, written $want" >&2
  exit 1
fi
echo "O_DIRECT: coherent with mmap and buffered I/O both ways, unaligned too, kept by a remount"

step "unmount and fsck"
do_umount
"$BIN" fsck "$IMG"
"$BIN" fsck --json "$IMG" | python3 -c 'import json, sys
n = json.load(sys.stdin)["namespace"]
assert n["clean"] and n["dirs"] >= 2 and n["files"] >= 1, n
print("fsck --json: namespace clean,", n["dirs"], "directories,", n["files"], "files")'

step "refusals and SIGTERM"
do_mount >/dev/null
if "$BIN" mount "$IMG" "$WORK/second" 2>"$WORK/busy.err"; then
  echo "a second mount of the same device was accepted" >&2; exit 1
fi
grep -q "in use" "$WORK/busy.err" || { cat "$WORK/busy.err" >&2; exit 1; }
echo "second mount refused: $(head -c 100 "$WORK/busy.err")..."
head -c 1048576 /dev/urandom >"$WORK/not-extalloc.img"
if "$BIN" mount "$WORK/not-extalloc.img" "$WORK/second" 2>"$WORK/foreign.err"; then
  echo "a device that is not extalloc's was mounted" >&2; exit 1
fi
grep -q "not an extalloc device" "$WORK/foreign.err" || { cat "$WORK/foreign.err" >&2; exit 1; }
echo "foreign device refused: $(head -c 100 "$WORK/foreign.err")..."
echo data >"$MNT/sigterm-file"
kill -TERM "$DAEMON"
released 10
mountpoint -q "$MNT" && { echo "SIGTERM left the mount in place" >&2; exit 1; }
"$BIN" fsck "$IMG" >/dev/null
"$BIN" ls "$IMG" | grep "/sigterm-file (file)" >/dev/null || { echo "SIGTERM lost an unsynced file" >&2; exit 1; }
echo "SIGTERM: unmounted, daemon exited, written back (an unsynced file is there), fsck clean"

mkdir -p "$WORK/ref"
for i in $(seq 1 50); do head -c $((i * 997)) /dev/urandom >"$WORK/ref/f$i"; done
put_files() { # DIR: the 50 reference files, closed (so their data has left the kernel)
  mkdir -p "$1"
  for i in $(seq 1 50); do cp "$WORK/ref/f$i" "$1/f$i"; done
}
check_files() { # DIR WHAT: all 50 reference files under DIR, byte for byte, or fail
  local bad=0
  for i in $(seq 1 50); do cmp -s "$WORK/ref/f$i" "$1/f$i" || bad=$((bad + 1)); done
  if ((bad > 0)); then
    echo "$2: $bad of 50 files missing or different after kill -9 and a new mount" >&2
    exit 1
  fi
  echo "$2: all 50 files read back as written"
}

step "sync, then kill -9 at once (no background commit)"
# The kernel sends a FUSE mount no syncfs: `sync` only hands the kernel's dirty pages to
# the daemon; an fsync of the root directory (`sync MOUNTPOINT`) commits everything.
do_mount --commit-interval 0 >/dev/null
put_files "$MNT/synced"
sync
sync "$MNT"
kill -9 "$DAEMON"
killed
do_mount >/dev/null
check_files "$MNT/synced" "sync; sync MOUNTPOINT; kill -9"
do_umount

step "the background commit, then kill -9"
do_mount --commit-interval 1 >/dev/null
put_files "$MNT/committed"
sleep 2.5 # past the interval, and the commit's own time
kill -9 "$DAEMON"
killed
do_mount >/dev/null
check_files "$MNT/committed" "--commit-interval 1, 2.5 s idle, kill -9"
do_umount

step "-o sync and -o dirsync, then kill -9 at once (no background commit)"
# sync: the kernel fsyncs after every write and the daemon commits every other change
# before its reply; dirsync: every namespace change is committed before its reply.
do_mount --commit-interval 0 -o sync >/dev/null
grep -q " $MNT .* rw,sync" /proc/self/mountinfo || { echo "-o sync: the mount is not sync" >&2; exit 1; }
put_files "$MNT/sync"
chmod 600 "$MNT/sync/f1"
kill -9 "$DAEMON"
killed
do_mount --commit-interval 0 -o dirsync >/dev/null
check_files "$MNT/sync" "-o sync; kill -9"
[[ $(stat -c %a "$MNT/sync/f1") == 600 ]] || { echo "-o sync: a chmod was lost" >&2; exit 1; }
mkdir -p "$MNT/dirsync/a/b" && touch "$MNT/dirsync/a/b/c" && mv "$MNT/dirsync/a/b/c" "$MNT/dirsync/d"
kill -9 "$DAEMON"
killed
do_mount >/dev/null
[[ -d "$MNT/dirsync/a/b" && -f "$MNT/dirsync/d" && ! -e "$MNT/dirsync/a/b/c" ]] \
  || { echo "-o dirsync: names lost after kill -9: $(find "$MNT/dirsync")" >&2; exit 1; }
echo "-o sync: 50 files and a chmod kept; -o dirsync: 2 mkdirs, a create and a rename kept"
do_umount

step "chattr +S on a directory, then kill -9 at once (no background commit)"
# A synchronous directory commits the names made in it; its files inherit the flag, are
# opened with direct I/O and commit each write before answering it, so even a file still
# open when the daemon dies keeps what write(2) returned for.
do_mount --commit-interval 0 >/dev/null
mkdir "$MNT/S"
chattr +S "$MNT/S"
put_files "$MNT/S/files"
exec 3>"$MNT/S/open"
printf 'written, never closed' >&3
kill -9 "$DAEMON"
exec 3>&-
killed
do_mount >/dev/null
check_files "$MNT/S/files" "chattr +S; kill -9"
[[ $(cat "$MNT/S/open") == "written, never closed" ]] \
  || { echo "chattr +S: a write of a file still open was lost" >&2; exit 1; }
lsattr -d "$MNT/S/files" | grep '^[^ ]*S' >/dev/null \
  || { echo "chattr +S: not inherited: $(lsattr -d "$MNT/S/files")" >&2; exit 1; }
echo "chattr +S: 50 files, a directory and an open file's write kept; the flag inherited"
do_umount

step "chattr +i and +a after an open for writing: writes refused, cached data and fsync kept"
do_mount >/dev/null
python3 "$TOOLS/flags-after-open.py" "$MNT"
do_umount

step "shutdown (FS_IOC_SHUTDOWN): what reached the daemon kept, every later change refused"
do_mount --commit-interval 0 >/dev/null
put_files "$MNT/down"
python3 -c 'import fcntl, os, sys; fcntl.ioctl(os.open(sys.argv[1], os.O_RDONLY), 0x8004587d, bytes(4))' "$MNT"
if mkdir "$MNT/after-shutdown" 2>/dev/null; then
  echo "shutdown: a mkdir after it succeeded" >&2
  exit 1
fi
# The shut-down daemon cannot close the device cleanly (nothing more reaches it), and
# extalloc umount says so with a non-zero exit; the next mount recovers every commit.
if "$BIN" umount "$MNT" >"$WORK/umount.out" 2>&1; then
  echo "shutdown: extalloc umount exited 0 for a device left in use" >&2
  exit 1
fi
grep -q "did not close it cleanly" "$WORK/umount.out" \
  || { cat "$WORK/umount.out" >&2; echo "shutdown: extalloc umount did not say why" >&2; exit 1; }
"$BIN" fsck "$IMG" >/dev/null
do_mount >/dev/null
check_files "$MNT/down" "shutdown"
[[ ! -e "$MNT/after-shutdown" ]] || { echo "shutdown: a change after it reached the device" >&2; exit 1; }
do_umount

step "--read-only after kill -9: files served, changes refused, the image unchanged"
do_mount --commit-interval 0 >/dev/null
put_files "$MNT/ro"
sync "$MNT"
echo "never committed" >"$MNT/ro/late"
kill -9 "$DAEMON"
killed
released 30
before=$(sha256sum <"$IMG")
do_mount -o ro >/dev/null # as --read-only
check_files "$MNT/ro" "a read-only mount of a journal that needs recovery"
if echo x >"$MNT/ro/new" 2>/dev/null || touch "$MNT/ro/f1" 2>/dev/null; then
  echo "a read-only mount accepted a change" >&2
  exit 1
fi
do_umount
[[ "$(sha256sum <"$IMG")" == "$before" ]] || { echo "--read-only changed the image" >&2; exit 1; }
do_mount >/dev/null
check_files "$MNT/ro" "a mount after the read-only one"
do_umount
echo "read-only: 50 files served, writes refused (EROFS), the image byte for byte unchanged"

step "damaged bitmaps and a descriptor: fsck finds them, fsck --repair rebuilds them"
# Every group's bitmap byte 0 flipped and descriptor 0 zeroed (offsets from the superblock).
python3 - "$IMG" <<'PY'
import struct, sys
with open(sys.argv[1], "r+b") as f:
    sb = f.read(128)
    bs, bitmap_blocks = struct.unpack_from("<II", sb, 16)
    blocks, group_blocks = struct.unpack_from("<QQ", sb, 24)
    desc_start, bitmap_start = struct.unpack_from("<QQ", sb, 56)
    for g in range((blocks + group_blocks - 1) // group_blocks):
        at = (bitmap_start + g * bitmap_blocks) * bs + 64
        f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 0x10]))
    f.seek(desc_start * bs); f.write(bytes(32))
PY
set +e
"$BIN" fsck "$IMG" >"$WORK/fsck.out"; code=$?
[[ $code == 4 ]] || { cat "$WORK/fsck.out" >&2; echo "fsck of damaged bitmaps exited $code, not 4" >&2; exit 1; }
"$BIN" fsck --repair "$IMG" >"$WORK/repair.out"; code=$?
[[ $code == 1 ]] || { cat "$WORK/repair.out" >&2; echo "fsck --repair exited $code, not 1 (fixed)" >&2; exit 1; }
"$BIN" fsck "$IMG" >"$WORK/fsck.out"; code=$?
[[ $code == 0 ]] || { cat "$WORK/fsck.out" >&2; echo "fsck after the repair exited $code, not 0" >&2; exit 1; }
"$BIN" fsck -y "$IMG" >/dev/null; code=$?
[[ $code == 0 ]] || { echo "a second fsck --repair exited $code, not 0 (nothing to do)" >&2; exit 1; }
set -e
do_mount >/dev/null
check_files "$MNT/ro" "a mount after fsck --repair"
do_umount
echo "fsck --repair: $(grep -c '^repaired:' "$WORK/repair.out") changes, then clean; 50 files intact"

step "extalloc umount, then at once fsck and a new mount, 5 times"
for r in 1 2 3 4 5; do
  do_mount >/dev/null || { echo "round $r: the mount right after extalloc umount FAILED" >&2; exit 1; }
  head -c 4000000 /dev/urandom >"$MNT/umount-$r"
  "$BIN" umount "$MNT" >"$WORK/umount.out" || { echo "round $r: extalloc umount FAILED" >&2; exit 1; }
  "$BIN" fsck "$IMG" >"$WORK/fsck.out" || { cat "$WORK/fsck.out" >&2; echo "round $r: fsck right after extalloc umount FAILED" >&2; exit 1; }
done
echo "5 rounds: fsck and a new mount right after extalloc umount ($(cat "$WORK/umount.out"))"

step "SIGTERM and extalloc umount with the mount copied into another mount namespace"
for how in sigterm umount; do
  do_mount >/dev/null
  echo "$how" >"$MNT/ns-$how"
  unshare -m --propagation private sleep 30 &
  copy=$!
  sleep 0.3
  grep -q " $MNT " "/proc/$copy/mountinfo" || { echo "the other namespace has no copy of the mount" >&2; exit 1; }
  if [[ $how == sigterm ]]; then
    kill -TERM "$DAEMON"
    released 10
  else
    "$BIN" umount "$MNT" --timeout 10 || { echo "extalloc umount FAILED with the mount copied" >&2; exit 1; }
  fi
  kill "$copy"
  wait "$copy" 2>/dev/null || true
  mountpoint -q "$MNT" && { echo "$how left the mount in place" >&2; exit 1; }
  "$BIN" fsck "$IMG" >/dev/null || { echo "$how with the mount copied: fsck FAILED" >&2; exit 1; }
  "$BIN" ls "$IMG" | grep "/ns-$how (file)" >/dev/null || { echo "$how with the mount copied lost a file" >&2; exit 1; }
  echo "$how with the mount in another namespace: the daemon wrote back and released the device"
done

step "kill -9 in the middle of fio: $CRASHES crashes"
crash_job() { # DIR: a round of writes, every file fsync'd at its end. psync, not io_uring:
  # fio exits 0 when an io_uring fsync dies with the mount (measured), so a round that
  # never reached the disk would count as fsync'd.
  fio_job round "$1" "ioengine=psync" "rw=randwrite" "bs=4k" "size=16m" "nrfiles=2" \
    "numjobs=2" "end_fsync=1" "do_verify=0"
}
for c in $(seq 1 "$CRASHES"); do
  do_mount >/dev/null
  rm -f "$WORK/done"
  (
    r=0
    while :; do
      r=$((r + 1))
      mkdir -p "$MNT/crash$c/r$r" 2>/dev/null || exit 0
      crash_job "$MNT/crash$c/r$r" >"$WORK/crash$c-$r.fio"
      fio --output=/dev/null "$WORK/crash$c-$r.fio" >/dev/null 2>&1 || exit 0
      # And fsync each file once more: it fails if the mount died before it was durable.
      python3 -c 'import os, sys
for f in sys.argv[1:]:
    fd = os.open(f, os.O_RDONLY); os.fsync(fd); os.close(fd)' "$MNT/crash$c/r$r"/* 2>/dev/null || exit 0
      echo "$r" >>"$WORK/done"
    done
  ) &
  loop=$!
  sleep "$(awk -v s="$RANDOM" 'BEGIN { srand(s); printf "%.2f", 1 + rand() * 4 }')"
  kill -9 "$DAEMON"
  wait "$loop" 2>/dev/null || true
  pkill -9 -f "fio.*$WORK" 2>/dev/null || true
  killed
  do_mount >"$WORK/remount.out"
  out=$(cat "$WORK/remount.out")
  rounds=$(wc -l <"$WORK/done" 2>/dev/null || echo 0)
  for r in $(cat "$WORK/done" 2>/dev/null); do
    fio --output="$WORK/verify.out" --verify_only "$WORK/crash$c-$r.fio" \
      || { cat "$WORK/verify.out" >&2; echo "crash $c: round $r was fsync'd and does not verify" >&2; exit 1; }
  done
  do_umount
  "$BIN" fsck "$IMG" >"$WORK/fsck.out" || { cat "$WORK/fsck.out" >&2; echo "crash $c: fsck FAILED" >&2; exit 1; }
  echo "crash $c: $rounds fsync'd rounds verified, fsck clean; remount: (${out##*(clean; }"
done

step "writes past a full device: ENOSPC at the write(2) (dd into 64 MiB; a cached writer on 1 GiB)"
EXTALLOC_BIN="$BIN" "$REPO/scripts/test/full-write.sh"

step "renames killed mid-flight: $RENAME_KILLS kills each of rename-over (fsync), replace and rewrite (no fsync) and exchange loops"
EXTALLOC_BIN="$BIN" "$REPO/scripts/test/rename-crash.sh" "$RENAME_KILLS"

step "mount tests passed"
