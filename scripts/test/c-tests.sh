#!/usr/bin/env bash
# The C API from C (crates/extalloc-capi): builds the crate in release, then compiles each
# C test (crates/extalloc-capi/tests/*.c) and the example (examples/blobstore.c) with gcc
# under AddressSanitizer and UndefinedBehaviorSanitizer against the shared library, the
# example also against the static one, and runs them. Fails on a failed check, a non-zero
# exit or any sanitizer report (leaks included). About 10 s once the library is built.
#
#   scripts/test/c-tests.sh               # builds the crate alone (about 2 minutes the first time)
#   scripts/test/c-tests.sh --workspace   # reuses test.sh's `cargo test --workspace` build
#
# The profile is release, or the one EXTALLOC_PROFILE names (test.sh: `checked`, release
# with debug assertions and overflow checks).
#
# The library is the one `cargo test --release --no-run` builds for the tests (its path from
# cargo's JSON messages): with --workspace, features are unified over the workspace and its
# dev-dependencies as in test.sh's run, so nothing is compiled again; `cargo build` would
# unify them otherwise and rebuild the library and everything under it.
set -euo pipefail
cd "$(dirname "$0")/../.."
select=(--package extalloc-capi)
if [[ ${1:-} == --workspace ]]; then
  select=(--workspace)
fi
so=$(cargo test --profile "${EXTALLOC_PROFILE:-release}" "${select[@]}" --no-run --message-format=json-render-diagnostics |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and "cdylib" in m["target"]["kind"]:
        print("\n".join(f for f in m["filenames"] if f.endswith("/libextalloc_capi.so")))
')
if [[ ! -f $so ]]; then
  echo "c-tests: cargo reported no libextalloc_capi.so" >&2
  exit 1
fi
lib=$(dirname "$so")
capi=crates/extalloc-capi
out=$(mktemp -d "${TMPDIR:-/tmp}/extalloc-c-tests.XXXXXX")
trap 'rm -rf "$out"' EXIT
cflags=(-std=gnu11 -Wall -Wextra -Werror -g -O1 -fsanitize=address,undefined
  -fno-sanitize-recover=all -fno-omit-frame-pointer -I"$capi/include")
shared=(-L"$lib" -lextalloc_capi -Wl,-rpath,"$lib" -lpthread)
static=("$lib/libextalloc_capi.a" -lpthread -ldl -lm)
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

progs=()
for src in "$capi"/tests/*.c; do
  name=$(basename "$src" .c)
  gcc "${cflags[@]}" "$src" "${shared[@]}" -o "$out/$name"
  progs+=("$name")
done
gcc "${cflags[@]}" "$capi/examples/blobstore.c" "${shared[@]}" -o "$out/blobstore"
gcc "${cflags[@]}" "$capi/examples/blobstore.c" "${static[@]}" -o "$out/blobstore-static"

failed=0
run() {
  local name=$1
  shift
  local start=$SECONDS
  if ! "$out/$name" "$@" >"$out/$name.out" 2>"$out/$name.err"; then
    echo "c-tests: $name FAILED" >&2
    failed=1
  elif grep -qE "Sanitizer|runtime error" "$out/$name.err"; then
    echo "c-tests: $name: a sanitizer report" >&2
    failed=1
  fi
  cat "$out/$name.out" "$out/$name.err"
  echo "c-tests: $name done in $((SECONDS - start)) s"
}
mkdir "$out/scratch"
for name in "${progs[@]}"; do
  run "$name" "$out/scratch"
done
run blobstore "$out/scratch/blobstore.vol"
run blobstore-static "$out/scratch/blobstore-static.vol"
# The installed library (scripts/install-c.sh): the example built as a user would, through
# pkg-config, runs against the installed library under its SONAME.
prefix="$out/prefix"
./scripts/install-c.sh "$prefix" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046 # pkg-config's flags are words on purpose
gcc -std=gnu11 -Wall -Werror "$capi/examples/blobstore.c" $(pkg-config --cflags --libs extalloc) \
  -Wl,-rpath,"$prefix/lib" -o "$out/blobstore-installed"
# ldd's output is taken whole before it is searched: `ldd | grep -q` under pipefail fails
# whenever grep's early exit meets ldd still writing (SIGPIPE), as it once did in CI.
libs=$(ldd "$out/blobstore-installed")
if ! grep -qF "libextalloc_capi.so.0.1 => $prefix/lib/" <<<"$libs"; then
  echo "c-tests: the installed example does not load $prefix/lib/libextalloc_capi.so.0.1" >&2
  failed=1
fi
run blobstore-installed "$out/scratch/blobstore-installed.vol"
# The installed static library, linked as docs/c.md says: by its path (a plain
# `-lextalloc_capi` takes the shared one whenever both are installed, --static or not).
# shellcheck disable=SC2046 # pkg-config's flags are words on purpose
gcc -std=gnu11 -Wall -Werror "$capi/examples/blobstore.c" $(pkg-config --cflags extalloc) \
  "$(pkg-config --variable=libdir extalloc)/libextalloc_capi.a" \
  -lpthread -ldl -lm -o "$out/blobstore-installed-static"
libs=$(ldd "$out/blobstore-installed-static")
if grep -qF "libextalloc_capi" <<<"$libs"; then
  echo "c-tests: the statically linked example loads a shared libextalloc_capi" >&2
  failed=1
fi
run blobstore-installed-static "$out/scratch/blobstore-installed-static.vol"
if [[ $failed -ne 0 ]]; then
  echo "c-tests: FAILED" >&2
  exit 1
fi
echo "c-tests: all passed (${#progs[@]} test programs, the example four times: shared, static, installed shared and static)"
