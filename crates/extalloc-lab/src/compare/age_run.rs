//! The aging jobs on every target: `age-git` (`age_git.rs`) and `age-profile`
//! (`age_profile.rs`), each once per target on a fresh file system (`age.rs`'s
//! [`AgeFs`]), the results as Markdown, JSON and a chart (`age_chart.rs`).
//!
//! Data structures: [`AgeOptions`] (what to run, how big), [`AgeReport`] (every target's
//! runs).
//!
//! Invariant: a target's run that fails keeps what it measured, carries the error, and
//! the other targets go on; Ctrl-C stops everything (the file systems are torn down on
//! drop). No locks.

use super::age::AgeFs;
use super::age_git::{self, GitOptions, GitRun};
use super::age_profile::{self, ProfileOptions, ProfileRun};
use super::kernel::{self, Fs, INTERRUPTED};
use super::mounted::{Flavor, Target};
use anyhow::Result;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// The aging job names.
pub const AGING_JOBS: &[&str] = &["age-git", "age-profile"];

/// What the aging jobs run.
#[derive(Debug, Clone)]
pub struct AgeOptions {
    /// Size of each file system.
    pub device_bytes: u64,
    /// Block size.
    pub block_size: u32,
    /// `age-git`, if asked for.
    pub git: Option<GitOptions>,
    /// `age-profile`, if asked for.
    pub profile: Option<ProfileOptions>,
    /// The allocation policy of extalloc's mounts (None: the default preset).
    pub policy: Option<String>,
}

/// Every target's aging runs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AgeReport {
    /// Device size, bytes.
    pub device_bytes: u64,
    /// Where the images were (`--image-dir`; /dev/shm by default).
    pub image_dir: String,
    /// The commits `age-git` checked out, oldest first.
    pub git_commits: Vec<String>,
    /// Commits in the repository's first-parent history.
    pub git_history: usize,
    /// A measurement every this many checkouts.
    pub git_every: usize,
    /// Cold reads per tree per measurement.
    pub git_reads: usize,
    /// `age-git`'s curves.
    pub git: Vec<GitRun>,
    /// `age-profile`'s options.
    pub profile_options: Option<ProfileOptions>,
    /// `age-profile`'s runs.
    pub profile: Vec<ProfileRun>,
}

/// Root, the tools, /dev/fuse for extalloc; fuse2fs is refused.
fn check(targets: &[Target]) -> Result<()> {
    let kernel_fs: Vec<Fs> = targets
        .iter()
        .filter_map(|t| match t {
            Target::Kernel(f) => Some(*f),
            _ => None,
        })
        .collect();
    anyhow::ensure!(
        !targets
            .iter()
            .any(|t| matches!(t, Target::Fuse2fs | Target::Floor { .. })),
        "the aging jobs run on ext4, xfs, btrfs and extalloc: drop fuse2fs and the floor \
         from --fs"
    );
    let mut tools = vec!["git", "grep", "tar"];
    if kernel_fs.contains(&Fs::Btrfs) {
        tools.push("btrfs");
    }
    super::preflight(&kernel_fs, &tools)?;
    if targets.iter().any(|&t| Flavor::of(t).is_some()) {
        anyhow::ensure!(
            std::path::Path::new("/dev/fuse").exists(),
            "extalloc mounts need /dev/fuse (and fusermount3: scripts/ci/fs-tools.sh)"
        );
    }
    Ok(())
}

/// Runs `job` on a fresh file system of `target`: its seconds and why it failed (the
/// error itself when interrupted).
fn on_fresh(
    target: Target,
    opts: &AgeOptions,
    job: impl FnOnce(&mut AgeFs) -> Result<()>,
) -> Result<(f64, Option<String>)> {
    let started = Instant::now();
    let (bytes, policy) = (opts.device_bytes, opts.policy.as_deref());
    let r = AgeFs::create(target, bytes, opts.block_size, policy).and_then(|mut fs| job(&mut fs));
    let seconds = started.elapsed().as_secs_f64();
    match r {
        Ok(()) => Ok((seconds, None)),
        Err(e) if INTERRUPTED.load(Ordering::SeqCst) => Err(e),
        Err(e) => {
            eprintln!("  failed: {e:#}");
            Ok((seconds, Some(format!("{e:#}"))))
        }
    }
}

