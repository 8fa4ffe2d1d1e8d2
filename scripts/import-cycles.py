#!/usr/bin/env python3
"""Files that import each other: the check behind "no file imports one that imports it".

Usage: scripts/import-cycles.py [CRATE_SRC ...]   (default: every crates/*/src)
       scripts/import-cycles.py --self-test

For every source file (test-only modules skipped: a `#[cfg(test)]` inline `mod` block and a
file declared under `#[cfg(test)]`), every path it names is resolved to the file that
defines it: the items of `use` statements (braces expanded) and paths in code that start with
`crate::`, `super::`, `self::` or the name of one of the file's own child modules. A path
resolves to the deepest module file it passes through (`crate::store::ops::Op` is
`store/ops.rs`), and a name that file only re-exports (`pub use`, a glob included) resolves
on to the file that defines it; a path into the file itself is not an import. `mod x;`
declares, it does not import. Two files that each name a path into the other are printed
with one line of each, then every longer cycle (files that reach each other through
others); the exit status is 1 when there is a cycle of any length, 2 on a usage error.

A parent `mod.rs` re-exports and calls its children, so a child that needs something the
parent defines finds it in a sibling file both import (the crate's `types.rs`, `core.rs`),
never in the parent."""
import os
import re
import sys

USE_RE = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]*);', re.S | re.M)
PATH_RE = re.compile(r'\b((?:crate|super|self)(?:::\w+)+)')
MOD_RE = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;', re.M)
CFG_TEST_RE = re.compile(r'#\[cfg\((?:test|all\(test[^]]*\)|any\(test[^]]*\))\)\]')


def module_files(src):
    """{module path tuple: file path} for one crate's src folder."""
    files = {}
    for root, _, names in os.walk(src):
        for name in names:
            if not name.endswith('.rs'):
                continue
            rel = os.path.relpath(os.path.join(root, name), src)
            parts = rel[:-3].split(os.sep)
            if parts[-1] in ('mod', 'lib', 'main'):
                parts = parts[:-1]
            files[tuple(parts)] = os.path.join(src, rel)
    return files


def strip_tests(text):
    """The text without `#[cfg(test)]` inline module blocks, comments and string bodies."""
    text = re.sub(r'//[^\n]*', '', text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    out, lines, i = [], text.split('\n'), 0
    while i < len(lines):
        line = lines[i]
        if CFG_TEST_RE.search(line) and i + 1 < len(lines) and re.match(
            r'^(\s*)(pub\s+)?mod\s+\w+\s*\{', lines[i + 1]
        ):
            ind = re.match(r'^(\s*)', lines[i + 1]).group(1)
            j = i + 2
            while j < len(lines) and lines[j].rstrip() != ind + '}':
                j += 1
            i = j + 1
            continue
        out.append(line)
        i += 1
    return '\n'.join(out)


def test_only_children(text):
    """Names of child modules declared under `#[cfg(test)]`."""
    names, lines = set(), text.split('\n')
    for i, line in enumerate(lines):
        m = MOD_RE.match(line)
        if m and i > 0 and CFG_TEST_RE.search(lines[i - 1]):
            names.add(m.group(1))
    return names


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r'\s+', '', tree)
    depth, start = 0, None
    for k, ch in enumerate(tree):
        if ch == '{' and depth == 0:
            start = k
            depth = 1
        elif ch == '{':
            depth += 1
        elif ch == '}':
            depth -= 1
            if depth == 0:
                prefix, inner = tree[:start], tree[start + 1:k]
                parts, d, cur = [], 0, ''
                for c in inner:
                    if c == ',' and d == 0:
                        parts.append(cur)
                        cur = ''
                        continue
                    d += c == '{'
                    d -= c == '}'
                    cur += c
                parts.append(cur)
                return [p for part in parts if part for p in expand_use(prefix + part)]
    return [re.sub(r'\bas\b.*$', '', tree)]


