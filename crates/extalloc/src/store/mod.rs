//! A persistent allocator: an [`Allocator`] whose state lives on a [`Device`] in the format
//! of `docs/format.md`, changed through journaled transactions.
//!
//! - `allocate` / `free` record their change in the open transaction (frees stay pending as
//!   in the allocator).
//! - `commit(payload)` ends the transaction: its changes and the caller's payload become one
//!   journal record; once it is durable (concurrent committers share flushes) the
//!   transaction's frees become reusable.
//! - `checkpoint()` writes every group's bitmap and descriptor home and moves the journal's
//!   tail past everything written; a full journal checkpoints instead of failing.
//! - `open` reads the home state and replays the records after the tail, stopping at a torn
//!   or corrupt one; it returns the replayed records so the caller can redo its own metadata
//!   from its durable root (`root`, written with the tail by each checkpoint, which first
//!   calls the caller's checkpoint hook).
//! - `begin` gives a caller a transaction of its own (`txn.rs`); `statfs` reports the
//!   figures a file system shows (`statfs.rs`).
//!
//! Files: this one holds the [`Store`]'s calls (allocate, free, the file calls, commit);
//! `state.rs` the `Store` itself (its fields, the transaction boundary), which the other
//! files name instead of this one; `txn.rs` callers' own transactions (their registry in
//! `handles.rs`); `discard.rs` discard notices (their queue in `discard_queue.rs`);
//! `recovery.rs` opens a store (home state, journal replay); `checkpoint.rs` writes
//! the changed groups home and empties the journal; `claim.rs` keeps the in-use mark (who
//! has the device open, its heartbeat; a live owner refuses the open); `view.rs` is the read-only
//! [`AllocatorView`]; `fsck.rs` checks a device offline, without opening a store. All of them
//! sit on `disk/` (devices, format, journal) and on the file layer and the core.
//!
//! Data structures: the [`Store`] owns the device, the superblock in memory (`sb`), the
//! [`Journal`], the file layer over the allocator core ([`Files`]) and the open
//! transaction: its ops, sharded by the caller's stats shard (`OpShards`; an op that
//! continues the shard's last one in its group grows it), fenced by the transaction
//! boundary (`Boundary`, one `RwLock` per shard). It keeps what journal damage its open
//! accepted (`journal_loss`, fixed at open).
//!
//! Invariant: every change to allocator state goes through the store and joins the open
//! transaction, so home state plus the records after the journal's tail are every committed
//! transaction. The journal records only extents handed to a caller, never blocks a
//! preallocation reserved; a transaction's frees stay pending until its record is durable;
//! the device's own metadata is never freed. What the store says must be true: once
//! `commit` returns `Ok`, the transaction survives a crash whole; once `open` returns `Ok`,
//! memory is the home state with every intact record replayed.
//!
//! Lock order: `commit_lock` -> `boundary` (write: every shard, in order) -> `sb` -> the file
//! layer's and the allocator's locks (their own order, `docs/architecture.md`). `allocate`,
//! `free` and the file calls take one `boundary` shard for reading instead, so a
//! transaction's boundary (the ops taken and the allocator's transaction number) is exact.
//! `allocate` first tries its open path, which takes only its ops shard's lock: closing the
//! boundary takes the write locks, then passes once through every ops shard's lock with
//! the boundary marked closed (`OpShards::fence`), so no such allocation is half done
//! while it is closed.
//! An `ops` shard's lock and the journal's locks are taken with no allocator lock held.
//! The in-use claim's registry (`claim.rs`) is a leaf; its heartbeat thread takes no lock
//! of the store's (it writes the owner record, which nothing else writes while it runs).
//!
//! Bitmaps are loaded lazily: `open` reads the superblock and the descriptor table only;
//! a group's bitmap is read when a scan, a free or the replay first needs it (with
//! read-ahead, see `alloc/lazy.rs`). A checkpoint writes home only the groups changed since
//! the last one, and the descriptor blocks that describe them.
//!
//! A group whose descriptor or bitmap fails its checks is held used (never handed out,
//! frees refused), its journal changes skipped and its damaged home copy left for fsck.
//!
//! [`Device`]: crate::disk::device::Device
//! [`Journal`]: crate::disk::journal::Journal
//! [`Files`]: crate::files::Files

mod checkpoint;
mod claim;
mod discard;
mod discard_queue;
#[cfg(test)]
mod feature_tests;
pub mod fsck;
mod handles;
mod ops;
mod recovery;
pub(crate) mod remedy;
mod repair;
mod reserve;
mod state;
mod statfs;
#[cfg(test)]
mod tests;
mod txn;
mod view;

