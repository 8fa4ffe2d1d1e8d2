//! `small-files` (seed 002, test 4, after fs_mark): every thread creates files of 2 KiB (one
//! write, then close) until the device is full, or `--fill` of it is used. One op is one file.

use super::backend::LabPolicy;
use super::report::Run;
use super::{run_file_threads, LabOptions, ThreadOutput, Until};
use anyhow::Result;
use extalloc::{DataRequest, Error};
use std::sync::atomic::Ordering;

pub const FILE_BYTES: u64 = 2048;

pub fn run_once(policy: &LabPolicy, threads: usize, opts: &LabOptions) -> Result<Run> {
    run_file_threads(
        "small-files",
        policy,
        threads,
        opts,
        Until::Done,
        |alloc, t, stop, _| {
            let blocks = FILE_BYTES.div_ceil(opts.block_bytes());
            let total = alloc.allocator().geometry().blocks_count;
            // Stop once free blocks (locality chunks count as used) fall to this.
            let floor = ((1.0 - opts.fill) * total as f64) as u64;
            let mut files = Vec::new();
            let mut n = 0u64;
            loop {
                let file = alloc.create_file((opts.seed << 48) | ((t as u64) << 32) | n);
                match alloc.allocate_data_committing(&file, &DataRequest::new(0, blocks)) {
                    Ok(e) => {
                        files.push(vec![e]);
                        // Close: unused preallocation goes back.
                        alloc.release_prealloc(&file)?;
                        n += 1;
                    }
                    Err(Error::NoSpace { .. }) => break,
                    Err(e) => return Err(e.into()),
                }
                // A safety stop for very large devices: --seconds bounds the run.
                if n.is_multiple_of(1024) && stop.load(Ordering::Relaxed) {
                    break;
                }
                if floor > 0 && n.is_multiple_of(64) && alloc.allocator().free_blocks() <= floor {
                    break;
                }
            }
            Ok(ThreadOutput {
                ops: n,
                files,
                marks: Vec::new(),
            })
        },
    )
}

/// small-files on a journaled volume over a file device: what `run_once` measures, with
/// every file created, written (2 KiB of data) and closed through the volume, a committer
/// syncing every `commit_ms`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct VolumeRun {
    pub threads: usize,
    pub files: u64,
    pub seconds: f64,
    pub files_per_sec: f64,
    pub extents_per_file: f64,
    pub free_extents: u64,
    pub largest_free_extent_kib: f64,
}

/// Runs small-files on a volume made anew on `path` (removed afterwards).
pub fn run_volume(
    path: &std::path::Path,
    policy: &extalloc::Policy,
    threads: usize,
    opts: &LabOptions,
) -> Result<VolumeRun> {
    use extalloc::disk::device::{Device, FileDevice};
    use extalloc::volume::Volume;
    use std::sync::Arc;
    let geometry = opts.geometry()?;
    let dev: Arc<dyn Device> = Arc::new(FileDevice::create(path, opts.device_bytes)?);
    let journal = super::backend::journal_blocks(&geometry);
    extalloc::disk::format::mkfs(dev.as_ref(), &geometry, journal, [0; 16])?;
    let vol = Volume::format(dev, policy.clone())?;
    let total = geometry.blocks_count;
    let floor = ((1.0 - opts.fill) * total as f64) as u64;
    let data = vec![0x5a_u8; FILE_BYTES as usize];
    let stop = std::sync::atomic::AtomicBool::new(false);
    let started = std::time::Instant::now();
    let files = std::thread::scope(|s| -> Result<u64> {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| -> Result<u64> {
                    let mut n = 0u64;
                    loop {
                        let id = vol.create(b"")?;
                        match vol.write(id, 0, &data) {
                            Ok(()) => {}
                            Err(Error::NoSpace { .. }) => {
                                vol.unlink(id)?;
                                break;
                            }
                            Err(e) => return Err(e.into()),
                        }
                        vol.close_file(id)?;
                        n += 1;
                        let full =
                            n.is_multiple_of(64) && floor > 0 && vol.statfs().free_blocks <= floor;
                        if full || (n.is_multiple_of(1024) && stop.load(Ordering::Relaxed)) {
                            break;
                        }
                    }
                    Ok(n)
                })
            })
            .collect();
        let deadline = started + std::time::Duration::from_secs_f64(opts.seconds);
        while workers.iter().any(|w| !w.is_finished()) {
            std::thread::sleep(std::time::Duration::from_millis(opts.commit_ms.max(1)));
            vol.sync()?;
            if std::time::Instant::now() >= deadline {
                stop.store(true, Ordering::Relaxed);
            }
        }
        let mut files = 0;
        for w in workers {
            files += w.join().expect("small-files worker panicked")?;
        }
        Ok(files)
    })?;
    vol.sync()?;
    let seconds = started.elapsed().as_secs_f64();
    let listed = vol.list();
    let extents: u64 = listed.iter().map(|f| f.extents).sum();
    let free = vol.store().allocator().free_space();
    let row = VolumeRun {
        threads,
        files,
        seconds,
        files_per_sec: files as f64 / seconds,
        extents_per_file: extents as f64 / listed.len().max(1) as f64,
        free_extents: free.free_extents,
        largest_free_extent_kib: (free.largest_free_extent_blocks * opts.block_bytes()) as f64
            / 1024.0,
    };
    drop(vol);
    std::fs::remove_file(path)?;
    Ok(row)
}
