//! The allocator: one per device. This file holds the [`Allocator`] struct, its
//! construction, its accessors and its accounting; what it does lives beside it, one concern
//! a file (`alloc/mod.rs` lists them).
//!
//! # Data structures
//!
//! - `groups`: the group table (`groups/table.rs`): one [`Group`] per group (bitmap and
//!   pending frees under the group's lock, lock-free mirrors of its figures), a cache line
//!   each, made on first touch; until then, over a device, the group's packed figures.
//!   Lock-free looks that only read figures (`GroupTable::figures`) make nothing.
//! - Group indexes, hints a scan rechecks under the group lock: `by_largest` and `by_avg`
//!   (by largest free order and average fragment order), `by_free` (by the order of the free
//!   block count, for passes 4 and 5), `by_tag` (per size-class tag), `dirty` (groups with
//!   pending frees, per-group free lists), `corrupt` and `home_dirty`.
//! - Stream goals (`goal.rs`): `stream_goals_per_class` cache-padded atomics per size class.
//! - `md`: the global lock and what it guards ([`MdState`]); `pending_blocks`, `txn`,
//!   `releases`: the deferred-free counters (`deferred.rs`).
//! - `lazy`: the loader of an allocator opened over a device (`lazy.rs`, `cache.rs`).
//! - `stats`: per-thread shards of counters, and the [`HeldCounters`] of the accounting.
//!
//! # Invariant: the accounting
//!
//! Every block marked used is allocated (handed to a caller, or found used on disk),
//! reserved (for the file layer's preallocations: `reserve`, then `claim` or
//! `release_reserved`) or pending (freed, waiting for a commit); per-shard [`HeldCounters`]
//! keep the first two, and `check()` (`check.rs`) verifies, at quiescence:
//!
//! ```text
//! blocks marked used = allocated + reserved + pending
//! ```
//!
//! so the free blocks (every block not marked used) are read from those counters in
//! O(shards) (`free_blocks()`), not summed over the groups: a statfs, a delayed-allocation
//! reservation and a create's room check read them, and the sum cost 7 ms a call at 64
//! TiB (80 % of a mount's CPU on a 15 TiB volume). `check()` compares the two.
//!
//! # Lock order
//!
//! group locks in ascending group order -> the global lock (`md`) -> list-index locks.
//! `commit_lock` is taken before any of them, only by commit/release.
//!
//! [`HeldCounters`]: super::HeldCounters

use super::class;
use super::lazy::{BitmapSource, GroupSummary, Lazy};
use super::policy::Policy;
use super::request::AllocRequest;
use super::stats::{Shard, Stats, StatsSnapshot};
use crate::error::{Corrupted, Error, Result};
use crate::geometry::{Extent, Geometry};
use crate::groups::{
    AtomicBitset, Figures, Group, GroupBitmap, GroupState, GroupTable, OrderIndex, TableBuilder,
    ORDERS,
};
use crossbeam_utils::CachePadded;
use parking_lot::{MappedMutexGuard, Mutex, MutexGuard};
use std::collections::BTreeSet;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed},
};
use std::sync::Arc;

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
pub(super) enum Hold {
    /// Handed to the caller.
    Allocated,
    /// Reserved for a preallocation of the file layer: handed to nobody yet.
    Reserved,
}

/// A locked group whose bitmap is loaded.
pub(super) type StateGuard<'a> = MappedMutexGuard<'a, GroupState>;

/// A part of an extent inside one group: `(group, offset in the group, length)`.
pub(super) type Piece = (u64, u32, u32);

/// The pieces of an extent, one per group it spans: inline for the usual one or two.
pub(super) type Pieces = smallvec::SmallVec<[Piece; 2]>;

/// The locked states of an extent's groups, in the order of its [`Pieces`].
pub(super) type Guards<'a> = smallvec::SmallVec<[StateGuard<'a>; 2]>;