pub use repair::Rebuilt;
pub use state::{CheckpointHook, OpenTiming, Store};
pub use statfs::Statfs;
pub use txn::{CommitFailed, Committed, Txn};
pub use view::AllocatorView;

use self::ops::per_group;
use self::state::Closed;
use crate::alloc::{AllocRequest, Allocator};
use crate::disk::journal::Op;
use crate::error::{Error, Result};
use crate::files::{DataRequest, FileAlloc};
use crate::geometry::{Extent, Geometry};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

impl Store {
    /// Groups found corrupt so far (on open, or when their bitmap was first loaded): held
    /// used, never written home.
    pub fn corrupt_groups(&self) -> Vec<u64> {
        self.alloc().corrupt_groups()
    }

    /// The owner number of the store that had the device open and did not close it, if
    /// the device was found marked in use at open (a crash; the journal replay recovered
    /// it). `None` after a clean close.
    pub fn unclean_close(&self) -> Option<u64> {
        self.unclean_close
    }

    /// The file system's uuid, as `mkfs` wrote it in the superblock (all zeros on a store
    /// made before `Store::create` gave random ones).
    pub fn uuid(&self) -> [u8; 16] {
        self.sb.lock().uuid
    }

    /// The device has not been checked since a close that was not clean: this open or an
    /// earlier one found it marked in use, and no caller has called
    /// [`Store::mark_checked`] since (`STATE_UNCHECKED`, kept across clean closes). A
    /// layer with state of its own that a crash can leave half done (a file system's
    /// inodes unlinked while open) checks it then.
    pub fn unchecked(&self) -> bool {
        self.sb.lock().state & crate::disk::format::STATE_UNCHECKED != 0
    }

    /// The caller has checked its state after the unclean close [`Store::unchecked`]
    /// reported, or repaired it after the damage it met: the mark is cleared in memory
    /// and goes to the device with the next superblock write (the next checkpoint, or the
    /// clean close). A crash before that leaves it set, and the check runs again. After an
    /// open that accepted a journal loss, it also clears the loss's mark (the repair is
    /// done: a plain open takes the device again).
    pub fn mark_checked(&self) {
        use crate::disk::format::{STATE_DAMAGED, STATE_JOURNAL_LOST, STATE_UNCHECKED};
        self.sb.lock().state &= !(STATE_UNCHECKED | STATE_DAMAGED | STATE_JOURNAL_LOST);
        debug_assert!(!self.unchecked() && !self.damaged(), "the marks cleared");
    }

    /// The caller met damage in its own state ([`Store::mark_unchecked`], and
    /// `STATE_DAMAGED`): its next check must be whole even after a crash its promise
    /// covers ([`Store::crash_needs_check`]). Goes to the device with the next superblock
    /// write, as `mark_unchecked`; cleared by [`Store::mark_checked`].
    pub fn mark_damaged(&self) {
        use crate::disk::format::{STATE_DAMAGED, STATE_UNCHECKED};
        self.sb.lock().state |= STATE_UNCHECKED | STATE_DAMAGED;
        debug_assert!(self.unchecked() && self.damaged(), "the marks set");
    }

    /// Damage was met ([`Store::mark_damaged`]) and no caller has checked since.
    pub fn damaged(&self) -> bool {
        self.sb.lock().state & crate::disk::format::STATE_DAMAGED != 0
    }

    /// The caller promises, for this session and every later one, that a crash leaves
    /// nothing in its own state for it to check: only pending files, which a writable
    /// volume open removes (`INCOMPAT_CRASH_PENDING`: a build that does not know the
    /// feature refuses the device from then on). In memory at once; on the device with the
    /// next superblock write (a checkpoint, the clean close): a crash before that finds no
    /// promise, and the caller checks as before.
    pub fn promise_crash_pending(&self) {
        self.sb.lock().incompat |= crate::disk::format::INCOMPAT_CRASH_PENDING;
        debug_assert!(self.crash_pending_promised(), "promised");
    }

    /// The device carries the promise of [`Store::promise_crash_pending`].
    pub fn crash_pending_promised(&self) -> bool {
        self.sb.lock().incompat & crate::disk::format::INCOMPAT_CRASH_PENDING != 0
    }

