#!/usr/bin/env bash
# What the mount tests (scripts/test/mount-tests.sh) and `compare-fs` need, installed only when
# missing: the Debian packages through ci-deps.sh (fuse3, fio, fsmark, libacl1-dev, acl, fuse2fs,
# stress-ng);
# fsx and pjdfstest from crates.io at pinned versions; and the unprivileged `tests` user
# pjdfstest switches to (with `nobody`). Debian, as root.
set -euo pipefail
FSX_VERSION=0.3.2
PJDFSTEST_VERSION=0.2.2
bin="${CARGO_HOME:-$HOME/.cargo}/bin"
# The Debian packages (fuse3, fio, fsmark, libacl1-dev, acl, fuse2fs, stress-ng) come with
# the others.
"$(dirname "$0")/ci-deps.sh"
install_crate() { # NAME VERSION
  if ! "$bin/$1" --version 2>/dev/null | grep "$2" >/dev/null; then
    echo "fs-tools.sh: cargo install $1 $2 (about a minute)" >&2
    cargo install --locked --quiet "$1" --version "$2"
  fi
}
install_crate fsx "$FSX_VERSION"
install_crate pjdfstest "$PJDFSTEST_VERSION"
if ! id tests >/dev/null 2>&1; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "fs-tools.sh: pjdfstest needs a user named tests; create it as root" >&2
    exit 1
  fi
  echo "tests:x:::pjdfstest's unprivileged user:/:/usr/sbin/nologin" | newusers
fi
