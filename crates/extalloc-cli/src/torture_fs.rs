//! `extalloc torture --fs`: namespace changes of the file system (`extalloc_fuse::fs::Fs`,
//! no FUSE needed) from several threads on a fault-injecting device, crashes at random
//! write boundaries, and after each recovery a check against a model.
//!
//! Each thread owns a directory `/tN` and works only below it, so that its model is its
//! own while its calls race the other threads' and the writeback contexts' commits. Its
//! operations: create (with data), mkdir, symlink, write, truncate, link, unlink, rmdir,
//! rename (to a free name, over a file, over an empty directory, across directories),
//! `RENAME_EXCHANGE`, fsync of a file or a directory, and sync. After every operation the
//! model records the thread's tree (directory -> name -> inode) as a *state*.
//!
//! A round ends in a crash at a write boundary: the device lets 0 to a few hundred more
//! writes through, then fails every write (the threads stop at their first error), or the
//! threads stop on their own and power is lost with nothing failing. The crash drops the
//! unflushed writes, or keeps a random part of them and tears one. Then the volume is
//! opened, the file system mounted (its repairs counted), and for every thread:
//!
//! - the tree read back must be one of the thread's states from the last one a
//!   successful sync made durable (the operations finished before that sync started) to
//!   the last one it started: every name made durable is there, an operation in flight is
//!   all or nothing (`names_lost` otherwise);
//! - every inode's link count as recorded must agree with the names found: mount repairs
//!   none (`wrong_link_counts`), and no inode is found without a name but with links
//!   (`unnamed`: mount would move it to /lost+found);
//! - a file whose data this thread synced after its last write reads exactly as synced
//!   (`data_mismatches`);
//! - after an unmount, `fsck`'s namespace check of the volume is clean (`fsck_dirty`).
//!
//! The models then take what was read back and the rounds go on on the same device.

use anyhow::{bail, Context, Result};
use extalloc::disk::device::{Crash, FaultDevice, MemDevice};
use extalloc::volume::Volume;
use extalloc::writeback::WritebackOptions;
use extalloc::{Geometry, Policy};
use extalloc_fuse::fs::data::SetAttr;
use extalloc_fuse::fs::names::{NewNode, RENAME_EXCHANGE};
use extalloc_fuse::fs::{Caller, Errno, Fs, ROOT};
use extalloc_fuse::inode::Kind;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// The verdict: every count but the first seven must be zero.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct FsOutcome {
    pub crashes: u64,
    pub operations: u64,
    pub syncs: u64,
    /// Directory trees checked against a model (one per thread per crash).
    pub trees_checked: u64,
    /// Files whose synced data was read back.
    pub files_checked: u64,
    /// Orphans (link count 0) mount removed: files unlinked or replaced whose last step
    /// had not run.
    pub orphans_reaped: u64,
    /// Directory logs whose torn tail mount cut (a compaction cut short).
    pub logs_cut: u64,
    /// Trees that matched none of the states they may be in.
    pub names_lost: u64,
    /// Link counts mount had to set.
    pub wrong_link_counts: u64,
    /// Inodes with links that no name referred to (mount moves them to /lost+found).
    pub unnamed: u64,
    /// Entries naming nothing or a directory twice.
    pub bad_entries: u64,
    pub data_mismatches: u64,
    /// Namespace checks that were not clean after a repair and an unmount.
    pub fsck_dirty: u64,
    /// Calls that failed while the device worked.
    pub unexpected_errors: u64,
    pub seconds: f64,
}

impl FsOutcome {
    /// Everything that must be zero is.
    pub fn clean(&self) -> bool {
        self.names_lost
            + self.wrong_link_counts
            + self.unnamed
            + self.bad_entries
            + self.data_mismatches
            + self.fsck_dirty
            + self.unexpected_errors
            == 0
    }
}

/// A thread's tree: directory -> name -> inode.
type Tree = BTreeMap<u64, BTreeMap<Vec<u8>, u64>>;

const ME: Caller = Caller { uid: 0, gid: 0 };
/// The inode of an entry whose make failed with the device: any inode, or none.
const ANY: u64 = u64::MAX;
/// Names a thread's directories use.
const NAMES: u32 = 10;
/// Inodes a thread keeps at most: the tree stays the size of a busy directory, not of a
/// device (rounds go on for thousands of crashes on one device).
const MAX_INODES: usize = 64;
/// Operations a thread makes in a round at most.
const MAX_OPS: u32 = 80;

