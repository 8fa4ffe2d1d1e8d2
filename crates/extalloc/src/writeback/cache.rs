//! The dirty cache of one file: its cached blocks by logical number, its size as callers
//! see it, and its writeback state.
//!
//! Data structures: [`DirtyFile`] holds `pages` (logical block -> a block of data, and
//! whether the block took a delayed-allocation reservation: it lay in a hole when first
//! cached), `size` (the size callers see, never below the volume's durable size), when it
//! became dirty, whether it waits in a context's queue and which context served it last.
//!
//! Invariant: every page is dirty (written by a caller, not yet written back); a page is
//! `reserved` exactly when its block was a hole of the volume's file when the page was
//! made, and the volume holds one reserved block per reserved page; `reserved` counts
//! them, and the volume counts the file among those holding reservations while it is not
//! zero (`Volume::cached_files`). Bytes of a page past `size` are zeros. Locks: a `DirtyFile` lives under its own mutex (`mod.rs`).

use std::collections::BTreeMap;
use std::time::Instant;

/// One cached block.
pub(super) struct Page {
    pub(super) data: Box<[u8]>,
    /// Holds a delayed-allocation reservation (the block was a hole).
    pub(super) reserved: bool,
}

/// The cache of one file.
pub(super) struct DirtyFile {
    pub(super) pages: BTreeMap<u64, Page>,
    /// Pages holding a reservation (changed only with the volume's reservation:
    /// `Buffered::write_piece`, `Shared::drop_cached`).
    pub(super) reserved: u64,
    /// Size in bytes as callers see it (cached writes included).
    pub(super) size: u64,
    /// Closed by the caller and not written since: its writeback is the file's final
    /// size, allocated exactly.
    pub(super) closed: bool,
    /// When the file went from clean to dirty: the write sequence number, and the time.
    pub(super) dirty_since: Option<(u64, Instant)>,
    /// Waits in a context's queue.
    pub(super) queued: bool,
    /// The context that was last given this file.
    pub(super) last_context: Option<usize>,
    /// Unlinked: nothing may be cached for it any more.
    pub(super) unlinked: bool,
}

impl DirtyFile {
    pub(super) fn new(size: u64) -> DirtyFile {
        DirtyFile {
            pages: BTreeMap::new(),
            reserved: 0,
            size,
            closed: false,
            dirty_since: None,
            queued: false,
            last_context: None,
            unlinked: false,
        }
    }

    /// The first run of contiguous cached blocks, at most `max` of them: `(start, len)`.
    pub(super) fn first_run(&self, max: u64) -> Option<(u64, u64)> {
        let (&start, _) = self.pages.first_key_value()?;
        Some((start, self.run_len(start, max)))
    }

    /// How many contiguous cached blocks start at `start` (at most `max`).
    pub(super) fn run_len(&self, start: u64, max: u64) -> u64 {
        let mut len = 0;
        for (&b, _) in self.pages.range(start..) {
            if b != start + len || len == max {
                break;
            }
            len += 1;
        }
        len
    }

    /// The runs of contiguous cached blocks from the first, in logical order, until
    /// `max_blocks` blocks (the last run cut there) or `max_runs` runs.
    pub(super) fn runs(&self, max_blocks: u64, max_runs: usize) -> Vec<(u64, u64)> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut blocks = 0;
        for &b in self.pages.keys() {
            let full = runs.len() == max_runs;
            match runs.last_mut() {
                Some((s, n)) if *s + *n == b => *n += 1,
                _ if full => break,
                _ => runs.push((b, 1)),
            }
            blocks += 1;
            if blocks == max_blocks {
                break;
            }
        }
        runs
    }

    /// The cached blocks `start .. start + len` (all cached), in order: what a vectored
    /// write takes, without copying them into one buffer.
    pub(super) fn blocks(&self, start: u64, len: u64) -> Vec<&[u8]> {
        let blocks: Vec<&[u8]> = self
            .pages
            .range(start..start + len)
            .map(|(_, p)| &p.data[..])
            .collect();
        assert_eq!(blocks.len() as u64, len, "a run of cached blocks");
        blocks
    }

    /// Drops cached blocks `start .. start + len` (written back, or truncated away):
    /// returns how many were cached and how many of those held a reservation.
    pub(super) fn drop_range(&mut self, start: u64, len: u64) -> (u64, u64) {
        let gone: Vec<u64> = self
            .pages
            .range(start..start.saturating_add(len))
            .map(|(&b, _)| b)
            .collect();
        let mut reserved = 0;
        for b in &gone {
            if self.pages.remove(b).is_some_and(|p| p.reserved) {
                reserved += 1;
            }
        }
        assert!(
            reserved <= self.reserved,
            "{reserved} reserved pages dropped, {} counted",
            self.reserved
        );
        self.reserved -= reserved;
        if self.pages.is_empty() {
            debug_assert_eq!(self.reserved, 0, "no page, no reservation");
            self.dirty_since = None;
        }
        (gone.len() as u64, reserved)
    }

    /// Copies the cached blocks over `out`, the bytes from `offset` as the volume holds
    /// them.
    pub(super) fn overlay(&self, offset: u64, out: &mut [u8], block_size: u64) {
        // A page is a block: the cache's pages are of the volume's block size.
        debug_assert!(self
            .pages
            .values()
            .next()
            .is_none_or(|p| p.data.len() as u64 == block_size));
        let end = offset + out.len() as u64;
        let (first, last) = (offset / block_size, end.div_ceil(block_size));
        for (&b, p) in self.pages.range(first..last) {
            let from = (b * block_size).max(offset);
            let to = ((b + 1) * block_size).min(end);
            let src = &p.data[(from - b * block_size) as usize..(to - b * block_size) as usize];
            out[(from - offset) as usize..(to - offset) as usize].copy_from_slice(src);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(byte: u8, reserved: bool) -> Page {
        Page {
            data: vec![byte; 4].into_boxed_slice(),
            reserved,
        }
    }

    #[test]
    fn runs_gather_overlay_and_drop() {
        let mut f = DirtyFile::new(0);
        for (b, r) in [(3, true), (4, false), (5, true), (9, true)] {
            f.pages.insert(b, page(b as u8, r));
            f.reserved += u64::from(r);
        }
        f.dirty_since = Some((1, Instant::now()));
        assert_eq!(f.first_run(10), Some((3, 3)));
        assert_eq!(f.first_run(2), Some((3, 2)));
        assert_eq!(f.runs(10, 10), vec![(3, 3), (9, 1)]);
        assert_eq!(f.runs(2, 10), vec![(3, 2)]);
        assert_eq!(f.runs(10, 1), vec![(3, 3)]);
        assert_eq!(f.blocks(3, 2), vec![&[3u8, 3, 3, 3][..], &[4, 4, 4, 4][..]]);
        let mut out = vec![0u8; 8];
        f.overlay(14, &mut out, 4);
        assert_eq!(out, vec![3, 3, 4, 4, 4, 4, 5, 5]);
        assert_eq!(f.drop_range(3, 3), (3, 2));
        assert_eq!(f.first_run(10), Some((9, 1)));
        assert_eq!(f.drop_range(0, u64::MAX), (1, 1));
        assert!(f.dirty_since.is_none() && f.first_run(1).is_none());
    }
}
