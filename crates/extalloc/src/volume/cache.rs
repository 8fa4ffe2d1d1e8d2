//! Files kept in memory, and files loaded from the file tree when a call names them
//! (`docs/format.md`, "Next": step 4, on-demand files).
//!
//! The volume's file table (`Volume::files`) is a cache over the durable file tree
//! (`tree.rs`): a file changed since the last checkpoint, or pending, or holding state only
//! memory has (preallocations, a claim, a write-life hint, a map not yet written) is always
//! in it; a clean file may be dropped (evicted) after a checkpoint and is read back from
//! its tree leaf by the next call that names it ([`Volume::file`]). The open keeps only
//! the files it replayed changes onto (and pending ones); the rest stay on the device.
//!
//! Data structures: the table (`id -> VFile`), its limit ([`Volume::set_file_cache`]), the
//! clock hand where the next eviction starts, and the counts of loads and evictions.
//!
//! Invariant (what makes a load right): outside a checkpoint, a file not in the table
//! either is in the durable tree with the entry that is its whole state, or is named in
//! `dirty` (unlinked since the checkpoint: no such file), or does not exist. Only a
//! checkpoint (after its tree is in force) and [`Volume::trim_file_cache`] evict, both
//! under the gate (written), and only files not in `dirty`; a load holds the gate (read,
//! recursively: a caller may hold it already), so no eviction runs between its read of
//! the tree and its insert.
//!
//! Lock order: the gate -> `dirty` / `meta` / `files`, one at a time. [`Volume::file`]
//! may take the gate: never call it holding a file's mutex, `files` or `meta`.

use super::file::{ReplayFile, VFile};
use super::load::adopt;
use super::publish::PENDING;
use super::state::FileTable;
use super::table::{decode_file, TableFile};
use super::treeio::VolIo;
use super::{FileInfo, Volume};
use crate::alloc::Lifetime;
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Files a volume keeps in memory by default beyond those it must keep: about 100 MiB
/// at the ~400 bytes an empty clean file takes (`docs/results.md`, "On-demand files").
pub const DEFAULT_FILE_CACHE: usize = 262_144;

/// Files changed since the durable tree past which a sync checkpoints, whatever the
/// journal holds: an eighth of the file cache, at least this many. Every changed file
/// stays in memory until a checkpoint writes it, and the checkpoint's own temporaries
/// grow with the files it writes (about 600 bytes a file, heaptrack of 2M creates): a
/// journal half full took 170,000 creates, so 100 MiB of temporaries and 70 MiB of files
/// the cache could not drop (`docs/results.md`, "The daemon's memory at 2M").
pub const MIN_CHECKPOINT_FILES: usize = 4096;

impl Volume {
    /// Changed files past which [`Volume::sync`] checkpoints: an eighth of the file cache
    /// ([`Volume::set_file_cache`]), at least [`MIN_CHECKPOINT_FILES`].
    pub(super) fn checkpoint_files(&self) -> usize {
        (self.file_cache.load(Relaxed) / 8).max(MIN_CHECKPOINT_FILES)
    }
}

impl Volume {
    /// File `id`'s handle: from memory, else loaded from the durable file tree (taking
    /// the gate for reading). [`Error::NoSuchFile`] if there is no such file; a tree leaf
    /// that fails its check is [`Error::Corrupt`].
    pub(super) fn file(&self, id: u64) -> Result<Arc<Mutex<VFile>>> {
        if let Some(f) = self.files.read().get(&id) {
            return Ok(f.clone());
        }
        let _open = self.gate.read_recursive();
        self.load_file(id)
    }

    /// [`Volume::file`] for a caller that holds the gate written (a checkpoint).
    pub(super) fn file_locked(&self, id: u64) -> Result<Arc<Mutex<VFile>>> {
        debug_assert!(self.gate.is_locked_exclusive(), "a load without the gate");
        if let Some(f) = self.files.read().get(&id) {
            return Ok(f.clone());
        }
        self.load_file(id)
    }

