#!/usr/bin/env bash
# Runs every lab comparison the README quotes, each side by side in one invocation, and
# writes lab-out/<name>.json and lab-out/<name>.md. Takes about 25 minutes on 2 cores, plus
# the kernel comparisons when run as root.
#
#   ./scripts/bench/lab-results.sh            # everything
#   ./scripts/bench/lab-results.sh sparse     # only the comparisons whose name contains "sparse"
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -q -p extalloc-cli
bin=target/release/extalloc
mkdir -p lab-out
only="${1:-}"

run() {
  local name="$1"
  shift
  if [[ -n "$only" && "$name" != *"$only"* ]]; then
    return
  fi
  echo "== $name: extalloc bench $*" >&2
  "$bin" bench "$@" --json "lab-out/$name.json" | tee "lab-out/$name.md"
}

run fallocate2 fallocate2 --seconds 2 --repeat 3
run sparse-writes sparse-writes --threads 1 --policy extalloc,extalloc:prealloc_index=list --repeat 3
run sparse-writes-request sparse-writes --threads 1 --repeat 3 \
  --policy extalloc:normalise_holes=request,extalloc:normalise_holes=request:prealloc_index=list
run append-vs-fallocate append-vs-fallocate --threads 1,2 \
  --policy extalloc,extalloc:size_classes=false --repeat 5
run size-class-edge size-class-edge --threads 1,2 \
  --policy extalloc,extalloc:size_classes=false --repeat 3
run size-class-edge-mix size-class-edge --mix --threads 1,2 \
  --policy extalloc,extalloc:size_classes=false --repeat 3
run small-files small-files --threads 1,2 --fill 0.9 \
  --policy extalloc,extalloc:locality_prealloc=false --repeat 3
run frag frag --policy extalloc,ext4-2025,ext4-base,tlsf,first-fit --repeat 3
run fallocate2-outside fallocate2 --threads 1,2 --seconds 2 --repeat 3 \
  --policy extalloc,tlsf,first-fit
