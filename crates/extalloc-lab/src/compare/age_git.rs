//! `compare-fs age-git`: FAST'17's aging by git ("File Systems Fated for Senescence?").
//! A repository with real history is cloned onto the mount (`git clone --no-local
//! --no-checkout`), then N of its first-parent commits, evenly spaced, are checked out
//! oldest first. Every k checkouts the checkout's tree (`.git` left out) is read cold
//! (`grep -r` of a fixed string after `sync`, an unmount and mount, and `drop_caches`;
//! the median of `--age-reads` such reads),
//! then a fresh copy of the same tree (`git archive | tar -x` into a new directory of the
//! same file system) is read the same way: layout score = aged time / fresh time (above 1:
//! the aged tree reads slower). Extents per file of both trees come from `AgeFs::layout`,
//! and how often a reader jumps from one file's data to another place for the next, and
//! how often that place is far (`age::jumps_pct`): on a RAM-backed device the read times are mostly CPU, the layout
//! figures are what aging changes.
//! The copy is removed before the next checkout.
//!
//! Data structures: [`GitOptions`], [`GitPoint`] (one measurement), [`GitRun`] (one
//! target's curve).
//!
//! Invariant: the aged tree is `aged/` and the copy `fresh/` under the root, and nothing
//! else is written there; the copy exists only during a measurement. No locks.

use super::age::{extents_per_file, jumps_pct, AgeFs, FileLayout};
use super::kernel;
use super::rounds::median;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// What `grep -r` looks for: a fixed string no file of the tree is expected to hold, so
/// every file is read to its end.
pub const NEEDLE: &str = "extalloc aging: no file holds this line";

/// How the git aging runs.
#[derive(Debug, Clone)]
pub struct GitOptions {
    /// The repository (not a shallow clone).
    pub repo: PathBuf,
    /// Commits checked out (evenly spaced over the history, oldest first).
    pub checkouts: usize,
    /// A measurement every this many checkouts (and after the last).
    pub every: usize,
    /// Cold reads of each tree per measurement (their median is taken).
    pub reads: usize,
}

/// One measurement of the aged tree against a fresh copy.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GitPoint {
    /// Checkouts made so far.
    pub checkouts: usize,
    /// The commit checked out.
    pub commit: String,
    /// Seconds the checkouts since the previous point took.
    pub checkout_seconds: f64,
    /// Files in the tree.
    pub files: usize,
    /// Cold `grep -r` of the aged tree, seconds (median of the reads).
    pub aged_read_seconds: f64,
    /// Cold `grep -r` of the fresh copy, seconds.
    pub fresh_read_seconds: f64,
    /// aged / fresh.
    pub layout_score: f64,
    /// Mean extents per file of the aged tree.
    pub aged_extents_per_file: f64,
    /// The same of the fresh copy.
    pub fresh_extents_per_file: f64,
    /// 99th percentile of the aged tree's extents per file.
    pub aged_extents_p99: f64,
    /// The same of the fresh copy.
    pub fresh_extents_p99: f64,
    /// Of consecutive files of the aged tree (path order), the percentage whose data does
    /// not follow the previous file's within 1 MiB (`age::jumps_pct`).
    pub aged_jumps_pct: f64,
    /// The same of the fresh copy.
    pub fresh_jumps_pct: f64,
    /// Of consecutive files of the aged tree, the percentage whose data is not within
    /// 1 MiB of the previous file's end either way.
    pub aged_far_pct: f64,
    /// The same of the fresh copy.
    pub fresh_far_pct: f64,
}

/// One target's curve.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GitRun {
    /// The file system.
    pub fs: String,
    /// Seconds the whole job took.
    pub seconds: f64,
    /// The measurements, in order.
    pub points: Vec<GitPoint>,
    /// Why it stopped early.
    pub error: Option<String>,
}

/// `n` indices evenly spaced over `0..total`, first and last included (all of them when
/// `n >= total`).
pub fn pick_evenly(total: usize, n: usize) -> Vec<usize> {
    if total == 0 || n == 0 {
        return Vec::new();
    }
    if n >= total {
        return (0..total).collect();
    }
    if n == 1 {
        return vec![total - 1];
    }
    (0..n)
        .map(|i| (i * (total - 1) + (n - 1) / 2) / (n - 1))
        .collect()
}

/// After which checkouts (counted from 1) a measurement is made: every `every`-th, and
/// the last.
pub fn checkpoints(n: usize, every: usize) -> Vec<usize> {
    let every = every.max(1);
    let mut v: Vec<usize> = (every..=n).step_by(every).collect();
    if n > 0 && v.last() != Some(&n) {
        v.push(n);
    }
    v
}

