//! What a file system asks of its store besides allocations: `statfs` figures (free,
//! pending until a commit, held for discards, held by preallocations, kept for the superuser, the journal's
//! capacity and use, the largest transaction).
//!
//! Data structures: [`Statfs`], a snapshot of figures. Invariant: read only; a snapshot
//! taken while callers run is approximate, one at quiescence exact. Locks: `sb` briefly,
//! then the file layer's locality locks (for the exact reserved figure), one at a time.

use super::state::Store;
use std::sync::atomic::Ordering::Relaxed;

/// The store's figures for `statfs`, in blocks of `block_size` bytes unless named bytes.
/// A snapshot: exact at quiescence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Statfs {
    /// Bytes per block.
    pub block_size: u32,
    /// Blocks of the device.
    pub blocks: u64,
    /// The device's own blocks (superblocks, journal, descriptors, bitmaps): never free.
    pub metadata_blocks: u64,
    /// Free now.
    pub free_blocks: u64,
    /// Freed by the open (or a failed) transaction: free once it commits.
    pub pending_blocks: u64,
    /// Freed by committed transactions and held for the caller's discards
    /// ([`Store::take_discards`]): free once acknowledged.
    pub discard_held_blocks: u64,
    /// Held by preallocations for files being written: given back under space pressure,
    /// at close and at unmount, so counted as available.
    pub prealloc_reserved_blocks: u64,
    /// Kept for the superuser (`set_root_reserved_blocks`; 5 % of the non-metadata blocks
    /// by default, as ext4). The store does not enforce it: the file system does.
    pub root_reserved_blocks: u64,
    /// What an unprivileged caller can still get: free and preallocated, less the
    /// superuser's share (`f_bavail`).
    pub available_blocks: u64,
    /// Bytes of the journal area.
    pub journal_bytes: u64,
    /// Bytes of the journal holding records not yet checkpointed (what a crash replays).
    pub journal_used_bytes: u64,
    /// The largest transaction record the journal holds ([`Store::max_transaction_bytes`]).
    pub max_transaction_bytes: u64,
    /// The open transaction's record so far, without its payload.
    pub open_transaction_bytes: u64,
}

impl Store {
    /// The figures a file system's `statfs` reports (see [`Statfs`]).
    pub fn statfs(&self) -> Statfs {
        let sb = self.sb.lock();
        let journal_bytes = sb.journal_blocks * u64::from(sb.block_size);
        let (block_size, blocks) = (sb.block_size, sb.blocks_count);
        drop(sb);
        let free_blocks = self.alloc().free_blocks();
        let prealloc_reserved_blocks = self.files.reserved_blocks();
        let root_reserved_blocks = self.root_reserved_blocks.load(Relaxed);
        let discard_held_blocks = self.discards.held_blocks();
        Statfs {
            block_size,
            blocks,
            metadata_blocks: self.metadata_end + 1,
            free_blocks,
            pending_blocks: self
                .alloc()
                .pending_free_blocks()
                .saturating_sub(discard_held_blocks),
            discard_held_blocks,
            prealloc_reserved_blocks,
            root_reserved_blocks,
            available_blocks: (free_blocks + prealloc_reserved_blocks)
                .saturating_sub(root_reserved_blocks),
            journal_bytes,
            journal_used_bytes: self.journal_bytes_used(),
            max_transaction_bytes: self.max_transaction_bytes,
            open_transaction_bytes: self.ops.record_bytes(),
        }
    }

    /// [`Statfs`]'s free, pending and superuser's blocks alone, as [`Store::statfs`] gives
    /// them, without the preallocations' sum (which takes every locality lock in turn) or
    /// the journal's figures: for a caller that asks before every operation whether space
    /// is short, and for which the preallocations, which only add to what is available,
    /// may be left out of a lower bound.
    pub fn free_pending_root_blocks(&self) -> (u64, u64, u64) {
        let free = self.alloc().free_blocks();
        let pending = self
            .alloc()
            .pending_free_blocks()
            .saturating_sub(self.discards.held_blocks());
        (free, pending, self.root_reserved_blocks.load(Relaxed))
    }

