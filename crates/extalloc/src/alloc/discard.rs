//! Frees held for a discard: durable frees that stay marked used until the caller says the
//! device has discarded (TRIMmed) them, so no block is handed out again while a discard of
//! it may still be in flight (ext4 with `-o discard` frees in its buddy only after the
//! discard completes, for the same reason).
//!
//! # Data structures
//!
//! A held free is a group's pending free tagged with the transaction number [`HELD`], which
//! no `release` reaches. It enters by [`Allocator::release_held`] (a committed
//! transaction's pending frees, retagged instead of freed) or by [`Allocator::hold_free`]
//! (a free that is durable already, entered as held directly, never merged with its
//! neighbours), and leaves by [`Allocator::release_discarded`].
//!
//! # Invariant
//!
//! A held free is a pending free like any other for the accounting (`blocks marked used =
//! allocated + reserved + pending`, `check.rs`): marked used, listed, counted pending. It is
//! never merged with another entry, so the extents `release_held` and `hold_free` report
//! are exactly the entries, and an extent made of whole held entries is what
//! `release_discarded` accepts.
//!
//! # Lock order
//!
//! As the free path (`deferred.rs`): group locks in ascending order, then the global lock.

use super::allocator::Allocator;
use crate::error::{Error, Result};
use crate::geometry::Extent;
use crate::groups::{GroupState, PendingFree};
use std::sync::atomic::Ordering::Relaxed;

/// The transaction number of a free held for a discard: above every real one.
pub(crate) const HELD: u64 = u64::MAX;

impl Allocator {
    /// [`Allocator::release`] for a caller that discards freed blocks first: the frees of
    /// transactions up to `committed` stay marked used, held for a discard, and are
    /// returned (one extent per pending entry, inside one group) instead of freed. Each is
    /// freed by [`Allocator::release_discarded`].
    pub fn release_held(&self, committed: u64) -> Vec<Extent> {
        let mut held = Vec::new();
        let released = self.release_into(committed, Some(&mut held));
        debug_assert_eq!(released, 0, "a holding release freed blocks");
        held
    }

    /// Holds `extent`, allocated and freed by a durable record already, for a discard:
    /// marked used and counted pending until [`Allocator::release_discarded`]. All or
    /// nothing, as a free. Returns the held entries (one per group the extent spans).
    pub(crate) fn hold_free(&self, extent: Extent) -> Result<Vec<Extent>> {
        let shard = self.stats.shard();
        let (pieces, mut guards) = self.lock_extent(extent, shard)?;
        for (&(g, off, len), state) in pieces.iter().zip(&guards) {
            self.check_freeable(g, state, off, len)?;
        }
        let mut held = Vec::with_capacity(pieces.len());
        for (&(g, off, len), state) in pieces.iter().zip(guards.iter_mut()) {
            held.push(self.hold_entry(g, state, off, len, shard));
        }
        drop(guards);
        shard.add(&shard.counters.frees, 1);
        shard.add(&shard.counters.free_blocks, extent.len);
        Ok(held)
    }

    /// Enters `off .. off + len` of the locked group `g`, marked used already, as a held
    /// pending free: counted pending, listed the policy's way, free at home. Returns it as
    /// an extent.
    fn hold_entry(
        &self,
        g: u64,
        state: &mut GroupState,
        off: u32,
        len: u32,
        shard: &crate::alloc::stats::Shard,
    ) -> Extent {
        debug_assert!(
            state.bitmap.range_is_used(off, len),
            "a held free is marked used"
        );
        debug_assert!(
            !state.pending_overlaps(off, len),
            "a held free is no other pending"
        );
        let id = match self.policy.free_list {
            super::FreeList::PerGroup => {
                self.dirty.insert(g);
                self.add_pending(len, None, shard);
                0
            }
            super::FreeList::Global => self.list_new_free(g, len, shard),
        };
        state
            .pending
            .insert(off, PendingFree { len, txn: HELD, id });
        // Free at home from now on: the next checkpoint must write the group.
        self.mark_home_dirty(g);
        Extent::new(
            self.geometry.group_start(g) + u64::from(off),
            u64::from(len),
        )
    }

