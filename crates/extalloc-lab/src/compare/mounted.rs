//! `extalloc compare-fs JOB... --fs ext4,fuse2fs,extalloc --repeat 3`: jobs on whole file
//! systems: the kernel's (a loop device backed by a file in /dev/shm, as `compare` makes
//! them, or in `--image-dir`), an extalloc mount (`extalloc mount` of an image there of the
//! same size), fuse2fs (an ext4 image there through FUSE, `fuse2fs.rs`) and the FUSE floor
//! (an in-memory libfuse file system, `floor.rs`). The jobs (`jobs.rs`) are fio job files,
//! fs_mark, and issue 34's metadata jobs; `issue34` names them all.
//!
//! Rounds: every job runs `--repeat` rounds; each round runs it once on every target, on a
//! fresh file system, the targets' order rotated by one each round so that none always
//! runs first. `rounds.rs` takes the medians and the same-round ratios to ext4 (or the
//! first target). Every phase's CPU time is read too (`cpu.rs`: the caller's, and on the
//! FUSE targets the daemon's), and on the FUSE targets the requests are counted by opcode
//! while the job runs (`fusetrace.rs`).
//!
//! Layout: every regular file's extents, merged where physically contiguous as FIEMAP's
//! are counted (the kernel's through FIEMAP; extalloc's from the volume after unmounting,
//! since FIEMAP does not reach through FUSE; none for fuse2fs and the floor). Free space: the kernel's
//! tools after unmounting (`freespace.rs`; for fuse2fs dumpe2fs on its image); the store's
//! own figures for extalloc; none for the floor.
//!
//! Data structures: [`Target`], [`Job`], one [`FsRun`] per target and round, one
//! [`JobReport`] per job.
//!
//! Invariant: every device, image, mount and trace instance made is torn down (unmounted,
//! its daemon waited for, detached, removed) whatever fails, as `kernel::Device`,
//! [`ExtallocMount`], `Fuse2fsMount`, `FloorMount` and `FuseTrace` do on drop. A run that fails is
//! reported as failed and the other runs go on; Ctrl-C stops everything.

use super::cpu::CpuMeter;
pub(super) use super::extalloc_mount::{ExtallocMount, Flavor};
use super::floor::FloorMount;
use super::fuse2fs::Fuse2fsMount;
use super::fusetrace::FuseTrace;
pub use super::jobs::Job;
use super::jobs::{self, Phase, Recorder};
use super::kernel::{self, Device, Fs, INTERRUPTED};
use super::rounds::{self, PhaseSummary};
use super::{free_space_of, preflight};
use crate::lab::report::{self, FreeSpaceJson};
use anyhow::{Context, Result};
use extalloc::Extent;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// A file system to run the job on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A kernel file system on a loop device.
    Kernel(Fs),
    /// `extalloc mount` of an image file.
    Extalloc,
    /// `extalloc mount --io-uring` of an image file (FUSE over io_uring; the fuse module's
    /// `enable_uring` is set for the mount and put back after).
    ExtallocUring,
    /// `extalloc mount --poll-us 0` of an image file (its `/dev/fuse` threads sleep as soon
    /// as no request waits: the mount without polling, to measure what polling gives).
    ExtallocNoPoll,
    /// fuse2fs of an ext4 image file.
    Fuse2fs,
    /// The FUSE floor (`floor.rs`): an in-memory libfuse file system, over `/dev/fuse`
    /// (`false`) or io_uring (`true`).
    Floor {
        /// Over io_uring.
        uring: bool,
    },
}

impl Target {
    /// `ext4`, `xfs`, `btrfs`, `extalloc`, `extalloc-uring`, `extalloc-nopoll`, `fuse2fs`,
    /// `floor` or `floor-uring`.
    pub fn parse(s: &str) -> Result<Target> {
        match s.trim() {
            "floor" => Ok(Target::Floor { uring: false }),
            "floor-uring" => Ok(Target::Floor { uring: true }),
            "extalloc" => Ok(Target::Extalloc),
            "extalloc-uring" => Ok(Target::ExtallocUring),
            "extalloc-nopoll" => Ok(Target::ExtallocNoPoll),
            "fuse2fs" => Ok(Target::Fuse2fs),
            other => Fs::parse(other).map(Target::Kernel).context(
                "--fs: expected ext4, xfs, btrfs, extalloc, extalloc-uring, extalloc-nopoll, \
                 fuse2fs, floor or floor-uring",
            ),
        }
    }

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Target::Kernel(f) => f.name(),
            Target::Extalloc => "extalloc",
            Target::ExtallocUring => "extalloc-uring",
            Target::ExtallocNoPoll => "extalloc-nopoll",
            Target::Fuse2fs => "fuse2fs",
            Target::Floor { uring: false } => "floor",
            Target::Floor { uring: true } => "floor-uring",
        }
    }
}

