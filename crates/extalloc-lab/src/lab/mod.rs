//! The lab: workloads that run against each requested policy and thread count in one process
//! and report throughput, latency, layout and free-space figures (`docs/lab.md`).
//!
//! Data structures: [`LabOptions`] (one matrix's options), a [`RunOnce`] per workload (the
//! workloads are listed in [`crate::workload`], above this module), and the
//! [`report::Report`] a matrix leaves. Outside allocators run only plain extents: the
//! commands refuse them for other workloads before a matrix starts, and
//! [`run_file_threads`] refuses them anyway. Invariants: a matrix runs every policy x threads
//! `repeat` times interleaved and keeps, per cell, the median repetition
//! ([`report::median_run`]) and every repetition's rate and extents per file; it reads the
//! machine's load before the first run and after the last ([`machine`]) and warns on stderr
//! and in the report when it was busy. Lock order: none here (each workload's own module
//! says what its threads share).

pub mod append_vs_fallocate;
pub mod backend;
#[cfg(feature = "charts")]
pub mod charts;
pub mod commit_bench;
pub mod fallocate2;
pub mod fallocate3;
pub mod frag;
pub mod machine;
pub mod markdown;
pub mod open_bench;
pub mod random_fill;
pub mod report;
pub mod size_class_edge;
pub mod small_files;
pub mod sparse_writes;
mod synthetic;
pub mod units;
pub mod verdict;
pub mod volume_run;
pub mod writeback;

use anyhow::{bail, Context, Result};
use backend::{Backend, LabPolicy};
use extalloc::{Extent, Geometry};
use report::{ProgressPoint, Report, Run};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub use synthetic::Synthetic;

/// One run of a workload: a policy, a thread count, the options.
pub type RunOnce = fn(&LabPolicy, usize, &LabOptions) -> Result<Run>;

/// Options shared by the lab's workloads.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LabOptions {
    pub threads: Vec<usize>,
    pub policies: Vec<String>,
    pub seconds: f64,
    pub repeat: usize,
    pub device_bytes: u64,
    pub block_size: u32,
    pub group_blocks: u64,
    pub commit_ms: u64,
    pub seed: u64,
    /// Workload-specific: bytes per file (sparse-writes, random-fill).
    pub file_bytes: u64,
    /// sparse-writes: number of writes.
    pub writes: u64,
    /// random-fill: sequential 1 KiB writes before each jump.
    pub seq_burst: u64,
    /// size-class-edge: lifetime against size.
    pub mix: bool,
    /// small-files: fraction of the device to fill.
    pub fill: f64,
    /// replay: the trace.
    pub trace: Option<std::path::PathBuf>,
    /// Run on a journaled store on this file (made anew each run) instead of in memory.
    pub device: Option<std::path::PathBuf>,
    /// fallocate3: pre-fill this fraction of the device with scattered extents (0: none).
    pub prefill: f64,
    /// Run on a journaled store on a synthetic device of `device_bytes`, already filled
    /// (`extalloc::disk::device::SyntheticDevice`), instead of the memory device.
    pub synthetic: Option<Synthetic>,
}

/// Groups up to which a synthetic run reports free-space figures (each needs every bitmap).
pub const SYNTHETIC_FREE_SPACE_GROUPS: u64 = 1 << 16;

impl LabOptions {
    pub fn geometry(&self) -> Result<Geometry> {
        Geometry::from_bytes(self.block_size, self.group_blocks, self.device_bytes)
            .context("device geometry")
    }

    pub fn block_bytes(&self) -> u64 {
        u64::from(self.block_size)
    }
}

/// What one worker thread did.
#[derive(Default)]
pub struct ThreadOutput {
    /// Operations (the workload's unit: appends, writes, files).
    pub ops: u64,
    /// The extents of the files it leaves behind, in logical order.
    pub files: Vec<Vec<Extent>>,
    /// Time from the start at which each tenth of its work was done (fixed-work workloads).
    pub marks: Vec<Duration>,
}