    /// Holds free blocks of group `g` for a batched discard (FITRIM): each free run of at
    /// least `min_len` blocks between offsets `from` and `to` (cut at `to`), up to `max`
    /// blocks in all, is marked used and held pending until
    /// [`Allocator::release_discarded`], so that no allocation hands it out while the
    /// device discards it. The allocated count does not change (the blocks were never
    /// handed out). Returns the held extents and the offset to go on from (`to` once the
    /// range is done). A group held corrupt holds nothing (its blocks all count as used).
    pub(crate) fn hold_unused(
        &self,
        g: u64,
        (from, to): (u32, u32),
        min_len: u32,
        max: u64,
    ) -> Result<(Vec<Extent>, u32)> {
        assert!(
            from <= to && max > 0,
            "a range and a budget: {from}..{to}, {max}"
        );
        let shard = self.stats.shard();
        let mut state = self.lock_group(g, shard)?;
        let runs: Vec<(u32, u32)> = state
            .bitmap
            .free_runs(from)
            .take_while(|&(s, _)| s < to)
            .map(|(s, l)| (s, l.min(to - s)))
            .filter(|&(_, l)| l >= min_len.max(1))
            .collect();
        let (mut held, mut total, mut next) = (Vec::new(), 0u64, to);
        for (s, l) in runs {
            if total >= max {
                next = s;
                break;
            }
            let l = l.min(u32::try_from(max - total).unwrap_or(u32::MAX));
            debug_assert!(state.bitmap.range_is_free(s, l), "a free run is free");
            state.bitmap.mark_used(s, l);
            held.push(self.hold_entry(g, &mut state, s, l, shard));
            total += u64::from(l);
            next = s + l;
        }
        if !held.is_empty() {
            self.publish(g, &state, shard);
        }
        debug_assert!(next <= to, "the next offset stays in the range");
        Ok((held, if total < max { to } else { next }))
    }

    /// Frees blocks held for a discard now that the caller has discarded them. `extent`
    /// must be made of whole held entries (one of the extents `release_held` or `hold_free`
    /// returned, or adjacent ones joined); anything else is refused with
    /// [`Error::NotADiscard`] and changes nothing. Returns the blocks freed.
    pub fn release_discarded(&self, extent: Extent) -> Result<u64> {
        let shard = self.stats.shard();
        let (pieces, mut guards) = self.lock_extent(extent, shard)?;
        for (&(_, off, len), state) in pieces.iter().zip(&guards) {
            if !tiled_by_held(state, off, len) {
                return Err(Error::NotADiscard {
                    start: extent.start,
                    len: extent.len,
                });
            }
        }
        let mut ids = Vec::new();
        for (&(g, off, len), state) in pieces.iter().zip(guards.iter_mut()) {
            let offsets: Vec<u32> = state
                .pending
                .range(off..off + len)
                .map(|(&o, _)| o)
                .collect();
            for o in offsets {
                let p = state.pending.remove(&o).expect("listed just now");
                ids.push((g, p.id));
            }
            state.bitmap.mark_free(off, len);
            self.publish(g, state, shard);
            debug_assert!(
                !state.pending_overlaps(off, len),
                "a released discard pending"
            );
        }
        drop(guards);
        if self.policy.atomic_pending {
            let was = self.pending_blocks.fetch_sub(extent.len, Relaxed);
            debug_assert!(was >= extent.len, "released more than pending");
        } else {
            self.lock_md(shard).pending_blocks -= extent.len;
        }
        if self.policy.free_list == super::FreeList::Global {
            let mut md = self.lock_md(shard);
            for id in ids {
                md.freed.remove(&id);
            }
        }
        self.releases.fetch_add(1, Relaxed);
        Ok(extent.len)
    }
}

/// True if the pending entries inside `off .. off + len` are all held and cover it
/// exactly, starting at `off` (no entry straddles either end).
fn tiled_by_held(state: &GroupState, off: u32, len: u32) -> bool {
    let end = off + len;
    if let Some((&s, p)) = state.pending.range(..off).next_back() {
        if s + p.len > off {
            return false;
        }
    }
    let mut at = off;
    for (&s, p) in state.pending.range(off..end) {
        if s != at || p.txn != HELD || s + p.len > end {
            return false;
        }
        at = s + p.len;
    }
    at == end
}
