//! Tests of the store as a whole: transactions (allocate, free, the file calls, commit),
//! crash torture across commits and checkpoints, forced commits; and `geometry`, the small
//! device the tests of `recovery.rs` and `checkpoint.rs` share.
//!
//! Data structures: each test's model of what must be durable (the blocks committed
//! transactions own). Invariant checked: after every reopen, used blocks are exactly the
//! metadata and the committed allocations, and `check()` holds. Locks: the store's own,
//! through its calls (the threaded tests run two callers at once).

use super::Store;
use crate::alloc::{AllocRequest, Allocator, Policy};
use crate::disk::device::{Crash, Device, FaultDevice, MemDevice};
use crate::disk::format;
use crate::disk::journal::{Op, Record};
use crate::error::Error;
use crate::geometry::{Extent, Geometry};
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;
use std::sync::Arc;

pub(super) fn geometry() -> Geometry {
    Geometry::new(4096, 1024, 8192).unwrap()
}

/// Crashes `dev` keeping half of the unflushed writes (one torn on even seeds), then
/// opens it.
fn crash_and_reopen(dev: &Arc<FaultDevice<MemDevice>>, seed: u64) -> (Store, Vec<Record>) {
    dev.crash(Crash::Random {
        keep: 0.5,
        tear: seed.is_multiple_of(2),
    })
    .unwrap();
    Store::open(dev.clone(), Policy::default()).unwrap()
}

fn used_blocks(alloc: &Allocator) -> BTreeSet<u64> {
    let g = alloc.geometry();
    let mut used = BTreeSet::new();
    for grp in 0..g.groups_count() {
        let bytes = alloc
            .group_bitmap_bytes(grp, (g.group_blocks / 8) as usize)
            .unwrap();
        for i in 0..g.group_len(grp) {
            if bytes[(i / 8) as usize] & (1 << (i % 8)) != 0 {
                used.insert(g.group_start(grp) + i);
            }
        }
    }
    used
}

