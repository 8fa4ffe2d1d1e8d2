#!/usr/bin/env bash
# Captures the corpus of kernel ext4 allocation traces kept in traces/: for each workload a
# fresh 4 GiB ext4 image in /dev/shm on a loop device, the workload run under
# `extalloc capture`, then the kernel's "after" figures (filefrag over every regular file,
# e2freefrag after unmounting). See traces/README.md.
#
#   sudo ./scripts/bench/capture-corpus.sh                 # every workload
#   sudo ./scripts/bench/capture-corpus.sh dbench sqlite-wal   # only these
#   sudo ./scripts/bench/capture-corpus.sh --list          # the workload names
#
# Environment:
#   EXTALLOC  the extalloc binary (default target/release/extalloc; build it first with
#             `cargo build --release -p extalloc-cli`)
#   CAPTURE=0 run the workloads and measure, but record nothing (a dry run; needs no binary)
#   OUTDIR    where the traces go (default traces/)
#   WORK      helper scripts and the git source repository (default /tmp/extalloc-corpus)
#   SIZE      the image's size, as truncate takes it (default 4G)
#   Workload parameters (defaults: the corpus's traces):
#   MIXED_WRITERS, MIXED_STEPS, MIXED_SEED, MIXED_MAXLIFE
#             mixed-lifetimes: processes run side by side, each in its own directory
#             (1), steps of each (4000), seed of the first (7; process i uses seed + i),
#             the longest temp-file lifetime in steps (4096)
#   CORR_WRITERS, CORR_BATCHES, CORR_SEED
#             correlated-lifetimes: writers side by side (4), batches each (60), seed (3)
#   FSMARK_DIRS, FSMARK_SCALE
#             fsmark-small: threads (one directory each, 8) and a percentage applied to
#             every file count (100)
#   TREE_SRC  tree-copy: the third tree copied (default the cargo registry, else
#             /usr/lib/python3)
#
# Progress goes to stderr, one markdown summary row per workload to stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)

ALL=(tree-copy fsmark-small dbench fio-randwrite-fsync git-checkout sqlite-wal sqlite-journal mixed-lifetimes
     aging-churn full-churn correlated-lifetimes)

if [[ "${1:-}" == "--list" ]]; then
  printf '%s\n' "${ALL[@]}"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "capture-corpus.sh: must be run as root (it makes loop devices, mounts ext4 and uses tracefs)" >&2
  exit 1
fi

CAPTURE=${CAPTURE:-1}
EXTALLOC=${EXTALLOC:-$ROOT/target/release/extalloc}
OUTDIR=${OUTDIR:-$ROOT/traces}
WORK=${WORK:-/tmp/extalloc-corpus}      # helper scripts, the git source repository, fs_mark's log
MNT=/mnt/extalloc-corpus       # where each fresh file system is mounted
IMG_DIR=/dev/shm

log() { echo "capture-corpus: $*" >&2; }

