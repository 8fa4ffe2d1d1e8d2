//! `extalloc compare`: a workload on extalloc's policies (the in-memory device) and on the
//! kernel's ext4, XFS and btrfs (a loop device backed by /dev/shm), in one report.
//!
//! The kernel side runs the same work with real system calls: `fallocate2` is will-it-scale's
//! loop (`fallocate(fd, 0, off, 8 KiB)` until 1 MiB, then `ftruncate(fd, 0)`), `frag` is the
//! seed's fio job (`fallocate(fd, FALLOC_FL_KEEP_SIZE, off, 4 KiB)` appends, as fio's falloc
//! engine issues them). Layout comes from FIEMAP, merged as our `extents_per_file` counts;
//! free space from the file system's own tools after unmounting (see `freespace.rs`; btrfs
//! has none that fits, so its runs carry no free-space figures). Latency is one system call.
//!
//! `extalloc compare-fs` lives in the submodules: `mounted` (targets, rounds, the report),
//! `jobs` (what runs in the mount), `extalloc_mount` (extalloc's mount as a target),
//! `daemon` (a FUSE daemon run as our child), `fuse2fs` (fuse2fs as a target), `floor` (the
//! FUSE floor, an in-memory libfuse file system, as a target), `cpu` (CPU time per
//! operation, caller and daemon, from schedstat), `fusetrace` (FUSE requests by opcode
//! from tracefs) and `rounds` (medians and same-round ratios); its aging jobs in `age_run`
//! (`age_git`, `age_profile` on `age`'s remountable targets).

pub mod age;
#[cfg(feature = "charts")]
pub mod age_chart;
pub mod age_freespace;
pub mod age_git;
pub mod age_profile;
pub mod age_run;
pub mod cpu;
pub mod daemon;
pub mod extalloc_mount;
pub mod fiemap;
pub mod floor;
pub mod freespace;
pub mod fuse2fs;
pub mod fusetrace;
pub mod jobs;
pub mod kernel;
pub mod mounted;
pub mod rounds;
pub mod writeback;

use crate::lab::report::{self, Report, Run};
use crate::lab::{fallocate2, frag, LabOptions, RunOnce};
use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use kernel::{Device, Fs, INTERRUPTED};
use rustix::fs::FallocateFlags;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// `workload` (one whose registry row says `kernel`: fallocate2 or frag here, writeback in
/// [`writeback`]) on extalloc's policies, then on each kernel file system.
pub fn run(workload: &str, run_once: RunOnce, fs: &[Fs], opts: &LabOptions) -> Result<Report> {
    preflight(fs, &[])?;
    // extalloc's runs set nothing up: Ctrl-C may end them the usual way. From here on it
    // stops the workers and unwinds, so the devices are torn down.
    let mut report = crate::lab::run_matrix(workload, opts, run_once)?;
    kernel::catch_interrupt()?;
    kernel_matrix(&mut report, workload, fs, opts, |f, threads| {
        kernel_run(f, workload, threads, opts)
    })?;
    Ok(report)
}

