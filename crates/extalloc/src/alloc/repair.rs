//! Repair: replacing a group's bitmap with one rebuilt from who owns each block
//! (`extalloc fsck --repair`, through `Store::rebuild_allocation`); and holding a group
//! corrupt when an owner's map names blocks its bitmap holds free (`hold_owned`); and a
//! group's used runs, read for a repair's scan of the device (`used_runs`).
//!
//! # Data structures
//!
//! None of its own: a rebuilt bitmap arrives in the on-disk form (bit `i` set = block `i`
//! of the group used) and replaces the group's [`GroupBitmap`].
//!
//! # Invariant
//!
//! A replacement runs at quiescence for its group: no pending frees in it (asserted) and
//! no preallocation holding blocks of it (the store refuses a rebuild while any block is
//! reserved). After it the group is not held corrupt, its mirrors and indexes agree with
//! the new bitmap, it is marked for the next checkpoint, and the accounting equation
//! `marked used = allocated + reserved + pending` still holds: the difference in used
//! blocks moves into `adjusted` (blocks found used), as a load does.
//!
//! # Lock order
//!
//! The group's lock only (as a load).

use super::allocator::Allocator;
use crate::error::{Error, Result};
use crate::geometry::Extent;
use crate::groups::GroupBitmap;

/// What replacing one group's bitmap changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replaced {
    /// Blocks the old bitmap held free that the new one marks used.
    pub marked_used: u64,
    /// Blocks the old bitmap held used that the new one marks free.
    pub marked_free: u64,
    /// The group was held corrupt (its descriptor or bitmap failed its checks).
    pub was_corrupt: bool,
}

impl Replaced {
    /// True if the group's bitmap changed or it was held corrupt.
    pub fn changed(&self) -> bool {
        self.marked_used > 0 || self.marked_free > 0 || self.was_corrupt
    }
}

impl Allocator {
    /// Replaces group `g`'s bitmap with `used` (the on-disk form: bit `i` set = block `i`
    /// used; missing bytes count as used) when it differs or the group is held corrupt;
    /// else changes nothing. Relies on the group having no pending frees and no reserved
    /// blocks (a broken precondition is a panic: the caller checks quiescence).
    pub(crate) fn replace_bitmap(&self, g: u64, used: &[u8]) -> Result<Replaced> {
        let shard = self.stats.shard();
        let mut state = self.lock_group(g, shard)?;
        assert!(
            state.pending.is_empty(),
            "group {g}: a bitmap is replaced only with no frees pending in it"
        );
        let len = self.geometry.group_len(g) as u32;
        let new = GroupBitmap::from_used_bytes(self.geometry.group_blocks as u32, len, used);
        let mut out = Replaced {
            was_corrupt: self.corrupt.contains(g),
            ..Replaced::default()
        };
        for off in 0..len {
            match (state.bitmap.is_free(off), new.is_free(off)) {
                (true, false) => out.marked_used += 1,
                (false, true) => out.marked_free += 1,
                _ => {}
            }
        }
        if !out.changed() {
            return Ok(out);
        }
        let (old_free, new_free) = (state.bitmap.free_blocks(), new.free_blocks());
        debug_assert_eq!(
            u64::from(old_free) + out.marked_free,
            u64::from(new_free) + out.marked_used,
            "the counted changes are the bitmaps' difference"
        );
        shard.add(&shard.held.adjusted, u64::from(old_free));
        shard.sub(&shard.held.adjusted, u64::from(new_free));
        state.bitmap = new;
        self.corrupt.remove(g);
        self.publish_mirrors(g, &state, shard);
        self.mark_home_dirty(g);
        debug_assert!(!self.corrupt.contains(g) && state.bitmap.free_blocks() == new_free);
        Ok(out)
    }

    /// How many blocks of group `g` its bitmap marks used: what [`Allocator::used_runs`]
    /// gives, counted without walking the bitmap. Changes nothing.
    pub(crate) fn used_blocks(&self, g: u64) -> Result<u64> {
        let shard = self.stats.shard();
        let state = self.lock_group(g, shard)?;
        Ok(u64::from(
            state.bitmap.len_blocks() - state.bitmap.free_blocks(),
        ))
    }

    /// Group `g`'s runs of blocks its bitmap marks used (allocated, reserved, or freed and
    /// pending), as device extents in order: what a scan for the volume's own nodes reads
    /// first (`volume/nodescan.rs`). Changes nothing.
    pub(crate) fn used_runs(&self, g: u64) -> Result<Vec<Extent>> {
        let shard = self.stats.shard();
        let state = self.lock_group(g, shard)?;
        let start = self.geometry.group_start(g);
        let len = state.bitmap.len_blocks();
        let mut out = Vec::new();
        let mut at = 0u32;
        for (free, n) in state.bitmap.free_runs(0) {
            if free > at {
                out.push(Extent::new(start + u64::from(at), u64::from(free - at)));
            }
            at = free + n;
        }
        if at < len {
            out.push(Extent::new(start + u64::from(at), u64::from(len - at)));
        }
        // The runs are the blocks not free, each once.
        debug_assert_eq!(
            out.iter().map(|e| e.len).sum::<u64>(),
            u64::from(len - state.bitmap.free_blocks())
        );
        Ok(out)
    }

    /// `Ok` once every block of `extent` is held used, for an owner adopting its map after
    /// a reopen: blocks allocated (not pending) or in a group held corrupt are; a group
    /// that holds any of them free is held corrupt now (its bitmap or descriptor
    /// disagrees with a checksummed map: damage, a stale block), its bitmap all used,
    /// nothing of it handed out until a repair rebuilds it. Pending blocks (freed, not
    /// yet durable) are refused ([`Error::DoubleFree`]): no owner maps those.
    pub(crate) fn hold_owned(&self, extent: Extent) -> Result<()> {
        self.geometry.validate(extent)?;
        let shard = self.stats.shard();
        for (g, off, len) in self.geometry.split(extent) {
            let mut state = self.lock_group(g, shard)?;
            if self.corrupt.contains(g) || state.bitmap.range_is_used(off, len) {
                if !self.corrupt.contains(g) && state.pending_overlaps(off, len) {
                    return Err(Error::DoubleFree {
                        start: self.geometry.group_start(g) + u64::from(off),
                        len: u64::from(len),
                    });
                }
                continue;
            }
            if !state.pending.is_empty() {
                // Frees waiting in the group: they would be released into a bitmap held
                // all used. Refuse as before; the caller's repair rebuilds the group.
                return Err(Error::NotAllocated {
                    start: self.geometry.group_start(g) + u64::from(off),
                    len: u64::from(len),
                });
            }
            let glen = self.geometry.group_len(g) as u32;
            let old_free = state.bitmap.free_blocks();
            state.bitmap =
                GroupBitmap::from_used_bytes(self.geometry.group_blocks as u32, glen, &[]);
            shard.add(&shard.held.adjusted, u64::from(old_free));
            self.corrupt.insert(g);
            self.publish_mirrors(g, &state, shard);
            debug_assert!(state.bitmap.free_blocks() == 0 && self.corrupt.contains(g));
        }
        Ok(())
    }
}
