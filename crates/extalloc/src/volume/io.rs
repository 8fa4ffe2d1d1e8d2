//! The file calls of a volume: write, read, truncate, unlink (`fallocate.rs` maps and
//! frees ranges, `create.rs` makes files, `publish.rs` sets attribute blobs).
//!
//! Each call works one chunk at a time (at most `CHUNK_BLOCKS` blocks mapped or
//! `CHUNK_EXTENTS` extents freed), holding the gate for reading and the file's mutex: the
//! chunk's allocations, frees and logged changes land in one transaction. A chunk that
//! fails gives back what it mapped and logs nothing, so a failed call leaves the chunks
//! before it done (logged for the next commit); what the failing chunk wrote in place
//! (bytes over blocks already mapped and written, zeros in a partial block) stays. Each
//! call's doc says what a failure leaves.
//!
//! Data structures: none of their own. Invariant: a block mapped by a chunk is written
//! whole (the caller's bytes, zeros around them, or the bytes the file held) before the
//! chunk's changes are logged, or is logged unwritten; partial blocks at the edges of a
//! punch, zero range or truncate are zeroed in place; a write inside one block already
//! mapped and written, from at or before the file's end, writes its own bytes alone, and
//! one from the end waits for the commit (`tail.rs`). Locks: `mod.rs`.

use super::chunk::TailFirst;
use super::data::Data;
use super::delalloc::Placing;
use super::file::VFile;
use super::record::Change;
use super::state::{Volume, CHUNK_BLOCKS, CHUNK_EXTENTS};
use crate::error::{Error, Result};
use crate::files::DataRequest;
use crate::geometry::Extent;

/// Largest file, in bytes: 2^63 - 1, as Linux's `MAX_LFS_FILESIZE` (a file system on the
/// volume then refuses no offset the kernel accepts; with 4 KiB blocks its last block is
/// 2^51 - 1, so block arithmetic stays far from `u64`'s end).
pub const MAX_FILE_BYTES: u64 = i64::MAX as u64;
/// Largest attribute blob, in bytes.
pub const MAX_ATTR_BYTES: usize = 1024;

impl Volume {
    /// Writes `data` at byte `offset` of file `id`: holes are mapped (through the file
    /// layer's placement), blocks written, unwritten ones converted, the size grown.
    ///
    /// Works `CHUNK_BLOCKS` blocks at a time. On failure the chunks before the failing one
    /// stay written, mapped and logged, the size grown to their end; the failing chunk maps
    /// nothing (blocks it had just mapped are given back) and leaves the size as it was,
    /// but bytes it wrote over blocks the file had mapped and written may have reached
    /// them, in part: the file can read part of the new data.
    pub fn write(&self, id: u64, offset: u64, data: &[u8]) -> Result<()> {
        let end = check_range(offset, data.len() as u64)?;
        self.file(id)?;
        let bs = self.block_size;
        let mut pos = offset;
        while pos < end {
            let stop = end.min((pos / bs + CHUNK_BLOCKS) * bs);
            let bytes = &data[(pos - offset) as usize..(stop - offset) as usize];
            self.retry_after_sync(|| {
                self.chunk(id, TailFirst::Kept, |v, f| v.write_chunk(f, id, pos, bytes))
            })?;
            pos = stop;
        }
        Ok(())
    }

