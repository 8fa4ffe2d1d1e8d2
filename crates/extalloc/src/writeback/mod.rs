//! Buffered writes with delayed allocation, written back by contexts affined to groups.
//!
//! A [`Buffered`] volume wraps a [`Volume`]: a write copies into a bounded dirty cache (per
//! file, by logical block) and reserves space for the blocks that were holes, without
//! placing them, so running out of space is reported at write time and never at
//! writeback. Writeback places whole dirty runs at once through the file layer
//! (normalisation, preallocations, size classes; a closed file at its exact size, its
//! preallocations given back), writes them and logs their mapping; `read` sees cached
//! data; `fsync` and `sync` make it durable.
//!
//! Writeback runs on a pool of contexts (threads), at most `min(groups, cpus x k)` of them
//! ([`WritebackOptions::contexts_per_cpu`] is `k`, 2 by default), never one per group.
//! Each context owns a contiguous range of groups; with [`Affinity::Group`] a file's dirty
//! data goes to the context owning the group its next allocation is predicted to land in
//! (its preallocation, the block after its last extent, its placement key's group, or its
//! stream goal) and moves when that prediction moves (counted as a switch). Writeback
//! starts above the background threshold, for data older than `expire`, at `fsync` and
//! `sync`, and when a caller asks the cache to shrink ([`Buffered::shrink`], memory
//! pressure); a writer at the hard limit waits for writeback, it does not fail.
//!
//! Files: this one holds the file calls; `write.rs` a write into the cache; `space.rs` the
//! space figures; `options.rs` the options and the figures; `contexts.rs` the pool, the
//! routing and the writeback trips; `cache.rs` one file's cache. Of the children only
//! `write.rs` and `space.rs`, which add calls to [`Buffered`], name this file.
//!
//! Data structures: the [`Buffered`] owns the shared state (`contexts::Shared`: the
//! volume, the cache entries by file id, the contexts) and the worker threads.
//!
//! Invariant: the data a caller reads is the volume's with the cached blocks over it; the
//! volume's reserved-block count equals the cached pages that lay in holes, and its count
//! of files holding reservations the files with such a page (each counted in the room
//! kept for metadata until written back: near a full device a write or fallocate that
//! finds no space writes the cache back, checkpoints and tries once more, as ext4 forces
//! a commit before its `ENOSPC`). Only calls
//! through the `Buffered` change the volume's files, so no cached block's mapping changes
//! under it but by its own writeback.
//!
//! Lock order: a file's cache mutex -> the volume's locks (gate -> file) -> a context's
//! queue; the entry table and the cleaned signal are leaves (see `contexts.rs`).

mod cache;
mod contexts;
#[cfg(test)]
mod forget_tests;
mod options;
mod space;
#[cfg(test)]
mod space_tests;
#[cfg(test)]
mod tests;
mod write;

use crate::error::{Error, Result};
use crate::volume::{Fallocate, FileExtent, FileInfo, Privilege, Volume, VolumeCheck};
use contexts::Shared;
pub use options::{Affinity, ContextStats, WritebackOptions, WritebackStats};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A volume with buffered writes and delayed allocation (see the module documentation).
pub struct Buffered {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// The volume was handed back ([`Buffered::into_volume`]); dropped without that, the
    /// store is left marked in use, as a crash leaves it ([`Store::abandon`]).
    ///
    /// [`Store::abandon`]: crate::store::Store::abandon
    handed_back: bool,
}