/// One thread's model.
#[derive(Debug, Clone)]
struct Model {
    /// The thread's own directory.
    top: u64,
    tree: Tree,
    kinds: HashMap<u64, Kind>,
    /// What a file holds, as written.
    data: HashMap<u64, Vec<u8>>,
    /// Files whose data a sync of this thread made durable, with that data.
    synced: HashMap<u64, Vec<u8>>,
    /// The tree after each operation of the round (the first: at its start).
    states: Vec<Tree>,
    /// States up to this index are durable (a successful sync started after them).
    durable: usize,
}

/// How many states each thread had finished, published for syncs to read at their start.
struct Progress {
    done: Vec<AtomicU64>,
    /// For each thread, the highest state count a finished sync started after.
    durable: Mutex<Vec<u64>>,
}

/// Runs `crashes` rounds with `threads` threads from `seed`.
pub fn run(crashes: u64, seed: u64, threads: usize) -> Result<FsOutcome> {
    let started = Instant::now();
    let mut out = FsOutcome::default();
    let dev = Arc::new(FaultDevice::new(MemDevice::new(16384 * 4096), seed));
    let geometry = Geometry::new(4096, 2048, 16384)?;
    let vol = Volume::mkfs(dev.clone(), &geometry, 512, Policy::default())?;
    let (mut fs, _) = Fs::mount(vol, opts()).map_err(anyhow::Error::msg)?;
    let mut models = Vec::new();
    for t in 0..threads {
        let top = make(&fs, ROOT, format!("t{t}").as_bytes(), Kind::Dir)?;
        models.push(Model::new(top));
    }
    fs.sync().map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut rng = StdRng::seed_from_u64(seed);
    for round in 0..crashes {
        let round_seed = rng.gen();
        models = run_round(&fs, &dev, models, round_seed, &mut out)?;
        drop(fs);
        let how = match rng.gen_range(0..3) {
            0 => Crash::DropAll,
            1 => Crash::Random {
                keep: 0.5,
                tear: true,
            },
            _ => Crash::Random {
                keep: 0.9,
                tear: true,
            },
        };
        dev.crash(how)?;
        out.crashes += 1;
        fs = recover(&dev, &mut models, &mut out).with_context(|| format!("round {round}"))?;
        if crashes >= 20 && (round + 1) % (crashes / 20) == 0 {
            eprintln!(
                "torture --fs: {}/{crashes} crashes, {} operations, {:.0} s",
                round + 1,
                out.operations,
                started.elapsed().as_secs_f64()
            );
        }
    }
    fs.unmount().map_err(anyhow::Error::msg)?;
    out.seconds = started.elapsed().as_secs_f64();
    Ok(out)
}

fn opts() -> WritebackOptions {
    WritebackOptions {
        dirty_limit_bytes: 2 << 20,
        ..WritebackOptions::default()
    }
}

