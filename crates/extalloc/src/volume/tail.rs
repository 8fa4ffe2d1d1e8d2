//! Appends kept back until the commit: a write that grows a file from its end inside its
//! last block, already mapped and written (a directory log's record, a short append), is
//! held beside the file instead of going to the device at once, and the next commit
//! writes every such tail before its flush (`Volume::commit_locked`): one device write per
//! block per commit where a directory log took one per namespace change.
//!
//! Why nothing is lost that was not lost before: such bytes lie past the file's committed
//! size, so nothing durable shows them before a commit logs the size that covers them, and
//! that commit writes them first. A crash, or the process killed, before it loses them
//! with that size, as it lost the bytes written then. Bytes over the file's data (an
//! overwrite) are never kept back.
//!
//! Data structures: `Tail` (`file.rs`) in a file's `VFile::tail` (its first byte in the
//! file and on the device, its bytes: one run inside one block, ending at the file's size);
//! `Volume::tails`, the ids of files that may hold one.
//!
//! Invariant: a file's tail lies inside one block the file maps written and ends at the
//! file's size; every file holding a tail is in `tails`; a commit starts by writing every
//! tail. A read lays the tail over the bytes it read (`read.rs`); every other change of
//! the file's blocks or size (a chunk that does not continue the tail) writes it first
//! ([`Volume::settle_tail`]); a new attribute blob and a close (preallocations given
//! back) touch no block and leave it. A failed tail write fails its commit (or the call
//! that needed it written), which records nothing; the volume then latches, so no later
//! commit is believed (`docs/format.md`, "A failed write or flush latches the store"),
//! and the tail stays, so reads and the file's size still agree with what callers were
//! told until the volume is closed.
//!
//! Lock order: a file's mutex, then `tails` (a leaf). A commit holds the gate written,
//! takes the ids out of `tails`, lets go, then locks each file.

use super::file::{Tail, VFile};
use super::state::Volume;
use crate::error::Result;

impl Volume {
    /// Whether a write of `len` bytes at `pos` continues `f`'s tail: it starts where the
    /// tail ends, at the file's size, and ends in the tail's block.
    pub(super) fn continues_tail(&self, f: &VFile, pos: u64, len: u64) -> bool {
        let bs = self.block_size;
        f.tail.as_ref().is_some_and(|t| {
            t.end() == pos && pos == f.size && len > 0 && (pos + len - 1) / bs == t.pos / bs
        })
    }

    /// Keeps `bytes`, appended at `pos` of file `id` (device byte `at`), back as its tail
    /// or as more of it. Called before the size grows to their end.
    pub(super) fn keep_tail(&self, f: &mut VFile, id: u64, pos: u64, at: u64, bytes: &[u8]) {
        let bs = self.block_size;
        // What it relies on: an append from the end, inside one block, continuing the
        // tail if there is one.
        assert!(
            pos == f.size && (pos + bytes.len() as u64).div_ceil(bs) - pos / bs <= 1,
            "a tail append of file {id} at {pos}, size {}",
            f.size
        );
        match &mut f.tail {
            Some(t) => {
                assert!(
                    t.end() == pos && t.at + t.bytes.len() as u64 == at,
                    "file {id}'s tail continued at {pos}"
                );
                t.bytes.extend_from_slice(bytes);
            }
            None => {
                f.tail = Some(Tail {
                    pos,
                    at,
                    bytes: bytes.to_vec(),
                });
            }
        }
        self.tails.lock().insert(id);
    }

    /// Writes `f`'s tail to the device now, if it holds one; after a failed write it
    /// stays (module documentation).
    pub(super) fn settle_tail(&self, f: &mut VFile) -> Result<()> {
        let Some(t) = &f.tail else {
            return Ok(());
        };
        // What it relies on: the tail ends at the size, inside the size's block.
        debug_assert!(
            t.end() == f.size && (t.end() - 1) / self.block_size == t.pos / self.block_size,
            "a tail {}..{} of a file of {} bytes",
            t.pos,
            t.end(),
            f.size
        );
        self.write_data(&t.bytes, t.at)?;
        f.tail = None;
        Ok(())
    }

    /// Under the gate (written): writes every file's tail (the commit's first step).
    pub(super) fn write_tails(&self) -> Result<()> {
        debug_assert!(
            self.gate.is_locked_exclusive(),
            "tails written, the gate open"
        );
        let ids = std::mem::take(&mut *self.tails.lock());
        let mut left = ids.iter();
        while let Some(&id) = left.next() {
            // A file unlinked since its append wrote its tail then (`chunk`): none here.
            let Some(file) = self.files.read().get(&id).cloned() else {
                continue;
            };
            let mut f = file.lock();
            if let Err(e) = self.settle_tail(&mut f) {
                // This one and the rest stay listed for the next commit.
                let mut tails = self.tails.lock();
                tails.insert(id);
                tails.extend(left);
                return Err(e);
            }
        }
        Ok(())
    }
}
