#!/usr/bin/env bash
# The Python package (crates/extalloc-python, docs/python.md): `pip install` of it into a
# virtual environment (VENV, default target/python-venv; pip fetches maturin, the build
# backend, from PyPI), then its tests with pytest and hypothesis (versions pinned in
# crates/extalloc-python/tests/requirements.txt). The build shares the workspace's target
# directory, so after `cargo test --workspace --release` it compiles only the module.
#
#   scripts/test/python-tests.sh            # about 1 minute after the workspace's release build
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${VENV:-target/python-venv}
if [[ ! -x "$VENV/bin/python" ]]; then
  if ! python3 -m venv "$VENV"; then
    echo "python-tests.sh: python3 cannot make a virtual environment (Debian: apt-get install python3-venv)" >&2
    exit 1
  fi
fi
pip=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install -r crates/extalloc-python/tests/requirements.txt
echo "python-tests.sh: pip install ./crates/extalloc-python" >&2
# The module in release, or the profile EXTALLOC_PROFILE names (test.sh: `checked`, which
# found the package's classes misaligned by Python's allocator).
MATURIN_PEP517_ARGS="--profile ${EXTALLOC_PROFILE:-release}" CARGO_TARGET_DIR="$PWD/target" \
  "${pip[@]}" install --force-reinstall --no-deps ./crates/extalloc-python
"$VENV/bin/python" -m pytest -q -p no:cacheprovider crates/extalloc-python/tests
