#!/usr/bin/env bash
# Builds the FUSE floor target of `compare-fs` (`--fs floor,floor-uring`): the project's
# in-memory FUSE file system, scripts/bench/floor-memfs.c, linked against libfuse 3.19 (the
# version with FUSE over io_uring; Debian's libfuse3 is 3.14, without it) built from the
# source in ../shared/libfuse (LIBFUSE_SRC). That source is a benchmark tool, not part of
# extalloc: it is copied outside the tree, built there with meson and ninja, and never
# edited; none of its code is in the project (see its FOR-EXTALLOC.md).
#
#   scripts/bench/build-floor.sh            # prints the path of the floor binary on stdout
#
# Installs meson, ninja-build, liburing-dev and pkg-config with apt-get when missing (root).
# The build is cached under FLOOR_CACHE (default ~/.cache/extalloc-floor): libfuse is built
# once per source commit, the floor again whenever floor-memfs.c changes. Progress goes to
# stderr; the last line of stdout is the binary. compare-fs runs this script itself.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src_c="$here/floor-memfs.c"
repo_root="$(cd "$here/../.." && pwd)"
libfuse_src="${LIBFUSE_SRC:-$repo_root/../shared/libfuse}"
[[ -d "$libfuse_src" ]] || libfuse_src=/work/shared/libfuse
cache="${FLOOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/extalloc-floor}"
log() { echo "build-floor.sh: $*" >&2; }

if [[ ! -f "$libfuse_src/include/fuse_lowlevel.h" ]]; then
  log "no libfuse source at $libfuse_src (set LIBFUSE_SRC to a libfuse 3.19 checkout)"
  exit 1
fi
missing=()
command -v meson >/dev/null 2>&1 || missing+=(meson)
command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
pkg-config --exists liburing 2>/dev/null || missing+=(liburing-dev)
if [[ ${#missing[@]} -gt 0 ]]; then
  if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    log "missing ${missing[*]}; install them (Debian: apt-get install ${missing[*]})"
    exit 1
  fi
  log "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2 \
    || { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2; }
fi

# The source's identity: its git commit if it has one, else a hash of its file list and
# sizes (the copy is never edited, so this changes only when it is replaced).
if id="$(git -C "$libfuse_src" rev-parse --short=12 HEAD 2>/dev/null)"; then :; else
  id="$(cd "$libfuse_src" && find . -type f -printf '%p %s\n' | sort | sha256sum | cut -c1-12)"
fi
dir="$cache/libfuse-$id"
lib="$dir/build/lib/libfuse3.so"
if [[ ! -f "$dir/ok" ]]; then
  log "building libfuse ($libfuse_src, $id) in $dir"
  rm -rf "$dir"
  mkdir -p "$dir"
  cp -a "$libfuse_src/." "$dir/src"
  (cd "$dir/src" && meson setup "$dir/build" -Dbuildtype=release -Dexamples=false \
    -Dtests=false -Dutils=false -Denable-io-uring=true >&2 && ninja -C "$dir/build" >&2)
  grep -q 'HAVE_URING *1\|#define HAVE_URING' "$dir/build/fuse_config.h" \
    || log "warning: this libfuse was built without io_uring (liburing-dev missing or too old)"
  touch "$dir/ok"
fi

sum="$(cat "$src_c" "$0" | sha256sum | cut -c1-12)"
bin="$dir/floor-memfs-$sum"
if [[ ! -x "$bin" ]]; then
  log "compiling $src_c"
  gcc -O2 -g -Wall -Wextra -Werror -std=gnu11 -pthread \
    -I"$dir/src/include" -I"$dir/build" -I"$dir/build/include" \
    -o "$bin.tmp" "$src_c" -L"$dir/build/lib" -lfuse3 -Wl,-rpath,"$dir/build/lib"
  mv "$bin.tmp" "$bin"
fi
echo "$bin"
