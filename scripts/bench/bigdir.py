#!/usr/bin/env python3
"""One large directory, beside ext4: lookup, readdir and unlink per entry (issue 50).

    sudo scripts/bench/bigdir.py [--files 10k,1M] [--fs ext4,extalloc,floor] [--lookups 10000]
                           [--churn K] [--changes K] [--size 16GiB] [--json PATH]

File systems (`--fs`, default ext4,extalloc):
- `ext4`: the kernel's, on the image;
- `extalloc`: `$EXTALLOC mount` of the image (its default transport and threads);
- `floor`: the FUSE floor, no image: the in-memory libfuse file system of
  `compare-fs --fs floor` (scripts/bench/floor-memfs.c, built by
  scripts/bench/build-floor.sh, or $EXTALLOC_FLOOR), mounted as compare-fs mounts it:
  `floor-memfs MNT -f -s -o default_permissions,allow_other,fsname=floor,subtype=floor`
  with FUSE_URING_ENABLE=0 (libfuse's single-threaded loop on /dev/fuse; extalloc's mount
  options, the same requests per create, stat and unlink as extalloc: docs/results.md
  "FUSE floor"). It shows what any FUSE daemon pays per entry on this kernel. It keeps
  nothing across an unmount, so each "unmounts and mounts again" below is, for the floor,
  `sync; echo 2 > /proc/sys/vm/drop_caches` instead (the kernel evicts its dentries and
  inodes and sends their FORGETs; this waits until the daemon's CPU time stops moving,
  so those are not counted in the next step): the kernel side is cold, as on the other
  two, but the floor's daemon stays warm (its tables are in memory, as they always are).

For each file system and entry count, on a fresh sparse image (in $TMPDIR, else /var/tmp)
attached to a loop device (the floor: a fresh mount of an empty floor):

1. creates N empty files in one directory (`open(O_CREAT)` + `close`), then, with
   `--churn K`, makes and removes K more names one after the other (a directory that
   has seen changes: extalloc's log then holds removes, and past four times its live
   entries it is compacted, into a run on builds that write them: docs/format.md,
   "Directory runs");
2. unmounts and mounts again (cold caches on both sides), then `stat`s one name (the
   first lookup: extalloc reads the directory back here), then `--lookups` random
   names (each reads its inode: CPU per lookup), then as many names that do not exist
   (the directory's index alone: CPU per missing name), then the daemon's resident
   memory (VmRSS); then `--changes` random names unlinked and the same names made again
   (changes in a directory not listed since the mount: extalloc writes them through its
   run's view where it has one, docs/format.md), CPU per unlink and per create, and the
   daemon's resident memory again;
3. unmounts and mounts again, then lists the directory with `ls -f` (getdents only, no
   stat per name): CPU per entry;
4. unmounts and mounts again, then removes every entry with `find DIR -mindepth 1
   -delete` (one unlinkat per name, and an fstatat before it where readdir gave the
   type as unknown, as extalloc's did after a mount before its directory adds carried
   kinds, and still does for entries an older build made): CPU per entry. The daemon's
   resident memory is read after the listing and after the removal too.

CPU is the caller's (this process's rusage for the lookups, the child's for `ls` and
`find`: the kernel's work on ext4 runs there) plus, for extalloc and the floor, the
daemon's (user + system of every thread, /proc/PID/stat), so a loaded machine still gives
a verdict on ext4 (for FUSE, below); wall seconds are printed beside it. "Lookup flat in
the directory size" reads as CPU per missing name at 1M against 10k (a found name also
reads its inode, which is colder in a larger directory on either file system). A FUSE
figure depends on where the scheduler puts the caller and the daemon: on a 2-CPU guest
the floor's unlink took 17 µs of CPU with both pinned to one CPU and 166 µs pinned to two
(each round trip then wakes an idle CPU), 76 unpinned and idle, 21 beside a build; so an
idle machine can read worse than a busy one: read FUSE rows against the floor's row of
the same run, with the load beside them. `taskset -c 0 scripts/bench/bigdir.py ...` puts
the caller and the daemon (which inherits the affinity) on one CPU: the steadiest figure
for comparing two builds (name each binary `extalloc`: the daemon is found by that name).
One JSON line per run on stdout, progress on
stderr, a Markdown table at the end; `--json PATH` writes every figure. Needs root,
losetup, mkfs.ext4 and target/release/extalloc (or $EXTALLOC); the floor needs libfuse's
source for build-floor.sh (or $EXTALLOC_FLOOR).
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
FLOOR_OPTIONS = "default_permissions,allow_other,fsname=floor,subtype=floor"  # compare-fs's


def floor_binary():
    """The floor: $EXTALLOC_FLOOR, else what scripts/bench/build-floor.sh builds (its last line)."""
    if os.environ.get("EXTALLOC_FLOOR"):
        return os.environ["EXTALLOC_FLOOR"]
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "build-floor.sh")
    out = subprocess.run([script], check=True, stdout=subprocess.PIPE, text=True).stdout
    return out.strip().splitlines()[-1]


def is_fuse_mount(path):
    """Whether `path` is a FUSE mount (/proc/self/mountinfo: fuse type, or fuse.SUBTYPE)."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            if left.split()[4] == path and right.split()[0].split(".")[0] == "fuse":
                return True
    return False


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
    def __init__(self, fs, size, work, floor=None):
        self.fs = fs
        self.img = os.path.join(work, f"{fs}.img")
        self.mnt = os.path.join(work, f"{fs}.mnt")
        os.makedirs(self.mnt, exist_ok=True)
        self.pid = None
        self.floor, self.child, self.loop = floor, None, None
        if fs == "floor":
            return  # no storage
        with open(self.img, "wb") as f:
            f.truncate(size)
        self.loop = run(["losetup", "--find", "--show", self.img]).strip()
        run(["mkfs.ext4", "-q", "-F", self.loop] if fs == "ext4" else [EXTALLOC, "mkfs", self.loop])

    def mount(self):
        if self.fs == "ext4":
            run(["mount", self.loop, self.mnt])
        elif self.fs == "floor":
            self.log = open(os.path.join(os.path.dirname(self.mnt), "floor.log"), "w+")
            env = dict(os.environ, FUSE_URING_ENABLE="0")
            self.child = subprocess.Popen([self.floor, self.mnt, "-f", "-s", "-o", FLOOR_OPTIONS],
                                          stdin=subprocess.DEVNULL, stdout=self.log,
                                          stderr=subprocess.STDOUT, env=env)
            deadline = time.monotonic() + 30
            while not is_fuse_mount(self.mnt):
                if self.child.poll() is not None or time.monotonic() > deadline:
                    self.log.seek(0)
                    raise RuntimeError(f"the floor did not mount: {self.log.read()[-300:]}")
                time.sleep(0.05)
            self.pid = self.child.pid
        else:
            run([EXTALLOC, "mount", self.loop, self.mnt])
            self.pid = daemon_pid(self.mnt)

    def umount(self):
        if self.fs == "floor":
            run(["umount", self.mnt])
            self.child.wait(timeout=60)
            self.child = None
            self.log.close()
            os.unlink(self.log.name)
        else:
            run(["umount", self.mnt] if self.fs == "ext4" else [EXTALLOC, "umount", self.mnt])
        self.pid = None

    def remount(self):
        """Cold caches: unmount and mount again; on the floor (which would lose its files),
        drop the kernel's dentries and inodes instead, then wait until the daemon has
        answered the FORGETs (its CPU time still for half a second)."""
        if self.fs != "floor":
            self.umount()
            self.mount()
            return
        run(["sync"])
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2")
        last = daemon_cpu(self.pid)
        while True:
            time.sleep(0.5)
            now = daemon_cpu(self.pid)
            if now == last:
                break
            last = now

    def close(self):
        if os.path.ismount(self.mnt):
            subprocess.run(["umount", "-l", self.mnt], capture_output=True)
            time.sleep(1)
        if self.child is not None:
            try:
                self.child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.child.kill()
                self.child.wait()
        if self.loop is not None:
            subprocess.run(["losetup", "-d", self.loop], capture_output=True)
            os.unlink(self.img)