/// Runs the aging jobs asked for on every target, one after the other.
pub fn run(targets: &[Target], opts: &AgeOptions) -> Result<AgeReport> {
    check(targets)?;
    kernel::catch_interrupt()?;
    let mut report = AgeReport {
        device_bytes: opts.device_bytes,
        image_dir: super::kernel::image_dir().display().to_string(),
        git_commits: Vec::new(),
        git_history: 0,
        git_every: 0,
        git_reads: 0,
        git: Vec::new(),
        profile_options: opts.profile.clone(),
        profile: Vec::new(),
    };
    if let Some(g) = &opts.git {
        let history = age_git::history(&g.repo)?;
        report.git_history = history.len();
        report.git_commits = age_git::commits_to_check_out(&history, g.checkouts);
        report.git_every = g.every;
        report.git_reads = g.reads;
        for &t in targets {
            eprintln!(
                "compare-fs: age-git on {}: {} checkouts of {} ({} commits), measured every {}",
                t.name(),
                report.git_commits.len(),
                g.repo.display(),
                history.len(),
                g.every
            );
            let mut run = GitRun {
                fs: t.name().to_string(),
                seconds: 0.0,
                points: Vec::new(),
                error: None,
            };
            let commits = &report.git_commits;
            (run.seconds, run.error) = on_fresh(t, opts, |fs| {
                age_git::run_on(fs, g, commits, &mut run.points)
            })?;
            report.git.push(run);
        }
    }
    if let Some(p) = &opts.profile {
        for &t in targets {
            eprintln!(
                "compare-fs: age-profile on {}: fill {:.0} %, {} rewrites, seed {}",
                t.name(),
                p.fill * 100.0,
                p.rewrites,
                p.seed
            );
            let mut run = ProfileRun {
                fs: t.name().to_string(),
                ..ProfileRun::default()
            };
            let block = u64::from(opts.block_size);
            let (seconds, error) =
                on_fresh(t, opts, |fs| age_profile::run_on(fs, p, block, &mut run))?;
            (run.seconds, run.error) = (seconds, error);
            report.profile.push(run);
        }
    }
    Ok(report)
}

/// The report as Markdown.
pub fn report_text(r: &AgeReport) -> String {
    let mib = r.device_bytes >> 20;
    let mut s = String::new();
    if !r.git.is_empty() {
        s.push_str(&format!(
            "### compare-fs: age-git\n\n{} checkouts of {} first-parent commits, evenly \
             spaced, oldest first, on {mib} MiB file systems in {}; every {} \
             checkouts the tree is read cold (grep -r, after sync, unmount + mount, \
             drop_caches; median of {} reads), then a fresh copy of it (git archive | tar -x on the same file \
             system). Layout score = aged read / fresh read (1 = as fast as fresh; higher \
             is slower).\n\n",
            r.git_commits.len(),
            r.git_history,
            r.image_dir,
            r.git_every,
            r.git_reads
        ));
        s.push_str(&age_git::table(&r.git));
        s.push('\n');
    }
    if let Some(p) = &r.profile_options {
        s.push_str(&format!(
            "### compare-fs: age-profile\n\nFill to {:.0} % of statvfs's size of {mib} MiB \
             file systems with files log-uniform in {}-{} bytes ({:.0} % short-lived), seed \
             {}, then churn until {} x the capacity was created. frag %: per group 100 x \
             (1 - largest free extent / free), over the groups with free space (fsperf). \
             Read: a cold read of a sample of the aged files against fresh copies written \
             after the churn on the same file system.\n\n",
            p.fill * 100.0,
            p.min_bytes,
            p.max_bytes,
            p.short_share * 100.0,
            p.seed,
            p.rewrites
        ));
        s.push_str(&age_profile::table(&r.profile));
        s.push_str("\nFree extents by size after the churn (unmounted):\n\n");
        s.push_str(&age_profile::histogram_table(&r.profile));
        s.push_str("\nWhere the free space comes from:\n\n");
        for run in &r.profile {
            if let Some(f) = &run.free {
                s.push_str(&format!("- {}: {}\n", run.fs, f.source));
            }
        }
    }
    s
}
