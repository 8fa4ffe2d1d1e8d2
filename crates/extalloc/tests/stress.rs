//! Multi-threaded stress: threads allocate and free random sizes while a committer commits;
//! a shadow ownership table (one atomic per block, compare-and-swap) catches any block handed
//! out twice. Afterwards `check()` passes and all space comes back. Each configuration runs
//! on a tight device (allocations fail and force commits) and on a roomy one, where a second
//! free of a just-freed extent must be refused (on the tight device a forced commit could
//! hand those blocks to another thread first, and no allocator could then tell).

mod common;

use extalloc::{AllocRequest, Allocator, Error, Extent, Geometry, Policy, PRESETS};
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// How much room the threads have.
#[derive(Clone, Copy, PartialEq)]
enum Room {
    /// The threads can hold more than the device: allocations fail and force commits.
    Tight,
    /// Far more than the threads can hold: no allocation forces a commit, so a block freed
    /// under the commit gate stays pending and a second free of it must be refused.
    Roomy,
}

#[allow(clippy::too_many_lines, reason = "a test scenario, read top to bottom")]
fn stress(spec: &str, threads: usize, ops_per_thread: usize, room: Room) {
    let blocks = match room {
        Room::Tight => 32 * 1024 - 100,
        Room::Roomy => 256 * 1024 - 100,
    };
    let geometry = Geometry::new(4096, 1024, blocks).unwrap();
    let alloc = Allocator::new(geometry, Policy::parse(spec).unwrap()).unwrap();
    // Roomy: only the committer (under the gate) commits: a starved committer on a loaded
    // machine lets pending frees fill even a roomy device, and a forced commit there would
    // release a block between a free and the check that its second free fails. An
    // allocation then fails with NoSpace instead, which the workers accept. Tight: workers
    // own commits too (`allocate_committing`).
    let committing = room == Room::Tight;
    let total = alloc.free_blocks();
    let shadow: Vec<AtomicU8> = (0..geometry.blocks_count)
        .map(|_| AtomicU8::new(0))
        .collect();
    let stop = AtomicBool::new(false);
    let commit_gate = parking_lot::RwLock::new(());
    let seed: u64 = std::env::var("EXTALLOC_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(42);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let gate = commit_gate.write();
                alloc.commit();
                drop(gate);
                std::thread::yield_now();
            }
        });
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (alloc, shadow, commit_gate) = (&alloc, &shadow, &commit_gate);
                s.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(seed + t as u64);
                    let mut held: Vec<Extent> = Vec::new();
                    for i in 0..ops_per_thread {
                        if held.len() < 150 && rng.gen_bool(0.55) {
                            let len = rng.gen_range(1..=64);
                            let mut req = AllocRequest::new(t as u64, len).logical(i as u64);
                            if let Some(last) = held.last() {
                                if rng.gen_bool(0.7) && last.end() < geometry.blocks_count {
                                    req = req.goal(last.end());
                                }
                            }
                            let got = if committing {
                                alloc.allocate_committing(&req)
                            } else {
                                alloc.allocate(&req)
                            };
                            match got {
                                Ok(e) => {
                                    for b in e.start..e.end() {
                                        let prev = shadow[b as usize].compare_exchange(
                                            0,
                                            1,
                                            Ordering::SeqCst,
                                            Ordering::SeqCst,
                                        );
                                        assert!(prev.is_ok(), "{spec}: block {b} handed out twice");
                                    }
                                    held.push(e);
                                }
                                Err(Error::NoSpace { .. }) => {}
                                Err(e) => panic!("{spec}: {e}"),
                            }
                        } else if !held.is_empty() {
                            let e = held.swap_remove(rng.gen_range(0..held.len()));
                            for b in e.start..e.end() {
                                assert!(shadow[b as usize]
                                    .compare_exchange(1, 0, Ordering::SeqCst, Ordering::SeqCst)
                                    .is_ok());
                            }
                            if room == Room::Roomy && i % 97 == 0 {
                                // A second free of the same extent must be refused. Hold off
                                // commits between the two: once committed, the blocks may
                                // belong to another thread and a free could not tell.
                                let _no_commit = commit_gate.read();
                                alloc.free(e).unwrap();
                                assert!(
                                    matches!(alloc.free(e), Err(Error::DoubleFree { .. })),
                                    "{spec}: second free of {e:?} not refused"
                                );
                            } else {
                                alloc.free(e).unwrap();
                            }
                        }
                    }
                    for e in held {
                        for b in e.start..e.end() {
                            shadow[b as usize].store(0, Ordering::SeqCst);
                        }
                        alloc.free(e).unwrap();
                    }
                })
            })
            .collect();
        common::join_workers(workers, &stop);
    });
    let forced = alloc.stats().forced_commits;
    match room {
        // The double-free checks above relied on this.
        Room::Roomy => assert_eq!(forced, 0, "{spec}: a roomy run forced a commit"),
        // The near-full path ran.
        Room::Tight => eprintln!("{spec}: {forced} forced commits"),
    }
    alloc.commit();
    alloc.check().unwrap_or_else(|e| panic!("{spec}: {e}"));
    assert_eq!(alloc.free_blocks(), total, "{spec}: space leaked");
    assert_eq!(alloc.pending_free_blocks(), 0);
    assert!(shadow.iter().all(|b| b.load(Ordering::Relaxed) == 0));
}

#[test]
fn presets_never_hand_out_a_block_twice() {
    for spec in PRESETS {
        stress(spec, 4, 20_000, Room::Tight);
        stress(spec, 4, 10_000, Room::Roomy);
    }
}

#[test]
fn variants_never_hand_out_a_block_twice() {
    for spec in [
        "ext4-2025:optimize_scan=false",
        "extalloc:stream_goals=1:trylock=false",
    ] {
        stress(spec, 3, 10_000, Room::Tight);
        stress(spec, 3, 5_000, Room::Roomy);
    }
}
