//! A persistent allocator: an [`Allocator`] whose state lives on a [`Device`] in the format
//! of `docs/format.md`, changed through journaled transactions.
//!
//! - `allocate` / `free` record their change in the open transaction (frees stay pending as
//!   in the allocator).
//! - `commit(payload)` ends the transaction: its changes and the caller's payload become one
//!   journal record; once it is durable (concurrent committers share flushes) the
//!   transaction's frees become reusable.
//! - `checkpoint()` writes every group's bitmap and descriptor home and moves the journal's
//!   tail past everything written; a full journal checkpoints instead of failing.
//! - `open` reads the home state and replays the records after the tail, stopping at a torn
//!   or corrupt one; it returns the replayed records so the caller can redo its own metadata.
//!
//! Lock order: `commit_lock` -> `boundary` (write) -> allocator locks. `allocate` and `free`
//! hold `boundary` for reading, so a transaction's boundary (the ops taken and the
//! allocator's transaction number) is exact.
//!
//! Bitmaps are loaded lazily: `open` reads the superblock and the descriptor table only;
//! a group's bitmap is read when a scan, a free or the replay first needs it (with
//! read-ahead, see `alloc/lazy.rs`). A checkpoint writes home only the groups changed since
//! the last one, and the descriptor blocks that describe them.
//!
//! A group whose descriptor or bitmap fails its checks is held used (never handed out,
//! frees refused), its journal changes skipped and its damaged home copy left for fsck.

use crate::alloc::{AllocRequest, Allocator, BitmapSource, GroupSummary, Policy};
use crate::disk::device::Device;
use crate::disk::format::{self, GroupDesc, Superblock, DESC_BYTES};
use crate::disk::journal::{self, Area, Journal, Op, Record};
use crate::error::{Error, Result};
use crate::files::{DataRequest, FileAlloc, Files};
use crate::geometry::{Extent, Geometry};
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// The transaction boundary: callers take their shard's lock for reading (no shared write
/// between threads of different shards); a commit takes every shard's for writing, in order.
struct Boundary {
    shards: Box<[crossbeam_utils::CachePadded<RwLock<()>>]>,
}

impl Boundary {
    fn new() -> Self {
        Boundary {
            shards: (0..crate::alloc::SHARDS)
                .map(|_| crossbeam_utils::CachePadded::new(RwLock::new(())))
                .collect(),
        }
    }

    fn read(&self, shard: usize) -> parking_lot::RwLockReadGuard<'_, ()> {
        self.shards[shard % self.shards.len()].read()
    }

    fn write(&self) -> Vec<parking_lot::RwLockWriteGuard<'_, ()>> {
        self.shards.iter().map(|s| s.write()).collect()
    }
}

/// The open transaction's ops, one list per stats shard.
///
/// A record lists its allocations before its frees. That is a valid order for replay: a
/// block freed in a transaction stays pending (unusable) until the transaction commits, so
/// within one transaction no allocation can follow a free of the same block, while a free
/// may follow an allocation of it (by another thread, in another shard).
struct OpShards {
    shards: Box<[crossbeam_utils::CachePadded<Mutex<Vec<Op>>>]>,
}

impl OpShards {
    fn new() -> Self {
        OpShards {
            shards: (0..crate::alloc::SHARDS)
                .map(|_| crossbeam_utils::CachePadded::new(Mutex::new(Vec::new())))
                .collect(),
        }
    }

    fn push(&self, shard: usize, op: Op) {
        self.shards[shard % self.shards.len()].lock().push(op);
    }

    /// Every op, allocations first (under the closed boundary: nobody pushes meanwhile).
    fn take(&self) -> Vec<Op> {
        let mut ops: Vec<Op> = Vec::new();
        for s in self.shards.iter() {
            ops.append(&mut s.lock());
        }
        // Stable: each kind keeps its order within a shard.
        ops.sort_by_key(|op| matches!(op, Op::Free(_)));
        ops
    }

    /// Returns ops of a failed append to the open transaction.
    fn put_back(&self, ops: Vec<Op>) {
        self.shards[0].lock().splice(0..0, ops);
    }

    fn is_empty(&self) -> bool {
        self.shards.iter().all(|s| s.lock().is_empty())
    }
}

/// Most forced commits one allocation makes before it reports `NoSpace`.
const FORCED_COMMITS_PER_ALLOCATION: usize = 64;

pub struct Store {
    dev: Arc<dyn Device>,
    sb: Mutex<Superblock>,
    /// Blocks `0..metadata_end` (superblock, journal, descriptors, bitmaps) and the backup
    /// superblock are the device's own: never freed, never handed out.
    metadata_end: u64,
    backup_block: u64,
    /// The file layer over the allocator core: plain extents go to the core, file data
    /// through the layer (its preallocations are reserved, never journaled).
    files: Files,
    journal: Journal,
    /// The open transaction's changes, sharded by the caller's stats shard so concurrent
    /// callers do not share one lock (see [`OpShards`]).
    ops: OpShards,
    boundary: Boundary,
    commit_lock: Mutex<()>,
    /// How long `open` took, and how much of it was the journal replay.
    open_timing: OpenTiming,
    /// An allocation that finds no space while frees wait commits the open transaction and
    /// retries (see [`Store::set_forced_commits`]).
    forced_commits: std::sync::atomic::AtomicBool,
    /// The last transaction (its `Allocator::seal` number) whose record was appended: frees
    /// up to it may be released once the journal is durable. A failed commit's frees carry
    /// a later number and stay pending until a record holds them.
    recorded_seal: AtomicU64,
}

/// A read-only view of a store's allocator (see [`Store::allocator`]): figures, stats and
/// checks. It offers nothing that changes allocator state, so no change can bypass the
/// journal.
#[derive(Clone, Copy)]
pub struct AllocatorView<'a> {
    files: &'a Files,
}

impl<'a> AllocatorView<'a> {
    fn alloc(&self) -> &'a Allocator {
        self.files.allocator()
    }

    pub fn geometry(&self) -> &'a Geometry {
        self.alloc().geometry()
    }

    pub fn policy(&self) -> &'a Policy {
        self.alloc().policy()
    }

    /// See [`Allocator::free_blocks`].
    pub fn free_blocks(&self) -> u64 {
        self.alloc().free_blocks()
    }

    /// See [`Allocator::pending_free_blocks`].
    pub fn pending_free_blocks(&self) -> u64 {
        self.alloc().pending_free_blocks()
    }

    /// See [`Allocator::allocated_blocks`].
    pub fn allocated_blocks(&self) -> u64 {
        self.alloc().allocated_blocks()
    }

    /// See [`Allocator::reserved_blocks`].
    pub fn reserved_blocks(&self) -> u64 {
        self.alloc().reserved_blocks()
    }

    /// See [`Allocator::is_free`].
    pub fn is_free(&self, block: u64) -> Result<bool> {
        self.alloc().is_free(block)
    }

    /// See [`Allocator::free_space`] (loads every group).
    pub fn free_space(&self) -> crate::alloc::FreeSpace {
        self.alloc().free_space()
    }

    /// See [`Allocator::stats`].
    pub fn stats(&self) -> crate::alloc::StatsSnapshot {
        self.alloc().stats()
    }

    /// Zeroes the stats counters (between lab phases); no allocator state changes.
    pub fn reset_stats(&self) {
        self.alloc().stats_handle().reset();
    }

    /// All shards' allocation latencies merged.
    pub fn latency_histogram(&self) -> hdrhistogram::Histogram<u64> {
        self.alloc().stats_handle().latency_histogram()
    }

    /// The core's checks and the file layer's ([`Files::check`]). Call at quiescence.
    pub fn check(&self) -> Result<()> {
        self.files.check()
    }

    /// Groups changed since their home copy was written.
    pub fn home_dirty_groups(&self) -> Vec<u64> {
        self.alloc().home_dirty_groups()
    }

    /// True if group `g`'s bitmap is in memory.
    pub fn is_loaded(&self, g: u64) -> bool {
        self.alloc().is_loaded(g)
    }

    /// See [`Allocator::group_bitmap_bytes`]: memory's bitmap, reserved blocks included.
    pub fn group_bitmap_bytes(&self, g: u64, bytes: usize) -> Result<Vec<u8>> {
        self.alloc().group_bitmap_bytes(g, bytes)
    }

    /// See [`Allocator::memory_per_unloaded_group`].
    pub fn memory_per_unloaded_group(&self) -> f64 {
        self.alloc().memory_per_unloaded_group()
    }
}