impl Buffered {
    /// Starts the contexts over `vol`. Every file call must go through the `Buffered`
    /// from now on ([`Buffered::into_volume`] gives the volume back).
    ///
    /// Options out of range are refused ([`Error::InvalidSetting`]) before anything starts;
    /// a context that cannot start ([`Error::Spawn`]) stops those started before it. Either
    /// way the volume is dropped without a sync, as at a crash: sync it before, if it holds
    /// changes.
    pub fn new(vol: Volume, mut opts: WritebackOptions) -> Result<Buffered> {
        opts.validate(vol.block_size())?;
        if opts.background_bytes == 0 {
            opts.background_bytes = opts.dirty_limit_bytes / 2;
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let n = opts.contexts_for(vol.store().geometry().groups_count(), cpus);
        debug_assert!(n >= 1, "at least one writeback context");
        let shared = Arc::new(Shared::new(vol, opts, n));
        let mut workers = Vec::with_capacity(n);
        for i in 0..n {
            let s = shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("extalloc-wb-{i}"))
                .spawn(move || s.work(i));
            match spawned {
                Ok(h) => workers.push(h),
                Err(e) => {
                    let b = Buffered {
                        shared,
                        workers,
                        handed_back: false,
                    };
                    drop(b);
                    return Err(Error::Spawn {
                        thread: format!("writeback context {i}"),
                        source: crate::error::IoSource::new(e),
                    });
                }
            }
        }
        Ok(Buffered {
            shared,
            workers,
            handed_back: false,
        })
    }

    /// The volume underneath, for its figures and checks (its file calls would bypass the
    /// cache: use the `Buffered`'s, or [`Buffered::uncached`] for a file that never goes
    /// through the cache).
    pub fn volume(&self) -> &Volume {
        &self.shared.vol
    }

    /// The volume underneath, for calls that change file `id` directly: a file whose data
    /// never goes through the cache (a file system's directory logs, symbolic link
    /// targets, spill files). A direct write to a cached file would be lost or undone by
    /// its cached size and pages, so this asserts that `id` has no cache entry.
    ///
    /// # Panics
    ///
    /// When `id` has a cache entry (a caller broke the rule above: a bug, not bad input).
    pub fn uncached(&self, id: u64) -> &Volume {
        assert!(
            self.shared.existing(id).is_none(),
            "file {id} is written directly but has a cache entry: its cached size and \
             pages would undo the direct change"
        );
        &self.shared.vol
    }

    /// The options in force (background threshold resolved).
    pub fn options(&self) -> WritebackOptions {
        self.shared.opts
    }

    /// Creates an empty file (see [`Volume::create`]).
    pub fn create(&self, attr: &[u8]) -> Result<u64> {
        self.shared.vol.create(attr)
    }

    /// Creates an empty file near others of `key` (see [`Volume::create_placed`]).
    pub fn create_placed(&self, attr: &[u8], key: u64) -> Result<u64> {
        self.shared.vol.create_placed(attr, key)
    }

    /// Up to `len` bytes at `offset` of file `id` as callers see them: the volume's data
    /// with the cached blocks over it.
    pub fn read(&self, id: u64, offset: u64, len: u64) -> Result<Vec<u8>> {
        let Some(entry) = self.shared.existing(id) else {
            return self.shared.vol.read(id, offset, len);
        };
        let d = entry.lock();
        if d.unlinked {
            return Err(Error::NoSuchFile { id });
        }
        let end = offset.saturating_add(len).min(d.size);
        if offset >= end {
            return Ok(Vec::new());
        }
        let mut out = self.shared.vol.read(id, offset, end - offset)?;
        out.resize((end - offset) as usize, 0);
        d.overlay(offset, &mut out, self.shared.block_size);
        Ok(out)
    }

    /// File `id`'s size as callers see it.
    pub fn size(&self, id: u64) -> Result<u64> {
        match self.shared.existing(id) {
            Some(e) if !e.lock().unlinked => Ok(e.lock().size),
            _ => self.shared.vol.size(id),
        }
    }

    /// Blocks reserved for file `id`'s cached data (its cached blocks that lay in holes):
    /// what its writeback will map beyond the blocks it has.
    pub fn cached_reserved_blocks(&self, id: u64) -> u64 {
        match self.shared.existing(id) {
            Some(e) => reserved_of(id, &e.lock()),
            None => 0,
        }
    }

    /// File `id`'s size as [`Buffered::size`] gives it, and its blocks: those it maps
    /// and those reserved for its cached data ([`Buffered::cached_reserved_blocks`]), as
    /// `stat`'s `st_blocks` counts them; one lock of the cached file and one of the
    /// volume's, no list of extents.
    pub fn size_and_blocks(&self, id: u64) -> Result<(u64, u64)> {
        let (size, mapped) = self.shared.vol.size_and_blocks(id)?;
        Ok(match self.shared.existing(id) {
            Some(e) => {
                let d = e.lock();
                let size = if d.unlinked { size } else { d.size };
                (size, mapped + reserved_of(id, &d))
            }
            None => (size, mapped),
        })
    }

