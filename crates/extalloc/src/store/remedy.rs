//! The commit remedy for no space, shared by every layer that owns commits: the store with
//! forced commits on ([`Store::allocate`] and the other allocating calls), the volume's
//! chunks (`volume/io.rs`) and the buffered writes (`writeback/`). Each commits its own way
//! (the store its open transaction, the volume and writeback a volume sync, which logs the
//! volume's changes with it) but with the same condition and the same bound.
//!
//! The file layer's remedy (discarding preallocations, `files/`) is another one, with its
//! own rounds; the core's `Allocator::allocate_committing` (an allocator in memory, whose
//! commit is a call, not a journal record) commits once inside its allocation loop.
//! `docs/architecture.md`, "No space", lists the three.

use super::state::Store;
use crate::error::{Error, Result};

/// Most commits one call makes to remedy no space before it reports the error.
///
/// Why more than one: a commit releases the frees sealed in it, but frees other threads
/// make while it waits for its flush go to the next transaction, and another thread may
/// take what it released before the retry. With two threads refilling a device, one
/// commit was not enough (the retry found nothing with a quarter of a million blocks
/// pending). Why a bound at all: a commit after the first is made only because frees wait
/// again, so other threads are freeing and allocating; the bound stops one call from
/// chasing them for ever. 64 commits are milliseconds on a fast device and let the
/// two-thread refill (`store::tests::two_threads_refill_through_forced_commits`) pass.
pub(crate) const NO_SPACE_COMMITS: usize = 64;

/// Runs `op`; while it fails with an error a commit can remedy (`commit_helps`), commits
/// (`commit`) and runs it again, at most [`NO_SPACE_COMMITS`] times. Returns `op`'s last
/// result, or the error of a commit that failed (`op`'s failure stays as it left things).
pub(crate) fn retry_after_commit<T>(
    mut op: impl FnMut() -> Result<T>,
    commit_helps: impl Fn(&Error) -> bool,
    mut commit: impl FnMut() -> Result<()>,
) -> Result<T> {
    let mut result = op();
    for _ in 0..NO_SPACE_COMMITS {
        match &result {
            Err(e) if commit_helps(e) => {}
            _ => break,
        }
        commit()?;
        result = op();
    }
    result
}

impl Store {
    /// True if `e` is no space that a commit would remedy: blocks wait for a commit beyond
    /// those held for a discard (a commit does not release those; the device's discard
    /// does).
    pub(crate) fn commit_frees_space(&self, e: &Error) -> bool {
        matches!(e, Error::NoSpace { pending_blocks, .. }
            if *pending_blocks > self.discards.held_blocks())
    }
}
