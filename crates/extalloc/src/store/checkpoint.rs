//! Checkpoints: the changed groups written home, then the journal emptied.
//!
//! The order on the media (`docs/format.md`): the superblock says `CHECKPOINTING`, flush;
//! the changed groups' descriptors in flight (new figures, and the bitmap each replaces),
//! flush; their bitmaps, flush; their descriptors settled, flush; the superblock with the
//! tail at the front of the journal area and the state cleared, flush.
//!
//! Data structures: none of its own; the allocator's home-dirty groups say what to write.
//!
//! Invariant: home state holds exactly what the appended records say. Blocks preallocations
//! reserve and the allocations of a transaction whose record is not appended yet are
//! written home free, and their groups stay dirty; only the frees of transactions whose
//! records were appended are released first. A group that did not get home stays dirty;
//! a corrupt group is never written.
//!
//! Locks: runs under `commit_lock` and the closed `boundary` (taken by `checkpoint`, or by
//! `commit` when its record finds the journal full), then takes `sb`, then the file layer's
//! and the allocator's.

use super::state::Store;
use crate::disk::format::{self, GroupDesc, Replaced, Superblock, DESC_BYTES};
use crate::disk::journal::Op;
use crate::error::{Error, Result};
use crate::geometry::Extent;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering::Relaxed;

impl Store {
    /// Writes every group home and moves the journal's tail past all records.
    ///
    /// Refused ([`Error::TransactionOpen`], nothing written) while the open transaction
    /// holds changes. A checkpoint that fails later (the caller's checkpoint hook, a write,
    /// a flush) leaves the journal's tail and the root where they were, so every record
    /// still replays; the groups it did not finish stay marked for the next checkpoint.
    /// The appended records may have been made durable (and their frees released) by then.
    pub fn checkpoint(&self) -> Result<()> {
        let _serial = self.commit_lock.write();
        let _closed = self.close_boundary();
        // Changes of the open transaction would be lost if written home without a record.
        if !self.ops.is_empty() {
            return Err(Error::TransactionOpen { op: "checkpoint" });
        }
        let sealed = self.alloc().seal();
        let done = self.checkpoint_locked(&[], sealed);
        debug_assert!(
            done.is_err() || self.journal.head().0 == 0,
            "records left behind"
        );
        done
    }

    /// The checkpoint a commit makes when its record finds the journal full: home state
    /// without this transaction's changes (`ops`, whose record follows), and only the frees
    /// of transactions whose records were appended released. Not `seal - 1`: a commit that
    /// failed earlier took a seal number too, and its frees, back in the open transaction,
    /// are not recorded anywhere yet.
    pub(super) fn checkpoint_for_full_journal(&self, ops: &[Op]) -> Result<()> {
        self.checkpoint_locked(ops, self.recorded_seal.load(Relaxed))
    }

    /// The checkpoint a handle's commit makes when its record finds the journal full
    /// (under `commit_lock`): the shared transaction's changes are recorded nowhere yet,
    /// and every open handle's allocations (its own included) are left out.
    pub(super) fn checkpoint_for_handle(&self) -> Result<()> {
        let closed = self.close_boundary();
        let ops = self.ops.take(&closed.fenced);
        let result = self.checkpoint_for_full_journal(&ops);
        self.ops.put_back(ops, &closed.fenced);
        result
    }

