//! Per-caller transactions: [`Store::begin`] returns a [`Txn`] whose allocations, frees,
//! payload and commit are its own. Many handles commit at once and share the journal's
//! flushes (group commit); `abort` (or dropping the handle) gives its allocations back and
//! cancels its frees; a commit whose record cannot be written leaves the handle as it was.
//!
//! Data structures: a [`Txn`] holds its `TxnOps` (allocations, frees) behind an
//! `Arc<Mutex>` that the store's `Handles` registry also holds from the handle's first
//! allocation on, so a checkpoint sees every open handle's allocations and writes them home
//! as free (they are recorded nowhere yet). A handle that allocates nothing never enters
//! the registry.
//! `Handles::freeing` holds every extent an open or committing handle frees, so no one
//! frees a block twice; `Handles::appended` holds the frees of records appended whose
//! blocks are not free in memory yet, by sequence number.
//!
//! Invariant: a handle's allocations are used in memory from the call on and recorded only
//! by its record; its frees change nothing in memory until its record is durable, and then
//! free the blocks at once (no pending stage: the record is durable). Whoever takes a
//! record's frees from `appended` applies them: the committer after its flush, or a
//! checkpoint (which makes every appended record durable first), never both.
//!
//! Lock order: `commit_lock` -> `boundary` -> `Handles::open` -> a handle's ops ->
//! `Handles::appended` -> `Handles::freeing`; then the allocator's locks. A handle's
//! allocation takes one `boundary` shard for reading before its ops, so a checkpoint (which
//! closes the boundary) sees every allocation in memory also in a handle's list.

use super::handles::TxnOps;
use super::state::Store;
use crate::alloc::AllocRequest;
use crate::disk::journal::{Journal, Op};
use crate::error::{Error, Result};
use crate::geometry::Extent;
use parking_lot::Mutex;
use smallvec::SmallVec;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

/// A caller's own transaction on a [`Store`] (see [`Store::begin`]). Dropping it without
/// [`Txn::commit`] aborts it.
pub struct Txn<'s> {
    store: &'s Store,
    id: u64,
    ops: Arc<Mutex<TxnOps>>,
    /// In the store's registry of open handles (from the first allocation on).
    registered: AtomicBool,
}

impl std::fmt::Debug for Txn<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ops = self.ops.lock();
        f.debug_struct("Txn")
            .field("id", &self.id)
            .field("allocs", &ops.allocs.len())
            .field("frees", &ops.frees.len())
            .finish()
    }
}

/// A commit that succeeded: its record's sequence number, and whether the journal was full
/// so the commit checkpointed first (every earlier record went home; a caller with its
/// own tables saw its checkpoint hook run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Committed {
    /// The record's sequence number.
    pub seq: u64,
    /// The commit checkpointed first.
    pub checkpointed: bool,
}

/// A [`Txn::commit`] that failed: the error, and the handle unchanged if its record was
/// not written (commit it again, or abort it).
#[derive(Debug)]
pub struct CommitFailed<'s> {
    /// Why.
    pub error: Error,
    /// The handle as it was before the commit; `None` if the record was written and only
    /// its flush failed.
    pub txn: Option<Txn<'s>>,
}

impl std::fmt::Display for CommitFailed<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "commit failed: {}", self.error)
    }
}

