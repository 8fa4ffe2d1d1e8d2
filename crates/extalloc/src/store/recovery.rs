//! Recovery: opening a store. `open` reads the superblock and the descriptor table (no
//! bitmap), replays the journal's records after the tail into the allocator, and refuses a
//! journal damaged in the middle unless told to accept the loss.
//!
//! Data structures: `HomeBitmaps`, the allocator's `BitmapSource` (the home copies,
//! checked against their descriptors), and the [`OpenTiming`] figures it fills.
//!
//! Invariant: after `open`, memory is the home state with every replayed record applied in
//! order. A group whose descriptor or bitmap fails its checks is held corrupt (used, never
//! handed out, its records skipped). After an interrupted checkpoint every group is still
//! verified by a checksum: the checkpoint left the groups it was writing with descriptors
//! in flight, which accept the new bitmap or the one it replaces and nothing else; the
//! replay, idempotent then, brings either up to date. Damage stays visible.
//!
//! Locks: none of the store's (no one else holds the store while it opens); the calls into
//! the allocator take its own.

use super::claim::{self, OpenClaim};
use super::ops::OpShards;
use super::state::{Boundary, OpenTiming, Store};
use crate::alloc::{Allocator, BitmapSource, GroupSummary, Policy, Summaries};
use crate::disk::device::{Device, FenceDevice};
use crate::disk::format::{self, GroupDesc, Superblock, DESC_BYTES};
use crate::disk::journal::{self, Area, Journal, Op, Record};
use crate::error::{Corrupted, Error, Result};
use crate::files::Files;
use crate::geometry::{Extent, Geometry};
use parking_lot::{Mutex, RwLock};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Reads bitmaps for the allocator: the home copy, checked against the descriptor on disk
/// (a descriptor an interrupted checkpoint left in flight accepts the new bitmap or the one
/// it replaces: `format::read_bitmap`).
struct HomeBitmaps {
    dev: Arc<dyn Device>,
    sb: Superblock,
}

impl BitmapSource for HomeBitmaps {
    fn read_bitmap(&self, g: u64) -> Result<Vec<u8>> {
        let bs = u64::from(self.sb.block_size);
        let mut d = [0u8; DESC_BYTES];
        self.dev
            .read_at(&mut d, self.sb.desc_start * bs + g * DESC_BYTES as u64)?;
        let desc = GroupDesc::decode(&d, g)?;
        format::read_bitmap(self.dev.as_ref(), &self.sb, g, &desc)
    }
}

/// Applies replayed records to the allocator (loading the groups they touch). Changes to a
/// corrupt group are skipped; after an interrupted checkpoint (`repairing`) a record is
/// applied block by block whatever the bits were (idempotent), otherwise a record that
/// does not apply is corruption.
fn apply_records(
    alloc: &Allocator,
    geometry: &Geometry,
    records: &[Record],
    repairing: bool,
) -> Result<()> {
    for r in records {
        for op in &r.ops {
            let (e, used) = match *op {
                Op::Allocate(e) => (e, true),
                Op::Free(e) => (e, false),
            };
            if e.len == 0 || geometry.validate(e).is_err() {
                return Err(Error::Corrupt {
                    what: Corrupted::JournalRecord { seq: r.seq },
                    detail: format!("extent {}+{} is not on the device", e.start, e.len),
                });
            }
            // Load the groups it touches first: a bitmap found corrupt on load holds its
            // group, whose changes are then skipped.
            let mut in_corrupt = false;
            for (g, _, _) in geometry.split(e) {
                alloc.ensure_loaded(g)?;
                in_corrupt |= alloc.is_corrupt(g);
            }
            if in_corrupt {
                continue;
            }
            match alloc.load_extent(e, used) {
                Ok(()) => {}
                Err(Error::Corrupt { .. }) if repairing => {
                    for b in e.start..e.end() {
                        let _ = alloc.load_extent(Extent::new(b, 1), used);
                    }
                }
                Err(err) => {
                    return Err(Error::Corrupt {
                        what: Corrupted::JournalRecord { seq: r.seq },
                        detail: err.to_string(),
                    })
                }
            }
        }
    }
    Ok(())
}