    /// Writes back file `id` (from the calling thread) and commits.
    pub fn fsync(&self, id: u64) -> Result<()> {
        if let Some(e) = self.shared.existing(id) {
            let mut d = e.lock();
            self.shared.flush_locked(id, &mut d)?;
        }
        self.shared.vol.fsync(id)
    }

    /// Writes back file `id`'s cached data from the calling thread (placed, written, its
    /// maps logged in the open transaction) without committing: the next commit, whoever
    /// makes it, carries the data with whatever is logged after this call. What ext4's
    /// `auto_da_alloc` does before a rename over a file or after a truncate to zero, so
    /// that a replaced file reads old or new content after a crash, never empty. A
    /// failure leaves the data cached, part of it written back.
    pub fn write_back(&self, id: u64) -> Result<()> {
        if let Some(e) = self.shared.existing(id) {
            let mut d = e.lock();
            self.shared.flush_locked(id, &mut d)?;
            debug_assert!(
                d.pages.values().all(|p| !p.reserved),
                "written back: nothing of file {id} waits for placement"
            );
        }
        Ok(())
    }

    /// Writes back everything cached before the call (through the contexts), then commits.
    /// A writeback failure since the last call is reported here.
    pub fn sync(&self) -> Result<()> {
        let s = &self.shared;
        let upto = s.seq.load(Relaxed);
        while s.dirty_upto(upto) {
            s.take_error()?;
            s.queue_dirty(upto)?;
            s.wait_cleaned(Duration::from_millis(20));
        }
        s.take_error()?;
        s.sweep_clean();
        s.vol.sync()
    }

    /// [`Buffered::sync`], then the volume's checkpoint ([`Volume::checkpoint`]).
    pub fn checkpoint(&self) -> Result<()> {
        self.sync()?;
        self.shared.vol.checkpoint()
    }

    /// Memory pressure: writes back (through the contexts) until at most `target_bytes`
    /// are cached.
    pub fn shrink(&self, target_bytes: u64) -> Result<()> {
        let s = &self.shared;
        while s.dirty_bytes.load(Relaxed) > target_bytes {
            s.take_error()?;
            s.queue_dirty(u64::MAX)?;
            s.wait_cleaned(Duration::from_millis(20));
        }
        s.take_error()
    }

    /// Runs `op` on the volume's file `id` after writing its cached data back (under its
    /// cache lock, so nothing is cached meanwhile), then takes the volume's size.
    fn flushed<T>(&self, id: u64, op: impl FnOnce(&Volume) -> Result<T>) -> Result<T> {
        let entry = self.shared.entry(id)?;
        let mut d = entry.lock();
        self.shared.flush_locked(id, &mut d)?;
        debug_assert!(
            d.pages.is_empty(),
            "file {id} written back before the operation"
        );
        let out = op(&self.shared.vol)?;
        d.size = self.shared.vol.size(id)?;
        Ok(out)
    }

    /// Sets file `id`'s size (see [`Volume::truncate`]), its cached data written back first.
    /// A failure leaves the cached data written back in part, or what
    /// [`Volume::truncate`] leaves.
    pub fn truncate(&self, id: u64, size: u64) -> Result<()> {
        self.flushed(id, |v| v.truncate(id, size))
    }

    /// `fallocate(2)` on file `id` (see [`Volume::fallocate`]), its cached data written
    /// back first. A failure leaves the cached data written back in part, or what
    /// [`Volume::fallocate`] leaves.
    pub fn fallocate(&self, id: u64, mode: Fallocate, offset: u64, len: u64) -> Result<()> {
        self.fallocate_for(id, mode, offset, len, Privilege::Superuser)
    }

    /// [`Buffered::fallocate`] for `who` (see [`Volume::fallocate_for`]).
    pub fn fallocate_for(
        &self,
        id: u64,
        mode: Fallocate,
        offset: u64,
        len: u64,
        who: Privilege,
    ) -> Result<()> {
        self.after_writeback(|| self.flushed(id, |v| v.fallocate_for(id, mode, offset, len, who)))
    }

