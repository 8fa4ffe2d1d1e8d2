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
use super::runner::Runner;
use super::steps::Touched;
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
        let Some(old) = old else {
            let flushes = self.dev.flushes.load(Relaxed);
            let result = self.vol().put(b"sequence", &data);
            // Any commit inside came before the publish was logged: everything the model
            // held before the put is durable, the new file durably absent.
            self.committed_inside(flushes);
            if result.is_err() {
                // A failed put whose own unlink failed too leaves its file pending (as its
                // doc says): hidden, removed at the next open.
                let left: Vec<u64> = self.vol().pending();
                self.leftovers.extend(left);
            }
            return self.published(result.map(|id| (id, true)), data, None);
        };
        let flushes = self.dev.flushes.load(Relaxed);
        let mut stuck = None;
        let pending = self.vol().create_pending().and_then(|id| {
            self.vol()
                .write(id, 0, &data)
                .map(|()| id)
                .inspect_err(|_| {
                    if self.vol().unlink(id).is_err() {
                        stuck = Some(id);
                    }
                })
        });
        self.leftovers.extend(stuck);
        self.committed_inside(flushes);
        let id = match pending {
            Ok(id) => id,
            Err(e) => return self.published(Err(e), data, None),
        };
        let flushes = self.dev.flushes.load(Relaxed);
        let result = self.vol().publish_replacing(id, b"sequence", old);
        let swapped = !self.vol().is_pending(id);
        if result.is_err() && !swapped && self.vol().unlink(id).is_err() {
            self.leftovers.insert(id);
        }
        let inside = self.dev.flushes.load(Relaxed) != flushes;
        self.committed_inside(flushes);
        let before = self.model.current.get(&old).cloned();
        let outcome = match result {
            Ok(()) => Ok((id, true)),
            // The swap stands; only freeing the old file failed: it stays pending.
            Err(_) if swapped => {
                self.leftovers.insert(old);
                Ok((id, false))
            }
            Err(e) => Err(e),
        };
        self.published(outcome, data, Some(old))?;
        if inside && swapped {
            // A commit inside may have come before the swap (making room for its group) or
            // after it (freeing the old file): either pair may be durable.
            self.model
                .durable
                .insert(id, vec![None, self.model.current.get(&id).cloned()]);
            self.model.durable.insert(old, vec![before, None]);
        }
        Ok(Touched::Accounted)
    }

    /// A commit the volume made inside the call since `flushes`: everything the model
    /// holds (not yet changed by the call) is durable.
    fn committed_inside(&mut self, flushes: u64) {
        if self.dev.flushes.load(Relaxed) != flushes {
            self.summary.commits_inside += 1;
            self.model.commit_all();
        }
    }

    /// The model after a put that returned `result` ((id, whole) on success; `whole` false
    /// when only freeing the replaced file failed).
    fn published(
        &mut self,
        result: crate::error::Result<(u64, bool)>,
        data: Vec<u8>,
        old: Option<u64>,
    ) -> Step {
        match result {
            Ok((id, whole)) => {
                if !whole {
                    self.summary.no_space_freeing += 1;
                }
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
}