/// How every run is made.
#[derive(Debug, Clone)]
pub struct Options {
    /// Size of each file system.
    pub device_bytes: u64,
    /// Block size.
    pub block_size: u32,
    /// Rounds (`--repeat`), at least 1.
    pub rounds: usize,
    /// The allocation policy extalloc's mounts use (`extalloc mount --policy`; None: the
    /// default preset).
    pub policy: Option<String>,
}

/// One run of a job on one target.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FsRun {
    /// The file system.
    pub fs: String,
    /// The round (from 1).
    pub round: usize,
    /// Seconds the whole job took.
    pub seconds: f64,
    /// Its timed phases (empty when it failed).
    pub phases: Vec<Phase>,
    /// Why it failed.
    pub error: Option<String>,
    /// Why a FUSE target's requests were not counted.
    pub fuse_trace_unavailable: Option<String>,
    /// Regular files left (None where the layout is not read: fuse2fs, failed runs).
    pub files: Option<u64>,
    /// Extents per file (physically contiguous neighbours merged).
    pub extents_per_file: Option<f64>,
    /// The most extents of one file.
    pub max_extents: Option<u64>,
    /// Free space after the job (None for btrfs).
    pub free_space: Option<FreeSpaceJson>,
}

/// One job on every target, every round, and its summary.
#[derive(Debug, Clone, serde::Serialize)]
pub struct JobReport {
    /// The job's name.
    pub job: String,
    /// Every run, in the order made.
    pub runs: Vec<FsRun>,
    /// Per phase: medians and same-round ratios.
    pub summary: Vec<PhaseSummary>,
}

/// The target ratios divide by: ext4 if there, else the first.
pub fn baseline(targets: &[Target]) -> usize {
    targets
        .iter()
        .position(|t| *t == Target::Kernel(Fs::Ext4))
        .unwrap_or(0)
}

/// The order of the targets in `round` (from 0): rotated by one each round.
pub fn round_order(targets: usize, round: usize) -> Vec<usize> {
    (0..targets).map(|k| (round + k) % targets).collect()
}

/// Root, the tools the targets and jobs need, /dev/fuse for the FUSE targets.
fn check_tools(jobs: &[Job], targets: &[Target]) -> Result<()> {
    let mut kernel_fs: Vec<Fs> = targets
        .iter()
        .filter_map(|t| match t {
            Target::Kernel(f) => Some(*f),
            _ => None,
        })
        .collect();
    if targets.contains(&Target::Fuse2fs) && !kernel_fs.contains(&Fs::Ext4) {
        kernel_fs.push(Fs::Ext4);
    }
    let mut tools: Vec<&'static str> = jobs.iter().filter_map(Job::tool).collect();
    if targets.contains(&Target::Fuse2fs) {
        tools.push("fuse2fs");
    }
    preflight(&kernel_fs, &tools)?;
    for job in jobs {
        if let Job::Fio(p) = job {
            anyhow::ensure!(p.is_file(), "fio job file {} not found", p.display());
        }
    }
    if targets
        .iter()
        .any(|&t| matches!(t, Target::Fuse2fs | Target::Floor { .. }) || Flavor::of(t).is_some())
    {
        anyhow::ensure!(
            Path::new("/dev/fuse").exists(),
            "the FUSE targets need /dev/fuse (and fusermount3: scripts/ci/fs-tools.sh)"
        );
    }
    Ok(())
}

