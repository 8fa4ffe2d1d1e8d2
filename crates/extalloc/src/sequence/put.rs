//! The atomic put of the sequence interpreter (`volume/publish.rs`): an object written
//! into a pending file and published whole, alone or in place of another file.
//!
//! What the model says: a put changes nothing durable until a later commit. A commit the
//! volume makes inside a put (making room for its chunks) makes every other file durable
//! as it was before the put, the pending file durably absent (an open removes it) and a
//! replaced file still durable as it was; the published file and the replacement's unlink
//! reach the journal together in a later commit, so after a power loss either the new
//! file is there whole (and the old one gone) or the new one is absent and the old one
//! as it was. A put that finds no space leaves no file and changes nothing the model
//! holds. Data structures: none of their own. Invariant: no pending file is left after
//! the event. Locks: none.

use super::model;
use super::steps::Touched;
use super::Runner;
use crate::error::Error;
use std::sync::atomic::Ordering::Relaxed;

type Step = std::result::Result<Touched, String>;

impl Runner {
    /// Puts `pattern(seed, len)`, in place of `old` if given.
    pub(super) fn put(&mut self, old: Option<u64>, len: usize, seed: u8) -> Step {
        if old.is_none() && self.model.current.len() >= 16 {
            self.summary.skipped += 1;
            return Ok(Touched::Accounted);
        }
        let data = model::pattern(u64::from(seed) << 40 | len as u64, len);
        let flushes = self.dev.flushes.load(Relaxed);
        let result = match old {
            None => self.vol().put(b"sequence", &data),
            Some(old) => self.replace(old, &data),
        };
        if self.dev.flushes.load(Relaxed) != flushes {
            // Committed inside: everything the model held before the put is durable.
            self.summary.commits_inside += 1;
            self.model.commit_all();
        }
        match result {
            Ok(id) => {
                if self.model.current.insert(id, data).is_some() {
                    return Err(format!("put returned id {id}, which a file has"));
                }
                self.model.touched(id);
                if let Some(old) = old {
                    self.model.current.remove(&old);
                    self.model.touched(old);
                    self.unlinked = Some(old);
                }
            }
            Err(Error::NoSpace { .. }) => self.summary.no_space += 1,
            Err(e) => return Err(format!("put (replacing {old:?}): {e}")),
        }
        Ok(Touched::Accounted)
    }

    /// A pending file written with `data`, then published in place of `old`; on failure
    /// the pending file is unlinked (`Volume::put`'s promise, kept by hand here).
    fn replace(&self, old: u64, data: &[u8]) -> crate::error::Result<u64> {
        let vol = self.vol();
        let id = vol.create_pending()?;
        let done = vol
            .write(id, 0, data)
            .and_then(|()| vol.publish_replacing(id, b"sequence", old));
        if let Err(e) = done {
            let _ = vol.unlink(id);
            return Err(e);
        }
        Ok(id)
    }
}
