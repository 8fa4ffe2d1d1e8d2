//! The allocator's side of lazy loading: locking a group with its bitmap in memory, loading
//! it (from the read-ahead stage or the device), queueing read-ahead, dropping idle bitmaps,
//! and the sets that say which groups are corrupt or differ from their home copy. The loader
//! itself (load states, staging, the read-ahead thread) is `lazy.rs`.
//!
//! # Data structures
//!
//! - A group's [`Slot`] (under its lock): its state, or `None` while unloaded.
//! - `Allocator::lazy`: the loader (`None` for an allocator in memory, whose groups are all
//!   loaded from the start).
//! - `Allocator::corrupt`: groups whose bitmap failed its checks when loaded (or whose
//!   descriptor did): held all used, never written home.
//! - `Allocator::home_dirty`: groups changed since their home copy was written (only over a
//!   device).
//!
//! # Invariant
//!
//! Outside the group lock, a group's slot is `Some` exactly when the loader says it is
//! loaded. A loaded bitmap
//! replaces the descriptor's figures: the mirrors are republished from it, and the
//! accounting moves the difference between the hinted and the real free blocks into
//! `allocated`. A bitmap is dropped only when clean (home copy current), without pending
//! frees, not corrupt and not being read ahead.
//!
//! # Lock order
//!
//! A load runs under the group lock and takes the loader's `staged` lock (group lock ->
//! `staged`); a drop try-locks the group, then takes `staged`. Read-ahead takes the loader's
//! queue lock holding no group lock.

use super::allocator::{Allocator, StateGuard};
use super::lazy::LOADED;
use super::stats::Shard;
use crate::error::{Error, Result};
use crate::groups::{AtomicBitset, Group, GroupBitmap, GroupState, Slot};
use parking_lot::MutexGuard;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;

