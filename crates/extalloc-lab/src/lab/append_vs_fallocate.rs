//! `append-vs-fallocate` (seed 004's bufferedappendvsfallocate): each thread grows two
//! long-lived files by 64 KiB appends (through normalisation and preallocation, hinted
//! long-lived) while large short-lived fallocates (32 MiB, hinted short-lived) come and go:
//! one after every 8 appends, each freed once two newer ones exist. The run ends when the
//! appended data reaches a quarter of the device. One op is one append or one fallocate.
//! The free-space figures (`fragmented_groups`, `frag_pct_mean`) show whether the transient
//! fallocates left holes among the long-lived data.
//!
//! Transactions follow the work, not the clock: each thread commits once the fallocates it
//! freed since its last commit reach an eighth of its share of the device. The lab's timed
//! committer runs as well, but a run here takes a fraction of a second, so without these
//! commits the freed fallocates would pile up uncommitted until the device filled and every
//! allocation met a full device.

use super::backend::LabPolicy;
use super::report::Run;
use super::{run_file_threads, LabOptions, ThreadOutput, Until};
use anyhow::Result;
use extalloc::{AllocRequest, DataRequest, Extent, Lifetime};
use std::collections::VecDeque;

pub const APPEND_BYTES: u64 = 64 << 10;
pub const FALLOCATE_BYTES: u64 = 32 << 20;
const APPENDS_PER_FALLOCATE: u64 = 8;
const FALLOCATES_LIVE: usize = 2;
/// Commit when a thread's uncommitted frees reach this fraction of its share of the device.
const COMMIT_FRACTION: u64 = 8;

pub fn run_once(policy: &LabPolicy, threads: usize, opts: &LabOptions) -> Result<Run> {
    // Each thread holds up to three fallocates at once beside its share of the appends.
    let min_device = 8 * threads as u64 * FALLOCATE_BYTES;
    anyhow::ensure!(
        opts.device_bytes >= min_device,
        "append-vs-fallocate with {threads} threads needs --device-size of at least {} MiB",
        min_device >> 20
    );
    run_file_threads(
        "append-vs-fallocate",
        policy,
        threads,
        opts,
        Until::Done,
        |alloc, t, _stop, _| worker(alloc, t, threads, opts),
    )
}

/// Thread `t` of `threads`: its two files' appends, a fallocate after every
/// [`APPENDS_PER_FALLOCATE`] of them, the oldest fallocate freed once more than
/// [`FALLOCATES_LIVE`] are held, a commit once the frees reach [`COMMIT_FRACTION`] of its
/// share of the device; at the end the fallocates still held are freed.
fn worker(
    alloc: &extalloc::Files,
    t: usize,
    threads: usize,
    opts: &LabOptions,
) -> Result<ThreadOutput> {
    let block_bytes = opts.block_bytes();
    let append_blocks = (APPEND_BYTES / block_bytes).max(1);
    let fallocate_blocks = (FALLOCATE_BYTES / block_bytes).max(1);
    let appends_total = opts.device_bytes / 4 / threads as u64 / APPEND_BYTES;
    let base = (opts.seed << 40) | ((t as u64) << 32);
    let files = [alloc.create_file(base), alloc.create_file(base + 1)];
    let mut live: VecDeque<Vec<Extent>> = VecDeque::new();
    let mut next_id = base + 2;
    let mut ops = 0;
    let commit_after = opts.device_bytes / threads as u64 / COMMIT_FRACTION / block_bytes;
    let mut uncommitted = 0;
    for i in 0..appends_total {
        append(alloc, &files[(i % 2) as usize], append_blocks)?;
        ops += 1;
        if (i + 1) % APPENDS_PER_FALLOCATE == 0 {
            live.push_back(fallocate(alloc, next_id, fallocate_blocks)?);
            next_id += 1;
            ops += 1;
            if live.len() > FALLOCATES_LIVE {
                for e in live.pop_front().expect("non-empty") {
                    alloc.allocator().free(e)?;
                    uncommitted += e.len;
                }
                if uncommitted >= commit_after {
                    alloc.allocator().commit();
                    uncommitted = 0;
                }
            }
        }
    }
    for extents in live {
        for e in extents {
            alloc.allocator().free(e)?;
        }
    }
    Ok(ThreadOutput {
        ops,
        files: files
            .iter()
            .map(|f| f.extents().into_iter().map(|(_, e)| e).collect())
            .collect(),
        marks: Vec::new(),
    })
}

