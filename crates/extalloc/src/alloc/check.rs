//! `Allocator::check`: recomputes every cached figure from the bitmaps and compares, at
//! quiescence (tests, and the lab and store after each run).
//!
//! # Data structures
//!
//! The allocator's (`allocator.rs`), read only; [`Members`] holds what the group indexes
//! say about each group, gathered once before the groups are checked.
//!
//! # Invariant checked
//!
//! Each group's bitmap and buddy summary agree (`GroupBitmap::check`); its mirrors, index
//! positions and tag agree with them; its pending frees are disjoint, marked used and
//! listed; and across the allocator the accounting equation holds (mballoc keeps the like in
//! its header comment):
//!
//! ```text
//! blocks marked used = allocated + reserved + pending
//! ```
//!
//! where `allocated` are blocks handed to callers (or found used on disk) and not freed,
//! `reserved` blocks preallocations hold for files (handed to nobody, never journaled: the
//! file layer checks that its preallocations add up to exactly this), and `pending` blocks
//! freed but waiting for their transaction's commit.
//!
//! # Lock order
//!
//! `check` takes the global lock, then reads the list-index lists (md -> list-index locks),
//! then only try-locks each group in turn: a group found locked means the allocator is not
//! quiescent, and is reported, never waited for.

use super::allocator::{Allocator, MdState};
use super::policy::FreeList;
use super::publish::free_order;
use crate::error::{Error, Result};
use crate::groups::{Figures, Group, GroupBitmap, GroupState, OrderIndex};
use std::sync::atomic::Ordering::Relaxed;

/// Per group, the order set each index holds it in (`None` for an index not in use).
struct Members {
    largest: Option<Vec<Option<u32>>>,
    avg: Option<Vec<Option<u32>>>,
    free: Option<Vec<Option<u32>>>,
}

fn fail<T>(msg: String) -> Result<T> {
    Err(Error::Invariant(msg))
}

impl Allocator {
    /// Recomputes every cached figure and compares (call at quiescence: no other thread may
    /// allocate, free or commit meanwhile).
    pub fn check(&self) -> Result<()> {
        assert_eq!(self.groups.len(), self.geometry.groups_count());
        let mut pending_total = 0u64;
        let mut marked_total = 0u64;
        let md = self.md.lock();
        let members = self.check_sets()?;
        for g in 0..self.groups.len() {
            marked_total += self.geometry.group_len(g) - u64::from(self.groups.free_blocks(g));
            let Some(group) = self.groups.peek(g) else {
                // Untouched: never loaded, its figures those it was opened with.
                if self.is_loaded(g) {
                    return fail(format!("group {g}: loaded but never made"));
                }
                self.check_unloaded(g as usize, self.groups.figures(g), &members)?;
                continue;
            };
            let slot = group.try_lock().ok_or_else(|| {
                Error::Invariant(format!("group {g} is locked during check: not quiescent"))
            })?;
            pending_total += self.check_group(g as usize, group, slot.as_deref(), &members, &md)?;
        }
        self.check_accounting(&md, pending_total, marked_total)
    }

    /// The index memberships, and the structure of the dirty and per-tag sets.
    fn check_sets(&self) -> Result<Members> {
        let members = |index: &OrderIndex, used: bool| {
            used.then(|| index.membership().map_err(Error::Invariant))
                .transpose()
        };
        let largest = members(&self.by_largest, self.policy.optimize_scan)?;
        let avg = members(&self.by_avg, self.policy.optimize_scan)?;
        let free = members(&self.by_free, self.slow_indexed())?;
        if let Err(e) = self.dirty.check() {
            return fail(e);
        }
        for set in self.by_tag.iter() {
            set.check().map_err(Error::Invariant)?;
        }
        Ok(Members { largest, avg, free })
    }

    /// One group, its state `None` when unloaded. Returns its pending blocks.
    fn check_group(
        &self,
        g: usize,
        group: &Group,
        state: Option<&GroupState>,
        members: &Members,
        md: &MdState,
    ) -> Result<u64> {
        if self.is_loaded(g as u64) != state.is_some() {
            return fail(format!(
                "group {g}: load state says loaded={}, bitmap present={}",
                self.is_loaded(g as u64),
                state.is_some()
            ));
        }
        if let Some(m) = &members.free {
            if m[g] != free_order(group.free_blocks()) {
                return fail(format!(
                    "group {g}: in free-count set {:?}, mirror says {} free",
                    m[g],
                    group.free_blocks()
                ));
            }
        }
        let Some(state) = state else {
            self.check_unloaded(g, self.groups.figures(g as u64), members)?;
            return Ok(0);
        };
        self.check_figures(g, group, &state.bitmap, members)?;
        self.check_pending(g, state, md)
    }