    /// The caller's records may from now on take a form a build without
    /// `INCOMPAT_TYPED_ENTRIES` cannot read (a file system's directory entries carrying
    /// their kinds): such a build refuses the device from then on. In memory at once; on
    /// the device with the next superblock write (a checkpoint, the clean close), so the
    /// caller writes the new form only once a checkpoint after this call succeeded.
    pub fn promise_typed_entries(&self) {
        self.sb.lock().incompat |= crate::disk::format::INCOMPAT_TYPED_ENTRIES;
        debug_assert!(self.typed_entries_promised(), "promised");
    }

    /// The superblock in memory carries [`Store::promise_typed_entries`]'s feature (on
    /// the device too when it did at open, or once a checkpoint since the promise
    /// succeeded).
    pub fn typed_entries_promised(&self) -> bool {
        self.sb.lock().incompat & crate::disk::format::INCOMPAT_TYPED_ENTRIES != 0
    }

    /// The caller's directory logs may from now on hold runs (`INCOMPAT_DIR_RUNS`), which
    /// a build without the feature cannot read: such a build refuses the device from then
    /// on. In memory at once; on the device with the next superblock write, as
    /// [`Store::promise_typed_entries`].
    pub fn promise_dir_runs(&self) {
        self.sb.lock().incompat |= crate::disk::format::INCOMPAT_DIR_RUNS;
        debug_assert!(self.dir_runs_promised(), "promised");
    }

    /// The superblock in memory carries [`Store::promise_dir_runs`]'s feature.
    pub fn dir_runs_promised(&self) -> bool {
        self.sb.lock().incompat & crate::disk::format::INCOMPAT_DIR_RUNS != 0
    }

    /// The caller must check its state now: [`Store::unchecked`], and either damage was
    /// met ([`Store::damaged`]) or no promise covers the crash
    /// ([`Store::crash_pending_promised`]). Read it before promising.
    pub fn crash_needs_check(&self) -> bool {
        self.unchecked() && (self.damaged() || !self.crash_pending_promised())
    }

    /// The caller met damage in its own state that a whole check would repair (as ext4
    /// marks a file system with errors for the next `e2fsck`): [`Store::unchecked`] says
    /// so from now on, and to the next open once the next superblock write (a
    /// checkpoint, the clean close) has carried it, until [`Store::mark_checked`].
    pub fn mark_unchecked(&self) {
        self.sb.lock().state |= crate::disk::format::STATE_UNCHECKED;
        debug_assert!(self.unchecked(), "the mark set");
    }

    /// Makes this store's drop leave the device as a crash would: marked in use by this
    /// store's owner record, so the next open reports an unclean close
    /// ([`Store::unclean_close`]) and a layer above that keeps state of its own (a file
    /// system's inodes unlinked while open) checks it. For an owner dropped without its
    /// own close. The heartbeat stops at the drop as always; an open in this process, or
    /// once it has exited, takes the device over at once; another process's open while
    /// this one runs finds the owner live and is refused, as after a crash with the
    /// process still up.
    pub fn abandon(&self) {
        self.abandoned
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Where the time of `open` went.
    pub fn open_timing(&self) -> OpenTiming {
        self.open_timing
    }

    /// Flushes the device and asks the system to drop its cached copy (see
    /// [`Device::drop_cache`](crate::disk::device::Device::drop_cache)): bitmaps loaded after this read the media.
    pub fn drop_device_cache(&self) -> Result<()> {
        self.dev.flush()?;
        self.dev.drop_cache()
    }

    /// Journal bytes between the tail and the head: what a crash now would replay.
    pub fn journal_bytes_used(&self) -> u64 {
        let sb = self.sb.lock();
        let len = sb.journal_blocks * u64::from(sb.block_size);
        let (head, _) = self.journal.head();
        (head + len - sb.journal_tail) % len
    }

    fn alloc(&self) -> &Allocator {
        self.files.allocator()
    }

    /// The store's device, behind its latch: every write to the device while the store is
    /// open (a volume's data too) goes through it, so the first failed write or flush
    /// stops every later one ([`Store::io_failure`]).
    pub fn device(&self) -> Arc<dyn crate::disk::device::Device> {
        self.dev.clone()
    }

    /// The first write or flush of the device that failed since the store was opened, if
    /// one did. From then on every write, flush and commit fails with
    /// [`Error::IoLatched`](crate::error::Error::IoLatched) until the device is opened
    /// again: Linux forgets the data of a failed flush, so no later one is believed.
    pub fn io_failure(&self) -> Option<String> {
        self.latch.latched()
    }

    /// [`Store::io_failure`] as the error every later change gets.
    pub fn check_not_latched(&self) -> crate::error::Result<()> {
        match self.latch.latched() {
            None => Ok(()),
            Some(cause) => Err(crate::error::Error::IoLatched {
                device: self.dev.name(),
                cause,
            }),
        }
    }

    /// The device's geometry, from its superblock.
    pub fn geometry(&self) -> &Geometry {
        self.alloc().geometry()
    }

    /// A read-only view of the in-memory allocator: figures, stats, `check()`. Every
    /// change goes through the store's own calls, so that the journal records it.
    pub fn allocator(&self) -> AllocatorView<'_> {
        AllocatorView::new(&self.files)
    }

