//! `frag`, the fragmentation script of the ext4 scalability series' cover letter (fio with
//! `-ioengine=falloc -rw=write -bs=4k -fallocate=none -file_append=1`): every job appends
//! 4 KiB at a time to its own file (an allocation with goal = the block after the file's last
//! one, no preallocation, as ext4's fallocate path asks) until the file reaches
//! `--file-size`. The layout and free-space figures at the end are the point; one op is one
//! append. Jobs are the lab's threads (`--jobs` is `--threads` for this workload).

use super::backend::{Backend, LabPolicy};
use super::fallocate2::append;
use super::report::Run;
use super::{run_threads, LabOptions, Marks, ThreadOutput, Until};
use anyhow::Result;
use extalloc::Extent;
use std::time::Instant;

/// Bytes per append, as the script's `-bs=4k`.
pub const APPEND_BYTES: u64 = 4096;

fn worker(alloc: &Backend, file: u64, file_bytes: u64, started: Instant) -> Result<ThreadOutput> {
    let block_bytes = u64::from(alloc.geometry().block_size);
    let append_blocks = APPEND_BYTES.div_ceil(block_bytes);
    let appends = (file_bytes / APPEND_BYTES).max(1);
    let mut extents: Vec<Extent> = Vec::new();
    let mut logical = 0;
    let mut marks = Marks::new(appends, started);
    for i in 0..appends {
        logical = append(alloc, file, logical, append_blocks, &mut extents)?;
        marks.tick(i + 1);
    }
    Ok(ThreadOutput {
        ops: appends,
        files: vec![extents],
        marks: marks.marks,
    })
}

/// Refuses `jobs` files of `--file-size` that do not fit the device.
fn fits(jobs: usize, opts: &LabOptions) -> Result<()> {
    let need = opts.file_bytes.saturating_mul(jobs as u64);
    anyhow::ensure!(
        need <= opts.device_bytes,
        "frag: {jobs} jobs x --file-size {} MiB do not fit a {} MiB device",
        opts.file_bytes >> 20,
        opts.device_bytes >> 20
    );
    Ok(())
}

pub fn run_once(policy: &LabPolicy, jobs: usize, opts: &LabOptions) -> Result<Run> {
    fits(jobs, opts)?;
    run_threads(
        policy,
        jobs,
        opts,
        Until::Done,
        |alloc, t, _stop, started| {
            worker(
                alloc,
                (opts.seed << 32) | t as u64,
                opts.file_bytes,
                started,
            )
        },
    )
}

/// The same jobs on a volume over a file device (`bench frag --device`): each job's file
/// grows by `fallocate(KEEP_SIZE)` of 4 KiB at its end, as fio's falloc engine issues them
/// (the volume maps each exactly, no preallocation, goal after the file's last extent, and
/// logs each mapping).
pub fn run_volume(on: &super::volume_run::OnDevice<'_>) -> Result<super::volume_run::VolumeRun> {
    let (jobs, opts) = (on.threads, on.opts);
    fits(jobs, opts)?;
    let appends = (opts.file_bytes / APPEND_BYTES).max(1);
    super::volume_run::run(on, |vol, _, _| {
        let id = vol.create(b"")?;
        let keep = extalloc::volume::Fallocate::KeepSize;
        for i in 0..appends {
            vol.fallocate(id, keep, i * APPEND_BYTES, APPEND_BYTES)?;
        }
        vol.close_file(id)?;
        Ok(appends)
    })
}
