//! The free path and commit: deferred frees.
//!
//! `free(extent)` validates every block under the group locks (each must be allocated and not
//! already waiting), then records the extent as a pending free of the current transaction,
//! merged with pending neighbours of the same transaction. The blocks stay marked used, so
//! nothing can allocate them, until `commit()` (or `seal()`, then `release()` once the
//! transaction is durable) returns them to the bitmaps.
//!
//! # Data structures
//!
//! - A group's `pending` map (under its lock): offset -> [`PendingFree`] (length,
//!   transaction, id in the global list).
//! - How a pending free is found again at commit depends on the policy:
//!   - `free_list = per-group` (extalloc): no global list; the group is marked in the
//!     lock-free `dirty` set that `release()` walks (`insert_per_group`).
//!   - `free_list = global`, `merge_before_insert = true` (ext4-2025): the `freed` set under
//!     the global lock lists `(group, id)`; merge first without the lock, then one trip
//!     through it, only to drop a neighbour the merge absorbed or to list a new entry
//!     (`insert_merge_first`).
//!   - `free_list = global`, `merge_before_insert = false` (ext4 before the series): insert,
//!     then merge with the previous neighbour, then with the next, each step a separate trip
//!     through the global lock (`insert_then_merge`).
//! - The pending counter: `pending_blocks` (an atomic) or `MdState::pending_blocks` (under the
//!   global lock), per `atomic_pending`; `txn`, the current transaction.
//!
//! # Invariant
//!
//! ```text
//! pending counter = sum of every group's pending lengths
//! a pending free is marked used, inside its group, disjoint from the group's other ones
//! global list: every pending free's (group, id) is listed;  per-group: its group is dirty
//! ```
//!
//! # Lock order
//!
//! `free` locks the groups an extent spans in ascending order and, under them, the global
//! lock when the policy lists or counts pending frees there (group locks -> `md`).
//! `release` takes `commit_lock` first; under it, the global lock alone (to take the list,
//! to relist what stays pending, to count), and one group lock at a time, under which
//! publishing the freed blocks takes list-index locks.

use super::allocator::{Allocator, MdState};
use super::discard::HELD;
use super::policy::FreeList;
use super::stats::Shard;
use crate::error::{Corrupted, Error, Result};
use crate::geometry::Extent;
use crate::groups::{GroupState, PendingFree};
use parking_lot::MutexGuard;
use std::sync::atomic::Ordering::{Relaxed, Release};

/// A free being recorded in group `g`: `off .. off + len` of transaction `txn`, and the
/// pending frees of the same transaction that end where it starts (`prev`, with its offset)
/// and start where it ends (`next`).
struct Insert {
    g: u64,
    off: u32,
    len: u32,
    txn: u64,
    prev: Option<(u32, PendingFree)>,
    next: Option<PendingFree>,
}

impl Insert {
    fn new(g: u64, state: &GroupState, off: u32, len: u32, txn: u64) -> Self {
        let prev = state
            .pending
            .range(..off)
            .next_back()
            .filter(|(&s, p)| s + p.len == off && p.txn == txn)
            .map(|(&s, p)| (s, *p));
        let next = state
            .pending
            .get(&(off + len))
            .filter(|p| p.txn == txn)
            .copied();
        Insert {
            g,
            off,
            len,
            txn,
            prev,
            next,
        }
    }

    fn end(&self) -> u32 {
        self.off + self.len
    }
}