# Kernel traces: serial replay against the kernel's decisions, then as a threaded workload.
replay() {
  local name="$1" trace="$2"
  if [[ -n "$only" && "$name" != *"$only"* ]]; then
    return
  fi
  if [[ ! -f "$trace" ]]; then
    echo "== $name: skipped (no $trace)" >&2
    return
  fi
  echo "== $name: extalloc replay $trace" >&2
  "$bin" replay "$trace" --json "lab-out/$name.json" | tee "lab-out/$name.md"
  "$bin" bench replay --trace "$trace" --repeat 3 --json "lab-out/$name-threads.json" \
    | tee "lab-out/$name-threads.md"
}
for t in traces/*.trace.txt.gz ../shared/traces/*.trace.txt.gz; do
  name="$(basename "$t" .trace.txt.gz)"
  replay "replay-$name" "$t"
done
# The acceptance and per-rule tables of docs/results.md.
if [[ -z "$only" || "replay-tables" == *"$only"* ]]; then
  shared=()
  if compgen -G "../shared/traces/*.trace.txt.gz" >/dev/null; then
    shared=(../shared/traces/*.trace.txt.gz)
  fi
  echo "== replay-tables: scripts/bench/replay-table.py acceptance --threaded, rules" >&2
  EXTALLOC="$bin" python3 scripts/bench/replay-table.py acceptance --threaded traces/*.trace.txt.gz \
    "${shared[@]}" | tee lab-out/replay-acceptance.md
  EXTALLOC="$bin" python3 scripts/bench/replay-table.py rules traces/*.trace.txt.gz "${shared[@]}" \
    | tee lab-out/replay-rules.md
fi
# Persistence: group commit on /dev/shm and on the disk, and the crash torture.
if [[ -z "$only" || "commit" == *"$only"* ]]; then
  echo "== commit: extalloc commit-bench" >&2
  for path in /dev/shm/extalloc-commit.img "${TMPDIR:-/tmp}/extalloc-commit.img"; do
    "$bin" commit-bench "$path" --seconds 3
  done | tee lab-out/commit-bench.md
fi
if [[ -z "$only" || "torture" == *"$only"* ]]; then
  echo "== torture: extalloc torture --crashes 300 --seed 1..8 --threads 2" >&2
  for seed in 1 2 3 4 5 6 7 8; do
    "$bin" torture --crashes 300 --seed "$seed" --threads 2
  done | tee lab-out/torture.jsonl
fi
run random-fill random-fill --file-size 1GiB --threads 1,2 --repeat 3
run random-fill-burst4 random-fill --file-size 1GiB --seq-burst 4 --threads 1,2 --repeat 3

# The kernel's file systems: root and the tools of scripts/setup.sh.
compare() {
  local name="$1"
  shift
  if [[ -n "$only" && "$name" != *"$only"* ]]; then
    return
  fi
  if [[ $(id -u) -ne 0 ]]; then
    echo "== $name: skipped (extalloc compare needs root)" >&2
    return
  fi
  echo "== $name: extalloc compare $*" >&2
  "$bin" compare "$@" --json "lab-out/$name.json" | tee "lab-out/$name.md"
}

# btrfs is left out of frag: its 4 KiB KEEP_SIZE fallocates by 16 jobs had done about a third
# of the 4 GiB after 6 minutes here.
compare compare-frag frag --fs ext4,xfs --policy extalloc,ext4-base,tlsf,first-fit --repeat 1
compare compare-fallocate2 fallocate2 --fs ext4,xfs,btrfs --threads 1,2 --seconds 2 \
  --repeat 3 --policy extalloc,tlsf,first-fit
# Persistence: fallocate2 on a journaled file device against the memory device (one table
# each), fallocate3 on a 75%-full file device (indexes vs linear scan, read-ahead on/off;
# 64 and 512 groups), and what opening a 16 TiB device and replaying journals costs.
tmp="${TMPDIR:-/tmp}"
run fallocate2-memory fallocate2 --threads 1,2 --policy extalloc --seconds 2 --repeat 3
run fallocate2-device-shm fallocate2 --threads 1,2 --policy extalloc --seconds 2 --repeat 3 \
  --device /dev/shm/extalloc-lab.img
run fallocate2-device-disk fallocate2 --threads 1,2 --policy extalloc --seconds 2 --repeat 3 \
  --device "$tmp/extalloc-lab.img"
run fallocate3 fallocate3 --threads 1,2 --fill 0.75 --commit-ms 5000 --seconds 3 --repeat 3 \
  --policy extalloc,extalloc:optimize_scan=false,extalloc:prefetch_groups=0 \
  --device "$tmp/extalloc-lab.img"
run fallocate3-512-groups fallocate3 --threads 1 --fill 0.75 --commit-ms 5000 --seconds 3 \
  --repeat 3 --group-blocks 4096 --policy extalloc,extalloc:prefetch_groups=0 \
  --device "$tmp/extalloc-lab.img"
rm -f /dev/shm/extalloc-lab.img "$tmp/extalloc-lab.img"
# Writeback (seed 003's job, docs/writeback.md): unpressured, under a 256 MiB limit,
# sequential; then with fio on the kernel (root), and on a file device in /dev/shm.
run writeback writeback --repeat 3
run writeback-pressure writeback --repeat 3 --dirty-limit 256MiB
run writeback-seq writeback --pattern seq --wb-contexts 1,2,4 --wb-affinity group,none --repeat 3
compare compare-writeback writeback --fs ext4,xfs --wb-contexts 2 --wb-affinity group --repeat 3
compare compare-writeback-seq writeback --fs ext4,xfs --pattern seq --wb-contexts 2 \
  --wb-affinity group --repeat 3
compare compare-writeback-640 writeback --fs ext4,xfs --file-size 640MiB --dirty-limit 256MiB \
  --wb-contexts 2 --wb-affinity group --repeat 1
run writeback-device-shm writeback --device /dev/shm/extalloc-wb.img --wb-contexts 1,2 \
  --wb-affinity group,none --repeat 3
if [[ -z "$only" || "open" == *"$only"* ]]; then
  # tmpfs: a 16 TiB sparse file (ext4 files stop just short of 16 TiB).
  echo "== open: extalloc open-bench /dev/shm/extalloc-open.img" >&2
  "$bin" open-bench /dev/shm/extalloc-open.img | tee lab-out/open-bench.md
fi
