//! `fallocate2`, after will-it-scale's test of the same name: each thread owns a file and
//! appends 8 KiB at a time (goal = the block after the file's last extent) until the file
//! holds 1 MiB, then truncates it to zero (frees every extent) and starts again. One op is one
//! append.

use super::backend::{Backend, LabPolicy};
use super::report::Run;
use super::{run_threads, LabOptions, ThreadOutput, Until};
use anyhow::Result;
use extalloc::{AllocRequest, Extent};
use std::sync::atomic::{AtomicBool, Ordering};

/// Bytes appended per op, as in will-it-scale.
pub const APPEND_BYTES: u64 = 8192;
/// File size at which the file is truncated, as in will-it-scale.
pub const FILE_BYTES: u64 = 1 << 20;

/// Looks at the clock (the stop flag) this often, to keep it off the hot path; not a divisor
/// of the ops per file, so runs end at varied file sizes.
const OPS_PER_CLOCK_CHECK: u64 = 61;

/// Appends `blocks` blocks at `logical` to a file whose extents are `extents` (goal = the
/// block after its last extent; at most a group per request), merging contiguous results.
/// Returns the new logical end. fallocate3's fallocate is one call of it.
pub fn append(
    alloc: &Backend,
    file: u64,
    mut logical: u64,
    blocks: u64,
    extents: &mut Vec<Extent>,
) -> Result<u64> {
    let blocks_count = alloc.geometry().blocks_count;
    let group_blocks = alloc.geometry().group_blocks;
    let mut need = blocks;
    while need > 0 {
        let mut request = AllocRequest::new(file, need.min(group_blocks)).logical(logical);
        if let Some(last) = extents.last().filter(|e| e.end() < blocks_count) {
            request = request.goal(last.end());
        }
        let got = alloc.allocate(&request)?;
        match extents.last_mut() {
            Some(last) if last.end() == got.start => last.len += got.len,
            _ => extents.push(got),
        }
        logical += got.len;
        need -= got.len;
    }
    Ok(logical)
}

/// One thread's loop.
fn worker(alloc: &Backend, file: u64, stop: &AtomicBool) -> Result<ThreadOutput> {
    let block_size = u64::from(alloc.geometry().block_size);
    let append_blocks = (APPEND_BYTES / block_size).max(1);
    let file_blocks = (FILE_BYTES / block_size).max(append_blocks);
    let mut extents: Vec<Extent> = Vec::with_capacity(file_blocks as usize);
    let mut logical = 0u64;
    let mut ops = 0u64;
    loop {
        logical = append(alloc, file, logical, append_blocks, &mut extents)?;
        ops += 1;
        if logical >= file_blocks {
            for e in extents.drain(..) {
                alloc.free(e)?;
            }
            logical = 0;
        }
        if ops.is_multiple_of(OPS_PER_CLOCK_CHECK) && stop.load(Ordering::Relaxed) {
            return Ok(ThreadOutput {
                ops,
                files: vec![extents],
                marks: Vec::new(),
            });
        }
    }
}

/// Runs `threads` threads for `opts.seconds` on a fresh device under `policy`.
pub fn run_once(policy: &LabPolicy, threads: usize, opts: &LabOptions) -> Result<Run> {
    run_threads(
        policy,
        threads,
        opts,
        Until::Deadline,
        |alloc, t, stop, _| worker(alloc, (opts.seed << 32) | t as u64, stop),
    )
}
