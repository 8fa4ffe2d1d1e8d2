//! Unmapping a file's blocks: a shrink ([`Files::set_file_size`]) and a punched hole
//! ([`Files::free_data`]). Both discard the file's preallocations first (none may keep a
//! block it handed out), free what was mapped (deferred to the next commit, like any
//! free) and leave nothing mapped where they cut, which they assert.

use super::{FileAlloc, Files, LOGICAL_BLOCKS_MAX};
use crate::error::{Error, Result};
use crate::geometry::Extent;

impl Files {
    /// Sets the file's logical size. Shrinking frees the mapped blocks past `size_blocks`
    /// (they wait for the next commit, like any free) and discards the file's PAs. Returns
    /// the extents freed. Refused past the largest file ([`Error::SizePastLargestFile`]).
    pub fn set_file_size(&self, file: &FileAlloc, size_blocks: u64) -> Result<Vec<Extent>> {
        if size_blocks > LOGICAL_BLOCKS_MAX {
            return Err(Error::SizePastLargestFile {
                unit: "blocks",
                size: size_blocks,
                max: LOGICAL_BLOCKS_MAX,
            });
        }
        let mut f = file.inner.write();
        let mut freed = Vec::new();
        if size_blocks < f.size_blocks {
            self.discard_file_pas(&mut f)?;
            let cut: Vec<(u64, Extent)> = f
                .map
                .range(..)
                .filter(|(&s, e)| s + e.len > size_blocks)
                .map(|(&s, &e)| (s, e))
                .collect();
            for (s, e) in cut {
                let keep = size_blocks.saturating_sub(s);
                let tail = Extent::new(e.start + keep, e.len - keep);
                self.alloc.free(tail)?;
                freed.push(tail);
                f.map.remove(&s);
                if keep > 0 {
                    f.map.insert(s, Extent::new(e.start, keep));
                }
            }
        }
        f.size_blocks = size_blocks;
        // A shrink leaves nothing mapped past the size, and no PA that could map there.
        debug_assert!(
            freed.is_empty()
                || (f.pas.len() == 0
                    && f.map
                        .iter()
                        .next_back()
                        .is_none_or(|(&s, e)| s + e.len <= size_blocks)),
            "a shrink to {size_blocks} blocks left a block mapped past it"
        );
        Ok(freed)
    }

    /// Punches a hole: unmaps `logical .. logical + len` and frees the blocks that were
    /// mapped there (they wait for the next commit, like any free). Unmapped blocks in the
    /// range are left alone. The file's PAs are discarded first, as ext4's punch hole does,
    /// so none keeps a block it handed out. The size does not change. Returns the extents
    /// freed. Refused, changing nothing, for no blocks or past the largest file.
    pub fn free_data(&self, file: &FileAlloc, logical: u64, len: u64) -> Result<Vec<Extent>> {
        if len == 0 {
            return Err(Error::ZeroLength);
        }
        let end = super::logical_end(logical, len)?;
        let mut f = file.inner.write();
        let hit: Vec<(u64, Extent)> = f
            .map
            .range(..end)
            .rev()
            .take_while(|(&s, e)| s + e.len > logical)
            .map(|(&s, &e)| (s, e))
            .collect();
        if hit.is_empty() {
            return Ok(Vec::new());
        }
        self.discard_file_pas(&mut f)?;
        let mut freed = Vec::new();
        for (s, e) in hit {
            let (a, b) = (s.max(logical), (s + e.len).min(end));
            let piece = Extent::new(e.start + (a - s), b - a);
            self.alloc.free(piece)?;
            freed.push(piece);
            f.map.remove(&s);
            if s < a {
                f.map.insert(s, Extent::new(e.start, a - s));
            }
            if b < s + e.len {
                f.map
                    .insert(b, Extent::new(e.start + (b - s), s + e.len - b));
            }
        }
        // The hole is whole: no extent left mapped in it, no PA left to map into it.
        debug_assert!(
            f.map
                .range(..end)
                .next_back()
                .is_none_or(|(&s, e)| s + e.len <= logical),
            "punched {logical}+{len}, a block stays mapped in it"
        );
        debug_assert_eq!(f.pas.len(), 0, "a punch discards the file's PAs");
        Ok(freed)
    }
}
