#!/usr/bin/env python3
"""One large directory, beside ext4: lookup, readdir and unlink per entry (issue 50).

    sudo scripts/bench/bigdir.py [--files 10k,1M] [--fs ext4,extalloc] [--lookups 10000]
                           [--size 16GiB] [--json PATH]

For each file system and entry count, on a fresh sparse image (in $TMPDIR, else /var/tmp)
attached to a loop device:

1. creates N empty files in one directory (`open(O_CREAT)` + `close`);
2. unmounts and mounts again (cold caches on both sides), then `stat`s one name (the
   first lookup: extalloc reads the directory back here), then `--lookups` random
   names (each reads its inode: CPU per lookup), then as many names that do not exist
   (the directory's index alone: CPU per missing name);
3. unmounts and mounts again, then lists the directory with `ls -f` (getdents only, no
   stat per name): CPU per entry;
4. unmounts and mounts again, then removes every entry with `find DIR -mindepth 1
   -delete` (one unlinkat per name): CPU per entry.

CPU is the caller's (this process's rusage for the lookups, the child's for `ls` and
`find`: the kernel's work on ext4 runs there) plus, for extalloc, the daemon's (user +
system of every thread, /proc/PID/stat), so a loaded machine still gives a verdict; wall
seconds are printed beside it. "Lookup flat in the directory size" reads as CPU per missing
name at 1M against 10k (a found name also reads its inode, which is colder in a larger
directory on either file system). One JSON line per run on stdout, progress on stderr, a Markdown table
at the end; `--json PATH` writes every figure. Needs root, losetup, mkfs.ext4 and
target/release/extalloc (or $EXTALLOC).
"""
import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

EXTALLOC = os.environ.get("EXTALLOC", "target/release/extalloc")
TICK = os.sysconf("SC_CLK_TCK")


def count(text):
    t = text.lower()
    mult = {"k": 1_000, "m": 1_000_000}.get(t[-1], 1)
    return int(float(t.rstrip("km")) * mult)


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def daemon_pid(mnt):
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if b"mount" in args and mnt.encode() in args and os.path.basename(args[0]) == b"extalloc":
            return int(p)
    raise RuntimeError(f"no extalloc daemon serves {mnt}")


def daemon_cpu(pid):
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def self_cpu():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def child_cpu(cmd):
    """Runs `cmd` (stdout discarded); returns (wall s, the child's CPU s)."""
    t = time.monotonic()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {child.stderr.read().decode()[-300:]}")
    return time.monotonic() - t, usage.ru_utime + usage.ru_stime


class Target:
    def __init__(self, fs, size, work):
        self.fs = fs
        self.img = os.path.join(work, f"{fs}.img")
        self.mnt = os.path.join(work, f"{fs}.mnt")
        os.makedirs(self.mnt, exist_ok=True)
        with open(self.img, "wb") as f:
            f.truncate(size)
        self.loop = run(["losetup", "--find", "--show", self.img]).strip()
        run(["mkfs.ext4", "-q", "-F", self.loop] if fs == "ext4" else [EXTALLOC, "mkfs", self.loop])
        self.pid = None

    def mount(self):
        if self.fs == "ext4":
            run(["mount", self.loop, self.mnt])
        else:
            run([EXTALLOC, "mount", self.loop, self.mnt])
            self.pid = daemon_pid(self.mnt)

    def umount(self):
        run(["umount", self.mnt] if self.fs == "ext4" else [EXTALLOC, "umount", self.mnt])
        self.pid = None

    def remount(self):
        self.umount()
        self.mount()

    def close(self):
        if os.path.ismount(self.mnt):
            subprocess.run(["umount", "-l", self.mnt], capture_output=True)
            time.sleep(1)
        subprocess.run(["losetup", "-d", self.loop], capture_output=True)
        os.unlink(self.img)


