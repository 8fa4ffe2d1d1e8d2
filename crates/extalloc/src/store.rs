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
//!   or corrupt one; it returns the replayed records so the caller can redo its own metadata.
//!
//! Lock order: `commit_lock` -> `boundary` (write) -> allocator locks. `allocate` and `free`
//! hold `boundary` for reading, so a transaction's boundary (the ops taken and the
//! allocator's transaction number) is exact. Bitmaps are read eagerly on open for now.

use crate::alloc::{AllocRequest, Allocator, Policy};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::format::{self, Superblock, DESC_BYTES};
use crate::geometry::{Extent, Geometry};
use crate::journal::{self, Area, Journal, Op, Record};
use parking_lot::{Mutex, RwLock};
use std::sync::Arc;

pub struct Store {
    dev: Arc<dyn Device>,
    sb: Mutex<Superblock>,
    alloc: Allocator,
    journal: Journal,
    ops: Mutex<Vec<Op>>,
    boundary: RwLock<()>,
    commit_lock: Mutex<()>,
    /// Groups whose home metadata failed its checks on open: every block of them is held
    /// used (never handed out), their home copy is never overwritten, changes the journal
    /// records inside them are skipped.
    corrupt: Vec<u64>,
}

fn area(sb: &Superblock) -> Area {
    let bs = u64::from(sb.block_size);
    Area {
        start: sb.journal_start * bs,
        len: sb.journal_blocks * bs,
    }
}

impl Store {
    /// Makes a fresh file system on `dev` and opens it.
    pub fn create(
        dev: Arc<dyn Device>,
        geometry: &Geometry,
        journal_blocks: u64,
        policy: Policy,
    ) -> Result<Store> {
        format::mkfs(dev.as_ref(), geometry, journal_blocks, [0; 16])?;
        Ok(Store::open(dev, policy)?.0)
    }

    /// Opens the file system on `dev`: home state, then the journal replayed. Returns the
    /// replayed records, oldest first.
    pub fn open(dev: Arc<dyn Device>, policy: Policy) -> Result<(Store, Vec<Record>)> {
        let sb = format::read_superblock(dev.as_ref())?;
        let geometry = sb.geometry()?;
        let alloc = Allocator::new(geometry, policy)?;
        // Frees become reusable only when their transaction is durable: no forced commits.
        alloc.set_commits_external();
        // After an interrupted checkpoint, bitmaps may be a mix of old and new bits: take
        // them as they are and let the idempotent replay repair them.
        let repairing = sb.state & format::STATE_CHECKPOINTING != 0;
        let mut corrupt = Vec::new();
        for g in 0..sb.groups() {
            let bitmap = match format::read_group(dev.as_ref(), &sb, g) {
                Ok((_, bitmap)) => bitmap,
                Err(Error::Corrupt { .. }) if repairing => {
                    format::read_bitmap_raw(dev.as_ref(), &sb, g)?
                }
                Err(Error::Corrupt { .. }) => {
                    // Keep the rest of the device working: the group is held all used.
                    corrupt.push(g);
                    vec![0xff; (u64::from(sb.bitmap_blocks) * u64::from(sb.block_size)) as usize]
                }
                Err(e) => return Err(e),
            };
            let len = geometry.group_len(g);
            let start = geometry.group_start(g);
            let mut i = 0;
            while i < len {
                let used = |i: u64| bitmap[(i / 8) as usize] & (1 << (i % 8)) != 0;
                if !used(i) {
                    i += 1;
                    continue;
                }
                let run = (i..len).take_while(|&j| used(j)).count() as u64;
                alloc.load_extent(Extent::new(start + i, run), true)?;
                i += run;
            }
        }
        let replayed = journal::replay(
            dev.as_ref(),
            area(&sb),
            sb.journal_tail,
            sb.journal_tail_seq,
        )?;
        for r in &replayed.records {
            for op in &r.ops {
                let (e, used) = match *op {
                    Op::Allocate(e) => (e, true),
                    Op::Free(e) => (e, false),
                };
                let in_corrupt = |e: &Extent| {
                    corrupt.iter().any(|&g| {
                        let (s, t) = (
                            geometry.group_start(g),
                            geometry.group_start(g) + geometry.group_len(g),
                        );
                        e.start < t && e.end() > s
                    })
                };
                if in_corrupt(&e) {
                    continue;
                }
                match alloc.load_extent(e, used) {
                    Ok(()) => {}
                    Err(Error::Corrupt { .. }) if repairing => {
                        // Idempotent: set each block the record names.
                        for b in e.start..e.end() {
                            let _ = alloc.load_extent(Extent::new(b, 1), used);
                        }
                    }
                    Err(err) => {
                        return Err(Error::Corrupt {
                            what: format!("journal record {}", r.seq),
                            detail: err.to_string(),
                        })
                    }
                }
            }
        }
        let journal = Journal::new(dev.clone(), area(&sb), sb.journal_tail, &replayed);
        let records = replayed.records;
        Ok((
            Store {
                dev,
                sb: Mutex::new(sb),
                alloc,
                journal,
                ops: Mutex::new(Vec::new()),
                boundary: RwLock::new(()),
                commit_lock: Mutex::new(()),
                corrupt,
            },
            records,
        ))
    }

