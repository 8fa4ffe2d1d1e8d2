//! Blobs by key: [`Volume::put_keyed`] stores a blob under a key, replacing the key's blob
//! atomically; [`Volume::get_keyed`] and [`Volume::find_key`] find it again,
//! [`Volume::delete_keyed`] deletes it.
//!
//! A key is a file's attribute blob (as [`Volume::put`] stores it): the format is unchanged,
//! and a volume's keys are rebuilt at open from its file table. A keyed put writes the new
//! blob as a pending file (`publish.rs`), then, under the key lock, publishes it in place of
//! the key's file with [`Volume::publish_replacing`] (one atomic group: the new file
//! published, the old one made pending, then unlinked), or publishes it alone when the key
//! is new. So a crash at any point leaves the key naming the old blob or the new one,
//! never neither and never both, and a key a keyed put stored names one file across every
//! reopen.
//!
//! Data structures: none of their own; the key lock is the volume's `keys`. A lookup reads
//! the files whose blob hashes as the key's (`keyindex.rs`: built by the first lookup's
//! visit of every file, O(files) once, then kept as changes are logged), newest first.
//!
//! Invariant: among keyed puts, a key names at most one published file. Calls that set a
//! blob directly ([`Volume::put`], [`Volume::create`], [`Volume::set_attr`],
//! [`Volume::publish`]) do not take the key lock and may give a second file the same
//! blob; the key then names the newest (highest id) of them, and a keyed put replaces
//! that one. Locks: `keys` before every other lock of the volume; a keyed put writes its
//! data before taking it, so keyed puts of different keys copy their data side by side.

use super::keyindex::{effect, hash, IndexState, KeyIndex};
use super::publish::check_caller_attr;
use super::record::Change;
use super::state::Volume;
use crate::error::{Error, Result};
use std::sync::atomic::Ordering::SeqCst;

/// A key a caller may use: not empty, within the blob limit, not the pending mark.
fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(Error::EmptyKey);
    }
    check_caller_attr(key)
}

impl Volume {
    /// Stores `data` as a new blob under `key` (its attribute blob, at most
    /// [`MAX_ATTR_BYTES`](super::MAX_ATTR_BYTES) bytes) and returns its id; the blob the key
    /// named before, if any, is replaced in the same atomic group and unlinked. Durable at
    /// the next commit ([`Volume::sync`]). After a crash the key names the old blob (whole)
    /// or the new one (whole): never neither, never both; once the commit after the put is
    /// durable, the new one.
    ///
    /// Refused, nothing changed: [`Error::EmptyKey`], [`Error::AttrTooLarge`] or
    /// [`Error::AttrReserved`] for such a `key`. On any failure before the new blob is
    /// published (`NoSpace`, an I/O error) the new file is unlinked again (or, if that fails
    /// too, left pending and hidden for the next open to remove) and the key's old blob is
    /// untouched. If only the last step, unlinking the old blob, fails, the replacement
    /// stands (the key names the new blob, whose id is lost to the caller: [`Volume::find_key`]
    /// gives it) and that error is returned; the old blob is pending and hidden, and the next
    /// open removes it.
    ///
    /// ```
    /// # use extalloc::volume::Volume;
    /// # let dir = std::env::temp_dir().join(format!("extalloc-doc-keyed-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// let vol = Volume::mkfs_file(dir.join("v.img"), 32 << 20)?;
    /// let first = vol.put_keyed(b"report.pdf", b"draft")?;
    /// let second = vol.put_keyed(b"report.pdf", b"final")?;
    /// assert_eq!(vol.get_keyed(b"report.pdf")?.as_deref(), Some(&b"final"[..]));
    /// assert_eq!(vol.find_key(b"report.pdf")?, Some(second));
    /// assert!(vol.size(first).is_err(), "the draft is gone");
    /// assert_eq!(vol.get_keyed(b"other")?, None);
    /// assert_eq!(vol.delete_keyed(b"report.pdf")?, Some(second));
    /// assert_eq!(vol.find_key(b"report.pdf")?, None);
    /// assert_eq!(vol.delete_keyed(b"report.pdf")?, None);
    /// # vol.close()?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), extalloc::Error>(())
    /// ```
    pub fn put_keyed(&self, key: &[u8], data: &[u8]) -> Result<u64> {
        check_key(key)?;
        self.put_then(data, |id| {
            let _keys = self.keys.write();
            match self.newest_under(key)? {
                Some(old) => self.publish_replacing(id, key, old)?,
                None => self.publish(id, key)?,
            }
            debug_assert!(
                self.newest_under(key).is_ok_and(|n| n >= Some(id)),
                "the key names it"
            );
            Ok(())
        })
    }

    /// The id of the blob `key` names (the newest published file whose attribute blob is
    /// `key`), or `None`. Refused as [`Volume::put_keyed`] refuses a key.
    pub fn find_key(&self, key: &[u8]) -> Result<Option<u64>> {
        check_key(key)?;
        let _keys = self.keys.read();
        self.newest_under(key)
    }