/// One round: the threads work until they stop or the device fails them.
fn run_round(
    fs: &Fs,
    dev: &FaultDevice<MemDevice>,
    models: Vec<Model>,
    seed: u64,
    out: &mut FsOutcome,
) -> Result<Vec<Model>> {
    let mut rng = StdRng::seed_from_u64(seed);
    if rng.gen_bool(0.8) {
        dev.fail_after(rng.gen_range(0..400));
    }
    let progress = Progress {
        done: models.iter().map(|_| AtomicU64::new(1)).collect(),
        durable: Mutex::new(vec![1; models.len()]),
    };
    let counts = Mutex::new((0u64, 0u64, 0u64)); // operations, syncs, unexpected errors
    let healthy = AtomicU64::new(1);
    let working = AtomicU64::new(models.len() as u64);
    let models = std::thread::scope(|s| {
        // A committer: syncs race the workers' changes (as the kernel's writeback and
        // other processes' fsyncs do), so a commit may fall anywhere inside one.
        s.spawn(|| {
            while working.load(Relaxed) > 0 {
                let marks = progress.marks();
                if fs.sync().is_ok() {
                    progress.durable_from(marks);
                }
                std::thread::yield_now();
            }
        });
        let handles: Vec<_> = models
            .into_iter()
            .enumerate()
            .map(|(t, m)| {
                let seed = rng.gen::<u64>() ^ t as u64;
                let (progress, counts, healthy, working) = (&progress, &counts, &healthy, &working);
                s.spawn(move || {
                    let m = worker(fs, t, m, seed, progress, counts, healthy);
                    working.fetch_sub(1, Relaxed);
                    m
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a torture thread panicked"))
            .collect::<Vec<Model>>()
    });
    let (ops, syncs, unexpected) = *counts.lock();
    out.operations += ops;
    out.syncs += syncs;
    out.unexpected_errors += unexpected;
    let durable = progress.durable.lock().clone();
    Ok(models
        .into_iter()
        .zip(durable)
        .map(|(mut m, d)| {
            m.durable = d as usize - 1;
            m
        })
        .collect())
}

/// One thread's round: random operations until one fails or the round's count is made.
fn worker(
    fs: &Fs,
    t: usize,
    mut m: Model,
    seed: u64,
    progress: &Progress,
    counts: &Mutex<(u64, u64, u64)>,
    healthy: &AtomicU64,
) -> Model {
    let mut rng = StdRng::seed_from_u64(seed);
    m.states = vec![m.tree.clone()];
    m.durable = 0;
    let ops = rng.gen_range(1..=MAX_OPS);
    for _ in 0..ops {
        let result = step(fs, &mut m, &mut rng, progress);
        m.states.push(m.tree.clone());
        progress.done[t].store(m.states.len() as u64, Relaxed);
        let mut c = counts.lock();
        c.0 += 1;
        match result {
            Ok(synced) => c.1 += u64::from(synced),
            Err(e) => {
                // The device failing: the operation may or may not have happened, and
                // the volume may have stopped committing. Stop here.
                if healthy.load(Relaxed) == 1 && !failing(e) {
                    c.2 += 1;
                    eprintln!("torture --fs: thread {t}: unexpected error {e}");
                }
                break;
            }
        }
    }
    m
}

/// `EIO`.
const EIO: i32 = 5;

/// An error the failing device explains (EIO, or the abort that follows one).
fn failing(e: Errno) -> bool {
    e.0 == EIO
}

impl Model {
    fn new(top: u64) -> Model {
        let mut tree = Tree::new();
        tree.insert(top, BTreeMap::new());
        Model {
            top,
            tree,
            kinds: HashMap::from([(top, Kind::Dir)]),
            data: HashMap::new(),
            synced: HashMap::new(),
            states: Vec::new(),
            durable: 0,
        }
    }

    fn dirs(&self) -> Vec<u64> {
        self.tree.keys().copied().collect()
    }

    /// Every (directory, name, inode) of the tree.
    fn entries(&self) -> Vec<(u64, Vec<u8>, u64)> {
        self.tree
            .iter()
            .flat_map(|(&d, e)| e.iter().map(move |(n, &i)| (d, n.clone(), i)))
            .collect()
    }

    /// Is `ino` the directory `top` or below it?
    fn below(&self, ino: u64, top: u64) -> bool {
        ino == top
            || self
                .tree
                .get(&top)
                .is_some_and(|e| e.values().any(|&c| self.below(ino, c)))
    }

    fn names_of(&self, ino: u64) -> usize {
        self.tree
            .values()
            .map(|e| e.values().filter(|&&i| i == ino).count())
            .sum()
    }

    /// Drops what no name refers to any more.
    fn forget_unnamed(&mut self, ino: u64) {
        if self.names_of(ino) == 0 {
            self.kinds.remove(&ino);
            self.data.remove(&ino);
            self.synced.remove(&ino);
            self.tree.remove(&ino);
        }
    }
}

fn pick<T: Clone>(rng: &mut StdRng, v: &[T]) -> Option<T> {
    (!v.is_empty()).then(|| v[rng.gen_range(0..v.len())].clone())
}

fn name(rng: &mut StdRng) -> Vec<u8> {
    format!("n{}", rng.gen_range(0..NAMES)).into_bytes()
}

fn pattern(rng: &mut StdRng) -> Vec<u8> {
    let len = rng.gen_range(0..3 * 4096 + 100);
    let b: u8 = rng.gen_range(1..=255);
    (0..len).map(|i| b.wrapping_add((i / 512) as u8)).collect()
}

fn make(fs: &Fs, parent: u64, name: &[u8], kind: Kind) -> Result<u64, Errno> {
    let target = (kind == Kind::Symlink).then_some(&b"target/of/a/link"[..]);
    let new = NewNode {
        kind,
        mode: 0o755,
        umask: 0o022,
        rdev: 0,
        target,
    };
    let ino = fs.make(parent, name, new, ME)?.ino;
    fs.forget(ino, 1);
    Ok(ino)
}

/// One random operation, applied to the file system and then to the model; true for a
/// successful sync or fsync.
fn step(fs: &Fs, m: &mut Model, rng: &mut StdRng, progress: &Progress) -> Result<bool, Errno> {
    let dir = pick(rng, &m.dirs()).expect("the top directory");
    let n = name(rng);
    let entries = m.entries();
    let files: Vec<u64> = m
        .kinds
        .iter()
        .filter(|(_, &k)| k == Kind::File)
        .map(|(&i, _)| i)
        .collect();
    // Each arm calls the file system, then changes the model whatever the call returned:
    // a call the failing device cut short may have happened, so the last state allows it.
    match rng.gen_range(0..100) {
        0..=19 => {
            if m.tree[&dir].contains_key(&n) || m.kinds.len() >= MAX_INODES {
                return Ok(false);
            }
            let kind = match rng.gen_range(0..10) {
                0..=5 => Kind::File,
                6..=8 => Kind::Dir,
                _ => Kind::Symlink,
            };
            let made = make(fs, dir, &n, kind);
            let ino = *made.as_ref().unwrap_or(&ANY);
            m.tree.get_mut(&dir).unwrap().insert(n, ino);
            made?;
            m.kinds.insert(ino, kind);
            match kind {
                Kind::Dir => {
                    m.tree.insert(ino, BTreeMap::new());
                }
                Kind::File => {
                    m.data.insert(ino, Vec::new());
                }
                _ => {}
            }
        }
        20..=31 => {
            let Some(ino) = pick(rng, &files) else {
                return Ok(false);
            };
            let data = pattern(rng);
            m.synced.remove(&ino);
            let old = m.data.get_mut(&ino).unwrap();
            if old.len() < data.len() {
                old.resize(data.len(), 0);
            }
            old[..data.len()].copy_from_slice(&data);
            fs.write(ino, 0, &data, false)?;
        }
        32..=36 => {
            let Some(ino) = pick(rng, &files) else {
                return Ok(false);
            };
            let size = rng.gen_range(0..2 * 4096 + 10);
            m.synced.remove(&ino);
            m.data.get_mut(&ino).unwrap().resize(size as usize, 0);
            let set = SetAttr {
                size: Some(size),
                ..SetAttr::default()
            };
            fs.setattr(ino, set, ME)?;
        }
        37..=44 => {
            let Some(ino) = pick(rng, &files) else {
                return Ok(false);
            };
            if m.tree[&dir].contains_key(&n) {
                return Ok(false);
            }
            let linked = fs.link(ino, dir, &n);
            m.tree.get_mut(&dir).unwrap().insert(n, ino);
            fs.forget(linked?.ino, 1);
        }
        45..=56 => {
            let Some((d, nm, ino)) = pick(rng, &entries) else {
                return Ok(false);
            };
            let removed = if m.kinds[&ino] == Kind::Dir {
                if !m.tree[&ino].is_empty() {
                    return Ok(false);
                }
                fs.rmdir(d, &nm)
            } else {
                fs.unlink(d, &nm)
            };
            m.tree.get_mut(&d).unwrap().remove(&nm);
            m.forget_unnamed(ino);
            removed?;
        }
        57..=76 => return rename(fs, m, rng, &entries, dir, n),
        77..=84 => {
            let Some((d1, n1, i1)) = pick(rng, &entries) else {
                return Ok(false);
            };
            let Some((d2, n2, i2)) = pick(rng, &entries) else {
                return Ok(false);
            };
            // A directory may not move below itself.
            let loops = (m.kinds[&i1] == Kind::Dir && m.below(d2, i1))
                || (m.kinds[&i2] == Kind::Dir && m.below(d1, i2));
            if loops || (d1, &n1) == (d2, &n2) {
                return Ok(false);
            }
            let swapped = fs.rename(d1, &n1, d2, &n2, RENAME_EXCHANGE);
            m.tree.get_mut(&d1).unwrap().insert(n1, i2);
            m.tree.get_mut(&d2).unwrap().insert(n2, i1);
            swapped?;
        }
        85..=92 => {
            let ino = pick(rng, &files).unwrap_or(dir);
            let marks = progress.marks();
            fs.fsync(ino)?;
            progress.durable_from(marks);
            // An fsync commits every namespace change, but writes back only its file.
            if let Some(d) = m.data.get(&ino) {
                m.synced.insert(ino, d.clone());
            }
            return Ok(true);
        }
        _ => {
            let marks = progress.marks();
            fs.sync()?;
            progress.durable_from(marks);
            m.synced = m.data.clone();
            return Ok(true);
        }
    }
    Ok(false)
}

impl Progress {
    /// How many states each thread has finished, read as a sync starts.
    fn marks(&self) -> Vec<u64> {
        self.done.iter().map(|d| d.load(Relaxed)).collect()
    }

    /// A sync that started at `marks` succeeded: those states are durable.
    fn durable_from(&self, marks: Vec<u64>) {
        let mut durable = self.durable.lock();
        for (d, mark) in durable.iter_mut().zip(marks) {
            *d = (*d).max(mark);
        }
    }
}

/// A rename of an entry to `(dir, n)`: a free name, over a file, over an empty directory.
fn rename(
    fs: &Fs,
    m: &mut Model,
    rng: &mut StdRng,
    entries: &[(u64, Vec<u8>, u64)],
    dir: u64,
    n: Vec<u8>,
) -> Result<bool, Errno> {
    let Some((d, nm, ino)) = pick(rng, entries) else {
        return Ok(false);
    };
    let is_dir = m.kinds[&ino] == Kind::Dir;
    if is_dir && m.below(dir, ino) {
        return Ok(false);
    }
    let dst = m.tree[&dir].get(&n).copied();
    if let Some(x) = dst {
        let x_dir = m.kinds[&x] == Kind::Dir;
        if x_dir != is_dir || (x_dir && !m.tree[&x].is_empty()) {
            return Ok(false);
        }
    }
    let moved = fs.rename(d, &nm, dir, &n, 0);
    if dst != Some(ino) {
        m.tree.get_mut(&d).unwrap().remove(&nm);
        m.tree.get_mut(&dir).unwrap().insert(n, ino);
        if let Some(x) = dst {
            m.forget_unnamed(x);
        }
    }
    moved.map(|()| false)
}

/// Opens the crashed device, mounts, and checks every thread's tree, link counts and
/// synced data; then an unmount, a namespace check, and a mount for the next round.
fn recover(
    dev: &Arc<FaultDevice<MemDevice>>,
    models: &mut [Model],
    out: &mut FsOutcome,
) -> Result<Fs> {
    let vol = Volume::open(dev.clone(), Policy::default()).context("open after a crash")?;
    let (fs, report) = Fs::mount(vol, opts()).map_err(anyhow::Error::msg)?;
    let r = &report.repaired;
    out.orphans_reaped += r.orphans.len() as u64;
    out.unnamed += (r.unnamed.len() + r.lost_found.len()) as u64;
    out.wrong_link_counts += r.link_counts.len() as u64;
    out.bad_entries += r.bad_entries.len() as u64;
    out.logs_cut += r.logs.len() as u64;
    if !r.lost_found.is_empty() || !r.link_counts.is_empty() || !r.bad_entries.is_empty() {
        eprintln!("torture --fs: mount repaired {r:?}");
    }
    for (t, m) in models.iter_mut().enumerate() {
        let tree = read_tree(&fs, m.top).map_err(|e| anyhow::anyhow!("reading /t{t}: {e}"))?;
        out.trees_checked += 1;
        let last = m.states.len();
        if !m.states[m.durable.min(last - 1)..]
            .iter()
            .any(|s| same(s, &tree))
        {
            out.names_lost += 1;
            eprintln!(
                "torture --fs: /t{t} read back as none of its states {}..{last}",
                m.durable
            );
            for (i, s) in m.states.iter().enumerate().skip(m.durable) {
                eprintln!("  state {i}: {}", diff(s, &tree));
            }
        }
        check_links_and_data(&fs, m, &tree, out)?;
        adopt(&fs, m, tree)?;
    }
    fs.unmount().map_err(anyhow::Error::msg)?;
    let vol = Volume::open(dev.clone(), Policy::default())?;
    let check = extalloc_fuse::fs::check(&vol).map_err(anyhow::Error::msg)?;
    if !check.clean() {
        out.fsck_dirty += 1;
        eprintln!("torture --fs: the namespace check after a repair: {check:?}");
    }
    let (fs, _) = Fs::mount(vol, opts()).map_err(anyhow::Error::msg)?;
    Ok(fs)
}

/// Link counts as the file system reports them against the names read back, and the data
/// of files synced since their last write.
fn check_links_and_data(fs: &Fs, m: &Model, tree: &Tree, out: &mut FsOutcome) -> Result<()> {
    let mut names: HashMap<u64, u32> = HashMap::new();
    for e in tree.values() {
        for &i in e.values() {
            *names.entry(i).or_default() += 1;
        }
    }
    for (&ino, &count) in &names {
        let a = fs
            .getattr(ino)
            .map_err(|e| anyhow::anyhow!("stat {ino}: {e}"))?;
        let want = match tree.get(&ino) {
            Some(e) => 2 + e.values().filter(|i| tree.contains_key(i)).count() as u32,
            None => count,
        };
        if a.inode.nlink != want {
            out.wrong_link_counts += 1;
            eprintln!(
                "torture --fs: inode {ino} has {} links, {want} names",
                a.inode.nlink
            );
        }
        if let Some(data) = m.synced.get(&ino) {
            out.files_checked += 1;
            let got = fs.read(ino, 0, data.len() as u32 + 4096);
            if got.as_deref() != Ok(&data[..]) {
                out.data_mismatches += 1;
                eprintln!("torture --fs: inode {ino}'s synced data reads back otherwise");
            }
        }
    }
    Ok(())
}

/// The model takes what was read back: the tree, kinds, and every file's data.
fn adopt(fs: &Fs, m: &mut Model, tree: Tree) -> Result<()> {
    let mut kinds = HashMap::from([(m.top, Kind::Dir)]);
    let mut data = HashMap::new();
    for e in tree.values() {
        for &i in e.values() {
            let a = fs
                .getattr(i)
                .map_err(|e| anyhow::anyhow!("stat {i}: {e}"))?;
            kinds.insert(i, a.inode.kind);
            if a.inode.kind == Kind::File {
                let got = fs
                    .read(i, 0, a.size as u32)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                data.insert(i, got);
            }
        }
    }
    m.synced = data.clone();
    m.tree = tree;
    m.kinds = kinds;
    m.data = data;
    Ok(())
}

/// Is `tree` the state `s`? An entry of `s` naming [`ANY`] (a make the failing device cut
/// short) may be missing from `tree` or name any inode there (an empty directory too).
fn same(s: &Tree, tree: &Tree) -> bool {
    let mut s = s.clone();
    for (dir, entries) in s.clone() {
        for (name, ino) in entries {
            if ino != ANY {
                continue;
            }
            let slot = s.get_mut(&dir).expect("listed");
            match tree.get(&dir).and_then(|e| e.get(&name)) {
                Some(&got) => {
                    slot.insert(name, got);
                    if tree.get(&got).is_some_and(|e| e.is_empty()) {
                        s.insert(got, BTreeMap::new());
                    }
                }
                None => {
                    slot.remove(&name);
                }
            }
        }
    }
    &s == tree
}

/// What `tree` has that `s` has not (+) and the other way round (-).
fn diff(s: &Tree, tree: &Tree) -> String {
    let flat = |t: &Tree| -> std::collections::BTreeSet<(u64, String, u64)> {
        t.iter()
            .flat_map(|(&d, e)| {
                e.iter()
                    .map(move |(n, &i)| (d, String::from_utf8_lossy(n).into_owned(), i))
            })
            .collect()
    };
    let (a, b) = (flat(s), flat(tree));
    let plus: Vec<_> = b.difference(&a).collect();
    let minus: Vec<_> = a.difference(&b).collect();
    format!("read back +{plus:?} -{minus:?}")
}

/// The tree below `top` as the file system lists it.
fn read_tree(fs: &Fs, top: u64) -> Result<Tree, Errno> {
    let mut tree = Tree::new();
    let mut todo = vec![top];
    while let Some(dir) = todo.pop() {
        let fh = fs.opendir(dir)?;
        let mut entries = BTreeMap::new();
        let mut kinds = Vec::new();
        fs.readdir(fh, 0, |name, ino, kind, _| {
            if name != b"." && name != b".." {
                entries.insert(name.to_vec(), ino);
                kinds.push((ino, kind));
            }
            false
        })?;
        fs.releasedir(fh);
        todo.extend(
            kinds
                .iter()
                .filter(|(_, k)| *k == Kind::Dir)
                .map(|(i, _)| *i),
        );
        tree.insert(dir, entries);
    }
    Ok(tree)
}

/// A quick run for the tests: fails with what it found.
pub fn check_run(crashes: u64, seed: u64, threads: usize) -> Result<FsOutcome> {
    let out = run(crashes, seed, threads)?;
    if !out.clean() {
        bail!("namespace torture failed: {out:?}");
    }
    Ok(out)
}
