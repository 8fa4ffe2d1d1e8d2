#!/usr/bin/env bash
# The command line's `ls` and `get` on a file system image of many files (issue 50): a
# sparse 64 GiB image made by BIN_A, NFILES empty files in NDIRS directories with names of
# 64 hex digits made through a mount, unmounted; then `extalloc ls IMG > /dev/null` and
# `extalloc get IMG /d7/NAME OUT` by each build, alternated for ROUNDS rounds, each with
# its wall time and peak resident memory. One line per run:
#
#   sudo scripts/bench/ls-memory.sh BIN_A BIN_B [NFILES NDIRS ROUNDS]
#   -> round R BIN ls: S s, K KiB peak
#
# Needs root (the mount), /dev/fuse, python3 and GNU time (/usr/bin/time); works under
# /var/tmp (LS_MEMORY_DIR to change it). 1M files: about 2 minutes to make, seconds a run.
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 BIN_A BIN_B [NFILES NDIRS ROUNDS]" >&2; exit 2; }
A=$(realpath "$1"); B=$(realpath "$2"); N=${3:-1000000}; D=${4:-1000}; R=${5:-3}
[[ -x /usr/bin/time ]] || { echo "ls-memory.sh: needs GNU time (/usr/bin/time)" >&2; exit 1; }
W=$(mktemp -d "${LS_MEMORY_DIR:-/var/tmp}/ls-memory.XXXXXX")
trap 'mountpoint -q "$W/mnt" && "$A" umount "$W/mnt" >/dev/null 2>&1; rm -rf "$W"' EXIT
mkdir -p "$W/mnt"
"$A" mkfs "$W/img" --size 64GiB >/dev/null
"$A" mount "$W/img" "$W/mnt" >/dev/null
python3 "$(dirname "$0")/make-tree.py" "$W/mnt" "$N" "$D"
"$A" umount "$W/mnt" >/dev/null
NAME=$(python3 -c 'import hashlib; print(hashlib.sha256(b"7").hexdigest())')
for r in $(seq "$R"); do
  for bin in "$A" "$B"; do
    /usr/bin/time -f "round $r $bin ls: %e s, %M KiB peak" "$bin" ls "$W/img" 2>&1 >/dev/null | tail -1
    /usr/bin/time -f "round $r $bin get: %e s, %M KiB peak" "$bin" get "$W/img" "/d7/$NAME" "$W/out" 2>&1 >/dev/null | tail -1
  done
done
