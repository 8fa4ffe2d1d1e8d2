//! Multi-threaded stress: threads allocate and free random sizes while a committer commits;
//! a shadow ownership table (one atomic per block, compare-and-swap) catches any block handed
//! out twice. Afterwards `check()` passes and all space comes back.

use extalloc::{AllocRequest, Allocator, Error, Extent, Geometry, Policy, PRESETS};
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

fn stress(spec: &str, threads: usize, ops_per_thread: usize) {
    let geometry = Geometry::new(4096, 1024, 32 * 1024 - 100).unwrap();
    let alloc = Allocator::new(geometry, Policy::parse(spec).unwrap()).unwrap();
    let total = alloc.free_blocks();
    let shadow: Vec<AtomicU8> = (0..geometry.blocks_count)
        .map(|_| AtomicU8::new(0))
        .collect();
    let stop = AtomicBool::new(false);
    let seed: u64 = std::env::var("EXTALLOC_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(42);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                alloc.commit();
                std::thread::yield_now();
            }
        });
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (alloc, shadow) = (&alloc, &shadow);
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
                            match alloc.allocate(&req) {
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
                            alloc.free(e).unwrap();
                            // A second free of the same extent must be refused.
                            if i % 97 == 0 {
                                assert!(alloc.free(e).is_err());
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
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
    alloc.commit();
    alloc.check().unwrap_or_else(|e| panic!("{spec}: {e}"));
    assert_eq!(alloc.free_blocks(), total, "{spec}: space leaked");
    assert_eq!(alloc.pending_free_blocks(), 0);
    assert!(shadow.iter().all(|b| b.load(Ordering::Relaxed) == 0));
}

#[test]
fn presets_never_hand_out_a_block_twice() {
    for spec in PRESETS {
        stress(spec, 4, 20_000);
    }
}

#[test]
fn variants_never_hand_out_a_block_twice() {
    for spec in [
        "ext4-2025:optimize_scan=false",
        "extalloc:stream_goals=1:trylock=false",
    ] {
        stress(spec, 3, 10_000);
    }
}
