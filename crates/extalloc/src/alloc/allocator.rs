//! The allocator: one per device.
//!
//! # Allocation path (DESIGN.md section 3)
//!
//! 1. Validate the request; nothing changes if it is bad.
//! 2. (Normalisation and 3. preallocation belong to the file layer, `crate::files`, which
//!    calls `reserve` here.)
//! 4. Goal: try the exact goal block in its group.
//! 5. Stream: requests of large files (and requests without a goal) start scanning at the
//!    file's stream goal, picked by the file id modulo the number of goals; small files with
//!    a goal start in the goal's group.
//! 6. Passes 1-5 ([`Pass`]) over the group indexes, right of the start group first, then left.
//!    A group is checked through its lock-free mirrors, then locked (try-lock in passes 1-4
//!    when the policy says so), rechecked and searched with bounded effort.
//! 7. Mark used: bitmap, buddy summary, mirrors, index positions.
//!
//! Finding nothing, the core fails with `NoSpace`, saying how many blocks wait for a commit
//! and how many preallocations reserve; it applies no remedy itself. The owner of the
//! commits may ask for one (`allocate_committing`); the file layer discards preallocations.
//!
//! # Accounting
//!
//! Every block marked used is allocated (handed to a caller, or found used on disk),
//! reserved (for the file layer's preallocations: `reserve`, then `claim` or
//! `release_reserved`) or pending (freed, waiting for a commit); per-shard `HeldCounters`
//! keep the first two, and `check()` verifies `marked = allocated + reserved + pending`.
//!
//! # Free path (section 4)
//!
//! A free is validated against the bitmap and the pending set under the group lock, then
//! merged with pending neighbours of the same transaction and inserted; the blocks stay used
//! until `commit()` returns them. See `free.rs`.
//!
//! # Lock order
//!
//! group locks in ascending group order -> the global lock (`md`) -> list-index locks.
//! `commit_lock` is taken before any of them and only by `commit()`.

use super::class::{self, Lifetime, SizeClass};
use super::lazy::{BitmapSource, GroupSummary, Lazy, LOADED};
use super::policy::{Policy, StreamStart};
use super::stats::{Pass, Shard, Stats, StatsSnapshot};
use crate::error::{Error, Result};
use crate::geometry::{Extent, Geometry};
use crate::groups::{AtomicBitset, Group, GroupBitmap, GroupState, OrderIndex, Slot, ORDERS};
use crossbeam_utils::CachePadded;
use parking_lot::{MappedMutexGuard, Mutex, MutexGuard};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// What a caller asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocRequest {
    /// The file (or object) the blocks are for; hashed to pick a stream goal.
    pub file: u64,
    /// Logical block offset of the request in the file (decides stream allocation).
    pub logical: u64,
    /// Blocks wanted.
    pub len: u64,
    /// Fewest blocks the caller accepts (passes 3 and 5 may return fewer than `len`).
    pub min_len: u64,
    /// Preferred first block, usually the block after the file's previous extent.
    pub goal: Option<u64>,
    /// Expected lifetime: the second key of size classes.
    pub lifetime: Lifetime,
    /// Length (blocks) that decides the size class; 0 = `len`. A normalised request passes
    /// the caller's original length here, so preallocation does not change its class.
    pub class_len: u64,
}

impl AllocRequest {
    /// A request for `len` blocks for `file`, accepting any length down to one block.
    pub fn new(file: u64, len: u64) -> Self {
        AllocRequest {
            file,
            logical: 0,
            len,
            min_len: 1,
            goal: None,
            lifetime: Lifetime::Unknown,
            class_len: 0,
        }
    }

    pub fn lifetime(mut self, lifetime: Lifetime) -> Self {
        self.lifetime = lifetime;
        self
    }

    pub fn goal(mut self, goal: u64) -> Self {
        self.goal = Some(goal);
        self
    }

    pub fn logical(mut self, logical: u64) -> Self {
        self.logical = logical;
        self
    }

    pub fn min_len(mut self, min_len: u64) -> Self {
        self.min_len = min_len;
        self
    }

    /// Insist on all of `len`.
    pub fn exact(mut self) -> Self {
        self.min_len = self.len;
        self
    }
}

/// State under the global lock (ext4's `s_md_lock`): the single stream goal of policies that
/// lock it, the global freed list, and the pending counter of policies without the atomic.
#[derive(Default)]
pub(super) struct MdState {
    pub stream_goal: u64,
    /// Pending frees by `(group, id)`.
    pub freed: BTreeSet<(u64, u64)>,
    pub next_id: u64,
    pub pending_blocks: u64,
}

/// Whom an allocation's blocks go to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// Handed to the caller.
    Allocated,
    /// Reserved for a preallocation of the file layer: handed to nobody yet.
    Reserved,
}

/// A locked group whose bitmap is loaded.
pub(super) type StateGuard<'a> = MappedMutexGuard<'a, GroupState>;

pub struct Allocator {
    pub(super) geometry: Geometry,
    pub(super) policy: Policy,
    /// One [`Group`] per group, a cache line each: see `memory_per_unloaded_group`.
    pub(super) groups: Box<[Group]>,
    pub(super) by_largest: OrderIndex,
    pub(super) by_avg: OrderIndex,
    /// Groups by the order of their free block count (`slow_pass_index`): pass 4 (`free >=
    /// want`) looks only at groups of the request's order or above.
    pub(super) by_free: OrderIndex,
    /// Stream goals: `stream_goals_per_class` of them per size class (one class without
    /// size classes).
    stream_goals: Box<[CachePadded<AtomicU64>]>,
    stream_goals_per_class: u64,
    pub(super) md: CachePadded<Mutex<MdState>>,
    pub(super) pending_blocks: CachePadded<AtomicU64>,
    /// Groups with pending frees (per-group free lists).
    pub(super) dirty: AtomicBitset,
    /// Per size-class tag (index `tag - 1`), the groups carrying it (empty without size
    /// classes).
    pub(super) by_tag: Box<[AtomicBitset]>,
    /// Current transaction: frees are stamped with it; `commit()` advances it.
    pub(super) txn: CachePadded<AtomicU64>,
    pub(super) commit_lock: Mutex<()>,
    pub(super) stats: Stats,
    /// `stream_threshold_kib` in blocks.
    pub(super) stream_threshold_blocks: u64,
    /// Bumped by every release that returned blocks: an allocation that found nothing while
    /// it changed tries again.
    pub(super) releases: CachePadded<AtomicU64>,
    /// Bitmaps loaded on first use (an allocator opened over a device); `None` in memory.
    lazy: Option<Lazy>,
    /// Groups changed since their home copy was written (an allocator opened over a device).
    home_dirty: Option<AtomicBitset>,
    /// Groups whose bitmap failed its checks when loaded: held all used.
    pub(super) corrupt: AtomicBitset,
}