    fn write_chunk(&self, f: &mut VFile, id: u64, pos: u64, bytes: &[u8]) -> Result<Vec<Change>> {
        debug_assert!(!bytes.is_empty(), "an empty chunk");
        let bs = self.block_size;
        let first = pos / bs;
        let last = (pos + bytes.len() as u64 - 1) / bs;
        // Any write but one continuing the tail sends the tail first (`tail.rs`).
        let continues = self.continues_tail(f, pos, bytes.len() as u64);
        if !continues {
            self.settle_tail(f)?;
        }
        // A write past the end: the old end's block must read zeros past the old size. When
        // this write rewrites that block, the zeros go into its buffer below (one device
        // write, not a write of the zeros before the block's own); before it, on the device.
        let old_size = f.size;
        let grows = pos + bytes.len() as u64 > old_size;
        let tail_block = (grows && !old_size.is_multiple_of(bs)).then_some(old_size / bs);
        if tail_block.is_some_and(|t| t < first) {
            self.zero_tail(f, old_size)?;
        }
        let (new, _) = self.map_holes(f, first, last + 1, Placing::Written)?;
        if first == last && pos <= old_size && new.is_empty() && !f.unwritten.contains(first) {
            return self.write_in_block(f, id, pos, bytes);
        }
        debug_assert!(
            !continues,
            "a write continuing the tail is inside its block"
        );
        let fresh = |b: u64| {
            f.unwritten.contains(b) || new.iter().any(|(l, e)| (*l..l + e.len).contains(&b))
        };
        let mut buf = vec![0u8; ((last - first + 1) * bs) as usize];
        // The edge blocks the write covers only in part keep the bytes the file held (one
        // read each; a write within one block reads it once).
        let edges = if first == last { 1 } else { 2 };
        for b in [first, last].into_iter().take(edges) {
            let covered = pos <= b * bs && (b + 1) * bs <= pos + bytes.len() as u64;
            if !covered && !fresh(b) {
                let (p, _) = f.alloc.lookup(b).expect("mapped just now");
                let at = ((b - first) * bs) as usize;
                self.dev.read_at(&mut buf[at..at + bs as usize], p * bs)?;
                if tail_block == Some(b) {
                    buf[at + (old_size % bs) as usize..at + bs as usize].fill(0);
                }
            }
        }
        debug_assert!(
            tail_block.is_none_or(|t| t < first || (first..=last).contains(&t)),
            "a growing write's last block is at or past the old end's"
        );
        let at = (pos - first * bs) as usize;
        buf[at..at + bytes.len()].copy_from_slice(bytes);
        let end = pos + bytes.len() as u64;
        self.write_mapped(f, id, &new, (first, last + 1), Data::One(&buf), end)
    }

    /// Writes `bytes` at byte `pos` of `f`, all inside one block the file has mapped and
    /// written, starting at or before its end (a directory log's append, a small
    /// overwrite): only those bytes go to the device, with no read of the block. The
    /// block's bytes before `pos` are the file's and stay; those after the write are the
    /// file's and stay, or lie past its new end, which is not data (growing zeroes it,
    /// `zero_tail`). Returns the size change to log, if any.
    fn write_in_block(
        &self,
        f: &mut VFile,
        id: u64,
        pos: u64,
        bytes: &[u8],
    ) -> Result<Vec<Change>> {
        let bs = self.block_size;
        let b = pos / bs;
        let end = pos + bytes.len() as u64;
        // What it relies on: one block, mapped, written (an unwritten block must be written
        // whole, zeros around the bytes), and no gap after the old end to zero.
        debug_assert!(
            end <= (b + 1) * bs && pos <= f.size,
            "{pos}+{} in one block",
            bytes.len()
        );
        debug_assert!(!f.unwritten.contains(b), "block {b} is written");
        let (p, _) = f.alloc.lookup(b).expect("the block is mapped");
        if pos == f.size {
            // An append from the end: kept back until the commit (`tail.rs`).
            self.keep_tail(f, id, pos, p * bs + pos % bs, bytes);
        } else {
            self.write_data(bytes, p * bs + pos % bs)?;
        }
        if end <= f.size {
            return Ok(Vec::new());
        }
        f.size = end;
        Ok(vec![Change::SetSize { id, size: end }])
    }