def rss_mib(pid):
    """The daemon's resident memory (VmRSS), MiB; None without a daemon (ext4)."""
    if pid is None:
        return None
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return None


def one(fs, n, lookups, size, work, floor, churn=0, changes=0):
    label = f"{fs} {n:,}"
    r = {"fs": fs, "entries": n}
    try:
        t = Target(fs, size, work, floor)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
        r["ok"], r["error"] = False, str(e)
        print(f"  {label}: failed: {e}", file=sys.stderr, flush=True)
        return r
    try:
        t.mount()
        d = os.path.join(t.mnt, "d")
        os.mkdir(d)
        start = time.monotonic()
        flags = os.O_CREAT | os.O_WRONLY | os.O_EXCL
        for i in range(n):
            os.close(os.open(os.path.join(d, f"f{i}"), flags, 0o644))
        r["create_per_s"] = n / (time.monotonic() - start)
        start = time.monotonic()
        for i in range(churn):
            path = os.path.join(d, f"churn{i}")
            os.close(os.open(path, flags, 0o644))
            os.unlink(path)
        if churn:
            r["churn_per_s"] = churn / (time.monotonic() - start)
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
        r["rss_after_lookups_mib"] = rss_mib(t.pid)
        victims = [os.path.join(d, f"f{i}") for i in random.sample(range(n), min(changes, n))]
        if victims:
            c0, d0, w0 = self_cpu(), daemon_cpu(t.pid), time.monotonic()
            for path in victims:
                os.unlink(path)
            r["change_unlink_us"] = 1e6 * (time.monotonic() - w0) / len(victims)
            r["change_unlink_cpu_us"] = 1e6 * (self_cpu() - c0 + daemon_cpu(t.pid) - d0) / len(victims)
            c0, d0, w0 = self_cpu(), daemon_cpu(t.pid), time.monotonic()
            for path in victims:
                os.close(os.open(path, flags, 0o644))
            r["change_create_us"] = 1e6 * (time.monotonic() - w0) / len(victims)
            r["change_create_cpu_us"] = 1e6 * (self_cpu() - c0 + daemon_cpu(t.pid) - d0) / len(victims)
            r["rss_after_changes_mib"] = rss_mib(t.pid)

        for step, cmd in (("readdir", ["ls", "-f", d]), ("unlink", ["find", d, "-mindepth", "1", "-delete"])):
            t.remount()
            d0 = daemon_cpu(t.pid)
            wall, cpu = child_cpu(cmd)
            r[f"{step}_us"] = 1e6 * wall / n
            r[f"{step}_cpu_us"] = 1e6 * (cpu + daemon_cpu(t.pid) - d0) / n
            r[f"rss_after_{step}_mib"] = rss_mib(t.pid)
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
    ("create_per_s", "creates/s", "{:,.0f}"), ("churn_per_s", "churn pairs/s", "{:,.0f}"),
    ("first_lookup_s", "first lookup s", "{:.3f}"),
    ("lookup_cpu_us", "lookup CPU µs", "{:.1f}"), ("lookup_us", "lookup wall µs", "{:.1f}"),
    ("miss_cpu_us", "missing name CPU µs", "{:.1f}"), ("miss_us", "missing name wall µs", "{:.1f}"),
    ("rss_after_lookups_mib", "RSS after lookups MiB", "{:.0f}"),
    ("change_unlink_cpu_us", "unlink after mount CPU µs", "{:.1f}"),
    ("change_create_cpu_us", "create after mount CPU µs", "{:.1f}"),
    ("rss_after_changes_mib", "RSS after changes MiB", "{:.0f}"),
    ("readdir_cpu_us", "readdir CPU µs/entry", "{:.2f}"), ("readdir_us", "readdir wall µs/entry", "{:.2f}"),
    ("rss_after_readdir_mib", "RSS after readdir MiB", "{:.0f}"),
    ("unlink_cpu_us", "unlink CPU µs/entry", "{:.1f}"), ("unlink_us", "unlink wall µs/entry", "{:.1f}"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", default="10k,1M")
    ap.add_argument("--fs", default="ext4,extalloc")
    ap.add_argument("--lookups", type=int, default=10_000)
    ap.add_argument("--churn", type=count, default=0,
                    help="names made and removed after the creates (default 0)")
    ap.add_argument("--changes", type=count, default=0,
                    help="names unlinked and made again after the lookups (default 0)")
    ap.add_argument("--size", default="16GiB")
    ap.add_argument("--json")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bigdir.py: needs root (loop devices, mounts)")
    systems = a.fs.split(",")
    unknown = [fs for fs in systems if fs not in ("ext4", "extalloc", "floor")]
    if unknown:
        sys.exit(f"bigdir.py: unknown file system {', '.join(unknown)} (ext4, extalloc, floor)")
    if "extalloc" in systems and not os.access(EXTALLOC, os.X_OK):
        sys.exit(f"bigdir.py: no {EXTALLOC}: cargo build --release -p extalloc-cli")
    floor = floor_binary() if "floor" in systems else None
    units = {"gib": 1 << 30, "mib": 1 << 20}
    sz = a.size.lower()
    size = int(sz[:-3]) * units[sz[-3:]] if sz[-3:] in units else int(sz)
    rows = []
    with tempfile.TemporaryDirectory(prefix="extalloc-bigdir.", dir=os.environ.get("TMPDIR", "/var/tmp")) as work:
        for n in [count(x) for x in a.files.split(",")]:
            for fs in systems:
                r = one(fs, n, a.lookups, size, work, floor, a.churn, a.changes)
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
