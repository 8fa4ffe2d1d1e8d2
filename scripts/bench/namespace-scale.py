#!/usr/bin/env python3
"""Many empty files through a mount, beside ext4 (issue 50's figures).

    sudo scripts/bench/namespace-scale.py [--files 100k,1M] [--dirs 1000] [--fs ext4,extalloc]
                                    [--size 64GiB] [--evict-first] [--crash] [--json PATH]

For each file system and file count, on a fresh sparse image (in $TMPDIR, else /var/tmp)
attached to a loop device, so that both file systems' writes are counted the same way
(the loop device's sectors written, /sys/block/loopN/stat):

- creates N empty files spread over D directories (one thread; `open(O_CREAT)` + `close`),
  and reports the rate over the first and the last tenth;
- extalloc: the daemon's resident memory (VmRSS, VmHWM) once the files are made;
- `sync MOUNTPOINT` (an fsync of its root), 6 s (a background commit), `sync MOUNTPOINT`
  again, then one `touch` of a new file + `sync MOUNTPOINT`: the KiB that pair wrote;
- with --evict-first, the seconds of `echo 2 > /proc/sys/vm/drop_caches` before the
  unmount (the kernel lets go of the dentries and inodes the creates left cached, and
  sends a FUSE daemon its forgets), so that the unmount's seconds are its own work;
- the unmount's seconds, the mount's seconds (and the daemon's CPU seconds and resident
  memory right after it), one lookup that must find a file made first;
- with --crash (extalloc only): a mount, a file opened and unlinked while open, `sync`,
  then `kill -9` of the daemon; the mount after that crash (the orphan is a pending file
  the volume's open removes, so under the store's promise the mount reads only the root;
  a device last mounted by a build before it is counted whole): its seconds, the
  daemon's CPU seconds and its peak memory;
- the check's seconds and peak memory (`extalloc fsck`, `e2fsck -fn`).

One line per run on stdout as it ends, progress on stderr, a Markdown table at the end;
`--json PATH` writes every figure. Needs root, losetup, mkfs.ext4, e2fsck and
target/release/extalloc (or $EXTALLOC); exits non-zero if any step failed.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

EXTALLOC = os.environ.get("EXTALLOC", "target/release/extalloc")


def count(text):
    """'100k' / '1M' / '2500' -> int."""
    t = text.strip().lower()
    mult = {"k": 1000, "m": 1000_000}.get(t[-1:], 1)
    return int(float(t[:-1] if mult > 1 else t) * mult)


def run(cmd, **kw):
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def loop_written_kib(loop):
    """KiB the loop device has written (field 7 of its stat: 512-byte sectors)."""
    name = os.path.basename(loop)
    with open(f"/sys/block/{name}/stat") as f:
        return int(f.read().split()[6]) / 2


def daemon_pid(mnt):
    """The extalloc daemon serving `mnt`: the `mount --foreground` process whose command
    line names the mount point, whatever the binary is called (EXTALLOC may name a copy)."""
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if b"mount" in args and b"--foreground" in args and mnt.encode() in args:
            return int(p)
    raise RuntimeError(f"no extalloc daemon serves {mnt}")


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def cpu_s(pid):
    """User + system seconds of `pid` (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_child(cmd):
    """Runs `cmd`; returns (seconds, peak resident KiB of the child, exit code)."""
    t = time.monotonic()
    with tempfile.TemporaryFile("w+") as out:
        child = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        secs = time.monotonic() - t
        out.seek(0)
        return secs, usage.ru_maxrss, child.returncode, out.read()


class Target:
    """One file system on a loop device over a sparse image."""

    def __init__(self, fs, size, work, inodes=0):
        self.fs, self.work = fs, work
        self.img = os.path.join(work, f"{fs}.img")
        self.mnt = os.path.join(work, f"{fs}.mnt")
        os.makedirs(self.mnt, exist_ok=True)
        with open(self.img, "wb") as f:
            f.truncate(size)
        self.loop = run(["losetup", "--find", "--show", self.img]).strip()
        if fs == "ext4":
            # Room for every file: mkfs.ext4's default (an inode per 16 KiB) gives 4M on
            # 64 GiB, and 10M files would stop at ENOSPC.
            more = ["-N", str(inodes)] if inodes > size // 16384 else []
            run(["mkfs.ext4", "-q", "-F", *more, self.loop])
        else:
            run([EXTALLOC, "mkfs", self.loop])

    def mount(self):
        t = time.monotonic()
        if self.fs == "ext4":
            run(["mount", self.loop, self.mnt])
        else:
            run([EXTALLOC, "mount", self.loop, self.mnt])
        return time.monotonic() - t

    def umount(self):
        t = time.monotonic()
        if self.fs == "ext4":
            run(["umount", self.mnt])
        else:
            run([EXTALLOC, "umount", self.mnt])
        return time.monotonic() - t

    def check(self):
        cmd = ["e2fsck", "-fn", self.loop] if self.fs == "ext4" else [EXTALLOC, "fsck", self.loop]
        secs, peak, rc, out = timed_child(cmd)
        if rc != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {rc}: {out.strip()[-400:]}")
        return secs, peak

    def close(self):
        if os.path.ismount(self.mnt):
            subprocess.run(["umount", "-l", self.mnt], capture_output=True)
            time.sleep(1)
        subprocess.run(["losetup", "-d", self.loop], capture_output=True)
        os.unlink(self.img)


def make_files(mnt, n, dirs, label):
    """Creates n empty files over `dirs` directories; returns (all, first tenth, last
    tenth) in files per second."""
    for d in range(dirs):
        os.mkdir(os.path.join(mnt, f"d{d}"))
    tenth = max(n // 10, 1)
    marks = []
    t0 = time.monotonic()
    flags = os.O_CREAT | os.O_WRONLY | os.O_EXCL
    for i in range(n):
        if i % tenth == 0:
            marks.append(time.monotonic())
            if i:
                print(f"  {label}: {i:,} files, {tenth / (marks[-1] - marks[-2]):,.0f}/s",
                      file=sys.stderr, flush=True)
        os.close(os.open(os.path.join(mnt, f"d{i % dirs}", f"f{i}"), flags, 0o644))
    end = time.monotonic()
    marks.append(end)
    first = tenth / (marks[1] - marks[0])
    last = (n - tenth * (len(marks) - 2)) / (marks[-1] - marks[-2])
    return n / (end - t0), first, last


def evict():
    """Seconds the kernel takes to drop every unused dentry and inode it caches."""
    t = time.monotonic()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")
    return time.monotonic() - t


def crash_and_mount(t, r):
    """Leaves an orphan, kills the daemon, and times the mount after the crash."""
    t.mount()
    held = os.path.join(t.mnt, "d0", "held")
    fd = os.open(held, os.O_CREAT | os.O_WRONLY, 0o644)
    os.unlink(held)
    run(["sync", t.mnt])
    pid = daemon_pid(t.mnt)
    os.kill(pid, signal.SIGKILL)
    while os.path.exists(f"/proc/{pid}"):
        time.sleep(0.05)
    try:
        os.close(fd)
    except OSError:
        pass
    subprocess.run(["umount", "-l", t.mnt], capture_output=True)
    r["crash_mount_s"] = t.mount()
    pid = daemon_pid(t.mnt)
    r["crash_mount_cpu_s"] = cpu_s(pid)
    r["crash_mount_peak_mib"] = status_kib(pid, "VmHWM") / 1024
    os.stat(os.path.join(t.mnt, "d0", "f0"))
    t.umount()


def one(fs, n, dirs, size, work, evict_first=False, crash=False):
    label = f"{fs} {n:,}"
    t = Target(fs, size, work, inodes=n + dirs + 4096)
    r = {"fs": fs, "files": n, "dirs": dirs}
    try:
        t.mount()
        r["create_per_s"], r["create_first_tenth_per_s"], r["create_last_tenth_per_s"] = \
            make_files(t.mnt, n, dirs, label)
        if fs == "extalloc":
            pid = daemon_pid(t.mnt)
            r["daemon_rss_mib"] = status_kib(pid, "VmRSS") / 1024
            r["daemon_hwm_mib"] = status_kib(pid, "VmHWM") / 1024
        # Settle what the creates left (a commit, and any checkpoint it starts; the
        # background commit runs every 5 s), so the pair below writes only its own.
        run(["sync", t.mnt])
        time.sleep(6)
        run(["sync", t.mnt])
        before = loop_written_kib(t.loop)
        open(os.path.join(t.mnt, "d0", "touched"), "w").close()
        s = time.monotonic()
        run(["sync", t.mnt])
        r["touch_sync_s"] = time.monotonic() - s
        r["touch_sync_kib"] = loop_written_kib(t.loop) - before
        if evict_first:
            r["evict_s"] = evict()
        r["umount_s"] = t.umount()
        r["mount_s"] = t.mount()
        if fs == "extalloc":
            pid = daemon_pid(t.mnt)
            r["mount_cpu_s"] = cpu_s(pid)
            r["mounted_rss_mib"] = status_kib(pid, "VmRSS") / 1024
        os.stat(os.path.join(t.mnt, "d0", "f0"))
        r["umount2_s"] = t.umount()
        if crash and fs == "extalloc":
            crash_and_mount(t, r)
        r["fsck_s"], peak = t.check()
        r["fsck_peak_mib"] = peak / 1024
        r["ok"] = True
    except (RuntimeError, OSError) as e:
        r["ok"], r["error"] = False, str(e)
        print(f"  {label}: failed: {e}", file=sys.stderr, flush=True)
    finally:
        t.close()
    return r


COLUMNS = [
    ("fs", "fs", "{}"), ("files", "files", "{:,}"),
    ("create_per_s", "creates/s", "{:,.0f}"),
    ("create_first_tenth_per_s", "first tenth /s", "{:,.0f}"),
    ("create_last_tenth_per_s", "last tenth /s", "{:,.0f}"),
    ("daemon_hwm_mib", "daemon peak MiB", "{:,.0f}"),
    ("touch_sync_kib", "touch+sync KiB", "{:,.0f}"),
    ("evict_s", "evict s", "{:.2f}"),
    ("umount_s", "umount s", "{:.2f}"), ("mount_s", "mount s", "{:.2f}"),
    ("mount_cpu_s", "mount CPU s", "{:.2f}"), ("mounted_rss_mib", "RSS after mount MiB", "{:,.0f}"),
    ("crash_mount_s", "mount after crash s", "{:.2f}"),
    ("crash_mount_cpu_s", "its CPU s", "{:.2f}"), ("crash_mount_peak_mib", "its peak MiB", "{:,.0f}"),
    ("fsck_s", "fsck s", "{:.1f}"), ("fsck_peak_mib", "fsck peak MiB", "{:,.0f}"),
]


def cell(r, key, fmt):
    v = r.get(key)
    return "" if v is None else fmt.format(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", default="100k,1M")
    ap.add_argument("--dirs", type=int, default=1000)
    ap.add_argument("--fs", default="ext4,extalloc")
    ap.add_argument("--size", default="64GiB")
    ap.add_argument("--evict-first", action="store_true",
                    help="time the kernel's eviction of cached dentries and inodes apart, before the unmount")
    ap.add_argument("--crash", action="store_true",
                    help="extalloc: also time a mount after kill -9 of the daemon, with an orphan to remove")
    ap.add_argument("--json")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("namespace-scale.py: needs root (loop devices, mounts)")
    if not os.access(EXTALLOC, os.X_OK):
        sys.exit(f"namespace-scale.py: no {EXTALLOC}: cargo build --release -p extalloc-cli")
    units = {"gib": 1 << 30, "mib": 1 << 20, "tib": 1 << 40}
    sz = a.size.lower()
    size = int(sz[:-3]) * units[sz[-3:]] if sz[-3:] in units else int(sz)
    base = os.environ.get("TMPDIR", "/var/tmp")
    rows = []
    with tempfile.TemporaryDirectory(prefix="extalloc-ns.", dir=base) as work:
        for n in [count(x) for x in a.files.split(",")]:
            for fs in a.fs.split(","):
                r = one(fs, n, a.dirs, size, work, a.evict_first, a.crash)
                rows.append(r)
                print(json.dumps(r), flush=True)
    print("\n| " + " | ".join(h for _, h, _ in COLUMNS) + " |")
    print("|" + "|".join("---" if k == "fs" else "---:" for k, _, _ in COLUMNS) + "|")
    for r in rows:
        print("| " + " | ".join(cell(r, k, f) for k, _, f in COLUMNS) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    sys.exit(0 if all(r["ok"] for r in rows) else 1)


if __name__ == "__main__":
    main()