    /// Under `commit_lock` and the closed boundary. Writes home the state of every
    /// appended record: the allocator's, minus `exclude` (a transaction whose record is not
    /// appended yet), with the frees of transactions up to `release_upto` released.
    fn checkpoint_locked(&self, exclude: &[Op], release_upto: u64) -> Result<()> {
        debug_assert!(
            self.commit_lock.is_locked_exclusive(),
            "a checkpoint, no commit lock"
        );
        // The caller's tables first, while no commit can run: they hold every committed
        // record, so its root goes with the tail that leaves those records behind.
        let root = self.next_root()?;
        // Make every appended record durable and release their frees: home state is then
        // exactly what the records say.
        let (_, next_seq) = self.journal.head();
        if next_seq > 1 {
            self.journal.commit(next_seq - 1)?;
        }
        self.release_durable(release_upto);
        // Handles' frees of appended records are durable now: free them in memory, so
        // home shows them free as their records say.
        let frees = self.handles.take_appended();
        self.apply_frees(&frees);
        let mut sb = self.sb.lock();
        self.write_home_flagged(&mut sb, exclude)?;
        // Every appended record is home: the journal is empty and starts again at the
        // front of its area, so any record that fits the journal fits now. Replay from
        // offset 0 meets an older record (or zeros) there and stops.
        sb.journal_tail = 0;
        sb.journal_tail_seq = next_seq;
        let old_root = match root {
            Some(root) => Some(std::mem::replace(&mut sb.root, root)),
            None => None,
        };
        sb.state &= !format::STATE_CHECKPOINTING;
        sb.generation += 1;
        let written =
            format::write_superblock(self.dev.as_ref(), &sb).and_then(|()| self.dev.flush());
        if let Err(e) = written {
            if let Some(old) = old_root {
                // Not durable: the root in memory stays the one on the media.
                sb.root = old;
            }
            return Err(e);
        }
        self.journal.restart();
        debug_assert_eq!(self.journal.head(), (0, next_seq), "the journal restarted");
        drop(sb);
        if self.alloc().policy().bitmap_memory_mib > 0 {
            let keep = (self.alloc().policy().bitmap_memory_mib << 20)
                / self.alloc().bitmap_memory_bytes().max(1);
            self.alloc().drop_idle_bitmaps(keep);
        }
        Ok(())
    }

    /// Writes the groups changed since the last checkpoint home without moving the
    /// journal's tail, and leaves the superblock saying a checkpoint is under way (the
    /// next checkpoint's end clears it): a later open replays every record idempotently
    /// over them, as after an interrupted checkpoint. For a rebuild of the bitmaps
    /// (`repair.rs`), whose changes no record holds. The caller holds nothing open: no
    /// change waits in the open transaction.
    pub(super) fn write_home_replaying_idempotently(&self) -> Result<()> {
        let _serial = self.commit_lock.write();
        let _closed = self.close_boundary();
        assert!(
            self.ops.is_empty(),
            "groups written home under an open transaction"
        );
        let mut sb = self.sb.lock();
        self.write_home_flagged(&mut sb, &[])?;
        // The flag stays until a checkpoint ends: every record still replays, idempotently.
        debug_assert!(sb.state & format::STATE_CHECKPOINTING != 0);
        Ok(())
    }

    /// Says a checkpoint is under way before touching any group (the superblock's flag,
    /// flushed; see docs/format.md), then writes home only the groups changed since the
    /// last checkpoint, and only the descriptor blocks that describe them, leaving out
    /// `exclude` (`write_groups_home`), and flushes.
    fn write_home_flagged(&self, sb: &mut Superblock, exclude: &[Op]) -> Result<()> {
        sb.state |= format::STATE_CHECKPOINTING;
        sb.generation += 1;
        format::write_superblock(self.dev.as_ref(), sb)?;
        self.dev.flush()?;
        let dirty: Vec<u64> = self
            .alloc()
            .home_dirty_groups()
            .into_iter()
            .filter(|&g| !self.alloc().is_corrupt(g))
            .collect();
        match self.write_groups_home(sb, &dirty, exclude) {
            Ok(redo) => {
                for g in redo {
                    self.alloc().mark_home_dirty(g);
                }
            }
            Err(e) => {
                // Nothing may count as home that did not get there: the next checkpoint
                // writes every one of them again.
                for &g in &dirty {
                    self.alloc().mark_home_dirty(g);
                }
                return Err(e);
            }
        }
        // Written under the flag: a crash from here on replays every record idempotently.
        debug_assert!(sb.state & format::STATE_CHECKPOINTING != 0);
        self.dev.flush()
    }