/// Every metadata block and the backup superblock are refused by `free`, alone or in a
/// longer extent, and the refusal changes nothing: after a commit and a reopen no
/// allocation lands on them and the metadata is still marked used.
#[test]
fn metadata_is_never_freed() {
    let dev = Arc::new(MemDevice::new(8192 * 4096));
    let store = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
    let (end, backup) = (store.metadata_end, store.backup_block);
    let before = used_blocks(store.alloc());
    for e in [
        Extent::new(0, 1),
        Extent::new(1, 3),
        Extent::new(end - 1, 1),
        Extent::new(end - 2, 10),
        Extent::new(backup, 1),
        Extent::new(backup - 5, 6),
    ] {
        assert!(
            matches!(store.free(e), Err(Error::MetadataBlocks { .. })),
            "{e:?}"
        );
    }
    store.commit(b"nothing").unwrap();
    assert_eq!(used_blocks(store.alloc()), before, "nothing changed");
    drop(store);
    let (store, _) = Store::open(dev, Policy::default()).unwrap();
    while let Ok(e) = store.allocate(&AllocRequest::new(1, 64)) {
        assert!(e.start >= end && e.end() <= backup, "{e:?} on metadata");
    }
    store.allocator().check().unwrap();
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
    let baseline = used_blocks(store.alloc());
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
                        // Clean bitmaps dropped: the next uses reload them.
                        s.drop_idle_bitmaps(0);
                        s.drop_idle_bitmaps(0);
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
        assert_eq!(used_blocks(reopened.alloc()), expect, "after crash {crash}");
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
        let before = used_blocks(s.alloc());
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
        let (r, records) = crash_and_reopen(&dev, seed);
        r.allocator().check().unwrap();
        let used = used_blocks(r.alloc());
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

/// Files with preallocations on a store: random writes, punches and closes, commits and
/// checkpoints, then a crash that keeps a random part of the unflushed writes. After
/// the reopen, exactly the metadata and the blocks files had mapped at the last commit
/// are used: every block a preallocation reserved is free, nothing leaked, fsck is
/// clean. Every record replayed allocates only extents handed to a file, never
/// reserved-but-unwritten blocks. The accounting equation holds after every step.
#[test]
fn files_with_preallocations_journal_only_what_they_map() {
    use crate::files::DataRequest;
    for seed in 0..40u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), seed));
        let s = Store::create(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
        let sb = format::read_superblock(dev.as_ref()).unwrap();
        let files: Vec<_> = (0..6u64).map(|id| s.create_file(id)).collect();
        let mut handed: BTreeSet<Extent> = BTreeSet::new();
        let mut durable: BTreeSet<u64> = BTreeSet::new();
        let mut saw_reserved = false;
        for step in 0..200u32 {
            let f = &files[rng.gen_range(0..files.len())];
            match rng.gen_range(0..10) {
                0..=5 => {
                    let l = rng.gen_range(0..512u64);
                    if !f.is_mapped(l) {
                        let e = s.allocate_data(f, &DataRequest::new(l, 1)).unwrap();
                        handed.insert(e);
                    }
                }
                6 => {
                    let l = rng.gen_range(0..512u64);
                    s.free_data(f, l, rng.gen_range(1..64)).unwrap();
                }
                7 => {
                    s.release_prealloc(f).unwrap();
                }
                _ => {
                    s.commit(&step.to_le_bytes()).unwrap();
                    durable = files
                        .iter()
                        .flat_map(|f| f.extents())
                        .flat_map(|(_, e)| e.start..e.end())
                        .collect();
                    if rng.gen_bool(0.3) {
                        s.checkpoint().unwrap();
                    }
                }
            }
            saw_reserved |= s.allocator().reserved_blocks() > 0;
            s.allocator().check().unwrap();
        }
        assert!(
            saw_reserved,
            "seed {seed}: the workload made preallocations"
        );
        drop(s);
        let (r, records) = crash_and_reopen(&dev, seed);
        for rec in &records {
            for op in &rec.ops {
                if let Op::Allocate(e) = op {
                    assert!(
                        handed.contains(e),
                        "seed {seed}: record {} allocates {e:?}, never handed to a file",
                        rec.seq
                    );
                }
            }
        }
        r.allocator().check().unwrap();
        assert_eq!(r.allocator().reserved_blocks(), 0);
        let metadata: BTreeSet<u64> = (0..sb.metadata_end()).chain([sb.backup_block()]).collect();
        let expected: BTreeSet<u64> = metadata.union(&durable).copied().collect();
        let used = used_blocks(r.alloc());
        assert_eq!(used, expected, "seed {seed}: used blocks after the crash");
        assert_eq!(r.allocator().allocated_blocks(), expected.len() as u64);
        drop(r);
        let report = crate::store::fsck::check(dev.as_ref()).unwrap();
        assert!(report.clean(), "seed {seed}: {:?}", report.problems);
    }
}

// Forced commits: an allocation that finds no space while frees wait commits and retries.

/// Two threads truncate and reallocate 18,023 blocks each on a device with room for
/// several times that, committing only when an allocation runs out of space (fallocate3
/// on a store): every allocation succeeds. One forced commit was not always enough: the
/// other thread could fill the next transaction with frees while the commit waited for
/// its flush.
fn truncate_and_refill(spec: &str) {
    let geometry = Geometry::new(4096, 4096, 262_144).unwrap();
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(262_144 * 4096));
    let store = Store::create(dev, &geometry, 256, Policy::parse(spec).unwrap()).unwrap();
    store.set_forced_commits(true);
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let store = &store;
            s.spawn(move || {
                let mut held: Vec<Extent> = Vec::new();
                for round in 0..200 {
                    for e in held.drain(..) {
                        store.free(e).unwrap();
                    }
                    let mut got = 0;
                    while got < 18_023 {
                        let want = (18_023 - got).min(4096);
                        let e = store
                            .allocate(&AllocRequest::new(t, want).logical(got))
                            .unwrap_or_else(|e| {
                                panic!(
                                    "{spec}: thread {t} round {round}: {e}; pending {}",
                                    store.allocator().pending_free_blocks()
                                )
                            });
                        got += e.len;
                        held.push(e);
                    }
                }
            });
        }
    });
    store.commit(b"end").unwrap();
    store.allocator().check().unwrap();
}