/// A journal damaged in the middle: refused with [`Error::JournalDamaged`], or, accepting
/// the loss, every group the stranded records touch held corrupt (their blocks may be in
/// use or free).
fn hold_stranded(
    d: &journal::Damage,
    sb: &Superblock,
    alloc: &Allocator,
    geometry: &Geometry,
    accept_loss: bool,
) -> Result<()> {
    if !accept_loss {
        return Err(Error::JournalDamaged {
            lost_seq: d.lost_seq,
            offset: sb.journal_start * u64::from(sb.block_size) + d.offset,
            stranded: d.stranded.len() as u64,
        });
    }
    for g in journal::groups_touched(&d.stranded, geometry) {
        alloc.mark_corrupt(g);
    }
    Ok(())
}

/// Once a loss is accepted, and before its records are wiped, marks it on the device
/// (`STATE_JOURNAL_LOST`, durable when this returns): until a repair finishes
/// ([`Store::mark_checked`]), a plain open refuses the device and `fsck` reports the loss,
/// as they did before the wipe.
fn mark_journal_lost(dev: &dyn Device, sb: &mut Superblock) -> Result<()> {
    let generation = sb.generation;
    sb.state |= format::STATE_JOURNAL_LOST;
    sb.generation += 1;
    format::write_superblock(dev, sb)?;
    dev.flush()?;
    // Paired with the check at the next open: the copy that wins carries the mark.
    // (A read that fails is not this write's fault.)
    debug_assert!(
        format::read_superblock(dev).map_or(true, |d| d.generation > generation
            && d.state & format::STATE_JOURNAL_LOST != 0),
        "the loss's mark reads back"
    );
    Ok(())
}

/// Once a loss is accepted, zeroes the journal outside the records replayed (from the head
/// round to the tail), so no stranded record can follow a record written from now on, and
/// the next open finds a journal that ends at its head instead of the same damage. The
/// stranded records' changes are lost either way (their groups are held corrupt until a
/// rebuild); a crash after the wipe leaves what a crash before it leaves.
fn wipe_stranded(dev: &dyn Device, sb: &Superblock, head: u64) -> Result<()> {
    let a = area(sb);
    let tail = sb.journal_tail;
    assert!(
        head <= a.len && tail <= a.len,
        "head and tail lie inside the journal"
    );
    let ranges = if head >= tail {
        vec![(head, a.len), (0, tail)]
    } else {
        vec![(head, tail)]
    };
    const CHUNK: u64 = 1 << 20;
    let zeros = vec![0u8; CHUNK as usize];
    for (from, to) in ranges {
        let mut at = from;
        while at < to {
            let n = (to - at).min(CHUNK);
            dev.write_at(&zeros[..n as usize], a.start + at)?;
            at += n;
        }
    }
    dev.flush()
}

fn area(sb: &Superblock) -> Area {
    let bs = u64::from(sb.block_size);
    Area {
        start: sb.journal_start * bs,
        len: sb.journal_blocks * bs,
    }
}

/// `dev` behind the store's latch (`Store::latch`): every write of the store, and of the
/// volume and file system over it, goes through it, so the first failed write or flush
/// stops them all.
fn latched(dev: Arc<dyn Device>) -> (Arc<FenceDevice>, Arc<dyn Device>) {
    let latch = Arc::new(FenceDevice::latching(dev));
    let dev: Arc<dyn Device> = latch.clone();
    (latch, dev)
}

impl Store {
    /// Makes a fresh file system on `dev` (with a random uuid, as `mkfs` tools give) and
    /// opens it.
    pub fn create(
        dev: Arc<dyn Device>,
        geometry: &Geometry,
        journal_blocks: u64,
        policy: Policy,
    ) -> Result<Store> {
        format::mkfs(dev.as_ref(), geometry, journal_blocks, rand::random())?;
        Ok(Store::open(dev, policy)?.0)
    }

    /// Opens the file system on `dev`: the superblock and descriptors, then the journal
    /// replayed (loading the bitmaps of the groups it touches). Returns the replayed
    /// records, oldest first.
    ///
    /// A journal damaged in the middle (a committed record unreadable while later committed
    /// records are intact) is refused with [`Error::JournalDamaged`]: replaying up to the
    /// damage would drop committed transactions and hand out blocks they own. `extalloc
    /// fsck` reports it; [`Store::open_accepting_journal_loss`] opens anyway.
    pub fn open(dev: Arc<dyn Device>, policy: Policy) -> Result<(Store, Vec<Record>)> {
        Self::open_with(dev, policy, false)
    }