    /// Reads file `id` from the durable tree into the table (the gate held).
    fn load_file(&self, id: u64) -> Result<Arc<Mutex<VFile>>> {
        debug_assert!(self.gate.is_locked(), "a load without the gate");
        if let Some(f) = self.files.read().get(&id) {
            return Ok(f.clone()); // loaded by another call meanwhile
        }
        // Changed since the checkpoint and not in memory: unlinked.
        if self.dirty.lock().contains(&id) {
            return Err(Error::NoSuchFile { id });
        }
        let entry = self.durable_entry(id)?.ok_or(Error::NoSuchFile { id })?;
        debug_assert_eq!(entry.id, id, "the tree's key is its entry's id");
        let (_, replay) = ReplayFile::from_table(entry);
        let vf = adopt(&self.store, id, replay)?;
        debug_assert!(!vf.loaded && vf.stored.is_some() && !vf.map_dirty);
        self.files_loaded.fetch_add(1, Relaxed);
        let mut files = self.files.write();
        Ok(files
            .entry(id)
            .or_insert_with(|| Arc::new(Mutex::new(vf)))
            .clone())
    }

    /// File `id`'s entry in the durable tree (`None`: not there, or no tree yet: then every
    /// file is in memory).
    fn durable_entry(&self, id: u64) -> Result<Option<TableFile>> {
        let Some(tree) = self.meta.lock().tree.clone() else {
            return Ok(None);
        };
        let mut io = VolIo::new(&self.store, self.dev.as_ref(), self.meta.lock().stamp);
        tree.get(&mut io, id)?
            .map(|body| decode_file(&body))
            .transpose()
    }

    /// Every file's id in order: those in memory, and the others' read from the durable
    /// tree leaf by leaf (nothing is kept: a whole-volume pass leaves the table as it
    /// found it). The gate held (written, or read by a listing). Memory: every file's id.
    pub(super) fn all_ids(&self) -> Result<Vec<u64>> {
        debug_assert!(
            self.gate.is_locked(),
            "a pass over every file without the gate"
        );
        let cached: FileTable = self.files.read().clone();
        let mut out: Vec<u64> = Vec::with_capacity(cached.len());
        self.visit_tree_only(&cached, 0, &mut |id, _| {
            out.push(id);
            Ok(true)
        })?;
        out.extend(cached.into_keys());
        out.sort_unstable();
        debug_assert!(out.windows(2).all(|w| w[0] < w[1]), "a file listed twice");
        Ok(out)
    }

    /// Every file's figures and attribute blob, in id order, each handed to `f` as the
    /// pass reaches it (pending files, `publish.rs`, are not shown): a whole-volume pass
    /// whose memory is one tree leaf and the files in memory, where
    /// [`Volume::try_list_with_attrs`] collects every file. Files not in memory are read
    /// from the file tree leaf by leaf and not kept. Fails with the error of a leaf that
    /// cannot be read ([`Error::Io`], [`Error::Corrupt`]), after `f` saw the files
    /// before it. Runs under the volume's gate (read): `f` must not change the volume (a
    /// change that checkpoints would wait for this pass to end).
    pub fn try_visit_with_attrs(&self, mut f: impl FnMut(FileInfo, &[u8])) -> Result<()> {
        let _open = self.gate.read_recursive();
        let cached: FileTable = self.files.read().clone();
        let mut memory = cached.iter().peekable();
        // The files in memory below `upto` (every one left, for `None`), in id order.
        let mut from_memory = |upto: Option<u64>, f: &mut dyn FnMut(FileInfo, &[u8])| {
            while let Some((&id, file)) = memory.next_if(|(&id, _)| upto.is_none_or(|u| id < u)) {
                let file = file.lock();
                if let Some(info) = info_of(id, &file) {
                    f(info, &file.attr);
                }
            }
        };
        let mut last = None;
        self.visit_tree_only(&cached, 0, &mut |id, entry| {
            // The files in memory before it first: one id order across both.
            from_memory(Some(id), &mut f);
            if entry.attr == PENDING {
                return Ok(true);
            }
            debug_assert!(last.is_none_or(|l| l < id), "each file once, in order");
            last = Some(id);
            f(tree_info(id, &entry), &entry.attr);
            Ok(true)
        })?;
        from_memory(None, &mut f);
        Ok(())
    }

