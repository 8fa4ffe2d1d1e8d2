//! Building one image: a file system made through `Fs` on a fault-injecting memory device
//! by a seeded run, with a model of what it must hold.
//!
//! The run: nested directories, regular files of many sizes (empty, under a block, many
//! blocks, sparse ones whose maps exceed the inline extents and live in map segments),
//! hard links, symbolic links (short and long targets), fifos, and on half the images a
//! large directory (about a thousand fifos, churned until its log is compacted into a run:
//! `docs/format.md`, "Directory runs"); a sync and a checkpoint; the *stale* snapshot of
//! the device; on the images with a large directory a clean remount (so that the changes
//! go through the run's view, and on half of them a compaction merges a new run with the
//! same key); changes (overwrites, appends, new files, unlinks, renames, a few in the
//! large directory), a sync and the last checkpoint; on some images more changes synced after it
//! (they live in the journal only), and on one image in four a checkpoint that a failing
//! device cuts short, then a power loss keeping a random part of the unflushed writes. On
//! another one in four the device first holds a *former* volume (`former.rs`: files
//! owned by `FORMER_UID`, unmounted cleanly) and the image's volume is made over it, as a
//! `mkfs` without discard leaves a device: no file of the former may ever be served.
//!
//! Data structures: [`Model`] (path -> kind, inode, bytes) kept as the run goes; [`Built`]
//! the image's bytes, the stale snapshot and the model. Invariant: the model holds what
//! the last successful sync made durable. Lock order: none (one thread).

use super::former::former;
use super::types::{opts, runs_in, seeded_mkfs, ME};
use anyhow::{bail, Context, Result};
use extalloc::disk::device::{Crash, Device, FaultDevice, MemDevice};
use extalloc::disk::format;
use extalloc::volume::Volume;
use extalloc::{Geometry, Policy};
use extalloc_fuse::fs::names::NewNode;
use extalloc_fuse::fs::{Caller, Fs, ROOT};
use extalloc_fuse::inode::Kind;
use rand::distributions::uniform::SampleRange;
use rand::rngs::StdRng;
use rand::Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The campaign's device: 16 MiB in 4 KiB blocks, 4 groups, a 1 MiB journal.
pub(super) const BLOCK: u64 = 4096;
pub(super) const BLOCKS: u64 = 4096;
const GROUP_BLOCKS: u64 = 1024;
const JOURNAL_BLOCKS: u64 = 256;

/// One name of the model: its inode, kind and bytes (a file's data, a link's target).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Named {
    pub(super) ino: u64,
    pub(super) kind: Kind,
    pub(super) bytes: Vec<u8>,
}

/// What the file system must hold: every path (`/` is the root) with what it names.
pub(super) type Model = BTreeMap<String, Named>;

/// A built image.
pub(super) struct Built {
    pub(super) bytes: Vec<u8>,
    /// The device as it was before the last checkpoint.
    pub(super) stale: Vec<u8>,
    pub(super) model: Model,
    pub(super) mid_checkpoint: bool,
    /// Changes were synced after the last checkpoint (the journal holds them).
    pub(super) journal_tail: bool,
    /// Unmounted cleanly (else dropped as a crash): the mount then reads only the root.
    pub(super) clean_close: bool,
    /// The inodes those changes touched (written, made, named, unnamed): what a damaged
    /// journal may cost, as a journal damaged in the middle loses the records from the
    /// damage on (`docs/mount.md`, "Damage and repair").
    pub(super) journal_touched: BTreeSet<u64>,
    /// Made over a former volume (`former.rs`).
    pub(super) over_former: bool,
    /// Holds a wide directory ([`WIDE_NAMES`]): a file tree of three levels.
    pub(super) deep_tree: bool,
}

/// The run that builds an image, with its model.
struct Run<'a> {
    dev: &'a Arc<FaultDevice<MemDevice>>,
    /// The mount (taken only while it is remounted).
    fs: Option<Fs>,
    rng: &'a mut StdRng,
    model: Model,
    serial: u32,
    /// The large directory's path, on the images that have one.
    large: Option<String>,
}

/// How many names the large directory is made with: a run needs 16 KiB of entries as
/// records (about 800 of these names).
const LARGE_NAMES: std::ops::Range<u32> = 900..1300;

/// The most creates and unlinks that may take to compact a large directory's log (it is
/// compacted at four times its live entries: about 2,000 of these rounds).
const CHURN_MOST: u32 = 8000;

