//! Delayed allocation, the volume's side: the space a buffered write reserves without
//! placing it, the writeback of a dirty run (placed whole, through the file layer), and
//! where a file's next allocation is predicted to land (which writeback context serves it).
//! The cache and the contexts live in `crate::writeback`.
//!
//! Data structures: `Volume::delalloc`, the blocks reserved for cached data not yet
//! placed; `Volume::cached_files`, the files holding any of them.
//!
//! Invariant: a reservation is granted only while the allocatable blocks (free, or held
//! by preallocations, which the file layer gives back under pressure) cover every
//! reservation plus the room kept for the volume's own metadata (`room.rs`), which counts
//! each file holding a reservation as a changed file: written back, its entry gains the
//! extents and its leaf is written again, and the blocks for that were kept when its data
//! was accepted (ext4 reserves metadata with delayed allocation for the same reason: a
//! file system that did not would find the blocks gone at writeback, an `fsync` failing
//! with `ENOSPC` after the write succeeded). A direct allocation
//! (`write`, `fallocate` on a hole) is refused when it would eat into reserved blocks
//! (checked before the chunk allocates, so racing direct chunks may dip into the margin by
//! at most a chunk each). A writeback allocation consumes its run's reservation, which the
//! cache then releases: placed data never needs a block nobody reserved.
//!
//! Locks: `delalloc` is a leaf mutex. `write_back` runs as the other file calls (gate
//! read, then the file's mutex, one chunk at a time: `mod.rs`).

use super::data::Data;
use super::file::VFile;
use super::record::Change;
use super::share::Privilege;
use super::state::{Volume, CHUNK_EXTENTS};
use crate::error::{Error, Result};
use std::cell::Cell;
use std::sync::atomic::Ordering::SeqCst;

/// Blocks a writeback chunk spans at most: one trip through the gate writes at most this
/// much data (32 MiB of 4 KiB blocks), so a commit waits for at most that.
const WRITEBACK_CHUNK_BLOCKS: u64 = 8192;

/// How [`Volume::map_holes`] places a hole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Placing {
    /// A direct write: the file layer's normalisation and preallocations.
    Written,
    /// `fallocate`: exactly the request.
    Unwritten,
    /// Writeback of cached data (reserved at write time); `complete`: the file is closed
    /// and its size final, so exactly the request with no new preallocation.
    Writeback {
        /// Closed, its size final.
        complete: bool,
        /// Where the dirty run ends (logical block): each request asks for a window to it.
        run_end: u64,
        /// The file's size in blocks as its writers see it (cached data included): the
        /// windows are sized by it.
        size_blocks: u64,
    },
}

/// A dirty run being written back: whole blocks from logical block `first`, the size the
/// file reaches, and whether it is complete (closed, its size final).
struct Run<'a> {
    first: u64,
    blocks: &'a [&'a [u8]],
    size: u64,
    complete: bool,
    run_end: u64,
}

/// What one `Volume::write_back` did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WroteBack {
    /// Extents it mapped (allocations).
    pub allocations: u64,
}

impl Volume {
    /// Reserves `blocks` for cached data that writeback will place, for `files` files
    /// that held no reservation before (0 or 1: counted in the room kept for the tree, as
    /// changed files, until their reservations are all released). Refused with
    /// [`Error::NoSpace`] (nothing reserved, nothing counted) when the allocatable blocks
    /// do not cover every reservation and the margin, and for an unprivileged `who` the
    /// superuser's share too (`share.rs`); `pending_blocks` says whether a commit would
    /// help, [`Volume::cached_files`] whether writing back the cache would.
    pub(crate) fn reserve_delalloc(&self, blocks: u64, files: u64, who: Privilege) -> Result<()> {
        debug_assert!(
            files <= 1 && (files == 0 || blocks > 0),
            "a new file reserves"
        );
        let mut reserved = self.delalloc.lock();
        // Counted before the margin is read, under the lock: a call admitted after this
        // reads the reservation made under it (`room.rs`).
        self.cached_files.fetch_add(files, SeqCst);
        let margin = self.reserve_margin();
        let have = self.store.allocatable_blocks();
        let kept = self.kept_from(who);
        if have < *reserved + blocks + margin + kept {
            self.uncount_cached(files);
            return Err(self.short_of(blocks, have, *reserved, margin + kept));
        }
        *reserved += blocks;
        debug_assert!(*reserved + margin <= have, "reserved past the space");
        self.assert_cached_files(*reserved);
        // Less room is left for the tree: the changed files it covers, computed again.
        self.note_tree_room(have, *reserved);
        Ok(())
    }

    /// Before an allocating `fallocate` of bytes `offset .. end` of file `id` for `who`:
    /// refused with [`Error::NoSpace`], nothing changed, when its holes do not fit the
    /// allocatable blocks less cached data's reservations and the room kept for metadata,
    /// and for an unprivileged `who` the superuser's share too (`share.rs`).
    pub(super) fn check_room_for_data(
        &self,
        id: u64,
        offset: u64,
        end: u64,
        who: Privilege,
    ) -> Result<()> {
        let bs = self.block_size;
        let holes: u64 = self
            .holes_in(id, offset / bs, end.div_ceil(bs))?
            .iter()
            .map(|&(_, n)| n)
            .sum();
        self.check_room_for(holes, who)
    }

