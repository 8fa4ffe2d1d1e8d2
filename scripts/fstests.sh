#!/usr/bin/env bash
# fstests (xfstests), the file-system community's regression suite, on `extalloc mount`.
#
#   sudo scripts/fstests.sh                      # the tests of scripts/fstests.list (~6 min)
#   sudo scripts/fstests.sh generic/003 generic/471
#   sudo scripts/fstests.sh --group quick        # every generic test of a group (~20 min)
#   sudo scripts/fstests.sh --src DIR ...        # fstests from DIR (default ../shared/fstests)
#
# fstests is a test tool, not part of extalloc: its source is copied to a build directory
# outside the repository (/var/tmp/fstests-build/HASH, one per source commit or content
# hash, built once) and run from there. The script installs what it needs (Debian build
# dependencies, the users fsgqa, fsgqa2 and 123456-fsgqa, the mount helper
# /sbin/mount.fuse.extalloc from scripts/mount.fuse.extalloc), makes two fresh volumes in
# image files (TEST_DEV and SCRATCH_DEV: plain files, not loop devices, as the baseline in
# the source's FOR-EXTALLOC.md was measured; with loop devices fstests would also run the
# tests that need block devices, which drive dm and the device itself, not the mount), and
# runs each test as its own `./check TEST` in new PID, mount and IPC namespaces with a
# private /tmp (unshare), under a watchdog (--timeout, default 900 s per test). It prints
# each test's result and a summary, and exits 1 when a test failed or timed out; a test
# that fstests does not run (missing feature) is listed with its reason and is not a
# failure. Needs root and /dev/fuse; without them, or without the fstests source, it says
# so and exits 2: it never passes without running.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
SRC="$REPO/../shared/fstests"
LIST="$REPO/scripts/fstests.list"
BUILD_ROOT=${FSTESTS_BUILD:-/var/tmp/fstests-build}
WORK=${FSTESTS_WORK:-/var/tmp/extalloc-fstests}
TIMEOUT=900
DEV_SIZE=${FSTESTS_DEV_SIZE:-4GiB}
GROUP=""
TESTS=()

usage() {
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-2}"
}
fatal() {
  echo "############################################################" >&2
  echo "fstests.sh: NOT RUN: $1" >&2
  echo "############################################################" >&2
  exit 2
}
while (($#)); do
  case "$1" in
    --src) SRC=${2:?--src needs a directory}; shift 2 ;;
    --group) GROUP=${2:?--group needs a name}; shift 2 ;;
    --timeout) TIMEOUT=${2:?--timeout needs seconds}; shift 2 ;;
    -h | --help) usage 0 ;;
    -*) echo "fstests.sh: unknown option $1" >&2; usage ;;
    *) TESTS+=("$1"); shift ;;
  esac
done

[[ $(id -u) -eq 0 ]] || fatal "not root (fstests mounts, makes users and switches to them)"
[[ -c /dev/fuse ]] || fatal "no /dev/fuse"
[[ -d "$SRC" && -x "$SRC/check" ]] || fatal "no fstests source at $SRC (give one with --src DIR)"
SRC=$(cd "$SRC" && pwd)
step() { printf '== %s (%s)\n' "$1" "$(date +%T)" >&2; }

step "Debian packages and users"
PKGS=(xfsprogs xfslibs-dev uuid-dev libattr1-dev libacl1-dev libaio-dev libtool autoconf
  automake gcc make bc psmisc attr acl fio fuse3 util-linux)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  echo "installing ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null; } \
    || fatal "cannot install ${missing[*]}"
fi
for u in fsgqa fsgqa2 123456-fsgqa; do
  id "$u" >/dev/null 2>&1 || useradd -m "$u" || useradd -m --badname "$u" \
    || fatal "cannot add user $u"
done

step "build fstests (outside the repository)"
if [[ -d "$SRC/.git" ]] && key=$(git -C "$SRC" rev-parse --short=12 HEAD 2>/dev/null) \
  && [[ -z "$(git -C "$SRC" status --porcelain 2>/dev/null)" ]]; then
  :
else
  key=$(cd "$SRC" && find . -path ./.git -prune -o -type f -print0 | LC_ALL=C sort -z \
    | xargs -0 sha256sum | sha256sum | cut -c1-12)