def one(fs, n, lookups, size, work):
    label = f"{fs} {n:,}"
    t = Target(fs, size, work)
    r = {"fs": fs, "entries": n}
    try:
        t.mount()
        d = os.path.join(t.mnt, "d")
        os.mkdir(d)
        start = time.monotonic()
        flags = os.O_CREAT | os.O_WRONLY | os.O_EXCL
        for i in range(n):
            os.close(os.open(os.path.join(d, f"f{i}"), flags, 0o644))
        r["create_per_s"] = n / (time.monotonic() - start)
        print(f"  {label}: made", file=sys.stderr, flush=True)

        t.remount()
        c0, d0, w0 = self_cpu(), daemon_cpu(t.pid), time.monotonic()
        os.stat(os.path.join(d, "f0"))
        r["first_lookup_s"] = time.monotonic() - w0
        r["first_lookup_cpu_s"] = self_cpu() - c0 + daemon_cpu(t.pid) - d0
        names = [f"f{random.randrange(n)}" for _ in range(lookups)]
        c0, d0, w0 = self_cpu(), daemon_cpu(t.pid), time.monotonic()
        for name in names:
            os.stat(os.path.join(d, name))
        wall = time.monotonic() - w0
        r["lookup_us"] = 1e6 * wall / lookups
        r["lookup_cpu_us"] = 1e6 * (self_cpu() - c0 + daemon_cpu(t.pid) - d0) / lookups
        # Names that do not exist, each once: the directory's index alone, no inode read.
        missing = [os.path.join(d, f"none{i}") for i in range(lookups)]
        c0, d0, w0 = self_cpu(), daemon_cpu(t.pid), time.monotonic()
        for path in missing:
            try:
                os.stat(path)
                raise RuntimeError(f"{path} exists")
            except FileNotFoundError:
                pass
        wall = time.monotonic() - w0
        r["miss_us"] = 1e6 * wall / lookups
        r["miss_cpu_us"] = 1e6 * (self_cpu() - c0 + daemon_cpu(t.pid) - d0) / lookups

        for step, cmd in (("readdir", ["ls", "-f", d]), ("unlink", ["find", d, "-mindepth", "1", "-delete"])):
            t.remount()
            d0 = daemon_cpu(t.pid)
            wall, cpu = child_cpu(cmd)
            r[f"{step}_us"] = 1e6 * wall / n
            r[f"{step}_cpu_us"] = 1e6 * (cpu + daemon_cpu(t.pid) - d0) / n
            print(f"  {label}: {step} {wall:.1f} s", file=sys.stderr, flush=True)
        if os.listdir(d):
            raise RuntimeError(f"{d} not empty after the removal")
        t.umount()
        r["ok"] = True
    except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
        r["ok"], r["error"] = False, str(e)
        print(f"  {label}: failed: {e}", file=sys.stderr, flush=True)
    finally:
        t.close()
    return r


COLUMNS = [
    ("fs", "fs", "{}"), ("entries", "entries", "{:,}"),
    ("create_per_s", "creates/s", "{:,.0f}"),
    ("first_lookup_s", "first lookup s", "{:.3f}"),
    ("lookup_cpu_us", "lookup CPU µs", "{:.1f}"), ("lookup_us", "lookup wall µs", "{:.1f}"),
    ("miss_cpu_us", "missing name CPU µs", "{:.1f}"), ("miss_us", "missing name wall µs", "{:.1f}"),
    ("readdir_cpu_us", "readdir CPU µs/entry", "{:.2f}"), ("readdir_us", "readdir wall µs/entry", "{:.2f}"),
    ("unlink_cpu_us", "unlink CPU µs/entry", "{:.1f}"), ("unlink_us", "unlink wall µs/entry", "{:.1f}"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", default="10k,1M")
    ap.add_argument("--fs", default="ext4,extalloc")
    ap.add_argument("--lookups", type=int, default=10_000)
    ap.add_argument("--size", default="16GiB")
    ap.add_argument("--json")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bigdir.py: needs root (loop devices, mounts)")
    if "extalloc" in a.fs and not os.access(EXTALLOC, os.X_OK):
        sys.exit(f"bigdir.py: no {EXTALLOC}: cargo build --release -p extalloc-cli")
    units = {"gib": 1 << 30, "mib": 1 << 20}
    sz = a.size.lower()
    size = int(sz[:-3]) * units[sz[-3:]] if sz[-3:] in units else int(sz)
    rows = []
    with tempfile.TemporaryDirectory(prefix="extalloc-bigdir.", dir=os.environ.get("TMPDIR", "/var/tmp")) as work:
        for n in [count(x) for x in a.files.split(",")]:
            for fs in a.fs.split(","):
                r = one(fs, n, a.lookups, size, work)
                rows.append(r)
                print(json.dumps(r), flush=True)
    print("\n| " + " | ".join(h for _, h, _ in COLUMNS) + " |")
    print("|" + "|".join("---" if k == "fs" else "---:" for k, _, _ in COLUMNS) + "|")
    for r in rows:
        print("| " + " | ".join("" if r.get(k) is None else f.format(r[k]) for k, _, f in COLUMNS) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    sys.exit(0 if all(r["ok"] for r in rows) else 1)


if __name__ == "__main__":
    main()
