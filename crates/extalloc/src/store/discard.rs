//! Discard notices: the extents a commit made reusable, handed to the caller in batches so
//! it can discard (TRIM) them, and held used until it says it has.
//!
//! A block freed by a commit may be handed out again at once; a discard of it issued later
//! would then destroy the new owner's data. So with notices on
//! ([`Store::set_discard_notices`]) a committed free does not return to the free space: it
//! is held (`alloc/discard.rs`) and queued. [`Store::take_discards`] hands the queue over,
//! adjacent extents joined; [`Store::discarded`] frees each once the caller has discarded
//! it. Held blocks are free on the media (their records are durable, and a checkpoint
//! writes them home free), so a crash loses only the notices: after a reopen the blocks
//! are free and no discard is owed (a discard is advice to the device, never needed for
//! correctness).
//!
//! Data structures: [`Discards`]: the switch, the queue (held, not handed over yet), the
//! handed-over extents (start -> length), the held block count.
//!
//! Invariant: every held entry of the allocator lies in exactly one extent of the queue or
//! of `taken`; `held_blocks` is their total.
//!
//! Lock order: `queue` -> `taken` -> the allocator's group locks (`discarded` releases
//! under `taken`). Both are taken with no allocator lock held.

use super::state::Store;
use crate::error::{Error, Result};
use crate::geometry::Extent;
use std::sync::atomic::Ordering::Relaxed;

impl Store {
    /// Turns discard notices on or off (off by default). On: blocks a commit frees are held
    /// used and queued for [`Store::take_discards`] until [`Store::discarded`] says the
    /// device discarded them. Turning them off leaves what is held until acknowledged.
    pub fn set_discard_notices(&self, on: bool) {
        self.discards.on.store(on, Relaxed);
    }

    /// Hands over the extents committed frees made reusable since the last call, adjacent
    /// ones joined, in block order. Each stays used until [`Store::discarded`] is called
    /// with it. Empty with notices off.
    pub fn take_discards(&self) -> Vec<Extent> {
        // The queue stays locked until the extents are in `taken`: a checkpoint between
        // would miss them and write them home used.
        let mut queue = self.discards.queue.lock();
        let joined = Extent::join_adjacent(std::mem::take(&mut *queue));
        let mut taken = self.discards.taken.lock();
        for e in &joined {
            let previous = taken.insert(e.start, e.len);
            assert!(previous.is_none(), "held extent {e:?} handed over twice");
        }
        joined
    }

    /// Says the device has discarded `extent`, one of the extents [`Store::take_discards`]
    /// returned: its blocks are free from now on. Anything else is refused with
    /// [`Error::NotADiscard`], changing nothing.
    pub fn discarded(&self, extent: Extent) -> Result<()> {
        let mut taken = self.discards.taken.lock();
        if taken.get(&extent.start) != Some(&extent.len) {
            return Err(Error::NotADiscard {
                start: extent.start,
                len: extent.len,
            });
        }
        let freed = self
            .alloc()
            .release_discarded(extent)
            .unwrap_or_else(|e| panic!("a held extent {extent:?} does not release: {e}"));
        taken.remove(&extent.start);
        debug_assert_eq!(freed, extent.len, "a held extent released in part");
        let was = self.discards.held_blocks.fetch_sub(freed, Relaxed);
        debug_assert!(was >= freed, "released more than held");
        Ok(())
    }

    /// Returns the frees of transactions up to `sealed` (durable now) to the free space,
    /// or holds them for a discard with notices on.
    pub(super) fn release_durable(&self, sealed: u64) {
        if self.discards.on.load(Relaxed) {
            self.discards.hold(self.alloc().release_held(sealed));
        } else {
            self.alloc().release(sealed);
        }
    }

    /// Frees `e`, which a durable handle record freed, in memory at once, or holds it
    /// for a discard with notices on.
    pub(super) fn free_durable(&self, e: Extent) -> Result<()> {
        if self.discards.on.load(Relaxed) {
            self.discards.hold(self.alloc().hold_free(e)?);
            Ok(())
        } else {
            self.alloc().free_now(e)
        }
    }
}

/// Blocks a batched discard holds at most at a time: the rest of a group stays free for
/// allocations while the device discards a batch.
const TRIM_BATCH: u64 = 8192;

