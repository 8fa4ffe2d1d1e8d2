#!/usr/bin/env bash
# The test suite: unit, model-based, stress, bad-input and lab smoke tests, then the loom
# model of the lock-free group index. Runs in a few minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/ci-deps.sh
cargo test --workspace --release
# Loom needs every crate built with --cfg loom: keep it in its own target directory.
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p extalloc --release --test loom_index
