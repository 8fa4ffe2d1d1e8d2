#!/usr/bin/env bash
# The test suite, in two tiers (docs/testing.md has the table of every layer).
#
#   scripts/test.sh          # quick tier: unit, model-based, stress, bad-input and lab smoke
#                            # tests with short crash tortures and damage campaigns, the C
#                            # API's tests under ASan and UBSan, the Python package's tests,
#                            # the examples, and a mount smoke test (mkfs, mount, fsx, fsck;
#                            # root and /dev/fuse)
#   scripts/test.sh --full   # the quick tier, then the loom models, the mount tests (fsx,
#                            # pjdfstest, fio with verify, kill -9 crashes; root) and
#                            # fstests' CI selection (scripts/test/fstests-ci.list): what .ci/run
#                            # runs
#
# Everything but loom runs the `checked` profile (Cargo.toml): release's code with debug
# assertions and overflow checks on, so the design's assertions run where the tortures,
# the mount tests and fstests run, in one build. Ends with one summary line: the steps
# passed, and each step not run with its reason; a failing step stops the run and is named.
set -euo pipefail
cd "$(dirname "$0")/.."
export EXTALLOC_PROFILE=checked
full=0
case "${1:-}" in
  --full) full=1 ;;
  "") ;;
  *)
    echo "test.sh: unknown option $1 (--full or none)" >&2
    exit 2
    ;;
esac
passed=()
not_run=()
tier="quick tier"
((full)) && tier="full suite"
current=""
summary() {
  local rc=$?
  local tally="${#passed[@]} steps passed, ${#not_run[@]} not run, in $SECONDS s"
  if ((${#not_run[@]})); then
    tally+=" ($(IFS=';'; echo "${not_run[*]}"))"
  fi
  if [[ $rc -ne 0 ]]; then
    echo "test.sh: FAILED at step '$current' (exit $rc, $tier); $tally"
  else
    echo "test.sh: all run steps passed ($tier): $tally"
  fi
}
trap summary EXIT
step() { # NAME COMMAND...: runs a step, recording it as passed with its time
  current=$1
  shift
  echo "=== test.sh: $current" >&2
  local start=$SECONDS
  "$@"
  passed+=("$current")
  echo "=== test.sh: $current passed in $((SECONDS - start)) s ($SECONDS s so far)" >&2
}

step "tools" ./scripts/ci/ci-deps.sh
step "workspace tests (checked)" cargo test --workspace --profile checked
# The CLI those tests built: the mount tests and fstests use it (a build of the CLI alone
# unifies other features of the library and would compile everything again).
export EXTALLOC_TEST_BIN="$PWD/target/checked/extalloc"
# The C API from C (docs/c.md): its C tests and example under ASan and UBSan, against the
# library the line above built (about 5 s).
step "C tests" ./scripts/test/c-tests.sh --workspace
# The Python package (docs/python.md): pip install into target/python-venv, then its tests
# (pytest, hypothesis; about 1 minute, the module built on the workspace's checked build).
step "Python tests" ./scripts/test/python-tests.sh
# The library's examples (built by the tests above): each checks what it shows.
examples() {
  for example in blobstore vm_image store_payloads; do
    cargo run --profile checked -q -p extalloc --example "$example"
  done
}
step "examples" examples
if ((full == 0)); then
  # The quick tier's look at the mount; the full suite's mount tests below cover it.
  if [[ $(id -u) -ne 0 ]]; then
    not_run+=("mount smoke test: not root")
  elif [[ ! -c /dev/fuse ]]; then
    not_run+=("mount smoke test: no /dev/fuse")
  else
    step "mount smoke test (checked)" ./scripts/test/mount-tests.sh --smoke
  fi
  not_run+=("loom, mount tests, fstests: the full suite's (scripts/test.sh --full)")
  exit 0
fi
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
  step "mount tests (checked)" ./scripts/test/mount-tests.sh
fi
# fstests, the community's suite, on the mount: CI's selection (scripts/test/fstests-ci.list, 111
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
  step "fstests (checked)" ./scripts/test/fstests.sh --src "$FSTESTS_SRC" --list scripts/test/fstests-ci.list --timeout 300
fi