impl Store {
    /// Begins a transaction of the caller's own: its operations, payload and commit are
    /// independent of other handles' and of the store's shared transaction
    /// ([`Store::allocate`] ... [`Store::commit`]).
    pub fn begin(&self) -> Txn<'_> {
        let id = self.handles.next_id.fetch_add(1, Relaxed);
        debug_assert!(
            !self.handles.open.lock().contains_key(&id),
            "handle id {id} reused"
        );
        Txn {
            store: self,
            id,
            ops: Arc::new(Mutex::new(TxnOps::default())),
            registered: AtomicBool::new(false),
        }
    }

    /// Applies the frees of the appended record `seq` if no checkpoint did yet.
    fn apply_appended(&self, seq: u64) {
        // A transaction's frees wait until its record is durable.
        debug_assert!(
            self.journal.durable_through() >= seq,
            "record {seq} not durable"
        );
        let frees = self.handles.appended.lock().remove(&seq);
        if let Some(frees) = frees {
            self.apply_frees(&frees);
        }
    }

    /// Frees durable handle frees in memory at once. Each leaves `freeing` under its lock
    /// as it becomes free: no one may allocate it again and free it while it still counts
    /// as freed by its handle.
    pub(super) fn apply_frees(&self, frees: &[Extent]) {
        for &e in frees {
            let mut freeing = self.handles.freeing.lock();
            // Checked allocated when the handle freed it, and no one else may free it
            // meanwhile (`freeing`): a failure is a broken invariant.
            self.free_durable(e)
                .unwrap_or_else(|err| panic!("a durable free of {e:?} does not apply: {err}"));
            let was = freeing.remove(&e.start);
            debug_assert_eq!(was, Some(e.len), "{e:?} applied, not being freed");
            self.handles
                .freeing_len
                .store(freeing.len() as u64, Relaxed);
        }
    }
}

impl<'s> Txn<'s> {
    /// Admits one more operation if the record (with no payload) still fits the journal.
    fn admit(&self, ops: &TxnOps) -> Result<()> {
        let n = (ops.allocs.len() + ops.frees.len() + 1) as u64;
        let bytes = Journal::record_bytes(n, 0);
        let max = self.store.max_transaction_bytes;
        if bytes > max {
            return Err(Error::TransactionTooLarge { bytes, max });
        }
        Ok(())
    }

    /// Allocates an extent in this transaction (see
    /// [`Allocator::allocate`](crate::Allocator::allocate)): used at once, recorded by this
    /// transaction's record, given back by an abort.
    pub fn allocate(&self, req: &AllocRequest) -> Result<Extent> {
        let shard = self.store.alloc().stats_handle().shard_index();
        let _open = self.store.boundary.read(shard);
        self.register();
        let mut ops = self.ops.lock();
        self.admit(&ops)?;
        let e = self.store.alloc().allocate(req)?;
        // Registered first: others see its unrecorded allocations through the registry.
        debug_assert!(
            self.registered.load(Relaxed),
            "an unregistered handle allocates"
        );
        ops.allocs.push(e);
        self.store.handles.unrecorded_len.fetch_add(1, Relaxed);
        Ok(e)
    }

    /// Enters this handle in the registry of open handles (lock order: before its ops), so
    /// a checkpoint sees its allocations.
    fn register(&self) {
        if !self.registered.load(Relaxed) {
            let mut open = self.store.handles.open.lock();
            let entry = open.entry(self.id).or_insert_with(|| self.ops.clone());
            debug_assert!(
                Arc::ptr_eq(entry, &self.ops),
                "handle id {} reused",
                self.id
            );
            self.registered.store(true, Relaxed);
        }
    }

    /// Leaves the registry of open handles, if this handle entered it.
    fn unregister(&self) {
        if self.registered.swap(false, Relaxed) {
            let was = self.store.handles.open.lock().remove(&self.id);
            debug_assert!(was.is_some_and(|ops| Arc::ptr_eq(&ops, &self.ops)));
        }
    }