    /// True if `e` is no space that writing back the cache and checkpointing
    /// ([`Buffered::checkpoint`]) may remedy: files hold cached data's reservations, each
    /// counted in the room kept for metadata until it is written back
    /// ([`Volume::cached_files`]).
    /// False inside an atomic group: a checkpoint there would split it.
    pub fn cache_holds_room(&self, e: &Error) -> bool {
        let vol = &self.shared.vol;
        e.kind() == crate::ErrorKind::NoSpace && vol.cached_files() > 0 && !vol.inside_group()
    }

    /// Runs `op` (which holds no cache lock), and once more after
    /// [`Buffered::checkpoint`] when it found no space that the cache held
    /// ([`Buffered::cache_holds_room`]): what ext4 does when a delayed allocation finds no
    /// space (it forces a commit and tries again). `op` must leave nothing changed when it
    /// fails for want of space.
    fn after_writeback<T>(&self, mut op: impl FnMut() -> Result<T>) -> Result<T> {
        match op() {
            Err(e) if self.cache_holds_room(&e) => {
                self.shared.cache_remedies.fetch_add(1, Relaxed);
                let upto = self.shared.seq.load(Relaxed);
                self.checkpoint()?;
                // What was cached before is written back, its reservations released
                // (writers since cache data of later sequence numbers).
                debug_assert!(!self.shared.dirty_upto(upto), "cached data outlived a sync");
                op()
            }
            r => r,
        }
    }

    /// File `id` is closed: its next writeback is its final size, allocated exactly, and
    /// its preallocations are given back once nothing of it is cached.
    pub fn close_file(&self, id: u64) -> Result<()> {
        let Some(entry) = self.shared.existing(id) else {
            // Nothing cached: nothing to note for a later writeback.
            return self.shared.vol.close_file(id);
        };
        let mut d = entry.lock();
        debug_assert!(!d.unlinked, "file {id} closed after its unlink");
        d.closed = true;
        if d.pages.is_empty() {
            self.shared.vol.close_file(id)?;
        }
        self.shared.forget_clean(id, &entry, &d);
        Ok(())
    }

    /// Removes file `id`: the volume's file (see [`Volume::unlink`]), then its cached data
    /// (reservations given back). A failure leaves the cache as it was and the volume's
    /// file as [`Volume::unlink`] leaves it.
    pub fn unlink(&self, id: u64) -> Result<()> {
        let entry = self.shared.entry(id)?;
        let mut d = entry.lock();
        self.shared.vol.unlink(id)?;
        self.shared.drop_cached(&mut d, 0, u64::MAX);
        debug_assert!(
            d.pages.is_empty() && d.dirty_since.is_none(),
            "unlinked, nothing cached"
        );
        d.unlinked = true;
        self.shared.files.lock().remove(&id);
        Ok(())
    }

    /// Replaces file `id`'s attribute blob (see [`Volume::set_attr`]).
    pub fn set_attr(&self, id: u64, attr: &[u8]) -> Result<()> {
        self.shared.vol.set_attr(id, attr)
    }

    /// File `id`'s attribute blob.
    pub fn attr(&self, id: u64) -> Result<Vec<u8>> {
        self.shared.vol.attr(id)
    }

    /// Every file with its size as callers see it; extents and blocks as placed so far.
    /// Should a tree leaf fail to read, only the files in memory ([`Volume::list`]):
    /// [`Buffered::try_list`] says why.
    pub fn list(&self) -> Vec<FileInfo> {
        self.try_list()
            .unwrap_or_else(|_| self.with_cached_sizes(self.shared.vol.list()))
    }

    /// [`Buffered::list`], failing with the error of a tree leaf that cannot be read
    /// ([`Volume::try_list`]) instead of listing only the files in memory.
    pub fn try_list(&self) -> Result<Vec<FileInfo>> {
        Ok(self.with_cached_sizes(self.shared.vol.try_list()?))
    }

    /// `files` with each cached file's size as callers see it.
    fn with_cached_sizes(&self, mut files: Vec<FileInfo>) -> Vec<FileInfo> {
        debug_assert!(
            files.windows(2).all(|w| w[0].id < w[1].id),
            "each file listed once"
        );
        for f in &mut files {
            if let Some(e) = self.shared.existing(f.id) {
                f.size = e.lock().size;
            }
        }
        files
    }

