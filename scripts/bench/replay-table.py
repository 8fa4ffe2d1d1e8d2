#!/usr/bin/env python3
"""Replays traces through extalloc and prints the tables of docs/results.md.

    scripts/bench/replay-table.py acceptance TRACE...   one row per trace: extalloc against the
                                                  kernel (serial, and threaded with --threaded):
                                                  meets when extents per file and free extents
                                                  are at most the kernel's and the largest free
                                                  extent at least half the kernel's, each run
    scripts/bench/replay-table.py rules TRACE...        what switching off each fidelity rule changes

The binary is $EXTALLOC, else target/release/extalloc (build it first); the policy is
$POLICY, else extalloc. Progress goes to stderr, the Markdown table to stdout.
"""
import json
import os
import subprocess
import sys
import tempfile

EXTALLOC = os.environ.get("EXTALLOC", "target/release/extalloc")
POLICY = os.environ.get("POLICY", "extalloc")
RULES = ["commits", "reuse", "cpu", "complete", "streams", "metagoals"]


def replay(trace, *extra):
    """Runs one replay; returns {policy: run} from its JSON report."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [EXTALLOC, "replay", trace, "--policy", POLICY, "--json", out.name, *extra]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr}")
        report = json.load(open(out.name))
    return {("extalloc" if r["policy"] != "kernel" else "kernel"): r for r in report["runs"]}


def bench_replay(trace):
    """The threaded replay (one thread per traced task): extalloc's extents per file, free
    extents and largest free extent."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [EXTALLOC, "bench", "replay", "--trace", trace, "--policy", POLICY,
               "--repeat", "1", "--json", out.name]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr}")
        report = json.load(open(out.name))
    return figures(report["runs"][0])


def figures(run):
    fs = run["free_space"]
    return (run["layout"]["extents_per_file"], fs["free_extents"], fs["largest_free_extent_kib"])


def acceptance(traces, threaded):
    head = ["trace", "files", "extents/file ours", "kernel", "free extents ours", "kernel",
            "largest free KiB ours", "kernel", "verdict"]
    if threaded:
        head[-1:-1] = ["threaded extents/file ours", "threaded free extents",
                       "threaded largest free KiB"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" + "---:|" * (len(head) - 2) + "---|")
    for t in traces:
        print(f"replaying {t}", file=sys.stderr)
        runs = replay(t)
        ours, kernel = figures(runs["extalloc"]), figures(runs["kernel"])
        meets = lambda o: o[0] <= kernel[0] + 1e-9 and o[1] <= kernel[1] and o[2] * 2 >= kernel[2]
        ok = meets(ours)
        row = [os.path.basename(t), str(runs["kernel"]["layout"]["files"]),
               f"{ours[0]:.2f}", f"{kernel[0]:.2f}", str(ours[1]), str(kernel[1]),
               f"{ours[2]:.0f}", f"{kernel[2]:.0f}"]
        if threaded:
            th = bench_replay(t)
            ok = ok and meets(th)
            row += [f"{th[0]:.2f}", str(th[1]), f"{th[2]:.0f}"]
        row.append("meets" if ok else "**misses**")
        print("| " + " | ".join(row) + " |", flush=True)


def rules(traces):
    print("| trace | rule off | extents/file | free extents | largest free KiB |")
    print("|---|---|---:|---:|---:|")
    for t in traces:
        for rule in [None, *RULES]:
            print(f"replaying {t} without {rule}", file=sys.stderr)
            runs = replay(t, *(["--without", rule] if rule else []))
            epf, fe, lf = figures(runs["extalloc"])
            print(f"| {os.path.basename(t)} | {rule or '(all rules on)'} | {epf:.2f} | {fe} "
                  f"| {lf:.0f} |", flush=True)
        epf, fe, lf = figures(runs["kernel"])
        print(f"| {os.path.basename(t)} | kernel | {epf:.2f} | {fe} | {lf:.0f} |", flush=True)


def main():
    args = sys.argv[1:]
    threaded = "--threaded" in args
    args = [a for a in args if a != "--threaded"]
    if len(args) < 2 or args[0] not in ("acceptance", "rules"):
        sys.exit(__doc__)
    if not os.path.exists(EXTALLOC):
        sys.exit(f"{EXTALLOC} not found: cargo build --release -p extalloc-cli, or set EXTALLOC")
    if args[0] == "acceptance":
        acceptance(args[1:], threaded)
    else:
        rules(args[1:])


if __name__ == "__main__":
    main()