/// Where the time of `Store::open` went.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OpenTiming {
    pub total_seconds: f64,
    pub replay_seconds: f64,
    pub records_replayed: u64,
    pub bitmaps_loaded: u64,
}

/// Reads bitmaps for the allocator: the home copy, checked against the descriptor on disk.
/// After an interrupted checkpoint, the groups the journal's records touch (the only ones
/// that checkpoint could have been writing) are taken as they are, for the replay to
/// repair; every other group is checked as on a clean device, so damage stays visible.
struct HomeBitmaps {
    dev: Arc<dyn Device>,
    sb: Superblock,
    /// Groups taken as found (empty unless a checkpoint was interrupted).
    repairing: std::collections::HashSet<u64>,
}

impl BitmapSource for HomeBitmaps {
    fn read_bitmap(&self, g: u64) -> Result<Vec<u8>> {
        let mut bitmap = self.read_home(g)?;
        if self.repairing.contains(&g) {
            // Taken as found: metadata stays used whatever the area held.
            for (b, init) in bitmap.iter_mut().zip(format::initial_bitmap(&self.sb, g)) {
                *b |= init;
            }
        }
        Ok(bitmap)
    }
}

impl HomeBitmaps {
    fn read_home(&self, g: u64) -> Result<Vec<u8>> {
        let bs = u64::from(self.sb.block_size);
        let mut d = [0u8; DESC_BYTES];
        self.dev
            .read_at(&mut d, self.sb.desc_start * bs + g * DESC_BYTES as u64)?;
        let repairing = self.repairing.contains(&g);
        match GroupDesc::decode(&d, g) {
            Ok(desc) if repairing && desc.flags & format::DESC_BITMAP_UNINIT == 0 => {
                format::read_bitmap_raw(self.dev.as_ref(), &self.sb, g)
            }
            Ok(desc) => match format::read_bitmap(self.dev.as_ref(), &self.sb, g, &desc) {
                Err(Error::Corrupt { .. }) if repairing => {
                    format::read_bitmap_raw(self.dev.as_ref(), &self.sb, g)
                }
                other => other,
            },
            Err(Error::Corrupt { .. }) if repairing => {
                format::read_bitmap_raw(self.dev.as_ref(), &self.sb, g)
            }
            Err(e) => Err(e),
        }
    }
}

/// Applies replayed records to the allocator (loading the groups they touch). Changes to a
/// corrupt group are skipped; after an interrupted checkpoint (`repairing`) a record is
/// applied block by block whatever the bits were (idempotent), otherwise a record that
/// does not apply is corruption.
fn apply_records(
    alloc: &Allocator,
    geometry: &Geometry,
    records: &[Record],
    repairing: bool,
) -> Result<()> {
    for r in records {
        for op in &r.ops {
            let (e, used) = match *op {
                Op::Allocate(e) => (e, true),
                Op::Free(e) => (e, false),
            };
            if e.len == 0 || geometry.validate(e).is_err() {
                return Err(Error::Corrupt {
                    what: format!("journal record {}", r.seq),
                    detail: format!("extent {}+{} is not on the device", e.start, e.len),
                });
            }
            // Load the groups it touches first: a bitmap found corrupt on load holds its
            // group, whose changes are then skipped.
            let mut in_corrupt = false;
            for (g, _, _) in geometry.split(e) {
                alloc.ensure_loaded(g)?;
                in_corrupt |= alloc.is_corrupt(g);
            }
            if in_corrupt {
                continue;
            }
            match alloc.load_extent(e, used) {
                Ok(()) => {}
                Err(Error::Corrupt { .. }) if repairing => {
                    for b in e.start..e.end() {
                        let _ = alloc.load_extent(Extent::new(b, 1), used);
                    }
                }
                Err(err) => {
                    return Err(Error::Corrupt {
                        what: format!("journal record {}", r.seq),
                        detail: err.to_string(),
                    })
                }
            }
        }
    }
    Ok(())
}

fn area(sb: &Superblock) -> Area {
    let bs = u64::from(sb.block_size);
    Area {
        start: sb.journal_start * bs,
        len: sb.journal_blocks * bs,
    }
}

impl Store {
    /// Makes a fresh file system on `dev` and opens it.
    pub fn create(
        dev: Arc<dyn Device>,
        geometry: &Geometry,
        journal_blocks: u64,
        policy: Policy,
    ) -> Result<Store> {
        format::mkfs(dev.as_ref(), geometry, journal_blocks, [0; 16])?;
        Ok(Store::open(dev, policy)?.0)
    }

    /// Opens the file system on `dev`: the superblock and descriptors, then the journal
    /// replayed (loading the bitmaps of the groups it touches). Returns the replayed
    /// records, oldest first.
    ///
    /// A journal damaged in the middle (a committed record unreadable while later committed
    /// records are intact) is refused with [`Error::JournalDamaged`]: replaying up to the
    /// damage would drop committed transactions and hand out blocks they own. `extalloc
    /// fsck` reports it; [`Store::open_accepting_journal_loss`] opens anyway.
    pub fn open(dev: Arc<dyn Device>, policy: Policy) -> Result<(Store, Vec<Record>)> {
        Self::open_with(dev, policy, false)
    }

    /// Opens a device whose journal is damaged in the middle, accepting the loss: the
    /// records before the damage are replayed, the ones after it are not, and every group
    /// those later records touch is held out of use as corrupt (nothing is handed out of
    /// it, frees into it are refused) for `extalloc fsck` and the caller to resolve. On an
    /// undamaged journal it is [`Store::open`].
    pub fn open_accepting_journal_loss(
        dev: Arc<dyn Device>,
        policy: Policy,
    ) -> Result<(Store, Vec<Record>)> {
        Self::open_with(dev, policy, true)
    }

    fn open_with(
        dev: Arc<dyn Device>,
        policy: Policy,
        accept_loss: bool,
    ) -> Result<(Store, Vec<Record>)> {
        let started = std::time::Instant::now();
        let sb = format::read_superblock(dev.as_ref())?;
        let geometry = sb.geometry()?;
        let replay_started = std::time::Instant::now();
        let replayed = journal::replay(
            dev.as_ref(),
            area(&sb),
            sb.journal_tail,
            sb.journal_tail_seq,
        )?;
        let replay_read = replay_started.elapsed();
        // After an interrupted checkpoint, the groups it was writing may be a mix of old
        // and new: those (the groups the journal's records touch) are taken as they are,
        // and the idempotent replay repairs them. Any other group must pass its checks.
        let repairing = sb.state & format::STATE_CHECKPOINTING != 0;
        let taken_as_found = if repairing {
            journal::groups_touched(&replayed.records, &geometry)
        } else {
            Default::default()
        };
        let alloc = Self::open_home(&dev, &sb, policy, taken_as_found)?;
        if let Some(d) = &replayed.damage {
            if !accept_loss {
                return Err(Error::JournalDamaged {
                    lost_seq: d.lost_seq,
                    offset: sb.journal_start * u64::from(sb.block_size) + d.offset,
                    stranded: d.stranded.len() as u64,
                });
            }
            // Their blocks may be in use or free: hold every group they touch.
            for g in journal::groups_touched(&d.stranded, &geometry) {
                alloc.mark_corrupt(g);
            }
        }
        let apply_started = std::time::Instant::now();
        apply_records(&alloc, &geometry, &replayed.records, repairing)?;
        let replay_seconds = (replay_read + apply_started.elapsed()).as_secs_f64();
        let journal = Journal::new(dev.clone(), area(&sb), sb.journal_tail, &replayed);
        let alloc_seal = alloc.seal();
        let records = replayed.records;
        let open_timing = OpenTiming {
            total_seconds: started.elapsed().as_secs_f64(),
            replay_seconds,
            records_replayed: records.len() as u64,
            bitmaps_loaded: alloc.stats().loaded_bitmaps,
        };
        Ok((
            Store {
                dev,
                metadata_end: sb.metadata_end(),
                backup_block: sb.backup_block(),
                sb: Mutex::new(sb),
                files: Files::new(alloc),
                journal,
                ops: OpShards::new(),
                boundary: Boundary::new(),
                commit_lock: Mutex::new(()),
                open_timing,
                forced_commits: std::sync::atomic::AtomicBool::new(false),
                // Nothing is pending at open: the seal ends an empty transaction.
                recorded_seal: AtomicU64::new(alloc_seal),
            },
            records,
        ))
    }

