//! `fallocate3`, after will-it-scale's test of the same name (seed 001): each thread owns a
//! file, truncates it to zero (freeing about 70 MiB, which waits for a commit) and allocates
//! 70 MiB (18,023 blocks of 4 KiB) again as a keep-size fallocate would. One op is one
//! truncate + fallocate.
//!
//! With a realistic commit interval (`--commit-ms 5000`, jbd2's default) the device soon
//! looks full: an allocation then scans every group, finds nothing, forces a commit and
//! retries. That path, and the scan before it, is what the workload measures.
//!
//! `--fill F` first fills the device with scattered extents (1-64 blocks each, dense, then
//! a random share `1 - F` of them freed and committed), so free space is in small holes
//! everywhere, as on a long-used file system. With `--device PATH` the run is on a journaled
//! file device; after the fill every bitmap is written home and dropped and the file's page
//! cache is dropped (`posix_fadvise(DONTNEED)`), so the timed phase starts cold, with every
//! bitmap read from the media: lazy loading and read-ahead are on its path.

use super::backend::{Backend, LabPolicy};
use super::report::Run;
use super::{run_threads_prepared, LabOptions, ThreadOutput, Until};
use anyhow::{Context, Result};
use extalloc::{AllocRequest, Error, Extent};
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, Ordering};

/// Blocks per fallocate: 70 MiB and a little, as will-it-scale's fallocate3 asks.
pub const FILE_BLOCKS_4K: u64 = 18_023;

/// Commits during the fill, so a store's journal records stay small.
const FILL_OPS_PER_COMMIT: u64 = 4096;

/// Fills `fraction` of the device with scattered extents (see the module doc).
pub fn prefill(alloc: &Backend, fraction: f64, seed: u64) -> Result<()> {
    if fraction <= 0.0 {
        return Ok(());
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0xf111);
    let mut held: Vec<Extent> = Vec::new();
    let mut file = 1u64 << 40;
    loop {
        let len = rng.gen_range(1..=64u64);
        file += 1;
        match alloc.allocate(&AllocRequest::new(file, len)) {
            Ok(e) => held.push(e),
            Err(Error::NoSpace { .. }) => break,
            Err(e) => return Err(e).context("fallocate3: pre-filling the device"),
        }
        if (held.len() as u64).is_multiple_of(FILL_OPS_PER_COMMIT) {
            alloc.commit()?;
        }
    }
    let mut ops = 0u64;
    for e in held {
        if !rng.gen_bool(fraction) {
            alloc
                .free(e)
                .context("fallocate3: punching holes in the fill")?;
            ops += 1;
            if ops.is_multiple_of(FILL_OPS_PER_COMMIT) {
                alloc.commit()?;
            }
        }
    }
    alloc.commit()?;
    if let Some(store) = alloc.store() {
        // Start the timed phase as after a mount: everything home, no bitmap in memory.
        store
            .checkpoint()
            .context("fallocate3: checkpoint after the fill")?;
        store.drop_idle_bitmaps(0);
        store.drop_idle_bitmaps(0);
        // And nothing in the page cache: loads read the media, as after a reboot.
        store
            .drop_device_cache()
            .context("fallocate3: dropping the device's page cache")?;
    }
    Ok(())
}

fn worker(alloc: &Backend, file: u64, stop: &AtomicBool) -> Result<ThreadOutput> {
    let block_size = u64::from(alloc.geometry().block_size);
    let blocks = (FILE_BLOCKS_4K * 4096).div_ceil(block_size);
    let mut extents: Vec<Extent> = Vec::new();
    let mut ops = 0u64;
    while !stop.load(Ordering::Relaxed) {
        // Truncate to zero: everything freed, pending until a commit.
        for e in extents.drain(..) {
            alloc.free(e)?;
        }
        // A keep-size fallocate: the whole file from logical block 0.
        super::fallocate2::append(alloc, file, 0, blocks, &mut extents)
            .with_context(|| format!("fallocate3: file {file}"))?;
        ops += 1;
    }
    Ok(ThreadOutput {
        ops,
        files: vec![extents],
        marks: Vec::new(),
    })
}

/// Runs `threads` threads for `opts.seconds` after the fill of `opts.prefill`.
pub fn run_once(policy: &LabPolicy, threads: usize, opts: &LabOptions) -> Result<Run> {
    run_threads_prepared(
        policy,
        threads,
        opts,
        Until::Deadline,
        |alloc| prefill(alloc, opts.prefill, opts.seed),
        |alloc, t, stop, _| worker(alloc, (opts.seed << 32) | t as u64, stop),
    )
}