impl ThreadOutput {
    /// Closes a single-file worker's file as fio would (its unused preallocations go back)
    /// and reports `ops` operations and the file's extents.
    pub fn close_file(
        alloc: &extalloc::Files,
        file: &extalloc::FileAlloc,
        ops: u64,
        marks: Marks,
    ) -> anyhow::Result<Self> {
        let extents = file.extents().into_iter().map(|(_, e)| e).collect();
        alloc.release_prealloc(file)?;
        Ok(ThreadOutput {
            ops,
            files: vec![extents],
            marks: marks.marks,
        })
    }
}

/// How long a run lasts.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// `--seconds`, then the workers are told to stop.
    Deadline,
    /// Until every worker has done its fixed amount of work.
    Done,
}

/// [`run_threads`] for workloads that need files: the body gets the extalloc allocator; an
/// outside allocator is refused with a message naming `workload`.
pub fn run_file_threads<F>(
    workload: &str,
    policy: &LabPolicy,
    threads: usize,
    opts: &LabOptions,
    until: Until,
    body: F,
) -> Result<Run>
where
    F: Fn(&extalloc::Files, usize, &AtomicBool, Instant) -> Result<ThreadOutput> + Sync,
{
    run_threads(policy, threads, opts, until, |b, t, stop, started| {
        body(b.extalloc(workload)?, t, stop, started)
    })
}

/// Runs `body` on `threads` threads over a fresh device while the calling thread commits
/// every `commit_ms`, then measures the run.
pub fn run_threads<F>(
    policy: &LabPolicy,
    threads: usize,
    opts: &LabOptions,
    until: Until,
    body: F,
) -> Result<Run>
where
    F: Fn(&Backend, usize, &AtomicBool, Instant) -> Result<ThreadOutput> + Sync,
{
    run_threads_prepared(policy, threads, opts, until, |_| Ok(()), body)
}

/// [`run_threads`] with a `prepare` step on the fresh backend before the clock starts (its
/// allocations are not counted).
pub fn run_threads_prepared<P, F>(
    policy: &LabPolicy,
    threads: usize,
    opts: &LabOptions,
    until: Until,
    prepare: P,
    body: F,
) -> Result<Run>
where
    P: FnOnce(&Backend) -> Result<()>,
    F: Fn(&Backend, usize, &AtomicBool, Instant) -> Result<ThreadOutput> + Sync,
{
    let geometry = opts.geometry()?;
    let alloc = Backend::open(
        policy,
        geometry,
        opts.device.as_deref(),
        opts.synthetic,
        opts.seed,
    )?;
    let name = policy.name();
    prepare(&alloc).with_context(|| format!("{name}: preparing the device"))?;
    alloc.reset_stats();
    let (results, elapsed, mut commits) = run_workers(&alloc, threads, opts, until, &body)?;
    let mut files = Vec::new();
    let mut ops = 0;
    let mut marks: Vec<Vec<Duration>> = Vec::new();
    for r in results {
        let r = r.with_context(|| format!("{name}: a worker failed"))?;
        ops += r.ops;
        files.extend(r.files);
        marks.push(r.marks);
    }
    // Discard what preallocations still hold and return what the last transaction freed, so
    // the free-space figures show the device as it would be after unmount.
    alloc.discard_preallocations();
    alloc.commit()?;
    commits += 1;
    alloc
        .check()
        .with_context(|| format!("{name}: invariant check after the run"))?;
    let seconds = elapsed.as_secs_f64();
    let ops_per_sec = ops as f64 / seconds;
    Ok(Run {
        policy: name.clone(),
        threads,
        seconds,
        ops,
        ops_per_sec,
        ops_per_sec_repeats: vec![ops_per_sec],
        latency_ns: alloc.latency(),
        layout: report::layout(&files, geometry.block_size),
        // On a large synthetic device the figures would load (generate) every group's
        // bitmap: 8.4 million of them at 1 PiB.
        free_space: (opts.synthetic.is_none()
            || geometry.groups_count() <= SYNTHETIC_FREE_SPACE_GROUPS)
            .then(|| {
                report::free_space_json(
                    &alloc.free_space(),
                    geometry.block_size,
                    geometry.group_blocks,
                )
            }),
        counters: Some(alloc.counters(commits)),
        progress: progress(&marks, ops),
        writeback: None,
    })
}