    /// The largest transaction record the journal holds (operations at 24 bytes each, the
    /// payload, a 40-byte header): an operation or a commit that would exceed it is refused
    /// with [`Error::TransactionTooLarge`](crate::Error::TransactionTooLarge).
    pub fn max_transaction_bytes(&self) -> u64 {
        self.max_transaction_bytes
    }

    /// An upper bound of [`Statfs::open_transaction_bytes`] that costs one atomic load
    /// (operations admitted count, and the admission credit threads hold, 64 a thread at
    /// most): for a caller that checks before every operation.
    pub fn open_transaction_bytes_bound(&self) -> u64 {
        self.ops.record_bytes_bound()
    }

    /// Flushes the journal has issued since the store was opened (group commit: one flush
    /// covers every committer waiting for it).
    pub fn journal_flushes(&self) -> u64 {
        self.journal.flushes()
    }

    /// The caller's durable root: what the last checkpoint wrote with the journal tail
    /// (empty on a fresh device). At open, it and the records `open` returns (those
    /// committed after that checkpoint) are the caller's whole state.
    pub fn root(&self) -> Vec<u8> {
        self.sb.lock().root.clone()
    }

    /// Sets the root the next checkpoint writes (at most
    /// [`ROOT_MAX`](crate::disk::format::ROOT_MAX) bytes): for a caller that writes its own
    /// tables, then checkpoints. Without a checkpoint it is not durable. A larger root is
    /// refused ([`RootTooLarge`](crate::error::Error::RootTooLarge)), changing nothing.
    pub fn set_root(&self, root: &[u8]) -> crate::error::Result<()> {
        if root.len() > crate::disk::format::ROOT_MAX {
            return Err(crate::error::Error::RootTooLarge {
                bytes: root.len() as u64,
                max: crate::disk::format::ROOT_MAX as u64,
            });
        }
        *self.pending_root.lock() = Some(root.to_vec());
        Ok(())
    }

    /// Installs the hook every checkpoint (asked for, or made by a full journal) calls
    /// first, while no commit can run: it writes the caller's own tables (to its own
    /// blocks, with its own I/O: it must not call this store) so they hold every committed
    /// record, and returns the new root, written with the journal tail that leaves those
    /// records behind. An error from it fails the checkpoint (the tail does not move).
    pub fn set_checkpoint_hook(&self, hook: super::state::CheckpointHook) {
        *self.checkpoint_hook.lock() = Some(hook);
    }

