#!/usr/bin/env bash
# fstests (xfstests), the file-system community's regression suite, on `extalloc mount`,
# and with the same runner, devices and tests on kernel ext4 and on fuse2fs, to compare.
#
#   sudo scripts/test/fstests.sh                      # the tests of scripts/test/fstests.list (~6 min)
#   sudo scripts/test/fstests.sh generic/003 generic/471
#   sudo scripts/test/fstests.sh --group quick        # every generic test of a group (~20 min)
#   sudo scripts/test/fstests.sh --fs ext4 --group quick     # the same on kernel ext4, or fuse2fs
#   sudo scripts/test/fstests.sh --list scripts/test/fstests-ci.list  # CI's selection (~5 min)
#   options: --fs extalloc|ext4|fuse2fs (default extalloc), --json PATH (default
#   WORK/summary.json), --timeout SECONDS per test (900), --src DIR (../shared/fstests),
#   --list FILE (tests one a line, # comments; default scripts/test/fstests.list)
#
# fstests is a test tool, not part of extalloc: its source is copied to a build directory
# outside the repository (/var/tmp/fstests-build/HASH, one per source commit or content
# hash, built once) and run from there. The script installs what it needs (Debian packages,
# the users fsgqa, fsgqa2 and 123456-fsgqa, the mount helper /sbin/mount.fuse.extalloc from
# scripts/mount/mount.fuse.extalloc or /sbin/mount.fuse.fuse2fs from scripts/mount/mount.fuse.fuse2fs),
# makes two image files in WORK (FSTESTS_WORK; default /var/tmp/extalloc-fstests, or
# /var/tmp/fstests-FS for ext4 and fuse2fs) with a loop device over each, TEST_DEV and
# SCRATCH_DEV (block devices, so the tests that need one run too), formatted by
# `extalloc mkfs` or mkfs.ext4 (fuse2fs serves an ext4 made by mkfs.ext4), and runs each
# test as its own `./check TEST` in new PID, mount and IPC namespaces with a private /tmp
# (unshare), under a watchdog (--timeout). FSTYP is fuse with FUSE_SUBTYP .extalloc or
# .fuse2fs, or ext4.
#
# It prints each test's result, then the passed / failed / not run counts, the failures
# with a reason, and the reasons tests were not run, grouped and counted (also in
# WORK/summary.txt), and writes a JSON summary (each test's name, result, seconds and
# reason, and the totals). It exits 1 when a test failed or timed out; a test that fstests
# does not run (missing feature) is not a failure. On exit, also when interrupted (INT,
# TERM), it stops the running test, unmounts, detaches its loop devices, and removes what
# it installed: the mount helper in /sbin once no other run of it uses it (one that was
# there before is put back) and the users it added. Needs root and /dev/fuse; without
# them, or without the fstests source, it says so and exits 2: it never passes without
# running.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
SRC="$REPO/../shared/fstests"
LIST="$REPO/scripts/test/fstests.list"
BUILD_ROOT=${FSTESTS_BUILD:-/var/tmp/fstests-build}
TIMEOUT=900
DEV_SIZE=${FSTESTS_DEV_SIZE:-4GiB}
FS=extalloc
JSON=""
GROUP=""
TESTS=()
ARGS=("$@")

usage() {
  sed -n '5,13p' "$0" | sed 's/^# \{0,1\}//'
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
    --fs) FS=${2:?--fs needs extalloc, ext4 or fuse2fs}; shift 2 ;;
    --json) JSON=${2:?--json needs a path}; shift 2 ;;
    --list) LIST=$(realpath "${2:?--list needs a file}"); shift 2 ;;
    -h | --help) usage 0 ;;
    -*) echo "fstests.sh: unknown option $1" >&2; usage ;;
    *) TESTS+=("$1"); shift ;;
  esac
done
case "$FS" in
  extalloc) WORK=${FSTESTS_WORK:-/var/tmp/extalloc-fstests} ;;
  ext4 | fuse2fs) WORK=${FSTESTS_WORK:-/var/tmp/fstests-$FS} ;;
  *) echo "fstests.sh: --fs $FS: not extalloc, ext4 or fuse2fs" >&2; usage ;;