/// One thread allocates, another frees the same extent, in one transaction: the record
/// lists allocations first, so the replay applies them in an order that works.
#[test]
fn an_extent_allocated_and_freed_in_one_transaction_replays() {
    let geometry = Geometry::new(4096, 1024, 8192).unwrap();
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(8192 * 4096));
    let store = Store::create(dev.clone(), &geometry, 64, Policy::default()).unwrap();
    let before = store.allocator().free_blocks();
    let e = std::thread::scope(|s| {
        s.spawn(|| store.allocate(&AllocRequest::new(1, 10)).unwrap())
            .join()
            .unwrap()
    });
    let kept = store.allocate(&AllocRequest::new(2, 5)).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| store.free(e).unwrap());
    });
    store.commit(b"one").unwrap();
    drop(store);
    let (store, records) = Store::open(dev, Policy::default()).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(store.allocator().free_blocks(), before - kept.len);
    store.allocator().check().unwrap();
}

/// Allocations (and frees) that continue the transaction's last op in the same group grow
/// it: a file appended to block by block costs one op. None crosses a group, and the
/// replay gives the state the separate ops would.
#[test]
fn continuing_ops_merge_within_a_group() {
    let dev: Arc<dyn Device> = Arc::new(MemDevice::new(8192 * 4096));
    let store = Store::create(dev.clone(), &geometry(), 64, Policy::default()).unwrap();
    let at = |b: u64| {
        let e = store.allocate(&AllocRequest::new(1, 1).goal(b)).unwrap();
        assert_eq!(e, Extent::new(b, 1), "the goal is free");
        e
    };
    // Group 1 is blocks 1024..2048.
    for b in [2000, 2001, 2002, 2047, 2048, 2049] {
        at(b);
    }
    store.free(Extent::new(2000, 1)).unwrap();
    store.free(Extent::new(2001, 1)).unwrap();
    store.free(Extent::new(2049, 1)).unwrap();
    store.commit(b"one").unwrap();
    let used = used_blocks(store.alloc());
    drop(store);
    let (store, records) = Store::open(dev, Policy::default()).unwrap();
    assert_eq!(
        records[0].ops,
        vec![
            Op::Allocate(Extent::new(2000, 3)),
            Op::Allocate(Extent::new(2047, 1)),
            Op::Allocate(Extent::new(2048, 2)),
            Op::Free(Extent::new(2000, 2)),
            Op::Free(Extent::new(2049, 1)),
        ]
    );
    assert_eq!(used_blocks(store.alloc()), used);
    store.allocator().check().unwrap();
}

