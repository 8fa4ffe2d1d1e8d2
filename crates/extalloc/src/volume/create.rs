//! Making a volume's files: [`Volume::create`], [`Volume::create_placed`] (first blocks in
//! the group a key picks) and [`Volume::create_at`] (an id handed out before whose file is
//! gone, for a repair).
//!
//! Data structures: none of their own. Invariant: an id names at most one file, and a
//! fresh id is never one handed out before (`next_id` only grows). Locks: the gate (read),
//! then `meta`, released before the file table's lock.

use super::file::VFile;
use super::publish::check_caller_attr;
use super::record::Change;
use super::state::Volume;
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::sync::Arc;

impl Volume {
    /// Creates an empty file with `attr` (at most [`MAX_ATTR_BYTES`](crate::volume::MAX_ATTR_BYTES)); returns its id. Its
    /// first blocks follow the file layer's stream goals (by id).
    pub fn create(&self, attr: &[u8]) -> Result<u64> {
        self.create_with(attr, None)
    }

    /// A new file with `attr` holding `data` (a blob written whole), published atomically
    /// (`publish.rs`): made pending, its space allocated at once (`fallocate`: one extent
    /// where the free space allows), written, its unused preallocation given back
    /// (`close_file`), then given `attr`, so no listing and no crash ever shows part of it
    /// and no space stays held for it. Returns its id; durable at the next commit. On failure
    /// (`NoSpace` with the device full) the pending file is unlinked again (or, if that
    /// fails too, left pending and hidden for the next open to remove): nothing is left.
    pub fn put(&self, attr: &[u8], data: &[u8]) -> Result<u64> {
        super::publish::check_caller_attr(attr)?;
        self.put_then(data, |id| self.publish(id, attr))
    }

    /// A put's steps with its own last one: a pending file made and filled with `data` as
    /// [`Volume::put`] fills it, then `publish(id)`. On failure the file is unlinked again
    /// if it is still pending (or, if that fails too, left pending and hidden for the next
    /// open to remove); a file `publish` made visible before failing stays.
    pub(super) fn put_then(
        &self,
        data: &[u8],
        publish: impl FnOnce(u64) -> Result<()>,
    ) -> Result<u64> {
        let id = self.create_pending()?;
        let written = match data.is_empty() {
            true => Ok(()),
            false => self
                .fallocate(id, super::Fallocate::Allocate, 0, data.len() as u64)
                .and_then(|()| self.write(id, 0, data))
                .and_then(|()| self.close_file(id)),
        };
        // Checked before it is published: once it is, a keyed put may replace it at once.
        debug_assert!(
            written.is_err() || self.size(id).ok() == Some(data.len() as u64),
            "written whole"
        );
        debug_assert!(
            written.is_err()
                || self
                    .extents(id)
                    .map_or(true, |m| m.iter().all(|e| !e.unwritten)),
            "every block the put mapped is written"
        );
        if let Err(e) = written.and_then(|()| publish(id)) {
            if self.is_pending(id) {
                // The unlink's own failure is not the caller's news: the write's error is.
                let _ = self.unlink(id);
            }
            return Err(e);
        }
        Ok(id)
    }

    /// [`Volume::create`] with a placement key (a parent directory's id, a tenant, a
    /// bucket): the file's first blocks go to the group the key picks, so files of one key
    /// start near each other and files of different keys in different groups, as ext4
    /// spreads directories over groups (Orlov) and XFS rotates allocation groups. Kept with
    /// the file.
    pub fn create_placed(&self, attr: &[u8], key: u64) -> Result<u64> {
        self.create_with(attr, Some(key))
    }

    fn create_with(&self, attr: &[u8], placement: Option<u64>) -> Result<u64> {
        self.create_as(attr, placement, None)
    }

    /// Creates an empty file with `attr` under id `id`, one that was handed out before and
    /// is gone (for a repair that gives back a lost file, such as a file system's root).
    /// Refused (nothing changed) for id 0 or an id never handed out
    /// ([`Error::FileIdNeverHandedOut`]), or the id of a file that exists
    /// ([`Error::FileExists`]).
    pub fn create_at(&self, id: u64, attr: &[u8]) -> Result<()> {
        self.create_as(attr, None, Some(id)).map(drop)
    }

    fn create_as(&self, attr: &[u8], placement: Option<u64>, at: Option<u64>) -> Result<u64> {
        check_caller_attr(attr)?;
        self.make_file(attr, placement, at)
    }

    /// Makes the file (`attr` checked by the caller): an id, the table entry, the changes.
    pub(super) fn make_file(
        &self,
        attr: &[u8],
        placement: Option<u64>,
        at: Option<u64>,
    ) -> Result<u64> {
        let _admitted = self.ensure_room()?;
        let _open = self.gate.read();
        self.check_open()?;
        let exists = at.is_some_and(|id| self.file(id).is_ok());
        let id = {
            let mut m = self.meta.lock();
            match at {
                Some(id) if exists => return Err(Error::FileExists { id }),
                Some(id) if id == 0 || id >= m.next_id => {
                    return Err(Error::FileIdNeverHandedOut {
                        id,
                        next_id: m.next_id,
                    });
                }
                Some(id) => id,
                None => {
                    m.next_id += 1;
                    m.next_id - 1
                }
            }
        };
        let vf = VFile::new(self.store.create_file(id), attr.to_vec(), placement);
        {
            let mut files = self.files.write();
            if files.contains_key(&id) {
                // Only a made-again id can meet a file: another call made it meanwhile.
                assert!(at.is_some(), "a fresh id {id} names a file already");
                return Err(Error::FileExists { id });
            }
            files.insert(id, Arc::new(Mutex::new(vf)));
        }
        let mut changes = vec![Change::Create {
            id,
            attr: attr.to_vec(),
        }];
        if let Some(key) = placement {
            changes.push(Change::Placement { id, key });
        }
        self.log(&changes);
        Ok(id)
    }
}
