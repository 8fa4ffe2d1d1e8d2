#!/usr/bin/env bash
# The test suite: unit, model-based, stress, bad-input and lab smoke tests, the crash
# tortures and damage campaigns, the C API's tests in C under ASan and UBSan, the Python
# package's tests, the loom models of the lock-free group index and the op shards, then
# the mounted file system under fsx, pjdfstest, fio with verify and kill -9 crashes
# (scripts/mount-tests.sh: root and /dev/fuse), then fstests' CI selection on the mount
# (scripts/fstests-ci.list, about 4 minutes). About 24 minutes on 2 cores with .ci/run's
# lints, first builds included.
#
# Everything but loom runs the `checked` profile (Cargo.toml): release's code with debug
# assertions and overflow checks on, so the design's assertions run where the tortures,
# the mount tests and fstests run, in one build. Ends with one summary line: the steps
# passed, and each step not run with its reason; a failing step stops the run and is named.
set -euo pipefail
cd "$(dirname "$0")/.."
export EXTALLOC_PROFILE=checked
passed=()
not_run=()
current=""
summary() {
  local rc=$?
  local tally="${#passed[@]} steps passed, ${#not_run[@]} not run"
  if ((${#not_run[@]})); then
    tally+=" ($(IFS=';'; echo "${not_run[*]}"))"
  fi
  if [[ $rc -ne 0 ]]; then
    echo "test.sh: FAILED at step '$current' (exit $rc); $tally"
  else
    echo "test.sh: all run steps passed: $tally"
  fi
}
trap summary EXIT
step() { # NAME COMMAND...: runs a step, recording it as passed
  current=$1
  shift
  echo "=== test.sh: $current" >&2
  "$@"
  passed+=("$current")
}

step "tools" ./scripts/ci-deps.sh
step "workspace tests (checked)" cargo test --workspace --profile checked
# The CLI those tests built: the mount tests and fstests use it (a build of the CLI alone
# unifies other features of the library and would compile everything again).
export EXTALLOC_TEST_BIN="$PWD/target/checked/extalloc"
# The C API from C (docs/c.md): its C tests and example under ASan and UBSan, against the
# library the line above built (about 5 s).
step "C tests" ./scripts/c-tests.sh --workspace
# The Python package (docs/python.md): pip install into target/python-venv, then its tests
# (pytest, hypothesis; about 1 minute, the module built on the workspace's checked build).
step "Python tests" ./scripts/python-tests.sh
# The library's examples (built by the tests above): each checks what it shows.
examples() {
  for example in blobstore vm_image store_payloads; do
    cargo run --profile checked -q -p extalloc --example "$example"
  done
}
step "examples" examples
# Loom needs every crate built with --cfg loom: keep it in its own target directory.
loom() {
  RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p extalloc --release --test loom_index
  # ... and the loom model of the store's op shards: an open-path allocation against the fence.
  RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p extalloc --release --lib loom_
}
step "loom" loom
if [[ $(id -u) -ne 0 ]]; then
  not_run+=("mount tests: not root")
elif [[ ! -c /dev/fuse ]]; then
  not_run+=("mount tests: no /dev/fuse")
else
  step "mount tests (checked)" ./scripts/mount-tests.sh
fi
# fstests, the community's suite, on the mount: CI's selection (scripts/fstests-ci.list, 112
# tests: data, namespace, extended attributes and ACLs, O_DIRECT, O_TMPFILE, birth times,
# chattr, whiteouts, file handles across remounts). fstests is a test tool kept outside the
# repository; its source is ../shared/fstests or FSTESTS_SRC. Without it the step is not run
# and the summary says so.
FSTESTS_SRC=${FSTESTS_SRC:-../shared/fstests}
if [[ ! -x "$FSTESTS_SRC/check" ]]; then
  not_run+=("fstests: no fstests source at $FSTESTS_SRC, set FSTESTS_SRC")
elif [[ $(id -u) -ne 0 || ! -c /dev/fuse ]]; then
  not_run+=("fstests: needs root and /dev/fuse")
else
  step "fstests (checked)" ./scripts/fstests.sh --src "$FSTESTS_SRC" --list scripts/fstests-ci.list --timeout 300
fi
