//! Publishing a group's figures: after a change under the group lock, its lock-free mirrors,
//! its positions in the group indexes, its size-class tag and the per-tag sets follow the
//! bitmap; at construction, every group is placed by the figures it starts with.
//!
//! # Data structures
//!
//! None of its own: it writes the group's mirrors (`Group::set_mirrors`), the order indexes
//! `by_largest`, `by_avg`, `by_free`, the per-tag sets `by_tag` and `home_dirty`
//! (`allocator.rs`).
//!
//! # Invariant
//!
//! After `publish` returns, and while the group lock is held:
//!
//! ```text
//! mirror free / largest / avg  == the bitmap's (avg of a full group kept with zombie_groups)
//! by_largest, by_avg           hold the group in the set of its mirror's order (optimize_scan)
//! by_free                      holds it in the set of free_order(free) (slow-pass index)
//! by_tag[t - 1] holds it       <=> its tag is t;  an empty group has no tag
//! ```
//!
//! # Lock order
//!
//! Called under the group lock; index updates take list-index locks under it (group lock ->
//! list-index locks); the ordered sets and per-tag sets are lock-free.

use super::allocator::Allocator;
use super::passes::floor_log2;
use super::stats::Shard;
use crate::groups::{AtomicBitset, GroupState, GroupTable, OrderIndex};

/// The set of `by_free` a group of `free` blocks is in.
pub(super) fn free_order(free: u32) -> Option<u32> {
    (free > 0).then(|| floor_log2(u64::from(free)))
}

/// Devices with fewer groups index them on one thread at construction.
pub(crate) const PARALLEL_INDEX_GROUPS: u64 = 1 << 16;

/// `by_largest` and the tag sets from the table's starting figures (construction only).
fn index_by_largest_and_tag(
    groups: &GroupTable,
    scan: bool,
    by_largest: &mut OrderIndex,
    by_tag: &mut [AtomicBitset],
) {
    assert!(
        by_tag.iter().all(|t| t.population() == 0),
        "the tag sets start empty"
    );
    for g in 0..groups.len() {
        let f = groups.figures(g);
        if scan {
            by_largest.insert_mut(g, f.largest_order);
        }
        if f.class_tag != 0 {
            by_tag[usize::from(f.class_tag - 1)].insert_mut(g);
        }
    }
    by_largest.summarise_mut();
    by_tag.iter_mut().for_each(AtomicBitset::summarise_mut);
}

/// `by_avg` and, with the slow-pass index, `by_free` from the table's starting figures
/// (construction only).
fn index_by_avg_and_free(
    groups: &GroupTable,
    scan: bool,
    slow: bool,
    by_avg: &mut OrderIndex,
    by_free: &mut OrderIndex,
) {
    assert!(
        by_avg.population_in_orders(0).unwrap_or(0) == 0
            && by_free.population_in_orders(0).unwrap_or(0) == 0,
        "the indexes start empty (ordered sets; list sets cannot say)"
    );
    if scan {
        for g in 0..groups.len() {
            let f = groups.figures(g);
            by_avg.insert_mut(g, f.avg_order);
            if slow {
                by_free.insert_mut(g, free_order(f.free_blocks));
            }
        }
    }
    by_avg.summarise_mut();
    by_free.summarise_mut();
}

impl Allocator {
    /// Places every group in the indexes and tag sets by the figures it starts with (at
    /// construction, before any other thread can see the allocator), without making the
    /// groups of the table: plain writes into sets nothing else sees yet. On a device of
    /// [`PARALLEL_INDEX_GROUPS`] groups or more, `by_avg` and `by_free` are filled on a
    /// second thread while this one fills `by_largest` and the tag sets (disjoint sets; the
    /// table is only read).
    pub(super) fn index_groups(&mut self) {
        let slow = self.slow_indexed();
        let scan = self.policy.optimize_scan;
        let groups = &self.groups;
        let (by_largest, by_avg, by_free, by_tag) = (
            &mut self.by_largest,
            &mut self.by_avg,
            &mut self.by_free,
            &mut self.by_tag,
        );
        let mut second_done = false;
        if groups.len() >= PARALLEL_INDEX_GROUPS {
            second_done = std::thread::scope(|s| {
                let second = std::thread::Builder::new()
                    .name("extalloc-index".into())
                    .spawn_scoped(s, || {
                        index_by_avg_and_free(groups, scan, slow, &mut *by_avg, &mut *by_free);
                    });
                index_by_largest_and_tag(groups, scan, &mut *by_largest, &mut *by_tag);
                match second {
                    Ok(h) => {
                        h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                        true
                    }
                    // No thread to spare: the second half runs here, below.
                    Err(_) => false,
                }
            });
        } else {
            index_by_largest_and_tag(groups, scan, by_largest, by_tag);
        }
        if !second_done {
            index_by_avg_and_free(groups, scan, slow, by_avg, by_free);
        }
        debug_assert_eq!(
            self.by_tag
                .iter()
                .map(AtomicBitset::population)
                .sum::<u64>(),
            (0..self.groups.len())
                .filter(|&g| self.groups.figures(g).class_tag != 0)
                .count() as u64,
            "every tagged group in its tag's set"
        );
    }

    /// Gives group `g` size-class tag `tag` (0 = none) and keeps the per-tag sets in step.
    /// Called under the group's lock.
    pub(super) fn set_group_tag(&self, g: u64, tag: u8) {
        let group = self.groups.get(g);
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

    /// Copies a group's new figures to its mirrors and index positions (under its lock),
    /// after a change: the group now differs from its home copy.
    pub(super) fn publish(&self, g: u64, state: &GroupState, shard: &Shard) {
        if let Some(d) = &self.home_dirty {
            d.insert(g);
        }
        self.publish_mirrors(g, state, shard);
    }

    /// Copies a group's figures to its mirrors and index positions (under its lock).
    pub(super) fn publish_mirrors(&self, g: u64, state: &GroupState, shard: &Shard) {
        let group = self.groups.get(g);
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
                shard.lock_waited(waits);
            }
        }
    }
}