    /// Sets the blocks [`Statfs`] keeps for the superuser.
    pub fn set_root_reserved_blocks(&self, blocks: u64) {
        self.root_reserved_blocks.store(blocks, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use crate::alloc::{AllocRequest, Policy};
    use crate::disk::device::{Crash, Device, FaultDevice, MemDevice};
    use crate::error::Error;
    use crate::store::tests::geometry;
    use crate::store::{fsck, Store};
    use crate::{DataRequest, Extent};
    use parking_lot::Mutex;
    use std::sync::Arc;

    /// A 1-block request a block past `last` (one op each: blocks that continue the last
    /// op of the transaction would merge into it).
    fn spaced(last: Option<&Extent>) -> AllocRequest {
        let req = AllocRequest::new(1, 1);
        match last {
            Some(e) => req.goal(e.end() + 1),
            None => req,
        }
    }

    /// A transaction that would outgrow the journal is refused at the operation that would
    /// exceed it, changing nothing; a payload too large is refused at commit with the
    /// transaction left open; the store goes on (before, the record was refused only at
    /// commit, put back, and every later commit failed the same way: wedged).
    #[test]
    fn a_transaction_never_outgrows_the_journal() {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(8192 * 4096));
        // 2 blocks: 8 KiB of journal.
        let store = Store::create(dev.clone(), &geometry(), 2, Policy::default()).unwrap();
        let max = store.max_transaction_bytes();
        assert!(max > 1000 && max < 8192, "{max}");
        let mut held: Vec<Extent> = Vec::new();
        let refused = loop {
            match store.allocate(&spaced(held.last())) {
                Ok(e) => held.push(e),
                Err(e) => break e,
            }
            assert!(held.len() < 10_000);
        };
        assert!(matches!(refused, Error::TransactionTooLarge { max: m, .. } if m == max));
        let before = (
            store.allocator().free_blocks(),
            store.statfs().open_transaction_bytes,
        );
        assert!(before.1 <= max);
        // Every kind of operation is refused alike, and changes nothing.
        assert!(matches!(
            store.free(held[0]),
            Err(Error::TransactionTooLarge { .. })
        ));
        let file = store.create_file(9);
        assert!(matches!(
            store.allocate_data(&file, &DataRequest::new(0, 1)),
            Err(Error::TransactionTooLarge { .. })
        ));
        assert_eq!(
            before,
            (
                store.allocator().free_blocks(),
                store.statfs().open_transaction_bytes
            )
        );
        // A payload too large: refused, the transaction stays open, unchanged.
        assert!(matches!(
            store.commit(&vec![0u8; max as usize]),
            Err(Error::TransactionTooLarge { .. })
        ));
        assert_eq!(store.statfs().open_transaction_bytes, before.1);
        store.commit(b"").unwrap();
        assert_eq!(store.statfs().open_transaction_bytes, 40);
        // The store goes on: the next transaction, the reopen.
        let freed: Vec<_> = held.drain(..10).collect();
        for &e in &freed {
            store.free(e).unwrap();
        }
        store.commit(b"frees").unwrap();
        drop(store);
        let (store, _) = Store::open(dev, Policy::default()).unwrap();
        for e in &held {
            assert!(!store.allocator().is_free(e.start).unwrap(), "{e:?} lost");
        }
        for e in &freed {
            assert!(store.allocator().is_free(e.start).unwrap(), "{e:?} leaked");
        }
        store.allocator().check().unwrap();
    }

    /// With forced commits on, the store splits a transaction that would outgrow the
    /// journal itself: no operation is refused, every extent survives a reopen.
    #[test]
    fn forced_commits_split_a_transaction_too_large_for_the_journal() {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(8192 * 4096));
        let store = Store::create(dev.clone(), &geometry(), 2, Policy::default()).unwrap();
        store.set_forced_commits(true);
        let per_record = (store.max_transaction_bytes() - 40) / 24;
        let mut held: Vec<Extent> = Vec::new();
        for _ in 0..3 * per_record {
            held.push(store.allocate(&spaced(held.last())).unwrap());
        }
        for &e in &held[..per_record as usize * 2] {
            store.free(e).unwrap();
        }
        assert!(store.journal_flushes() >= 4, "{}", store.journal_flushes());
        store.commit(b"").unwrap();
        drop(store);
        let (store, _) = Store::open(dev, Policy::default()).unwrap();
        let (freed, kept) = held.split_at(per_record as usize * 2);
        assert!(kept
            .iter()
            .all(|e| !store.allocator().is_free(e.start).unwrap()));
        assert!(freed
            .iter()
            .all(|e| store.allocator().is_free(e.start).unwrap()));
        store.allocator().check().unwrap();
    }