DEF_RE = r'^\s*(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+)?(?:fn|struct|enum|const|static|type|trait|mod|union)\s+{}\b'
REEXPORTS = {}


def reexports(path):
    """{name: [paths]} a file re-exports with `pub use`; '*' holds its glob re-exports."""
    if path not in REEXPORTS:
        REEXPORTS[path] = {}
        text = strip_tests(open(path).read())
        for m in re.finditer(r'^\s*pub(?:\([^)]*\))?\s+use\s+([^;]*);', text, re.M):
            for p in expand_use(m.group(1)):
                name = p.split('::')[-1]
                REEXPORTS[path].setdefault(name, []).append(p)
    return REEXPORTS[path]


def defines(path, name):
    return re.search(DEF_RE.format(re.escape(name)), strip_tests(open(path).read()), re.M)


def follow(target, rest, files, depth=0):
    """The file that defines item `rest[0]` named through `target` (re-exports followed)."""
    if not rest or depth > 8 or defines(target, rest[0]):
        return target
    mod = next(m for m, p in files.items() if p == target)
    exports = reexports(target)
    children = {m.group(1) for m in MOD_RE.finditer(strip_tests(open(target).read()))}
    for p in exports.get(rest[0], []):
        found = resolve(p, mod, files, children, depth + 1)
        if found:
            return found
    for p in exports.get('*', []):
        found = resolve(p.rsplit('::', 1)[0], mod, files, children, depth + 1)
        if found and defines(found, rest[0]):
            return found
    return target


def resolve(path, here, files, children, depth=0):
    """The module file a `::` path names from module `here`, or None (an outside crate)."""
    segs = [s for s in path.split('::') if s and s != 'self' or s == 'self']
    segs = [s for s in segs if s not in ('*',)]
    if not segs:
        return None
    if segs[0] == 'crate':
        base, segs = [], segs[1:]
    elif segs[0] in ('super', 'self'):
        base = list(here)
        while segs and segs[0] in ('super', 'self'):
            if segs[0] == 'super':
                base = base[:-1]
            segs = segs[1:]
    elif segs[0] in children:
        base = list(here)
    else:
        return None
    full = base + [s for s in segs if s != 'self']
    for n in range(len(full), -1, -1):
        if tuple(full[:n]) in files:
            return follow(files[tuple(full[:n])], full[n:], files, depth)
    return None


def imports(path, here, files):
    """{file it names: a line that names it}."""
    text = strip_tests(open(path).read())
    # A file's child modules (`mod.rs`'s, or `a.rs`'s in `a/`) are those it declares.
    children = {m.group(1) for m in MOD_RE.finditer(text)}
    found = {}
    candidates = []
    for m in USE_RE.finditer(text):
        line = m.group(0).strip().split('\n')[0]
        candidates += [(p, line) for p in expand_use(m.group(1))]
    for m in PATH_RE.finditer(text):
        line_start = text.rfind('\n', 0, m.start()) + 1
        candidates.append((m.group(1), text[line_start:text.find('\n', m.end())].strip()))
    for m in re.finditer(r'(?<![:\w])(\w+)::\w+', text):
        if m.group(1) in children:
            line_start = text.rfind('\n', 0, m.start()) + 1
            candidates.append((m.group(0), text[line_start:text.find('\n', m.end())].strip()))
    for p, line in candidates:
        target = resolve(p, here, files, children)
        if target and target != path:
            found.setdefault(target, line)
    return found


def crate_pairs(src):
    files = module_files(src)
    skip = set()
    for mod, path in files.items():
        for name in test_only_children(open(path).read()):
            skip.add(mod + (name,))
    # A test-only module's children are test-only too.
    live = {m: p for m, p in files.items() if not any(m[:n] in skip for n in range(1, len(m) + 1))}
    graph = {p: imports(p, m, files) for m, p in live.items()}
    pairs = []
    for a, targets in graph.items():
        for b, line in targets.items():
            if a < b and a in graph.get(b, {}):
                pairs.append((a, line, b, graph[b][a]))
    paired = {f for a, _, b, _ in pairs for f in (a, b)}
    longer = [c for c in cycles(graph) if len(c) > 2 or not set(c) <= paired]
    return pairs, longer, len(live)