    /// Writes `buf` (whole blocks) at logical blocks `from .. to` of `f`, all mapped, `new`
    /// among them just now (given back if the write fails); returns the changes to log:
    /// the new maps, the unwritten blocks converted, the size grown to `end` if larger.
    pub(super) fn write_mapped(
        &self,
        f: &mut VFile,
        id: u64,
        new: &[(u64, Extent)],
        (from, to): (u64, u64),
        buf: Data<'_>,
        end: u64,
    ) -> Result<Vec<Change>> {
        if let Err(e) = self.write_blocks(f, from, to, buf) {
            self.unmap_new(f, new);
            return Err(e);
        }
        let mut changes: Vec<Change> = new
            .iter()
            .map(|&(logical, extent)| Change::Map {
                id,
                logical,
                extent,
                unwritten: false,
            })
            .collect();
        changes.extend(self.convert_written(f, id, from, to));
        if end > f.size {
            f.size = end;
            changes.push(Change::SetSize { id, size: end });
        }
        // What the caller relies on: the range is written data, none of it unwritten.
        debug_assert!(f.unwritten.within(from, to).is_empty());
        Ok(changes)
    }

    /// Maps the holes of logical blocks `from .. to` of `f`, one request per hole (the
    /// whole hole, placed through the file layer); returns what it mapped and where the
    /// mapped prefix ends (every block of `from .. reached` mapped). A writeback or a
    /// fallocate maps at most `CHUNK_EXTENTS` extents (a write's range is a chunk already);
    /// a writeback checks no space (its reservations were taken at write time), the direct
    /// calls leave reserved blocks alone. On
    /// failure it gives back what it mapped and maps nothing.
    pub(super) fn map_holes(
        &self,
        f: &mut VFile,
        from: u64,
        to: u64,
        how: Placing,
    ) -> Result<(Vec<(u64, Extent)>, u64)> {
        let mut new = Vec::new();
        let mut l = from;
        while l < to {
            if let Some((_, run)) = f.alloc.lookup(l) {
                l = to.min(l + run);
                continue;
            }
            let writeback = matches!(how, Placing::Writeback { .. });
            if how != Placing::Written && new.len() == CHUNK_EXTENTS {
                break;
            }
            let hole_end = f.alloc.next_mapped(l).map_or(to, |m| m.min(to));
            if !writeback {
                if let Err(err) = self.check_direct_space(hole_end - l) {
                    self.unmap_new(f, &new);
                    return Err(err);
                }
            }
            let mut req = DataRequest::new(l, hole_end - l).lifetime(f.lifetime);
            let want = match how {
                Placing::Writeback { size_blocks, .. } => size_blocks.max(hole_end - l),
                _ => hole_end - l,
            };
            // The placement is where the file's logical block 0 goes: block `l` at the
            // same distance from it (a first write into the middle of a file).
            let blocks = self.store.geometry().blocks_count;
            if let Some(goal) = self.placement_goal(f, want) {
                req = req.goal(goal.saturating_add(l).min(blocks - 1));
            }
            match how {
                // ext4's fallocate maps exactly the request; one that appends gets the
                // file's preallocation, as a write does (`VFile::appends_at`).
                Placing::Unwritten if !f.appends_at(l) => req = req.no_prealloc(),
                Placing::Unwritten => {}
                Placing::Writeback {
                    complete,
                    run_end,
                    size_blocks,
                } => {
                    req = req.run(run_end - l).size_hint(size_blocks);
                    if complete {
                        req = req.complete();
                    }
                }
                Placing::Written => {}
            }
            match self.store.allocate_data(&f.alloc, &req) {
                Ok(e) => {
                    new.push((l, e));
                    l += e.len;
                }
                Err(err) => {
                    self.unmap_new(f, &new);
                    return Err(err);
                }
            }
        }
        // Every block of the prefix reached is mapped, each new extent inside it.
        debug_assert!(l <= to || new.last().is_some_and(|&(s, e)| s + e.len == l));
        debug_assert!(new.iter().all(|&(s, e)| from <= s && s + e.len <= l));
        Ok((new, l))
    }