    /// Opens a device whose journal is damaged in the middle, accepting the loss: the
    /// records before the damage are replayed, the ones after it are not, and every group
    /// those later records touch is held out of use as corrupt (nothing is handed out of
    /// it, frees into it are refused) for `extalloc fsck` and the caller to resolve. On an
    /// undamaged journal it is [`Store::open`].
    pub fn open_accepting_journal_loss(
        dev: Arc<dyn Device>,
        policy: Policy,
    ) -> Result<(Store, Vec<Record>)> {
        Self::open_with(dev, policy, true)
    }

    /// The journal damage the open accepted, if any: the sequence number of the first
    /// record lost and how many intact records after it were not replayed
    /// ([`Store::open_accepting_journal_loss`]).
    pub fn journal_loss(&self) -> Option<(u64, u64)> {
        self.journal_loss
    }

    /// An earlier open accepted a journal loss and wiped the lost records, and no repair
    /// has finished since (`STATE_JOURNAL_LOST` found set at this open: a repair cut
    /// short). What was lost is no longer known; only an open accepting a loss opens such
    /// a device ([`Store::open`] refuses it with [`Error::JournalLossUnrepaired`]).
    pub fn journal_loss_earlier(&self) -> bool {
        self.journal_loss_earlier
    }

    fn open_with(
        dev: Arc<dyn Device>,
        policy: Policy,
        accept_loss: bool,
    ) -> Result<(Store, Vec<Record>)> {
        let started = std::time::Instant::now();
        let object_claim = OpenClaim::take(&dev)?;
        let (latch, dev) = latched(dev);
        let sb = format::read_superblock(dev.as_ref())?;
        // Refused before anything is read further when a live owner holds it.
        let verdict = claim::judge(dev.as_ref(), &sb)?;
        let geometry = sb.geometry()?;
        let journal_loss_earlier = sb.state & format::STATE_JOURNAL_LOST != 0;
        if journal_loss_earlier && !accept_loss {
            return Err(Error::JournalLossUnrepaired);
        }
        let mut sb = sb;
        let (alloc, replayed, replay_seconds) = Self::recover(&dev, &mut sb, policy, accept_loss)?;

        let journal = Journal::new(dev.clone(), area(&sb), sb.journal_tail, &replayed);
        let max_transaction_bytes = journal.max_record_bytes();
        // ext4's default: 5 % of the blocks outside the device's own metadata.
        let root_reserved = sb.blocks_count.saturating_sub(sb.metadata_end() + 1) / 20;
        let alloc_seal = alloc.seal();
        let journal_loss = replayed
            .damage
            .as_ref()
            .map(|d| (d.lost_seq, d.stranded.len() as u64));
        let records = replayed.records;
        let in_use = claim::InUse::take(&dev, &latch, &mut sb, &verdict)?;
        let unclean_close = verdict.previous;
        let open_timing = OpenTiming {
            total_seconds: started.elapsed().as_secs_f64(),
            replay_seconds,
            records_replayed: records.len() as u64,
            bitmaps_loaded: alloc.stats().loaded_bitmaps,
        };
        Ok((
            Store {
                dev,
                latch,
                metadata_end: sb.metadata_end(),
                backup_block: sb.backup_block(),
                journal_loss,
                journal_loss_earlier,
                sb: Mutex::new(sb),
                files: Files::new(alloc),
                journal,
                ops: OpShards::new(geometry.group_blocks),
                boundary: Boundary::new(),
                commit_lock: RwLock::new(()),
                open_timing,
                forced_commits: std::sync::atomic::AtomicBool::new(false),
                // Nothing is pending at open: the seal ends an empty transaction.
                recorded_seal: AtomicU64::new(alloc_seal),
                max_transaction_bytes,
                root_reserved_blocks: AtomicU64::new(root_reserved),
                handles: Default::default(),
                discards: Default::default(),
                meta_reserved: Mutex::new(Vec::new()),
                unclean_close,
                abandoned: Default::default(),
                pending_root: Mutex::new(None),
                checkpoint_hook: Mutex::new(None),
                in_use,
                _claim: object_claim,
            },
            records,
        ))
    }

