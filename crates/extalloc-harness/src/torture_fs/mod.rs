//! `extalloc torture --fs`: namespace changes of the file system (`extalloc_fuse::fs::Fs`,
//! no FUSE needed) from several threads on a fault-injecting device, crashes at random
//! write boundaries, and after each recovery a check against a model.
//!
//! Each thread owns a directory `/tN` and works only below it, so that its model is its
//! own while its calls race the other threads' and the writeback contexts' commits. Its
//! operations: create (with data), mkdir, symlink, write, truncate, link, unlink, rmdir,
//! rename (to a free name, over a file, over an empty directory, across directories),
//! `RENAME_EXCHANGE`, setting and removing extended attributes (small ones in the inode,
//! large ones in a spill file), unlink of a file's only name while it stays open (written
//! and read after, closed at a later step or held across the crash), fsync of a file or a
//! directory, and sync. After every operation the
//! model records the thread's tree (directory -> name -> inode) as a *state*.
//!
//! A round ends in a crash at a write boundary: the device lets 0 to a few hundred more
//! writes through, then fails every write (the threads stop at their first error, eight
//! rounds in ten), or its next flush fails as Linux's does (the writes it covered
//! forgotten, the error reported once, later flushes working: the store must latch, and
//! no later sync may succeed over what was forgotten; one round in ten), or the threads
//! stop on their own and power is lost with nothing failing. The crash drops the
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
//!   (`data_mismatches`), and an inode whose extended attributes it synced after their
//!   last change lists and reads exactly that set (`xattr_mismatches`);
//! - after an unmount, `fsck`'s namespace check of the volume is clean and every block
//!   has its one owner, none leaked (`fsck_dirty`).
//!
//! The models then take what was read back and the rounds go on on the same device.
//!
//! Files: this one holds the rounds and the checks after each crash; `model.rs` a thread's
//! model and the trees read back; `ops.rs` the operations, each applied to the file system
//! and then to the model; `progress.rs` the states each thread finished, which syncs
//! read (shared by the rounds and the operations).

mod model;
mod ops;
mod progress;

use anyhow::{Context, Result};
use extalloc::disk::device::{Crash, FaultDevice, MemDevice};
use extalloc::volume::Volume;
use extalloc::writeback::WritebackOptions;
use extalloc::{Geometry, Policy};
use extalloc_fuse::fs::{Errno, Fs, ROOT};
use extalloc_fuse::inode::Kind;
use model::{diff, read_tree, read_xattrs, same, Model, Tree};
use parking_lot::Mutex;
use progress::Progress;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// The verdict: every count but the first nine must be zero.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct FsOutcome {
    pub crashes: u64,
    pub operations: u64,
    pub syncs: u64,
    /// Directory trees checked against a model (one per thread per crash).
    pub trees_checked: u64,
    /// Files whose synced data was read back.
    pub files_checked: u64,
    /// Inodes whose synced extended attributes were read back.
    pub xattr_sets_checked: u64,
    /// Files unlinked while open that were still open at the crash (the mount after it
    /// must leave none behind: `unnamed`, `fsck_dirty`).
    pub held_at_crash: u64,
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
    /// Rounds whose device failed a flush as Linux does.
    pub failed_flushes: u64,
    /// Inodes whose synced extended attributes read back otherwise.
    pub xattr_mismatches: u64,
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
            + self.xattr_mismatches
            + self.fsck_dirty
            + self.unexpected_errors
            == 0
    }
}

/// Operations a thread makes in a round at most.
const MAX_OPS: u32 = 80;

