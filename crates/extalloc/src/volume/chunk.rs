//! How a file call runs: one chunk at a time, each under the gate (read) and the file's
//! mutex with room made in the transaction first, its changes logged before both are let
//! go (`chunk`); and, where space waits for a commit (frees pending, or the room kept for
//! the changed files' checkpoint), a sync or checkpoint and one more try
//! (`retry_after_sync`). The calls themselves are in `io.rs`, `delalloc.rs` and the rest.
//!
//! Data structures: none of their own. Invariant: a chunk's allocations, frees and logged
//! changes land in one transaction, and a chunk changes its own file's map only. Locks:
//! `mod.rs` (the gate, then the file's mutex).

use super::file::VFile;
use super::record::Change;
use super::state::Volume;
use crate::error::Result;

impl Volume {
    /// Runs `op` on file `id` under the gate (read) and the file's mutex, after making room
    /// in the transaction, and logs the changes it returns. A file unlinked meanwhile is
    /// [`Error::NoSuchFile`]. The file's tail kept back (`tail.rs`) is written first where
    /// `tail` says so.
    pub(super) fn chunk(
        &self,
        id: u64,
        tail: TailFirst,
        op: impl FnOnce(&Volume, &mut VFile) -> Result<Vec<Change>>,
    ) -> Result<()> {
        let _admitted = self.ensure_room()?;
        let _open = self.gate.read();
        self.check_open()?;
        let file = self.file(id)?;
        let mut f = self.lock_loaded(&file)?;
        if tail == TailFirst::Written {
            self.settle_tail(&mut f)?;
        }
        let changes = op(self, &mut f)?;
        // What it leaves: a tail ends at the size (a chunk that kept it grew both).
        debug_assert!(
            f.tail.is_none() || tail == TailFirst::Kept,
            "file {id}'s tail written before a chunk that does not keep it"
        );
        // A chunk changes its own file's map only.
        debug_assert!(
            changes
                .iter()
                .filter_map(super::file::maps_of)
                .all(|m| m == id),
            "a chunk of file {id} mapped another file"
        );
        if changes.iter().any(|c| super::file::maps_of(c).is_some()) {
            f.map_dirty = true;
        }
        self.log(&changes);
        Ok(())
    }

    /// [`Volume::chunk`], syncing and trying again when it finds no space while frees wait
    /// for a commit ([`Volume::retry_after_sync`]).
    pub(super) fn chunk_committing(
        &self,
        id: u64,
        op: impl Fn(&Volume, &mut VFile) -> Result<Vec<Change>>,
    ) -> Result<()> {
        self.retry_after_sync(|| self.chunk(id, TailFirst::Written, &op))
    }

    /// Runs `op`; while it finds no space that a commit would remedy (frees wait for one,
    /// or the room kept for the changed files' checkpoint stands in the way, `room.rs`)
    /// and the caller is not inside an atomic group (a sync there would split it), syncs
    /// (or checkpoints) and runs it again: the store's commit remedy and bound
    /// ([`crate::store::remedy::retry_after_commit`]), with the volume's sync as the commit.
    /// A failed sync's error is returned.
    pub(crate) fn retry_after_sync<T>(&self, op: impl FnMut() -> Result<T>) -> Result<T> {
        // Set when the room kept for changed files is what stands in the way: it comes
        // back once they are written (a checkpoint; its old nodes at the next commit,
        // which the next round makes).
        let write_tree = std::cell::Cell::new(false);
        crate::store::remedy::retry_after_commit(
            op,
            |e| {
                write_tree.set(self.checkpoint_frees_room(e));
                !self.inside_group() && (self.store.commit_frees_space(e) || write_tree.get())
            },
            || match write_tree.get() {
                true => self.checkpoint(),
                false => self.sync(),
            },
        )
    }
}

/// What a chunk does with its file's tail kept back (`tail.rs`) before its call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TailFirst {
    /// Writes it: the call may touch the file's blocks or size.
    Written,
    /// Leaves it: a write (which writes it itself unless it continues it), a new blob, a
    /// close.
    Kept,
}
