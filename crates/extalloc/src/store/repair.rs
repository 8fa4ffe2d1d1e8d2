//! Rebuilding the allocation state from who owns each block: the bitmaps and descriptors
//! `extalloc fsck --repair` writes (e2fsck's pass 5, from a caller that knows every owner).
//!
//! Data structures: [`Rebuilt`], what a rebuild changed; one group's rebuilt bitmap at a
//! time, in the on-disk form.
//!
//! Invariant: a rebuild runs at quiescence (no open transaction, nothing pending, nothing
//! reserved; refused otherwise). After it, every block is marked used exactly when the
//! store's own metadata or an extent the caller named holds it, no group is held corrupt,
//! and every changed group waits for the next checkpoint to be written home (descriptor
//! and bitmap). Nothing is written by the rebuild itself.
//!
//! Lock order: the boundary (write, so nothing joins a transaction meanwhile), then each
//! group's lock in ascending order, one at a time.

use super::state::Store;
use crate::alloc::Replaced;
use crate::disk::journal::Journal;
use crate::error::{Error, Result};
use crate::geometry::Extent;

/// What [`Store::rebuild_allocation`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Rebuilt {
    /// Groups whose bitmap was replaced (changed, or held corrupt), ascending.
    pub groups: Vec<u64>,
    /// Of those, the groups that were held corrupt.
    pub corrupt_cleared: Vec<u64>,
    /// Blocks marked used that were marked free (an owner's blocks a damaged bitmap lost).
    pub marked_used: u64,
    /// Blocks marked free that were marked used (no owner: leaked, or a damaged bitmap).
    pub marked_free: u64,
}

impl Store {
    /// Rebuilds every group's bitmap from `owned` (every extent in use outside the store's
    /// own metadata, which is added here), clears the groups held corrupt, and writes the
    /// changed groups home at once, the superblock saying a checkpoint is under way until
    /// the next [`checkpoint`](Store::checkpoint) ends: after a crash before it, the
    /// journal's records (those replayed at open, and any committed since, which may take
    /// a block the rebuild freed) replay over the rebuilt bitmaps idempotently, as after an
    /// interrupted checkpoint. A failed write leaves the groups marked for the next
    /// checkpoint.
    ///
    /// Refused ([`Error::NotAtRest`], nothing changed) while a transaction holds changes,
    /// frees are pending or preallocations hold blocks: the owners must be complete. An
    /// extent outside the device is refused before any group changes. On an I/O error
    /// reading a bitmap, the groups before it are rebuilt and the rest untouched.
    pub fn rebuild_allocation(&self, owned: &[Extent]) -> Result<Rebuilt> {
        let out = self.rebuild_bitmaps(owned)?;
        // Home before any record can take a block the rebuild freed: the replay of such a
        // record over the old bitmap (which holds the block used) would be refused.
        self.write_home_replaying_idempotently()?;
        Ok(out)
    }

    /// [`Store::rebuild_allocation`]'s rebuild in memory, under the closed boundary.
    fn rebuild_bitmaps(&self, owned: &[Extent]) -> Result<Rebuilt> {
        let _closed = self.close_boundary();
        let busy = [
            (
                "record bytes of changes in the open transaction",
                self.ops.record_bytes() - Journal::record_bytes(0, 0),
            ),
            ("frees pending", self.alloc().pending_free_blocks()),
            (
                "blocks reserved by preallocations",
                self.files.reserved_blocks(),
            ),
            (
                "blocks reserved for metadata",
                self.metadata_reserved_blocks(),
            ),
        ];
        if let Some((what, n)) = busy.iter().find(|(_, n)| *n > 0) {
            return Err(Error::NotAtRest { count: *n, what });
        }
        let geometry = *self.geometry();
        for &e in owned {
            geometry.validate(e)?;
        }
        let mut sorted: Vec<Extent> = owned.to_vec();
        sorted.push(Extent::new(0, self.metadata_end));
        sorted.push(Extent::new(self.backup_block, 1));
        sorted.sort_unstable_by_key(|e| e.start);
        let mut out = Rebuilt::default();
        let mut next = 0; // the first extent that may reach the group
        for g in 0..geometry.groups_count() {
            let start = g * geometry.group_blocks;
            let len = geometry.group_len(g);
            let mut used = vec![0u8; len.div_ceil(8) as usize];
            while next < sorted.len() && sorted[next].end() <= start {
                next += 1;
            }
            for e in sorted[next..].iter().take_while(|e| e.start < start + len) {
                for b in e.start.max(start)..e.end().min(start + len) {
                    let i = b - start;
                    used[(i / 8) as usize] |= 1 << (i % 8);
                }
            }
            let r: Replaced = self.alloc().replace_bitmap(g, &used)?;
            if r.changed() {
                out.groups.push(g);
                out.marked_used += r.marked_used;
                out.marked_free += r.marked_free;
                if r.was_corrupt {
                    out.corrupt_cleared.push(g);
                }
            }
        }
        debug_assert!(self.alloc().corrupt_groups().is_empty());
        Ok(out)
    }
}