/// Runs every job on every target, `opts.rounds` rounds each.
pub fn run(jobs: &[Job], targets: &[Target], opts: &Options) -> Result<Vec<JobReport>> {
    anyhow::ensure!(opts.rounds >= 1, "--repeat must be at least 1");
    anyhow::ensure!(!targets.is_empty(), "--fs names no file system");
    check_tools(jobs, targets)?;
    kernel::catch_interrupt()?;
    let names: Vec<String> = targets.iter().map(|t| t.name().to_string()).collect();
    let mut reports = Vec::new();
    for job in jobs {
        let name = job.name();
        let mut runs = Vec::new();
        let mut phases: Vec<Vec<Option<Vec<Phase>>>> = vec![Vec::new(); targets.len()];
        for round in 0..opts.rounds {
            for t in round_order(targets.len(), round) {
                let target = targets[t];
                eprint!(
                    "compare-fs: {name} on {} (round {}/{}) ... ",
                    target.name(),
                    round + 1,
                    opts.rounds
                );
                let run = match run_one(job, target, opts) {
                    Ok(mut r) => {
                        eprintln!("{}", brief(&r.phases));
                        r.round = round + 1;
                        r
                    }
                    Err(e) if INTERRUPTED.load(Ordering::SeqCst) => return Err(e),
                    Err(e) => {
                        eprintln!("failed: {e:#}");
                        failed(target, round + 1, &e)
                    }
                };
                phases[t].push(run.error.is_none().then(|| run.phases.clone()));
                runs.push(run);
                // A run whose phases outlived the signal (a child it waited for) ends the
                // command here, its target unmounted already, before the next mounts.
                anyhow::ensure!(!INTERRUPTED.load(Ordering::SeqCst), "interrupted");
            }
        }
        let summary = rounds::summarise(&names, baseline(targets), &phases);
        reports.push(JobReport {
            job: name,
            runs,
            summary,
        });
    }
    Ok(reports)
}

fn brief(phases: &[Phase]) -> String {
    phases
        .iter()
        .map(|p| format!("{} {:.1} {}", p.name, p.value, p.unit))
        .collect::<Vec<_>>()
        .join(", ")
}

fn failed(target: Target, round: usize, e: &anyhow::Error) -> FsRun {
    FsRun {
        fs: target.name().to_string(),
        round,
        seconds: 0.0,
        phases: Vec::new(),
        error: Some(format!("{e:#}")),
        fuse_trace_unavailable: None,
        files: None,
        extents_per_file: None,
        max_extents: None,
        free_space: None,
    }
}

fn run_one(job: &Job, target: Target, opts: &Options) -> Result<FsRun> {
    match target {
        Target::Kernel(f) => kernel_run(f, job, opts),
        Target::Extalloc | Target::ExtallocUring | Target::ExtallocNoPoll => {
            extalloc_run(job, opts, target)
        }
        Target::Fuse2fs => fuse2fs_run(job, opts),
        Target::Floor { uring } => floor_run(job, uring),
    }
    .with_context(|| format!("the job {} on {}", job.name(), target.name()))
}

/// What a job run reports before the layout is read.
struct Ran {
    seconds: f64,
    phases: Vec<Phase>,
    fuse_trace_unavailable: Option<String>,
}

/// Runs the job in `root`, counting FUSE requests when `fuse` (and tracefs allows) and CPU
/// time (this process's and its children's, and `daemon`'s when given).
fn run_job(job: &Job, root: &Path, fuse: bool, daemon: Option<u32>) -> Result<Ran> {
    let (mut trace, unavailable) = if fuse {
        match FuseTrace::start(root) {
            Ok(t) => (Some(t), None),
            Err(e) => (None, Some(format!("{e:#}"))),
        }
    } else {
        (None, None)
    };
    let mut rec = Recorder::new(trace.as_mut(), Some(CpuMeter::start(daemon)?));
    let started = Instant::now();
    jobs::run(job, root, &mut rec)?;
    Ok(Ran {
        seconds: started.elapsed().as_secs_f64(),
        phases: rec.phases,
        fuse_trace_unavailable: unavailable,
    })
}

fn kernel_run(fs: Fs, job: &Job, opts: &Options) -> Result<FsRun> {
    let mut dev = Device::create(fs, opts.device_bytes, opts.block_size)?;
    let root = dev.path("");
    let ran = run_job(job, &root, false, None)?;
    let mut files = Vec::new();
    for path in regular_files(&root)? {
        files.push(kernel::file_extents(&path, opts.block_size)?);
    }
    dev.unmount()?;
    let free_space = free_space_of(fs, &dev, opts.block_size)?;
    Ok(fs_run(
        fs.name(),
        ran,
        Some(&files),
        opts.block_size,
        free_space,
    ))
}