esac
[[ "$TIMEOUT" =~ ^[1-9][0-9]*$ ]] || { echo "fstests.sh: --timeout $TIMEOUT: not seconds" >&2; usage; }
JSON=$(realpath -m "${JSON:-$WORK/summary.json}")

[[ $(id -u) -eq 0 ]] || fatal "not root (fstests mounts, makes users and switches to them)"
[[ -c /dev/fuse ]] || fatal "no /dev/fuse"
[[ -d "$SRC" && -x "$SRC/check" ]] || fatal "no fstests source at $SRC (give one with --src DIR)"
SRC=$(cd "$SRC" && pwd)
step() { printf '== %s (%s)\n' "$1" "$(date +%T)" >&2; }

# What this run made or changed, undone by cleanup on any exit.
LOOPS=()          # loop devices it attached
USERS=0           # it joined the runs that use the test users (add_users)
HELPER=""         # the mount helper this run uses, /sbin/mount.fuse.NAME (install_helper)
TEST_PID=""       # the running test's watchdog (its process group)
STARTED=0         # tests have started: the summary is due
SUMMARY_DONE=0

detach_loop() { # LOOP: remove the device-mapper devices over it (a test's leftovers), detach
  local loop=$1 h
  for h in /sys/block/"${loop#/dev/}"/holders/*; do
    [[ -e "$h/dm/name" ]] && dmsetup remove --retry "$(cat "$h/dm/name")" >/dev/null 2>&1
  done
  losetup -d "$loop" 2>/dev/null || true
}
# Shared by the runs of this script going on at once (each in its own work directory): the
# test users and the mount helpers. They are counted, not owned: a run adds its process id
# to SHARED/KEY.runs under SHARED/KEY.lock, and the last run to leave (runs that died
# unseen are pruned) undoes what the first did. (Owned by the run that made them, they were
# taken away from the others when it ended: their later tests found no fsgqa user, or no
# mount helper.)
SHARED=/run/extalloc-fstests
last_run() { # KEY, under KEY's lock: leaves KEY; true when no other live run is in it
  local p others=""
  if [[ -f "$SHARED/$1.runs" ]]; then
    others=$(while read -r p; do
      [[ "$p" != "$$" ]] && kill -0 "$p" 2>/dev/null && echo "$p"
    done <"$SHARED/$1.runs" || true)
  fi
  if [[ -n "$others" ]]; then
    echo "$others" >"$SHARED/$1.runs"
    return 1
  fi
  rm -f "$SHARED/$1.runs"
}
add_users() { # the users the tests switch to, added unless there (SHARED/users.added)
  local u ok=0
  mkdir -p "$SHARED"
  {
    flock 9
    for u in fsgqa fsgqa2 123456-fsgqa; do
      id "$u" >/dev/null 2>&1 && continue
      { useradd -m "$u" 2>/dev/null || useradd -m --badname "$u"; } || { ok=1; break; }
      echo "$u" >>"$SHARED/users.added"
    done
    echo $$ >>"$SHARED/users.runs"
  } 9>"$SHARED/users.lock"
  USERS=1
  return $ok
}
remove_users() { # the last run to leave removes the users the runs added
  local u
  {
    flock 9
    if last_run users && [[ -f "$SHARED/users.added" ]]; then
      while read -r u; do userdel -r "$u" >/dev/null 2>&1 || userdel "$u"; done <"$SHARED/users.added"
      rm -f "$SHARED/users.added"
    fi
  } 9>"$SHARED/users.lock"
}
cleanup() {
  local rc=$? m l n u
  trap - EXIT INT TERM
  set +e
  if [[ -n "$TEST_PID" ]] && kill -0 "$TEST_PID" 2>/dev/null; then
    echo "fstests.sh: stopping the running test" >&2
    kill -TERM "$TEST_PID" 2>/dev/null
    n=0
    while kill -0 "$TEST_PID" 2>/dev/null && ((n++ < 400)); do sleep 0.1; done
    kill -KILL -- "-$TEST_PID" 2>/dev/null
    wait "$TEST_PID" 2>/dev/null
  fi
  ((STARTED && !SUMMARY_DONE)) && summary interrupted
  for m in "$WORK/scratch" "$WORK/test"; do
    n=0
    while mountpoint -q "$m" 2>/dev/null && ((n++ < 10)); do umount "$m" 2>/dev/null || umount -l "$m"; done
  done
  # The daemons of the test's namespace are gone with it; give the kernel a moment to
  # drop their hold on the loop devices (losetup -d of a busy device detaches on last close).
  for l in "${LOOPS[@]}"; do
    n=0
    while fuser -s "$l" 2>/dev/null && ((n++ < 50)); do sleep 0.1; done
    detach_loop "$l"
  done
  [[ -n "$HELPER" ]] && release_helper
  ((USERS)) && remove_users
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step "Debian packages and users"
# liburing-dev (with pkg-config) builds fstests' io_uring programs (`src/feature -R`,
# uring_read_fault); acct brings accton (BSD process accounting, generic/596).
PKGS=(xfsprogs xfslibs-dev uuid-dev libattr1-dev libacl1-dev libaio-dev liburing-dev pkg-config
  libtool autoconf automake gcc make bc psmisc attr acl fio fuse3 util-linux e2fsprogs dmsetup
  jq gawk acct)
# What fstests was built against: a change of this list makes a new build (configure looks
# for optional libraries once; a build made without liburing never runs an io_uring test).
BUILD_DEPS=uring1
[[ "$FS" == fuse2fs ]] && PKGS+=(fuse2fs)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  echo "installing ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null; } \
    || fatal "cannot install ${missing[*]}"
  # Debian's acct turns process accounting on for the whole machine when installed; the
  # tests turn it on and off themselves.
  [[ " ${missing[*]} " == *" acct "* ]] && { accton off >/dev/null 2>&1 || true; }
fi
add_users || fatal "cannot add the test users (fsgqa, fsgqa2, 123456-fsgqa)"

step "build fstests (outside the repository)"
if [[ -d "$SRC/.git" ]] && key=$(git -C "$SRC" rev-parse --short=12 HEAD 2>/dev/null) \
  && [[ -z "$(git -C "$SRC" status --porcelain 2>/dev/null)" ]]; then
  :
else
  key=$(cd "$SRC" && find . -path ./.git -prune -o -type f -print0 | LC_ALL=C sort -z \
    | xargs -0 sha256sum | sha256sum | cut -c1-12)
fi
key="$key-$BUILD_DEPS"
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
# df without arguments (fstests runs it) fails on a dead mount a killed run left behind.
"$REPO/scripts/mount/drop-dead-mounts.sh"

if [[ "$FS" == extalloc ]]; then
  step "build extalloc"
  PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
  # Release, or the profile EXTALLOC_PROFILE names (scripts/test.sh: `checked`).
  # EXTALLOC_TEST_BIN: a binary built already (as scripts/test/mount-tests.sh takes it).
  PROFILE=${EXTALLOC_PROFILE:-release}
  if [[ -n "${EXTALLOC_TEST_BIN:-}" ]]; then
    BUILT="$EXTALLOC_TEST_BIN"
  else
    (cd "$REPO" && cargo build --profile "$PROFILE" -q -p extalloc-cli)
    BUILT="${CARGO_TARGET_DIR:-$REPO/target}/$PROFILE/extalloc"
  fi
fi

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

step "devices and config in $WORK ($FS)"
# Undo what a run that was killed may have left (only this work directory's mounts and
# loop devices).
for m in "$WORK/test" "$WORK/scratch"; do
  mountpoint -q "$m" 2>/dev/null && { umount "$m" || umount -l "$m"; }
done
for img in "$WORK/test.img" "$WORK/scratch.img"; do
  [[ -f "$img" ]] || continue
  for l in $(losetup -j "$img" -O NAME -n 2>/dev/null); do detach_loop "$l"; done
done
rm -rf "$WORK"
mkdir -p "$WORK/test" "$WORK/scratch" "$WORK/results"
chmod 755 "$WORK"
truncate -s "$DEV_SIZE" "$WORK/test.img" "$WORK/scratch.img"
devs=()
for img in "$WORK/test.img" "$WORK/scratch.img"; do
  l=$(losetup -f --show "$img") || fatal "cannot attach a loop device to $img"
  LOOPS+=("$l")
  devs+=("$l")
done
TEST_DEV=${devs[0]}
SCRATCH_DEV=${devs[1]}
echo "TEST_DEV $TEST_DEV ($WORK/test.img), SCRATCH_DEV $SCRATCH_DEV ($WORK/scratch.img), $DEV_SIZE each" >&2

# The mount helper /sbin/mount.fuse.NAME: each run mounts with its own binary
# (EXTALLOC_BIN), so one helper serves every run going on at once. A helper that was there
# before any run (not one this script wrote: no marker line) is kept in SHARED/NAME.saved
# and put back by the last run to leave; else that run removes the helper.
# The marker is an identifier, kept as it was before the script moved to scripts/test/.
MARK="# installed by scripts/test/fstests.sh"
install_helper() { # NAME SOURCE: /sbin/mount.fuse.NAME from SOURCE (stdin), undone on exit
  local name=$1 dest=/sbin/mount.fuse.$1
  mkdir -p "$SHARED"
  {
    flock 9
    if [[ -e "$dest" ]] && ! grep -qxF "$MARK" "$dest" && [[ ! -e "$SHARED/$name.saved" ]]; then
      cp -a "$dest" "$SHARED/$name.saved"
    fi
    if [[ -e "$dest" ]] && grep -qxF "$MARK" "$dest"; then
      cat >/dev/null # another run's: the same template, and EXTALLOC_BIN picks the binary
    else
      { cat; echo "$MARK"; } >"$dest.new.$$"
      chmod 755 "$dest.new.$$"
      mv -f "$dest.new.$$" "$dest"
    fi
    echo $$ >>"$SHARED/helper-$name.runs"
  } 9>"$SHARED/helper-$name.lock"
  HELPER=$name
}
release_helper() { # undoes install_helper for this run
  local name=$HELPER dest=/sbin/mount.fuse.$HELPER
  {
    flock 9
    if last_run "helper-$name"; then
      if [[ -e "$SHARED/$name.saved" ]]; then
        mv -f "$SHARED/$name.saved" "$dest"
      elif grep -qxF "$MARK" "$dest" 2>/dev/null; then
        rm -f "$dest"
      fi
    fi
  } 9>"$SHARED/helper-$name.lock"
}
case "$FS" in
  extalloc)
    # The run's own copy of the binary: a rebuild during a long run does not mix two builds.
    BIN="$WORK/extalloc"
    cp "$BUILT" "$BIN"
    # Not a pipeline: install_helper must run in this shell, or what it records for the
    # cleanup (HELPER) is lost with a subshell and the helper is left behind.
    install_helper extalloc < <(sed "s|@EXTALLOC_BIN@|$BIN|" "$REPO/scripts/mount/mount.fuse.extalloc")
    "$BIN" mkfs "$TEST_DEV" >/dev/null
    "$BIN" mkfs "$SCRATCH_DEV" >/dev/null
    VERSION="extalloc $(git -C "$REPO" describe --always --dirty 2>/dev/null || echo unknown)"
    FSTYP_LINES="export FSTYP=fuse
export FUSE_SUBTYP=.extalloc"
    ;;
  fuse2fs)
    install_helper fuse2fs <"$REPO/scripts/mount/mount.fuse.fuse2fs"
    mkfs.ext4 -q -F "$TEST_DEV"
    mkfs.ext4 -q -F "$SCRATCH_DEV"
    VERSION=$(fuse2fs -V 2>&1 | sed -n 1p) # sed reads it all: no SIGPIPE under pipefail
    FSTYP_LINES="export FSTYP=fuse
export FUSE_SUBTYP=.fuse2fs"
    ;;
  ext4)
    mkfs.ext4 -q -F "$TEST_DEV"
    mkfs.ext4 -q -F "$SCRATCH_DEV"
    VERSION="kernel ext4, $(mkfs.ext4 -V 2>&1 | sed -n 1p)" # sed reads it all: no SIGPIPE under pipefail
    FSTYP_LINES="export FSTYP=ext4"
    ;;
esac
cat >"$WORK/local.config" <<EOF
$FSTYP_LINES
export TEST_DEV=$TEST_DEV
export TEST_DIR=$WORK/test
export SCRATCH_DEV=$SCRATCH_DEV
export SCRATCH_MNT=$WORK/scratch
export RESULT_BASE=$WORK/results
EOF
# FUSE: an unmount that returns once the daemon has let go of the device (the script says why).
if [[ "$FS" != ext4 ]]; then
  echo "export UMOUNT_PROG=$REPO/scripts/mount/umount.fuse-wait" >>"$WORK/local.config"
fi

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
  while fuser -s "$TEST_DEV" "$SCRATCH_DEV" "$WORK/test.img" "$WORK/scratch.img" 2>/dev/null \
    && ((n++ < 600)); do
    sleep 0.1
  done
  return $rc
}
export -f inner
export FST WORK TEST_DEV SCRATCH_DEV
# The helper takes the binary from EXTALLOC_BIN before the path it was installed with, so
# two runs (two FSTESTS_WORK) at once each mount with their own copy.
[[ "$FS" == extalloc ]] && export EXTALLOC_BIN="$BIN"

TSV="$WORK/results.tsv" # name, result, seconds, reason: one line a test
: >"$TSV"
KERNEL=$(uname -r)
DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
case "$FS" in
  extalloc) LABEL="extalloc mount" ;;
  ext4) LABEL="kernel ext4" ;;
  fuse2fs) LABEL="fuse2fs" ;;
esac

summary() { # [interrupted]: print the counts, failures and grouped reasons; write the JSON
  local state=${1:-complete} p f n
  SUMMARY_DONE=1
  p=$(awk -F'\t' '$2 == "passed"' "$TSV" | wc -l)
  f=$(awk -F'\t' '$2 == "failed"' "$TSV" | wc -l)
  n=$(awk -F'\t' '$2 == "not run"' "$TSV" | wc -l)
  {
    echo
    [[ "$state" == complete ]] \
      || echo "INTERRUPTED: $((p + f + n)) of ${#TESTS[@]} tests ran; the counts are of those"
    echo "fstests on $LABEL ($VERSION; Linux $KERNEL; $DATE): $p passed, $f failed, $n not run (of $((p + f + n)); results and logs in $WORK/results)"
    awk -F'\t' '$2 == "failed" { print "  failed:  " $1 ": " $4 }' "$TSV"
    if ((n)); then
      echo "not run, by reason:"
      awk -F'\t' '$2 == "not run" { print $4 }' "$TSV" | sort | uniq -c | sort -k1,1nr -k2 \
        | sed 's/^ *\([0-9]*\) \(.*\)/  \2: \1/'
    fi
  } | tee "$WORK/summary.txt"
  mkdir -p "$(dirname "$JSON")"
  jq -R -s --arg fs "$FS" --arg version "$VERSION" --arg kernel "$KERNEL" --arg date "$DATE" \
    --arg state "$state" --arg fstests "$key" --argjson planned "${#TESTS[@]}" \
    --arg command "scripts/test/fstests.sh ${ARGS[*]}" --arg timeout "$TIMEOUT" '
    split("\n") | map(select(length > 0) | split("\t")
      | {name: .[0], result: .[1], seconds: (.[2] | tonumber),
         reason: (if (.[3] // "") == "" then null else .[3] end)}) as $t
    | def count(r): $t | map(select(.result == r)) | length;
    {fs: $fs, version: $version, kernel: $kernel, date: $date, command: $command,
     fstests: $fstests, timeout_seconds: ($timeout | tonumber), state: $state,
     totals: {planned: $planned, ran: ($t | length), passed: count("passed"),
              failed: count("failed"), not_run: count("not run")},
     not_run_reasons: ($t | map(select(.result == "not run")) | group_by(.reason)
       | map({reason: .[0].reason, count: length}) | sort_by(-.count, .reason)),
     tests: $t}' "$TSV" >"$JSON.new" && mv "$JSON.new" "$JSON"
  echo "JSON summary: $JSON"
}

STARTED=1
for t in "${TESTS[@]}"; do
  rm -f "$WORK/results/$t".*
  log="$WORK/results/$(tr / _ <<<"$t").log"
  start=$SECONDS
  set +e
  # In the background and waited for: a trapped INT or TERM is handled at once, not after
  # the test (cleanup stops it). A background command of a script starts with INT and QUIT
  # ignored, which its children would inherit: env gives them their default action back.
  # shellcheck disable=SC2016 # $1 is inner's argument, expanded by that bash
  env --default-signal=INT,QUIT timeout --kill-after=30 "$TIMEOUT" unshare --pid --mount --ipc --mount-proc --kill-child \
    bash -c 'inner "$1"' _ "$t" >"$log" 2>&1 &
  TEST_PID=$!
  wait "$TEST_PID"
  rc=$?
  TEST_PID=""
  set -e
  secs=$((SECONDS - start))
  reason=""
  if ((rc == 124 || rc == 137)); then
    s=failed
    reason="timed out after ${TIMEOUT}s (watchdog)"
  elif [[ -f "$WORK/results/$t.notrun" ]]; then
    s="not run"
    reason=$(head -n 1 "$WORK/results/$t.notrun")
  elif ((rc == 0)) && grep -q '^Passed all 1 tests' "$log"; then
    s=passed
  else
    s=failed
    if [[ -f "$WORK/results/$t.out.bad" ]]; then
      r=$(diff "$FST/tests/$t.out" "$WORK/results/$t.out.bad" | grep -m1 '^[<>]' || true)
      reason="output mismatch, first difference: $r (diff $FST/tests/$t.out $WORK/results/$t.out.bad)"
    else
      r=$(grep -m1 -o '\[failed.*\|_check_.*\|- .*' "$log" || true)
      reason=${r:-"check exited $rc, see $log"}
    fi
  fi
  reason=$(tr '\t\n' '  ' <<<"$reason" | sed 's/ *$//')
  # FSTYP=fuse: a test that wrote another file system or a swap area over SCRATCH_DEV (570
  # runs mkswap on it, 740 mkfs.xfs) leaves a device the next ./check cannot mount for its
  # opening _scratch_mkfs, which for fuse only empties the mounted scratch, so every later
  # test failed. A foreign signature gets a new volume, as a kernel file system's
  # _scratch_mkfs makes one (blkid knows ext4 and no extalloc volume; a blank device is
  # left to the mount: fstests wipes SCRATCH_DEV before each test).
  if [[ "$FS" != ext4 ]] && sig=$(blkid -p -s TYPE -o value "$SCRATCH_DEV" 2>/dev/null) \
    && [[ "$FS" == extalloc || ! "$sig" =~ ^ext[234]$ ]]; then
    if [[ "$FS" == extalloc ]]; then
      "$BIN" mkfs --force "$SCRATCH_DEV" >/dev/null
    else
      mkfs.ext4 -q -F "$SCRATCH_DEV"
    fi && echo "(after $t: SCRATCH_DEV held ${sig:-?}: made a new $FS volume)" >&2
  fi
  printf '%s\t%s\t%s\t%s\n' "$t" "$s" "$secs" "$reason" >>"$TSV"
  printf '%-14s %-8s %4ss %s\n' "$t" "$([[ $s == failed ]] && echo FAILED || echo "$s")" "$secs" "$reason"
done

summary
! grep -q $'\tfailed\t' "$TSV"