fn floor_log2(n: u64) -> u32 {
    63 - n.leading_zeros()
}

/// The set of `by_free` a group of `free` blocks is in.
pub(super) fn free_order(free: u32) -> Option<u32> {
    (free > 0).then(|| floor_log2(u64::from(free)))
}

/// One allocation in progress: the request and what was decided about it so far.
struct AllocContext<'a> {
    request: &'a AllocRequest,
    /// A large file's request: it starts at, and moves, the stream goal.
    stream: bool,
    /// The file's stream goal.
    slot: usize,
    /// Size-class tag of the request (0 when size classes are off).
    class_tag: u8,
    shard: &'a Shard,
}

/// How a pass walks the groups.
#[derive(Clone, Copy)]
enum Walk<'a> {
    /// Every group from the start, wrapping around.
    Linear,
    /// Groups in the sets of orders `>= order_min` of an index.
    Index(&'a OrderIndex, u32),
    /// Groups in the set of exactly this order of an ordered index.
    IndexExact(&'a OrderIndex, u32),
}

impl Allocator {
    /// An allocator for a device of `geometry`, all blocks free.
    pub fn new(geometry: Geometry, policy: Policy) -> Result<Self> {
        let groups_count = geometry.groups_count();
        if groups_count > u32::MAX as u64 {
            return Err(Error::InvalidGeometry(format!(
                "{groups_count} groups: at most 2^32 groups (use larger groups)"
            )));
        }
        let groups: Box<[Group]> = (0..groups_count)
            .map(|g| {
                let bitmap =
                    GroupBitmap::new(geometry.group_blocks as u32, geometry.group_len(g) as u32);
                Group::new(bitmap)
            })
            .collect();
        Self::with_groups(geometry, policy, groups, None)
    }

    /// An allocator over a persistent device whose groups start unloaded, placed in the
    /// indexes by what their descriptors say (`summaries`, one per group); bitmaps are read
    /// from `source` on first use, with read-ahead per the policy's `prefetch_groups`.
    pub fn open_lazy(
        geometry: Geometry,
        policy: Policy,
        source: Arc<dyn BitmapSource>,
        summaries: &[GroupSummary],
    ) -> Result<Self> {
        let groups_count = geometry.groups_count();
        if summaries.len() as u64 != groups_count {
            return Err(Error::InvalidRequest(format!(
                "{} group summaries for {groups_count} groups",
                summaries.len()
            )));
        }
        for (g, s) in summaries.iter().enumerate() {
            if u64::from(s.free_blocks) > geometry.group_len(g as u64)
                || s.largest_order.is_some() != (s.free_blocks > 0)
                || s.avg_order.is_some() != (s.free_blocks > 0)
                || s.largest_order
                    .is_some_and(|o| u64::from(o) > u64::from(ORDERS as u32 - 1))
                || s.avg_order
                    .is_some_and(|o| u64::from(o) > u64::from(ORDERS as u32 - 1))
                || s.class_tag > class::TAGS
            {
                return Err(Error::Corrupt {
                    what: format!("descriptor of group {g}"),
                    detail: format!("impossible summary {s:?}"),
                });
            }
        }
        let groups: Box<[Group]> = summaries
            .iter()
            .map(|s| {
                let tag = if policy.size_classes { s.class_tag } else { 0 };
                Group::unloaded(s.free_blocks, s.largest_order, s.avg_order, tag)
            })
            .collect();
        let lazy = Lazy::new(source, geometry, policy.prefetch_groups > 0);
        Self::with_groups(geometry, policy, groups, Some(lazy))
    }

    fn with_groups(
        geometry: Geometry,
        policy: Policy,
        groups: Box<[Group]>,
        lazy: Option<Lazy>,
    ) -> Result<Self> {
        let groups_count = groups.len() as u64;
        let orders = geometry.group_blocks.trailing_zeros() as usize + 1;
        debug_assert!(orders <= ORDERS);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        let stream_goals_count = match policy.stream_goals {
            0 => cpus.min(groups_count / 4).max(1),
            n => u64::from(n),
        };
        // With size classes each class has its own goals, so a large short-lived stream does
        // not drag a small long-lived one along behind it.
        let slots = stream_goals_count * if policy.size_classes { 3 } else { 1 };
        let stream_goals = (0..slots)
            .map(|i| {
                let start = match policy.stream_start {
                    StreamStart::Spread => i * groups_count / slots,
                    StreamStart::Front => 0,
                    StreamStart::Packed => i % groups_count,
                    StreamStart::Goals => {
                        // Slots are laid out class by class: slot = class * goals + k.
                        let (class, k) = (i / stream_goals_count, i % stream_goals_count);
                        (k * groups_count / stream_goals_count + class) % groups_count
                    }
                };
                CachePadded::new(AtomicU64::new(start))
            })
            .collect();
        let alloc = Allocator {
            // Orders above the group's own cannot occur: no sets for them.
            by_largest: OrderIndex::new(policy.ordered_index, orders, groups_count),
            by_avg: OrderIndex::new(policy.ordered_index, orders, groups_count),
            by_free: OrderIndex::new(
                true,
                if policy.slow_pass_index { orders } else { 1 },
                groups_count,
            ),
            stream_goals,
            stream_goals_per_class: stream_goals_count,
            md: CachePadded::new(Mutex::new(MdState::default())),
            pending_blocks: CachePadded::new(AtomicU64::new(0)),
            dirty: AtomicBitset::new(groups_count),
            by_tag: if policy.size_classes {
                (0..class::TAGS)
                    .map(|_| AtomicBitset::new(groups_count))
                    .collect()
            } else {
                Box::new([])
            },
            txn: CachePadded::new(AtomicU64::new(1)),
            commit_lock: Mutex::new(()),
            stats: Stats::new(),
            stream_threshold_blocks: policy.stream_threshold_kib * 1024
                / u64::from(geometry.block_size),
            releases: CachePadded::new(AtomicU64::new(0)),
            home_dirty: lazy.as_ref().map(|_| AtomicBitset::new(groups_count)),
            lazy,
            corrupt: AtomicBitset::new(groups_count),
            geometry,
            policy,
            groups,
        };
        if alloc.policy.optimize_scan {
            for (g, group) in alloc.groups.iter().enumerate() {
                alloc
                    .by_largest
                    .update(g as u64, None, group.largest_order());
                alloc.by_avg.update(g as u64, None, group.avg_order());
                if alloc.slow_indexed() {
                    alloc
                        .by_free
                        .update(g as u64, None, free_order(group.free_blocks()));
                }
            }
        }
        // What the groups' figures say is used counts as allocated until a load says more.
        let used: u64 = (0..groups_count)
            .map(|g| {
                alloc.geometry.group_len(g) - u64::from(alloc.groups[g as usize].free_blocks())
            })
            .sum();
        let shard = alloc.stats.shard();
        shard.add(&shard.held.allocated, used);
        for (g, group) in alloc.groups.iter().enumerate() {
            if group.class_tag() != 0 {
                alloc.by_tag[usize::from(group.class_tag() - 1)].insert(g as u64);
            }
        }
        Ok(alloc)
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Number of stream goals in use (per size class, when size classes are on).
    pub fn stream_goals_count(&self) -> usize {
        self.stream_goals_per_class as usize
    }

    /// Free blocks, not counting frees that wait for a commit (sum of the group mirrors).
    pub fn free_blocks(&self) -> u64 {
        self.groups.iter().map(|g| u64::from(g.free_blocks())).sum()
    }

    /// Blocks freed but not yet returned by a commit.
    pub fn pending_free_blocks(&self) -> u64 {
        if self.policy.atomic_pending {
            self.pending_blocks.load(Relaxed)
        } else {
            self.md.lock().pending_blocks
        }
    }

    /// Counters summed over the shards, and the gauges of the groups: bitmaps loaded now,
    /// read ahead so far, and corrupt groups.
    pub fn stats(&self) -> StatsSnapshot {
        let mut s = self.stats.snapshot();
        s.corrupt_groups = self.corrupt.iter().count() as u64;
        if let Some(lazy) = &self.lazy {
            s.loaded_bitmaps = lazy.loaded.load(Relaxed);
            s.prefetched_bitmaps = lazy.prefetched();
        } else {
            s.loaded_bitmaps = self.groups.len() as u64;
        }
        s
    }

    /// Groups found corrupt (their bitmap failed its checks when loaded), ascending.
    pub fn corrupt_groups(&self) -> Vec<u64> {
        self.corrupt.iter().collect()
    }

    /// Marks group `g` corrupt before its first load (its descriptor failed its checks):
    /// when loaded, it is held all used.
    pub fn mark_corrupt(&self, g: u64) {
        self.corrupt.insert(g);
    }

    /// Loads group `g`'s bitmap if it is not in memory (a corrupt one loads as all used).
    pub fn ensure_loaded(&self, g: u64) -> Result<()> {
        if g >= self.groups.len() as u64 {
            return Err(Error::InvalidRequest(format!(
                "group {g}: the device has {} groups",
                self.groups.len()
            )));
        }
        self.lock_group(g, self.stats.shard()).map(drop)
    }

    /// Group `g`'s size-class tag (0: none).
    pub fn group_class_tag(&self, g: u64) -> u8 {
        self.groups[g as usize].class_tag()
    }

    /// Memory one loaded bitmap takes (used bits, the buddy bitmaps, the struct).
    pub fn bitmap_memory_bytes(&self) -> u64 {
        let gb = self.geometry.group_blocks;
        // used: gb bits; full[k] for k >= 1: gb / 2 + gb / 4 + ... bits.
        gb / 8 + gb / 8 + std::mem::size_of::<GroupState>() as u64
    }

    /// Whether `off .. off + len` of the locked group `g` may be freed: the group is not
    /// held corrupt (checked under the lock: loading is what finds a bitmap corrupt), and
    /// every block is allocated and not already waiting for a commit.
    pub(super) fn check_freeable(
        &self,
        g: u64,
        state: &GroupState,
        off: u32,
        len: u32,
    ) -> Result<()> {
        if self.corrupt.contains(g) {
            return Err(Error::Corrupt {
                what: format!("group {g}"),
                detail: "held used since it failed its checks; its blocks cannot be freed".into(),
            });
        }
        let start = self.geometry.group_start(g) + u64::from(off);
        if state.pending_overlaps(off, len) {
            return Err(Error::DoubleFree {
                start,
                len: u64::from(len),
            });
        }
        if !state.bitmap.range_is_used(off, len) {
            return Err(Error::NotAllocated {
                start,
                len: u64::from(len),
            });
        }
        Ok(())
    }

    /// True if group `g` is held corrupt.
    pub fn is_corrupt(&self, g: u64) -> bool {
        self.corrupt.contains(g)
    }

    /// True if group `g`'s bitmap is in memory.
    pub fn is_loaded(&self, g: u64) -> bool {
        self.lazy.as_ref().is_none_or(|l| l.state(g) == LOADED)
    }

    /// Bytes an unloaded group costs, measured from the structures: its [`Group`], its
    /// load-state byte, and its share of the order indexes, the per-tag sets, the dirty sets
    /// and the corrupt set.
    pub fn memory_per_unloaded_group(&self) -> f64 {
        let n = self.groups.len() as u64;
        let sets: u64 = [&self.by_largest, &self.by_avg, &self.by_free]
            .iter()
            .map(|i| i.memory_bytes())
            .sum::<u64>()
            + self
                .by_tag
                .iter()
                .map(AtomicBitset::memory_bytes)
                .sum::<u64>()
            + self.dirty.memory_bytes()
            + self.corrupt.memory_bytes()
            + self
                .home_dirty
                .as_ref()
                .map_or(0, AtomicBitset::memory_bytes);
        let state = if self.lazy.is_some() { n } else { 0 };
        (std::mem::size_of::<Group>() as u64 * n + state + sets) as f64 / n as f64
    }

    /// Groups changed since their home copy was written (empty in memory).
    pub fn home_dirty_groups(&self) -> Vec<u64> {
        self.home_dirty
            .as_ref()
            .map_or_else(Vec::new, |d| d.iter().collect())
    }

    /// Marks group `g` clean: its home copy is what memory holds (after a checkpoint wrote it).
    pub fn mark_home_clean(&self, g: u64) {
        if let Some(d) = &self.home_dirty {
            d.remove(g);
        }
    }

    /// Marks group `g` as differing from its home copy.
    pub fn mark_home_dirty(&self, g: u64) {
        if let Some(d) = &self.home_dirty {
            d.insert(g);
        }
    }

    /// Drops loaded bitmaps of idle groups until at most `keep` remain loaded: clean (home
    /// copy current), no pending frees, not corrupt, not locked, not used since the last
    /// sweep (CLOCK: a used group loses its reference bit and survives one more sweep).
    /// Returns the bitmaps dropped. Needs an allocator opened over a device.
    pub fn drop_idle_bitmaps(&self, keep: u64) -> u64 {
        let Some(lazy) = &self.lazy else {
            return 0;
        };
        let mut dropped = 0;
        for pass in 0..2 {
            for (g, group) in self.groups.iter().enumerate() {
                if lazy.loaded.load(Relaxed) <= keep {
                    return dropped;
                }
                let g = g as u64;
                if lazy.state(g) != LOADED
                    || self.corrupt.contains(g)
                    || self.home_dirty.as_ref().is_some_and(|d| d.contains(g))
                    || (group.take_referenced() && pass == 0)
                {
                    continue;
                }
                let Some(mut slot) = group.try_lock() else {
                    continue;
                };
                // Again under the lock: a change between the first look and the lock made
                // the group dirty.
                if self.corrupt.contains(g)
                    || self.home_dirty.as_ref().is_some_and(|d| d.contains(g))
                {
                    continue;
                }
                let idle = slot.as_ref().is_some_and(|s| s.pending.is_empty());
                if idle && lazy.try_drop(g) {
                    *slot = None;
                    dropped += 1;
                }
            }
        }
        dropped
    }

    pub fn stats_handle(&self) -> &Stats {
        &self.stats
    }

    /// True if `block` is free (not allocated and not pending).
    pub fn is_free(&self, block: u64) -> Result<bool> {
        self.geometry.validate(Extent::new(block, 1))?;
        let g = self.geometry.group_of(block);
        let off = (block - self.geometry.group_start(g)) as u32;
        let shard = self.stats.shard();
        Ok(self.lock_group(g, shard)?.bitmap.is_free(off))
    }

    fn validate_request(&self, req: &AllocRequest) -> Result<()> {
        if req.len == 0 {
            return Err(Error::ZeroLength);
        }
        if req.len > self.geometry.group_blocks {
            return Err(Error::InvalidRequest(format!(
                "{} blocks asked in one extent; an extent lies in one group of {} blocks: split the request",
                req.len, self.geometry.group_blocks
            )));
        }
        if req.min_len == 0 || req.min_len > req.len {
            return Err(Error::InvalidRequest(format!(
                "min_len {} must be from 1 to len {}",
                req.min_len, req.len
            )));
        }
        if let Some(goal) = req.goal {
            if goal >= self.geometry.blocks_count {
                return Err(Error::OutOfRange {
                    start: goal,
                    len: 1,
                    device_blocks: self.geometry.blocks_count,
                });
            }
        }
        Ok(())
    }

    /// Allocates one extent of `min_len ..= len` blocks inside one group and hands it to
    /// the caller. Finding no space, it fails with [`Error::NoSpace`], which says how many
    /// blocks wait for a commit and how many preallocations reserve: the layer that owns
    /// each remedy applies it and retries (see [`Allocator::allocate_committing`]).
    pub fn allocate(&self, req: &AllocRequest) -> Result<Extent> {
        self.allocate_as(req, Hold::Allocated, false)
    }

    /// [`Allocator::allocate`] for a caller that owns the commits (an allocator in memory,
    /// no journal): finding no space while frees wait, it commits them and retries once.
    pub fn allocate_committing(&self, req: &AllocRequest) -> Result<Extent> {
        self.allocate_as(req, Hold::Allocated, true)
    }

    /// Allocates blocks the file layer reserves for a preallocation: marked used, counted
    /// as reserved, handed to nobody (see [`Allocator::claim`]). `commit_first` as in
    /// [`Allocator::allocate_committing`].
    pub(crate) fn reserve(&self, req: &AllocRequest, commit_first: bool) -> Result<Extent> {
        self.allocate_as(req, Hold::Reserved, commit_first)
    }

    fn allocate_as(&self, req: &AllocRequest, hold: Hold, commit_first: bool) -> Result<Extent> {
        self.validate_request(req)?;
        let shard = self.stats.shard();
        let started = Instant::now();
        let result = self.allocate_validated(req, shard, commit_first);
        shard.record_latency_ns(started.elapsed().as_nanos() as u64);
        if let Ok(extent) = &result {
            debug_assert!(extent.len >= req.min_len && extent.len <= req.len);
            debug_assert_eq!(
                self.geometry.group_of(extent.start),
                self.geometry.group_of(extent.end() - 1),
                "an extent lies in one group"
            );
            shard.add(&shard.counters.allocs, 1);
            shard.add(&shard.counters.alloc_blocks, extent.len);
            let counter = match hold {
                Hold::Allocated => &shard.held.allocated,
                Hold::Reserved => &shard.held.reserved,
            };
            shard.add(counter, extent.len);
        }
        result
    }

    fn allocate_validated(
        &self,
        req: &AllocRequest,
        shard: &Shard,
        commit_first: bool,
    ) -> Result<Extent> {
        let mut committed = false;
        let mut raced = 0;
        loop {
            let releases = self.releases.load(Relaxed);
            if let Some(extent) = self.try_allocate(req, shard) {
                return Ok(extent);
            }
            if self.releases.load(Relaxed) != releases && raced < 8 {
                // A commit returned space while the passes ran: groups that became free
                // behind a walk (or moved to an order it had already passed) were missed.
                raced += 1;
                continue;
            }
            if commit_first && !committed && self.pending_free_blocks() > 0 {
                // The caller owns the commits: space waiting for one is made reusable.
                committed = true;
                shard.add(&shard.counters.forced_commits, 1);
                self.commit();
                continue;
            }
            break;
        }
        shard.add(&shard.counters.no_space, 1);
        Err(Error::NoSpace {
            requested: req.len,
            min_len: req.min_len,
            free_blocks: self.free_blocks(),
            pending_blocks: self.pending_free_blocks(),
            reserved_blocks: self.reserved_blocks(),
        })
    }

    fn try_allocate(&self, req: &AllocRequest, shard: &Shard) -> Option<Extent> {
        let stream = req.logical.saturating_add(req.len) > self.stream_threshold_blocks;
        let (class_tag, class_index) = if self.policy.size_classes {
            let class_len = if req.class_len == 0 {
                req.len
            } else {
                req.class_len
            };
            let bytes = class_len.saturating_mul(u64::from(self.geometry.block_size));
            let size = SizeClass::of_bytes(bytes);
            (class::tag(size, req.lifetime), size as u64)
        } else {
            (0, 0)
        };
        // The file's stream goal: its id folded and taken modulo the number of goals, as ext4
        // takes the inode number modulo: consecutive ids (how most callers number files)
        // land on different goals, so concurrent streams start in different groups.
        let per_class = self.stream_goals_per_class;
        let slot = ((req.file ^ (req.file >> 32)) % per_class + class_index * per_class) as usize;
        let ctx = AllocContext {
            request: req,
            stream,
            slot,
            class_tag,
            shard,
        };

        // Step 4: the exact goal.
        if let Some(goal) = req.goal {
            if let Some(extent) = self.alloc_at_goal(&ctx, goal) {
                shard.add(&shard.counters.pass_hits[Pass::Goal as usize], 1);
                return Some(extent);
            }
        }

        // Step 5: where scanning starts.
        let groups_count = self.groups.len() as u64;
        // Requests of large files, and any request without a goal, start at the stream goal;
        // a small file's request with a goal starts in the goal's group.
        let start = match req.goal {
            Some(goal) if !stream => self.geometry.group_of(goal),
            _ if self.policy.stream_goal_locked => self.lock_md(shard).stream_goal,
            _ => self.stream_goals[slot].load(Relaxed),
        } % groups_count;

        // Step 6: the passes.
        let (extent, pass) = self.scan_passes(&ctx, start)?;
        shard.add(&shard.counters.pass_hits[pass as usize], 1);
        if stream && self.geometry.group_of(extent.start) == start {
            shard.add(&shard.counters.stream_goal_hits, 1);
        }
        Some(extent)
    }

    fn alloc_at_goal(&self, ctx: &AllocContext<'_>, goal: u64) -> Option<Extent> {
        let len = ctx.request.len;
        let g = self.geometry.group_of(goal);
        let off = (goal - self.geometry.group_start(g)) as u32;
        let group = &self.groups[g as usize];
        if group.free_blocks() < len as u32 {
            return None;
        }
        let mut state = self.lock_group(g, ctx.shard).ok()?;
        if !state.bitmap.range_is_free(off, len as u32) {
            return None;
        }
        Some(self.take(ctx, g, &mut state, off, len as u32))
    }

    fn scan_passes<'a>(&'a self, ctx: &AllocContext<'_>, start: u64) -> Option<(Extent, Pass)> {
        let req = ctx.request;
        let len = req.len;
        let order = floor_log2(len);
        let indexed = self.policy.optimize_scan;
        let walk = |index: &'a OrderIndex, order_min: u32| -> Walk<'a> {
            if indexed {
                Walk::Index(index, order_min)
            } else {
                Walk::Linear
            }
        };
        // Without size classes every group is in tier 0; with them, each pass tries the tiers
        // in order (same class, same size, untagged, other size).
        let run = |pass: Pass, walk: Walk<'_>, want: u64| {
            self.run_pass(ctx, pass, walk, start, want)
                .map(|e| (e, pass))
        };

        if len.is_power_of_two() && order >= self.policy.order2_min_order {
            if let Some(hit) = run(Pass::Power2Aligned, walk(&self.by_largest, order), len) {
                return Some(hit);
            }
        }
        if let Some(hit) = run(Pass::GoalLenFast, walk(&self.by_avg, order), len) {
            return Some(hit);
        }
        let trim_floor = order.saturating_sub(self.policy.best_avail_trim_orders);
        for trimmed in (trim_floor..order).rev() {
            let want = 1u64 << trimmed;
            if want < req.min_len {
                break;
            }
            if let Some(hit) = run(Pass::BestAvailLen, walk(&self.by_avg, trimmed), want) {
                return Some(hit);
            }
        }
        if !self.slow_indexed() {
            if let Some(hit) = run(Pass::GoalLenSlow, Walk::Linear, len) {
                return Some(hit);
            }
            return run(Pass::AnyFree, Walk::Linear, len);
        }
        // Pass 4 among groups with at least the request's order of free blocks; pass 5 from
        // the largest free chunk down, so a crowded device gives the longest extent there is
        // and no scan looks at groups that cannot help.
        if let Some(hit) = run(Pass::GoalLenSlow, Walk::Index(&self.by_free, order), len) {
            return Some(hit);
        }
        let top = self.by_largest.order_count() - 1;
        // A free run of `min_len` blocks holds an aligned chunk of this order at least (a run
        // of 2^(k+1) - 1 blocks holds an aligned 2^k chunk wherever it starts).
        let floor = floor_log2(req.min_len + 1).saturating_sub(1);
        (floor..=top)
            .rev()
            .find_map(|o| run(Pass::AnyFree, Walk::IndexExact(&self.by_largest, o), len))
    }

    /// Passes 4 and 5 walk indexes too (`slow_pass_index` with ordered indexes).
    pub(super) fn slow_indexed(&self) -> bool {
        self.policy.slow_pass_index && self.policy.optimize_scan && self.policy.ordered_index
    }

    /// The lock-free check of a group's mirrors before locking it.
    fn good_group(&self, ctx: &AllocContext<'_>, g: u64, pass: Pass, want: u64) -> bool {
        let group = &self.groups[g as usize];
        let free = u64::from(group.free_blocks());
        let min_len = ctx.request.min_len;
        match pass {
            Pass::Goal => unreachable!("the goal is not a scanning pass"),
            Pass::Power2Aligned => group.largest_order().is_some_and(|o| o >= floor_log2(want)),
            Pass::GoalLenFast | Pass::BestAvailLen => {
                free >= want && group.avg_order().is_some_and(|o| o >= floor_log2(want))
            }
            Pass::GoalLenSlow => free >= want,
            Pass::AnyFree => free >= min_len,
        }
    }

    /// Runs one pass. With size classes, groups are tried in tiers: the request's own tag
    /// (and the start group if it is untagged: claiming the stream's or goal's empty group
    /// keeps concurrent streams apart instead of crowding every stream of a class into the
    /// same groups), the same size with another lifetime, untagged, other sizes. Tagged tiers
    /// walk the per-tag group sets from the start (right, then left), so finding the few
    /// groups of a class costs nothing per group of other classes; the untagged tier uses the
    /// pass's own walk. The list index walks once per tier, as its "choose group" lookup
    /// always restarts from the head.
    fn run_pass(
        &self,
        ctx: &AllocContext<'_>,
        pass: Pass,
        walk: Walk<'_>,
        start: u64,
        want: u64,
    ) -> Option<Extent> {
        let mut visit = |g: u64| self.scan_group(ctx, g, pass, want);
        // With indexed slow passes the device is crowded by the time they run: they take
        // the best space the index knows whatever its class, rather than walking every
        // tagged group once per tier (and per order in pass 5).
        let untiered = self.slow_indexed() && matches!(pass, Pass::GoalLenSlow | Pass::AnyFree);
        if !self.policy.size_classes || ctx.class_tag == 0 || untiered {
            return self.walk_groups(ctx, pass, walk, start, want, &|_| true, &mut visit);
        }
        let tag_of = |g: u64| self.groups[g as usize].class_tag();
        if matches!(walk, Walk::Index(index, _) if !index.is_ordered()) {
            let tier_of = |g: u64| match class::tier(tag_of(g), ctx.class_tag) {
                class::UNTAGGED_TIER if g == start => 0,
                t => t,
            };
            return (0..class::TIERS).find_map(|t| {
                self.walk_groups(
                    ctx,
                    pass,
                    walk,
                    start,
                    want,
                    &|g| tier_of(g) == t,
                    &mut visit,
                )
            });
        }
        let good = |g: u64| self.good_group(ctx, g, pass, want);
        let (same, same_size, other_sizes) = class::tags_by_tier(ctx.class_tag);
        let walk_tag = |tag: u8, visit: &mut dyn FnMut(u64) -> Option<Extent>| {
            let set = &self.by_tag[usize::from(tag - 1)];
            // The set is a hint: the tag is read again, and the group rechecked under its
            // lock by the scan.
            match walk {
                // An ordered index holds only the groups that can serve the pass: walk it
                // and keep the tag's, rather than every group of the tag.
                Walk::Index(index, order_min) if index.is_ordered() => self.right_then_left(
                    ctx.shard,
                    start,
                    &|at, limit| index.next_in_orders(order_min, at, limit),
                    &|g| tag_of(g) == tag && good(g),
                    visit,
                ),
                _ => self.right_then_left(
                    ctx.shard,
                    start,
                    &|at, limit| set.next_set(at).filter(|&g| g < limit),
                    &|g| tag_of(g) == tag && good(g),
                    visit,
                ),
            }
        };
        if ctx.stream {
            // A stream takes the first group from its goal that is its class's or nobody's,
            // as a stream without size classes takes the first that fits: streams of one
            // class then keep apart instead of interleaving in the same groups, and a group
            // still holds one class only. That walk covers tiers 0 and 2: only the other
            // tags remain.
            let own_or_none = |g: u64| {
                let t = tag_of(g);
                t == 0 || t == same
            };
            return self
                .walk_groups(ctx, pass, walk, start, want, &own_or_none, &mut visit)
                .or_else(|| {
                    same_size
                        .into_iter()
                        .chain(other_sizes)
                        .find_map(|t| walk_tag(t, &mut visit))
                });
        }
        if tag_of(start) == 0 && good(start) {
            if let Some(e) = visit(start) {
                return Some(e);
            }
        }
        std::iter::once(same)
            .chain(same_size)
            .find_map(|t| walk_tag(t, &mut visit))
            .or_else(|| {
                self.walk_groups(
                    ctx,
                    pass,
                    walk,
                    start,
                    want,
                    &|g| tag_of(g) == 0,
                    &mut visit,
                )
            })
            .or_else(|| {
                other_sizes
                    .into_iter()
                    .find_map(|t| walk_tag(t, &mut visit))
            })
    }

    /// Visits the groups `next(at, limit)` yields right of `start`, then left of it (the
    /// order of the ordered indexes and of the per-tag sets), those passing `good`, until one
    /// gives an extent.
    fn right_then_left(
        &self,
        shard: &Shard,
        start: u64,
        next: &dyn Fn(u64, u64) -> Option<u64>,
        good: &dyn Fn(u64) -> bool,
        visit: &mut dyn FnMut(u64) -> Option<Extent>,
    ) -> Option<Extent> {
        let groups_count = self.groups.len() as u64;
        for (from, limit) in [(start, groups_count), (0, start)] {
            let mut at = from;
            while let Some(g) = next(at, limit) {
                shard.add(&shard.counters.groups_considered, 1);
                if good(g) {
                    self.read_ahead(g, &|p| next(p + 1, limit), good);
                    if let Some(e) = visit(g) {
                        return Some(e);
                    }
                }
                at = g + 1;
            }
        }
        None
    }

    /// Gives group `g` size-class tag `tag` (0 = none) and keeps the per-tag sets in step.
    /// Called under the group's lock.
    fn set_group_tag(&self, g: u64, tag: u8) {
        let group = &self.groups[g as usize];
        let old = group.class_tag();
        if old == tag {
            return;
        }
        group.set_class_tag(tag);
        if old != 0 {
            self.by_tag[usize::from(old - 1)].remove(g);
        }
        if tag != 0 {
            self.by_tag[usize::from(tag - 1)].insert(g);
        }
    }

    /// Calls `visit` on the groups a walk yields that pass the lock-free check and `accept`,
    /// until one returns an extent.
    #[allow(clippy::too_many_arguments)]
    fn walk_groups(
        &self,
        ctx: &AllocContext<'_>,
        pass: Pass,
        walk: Walk<'_>,
        start: u64,
        want: u64,
        accept: &dyn Fn(u64) -> bool,
        visit: &mut dyn FnMut(u64) -> Option<Extent>,
    ) -> Option<Extent> {
        let groups_count = self.groups.len() as u64;
        let shard = ctx.shard;
        let good = |g: u64| self.good_group(ctx, g, pass, want) && accept(g);
        match walk {
            Walk::Linear => (0..groups_count).find_map(|i| {
                let g = (start + i) % groups_count;
                shard.add(&shard.counters.groups_considered, 1);
                if good(g) {
                    self.read_ahead(g, &|p| Some((p + 1) % groups_count), &good);
                    visit(g)
                } else {
                    None
                }
            }),
            // Right of the start across all orders >= order_min, then left of it.
            Walk::Index(index, order_min) if index.is_ordered() => self.right_then_left(
                shard,
                start,
                &|at, limit| index.next_in_orders(order_min, at, limit),
                &good,
                visit,
            ),
            Walk::IndexExact(index, order) => self.right_then_left(
                shard,
                start,
                &|at, limit| index.next_in_order(order, at, limit),
                &good,
                visit,
            ),
            Walk::Index(index, order_min) => {
                // Pre-2025 "choose group": the first good group from the list heads, up to
                // one try per group.
                for _ in 0..groups_count {
                    let mut waits = 0;
                    let chosen = index.choose(
                        order_min,
                        &mut |g| {
                            shard.add(&shard.counters.groups_considered, 1);
                            good(g)
                        },
                        &mut waits,
                    );
                    shard.add(&shard.counters.lock_waits, waits);
                    if let Some(e) = visit(chosen?) {
                        return Some(e);
                    }
                }
                None
            }
        }
    }

    /// Locks group `g` (or skips it when busy and the pass allows) and searches it.
    fn scan_group(&self, ctx: &AllocContext<'_>, g: u64, pass: Pass, want: u64) -> Option<Extent> {
        let (min_len, shard) = (ctx.request.min_len, ctx.shard);
        let group = &self.groups[g as usize];
        let slot = if self.policy.trylock && pass != Pass::AnyFree {
            match group.try_lock() {
                Some(s) => s,
                None => {
                    shard.add(&shard.counters.trylock_skips, 1);
                    return None;
                }
            }
        } else {
            self.lock_slot(group, shard)
        };
        // A group that cannot be read is skipped (its error is counted); others still serve.
        let mut state = self.loaded(g, slot, shard).ok()?;
        shard.add(&shard.counters.groups_scanned, 1);
        let hint = self.policy.first_free_hint;
        let want32 = want as u32;
        let found = match pass {
            Pass::Goal => unreachable!("the goal is not a scanning pass"),
            Pass::Power2Aligned => state
                .bitmap
                .find_free_chunk(floor_log2(want), hint)
                .map(|off| (off, want32)),
            Pass::GoalLenFast | Pass::BestAvailLen | Pass::GoalLenSlow => {
                if u64::from(state.bitmap.free_blocks()) < want {
                    None
                } else {
                    self.best_fit(&mut state, want32)
                }
            }
            Pass::AnyFree => self.largest_fit(&mut state, want32, min_len as u32),
        };
        let (off, len) = found?;
        Some(self.take(ctx, g, &mut state, off, len))
    }

    /// Smallest free run of at least `want` blocks, examining a bounded number of runs.
    fn best_fit(&self, state: &mut GroupState, want: u32) -> Option<(u32, u32)> {
        let from = state
            .bitmap
            .find_free_chunk(0, self.policy.first_free_hint)?;
        let mut best: Option<(u32, u32)> = None;
        for (examined, (off, run)) in state.bitmap.free_runs(from).enumerate() {
            let examined = examined as u32 + 1;
            if run >= want && best.is_none_or(|(_, b)| run < b) {
                best = Some((off, run));
                if run == want {
                    break;
                }
            }
            if examined >= self.policy.max_scan_extents
                || (best.is_some() && examined >= self.policy.min_scan_extents)
            {
                break;
            }
        }
        best.map(|(off, _)| (off, want))
    }

    /// The first run of `want` blocks, or the longest run seen (at least `min_len`).
    fn largest_fit(&self, state: &mut GroupState, want: u32, min_len: u32) -> Option<(u32, u32)> {
        let from = state
            .bitmap
            .find_free_chunk(0, self.policy.first_free_hint)?;
        let mut best: Option<(u32, u32)> = None;
        for (examined, (off, run)) in state.bitmap.free_runs(from).enumerate() {
            if best.is_none_or(|(_, b)| run > b) {
                best = Some((off, run.min(want)));
            }
            if run >= want || examined as u32 + 1 >= self.policy.max_scan_extents {
                break;
            }
        }
        best.filter(|&(_, len)| len >= min_len)
    }

    /// Step 7: marks `off .. off + len` of group `g` used and publishes the new summary.
    fn take(
        &self,
        ctx: &AllocContext<'_>,
        g: u64,
        state: &mut GroupState,
        off: u32,
        len: u32,
    ) -> Extent {
        let (shard, slot) = (ctx.shard, ctx.slot);
        debug_assert!(
            !state.pending_overlaps(off, len),
            "allocating blocks that wait to be freed"
        );
        state.bitmap.mark_used(off, len);
        if ctx.class_tag != 0 && self.groups[g as usize].class_tag() == 0 {
            // The group's first allocation gives it its class.
            self.set_group_tag(g, ctx.class_tag);
        }
        self.publish(g, state, shard);
        if ctx.stream {
            if self.policy.stream_goal_locked {
                self.lock_md(shard).stream_goal = g;
            } else if self.stream_goals[slot].load(Relaxed) != g {
                self.stream_goals[slot].store(g, Relaxed);
            }
        }
        Extent::new(
            self.geometry.group_start(g) + u64::from(off),
            u64::from(len),
        )
    }

    /// Copies a group's new figures to its mirrors and index positions (under its lock),
    /// after a change: the group now differs from its home copy.
    pub(super) fn publish(&self, g: u64, state: &GroupState, shard: &Shard) {
        if let Some(d) = &self.home_dirty {
            d.insert(g);
        }
        self.publish_mirrors(g, state, shard);
    }

    /// Copies a group's figures to its mirrors and index positions (under its lock).
    fn publish_mirrors(&self, g: u64, state: &GroupState, shard: &Shard) {
        let group = &self.groups[g as usize];
        let free = state.bitmap.free_blocks();
        if free == state.bitmap.len_blocks() {
            // An empty group loses its size class.
            self.set_group_tag(g, 0);
        }
        let largest = state.bitmap.largest_free_order();
        let mut avg = state.bitmap.avg_fragment_order();
        if self.policy.zombie_groups && free == 0 {
            // Pre-2025 ext4 left a full group in its old average-fragment list.
            avg = group.avg_order();
        }
        let (old_free, old_largest, old_avg) = group.set_mirrors(free, largest, avg);
        if self.policy.optimize_scan {
            let mut waits = self.by_largest.update(g, old_largest, largest)
                + self.by_avg.update(g, old_avg, avg);
            if self.slow_indexed() {
                waits += self
                    .by_free
                    .update(g, free_order(old_free), free_order(free));
            }
            if waits > 0 {
                shard.add(&shard.counters.lock_waits, waits);
            }
        }
    }

    /// Locks group `g`, loading its bitmap if it is not in memory. Fails only when the
    /// bitmap cannot be read (an I/O error; a corrupt bitmap loads as all used).
    #[inline]
    pub(super) fn lock_group(&self, g: u64, shard: &Shard) -> Result<StateGuard<'_>> {
        let slot = self.lock_slot(&self.groups[g as usize], shard);
        self.loaded(g, slot, shard)
    }

    #[inline]
    fn lock_slot<'a>(&self, group: &'a Group, shard: &Shard) -> MutexGuard<'a, Slot> {
        let mut waited = false;
        let guard = group.lock(&mut waited);
        if waited {
            shard.add(&shard.counters.lock_waits, 1);
        }
        guard
    }

    /// The locked group `g` with its bitmap loaded.
    #[inline]
    fn loaded<'a>(
        &self,
        g: u64,
        mut slot: MutexGuard<'a, Slot>,
        shard: &Shard,
    ) -> Result<StateGuard<'a>> {
        if slot.is_none() {
            self.load_group(g, &mut slot, shard)?;
        }
        if self.lazy.is_some() {
            self.groups[g as usize].touch();
        }
        Ok(MutexGuard::map(slot, |s| {
            &mut **s.as_mut().expect("loaded above")
        }))
    }

    /// Reads group `g`'s bitmap (under its lock): the read-ahead copy if one is staged.
    #[cold]
    fn load_group(&self, g: u64, slot: &mut Slot, shard: &Shard) -> Result<()> {
        let lazy = self.lazy.as_ref().ok_or_else(|| {
            Error::Invariant(format!(
                "group {g} has no bitmap and no device to read it from"
            ))
        })?;
        let (read, staged) = lazy.load(g);
        let (gb, len) = (
            self.geometry.group_blocks as u32,
            self.geometry.group_len(g) as u32,
        );
        let bitmap = match read {
            Ok(_) if self.corrupt.contains(g) => GroupBitmap::from_used_bytes(gb, len, &[]),
            Ok(b) => b,
            Err(Error::Corrupt { .. }) => {
                // Held all used: skipped by every pass, never written home.
                self.corrupt.insert(g);
                GroupBitmap::from_used_bytes(gb, len, &[])
            }
            Err(e) => {
                lazy.unload_failed(g);
                shard.add(&shard.counters.load_errors, 1);
                return Err(e);
            }
        };
        shard.add(&shard.counters.bitmaps_loaded, 1);
        if staged {
            shard.add(&shard.counters.prefetch_hits, 1);
        }
        // The descriptor's figures were hints; the bitmap's are the truth (a corrupt group's
        // blocks all count as allocated: held, never handed out).
        let hinted_free = u64::from(self.groups[g as usize].free_blocks());
        shard.add(&shard.held.allocated, hinted_free);
        shard.sub(&shard.held.allocated, u64::from(bitmap.free_blocks()));
        let state = slot.insert(Box::new(GroupState {
            bitmap,
            pending: BTreeMap::new(),
        }));
        self.publish_mirrors(g, state, shard);
        Ok(())
    }

    /// Queues for read-ahead the groups a walk visits after `g` (`next(prev)` gives the one
    /// after `prev`), up to `prefetch_groups` of them, those passing `good` and unloaded.
    fn read_ahead(&self, g: u64, next: &dyn Fn(u64) -> Option<u64>, good: &dyn Fn(u64) -> bool) {
        let Some(lazy) = &self.lazy else {
            return;
        };
        if !lazy.prefetch_enabled() || lazy.state(g) == LOADED {
            return;
        }
        let mut at = g;
        for _ in 0..self.policy.prefetch_groups {
            match next(at) {
                Some(n) if n != g => at = n,
                _ => break,
            }
            // The load state first (a plain read), then the cheap checks, then the queue.
            if lazy.state(at) != LOADED && good(at) {
                lazy.queue(at);
            }
        }
    }

    #[inline]
    pub(super) fn lock_md(&self, shard: &Shard) -> MutexGuard<'_, MdState> {
        match self.md.try_lock() {
            Some(g) => g,
            None => {
                shard.add(&shard.counters.lock_waits, 1);
                self.md.lock()
            }
        }
    }

    /// Returns reserved blocks (preallocated, never handed out) to the free space at once:
    /// they carry no data and were never recorded, so no commit needs to cover them. They
    /// must be used and not pending.
    pub(crate) fn release_reserved(&self, extent: Extent) -> Result<()> {
        self.geometry.validate(extent)?;
        let shard = self.stats.shard();
        for (g, off, len) in self.geometry.split(extent) {
            let mut state = self.lock_group(g, shard)?;
            self.check_freeable(g, &state, off, len)?;
            state.bitmap.mark_free(off, len);
            self.publish(g, &state, shard);
        }
        shard.sub(&shard.held.reserved, extent.len);
        self.releases.fetch_add(1, Relaxed);
        Ok(())
    }

    /// Hands reserved blocks to the caller: from here on they count as allocated (the
    /// journal records them; a checkpoint writes them home). Only the accounting changes:
    /// the blocks were marked used when reserved.
    pub(crate) fn claim(&self, extent: Extent) {
        debug_assert!(self.is_reserved(extent), "claimed blocks must be reserved");
        let shard = self.stats.shard();
        shard.sub(&shard.held.reserved, extent.len);
        shard.add(&shard.held.allocated, extent.len);
    }

    /// Blocks handed to callers and not freed (with the device's own metadata and any
    /// group held corrupt). At quiescence, `blocks marked used = allocated + reserved +
    /// pending` ([`Allocator::check`] verifies it).
    pub fn allocated_blocks(&self) -> u64 {
        self.stats.held().0
    }

    /// Blocks reserved by preallocations: marked used, handed to nobody, never journaled.
    pub fn reserved_blocks(&self) -> u64 {
        self.stats.held().1
    }

    /// True if every block of `extent` is marked used and none is pending.
    pub(crate) fn is_reserved(&self, extent: Extent) -> bool {
        let shard = self.stats.shard();
        self.geometry.split(extent).all(|(g, off, len)| {
            self.lock_group(g, shard).is_ok_and(|state| {
                state.bitmap.range_is_used(off, len) && !state.pending_overlaps(off, len)
            })
        })
    }

    /// The calling thread's shard number (for per-shard state such as locality
    /// preallocations).
    pub(crate) fn shard_index(&self) -> usize {
        self.stats.shard_index()
    }
}