impl Allocator {
    /// Frees `extent` (which may span groups). The blocks become reusable at the next commit.
    pub fn free(&self, extent: Extent) -> Result<()> {
        let shard = self.stats.shard();
        // Lock every group involved, in ascending order, then validate all before changing any.
        let (pieces, mut guards) = self.lock_extent(extent, shard)?;
        for (&(g, off, len), state) in pieces.iter().zip(&guards) {
            self.check_freeable(g, state, off, len)?;
        }
        let txn = self.txn.load(Relaxed);
        for (&(g, off, len), state) in pieces.iter().zip(guards.iter_mut()) {
            self.insert_pending(g, state, off, len, txn, shard);
        }
        drop(guards);
        shard.add(&shard.counters.frees, 1);
        shard.add(&shard.counters.free_blocks, extent.len);
        Ok(())
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
                what: Corrupted::Group { group: g },
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

    /// Records `off .. off + len` of the locked group `g` as a pending free of `txn`, the
    /// policy's way.
    fn insert_pending(
        &self,
        g: u64,
        state: &mut GroupState,
        off: u32,
        len: u32,
        txn: u64,
        shard: &Shard,
    ) {
        // Pending blocks stay marked used, and no block is pending twice.
        debug_assert!(
            state.bitmap.range_is_used(off, len),
            "a free of free blocks"
        );
        debug_assert!(!state.pending_overlaps(off, len), "blocks pending twice");
        let ins = Insert::new(g, state, off, len, txn);
        match self.policy.free_list {
            FreeList::PerGroup => self.insert_per_group(state, &ins, shard),
            FreeList::Global if self.policy.merge_before_insert => {
                self.insert_merge_first(state, &ins, shard)
            }
            FreeList::Global => self.insert_then_merge(state, &ins, shard),
        }
    }

    /// Per-group lists: merge in the group, mark the group dirty.
    fn insert_per_group(&self, state: &mut GroupState, ins: &Insert, shard: &Shard) {
        let mut start = ins.off;
        let mut total = ins.len;
        if let Some((s, p)) = ins.prev {
            start = s;
            total += p.len;
        }
        if let Some(n) = ins.next {
            state.pending.remove(&ins.end());
            total += n.len;
        }
        state.pending.insert(
            start,
            PendingFree {
                len: total,
                txn: ins.txn,
                id: 0,
            },
        );
        self.dirty.insert(ins.g);
        self.add_pending(ins.len, None, shard);
        debug_check_inserted(state, ins);
    }

    /// Global list, merge before insert: merge without the global lock; take it once, only
    /// to drop an absorbed entry or to list a new one.
    fn insert_merge_first(&self, state: &mut GroupState, ins: &Insert, shard: &Shard) {
        let (g, off, len, end) = (ins.g, ins.off, ins.len, ins.end());
        match (ins.prev, ins.next) {
            (Some((s, mut p)), Some(n)) => {
                state.pending.remove(&end);
                p.len += len + n.len;
                state.pending.insert(s, p);
                let mut md = self.lock_md(shard);
                md.freed.remove(&(g, n.id));
                self.add_pending(len, Some(&mut md), shard);
            }
            (Some((s, mut p)), None) => {
                p.len += len;
                state.pending.insert(s, p);
                self.add_pending(len, None, shard);
            }
            (None, Some(mut n)) => {
                state.pending.remove(&end);
                n.len += len;
                state.pending.insert(off, n);
                self.add_pending(len, None, shard);
            }
            (None, None) => {
                let id = self.list_new_free(g, len, shard);
                let txn = ins.txn;
                state.pending.insert(off, PendingFree { len, txn, id });
            }
        }
        debug_check_inserted(state, ins);
    }

    /// Global list, insert then merge: list the new entry, then absorb each neighbour with
    /// its own trip through the global lock.
    fn insert_then_merge(&self, state: &mut GroupState, ins: &Insert, shard: &Shard) {
        let g = ins.g;
        let id = self.list_new_free(g, ins.len, shard);
        let mut entry = PendingFree {
            len: ins.len,
            txn: ins.txn,
            id,
        };
        let mut start = ins.off;
        if let Some((s, p)) = ins.prev {
            state.pending.remove(&s);
            start = s;
            entry.len += p.len;
            self.lock_md(shard).freed.remove(&(g, p.id));
        }
        if let Some(n) = ins.next {
            state.pending.remove(&ins.end());
            entry.len += n.len;
            self.lock_md(shard).freed.remove(&(g, n.id));
        }
        state.pending.insert(start, entry);
        debug_check_inserted(state, ins);
    }

    /// Lists a new pending free of `len` blocks in group `g` on the global list and counts
    /// it, in one trip through the global lock. Returns its id.
    pub(super) fn list_new_free(&self, g: u64, len: u32, shard: &Shard) -> u64 {
        let mut md = self.lock_md(shard);
        let id = next_id(&mut md);
        md.freed.insert((g, id));
        self.add_pending(len, Some(&mut md), shard);
        id
    }

    /// Adds to the pending counter: the atomic, or the field under the global lock (taking it
    /// unless the caller holds it).
    pub(super) fn add_pending(
        &self,
        blocks: u32,
        md: Option<&mut MutexGuard<'_, MdState>>,
        shard: &Shard,
    ) {
        debug_assert!(blocks > 0, "no blocks made pending");
        if self.policy.atomic_pending {
            self.pending_blocks.fetch_add(u64::from(blocks), Relaxed);
        } else if let Some(md) = md {
            md.pending_blocks += u64::from(blocks);
        } else {
            self.lock_md(shard).pending_blocks += u64::from(blocks);
        }
    }

    /// Makes the current transaction durable: every free recorded before this call returns
    /// its blocks to the groups. Returns the number of blocks returned.
    pub fn commit(&self) -> u64 {
        self.release(self.seal())
    }

    /// Ends the current transaction without releasing its frees: returns its number, for
    /// [`Allocator::release`] once the transaction is durable (a journal commit in between).
    /// Frees after this call belong to the next transaction.
    pub fn seal(&self) -> u64 {
        let sealed = self.txn.fetch_add(1, Relaxed);
        // A wrap would make every pending free look committed.
        assert_ne!(sealed, u64::MAX, "transaction numbers ran out");
        sealed
    }

    /// Returns the frees of transactions up to `committed` (from [`Allocator::seal`]) to
    /// the groups. Returns the blocks released.
    pub fn release(&self, committed: u64) -> u64 {
        self.release_into(committed, None)
    }

    /// [`Allocator::release`], or with `held` the holding variant of
    /// [`Allocator::release_held`]: each due free is retagged [`HELD`] and listed in `held`
    /// instead of being freed.
    pub(super) fn release_into(&self, committed: u64, mut held: Option<&mut Vec<Extent>>) -> u64 {
        let _serial = self.commit_lock.lock();
        let shard = self.stats.shard();
        let mut released = 0u64;
        match self.policy.free_list {
            FreeList::PerGroup => {
                let mut at = 0;
                while let Some(g) = self.dirty.next_set(at) {
                    at = g + 1;
                    self.dirty.remove(g);
                    let mut state = self
                        .lock_group(g, shard)
                        .expect("a group with pending frees is loaded");
                    let (blocks, _) =
                        self.release_group(g, &mut state, committed, held.as_deref_mut(), shard);
                    released += blocks;
                    if !state.pending.is_empty() {
                        self.dirty.insert(g);
                    }
                }
            }
            FreeList::Global => {
                let listed = std::mem::take(&mut self.lock_md(shard).freed);
                let mut groups: Vec<u64> = listed.iter().map(|&(g, _)| g).collect();
                groups.dedup();
                let mut keep = Vec::new();
                for g in groups {
                    let mut state = self
                        .lock_group(g, shard)
                        .expect("a group with pending frees is loaded");
                    let (blocks, kept) =
                        self.release_group(g, &mut state, committed, held.as_deref_mut(), shard);
                    released += blocks;
                    keep.extend(kept.into_iter().map(|id| (g, id)));
                }
                if !keep.is_empty() {
                    self.lock_md(shard).freed.extend(keep);
                }
            }
        }
        if released > 0 {
            // The bump before the decrement, the decrement with Release: whoever reads
            // the pending count after it reads the bump too (`allocate_validated`).
            self.releases.fetch_add(1, Relaxed);
            if self.policy.atomic_pending {
                let was = self.pending_blocks.fetch_sub(released, Release);
                debug_assert!(was >= released, "released {released} of {was} pending");
            } else {
                self.lock_md(shard).pending_blocks -= released;
            }
        }
        released
    }

    /// Returns a group's pending frees of transactions `<= committed` to its bitmap (or,
    /// with `held`, retags them [`HELD`] and lists them there). Returns the blocks released
    /// and the ids of entries that stay pending.
    fn release_group(
        &self,
        g: u64,
        state: &mut GroupState,
        committed: u64,
        mut held: Option<&mut Vec<Extent>>,
        shard: &Shard,
    ) -> (u64, Vec<u64>) {
        let mut released = 0u64;
        let mut kept = Vec::new();
        let entries = std::mem::take(&mut state.pending);
        let group_start = self.geometry.group_start(g);
        for (off, mut p) in entries {
            if p.txn <= committed && p.txn != HELD {
                if let Some(held) = held.as_deref_mut() {
                    // Free at home from now on: the next checkpoint must write the group.
                    self.mark_home_dirty(g);
                    held.push(Extent::new(group_start + u64::from(off), u64::from(p.len)));
                    p.txn = HELD;
                    kept.push(p.id);
                    state.pending.insert(off, p);
                    continue;
                }
                debug_assert!(
                    state.bitmap.range_is_used(off, p.len),
                    "group {g}: a pending free {off}+{} of blocks already free",
                    p.len
                );
                state.bitmap.mark_free(off, p.len);
                released += u64::from(p.len);
            } else {
                kept.push(p.id);
                state.pending.insert(off, p);
            }
        }
        if released > 0 {
            self.publish(g, state, shard);
        }
        (released, kept)
    }
}

fn next_id(md: &mut MdState) -> u64 {
    md.next_id += 1;
    // 0 means "not listed" (a per-group free list's entries).
    debug_assert_ne!(md.next_id, 0, "free ids wrapped");
    md.next_id
}

/// Debug builds: the free `ins` just inserted is pending, in one entry of its group.
fn debug_check_inserted(state: &GroupState, ins: &Insert) {
    debug_assert!(
        state
            .pending
            .range(..=ins.off)
            .next_back()
            .is_some_and(|(&s, p)| s + p.len >= ins.end() && p.txn == ins.txn),
        "blocks {}+{} of group {} freed, not pending",
        ins.off,
        ins.len,
        ins.g
    );
}
