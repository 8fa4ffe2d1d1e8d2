#!/usr/bin/env python3
"""The daemon's memory with many handles open on one large directory (issue 50).

    sudo scripts/bench/dir-handles.py BIN [--files 200000] [--handles 20,200] [--size 2GiB]

Makes a sparse image under /var/tmp/dir-handles (DIR_HANDLES_DIR to change it), `BIN mkfs`,
`BIN mount`, NFILES empty files in one directory, `sync`; then for each count K in
`--handles`: opens the directory K times (each handle read once with `getdents64`, as `ls`
starts), prints the daemon's resident memory before and with the handles open, closes
them. Any user who can read a directory can open it this way, so what a handle costs the
daemon is what another user can make it hold. One line per count:

    handles=K files=N rss_before=A MiB rss_open=B MiB per_handle=C KiB

Needs root (mount), /dev/fuse.
"""
import argparse
import ctypes
import os
import shutil
import subprocess
import sys
import time

SYS_GETDENTS64 = 217  # x86_64


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    raise SystemExit(f"dir-handles.py: no VmRSS for process {pid}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bin")
    ap.add_argument("--files", type=int, default=200_000)
    ap.add_argument("--handles", default="20,200")
    ap.add_argument("--size", default="2GiB")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("dir-handles.py: needs root (mount)")
    work = os.environ.get("DIR_HANDLES_DIR", "/var/tmp/dir-handles")
    shutil.rmtree(work, ignore_errors=True)
    mnt, img = os.path.join(work, "mnt"), os.path.join(work, "img")
    os.makedirs(mnt)
    subprocess.run([a.bin, "mkfs", img, "--size", a.size], check=True, capture_output=True)
    out = subprocess.run([a.bin, "mount", img, mnt], check=True, capture_output=True, text=True)
    pid = int(out.stdout.split("(process ")[1].split(")")[0])
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(4096)
    try:
        d = os.path.join(mnt, "big")
        os.mkdir(d)
        for i in range(a.files):
            os.close(os.open(f"{d}/file-{i:08d}", os.O_CREAT | os.O_WRONLY, 0o644))
        os.sync()
        for k in (int(x) for x in a.handles.split(",")):
            time.sleep(1)
            before = rss_mib(pid)
            fds = []
            for _ in range(k):
                fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
                fds.append(fd)
                if libc.syscall(SYS_GETDENTS64, fd, buf, len(buf)) < 0:
                    sys.exit(f"dir-handles.py: getdents64: {os.strerror(ctypes.get_errno())}")
            time.sleep(0.5)
            held = rss_mib(pid)
            for fd in fds:
                os.close(fd)
            per = (held - before) * 1024 / k
            print(f"handles={k} files={a.files} rss_before={before:.0f} MiB "
                  f"rss_open={held:.0f} MiB per_handle={per:.0f} KiB", flush=True)
    finally:
        subprocess.run([a.bin, "umount", mnt], capture_output=True)


if __name__ == "__main__":
    main()
