//! Multi-threaded stress of the file layer: threads write (map holes), punch holes, truncate
//! and close their own files on a tight device while a committer commits, so preallocations
//! are made, used, discarded under pressure and released. A shadow ownership table (one
//! atomic per block: 0 free, else the owning file's number, set with compare-and-swap)
//! catches any block mapped by two files, or mapped while another file still maps it; a
//! thread clears its blocks in the shadow before it frees them (they stay used until the
//! free and pending until a commit, so nobody can map them in between), and checks that a
//! punch or truncate frees exactly what the file mapped there. After the run
//! `Files::check` holds (the accounting equation, every reserved block in exactly one
//! preallocation), and once every file is closed and truncated nothing is reserved and all
//! space comes back.

mod common;

use extalloc::{
    Allocator, DataRequest, Error, Extent, FileAlloc, Files, Geometry, Policy, PRESETS,
};
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

fn claim(shadow: &[AtomicU32], owner: u32, e: Extent, spec: &str) {
    for b in e.start..e.end() {
        let prev =
            shadow[b as usize].compare_exchange(0, owner, Ordering::SeqCst, Ordering::SeqCst);
        assert!(
            prev.is_ok(),
            "{spec}: block {b} mapped by file {owner} while owned by {prev:?}"
        );
    }
}

/// The physical pieces `file` maps in logical `lo .. hi`, in logical order.
fn mapped_in(file: &FileAlloc, lo: u64, hi: u64) -> Vec<Extent> {
    file.extents()
        .into_iter()
        .filter_map(|(l, e)| {
            let (a, b) = (l.max(lo), (l + e.len).min(hi));
            (a < b).then(|| Extent::new(e.start + (a - l), b - a))
        })
        .collect()
}

/// Clears the shadow of the blocks a free is about to give back (before the free: they stay
/// used until then, and pending until a commit, so no other file can map them meanwhile).
fn give_back(shadow: &[AtomicU32], owner: u32, freed: &[Extent], spec: &str) {
    for e in freed {
        for b in e.start..e.end() {
            let prev =
                shadow[b as usize].compare_exchange(owner, 0, Ordering::SeqCst, Ordering::SeqCst);
            assert!(
                prev.is_ok(),
                "{spec}: file {owner} freed block {b} it did not own ({prev:?})"
            );
        }
    }
}

#[allow(clippy::too_many_lines, reason = "a test scenario, read top to bottom")]
fn stress(spec: &str, threads: usize, ops_per_thread: usize) {
    // 32 MiB: eight writers with 8 MiB windows fill it, so discards under pressure happen.
    let geometry = Geometry::new(4096, 1024, 8192).unwrap();
    let files = Files::new(Allocator::new(geometry, Policy::parse(spec).unwrap()).unwrap());
    let total = files.allocator().free_blocks();
    let shadow: Vec<AtomicU32> = (0..geometry.blocks_count)
        .map(|_| AtomicU32::new(0))
        .collect();
    let stop = AtomicBool::new(false);
    let saw_reserved = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                files.allocator().commit();
                std::thread::yield_now();
            }
        });
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (files, shadow, saw_reserved) = (&files, &shadow, &saw_reserved);
                s.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(42 + t as u64);
                    let mut owned: Vec<_> = (0..2u32)
                        .map(|k| {
                            (
                                t as u32 * 2 + k + 1,
                                files.create_file(u64::from(t as u32 * 2 + k)),
                            )
                        })
                        .collect();
                    for _ in 0..ops_per_thread {
                        let (owner, file) = &owned[rng.gen_range(0..owned.len())];
                        let owner = *owner;
                        match rng.gen_range(0..20) {
                            0..=13 => {
                                let l = rng.gen_range(0..4096u64);
                                let req = DataRequest::new(l, rng.gen_range(1..16));
                                match files.allocate_data_committing(file, &req) {
                                    Ok(e) => {
                                        claim(shadow, owner, e, spec);
                                        if files.reserved_blocks() > 0 {
                                            saw_reserved.store(true, Ordering::Relaxed);
                                        }
                                    }
                                    Err(Error::LogicalOverlap { .. } | Error::NoSpace { .. }) => {}
                                    Err(e) => panic!("{spec}: {e}"),
                                }
                            }
                            14..=16 => {
                                let (l, n) = (rng.gen_range(0..4096u64), rng.gen_range(1..256));
                                let expected = mapped_in(file, l, l + n);
                                give_back(shadow, owner, &expected, spec);
                                let mut freed = files.free_data(file, l, n).unwrap();
                                freed.sort_by_key(|e| e.start);
                                let mut expected = expected;
                                expected.sort_by_key(|e| e.start);
                                assert_eq!(freed, expected, "{spec}: punch freed what was mapped");
                            }
                            17 => {
                                let size = rng.gen_range(0..4096u64);
                                let beyond = if size < file.size_blocks() {
                                    mapped_in(file, size, u64::MAX)
                                } else {
                                    Vec::new()
                                };
                                give_back(shadow, owner, &beyond, spec);
                                let freed = files.set_file_size(file, size).unwrap();
                                let total = |v: &[Extent]| v.iter().map(|e| e.len).sum::<u64>();
                                assert_eq!(total(&freed), total(&beyond), "{spec}: truncate");
                            }
                            _ => {
                                files.release_prealloc(file).unwrap();
                            }
                        }
                    }
                    for (owner, file) in owned.drain(..) {
                        give_back(shadow, owner, &mapped_in(&file, 0, u64::MAX), spec);
                        files.set_file_size(&file, 0).unwrap();
                        files.release_prealloc(&file).unwrap();
                        assert!(file.extents().is_empty());
                    }
                })
            })
            .collect();
        common::join_workers(workers, &stop);
    });
    files.allocator().commit();
    assert!(
        saw_reserved.load(Ordering::Relaxed),
        "{spec}: no preallocation was made"
    );
    let s = files.allocator().stats();
    eprintln!(
        "{spec}: {} searches found no space, {} forced commits",
        s.no_space, s.forced_commits
    );
    assert!(s.no_space > 0, "{spec}: the device never filled");
    files.check().unwrap_or_else(|e| panic!("{spec}: {e}"));
    // Locality chunks outlive files: what is still reserved is in them, and goes back too.
    files.discard_preallocations();
    files.check().unwrap_or_else(|e| panic!("{spec}: {e}"));
    assert_eq!(files.reserved_blocks(), 0, "{spec}: reserved blocks left");
    assert_eq!(files.allocated_blocks(), 0, "{spec}: allocated blocks left");
    assert_eq!(
        files.allocator().free_blocks(),
        total,
        "{spec}: space leaked"
    );
    assert!(shadow.iter().all(|b| b.load(Ordering::Relaxed) == 0));
}

#[test]
fn files_never_share_a_block_and_reserved_space_comes_back() {
    for spec in PRESETS {
        stress(spec, 4, 4_000);
    }
    stress(
        "extalloc:prealloc_index=list:locality_leftovers=0",
        4,
        4_000,
    );
}