    /// Groups found corrupt on open (held used, never written home).
    pub fn corrupt_groups(&self) -> &[u64] {
        &self.corrupt
    }

    /// The in-memory allocator (for stats, `check()`, free-space figures).
    pub fn allocator(&self) -> &Allocator {
        &self.alloc
    }

    pub fn allocate(&self, req: &AllocRequest) -> Result<Extent> {
        let _open = self.boundary.read();
        let e = self.alloc.allocate(req)?;
        self.ops.lock().push(Op::Allocate(e));
        Ok(e)
    }

    pub fn free(&self, extent: Extent) -> Result<()> {
        let g = &self.alloc.geometry();
        if let Some(&bad) = self.corrupt.iter().find(|&&c| {
            extent.start < g.group_start(c) + g.group_len(c) && extent.end() > g.group_start(c)
        }) {
            return Err(Error::Corrupt {
                what: format!("group {bad}"),
                detail: "held used since it failed its checks; its blocks cannot be freed".into(),
            });
        }
        let _open = self.boundary.read();
        self.alloc.free(extent)?;
        self.ops.lock().push(Op::Free(extent));
        Ok(())
    }

    /// Ends the open transaction with `payload` and returns once it is durable. Returns the
    /// record's sequence number.
    pub fn commit(&self, payload: &[u8]) -> Result<u64> {
        let (seq, sealed) = {
            let _serial = self.commit_lock.lock();
            let _closed = self.boundary.write();
            let ops = std::mem::take(&mut *self.ops.lock());
            let sealed = self.alloc.seal();
            let seq = match self.journal.append(&ops, payload) {
                Ok(seq) => seq,
                Err(Error::JournalFull { .. }) => {
                    // Home state without this transaction (its record follows), and only
                    // the earlier transactions' frees released.
                    self.checkpoint_locked(&ops, sealed.saturating_sub(1))?;
                    self.journal.append(&ops, payload)?
                }
                Err(e) => {
                    // Nothing was written: the changes stay in the open transaction.
                    self.ops.lock().splice(0..0, ops);
                    return Err(e);
                }
            };
            (seq, sealed)
        };
        self.journal.commit(seq)?;
        self.alloc.release(sealed);
        Ok(seq)
    }

    /// Writes every group home and moves the journal's tail past all records.
    pub fn checkpoint(&self) -> Result<()> {
        let _serial = self.commit_lock.lock();
        let _closed = self.boundary.write();
        // Changes of the open transaction would be lost if written home without a record.
        if !self.ops.lock().is_empty() {
            return Err(Error::InvalidRequest(
                "checkpoint with an open transaction: commit first".into(),
            ));
        }
        let sealed = self.alloc.seal();
        self.checkpoint_locked(&[], sealed)
    }