    /// Loads group `g`'s bitmap if it is not in memory (the cache; no allocator state
    /// changes).
    pub fn ensure_loaded(&self, g: u64) -> Result<()> {
        self.alloc().ensure_loaded(g)
    }

    /// Drops idle bitmaps until at most `keep` remain loaded (see
    /// [`Allocator::drop_idle_bitmaps`]); returns how many were dropped.
    pub fn drop_idle_bitmaps(&self, keep: u64) -> u64 {
        self.alloc().drop_idle_bitmaps(keep)
    }

    /// Lets an allocation that finds no space while frees wait for a commit, and an
    /// allocation or free that would make the open transaction too large for the journal,
    /// make the open transaction durable itself (an empty payload) and retry, as a file
    /// system forces a journal commit. Off by default: the caller's changes then never
    /// reach the journal in a record other than the one carrying its payload.
    pub fn set_forced_commits(&self, on: bool) {
        self.forced_commits
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Allocates an extent in the open transaction (see [`Allocator::allocate`]). With
    /// forced commits on, no space while frees wait commits and retries.
    /// A transaction whose record would outgrow the journal is refused
    /// ([`Error::TransactionTooLarge`]), changing nothing.
    pub fn allocate(&self, req: &AllocRequest) -> Result<Extent> {
        self.with_forced_commits(|| {
            let shard = self.alloc().stats_handle().shard_index();
            if let Some(got) = self
                .ops
                .allocating_open(shard, || self.alloc().allocate(req))
            {
                return got;
            }
            let _open = self.boundary.read(shard);
            self.ops.allocating(shard, self.max_transaction_bytes, || {
                self.alloc().allocate(req)
            })
        })
    }

    /// Runs `op` (an allocation or a free), and while forced commits are on and it finds
    /// no space with frees waiting for a commit, or the open transaction too large for one
    /// more operation, commits the open transaction (an empty payload) and runs it again,
    /// at most [`remedy::NO_SPACE_COMMITS`] times ([`remedy::retry_after_commit`]). This is
    /// the store's remedy for both: it owns the commits.
    fn with_forced_commits<T>(&self, op: impl Fn() -> Result<T>) -> Result<T> {
        remedy::retry_after_commit(
            op,
            |e| {
                // An operation too large for an empty transaction stays too large.
                let too_large =
                    matches!(e, Error::TransactionTooLarge { .. }) && !self.ops.is_empty();
                self.forced_commits.load(Relaxed) && (self.commit_frees_space(e) || too_large)
            },
            || {
                let shard = self.alloc().stats_handle().shard();
                shard.add(&shard.counters.forced_commits, 1);
                self.commit(&[]).map(drop)
            },
        )
    }

    /// Blocks an allocation can still get: free now, or held by preallocations (which the
    /// file layer gives back under pressure). Cheaper than [`Store::statfs`]: no lock.
    pub fn allocatable_blocks(&self) -> u64 {
        self.alloc().free_blocks() + self.files.reserved_blocks()
    }

    /// Gives back the preallocations of every file not busy right now (what space
    /// pressure does before a file's allocation fails): for the volume's own allocations,
    /// which the file layer's retries do not cover. Returns the blocks released (free at
    /// once).
    pub fn discard_preallocations(&self) -> u64 {
        self.files.discard_preallocations()
    }

    /// Group `g`'s free blocks (a hint, read without its lock); `g` below the group count.
    pub fn group_free_blocks(&self, g: u64) -> u64 {
        self.alloc().group_free_blocks(g)
    }

    /// The group file `file`'s next stream allocation of `blocks` would start scanning
    /// from (see [`Allocator::stream_goal_group`]).
    pub fn stream_goal_group(&self, file: u64, blocks: u64) -> u64 {
        self.alloc().stream_goal_group(file, blocks)
    }

    /// A file's allocation state (see [`Files::create_file`](crate::files::Files::create_file)). Files live in memory: after
    /// a reopen the caller rebuilds its own map from its metadata (e.g. the payloads).
    pub fn create_file(&self, id: u64) -> Arc<FileAlloc> {
        self.files.create_file(id)
    }

    /// Maps data blocks of `file` in the open transaction (see [`Files::allocate_data`](crate::files::Files::allocate_data)).
    /// The journal records only the extent handed to the file: blocks the call reserved
    /// beyond it stay out of the journal and out of checkpoints, and are free after a
    /// crash.
    pub fn allocate_data(&self, file: &Arc<FileAlloc>, req: &DataRequest) -> Result<Extent> {
        self.with_forced_commits(|| {
            let shard = self.alloc().stats_handle().shard_index();
            let _open = self.boundary.read(shard);
            self.ops.admit(shard, 1, self.max_transaction_bytes)?;
            let e = self
                .files
                .allocate_data(file, req)
                .inspect_err(|_| self.ops.unadmit(shard, 1))?;
            self.ops.push(shard, Op::Allocate(e));
            Ok(e)
        })
    }

    /// Punches a hole in `file` in the open transaction (see [`Files::free_data`](crate::files::Files::free_data)); the
    /// freed extents are recorded and reusable once the transaction commits. Returns them.
    pub fn free_data(&self, file: &FileAlloc, logical: u64, len: u64) -> Result<Vec<Extent>> {
        let end = logical.saturating_add(len);
        self.freeing(file, end, logical, || {
            self.files.free_data(file, logical, len)
        })
    }

    /// Runs `op`, which frees what `file` maps in `from .. to` (at most one extent per
    /// mapped extent there), in the open transaction: admitted first, so a transaction that
    /// would outgrow the journal is refused before anything changes.
    fn freeing(
        &self,
        file: &FileAlloc,
        to: u64,
        from: u64,
        op: impl FnOnce() -> Result<Vec<Extent>>,
    ) -> Result<Vec<Extent>> {
        let shard = self.alloc().stats_handle().shard_index();
        let _open = self.boundary.read(shard);
        // A mapped extent may span groups (the file's map merges neighbours): one op per
        // group it touches.
        let geometry = self.alloc().geometry();
        let bound = file
            .extents()
            .iter()
            .filter(|(l, e)| *l < to && l + e.len > from)
            .map(|(_, e)| geometry.split(*e).count() as u64)
            .sum();
        self.ops.admit(shard, bound, self.max_transaction_bytes)?;
        let freed = op().inspect_err(|_| self.ops.unadmit(shard, bound))?;
        let pieces: Vec<Extent> = freed.iter().flat_map(|&e| per_group(geometry, e)).collect();
        debug_assert!(
            pieces.len() as u64 <= bound,
            "more extents freed than mapped"
        );
        self.ops
            .unadmit(shard, bound.saturating_sub(pieces.len() as u64));
        for e in pieces {
            self.ops.push(shard, Op::Free(e));
        }
        Ok(freed)
    }

    /// Sets `file`'s size in the open transaction (see [`Files::set_file_size`](crate::files::Files::set_file_size)); blocks
    /// past it are freed and recorded. Returns the extents freed.
    pub fn set_file_size(&self, file: &FileAlloc, size_blocks: u64) -> Result<Vec<Extent>> {
        self.freeing(file, u64::MAX, size_blocks, || {
            self.files.set_file_size(file, size_blocks)
        })
    }

    /// Maps `extent`, which committed records allocated, at `logical` of `file` in memory
    /// and records nothing: for a caller rebuilding its files after [`Store::open`] from
    /// its own metadata (see [`Files::adopt`](crate::files::Files::adopt)).
    pub fn adopt_data(&self, file: &FileAlloc, logical: u64, extent: Extent) -> Result<()> {
        self.files.adopt(file, logical, extent)
    }

    /// Returns `file`'s unused preallocated blocks at once (close). Nothing is recorded:
    /// they were never handed out. Returns the blocks released.
    pub fn release_prealloc(&self, file: &FileAlloc) -> Result<u64> {
        let shard = self.alloc().stats_handle().shard_index();
        let _open = self.boundary.read(shard);
        self.files.release_prealloc(file)
    }

    /// Frees `extent` in the open transaction (reusable once it commits). A free of the
    /// device's own metadata is refused with [`Error::MetadataBlocks`]; the other errors
    /// are the allocator's. A refused free changes nothing.
    pub fn free(&self, extent: Extent) -> Result<()> {
        self.check_not_metadata(extent)?;
        self.handles.check_not_unrecorded(extent, None)?;
        if self.handles.is_freeing(extent) {
            // A handle frees it: its blocks are not free in memory until that commits.
            return Err(Error::DoubleFree {
                start: extent.start,
                len: extent.len,
            });
        }
        self.with_forced_commits(|| {
            let shard = self.alloc().stats_handle().shard_index();
            let _open = self.boundary.read(shard);
            // One op per group the extent touches.
            let n = self.alloc().geometry().split(extent).count() as u64;
            self.ops.admit(shard, n, self.max_transaction_bytes)?;
            self.alloc()
                .free(extent)
                .inspect_err(|_| self.ops.unadmit(shard, n))?;
            for e in per_group(self.alloc().geometry(), extent) {
                self.ops.push(shard, Op::Free(e));
            }
            Ok(())
        })
    }

    /// Closes the transaction boundary (see [`Boundary::close`]).
    fn close_boundary(&self) -> Closed<'_> {
        self.boundary.close(&self.ops)
    }