fi
FST="$BUILD_ROOT/$key"
case "$FST/" in "$REPO"/*) fatal "build directory $FST is inside the repository" ;; esac
if [[ ! -f "$FST/.extalloc-built" ]]; then
  rm -rf "$FST"
  mkdir -p "$BUILD_ROOT"
  cp -a "$SRC" "$FST"
  echo "building $SRC in $FST (a few minutes; log: $FST.make.log)" >&2
  (cd "$FST" && make -j"$(nproc)") >"$FST.make.log" 2>&1 \
    || { tail -n 30 "$FST.make.log" >&2; fatal "fstests did not build (log: $FST.make.log)"; }
  touch "$FST/.extalloc-built"
fi
echo "fstests: $FST (source $SRC, key $key)" >&2

step "build extalloc and install the mount helper"
PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
(cd "$REPO" && cargo build --release -q -p extalloc-cli)
BUILT="${CARGO_TARGET_DIR:-$REPO/target}/release/extalloc"

if [[ -n "$GROUP" ]]; then
  mapfile -t more < <(awk -v g="$GROUP" '{ for (i = 2; i <= NF; i++) if ($i == g) print "generic/" $1 }' \
    "$FST/tests/generic/group.list")
  ((${#more[@]})) || fatal "no generic test is in group $GROUP"
  TESTS+=("${more[@]}")
fi
if ((${#TESTS[@]} == 0)); then
  mapfile -t TESTS < <(sed 's/#.*//; /^[[:space:]]*$/d; s/[[:space:]]//g' "$LIST")
  ((${#TESTS[@]})) || fatal "no tests in $LIST"
fi
for t in "${TESTS[@]}"; do
  [[ -f "$FST/tests/$t" ]] || fatal "no test $t in $SRC/tests"
done

step "volumes and config in $WORK"
# Unmount what a run that was killed may have left (only this work directory's mounts).
for m in "$WORK/test" "$WORK/scratch"; do
  mountpoint -q "$m" 2>/dev/null && { umount "$m" || umount -l "$m"; }
done
rm -rf "$WORK"
mkdir -p "$WORK/test" "$WORK/scratch" "$WORK/results"
chmod 755 "$WORK"
# The run's own copy of the binary: a rebuild during a long run does not mix two builds.
BIN="$WORK/extalloc"
cp "$BUILT" "$BIN"
sed "s|@EXTALLOC_BIN@|$BIN|" "$REPO/scripts/mount.fuse.extalloc" >/sbin/mount.fuse.extalloc.new
chmod 755 /sbin/mount.fuse.extalloc.new
mv /sbin/mount.fuse.extalloc.new /sbin/mount.fuse.extalloc
"$BIN" mkfs "$WORK/test.img" --size "$DEV_SIZE" >/dev/null
"$BIN" mkfs "$WORK/scratch.img" --size "$DEV_SIZE" >/dev/null
cat >"$WORK/local.config" <<EOF
export FSTYP=fuse
export FUSE_SUBTYP=.extalloc
export TEST_DEV=$WORK/test.img
export TEST_DIR=$WORK/test
export SCRATCH_DEV=$WORK/scratch.img
export SCRATCH_MNT=$WORK/scratch
export RESULT_BASE=$WORK/results
EOF

# One test: ./check in new PID, mount and IPC namespaces with a private /proc and /tmp, so
# a test's leftover processes and files cannot reach the next; the mounts it makes
# (TEST_DEV's included) are unmounted before the namespace ends, and the daemons waited
# for, so each volume is closed cleanly before the next test mounts it.
inner() {
  mount --make-rprivate /
  mount -t tmpfs tmpfs /tmp
  cd "$FST"
  HOST_OPTIONS="$WORK/local.config" ./check "$1"
  local rc=$?
  local m
  for m in "$WORK/scratch" "$WORK/test"; do
    while mountpoint -q "$m"; do umount "$m" 2>/dev/null || umount -l "$m"; done
  done
  local n=0
  while fuser -s "$WORK/test.img" "$WORK/scratch.img" 2>/dev/null && ((n++ < 600)); do
    sleep 0.1
  done
  return $rc
}
export -f inner
# The helper takes the binary from EXTALLOC_BIN before the path it was installed with, so
# two runs (two FSTESTS_WORK) at once each mount with their own copy.
export FST WORK EXTALLOC_BIN="$BIN"

passed=()
failed=()
notrun=()
declare -A why
for t in "${TESTS[@]}"; do
  rm -f "$WORK/results/$t".*
  start=$SECONDS
  set +e
  timeout --kill-after=30 "$TIMEOUT" unshare --pid --mount --ipc --mount-proc --kill-child \
    bash -c 'inner "$1"' _ "$t" >"$WORK/results/$(tr / _ <<<"$t").log" 2>&1
  rc=$?
  set -e
  secs=$((SECONDS - start))
  log="$WORK/results/$(tr / _ <<<"$t").log"
  if ((rc == 124 || rc == 137)); then
    failed+=("$t")
    why[$t]="timed out after ${TIMEOUT}s (watchdog)"
  elif [[ -f "$WORK/results/$t.notrun" ]]; then
    notrun+=("$t")
    why[$t]=$(head -n 1 "$WORK/results/$t.notrun")
  elif ((rc == 0)) && grep -q '^Passed all 1 tests' "$log"; then
    passed+=("$t")
  else
    failed+=("$t")
    if [[ -f "$WORK/results/$t.out.bad" ]]; then
      r=$(diff "$FST/tests/$t.out" "$WORK/results/$t.out.bad" | grep -m1 '^[<>]' || true)
      r="output mismatch, first difference: $r (diff $FST/tests/$t.out $WORK/results/$t.out.bad)"
    else
      r=$(grep -m1 -o '\[failed.*\|_check_.*\|- .*' "$log" || true)
    fi
    why[$t]=${r:-"check exited $rc, see $log"}
  fi
  if [[ " ${failed[*]} " == *" $t "* ]]; then s=FAILED; elif [[ " ${notrun[*]} " == *" $t "* ]]; then s="not run"; else s=passed; fi
  printf '%-14s %-8s %4ss %s\n' "$t" "$s" "$secs" "${why[$t]:-}"
done

echo
echo "fstests on extalloc mount: ${#passed[@]} passed, ${#failed[@]} failed, ${#notrun[@]} not run (of ${#TESTS[@]}; results and logs in $WORK/results)"
for t in "${failed[@]}"; do echo "  failed:  $t: ${why[$t]}"; done
for t in "${notrun[@]}"; do echo "  not run: $t: ${why[$t]}"; done
((${#failed[@]} == 0))
