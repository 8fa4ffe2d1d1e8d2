#!/usr/bin/env bash
# Installs the C API (docs/c.md): the shared library with its SONAME and links, the static
# library, the header and a pkg-config file, stripped of debug information.
#
#   scripts/install-c.sh [PREFIX]        # default /usr/local (root for that)
#   DESTDIR=/tmp/stage scripts/install-c.sh /usr   # staged, as packagers do
#
# Then: cc app.c $(pkg-config --cflags --libs extalloc) (PKG_CONFIG_PATH=PREFIX/lib/pkgconfig
# when PREFIX is not searched by default), or --static for the static library. Builds in
# release, or the profile EXTALLOC_PROFILE names.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${1:-/usr/local}
DEST="${DESTDIR:-}$PREFIX"
PROFILE=${EXTALLOC_PROFILE:-release}
version=$(sed -n '/^version = /{s/^version = "\(.*\)"/\1/p;q}' Cargo.toml)
major=${version%%.*}
rest=${version#*.}
minor=${rest%%.*}
abi=$major
[[ $major == 0 ]] && abi="0.$minor"
cargo build --profile "$PROFILE" -q -p extalloc-capi
built="${CARGO_TARGET_DIR:-target}/$PROFILE"
so="libextalloc_capi.so"
install -d "$DEST/lib/pkgconfig" "$DEST/include"
# The shared library is linked here from the static one, with its SONAME
# (libextalloc_capi.so.0.1 while the version is 0.x, whose minor versions may break the
# ABI) and only the C API exported, as cargo's cdylib exports it: cargo cannot give the
# in-tree cdylib a SONAME without every program linked against target/ then needing a
# link named after it.
work=$(mktemp -d "${TMPDIR:-/tmp}/extalloc-install-c.XXXXXX")
trap 'rm -rf "$work"' EXIT
printf '{\n  global: extalloc_*;\n  local: *;\n};\n' >"$work/exports"
gcc -shared -Wl,-soname,"$so.$abi" -Wl,--version-script="$work/exports" -Wl,--gc-sections \
  -Wl,--whole-archive "$built/libextalloc_capi.a" -Wl,--no-whole-archive -lpthread -ldl -lm \
  -o "$work/$so.$version"
install -m 0755 "$work/$so.$version" "$DEST/lib/$so.$version"
strip --strip-debug "$DEST/lib/$so.$version"
ln -sf "$so.$version" "$DEST/lib/$so.$abi"
ln -sf "$so.$abi" "$DEST/lib/$so"
install -m 0644 "$built/libextalloc_capi.a" "$DEST/lib/libextalloc_capi.a"
strip --strip-debug "$DEST/lib/libextalloc_capi.a"
install -m 0644 crates/extalloc-capi/include/extalloc.h "$DEST/include/extalloc.h"
cat >"$DEST/lib/pkgconfig/extalloc.pc" <<PC
prefix=$PREFIX
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: extalloc
Description: extalloc's C API: a crash-safe volume of blobs and an extent allocator
Version: $version
Libs: -L\${libdir} -lextalloc_capi
Libs.private: -lpthread -ldl -lm
Cflags: -I\${includedir}
PC
echo "install-c.sh: extalloc $version in $DEST (lib/$so.$abi, lib/libextalloc_capi.a, include/extalloc.h, lib/pkgconfig/extalloc.pc)"