    /// Gives back extents a failed chunk mapped (freed in the same transaction; never
    /// logged, so nothing maps them after a crash either).
    pub(super) fn unmap_new(&self, f: &mut VFile, new: &[(u64, Extent)]) {
        for &(l, e) in new {
            self.store
                .free_data(&f.alloc, l, e.len)
                .unwrap_or_else(|err| panic!("blocks mapped just now do not free: {err}"));
            debug_assert!(f.alloc.lookup(l).is_none(), "block {l} unmapped");
        }
    }

    /// Writes `buf` (whole blocks) at logical blocks `from .. to` of `f`, all mapped.
    pub(super) fn write_blocks(&self, f: &VFile, from: u64, to: u64, buf: Data<'_>) -> Result<()> {
        let bs = self.block_size;
        debug_assert_eq!(
            buf.len_blocks(bs),
            to - from,
            "a block of data for every block"
        );
        let mut l = from;
        while l < to {
            let (p, run) = f.alloc.lookup(l).expect("mapped");
            let n = run.min(to - l);
            self.write_blocks_at(buf.blocks(bs, l - from, n), p * bs)?;
            l += n;
        }
        Ok(())
    }

    /// Blocks `from .. to` now hold data: the unwritten ones among them are converted.
    pub(super) fn convert_written(
        &self,
        f: &mut VFile,
        id: u64,
        from: u64,
        to: u64,
    ) -> Vec<Change> {
        debug_assert!(from <= to, "converting {from}..{to}");
        let hit = f.unwritten.within(from, to);
        f.unwritten.remove(from, to - from);
        hit.into_iter()
            .map(|(s, e)| Change::Written {
                id,
                logical: s,
                len: e - s,
            })
            .collect()
    }

    /// Zeroes in place the bytes of `offset .. end` that lie in blocks the range covers
    /// only in part, where those blocks are mapped and written.
    pub(super) fn zero_partial_edges(&self, id: u64, offset: u64, end: u64) -> Result<()> {
        let bs = self.block_size;
        let mut edges = vec![(offset, end.min((offset / bs + 1) * bs))];
        if !end.is_multiple_of(bs) && end / bs != offset / bs {
            edges.push(((end / bs) * bs, end));
        }
        for (from, to) in edges {
            if from % bs == 0 && to - from == bs {
                continue;
            }
            self.chunk(id, TailFirst::Written, |v, f| {
                let b = from / bs;
                if let Some((p, _)) = f.alloc.lookup(b) {
                    if !f.unwritten.contains(b) {
                        let zeros = vec![0u8; (to - from) as usize];
                        v.write_data(&zeros, p * bs + (from - b * bs))?;
                    }
                }
                Ok(Vec::new())
            })?;
        }
        Ok(())
    }

    /// Sets `f`'s size (zeroing the tail of its last block first when it grows) and
    /// returns the change to log.
    pub(super) fn resize(&self, f: &mut VFile, id: u64, size: u64) -> Result<Change> {
        debug_assert!(size <= MAX_FILE_BYTES, "size {size} past the largest file");
        if size > f.size {
            self.zero_tail(f, f.size)?;
        }
        f.size = size;
        Ok(Change::SetSize { id, size })
    }

    /// Zeroes, in place, the bytes from `eof` to the end of its block if that block is
    /// mapped and written: before a file grows past `eof`, as ext4 zeroes the tail of its
    /// last block. Bytes past the end of a file are not its data: a crash may have kept
    /// a write there whose size change it lost, and growing must not bring them back.
    pub(super) fn zero_tail(&self, f: &VFile, eof: u64) -> Result<()> {
        let bs = self.block_size;
        if eof.is_multiple_of(bs) {
            return Ok(());
        }
        let b = eof / bs;
        if let Some((p, _)) = f.alloc.lookup(b) {
            if !f.unwritten.contains(b) {
                let zeros = vec![0u8; (bs - eof % bs) as usize];
                self.write_data(&zeros, p * bs + eof % bs)?;
            }
        }
        Ok(())
    }