/// Runs `crashes` rounds with `threads` threads from `seed`.
pub fn run(crashes: u64, seed: u64, threads: usize) -> Result<FsOutcome> {
    let started = Instant::now();
    let mut out = FsOutcome::default();
    let dev = Arc::new(FaultDevice::new(MemDevice::new(16384 * 4096), seed));
    let geometry = Geometry::new(4096, 2048, 16384)?;
    let vol = Volume::mkfs(dev.clone(), &geometry, 512, Policy::default())?;
    // One clean file kept in memory: the namespace's files are read back from the tree.
    vol.set_file_cache(1);
    let (mut fs, _) = Fs::mount(vol, opts()).map_err(anyhow::Error::msg)?;
    // And one node beyond those held otherwise: what the kernel alone holds is parked;
    // and no directory's entries beyond those a call holds: each sync shelves the rest,
    // which later calls read back from their logs.
    fs.set_node_cache(1);
    fs.set_dir_cache(0);
    small_compactions(&fs);
    let mut models = Vec::new();
    for t in 0..threads {
        let top = ops::make(&fs, ROOT, format!("t{t}").as_bytes(), Kind::Dir)?;
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

/// Directory logs compacted from 512 bytes, always into runs (`Fs::set_compaction`): the
/// torture's directories hold ten names at most, which a mount's defaults would never
/// compact, so crashes fall inside compactions and runs (cut short, whole, replayed) too.
pub(crate) fn small_compactions(fs: &Fs) {
    fs.set_compaction(512, 0);
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
    let flush_fault = match rng.gen_range(0..10) {
        0..8 => {
            dev.fail_after(rng.gen_range(0..400));
            false
        }
        8 => {
            dev.fail_flushes(1);
            true
        }
        _ => false,
    };
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
    if flush_fault {
        out.failed_flushes += u64::from(dev.flush_failures_left() == 0);
        dev.fail_flushes(0);
    }
    let (ops, syncs, unexpected) = *counts.lock();
    out.operations += ops;
    out.syncs += syncs;
    out.unexpected_errors += unexpected;
    out.held_at_crash += models.iter().map(|m| m.held.len() as u64).sum::<u64>();
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
    // The files the last round held open died with its file system.
    m.held.clear();
    let ops = rng.gen_range(1..=MAX_OPS);
    for _ in 0..ops {
        let result = ops::step(fs, &mut m, &mut rng, progress);
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

/// Opens the crashed device, mounts, and checks every thread's tree, link counts and
/// synced data; then an unmount, a namespace check, a check of every block's owner, and a
/// mount for the next round.
fn recover(
    dev: &Arc<FaultDevice<MemDevice>>,
    models: &mut [Model],
    out: &mut FsOutcome,
) -> Result<Fs> {
    let vol = Volume::open(dev.clone(), Policy::default()).context("open after a crash")?;
    vol.set_file_cache(1);
    let (fs, report) = Fs::mount(vol, opts()).map_err(anyhow::Error::msg)?;
    fs.set_node_cache(1);
    fs.set_dir_cache(0);
    small_compactions(&fs);
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
    // Who owns every block: an inode that died unnamed and open (a held file) must have
    // given its blocks back, none leaked or still mapped.
    let blocks = vol
        .check()
        .context("the volume's block check after a repair")?;
    if !blocks.clean() {
        out.fsck_dirty += 1;
        eprintln!("torture --fs: the block check after a repair: {blocks:?}");
    }
    let (fs, _) = Fs::mount(vol, opts()).map_err(anyhow::Error::msg)?;
    small_compactions(&fs);
    // After the clean close the mount reads the root only; the threads name directories
    // by number, as the kernel names what it looked up: look each tree up first, as a
    // program walking it after the mount would.
    for (t, m) in models.iter().enumerate() {
        let top = fs.lookup(ROOT, format!("t{t}").as_bytes());
        anyhow::ensure!(
            top.map(|a| a.ino) == Ok(m.top),
            "/t{t} after the remount: {top:?}"
        );
        read_tree(&fs, m.top).map_err(|e| anyhow::anyhow!("reading /t{t} again: {e}"))?;
    }
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
        if let Some(set) = m.xsynced.get(&ino) {
            out.xattr_sets_checked += 1;
            let got = read_xattrs(fs, ino).map_err(|e| anyhow::anyhow!("xattrs of {ino}: {e}"))?;
            if &got != set {
                out.xattr_mismatches += 1;
                eprintln!(
                    "torture --fs: inode {ino}'s synced extended attributes read back \
                     otherwise ({} names, {} expected)",
                    got.len(),
                    set.len()
                );
            }
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
    let mut xattrs = HashMap::new();
    for e in tree.values() {
        for &i in e.values() {
            let a = fs
                .getattr(i)
                .map_err(|e| anyhow::anyhow!("stat {i}: {e}"))?;
            kinds.insert(i, a.inode.kind);
            let set = read_xattrs(fs, i).map_err(|e| anyhow::anyhow!("xattrs of {i}: {e}"))?;
            if !set.is_empty() {
                xattrs.insert(i, set);
            }
            if a.inode.kind == Kind::File {
                let got = fs
                    .read(i, 0, a.size as u32)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                data.insert(i, got);
            }
        }
    }
    m.synced = data.clone();
    m.xsynced = xattrs.clone();
    m.xattrs = xattrs;
    m.tree = tree;
    m.kinds = kinds;
    m.data = data;
    Ok(())
}