    /// File `id`'s placed extents (cached data has none yet).
    pub fn extents(&self, id: u64) -> Result<Vec<FileExtent>> {
        self.shared.vol.extents(id)
    }

    /// The volume's ownership check (see [`Volume::check`]).
    pub fn check(&self) -> Result<VolumeCheck> {
        self.shared.vol.check()
    }

    /// The cache's and the contexts' figures.
    pub fn stats(&self) -> WritebackStats {
        let s = &self.shared;
        let ctx = |c: &contexts::Context| ContextStats {
            runs: c.runs.load(Relaxed),
            bytes: c.bytes.load(Relaxed),
            allocations: c.allocations.load(Relaxed),
            lock_waits: c.lock_waits.load(Relaxed),
        };
        WritebackStats {
            contexts: self.workers.len(),
            dirty_bytes: s.dirty_bytes.load(Relaxed),
            dirty_peak_bytes: s.dirty_peak_bytes.load(Relaxed),
            dirty_limit_bytes: s.opts.dirty_limit_bytes,
            reserved_blocks: s.vol.delalloc_reserved_blocks(),
            per_context: s.contexts.iter().map(ctx).collect(),
            caller: ctx(&s.caller),
            context_switches: s.switches.load(Relaxed),
            throttled_writes: s.throttled.load(Relaxed),
            throttled_ns: s.throttled_ns.load(Relaxed),
            space_checkpoints: s.cache_remedies.load(Relaxed),
        }
    }

    /// Syncs, stops the contexts and gives the volume back.
    pub fn into_volume(mut self) -> Result<Volume> {
        self.sync()?;
        self.stop();
        let shared = self.shared.clone();
        self.handed_back = true;
        drop(self);
        match Arc::try_unwrap(shared) {
            Ok(s) => Ok(s.vol),
            Err(_) => unreachable!("the workers are joined"),
        }
    }

    /// Syncs, stops the contexts and closes the volume.
    pub fn close(self) -> Result<()> {
        self.into_volume()?.close()
    }

    /// [`Buffered::close`] for a process that exits next: the cache's file entries and
    /// the volume's tables are left to the exit instead of freed ([`Volume::close_for_exit`];
    /// in a process that goes on, they leak).
    pub fn close_for_exit(mut self) -> Result<()> {
        self.sync()?;
        self.stop();
        assert!(self.workers.is_empty(), "the contexts are joined");
        std::mem::forget(std::mem::take(&mut *self.shared.files.lock()));
        self.into_volume()?.close_for_exit()
    }

    fn stop(&mut self) {
        self.shared.shutdown.store(true, Relaxed);
        for c in &self.shared.contexts {
            c.notify_all();
        }
        for h in self.workers.drain(..) {
            let joined = h.join();
            // A context that panicked broke an invariant: never swallow it (unless this
            // thread is unwinding already, where a second panic would abort).
            debug_assert!(
                joined.is_ok() || std::thread::panicking(),
                "a writeback context panicked"
            );
        }
    }
}

impl Drop for Buffered {
    /// Stops the contexts; what was not synced is lost, as in a crash, and the device stays
    /// marked in use, as a crash leaves it (unless the volume was handed back): the next
    /// open reports the unclean close, so a file system on it checks for what a crash
    /// leaves.
    fn drop(&mut self) {
        self.stop();
        debug_assert!(self.workers.is_empty(), "no context outlives its cache");
        if !self.handed_back {
            self.shared.vol.store().abandon();
        }
    }
}

/// The blocks `d`'s cached pages hold reserved: the count kept as pages are made and
/// dropped (`Buffered::write_piece`, `Shared::drop_cached`), paired with the pages where
/// the assertions run (a count of every page, too dear for each `stat` of a large cached
/// file in a release build).
fn reserved_of(id: u64, d: &cache::DirtyFile) -> u64 {
    debug_assert_eq!(
        d.pages.values().filter(|p| p.reserved).count() as u64,
        d.reserved,
        "file {id}'s reserved pages"
    );
    d.reserved
}
