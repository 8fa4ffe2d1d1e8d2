//! `fallocate(2)` on a volume's file: allocate (the size grown or kept), punch a hole,
//! zero a range; for data, checked against the room left first (`delalloc.rs`, for an
//! unprivileged caller the superuser's share too: `share.rs`), or for a file system's own
//! metadata, which may use the room kept for it.
//!
//! Data structures: [`Fallocate`], the modes. Invariant and locks: as the other file calls
//! (`io.rs`): one chunk at a time, under the gate read and the file's mutex; what a
//! failure leaves is in [`Volume::fallocate`]'s doc.

use super::chunk::TailFirst;
use super::delalloc::Placing;
use super::file::VFile;
use super::io::check_range;
use super::record::Change;
use super::share::Privilege;
use super::state::{Volume, CHUNK_BLOCKS};
use crate::error::{Error, Result};
use crate::geometry::Extent;

/// What [`Volume::fallocate`] does, as Linux's `fallocate(2)` modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallocate {
    /// Maps the holes of the range unwritten (they read as zeros); the size grows to cover
    /// the range (mode 0).
    Allocate,
    /// As `Allocate`, the size unchanged (`FALLOC_FL_KEEP_SIZE`).
    KeepSize,
    /// Frees the whole blocks of the range and zeroes the partial ones; the size unchanged
    /// (`FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`).
    PunchHole,
    /// The range reads as zeros afterwards, its whole blocks mapped unwritten and partial
    /// ones zeroed; the size grows unless `keep_size` (`FALLOC_FL_ZERO_RANGE`).
    ZeroRange {
        /// `FALLOC_FL_KEEP_SIZE`.
        keep_size: bool,
    },
}

impl Volume {
    /// `fallocate(2)` on file `id` (see [`Fallocate`]).
    ///
    /// An allocating mode whose holes do not fit the space left, less the room kept for
    /// the volume's metadata and for cached data, fails with [`Error::NoSpace`] before it
    /// changes anything (a 1 TiB `posix_fallocate` on a small device used to leave what it
    /// had mapped until it ran out). On another failure the size is as it was (it grows
    /// last) and the range is done in part: the partial blocks at its edges may be zeroed
    /// already (punch, zero range); of its whole blocks, a punch leaves freed those it
    /// reached from the end of the range down, an allocate or a zero range leaves mapped or
    /// marked unwritten those it reached from the start up (they read as zeros).
    pub fn fallocate(&self, id: u64, mode: Fallocate, offset: u64, len: u64) -> Result<()> {
        self.fallocate_for(id, mode, offset, len, Privilege::Superuser)
    }

    /// [`Volume::fallocate`] for `who`: an unprivileged caller's allocation is refused
    /// with [`Error::NoSpace`], nothing changed, when it would take the superuser's share
    /// of the device (`share.rs`).
    pub fn fallocate_for(
        &self,
        id: u64,
        mode: Fallocate,
        offset: u64,
        len: u64,
        who: Privilege,
    ) -> Result<()> {
        if !matches!(mode, Fallocate::PunchHole) && len > 0 {
            self.check_room_for_data(id, offset, check_range(offset, len)?, who)?;
        }
        self.fallocate_metadata(id, mode, offset, len)
    }

    /// [`Volume::fallocate`] for a caller's own metadata (a file system's directories):
    /// it may use the room kept for metadata, so an unlink or a rename on a full volume
    /// still finds the blocks of its directory records.
    pub fn fallocate_metadata(
        &self,
        id: u64,
        mode: Fallocate,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        if len == 0 {
            return Err(Error::ZeroLength);
        }
        let end = check_range(offset, len)?;
        self.file(id)?;
        let bs = self.block_size;
        let zero = matches!(mode, Fallocate::ZeroRange { .. });
        if matches!(mode, Fallocate::PunchHole) || zero {
            self.zero_partial_edges(id, offset, end)?;
        }
        let (whole_from, whole_to) = (offset.div_ceil(bs), end / bs);
        if matches!(mode, Fallocate::PunchHole) {
            if whole_from < whole_to {
                self.free_blocks(id, whole_from, whole_to)?;
            }
            return Ok(());
        }
        // Allocating maps each hole in one request (up to `CHUNK_EXTENTS` extents a chunk),
        // so a large fallocate is placed, and size-classed, as one; zeroing a range also
        // marks every mapped extent unwritten (a change each), so it goes block-chunk-wise.
        let span = if zero {
            CHUNK_BLOCKS
        } else {
            self.store.geometry().group_blocks
        };
        let mut l = offset / bs;
        while l < end.div_ceil(bs) {
            let to = (l + span).min(end.div_ceil(bs));
            let reached = std::cell::Cell::new(to);
            self.chunk_committing(id, |v, f| {
                let (new, r) = v.map_holes(f, l, to, Placing::Unwritten)?;
                reached.set(r);
                let to = r;
                let mut changes = Vec::new();
                for &(logical, extent) in &new {
                    f.unwritten.insert(logical, extent.len);
                    changes.push(Change::Map {
                        id,
                        logical,
                        extent,
                        unwritten: true,
                    });
                }
                if zero {
                    changes.extend(v.make_unwritten(f, id, l.max(whole_from), to.min(whole_to)));
                }
                Ok(changes)
            })?;
            l = reached.get();
        }
        let grow = matches!(
            mode,
            Fallocate::Allocate | Fallocate::ZeroRange { keep_size: false }
        );
        if grow {
            self.chunk(id, TailFirst::Written, |v, f| {
                if end > f.size {
                    return Ok(vec![v.resize(f, id, end)?]);
                }
                Ok(Vec::new())
            })?;
        }
        Ok(())
    }

    /// Marks the mapped, written blocks of `from .. to` unwritten (zero range).
    fn make_unwritten(&self, f: &mut VFile, id: u64, from: u64, to: u64) -> Vec<Change> {
        let mut changes = Vec::new();
        let mut l = from;
        while l < to {
            let Some((p, run)) = f.alloc.lookup(l) else {
                l = f.alloc.next_mapped(l).unwrap_or(to);
                continue;
            };
            let n = run.min(to - l);
            debug_assert!(n > 0, "no progress at block {l}");
            f.unwritten.insert(l, n);
            changes.push(Change::Map {
                id,
                logical: l,
                extent: Extent::new(p, n),
                unwritten: true,
            });
            l += n;
        }
        changes
    }
}