/// The extent allocator of one device: its groups and group indexes, stream goals, deferred
/// frees and statistics. Shared between threads, which allocate and free concurrently.
pub struct Allocator {
    pub(super) geometry: Geometry,
    pub(super) policy: Policy,
    /// One [`Group`] per group, a cache line each: see `memory_per_unloaded_group`.
    pub(super) groups: GroupTable,
    pub(super) by_largest: OrderIndex,
    pub(super) by_avg: OrderIndex,
    /// Groups by the order of their free block count (`slow_pass_index`): pass 4 (`free >=
    /// want`) looks only at groups of the request's order or above.
    pub(super) by_free: OrderIndex,
    /// Stream goals: `stream_goals_per_class` of them per size class (one class without
    /// size classes); see `goal.rs`.
    pub(super) stream_goals: Box<[CachePadded<AtomicU64>]>,
    pub(super) stream_goals_per_class: u64,
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
    pub(super) lazy: Option<Lazy>,
    /// Groups changed since their home copy was written (an allocator opened over a device).
    pub(super) home_dirty: Option<AtomicBitset>,
    /// Groups whose bitmap failed its checks when loaded: held all used.
    pub(super) corrupt: AtomicBitset,
}

/// The groups' summaries for [`Allocator::open_lazy`], checked and packed one at a time as
/// the descriptors are read: 4 bytes a group (8 with groups of more than 2^17 blocks), never
/// a list of every descriptor.
pub struct Summaries {
    geometry: Geometry,
    size_classes: bool,
    /// The group of the first summary (several threads may summarise parts of a device).
    first: u64,
    table: TableBuilder,
}

impl Summaries {
    /// Summaries for an allocator of `geometry` running `policy` (a policy without size
    /// classes drops the tags).
    pub fn new(geometry: &Geometry, policy: &Policy) -> Self {
        Self::from_group(geometry, policy, 0, geometry.groups_count())
    }

    /// Summaries of the groups from `first` on, room made for `capacity` of them: a part
    /// that [`Summaries::append`] joins to the summaries of the groups before it.
    pub fn from_group(geometry: &Geometry, policy: &Policy, first: u64, capacity: u64) -> Self {
        Summaries {
            geometry: *geometry,
            size_classes: policy.size_classes,
            first,
            table: TableBuilder::new(geometry.group_blocks, capacity),
        }
    }

    /// Groups summarised so far.
    pub fn len(&self) -> u64 {
        self.table.len()
    }

    /// The group the next push summarises.
    pub fn next_group(&self) -> u64 {
        self.first + self.len()
    }

    /// Joins `part`, the summaries of the groups that follow these.
    pub fn append(&mut self, part: Summaries) {
        assert_eq!(
            part.first,
            self.next_group(),
            "summaries appended out of order"
        );
        assert_eq!(
            part.geometry, self.geometry,
            "summaries of another geometry"
        );
        let expected = self.len() + part.len();
        self.table.append(part.table);
        debug_assert_eq!(self.len(), expected, "every appended summary kept");
    }

