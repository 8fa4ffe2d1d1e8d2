#!/usr/bin/env python3
"""Before/after comparison of two `extalloc` binaries, run alternately.

    scripts/compare-builds.py BEFORE AFTER [--rounds 3] [--out DIR]

Runs each benchmark of the layering acceptance (`bench fallocate2 --threads 1,2`, `bench frag`,
`bench small-files`, `bench sparse-writes`, default policies) with BEFORE and AFTER in turn,
`--rounds` times in ABBA order (before, after, after, before, ...), so drift of a shared
machine hits both alike. Prints one Markdown table: per workload x policy x threads, the median ops/s of each
binary, their ratio, and whether every layout and free-space figure of AFTER's median run is
identical to BEFORE's (or, where it differs, which figure and both values).

Progress goes to stderr, the table to stdout. Exit status 0 even when figures differ: the table
says so. A run that fails is reported (its error on stderr, a count in the table) and the
rounds go on. `--bench NAME` (repeatable) runs only those benchmarks; `--extra "ARGS"` appends
ARGS to every bench command (say `--extra "--device-size 32GiB"`: small-files on the default
4 GiB device lasts about 0.15 s, too short to resolve 5 %).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

BENCHES = [
    ["fallocate2", "--threads", "1,2"],
    ["frag"],
    ["small-files"],
    ["sparse-writes"],
]

# Layout and free-space figures that must be identical (or better: see BETTER).
FIGURES = [
    ("layout", "extents_per_file"),
    ("layout", "avg_extent_kib"),
    ("layout", "layout_score"),
    ("free_space", "free_extents"),
    ("free_space", "largest_free_extent_kib"),
    ("free_space", "fragmented_groups"),
    ("free_space", "frag_pct_mean"),
]
# Which direction is better for each figure.
BETTER = {
    "extents_per_file": -1,
    "avg_extent_kib": 1,
    "layout_score": 1,
    "free_extents": -1,
    "largest_free_extent_kib": 1,
    "fragmented_groups": -1,
    "frag_pct_mean": -1,
}


def run(binary, bench, out, extra):
    """The report of one run, or None if it failed (its error goes to stderr)."""
    # One repetition per invocation (the rounds repeat, ABBA): the bench default became 3,
    # and a BEFORE binary built before that would otherwise run once where AFTER runs three.
    cmd = [binary, "bench", *bench, "--repeat", "1", *extra, "--json", out]
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        last = r.stderr.strip().splitlines()[-1:] or ["(no message)"]
        print(f"FAILED ({r.returncode}): {' '.join(cmd)}: {last[0]}", file=sys.stderr, flush=True)
        return None
    with open(out) as f:
        return json.load(f)


def key(run):
    return (run["policy"], run["threads"])


def median_run(runs):
    """The run whose ops/s is the median (the lower middle for an even count)."""
    ordered = sorted(runs, key=lambda r: r["ops_per_sec"])
    return ordered[(len(ordered) - 1) // 2]


def compare_figures(before, after):
    notes = []
    for section, name in FIGURES:
        b = (before.get(section) or {}).get(name)
        a = (after.get(section) or {}).get(name)
        if b is None or a is None or b == a:
            continue
        better = (a - b) * BETTER[name] > 0
        notes.append(f"{name} {b:g} -> {a:g} ({'better' if better else 'WORSE'})")
    return "; ".join(notes) if notes else "identical"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="keep the JSON reports here")
    ap.add_argument("--bench", action="append", help="only this benchmark (repeatable)")
    ap.add_argument("--extra", default="", help="arguments appended to every bench command")
    args = ap.parse_args()
    for b in (args.before, args.after):
        if not os.access(b, os.X_OK):
            sys.exit(f"{b}: not an executable (build it first: cargo build --release)")
    out_dir = args.out or tempfile.mkdtemp(prefix="extalloc-compare-")
    os.makedirs(out_dir, exist_ok=True)
    print("| workload | policy | threads | before ops/s | after ops/s | after/before | layout and free space |")
    print("|---|---|---:|---:|---:|---:|---|")
    failed = {"before": 0, "after": 0}
    for bench in BENCHES:
        name = bench[0]
        if args.bench and name not in args.bench:
            continue
        runs = {"before": {}, "after": {}}
        for rnd in range(args.rounds):
            order = (("before", args.before), ("after", args.after))
            # ABBA: odd rounds run AFTER first, so a steady drift favours neither side.
            for side, binary in order if rnd % 2 == 0 else order[::-1]:
                path = os.path.join(out_dir, f"{name}-{side}-{rnd}.json")
                report = run(binary, bench, path, args.extra.split())
                if report is None:
                    failed[side] += 1
                    continue
                for r in report["runs"]:
                    runs[side].setdefault(key(r), []).append(r)
        for k in sorted(set(runs["before"]) | set(runs["after"]), key=lambda k: (k[1], k[0])):
            b, a = runs["before"].get(k, []), runs["after"].get(k, [])
            if not a or not b:
                print(f"| {name} | {k[0]} | {k[1]} | | | | no run on one side |")
                continue
            mb = statistics.median(r["ops_per_sec"] for r in b)
            ma = statistics.median(r["ops_per_sec"] for r in a)
            figures = compare_figures(median_run(b), median_run(a))
            print(f"| {name} | {k[0]} | {k[1]} | {mb:,.0f} | {ma:,.0f} | {ma / mb:.3f} | {figures} |",
                  flush=True)
    print(f"\nfailed runs: before {failed['before']}, after {failed['after']}")
    print(f"\nreports: {out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
