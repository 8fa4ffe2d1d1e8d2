#!/usr/bin/env python3
"""Lists source files over 600 lines outside their inline tests and functions over 80 lines.

    scripts/long-functions.py crates/*/src
    scripts/long-functions.py --files crates/*/src   (CI: files only, a report)
    scripts/long-functions.py --self-test

Prints one line per finding and exits 1 when there is any; prints nothing and exits 0 when
every file and function is within bounds. With --files, only files are listed, as a
question for review (is this file one concept, or two?), and it exits 0: function length
is gated by clippy's `too_many_lines` (Cargo.toml, clippy.toml), which parses Rust.

What it counts: every line of a file except those of an inline test module, that is a
`#[cfg(test)]` (followed by any other attributes) on a `mod NAME {` item, up to that item's
closing brace. Everything else marked `#[cfg(test)]` (a test-only `use`, function, `impl`,
`mod NAME;` declaration) counts. A test module kept in a file of its own (`tests.rs`,
`*_tests.rs`) is a file like any other and is held to the same limits.

A function runs from its `fn` line to its closing brace, both counted; a function nested in
another counts towards the outer one only, and a declaration without a body (a trait's
`fn f(&self);`) is not a function here.

A heuristic: it finds items by indentation (a block closes at a `}` alone on a line, at the
indentation of the line that opened it), so it reads code formatted by rustfmt."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rustfns import closing, functions  # noqa: E402

FILE_LIMIT = 600
FN_LIMIT = 80

TEST_MOD_RE = re.compile(r'^(\s*)(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{')


def test_blocks(lines):
    """The set of line indexes inside inline `#[cfg(test)] mod NAME { ... }` blocks."""
    skipped = set()
    i = 0
    while i < len(lines):
        if lines[i].strip().startswith('#[cfg(test)]'):
            j = i + 1
            while j < len(lines) and (lines[j].strip().startswith('#[')
                                      or lines[j].strip().startswith('//')):
                j += 1
            if j < len(lines) and TEST_MOD_RE.match(lines[j]):
                ind = TEST_MOD_RE.match(lines[j]).group(1)
                if lines[j].rstrip().endswith('}'):
                    k = j  # `mod tests {}` on one line
                else:
                    k = closing(lines, j, ind)
                skipped.update(range(i, k + 1))
                i = k
        i += 1
    return skipped


def check(path, text):
    """The findings for one file: ('FILE', lines) and ('FN', line number, name, lines)."""
    lines = text.splitlines()
    skipped = test_blocks(lines)
    found = []
    counted = len(lines) - len(skipped)
    if counted > FILE_LIMIT:
        found.append(('FILE', counted))
    for i, _, k, name in functions(lines, skipped):
        if k - i + 1 > FN_LIMIT:
            found.append(('FN', i + 1, name, k - i + 1))
    return found


def report(path, found):
    for f in found:
        if f[0] == 'FILE':
            print(f"FILE {path}: {f[1]} lines outside tests")
        else:
            print(f"FN {path}:{f[1]} {f[2]} {f[3]}")


def body(n, ind=''):
    return [f'{ind}    let _ = {x};' for x in range(n)]


def self_test():
    cases = []

    # A function of exactly 80 lines passes, one of 81 does not.
    fn80 = '\n'.join(['fn ok() {'] + body(78) + ['}'])
    fn81 = '\n'.join(['pub(crate) fn long() {'] + body(79) + ['}'])
    cases.append(('80-line fn', fn80, []))
    cases.append(('81-line fn', fn81, [('FN', 1, 'long', 81)]))

    # A test-only import at column 0 does not stop the reading: the function after it counts.
    text = '\n'.join(['#[cfg(test)]', 'use std::fmt;', 'mod a;', ''] + fn81.split('\n'))
    cases.append(('cfg(test) use', text, [('FN', 5, 'long', 81)]))

    # `#[cfg(test)] mod tests;` is a declaration: the function after it counts.
    text = '\n'.join(['#[cfg(test)]', 'mod tests;', ''] + fn81.split('\n'))
    cases.append(('cfg(test) mod decl', text, [('FN', 4, 'long', 81)]))

    # An inline test module is skipped, functions and lines; code after it counts.
    test_mod = (['#[cfg(test)]', '#[allow(dead_code)]', 'mod tests {', '    use super::*;']
                + ['    ' + l for l in fn81.split('\n')] + ['}'])
    text = '\n'.join(test_mod + fn81.split('\n'))
    cases.append(('inline test mod', text, [('FN', len(test_mod) + 1, 'long', 81)]))

    # The file limit: lines of an inline test module do not count, every other line does.
    text = '\n'.join(['// x'] * 550 + test_mod + ['// y'] * 50)
    cases.append(('600 lines + tests', text, []))
    text = '\n'.join(['// x'] * 551 + ['#[cfg(test)]', 'fn helper() {}'] + ['// y'] * 48)
    cases.append(('601 lines', text, [('FILE', 601)]))

    # A test-only function (not in a module) counts.
    text = '\n'.join(['#[cfg(test)]'] + fn81.split('\n'))
    cases.append(('cfg(test) fn', text, [('FN', 2, 'long', 81)]))

    # Methods by indentation; a trait's declaration without a body is no function; a where
    # clause puts the `{` on a line of its own; `fn f() {}` is one line.
    text = '\n'.join(
        ['trait T {', '    fn decl(&self) -> u64;', '    fn short(&self) {}',
         '    fn g<X>(&self, x: X)', '    where', '        X: Copy,', '    {']
        + body(76, '    ') + ['    }', '}', 'impl S {', '    pub const unsafe fn m(',
                              '        a: [u8; 4],', '    ) -> u8 {']
        + body(77, '    ') + ['    }', '}'])
    cases.append(('methods', text, [('FN', 4, 'g', 81), ('FN', 87, 'm', 81)]))

    failed = 0
    for name, text, want in cases:
        got = check(name, text)
        if got != want:
            failed += 1
            print(f"self-test {name}: got {got}, want {want}")
    if failed:
        sys.exit(1)
    print(f"self-test: {len(cases)} cases pass")


def main(args):
    if args == ['--self-test']:
        self_test()
        return 0
    if not args:
        print(__doc__.split('\n\n')[1], file=sys.stderr)
        return 2
    files_only = args[0] == '--files'
    if files_only:
        args = args[1:]
        print('long-functions: files over 600 lines outside tests (one concept each, or two?):')
    any_found = False
    for root in args:
        paths = [root] if os.path.isfile(root) else sorted(
            os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs if f.endswith('.rs'))
        for p in paths:
            with open(p) as fh:
                found = check(p, fh.read())
            if files_only:
                found = [f for f in found if f[0] == 'FILE']
            report(p, found)
            any_found = any_found or bool(found)
    return 1 if any_found and not files_only else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