    /// `Ok` if `extent` is on the device and holds none of the device's own blocks.
    pub(crate) fn check_not_metadata(&self, extent: Extent) -> Result<()> {
        self.alloc().geometry().validate(extent)?;
        if extent.start < self.metadata_end
            || (extent.start..extent.end()).contains(&self.backup_block)
        {
            return Err(Error::MetadataBlocks {
                start: extent.start,
                len: extent.len,
                metadata_end: self.metadata_end,
                backup_block: self.backup_block,
            });
        }
        Ok(())
    }

    /// Ends the open transaction with `payload` and returns once it is durable. Returns the
    /// record's sequence number. A payload that would make the record larger than the
    /// journal holds is refused ([`Error::TransactionTooLarge`]) and the transaction stays
    /// open, unchanged; so does one whose record could not be appended. A commit that fails
    /// at the flush, after its record was appended, leaves the record in the journal (it
    /// may survive a crash or not) and the transaction's frees pending.
    pub fn commit(&self, payload: &[u8]) -> Result<u64> {
        Ok(self.commit_reporting(payload)?.seq)
    }

    /// [`Store::commit`], saying whether the commit checkpointed first (a full journal).
    pub fn commit_reporting(&self, payload: &[u8]) -> Result<Committed> {
        let serial = self.commit_lock.write();
        let (ops, sealed) = {
            let closed = self.close_boundary();
            let bytes = self.ops.record_bytes() + payload.len().next_multiple_of(8) as u64;
            if bytes > self.max_transaction_bytes {
                return Err(Error::TransactionTooLarge {
                    bytes,
                    max: self.max_transaction_bytes,
                });
            }
            (self.ops.take_in_flight(&closed.fenced), self.alloc().seal())
        };
        // The boundary is open again: the next transaction gathers while this record is
        // encoded and written (its ops stay counted until then, see `OpShards`).
        let (seq, checkpointed) = match self.append_shared(&ops, payload) {
            Ok(x) => x,
            Err(e) => {
                // Not recorded: the changes go back to the open transaction.
                self.ops.put_back_in_flight(ops);
                return Err(e);
            }
        };
        self.ops.settle(ops.len() as u64);
        self.ops.recycle(ops);
        // Seals are taken in order under `commit_lock`: the recorded one only grows.
        let before = self.recorded_seal.swap(sealed, Relaxed);
        debug_assert!(before < sealed, "seal {sealed} recorded after {before}");
        drop(serial);
        self.journal.commit(seq)?;
        self.release_durable(sealed);
        Ok(Committed { seq, checkpointed })
    }

    /// Appends the shared transaction's record (under `commit_lock`, the boundary open).
    /// A full journal checkpoints first, with the boundary closed: home state leaves out
    /// this record's allocations and the next transaction's. Returns the sequence number
    /// and whether it checkpointed.
    fn append_shared(&self, ops: &[Op], payload: &[u8]) -> Result<(u64, bool)> {
        match self.journal.append(ops, payload) {
            Err(Error::JournalFull { .. }) => {
                let _closed = self.close_boundary();
                let mut exclude = self.ops.allocations();
                exclude.extend_from_slice(ops);
                self.checkpoint_for_full_journal(&exclude)?;
                Ok((self.journal.append(ops, payload)?, true))
            }
            other => Ok((other?, false)),
        }
    }
}
