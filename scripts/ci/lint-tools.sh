#!/usr/bin/env bash
# What CI's lints need beyond rustup's components, installed only when missing: cargo-deny
# at a pinned version (`cargo deny check`: licences, advisories, bans, sources; deny.toml),
# built from crates.io with its own lock file (a few minutes, once). Not a step of
# scripts/test.sh: a contributor's test run does not wait for it.
set -euo pipefail
CARGO_DENY_VERSION=0.20.2
bin="${CARGO_HOME:-$HOME/.cargo}/bin"
# No pipe into an early-exiting reader (pipefail): the version line is read whole.
have="$("$bin/cargo-deny" --version 2>/dev/null || true)"
if [[ "$have" != "cargo-deny $CARGO_DENY_VERSION" ]]; then
  echo "lint-tools.sh: cargo install cargo-deny $CARGO_DENY_VERSION (a few minutes)" >&2
  cargo install --locked --quiet cargo-deny --version "$CARGO_DENY_VERSION"
fi