    /// Calls `f` with each file only the durable tree holds (not in `cached`, the files in
    /// memory, nor unlinked since the checkpoint): its id and entry, in id order, read leaf
    /// by leaf from id `from` on (the subtrees below it unread), until `f` says to stop
    /// (`Ok(false)`). The gate held.
    pub(super) fn visit_tree_only(
        &self,
        cached: &FileTable,
        from: u64,
        f: &mut dyn FnMut(u64, TableFile) -> Result<bool>,
    ) -> Result<()> {
        debug_assert!(
            self.gate.is_locked(),
            "a pass over the tree without the gate"
        );
        let unlinked = self.dirty.lock().clone();
        let Some(tree) = self.meta.lock().tree.clone() else {
            return Ok(()); // no tree yet: every file is in memory
        };
        let mut io = VolIo::new(&self.store, self.dev.as_ref(), self.meta.lock().stamp);
        tree.visit_from(&mut io, from, &mut |id, body| {
            if cached.contains_key(&id) || unlinked.contains(&id) {
                return Ok(true);
            }
            f(id, decode_file(body)?)
        })
    }

    /// Whether the volume holds no file (pending ones, `publish.rs`, aside): a look at the
    /// files in memory and at most the file tree's first leaves, not a listing. Fails as
    /// [`Volume::try_list`] does.
    pub fn is_empty(&self) -> Result<bool> {
        let _open = self.gate.read_recursive();
        let cached: FileTable = self.files.read().clone();
        if cached.values().any(|f| f.lock().attr != PENDING) {
            return Ok(false);
        }
        let mut empty = true;
        self.visit_tree_only(&cached, 0, &mut |_, entry| {
            empty = entry.attr == PENDING;
            Ok(empty)
        })?;
        Ok(empty)
    }

    /// How many files the volume holds (pending ones, `publish.rs`, among them): the
    /// durable tree's count, plus the files made since its checkpoint, less those unlinked
    /// since. Costs a look into the tree for each file changed since the checkpoint (at an
    /// open, those its journal replayed), not a pass over every file. Fails as a tree
    /// leaf's read does ([`Error::Io`], [`Error::Corrupt`]).
    pub fn file_count(&self) -> Result<u64> {
        let _open = self.gate.read_recursive();
        let Some(tree) = self.meta.lock().tree.clone() else {
            // No tree yet: every file is in memory.
            return Ok(self.files.read().len() as u64);
        };
        let dirty: Vec<u64> = self.dirty.lock().iter().copied().collect();
        let mut io = VolIo::new(&self.store, self.dev.as_ref(), self.meta.lock().stamp);
        let mut count = tree.count();
        for id in dirty {
            let now = self.files.read().contains_key(&id);
            let durable = tree.get(&mut io, id)?.is_some();
            match (durable, now) {
                (false, true) => count += 1, // made since the checkpoint
                (true, false) => {
                    assert!(count > 0, "file {id} unlinked from an empty tree");
                    count -= 1; // unlinked since
                }
                _ => {} // changed, or made and unlinked since: as the tree counts it
            }
        }
        // A file not in the dirty set is as the tree holds it: counted there.
        debug_assert!(
            count
                >= (self.files.read().len() as u64).saturating_sub(self.dirty.lock().len() as u64),
            "every clean file in memory is in the tree"
        );
        Ok(count)
    }

    /// Drops clean files beyond the limit now, as a checkpoint does after putting its tree
    /// in force (reads that name many files, a listing of every inode, load each one, and
    /// between checkpoints nothing else drops them). A file not named in the dirty set has
    /// not changed since the durable tree, so its leaf entry is its whole state: the gate
    /// is taken for writing, so no load or change runs meanwhile. Returns how many it
    /// dropped; a volume not yet on a file tree (before its first checkpoint) drops none.
    pub fn trim_file_cache(&self) -> usize {
        let _closed = self.gate.write();
        let before = self.files.read().len();
        let dropped = self.evict_files();
        debug_assert_eq!(
            self.files.read().len(),
            before - dropped,
            "each file dropped left the table once"
        );
        dropped
    }

    /// Sets how many files the volume keeps in memory beyond those it must keep (see the
    /// module documentation; [`DEFAULT_FILE_CACHE`] by default). Takes effect at the next
    /// checkpoint or [`Volume::trim_file_cache`]. 0 keeps only what must stay.
    pub fn set_file_cache(&self, files: usize) {
        self.file_cache.store(files, Relaxed);
    }