    /// The root this checkpoint writes: the hook's, else one set by `set_root`, else none
    /// (the root stays).
    fn next_root(&self) -> Result<Option<Vec<u8>>> {
        let root = match &*self.checkpoint_hook.lock() {
            Some(hook) => Some(hook()?),
            None => self.pending_root.lock().take(),
        };
        match root {
            Some(r) if r.len() > format::ROOT_MAX => Err(Error::RootTooLarge {
                bytes: r.len() as u64,
                max: format::ROOT_MAX as u64,
            }),
            other => Ok(other),
        }
    }

    /// Writes the `dirty` groups home in three steps, each flushed before the next: their
    /// descriptors in flight (new figures and checksum, and the bitmap each replaces), the
    /// bitmaps, then the descriptors again, settled (the caller flushes that step). A crash
    /// anywhere leaves every group verifiable by a checksum: a settled descriptor matches
    /// its bitmap, an in-flight one matches the new bitmap or the replaced one, and damage
    /// matches neither (`docs/format.md`). A descriptor never points at a bitmap that is not
    /// on the media, which matters for a group leaving `BITMAP_UNINIT`, whose bitmap area
    /// held nothing. Groups an unrecorded transaction's allocations (`exclude`) touched are
    /// returned: their home copy differs from memory until the next checkpoint.
    fn write_groups_home(
        &self,
        sb: &Superblock,
        dirty: &[u64],
        exclude: &[Op],
    ) -> Result<BTreeSet<u64>> {
        // A group held corrupt keeps its damaged home copy for fsck.
        debug_assert!(dirty.iter().all(|&g| !self.alloc().is_corrupt(g)));
        let (homes, redo) = self.home_images(sb, dirty, exclude)?;
        debug_assert!(homes.iter().map(|h| h.0).eq(dirty.iter().copied()));
        debug_assert!(
            redo.iter().all(|g| dirty.contains(g)),
            "redo a group not written"
        );
        let mut tables = self.read_desc_tables(sb, dirty)?;
        for (g, _, desc) in &homes {
            let replaces = self.replaced_bitmap(sb, *g, &tables)?;
            let in_flight = GroupDesc {
                replaces: Some(replaces),
                ..*desc
            };
            put_desc(sb, &mut tables, *g, &in_flight);
        }
        self.write_desc_tables(&tables)?;
        self.dev.flush()?;
        for (g, bitmap, desc) in &homes {
            format::write_bitmap(self.dev.as_ref(), sb, *g, bitmap)?;
            put_desc(sb, &mut tables, *g, desc);
        }
        self.dev.flush()?;
        self.write_desc_tables(&tables)?;
        Ok(redo)
    }