    /// The allocator over the home state: every group's figures from its descriptor (no
    /// bitmap read), corrupt descriptors held. After an interrupted checkpoint
    /// (`taken_as_found` not empty, or the superblock says so) every group is loaded now,
    /// its figures from its bitmap, and marked for the next checkpoint.
    fn open_home(
        dev: &Arc<dyn Device>,
        sb: &Superblock,
        policy: Policy,
        taken_as_found: std::collections::HashSet<u64>,
    ) -> Result<Allocator> {
        let geometry = sb.geometry()?;
        let repairing = sb.state & format::STATE_CHECKPOINTING != 0;
        let descs = format::read_descriptors(dev.as_ref(), sb)?;
        let mut corrupt = Vec::new();
        let summaries: Vec<GroupSummary> = descs
            .iter()
            .enumerate()
            .map(|(g, d)| match d {
                Ok(d) if !repairing => GroupSummary {
                    free_blocks: d.free_blocks,
                    largest_order: d.largest_order,
                    avg_order: d.avg_order,
                    class_tag: d.class_tag,
                },
                Ok(_) => GroupSummary::default(),
                Err(_) => {
                    if !taken_as_found.contains(&(g as u64)) {
                        corrupt.push(g as u64);
                    }
                    GroupSummary::default()
                }
            })
            .collect();
        let source = Arc::new(HomeBitmaps {
            dev: dev.clone(),
            sb: sb.clone(),
            repairing: taken_as_found,
        });
        let alloc = match Allocator::open_lazy(geometry, policy.clone(), source.clone(), &summaries)
        {
            // Figures that cannot be (a checksum-valid descriptor with an impossible
            // summary): fall back to each group's bitmap.
            Err(Error::Corrupt { .. }) if !repairing => {
                let zero = vec![GroupSummary::default(); summaries.len()];
                let alloc = Allocator::open_lazy(geometry, policy, source, &zero)?;
                for g in 0..sb.groups() {
                    alloc.ensure_loaded(g)?;
                }
                alloc
            }
            other => other?,
        };
        for &g in &corrupt {
            alloc.mark_corrupt(g);
        }
        if repairing {
            for g in 0..sb.groups() {
                alloc.ensure_loaded(g)?;
                alloc.mark_home_dirty(g);
            }
        }
        Ok(alloc)
    }

    /// Groups found corrupt so far (on open, or when their bitmap was first loaded): held
    /// used, never written home.
    pub fn corrupt_groups(&self) -> Vec<u64> {
        self.alloc().corrupt_groups()
    }

    /// Where the time of `open` went.
    pub fn open_timing(&self) -> OpenTiming {
        self.open_timing
    }

    /// Flushes the device and asks the system to drop its cached copy (see
    /// [`Device::drop_cache`]): bitmaps loaded after this read the media.
    pub fn drop_device_cache(&self) -> Result<()> {
        self.dev.flush()?;
        self.dev.drop_cache()
    }

    /// Journal bytes between the tail and the head: what a crash now would replay.
    pub fn journal_bytes_used(&self) -> u64 {
        let sb = self.sb.lock();
        let len = sb.journal_blocks * u64::from(sb.block_size);
        let (head, _) = self.journal.head();
        (head + len - sb.journal_tail) % len
    }

    fn alloc(&self) -> &Allocator {
        self.files.allocator()
    }

    pub fn geometry(&self) -> &Geometry {
        self.alloc().geometry()
    }

