//! The registry of the file layer: files holding preallocations (so space pressure and
//! unmount can discard them) and the per-shard locality chunks.
//!
//! # Data structures
//!
//! - `PreallocRegistry`: weak references to the files that ever made a PA (pruned of dead
//!   ones as it grows) and, per shard, a [`Locality`] under its own lock (its chunk and
//!   leftovers; `locality.rs` carves from them).
//!
//! # Invariant
//!
//! A file with a live PA is registered (`FileInner::registered`); registration is never
//! undone while the file lives.
//!
//! Lock order: a file lock may be held when the registry's list lock is taken; the list
//! lock is never held while taking any other.

use super::file::FileAlloc;
use crate::alloc::SHARDS;
use crate::geometry::Extent;
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::sync::{Arc, Weak};

/// Files with preallocations (for discard under space pressure) and the locality PAs.
pub(super) struct PreallocRegistry {
    files: Mutex<RegisteredFiles>,
    /// Per shard: what is left of its locality chunk, and earlier chunks' leftovers.
    pub(super) locality: Box<[CachePadded<Mutex<Locality>>]>,
}

#[derive(Default)]
struct RegisteredFiles {
    files: Vec<Weak<FileAlloc>>,
    /// Length after the last pruning of dead entries.
    pruned_len: usize,
}

impl PreallocRegistry {
    pub(super) fn new() -> Self {
        PreallocRegistry {
            files: Mutex::new(RegisteredFiles::default()),
            locality: (0..SHARDS)
                .map(|_| CachePadded::new(Mutex::new(Locality::default())))
                .collect(),
        }
    }

    pub(super) fn register(&self, file: &Arc<FileAlloc>) {
        let mut r = self.files.lock();
        if r.files.len() >= 2 * r.pruned_len.max(64) {
            r.files.retain(|w| w.strong_count() > 0);
            r.pruned_len = r.files.len();
        }
        r.files.push(Arc::downgrade(file));
        // Pruning keeps the list within twice its live length (and at least 64).
        debug_assert!(r.files.len() <= 2 * r.pruned_len.max(64));
    }

    pub(super) fn live_files(&self) -> Vec<Arc<FileAlloc>> {
        self.files
            .lock()
            .files
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }
}

/// One shard's locality preallocation.
#[derive(Default)]
pub(crate) struct Locality {
    /// The chunk small files carve from, front first.
    pub(crate) current: Option<Extent>,
    /// Ends of earlier chunks too short for the request that retired them, kept (at most
    /// `locality_leftovers`) for smaller files, as ext4 keeps its group preallocations.
    pub(crate) leftovers: Vec<Extent>,
    /// Blocks carved to files that the core still counts as reserved.
    pub(crate) unclaimed: u64,
}

impl Locality {
    pub(crate) fn extents(&self) -> impl Iterator<Item = Extent> + '_ {
        self.current.iter().chain(self.leftovers.iter()).copied()
    }
}