# ---------------------------------------------------------------- dependencies
need_install=()
need() { # need COMMAND PACKAGE
  command -v "$1" >/dev/null 2>&1 || need_install+=("$2")
}
need fio fio
need dbench dbench
need fs_mark fsmark
need git git
need mkfs.ext4 e2fsprogs
need filefrag e2fsprogs
need e2freefrag e2fsprogs
need dumpe2fs e2fsprogs
need losetup mount
need gzip gzip
[[ -x /usr/bin/python3 ]] || need_install+=(python3)
if ((${#need_install[@]})); then
  log "installing ${need_install[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_install[@]}" >/dev/null
fi
PY=/usr/bin/python3
"$PY" -c 'import sqlite3' || { log "python3 has no sqlite3 module"; exit 1; }
DBENCH_LOAD=$(dpkg -L dbench 2>/dev/null | grep '/client\.txt$' | head -1 || true)
[[ -n "$DBENCH_LOAD" && -f "$DBENCH_LOAD" ]] || DBENCH_LOAD=/usr/share/dbench/client.txt

if [[ "$CAPTURE" != 0 ]]; then
  [[ -x "$EXTALLOC" ]] || {
    log "no extalloc binary at $EXTALLOC (set EXTALLOC=..., or CAPTURE=0 for a dry run)"
    exit 1
  }
fi

# ---------------------------------------------------------------- helpers (python)
rm -rf "$WORK"
mkdir -p "$WORK" "$MNT" "$OUTDIR"

# A git history: 150 commits that add, modify (rewrite, append, edit in place) and delete
# text files of 100 B to 2 MiB in a few directories; seeded, so always the same content.
cat >"$WORK/make-git-history.py" <<'EOF'
import os, random, subprocess, sys
dst, commits = sys.argv[1], int(sys.argv[2])
rng = random.Random(1234)
words = ["alloc", "extent", "block", "group", "inode", "journal", "commit", "free", "buddy",
         "bitmap", "fn", "let", "mut", "impl", "struct", "return", "if", "else", "match",
         "self", "0", "1", "4096", "u64", "Result", "Ok", "Err", "//", "{", "}", "(", ")"]
def text(n):
    out, size = [], 0
    while size < n:
        line = " ".join(rng.choices(words, k=rng.randint(2, 14))) + "\n"
        out.append(line); size += len(line)
    return "".join(out)[:n]
def size():
    return int(10 ** rng.uniform(2, 6.3))          # 100 B .. 2 MiB, log-uniform
dirs = ["src", "src/alloc", "src/fs", "docs", "tests", "assets", "vendor/a", "vendor/b"]
env = dict(os.environ, GIT_AUTHOR_NAME="corpus", GIT_AUTHOR_EMAIL="corpus@example.invalid",
           GIT_COMMITTER_NAME="corpus", GIT_COMMITTER_EMAIL="corpus@example.invalid")
def git(*a, **kw):
    subprocess.run(["git", "-C", dst, *a], check=True, env=kw.get("env", env),
                   stdout=subprocess.DEVNULL)
os.makedirs(dst)
git("init", "-q", "-b", "main")
files, serial = [], 0
def add():
    global serial
    d = rng.choice(dirs); os.makedirs(os.path.join(dst, d), exist_ok=True)
    p = os.path.join(d, f"f{serial:05d}.txt"); serial += 1
    open(os.path.join(dst, p), "w").write(text(size())); files.append(p)
for _ in range(120):
    add()
for c in range(commits):
    for _ in range(rng.randint(0, 8)):
        add()
    for _ in range(min(len(files), rng.randint(2, 12))):
        p = os.path.join(dst, rng.choice(files)); kind = rng.random()
        if kind < 0.4:
            open(p, "w").write(text(size()))                 # rewrite
        elif kind < 0.8:
            open(p, "a").write(text(int(10 ** rng.uniform(2, 5))))   # append
        else:
            s = open(p).read(); i = rng.randint(0, len(s))   # edit in the middle
            open(p, "w").write(s[:i] + text(rng.randint(10, 5000)) + s[i + rng.randint(0, 3000):])
    for _ in range(min(len(files) - 20, rng.randint(0, 6))):
        p = files.pop(rng.randrange(len(files))); os.unlink(os.path.join(dst, p))
    git("add", "-A")
    t = f"{1700000000 + c * 3600} +0000"
    git("commit", "-q", "-m", f"commit {c}",
        env=dict(env, GIT_AUTHOR_DATE=t, GIT_COMMITTER_DATE=t))
EOF

# A database: transactions of inserts (rows of 50 B .. 8 KiB) and range deletes, an index,
# then a large delete and VACUUM. Argument: journal mode (wal or delete).
cat >"$WORK/sqlite-load.py" <<'EOF'
import os, random, sqlite3, sys
path, mode, txns = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(42)
db = sqlite3.connect(path, isolation_level=None)
db.execute(f"PRAGMA journal_mode={mode}")
db.execute("PRAGMA synchronous=FULL")
db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT, v BLOB)")
db.execute("CREATE INDEX t_k ON t(k)")
db.execute("CREATE TABLE log (id INTEGER PRIMARY KEY, at INTEGER, msg TEXT)")
nid = 0
for n in range(txns):
    db.execute("BEGIN")
    for _ in range(rng.randint(20, 200)):
        nid += 1
        db.execute("INSERT INTO t VALUES (?, ?, ?)",
                   (nid, f"k{rng.randrange(10**9):09d}", rng.randbytes(int(10 ** rng.uniform(1.7, 3.9)))))
    db.execute("INSERT INTO log (at, msg) VALUES (?, ?)", (n, "x" * rng.randint(20, 300)))
    if n % 3 == 2:                                     # delete a random range of old rows
        lo = rng.randint(1, max(1, nid - 500))
        db.execute("DELETE FROM t WHERE id BETWEEN ? AND ?", (lo, lo + rng.randint(50, 400)))
    if n % 10 == 9:                                    # update some rows in place, bigger
        for _ in range(20):
            db.execute("UPDATE t SET v = ? WHERE id = ?",
                       (rng.randbytes(rng.randint(500, 6000)), rng.randint(1, nid)))
    db.execute("COMMIT")
db.execute("DELETE FROM t WHERE id % 2 = 0")
db.execute("DELETE FROM log WHERE id % 3 != 0")
if mode == "wal":
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
db.execute("VACUUM")
db.close()
EOF

# Mixed lifetimes: 8 long-lived logs appended in small records (fsynced now and then) while
# short-lived temp files of 4 KiB .. 16 MiB are written, sometimes fsynced, kept for a
# random number of steps and deleted; with a short sleep per step so it spans ~60 s and
# the kernel's periodic writeback and commits happen in the middle of it.
cat >"$WORK/mixed-lifetimes.py" <<'EOF'
import math, os, random, sys, time
root, steps = sys.argv[1], int(sys.argv[2])
seed = int(sys.argv[3]) if len(sys.argv) > 3 else 7
maxlife = int(sys.argv[4]) if len(sys.argv) > 4 else 4096
rng = random.Random(seed)
os.makedirs(f"{root}/log"); os.makedirs(f"{root}/tmp"); os.makedirs(f"{root}/keep")
logs = [open(f"{root}/log/app{i}.log", "ab", buffering=0) for i in range(8)]
live, serial = [], 0
chunk = os.urandom(1 << 20)
for step in range(steps):
    for _ in range(rng.randint(1, 6)):
        f = rng.choice(logs)
        f.write(b"%08d " % step + b"x" * rng.randint(40, 2000) + b"\n")
        if rng.random() < 0.05:
            os.fsync(f.fileno())
    if rng.random() < 0.5:
        size = int(4096 * 2 ** rng.uniform(0, 12))       # 4 KiB .. 16 MiB
        keep = rng.random() < 0.05
        p = f"{root}/{'keep' if keep else 'tmp'}/t{serial:06d}"; serial += 1
        with open(p, "wb") as t:
            left = size
            while left > 0:
                n = min(left, len(chunk)); t.write(chunk[:n]); left -= n
            if rng.random() < 0.3:
                t.flush(); os.fsync(t.fileno())
        if not keep:
            live.append((step + int(2 ** rng.uniform(0, math.log2(maxlife))), p))
    still = []
    for until, p in live:
        if until <= step:
            os.unlink(p)
        else:
            still.append((until, p))
    live = still
    time.sleep(0.02)
for f in logs:
    f.close()
EOF

# Correlated lifetimes: each writer makes batches of 4-40 files of 4 KiB .. 8 MiB
# (log-uniform) in a directory of its own, a batch's files fsynced together at its end; a
# batch lives for 1-12 later batches of its writer and is then deleted whole (10 % are kept).
# Arguments: root, writer number, batches, seed.
cat >"$WORK/correlated-lifetimes.py" <<'EOF'
import os, random, shutil, sys, time
root, writer, batches, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed * 1000 + writer)
chunk = os.urandom(1 << 20)
live = []
for b in range(batches):
    d = f"{root}/w{writer}/b{b:04d}"
    os.makedirs(d)
    files = []
    for i in range(rng.randint(4, 40)):
        size = int(4096 * 2 ** rng.uniform(0, 11))
        f = open(f"{d}/f{i:03d}", "wb")
        left = size
        while left > 0:
            n = min(left, len(chunk)); f.write(chunk[:n]); left -= n
        files.append(f)
    for f in files:
        f.flush(); os.fsync(f.fileno()); f.close()
    if rng.random() >= 0.1:
        live.append((b + rng.randint(1, 12), d))
    for _, p in [x for x in live if x[0] <= b]:
        shutil.rmtree(p)
    live = [x for x in live if x[0] > b]
    time.sleep(0.05)
EOF

# Aging churn (Geriatrix-like): fill to a share of statvfs's size with files log-uniform in
# 4 KiB .. 4 MiB, each written whole and fsynced, 70 % of them short-lived (deleted after a
# random number of later creates), then keep creating and deleting at that fill until the
# bytes created reach ROUNDS x the capacity. Arguments: root, fill %, rounds, seed.
cat >"$WORK/aging-churn.py" <<'EOF'
import os, random, sys
root, fill, rounds, seed = sys.argv[1], float(sys.argv[2]) / 100, float(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed)
st = os.statvfs(root)
cap = st.f_blocks * st.f_frsize
chunk = os.urandom(4 << 20)
live, short, used, made, serial = {}, [], 0, 0, 0
for d in range(16):
    os.makedirs(f"{root}/d{d:02d}")
def create():
    global used, made, serial
    size = int(4096 * 2 ** rng.uniform(0, 10))          # 4 KiB .. 4 MiB
    p = f"{root}/d{serial % 16:02d}/f{serial:07d}"; serial += 1
    with open(p, "wb") as f:
        f.write(chunk[:size]); f.flush(); os.fsync(f.fileno())
    live[p] = size; used += size; made += size
    if rng.random() < 0.7:
        short.append((serial + int(2 ** rng.uniform(0, 9)), p))
def expire(force):
    global used
    keep = []
    for until, p in short:
        if until <= serial or force:
            used -= live.pop(p); os.unlink(p); force = False
        else:
            keep.append((until, p))
    short[:] = keep
while used < fill * cap:
    create(); expire(False)
while made < rounds * cap:
    while used > fill * cap:                             # at the fill: delete before adding
        if short:
            expire(True)
        else:
            p = rng.choice(list(live)); used -= live.pop(p); os.unlink(p)
    create(); expire(False)
EOF

# Full-device churn: fill with 1 MiB files until the device refuses (ENOSPC), delete every
# third, refill with 16 KiB .. 256 KiB files until it refuses again, delete every other
# small file, and refill with 64 KiB .. 8 MiB files: the kernel's goals at the device's end.
cat >"$WORK/full-churn.py" <<'EOF'
import errno, os, random, sys
root, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
chunk = os.urandom(8 << 20)
def fill(d, lo, hi):
    os.makedirs(d); made = []
    while True:
        size = rng.randint(lo, hi) // 4096 * 4096 or 4096
        p = f"{d}/f{len(made):06d}"
        try:
            with open(p, "wb") as f:
                f.write(chunk[:size]); f.flush(); os.fsync(f.fileno())
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            os.unlink(p)
            return made
        made.append(p)
big = fill(f"{root}/big", 1 << 20, 1 << 20)
for p in big[::3]:
    os.unlink(p)
small = fill(f"{root}/small", 16 << 10, 256 << 10)
for p in small[::2]:
    os.unlink(p)
fill(f"{root}/mixed", 64 << 10, 8 << 20)
EOF

# ---------------------------------------------------------------- workloads
# Each prints the shell command (run with `sh -c` inside the mounted file system) and may
# prepare things outside the mount first. The command is what the trace header records.
wl_tree_copy() {
  local third=/usr/lib/python3
  [[ -d "$HOME/.cargo/registry/src" ]] && third="$HOME/.cargo/registry/src"
  [[ -n "${TREE_SRC:-}" ]] && third=$TREE_SRC
  cat <<EOF
cp -a /usr/share/doc $MNT/doc && cp -a /usr/share/man $MNT/man && sync && i=0 && for d in \$(ls -d $MNT/doc/* $MNT/man/*/* | sort); do if [ \$((i % 2)) = 1 ]; then rm -rf "\$d"; fi; i=\$((i + 1)); done && cp -a $third $MNT/third
EOF
}
wl_fsmark_small() {
  # 8 threads (one per directory), fsync before close; 4, 16, 64 KiB files kept, then every
  # third file deleted, then 8 and 32 KiB files.
  local d="" i n=() c
  for i in $(seq 0 $((${FSMARK_DIRS:-8} - 1))); do d+=" -d $MNT/$(printf "\\x$(printf %x $((97 + i)))")"; done
  for c in 1200 800 300 600 300; do n+=($((c * ${FSMARK_SCALE:-100} / 100))); done
  cat <<EOF
cd $WORK && fs_mark$d -D 8 -n ${n[0]} -s 4096 -S 1 -k -L 1 >/dev/null && fs_mark$d -D 8 -n ${n[1]} -s 16384 -S 1 -k -L 1 >/dev/null && fs_mark$d -D 8 -n ${n[2]} -s 65536 -S 1 -k -L 1 >/dev/null && find $MNT -type f | sort | awk 'NR % 3 == 0' | xargs rm -f && fs_mark$d -D 8 -n ${n[3]} -s 8192 -S 1 -k -L 1 >/dev/null && fs_mark$d -D 8 -n ${n[4]} -s 32768 -S 1 -k -L 1 >/dev/null
EOF
}
wl_dbench() {
  echo "dbench -c $DBENCH_LOAD -D $MNT -t 10 4 >/dev/null"
}
wl_fio_randwrite_fsync() {
  echo "fio --name=rw --directory=$MNT --rw=randwrite --bs=4k --ioengine=psync --direct=0 --size=48M --numjobs=4 --fallocate=none --fsync=32 --group_reporting >/dev/null"
}
wl_git_checkout() {
  log "git-checkout: making the source repository in $WORK/gitsrc"
  "$PY" "$WORK/make-git-history.py" "$WORK/gitsrc" 150
  cat <<EOF
git clone -q --no-local --no-checkout $WORK/gitsrc $MNT/repo && cd $MNT/repo && for c in \$(git rev-list --reverse main); do git checkout -q -f --detach \$c && sync; done
EOF
}
wl_sqlite_wal() {
  echo "mkdir $MNT/db && $PY $WORK/sqlite-load.py $MNT/db/test.db wal 3000"
}
wl_sqlite_journal() {
  echo "mkdir $MNT/db && $PY $WORK/sqlite-load.py $MNT/db/test.db delete 3000"
}
wl_mixed_lifetimes() {
  local w=${MIXED_WRITERS:-1} steps=${MIXED_STEPS:-4000} seed=${MIXED_SEED:-7} life=${MIXED_MAXLIFE:-4096} i cmd=""
  if [[ $w == 1 && $steps == 4000 && $seed == 7 && $life == 4096 ]]; then
    echo "$PY $WORK/mixed-lifetimes.py $MNT 4000"   # the corpus's command, as recorded
    return
  fi
  for i in $(seq 0 $((w - 1))); do
    cmd+="mkdir $MNT/w$i && $PY $WORK/mixed-lifetimes.py $MNT/w$i $steps $((seed + i)) $life & "
  done
  echo "${cmd}wait"
}
wl_correlated_lifetimes() {
  local w=${CORR_WRITERS:-4} batches=${CORR_BATCHES:-60} seed=${CORR_SEED:-3} i cmd=""
  for i in $(seq 0 $((w - 1))); do
    cmd+="$PY $WORK/correlated-lifetimes.py $MNT $i $batches $seed & "
  done
  echo "${cmd}wait"
}
wl_aging_churn() {
  echo "$PY $WORK/aging-churn.py $MNT 80 2 11"
}
wl_full_churn() {
  echo "$PY $WORK/full-churn.py $MNT 5"
}

# ---------------------------------------------------------------- one run
LOOP="" IMG=""
cleanup() {
  if mountpoint -q "$MNT"; then umount "$MNT" || umount -l "$MNT" || true; fi
  if [[ -n "$LOOP" ]]; then losetup -d "$LOOP" || true; fi
  if [[ -n "$IMG" ]]; then rm -f "$IMG"; fi
  LOOP="" IMG=""
}
trap cleanup EXIT
trap 'exit 130' INT TERM

status=0
run_one() {
  local name=$1 fn="wl_${1//-/_}"
  declare -F "$fn" >/dev/null || { log "unknown workload $name (try --list)"; return 1; }
  IMG="$IMG_DIR/extalloc-corpus-$name.img"
  rm -f "$IMG"
  truncate -s "${SIZE:-4G}" "$IMG"
  mkfs.ext4 -F -q -E lazy_itable_init=0,lazy_journal_init=0 "$IMG"
  LOOP=$(losetup --find --show "$IMG")
  mount "$LOOP" "$MNT"
  local cmd out="$OUTDIR/$name.trace.txt.gz" t0 t1 errlog="$WORK/$name.capture.err"
  cmd=$("$fn")
  cmd="$cmd; sync"
  log "$name: running on $LOOP: $cmd"
  t0=$(date +%s.%N)
  if [[ "$CAPTURE" != 0 ]]; then
    # tee so capture's warnings are both shown and checked
    "$EXTALLOC" capture --dev "$LOOP" --out "$out" -- sh -c "$cmd" 2> >(tee "$errlog" >&2)
    sleep 0.2
  else
    sh -c "$cmd"
    : >"$errlog"
  fi
  t1=$(date +%s.%N)
  # "after": average extents per regular file, then free space after unmounting
  local ff files extents
  ff=$(find "$MNT" -xdev -type f -print0 | xargs -0 -r filefrag |
    awk '{ n++; e += $(NF-2) } END { printf "%d %d", n, e }')
  read -r files extents <<<"$ff"
  umount "$MNT"
  local fr free_blocks free_extents largest
  fr=$(e2freefrag "$LOOP")
  free_blocks=$(awk '/^Free blocks:/ { print $3 }' <<<"$fr")
  free_extents=$(awk '/^Num\. free extent:/ { print $4 }' <<<"$fr")
  largest=$(awk '/^Max\. free extent:/ { print $4 }' <<<"$fr")
  losetup -d "$LOOP"
  LOOP=""
  rm -f "$IMG"
  IMG=""
  local per
  per=$(awk -v e="$extents" -v n="$files" 'BEGIN { if (n) printf "%.2f", e / n; else print "-" }')
  local secs
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  if [[ "$CAPTURE" != 0 ]]; then
    local lines size allocs frees commits header warn=""
    header=$(zcat "$out" | head -1 || true)
    lines=$(zcat "$out" | wc -l)
    size=$(stat -c %s "$out")
    allocs=$(zcat "$out" | grep -c ' ext4_allocate_blocks:' || true)
    frees=$(zcat "$out" | grep -c ' ext4_free_blocks:' || true)
    commits=$(zcat "$out" | grep -c ' jbd2_end_commit:' || true)
    [[ "$header" == *"block_size "*"group_blocks "* ]] || warn+=" NO-GEOMETRY"
    ((allocs > 0)) || warn+=" NO-ALLOCATIONS"
    ((commits > 0)) || warn+=" NO-COMMITS"
    grep -q 'overran' "$errlog" && warn+=" OVERRUN"
    [[ -z "$warn" ]] || status=1
    log "$name: ${secs}s, $lines lines, $size bytes; $allocs allocate, $frees free, $commits commits;" \
      "$files files, $extents extents; $free_blocks free blocks in $free_extents extents, largest ${largest} KB${warn:+; WARNING:$warn}"
    printf '| `%s` | %s | %s KB | %s | %s | %s | %s |%s\n' "$(basename "$out")" "$lines" \
      "$(awk -v s="$size" 'BEGIN { printf "%.0f", s / 1024 }')" "$files" "$per" "$free_extents" "$largest" "${warn:+ $warn}"
  else
    log "$name: ${secs}s (dry run); $files files, $extents extents; $free_blocks free blocks in $free_extents extents, largest ${largest} KB"
    printf '| %s | - | - | %s | %s | %s | %s |\n' "$name" "$files" "$per" "$free_extents" "$largest"
  fi
}

names=("$@")
((${#names[@]})) || names=("${ALL[@]}")
echo "| trace | lines | gzip | files | extents/file | free extents | largest free KiB |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for n in "${names[@]}"; do
  run_one "$n"
done
exit $status