    /// Unmaps and frees logical blocks `from .. to` of file `id`, at most `CHUNK_EXTENTS`
    /// extents a chunk, from the end.
    pub(super) fn free_blocks(&self, id: u64, from: u64, mut to: u64) -> Result<()> {
        while to > from {
            let mut next_to = from;
            self.chunk(id, TailFirst::Written, |v, f| {
                let last = f.alloc.last_extents_in(from, to, CHUNK_EXTENTS + 1);
                let start = if last.len() > CHUNK_EXTENTS {
                    last[1].0.max(from)
                } else {
                    from
                };
                next_to = start;
                if last.is_empty() {
                    next_to = from;
                    return Ok(Vec::new());
                }
                v.store.free_data(&f.alloc, start, to - start)?;
                f.unwritten.remove(start, to - start);
                Ok(vec![Change::Unmap {
                    id,
                    logical: start,
                    len: to - start,
                }])
            })?;
            to = next_to;
        }
        Ok(())
    }

    /// Sets file `id`'s size in bytes: shrinking frees the blocks past it (and zeroes the
    /// rest of the last block), growing leaves a hole.
    ///
    /// A shrink zeroes the rest of the new last block, frees the blocks past the new size a
    /// chunk at a time, and only then sets the size: a commit the volume makes by itself
    /// falls between chunks, and a crash after one must not leave the new size with written
    /// blocks past it, whose old bytes a later growth would show. On failure the size is as
    /// it was; the bytes from `size` to the end of its block may read as zeros already, and
    /// so may the blocks past it freed so far (a truncate that completes, or an unlink,
    /// frees the rest). A grow that fails changes nothing the file reads.
    pub fn truncate(&self, id: u64, size: u64) -> Result<()> {
        check_range(size, 0)?;
        let old = self.size(id)?;
        let block_end = size.div_ceil(self.block_size) * self.block_size;
        if size < old && size < block_end {
            // The rest of the new last block reads as zeros if the file grows again.
            self.zero_partial_edges(id, size, old.min(block_end))?;
        }
        let bs = self.block_size;
        self.free_blocks(id, size.div_ceil(bs), MAX_FILE_BYTES / bs)?;
        self.chunk(id, TailFirst::Written, |v, f| {
            Ok(vec![v.resize(f, id, size)?])
        })?;
        // The file layer's size too (its normalisation reads it); nothing is mapped past it.
        self.chunk(id, TailFirst::Written, |v, f| {
            v.store.set_file_size(&f.alloc, size.div_ceil(bs))?;
            Ok(Vec::new())
        })
    }

    /// Removes file `id`: its blocks are freed (a chunk at a time, from the end), then the
    /// file. On failure the file stays, its size as it was, the blocks freed so far reading
    /// as zeros.
    pub fn unlink(&self, id: u64) -> Result<()> {
        let bs = self.block_size;
        self.free_blocks(id, 0, MAX_FILE_BYTES / bs)?;
        self.unclaim(id);
        let unlinked = self.chunk(id, TailFirst::Written, |v, f| {
            v.store.release_prealloc(&f.alloc)?;
            v.files.write().remove(&id);
            Ok(vec![Change::Unlink { id }])
        });
        debug_assert!(unlinked.is_err() || !self.files.read().contains_key(&id));
        unlinked
    }
}

pub(super) fn check_attr(attr: &[u8]) -> Result<()> {
    if attr.len() > MAX_ATTR_BYTES {
        return Err(Error::AttrTooLarge {
            bytes: attr.len() as u64,
            max: MAX_ATTR_BYTES as u64,
        });
    }
    Ok(())
}

/// `offset .. offset + len` as bytes of a file: refused past [`MAX_FILE_BYTES`] or on
/// overflow. Returns the end.
pub(crate) fn check_range(offset: u64, len: u64) -> Result<u64> {
    crate::geometry::file_range_end(offset, len, MAX_FILE_BYTES, "bytes")
}