/// Allocations on their open path (no boundary shard, `OpShards::allocating_open`) race
/// commits whose full journal checkpoints: none may reach home state while it is still in
/// the open transaction. Two threads allocate (and free their oldest) while a third
/// commits into a small journal; then a crash drops every unflushed write. Used after the
/// reopen must be exactly the metadata and what the threads hold, as of the last commit.
#[test]
fn allocations_racing_checkpoints_stay_out_of_home_state() {
    for round in 0..32u64 {
        let dev = Arc::new(FaultDevice::new(MemDevice::new(8192 * 4096), round));
        let store = Store::create(dev.clone(), &geometry(), 8, Policy::default()).unwrap();
        let metadata = used_blocks(store.alloc());
        let stop = std::sync::atomic::AtomicBool::new(false);
        let (held, checkpoints) = std::thread::scope(|s| {
            let workers: Vec<_> = (0..2u64)
                .map(|t| {
                    let (store, stop) = (&store, &stop);
                    s.spawn(move || race_allocating(store, stop, round * 2 + t))
                })
                .collect();
            // Until a commit checkpoints: the allocations racing it are then in the open
            // transaction at the crash, where home state must not have them.
            let mut checkpoints = 0;
            for _ in 0..10_000 {
                if store.commit_reporting(b"").unwrap().checkpointed {
                    checkpoints += 1;
                    break;
                }
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let held: Vec<Extent> = workers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect();
            (held, checkpoints)
        });
        assert!(checkpoints > 0, "the journal never filled");
        // As of the last commit: the open transaction's allocations were not there yet,
        // its frees not done.
        let (mut open_allocs, mut open_frees) = (BTreeSet::new(), BTreeSet::new());
        let taken = store.ops.take(&store.close_boundary().fenced);
        for op in taken {
            match op {
                Op::Allocate(e) => open_allocs.extend(e.start..e.end()),
                Op::Free(e) => open_frees.extend(e.start..e.end()),
            }
        }
        // Nothing of the open transaction is recorded: its changes are simply lost.
        drop(store);
        dev.crash(Crash::DropAll).unwrap();
        let (store, _) = Store::open(dev, Policy::default()).unwrap();
        let mut expect = metadata;
        expect.extend(
            held.iter()
                .flat_map(|e| e.start..e.end())
                .chain(open_frees)
                .filter(|b| !open_allocs.contains(b)),
        );
        assert_eq!(used_blocks(store.alloc()), expect, "round {round}");
    }
}

/// One thread of [`allocations_racing_checkpoints_stay_out_of_home_state`]: allocates 1 to
/// 3 blocks at a time, freeing its oldest extent once it holds 32, until `stop`. Returns
/// what it holds.
fn race_allocating(store: &Store, stop: &std::sync::atomic::AtomicBool, seed: u64) -> Vec<Extent> {
    let mut held = std::collections::VecDeque::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        match store.allocate(&AllocRequest::new(seed, rng.gen_range(1..4))) {
            Ok(e) => held.push_back(e),
            // Frees wait for the next commit, and so does a full transaction.
            Err(Error::NoSpace { .. } | Error::TransactionTooLarge { .. }) => {
                std::thread::yield_now()
            }
            Err(e) => panic!("{e}"),
        }
        if held.len() > 32 {
            let oldest = held.pop_front().unwrap();
            match store.free(oldest) {
                Ok(()) => {}
                Err(Error::TransactionTooLarge { .. }) => held.push_front(oldest),
                Err(e) => panic!("{e}"),
            }
        }
    }
    held.into()
}

#[test]
fn two_threads_refill_through_forced_commits() {
    truncate_and_refill("extalloc");
    truncate_and_refill("extalloc:prefetch_groups=0");
    truncate_and_refill("ext4-2025");
}

/// A paused owner (its heartbeat thread stopped, as a SIGSTOP'd process's or a frozen
/// VM's) resumed after another opener took the device over writes nothing: its lease ran
/// out, so its first write renews it, reads the record back, finds the new owner's and
/// latches the store. Before the lease, the resumed owner's commits and heartbeat wrote
/// over the new owner's device (20 of 20 synced files of the new owner lost).
#[test]
fn a_paused_owner_resumed_after_a_takeover_writes_nothing() {
    use crate::disk::device::FileDevice;
    use std::time::Duration;
    let path = std::env::temp_dir().join(format!("extalloc-paused-{}.img", std::process::id()));
    let dev = FileDevice::create(&path, 8192 * 4096).unwrap();
    format::mkfs(&dev, &geometry(), 16, [5; 16]).unwrap();
    drop(dev);
    let dev: Arc<dyn Device> = Arc::new(
        FileDevice::open(&path)
            .unwrap()
            .with_heartbeat(Duration::from_millis(100)),
    );
    let (mut store, _) = Store::open(dev, Policy::default()).unwrap();
    store.allocate(&AllocRequest::new(1, 8)).unwrap();
    store.commit(b"before").unwrap();
    store.in_use.pause();
    // The takeover: the new owner's claim on the media (another nonce).
    let newcomer = format::OwnerRecord::here(0x5eed, 5000);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &newcomer.encode(), format::OWNER_OFFSET).unwrap();
    f.sync_all().unwrap();
    let taken = std::fs::read(&path).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // Resumed: its next commit renews the lease first.
    store.allocate(&AllocRequest::new(2, 8)).unwrap();
    let e = store.commit(b"after").unwrap_err();
    assert!(
        matches!(&e, Error::IoLatched { cause, .. } if cause.contains("took the device over")),
        "{e}"
    );
    assert!(store.io_failure().is_some());
    drop(store);
    assert!(
        std::fs::read(&path).unwrap() == taken,
        "the paused owner wrote after the takeover"
    );
    std::fs::remove_file(&path).unwrap();
}