    /// The home image of each dirty group: `(group, bitmap, settled descriptor)`, and the
    /// groups whose image leaves out an unrecorded transaction's allocations.
    fn home_images(
        &self,
        sb: &Superblock,
        dirty: &[u64],
        exclude: &[Op],
    ) -> Result<(Vec<HomeImage>, BTreeSet<u64>)> {
        let bs = u64::from(sb.block_size);
        let bitmap_bytes = (u64::from(sb.bitmap_blocks) * bs) as usize;
        let mut redo: BTreeSet<u64> = BTreeSet::new();
        // Reserved is not allocated: blocks preallocations hold were never recorded, so home
        // shows them free (a crash frees them), and their groups stay dirty.
        let mut unrecorded: Vec<Extent> = exclude
            .iter()
            .filter_map(|op| match *op {
                Op::Allocate(e) => Some(e),
                Op::Free(_) => None,
            })
            .chain(self.files.reserved_extents())
            .chain(self.metadata_reserve())
            // Open handles' allocations are recorded nowhere yet.
            .chain(self.handles.unrecorded())
            // Frees held for a discard are durable: free at home, used in memory until
            // the caller has discarded them.
            .chain(self.discards.held_extents())
            .collect();
        // By start, each group looks only at the extents that may reach into it.
        unrecorded.sort_unstable_by_key(|e| e.start);
        let longest = unrecorded.iter().map(|e| e.len).max().unwrap_or(0);
        let mut homes = Vec::with_capacity(dirty.len());
        for &g in dirty {
            // Clean first: a change made while the group is written (a concurrent release)
            // marks it dirty again. A failure marks every group dirty again (the caller).
            self.alloc().mark_home_clean(g);
            let mut bitmap = self.alloc().group_bitmap_bytes(g, bitmap_bytes)?;
            let (gstart, gend) = (g * sb.group_blocks, (g + 1) * sb.group_blocks);
            let first = unrecorded.partition_point(|e| e.start.saturating_add(longest) <= gstart);
            for &e in unrecorded[first..].iter().take_while(|e| e.start < gend) {
                // The unrecorded transaction's allocations are not home yet. Its frees are
                // still pending, so memory already has those blocks used, as home must
                // (undoing a free of a block the same transaction allocated would mark it
                // used at home with no record allocating it).
                if e.end() <= gstart {
                    continue;
                }
                redo.insert(g);
                for b in e.start.max(gstart)..e.end().min(gend) {
                    let i = b - gstart;
                    bitmap[(i / 8) as usize] &= !(1 << (i % 8));
                }
            }
            // Metadata, the backup superblock and the padding past a short last group stay
            // marked whatever the bitmap says.
            for (b, init) in bitmap.iter_mut().zip(format::initial_bitmap(sb, g)) {
                *b |= init;
            }
            let desc = GroupDesc::for_bitmap(sb, g, &bitmap, self.alloc().group_class_tag(g));
            homes.push((g, bitmap, desc));
        }
        Ok((homes, redo))
    }

    /// The descriptor-table blocks that describe `groups` (sorted): `(device offset, bytes)`.
    fn read_desc_tables(&self, sb: &Superblock, groups: &[u64]) -> Result<Vec<(u64, Vec<u8>)>> {
        let bs = u64::from(sb.block_size);
        let per_block = bs / DESC_BYTES as u64;
        let mut blocks: Vec<u64> = groups.iter().map(|g| g / per_block).collect();
        blocks.sort_unstable();
        blocks.dedup();
        blocks
            .into_iter()
            .map(|block| {
                let at = sb.desc_start * bs + block * bs;
                let mut table = vec![0u8; bs as usize];
                self.dev.read_at(&mut table, at)?;
                Ok((at, table))
            })
            .collect()
    }

    fn write_desc_tables(&self, tables: &[(u64, Vec<u8>)]) -> Result<()> {
        let bs = u64::from(self.alloc().geometry().block_size);
        for (at, table) in tables {
            // Whole descriptor blocks, at their place (no other metadata shares them).
            debug_assert!(at % bs == 0 && table.len() as u64 == bs, "a table at {at}");
            self.dev.write_at(table, *at)?;
        }
        Ok(())
    }