/// How many fifos the wide directory of a deep-tree image is made with: enough for a file
/// tree of three levels (a leaf holds about 28 entries, an internal node 168 children:
/// `docs/format.md`, "The file tree"), so that damage to an internal node under the root
/// takes the repair's page path (a tree of two levels has only its root).
const WIDE_NAMES: std::ops::Range<u32> = 6000..9000;

/// Builds an image from `seed` (see the module documentation).
pub(super) fn build(seed: u64, mid_checkpoint: bool, rng: &mut StdRng) -> Result<Built> {
    let geometry = Geometry::new(BLOCK as u32, GROUP_BLOCKS, BLOCKS)?;
    let dev = Arc::new(FaultDevice::new(MemDevice::new(BLOCKS * BLOCK), seed));
    // Decided by a hash of the seed, not `rng` (the other images stay as they were), and
    // not by `seed % 4`: the campaign's seeds are `seed * 1000003 + i` and the images cut
    // mid-checkpoint are `i % 4 == 3`, so the two would coincide for one seed in four.
    let picked = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 62;
    let over_former = picked == 1;
    // Another one in four (the same hash, so the others stay as they were).
    let deep_tree = picked == 2;
    if over_former {
        former(&dev, (&geometry, JOURNAL_BLOCKS), seed).context("making the former volume")?;
    }
    let vol = seeded_mkfs(dev.clone(), (&geometry, JOURNAL_BLOCKS), seed)?;
    let (fs, _) = Fs::mount(vol, opts()).map_err(anyhow::Error::msg)?;
    let mut model = Model::new();
    model.insert("/".into(), named(ROOT, Kind::Dir, Vec::new()));
    let mut run = Run {
        dev: &dev,
        fs: Some(fs),
        rng,
        model,
        serial: 0,
        large: None,
    };
    run.populate().context("populating")?;
    if deep_tree {
        run.wide_dir().context("making the wide directory")?;
    }
    run.durable(true)?;
    let stale = snapshot(dev.as_ref())?;
    if run.large.is_some() {
        // A mount after a clean close reads the large directory through its run's view,
        // so the changes below go through it (a compaction then merges, keeping the key).
        run.remount().context("remounting")?;
    }
    run.change().context("changing")?;
    run.durable(true)?;
    let journal_tail = mid_checkpoint || run.rng.gen_bool(0.5);
    let mut journal_touched = BTreeSet::new();
    if journal_tail {
        let before = run.model.clone();
        run.change().context("changing after the last checkpoint")?;
        run.durable(false)?;
        journal_touched = touched(&before, &run.model);
    }
    let model = std::mem::take(&mut run.model);
    let fs = run.fs.take().expect("mounted");
    if mid_checkpoint {
        dev.fail_after(run.rng.gen_range(1..40));
        // Expected to fail: the device stops taking writes part way.
        let _ = fs.volume().checkpoint();
    }
    let keep = run.rng.gen_bool(0.5);
    // Half the images with nothing left in the journal are unmounted cleanly, the same
    // state without a crash: their mount reads only the root, and meets the damage
    // where a call reads it.
    let clean_close = !journal_tail && run.rng.gen_bool(0.5);
    let before_promise = !clean_close && !mid_checkpoint && run.rng.gen_bool(0.5);
    if clean_close {
        fs.unmount().map_err(anyhow::Error::msg)?;
    } else {
        drop(fs);
        crash(dev.as_ref(), mid_checkpoint, keep, before_promise)?;
    }
    Ok(Built {
        bytes: snapshot(dev.as_ref())?,
        stale,
        model,
        mid_checkpoint,
        journal_tail,
        clean_close,
        journal_touched,
        over_former,
        deep_tree,
    })
}

/// The power loss that ends an image not unmounted cleanly: the unflushed writes torn
/// (`keep`) or kept at random where a checkpoint was cut short, else all dropped; with
/// `before_promise`, the superblock then left as a build before the store's promise
/// leaves it (`INCOMPAT_CRASH_PENDING` off): its mount counts the namespace after the
/// crash, meets the damage and reads it all (the rescue into /lost+found). The rest mount
/// as a crash the promise covers: the root only, the damage met where a call reads it.
/// (Not the images cut mid-checkpoint: their superblocks are the crash's.)
fn crash(
    dev: &FaultDevice<MemDevice>,
    mid_checkpoint: bool,
    keep: bool,
    before_promise: bool,
) -> Result<()> {
    debug_assert!(
        !(mid_checkpoint && before_promise),
        "a cut checkpoint's superblock"
    );
    dev.crash(if mid_checkpoint {
        Crash::Random {
            keep: 0.5,
            tear: keep,
        }
    } else {
        Crash::DropAll
    })?;
    if before_promise {
        let mut sb = format::read_superblock(dev)?;
        sb.incompat &= !format::INCOMPAT_CRASH_PENDING;
        sb.generation += 1;
        format::write_superblock(dev, &sb)?;
        dev.flush()?;
    }
    Ok(())
}