    /// Under `commit_lock` and the closed boundary. Writes home the state of every
    /// appended record: the allocator's, minus `exclude` (a transaction whose record is not
    /// appended yet), with the frees of transactions up to `release_upto` released.
    fn checkpoint_locked(&self, exclude: &[Op], release_upto: u64) -> Result<()> {
        // Make every appended record durable and release their frees: home state is then
        // exactly what the records say.
        let (head, next_seq) = self.journal.head();
        if next_seq > 1 {
            self.journal.commit(next_seq - 1)?;
        }
        self.alloc.release(release_upto);
        let mut sb = self.sb.lock();
        let bs = u64::from(sb.block_size);
        // Say a checkpoint is under way before touching any group (see docs/format.md).
        sb.state |= format::STATE_CHECKPOINTING;
        sb.generation += 1;
        format::write_superblock(self.dev.as_ref(), &sb)?;
        self.dev.flush()?;
        let bitmap_bytes = (u64::from(sb.bitmap_blocks) * bs) as usize;
        let mut descs =
            vec![0u8; (sb.groups() * DESC_BYTES as u64).div_ceil(bs) as usize * bs as usize];
        let mut old_descs = vec![0u8; descs.len()];
        self.dev.read_at(&mut old_descs, sb.desc_start * bs)?;
        for g in 0..sb.groups() {
            if self.corrupt.contains(&g) {
                // Leave the damaged copy (and its descriptor) as found, for fsck.
                let at = (g * DESC_BYTES as u64) as usize;
                descs[at..at + DESC_BYTES].copy_from_slice(&old_descs[at..at + DESC_BYTES]);
                continue;
            }
            let mut bitmap = self.alloc.group_bitmap_bytes(g, bitmap_bytes);
            let (gstart, gend) = (g * sb.group_blocks, (g + 1) * sb.group_blocks);
            for op in exclude {
                // Undo what the unrecorded transaction did: its allocations are not home yet,
                // its frees (still pending, so marked used) stay used.
                let (e, used) = match *op {
                    Op::Allocate(e) => (e, false),
                    Op::Free(e) => (e, true),
                };
                for b in e.start.max(gstart)..e.end().min(gend) {
                    let i = b - gstart;
                    if used {
                        bitmap[(i / 8) as usize] |= 1 << (i % 8);
                    } else {
                        bitmap[(i / 8) as usize] &= !(1 << (i % 8));
                    }
                }
            }
            // Metadata blocks, the backup superblock and padding stay marked (they are used
            // in the allocator too, so this only guards the padding bits past the group).
            let len = (sb.blocks_count - g * sb.group_blocks).min(sb.group_blocks);
            for i in len..bitmap_bytes as u64 * 8 {
                bitmap[(i / 8) as usize] |= 1 << (i % 8);
            }
            let used = format::bitmap_used(&bitmap, len) as u32;
            format::write_group(
                self.dev.as_ref(),
                &sb,
                g,
                &bitmap,
                len as u32 - used,
                &mut descs,
            )?;
        }
        self.dev.write_at(&descs, sb.desc_start * bs)?;
        self.dev.flush()?;
        sb.journal_tail = head;
        sb.journal_tail_seq = next_seq;
        sb.state &= !format::STATE_CHECKPOINTING;
        sb.generation += 1;
        format::write_superblock(self.dev.as_ref(), &sb)?;
        self.dev.flush()?;
        self.journal.set_tail(head);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{Crash, FaultDevice, MemDevice};
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeSet;

    fn geometry() -> Geometry {
        Geometry::new(4096, 1024, 8192).unwrap()
    }

    fn used_blocks(alloc: &Allocator) -> BTreeSet<u64> {
        let g = alloc.geometry();
        let mut used = BTreeSet::new();
        for grp in 0..g.groups_count() {
            let bytes = alloc.group_bitmap_bytes(grp, (g.group_blocks / 8) as usize);
            for i in 0..g.group_len(grp) {
                if bytes[(i / 8) as usize] & (1 << (i % 8)) != 0 {
                    used.insert(g.group_start(grp) + i);
                }
            }
        }
        used
    }

    /// Random transactions on a fault-injecting device, crashes at random points; after each
    /// reopen every committed allocation is allocated, every committed free is free, nothing
    /// uncommitted survived, the payloads come back in order, and `check()` holds.
    #[test]
    fn crashes_lose_nothing_committed_and_keep_nothing_uncommitted() {
        // 5 x 60 = 300 crashes.
        for seed in 0..5 {
            torture(seed);
        }
    }

    fn torture(seed: u64) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), seed + 100));
        let store = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
        let baseline = used_blocks(store.allocator());
        let mut store = Some(store);
        // The model: blocks owned by committed transactions.
        let mut committed: BTreeSet<u64> = BTreeSet::new();
        let mut payloads: Vec<Vec<u8>> = Vec::new();
        for crash in 0..60 {
            let s = store.take().unwrap();
            // The open transaction: (allocated?, extent).
            let mut open: Vec<(bool, Extent)> = Vec::new();
            let mut held: Vec<u64> = committed.iter().copied().collect();
            for step in 0..rng.gen_range(1..40) {
                match rng.gen_range(0..10) {
                    0..=4 => {
                        if let Ok(e) = s.allocate(&AllocRequest::new(1, rng.gen_range(1..20))) {
                            open.push((true, e));
                        }
                    }
                    5..=6 if !held.is_empty() => {
                        let b = held.swap_remove(rng.gen_range(0..held.len()));
                        s.free(Extent::new(b, 1)).unwrap();
                        open.push((false, Extent::new(b, 1)));
                    }
                    7..=8 => {
                        let payload = format!("crash {crash} step {step}").into_bytes();
                        s.commit(&payload).unwrap();
                        for (allocated, e) in open.drain(..) {
                            for b in e.start..e.end() {
                                if allocated {
                                    committed.insert(b);
                                } else {
                                    committed.remove(&b);
                                }
                            }
                        }
                        payloads.push(payload);
                    }
                    _ => {
                        if open.is_empty() {
                            s.checkpoint().unwrap();
                        }
                    }
                }
            }
            // Crash: unflushed writes may be lost or torn.
            let keep = rng.gen_range(0.0..1.0);
            drop(s);
            dev.crash(Crash::Random {
                keep,
                tear: rng.gen_bool(0.5),
            })
            .unwrap();
            let (reopened, records) = Store::open(dev.clone(), Policy::default()).unwrap();
            reopened.allocator().check().unwrap();
            let mut expect = baseline.clone();
            expect.extend(committed.iter().copied());
            assert_eq!(
                used_blocks(reopened.allocator()),
                expect,
                "after crash {crash}"
            );
            // The replayed payloads are the newest committed ones, in order.
            let tail: Vec<&Vec<u8>> = payloads[payloads.len() - records.len()..].iter().collect();
            let got: Vec<&Vec<u8>> = records.iter().map(|r| &r.payload).collect();
            assert_eq!(got, tail, "after crash {crash}");
            store = Some(reopened);
        }
    }

    /// A crash in the middle of a commit: the record's write fails, then power is lost with
    /// any part of the unflushed writes reaching the media (torn or not). The transaction
    /// either survives whole or not at all; everything committed before it survives.
    #[test]
    fn a_crash_during_a_commit_keeps_all_or_nothing_of_it() {
        for seed in 0..40u64 {
            let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), seed));
            let s = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
            let before = used_blocks(s.allocator());
            let kept = s.allocate(&AllocRequest::new(1, 7)).unwrap();
            s.commit(b"first").unwrap();
            let lost = s.allocate(&AllocRequest::new(2, 9)).unwrap();
            s.free(Extent::new(kept.start, 2)).unwrap();
            // The append reaches the device's volatile cache; the flush fails.
            let seq = s.journal.append(
                &[Op::Allocate(lost), Op::Free(Extent::new(kept.start, 2))],
                b"second",
            );
            assert!(seq.is_ok());
            dev.fail_writes(true);
            assert!(s.commit(b"third").is_err());
            drop(s);
            dev.crash(Crash::Random {
                keep: 0.5,
                tear: seed % 2 == 0,
            })
            .unwrap();
            let (r, records) = Store::open(dev.clone(), Policy::default()).unwrap();
            r.allocator().check().unwrap();
            let used = used_blocks(r.allocator());
            let payloads: Vec<&[u8]> = records.iter().map(|x| x.payload.as_slice()).collect();
            let mut first = before.clone();
            first.extend(kept.start..kept.end());
            match payloads.as_slice() {
                [b"first"] => assert_eq!(used, first, "seed {seed}"),
                [b"first", b"second"] => {
                    let mut second = first.clone();
                    second.extend(lost.start..lost.end());
                    second.remove(&kept.start);
                    second.remove(&(kept.start + 1));
                    assert_eq!(used, second, "seed {seed}");
                }
                other => panic!("seed {seed}: replayed {other:?}"),
            }
        }
    }

    #[test]
    fn a_corrupt_group_is_held_and_the_rest_works() {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(8192 * 4096));
        let s = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
        drop(s);
        let sb = format::read_superblock(dev.as_ref()).unwrap();
        // Damage group 5's bitmap.
        let at = (sb.bitmap_start + 5 * u64::from(sb.bitmap_blocks)) * 4096 + 7;
        dev.write_at(&[0x5a], at).unwrap();
        let (s, _) = Store::open(dev.clone(), Policy::default()).unwrap();
        assert_eq!(s.corrupt_groups(), &[5]);
        s.allocator().check().unwrap();
        for i in 0..200u64 {
            let e = s.allocate(&AllocRequest::new(i, 30)).unwrap();
            assert!(
                e.start / 1024 != 5,
                "nothing is handed out of the corrupt group"
            );
        }
        assert!(matches!(
            s.free(Extent::new(5 * 1024 + 100, 1)),
            Err(Error::Corrupt { .. })
        ));
        s.commit(b"x").unwrap();
        s.checkpoint().unwrap();
        // The damage is left for fsck; the next open still holds the group.
        let mut b = [0u8];
        dev.read_at(&mut b, at).unwrap();
        assert_eq!(b, [0x5a]);
        assert!(crate::fsck::check(dev.as_ref()).unwrap().corrupt_groups == vec![5]);
        let (again, _) = Store::open(dev, Policy::default()).unwrap();
        assert_eq!(again.corrupt_groups(), &[5]);
        again.allocator().check().unwrap();
    }

    #[test]
    fn a_full_journal_checkpoints_instead_of_failing() {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(8192 * 4096));
        let store = Store::create(dev.clone(), &geometry(), 2, Policy::default()).unwrap();
        for i in 0..500u64 {
            store.allocate(&AllocRequest::new(i, 1)).unwrap();
            store.commit(&[7; 100]).unwrap();
        }
        drop(store);
        let (s, records) = Store::open(dev, Policy::default()).unwrap();
        assert!(records.len() < 500, "older records were checkpointed");
        s.allocator().check().unwrap();
        assert_eq!(
            s.allocator().free_blocks(),
            8192 - 500 - (1 + 2 + 1 + 8) - 1,
            "metadata, the backup superblock and 500 blocks are used"
        );
    }
}
