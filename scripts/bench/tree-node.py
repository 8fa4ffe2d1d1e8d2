#!/usr/bin/env python3
"""Prints the first block of one node of the file tree in force on an extalloc image, for
damage experiments (docs/results.md, "fsck --repair of a lost file tree node").

    scripts/bench/tree-node.py IMAGE [--level root|internal|leaf|newest] [--at 0.5]

The tree in force is found as a repair's scan would: every block that starts with a
node's magic and names its own block is read (the image's holes skipped), the root is the
highest internal node of the newest generation, and the tree is walked from it through the
children each node names (their block and generation). `--level internal` picks among
the internal nodes under the root, `leaf` among the leaves, `root` the root; `--at` says
where in key order (0: the first, 0.5: the middle). `--level newest` prints every node of
the tree carrying the root's generation, one per line, the root first: the path the last
checkpoint wrote (which one failing region near it can take whole). How many nodes of the
kind there are goes to stderr. Reads only; node layout in docs/format.md ("The file tree")."""
import argparse
import os
import struct
import sys

BS = 4096
MAGIC = b"XVBN"


def nodes_of(path):
    """Block -> (level, generation, children count, bytes) of every node naming its own
    block, reading only the image's data (SEEK_DATA / SEEK_HOLE)."""
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    nodes = {}
    off = 0
    while off < size:
        try:
            data = os.lseek(fd, off, os.SEEK_DATA)
        except OSError:
            break
        hole = os.lseek(fd, data, os.SEEK_HOLE)
        pos = data - data % BS
        while pos < hole:
            n = min(hole - pos, 64 << 20)
            buf = os.pread(fd, n, pos)
            i = buf.find(MAGIC)
            while i != -1:
                if i % BS == 0:
                    b = buf[i:i + BS]
                    count, = struct.unpack_from("<I", b, 8)
                    gen, blk = struct.unpack_from("<QQ", b, 16)
                    if blk * BS == pos + i:
                        nodes[blk] = (b[4], gen, count, b)
                i = buf.find(MAGIC, i + 1)
            pos += n
        off = hole
    os.close(fd)
    return nodes


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("image")
    ap.add_argument("--level", choices=["root", "internal", "leaf", "newest"], default="internal")
    ap.add_argument("--at", type=float, default=0.5)
    a = ap.parse_args()
    nodes = nodes_of(a.image)
    # The newest checkpoint writes the root and the changed nodes under it: the root is its
    # highest node.
    internal = [(v[1], v[0], k) for k, v in nodes.items() if v[0] > 0]
    if not internal:
        sys.exit(f"{a.image}: no internal node: the tree is one leaf")
    gen, _, root = max(internal)
    picked = {"root": [root], "internal": [], "leaf": [], "newest": [root]}
    stack = [(root, gen, True)]
    while stack:
        blk, want, top = stack.pop()
        v = nodes.get(blk)
        if v is None or v[1] != want:
            continue  # not this tree's (an older copy at that block)
        level, _, count, b = v
        if not top and want == gen:
            picked["newest"].append(blk)
        if level == 0:
            picked["leaf"].append(blk)
            continue
        if not top:
            picked["internal"].append(blk)
        children = [struct.unpack_from("<QQQ", b, 64 + 24 * c) for c in range(count)]
        for _first, child, word in reversed(children):
            stack.append((child, word & ((1 << 56) - 1), False))
    chosen = picked[a.level]
    print(f"{a.image}: root at block {root} (generation {gen}), {len(picked['internal'])} "
          f"internal nodes under it, {len(picked['leaf'])} leaves", file=sys.stderr)
    if a.level == "newest":
        print(f"{len(chosen)} nodes of generation {gen}", file=sys.stderr)
        print("\n".join(str(b) for b in chosen))
        return
    if not chosen:
        sys.exit(f"{a.image}: no {a.level} node (a tree of two levels has no internal node under its root)")
    print(chosen[min(int(len(chosen) * a.at), len(chosen) - 1)])


if __name__ == "__main__":
    main()
