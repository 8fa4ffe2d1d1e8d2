#!/usr/bin/env bash
# The test suite: unit, model-based, stress, bad-input and lab smoke tests, the C API's
# tests in C under ASan and UBSan, the Python package's tests, the library's tests with
# debug assertions on, the loom model of the lock-free group index, then the mounted file
# system under fsx, pjdfstest, fio with verify and kill -9 crashes (scripts/mount-tests.sh:
# root and /dev/fuse), then fstests' CI selection on the mount (scripts/fstests-ci.list,
# about 4 minutes). About 25 minutes on 2 cores, first builds included.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/ci-deps.sh
cargo test --workspace --release
# The C API from C (docs/c.md): its C tests and example under ASan and UBSan, against the
# library the line above built (about 5 s).
./scripts/c-tests.sh --workspace
# The Python package (docs/python.md): pip install into target/python-venv, then its tests
# (pytest, hypothesis; about 1 minute, the module built on the workspace's release build).
./scripts/python-tests.sh
# The library's examples (built by the tests above): each checks what it shows.
for example in blobstore vm_image store_payloads; do
  cargo run --release -q -p extalloc --example "$example"
done
# The library's tests again with debug assertions on: the core's preconditions and
# postconditions on the hot path (debug_assert!) are checked, not only compiled.
CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true CARGO_TARGET_DIR=target/assert \
  cargo test -p extalloc --release
# Loom needs every crate built with --cfg loom: keep it in its own target directory.
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p extalloc --release --test loom_index
# ... and the loom model of the store's op shards: an open-path allocation against the fence.
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p extalloc --release --lib loom_
./scripts/mount-tests.sh
# fstests, the community's suite, on the mount: CI's selection (scripts/fstests-ci.list, 112
# tests: data, namespace, extended attributes and ACLs, O_DIRECT, O_TMPFILE, birth times,
# chattr, whiteouts, file handles across remounts). fstests is a test tool kept outside the repository; its source
# is ../shared/fstests or FSTESTS_SRC. Without it the step is not run and says so loudly.
FSTESTS_SRC=${FSTESTS_SRC:-../shared/fstests}
if [[ -x "$FSTESTS_SRC/check" ]]; then
  ./scripts/fstests.sh --src "$FSTESTS_SRC" --list scripts/fstests-ci.list --timeout 300
else
  echo "############################################################" >&2
  echo "test.sh: fstests NOT RUN: no fstests source at $FSTESTS_SRC (set FSTESTS_SRC)" >&2
  echo "############################################################" >&2
fi
