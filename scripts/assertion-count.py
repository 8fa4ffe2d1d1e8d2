#!/usr/bin/env python3
"""Counts assertions in the library's state-changing functions; lists those with none.

    scripts/assertion-count.py            (the folders of docs/architecture.md's rule)
    scripts/assertion-count.py PATH...    (files or folders)
    scripts/assertion-count.py --update-floors   (raise scripts/assertion-floors.txt)
    scripts/assertion-count.py --self-test

Prints, per folder, its functions, how many change state, how many of those assert
something, and assertions per function. Two kinds of folder:

- strict (DEFAULT_ROOTS: the core, the file layer, the writeback cache, the on-disk
  format): one line per offender (a state-changing function without an assertion, or a
  check helper that asserts nothing), and exit 1 when there is any;
- ratcheted (RATCHET_ROOTS: the FUSE crate's file system and transport, whose handlers
  are many and small): the share of state-changing functions that assert may only go up.
  Its floor per folder is in scripts/assertion-floors.txt; a share below its floor exits 1;
  a share above it says so, and `--update-floors` writes the new floors.

Which functions: every `fn` with a body outside tests. Tests are inline `#[cfg(test)]`
modules and `impl` blocks (as scripts/long-functions.py finds them: by indentation, on
rustfmt's layout), functions marked `#[test]` or `#[cfg(test)]`, and files of their own
(`tests.rs`, `*_tests.rs`). A function nested in another is part of the outer one.

State-changing, decided from the text alone (never from a function's name):
  1. its parameters take something by `&mut` (`&mut self`, `&mut T`, `&'a mut T`), except
     a formatter or a hasher (`&mut fmt::Formatter`, `&mut H` of `Hash::hash`): writing
     text or a hash changes no state of ours; or
  2. its body writes shared state directly: an atomic (`.store(`, `.swap(`,
     `.fetch_add(` and every other `.fetch_*(`, `.compare_exchange*(`), a `RefCell`
     (`.borrow_mut(`), an `RwLock` taken for writing (`.write()`), or a device (the
     `Device` trait's writers `.write_at(`, `.flush(`, `.discard(`); or
  3. its body takes a mutex (`.lock()`) and mutates something: `.push(`, `.insert(`,
     `.remove(`, `.pop(`, `.clear(`, `.extend(`, `.splice(`, `.retain(`, `.truncate(`,
     `.drain(`, `mem::take(`/`replace(`/`swap(`, an assignment to a place (`x.f = `,
     `*g = `, `a[i] = `) or a compound one (`+=`, `-=`, `|=`, `&=`, `^=`, `<<=`, `>>=`).
A `&self` function that changes state only by calling other functions is not counted:
the writes are asserted where they happen, in those functions. Nor is, under 2 and 3, a
forwarder: a `&self` body of nothing but method calls on one field of `self` (a setter,
`self.flag.store(on, Relaxed)`; a pass-through, `self.dev.flush()?; self.dev.drop_cache()`):
any value is valid and the field's own methods hold the checks (the `fwd` column counts
them, so what is left out shows). A method taking `mut self` by value (a builder) changes
only a value its caller gave up, and is not counted.

What counts as an assertion: `assert!`, `assert_eq!`, `assert_ne!`, `debug_assert!`,
`debug_assert_eq!`, `debug_assert_ne!` (comments are skipped), or a call to a check
helper: a function whose name begins `debug_check` or `assert_` (`self.debug_check()`,
`assert_in_range(..)`). A check helper found in the files read must itself assert
something, or it is an offender: a helper's name alone asserts nothing."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rustfns import closing, functions as fn_spans  # noqa: E402

DEFAULT_ROOTS = [
    'crates/extalloc/src/groups',
    'crates/extalloc/src/alloc',
    'crates/extalloc/src/disk/journal',
    'crates/extalloc/src/store',
    'crates/extalloc/src/volume',
    'crates/extalloc/src/files',
    'crates/extalloc/src/writeback',
    'crates/extalloc/src/disk/format',
]

RATCHET_ROOTS = [
    'crates/extalloc-fuse/src/fs',
    'crates/extalloc-fuse/src/transport',
]

FLOORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'assertion-floors.txt')

BLOCK_RE = re.compile(r'^(\s*)(pub(\([^)]*\))?\s+)?(mod\s+\w+\s*|impl\b.*)\{\s*$')
ASSERT_RE = re.compile(r'\b(debug_)?assert(_eq|_ne)?!')
HELPER_RE = re.compile(r'\b(debug_check\w*|assert_\w+)\s*(::<[^>]*>)?\(')
HELPER_NAME_RE = re.compile(r'^(debug_check\w*|assert_\w+)$')
MUT_PARAM_RE = re.compile(r"&\s*('\w+\s+)?mut\b\s*([\w:]+)?")
EXEMPT_MUT = re.compile(r'^((std::)?fmt::)?Formatter$|^H$|^(std::hash::)?Hasher$')
WRITER_RE = re.compile(
    r'\.(store|swap|fetch_\w+|compare_exchange\w*|borrow_mut|write_at|flush|discard)\s*\('
    r'|\.write\(\)')
LOCK_RE = re.compile(r'\.lock\(\)')
MUTATION_RE = re.compile(
    r'\.(push|insert|remove|pop|clear|extend|splice|retain|truncate|drain)\s*\('
    r'|mem::(take|replace|swap)\s*\('
    r'|(\+=|-=|\|=|&=|\^=|<<=|>>=)'
    r'|^\s*(\*\s*[\w.]+|[\w]+(\.[\w]+)+|[\w.]+\[[^\]]*\])\s*=[^=]', re.M)


def attrs_before(lines, i):
    """The attribute lines (`#[...]`) just above line `i`, doc comments skipped."""
    out = []
    j = i - 1
    while j >= 0 and (lines[j].strip().startswith('#[') or lines[j].strip().startswith('//')):
        if lines[j].strip().startswith('#['):
            out.append(lines[j].strip())
        j -= 1
    return out


def is_test_attr(attrs):
    return any(a.startswith('#[test]') or a.startswith('#[cfg(test)]') for a in attrs)


def test_blocks(lines):
    """Line indexes inside inline `#[cfg(test)] mod NAME { ... }` and `impl ... { ... }`."""
    skipped = set()
    for i, line in enumerate(lines):
        m = BLOCK_RE.match(line)
        if m and i not in skipped and is_test_attr(attrs_before(lines, i)):
            k = closing(lines, i, m.group(1))
            skipped.update(range(i, k + 1))
    return skipped


def strip_comments(text):
    out = []
    for line in text.split('\n'):
        s = line.strip()
        if s.startswith('//'):
            continue
        # A trailing comment (naive about `//` inside strings, which only drops text).
        out.append(re.sub(r'\s//\s.*$', '', line))
    return '\n'.join(out)


def params_of(signature):
    """The text between the parentheses of the parameter list."""
    start = signature.find('(')
    if start < 0:
        return ''
    depth = 0
    for k in range(start, len(signature)):
        if signature[k] == '(':
            depth += 1
        elif signature[k] == ')':
            depth -= 1
            if depth == 0:
                return signature[start + 1:k]
    return signature[start + 1:]


def takes_mut(params):
    for m in MUT_PARAM_RE.finditer(params):
        ty = m.group(2) or ''
        if not EXEMPT_MUT.match(ty.split('<')[0]):
            return True
    return False


FORWARD_RE = re.compile(r'^self\.(\w+)(\s*\.\s*\w+)*\s*\.\s*\w+\s*\(')


def forwarder(body):
    """Whether `body` is nothing but method calls on one field of `self`."""
    text = body.strip()
    if text.endswith('}'):
        text = text[:-1]
    stmts = [st.strip() for st in text.split(';') if st.strip()]
    fields = set()
    for st in stmts:
        m = FORWARD_RE.match(st)
        # One call on the field, its arguments and `?` the rest (no `.lock().push(..)`).
        if not m or '{' in st or params_of(st[m.end() - 1:]) != st[m.end():].rstrip('?')[:-1]:
            return False
        fields.add(m.group(1))
    return len(fields) == 1


def state_changing(signature, body):
    """True, False, or 'fwd' (a forwarder: writes only through one field's methods)."""
    if takes_mut(params_of(signature)):
        return True
    if forwarder(body):
        return 'fwd' if WRITER_RE.search(body) or LOCK_RE.search(body) else False
    if WRITER_RE.search(body):
        return True
    return bool(LOCK_RE.search(body) and MUTATION_RE.search(body))


def assertions(body):
    return len(ASSERT_RE.findall(body)) + len(HELPER_RE.findall(body))


def functions(text):
    """(line number, name, state-changing, assertions) of every non-test function."""
    lines = text.splitlines()
    skipped = test_blocks(lines)
    out = []
    for i, j, k, name in fn_spans(lines, skipped):
        if not is_test_attr(attrs_before(lines, i)):
            sig = strip_comments('\n'.join(lines[i:j + 1]))
            # The body: after the signature's `{` (a one-line fn keeps its text after it).
            first = lines[j][lines[j].rfind('{') + 1:] if j == k else ''
            body = strip_comments('\n'.join([first] + lines[j + 1:k + 1]))
            out.append((i + 1, name, state_changing(sig, body), assertions(body)))
    return out


def rs_files(root):
    if os.path.isfile(root):
        return [root]
    return sorted(os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs
                  if f.endswith('.rs') and f != 'tests.rs' and not f.endswith('_tests.rs'))


def offenders(path, fns):
    found = []
    for line, name, changing, n in fns:
        if n == 0 and (changing is True or HELPER_NAME_RE.match(name)):
            why = 'check helper asserts nothing' if HELPER_NAME_RE.match(name) \
                else 'changes state, asserts nothing'
            found.append(f'{path}:{line} {name}: {why}')
    return found


def summary(fns):
    total = len(fns)
    changing = [f for f in fns if f[2] is True]
    asserted = [f for f in changing if f[3] > 0]
    count = sum(f[3] for f in fns)
    fwd = sum(1 for f in fns if f[2] == 'fwd')
    return total, len(changing), len(asserted), count, sum(f[3] for f in changing), fwd


def folder_rows(roots, bad):
    """(root, summary) per folder; appends each file's offenders to `bad`."""
    rows = []
    for root in roots:
        fns_all = []
        for p in rs_files(root):
            with open(p) as fh:
                fns = functions(fh.read())
            fns_all += fns
            bad += offenders(p, fns)
        rows.append((root, summary(fns_all)))
    return rows


def print_rows(rows):
    print(f"{'folder':34} {'fns':>5} {'changing':>8} {'asserted':>8} {'asserts':>7} "
          f"{'per fn':>6} {'per changing':>12} {'fwd':>4}")
    for root, (total, changing, asserted, count, in_changing, fwd) in rows:
        per = count / total if total else 0
        print(f"{root:34} {total:5} {changing:8} {asserted:8} {count:7} {per:6.2f} "
              f"{in_changing / changing if changing else 0:12.2f} {fwd:4}")


def share(row):
    """Share of a folder's state-changing functions that assert, in percent."""
    _, (_, changing, asserted, *_rest) = row
    return 100.0 * asserted / changing if changing else 100.0


def read_floors():
    floors = {}
    if os.path.exists(FLOORS):
        with open(FLOORS) as fh:
            for line in fh:
                if line.strip() and not line.startswith('#'):
                    folder, pct = line.split()
                    floors[folder] = float(pct)
    return floors


def ratchet(rows, update):
    """Checks each ratcheted folder's share against its floor; 1 when one fell."""
    floors = read_floors()
    failed = 0
    for row in rows:
        root, now = row[0], share(row)
        floor = floors.get(root)
        if floor is None or now > floor + 0.05:
            floors[root] = now if update or floor is None else floor
            if floor is not None and not update:
                print(f'RATCHET {root}: {now:.1f} % of state-changing functions assert, '
                      f'above the floor {floor:.1f} %: run --update-floors')
        elif now < floor - 0.05:
            print(f'RATCHET {root}: {now:.1f} % of state-changing functions assert, '
                  f'below the floor {floor:.1f} %: add assertions where state changes')
            failed = 1
    if update or any(r[0] not in read_floors() for r in rows):
        with open(FLOORS, 'w') as fh:
            fh.write('# Floors of scripts/assertion-count.py: per ratcheted folder, the share (%)\n'
                     '# of state-changing functions that assert. They may only go up.\n')
            for root in sorted(floors):
                fh.write(f'{root} {floors[root]:.1f}\n')
    return failed


def main(args):
    if args == ['--self-test']:
        return self_test()
    update = args == ['--update-floors']
    bad = []
    if args and not update:
        print_rows(folder_rows(args, bad))
        ratcheted = 0
    else:
        print_rows(folder_rows(DEFAULT_ROOTS, bad))
        ignored = []
        rows = folder_rows(RATCHET_ROOTS, ignored)
        print_rows(rows)
        ratcheted = ratchet(rows, update)
    for b in bad:
        print(f'OFFENDER {b}')
    if bad:
        print(f'{len(bad)} offenders', file=sys.stderr)
    return 1 if bad or ratcheted else 0


def self_test():
    cases = []

    def case(name, text, want):
        cases.append((name, text, want))

    case('mut self without assertion', 'impl S {\n    fn f(&mut self) {\n        self.a = 1;\n'
         '    }\n}', [(2, 'f', True, 0)])
    case('mut param with debug_assert', 'fn f(x: &mut Vec<u8>) {\n    x.push(1);\n'
         '    debug_assert!(!x.is_empty());\n}', [(1, 'f', True, 1)])
    case('lifetime mut param', "fn f<'a>(x: &'a mut [u8]) {\n    x[0] = 1;\n}",
         [(1, 'f', True, 0)])
    case('atomic store', 'fn f(&self) {\n    self.a.store(1, Relaxed);\n'
         '    assert_eq!(self.a.load(Relaxed), 1);\n    assert_ne!(1, 2);\n}',
         [(1, 'f', True, 2)])
    case('device write', 'fn f(&self, d: &dyn Device) -> Result<()> {\n'
         '    d.write_at(&[0], 0)\n}', [(1, 'f', True, 0)])
    case('lock and push', 'fn f(&self) {\n    self.v.lock().push(1);\n}', [(1, 'f', True, 0)])
    case('lock and field assignment', 'fn f(&self) {\n    let mut g = self.v.lock();\n'
         '    g.count = 0;\n}', [(1, 'f', True, 0)])
    case('lock to read only', 'fn f(&self) -> usize {\n    let v = self.v.lock();\n'
         '    let n = v.len();\n    n == 0\n}', [(1, 'f', False, 0)])
    case('local vec without lock', 'fn f(&self) -> Vec<u8> {\n    let mut v = Vec::new();\n'
         '    v.push(1);\n    v\n}', [(1, 'f', False, 0)])
    case('formatter', 'impl fmt::Display for S {\n'
         '    fn fmt(&self, f: &mut fmt::Formatter<\'_>) -> fmt::Result {\n'
         '        write!(f, "s")\n    }\n}', [(2, 'fmt', False, 0)])
    case('assertion in a comment', 'fn f(&mut self) {\n    // assert!(self.ok());\n'
         '    self.a = 1; // debug_assert!(x)\n}', [(1, 'f', True, 0)])
    case('check helper call', 'fn f(&mut self) {\n    self.a = 1;\n    self.debug_check();\n}\n'
         'fn debug_check(&self) {\n    debug_assert!(self.a > 0);\n}',
         [(1, 'f', True, 1), (5, 'debug_check', False, 1)])
    case('test module, test fn and test impl skipped',
         'fn g(&mut self) {\n    assert!(true);\n}\n#[cfg(test)]\nmod tests {\n'
         '    fn h(&mut self) {}\n}\n#[test]\nfn t(x: &mut u8) {\n    *x = 1;\n}\n'
         '#[cfg(test)]\nimpl S {\n    fn i(&mut self) {}\n}\n'
         '#[cfg(test)]\n/// doc\nfn j(&mut self) {}',
         [(1, 'g', True, 1)])
    case('where clause and one-line fn', 'fn f<X>(x: X)\nwhere\n    X: Copy,\n{\n'
         '    X::go(&mut 1);\n}\nfn g(&mut self) { assert!(self.ok()) }',
         [(1, 'f', False, 0), (7, 'g', True, 1)])
    case('trait declaration is no function', 'trait T {\n    fn f(&mut self);\n}', [])
    case('forwarders', 'fn set(&self, on: bool) {\n    self.flag\n        .store(on, Relaxed);\n}\n'
         'fn cache(&self) -> Result<()> {\n    self.dev.flush()?;\n    self.dev.drop_cache()\n}\n'
         'fn two(&self) {\n    self.a.store(1, Relaxed);\n    self.b.store(1, Relaxed);\n}\n'
         'fn set_mut(&mut self, on: bool) {\n    self.flag.set(on);\n}',
         [(1, 'set', 'fwd', 0), (5, 'cache', 'fwd', 0), (9, 'two', True, 0),
          (13, 'set_mut', True, 0)])

    failed = 0
    for name, text, want in cases:
        got = functions(text)
        if got != want:
            failed += 1
            print(f'self-test {name}: got {got}, want {want}')
    # Offenders: a state-changing function with no assertion; a helper asserting nothing.
    got = offenders('x.rs', [(1, 'f', True, 0), (2, 'g', True, 1), (3, 'debug_check', False, 0),
                             (4, 'h', False, 0)])
    want = ['x.rs:1 f: changes state, asserts nothing',
            'x.rs:3 debug_check: check helper asserts nothing']
    if got != want:
        failed += 1
        print(f'self-test offenders: got {got}, want {want}')
    if failed:
        return 1
    print(f'self-test: {len(cases) + 1} cases pass')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