fn fuse2fs_run(job: &Job, opts: &Options) -> Result<FsRun> {
    let mut m = Fuse2fsMount::create(opts.device_bytes, opts.block_size)?;
    let ran = run_job(job, m.mountpoint(), true, m.pid())?;
    m.unmount()?;
    let free = super::ext4_free_space(&m.image.to_string_lossy())?;
    Ok(fs_run("fuse2fs", ran, None, opts.block_size, Some(free)))
}

fn extalloc_run(job: &Job, opts: &Options, target: Target) -> Result<FsRun> {
    let flavor = Flavor::of(target).expect("an extalloc target");
    let block_size = opts.block_size;
    let mut m = ExtallocMount::create(
        opts.device_bytes,
        block_size,
        flavor,
        opts.policy.as_deref(),
    )?;
    let ran = run_job(job, &m.mountpoint, true, m.pid)?;
    m.unmount()?;
    let vol = extalloc::volume::Volume::open_read_only(&m.image)?;
    let paths = extalloc_fuse::fs::paths(&vol).map_err(anyhow::Error::msg)?;
    let mut files = Vec::new();
    for (&id, (_, kind)) in &paths {
        if *kind == extalloc_fuse::inode::Kind::File {
            files.push(merged(&vol.extents(id)?));
        }
    }
    let geometry = vol.store().geometry();
    let free = report::free_space_json(
        &vol.store().allocator().free_space(),
        geometry.block_size,
        geometry.group_blocks,
    );
    Ok(fs_run(
        target.name(),
        ran,
        Some(&files),
        block_size,
        Some(free),
    ))
}

/// The job on the floor: no layout or free space (it has no storage).
fn floor_run(job: &Job, uring: bool) -> Result<FsRun> {
    let mut m = FloorMount::create(uring)?;
    let ran = run_job(job, m.mountpoint(), true, m.pid())?;
    m.unmount()?;
    Ok(fs_run(Target::Floor { uring }.name(), ran, None, 0, None))
}

/// A volume file's extents in logical order, physically contiguous ones merged.
pub(super) fn merged(map: &[extalloc::volume::FileExtent]) -> Vec<Extent> {
    let mut sorted: Vec<_> = map.to_vec();
    sorted.sort_by_key(|e| e.logical);
    let mut out: Vec<Extent> = Vec::new();
    for e in sorted {
        match out.last_mut() {
            Some(last) if last.end() == e.extent.start => last.len += e.extent.len,
            _ => out.push(e.extent),
        }
    }
    out
}

fn fs_run(
    name: &str,
    ran: Ran,
    files: Option<&[Vec<Extent>]>,
    block_size: u32,
    free_space: Option<FreeSpaceJson>,
) -> FsRun {
    let layout = files.map(|f| report::layout(f, block_size));
    FsRun {
        fs: name.to_string(),
        round: 0,
        seconds: ran.seconds,
        phases: ran.phases,
        error: None,
        fuse_trace_unavailable: ran.fuse_trace_unavailable,
        files: layout.as_ref().map(|l| l.files),
        extents_per_file: layout.as_ref().map(|l| l.extents_per_file),
        max_extents: files.map(|f| f.iter().map(|e| e.len() as u64).max().unwrap_or(0)),
        free_space,
    }
}

/// Every regular file under `root`.
pub(super) fn regular_files(root: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
            let e = e?;
            let t = e.file_type()?;
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                out.push(e.path());
            }
        }
    }
    out.sort();
    Ok(out)
}

impl Flavor {
    /// The flavour of an extalloc target; None for the others.
    pub(super) fn of(target: Target) -> Option<Flavor> {
        match target {
            Target::Extalloc => Some(Flavor::Plain),
            Target::ExtallocUring => Some(Flavor::Uring),
            Target::ExtallocNoPoll => Some(Flavor::NoPoll),
            Target::Kernel(_) | Target::Fuse2fs | Target::Floor { .. } => None,
        }
    }
}