    /// True before the first push.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Adds the next group's summary. A summary no descriptor could hold (more free blocks
    /// than the group has, orders that disagree with the free count or exceed the group's,
    /// an unknown tag, a group past the device's) is refused with [`Error::Corrupt`] naming
    /// the group, and nothing is added.
    pub fn push(&mut self, s: GroupSummary) -> Result<()> {
        let g = self.next_group();
        let groups = self.geometry.groups_count();
        let impossible = g >= groups
            || u64::from(s.free_blocks) > self.geometry.group_len(g)
            || s.largest_order.is_some() != (s.free_blocks > 0)
            || s.avg_order.is_some() != (s.free_blocks > 0)
            || s.largest_order
                .is_some_and(|o| o > self.geometry.group_order())
            || s.avg_order.is_some_and(|o| o > self.geometry.group_order())
            || s.class_tag > class::TAGS;
        if impossible {
            return Err(Error::Corrupt {
                what: Corrupted::Descriptor { group: g },
                detail: format!("impossible summary {s:?} (groups: {groups})"),
            });
        }
        let figures = Figures {
            class_tag: if self.size_classes { s.class_tag } else { 0 },
            ..s
        };
        // Checked above: every field is within what a group of this geometry packs.
        self.table
            .push(figures)
            .unwrap_or_else(|e| panic!("a checked summary did not pack: {e}"));
        debug_assert_eq!(self.next_group(), g + 1, "one summary added");
        Ok(())
    }
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
        let groups = GroupTable::loaded(groups_count, |g| {
            Group::new(GroupBitmap::new(
                geometry.group_blocks as u32,
                geometry.group_len(g) as u32,
            ))
        });
        Self::with_groups(geometry, policy, groups, None)
    }

    /// An allocator over a persistent device whose groups start unloaded, placed in the
    /// indexes by what their descriptors say (`summaries`, one per group); bitmaps are read
    /// from `source` on first use, with read-ahead per the policy's `prefetch_groups`.
    /// `summaries` must hold every group's ([`Error::SummaryCount`] otherwise) and have been
    /// made for `geometry` and `policy`. Nothing is read from the device here: a group's
    /// [`Group`] is made the first time something touches it (`groups/table.rs`).
    pub fn open_lazy(
        geometry: Geometry,
        policy: Policy,
        source: Arc<dyn BitmapSource>,
        summaries: Summaries,
    ) -> Result<Self> {
        assert_eq!(summaries.first, 0, "summaries of part of a device");
        if summaries.len() != geometry.groups_count() {
            return Err(Error::SummaryCount {
                given: summaries.len(),
                groups: geometry.groups_count(),
            });
        }
        assert_eq!(
            summaries.geometry, geometry,
            "summaries made for another geometry"
        );
        assert_eq!(
            summaries.size_classes, policy.size_classes,
            "summaries made for another policy"
        );
        let groups = summaries.table.finish();
        let lazy = Lazy::new(source, geometry, policy.prefetch_groups > 0);
        Self::with_groups(geometry, policy, groups, Some(lazy))
    }

    /// The allocator over `groups`: empty sets and counters, then every group placed in the
    /// indexes by its figures, and what the figures say is used counted as allocated.
    fn with_groups(
        geometry: Geometry,
        policy: Policy,
        groups: GroupTable,
        lazy: Option<Lazy>,
    ) -> Result<Self> {
        let groups_count = groups.len();
        let orders = geometry.group_blocks.trailing_zeros() as usize + 1;
        debug_assert!(orders <= ORDERS);
        let (stream_goals, stream_goals_per_class) = Self::stream_goal_slots(&policy, groups_count);
        let mut alloc = Allocator {
            // Orders above the group's own cannot occur: no sets for them.
            by_largest: OrderIndex::new(policy.ordered_index, orders, groups_count),
            by_avg: OrderIndex::new(policy.ordered_index, orders, groups_count),
            by_free: OrderIndex::new(
                true,
                if policy.slow_pass_index { orders } else { 1 },
                groups_count,
            ),
            stream_goals,
            stream_goals_per_class,
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
        alloc.index_groups();
        alloc.hold_used_as_allocated();
        Ok(alloc)
    }

    /// What the groups' figures say is used counts as allocated until a load says more.
    fn hold_used_as_allocated(&self) {
        // Before anything is counted: the groups' own figures, once, O(groups).
        let used = self.geometry.blocks_count - self.free_blocks_summed();
        let shard = self.stats.shard();
        shard.add(&shard.held.adjusted, used);
    }

    /// The device's geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// The policy the allocator runs.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Free blocks, not counting frees that wait for a commit: every block not marked
    /// used, from the accounting (module documentation) in O(shards), not summed over the
    /// groups. Exact at quiescence; a hint while allocations run, as the groups' mirrors
    /// are.
    pub fn free_blocks(&self) -> u64 {
        self.free_given_pending(self.pending_free_blocks())
    }

    /// [`Allocator::free_blocks`] with the pending count given (a caller holding the
    /// global lock, which `pending_free_blocks` takes under some policies).
    pub(super) fn free_given_pending(&self, pending: u64) -> u64 {
        let (allocated, reserved) = self.stats.held();
        // The shards are read one by one while others change: a share read before a
        // change and another after may take the sum a little past the truth either way,
        // never by more than what is in flight; a sum below zero reads as nothing used.
        let used = allocated.wrapping_add(reserved).wrapping_add(pending);
        if used > i64::MAX as u64 {
            return self.geometry.blocks_count;
        }
        self.geometry.blocks_count.saturating_sub(used)
    }

    /// [`Allocator::free_blocks`] the slow way, every group's mirror summed: what
    /// `check()` compares it with.
    pub(super) fn free_blocks_summed(&self) -> u64 {
        (0..self.groups.len())
            .map(|g| u64::from(self.groups.free_blocks(g)))
            .sum()
    }

    /// Releases so far that returned blocks to the free space (a commit's pending frees):
    /// a caller that found no room may try again once it moves.
    pub fn releases(&self) -> u64 {
        self.releases.load(Relaxed)
    }

    /// Blocks freed but not yet returned by a commit.
    pub fn pending_free_blocks(&self) -> u64 {
        if self.policy.atomic_pending {
            // Acquire: a caller that sees a release's decrement sees its `releases` bump
            // (`deferred.rs` bumps first; `allocate_validated` relies on it).
            self.pending_blocks.load(Acquire)
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
            s.loaded_bitmaps = self.groups.len();
        }
        s
    }

    /// The sharded statistics themselves: the latency histogram and `reset`.
    pub fn stats_handle(&self) -> &Stats {
        &self.stats
    }

    /// Group `g`'s free blocks, read without its lock (a hint: it may change at once).
    pub fn group_free_blocks(&self, g: u64) -> u64 {
        u64::from(self.groups.free_blocks(g))
    }

    /// Group `g`'s size-class tag (0: none).
    pub fn group_class_tag(&self, g: u64) -> u8 {
        self.groups.class_tag(g)
    }

    /// True if `block` is free (not allocated and not pending).
    pub fn is_free(&self, block: u64) -> Result<bool> {
        self.geometry.validate(Extent::new(block, 1))?;
        let g = self.geometry.group_of(block);
        let off = (block - self.geometry.group_start(g)) as u32;
        let shard = self.stats.shard();
        Ok(self.lock_group(g, shard)?.bitmap.is_free(off))
    }

    /// The global lock, counting a wait.
    #[inline]
    pub(super) fn lock_md(&self, shard: &Shard) -> MutexGuard<'_, MdState> {
        match self.md.try_lock() {
            Some(g) => g,
            None => {
                shard.lock_waited(1);
                self.md.lock()
            }
        }
    }

    /// Allocates blocks the file layer reserves for a preallocation: marked used, counted
    /// as reserved, handed to nobody (see [`Allocator::claim`]). `commit_first` as in
    /// [`Allocator::allocate_committing`].
    pub(crate) fn reserve(&self, req: &AllocRequest, commit_first: bool) -> Result<Extent> {
        self.allocate_as(req, Hold::Reserved, commit_first)
    }

    /// Returns reserved blocks (preallocated, never handed out) to the free space at once:
    /// they carry no data and were never recorded, so no commit needs to cover them. They
    /// must be used and not pending.
    pub(crate) fn release_reserved(&self, extent: Extent) -> Result<()> {
        let shard = self.mark_free_at_once(extent)?;
        shard.sub(&shard.held.reserved, extent.len);
        shard.add(&shard.held.released, extent.len);
        Ok(())
    }

    /// Frees allocated blocks at once, without a pending stage: for blocks whose free is
    /// already durable (a caller's transaction committed it) or whose allocation was never
    /// recorded (an aborted transaction). All or nothing: every group is checked before any
    /// changes. Their groups are marked for the next checkpoint.
    pub(crate) fn free_now(&self, extent: Extent) -> Result<()> {
        let shard = self.mark_free_at_once(extent)?;
        shard.add(&shard.counters.frees, 1);
        shard.add(&shard.counters.free_blocks, extent.len);
        Ok(())
    }

    /// `extent` validated and split into its groups' pieces `(group, offset, length)`, with
    /// each of those groups locked (loaded), in ascending order.
    pub(super) fn lock_extent(
        &self,
        extent: Extent,
        shard: &Shard,
    ) -> Result<(Pieces, Guards<'_>)> {
        self.geometry.validate(extent)?;
        let pieces: Pieces = self.geometry.split(extent).collect();
        let mut guards = Guards::new();
        for &(g, _, _) in &pieces {
            guards.push(self.lock_group(g, shard)?);
        }
        Ok((pieces, guards))
    }

    /// Marks used, not pending blocks free at once (no pending stage), all or nothing:
    /// every group is locked and checked before any changes. Returns the caller's shard
    /// for its accounting.
    fn mark_free_at_once(&self, extent: Extent) -> Result<&Shard> {
        let shard = self.stats.shard();
        let (pieces, mut guards) = self.lock_extent(extent, shard)?;
        debug_assert_eq!(pieces.len(), guards.len(), "a lock per piece");
        for (&(g, off, len), state) in pieces.iter().zip(&guards) {
            self.check_freeable(g, state, off, len)?;
        }
        for (&(g, off, len), state) in pieces.iter().zip(guards.iter_mut()) {
            state.bitmap.mark_free(off, len);
            self.publish(g, state, shard);
            debug_assert!(
                !state.pending_overlaps(off, len),
                "freed at once, yet pending"
            );
        }
        drop(guards);
        self.releases.fetch_add(1, Relaxed);
        Ok(shard)
    }

    /// `Ok` if `extent` could be freed now: every block allocated (used, not pending) in
    /// a group not held corrupt. Changes nothing.
    pub(crate) fn check_allocated(&self, extent: Extent) -> Result<()> {
        self.geometry.validate(extent)?;
        let shard = self.stats.shard();
        for (g, off, len) in self.geometry.split(extent) {
            let state = self.lock_group(g, shard)?;
            self.check_freeable(g, &state, off, len)?;
        }
        Ok(())
    }

    /// `Ok` if every block of `extent` is held used: allocated and not pending, or in a
    /// group held corrupt (every block of which is held used until a repair). For a
    /// caller adopting its own map after a reopen ([`Files::adopt`](crate::Files::adopt)):
    /// a file whose blocks lie in a damaged group still reads. Changes nothing.
    pub(crate) fn check_held(&self, extent: Extent) -> Result<()> {
        self.geometry.validate(extent)?;
        let shard = self.stats.shard();
        for (g, off, len) in self.geometry.split(extent) {
            let state = self.lock_group(g, shard)?;
            if !self.corrupt.contains(g) {
                self.check_freeable(g, &state, off, len)?;
            }
        }
        Ok(())
    }

    /// Hands reserved blocks to the caller: from here on they count as allocated (the
    /// journal records them; a checkpoint writes them home). Only the accounting changes:
    /// the blocks were marked used when reserved.
    pub(crate) fn claim(&self, extent: Extent) {
        debug_assert!(self.is_reserved(extent), "claimed blocks must be reserved");
        self.claim_blocks(extent.len);
    }

    /// [`Allocator::claim`] for `n` blocks the file layer handed out earlier and claims in
    /// one batch (locality carves: one counter write per chunk, not per small file). Until
    /// the batch lands, [`Allocator::reserved_blocks`] still counts those blocks; the file
    /// layer's figures ([`Files::reserved_blocks`](crate::Files::reserved_blocks)) are exact.
    pub(crate) fn claim_blocks(&self, n: u64) {
        let shard = self.stats.shard();
        shard.sub(&shard.held.reserved, n);
    }

    /// Blocks handed to callers and not freed (with the device's own metadata and any
    /// group held corrupt). At quiescence, `blocks marked used = allocated + reserved +
    /// pending` ([`Allocator::check`] verifies it). Under a file layer, blocks carved from
    /// locality chunks count as reserved here until their batch is claimed: ask
    /// [`Files::allocated_blocks`](crate::Files::allocated_blocks) for the exact split.
    pub fn allocated_blocks(&self) -> u64 {
        self.stats.held().0
    }

    /// Blocks reserved by preallocations: marked used, handed to nobody, never journaled
    /// (with the file layer's unclaimed locality carves: see [`Allocator::allocated_blocks`]).
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