impl Store {
    /// Discards (TRIMs) the free blocks of `blocks`, clamped to the device, in free runs of
    /// at least `min_len` blocks, as `FITRIM` asks of a file system: each batch of runs is
    /// held used (no allocation hands it out meanwhile; they count as held for a discard),
    /// discarded on the device ([`Device::discard`](crate::disk::device::Device::discard)),
    /// then freed again. Held blocks are free on the media, so a crash at any point leaves
    /// every block as it was. Returns the blocks discarded, `None` from a device that does
    /// not discard (found at its first batch). A start past the device is [`Error::OutOfRange`], no blocks
    /// [`Error::ZeroLength`]; both change nothing. On a device error the
    /// batch is freed again and the error returned (the batches before it stay discarded).
    pub fn trim(&self, blocks: Extent, min_len: u64) -> Result<Option<u64>> {
        let total = self.alloc().geometry().blocks_count;
        if blocks.start >= total {
            return Err(Error::OutOfRange {
                start: blocks.start,
                len: blocks.len,
                device_blocks: total,
            });
        }
        if blocks.len == 0 {
            return Err(Error::ZeroLength);
        }
        let end = blocks.start.saturating_add(blocks.len).min(total);
        let min_len = u32::try_from(min_len.max(1)).unwrap_or(u32::MAX);
        let geometry = *self.alloc().geometry();
        let mut trimmed = 0;
        for g in geometry.group_of(blocks.start)..=geometry.group_of(end - 1) {
            let gstart = geometry.group_start(g);
            let gend = gstart + geometry.group_len(g);
            let to = (end.min(gend) - gstart) as u32;
            let mut from = (blocks.start.max(gstart) - gstart) as u32;
            while from < to {
                let (batch, next) = self.hold_for_trim(g, (from, to), min_len)?;
                debug_assert!(next > from || batch.is_empty(), "a trim makes progress");
                debug_assert!(
                    batch
                        .iter()
                        .all(|e| e.start >= gstart && e.end() <= gstart + u64::from(to)),
                    "a batch lies in the range asked"
                );
                match self.discard_batch(&batch)? {
                    Some(n) => trimmed += n,
                    None => return Ok(None),
                }
                from = next;
            }
        }
        Ok(Some(trimmed))
    }

    /// Holds a batch of group `g`'s free runs for [`Store::trim`], entered as handed over
    /// (so a checkpoint writes them home free). Under `commit_lock`: no checkpoint falls
    /// between the hold and the entry.
    fn hold_for_trim(&self, g: u64, range: (u32, u32), min_len: u32) -> Result<(Vec<Extent>, u32)> {
        let _serial = self.commit_lock.read();
        let mut taken = self.discards.taken.lock();
        let (batch, next) = self.alloc().hold_unused(g, range, min_len, TRIM_BATCH)?;
        for e in &batch {
            let previous = taken.insert(e.start, e.len);
            assert!(previous.is_none(), "held extent {e:?} handed over twice");
        }
        let blocks: u64 = batch.iter().map(|e| e.len).sum();
        self.discards.held_blocks.fetch_add(blocks, Relaxed);
        Ok((batch, next))
    }