    /// The allocator over the home state with the journal's records applied, the records,
    /// and the seconds the replay took (reading the journal and applying the records).
    fn recover(
        dev: &Arc<dyn Device>,
        sb: &mut Superblock,
        policy: Policy,
        accept_loss: bool,
    ) -> Result<(Allocator, journal::Replayed, f64)> {
        let geometry = sb.geometry()?;
        let replay_started = std::time::Instant::now();
        let replayed =
            journal::replay(dev.as_ref(), area(sb), sb.journal_tail, sb.journal_tail_seq)?;
        let replay_read = replay_started.elapsed();
        // After an interrupted checkpoint, a group's bitmap may be the new one or the one
        // it replaces, and the records must be replayed idempotently.
        let repairing = sb.state & format::STATE_CHECKPOINTING != 0;
        let alloc = Self::open_home(dev, sb, policy)?;
        if let Some(d) = &replayed.damage {
            hold_stranded(d, sb, &alloc, &geometry, accept_loss)?;
            mark_journal_lost(dev.as_ref(), sb)?;
            wipe_stranded(dev.as_ref(), sb, replayed.head)?;
        }
        debug_assert!(
            replayed.damage.is_none() || sb.state & format::STATE_JOURNAL_LOST != 0,
            "an accepted loss is marked on the device before its records are wiped"
        );
        let apply_started = std::time::Instant::now();
        apply_records(&alloc, &geometry, &replayed.records, repairing)?;
        let replay_seconds = (replay_read + apply_started.elapsed()).as_secs_f64();
        Ok((alloc, replayed, replay_seconds))
    }

    /// The allocator over the home state: every group's figures from its descriptor (no
    /// bitmap read), corrupt descriptors held. After an interrupted checkpoint (the
    /// superblock says so) every group is loaded now, its figures from its bitmap, and
    /// marked for the next checkpoint; so is a group whose descriptor is in flight.
    ///
    /// The descriptors are read in parts by up to [`OPEN_THREADS_MAX`] threads (a device of
    /// at least [`PARALLEL_OPEN_GROUPS`] groups), each streaming its part into packed
    /// summaries: memory is 4 bytes a group, never the descriptor table.
    fn open_home(dev: &Arc<dyn Device>, sb: &Superblock, policy: Policy) -> Result<Allocator> {
        let geometry = sb.geometry()?;
        let repairing = sb.state & format::STATE_CHECKPOINTING != 0;
        let groups = sb.groups();
        let threads = if groups < PARALLEL_OPEN_GROUPS {
            1
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get().min(OPEN_THREADS_MAX))
        } as u64;
        let per = groups.div_ceil(threads).max(1);
        let ranges: Vec<std::ops::Range<u64>> = (0..threads)
            .map(|t| (t * per).min(groups)..((t + 1) * per).min(groups))
            .collect();
        let read = |r: std::ops::Range<u64>| {
            DescriptorPart::read(dev.as_ref(), sb, &geometry, &policy, r, repairing)
        };
        let parts: Vec<Result<DescriptorPart>> = std::thread::scope(|s| {
            let handles: Vec<_> = ranges[1..]
                .iter()
                .map(|r| {
                    let mine = r.clone();
                    std::thread::Builder::new()
                        .name("extalloc-open".into())
                        .spawn_scoped(s, move || read(mine))
                        .map_err(|_| r.clone())
                })
                .collect();
            let mut parts = vec![read(ranges[0].clone())];
            for h in handles {
                parts.push(match h {
                    Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                    // No thread to spare: this part is read here.
                    Err(r) => read(r),
                });
            }
            parts
        });
        let mut parts = parts.into_iter();
        let DescriptorPart {
            mut summaries,
            mut corrupt,
            mut eager,
        } = parts.next().expect("at least one part")?;
        for p in parts {
            let p = p?;
            summaries.append(p.summaries);
            corrupt.extend(p.corrupt);
            eager.extend(p.eager);
        }
        let source = Arc::new(HomeBitmaps {
            dev: dev.clone(),
            sb: sb.clone(),
        });
        let alloc = Allocator::open_lazy(geometry, policy, source, summaries)?;
        for &g in &corrupt {
            alloc.mark_corrupt(g);
        }
        if repairing {
            eager = (0..sb.groups()).collect();
        }
        for g in eager {
            alloc.ensure_loaded(g)?;
            alloc.mark_home_dirty(g);
        }
        Ok(alloc)
    }
}

