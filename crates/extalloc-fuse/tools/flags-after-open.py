#!/usr/bin/env python3
"""chattr +i and +a on files already open for writing, as ext4 answers them.

    flags-after-open.py MOUNTPOINT

A file written (part fsync'd, part still in the kernel's cache) and then made immutable:
fstat through the open handle works, a write through it fails with EPERM (also after
another process's stat refreshed the attributes), fsync succeeds (the cached data and its
times are written back, not refused), a read-only open reads it, and after chattr -i the
file holds exactly the bytes written before the flag. A file made append-only: a write
through a handle opened without O_APPEND fails with EPERM, one through an O_APPEND handle
is appended. Exits 1 with the first difference."""
import errno
import os
import subprocess
import sys


def expect_errno(call, want, what):
    try:
        call()
    except OSError as e:
        if e.errno != want:
            sys.exit(f"flags-after-open: {what}: {errno.errorcode[e.errno]}, "
                     f"want {errno.errorcode[want]}")
        return
    sys.exit(f"flags-after-open: {what}: accepted, want {errno.errorcode[want]}")


def immutable(mnt):
    p = os.path.join(mnt, "immutable")
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"a" * 5000)
    os.fsync(fd)
    os.write(fd, b"b" * 3000)  # cached, not yet written back
    subprocess.run(["chattr", "+i", p], check=True)
    assert os.fstat(fd).st_size == 8000, "fstat through the open handle"
    expect_errno(lambda: os.write(fd, b"c" * 100), errno.EPERM, "write after chattr +i")
    os.stat(p)  # another path's stat: the kernel's attributes fresh again
    expect_errno(lambda: os.write(fd, b"d" * 100), errno.EPERM, "write after a stat")
    os.fsync(fd)  # the cached bytes and their times: never refused
    rfd = os.open(p, os.O_RDONLY)
    assert os.read(rfd, 10000) == b"a" * 5000 + b"b" * 3000, "content under +i"
    os.close(rfd)
    os.close(fd)
    subprocess.run(["chattr", "-i", p], check=True)
    with open(p, "rb") as f:
        assert f.read() == b"a" * 5000 + b"b" * 3000, "content after chattr -i"


def append_only(mnt):
    p = os.path.join(mnt, "append-only")
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    afd = os.open(p, os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"a" * 100)
    subprocess.run(["chattr", "+a", p], check=True)
    expect_errno(lambda: os.write(fd, b"x" * 10), errno.EPERM, "plain write after chattr +a")
    assert os.write(afd, b"y" * 10) == 10, "O_APPEND write after chattr +a"
    os.fsync(afd)
    os.close(fd)
    os.close(afd)
    subprocess.run(["chattr", "-a", p], check=True)
    with open(p, "rb") as f:
        assert f.read() == b"a" * 100 + b"y" * 10, "content after chattr -a"


if __name__ == "__main__":
    immutable(sys.argv[1])
    append_only(sys.argv[1])
    print("flags-after-open: +i and +a refuse writes through handles opened before them; "
          "fsync, fstat and the data written before are kept")
