//! `fallocate2`, after will-it-scale's test of the same name: each thread owns a file and
//! appends 8 KiB at a time (goal = the block after the file's last extent) until the file
//! holds 1 MiB, then truncates it to zero (frees every extent) and starts again. One op is one
//! append. The main thread is the committer: it commits every `commit_ms`, as a journal would.

use super::report::{self, Run};
use super::LabOptions;
use anyhow::{bail, Context, Result};
use extalloc::{AllocRequest, Allocator, Error, Extent, Policy};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Bytes appended per op, as in will-it-scale.
pub const APPEND_BYTES: u64 = 8192;
/// File size at which the file is truncated, as in will-it-scale.
pub const FILE_BYTES: u64 = 1 << 20;

/// Checks the device between ops this often, to keep the clock off the hot path.
const OPS_PER_CLOCK_CHECK: u64 = 61;

struct ThreadResult {
    ops: u64,
    extents: Vec<Extent>,
}

/// One thread's loop. Returns its op count and its file's extents at the end.
fn worker(alloc: &Allocator, file: u64, stop: &AtomicBool) -> Result<ThreadResult, Error> {
    let block_size = u64::from(alloc.geometry().block_size);
    let append_blocks = (APPEND_BYTES / block_size).max(1);
    let file_blocks = (FILE_BYTES / block_size).max(append_blocks);
    let blocks_count = alloc.geometry().blocks_count;
    let mut extents: Vec<Extent> = Vec::with_capacity(file_blocks as usize);
    let mut logical = 0u64;
    let mut ops = 0u64;
    loop {
        let mut need = append_blocks;
        while need > 0 {
            let mut request = AllocRequest::new(file, need).logical(logical);
            if let Some(last) = extents.last() {
                if last.end() < blocks_count {
                    request = request.goal(last.end());
                }
            }
            let got = alloc.allocate(&request)?;
            match extents.last_mut() {
                Some(last) if last.end() == got.start => last.len += got.len,
                _ => extents.push(got),
            }
            logical += got.len;
            need -= got.len;
        }
        ops += 1;
        if logical >= file_blocks {
            for e in extents.drain(..) {
                alloc.free(e)?;
            }
            logical = 0;
        }
        if ops.is_multiple_of(OPS_PER_CLOCK_CHECK) && stop.load(Ordering::Relaxed) {
            return Ok(ThreadResult { ops, extents });
        }
    }
}

/// Runs `threads` threads for `opts.seconds` on a fresh device under `policy`.
pub fn run_once(policy: &Policy, threads: usize, opts: &LabOptions) -> Result<Run> {
    let geometry = opts.geometry()?;
    let alloc = Allocator::new(geometry, policy.clone()).context("creating the allocator")?;
    let stop = AtomicBool::new(false);
    let commit_every = Duration::from_millis(opts.commit_ms.max(1));
    let mut commits = 0u64;
    let started = Instant::now();
    let (results, elapsed) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (alloc, stop) = (&alloc, &stop);
                let file = (opts.seed << 32) | t as u64;
                s.spawn(move || worker(alloc, file, stop))
            })
            .collect();
        let deadline = started + Duration::from_secs_f64(opts.seconds);
        let mut next_commit = started + commit_every;
        loop {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let wake = next_commit.min(deadline);
            std::thread::sleep(wake.saturating_duration_since(now));
            if Instant::now() >= next_commit {
                alloc.commit();
                commits += 1;
                next_commit += commit_every;
            }
        }
        stop.store(true, Ordering::Relaxed);
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("worker panicked"))
            .collect();
        (results, started.elapsed())
    });
    let mut files = Vec::with_capacity(threads);
    let mut ops = 0;
    for r in results {
        match r {
            Ok(r) => {
                ops += r.ops;
                files.push(r.extents);
            }
            Err(e) => bail!("{}: a worker failed: {e} (is the device large enough for {threads} files of 1 MiB?)", policy.name),
        }
    }
    // Return what the last transaction freed, so the free-space figures show the device as a
    // journal would leave it after the run.
    alloc.commit();
    commits += 1;
    alloc
        .check()
        .with_context(|| format!("{}: invariant check after the run", policy.name))?;
    let seconds = elapsed.as_secs_f64();
    let ops_per_sec = ops as f64 / seconds;
    Ok(Run {
        policy: policy.name.clone(),
        threads,
        seconds,
        ops,
        ops_per_sec,
        ops_per_sec_repeats: vec![ops_per_sec],
        latency_ns: report::latency(&alloc),
        layout: report::layout(&files, geometry.block_size),
        free_space: report::free_space_json(&alloc.free_space(), geometry.block_size),
        counters: report::counters(&alloc, commits),
    })
}