    /// The file cache's count ([`Volume::set_file_cache`]): a caller that trims between
    /// checkpoints compares [`Volume::file_cache_figures`]' first figure with it.
    pub fn file_cache_limit(&self) -> usize {
        self.file_cache.load(Relaxed)
    }

    /// Files in memory now, files read from the tree since the open, and files dropped
    /// from memory since the open.
    pub fn file_cache_figures(&self) -> (usize, u64, u64) {
        (
            self.files.read().len(),
            self.files_loaded.load(Relaxed),
            self.files_evicted.load(Relaxed),
        )
    }

    /// After a checkpoint put its tree in force, or between checkpoints (the gate
    /// written): drops clean files
    /// from memory until at most the limit remain, starting where the last eviction
    /// stopped (a clock hand over ids). Returns how many it dropped.
    pub(super) fn evict_files(&self) -> usize {
        debug_assert!(
            self.gate.is_locked_exclusive(),
            "an eviction, the gate open"
        );
        let limit = self.file_cache.load(Relaxed);
        if self.meta.lock().tree.is_none() || self.files.read().len() <= limit {
            return 0;
        }
        let dirty = self.dirty.lock().clone();
        let claimed: BTreeSet<u64> = self.claims.lock().by_file.keys().copied().collect();
        let mut files = self.files.write();
        let excess = files.len() - limit;
        let hand = self.evict_from.load(Relaxed);
        // Clean files from the hand on (wrapping), until enough are found.
        let mut victims = Vec::with_capacity(excess);
        let mut last = hand;
        for (&id, f) in files.range(hand..).chain(files.range(..hand)) {
            if victims.len() == excess {
                break;
            }
            last = id;
            if !dirty.contains(&id) && !claimed.contains(&id) && at_rest(f) {
                victims.push(id);
            }
        }
        let dropped = victims.len();
        for id in victims {
            files.remove(&id);
        }
        debug_assert!(files.len() >= limit, "evicted below the limit");
        self.evict_from.store(last.wrapping_add(1), Relaxed);
        self.files_evicted.fetch_add(dropped as u64, Relaxed);
        dropped
    }
}

/// A file whose whole state is its durable entry: no one holds it, its map is written,
/// it is published, it holds no preallocation and carries no write-life hint nor a tail kept back (`tail.rs`) (what a
/// load would make of its entry, but for a map not read yet).
fn at_rest(file: &Arc<Mutex<VFile>>) -> bool {
    if Arc::strong_count(file) != 1 {
        return false;
    }
    let Some(f) = file.try_lock() else {
        return false;
    };
    f.stored.is_some()
        && !f.map_dirty
        && f.attr != PENDING
        && f.lifetime == Lifetime::Unknown
        && Arc::strong_count(&f.alloc) == 1
        && f.alloc.prealloc_unused_blocks() == 0
        && f.tail.is_none()
}

/// The figures of a listing, without its extra.
pub(super) fn strip(files: Vec<(FileInfo, ())>) -> Vec<FileInfo> {
    files.into_iter().map(|(i, ())| i).collect()
}

/// The figures of file `id` whose entry only the tree holds: no preallocation (a file
/// holding one stays in memory).
pub(super) fn tree_info(id: u64, entry: &TableFile) -> FileInfo {
    let (extents, blocks) = entry.map.counts();
    FileInfo {
        id,
        size: entry.size,
        extents,
        blocks,
        prealloc_blocks: 0,
    }
}

/// A file's figures as a listing shows them; `None` for a pending file.
pub(super) fn info_of(id: u64, f: &VFile) -> Option<FileInfo> {
    if f.attr == PENDING {
        return None;
    }
    let (extents, blocks) = match &f.stored {
        Some(stored) if !f.loaded => stored.counts(),
        _ => (f.alloc.extent_count() as u64, f.alloc.mapped_blocks()),
    };
    Some(FileInfo {
        id,
        size: f.size,
        extents,
        blocks,
        prealloc_blocks: f.alloc.prealloc_unused_blocks(),
    })
}

/// The blocks `f` maps: its entry's count while its map is not in memory.
pub(super) fn mapped_blocks(f: &VFile) -> u64 {
    match &f.stored {
        Some(stored) if !f.loaded => stored.counts().1,
        _ => f.alloc.mapped_blocks(),
    }
}
