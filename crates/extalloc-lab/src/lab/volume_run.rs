//! File workloads on a journaled volume over a file device (`bench WORKLOAD --device`):
//! the threads run the workload's body on a volume made anew on the device file while the
//! calling thread syncs every `commit_ms`; then the figures the in-memory run reports
//! (operations per second, extents per file, free space) are taken from the volume.

use super::LabOptions;
use anyhow::Result;
use extalloc::disk::device::{Device, FileDevice};
use extalloc::volume::Volume;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a run on a volume measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct VolumeRun {
    pub threads: usize,
    pub ops: u64,
    pub seconds: f64,
    pub ops_per_sec: f64,
    pub files: u64,
    pub extents_per_file: f64,
    pub free_extents: u64,
    pub largest_free_extent_kib: f64,
}

/// How a file workload runs on a volume over a device file (`bench WORKLOAD --device`).
pub type OnVolume = fn(&OnDevice<'_>) -> Result<VolumeRun>;

/// Where and how a file workload runs on a volume: the device file, the policy, the
/// thread count and the lab's options.
pub struct OnDevice<'a> {
    pub path: &'a Path,
    pub policy: &'a extalloc::Policy,
    pub threads: usize,
    pub opts: &'a LabOptions,
}

/// Runs `body` (thread index, the stop flag; returns its operations) on `on.threads`
/// threads over a volume made on `on.path` (removed afterwards), syncing every
/// `commit_ms`; stops the threads (the flag) after `seconds`.
pub fn run<F>(on: &OnDevice<'_>, body: F) -> Result<VolumeRun>
where
    F: Fn(&Volume, usize, &AtomicBool) -> Result<u64> + Sync,
{
    let OnDevice {
        path,
        policy,
        threads,
        opts,
    } = *on;
    let geometry = opts.geometry()?;
    let dev: Arc<dyn Device> = Arc::new(FileDevice::create(path, opts.device_bytes)?);
    let journal = super::backend::journal_blocks(&geometry);
    extalloc::disk::format::mkfs(dev.as_ref(), &geometry, journal, [0; 16])?;
    let vol = Volume::format(dev, policy.clone())?;
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let ops = std::thread::scope(|s| -> Result<u64> {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (vol, stop, body) = (&vol, &stop, &body);
                s.spawn(move || body(vol, t, stop))
            })
            .collect();
        let deadline = started + Duration::from_secs_f64(opts.seconds);
        let every = Duration::from_millis(opts.commit_ms.max(1));
        let mut synced = Instant::now();
        // The workers' end is looked for every 200 µs, not every sync: a run shorter than
        // one sync interval would otherwise be timed as a whole interval.
        while workers.iter().any(|w| !w.is_finished()) {
            std::thread::sleep(every.min(Duration::from_micros(200)));
            if synced.elapsed() >= every {
                vol.sync()?;
                synced = Instant::now();
            }
            if Instant::now() >= deadline {
                stop.store(true, Ordering::Relaxed);
            }
        }
        let mut ops = 0;
        for w in workers {
            ops += w.join().expect("volume worker panicked")?;
        }
        Ok(ops)
    })?;
    vol.sync()?;
    let seconds = started.elapsed().as_secs_f64();
    let listed = vol.try_list()?;
    let extents: u64 = listed.iter().map(|f| f.extents).sum();
    let free = vol.store().allocator().free_space();
    let row = VolumeRun {
        threads,
        ops,
        seconds,
        ops_per_sec: ops as f64 / seconds,
        files: listed.len() as u64,
        extents_per_file: extents as f64 / listed.len().max(1) as f64,
        free_extents: free.free_extents,
        largest_free_extent_kib: (free.largest_free_extent_blocks * opts.block_bytes()) as f64
            / 1024.0,
    };
    drop(vol);
    std::fs::remove_file(path)?;
    Ok(row)
}