    /// What group `g`'s bitmap is at home now, as its current descriptor (in `tables`)
    /// says: the initial state, or a bitmap's checksum and free count. A descriptor left in
    /// flight by an interrupted checkpoint (or one that no longer decodes) is resolved by
    /// reading the bitmap on the media.
    fn replaced_bitmap(
        &self,
        sb: &Superblock,
        g: u64,
        tables: &[(u64, Vec<u8>)],
    ) -> Result<Replaced> {
        let (table, off) = desc_slot(sb, tables, g);
        let old = GroupDesc::decode(&table[off..off + DESC_BYTES], g);
        if let Ok(d) = &old {
            if d.flags & format::DESC_BITMAP_UNINIT != 0 {
                return Ok(Replaced::Uninit);
            }
            match d.replaces {
                None => {
                    return Ok(Replaced::Bitmap {
                        crc: d.bitmap_crc,
                        free_blocks: d.free_blocks,
                    })
                }
                Some(Replaced::Uninit) => {
                    if format::read_bitmap_which(self.dev.as_ref(), sb, g, d)?.1 {
                        return Ok(Replaced::Bitmap {
                            crc: d.bitmap_crc,
                            free_blocks: d.free_blocks,
                        });
                    }
                    return Ok(Replaced::Uninit);
                }
                Some(Replaced::Bitmap { .. }) => {}
            }
        }
        let raw = format::read_bitmap_raw(self.dev.as_ref(), sb, g)?;
        let used = format::bitmap_used(&raw, sb.group_blocks);
        Ok(Replaced::Bitmap {
            crc: crc32c::crc32c(&raw),
            free_blocks: (sb.group_blocks - used) as u32,
        })
    }
}

/// A group's home image: `(group, bitmap, settled descriptor)`.
type HomeImage = (u64, Vec<u8>, GroupDesc);

/// The table holding group `g`'s descriptor among `tables`, and the descriptor's offset in it.
fn desc_slot<'t>(sb: &Superblock, tables: &'t [(u64, Vec<u8>)], g: u64) -> (&'t Vec<u8>, usize) {
    let (i, off) = desc_index(sb, tables, g);
    (&tables[i].1, off)
}

fn desc_index(sb: &Superblock, tables: &[(u64, Vec<u8>)], g: u64) -> (usize, usize) {
    let bs = u64::from(sb.block_size);
    let per_block = bs / DESC_BYTES as u64;
    let at = sb.desc_start * bs + (g / per_block) * bs;
    let i = tables
        .binary_search_by_key(&at, |(a, _)| *a)
        .expect("the table block of a dirty group was read");
    (i, ((g % per_block) * DESC_BYTES as u64) as usize)
}