/// What the workers of a run return, how long they ran and how many commits the calling
/// thread made meanwhile.
type WorkersDone = (Vec<Result<ThreadOutput>>, Duration, u64);

/// Runs `body` on `threads` threads while the calling thread commits every `commit_ms`
/// (see [`commit_while_running`]); then tells the workers to stop and joins them.
fn run_workers<F>(
    alloc: &Backend,
    threads: usize,
    opts: &LabOptions,
    until: Until,
    body: &F,
) -> Result<WorkersDone>
where
    F: Fn(&Backend, usize, &AtomicBool, Instant) -> Result<ThreadOutput> + Sync,
{
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let stop = &stop;
                s.spawn(move || body(alloc, t, stop, started))
            })
            .collect();
        let commits = commit_while_running(alloc, &handles, opts, until, started);
        stop.store(true, Ordering::Relaxed);
        let commits = commits?;
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("worker panicked"))
            .collect();
        Ok((results, started.elapsed(), commits))
    })
}

/// Commits every `commit_ms` from `started` until the deadline (`Until::Deadline`) or until
/// every worker has finished. Returns the commits made; stops at the first that fails.
fn commit_while_running<T>(
    alloc: &Backend,
    handles: &[std::thread::ScopedJoinHandle<'_, T>],
    opts: &LabOptions,
    until: Until,
    started: Instant,
) -> Result<u64> {
    let commit_every = Duration::from_millis(opts.commit_ms.max(1));
    let deadline = started + Duration::from_secs_f64(opts.seconds);
    let mut next_commit = started + commit_every;
    let mut commits = 0u64;
    loop {
        let now = Instant::now();
        if (until == Until::Deadline && now >= deadline) || handles.iter().all(|h| h.is_finished())
        {
            return Ok(commits);
        }
        let mut wake = next_commit.min(now + Duration::from_millis(5));
        if until == Until::Deadline {
            wake = wake.min(deadline);
        }
        std::thread::sleep(wake.saturating_duration_since(now));
        if Instant::now() >= next_commit {
            alloc.commit()?;
            commits += 1;
            next_commit += commit_every;
        }
    }
}

/// Throughput per tenth: a tenth of all ops over the time the slowest thread took for it.
fn progress(marks: &[Vec<Duration>], ops: u64) -> Option<Vec<ProgressPoint>> {
    if marks.is_empty() || marks.iter().any(|m| m.len() != 10) {
        return None;
    }
    let mut prev = Duration::ZERO;
    Some(
        (0..10)
            .map(|k| {
                let at = marks.iter().map(|m| m[k]).max().expect("threads");
                let span = (at.saturating_sub(prev)).as_secs_f64().max(1e-9);
                prev = at;
                ProgressPoint {
                    done: (k + 1) as f64 / 10.0,
                    ops_per_sec: ops as f64 / 10.0 / span,
                }
            })
            .collect(),
    )
}

/// Records a mark each time another tenth of `total` is done.
pub struct Marks {
    total: u64,
    started: Instant,
    pub marks: Vec<Duration>,
}

impl Marks {
    pub fn new(total: u64, started: Instant) -> Self {
        Marks {
            total,
            started,
            marks: Vec::with_capacity(10),
        }
    }

    #[inline]
    pub fn tick(&mut self, done: u64) {
        while (self.marks.len() as u64) < 10
            && done * 10 >= self.total * (self.marks.len() as u64 + 1)
        {
            self.marks.push(self.started.elapsed());
        }
    }
}

/// Parses `1,2,4,8`.
pub fn parse_threads(s: &str) -> Result<Vec<usize>> {
    let v: Vec<usize> = s
        .split(',')
        .map(|t| {
            t.trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| (1..=1024).contains(&n))
        })
        .collect::<Option<_>>()
        .with_context(|| {
            format!("--threads '{s}': expected a comma-separated list of counts from 1 to 1024")
        })?;
    if v.is_empty() {
        bail!("--threads is empty");
    }
    Ok(v)
}

/// How a matrix reports progress: before a run (its label) and after it (its ops/s).
pub trait Progress {
    fn start(&mut self, label: &str);
    fn done(&mut self, ops_per_sec: f64);
}

