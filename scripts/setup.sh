#!/usr/bin/env bash
# Installs what the lab needs beyond Rust: the kernel file systems' user-space tools for
# `extalloc compare` (mkfs, dumpe2fs/e2freefrag, xfs_db; fio for its writeback job; fuse3,
# fs_mark, fuse2fs and stress-ng for compare-fs) and
# fontconfig with a font for the charts. Debian/Ubuntu; run as root.
set -euo pipefail
if [[ $(id -u) -ne 0 ]]; then
  echo "setup.sh: run as root (it installs packages with apt-get)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q e2fsprogs xfsprogs btrfs-progs util-linux mount fio fuse3 fsmark fuse2fs stress-ng \
  pkg-config libfontconfig1-dev fontconfig fonts-dejavu-core