/// The repository's first-parent commits, oldest first; an error for a shallow clone.
pub fn history(repo: &Path) -> Result<Vec<String>> {
    let git = |args: &[&str]| kernel::run(Command::new("git").arg("-C").arg(repo).args(args));
    let shallow = git(&["rev-parse", "--is-shallow-repository"]).with_context(|| {
        format!(
            "{}: not a git repository (give --repo PATH)",
            repo.display()
        )
    })?;
    if shallow.trim() == "true" {
        bail!(
            "{} is a shallow clone: age-git needs the whole history (git fetch --unshallow, \
             or --repo PATH of a full clone)",
            repo.display()
        );
    }
    let out = git(&["rev-list", "--reverse", "--first-parent", "HEAD"])?;
    Ok(out.lines().map(str::to_string).collect())
}

/// The commits to check out: `n` evenly spaced over `history`, oldest first.
pub fn commits_to_check_out(history: &[String], n: usize) -> Vec<String> {
    pick_evenly(history.len(), n)
        .into_iter()
        .map(|i| history[i].clone())
        .collect()
}

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    kernel::run(Command::new("git").arg("-C").arg(dir).args(args))
}

/// `git archive HEAD | tar -x -C to`.
fn archive(repo: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("making {}", to.display()))?;
    let mut archive = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["archive", "--format=tar", "HEAD"])
        .stdout(Stdio::piped())
        .spawn()
        .context("running git archive")?;
    let tar = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(to)
        .stdin(archive.stdout.take().expect("piped"))
        .output()
        .context("running tar -x")?;
    let status = archive.wait()?;
    if !status.success() || !tar.status.success() {
        bail!(
            "git archive | tar -x into {} failed ({status}, {}): {}",
            to.display(),
            tar.status,
            String::from_utf8_lossy(&tar.stderr).trim()
        );
    }
    Ok(())
}

