#!/usr/bin/env python3
"""Before/after comparison of two `extalloc` binaries, run alternately.

    scripts/bench/compare-builds.py BEFORE AFTER [--rounds 3] [--out DIR]
    scripts/bench/compare-builds.py BEFORE AFTER --suite quick [--rounds 3]

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

`--suite quick` runs `bench --suite quick --repeat 1` instead, ABBA as above, and prints one
row per workload x policy x threads of every report with the layout and free-space figures
of all rounds: "identical" when every run of both binaries gave the same value, otherwise
each side's values, and whether BEFORE's own runs already differ from each other (a threaded
run's layout depends on how its threads interleave).
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


def invoke(cmd):
    """Runs one bench command; False if it failed (its last error line goes to stderr)."""
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        last = r.stderr.strip().splitlines()[-1:] or ["(no message)"]
        print(f"FAILED ({r.returncode}): {' '.join(cmd)}: {last[0]}", file=sys.stderr, flush=True)
    return r.returncode == 0


def run(binary, bench, out, extra):
    """The report of one run, or None if it failed."""
    # One repetition per invocation (the rounds repeat, ABBA): the bench default became 3,
    # and a BEFORE binary built before that would otherwise run once where AFTER runs three.
    if not invoke([binary, "bench", *bench, "--repeat", "1", *extra, "--json", out]):
        return None
    with open(out) as f:
        return json.load(f)


def run_suite(binary, suite, out_dir, extra):
    """Every run of one suite invocation as {(workload, policy, threads): run}, or None."""
    if not invoke([binary, "bench", "--suite", suite, "--repeat", "1", *extra, "--json", out_dir]):
        return None
    runs = {}
    for name in sorted(os.listdir(out_dir)):
        with open(os.path.join(out_dir, name)) as f:
            report = json.load(f)
        for run in report["runs"]:
            runs[(report["workload"], run["policy"], run["threads"])] = run
    return runs


def figure(run, section, name):
    value = (run.get(section) or {}).get(name)
    return None if value is None else round(value, 6)


def compare_suite(args, out_dir):
    runs = {"before": {}, "after": {}}
    failed = {"before": 0, "after": 0}
    for rnd in range(args.rounds):
        order = (("before", args.before), ("after", args.after))
        for side, binary in order if rnd % 2 == 0 else order[::-1]:
            got = run_suite(binary, args.suite, os.path.join(out_dir, f"{side}-{rnd}"),
                            args.extra.split())
            if got is None:
                failed[side] += 1
                continue
            for k, run in got.items():
                runs[side].setdefault(k, []).append(run)
    print("| workload | policy | threads | layout and free space over every round |")
    print("|---|---|---:|---|")
    rows = {"identical": 0, "differ": 0, "differ, before varies too": 0}
    for k in sorted(set(runs["before"]) | set(runs["after"])):
        b, a = runs["before"].get(k, []), runs["after"].get(k, [])
        if not a or not b:
            print(f"| {k[0]} | {k[1]} | {k[2]} | no run on one side |")
            continue
        notes, varies = [], False
        for section, name in FIGURES:
            vb = [figure(r, section, name) for r in b]
            va = [figure(r, section, name) for r in a]
            if len(set(vb + va)) <= 1:
                continue
            varies |= len(set(vb)) > 1
            notes.append(f"{name} before {sorted(set(vb))} after {sorted(set(va))}")
        verdict = "identical" if not notes else "differ, before varies too" if varies else "differ"
        rows[verdict] += 1
        print(f"| {k[0]} | {k[1]} | {k[2]} | {verdict if not notes else verdict + ': ' + '; '.join(notes)} |",
              flush=True)
    print(f"\nrows: {rows['identical']} identical, {rows['differ, before varies too']} differ where "
          f"BEFORE's own runs differ, {rows['differ']} differ where BEFORE's runs agree")
    print(f"failed runs: before {failed['before']}, after {failed['after']}")


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
    ap.add_argument("--suite", help="compare the layout figures of a suite's runs (quick)")
    args = ap.parse_args()
    for b in (args.before, args.after):
        if not os.access(b, os.X_OK):
            sys.exit(f"{b}: not an executable (build it first: cargo build --release)")
    out_dir = args.out or tempfile.mkdtemp(prefix="extalloc-compare-")
    os.makedirs(out_dir, exist_ok=True)
    if args.suite:
        compare_suite(args, out_dir)
        print(f"\nreports: {out_dir}", file=sys.stderr)
        return
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