    /// Discards each extent of `batch` and frees it; `None` if the device does not discard.
    /// Every extent is freed whatever happens.
    fn discard_batch(&self, batch: &[Extent]) -> Result<Option<u64>> {
        let bs = u64::from(self.alloc().geometry().block_size);
        let mut outcome = Ok(Some(0));
        for e in batch {
            debug_assert!(self.check_not_metadata(*e).is_ok(), "a discard of metadata");
            if let Ok(Some(n)) = outcome {
                outcome = match self.dev.discard(e.start * bs, e.len * bs) {
                    Ok(true) => Ok(Some(n + e.len)),
                    Ok(false) => Ok(None),
                    Err(err) => Err(err),
                };
            }
            self.discarded(*e)
                .unwrap_or_else(|err| panic!("a trim's held extent {e:?} does not free: {err}"));
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::{AllocRequest, Policy};
    use crate::disk::device::{Crash, FaultDevice, MemDevice};
    use crate::store::fsck;
    use crate::store::tests::geometry;
    use std::sync::Arc;

    fn used(store: &Store, e: Extent) -> bool {
        (e.start..e.end()).all(|b| !store.allocator().is_free(b).unwrap())
    }

    fn free(store: &Store, e: Extent) -> bool {
        (e.start..e.end()).all(|b| store.allocator().is_free(b).unwrap())
    }

    /// Committed frees (shared transaction and a handle's) stay used until discarded,
    /// come out joined, and the figures say where they are; misuse changes nothing.
    fn notices_hold_frees_until_discarded(policy: Policy) {
        let dev = Arc::new(MemDevice::new(8192 * 4096));
        let store = Store::create(dev, &geometry(), 16, policy).unwrap();
        store.set_discard_notices(true);
        let a = store.allocate(&AllocRequest::new(1, 8).goal(3000)).unwrap();
        let b = store
            .allocate(&AllocRequest::new(1, 8).goal(a.end()))
            .unwrap();
        let c = store.allocate(&AllocRequest::new(1, 8).goal(5000)).unwrap();
        assert_eq!(b.start, a.end(), "adjacent for the join");
        store.commit(b"three").unwrap();
        store.free(a).unwrap();
        let h = store.begin();
        h.free(b).unwrap();
        store.commit(b"frees a").unwrap();
        h.commit(b"frees b").unwrap();
        assert!(used(&store, a) && used(&store, b), "held until discarded");
        let s = store.statfs();
        assert_eq!((s.discard_held_blocks, s.pending_blocks), (16, 0));
        store.allocator().check().unwrap();
        let taken = store.take_discards();
        assert_eq!(taken, vec![Extent::new(a.start, 16)]);
        assert!(store.take_discards().is_empty(), "handed over once");
        // Misuse: never handed over, a part of one, the wrong length.
        for bad in [c, a, Extent::new(a.start, 17), Extent::new(a.start + 1, 15)] {
            let err = store.discarded(bad).unwrap_err();
            assert_eq!(
                err,
                Error::NotADiscard {
                    start: bad.start,
                    len: bad.len
                }
            );
        }
        assert!(used(&store, a) && used(&store, b) && used(&store, c));
        store.discarded(taken[0]).unwrap();
        assert!(free(&store, a) && free(&store, b));
        assert!(store.discarded(taken[0]).is_err(), "acknowledged twice");
        let s = store.statfs();
        assert_eq!((s.discard_held_blocks, s.pending_blocks), (0, 0));
        store.allocator().check().unwrap();
    }

    #[test]
    fn notices_hold_frees_until_discarded_per_group_lists() {
        notices_hold_frees_until_discarded(Policy::default());
    }

    #[test]
    fn notices_hold_frees_until_discarded_global_lists() {
        for name in ["ext4-2025", "ext4-base"] {
            let policy = Policy::preset(name).unwrap();
            notices_hold_frees_until_discarded(policy);
        }
    }

    /// Held blocks are free on the media: a checkpoint writes them home free, and after a
    /// crash before the discard they are free (the notice is lost, the blocks are not);
    /// fsck is clean; nothing is handed out while held.
    #[test]
    fn held_frees_survive_a_checkpoint_and_a_crash_free() {
        let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), 7));
        let store = Store::create(dev.clone(), &geometry(), 16, Policy::default()).unwrap();
        store.set_discard_notices(true);
        let kept = store.allocate(&AllocRequest::new(1, 64)).unwrap();
        let gone: Vec<Extent> = (0..20)
            .map(|i| {
                store
                    .allocate(&AllocRequest::new(1, 4).goal(2000 + 100 * i))
                    .unwrap()
            })
            .collect();
        store.commit(b"all").unwrap();
        // Home clean before the frees: holding them must make their groups dirty again.
        store.checkpoint().unwrap();
        for &e in &gone {
            store.free(e).unwrap();
        }
        store.commit(b"frees").unwrap();
        store.checkpoint().unwrap();
        let taken = store.take_discards();
        assert_eq!(taken.iter().map(|e| e.len).sum::<u64>(), 80);
        // Nothing held is handed out, whatever is asked for.
        for e in &gone {
            let got = store
                .allocate(&AllocRequest::new(1, 4).goal(e.start))
                .unwrap();
            assert!(
                got.end() <= e.start || got.start >= e.end(),
                "{got:?} is held"
            );
        }
        store.commit(b"more").unwrap();
        drop(store);
        dev.crash(Crash::DropAll).unwrap();
        let report = fsck::check(dev.as_ref()).unwrap();
        assert!(report.clean(), "{report:?}");
        let (store, _) = Store::open(dev, Policy::default()).unwrap();
        assert!(used(&store, kept));
        for &e in &gone {
            assert!(free(&store, e), "{e:?} leaked by the held discard");
        }
        assert!(
            store.take_discards().is_empty(),
            "notices do not survive a crash"
        );
        store.allocator().check().unwrap();
    }

    /// With every free block held, an allocation reports no space instead of forcing
    /// commits that cannot help; acknowledging the discard makes the space usable.
    #[test]
    fn a_full_device_waits_for_the_discards() {
        let dev = Arc::new(MemDevice::new(8192 * 4096));
        let store = Store::create(dev, &geometry(), 16, Policy::default()).unwrap();
        store.set_discard_notices(true);
        store.set_forced_commits(true);
        let mut held = Vec::new();
        while let Ok(e) = store.allocate(&AllocRequest::new(64, 1)) {
            held.push(e);
            if held.len() % 64 == 0 {
                store.commit(b"").unwrap();
            }
        }
        store.commit(b"").unwrap();
        for (i, &e) in held.iter().enumerate() {
            store.free(e).unwrap();
            if i % 64 == 63 {
                store.commit(b"").unwrap();
            }
        }
        store.commit(b"").unwrap();
        let before = store.journal_flushes();
        assert!(matches!(
            store.allocate(&AllocRequest::new(1, 1)),
            Err(Error::NoSpace { .. })
        ));
        assert_eq!(
            store.journal_flushes(),
            before,
            "no pointless forced commits"
        );
        for e in store.take_discards() {
            store.discarded(e).unwrap();
        }
        store.allocate(&AllocRequest::new(1, 1)).unwrap();
        store.allocator().check().unwrap();
    }

    /// FITRIM: every free run discarded (zeros on a memory device) and free again, blocks
    /// in use untouched, the figures as before; a run shorter than `min_len` kept; a device
    /// that cannot discard trims nothing; misuse refused. Under both free-list policies.
    fn trim_discards_free_runs_only(policy: Policy) {
        use crate::disk::device::Device;
        let dev = Arc::new(MemDevice::new(8192 * 4096));
        let store = Store::create(dev.clone(), &geometry(), 16, policy).unwrap();
        let kept = store.allocate(&AllocRequest::new(1, 8).goal(3000)).unwrap();
        let gap = store
            .allocate(&AllocRequest::new(1, 3).goal(kept.end()))
            .unwrap();
        let next = store
            .allocate(&AllocRequest::new(1, 8).goal(gap.end()))
            .unwrap();
        store.commit(b"three").unwrap();
        store.free(gap).unwrap();
        store.commit(b"a gap of 3 blocks").unwrap();
        assert_eq!(
            next.start,
            gap.end(),
            "the gap lies between two used extents"
        );
        let bs = 4096u64;
        for e in [kept, gap, next] {
            dev.write_at(&vec![0xab; (e.len * bs) as usize], e.start * bs)
                .unwrap();
        }
        let before = store.statfs();
        let all = Extent::new(0, before.blocks);
        // The gap (3 blocks) is shorter than a minimum of 4: kept as it was.
        let big = store.trim(all, 4).unwrap().unwrap();
        assert_eq!(big, before.free_blocks - gap.len);
        let mut byte = [0u8; 1];
        dev.read_at(&mut byte, gap.start * bs).unwrap();
        assert_eq!(byte, [0xab], "a run under the minimum is not discarded");
        assert_eq!(store.trim(all, 1).unwrap(), Some(before.free_blocks));
        for (e, want) in [(kept, 0xab), (gap, 0), (next, 0xab)] {
            let mut back = vec![0u8; (e.len * bs) as usize];
            dev.read_at(&mut back, e.start * bs).unwrap();
            assert!(back.iter().all(|&b| b == want), "{e:?} reads {want:#x}");
        }
        let after = store.statfs();
        assert_eq!(
            after.free_blocks, before.free_blocks,
            "every held run freed again"
        );
        assert_eq!((after.discard_held_blocks, after.pending_blocks), (0, 0));
        store.allocator().check().unwrap();
        // A range: only its free blocks, clamped to the device.
        let tail = Extent::new(before.blocks - 100, 1000);
        let free_in_tail = (tail.start..before.blocks)
            .filter(|&b| store.allocator().is_free(b).unwrap())
            .count() as u64;
        assert!(
            free_in_tail >= 90,
            "the tail is mostly free: {free_in_tail}"
        );
        assert_eq!(store.trim(tail, 1).unwrap(), Some(free_in_tail));
        assert!(matches!(
            store.trim(Extent::new(before.blocks, 1), 1),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            store.trim(Extent::new(0, 0), 1),
            Err(Error::ZeroLength)
        ));
        store.allocator().check().unwrap();
    }

    #[test]
    fn trim_discards_free_runs_only_per_group_lists() {
        trim_discards_free_runs_only(Policy::default());
    }

    #[test]
    fn trim_discards_free_runs_only_global_lists() {
        for name in ["ext4-2025", "ext4-base"] {
            trim_discards_free_runs_only(Policy::preset(name).unwrap());
        }
    }

    #[test]
    fn trim_on_a_device_that_cannot_discard_trims_nothing() {
        let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), 3));
        let store = Store::create(dev, &geometry(), 16, Policy::default()).unwrap();
        let free = store.statfs().free_blocks;
        assert_eq!(store.trim(Extent::new(0, 8192), 1).unwrap(), None);
        assert_eq!(store.statfs().free_blocks, free);
        store.allocator().check().unwrap();
    }
}