    /// The figures add up: every block is metadata, free, pending, reserved by a
    /// preallocation or allocated; available leaves the superuser's share out.
    #[test]
    fn statfs_figures_add_up() {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(8192 * 4096));
        let store = Store::create(dev, &geometry(), 8, Policy::default()).unwrap();
        let a = store.allocate(&AllocRequest::new(1, 100)).unwrap();
        let file = store.create_file(2);
        store.allocate_data(&file, &DataRequest::new(0, 8)).unwrap();
        store.commit(b"one").unwrap();
        store.free(a).unwrap();
        let s = store.statfs();
        assert_eq!(s.blocks, 8192);
        assert_eq!(s.pending_blocks, 100);
        assert!(s.prealloc_reserved_blocks > 0);
        assert_eq!(
            s.metadata_blocks + s.free_blocks + s.pending_blocks + s.prealloc_reserved_blocks + 8,
            s.blocks,
            "{s:?}"
        );
        assert_eq!(s.root_reserved_blocks, (8192 - s.metadata_blocks) / 20);
        assert_eq!(
            s.available_blocks,
            s.free_blocks + s.prealloc_reserved_blocks - s.root_reserved_blocks
        );
        assert!(s.journal_used_bytes > 0 && s.journal_used_bytes < s.journal_bytes);
        assert_eq!(s.open_transaction_bytes, 40 + 24);
        store.set_root_reserved_blocks(0);
        assert_eq!(store.statfs().root_reserved_blocks, 0);
    }

    /// A root set before a checkpoint comes back at open with the records committed after
    /// it; one too large is refused; damage to the primary's root falls back to the backup.
    #[test]
    fn a_root_survives_with_the_records_after_it() {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(8192 * 4096));
        let store = Store::create(dev.clone(), &geometry(), 16, Policy::default()).unwrap();
        assert!(store.root().is_empty());
        assert!(matches!(
            store.set_root(&[0; 300]),
            Err(Error::RootTooLarge { bytes: 300, .. })
        ));
        store.allocate(&AllocRequest::new(1, 1)).unwrap();
        store.commit(b"before").unwrap();
        store.set_root(b"tables at block 1234").unwrap();
        store.checkpoint().unwrap();
        store.allocate(&AllocRequest::new(2, 1)).unwrap();
        store.commit(b"after").unwrap();
        drop(store);
        let (store, records) = Store::open(dev.clone(), Policy::default()).unwrap();
        assert_eq!(store.root(), b"tables at block 1234");
        let payloads: Vec<&[u8]> = records.iter().map(|r| &r.payload[..]).collect();
        assert_eq!(payloads, [b"after"]);
        drop(store);
        dev.write_at(&[0x42], 140).unwrap();
        let report = fsck::check(dev.as_ref()).unwrap();
        assert!(!report.primary_superblock_ok && report.backup_superblock_ok);
        let (store, _) = Store::open(dev, Policy::default()).unwrap();
        assert_eq!(store.root(), b"tables at block 1234");
    }

    /// The device is marked in use on the media while a store has it open; a clean close
    /// clears the mark; a store that dies without closing leaves it, and the next open
    /// names the owner that did not close it.
    #[test]
    fn the_device_says_whether_it_was_closed() {
        let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), 9));
        let store = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
        assert_eq!(store.unclean_close(), None);
        let live = fsck::check(dev.as_ref()).unwrap();
        assert!(
            live.in_use && !live.owner_gone,
            "a store of this process holds it"
        );
        let owner = crate::disk::format::read_superblock(dev.as_ref())
            .unwrap()
            .owner;
        drop(store);
        assert!(!fsck::check(dev.as_ref()).unwrap().in_use, "a clean close");
        let store = Store::open(dev.clone(), Policy::default()).unwrap().0;
        assert_eq!(store.unclean_close(), None);
        let second = crate::disk::format::read_superblock(dev.as_ref())
            .unwrap()
            .owner;
        assert_ne!(owner, second, "each open draws its own owner number");
        store.allocate(&AllocRequest::new(1, 4)).unwrap();
        store.commit(b"a").unwrap();
        // The process dies: nothing it writes from here reaches the media.
        dev.fail_writes(true);
        drop(store);
        dev.crash(Crash::DropAll).unwrap();
        let report = fsck::check(dev.as_ref()).unwrap();
        assert!(report.in_use && report.clean(), "{report:?}");
        let (store, records) = Store::open(dev, Policy::default()).unwrap();
        assert_eq!(store.unclean_close(), Some(second));
        assert_eq!(records.len(), 1);
    }

    /// A store dropped as abandoned leaves the device marked as a crash does; the open
    /// after it marks the device unchecked, and the mark survives clean closes until a
    /// caller says it checked (and is set again by a caller that met damage).
    #[test]
    fn an_unclean_close_stays_marked_until_checked() {
        let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), 10));
        let store = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
        assert!(!store.unchecked());
        store.abandon();
        drop(store);
        let left = fsck::check(dev.as_ref()).unwrap();
        assert!(
            left.in_use && left.owner_gone,
            "left as a crash, by an owner gone"
        );
        // An owner record no one can judge (another machine's, or none): only a watch of
        // its heartbeat tells (not opened here: the open would watch for 11 s).
        let other = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), 11));
        let store = Store::create(other.clone(), &geometry(), 8, Policy::default()).unwrap();
        store.abandon();
        drop(store);
        crate::disk::format::clear_owner(other.as_ref()).unwrap();
        let unknown = fsck::check(other.as_ref()).unwrap();
        assert!(unknown.in_use && !unknown.owner_gone, "{unknown:?}");
        let reopen = || Store::open(dev.clone(), Policy::default()).unwrap().0;
        let store = reopen();
        assert!(store.unclean_close().is_some() && store.unchecked());
        drop(store); // a clean close by a tool that checks nothing
        let store = reopen();
        assert_eq!(store.unclean_close(), None);
        assert!(store.unchecked(), "kept across the clean close");
        store.mark_checked();
        drop(store);
        let store = reopen();
        assert!(!store.unchecked(), "cleared by the close after the check");
        store.mark_unchecked();
        drop(store);
        assert!(reopen().unchecked(), "damage met: marked for the next open");
    }

    /// A commit says whether it checkpointed (a full journal): exactly the commits during
    /// which the checkpoint hook ran, through the shared transaction and through handles.
    #[test]
    fn a_commit_reports_its_checkpoint() {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(8192 * 4096));
        let store = Store::create(dev, &geometry(), 2, Policy::default()).unwrap();
        let hooks = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let h = hooks.clone();
        store.set_checkpoint_hook(Box::new(move || {
            h.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(b"root".to_vec())
        }));
        let mut reported = 0;
        for i in 0..200u64 {
            let before = hooks.load(std::sync::atomic::Ordering::Relaxed);
            let checkpointed = if i % 2 == 0 {
                store.allocate(&AllocRequest::new(i, 1)).unwrap();
                store.commit_reporting(&[7; 100]).unwrap().checkpointed
            } else {
                let t = store.begin();
                t.allocate(&AllocRequest::new(i, 1)).unwrap();
                t.commit(&[7; 100]).unwrap().checkpointed
            };
            let ran = hooks.load(std::sync::atomic::Ordering::Relaxed) - before;
            assert_eq!(u64::from(checkpointed), ran, "commit {i}");
            reported += ran;
        }
        assert!(reported >= 4, "{reported} checkpoints");
        assert_eq!(store.root(), b"root");
    }

    /// A caller keeps its own table of committed payloads and writes it from the
    /// checkpoint hook (full journals checkpoint often here); after a crash, the table the
    /// root names plus the replayed records are every committed payload, in order, whatever
    /// the crash interrupted.
    #[test]
    fn the_checkpoint_hook_keeps_the_callers_tables_and_the_journal_in_step() {
        let mut checkpointed = 0;
        for seed in 0..40u64 {
            let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), seed));
            let store = Store::create(dev.clone(), &geometry(), 2, Policy::default()).unwrap();
            // The caller's state in memory, and its tables "on disk" (written by the hook).
            let committed: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
            let tables: Arc<Mutex<Vec<Vec<Vec<u8>>>>> = Arc::default();
            let (c, t) = (committed.clone(), tables.clone());
            store.set_checkpoint_hook(Box::new(move || {
                let mut t = t.lock();
                t.push(c.lock().clone());
                Ok(((t.len() - 1) as u64).to_le_bytes().to_vec())
            }));
            let crash_at = 60 + seed * 5;
            for i in 0..crash_at {
                let payload = format!("txn {i}").into_bytes();
                store.allocate(&AllocRequest::new(i, 1)).unwrap();
                if i + 1 == crash_at {
                    dev.fail_after(seed % 9);
                    let _ = store.commit(&payload);
                    break;
                }
                store.commit(&payload).unwrap();
                committed.lock().push(payload);
            }
            drop(store);
            dev.crash(Crash::Random {
                keep: 0.5,
                tear: true,
            })
            .unwrap();
            let (store, records) = Store::open(dev, Policy::default()).unwrap();
            let root = store.root();
            let mut state = if root.is_empty() {
                Vec::new()
            } else {
                let n = u64::from_le_bytes(root.try_into().unwrap()) as usize;
                tables.lock()[n].clone()
            };
            state.extend(records.into_iter().map(|r| r.payload));
            let expected = committed.lock().clone();
            // The interrupted commit may have survived whole.
            let last = format!("txn {}", crash_at - 1).into_bytes();
            if state.len() == expected.len() + 1 {
                assert_eq!(state.last(), Some(&last), "seed {seed}");
                state.pop();
            }
            assert_eq!(state, expected, "seed {seed}");
            checkpointed += u64::from(tables.lock().len() > 1);
        }
        assert!(
            checkpointed >= 20,
            "full journals checkpointed in {checkpointed} runs"
        );
    }
}