    /// Every published file whose attribute blob is `key`, newest (the one `key` names)
    /// first: one at most when only keyed puts stored it, more when direct calls
    /// ([`Volume::put`], [`Volume::create`], [`Volume::set_attr`]) gave others the same
    /// blob. Refused as [`Volume::put_keyed`] refuses a key.
    pub fn find_key_all(&self, key: &[u8]) -> Result<Vec<u64>> {
        check_key(key)?;
        let _keys = self.keys.read();
        let mut found = Vec::new();
        for id in self.key_candidates(key)? {
            match self.attr(id) {
                Ok(attr) if attr == key => found.push(id),
                Ok(_) | Err(crate::Error::NoSuchFile { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        debug_assert!(
            found.windows(2).all(|w| w[0] > w[1]),
            "newest first, each once"
        );
        Ok(found)
    }

    /// The bytes of the blob `key` names, whole, or `None` when the key names none. A
    /// keyed put that replaces it meanwhile waits for this read (or this read finds the
    /// new blob): the bytes are one blob's, never part of one. (A direct
    /// [`Volume::unlink`] of the blob meanwhile is not held back: the read then fails
    /// with [`Error::NoSuchFile`] or returns the part it read.) Refused as
    /// [`Volume::put_keyed`] refuses a key.
    pub fn get_keyed(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        let _keys = self.keys.read();
        match self.newest_under(key)? {
            None => Ok(None),
            Some(id) => self.read(id, 0, self.size(id)?).map(Some),
        }
    }

    /// Deletes the blob `key` names and returns its id, or `None` when the key names none
    /// (nothing changed). Two steps, as [`Volume::put_keyed`] retires an old blob: the blob
    /// is first made pending ([`Volume::retract`]: one change, so the key names nothing
    /// from here on, and a crash after it leaves the blob for the next open to remove),
    /// then unlinked (its space free once the next commit is durable). Held against keyed
    /// puts of any key meanwhile. Among keyed puts a key names one blob: afterwards it
    /// names none. A second blob given the same bytes by a direct call ([`Volume::put`],
    /// [`Volume::set_attr`]) is not deleted: the key names it next. Refused as
    /// [`Volume::put_keyed`] refuses a key. If the first step fails nothing changed; if
    /// the unlink fails, the key names nothing already and the blob, pending and hidden,
    /// is removed by the next open (its error is returned).
    pub fn delete_keyed(&self, key: &[u8]) -> Result<Option<u64>> {
        check_key(key)?;
        let _keys = self.keys.write();
        let Some(id) = self.newest_under(key)? else {
            return Ok(None);
        };
        // Pending first: an unlink frees a chunk at a time, and a failure or a crash
        // between chunks must not leave the key naming a blob cut short.
        self.retract(id)?;
        debug_assert!(
            self.newest_under(key).is_ok_and(|n| n != Some(id)),
            "the key no longer names the deleted blob"
        );
        self.unlink(id)?;
        Ok(Some(id))
    }
}

/// The key index's volume side (`keyindex.rs`).
impl Volume {
    /// Called by [`Volume::log`] with the changes it logs (under `log`'s lock, so in log
    /// order): kept by the index once a keyed lookup asked for it.
    pub(super) fn index_changes(&self, changes: &[Change]) {
        debug_assert!(self.log.is_locked(), "changes reach the index in log order");
        if !self.key_index_used.load(SeqCst) {
            return;
        }
        let mut state = self.key_index.lock();
        match &mut *state {
            IndexState::NotBuilt => {}
            IndexState::Building(kept) => kept.extend(changes.iter().filter_map(effect)),
            IndexState::Built(index) => {
                for (id, h) in changes.iter().filter_map(effect) {
                    index.set(id, h);
                }
            }
        }
    }

    /// The ids of the files whose blob may be `key` (hashes alike), newest first; builds
    /// the index on the first call (one visit of every file). A visit that fails leaves
    /// the index unbuilt.
    pub(super) fn key_candidates(&self, key: &[u8]) -> Result<Vec<u64>> {
        if let IndexState::Built(index) = &*self.key_index.lock() {
            return Ok(index.candidates(key));
        }
        self.build_key_index()?;
        match &*self.key_index.lock() {
            IndexState::Built(index) => Ok(index.candidates(key)),
            _ => unreachable!("the index was just built"),
        }
    }

    /// Builds the index: one visit of every file, the changes logged meanwhile replayed
    /// on top. Callers hold the key lock (`keys`, shared by lookups); one build runs at a
    /// time (`key_index_build`).
    fn build_key_index(&self) -> Result<()> {
        debug_assert!(self.keys.is_locked(), "a build runs under the key lock");
        // Lookups share the key lock: the builder's own lock makes one build at a time,
        // and a lookup that waited for it finds the index built.
        let _one = self.key_index_build.lock();
        {
            let mut state = self.key_index.lock();
            if matches!(*state, IndexState::Built(_)) {
                return Ok(());
            }
            *state = IndexState::Building(Vec::new());
        }
        // Set after the state: a `log` that sees it finds the buffer.
        self.key_index_used.store(true, SeqCst);
        let mut index = KeyIndex::default();
        let visited = self.try_visit_with_attrs(|f, attr| index.set(f.id, Some(hash(attr))));
        let mut state = self.key_index.lock();
        let IndexState::Building(kept) = std::mem::take(&mut *state) else {
            unreachable!("one build at a time (`key_index_build`)")
        };
        visited?;
        for (id, h) in kept {
            index.set(id, h);
        }
        *state = IndexState::Built(index);
        Ok(())
    }

    /// The highest id of a published file whose blob is `key`: the index's candidates,
    /// each read back and compared.
    pub(super) fn newest_under(&self, key: &[u8]) -> Result<Option<u64>> {
        for id in self.key_candidates(key)? {
            match self.attr(id) {
                Ok(attr) if attr == key => return Ok(Some(id)),
                // Gone since (an unlink not yet in the index cannot be: it is logged
                // first), or another blob with the same hash.
                Ok(_) | Err(crate::Error::NoSuchFile { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// Test access: the index's file count, if built.
    #[cfg(test)]
    pub(super) fn key_index_len(&self) -> Option<usize> {
        match &*self.key_index.lock() {
            IndexState::Built(index) => Some(index.len()),
            _ => None,
        }
    }
}