    /// Frees `extent` in this transaction: it stays allocated until the commit is durable,
    /// then is free at once. Refused, changing nothing: the device's metadata
    /// ([`Error::MetadataBlocks`]), blocks not allocated ([`Error::NotAllocated`] and the
    /// like), blocks another handle or the shared transaction frees already
    /// ([`Error::DoubleFree`]).
    pub fn free(&self, extent: Extent) -> Result<()> {
        self.store.check_not_metadata(extent)?;
        self.store
            .handles
            .check_not_unrecorded(extent, Some(self.id))?;
        let mut ops = self.ops.lock();
        self.admit(&ops)?;
        let mut freeing = self.store.handles.freeing.lock();
        let overlaps = freeing
            .range(..extent.end())
            .next_back()
            .is_some_and(|(&s, &l)| s + l > extent.start);
        if overlaps {
            return Err(Error::DoubleFree {
                start: extent.start,
                len: extent.len,
            });
        }
        self.store.alloc().check_allocated(extent)?;
        freeing.insert(extent.start, extent.len);
        debug_assert!(
            freeing
                .range(extent.start + 1..)
                .next()
                .is_none_or(|(&s, _)| s >= extent.end()),
            "frees overlap"
        );
        self.store
            .handles
            .freeing_len
            .store(freeing.len() as u64, Relaxed);
        ops.frees.push(extent);
        Ok(())
    }

    /// Ends this transaction with `payload` and returns once its record is durable: its
    /// frees are then free. Returns the record's sequence number. If the record cannot be
    /// written (a full journal whose checkpoint fails, a device error, a payload too
    /// large), the error comes back with the handle: nothing changed, and it may commit
    /// again or abort. A flush that fails after the record was written comes back without
    /// a handle; the record's frees are applied by the next checkpoint, which makes it
    /// durable first.
    pub fn commit(self, payload: &[u8]) -> std::result::Result<Committed, CommitFailed<'s>> {
        let (seq, checkpointed, frees) = match self.append(payload) {
            Ok(x) => x,
            Err(error) => {
                return Err(CommitFailed {
                    error,
                    txn: Some(self),
                })
            }
        };
        let store = self.store;
        // Recorded: nothing to give back on drop.
        std::mem::forget(self);
        if let Err(error) = store.journal.commit(seq) {
            return Err(CommitFailed { error, txn: None });
        }
        if frees {
            store.apply_appended(seq);
        }
        Ok(Committed { seq, checkpointed })
    }

    /// Appends this transaction's record under the commit lock, read (a full journal:
    /// written, to checkpoint first), and hands its frees to `appended`. Returns the
    /// record's sequence number, whether it checkpointed, and whether it frees anything.
    /// On failure nothing changed.
    fn append(&self, payload: &[u8]) -> Result<(u64, bool, bool)> {
        let store = self.store;
        let shared = store.commit_lock.read();
        let appended = match self.append_locked(payload, false) {
            Err(Error::JournalFull { .. }) => {
                drop(shared);
                let _serial = store.commit_lock.write();
                self.append_locked(payload, true)
            }
            other => other,
        };
        debug_assert!(
            appended.is_err() || !self.registered.load(Relaxed),
            "still open"
        );
        appended
    }

    /// [`Txn::append`] under the commit lock (written if `may_checkpoint`: a full journal
    /// then checkpoints; read: it returns `JournalFull`).
    fn append_locked(&self, payload: &[u8], may_checkpoint: bool) -> Result<(u64, bool, bool)> {
        let store = self.store;
        let ops = self.ops.lock();
        let record: SmallVec<[Op; 4]> = ops
            .allocs
            .iter()
            .map(|&e| Op::Allocate(e))
            .chain(
                ops.frees
                    .iter()
                    .flat_map(|&e| super::ops::per_group(store.geometry(), e))
                    .map(Op::Free),
            )
            .collect();
        // Not held across the write: others read a handle's ops (a free checks that it
        // does not free another handle's unrecorded blocks), and only this call, which
        // owns the handle, changes them.
        drop(ops);
        let bytes = Journal::record_bytes(record.len() as u64, payload.len() as u64);
        if bytes > store.max_transaction_bytes {
            return Err(Error::TransactionTooLarge {
                bytes,
                max: store.max_transaction_bytes,
            });
        }
        let (seq, checkpointed) = match store.journal.append(&record, payload) {
            Err(Error::JournalFull { .. }) if may_checkpoint => {
                store.checkpoint_for_handle()?;
                (store.journal.append(&record, payload)?, true)
            }
            other => (other?, false),
        };
        let mut ops = self.ops.lock();
        // Recorded: its frees wait for durability, its allocations are no longer open.
        let frees = !ops.frees.is_empty();
        if frees {
            store
                .handles
                .appended
                .lock()
                .insert(seq, std::mem::take(&mut ops.frees));
        }
        let recorded = std::mem::take(&mut ops.allocs).len() as u64;
        drop(ops);
        // The registry after the handle's ops (lock order: registry -> a handle's ops);
        // checkpoints cannot come between (`commit_lock`, held read at least).
        self.unregister();
        let was = store.handles.unrecorded_len.fetch_sub(recorded, Relaxed);
        debug_assert!(was >= recorded, "more allocations recorded than open");
        Ok((seq, checkpointed, frees))
    }

    /// Gives this transaction's allocations back (they were recorded nowhere) and cancels
    /// its frees. A handle's unrecorded allocations are its own: if the caller freed one
    /// elsewhere meanwhile (the shared transaction, another handle), that free gives it
    /// back instead, and the first such block is reported as the error (the rest are
    /// given back all the same).
    pub fn abort(self) -> Result<()> {
        let result = self.undo();
        std::mem::forget(self);
        result
    }

    fn undo(&self) -> Result<()> {
        let shard = self.store.alloc().stats_handle().shard_index();
        let _open = self.store.boundary.read(shard);
        self.unregister();
        let mut ops = self.ops.lock();
        let frees = std::mem::take(&mut ops.frees);
        self.store.handles.unmark_freeing(&frees);
        let mut first_error = Ok(());
        let allocs = std::mem::take(&mut ops.allocs);
        self.store
            .handles
            .unrecorded_len
            .fetch_sub(allocs.len() as u64, Relaxed);
        for e in allocs {
            if self.store.handles.is_freeing(e) {
                // Misuse: another handle frees this handle's unrecorded allocation; its
                // commit frees the blocks (they stay used until then).
                continue;
            }
            // Misuse too: the shared transaction freed it already (pending), and its
            // commit frees it. Give back the rest and report the first refusal.
            if let Err(err) = self.store.alloc().free_now(e) {
                if first_error.is_ok() {
                    first_error = Err(err);
                }
            }
        }
        debug_assert!(
            ops.allocs.is_empty() && ops.frees.is_empty() && !self.registered.load(Relaxed)
        );
        first_error
    }

    /// The extents allocated and freed so far.
    pub fn changes(&self) -> (Vec<Extent>, Vec<Extent>) {
        let ops = self.ops.lock();
        (ops.allocs.clone(), ops.frees.clone())
    }
}