def cycles(graph):
    """The strongly connected components of more than one file (Tarjan's algorithm)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def self_test():
    """Small crates with known answers: (files, expected pairs, expected longer cycles)."""
    import tempfile
    cases = [
        ('a child naming its parent', {
            'lib.rs': 'mod v;', 'v/mod.rs': 'mod io;\npub use io::Fallocate;\npub struct Volume;',
            'v/io.rs': 'use super::Volume;\npub enum Fallocate {}'}, 1, 0),
        ('the shared part in a sibling', {
            'lib.rs': 'mod v;', 'v/mod.rs': 'mod io;\nmod state;\npub use io::F;\npub use state::V;',
            'v/state.rs': 'pub struct V;', 'v/io.rs': 'use super::state::V;\npub enum F {}'}, 0, 0),
        ('a name the parent only re-exports', {
            'lib.rs': 'mod v;', 'v/mod.rs': 'mod io;\nmod state;\npub use io::F;\npub use state::V;',
            'v/state.rs': 'pub struct V;', 'v/io.rs': 'use super::V;\npub enum F {}'}, 0, 0),
        ('three files in a ring', {
            'lib.rs': 'mod a;\nmod b;\nmod c;', 'a.rs': 'use crate::b::B;\npub struct A;',
            'b.rs': 'use crate::c::C;\npub struct B;', 'c.rs': 'use crate::a::A;\npub struct C;'}, 0, 1),
        ('a test module may name its parent', {
            'lib.rs': 'mod v;', 'v/mod.rs': '#[cfg(test)]\nmod tests;\npub struct V;\nfn f() { tests::g() }',
            'v/tests.rs': 'use super::V;\npub fn g() {}'}, 0, 0),
        ('braces, paths in code and comments', {
            'lib.rs': 'mod a;\nmod b;', 'a.rs': 'use crate::{b::{B}};\npub struct A;',
            'b.rs': '// crate::a::A is not code\npub struct B;\nfn f() -> crate::a::A { todo!() }'}, 1, 0),
    ]
    failed = 0
    for name, tree, want_pairs, want_loops in cases:
        REEXPORTS.clear()
        with tempfile.TemporaryDirectory() as d:
            for rel, text in tree.items():
                os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
                open(os.path.join(d, rel), 'w').write(text + '\n')
            pairs, longer, _ = crate_pairs(d)
        got = (len(pairs), len(longer))
        if got != (want_pairs, want_loops):
            print(f'self-test {name}: {got} pairs/cycles, expected {(want_pairs, want_loops)}')
            failed += 1
    print(f'import-cycles self-test: {len(cases) - failed} of {len(cases)} cases pass')
    return 1 if failed else 0


def main(args):
    if args == ['--self-test']:
        return self_test()
    if any(a.startswith('-') for a in args):
        print(__doc__)
        return 2
    srcs = args or sorted(os.path.join('crates', c, 'src') for c in os.listdir('crates'))
    total, loops, files = 0, 0, 0
    for src in srcs:
        if not os.path.isdir(src):
            print(f'import-cycles: {src} is not a folder', file=sys.stderr)
            return 2
        pairs, longer, n = crate_pairs(src)
        files += n
        for a, la, b, lb in pairs:
            print(f'{a} <-> {b}\n    {a}: {la}\n    {b}: {lb}')
        for c in longer:
            print(f'files that reach each other through others ({len(c)}): ' + ', '.join(c))
        total += len(pairs)
        loops += len(longer)
    print(f'import-cycles: {total} pair(s) of files importing each other and {loops} longer '
          f'cycle(s) in {files} files')
    return 1 if total or loops else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