    /// An unloaded group: its figures are its descriptor's; the indexes must agree.
    fn check_unloaded(&self, g: usize, figures: Figures, members: &Members) -> Result<()> {
        if let Some(m) = &members.free {
            if m[g] != free_order(figures.free_blocks) {
                return fail(format!("group {g} (unloaded): free-count set disagrees"));
            }
        }
        if let Some(m) = &members.largest {
            if m[g] != figures.largest_order {
                return fail(format!("group {g} (unloaded): largest-order set disagrees"));
            }
        }
        if let Some(m) = &members.avg {
            if m[g] != figures.avg_order {
                return fail(format!("group {g} (unloaded): average-order set disagrees"));
            }
        }
        for (i, set) in self.by_tag.iter().enumerate() {
            if set.contains(g as u64) != (usize::from(figures.class_tag) == i + 1) {
                return fail(format!("group {g} (unloaded): tag sets disagree"));
            }
        }
        Ok(())
    }

    /// A loaded group's bitmap, tag, mirrors and index positions.
    fn check_figures(
        &self,
        g: usize,
        group: &Group,
        b: &GroupBitmap,
        members: &Members,
    ) -> Result<()> {
        if self.corrupt.contains(g as u64) && group.free_blocks() != 0 {
            return fail(format!("group {g}: corrupt but offers free blocks"));
        }
        b.check()
            .map_err(|e| Error::Invariant(format!("group {g}: {e}")))?;
        for (i, set) in self.by_tag.iter().enumerate() {
            if set.contains(g as u64) != (usize::from(group.class_tag()) == i + 1) {
                return fail(format!(
                    "group {g}: tag {} but in the set of tag {}: {}",
                    group.class_tag(),
                    i + 1,
                    set.contains(g as u64)
                ));
            }
        }
        if group.class_tag() != 0 && b.free_blocks() == b.len_blocks() {
            return fail(format!("group {g}: empty but tagged {}", group.class_tag()));
        }
        self.check_mirrors(g, group, b)?;
        if let Some(m) = &members.largest {
            if m[g] != b.largest_free_order() {
                return fail(format!(
                    "group {g}: in largest-order set {:?}, summary says {:?}",
                    m[g],
                    b.largest_free_order()
                ));
            }
        }
        if let Some(m) = &members.avg {
            if m[g] != group.avg_order() {
                return fail(format!(
                    "group {g}: in average-order set {:?}, mirror says {:?}",
                    m[g],
                    group.avg_order()
                ));
            }
        }
        Ok(())
    }

    /// A loaded group's lock-free mirrors against its bitmap.
    fn check_mirrors(&self, g: usize, group: &Group, b: &GroupBitmap) -> Result<()> {
        if group.free_blocks() != b.free_blocks() {
            return fail(format!(
                "group {g}: mirror free {} != {}",
                group.free_blocks(),
                b.free_blocks()
            ));
        }
        if group.largest_order() != b.largest_free_order() {
            return fail(format!("group {g}: mirror largest order disagrees"));
        }
        let zombie_ok = self.policy.zombie_groups && b.free_blocks() == 0;
        if group.avg_order() != b.avg_fragment_order() && !zombie_ok {
            return fail(format!(
                "group {g}: mirror average fragment order disagrees"
            ));
        }
        Ok(())
    }

    /// A loaded group's pending frees: disjoint, marked used, listed where the policy lists
    /// them. Returns their blocks.
    fn check_pending(&self, g: usize, state: &GroupState, md: &MdState) -> Result<u64> {
        let mut pending = 0u64;
        let mut prev_end = 0u32;
        for (&off, p) in &state.pending {
            if p.len == 0 || off < prev_end {
                return fail(format!(
                    "group {g}: pending free at {off} overlaps or is empty"
                ));
            }
            if !state.bitmap.range_is_used(off, p.len) {
                return fail(format!(
                    "group {g}: pending free {off}+{} is not marked used",
                    p.len
                ));
            }
            if self.policy.free_list == FreeList::Global && !md.freed.contains(&(g as u64, p.id)) {
                return fail(format!(
                    "group {g}: pending free {off} is missing from the global list"
                ));
            }
            prev_end = off + p.len;
            pending += u64::from(p.len);
        }
        if self.policy.free_list == FreeList::PerGroup
            && !state.pending.is_empty()
            && !self.dirty.contains(g as u64)
        {
            return fail(format!(
                "group {g}: has pending frees but is not marked dirty"
            ));
        }
        Ok(pending)
    }

    /// The pending counter against the groups' pending frees, and the accounting equation.
    fn check_accounting(&self, md: &MdState, pending_total: u64, marked_total: u64) -> Result<()> {
        let counted = if self.policy.atomic_pending {
            self.pending_blocks.load(Relaxed)
        } else {
            md.pending_blocks
        };
        if counted != pending_total {
            return fail(format!(
                "pending counter {counted} but groups hold {pending_total}"
            ));
        }
        let (allocated, reserved) = self.stats.held();
        if allocated.wrapping_add(reserved).wrapping_add(pending_total) != marked_total {
            return fail(format!(
                "{marked_total} blocks marked used, but {allocated} allocated + {reserved} \
                 reserved + {pending_total} pending"
            ));
        }
        // The free blocks read from the accounting against the groups' own figures.
        let (counted_free, summed) = (self.free_given_pending(counted), self.free_blocks_summed());
        if counted_free != summed {
            return fail(format!(
                "free blocks from the accounting {counted_free}, but the groups hold {summed}"
            ));
        }
        Ok(())
    }
}