/// Progress as lines on stderr.
pub struct StderrProgress;

/// Progress as whole plain lines on stderr, each run's label then its time and rate
/// (`[3/12] frag extalloc x2 (repeat 1/3) ... 1.2 s, 5.27 M ops/s`): for a log file or a
/// pipe, where a progress bar shows nothing.
#[derive(Default)]
pub struct LineProgress {
    started: Option<Instant>,
}

impl Progress for LineProgress {
    fn start(&mut self, label: &str) {
        self.started = Some(Instant::now());
        eprint!("{label} ... ");
    }
    fn done(&mut self, ops_per_sec: f64) {
        let secs = self
            .started
            .take()
            .map_or(0.0, |s| s.elapsed().as_secs_f64());
        eprintln!("{secs:.1} s, {} ops/s", units::rate(ops_per_sec));
    }
}

impl Progress for StderrProgress {
    fn start(&mut self, label: &str) {
        eprint!("{label}... ");
    }
    fn done(&mut self, ops_per_sec: f64) {
        eprintln!("{ops_per_sec:.0} ops/s");
    }
}

/// Runs `run_once` for every policy x threads, `repeat` times interleaved (so drift on a
/// shared machine hits every configuration alike), and keeps the median repetition of each.
pub fn run_matrix(
    workload: &str,
    opts: &LabOptions,
    run_once: impl Fn(&LabPolicy, usize, &LabOptions) -> Result<Run>,
) -> Result<Report> {
    run_matrix_with(workload, opts, run_once, &mut StderrProgress)
}

/// [`run_matrix`] with its own progress display.
pub fn run_matrix_with(
    workload: &str,
    opts: &LabOptions,
    run_once: impl Fn(&LabPolicy, usize, &LabOptions) -> Result<Run>,
    progress: &mut dyn Progress,
) -> Result<Report> {
    let policies: Vec<LabPolicy> = opts
        .policies
        .iter()
        .map(|p| LabPolicy::parse(p))
        .collect::<Result<_>>()?;
    let geometry = opts.geometry()?;
    let load = machine::start();
    let total = policies.len() * opts.threads.len() * opts.repeat;
    let mut done = 0;
    let mut all: Vec<Vec<Run>> = vec![Vec::new(); policies.len() * opts.threads.len()];
    for rep in 0..opts.repeat {
        for (pi, policy) in policies.iter().enumerate() {
            for (ti, &threads) in opts.threads.iter().enumerate() {
                done += 1;
                progress.start(&format!(
                    "[{done}/{total}] {workload} {} x{threads} (repeat {}/{})",
                    policy.name(),
                    rep + 1,
                    opts.repeat
                ));
                let run = run_once(policy, threads, opts)?;
                progress.done(run.ops_per_sec);
                all[pi * opts.threads.len() + ti].push(run);
            }
        }
    }
    let report = Report {
        extents_per_file_repeats: report::extents_repeats(&all),
        ..Report::new(
            workload,
            serde_json::to_value(opts)?,
            report::Device::of(&geometry),
            all.into_iter().map(report::median_run).collect(),
        )
    };
    Ok(judge(report, load))
}

/// The report judged ([`Report::judged`]) with the machine's load since `load`; a busy
/// machine's warning also goes to stderr.
pub fn judge(report: Report, load: Option<machine::Load>) -> Report {
    let report = report.judged(machine::finish(load));
    for w in &report.warnings {
        eprintln!("warning: {}: {w}", report.workload);
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_parse() {
        assert_eq!(parse_threads("1,2, 8").unwrap(), vec![1, 2, 8]);
        assert!(parse_threads("0").is_err());
        assert!(parse_threads("a").is_err());
    }

    #[test]
    fn marks_every_tenth() {
        let mut m = Marks::new(100, Instant::now());
        for i in 1..=100 {
            m.tick(i);
        }
        assert_eq!(m.marks.len(), 10);
        let mut m = Marks::new(7, Instant::now());
        for i in 1..=7 {
            m.tick(i);
        }
        assert_eq!(m.marks.len(), 10);
    }
}