/// The inodes whose names or bytes differ between two models.
fn touched(before: &Model, after: &Model) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    for path in before.keys().chain(after.keys()) {
        let (b, a) = (before.get(path), after.get(path));
        if b != a {
            out.extend(b.iter().chain(a.iter()).map(|n| n.ino));
        }
    }
    out
}

/// A fifo, as the large directory's churn makes them.
const FIFO: NewNode<'static> = NewNode {
    kind: Kind::Fifo,
    mode: 0o644,
    umask: 0o022,
    rdev: 0,
    target: None,
};

fn named(ino: u64, kind: Kind, bytes: Vec<u8>) -> Named {
    Named { ino, kind, bytes }
}

/// The device's bytes.
fn snapshot(dev: &dyn Device) -> Result<Vec<u8>> {
    let mut bytes = vec![0u8; dev.size() as usize];
    dev.read_at(&mut bytes, 0)?;
    Ok(bytes)
}

/// Fs's errors as anyhow's.
fn fs_err(what: &str) -> impl Fn(extalloc_fuse::fs::Errno) -> anyhow::Error + '_ {
    move |e| anyhow::anyhow!("{what}: {e}")
}

impl Run<'_> {
    /// The mount.
    fn fs(&self) -> &Fs {
        self.fs.as_ref().expect("mounted")
    }

    /// Unmounts cleanly and mounts again (the mount reads the root only), then looks up
    /// every directory of the model by its path, as the kernel would reach them.
    fn remount(&mut self) -> Result<()> {
        let fs = self.fs.take().expect("mounted");
        fs.unmount().map_err(anyhow::Error::msg)?;
        let dev: Arc<dyn Device> = self.dev.clone();
        let vol = Volume::open(dev, Policy::default())?;
        self.fs = Some(Fs::mount(vol, opts()).map_err(anyhow::Error::msg)?.0);
        for (path, _) in self.dirs() {
            let mut at = ROOT;
            for name in path.split('/').filter(|n| !n.is_empty()) {
                let found = self.fs().lookup(at, name.as_bytes());
                at = found.map_err(fs_err(&path))?.ino;
                self.fs().forget(at, 1);
            }
        }
        Ok(())
    }

    /// Directories of the model, as (path, inode).
    fn dirs(&self) -> Vec<(String, u64)> {
        self.model
            .iter()
            .filter(|(_, n)| n.kind == Kind::Dir)
            .map(|(p, n)| (p.clone(), n.ino))
            .collect()
    }

    /// Paths of the model naming `kind`.
    fn paths_of(&self, kind: Kind) -> Vec<String> {
        let paths = self.model.iter().filter(|(_, n)| n.kind == kind);
        paths.map(|(p, _)| p.clone()).collect()
    }

    /// A new name in a random directory: (parent inode, name, path).
    fn new_name(&mut self, what: &str) -> (u64, String, String) {
        let dirs = self.dirs();
        let (dir, ino) = dirs[self.rng.gen_range(0..dirs.len())].clone();
        self.serial += 1;
        let name = format!("{what}{}", self.serial);
        let path = format!("{}/{name}", dir.trim_end_matches('/'));
        (ino, name, path)
    }

    /// Makes a node of `kind` at a new name; returns its path.
    fn make(&mut self, kind: Kind, target: Option<Vec<u8>>) -> Result<String> {
        let what = match kind {
            Kind::Dir => "d",
            Kind::Symlink => "l",
            Kind::Fifo => "p",
            _ => "f",
        };
        let (parent, name, path) = self.new_name(what);
        self.make_at(parent, &name, path, kind, target)
    }

    /// Makes a node of `kind` named `name` in directory `parent` (whose path makes
    /// `path`); returns its path.
    fn make_at(
        &mut self,
        parent: u64,
        name: &str,
        path: String,
        kind: Kind,
        target: Option<Vec<u8>>,
    ) -> Result<String> {
        let new = NewNode {
            kind,
            mode: 0o644,
            umask: 0o022,
            rdev: 0,
            target: target.as_deref(),
        };
        let ino = self.fs().make(parent, name.as_bytes(), new, ME);
        let ino = ino.map_err(fs_err(&path))?.ino;
        self.fs().forget(ino, 1);
        let bytes = target.unwrap_or_default();
        self.model.insert(path.clone(), named(ino, kind, bytes));
        Ok(path)
    }

    /// Writes `data` at `offset` of the file at `path` (every name of it in the model).
    fn write(&mut self, path: &str, offset: u64, data: &[u8]) -> Result<()> {
        let ino = self.model[path].ino;
        self.fs()
            .write(ino, offset, data, false)
            .map_err(fs_err(path))?;
        // Written back now, in the run's order (a sync's writeback order is not the
        // run's, and the image must be the same for the same seed).
        self.fs().fsync(ino).map_err(fs_err(path))?;
        for n in self.model.values_mut().filter(|n| n.ino == ino) {
            let end = offset as usize + data.len();
            if n.bytes.len() < end {
                n.bytes.resize(end, 0);
            }
            n.bytes[offset as usize..end].copy_from_slice(data);
        }
        Ok(())
    }

    /// Bytes of a length in `len`, in a pattern of the run.
    fn pattern(&mut self, len: impl SampleRange<usize>) -> Vec<u8> {
        let len = self.rng.gen_range(len);
        let b: u8 = self.rng.gen_range(1..=255);
        let step: u8 = self.rng.gen_range(1..=7);
        (0..len)
            .map(|i| b.wrapping_add(step.wrapping_mul((i / 97) as u8)) ^ (i as u8))
            .collect()
    }

    /// A new regular file of one of the size classes (a sparse one: every other block,
    /// so that its map outgrows the inline extents).
    fn file(&mut self) -> Result<()> {
        let path = self.make(Kind::File, None)?;
        match self.rng.gen_range(0..10) {
            0 => {}
            1..=3 => {
                let data = self.pattern(1..BLOCK as usize);
                self.write(&path, 0, &data)?;
            }
            4..=6 => {
                let data = self.pattern(BLOCK as usize..64 << 10);
                self.write(&path, 0, &data)?;
            }
            7 => {
                let data = self.pattern(64 << 10..256 << 10);
                self.write(&path, 0, &data)?;
            }
            _ => {
                for k in 0..self.rng.gen_range(5..14u64) {
                    let data = self.pattern(1..=BLOCK as usize);
                    self.write(&path, 2 * k * BLOCK, &data)?;
                }
            }
        }
        Ok(())
    }

    /// A symbolic link whose target is 1 to 400 bytes.
    fn symlink(&mut self) -> Result<()> {
        let len = self.rng.gen_range(1..400);
        let target: Vec<u8> = (0..len)
            .map(|_| b"abcdefghij/._-xyz"[self.rng.gen_range(0..17)])
            .collect();
        self.make(Kind::Symlink, Some(target)).map(|_| ())
    }

    /// One more name for a regular file.
    fn link(&mut self) -> Result<()> {
        let files = self.paths_of(Kind::File);
        if files.is_empty() {
            return Ok(());
        }
        let from = files[self.rng.gen_range(0..files.len())].clone();
        let (parent, name, path) = self.new_name("h");
        let node = self.model[&from].clone();
        let linked = self
            .fs()
            .link(node.ino, parent, name.as_bytes(), Caller::ROOT);
        self.fs().forget(linked.map_err(fs_err(&path))?.ino, 1);
        self.model.insert(path, node);
        Ok(())
    }

    /// The first tree: directories, files, links, symbolic links, fifos; on half the
    /// images a large directory compacted into a run.
    fn populate(&mut self) -> Result<()> {
        for _ in 0..self.rng.gen_range(3..8) {
            self.make(Kind::Dir, None)?;
        }
        if self.rng.gen_bool(0.5) {
            self.large_dir()?;
        }
        for _ in 0..self.rng.gen_range(12..24) {
            self.file()?;
        }
        for _ in 0..self.rng.gen_range(2..6) {
            self.symlink()?;
        }
        for _ in 0..self.rng.gen_range(1..4) {
            self.make(Kind::Fifo, None)?;
        }
        for _ in 0..self.rng.gen_range(2..5) {
            self.link()?;
        }
        Ok(())
    }

    /// A directory of [`LARGE_NAMES`] fifos (named as a directory's entries are, 5 to 8
    /// bytes), churned until its log is compacted into a run (`docs/format.md`, "Directory
    /// runs"): damage then lands in run chunks, and the mounts read it through its view.
    fn large_dir(&mut self) -> Result<()> {
        let path = self.dir_of_fifos(LARGE_NAMES, 'e')?;
        self.large = Some(path);
        self.compact_large()
    }

    /// A directory of [`WIDE_NAMES`] fifos, left as made: the file tree grows a level.
    fn wide_dir(&mut self) -> Result<()> {
        self.dir_of_fifos(WIDE_NAMES, 'w').map(drop)
    }

    /// A new directory of a number of fifos drawn from `names`, each named `prefix` and a
    /// serial; its path.
    fn dir_of_fifos(&mut self, names: std::ops::Range<u32>, prefix: char) -> Result<String> {
        let path = self.make(Kind::Dir, None)?;
        let ino = self.model[&path].ino;
        for _ in 0..self.rng.gen_range(names) {
            self.serial += 1;
            let name = format!("{prefix}{}", self.serial);
            self.make_at(ino, &name, format!("{path}/{name}"), Kind::Fifo, None)?;
        }
        Ok(path)
    }

    /// Creates and removes names in the large directory until its log holds a run it did
    /// not hold before (a compaction wrote it); fails if none comes.
    fn compact_large(&mut self) -> Result<()> {
        let path = self.large.clone().expect("a large directory");
        let ino = self.model[&path].ino;
        let before = runs_in(self.fs().volume().volume(), ino)?;
        for round in 0..CHURN_MOST {
            let name = format!("c{round}");
            let made = self.fs().make(ino, name.as_bytes(), FIFO, ME);
            self.fs().forget(made.map_err(fs_err(&path))?.ino, 1);
            self.fs()
                .unlink(ino, name.as_bytes())
                .map_err(fs_err(&path))?;
            if round % 64 == 63 && runs_in(self.fs().volume().volume(), ino)? != before {
                return Ok(());
            }
        }
        bail!("{path}: {CHURN_MOST} creates and unlinks compacted its log into no new run")
    }

    /// Changes in the large directory, if the image has one: its log compacted into a new
    /// run on half of them (the stale snapshot then holds the last run's chunks), and a
    /// few of its names removed or moved out, each change on the volume after the run.
    fn change_large(&mut self) -> Result<()> {
        let Some(large) = self.large.clone() else {
            return Ok(());
        };
        if self.rng.gen_bool(0.5) {
            self.compact_large()?;
        }
        let prefix = format!("{large}/");
        for _ in 0..self.rng.gen_range(1..4) {
            let names: Vec<String> = self
                .model
                .keys()
                .filter(|p| p.starts_with(&prefix))
                .cloned()
                .collect();
            let path = names[self.rng.gen_range(0..names.len())].clone();
            if self.rng.gen_bool(0.5) {
                self.unlink(&path)?;
            } else {
                self.rename(&path)?;
            }
        }
        Ok(())
    }

    /// Changes to the tree: overwrites, appends, new nodes, unlinks, renames of files.
    fn change(&mut self) -> Result<()> {
        self.change_large()?;
        for _ in 0..self.rng.gen_range(4..12) {
            let files = self.paths_of(Kind::File);
            if files.is_empty() {
                self.file()?;
                continue;
            }
            let path = files[self.rng.gen_range(0..files.len())].clone();
            match self.rng.gen_range(0..8) {
                0..=1 => {
                    let len = self.model[&path].bytes.len() as u64;
                    let at = self.rng.gen_range(0..=len);
                    let data = self.pattern(1..3 * BLOCK as usize);
                    self.write(&path, at, &data)?;
                }
                2..=3 => self.file()?,
                4 => self.symlink()?,
                5 => self.link()?,
                6 => self.unlink(&path)?,
                _ => self.rename(&path)?,
            }
        }
        Ok(())
    }

    /// The (directory inode, name) of `path`.
    fn split(&self, path: &str) -> (u64, String) {
        let (dir, name) = path.rsplit_once('/').expect("an absolute path");
        let dir = if dir.is_empty() { "/" } else { dir };
        (self.model[dir].ino, name.to_string())
    }

    fn unlink(&mut self, path: &str) -> Result<()> {
        let (dir, name) = self.split(path);
        self.fs()
            .unlink(dir, name.as_bytes())
            .map_err(fs_err(path))?;
        self.model.remove(path);
        Ok(())
    }

    fn rename(&mut self, path: &str) -> Result<()> {
        let (dir, name) = self.split(path);
        let (to_dir, to_name, to_path) = self.new_name("r");
        self.fs()
            .rename(
                dir,
                name.as_bytes(),
                to_dir,
                to_name.as_bytes(),
                0,
                Caller::ROOT,
            )
            .map_err(fs_err(path))?;
        let node = self.model.remove(path).expect("in the model");
        self.model.insert(to_path, node);
        Ok(())
    }

    /// A sync, and with `checkpoint` a checkpoint (the journal then empty).
    fn durable(&mut self, checkpoint: bool) -> Result<()> {
        self.fs().sync().map_err(fs_err("sync"))?;
        if checkpoint {
            self.fs().volume().checkpoint()?;
        }
        Ok(())
    }
}
