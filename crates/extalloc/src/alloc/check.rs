//! `Allocator::check`: recomputes every cached figure from the bitmaps and compares, at
//! quiescence (tests, and the lab and store after each run). Data structures are the
//! allocator's (`allocator.rs`); this file only reads them, taking the global lock, then
//! only try-locking each group (a locked group is reported, never waited for).
//!
//! Besides each group's figures it checks the accounting equation (mballoc keeps the like
//! in its header comment):
//!
//! ```text
//! blocks marked used = allocated + reserved + pending
//! ```
//!
//! where `allocated` are blocks handed to callers (or found used on disk) and not freed,
//! `reserved` blocks preallocations hold for files (handed to nobody, never journaled: the
//! file layer checks that its preallocations add up to exactly this), and `pending` blocks
//! freed but waiting for their transaction's commit.

use super::allocator::Allocator;
use super::policy::FreeList;
use super::publish::free_order;
use crate::error::{Error, Result};
use std::sync::atomic::Ordering::Relaxed;

impl Allocator {
    /// Recomputes every cached figure and compares (call at quiescence: no other thread may
    /// allocate, free or commit meanwhile).
    pub fn check(&self) -> Result<()> {
        let fail = |msg: String| Err(Error::Invariant(msg));
        let mut pending_total = 0u64;
        let mut marked_total = 0u64;
        let md = self.md.lock();
        let largest_members = if self.policy.optimize_scan {
            Some(self.by_largest.membership().map_err(Error::Invariant)?)
        } else {
            None
        };
        let avg_members = if self.policy.optimize_scan {
            Some(self.by_avg.membership().map_err(Error::Invariant)?)
        } else {
            None
        };
        let free_members = if self.slow_indexed() {
            Some(self.by_free.membership().map_err(Error::Invariant)?)
        } else {
            None
        };
        if let Err(e) = self.dirty.check() {
            return fail(e);
        }
        for set in self.by_tag.iter() {
            set.check().map_err(Error::Invariant)?;
        }
        for (g, group) in self.groups.iter().enumerate() {
            let slot = group.try_lock().ok_or_else(|| {
                Error::Invariant(format!("group {g} is locked during check: not quiescent"))
            })?;
            marked_total += self.geometry.group_len(g as u64) - u64::from(group.free_blocks());
            if self.is_loaded(g as u64) != slot.is_some() {
                return fail(format!(
                    "group {g}: load state says loaded={}, bitmap present={}",
                    self.is_loaded(g as u64),
                    slot.is_some()
                ));
            }
            if let Some(m) = &free_members {
                if m[g] != free_order(group.free_blocks()) {
                    return fail(format!(
                        "group {g}: in free-count set {:?}, mirror says {} free",
                        m[g],
                        group.free_blocks()
                    ));
                }
            }
            let Some(state) = slot.as_deref() else {
                // Unloaded: its figures are its descriptor's; the indexes must agree.
                if let Some(m) = &largest_members {
                    if m[g] != group.largest_order() {
                        return fail(format!("group {g} (unloaded): largest-order set disagrees"));
                    }
                }
                if let Some(m) = &avg_members {
                    if m[g] != group.avg_order() {
                        return fail(format!("group {g} (unloaded): average-order set disagrees"));
                    }
                }
                for (i, set) in self.by_tag.iter().enumerate() {
                    if set.contains(g as u64) != (usize::from(group.class_tag()) == i + 1) {
                        return fail(format!("group {g} (unloaded): tag sets disagree"));
                    }
                }
                continue;
            };
            if self.corrupt.contains(g as u64) && group.free_blocks() != 0 {
                return fail(format!("group {g}: corrupt but offers free blocks"));
            }
            let b = &state.bitmap;
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
            if let Some(m) = &largest_members {
                if m[g] != b.largest_free_order() {
                    return fail(format!(
                        "group {g}: in largest-order set {:?}, summary says {:?}",
                        m[g],
                        b.largest_free_order()
                    ));
                }
            }
            if let Some(m) = &avg_members {
                if m[g] != group.avg_order() {
                    return fail(format!(
                        "group {g}: in average-order set {:?}, mirror says {:?}",
                        m[g],
                        group.avg_order()
                    ));
                }
            }
            let mut prev_end = 0u32;
            for (&off, p) in &state.pending {
                if p.len == 0 || off < prev_end {
                    return fail(format!(
                        "group {g}: pending free at {off} overlaps or is empty"
                    ));
                }
                if !b.range_is_used(off, p.len) {
                    return fail(format!(
                        "group {g}: pending free {off}+{} is not marked used",
                        p.len
                    ));
                }
                if self.policy.free_list == FreeList::Global
                    && !md.freed.contains(&(g as u64, p.id))
                {
                    return fail(format!(
                        "group {g}: pending free {off} is missing from the global list"
                    ));
                }
                prev_end = off + p.len;
                pending_total += u64::from(p.len);
            }
            if self.policy.free_list == FreeList::PerGroup
                && !state.pending.is_empty()
                && !self.dirty.contains(g as u64)
            {
                return fail(format!(
                    "group {g}: has pending frees but is not marked dirty"
                ));
            }
        }
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
        Ok(())
    }
}