/// Devices with fewer groups open their descriptors on one thread.
const PARALLEL_OPEN_GROUPS: u64 = 1 << 16;
/// Threads that read a large device's descriptors at open.
const OPEN_THREADS_MAX: usize = 4;

/// What one thread made of a run of descriptors at open.
struct DescriptorPart {
    summaries: Summaries,
    /// Groups whose descriptor failed its checks: held corrupt.
    corrupt: Vec<u64>,
    /// Groups loaded at open, their figures taken from their bitmaps: in flight (the
    /// figures may not be those of the bitmap on the media) or with impossible figures (a
    /// checksum-valid descriptor no checkpoint could write).
    eager: Vec<u64>,
}

impl DescriptorPart {
    fn read(
        dev: &dyn Device,
        sb: &Superblock,
        geometry: &Geometry,
        policy: &Policy,
        range: std::ops::Range<u64>,
        repairing: bool,
    ) -> Result<Self> {
        let count = range.end - range.start;
        let mut part = DescriptorPart {
            summaries: Summaries::from_group(geometry, policy, range.start, count),
            corrupt: Vec::new(),
            eager: Vec::new(),
        };
        format::read_descriptors_range(dev, sb, range, |g, d| {
            let s = match d {
                Ok(d) if !repairing && d.replaces.is_none() => GroupSummary {
                    free_blocks: d.free_blocks,
                    largest_order: d.largest_order,
                    avg_order: d.avg_order,
                    class_tag: d.class_tag,
                },
                Ok(d) => {
                    if d.replaces.is_some() && !repairing {
                        part.eager.push(g);
                    }
                    GroupSummary::default()
                }
                Err(_) => {
                    part.corrupt.push(g);
                    GroupSummary::default()
                }
            };
            debug_assert_eq!(part.summaries.next_group(), g, "descriptors in order");
            if part.summaries.push(s).is_err() {
                part.eager.push(g);
                part.summaries
                    .push(GroupSummary::default())
                    .expect("an empty summary is always possible");
            }
        })?;
        assert_eq!(part.summaries.len(), count, "one summary per descriptor");
        Ok(part)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::AllocRequest;
    use crate::disk::device::{Crash, FaultDevice, MemDevice};
    use crate::store::tests::geometry;
    use std::collections::BTreeSet;

    /// 300 committed one-extent transactions, then one 4 KiB block in the middle of the
    /// journal zeroed (or one byte flipped): open refuses with `JournalDamaged` naming the
    /// lost record, fsck reports the stranded records, and opening with the loss accepted
    /// hands out no block that a committed transaction owns and wipes the stranded records
    /// (marking the loss first: a plain open refuses until the caller's repair is done),
    /// so records committed after it replay.
    #[test]
    fn damage_in_the_middle_of_the_journal_is_refused_not_replayed_past() {
        use crate::store::fsck;
        for flip_one_byte in [false, true] {
            let dev = Arc::new(MemDevice::new(8192 * 4096));
            let store = Store::create(dev.clone(), &geometry(), 256, Policy::default()).unwrap();
            let mut owned = Vec::new();
            for i in 0..300u64 {
                owned.push(store.allocate(&AllocRequest::new(i, 4)).unwrap());
                store.commit(&i.to_le_bytes()).unwrap();
            }
            let sb = format::read_superblock(dev.as_ref()).unwrap();
            drop(store);
            // A block a third of the way into the records: records are 72 bytes.
            let at = sb.journal_start * 4096 + 4096 * 2;
            if flip_one_byte {
                let mut b = [0u8; 1];
                dev.read_at(&mut b, at + 100).unwrap();
                dev.write_at(&[b[0] ^ 0x10], at + 100).unwrap();
            } else {
                dev.write_at(&[0u8; 4096], at).unwrap();
            }
            let err = Store::open(dev.clone(), Policy::default()).err().unwrap();
            match err {
                Error::JournalDamaged {
                    lost_seq, stranded, ..
                } => {
                    assert!(lost_seq > 50 && lost_seq < 200, "{lost_seq}");
                    assert!(stranded > 100, "{stranded}");
                }
                e => panic!("{flip_one_byte}: not JournalDamaged: {e}"),
            }
            let report = fsck::check(dev.as_ref()).unwrap();
            assert!(report.journal_records_lost > 100, "{report:?}");
            assert!(!report.clean());
            let (store, replayed) =
                Store::open_accepting_journal_loss(dev.clone(), Policy::default()).unwrap();
            assert!(replayed.len() < 200);
            assert!(!store.corrupt_groups().is_empty(), "affected groups held");
            // Held groups offer nothing, those the replay loaded before the damage too.
            store.allocator().check().unwrap();
            let owned_blocks: BTreeSet<u64> = owned.iter().flat_map(|e| e.start..e.end()).collect();
            let mut taken = 0;
            while let Ok(e) = store.allocate(&AllocRequest::new(1, 4)) {
                for b in e.start..e.end() {
                    assert!(!owned_blocks.contains(&b), "{b} handed out twice");
                }
                taken += 1;
                if taken % 50 == 0 {
                    store.commit(b"after the loss").unwrap();
                }
            }
            store.commit(b"after the loss").unwrap();
            drop(store);
            // The stranded records were wiped, and the loss marked first: until a caller
            // says its repair is done, a plain open refuses and fsck reports it.
            let err = Store::open(dev.clone(), Policy::default()).err().unwrap();
            assert!(matches!(err, Error::JournalLossUnrepaired), "{err}");
            let report = fsck::check(dev.as_ref()).unwrap();
            assert!(
                report.journal_loss_unrepaired && !report.clean(),
                "{report:?}"
            );
            assert_eq!(report.journal_records_lost, 0, "{report:?}");
            // The journal now ends at what was written after the loss.
            let (store, replayed) =
                Store::open_accepting_journal_loss(dev.clone(), Policy::default()).unwrap();
            assert!(replayed.iter().any(|r| r.payload == b"after the loss"));
            assert!(store.journal_loss_earlier() && store.journal_loss().is_none());
            store.mark_checked();
            drop(store); // the clean close writes the superblock
            let (store, _) = Store::open(dev.clone(), Policy::default())
                .unwrap_or_else(|e| panic!("{flip_one_byte}: a plain open after repair: {e}"));
            assert!(!store.journal_loss_earlier());
            drop(store);
            assert!(fsck::check(dev.as_ref()).unwrap().clean());
        }
    }

    /// A crash that tears the last unflushed records is a torn tail, not damage: the
    /// records of a batch whose flush never finished carry `durable_through` below them.
    #[test]
    fn a_torn_unflushed_batch_is_not_damage() {
        for seed in 0..40 {
            let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), seed));
            let store = Store::create(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
            for i in 0..20u64 {
                store.allocate(&AllocRequest::new(i, 2)).unwrap();
                store.commit(b"durable").unwrap();
            }
            // Appended, never flushed: a crash keeps any subset and may tear one.
            for i in 0..10u64 {
                store.allocate(&AllocRequest::new(i, 2)).unwrap();
                let ops = store.ops.take(&store.close_boundary().fenced);
                store.journal.append(&ops, b"unflushed").unwrap();
            }
            drop(store);
            dev.crash(Crash::Random {
                keep: 0.5,
                tear: true,
            })
            .unwrap();
            let (_, replayed) = Store::open(dev.clone(), Policy::default())
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            assert!(replayed.len() >= 20);
        }
    }

    /// A crash at every point of a checkpoint that writes group 2 home (a group an earlier
    /// checkpoint wrote, whose blocks the journal does not all mention): without damage,
    /// every group is verified by a checksum at open (none held), fsck is clean and every
    /// committed block is in use; with group 2's bitmap damaged besides, fsck reports the
    /// group and open holds it out of use. (Before in-flight descriptors, a group the
    /// journal touched was taken as found after an interrupted checkpoint, and damage in it
    /// handed out blocks in use.)
    #[test]
    fn an_interrupted_checkpoint_leaves_every_group_verifiable() {
        use crate::store::fsck;
        for fail_after in 0..8u64 {
            for damage in [false, true] {
                let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), fail_after));
                let store = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
                // Blocks in groups 1 and 2, written home; then a record touching group 2.
                let a = store
                    .allocate(&AllocRequest::new(1, 16).goal(1024 + 100))
                    .unwrap();
                let b = store
                    .allocate(&AllocRequest::new(2, 16).goal(2048 + 100))
                    .unwrap();
                assert_eq!((a.start / 1024, b.start / 1024), (1, 2));
                store.commit(b"a b").unwrap();
                store.checkpoint().unwrap();
                let c = store
                    .allocate(&AllocRequest::new(3, 16).goal(2048 + 500))
                    .unwrap();
                assert_eq!(c.start / 1024, 2);
                store.commit(b"c").unwrap();
                dev.fail_after(fail_after);
                let _ = store.checkpoint();
                drop(store);
                dev.crash(Crash::Random {
                    keep: 0.5,
                    tear: false,
                })
                .unwrap();
                let sb = format::read_superblock(dev.as_ref()).unwrap();
                if damage {
                    // The byte holding b's first blocks: used in every version of group 2.
                    let at = (sb.bitmap_start + 2 * u64::from(sb.bitmap_blocks)) * 4096 + 100 / 8;
                    dev.write_at(&[0u8; 2], at).unwrap();
                }
                let case = format!("fail after {fail_after}, damage {damage}");
                let report = fsck::check(dev.as_ref()).unwrap();
                let (store, _) = Store::open(dev, Policy::default()).unwrap();
                if damage {
                    assert!(
                        report.problems.iter().any(|p| p.contains("group 2")),
                        "{case}: {report:?}"
                    );
                    assert_eq!(store.corrupt_groups(), vec![2], "{case}");
                } else {
                    assert!(report.clean(), "{case}: {report:?}");
                    assert!(store.corrupt_groups().is_empty(), "{case}");
                }
                for e in [a, b, c] {
                    for blk in e.start..e.end() {
                        assert!(!store.allocator().is_free(blk).unwrap(), "{case}: {blk}");
                    }
                }
                store.allocator().check().unwrap();
            }
        }
    }

    /// A group held corrupt once loaded (at open: a group an interrupted checkpoint loads
    /// eagerly, which a record lost to journal damage touches) offers nothing from then
    /// on, as one held before its load: the allocator's check passes and no allocation
    /// reaches it. (Before, the loaded bitmap kept its free blocks and a pass took them.)
    #[test]
    fn a_loaded_group_held_corrupt_offers_nothing() {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(8192 * 4096));
        let s = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
        drop(s);
        let (s, _) = Store::open(dev.clone(), Policy::default()).unwrap();
        let a = s.alloc();
        a.ensure_loaded(3).unwrap();
        let before = a.free_blocks();
        assert!(a.is_free(3 * 1024 + 5).unwrap());
        a.mark_corrupt(3);
        assert_eq!(s.corrupt_groups(), vec![3]);
        assert!(!a.is_free(3 * 1024 + 5).unwrap());
        assert_eq!(before - a.free_blocks(), 1024, "its blocks counted held");
        a.check().unwrap();
        while let Ok(e) = s.allocate(&AllocRequest::new(7, 30)) {
            assert_ne!(e.start / 1024, 3, "handed out of the group held corrupt");
        }
    }

    #[test]
    fn a_corrupt_group_is_held_and_the_rest_works() {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(8192 * 4096));
        let s = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
        drop(s);
        let sb = format::read_superblock(dev.as_ref()).unwrap();
        // Write group 5 home (mkfs writes no bitmap), then damage its bitmap.
        let mut descs = vec![0u8; 4096];
        dev.read_at(&mut descs, sb.desc_start * 4096).unwrap();
        let (_, bm) = format::read_group(dev.as_ref(), &sb, 5).unwrap();
        format::write_group(dev.as_ref(), &sb, 5, &bm, 0, &mut descs, 0).unwrap();
        dev.write_at(&descs, sb.desc_start * 4096).unwrap();
        let at = (sb.bitmap_start + 5 * u64::from(sb.bitmap_blocks)) * 4096 + 7;
        dev.write_at(&[0x5a], at).unwrap();
        let (s, _) = Store::open(dev.clone(), Policy::default()).unwrap();
        assert!(s.corrupt_groups().is_empty(), "open reads no bitmap");
        // A free as the group's first use loads it, finds it corrupt and is refused.
        assert!(matches!(
            s.free(Extent::new(5 * 1024 + 100, 50)),
            Err(Error::Corrupt { .. })
        ));
        assert_eq!(s.corrupt_groups(), &[5]);
        // Measuring the free space loads every group: the damage is found.
        s.allocator().free_space();
        assert_eq!(s.corrupt_groups(), &[5]);
        assert_eq!(s.allocator().stats().corrupt_groups, 1);
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
        // One store per device: a second open while `s` lives is refused.
        assert!(matches!(
            Store::open(dev.clone(), Policy::default()),
            Err(Error::DeviceBusy { .. })
        ));
        drop(s);
        // The damage is left for fsck; the next open still holds the group.
        let mut b = [0u8];
        dev.read_at(&mut b, at).unwrap();
        assert_eq!(b, [0x5a]);
        assert!(
            crate::store::fsck::check(dev.as_ref())
                .unwrap()
                .corrupt_groups
                == vec![5]
        );
        let (again, _) = Store::open(dev.clone(), Policy::default()).unwrap();
        again.ensure_loaded(5).unwrap();
        assert_eq!(again.corrupt_groups(), &[5]);
        again.allocator().check().unwrap();
        drop(again);
        // A damaged descriptor is found on open, before any bitmap is read.
        dev.write_at(&[0x33], sb.desc_start * 4096 + 6 * DESC_BYTES as u64 + 2)
            .unwrap();
        let (third, _) = Store::open(dev, Policy::default()).unwrap();
        assert_eq!(third.corrupt_groups(), &[6]);
        third.ensure_loaded(5).unwrap();
        assert_eq!(third.corrupt_groups(), &[5, 6]);
        assert_eq!(third.allocator().free_space().groups[6].free_blocks, 0);
        third.allocator().check().unwrap();
    }

    /// A 16 TiB device (sparse in memory): open reads no bitmap, an untouched unloaded group
    /// costs its packed figures, its load state and a few bytes of set bits (issue 52's
    /// bound: 16 bytes), and the first allocation loads one bitmap.
    #[test]
    fn a_16_tib_device_opens_without_reading_bitmaps() {
        let bytes = 16u64 << 40;
        let geometry = Geometry::from_bytes(4096, crate::GROUP_BLOCKS_DEFAULT, bytes).unwrap();
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(bytes));
        format::mkfs(dev.as_ref(), &geometry, 1024, [0; 16]).unwrap();
        // Open reads the descriptors in parts on several threads: damage in a later part.
        let sb = format::read_superblock(dev.as_ref()).unwrap();
        assert!(
            sb.groups() >= 2 * PARALLEL_OPEN_GROUPS,
            "{} groups",
            sb.groups()
        );
        let desc_at = |g: u64| sb.desc_start * 4096 + g * DESC_BYTES as u64;
        let (broken, impossible) = (sb.groups() - 1000, sb.groups() - 10);
        dev.write_at(&[0x33], desc_at(broken) + 2).unwrap();
        // Checksum-valid, but an order above the group's own.
        let mut raw = [0u8; DESC_BYTES];
        dev.read_at(&mut raw, desc_at(impossible)).unwrap();
        let mut d = GroupDesc::decode(&raw, impossible).unwrap();
        d.largest_order = Some(geometry.group_order() + 2);
        dev.write_at(&d.encode(impossible), desc_at(impossible))
            .unwrap();
        let (s, _) = Store::open(dev, Policy::default()).unwrap();
        let a = s.allocator();
        assert_eq!(s.corrupt_groups(), &[broken]);
        // The impossible figures were replaced by its bitmap's, read at open.
        assert!(a.is_loaded(impossible));
        assert_eq!(a.stats().loaded_bitmaps, 1);
        assert_eq!(a.home_dirty_groups(), &[impossible]);
        a.check().unwrap();
        let per_group = a.memory_per_unloaded_group();
        assert!(
            (8.0..16.0).contains(&per_group),
            "{per_group} bytes per group"
        );
        s.allocate(&AllocRequest::new(1, 100)).unwrap();
        assert!(a.stats().loaded_bitmaps >= 2 && a.stats().loaded_bitmaps <= 3);
    }
}
