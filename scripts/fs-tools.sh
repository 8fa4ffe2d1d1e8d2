#!/usr/bin/env bash
# What the mount tests (scripts/mount-tests.sh) and `compare-fs` need, installed only when
# missing: fuse3 (fusermount3), fio, fsmark (fs_mark), libacl1-dev and acl (pjdfstest links libacl); fsx and pjdfstest from
# crates.io at pinned versions; and the unprivileged `tests` user pjdfstest switches to
# (with `nobody`). Debian, as root.
set -euo pipefail
FSX_VERSION=0.3.2
PJDFSTEST_VERSION=0.2.2
bin="${CARGO_HOME:-$HOME/.cargo}/bin"
missing=()
command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)
command -v fio >/dev/null 2>&1 || missing+=(fio)
command -v fs_mark >/dev/null 2>&1 || missing+=(fsmark)
[[ -e /usr/include/sys/acl.h ]] || missing+=(libacl1-dev)
command -v setfacl >/dev/null 2>&1 || missing+=(acl)
if [[ ${#missing[@]} -gt 0 ]]; then
  if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    echo "fs-tools.sh: missing ${missing[*]}; install them (Debian: apt-get install ${missing[*]})" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q "${missing[@]}"
fi
install_crate() { # NAME VERSION
  if ! "$bin/$1" --version 2>/dev/null | grep -q "$2"; then
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
