#!/usr/bin/env python3
"""CPU per namespace operation, split by the daemon's threads, through a mounted FUSE
file system: the loop behind docs/results.md's pinned-caller tables (issue 53).

Four phases over FILES names in DIRS directories, one caller: create (open O_CREAT and
close), stat, rename, unlink. For each phase: operations a second, the caller's CPU and
context switches per operation (its /proc/self/sched), and the daemon's CPU per operation
(every thread's schedstat, and user and system time from stat). After the phases, each
daemon thread's CPU and switches per operation over the whole run, by name, so a
transport's threads (readers, ring threads, the forget reader) show apart. compare-fs
measures the same CPU per operation for whole workloads; this loop says which thread
spends it.

    # the daemon of an extalloc mount (or any FUSE daemon: --pid)
    sudo python3 scripts/bench/thread-cpu.py MOUNTPOINT --files 20000 [--pin 0]
    # a profile of one phase: perf record of the daemon while that phase runs
    sudo python3 scripts/bench/thread-cpu.py MNT --perf-phase create --perf-out create.data

The mount point must be empty (the loop makes d0..dN there and leaves nothing). Needs
read access to the daemon's /proc entries (root, or the daemon's own user).
"""

import argparse
import os
import signal
import subprocess
import sys
import time


def daemon_pid(mountpoint):
    """The process serving MOUNTPOINT: the one whose command line names it (extalloc
    mount and libfuse daemons both take it as an argument)."""
    target = os.path.realpath(mountpoint)
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            args = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if any(a and os.path.realpath(a.decode(errors="replace")) == target for a in args[1:]):
            found.append(int(p))
    if len(found) != 1:
        sys.exit(f"thread-cpu.py: {len(found)} processes name {target}: give --pid")
    return found[0]


def threads(pid):
    """Per thread: name, CPU ns (schedstat), voluntary and involuntary switches, user and
    system ticks."""
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        base = f"/proc/{pid}/task/{t}"
        try:
            comm = open(f"{base}/comm").read().strip()
            run = int(open(f"{base}/schedstat").read().split()[0])
            status = dict(
                line.split(":\t", 1) for line in open(f"{base}/status").read().splitlines() if ":\t" in line
            )
            stat = open(f"{base}/stat").read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended between the listing and the read
        out[t] = (
            comm,
            run,
            int(status["voluntary_ctxt_switches"]),
            int(status["nonvoluntary_ctxt_switches"]),
            int(stat[11]),
            int(stat[12]),
        )
    return out


def caller():
    """The caller's CPU ns, migrations and switches (/proc/self/sched)."""
    keys = ("se.sum_exec_runtime", "se.nr_migrations", "nr_voluntary_switches", "nr_involuntary_switches")
    d = {}
    for line in open("/proc/self/sched"):
        k, _, v = line.partition(":")
        if k.strip() in keys:
            d[k.strip()] = float(v)
    return d


def totals(ts):
    """The daemon's CPU ns and user and system ticks, over all its threads."""
    return (sum(t[1] for t in ts.values()), sum(t[4] for t in ts.values()), sum(t[5] for t in ts.values()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mountpoint")
    ap.add_argument("--files", type=int, default=20000, help="names per phase (default 20000)")
    ap.add_argument("--dirs", type=int, default=100, help="directories they spread over (default 100)")
    ap.add_argument("--pid", type=int, help="the daemon (default: the process naming the mount point)")
    ap.add_argument("--pin", type=int, help="pin the caller to this CPU")
    ap.add_argument("--perf-phase", choices=("create", "stat", "rename", "unlink"))
    ap.add_argument("--perf-out", default="perf.data")
    a = ap.parse_args()
    if a.files < 1 or a.dirs < 1:
        sys.exit("thread-cpu.py: --files and --dirs must be at least 1")
    if os.listdir(a.mountpoint):
        sys.exit(f"thread-cpu.py: {a.mountpoint} is not empty")
    pid = a.pid or daemon_pid(a.mountpoint)
    if a.pin is not None:
        os.sched_setaffinity(0, {a.pin})
    tick = os.sysconf("SC_CLK_TCK")
    n = a.files
    for d in range(a.dirs):
        os.mkdir(f"{a.mountpoint}/d{d}")

    def phase(name, fn):
        perf = None
        if a.perf_phase == name:
            perf = subprocess.Popen(
                ["perf", "record", "-F", "2999", "--call-graph", "dwarf,16384", "-p", str(pid), "-o", a.perf_out, "-q"]
            )
            time.sleep(1)
        d0, c0, t0 = totals(threads(pid)), caller(), time.perf_counter()
        for i in range(n):
            fn(f"{a.mountpoint}/d{i % a.dirs}", i)
        dt, c1, d1 = time.perf_counter() - t0, caller(), totals(threads(pid))
        if perf:
            perf.send_signal(signal.SIGINT)
            perf.wait()
        c = {k: (c1[k] - c0[k]) / n for k in c1}
        print(
            f"{name:7s} {n / dt:9.0f} ops/s | caller {c['se.sum_exec_runtime'] * 1000:6.1f} µs, "
            f"{c['nr_voluntary_switches']:.2f} vol {c['nr_involuntary_switches']:.2f} invol "
            f"{c['se.nr_migrations']:.2f} migr | daemon {(d1[0] - d0[0]) / 1000 / n:6.1f} µs "
            f"(user {(d1[1] - d0[1]) * 1e6 / tick / n:.1f}, sys {(d1[2] - d0[2]) * 1e6 / tick / n:.1f}) per op",
            flush=True,
        )

    before = threads(pid)
    phase("create", lambda d, i: os.close(os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644)))
    phase("stat", lambda d, i: os.stat(f"{d}/f{i}"))
    phase("rename", lambda d, i: os.rename(f"{d}/f{i}", f"{d}/g{i}"))
    phase("unlink", lambda d, i: os.unlink(f"{d}/g{i}"))
    after = threads(pid)
    for d in range(a.dirs):
        os.rmdir(f"{a.mountpoint}/d{d}")
    ops = 4 * n
    print(f"\nthe daemon's threads over the {ops} operations (per operation):")
    by_name = {}
    for t, (comm, run, vol, invol, ut, st) in after.items():
        b = before.get(t, (comm, 0, 0, 0, 0, 0))
        s = by_name.setdefault(comm, [0, 0, 0, 0, 0, 0])
        for k, v in enumerate((1, run - b[1], vol - b[2], invol - b[3], ut - b[4], st - b[5])):
            s[k] += v
    for comm, (count, run, vol, invol, ut, st) in sorted(by_name.items(), key=lambda x: -x[1][1]):
        print(
            f"  {comm:20s} x{count:<3d} {run / 1000 / ops:7.2f} µs  vol {vol / ops:5.2f}  invol {invol / ops:5.2f}"
            f"  user {ut * 1e6 / tick / ops:5.2f} µs  sys {st * 1e6 / tick / ops:5.2f} µs"
        )


if __name__ == "__main__":
    main()