    /// A read-only view of the in-memory allocator: figures, stats, `check()`. Every
    /// change goes through the store's own calls, so that the journal records it.
    pub fn allocator(&self) -> AllocatorView<'_> {
        AllocatorView { files: &self.files }
    }

    /// Loads group `g`'s bitmap if it is not in memory (the cache; no allocator state
    /// changes).
    pub fn ensure_loaded(&self, g: u64) -> Result<()> {
        self.alloc().ensure_loaded(g)
    }

    /// Drops idle bitmaps until at most `keep` remain loaded (see
    /// [`Allocator::drop_idle_bitmaps`]); returns how many were dropped.
    pub fn drop_idle_bitmaps(&self, keep: u64) -> u64 {
        self.alloc().drop_idle_bitmaps(keep)
    }

    /// Lets an allocation that finds no space while frees wait for a commit make the open
    /// transaction durable itself (an empty payload) and retry once, as a file system forces
    /// a journal commit. Off by default: the caller's allocations then never reach the
    /// journal in a record other than the one carrying its payload.
    pub fn set_forced_commits(&self, on: bool) {
        self.forced_commits
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Allocates an extent in the open transaction (see [`Allocator::allocate`]). With
    /// forced commits on, no space while frees wait commits and retries.
    pub fn allocate(&self, req: &AllocRequest) -> Result<Extent> {
        self.with_forced_commits(|| {
            let shard = self.alloc().stats_handle().shard_index();
            let _open = self.boundary.read(shard);
            let e = self.alloc().allocate(req)?;
            self.ops.push(shard, Op::Allocate(e));
            Ok(e)
        })
    }

    /// Runs `op` (an allocation), and while it finds no space with frees waiting for a
    /// commit and forced commits are on, commits the open transaction (an empty payload)
    /// and runs it again. This is the store's remedy for "no space": it owns the commits.
    fn with_forced_commits(&self, op: impl Fn() -> Result<Extent>) -> Result<Extent> {
        let mut result = op();
        // Another thread may free into the next transaction while this one's commit waits
        // for its flush, so one commit is not always enough: commit again while frees
        // wait, a bounded number of times.
        for _ in 0..FORCED_COMMITS_PER_ALLOCATION {
            match result {
                Err(Error::NoSpace { pending_blocks, .. })
                    if pending_blocks > 0
                        && self
                            .forced_commits
                            .load(std::sync::atomic::Ordering::Relaxed) =>
                {
                    let shard = self.alloc().stats_handle().shard();
                    shard.add(&shard.counters.forced_commits, 1);
                    self.commit(&[])?;
                    result = op();
                }
                _ => break,
            }
        }
        result
    }

    /// A file's allocation state (see [`Files::create_file`]). Files live in memory: after
    /// a reopen the caller rebuilds its own map from its metadata (e.g. the payloads).
    pub fn create_file(&self, id: u64) -> Arc<FileAlloc> {
        self.files.create_file(id)
    }

    /// Maps data blocks of `file` in the open transaction (see [`Files::allocate_data`]).
    /// The journal records only the extent handed to the file: blocks the call reserved
    /// beyond it stay out of the journal and out of checkpoints, and are free after a
    /// crash.
    pub fn allocate_data(&self, file: &Arc<FileAlloc>, req: &DataRequest) -> Result<Extent> {
        self.with_forced_commits(|| {
            let shard = self.alloc().stats_handle().shard_index();
            let _open = self.boundary.read(shard);
            let e = self.files.allocate_data(file, req)?;
            self.ops.push(shard, Op::Allocate(e));
            Ok(e)
        })
    }

    /// Punches a hole in `file` in the open transaction (see [`Files::free_data`]); the
    /// freed extents are recorded and reusable once the transaction commits. Returns them.
    pub fn free_data(&self, file: &FileAlloc, logical: u64, len: u64) -> Result<Vec<Extent>> {
        let shard = self.alloc().stats_handle().shard_index();
        let _open = self.boundary.read(shard);
        let freed = self.files.free_data(file, logical, len)?;
        for &e in &freed {
            self.ops.push(shard, Op::Free(e));
        }
        Ok(freed)
    }

    /// Sets `file`'s size in the open transaction (see [`Files::set_file_size`]); blocks
    /// past it are freed and recorded. Returns the extents freed.
    pub fn set_file_size(&self, file: &FileAlloc, size_blocks: u64) -> Result<Vec<Extent>> {
        let shard = self.alloc().stats_handle().shard_index();
        let _open = self.boundary.read(shard);
        let freed = self.files.set_file_size(file, size_blocks)?;
        for &e in &freed {
            self.ops.push(shard, Op::Free(e));
        }
        Ok(freed)
    }

    /// Returns `file`'s unused preallocated blocks at once (close). Nothing is recorded:
    /// they were never handed out. Returns the blocks released.
    pub fn release_prealloc(&self, file: &FileAlloc) -> Result<u64> {
        let shard = self.alloc().stats_handle().shard_index();
        let _open = self.boundary.read(shard);
        self.files.release_prealloc(file)
    }

    /// Frees `extent` in the open transaction (reusable once it commits). A free of the
    /// device's own metadata is refused with [`Error::MetadataBlocks`]; the other errors
    /// are the allocator's. A refused free changes nothing.
    pub fn free(&self, extent: Extent) -> Result<()> {
        self.alloc().geometry().validate(extent)?;
        if extent.start < self.metadata_end
            || (extent.start..extent.end()).contains(&self.backup_block)
        {
            return Err(Error::MetadataBlocks {
                start: extent.start,
                len: extent.len,
                metadata_end: self.metadata_end,
                backup_block: self.backup_block,
            });
        }
        let shard = self.alloc().stats_handle().shard_index();
        let _open = self.boundary.read(shard);
        self.alloc().free(extent)?;
        self.ops.push(shard, Op::Free(extent));
        Ok(())
    }

    /// Ends the open transaction with `payload` and returns once it is durable. Returns the
    /// record's sequence number.
    pub fn commit(&self, payload: &[u8]) -> Result<u64> {
        let (seq, sealed) = {
            let _serial = self.commit_lock.lock();
            let _closed = self.boundary.write();
            let ops = self.ops.take();
            let sealed = self.alloc().seal();
            let seq = match self.journal.append(&ops, payload) {
                Ok(seq) => seq,
                Err(Error::JournalFull { .. }) => {
                    let appended = self
                        .checkpoint_for_full_journal(&ops)
                        .and_then(|()| self.journal.append(&ops, payload));
                    match appended {
                        Ok(seq) => seq,
                        Err(e) => {
                            // Not recorded: the changes stay in the open transaction.
                            self.ops.put_back(ops);
                            return Err(e);
                        }
                    }
                }
                Err(e) => {
                    // Nothing was written: the changes stay in the open transaction.
                    self.ops.put_back(ops);
                    return Err(e);
                }
            };
            self.recorded_seal.store(sealed, Relaxed);
            (seq, sealed)
        };
        self.journal.commit(seq)?;
        self.alloc().release(sealed);
        Ok(seq)
    }

    /// Writes every group home and moves the journal's tail past all records.
    pub fn checkpoint(&self) -> Result<()> {
        let _serial = self.commit_lock.lock();
        let _closed = self.boundary.write();
        // Changes of the open transaction would be lost if written home without a record.
        if !self.ops.is_empty() {
            return Err(Error::InvalidRequest(
                "checkpoint with an open transaction: commit first".into(),
            ));
        }
        let sealed = self.alloc().seal();
        self.checkpoint_locked(&[], sealed)
    }

    /// Writes the `dirty` groups home (bitmaps first, flushed, then their descriptor
    /// blocks: a descriptor never points at a bitmap that is not on the media, which matters
    /// for a group leaving `BITMAP_UNINIT`, whose bitmap area held nothing). Groups an
    /// unrecorded transaction's allocations (`exclude`) touched are returned: their home
    /// copy differs from memory until the next checkpoint.
    fn write_groups_home(
        &self,
        sb: &Superblock,
        dirty: &[u64],
        exclude: &[Op],
    ) -> Result<BTreeSet<u64>> {
        let bs = u64::from(sb.block_size);
        let bitmap_bytes = (u64::from(sb.bitmap_blocks) * bs) as usize;
        let mut redo: BTreeSet<u64> = BTreeSet::new();
        let mut descs: Vec<(u64, GroupDesc)> = Vec::with_capacity(dirty.len());
        // Reserved is not allocated: blocks preallocations hold were never recorded, so home
        // shows them free (a crash frees them), and their groups stay dirty.
        let unrecorded: Vec<Extent> = exclude
            .iter()
            .filter_map(|op| match *op {
                Op::Allocate(e) => Some(e),
                Op::Free(_) => None,
            })
            .chain(self.files.reserved_extents())
            .collect();
        for &g in dirty {
            // Clean first: a change made while the group is written (a concurrent release)
            // marks it dirty again. A failure marks every group dirty again (the caller).
            self.alloc().mark_home_clean(g);
            let mut bitmap = self.alloc().group_bitmap_bytes(g, bitmap_bytes)?;
            let (gstart, gend) = (g * sb.group_blocks, (g + 1) * sb.group_blocks);
            for &e in &unrecorded {
                // The unrecorded transaction's allocations are not home yet. Its frees are
                // still pending, so memory already has those blocks used, as home must
                // (undoing a free of a block the same transaction allocated would mark it
                // used at home with no record allocating it).
                if e.start >= gend || e.end() <= gstart {
                    continue;
                }
                redo.insert(g);
                for b in e.start.max(gstart)..e.end().min(gend) {
                    let i = b - gstart;
                    bitmap[(i / 8) as usize] &= !(1 << (i % 8));
                }
            }
            // Metadata, the backup superblock and the padding past a short last group stay
            // marked whatever the bitmap says.
            for (b, init) in bitmap.iter_mut().zip(format::initial_bitmap(sb, g)) {
                *b |= init;
            }
            format::write_bitmap(self.dev.as_ref(), sb, g, &bitmap)?;
            let tag = self.alloc().group_class_tag(g);
            descs.push((g, GroupDesc::for_bitmap(sb, g, &bitmap, tag)));
        }
        self.dev.flush()?;
        let per_block = bs / DESC_BYTES as u64;
        let mut i = 0;
        while i < descs.len() {
            let block = descs[i].0 / per_block;
            let at = sb.desc_start * bs + block * bs;
            let mut table = vec![0u8; bs as usize];
            self.dev.read_at(&mut table, at)?;
            while i < descs.len() && descs[i].0 / per_block == block {
                let (g, desc) = descs[i];
                let off = ((g - block * per_block) * DESC_BYTES as u64) as usize;
                table[off..off + DESC_BYTES].copy_from_slice(&desc.encode(g));
                i += 1;
            }
            self.dev.write_at(&table, at)?;
        }
        Ok(redo)
    }

    /// The checkpoint a commit makes when its record finds the journal full: home state
    /// without this transaction's changes (`ops`, whose record follows), and only the frees
    /// of transactions whose records were appended released. Not `seal - 1`: a commit that
    /// failed earlier took a seal number too, and its frees, back in the open transaction,
    /// are not recorded anywhere yet.
    fn checkpoint_for_full_journal(&self, ops: &[Op]) -> Result<()> {
        self.checkpoint_locked(ops, self.recorded_seal.load(Relaxed))
    }

    /// Under `commit_lock` and the closed boundary. Writes home the state of every
    /// appended record: the allocator's, minus `exclude` (a transaction whose record is not
    /// appended yet), with the frees of transactions up to `release_upto` released.
    fn checkpoint_locked(&self, exclude: &[Op], release_upto: u64) -> Result<()> {
        // Make every appended record durable and release their frees: home state is then
        // exactly what the records say.
        let (_, next_seq) = self.journal.head();
        if next_seq > 1 {
            self.journal.commit(next_seq - 1)?;
        }
        self.alloc().release(release_upto);
        let mut sb = self.sb.lock();
        // Say a checkpoint is under way before touching any group (see docs/format.md).
        sb.state |= format::STATE_CHECKPOINTING;
        sb.generation += 1;
        format::write_superblock(self.dev.as_ref(), &sb)?;
        self.dev.flush()?;
        // Only the groups changed since the last checkpoint, and only the descriptor blocks
        // that describe them.
        let dirty: Vec<u64> = self
            .alloc()
            .home_dirty_groups()
            .into_iter()
            .filter(|&g| !self.alloc().is_corrupt(g))
            .collect();
        match self.write_groups_home(&sb, &dirty, exclude) {
            Ok(redo) => {
                for g in redo {
                    self.alloc().mark_home_dirty(g);
                }
            }
            Err(e) => {
                // Nothing may count as home that did not get there: the next checkpoint
                // writes every one of them again.
                for &g in &dirty {
                    self.alloc().mark_home_dirty(g);
                }
                return Err(e);
            }
        }
        self.dev.flush()?;
        // Every appended record is home: the journal is empty and starts again at the
        // front of its area, so any record that fits the journal fits now. Replay from
        // offset 0 meets an older record (or zeros) there and stops.
        sb.journal_tail = 0;
        sb.journal_tail_seq = next_seq;
        sb.state &= !format::STATE_CHECKPOINTING;
        sb.generation += 1;
        format::write_superblock(self.dev.as_ref(), &sb)?;
        self.dev.flush()?;
        self.journal.restart();
        drop(sb);
        if self.alloc().policy().bitmap_memory_mib > 0 {
            let keep = (self.alloc().policy().bitmap_memory_mib << 20)
                / self.alloc().bitmap_memory_bytes().max(1);
            self.alloc().drop_idle_bitmaps(keep);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::device::{Crash, FaultDevice, MemDevice};
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeSet;

    fn geometry() -> Geometry {
        Geometry::new(4096, 1024, 8192).unwrap()
    }

    /// Crashes `dev` keeping half of the unflushed writes (one torn on even seeds), then
    /// opens it.
    fn crash_and_reopen(dev: &Arc<FaultDevice<MemDevice>>, seed: u64) -> (Store, Vec<Record>) {
        dev.crash(Crash::Random {
            keep: 0.5,
            tear: seed.is_multiple_of(2),
        })
        .unwrap();
        Store::open(dev.clone(), Policy::default()).unwrap()
    }

    fn used_blocks(alloc: &Allocator) -> BTreeSet<u64> {
        let g = alloc.geometry();
        let mut used = BTreeSet::new();
        for grp in 0..g.groups_count() {
            let bytes = alloc
                .group_bitmap_bytes(grp, (g.group_blocks / 8) as usize)
                .unwrap();
            for i in 0..g.group_len(grp) {
                if bytes[(i / 8) as usize] & (1 << (i % 8)) != 0 {
                    used.insert(g.group_start(grp) + i);
                }
            }
        }
        used
    }

    /// 300 committed one-extent transactions, then one 4 KiB block in the middle of the
    /// journal zeroed (or one byte flipped): open refuses with `JournalDamaged` naming the
    /// lost record, fsck reports the stranded records, and opening with the loss accepted
    /// hands out no block that a committed transaction owns.
    #[test]
    fn damage_in_the_middle_of_the_journal_is_refused_not_replayed_past() {
        use crate::fsck;
        for flip_one_byte in [false, true] {
            let dev = Arc::new(MemDevice::new(8192 * 4096));
            let store = Store::create(dev.clone(), &geometry(), 256, Policy::default()).unwrap();
            let mut owned = Vec::new();
            for i in 0..300u64 {
                owned.push(store.allocate(&AllocRequest::new(i, 4)).unwrap());
                store.commit(&i.to_le_bytes()).unwrap();
            }
            let sb = format::read_superblock(dev.as_ref()).unwrap();
            drop(store);
            // A block a third of the way into the records: records are 72 bytes.
            let at = sb.journal_start * 4096 + 4096 * 2;
            if flip_one_byte {
                let mut b = [0u8; 1];
                dev.read_at(&mut b, at + 100).unwrap();
                dev.write_at(&[b[0] ^ 0x10], at + 100).unwrap();
            } else {
                dev.write_at(&[0u8; 4096], at).unwrap();
            }
            let err = Store::open(dev.clone(), Policy::default()).err().unwrap();
            match err {
                Error::JournalDamaged {
                    lost_seq, stranded, ..
                } => {
                    assert!(lost_seq > 50 && lost_seq < 200, "{lost_seq}");
                    assert!(stranded > 100, "{stranded}");
                }
                e => panic!("{flip_one_byte}: not JournalDamaged: {e}"),
            }
            let report = fsck::check(dev.as_ref()).unwrap();
            assert!(report.journal_records_lost > 100, "{report:?}");
            assert!(!report.clean());
            let (store, replayed) =
                Store::open_accepting_journal_loss(dev.clone(), Policy::default()).unwrap();
            assert!(replayed.len() < 200);
            assert!(!store.corrupt_groups().is_empty(), "affected groups held");
            let owned_blocks: BTreeSet<u64> = owned.iter().flat_map(|e| e.start..e.end()).collect();
            while let Ok(e) = store.allocate(&AllocRequest::new(1, 4)) {
                for b in e.start..e.end() {
                    assert!(!owned_blocks.contains(&b), "{b} handed out twice");
                }
            }
        }
    }

    /// A crash that tears the last unflushed records is a torn tail, not damage: the
    /// records of a batch whose flush never finished carry `durable_through` below them.
    #[test]
    fn a_torn_unflushed_batch_is_not_damage() {
        for seed in 0..40 {
            let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), seed));
            let store = Store::create(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
            for i in 0..20u64 {
                store.allocate(&AllocRequest::new(i, 2)).unwrap();
                store.commit(b"durable").unwrap();
            }
            // Appended, never flushed: a crash keeps any subset and may tear one.
            for i in 0..10u64 {
                store.allocate(&AllocRequest::new(i, 2)).unwrap();
                let ops = store.ops.take();
                store.journal.append(&ops, b"unflushed").unwrap();
            }
            drop(store);
            dev.crash(Crash::Random {
                keep: 0.5,
                tear: true,
            })
            .unwrap();
            let (_, replayed) = Store::open(dev.clone(), Policy::default())
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            assert!(replayed.len() >= 20);
        }
    }

    /// Free X, a commit fails (its record was never written), then the next commit finds
    /// the journal full and checkpoints: X's free, recorded nowhere yet, must stay pending,
    /// so X is neither handed out nor written home as free. (The old release bound,
    /// `seal - 1`, released it.)
    #[test]
    fn a_failed_commits_frees_stay_pending_through_a_full_journal_checkpoint() {
        let dev = Arc::new(MemDevice::new(8192 * 4096));
        let store = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
        let x = store.allocate(&AllocRequest::new(1, 8)).unwrap();
        store.commit(b"x").unwrap();
        store.free(x).unwrap();
        // A commit that fails before its record is written: sealed, changes put back.
        {
            let _serial = store.commit_lock.lock();
            let _closed = store.boundary.write();
            let ops = store.ops.take();
            store.alloc().seal();
            store.ops.put_back(ops);
        }
        // The next commit's record finds the journal full: the checkpoint it makes.
        {
            let _serial = store.commit_lock.lock();
            let _closed = store.boundary.write();
            let ops = store.ops.take();
            store.alloc().seal();
            store.checkpoint_for_full_journal(&ops).unwrap();
            store.ops.put_back(ops);
        }
        assert!(
            !store.allocator().is_free(x.start).unwrap(),
            "X released unrecorded"
        );
        let home = format::read_superblock(dev.as_ref()).unwrap();
        let (_, bitmap) = format::read_group(dev.as_ref(), &home, 0).unwrap();
        let bit = x.start % geometry().group_blocks;
        assert!(
            bitmap[(bit / 8) as usize] & (1 << (bit % 8)) != 0,
            "X written home free"
        );
        // Committed at last: X is free after the commit.
        store.commit(b"free x").unwrap();
        assert!(store.allocator().is_free(x.start).unwrap());
    }

    /// A crash inside a checkpoint (state says so): the group the journal touches is taken
    /// as found and repaired by the replay, but a group it does not touch whose bitmap is
    /// damaged is held out of use and reported by fsck, as on a clean device, and nothing
    /// in use is handed out.
    #[test]
    fn damage_is_not_hidden_by_an_interrupted_checkpoint() {
        use crate::fsck;
        let dev = Arc::new(MemDevice::new(8192 * 4096));
        let store = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
        // Blocks in groups 1 and 2, written home; then a record touching group 2 only.
        let a = store
            .allocate(&AllocRequest::new(1, 16).goal(1024 + 100))
            .unwrap();
        let b = store
            .allocate(&AllocRequest::new(2, 16).goal(2048 + 100))
            .unwrap();
        assert_eq!((a.start / 1024, b.start / 1024), (1, 2));
        store.commit(b"a b").unwrap();
        store.checkpoint().unwrap();
        let c = store
            .allocate(&AllocRequest::new(3, 16).goal(2048 + 500))
            .unwrap();
        assert_eq!(c.start / 1024, 2);
        store.commit(b"c").unwrap();
        drop(store);
        // The crash: the checkpoint had said it was under way and written half of group
        // 2's bitmap; group 1's bitmap is damaged besides.
        let mut sb = format::read_superblock(dev.as_ref()).unwrap();
        sb.state |= format::STATE_CHECKPOINTING;
        format::write_superblock(dev.as_ref(), &sb).unwrap();
        let bitmap_at = |g: u64| (sb.bitmap_start + g * u64::from(sb.bitmap_blocks)) * 4096;
        dev.write_at(&[0u8; 16], bitmap_at(2) + 500 / 8).unwrap();
        dev.write_at(&[0xa5; 64], bitmap_at(1) + 64).unwrap();
        let report = fsck::check(dev.as_ref()).unwrap();
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.contains("does not touch group 1")),
            "{report:?}"
        );
        assert!(
            !report.problems.iter().any(|p| p.contains("group 2")),
            "group 2 is repaired by the journal: {report:?}"
        );
        let (store, _) = Store::open(dev, Policy::default()).unwrap();
        assert_eq!(store.corrupt_groups(), vec![1]);
        for e in [a, b, c] {
            for blk in e.start..e.end() {
                assert!(!store.allocator().is_free(blk).unwrap(), "{blk} of {e:?}");
            }
        }
        store.allocator().check().unwrap();
    }

    /// A record that fits the journal but not the space left after its write position
    /// fits once a checkpoint has emptied the journal (the journal restarts at its front),
    /// and the store reopens with the record replayed.
    #[test]
    fn a_record_that_fits_the_journal_fits_after_a_checkpoint() {
        let dev = Arc::new(MemDevice::new(8192 * 4096));
        // 8 blocks: 32 KiB of journal.
        let store = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
        for i in 0..100u64 {
            store.allocate(&AllocRequest::new(i, 1)).unwrap();
            store.commit(&[0u8; 150]).unwrap();
        }
        store.checkpoint().unwrap();
        let big = vec![7u8; 24 << 10];
        store.allocate(&AllocRequest::new(1, 1)).unwrap();
        let seq = store.commit(&big).unwrap();
        drop(store);
        let (store, replayed) = Store::open(dev, Policy::default()).unwrap();
        assert_eq!(replayed.len(), 1);
        assert_eq!(
            (replayed[0].seq, replayed[0].payload.len()),
            (seq, big.len())
        );
        store.allocator().check().unwrap();
    }

    /// Every metadata block and the backup superblock are refused by `free`, alone or in a
    /// longer extent, and the refusal changes nothing: after a commit and a reopen no
    /// allocation lands on them and the metadata is still marked used.
    #[test]
    fn metadata_is_never_freed() {
        let dev = Arc::new(MemDevice::new(8192 * 4096));
        let store = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
        let (end, backup) = (store.metadata_end, store.backup_block);
        let before = used_blocks(store.alloc());
        for e in [
            Extent::new(0, 1),
            Extent::new(1, 3),
            Extent::new(end - 1, 1),
            Extent::new(end - 2, 10),
            Extent::new(backup, 1),
            Extent::new(backup - 5, 6),
        ] {
            assert!(
                matches!(store.free(e), Err(Error::MetadataBlocks { .. })),
                "{e:?}"
            );
        }
        store.commit(b"nothing").unwrap();
        assert_eq!(used_blocks(store.alloc()), before, "nothing changed");
        drop(store);
        let (store, _) = Store::open(dev, Policy::default()).unwrap();
        while let Ok(e) = store.allocate(&AllocRequest::new(1, 64)) {
            assert!(e.start >= end && e.end() <= backup, "{e:?} on metadata");
        }
        store.allocator().check().unwrap();
    }

    /// Random transactions on a fault-injecting device, crashes at random points; after each
    /// reopen every committed allocation is allocated, every committed free is free, nothing
    /// uncommitted survived, the payloads come back in order, and `check()` holds.
    #[test]
    fn crashes_lose_nothing_committed_and_keep_nothing_uncommitted() {
        // 5 x 60 = 300 crashes.
        for seed in 0..5 {
            torture(seed);
        }
    }

    fn torture(seed: u64) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), seed + 100));
        let store = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
        let baseline = used_blocks(store.alloc());
        let mut store = Some(store);
        // The model: blocks owned by committed transactions.
        let mut committed: BTreeSet<u64> = BTreeSet::new();
        let mut payloads: Vec<Vec<u8>> = Vec::new();
        for crash in 0..60 {
            let s = store.take().unwrap();
            // The open transaction: (allocated?, extent).
            let mut open: Vec<(bool, Extent)> = Vec::new();
            let mut held: Vec<u64> = committed.iter().copied().collect();
            for step in 0..rng.gen_range(1..40) {
                match rng.gen_range(0..10) {
                    0..=4 => {
                        if let Ok(e) = s.allocate(&AllocRequest::new(1, rng.gen_range(1..20))) {
                            open.push((true, e));
                        }
                    }
                    5..=6 if !held.is_empty() => {
                        let b = held.swap_remove(rng.gen_range(0..held.len()));
                        s.free(Extent::new(b, 1)).unwrap();
                        open.push((false, Extent::new(b, 1)));
                    }
                    7..=8 => {
                        let payload = format!("crash {crash} step {step}").into_bytes();
                        s.commit(&payload).unwrap();
                        for (allocated, e) in open.drain(..) {
                            for b in e.start..e.end() {
                                if allocated {
                                    committed.insert(b);
                                } else {
                                    committed.remove(&b);
                                }
                            }
                        }
                        payloads.push(payload);
                    }
                    _ => {
                        if open.is_empty() {
                            s.checkpoint().unwrap();
                            // Clean bitmaps dropped: the next uses reload them.
                            s.drop_idle_bitmaps(0);
                            s.drop_idle_bitmaps(0);
                        }
                    }
                }
            }
            // Crash: unflushed writes may be lost or torn.
            let keep = rng.gen_range(0.0..1.0);
            drop(s);
            dev.crash(Crash::Random {
                keep,
                tear: rng.gen_bool(0.5),
            })
            .unwrap();
            let (reopened, records) = Store::open(dev.clone(), Policy::default()).unwrap();
            reopened.allocator().check().unwrap();
            let mut expect = baseline.clone();
            expect.extend(committed.iter().copied());
            assert_eq!(used_blocks(reopened.alloc()), expect, "after crash {crash}");
            // The replayed payloads are the newest committed ones, in order.
            let tail: Vec<&Vec<u8>> = payloads[payloads.len() - records.len()..].iter().collect();
            let got: Vec<&Vec<u8>> = records.iter().map(|r| &r.payload).collect();
            assert_eq!(got, tail, "after crash {crash}");
            store = Some(reopened);
        }
    }

    /// A crash in the middle of a commit: the record's write fails, then power is lost with
    /// any part of the unflushed writes reaching the media (torn or not). The transaction
    /// either survives whole or not at all; everything committed before it survives.
    #[test]
    fn a_crash_during_a_commit_keeps_all_or_nothing_of_it() {
        for seed in 0..40u64 {
            let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), seed));
            let s = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
            let before = used_blocks(s.alloc());
            let kept = s.allocate(&AllocRequest::new(1, 7)).unwrap();
            s.commit(b"first").unwrap();
            let lost = s.allocate(&AllocRequest::new(2, 9)).unwrap();
            s.free(Extent::new(kept.start, 2)).unwrap();
            // The append reaches the device's volatile cache; the flush fails.
            let seq = s.journal.append(
                &[Op::Allocate(lost), Op::Free(Extent::new(kept.start, 2))],
                b"second",
            );
            assert!(seq.is_ok());
            dev.fail_writes(true);
            assert!(s.commit(b"third").is_err());
            drop(s);
            let (r, records) = crash_and_reopen(&dev, seed);
            r.allocator().check().unwrap();
            let used = used_blocks(r.alloc());
            let payloads: Vec<&[u8]> = records.iter().map(|x| x.payload.as_slice()).collect();
            let mut first = before.clone();
            first.extend(kept.start..kept.end());
            match payloads.as_slice() {
                [b"first"] => assert_eq!(used, first, "seed {seed}"),
                [b"first", b"second"] => {
                    let mut second = first.clone();
                    second.extend(lost.start..lost.end());
                    second.remove(&kept.start);
                    second.remove(&(kept.start + 1));
                    assert_eq!(used, second, "seed {seed}");
                }
                other => panic!("seed {seed}: replayed {other:?}"),
            }
        }
    }

    #[test]
    fn a_corrupt_group_is_held_and_the_rest_works() {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(8192 * 4096));
        let s = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
        drop(s);
        let sb = format::read_superblock(dev.as_ref()).unwrap();
        // Write group 5 home (mkfs writes no bitmap), then damage its bitmap.
        let mut descs = vec![0u8; 4096];
        dev.read_at(&mut descs, sb.desc_start * 4096).unwrap();
        let (_, bm) = format::read_group(dev.as_ref(), &sb, 5).unwrap();
        format::write_group(dev.as_ref(), &sb, 5, &bm, 0, &mut descs, 0).unwrap();
        dev.write_at(&descs, sb.desc_start * 4096).unwrap();
        let at = (sb.bitmap_start + 5 * u64::from(sb.bitmap_blocks)) * 4096 + 7;
        dev.write_at(&[0x5a], at).unwrap();
        let (s, _) = Store::open(dev.clone(), Policy::default()).unwrap();
        assert!(s.corrupt_groups().is_empty(), "open reads no bitmap");
        // A free as the group's first use loads it, finds it corrupt and is refused.
        assert!(matches!(
            s.free(Extent::new(5 * 1024 + 100, 50)),
            Err(Error::Corrupt { .. })
        ));
        assert_eq!(s.corrupt_groups(), &[5]);
        // Measuring the free space loads every group: the damage is found.
        s.allocator().free_space();
        assert_eq!(s.corrupt_groups(), &[5]);
        assert_eq!(s.allocator().stats().corrupt_groups, 1);
        s.allocator().check().unwrap();
        for i in 0..200u64 {
            let e = s.allocate(&AllocRequest::new(i, 30)).unwrap();
            assert!(
                e.start / 1024 != 5,
                "nothing is handed out of the corrupt group"
            );
        }
        assert!(matches!(
            s.free(Extent::new(5 * 1024 + 100, 1)),
            Err(Error::Corrupt { .. })
        ));
        s.commit(b"x").unwrap();
        s.checkpoint().unwrap();
        // The damage is left for fsck; the next open still holds the group.
        let mut b = [0u8];
        dev.read_at(&mut b, at).unwrap();
        assert_eq!(b, [0x5a]);
        assert!(crate::fsck::check(dev.as_ref()).unwrap().corrupt_groups == vec![5]);
        let (again, _) = Store::open(dev.clone(), Policy::default()).unwrap();
        again.ensure_loaded(5).unwrap();
        assert_eq!(again.corrupt_groups(), &[5]);
        again.allocator().check().unwrap();
        drop(again);
        // A damaged descriptor is found on open, before any bitmap is read.
        dev.write_at(&[0x33], sb.desc_start * 4096 + 6 * DESC_BYTES as u64 + 2)
            .unwrap();
        let (third, _) = Store::open(dev, Policy::default()).unwrap();
        assert_eq!(third.corrupt_groups(), &[6]);
        third.ensure_loaded(5).unwrap();
        assert_eq!(third.corrupt_groups(), &[5, 6]);
        assert_eq!(third.allocator().free_space().groups[6].free_blocks, 0);
        third.allocator().check().unwrap();
    }

    /// Open reads the superblock and descriptors only; groups load as they are used, with
    /// read-ahead, and a checkpoint writes only the changed ones; idle bitmaps are dropped
    /// under the memory limit and come back intact.
    /// A 16 TiB device (sparse in memory): open reads no bitmap, an unloaded group costs its
    /// cache line and a few bytes of set bits, and the first allocation loads one bitmap.
    #[test]
    fn a_16_tib_device_opens_without_reading_bitmaps() {
        let bytes = 16u64 << 40;
        let geometry = Geometry::from_bytes(4096, crate::GROUP_BLOCKS_DEFAULT, bytes).unwrap();
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(bytes));
        format::mkfs(dev.as_ref(), &geometry, 1024, [0; 16]).unwrap();
        let (s, _) = Store::open(dev, Policy::default()).unwrap();
        let a = s.allocator();
        assert_eq!(a.stats().loaded_bitmaps, 0);
        let per_group = a.memory_per_unloaded_group();
        assert!(
            (64.0..74.0).contains(&per_group),
            "{per_group} bytes per group"
        );
        s.allocate(&AllocRequest::new(1, 100)).unwrap();
        assert!(a.stats().loaded_bitmaps >= 1 && a.stats().loaded_bitmaps <= 2);
    }

    #[test]
    fn bitmaps_load_lazily_and_idle_ones_are_dropped() {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(8192 * 4096));
        let policy = Policy::parse("extalloc:bitmap_memory_mib=0").unwrap();
        Store::create(dev.clone(), &geometry(), 8, policy.clone()).unwrap();
        let (s, _) = Store::open(dev.clone(), policy.clone()).unwrap();
        assert_eq!(s.allocator().stats().loaded_bitmaps, 0);
        // Tiny device: every set's words are mostly overhead; see the 16 TiB test.
        assert!(s.allocator().memory_per_unloaded_group() > 65.0);
        let mut held = Vec::new();
        for i in 0..30u64 {
            held.push(s.allocate(&AllocRequest::new(i, 100)).unwrap());
        }
        s.commit(b"a").unwrap();
        let loaded = s.allocator().stats().loaded_bitmaps;
        assert!(loaded > 0 && loaded < 8, "{loaded} loaded");
        assert_eq!(s.allocator().home_dirty_groups().len() as u64, loaded);
        s.checkpoint().unwrap();
        assert!(s.allocator().home_dirty_groups().is_empty());
        // Everything clean and idle: all of it can go.
        s.drop_idle_bitmaps(0);
        s.drop_idle_bitmaps(0);
        assert_eq!(s.allocator().stats().loaded_bitmaps, 0);
        s.allocator().check().unwrap();
        // Reloaded groups hold what was written: freeing every extent works and the free
        // space comes back whole.
        let before = s.allocator().free_blocks();
        for e in &held {
            s.free(*e).unwrap();
        }
        s.commit(b"b").unwrap();
        assert_eq!(s.allocator().free_blocks(), before + 30 * 100);
        s.checkpoint().unwrap();
        drop(s);
        let (s, _) = Store::open(dev, policy).unwrap();
        assert_eq!(s.allocator().free_blocks(), before + 30 * 100);
        s.allocator().free_space();
        s.allocator().check().unwrap();
        assert!(crate::fsck::check(s.dev.as_ref()).unwrap().clean());
    }

    /// An extent allocated and freed in the same transaction, whose commit finds the
    /// journal full: the checkpoint must not write it home as used (no record allocates it
    /// before the one that frees it), or the next open fails replaying the allocation.
    #[test]
    fn allocated_and_freed_in_one_full_journal_commit_reopens() {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(8192 * 4096));
        let store = Store::create(dev.clone(), &geometry(), 2, Policy::default()).unwrap();
        let before = store.allocator().free_blocks();
        for i in 0..300u64 {
            let e = store.allocate(&AllocRequest::new(i, 3)).unwrap();
            store.free(e).unwrap();
            store.commit(&[7; 300]).unwrap();
        }
        drop(store);
        let (s, _) = Store::open(dev, Policy::default()).unwrap();
        s.allocator().check().unwrap();
        assert_eq!(s.allocator().free_blocks(), before);
    }

    /// A checkpoint that fails part-way (an I/O error after 0-20 writes) must leave every
    /// group it did not finish marked as changed: the next checkpoint writes them, and a
    /// committed allocation survives dropping bitmaps and reopening.
    #[test]
    fn a_failed_checkpoint_loses_no_change() {
        for n in 0..20u64 {
            let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), n));
            let s = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
            let e = s.allocate(&AllocRequest::new(1, 40)).unwrap();
            s.commit(b"a").unwrap();
            dev.fail_after(n);
            let failed = s.checkpoint().is_err();
            dev.fail_writes(false);
            s.checkpoint().unwrap();
            s.drop_idle_bitmaps(0);
            s.drop_idle_bitmaps(0);
            for b in e.start..e.end() {
                assert!(
                    !s.allocator().is_free(b).unwrap(),
                    "n {n} ({failed}): block {b}"
                );
            }
            drop(s);
            dev.crash(Crash::DropAll).unwrap();
            let (r, _) = Store::open(dev, Policy::default()).unwrap();
            r.allocator().check().unwrap();
            for b in e.start..e.end() {
                assert!(
                    !r.allocator().is_free(b).unwrap(),
                    "n {n}: block {b} after reopen"
                );
            }
        }
    }

    /// A crash inside the first checkpoint that writes a group home (it leaves
    /// `BITMAP_UNINIT`): whatever part of the writes survives, metadata stays used and the
    /// committed allocation survives.
    /// Files with preallocations on a store: random writes, punches and closes, commits and
    /// checkpoints, then a crash that keeps a random part of the unflushed writes. After
    /// the reopen, exactly the metadata and the blocks files had mapped at the last commit
    /// are used: every block a preallocation reserved is free, nothing leaked, fsck is
    /// clean. Every record replayed allocates only extents handed to a file, never
    /// reserved-but-unwritten blocks. The accounting equation holds after every step.
    #[test]
    fn files_with_preallocations_journal_only_what_they_map() {
        use crate::files::DataRequest;
        for seed in 0..40u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), seed));
            let s = Store::create(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
            let sb = format::read_superblock(dev.as_ref()).unwrap();
            let files: Vec<_> = (0..6u64).map(|id| s.create_file(id)).collect();
            let mut handed: BTreeSet<Extent> = BTreeSet::new();
            let mut durable: BTreeSet<u64> = BTreeSet::new();
            let mut saw_reserved = false;
            for step in 0..200u32 {
                let f = &files[rng.gen_range(0..files.len())];
                match rng.gen_range(0..10) {
                    0..=5 => {
                        let l = rng.gen_range(0..512u64);
                        if !f.is_mapped(l) {
                            let e = s.allocate_data(f, &DataRequest::new(l, 1)).unwrap();
                            handed.insert(e);
                        }
                    }
                    6 => {
                        let l = rng.gen_range(0..512u64);
                        s.free_data(f, l, rng.gen_range(1..64)).unwrap();
                    }
                    7 => {
                        s.release_prealloc(f).unwrap();
                    }
                    _ => {
                        s.commit(&step.to_le_bytes()).unwrap();
                        durable = files
                            .iter()
                            .flat_map(|f| f.extents())
                            .flat_map(|(_, e)| e.start..e.end())
                            .collect();
                        if rng.gen_bool(0.3) {
                            s.checkpoint().unwrap();
                        }
                    }
                }
                saw_reserved |= s.allocator().reserved_blocks() > 0;
                s.allocator().check().unwrap();
            }
            assert!(
                saw_reserved,
                "seed {seed}: the workload made preallocations"
            );
            drop(s);
            let (r, records) = crash_and_reopen(&dev, seed);
            for rec in &records {
                for op in &rec.ops {
                    if let Op::Allocate(e) = op {
                        assert!(
                            handed.contains(e),
                            "seed {seed}: record {} allocates {e:?}, never handed to a file",
                            rec.seq
                        );
                    }
                }
            }
            r.allocator().check().unwrap();
            assert_eq!(r.allocator().reserved_blocks(), 0);
            let metadata: BTreeSet<u64> =
                (0..sb.metadata_end()).chain([sb.backup_block()]).collect();
            let expected: BTreeSet<u64> = metadata.union(&durable).copied().collect();
            let used = used_blocks(r.alloc());
            assert_eq!(used, expected, "seed {seed}: used blocks after the crash");
            assert_eq!(r.allocator().allocated_blocks(), expected.len() as u64);
            drop(r);
            let report = crate::fsck::check(dev.as_ref()).unwrap();
            assert!(report.clean(), "seed {seed}: {:?}", report.problems);
        }
    }

    #[test]
    fn a_crash_in_a_groups_first_checkpoint_keeps_metadata_used() {
        for seed in 0..120u64 {
            let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), seed));
            let s = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
            let sb = format::read_superblock(dev.as_ref()).unwrap();
            let e = s.allocate(&AllocRequest::new(1, 7).goal(200)).unwrap();
            s.commit(b"a").unwrap();
            dev.fail_after(seed % 12);
            let _ = s.checkpoint();
            drop(s);
            dev.crash(Crash::Random {
                keep: 0.5,
                tear: seed % 2 == 0,
            })
            .unwrap();
            let (r, _) = Store::open(dev, Policy::default()).unwrap();
            r.allocator().check().unwrap();
            for b in (0..sb.metadata_end()).chain([sb.backup_block()]) {
                assert!(!r.allocator().is_free(b).unwrap(), "seed {seed}: block {b}");
            }
            for b in e.start..e.end() {
                assert!(!r.allocator().is_free(b).unwrap(), "seed {seed}: block {b}");
            }
        }
    }

    #[test]
    fn a_full_journal_checkpoints_instead_of_failing() {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(8192 * 4096));
        let store = Store::create(dev.clone(), &geometry(), 2, Policy::default()).unwrap();
        for i in 0..500u64 {
            store.allocate(&AllocRequest::new(i, 1)).unwrap();
            store.commit(&[7; 100]).unwrap();
        }
        drop(store);
        let (s, records) = Store::open(dev, Policy::default()).unwrap();
        assert!(records.len() < 500, "older records were checkpointed");
        s.allocator().check().unwrap();
        assert_eq!(
            s.allocator().free_blocks(),
            8192 - 500 - (1 + 2 + 1 + 8) - 1,
            "metadata, the backup superblock and 500 blocks are used"
        );
    }
}