/// Encodes `desc` into group `g`'s slot of `tables`.
fn put_desc(sb: &Superblock, tables: &mut [(u64, Vec<u8>)], g: u64, desc: &GroupDesc) {
    let (i, off) = desc_index(sb, tables, g);
    tables[i].1[off..off + DESC_BYTES].copy_from_slice(&desc.encode(g));
    debug_assert_eq!(
        GroupDesc::decode(&tables[i].1[off..off + DESC_BYTES], g).ok(),
        Some(*desc),
        "group {g}'s descriptor reads back otherwise"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::{AllocRequest, Policy};
    use crate::disk::device::{Crash, Device, FaultDevice, MemDevice};
    use crate::store::tests::geometry;
    use std::sync::Arc;

    /// Free X, a commit fails (its record was never written), then the next commit finds
    /// the journal full and checkpoints: X's free, recorded nowhere yet, must stay pending,
    /// so X is neither handed out nor written home as free. (The old release bound,
    /// `seal - 1`, released it.)
    #[test]
    fn a_failed_commits_frees_stay_pending_through_a_full_journal_checkpoint() {
        let dev = Arc::new(MemDevice::new(8192 * 4096));
        let store = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
        let x = store.allocate(&AllocRequest::new(1, 8)).unwrap();
        store.commit(b"x").unwrap();
        store.free(x).unwrap();
        // A commit that fails before its record is written: sealed, changes put back.
        {
            let _serial = store.commit_lock.write();
            let closed = store.close_boundary();
            let ops = store.ops.take(&closed.fenced);
            store.alloc().seal();
            store.ops.put_back(ops, &closed.fenced);
        }
        // The next commit's record finds the journal full: the checkpoint it makes.
        {
            let _serial = store.commit_lock.write();
            let closed = store.close_boundary();
            let ops = store.ops.take(&closed.fenced);
            store.alloc().seal();
            store.checkpoint_for_full_journal(&ops).unwrap();
            store.ops.put_back(ops, &closed.fenced);
        }
        assert!(
            !store.allocator().is_free(x.start).unwrap(),
            "X released unrecorded"
        );
        let home = format::read_superblock(dev.as_ref()).unwrap();
        let (_, bitmap) = format::read_group(dev.as_ref(), &home, 0).unwrap();
        let bit = x.start % geometry().group_blocks;
        assert!(
            bitmap[(bit / 8) as usize] & (1 << (bit % 8)) != 0,
            "X written home free"
        );
        // Committed at last: X is free after the commit.
        store.commit(b"free x").unwrap();
        assert!(store.allocator().is_free(x.start).unwrap());
    }

    /// A record that fits the journal but not the space left after its write position
    /// fits once a checkpoint has emptied the journal (the journal restarts at its front),
    /// and the store reopens with the record replayed.
    #[test]
    fn a_record_that_fits_the_journal_fits_after_a_checkpoint() {
        let dev = Arc::new(MemDevice::new(8192 * 4096));
        // 8 blocks: 32 KiB of journal.
        let store = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
        for i in 0..100u64 {
            store.allocate(&AllocRequest::new(i, 1)).unwrap();
            store.commit(&[0u8; 150]).unwrap();
        }
        store.checkpoint().unwrap();
        // Half the journal, less a block: a record and its mirror fill it.
        let big = vec![7u8; 12 << 10];
        store.allocate(&AllocRequest::new(1, 1)).unwrap();
        let seq = store.commit(&big).unwrap();
        drop(store);
        let (store, replayed) = Store::open(dev, Policy::default()).unwrap();
        assert_eq!(replayed.len(), 1);
        assert_eq!(
            (replayed[0].seq, replayed[0].payload.len()),
            (seq, big.len())
        );
        store.allocator().check().unwrap();
    }

    /// Open reads the superblock and descriptors only; groups load as they are used, with
    /// read-ahead, and a checkpoint writes only the changed ones; idle bitmaps are dropped
    /// under the memory limit and come back intact.
    #[test]
    fn bitmaps_load_lazily_and_idle_ones_are_dropped() {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(8192 * 4096));
        let policy = Policy::parse("extalloc:bitmap_memory_mib=0").unwrap();
        Store::create(dev.clone(), &geometry(), 8, policy.clone()).unwrap();
        let (s, _) = Store::open(dev.clone(), policy.clone()).unwrap();
        assert_eq!(s.allocator().stats().loaded_bitmaps, 0);
        // Tiny device: every set's words are mostly overhead; see the 16 TiB test.
        assert!(s.allocator().memory_per_unloaded_group() > 16.0);
        let mut held = Vec::new();
        for i in 0..30u64 {
            held.push(s.allocate(&AllocRequest::new(i, 100)).unwrap());
        }
        s.commit(b"a").unwrap();
        let loaded = s.allocator().stats().loaded_bitmaps;
        assert!(loaded > 0 && loaded < 8, "{loaded} loaded");
        assert_eq!(s.allocator().home_dirty_groups().len() as u64, loaded);
        s.checkpoint().unwrap();
        assert!(s.allocator().home_dirty_groups().is_empty());
        // Everything clean and idle: all of it can go.
        s.drop_idle_bitmaps(0);
        s.drop_idle_bitmaps(0);
        assert_eq!(s.allocator().stats().loaded_bitmaps, 0);
        s.allocator().check().unwrap();
        // Reloaded groups hold what was written: freeing every extent works and the free
        // space comes back whole.
        let before = s.allocator().free_blocks();
        for e in &held {
            s.free(*e).unwrap();
        }
        s.commit(b"b").unwrap();
        assert_eq!(s.allocator().free_blocks(), before + 30 * 100);
        s.checkpoint().unwrap();
        drop(s);
        let (s, _) = Store::open(dev, policy).unwrap();
        assert_eq!(s.allocator().free_blocks(), before + 30 * 100);
        s.allocator().free_space();
        s.allocator().check().unwrap();
        assert!(crate::store::fsck::check(s.dev.as_ref()).unwrap().clean());
    }

    /// An extent allocated and freed in the same transaction, whose commit finds the
    /// journal full: the checkpoint must not write it home as used (no record allocates it
    /// before the one that frees it), or the next open fails replaying the allocation.
    #[test]
    fn allocated_and_freed_in_one_full_journal_commit_reopens() {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(8192 * 4096));
        let store = Store::create(dev.clone(), &geometry(), 2, Policy::default()).unwrap();
        let before = store.allocator().free_blocks();
        for i in 0..300u64 {
            let e = store.allocate(&AllocRequest::new(i, 3)).unwrap();
            store.free(e).unwrap();
            store.commit(&[7; 300]).unwrap();
        }
        drop(store);
        let (s, _) = Store::open(dev, Policy::default()).unwrap();
        s.allocator().check().unwrap();
        assert_eq!(s.allocator().free_blocks(), before);
    }

    /// A checkpoint that fails part-way (an I/O error after 0-20 writes) latches the
    /// store: no later checkpoint is believed (it fails with `IoLatched`, writing
    /// nothing), and after a crash and reopen the committed allocation is there, survives
    /// a checkpoint of the reopened store, dropping bitmaps and another reopen.
    #[test]
    fn a_failed_checkpoint_loses_no_change() {
        for n in 0..20u64 {
            let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), n));
            let s = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
            let e = s.allocate(&AllocRequest::new(1, 40)).unwrap();
            s.commit(b"a").unwrap();
            dev.fail_after(n);
            let failed = s.checkpoint().is_err();
            dev.fail_writes(false);
            let s = if failed {
                let again = s.checkpoint().unwrap_err();
                assert!(matches!(again, Error::IoLatched { .. }), "n {n}: {again}");
                assert!(s.io_failure().is_some());
                drop(s);
                dev.crash(Crash::DropAll).unwrap();
                Store::open(dev.clone(), Policy::default()).unwrap().0
            } else {
                s
            };
            s.checkpoint().unwrap();
            s.drop_idle_bitmaps(0);
            s.drop_idle_bitmaps(0);
            for b in e.start..e.end() {
                assert!(
                    !s.allocator().is_free(b).unwrap(),
                    "n {n} ({failed}): block {b}"
                );
            }
            drop(s);
            dev.crash(Crash::DropAll).unwrap();
            let (r, _) = Store::open(dev, Policy::default()).unwrap();
            r.allocator().check().unwrap();
            for b in e.start..e.end() {
                assert!(
                    !r.allocator().is_free(b).unwrap(),
                    "n {n}: block {b} after reopen"
                );
            }
        }
    }

    /// A crash inside the first checkpoint that writes a group home (it leaves
    /// `BITMAP_UNINIT`): whatever part of the writes survives, metadata stays used and the
    /// committed allocation survives.
    #[test]
    fn a_crash_in_a_groups_first_checkpoint_keeps_metadata_used() {
        for seed in 0..120u64 {
            let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), seed));
            let s = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
            let sb = format::read_superblock(dev.as_ref()).unwrap();
            let e = s.allocate(&AllocRequest::new(1, 7).goal(200)).unwrap();
            s.commit(b"a").unwrap();
            dev.fail_after(seed % 12);
            let _ = s.checkpoint();
            drop(s);
            dev.crash(Crash::Random {
                keep: 0.5,
                tear: seed % 2 == 0,
            })
            .unwrap();
            let (r, _) = Store::open(dev, Policy::default()).unwrap();
            r.allocator().check().unwrap();
            for b in (0..sb.metadata_end()).chain([sb.backup_block()]) {
                assert!(!r.allocator().is_free(b).unwrap(), "seed {seed}: block {b}");
            }
            for b in e.start..e.end() {
                assert!(!r.allocator().is_free(b).unwrap(), "seed {seed}: block {b}");
            }
        }
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
