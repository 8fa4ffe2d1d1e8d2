#!/usr/bin/env bash
# What the build and tests need beyond Rust, installed only when missing: gcc with its
# sanitizer runtimes (the C API's tests, scripts/test/c-tests.sh); fontconfig's development
# files (plotters draws text through font-kit) and a font to draw with; and
# e2fsprogs, mount and util-linux (mkfs.ext4, dumpe2fs, losetup, fallocate), with which the tests
# that need root make and trace an ext4 loop mount instead of skipping; fio, which the
# writeback comparison runs on that mount; and for the mount tests (scripts/ci/fs-tools.sh
# adds the crates.io tools): fuse3 (fusermount3), fsmark (fs_mark, for compare-fs), and
# libacl1-dev and acl, which pjdfstest links (setfacl/getfacl also check the mount's ACLs);
# attr (setfattr/getfattr), with which the mount tests check extended attributes; fuse2fs
# (e2fsprogs' ext4 through FUSE) and stress-ng (--dentry, --fallocate), which
# `compare-fs --fs ...,fuse2fs` and its stress-ng job run.
set -euo pipefail
missing=()
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
pkg-config --exists fontconfig 2>/dev/null || missing+=(libfontconfig1-dev)
if ! command -v fc-list >/dev/null 2>&1 || [[ -z "$(fc-list 2>/dev/null | head -1)" ]]; then
  missing+=(fontconfig fonts-dejavu-core)
fi
for tool in mkfs.ext4 dumpe2fs e2freefrag; do
  command -v "$tool" >/dev/null 2>&1 || { missing+=(e2fsprogs); break; }
done
command -v losetup >/dev/null 2>&1 || missing+=(mount)
command -v fallocate >/dev/null 2>&1 || missing+=(util-linux)
command -v fio >/dev/null 2>&1 || missing+=(fio)
command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)
command -v fs_mark >/dev/null 2>&1 || missing+=(fsmark)
[[ -e /usr/include/sys/acl.h ]] || missing+=(libacl1-dev)
command -v setfacl >/dev/null 2>&1 || missing+=(acl)
command -v setfattr >/dev/null 2>&1 || missing+=(attr)
command -v fuse2fs >/dev/null 2>&1 || missing+=(fuse2fs)
command -v stress-ng >/dev/null 2>&1 || missing+=(stress-ng)
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
  echo "ci-deps.sh: missing ${missing[*]}; install them (Debian: apt-get install ${missing[*]})" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q "${missing[@]}"
