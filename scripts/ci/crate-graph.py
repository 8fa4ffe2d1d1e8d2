#!/usr/bin/env python3
"""The crate diagram of docs/architecture.md against `cargo metadata`: the check behind
"the diagram is true".

Usage: scripts/ci/crate-graph.py              (from the repository's root)
       scripts/ci/crate-graph.py --self-test

Reads the first ```text block after the line that starts "The crates' arrows" and takes its
arrows: a line that starts with crate names (`a, b --> c`) makes each of them depend on what
follows its first arrow; an indented line (`|--> x --> y, z`, `+--> x`) makes the last such
crate depend on `x`, and `x` on `y` and `z`. Parenthesised remarks are not names. The
dependencies are the workspace's and fuzz/'s (a workspace of its own) normal and build
dependencies on each other, optional ones included, dev-dependencies left out (the
library's tests depend on the library itself). Prints each arrow the diagram lacks and each
it draws that cargo does not know; the exit status is 1 when there is either, 2 on a usage
error."""
import json
import re
import subprocess
import sys

NAME = re.compile(r"^(extalloc[\w-]*|fuzz/)$")


def arrows(text):
    """The (from, to) pairs a diagram block draws."""
    edges, top = set(), None
    for line in text.splitlines():
        line = re.sub(r"\([^()]*\)", "", line)
        parts = [p.strip(" |+-") for p in line.split("-->")]
        lists = [[n.strip() for n in p.split(",") if n.strip()] for p in parts]
        if not lists or not any(lists):
            continue
        if lists[0]:
            if not all(NAME.match(n) for n in lists[0]):
                continue
            sources = lists[0]
            top = sources[0] if len(sources) == 1 else None
        else:
            if top is None:
                raise ValueError(f"an indented arrow with no crate above it: {line!r}")
            sources = [top]
        for targets in lists[1:]:
            edges |= {(s, t) for s in sources for t in targets if NAME.match(t)}
            sources = targets
    return edges


def diagram(path="docs/architecture.md"):
    text = open(path, encoding="utf-8").read()
    at = text.index("\nThe crates' arrows")
    start = text.index("```text\n", at) + len("```text\n")
    return arrows(text[start:text.index("```", start)])


def metadata(manifest, rename=None):
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps", "--manifest-path", manifest],
        check=True, capture_output=True, text=True).stdout
    packages = json.loads(out)["packages"]
    names = {p["name"] for p in packages}
    edges = set()
    for p in packages:
        for d in p["dependencies"]:
            if d["kind"] == "dev" or d["name"] == p["name"]:
                continue
            if d["name"].startswith("extalloc") and (d["name"] in names or rename):
                edges.add(((rename or {}).get(p["name"], p["name"]), d["name"]))
    return edges


def self_test():
    drawn = arrows(""" a-cli (the binary)
   |--> extalloc-lab (optional) --> extalloc-fuse, extalloc
   +--> extalloc-fuse (mount), extalloc
 extalloc-fuse, extalloc-capi --> extalloc
 fuzz/ (its own) --> extalloc (feature), extalloc-lab
""".replace("a-cli", "extalloc-cli"))
    want = {("extalloc-cli", "extalloc-lab"), ("extalloc-lab", "extalloc-fuse"),
            ("extalloc-lab", "extalloc"), ("extalloc-cli", "extalloc-fuse"),
            ("extalloc-cli", "extalloc"), ("extalloc-fuse", "extalloc"),
            ("extalloc-capi", "extalloc"), ("fuzz/", "extalloc"), ("fuzz/", "extalloc-lab")}
    assert drawn == want, sorted(drawn ^ want)
    print("crate-graph self-test: ok")


def main(argv):
    if argv == ["--self-test"]:
        self_test()
        return 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    drawn = diagram()
    real = metadata("Cargo.toml") | metadata("fuzz/Cargo.toml", {"extalloc-fuzz": "fuzz/"})
    for a, b in sorted(real - drawn):
        print(f"docs/architecture.md lacks {a} --> {b} (cargo metadata has it)")
    for a, b in sorted(drawn - real):
        print(f"docs/architecture.md draws {a} --> {b}, which cargo metadata does not have")
    print(f"crate-graph: {len(real)} dependencies, {len(real ^ drawn)} differences")
    return 1 if real != drawn else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
