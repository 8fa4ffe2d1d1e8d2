#!/usr/bin/env bash
# `cargo deny check` against deny.toml: licences, bans, sources (crates.io only) and RustSec's
# advisories (cargo-deny from scripts/ci/lint-tools.sh). The advisory database is fetched from
# its repository; where that cannot be reached, the copy already on the machine is used and
# its date printed, and without one the advisories are not checked and the script says so (the
# other checks still run and fail as they would).
set -euo pipefail
cd "$(dirname "$0")/../.."
dbs="${CARGO_HOME:-$HOME/.cargo}/advisory-dbs"
if cargo deny fetch db >/dev/null 2>&1; then
  cargo deny check --hide-inclusion-graph
  exit 0
fi
shopt -s nullglob
copies=("$dbs"/advisory-db-*/)
db="${copies[0]:-}"
if [[ -n "$db" ]]; then
  echo "deny.sh: the advisory database could not be fetched; checking against the copy of" \
    "$(git -C "$db" log -1 --format=%cs 2>/dev/null || echo 'an unknown date')" >&2
  cargo deny --offline check --hide-inclusion-graph
else
  echo "deny.sh: the advisory database could not be fetched and none is on the machine:" \
    "advisories NOT checked" >&2
  cargo deny check --hide-inclusion-graph bans licenses sources
fi
