//! Rebuilding a file's map from the caller's own metadata after a reopen: the store's
//! replay makes the blocks used again, and the caller (a volume) says which file maps them.
//!
//! Data structures: none of their own (the file's map, `file.rs`). Invariant: an adopted
//! extent is used in the allocator and not pending (or in a group held corrupt, all of
//! whose blocks are held used), and lies in a hole of the file. Adopting changes no
//! allocator state but one: a map (checksummed, the owner's word) naming blocks its group
//! holds free means the group's bitmap or descriptor is wrong (a stale block), and the
//! group is held corrupt, as if its checks had failed. Locks: the file's lock, then the
//! core's group locks (to check the blocks), as every file call.

use super::file::{map_insert, FileAlloc};
use super::Files;
use crate::error::{Error, Result};
use crate::geometry::Extent;

impl Files {
    /// Maps `extent`, already allocated (used, not pending), at `logical` of `file`,
    /// without allocating anything: for a caller rebuilding its files after a reopen. A
    /// range that is not a hole of the file, or blocks that are free or pending, are
    /// refused ([`Error::LogicalOverlap`], [`Error::DoubleFree`], ...), changing nothing.
    /// Blocks in a group held corrupt are held used, so they are adopted: the file reads
    /// (freeing them waits for a repair). Free blocks mean the group's allocation state is
    /// damaged: the group is held corrupt from now on and the extent adopted.
    pub fn adopt(&self, file: &FileAlloc, logical: u64, extent: Extent) -> Result<()> {
        self.allocator().geometry().validate(extent)?;
        let end = super::logical_end(logical, extent.len)?;
        let mut f = file.inner.write();
        let left = f.map.range(..logical).next_back().map(|(&s, &e)| (s, e));
        let right = f.map.range(logical..).next().map(|(&s, &e)| (s, e));
        if left.is_some_and(|(s, e)| s + e.len > logical) || right.is_some_and(|(s, _)| s < end) {
            return Err(Error::LogicalOverlap {
                file: file.id,
                logical,
                len: extent.len,
            });
        }
        self.allocator().hold_owned(extent)?;
        map_insert(&mut f, logical, extent, left, right);
        // Paired with the hole check above: the range is mapped now, to this extent
        // (merged with a neighbour contiguous in both spaces, or alone).
        debug_assert!(
            f.map
                .range(..=logical)
                .next_back()
                .is_some_and(|(&s, e)| s + e.len >= end && e.start + (logical - s) == extent.start),
            "adopted {logical}+{} is not mapped to {extent:?}",
            extent.len
        );
        Ok(())
    }
}