/// Appends `blocks` long-lived blocks to `file`.
fn append(
    alloc: &extalloc::Files,
    file: &std::sync::Arc<extalloc::FileAlloc>,
    blocks: u64,
) -> Result<()> {
    let mut logical = file.size_blocks();
    let end = logical + blocks;
    while logical < end {
        let req = DataRequest::new(logical, end - logical).lifetime(Lifetime::Long);
        logical += alloc.allocate_data_committing(file, &req)?.len;
    }
    Ok(())
}

/// A short-lived fallocate of `blocks` blocks for file `id`: at most a group at a time, each
/// piece aimed at the end of the one before.
fn fallocate(alloc: &extalloc::Files, id: u64, blocks: u64) -> Result<Vec<Extent>> {
    let mut extents: Vec<Extent> = Vec::new();
    let mut got = 0;
    while got < blocks {
        let mut req = AllocRequest::new(
            id,
            (blocks - got).min(alloc.allocator().geometry().group_blocks),
        )
        .logical(got)
        .lifetime(Lifetime::Short);
        if let Some(last) = extents
            .last()
            .filter(|e| e.end() < alloc.allocator().geometry().blocks_count)
        {
            req = req.goal(last.end());
        }
        let e = alloc.allocate_committing(&req)?;
        got += e.len;
        extents.push(e);
    }
    Ok(extents)
}

/// The same work on a volume over a file device (`bench append-vs-fallocate --device`):
/// each thread appends 64 KiB of data at a time to its two long-lived files (hinted
/// long-lived) and, after every 8 appends, fallocates a 32 MiB file (hinted short-lived),
/// unlinking the oldest once more than two are held and syncing once the unlinked ones
/// reach an eighth of its share of the device. The fallocates still held at the end are
/// unlinked, so the files left are the appended ones, as in memory.
pub fn run_volume(on: &super::volume_run::OnDevice<'_>) -> Result<super::volume_run::VolumeRun> {
    let (threads, opts) = (on.threads, on.opts);
    let min_device = 8 * threads as u64 * FALLOCATE_BYTES;
    anyhow::ensure!(
        opts.device_bytes >= min_device,
        "append-vs-fallocate with {threads} threads needs --device-size of at least {} MiB",
        min_device >> 20
    );
    let appends_total = opts.device_bytes / 4 / threads as u64 / APPEND_BYTES;
    let sync_after = opts.device_bytes / threads as u64 / COMMIT_FRACTION;
    let data = vec![0xa5_u8; APPEND_BYTES as usize];
    super::volume_run::run(on, |vol, _, _| {
        let files = [vol.create(b"")?, vol.create(b"")?];
        for &f in &files {
            vol.set_lifetime(f, Lifetime::Long)?;
        }
        let mut live: VecDeque<u64> = VecDeque::new();
        let (mut ops, mut unsynced) = (0, 0);
        for i in 0..appends_total {
            let f = files[(i % 2) as usize];
            vol.write(f, vol.size(f)?, &data)?;
            ops += 1;
            if (i + 1) % APPENDS_PER_FALLOCATE != 0 {
                continue;
            }
            let id = vol.create(b"")?;
            vol.set_lifetime(id, Lifetime::Short)?;
            vol.fallocate(
                id,
                extalloc::volume::Fallocate::Allocate,
                0,
                FALLOCATE_BYTES,
            )?;
            live.push_back(id);
            ops += 1;
            if live.len() > FALLOCATES_LIVE {
                vol.unlink(live.pop_front().expect("non-empty"))?;
                unsynced += FALLOCATE_BYTES;
                if unsynced >= sync_after {
                    vol.sync()?;
                    unsynced = 0;
                }
            }
        }
        for id in live {
            vol.unlink(id)?;
        }
        for f in files {
            vol.close_file(f)?;
        }
        Ok(ops)
    })
}
