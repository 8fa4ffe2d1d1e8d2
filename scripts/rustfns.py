"""The function walker scripts/long-functions.py and scripts/assertion-count.py share.

A heuristic on rustfmt's layout: a block closes at a `}` alone on a line, at the
indentation of the line that opened it. A function runs from its `fn` line to its closing
brace; a function nested in another is part of the outer one; a declaration without a body
(a trait's `fn f(&self);`) is not a function here."""
import re

FN_RE = re.compile(
    r'^(\s*)(pub(\([^)]*\))?\s+)?(default\s+)?(const\s+)?(async\s+)?(unsafe\s+)?'
    r'(extern\s+"[^"]*"\s+)?fn\s+(\w+)'
)


def closing(lines, start, ind):
    """The index of the line `ind}` that closes the block opened at `start`, or the last line."""
    k = start + 1
    while k < len(lines) and lines[k].rstrip() != ind + '}':
        k += 1
    return min(k, len(lines) - 1)


def functions(lines, skipped):
    """(first line, signature's last line, closing line, name) of every function with a
    body whose `fn` line is not in `skipped`, in order; indexes from 0."""
    i = 0
    while i < len(lines):
        m = FN_RE.match(lines[i]) if i not in skipped else None
        if not m:
            i += 1
            continue
        j = i
        # The end of the signature: a `{` opens the body, a `;` ends a declaration.
        while j < len(lines) and not lines[j].rstrip().endswith(('{', ';', '}')):
            j += 1
        if j == len(lines) or lines[j].rstrip().endswith(';'):
            i = j + 1
            continue
        # `fn f() {}`: the body closes on its opening line.
        k = j if lines[j].rstrip().endswith('}') else closing(lines, j, m.group(1))
        yield i, j, k, m.group(9)
        i = k + 1
