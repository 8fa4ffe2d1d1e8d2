//! The [`Store`] itself: its fields, the transaction boundary ([`Boundary`], closed as
//! [`Closed`]), the checkpoint hook's type and [`OpenTiming`]; what each field holds and
//! the lock order are in the parent module. Its calls live in the parent and the other
//! files; this file names only the leaf files its fields come from.

use super::claim::{InUse, OpenClaim};
use super::discard_queue::Discards;
use super::handles::Handles;
use super::ops::{ClosedBoundary, OpShards};
use crate::disk::device::Device;
use crate::disk::format::Superblock;
use crate::disk::journal::Journal;
use crate::error::Result;
use crate::files::Files;
use parking_lot::{Mutex, RwLock};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// The transaction boundary: callers take their shard's lock for reading (no shared write
/// between threads of different shards); a commit takes every shard's for writing, in order.
pub(super) struct Boundary {
    pub(super) shards: Box<[crossbeam_utils::CachePadded<RwLock<()>>]>,
}

impl Boundary {
    pub(super) fn new() -> Self {
        Boundary {
            shards: (0..crate::alloc::SHARDS)
                .map(|_| crossbeam_utils::CachePadded::new(RwLock::new(())))
                .collect(),
        }
    }

    pub(super) fn read(&self, shard: usize) -> parking_lot::RwLockReadGuard<'_, ()> {
        self.shards[shard % self.shards.len()].read()
    }

    /// Closes the boundary: every shard for writing, then `ops` fenced, so that no
    /// allocation on its open path ([`OpShards::allocating_open`]) runs meanwhile either.
    pub(super) fn close<'a>(&'a self, ops: &'a OpShards) -> Closed<'a> {
        let guards: Vec<_> = self.shards.iter().map(|s| s.write()).collect();
        debug_assert!(self.shards.iter().all(|s| s.is_locked_exclusive()));
        let fenced = ops.fence(&guards);
        Closed {
            fenced,
            _guards: guards,
        }
    }
}

/// The closed boundary ([`Boundary::close`]); dropping it opens it again.
pub(super) struct Closed<'a> {
    /// The witness `OpShards::take` and `put_back` require. Declared before the write
    /// guards: it drops first, reopening the open path while they are still held.
    pub(super) fenced: ClosedBoundary<'a>,
    pub(super) _guards: Vec<parking_lot::RwLockWriteGuard<'a, ()>>,
}

/// Called by every checkpoint before the journal's tail moves (see
/// [`Store::set_checkpoint_hook`]): writes the caller's own tables and returns its new root.
pub type CheckpointHook = Box<dyn Fn() -> Result<Vec<u8>> + Send + Sync>;

/// The persistent allocator: the device, the journal, the file layer over the allocator core
/// and the open transaction. Every change goes through its calls, so the journal records it.
pub struct Store {
    /// The device, through `latch`.
    pub(super) dev: Arc<dyn Device>,
    /// The latch every write goes through: the first failed write or flush stops all
    /// later ones ([`Store::io_failure`]).
    pub(super) latch: Arc<crate::disk::device::FenceDevice>,
    pub(super) sb: Mutex<Superblock>,
    /// Blocks `0..metadata_end` (superblock, journal, descriptors, bitmaps) and the backup
    /// superblock are the device's own: never freed, never handed out.
    pub(super) metadata_end: u64,
    pub(super) backup_block: u64,
    /// The journal damage an open accepted: the first record lost and the intact records
    /// after it not replayed ([`Store::open_accepting_journal_loss`]).
    pub(super) journal_loss: Option<(u64, u64)>,
    /// `STATE_JOURNAL_LOST` was set at open: an earlier open's accepted loss that no
    /// repair finished ([`Store::journal_loss_earlier`]).
    pub(super) journal_loss_earlier: bool,
    /// The file layer over the allocator core: plain extents go to the core, file data
    /// through the layer (its preallocations are reserved, never journaled).
    pub(super) files: Files,
    pub(super) journal: Journal,
    /// The open transaction's changes, sharded by the caller's stats shard so concurrent
    /// callers do not share one lock (see [`OpShards`]).
    pub(super) ops: OpShards,
    pub(super) boundary: Boundary,
    /// Shared commits and checkpoints take it for writing; callers' own transactions
    /// append their records under it for reading (the journal orders them), so they do
    /// not wait for each other's writes, only for a checkpoint.
    pub(super) commit_lock: RwLock<()>,
    /// How long `open` took, and how much of it was the journal replay.
    pub(super) open_timing: OpenTiming,
    /// An allocation that finds no space while frees wait commits the open transaction and
    /// retries (see [`Store::set_forced_commits`]).
    pub(super) forced_commits: std::sync::atomic::AtomicBool,
    /// The last transaction (its `Allocator::seal` number) whose record was appended: frees
    /// up to it may be released once the journal is durable. A failed commit's frees carry
    /// a later number and stay pending until a record holds them.
    pub(super) recorded_seal: AtomicU64,
    /// The largest record the journal holds (`Journal::max_record_bytes`).
    pub(super) max_transaction_bytes: u64,
    /// Blocks kept for the superuser in the `statfs` figures.
    pub(super) root_reserved_blocks: AtomicU64,
    /// The callers' own transactions ([`Store::begin`]).
    pub(super) handles: Handles,
    /// Committed frees held for the caller's discards (`discard.rs`).
    pub(super) discards: Discards,
    /// Runs reserved for the layer above's metadata (`reserve.rs`).
    pub(super) meta_reserved: Mutex<Vec<crate::geometry::Extent>>,
    /// The root the next checkpoint writes with the journal tail ([`Store::set_root`]),
    /// and the hook that supplies it instead ([`Store::set_checkpoint_hook`]).
    pub(super) pending_root: Mutex<Option<Vec<u8>>>,
    pub(super) checkpoint_hook: Mutex<Option<CheckpointHook>>,
    /// The owner that left the device marked in use (it did not close it), if any.
    pub(super) unclean_close: Option<u64>,
    /// This store's in-use mark on the media and its heartbeat (`claim.rs`).
    pub(super) in_use: InUse,
    /// Dropped as a crash would leave it ([`Store::abandon`]): the mark stays.
    pub(super) abandoned: std::sync::atomic::AtomicBool,
    /// This store's claim on its device object (dropped last: a reopen waits for it).
    pub(super) _claim: OpenClaim,
}

impl Drop for Store {
    /// A clean close: the device is marked no longer in use (best effort: if the write
    /// fails, the next open finds it in use and says the close was not clean, which the
    /// journal makes safe either way).
    fn drop(&mut self) {
        // No beat after the mark is cleared.
        self.in_use.stop();
        debug_assert!(!self.in_use.beating(), "the heartbeat outlives the store");
        if self.abandoned.load(std::sync::atomic::Ordering::Acquire) {
            return; // the mark and its owner record stay, as after a crash
        }
        let mut sb = self.sb.lock();
        sb.state &= !crate::disk::format::STATE_IN_USE;
        sb.generation += 1;
        let _ = crate::disk::format::write_superblock(self.dev.as_ref(), &sb)
            .and_then(|()| crate::disk::format::clear_owner(self.dev.as_ref()))
            .and_then(|()| self.dev.flush());
    }
}

/// Where the time of `Store::open` went.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OpenTiming {
    /// Seconds `open` took in all.
    pub total_seconds: f64,
    /// Of them, reading the journal and applying its records.
    pub replay_seconds: f64,
    /// Records replayed.
    pub records_replayed: u64,
    /// Group bitmaps read during the open (the groups the records touch).
    pub bitmaps_loaded: u64,
}