    /// Before the caller allocates `blocks` that grow its metadata as data grows (a file
    /// system's directory taking a new name, or its log written anew when compacted):
    /// refused with [`Error::NoSpace`], nothing changed, when they do not fit the
    /// allocatable blocks less cached data's reservations and the room kept for metadata
    /// ([`Volume::reserve_margin`]). What the room is kept for (a commit, a checkpoint, the
    /// records of an unlink or a rename, a repair) goes through
    /// [`Volume::fallocate_metadata`] and may use it; a change that adds must not, or the
    /// room would be gone when a removal needs it, and the checkpoint after it would take
    /// blocks promised to cached data (an `fsync` failing with `ENOSPC`).
    pub fn check_room(&self, blocks: u64) -> Result<()> {
        self.check_room_for(blocks, Privilege::Superuser)
    }

    /// [`Volume::check_room`] for `who`: an unprivileged caller's blocks (a file system's
    /// new name, a symbolic link's target, a spilled attribute set, an allocating
    /// `fallocate`) leave the superuser's share free too (`share.rs`), as ext4 refuses
    /// such a user any block below its reserved ones.
    pub fn check_room_for(&self, blocks: u64, who: Privilege) -> Result<()> {
        let margin = self.reserve_margin() + self.kept_from(who);
        let reserved = *self.delalloc.lock();
        // Blocks waiting for a commit count: the allocation's own remedy commits them.
        let have = self.store.allocatable_blocks() + self.store.allocator().pending_free_blocks();
        if have < reserved + blocks + margin {
            return Err(self.short_of(blocks, have, reserved, margin));
        }
        debug_assert!(blocks + reserved + margin <= have);
        // The blocks will take room the tree's limit counted: computed again at the next
        // check.
        self.tree_dirty_limit
            .store(0, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// The `NoSpace` of a space check: `have` allocatable blocks, of which cached data
    /// holds `reserved` and `margin` are kept (for metadata, and for an unprivileged
    /// caller the superuser's share: the free figure is then `statfs`'s available). A
    /// space check counts blocks: the least it accepts is the whole request.
    fn short_of(&self, requested: u64, have: u64, reserved: u64, margin: u64) -> Error {
        Error::NoSpace {
            requested,
            min_len: requested,
            free_blocks: have.saturating_sub(reserved + margin),
            pending_blocks: self.store.allocator().pending_free_blocks(),
            reserved_blocks: reserved,
        }
    }

    /// Gives back `blocks` of reservation (placed by writeback, or their data dropped),
    /// and `files` files that hold none any more (0 or 1).
    pub(crate) fn release_delalloc(&self, blocks: u64, files: u64) {
        let mut reserved = self.delalloc.lock();
        assert!(
            *reserved >= blocks,
            "releasing {blocks} delalloc blocks, {} reserved",
            *reserved
        );
        debug_assert!(
            files <= 1 && (files == 0 || blocks > 0),
            "a file's last release"
        );
        *reserved -= blocks;
        self.uncount_cached(files);
        self.assert_cached_files(*reserved);
    }

    /// Files no longer counted as holding a reservation.
    fn uncount_cached(&self, files: u64) {
        let was = self.cached_files.fetch_sub(files, SeqCst);
        // Paired with `reserve_delalloc`: only files counted are released.
        assert!(was >= files, "released {files} of {was} cached files");
    }

    /// Under `delalloc` (`reserved` its count), after a change: each file counted holds a
    /// block at least, and blocks are held by files counted.
    fn assert_cached_files(&self, reserved: u64) {
        let files = self.cached_files.load(SeqCst);
        debug_assert!(
            files <= reserved && (files > 0 || reserved == 0),
            "{files} files counted holding {reserved} reserved blocks"
        );
    }

    /// Files holding a reservation for cached data: each is counted in the room kept for
    /// metadata as a changed file until its data is written back, so when a space check
    /// refuses and this is not zero, writing back the cache and checkpointing
    /// (`Buffered::checkpoint`) gives room back.
    pub fn cached_files(&self) -> u64 {
        self.cached_files.load(SeqCst)
    }

    /// Blocks reserved for cached data not yet placed.
    pub fn delalloc_reserved_blocks(&self) -> u64 {
        *self.delalloc.lock()
    }

    /// Before a direct allocation of up to `blocks`: refused if it would take blocks that
    /// cached data has reserved.
    pub(super) fn check_direct_space(&self, blocks: u64) -> Result<()> {
        let reserved = *self.delalloc.lock();
        if reserved == 0 {
            return Ok(());
        }
        let have = self.store.allocatable_blocks();
        if have < reserved + blocks {
            return Err(self.short_of(blocks, have, reserved, 0));
        }
        Ok(())
    }

    /// The unmapped runs of logical blocks `from .. to` of file `id`, as `(start, len)`.
    pub(crate) fn holes_in(&self, id: u64, from: u64, to: u64) -> Result<Vec<(u64, u64)>> {
        let file = self.file(id)?;
        let f = self.lock_loaded(&file)?;
        let mut holes = Vec::new();
        let mut l = from;
        while l < to {
            if let Some((_, run)) = f.alloc.lookup(l) {
                l = l.saturating_add(run);
                continue;
            }
            let end = f.alloc.next_mapped(l).map_or(to, |m| m.min(to));
            holes.push((l, end - l));
            l = end;
        }
        Ok(holes)
    }

    /// The group where file `id`'s allocation for logical block `logical` (the start of a
    /// dirty run; the file wants `run_blocks` placed) is predicted to land: its
    /// preallocation covering the block, else after its last extent, else its placement
    /// (key's group, or claimed run of groups), else its stream goal for a window of that
    /// length.
    pub(crate) fn predicted_group(&self, id: u64, logical: u64, run_blocks: u64) -> Result<u64> {
        let file = self.file(id)?;
        let f = self.lock_loaded(&file)?;
        let g = self.store.geometry();
        let block = f
            .alloc
            .predicted_block(logical)
            .filter(|&b| b < g.blocks_count)
            .or_else(|| {
                let start = self.placement_goal(&f, run_blocks)?;
                Some(start.saturating_add(logical).min(g.blocks_count - 1))
            });
        Ok(match block {
            Some(b) => g.group_of(b),
            None => self.store.stream_goal_group(id, run_blocks),
        })
    }

    /// Writes back `blocks` (each a whole block, as the cache holds them, written without
    /// being gathered into one buffer) at logical block `first` of file `id`: the holes are
    /// placed a run at a time (one request per hole, through the file layer), the data is
    /// written, unwritten blocks converted, and the durable size grows to `size` where the
    /// run reaches it. `complete`: the file is closed and its size final, so every request
    /// is mapped at its exact length with no new preallocation. `run_blocks`: the dirty run
    /// `blocks` starts goes on that far (later trips write the rest); each request's window
    /// covers it. Chunk by chunk as the other calls: a failure leaves the chunks before it
    /// done and its own undone.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_back(
        &self,
        id: u64,
        first: u64,
        blocks: &[&[u8]],
        size: u64,
        complete: bool,
        run_blocks: u64,
    ) -> Result<WroteBack> {
        let bs = self.block_size;
        assert!(
            !blocks.is_empty() && blocks.iter().all(|b| b.len() as u64 == bs),
            "writeback of whole blocks"
        );
        let run = Run {
            first,
            blocks,
            size,
            complete,
            run_end: first + run_blocks.max(blocks.len() as u64),
        };
        let end = first + blocks.len() as u64;
        let mut done = WroteBack::default();
        let mut l = first;
        while l < end {
            let reached = Cell::new(l);
            let got = Cell::new(WroteBack::default());
            self.chunk_committing(id, |v, f| {
                let (to, wb, changes) = v.write_back_chunk(f, id, (l, end), &run)?;
                reached.set(to);
                got.set(wb);
                Ok(changes)
            })?;
            done.allocations += got.get().allocations;
            assert!(reached.get() > l, "a writeback chunk makes progress");
            l = reached.get();
        }
        Ok(done)
    }

    /// One chunk of `write_back`: from `l`, at most `WRITEBACK_CHUNK_BLOCKS` blocks, at
    /// most `CHUNK_EXTENTS` new extents and as many unwritten ranges converted. Returns
    /// where it stopped, what it mapped, and the changes to log.
    fn write_back_chunk(
        &self,
        f: &mut VFile,
        id: u64,
        (l, end): (u64, u64),
        run: &Run<'_>,
    ) -> Result<(u64, WroteBack, Vec<Change>)> {
        let bs = self.block_size;
        let Run {
            first,
            blocks,
            size,
            complete,
            run_end,
        } = *run;
        let mut to = end.min(l + WRITEBACK_CHUNK_BLOCKS);
        // Each unwritten range converted is a change: at most CHUNK_EXTENTS of them.
        let unwritten = f.unwritten.within(l, to);
        if unwritten.len() > CHUNK_EXTENTS {
            to = unwritten[CHUNK_EXTENTS].0.max(l + 1);
        }
        // The old end's block reads zeros past the old size: written whole from the cache
        // when this chunk holds it (its page is zeros there), else zeroed on the device
        // first. A chunk that stops short of it grows the size to at most its start.
        let tail = f.size / bs;
        if to * bs > f.size && !(l..to).contains(&tail) {
            self.zero_tail(f, f.size)?;
        }
        let (new, reached) = self.map_holes(
            f,
            l,
            to,
            Placing::Writeback {
                complete,
                run_end,
                size_blocks: size.div_ceil(bs),
            },
        )?;
        let data = Data::Blocks(&blocks[(l - first) as usize..(reached - first) as usize]);
        debug_assert!(
            l < reached && reached <= to,
            "writeback of {l}..{to} reached {reached}"
        );
        let changes = self.write_mapped(f, id, &new, (l, reached), data, size.min(reached * bs))?;
        let wb = WroteBack {
            allocations: new.len() as u64,
        };
        Ok((reached, wb, changes))
    }
}