/// The runs' layout and free space after the job, one row per target and round.
pub fn layout_table(runs: &[FsRun]) -> String {
    let mut s = String::from(
        "Layout and free space after the job:\n\n| fs | round | seconds | files | extents/file | \
         max extents | free extents | largest free (MiB) |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let dash = || "-".to_string();
    for r in runs {
        let free = r.free_space.as_ref();
        let seconds = match &r.error {
            Some(_) => "failed".to_string(),
            None => format!("{:.1}", r.seconds),
        };
        s.push_str(&format!(
            "| {} | {} | {seconds} | {} | {} | {} | {} | {} |\n",
            r.fs,
            r.round,
            r.files.map_or_else(dash, |v| v.to_string()),
            r.extents_per_file.map_or_else(dash, |v| format!("{v:.2}")),
            r.max_extents.map_or_else(dash, |v| v.to_string()),
            free.map_or_else(dash, |f| f.free_extents.to_string()),
            free.and_then(|f| f.largest_free_extent_kib)
                .map_or_else(dash, |k| format!("{:.0}", k / 1024.0)),
        ));
    }
    s
}

/// Why the FUSE targets of `runs` have no request counts ("" when they all have them).
pub fn fuse_note(runs: &[FsRun]) -> String {
    let mut notes: Vec<String> = runs
        .iter()
        .filter_map(|r| {
            r.fuse_trace_unavailable
                .as_ref()
                .map(|why| format!("not counted on {}: {why}", r.fs))
        })
        .collect();
    notes.sort();
    notes.dedup();
    notes.join("; ")
}

/// Every job's tables, then the medians side by side.
pub fn report_text(names: &[String], rounds: usize, reports: &[JobReport]) -> String {
    let mut s = String::new();
    for r in reports {
        s.push_str(&rounds::job_table(
            &r.job,
            rounds,
            &r.summary,
            &fuse_note(&r.runs),
        ));
        s.push('\n');
        s.push_str(&layout_table(&r.runs));
        s.push('\n');
    }
    let all: Vec<(String, Vec<PhaseSummary>)> = reports
        .iter()
        .map(|r| (r.job.clone(), r.summary.clone()))
        .collect();
    s.push_str(&rounds::side_by_side(names, &all));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_rotate_the_order_and_ratios_divide_by_ext4() {
        assert_eq!(round_order(3, 0), [0, 1, 2]);
        assert_eq!(round_order(3, 1), [1, 2, 0]);
        assert_eq!(round_order(3, 2), [2, 0, 1]);
        let t = [Target::Extalloc, Target::Fuse2fs, Target::Kernel(Fs::Ext4)];
        assert_eq!(baseline(&t), 2);
        assert_eq!(baseline(&t[..2]), 0);
    }

    #[test]
    fn without_tracefs_the_report_says_so_instead_of_zeros() {
        let mut run = failed(Target::Extalloc, 1, &anyhow::anyhow!("x"));
        run.error = None;
        run.phases = vec![Phase {
            name: "create".into(),
            unit: "ops/s".into(),
            value: 10.0,
            ops: 5,
            fuse: None,
            cpu: None,
        }];
        run.fuse_trace_unavailable = Some("FUSE request counts need root".into());
        let names = vec!["extalloc".to_string()];
        let summary = rounds::summarise(&names, 0, &[vec![Some(run.phases.clone())]]);
        let report = JobReport {
            job: "metadata".into(),
            runs: vec![run],
            summary,
        };
        let text = report_text(&names, 1, &[report]);
        assert!(
            text.contains("FUSE requests: not counted on extalloc: FUSE request counts need root"),
            "{text}"
        );
        assert!(
            text.contains(
                "| create | ops/s | extalloc | 10.0 | 10.0-10.0 | 1.00 | 1.00 | - | - | - |  | - |"
            ),
            "{text}"
        );
        assert!(!text.contains("requests per operation by opcode"), "{text}");
    }

    #[test]
    fn targets_parse() {
        assert_eq!(Target::parse("extalloc").unwrap(), Target::Extalloc);
        assert_eq!(Target::parse("xfs").unwrap(), Target::Kernel(Fs::Xfs));
        assert_eq!(Target::parse("fuse2fs").unwrap(), Target::Fuse2fs);
        assert!(Target::parse("zfs").is_err());
    }
}
