//! Atomic groups: several volume calls that commit together or not at all.
//!
//! A caller whose change spans several calls (a file system's rename: two directory
//! records and three attribute blobs) opens a group with [`Volume::atomic`]. Until the
//! group ends, no commit of the volume, by any thread, falls between two of its calls:
//! their changes reach the journal in one record, or none of them does.
//!
//! - A commit (`sync`, `checkpoint`, `close`) takes `groups` written before the gate; a
//!   group holds `groups` read for its whole length, so a commit waits for the groups under
//!   way and a group opened after a waiting commit waits for it.
//! - Inside a group the calls of its own thread never commit: the room they need in the
//!   open transaction is made before the group starts (`chunks` chunk calls at most), and
//!   a call that finds no space while frees wait for a commit fails instead of committing.
//! - A group dropped without [`Atomic::finish`] may have left its change half made: the
//!   volume then refuses every later commit ([`Error::Aborted`]), as ext4 aborts its
//!   journal, so the half change is never durable. A caller that undoes its own partial
//!   steps inside the group and then finishes it loses nothing.
//!
//! Data structures: `Volume::groups` (the lock), `Volume::aborted` (why commits stop), and
//! a thread-local list of the groups this thread is inside (volume identity, chunk calls
//! left in its budget).
//!
//! Invariant: a thread inside a group of a volume never commits that volume, and makes at
//! most the chunk calls it reserved room for.
//!
//! Lock order: `groups` -> `gate` -> a file's mutex (see `mod.rs`). A thread inside a group
//! must not wait for anything a committer may hold while it waits for `groups`: a
//! writeback context holds its file's cache mutex then (`writeback/`), so a group calls the
//! volume directly, never through the cache.

use super::state::{Volume, CHUNK_BUDGET};
use crate::error::{Error, Result};
use parking_lot::RwLockReadGuard;
use std::cell::RefCell;

thread_local! {
    /// The groups this thread is inside: (volume identity, chunk calls left).
    static INSIDE: RefCell<Vec<(u64, u64)>> = const { RefCell::new(Vec::new()) };
}

/// An open atomic group of a [`Volume`] (see the module documentation). Its calls are the
/// volume's own; the group only keeps commits out until [`Atomic::finish`].
#[must_use = "a group dropped without finish() stops the volume's commits"]
pub struct Atomic<'a> {
    vol: &'a Volume,
    /// `None` for a group nested in another of this thread (the outer one holds the lock).
    _held: Option<RwLockReadGuard<'a, ()>>,
    /// The group's calls, counted in the room kept for the tree until it ends (none for a
    /// nested group).
    _admitted: super::room::Admitted<'a>,
    finished: bool,
}

impl Volume {
    /// Opens an atomic group for at most `chunks` chunk calls of this thread (a `create`,
    /// `set_attr` or `unlink` of a small file is one; a `write` or `fallocate` one per 16
    /// blocks): room for them is made in the open transaction first, committing if needed,
    /// then commits wait until the group ends. Nested groups share the outer one.
    ///
    /// Fails, changing nothing, when the group would need more than one journal record
    /// holds ([`Error::AtomicGroupTooLarge`]), making room fails (the commit's error) or
    /// the volume has stopped committing ([`Error::Aborted`]).
    pub fn atomic(&self, chunks: u64) -> Result<Atomic<'_>> {
        assert!(chunks > 0, "an atomic group makes at least one call");
        if self.inside_group() {
            self.debit_group(0);
            return Ok(Atomic {
                vol: self,
                _held: None,
                _admitted: super::room::Admitted::inside_group(self),
                finished: false,
            });
        }
        self.check_not_aborted()?;
        let bytes = chunks * CHUNK_BUDGET;
        let most = self.store.max_transaction_bytes() / 4;
        if bytes > most {
            return Err(Error::AtomicGroupTooLarge {
                chunks,
                bytes,
                max: most,
            });
        }
        let admitted = self.make_room(bytes)?;
        let held = self.groups.read();
        INSIDE.with(|g| g.borrow_mut().push((self.identity, chunks)));
        Ok(Atomic {
            vol: self,
            _held: Some(held),
            _admitted: admitted,
            finished: false,
        })
    }

    /// Is this thread inside an atomic group of this volume?
    pub(crate) fn inside_group(&self) -> bool {
        INSIDE.with(|g| g.borrow().iter().any(|&(v, _)| v == self.identity))
    }

    /// One chunk call of this thread's group is made: its budget shrinks by `n`. Making
    /// more calls than the group reserved room for is a bug in the caller.
    pub(super) fn debit_group(&self, n: u64) {
        INSIDE.with(|g| {
            let mut g = g.borrow_mut();
            let slot = g
                .iter_mut()
                .find(|(v, _)| *v == self.identity)
                .expect("debit_group runs inside a group");
            assert!(
                slot.1 >= n,
                "an atomic group made more chunk calls than it reserved room for"
            );
            slot.1 -= n;
        });
    }

    /// Commits are refused once a group was left half made.
    pub(super) fn check_not_aborted(&self) -> Result<()> {
        match &*self.aborted.lock() {
            Some(reason) => Err(Error::Aborted {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }
}

impl Atomic<'_> {
    /// Ends the group: its changes commit together with the next commit.
    pub fn finish(mut self) {
        self.finished = true;
    }
}

impl Drop for Atomic<'_> {
    fn drop(&mut self) {
        if self._held.is_none() {
            // Nested: the outer group decides; an unfinished inner group still aborts.
            if !self.finished {
                self.vol.abort("a nested atomic group ended unfinished");
            }
            debug_assert!(self.finished || self.vol.aborted.lock().is_some());
            return;
        }
        INSIDE.with(|g| {
            let mut g = g.borrow_mut();
            let at = g
                .iter()
                .rposition(|&(v, _)| v == self.vol.identity)
                .expect("a group's thread still lists it");
            g.remove(at);
        });
        if !self.finished {
            self.vol
                .abort("an atomic group ended without finishing (a call inside it failed)");
        }
        // Unfinished, the volume refuses every commit from now on.
        debug_assert!(self.finished || self.vol.aborted.lock().is_some());
    }
}

impl Volume {
    /// Why commits stopped, if they did: a change left half made in the open transaction
    /// (an atomic group ended unfinished after a call inside it failed). Nothing more
    /// reaches the device; a remount recovers the last commit.
    pub fn aborted(&self) -> Option<String> {
        self.aborted.lock().clone()
    }

    /// Stops every later commit: a change was left half made in the open transaction.
    pub(super) fn abort(&self, reason: &str) {
        debug_assert!(!reason.is_empty(), "an abort says why");
        let mut a = self.aborted.lock();
        if a.is_none() {
            *a = Some(reason.to_string());
        }
    }
}