impl Drop for Txn<'_> {
    /// An abort. A refusal can come only from misuse (someone else freed this handle's
    /// unrecorded blocks, and their free gives them back); `abort` reports it, a drop
    /// cannot.
    fn drop(&mut self) {
        let _ = self.undo();
        debug_assert!(
            !self.registered.load(Relaxed),
            "a dropped handle stays registered"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::Policy;
    use crate::disk::device::{Crash, FaultDevice, MemDevice};
    use crate::store::fsck;
    use crate::store::tests::geometry;

    /// A store on a fault-injecting device (`seed`) with a 64 KiB journal and one committed
    /// extent of 8 blocks.
    fn store_with_x(seed: u64) -> (Arc<FaultDevice<MemDevice>>, Store, Extent) {
        let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), seed));
        let store = Store::create(dev.clone(), &geometry(), 16, Policy::default()).unwrap();
        let x = store.allocate(&AllocRequest::new(1, 8)).unwrap();
        store.commit(b"x").unwrap();
        (dev, store, x)
    }

    fn used(store: &Store, e: Extent) -> bool {
        (e.start..e.end()).all(|b| !store.allocator().is_free(b).unwrap())
    }

    fn free(store: &Store, e: Extent) -> bool {
        (e.start..e.end()).all(|b| store.allocator().is_free(b).unwrap())
    }

    /// A committed handle survives a crash whole (its allocation used, its free free); an
    /// aborted one left nothing; one open at the crash left nothing either, though a
    /// checkpoint ran while it was open.
    #[test]
    fn handles_commit_abort_and_survive_a_crash() {
        let (dev, store, x) = store_with_x(1);
        let h1 = store.begin();
        let a = h1.allocate(&AllocRequest::new(2, 8)).unwrap();
        h1.free(x).unwrap();
        assert!(used(&store, x), "a handle's free waits for its commit");
        let h2 = store.begin();
        let b = h2.allocate(&AllocRequest::new(3, 8)).unwrap();
        let h3 = store.begin();
        let c = h3.allocate(&AllocRequest::new(4, 8)).unwrap();
        h1.commit(b"one").unwrap();
        assert!(free(&store, x), "durable: free at once");
        h2.abort().unwrap();
        assert!(free(&store, b));
        store.checkpoint().unwrap();
        let after_checkpoint = store.begin();
        let d = after_checkpoint
            .allocate(&AllocRequest::new(5, 8).goal(6000))
            .unwrap();
        after_checkpoint.commit(b"two").unwrap();
        store.allocator().check().unwrap();
        // The crash: h3 never commits.
        std::mem::forget(h3);
        drop(store);
        dev.crash(Crash::DropAll).unwrap();
        let report = fsck::check(dev.as_ref()).unwrap();
        assert!(report.clean(), "{report:?}");
        let (store, records) = Store::open(dev, Policy::default()).unwrap();
        assert_eq!(
            records.len(),
            1,
            "the checkpoint took the first record home"
        );
        assert!(used(&store, a) && used(&store, d));
        assert!(free(&store, x), "x");
        assert!(free(&store, b), "b");
        assert!(free(&store, c), "c");
        store.allocator().check().unwrap();
    }

    /// A commit whose record cannot be written hands the handle back unchanged; the store
    /// has latched, so a second try is refused too (nothing is believed after a failed
    /// write) and hands it back again. Misuse is refused and changes nothing.
    #[test]
    fn a_failed_commit_leaves_the_handle_unchanged_and_misuse_is_refused() {
        let (dev, store, x) = store_with_x(2);
        let h = store.begin();
        h.allocate(&AllocRequest::new(2, 8)).unwrap();
        h.free(x).unwrap();
        // Misuse: a second free of x (this handle, another, the shared transaction), the
        // metadata, a block nobody allocated.
        assert!(matches!(h.free(x), Err(Error::DoubleFree { .. })));
        let other = store.begin();
        assert!(matches!(other.free(x), Err(Error::DoubleFree { .. })));
        assert!(matches!(store.free(x), Err(Error::DoubleFree { .. })));
        assert!(matches!(
            other.free(Extent::new(0, 1)),
            Err(Error::MetadataBlocks { .. })
        ));
        assert!(other.free(Extent::new(8000, 4)).is_err());
        assert_eq!(other.changes(), (vec![], vec![]));
        other.abort().unwrap();
        let before = h.changes();
        dev.fail_writes(true);
        let failed = h.commit(b"h").unwrap_err();
        dev.fail_writes(false);
        let h = failed
            .txn
            .expect("the record was not written: the handle comes back");
        assert_eq!(h.changes(), before);
        assert!(used(&store, x));
        let again = h.commit(b"h").unwrap_err();
        assert!(
            matches!(again.error, Error::IoLatched { .. }),
            "{}",
            again.error
        );
        let h = again.txn.expect("handed back again");
        assert_eq!(h.changes(), before);
        assert!(used(&store, x), "a free not recorded frees nothing");
        h.abort().unwrap();
        store.allocator().check().unwrap();
    }

    /// A handle's unrecorded blocks are its own: another handle or the shared transaction
    /// freeing them is refused (a record freeing them would free, at replay, blocks no
    /// record allocated), and changes nothing; the handle itself may free them.
    #[test]
    fn another_handles_unrecorded_blocks_cannot_be_freed() {
        let (dev, store, _) = store_with_x(4);
        let a = store.begin();
        let e = a.allocate(&AllocRequest::new(2, 4)).unwrap();
        let b = store.begin();
        let owned = |r: Result<()>| {
            matches!(r, Err(Error::OwnedByTransaction { start, len, .. })
                if (start, len) == (e.start, e.len))
        };
        assert!(owned(b.free(e)));
        assert!(owned(store.free(e)));
        assert_eq!(b.changes(), (vec![], vec![]));
        b.abort().unwrap();
        let g = a.allocate(&AllocRequest::new(3, 4)).unwrap();
        a.free(g).unwrap();
        a.commit(b"a").unwrap();
        // Recorded now: anyone may free it.
        store.free(e).unwrap();
        store.commit(b"shared").unwrap();
        assert!(free(&store, e) && free(&store, g));
        store.allocator().check().unwrap();
        drop(store);
        let (store, _) = Store::open(dev, Policy::default()).unwrap();
        assert!(free(&store, e) && free(&store, g));
        store.allocator().check().unwrap();
    }

    /// Threads run handles at once, commit or abort them, and free what earlier handles of
    /// theirs committed; the commits share flushes. After a crash that keeps everything
    /// flushed, exactly the committed allocations not committed-freed are in use.
    /// With a 16 KiB journal, handles' commits find it full and checkpoint with other
    /// handles open.
    #[test]
    fn concurrent_handles_match_a_model_after_a_crash() {
        for journal_blocks in [64, 4] {
            concurrent_handles(journal_blocks);
        }
    }

    fn concurrent_handles(journal_blocks: u64) {
        use rand::{Rng, SeedableRng};
        let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), 3));
        let store =
            Store::create(dev.clone(), &geometry(), journal_blocks, Policy::default()).unwrap();
        let live: Vec<Vec<Extent>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4u64)
                .map(|t| {
                    let store = &store;
                    s.spawn(move || {
                        let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                        let mut mine: Vec<Extent> = Vec::new();
                        for i in 0..150u64 {
                            let h = store.begin();
                            let mut got = Vec::new();
                            for _ in 0..rng.gen_range(1..4) {
                                let req = AllocRequest::new(t * 1000 + i, rng.gen_range(1..6));
                                got.push(h.allocate(&req).unwrap());
                            }
                            let mut freed = Vec::new();
                            if !mine.is_empty() && rng.gen_bool(0.5) {
                                let e = mine.swap_remove(rng.gen_range(0..mine.len()));
                                h.free(e).unwrap();
                                freed.push(e);
                            }
                            if rng.gen_bool(0.8) {
                                h.commit(&i.to_le_bytes()).unwrap();
                                mine.extend(got);
                            } else {
                                h.abort().unwrap();
                                mine.extend(freed);
                            }
                        }
                        mine
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        store.allocator().check().unwrap();
        let data_used = store.statfs().blocks
            - store.statfs().metadata_blocks
            - store.allocator().free_blocks();
        let live: Vec<Extent> = live.into_iter().flatten().collect();
        assert_eq!(data_used, live.iter().map(|e| e.len).sum::<u64>());
        drop(store);
        dev.crash(Crash::DropAll).unwrap();
        let (store, _) = Store::open(dev, Policy::default()).unwrap();
        for &e in &live {
            assert!(used(&store, e), "{e:?} lost");
        }
        let after = store.statfs();
        assert_eq!(
            after.blocks - after.metadata_blocks - after.free_blocks,
            live.iter().map(|e| e.len).sum::<u64>(),
            "nothing leaked"
        );
        store.allocator().check().unwrap();
    }
}