/// Seconds a `grep -r` of [`NEEDLE`] over `dir` takes (`.git` left out).
fn grep_seconds(dir: &Path) -> Result<f64> {
    let t = Instant::now();
    let out = Command::new("grep")
        .args(["-r", "-F", "-c", "--exclude-dir=.git", NEEDLE])
        .arg(dir)
        .stdout(Stdio::null())
        .output()
        .context("running grep")?;
    let secs = t.elapsed().as_secs_f64();
    // 1: nothing matched, which is what is expected.
    if out.status.code().is_none_or(|c| c > 1) {
        bail!(
            "grep -r over {} failed ({}): {}",
            dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(secs)
}

/// The aged tree against a fresh copy: the median of `reads` cold reads of each, aged
/// and fresh alternating.
fn measure(fs: &mut AgeFs, checkouts: usize, commit: &str, reads: usize) -> Result<GitPoint> {
    let root = fs.root();
    archive(&root.join("aged"), &root.join("fresh"))?;
    let layout = fs.layout()?;
    let aged: Vec<&FileLayout> = layout
        .iter()
        .filter(|f| f.path.starts_with("aged/") && !f.path.starts_with("aged/.git/"))
        .collect();
    let fresh: Vec<&FileLayout> = layout
        .iter()
        .filter(|f| f.path.starts_with("fresh/"))
        .collect();
    let (mut aged_t, mut fresh_t) = (Vec::new(), Vec::new());
    for _ in 0..reads.max(1) {
        fs.cold()?;
        aged_t.push(grep_seconds(&fs.root().join("aged"))?);
        fs.cold()?;
        fresh_t.push(grep_seconds(&fs.root().join("fresh"))?);
    }
    let aged_read_seconds = median(&aged_t).unwrap_or(0.0);
    let fresh_read_seconds = median(&fresh_t).unwrap_or(0.0);
    let copy = fs.root().join("fresh");
    std::fs::remove_dir_all(&copy).with_context(|| format!("removing {}", copy.display()))?;
    let (a_mean, _, a_p99) = extents_per_file(&aged);
    let (f_mean, _, f_p99) = extents_per_file(&fresh);
    let ((a_jumps, a_far), (f_jumps, f_far)) = (jumps_pct(&aged), jumps_pct(&fresh));
    Ok(GitPoint {
        checkouts,
        commit: commit.to_string(),
        checkout_seconds: 0.0,
        files: aged.len(),
        aged_read_seconds,
        fresh_read_seconds,
        layout_score: aged_read_seconds / fresh_read_seconds.max(1e-9),
        aged_extents_per_file: a_mean,
        fresh_extents_per_file: f_mean,
        aged_extents_p99: a_p99,
        fresh_extents_p99: f_p99,
        aged_jumps_pct: a_jumps,
        fresh_jumps_pct: f_jumps,
        aged_far_pct: a_far,
        fresh_far_pct: f_far,
    })
}

/// Runs the git aging on `fs`, pushing each measurement into `points` as it is made (so a
/// failure keeps the curve so far).
pub fn run_on(
    fs: &mut AgeFs,
    opts: &GitOptions,
    commits: &[String],
    points: &mut Vec<GitPoint>,
) -> Result<()> {
    let aged = fs.root().join("aged");
    kernel::run(
        Command::new("git")
            .args(["clone", "--no-local", "--no-checkout", "-q"])
            .arg(&opts.repo)
            .arg(&aged),
    )
    .with_context(|| format!("cloning {} onto {}", opts.repo.display(), aged.display()))?;
    let marks = checkpoints(commits.len(), opts.every);
    let mut since = Instant::now();
    for (i, commit) in commits.iter().enumerate() {
        if kernel::INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
            bail!("interrupted");
        }
        git(
            &fs.root().join("aged"),
            &["checkout", "-q", "--force", "--detach", commit],
        )
        .with_context(|| format!("checkout {} of {}", i + 1, commits.len()))?;
        if marks.contains(&(i + 1)) {
            let checkout_seconds = since.elapsed().as_secs_f64();
            let mut p = measure(fs, i + 1, commit, opts.reads)?;
            p.checkout_seconds = checkout_seconds;
            eprintln!(
                "  {} checkouts: aged {:.3} s, fresh {:.3} s, score {:.2}, extents/file {:.2} vs {:.2}",
                p.checkouts,
                p.aged_read_seconds,
                p.fresh_read_seconds,
                p.layout_score,
                p.aged_extents_per_file,
                p.fresh_extents_per_file
            );
            points.push(p);
            since = Instant::now();
        }
    }
    Ok(())
}

/// The curves as Markdown: one row per target and measurement.
pub fn table(runs: &[GitRun]) -> String {
    let mut s = String::from(
        "| fs | checkouts | files | aged read (s) | fresh read (s) | layout score | \
         extents/file aged | fresh | p99 aged | p99 fresh | jumps % aged | fresh | \
         far % aged | fresh | checkouts took (s) |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in runs {
        for p in &r.points {
            s.push_str(&format!(
                "| {} | {} | {} | {:.3} | {:.3} | {:.2} | {:.3} | {:.3} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |\n",
                r.fs,
                p.checkouts,
                p.files,
                p.aged_read_seconds,
                p.fresh_read_seconds,
                p.layout_score,
                p.aged_extents_per_file,
                p.fresh_extents_per_file,
                p.aged_extents_p99,
                p.fresh_extents_p99,
                p.aged_jumps_pct,
                p.fresh_jumps_pct,
                p.aged_far_pct,
                p.fresh_far_pct,
                p.checkout_seconds
            ));
        }
        if let Some(e) = &r.error {
            s.push_str(&format!("| {} | failed: {e} |\n", r.fs));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_are_evenly_spaced_oldest_first() {
        assert_eq!(pick_evenly(10, 4), [0, 3, 6, 9]);
        assert_eq!(pick_evenly(390, 100).len(), 100);
        let p = pick_evenly(390, 100);
        assert_eq!((p[0], p[99]), (0, 389));
        assert!(p.windows(2).all(|w| w[0] < w[1]), "strictly increasing");
        let gaps: Vec<usize> = p.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|&g| g == 3 || g == 4), "{gaps:?}");
        assert_eq!(pick_evenly(3, 10), [0, 1, 2], "all when asked for more");
        assert_eq!(pick_evenly(5, 1), [4], "one: the newest");
        assert!(pick_evenly(0, 3).is_empty());
        let h: Vec<String> = (0..5).map(|i| format!("c{i}")).collect();
        assert_eq!(commits_to_check_out(&h, 3), ["c0", "c2", "c4"]);
    }

    #[test]
    fn measurements_every_k_and_after_the_last() {
        assert_eq!(checkpoints(40, 10), [10, 20, 30, 40]);
        assert_eq!(checkpoints(25, 10), [10, 20, 25]);
        assert_eq!(checkpoints(5, 10), [5]);
        assert_eq!(checkpoints(3, 0), [1, 2, 3]);
        assert!(checkpoints(0, 10).is_empty());
    }

    /// A repository of three commits made here (git is one of the project's tools): its
    /// history oldest first; a shallow clone of it and a plain directory are refused.
    #[test]
    fn history_reads_a_full_clone_and_refuses_shallow_ones() {
        let dir = std::env::temp_dir().join(format!("extalloc-age-git-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let repo = dir.join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        let run = |args: &[&str]| {
            kernel::run(
                Command::new("git")
                    .arg("-C")
                    .arg(&dir)
                    .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                    .args(args),
            )
            .unwrap()
        };
        run(&["init", "-q", "repo"]);
        for m in ["one", "two", "three"] {
            run(&["-C", "repo", "commit", "-q", "--allow-empty", "-m", m]);
        }
        let h = history(&repo).unwrap();
        assert_eq!(h.len(), 3);
        assert!(h.iter().all(|c| c.len() == 40));
        let first = run(&["-C", "repo", "rev-list", "--max-parents=0", "HEAD"]);
        assert_eq!(h[0], first.trim(), "oldest first");
        let url = format!("file://{}", repo.display());
        run(&["clone", "-q", "--depth", "1", &url, "shallow"]);
        assert!(
            history(&dir.join("shallow")).is_err(),
            "a shallow clone is refused"
        );
        std::fs::create_dir_all(dir.join("plain")).unwrap();
        assert!(history(&dir.join("plain")).is_err(), "not a repository");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