impl Allocator {
    /// Locks group `g`, loading its bitmap if it is not in memory. Fails only when the
    /// bitmap cannot be read (an I/O error; a corrupt bitmap loads as all used).
    #[inline]
    pub(super) fn lock_group(&self, g: u64, shard: &Shard) -> Result<StateGuard<'_>> {
        let slot = self.lock_slot(self.groups.get(g), shard);
        self.loaded(g, slot, shard)
    }

    #[inline]
    pub(super) fn lock_slot<'a>(&self, group: &'a Group, shard: &Shard) -> MutexGuard<'a, Slot> {
        let mut waited = false;
        let guard = group.lock(&mut waited);
        if waited {
            shard.lock_waited(1);
        }
        guard
    }

    /// The locked group `g` with its bitmap loaded.
    #[inline]
    pub(super) fn loaded<'a>(
        &self,
        g: u64,
        mut slot: MutexGuard<'a, Slot>,
        shard: &Shard,
    ) -> Result<StateGuard<'a>> {
        if slot.is_none() {
            self.load_group(g, &mut slot, shard)?;
        }
        if self.lazy.is_some() {
            self.groups.get(g).touch();
        }
        Ok(MutexGuard::map(slot, |s| {
            &mut **s.as_mut().expect("loaded above")
        }))
    }

    /// Reads group `g`'s bitmap (under its lock): the read-ahead copy if one is staged.
    #[cold]
    fn load_group(&self, g: u64, slot: &mut Slot, shard: &Shard) -> Result<()> {
        debug_assert!(slot.is_none(), "group {g} loaded twice");
        // An allocator in memory holds every bitmap from the start: an unloaded group
        // without a device to read it from is a broken invariant, not an input error.
        let lazy = self
            .lazy
            .as_ref()
            .unwrap_or_else(|| panic!("group {g} has no bitmap and no device to read it from"));
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
        let hinted_free = u64::from(self.groups.free_blocks(g));
        shard.add(&shard.held.adjusted, hinted_free);
        shard.sub(&shard.held.adjusted, u64::from(bitmap.free_blocks()));
        let state = slot.insert(Box::new(GroupState {
            bitmap,
            pending: BTreeMap::new(),
        }));
        self.publish_mirrors(g, state, shard);
        debug_assert_eq!(
            self.groups.free_blocks(g),
            state.bitmap.free_blocks(),
            "group {g}'s mirror after its load"
        );
        Ok(())
    }

    /// Queues for read-ahead the groups a walk visits after `g` (`next(prev)` gives the one
    /// after `prev`), up to `prefetch_groups` of them, those passing `good` and unloaded.
    pub(super) fn read_ahead(
        &self,
        g: u64,
        next: &mut dyn FnMut(u64) -> Option<u64>,
        good: &dyn Fn(u64) -> bool,
    ) {
        debug_assert!(g < self.groups.len(), "read-ahead after group {g}");
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

    /// Loads group `g`'s bitmap if it is not in memory (a corrupt one loads as all used).
    /// A group past the device's is refused ([`Error::NoSuchGroup`]), changing nothing.
    pub fn ensure_loaded(&self, g: u64) -> Result<()> {
        if g >= self.groups.len() {
            return Err(Error::NoSuchGroup {
                group: g,
                groups: self.groups.len(),
            });
        }
        self.lock_group(g, self.stats.shard()).map(drop)
    }

    /// True if group `g`'s bitmap is in memory.
    pub fn is_loaded(&self, g: u64) -> bool {
        self.lazy.as_ref().is_none_or(|l| l.state(g) == LOADED)
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
            // An untouched group was never loaded: only the touched ones can be dropped.
            for (g, group) in self.groups.iter_touched() {
                if lazy.loaded.load(Relaxed) <= keep {
                    return dropped;
                }
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

    /// Groups found corrupt (their bitmap failed its checks when loaded), ascending.
    pub fn corrupt_groups(&self) -> Vec<u64> {
        self.corrupt.iter().collect()
    }

    /// Holds group `g` corrupt: all used, skipped by every pass, never written home. Before
    /// its first load (its descriptor failed its checks) it loads all used; loaded already
    /// (at open, a group loaded eagerly that a journal record lost later touches), its
    /// bitmap in memory becomes all used now, so no pass finds its free blocks. Called by
    /// the store's open only, while nothing waits to be freed (hence not public: frees
    /// waiting in the group would break its accounting, which it asserts).
    pub(crate) fn mark_corrupt(&self, g: u64) {
        self.corrupt.insert(g);
        let shard = self.stats.shard();
        let mut slot = self.lock_slot(self.groups.get(g), shard);
        if let Some(state) = slot.as_mut() {
            assert!(
                state.pending.is_empty(),
                "group {g}: frees wait in a group held corrupt"
            );
            let old_free = state.bitmap.free_blocks();
            state.bitmap = GroupBitmap::from_used_bytes(
                self.geometry.group_blocks as u32,
                self.geometry.group_len(g) as u32,
                &[],
            );
            shard.add(&shard.held.adjusted, u64::from(old_free));
            self.publish_mirrors(g, state, shard);
        }
        // Held: nothing of it is offered, loaded or not.
        debug_assert!(
            self.corrupt.contains(g) && slot.as_ref().is_none_or(|s| s.bitmap.free_blocks() == 0)
        );
        debug_assert_eq!(
            slot.as_ref().map_or(0, |_| self.groups.free_blocks(g)),
            0,
            "group {g}'s mirror offers blocks"
        );
    }

    /// True if group `g` is held corrupt.
    pub fn is_corrupt(&self, g: u64) -> bool {
        self.corrupt.contains(g)
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

    /// Memory one loaded bitmap takes (used bits, the buddy bitmaps, the struct).
    pub fn bitmap_memory_bytes(&self) -> u64 {
        let gb = self.geometry.group_blocks;
        // used: gb bits; full[k] for k >= 1: gb / 2 + gb / 4 + ... bits.
        gb / 8 + gb / 8 + std::mem::size_of::<GroupState>() as u64
    }

    /// Bytes an unloaded group nothing has touched costs, measured from the structures: its
    /// packed figures and share of the group table's chunk slots (a touched group adds its
    /// 64-byte [`Group`]), its load-state byte, and its share of the order indexes, the
    /// per-tag sets, the dirty sets and the corrupt set. An allocator in memory has no
    /// unloaded group: it reports a loaded group's [`Group`] and share of the sets.
    pub fn memory_per_unloaded_group(&self) -> f64 {
        let n = self.groups.len();
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
        let (state, group) = if self.lazy.is_some() {
            (1.0, self.groups.memory_per_untouched_group())
        } else {
            (0.0, std::mem::size_of::<Group>() as f64)
        };
        group + state + sets as f64 / n as f64
    }
}