#[cfg(test)]
mod forced_commit_tests {
    use super::*;
    use crate::disk::device::MemDevice;

    /// Two threads truncate and reallocate 18,023 blocks each on a device with room for
    /// several times that, committing only when an allocation runs out of space (fallocate3
    /// on a store): every allocation succeeds. One forced commit was not always enough: the
    /// other thread could fill the next transaction with frees while the commit waited for
    /// its flush.
    fn truncate_and_refill(spec: &str) {
        let geometry = Geometry::new(4096, 4096, 262_144).unwrap();
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(262_144 * 4096));
        let store = Store::create(dev, &geometry, 256, Policy::parse(spec).unwrap()).unwrap();
        store.set_forced_commits(true);
        std::thread::scope(|s| {
            for t in 0..2u64 {
                let store = &store;
                s.spawn(move || {
                    let mut held: Vec<Extent> = Vec::new();
                    for round in 0..200 {
                        for e in held.drain(..) {
                            store.free(e).unwrap();
                        }
                        let mut got = 0;
                        while got < 18_023 {
                            let want = (18_023 - got).min(4096);
                            let e = store
                                .allocate(&AllocRequest::new(t, want).logical(got))
                                .unwrap_or_else(|e| {
                                    panic!(
                                        "{spec}: thread {t} round {round}: {e}; pending {}",
                                        store.allocator().pending_free_blocks()
                                    )
                                });
                            got += e.len;
                            held.push(e);
                        }
                    }
                });
            }
        });
        store.commit(b"end").unwrap();
        store.allocator().check().unwrap();
    }

    /// One thread allocates, another frees the same extent, in one transaction: the record
    /// lists allocations first, so the replay applies them in an order that works.
    #[test]
    fn an_extent_allocated_and_freed_in_one_transaction_replays() {
        let geometry = Geometry::new(4096, 1024, 8192).unwrap();
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(8192 * 4096));
        let store = Store::create(dev.clone(), &geometry, 64, Policy::default()).unwrap();
        let before = store.allocator().free_blocks();
        let e = std::thread::scope(|s| {
            s.spawn(|| store.allocate(&AllocRequest::new(1, 10)).unwrap())
                .join()
                .unwrap()
        });
        let kept = store.allocate(&AllocRequest::new(2, 5)).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| store.free(e).unwrap());
        });
        store.commit(b"one").unwrap();
        drop(store);
        let (store, records) = Store::open(dev, Policy::default()).unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(store.allocator().free_blocks(), before - kept.len);
        store.allocator().check().unwrap();
    }

    #[test]
    fn two_threads_refill_through_forced_commits() {
        truncate_and_refill("extalloc");
        truncate_and_refill("extalloc:prefetch_groups=0");
        truncate_and_refill("ext4-2025");
    }
}
