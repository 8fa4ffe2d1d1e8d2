#!/usr/bin/env python3
"""What a file system operation costs against the volume's size: work per call must not grow
with the number of groups (a 15 TiB volume has 122,880 of them, a 16 GiB one 128).

    sudo scripts/bench/volume-size.py [--bin BIN]... [--sizes 16GiB,15TiB] [--files 3000]
                                      [--rounds 3] [--dir /var/tmp]

For each round, each size and each binary in turn (alternated, so drift of a shared machine
hits all alike): `extalloc mkfs` a fresh sparse image of that size, mount it, create
`--files` files in one directory with a 4 KiB write each (`open(O_CREAT)`, `write`,
`close`), then unmount with `extalloc umount` and time it (the daemon's clean close). The
daemon's CPU (user + system of every thread, /proc/PID/stat) is read before the unmount.
Prints one JSON line per run and a Markdown table of medians per binary and size: wall µs
per file, daemon CPU µs per file, unmount seconds. 15 TiB is the largest sparse image an
ext4 host directory holds (16 TiB less a block). Needs root, /dev/fuse and
target/release/extalloc (or --bin, repeatable: the first is the baseline of the ratio column).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def daemon_cpu(pid):
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{t}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / TICK


def daemon_pid(image):
    out = subprocess.run(["pgrep", "-f", f"mount .*{image}"], capture_output=True, text=True)
    pids = [int(p) for p in out.stdout.split()]
    if not pids:
        sys.exit(f"no daemon serves {image}")
    return min(pids)


def one(binary, size, files, where):
    image, mnt = f"{where}/volsize.img", f"{where}/volsize.mnt"
    if os.path.exists(image):
        os.remove(image)
    os.makedirs(mnt, exist_ok=True)
    subprocess.run([binary, "mkfs", image, "--size", size], check=True, capture_output=True)
    subprocess.run([binary, "mount", image, mnt], check=True, capture_output=True)
    try:
        pid = daemon_pid(image)
        cpu0 = daemon_cpu(pid)
        data = b"x" * 4096
        t = time.perf_counter()
        for i in range(files):
            fd = os.open(f"{mnt}/f{i}", os.O_CREAT | os.O_WRONLY, 0o644)
            os.write(fd, data)
            os.close(fd)
        wall = time.perf_counter() - t
        cpu = daemon_cpu(pid) - cpu0
    finally:
        t = time.perf_counter()
        subprocess.run([binary, "umount", mnt], check=True, capture_output=True)
        umount = time.perf_counter() - t
        os.remove(image)
    return {"bin": binary, "size": size, "files": files, "wall_us": wall / files * 1e6,
            "daemon_cpu_us": cpu / files * 1e6, "umount_s": umount}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", action="append")
    p.add_argument("--sizes", default="16GiB,15TiB")
    p.add_argument("--files", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dir", default="/var/tmp")
    a = p.parse_args()
    bins = a.bin or ["target/release/extalloc"]
    runs = []
    for r in range(a.rounds):
        for size in a.sizes.split(","):
            order = bins if r % 2 == 0 else bins[::-1]
            for b in order:
                run = one(b, size, a.files, a.dir)
                print(json.dumps(run), flush=True)
                print(f"round {r + 1}/{a.rounds} {size} {b}: {run['wall_us']:.0f} µs a file",
                      file=sys.stderr, flush=True)
                runs.append(run)
    print("\n| binary | size | wall µs / file | daemon CPU µs / file | vs first binary (CPU) "
          "| unmount s |\n|---|---|---:|---:|---:|---:|")
    med = {}
    for size in a.sizes.split(","):
        for b in bins:
            mine = [x for x in runs if x["bin"] == b and x["size"] == size]
            med[(b, size)] = {k: statistics.median(x[k] for x in mine)
                              for k in ("wall_us", "daemon_cpu_us", "umount_s")}
    for size in a.sizes.split(","):
        for b in bins:
            m = med[(b, size)]
            ratio = m["daemon_cpu_us"] / max(med[(bins[0], size)]["daemon_cpu_us"], 1e-9)
            print(f"| {b} | {size} | {m['wall_us']:.0f} | {m['daemon_cpu_us']:.0f} | "
                  f"{ratio:.2f} | {m['umount_s']:.2f} |")


if __name__ == "__main__":
    main()
