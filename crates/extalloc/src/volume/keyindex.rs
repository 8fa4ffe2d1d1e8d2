//! The key index: which files hold each attribute blob, by the blob's hash, so a keyed
//! lookup (`keyed.rs`) reads the files whose blob hashes as its key's instead of visiting
//! every file.
//!
//! Built on the first keyed lookup by one visit of every file (a volume never asked by
//! key, a mounted file system's, never builds it), then kept by [`Volume::log`], the one
//! place every change of a file's blob passes: a create or a new blob moves the file to
//! its blob's hash, an unlink takes it out. A change logged while the visit runs is kept
//! aside and replayed on what the visit found (a change is made in memory before it is
//! logged, so one logged before the build began is in what the visit reads, and one
//! logged during it is replayed, idempotently, after).
//!
//! Data structures: [`KeyIndex`] (hash -> the ids whose blob hashes so, ascending; id ->
//! its hash), [`IndexState`] (not built, building with the changes kept aside, built).
//! The volume's side (the build, the lookups, `log`'s hook) is in `keyed.rs`.
//! Invariant: once built, the index holds every file of the volume under the hash of its
//! blob as the last logged change set it (a hit is still read back and compared: a hash is
//! not a key). Memory: about 40 bytes a file, only on a volume asked by key. Locks:
//! `Volume::key_index` is a leaf, taken in `log` after `log` and `dirty`; a build holds
//! `keys` (shared) then `key_index_build` across its visit (which takes the gate and the
//! files' locks as any visit), and `key_index` only before and after it.

use super::record::Change;
use std::collections::HashMap;
use std::hash::Hasher;

/// A blob's hash (SipHash with fixed keys: the same blob hashes alike in every process).
pub(super) fn hash(blob: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    h.write(blob);
    h.finish()
}

/// Ids by blob hash, and each id's hash.
#[derive(Default)]
pub(super) struct KeyIndex {
    by_hash: HashMap<u64, Vec<u64>>,
    of: HashMap<u64, u64>,
}

impl KeyIndex {
    /// File `id`'s blob is now one hashing to `h` (`None`: the file is gone).
    pub(super) fn set(&mut self, id: u64, h: Option<u64>) {
        if let Some(old) = self.of.remove(&id) {
            let ids = self.by_hash.get_mut(&old).expect("an id's hash lists it");
            ids.retain(|&x| x != id);
            if ids.is_empty() {
                self.by_hash.remove(&old);
            }
        }
        if let Some(h) = h {
            let ids = self.by_hash.entry(h).or_default();
            let at = ids.partition_point(|&x| x < id);
            ids.insert(at, id);
            self.of.insert(id, h);
        }
        // Paired with `candidates`: an id is listed under its hash alone.
        debug_assert!(self.of.get(&id).copied() == h, "file {id}'s hash");
    }

    /// Ids whose blob hashes as `key`, newest (highest) first.
    pub(super) fn candidates(&self, key: &[u8]) -> Vec<u64> {
        let mut ids = self.by_hash.get(&hash(key)).cloned().unwrap_or_default();
        ids.reverse();
        ids
    }

    /// Files indexed.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.of.len()
    }
}

/// What a change does to the index: file `id`'s blob hash, or `None` when it is gone.
pub(super) fn effect(c: &Change) -> Option<(u64, Option<u64>)> {
    match c {
        Change::Create { id, attr } | Change::SetAttr { id, attr } => Some((*id, Some(hash(attr)))),
        Change::Unlink { id } => Some((*id, None)),
        _ => None,
    }
}

/// Where the index stands.
#[derive(Default)]
pub(super) enum IndexState {
    /// No keyed lookup yet: `log` does nothing for it.
    #[default]
    NotBuilt,
    /// The first lookup's visit runs: the changes logged meanwhile, in order.
    Building(Vec<(u64, Option<u64>)>),
    Built(KeyIndex),
}
