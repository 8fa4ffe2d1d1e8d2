#!/usr/bin/env python3
"""Makes NFILES empty files round-robin in NDIRS new directories d0..dN-1 under MNT, named
by 64 hex digits (the sha256 of their number), as a content-addressed store names its
objects. Shared by walk-memory.sh and ls-memory.sh.

    python3 scripts/bench/make-tree.py MNT NFILES NDIRS
"""
import hashlib
import os
import sys

mnt, n, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(d):
    os.mkdir(f"{mnt}/d{i}")
for i in range(n):
    name = hashlib.sha256(str(i).encode()).hexdigest()
    os.close(os.open(f"{mnt}/d{i % d}/{name}", os.O_CREAT | os.O_WRONLY, 0o644))