/// Root, and every tool the kernel runs need (`extra` besides the file systems' own).
pub fn preflight(fs: &[Fs], extra: &[&'static str]) -> Result<()> {
    if !rustix::process::geteuid().is_root() {
        bail!(
            "extalloc compare needs root: it creates loop devices and mounts file systems \
             (run it as root, or use `extalloc bench` for extalloc's policies alone)"
        );
    }
    for tool in ["losetup", "mount", "umount"]
        .into_iter()
        .chain(extra.iter().copied())
        .chain(fs.iter().map(|f| f.tool()))
        .chain(fs.contains(&Fs::Ext4).then_some("dumpe2fs"))
        .chain(fs.contains(&Fs::Ext4).then_some("e2freefrag"))
        .chain(fs.contains(&Fs::Xfs).then_some("xfs_db"))
    {
        if !kernel::have(tool) {
            bail!("{tool} is not installed (scripts/setup.sh installs the file systems' tools, fio, fs_mark, fuse2fs and stress-ng)");
        }
    }
    Ok(())
}

/// Appends to `report` a run per kernel file system x thread count (medians of
/// `--repeat`), each made by `one`.
pub fn kernel_matrix(
    report: &mut Report,
    workload: &str,
    fs: &[Fs],
    opts: &LabOptions,
    one: impl Fn(Fs, usize) -> Result<Run>,
) -> Result<()> {
    let total = fs.len() * opts.threads.len() * opts.repeat;
    let mut done = 0;
    for &f in fs {
        for &threads in &opts.threads {
            let mut reps = Vec::new();
            for rep in 0..opts.repeat {
                done += 1;
                eprint!(
                    "[{done}/{total}] {workload} kernel-{} x{threads} (repeat {}/{})... ",
                    f.name(),
                    rep + 1,
                    opts.repeat
                );
                let run = one(f, threads)
                    .with_context(|| format!("kernel {} with {threads} threads", f.name()))?;
                eprintln!("{:.0} ops/s", run.ops_per_sec);
                reps.push(run);
            }
            report.runs.push(report::median_run(reps));
        }
    }
    Ok(())
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

/// One thread's calls on its file.
fn worker(
    workload: &str,
    path: &std::path::Path,
    opts: &LabOptions,
) -> Result<(u64, Histogram<u64>)> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    let mut lat = histogram();
    let mut ops = 0u64;
    let mut timed = |call: &mut dyn FnMut() -> rustix::io::Result<()>| -> Result<()> {
        let t = Instant::now();
        call().context("system call")?;
        let _ = lat.record(t.elapsed().as_nanos().max(1) as u64);
        Ok(())
    };
    match workload {
        "fallocate2" => {
            let deadline = Instant::now() + Duration::from_secs_f64(opts.seconds);
            let mut off = 0u64;
            while !INTERRUPTED.load(Ordering::Relaxed)
                && (!ops.is_multiple_of(64) || Instant::now() < deadline)
            {
                timed(&mut || {
                    rustix::fs::fallocate(
                        &file,
                        FallocateFlags::empty(),
                        off,
                        fallocate2::APPEND_BYTES,
                    )
                })?;
                ops += 1;
                off += fallocate2::APPEND_BYTES;
                if off >= fallocate2::FILE_BYTES {
                    rustix::fs::ftruncate(&file, 0).context("ftruncate")?;
                    off = 0;
                }
            }
        }
        "frag" => {
            let appends = (opts.file_bytes / frag::APPEND_BYTES).max(1);
            for i in 0..appends {
                if INTERRUPTED.load(Ordering::Relaxed) {
                    break;
                }
                timed(&mut || {
                    rustix::fs::fallocate(
                        &file,
                        FallocateFlags::KEEP_SIZE,
                        i * frag::APPEND_BYTES,
                        frag::APPEND_BYTES,
                    )
                })?;
                ops += 1;
            }
        }
        other => bail!("no kernel version of {other}"),
    }
    Ok((ops, lat))
}

/// The workload on a fresh kernel file system.
pub fn kernel_run(fs: Fs, workload: &str, threads: usize, opts: &LabOptions) -> Result<Run> {
    if workload == "frag" {
        let need = opts.file_bytes.saturating_mul(threads as u64);
        anyhow::ensure!(
            need < opts.device_bytes,
            "frag: the files do not fit the device"
        );
    }
    let mut dev = Device::create(fs, opts.device_bytes, opts.block_size)?;
    let paths: Vec<_> = (0..threads).map(|t| dev.path(&format!("f{t}"))).collect();
    let started = Instant::now();
    let results: Vec<Result<(u64, Histogram<u64>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = paths
            .iter()
            .map(|p| s.spawn(move || worker(workload, p, opts)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker panicked"))
            .collect()
    });
    let seconds = started.elapsed().as_secs_f64();
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    let mut ops = 0;
    let mut lat = histogram();
    for r in results {
        let (n, h) = r?;
        ops += n;
        lat.add(&h).expect("same bounds");
    }
    let files = paths
        .iter()
        .map(|p| kernel::file_extents(p, opts.block_size))
        .collect::<Result<Vec<_>>>()?;
    dev.unmount()?;
    let free_space = free_space_of(fs, &dev, opts.block_size)?;
    drop(dev);
    let ops_per_sec = ops as f64 / seconds;
    Ok(Run {
        policy: format!("kernel-{}", fs.name()),
        threads,
        seconds,
        ops,
        ops_per_sec,
        ops_per_sec_repeats: vec![ops_per_sec],
        latency_ns: report::latency_of(&lat),
        layout: report::layout(&files, opts.block_size),
        free_space,
        counters: None,
        progress: None,
        writeback: None,
    })
}

/// The free space of `dev`'s file system, unmounted, from its own tools (`None` for btrfs:
/// none fits).
pub fn free_space_of(
    fs: Fs,
    dev: &Device,
    block_size: u32,
) -> Result<Option<report::FreeSpaceJson>> {
    let loop_dev = dev.loop_dev.clone().expect("attached");
    Ok(match fs {
        Fs::Ext4 => Some(ext4_free_space(&loop_dev)?),
        Fs::Xfs => {
            let out =
                kernel::run(Command::new("xfs_db").args(["-r", "-c", "freesp -s", &loop_dev]))?;
            Some(freespace::parse_xfs_freesp(&out, block_size)?)
        }
        Fs::Btrfs => None,
    })
}

/// The free space of an unmounted ext4 (a device or an image file), from dumpe2fs, checked
/// against e2freefrag's count.
pub fn ext4_free_space(dev: &str) -> Result<report::FreeSpaceJson> {
    let dump = kernel::run(Command::new("dumpe2fs").arg(dev))?;
    let (geometry, runs) = freespace::parse_dumpe2fs(&dump)?;
    let json = freespace::ext4_json(&geometry, runs)?;
    let frag = kernel::run(Command::new("e2freefrag").arg(dev))?;
    let count = freespace::parse_e2freefrag_count(&frag)?;
    if count != json.free_extents {
        eprintln!(
            "note: e2freefrag counts {count} free extents, dumpe2fs's ranges {}",
            json.free_extents
        );
    }
    Ok(json)
}
