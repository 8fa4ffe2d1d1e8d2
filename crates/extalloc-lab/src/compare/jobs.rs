//! The jobs `compare-fs` runs in a mounted file system's root, each as timed phases: fio job
//! files, fs_mark, and issue 34's metadata jobs: the create / stat / rename / unlink loop
//! (here, in Rust), `tar -xf` then `rm -rf` of /usr/include, `git clone --no-local`, and
//! stress-ng's dentry and fallocate stressors.
//!
//! Data structures: [`Job`] (what to run), [`Phase`] (one timed figure with its operation
//! count, its CPU time (caller and daemon, `cpu.rs`) and, on FUSE mounts, the requests it
//! sent), [`Recorder`] (collects the phases, reads the CPU counters and drains the FUSE trace
//! at each phase's end, so untimed setup is never counted).
//!
//! Invariant: a phase's FUSE counts and CPU time cover exactly the work between the previous
//! [`Recorder::phase`] or [`Recorder::discard`] and its own (the CPU window is closed before
//! the trace is drained and opened again after, so the draining is in neither); nothing else
//! touches the mount in between (the caller reads the layout only after the job).

use super::cpu::{Cpu, CpuMeter};
use super::fusetrace::{Counts, FuseTrace};
use super::kernel::{self, INTERRUPTED};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// The fio jobs of issue 34's table (relative to the repository's root, where the command
/// is run from): `compare-fs issue34` runs them, then every [`NAMED`] job, the table's order.
pub const ISSUE34_FIO: &[&str] = &[
    "jobs/seq-write-1m.fio",
    "jobs/randwrite-4k-4jobs.fio",
    "jobs/randread-4k-cold.fio",
    "jobs/seqread-128k-cold.fio",
];

/// The jobs by name besides fio job files.
pub const NAMED: &[&str] = &[
    "fsmark",
    "metadata",
    "tar",
    "git-clone",
    "stress-dentry",
    "stress-fallocate",
];

/// The job names given on the command line, `issue34` expanded; a name that is neither a
/// named job nor a `.fio` file is an error.
pub fn expand_names(names: &[String]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for n in names {
        if n == "issue34" {
            out.extend(ISSUE34_FIO.iter().chain(NAMED).map(|s| s.to_string()));
        } else if NAMED.contains(&n.as_str()) || n.ends_with(".fio") {
            out.push(n.clone());
        } else {
            bail!(
                "unknown job '{n}': give a fio job file (.fio), one of {}, or issue34",
                NAMED.join(", ")
            );
        }
    }
    Ok(out)
}

/// What to run on each file system.
#[derive(Debug, Clone)]
pub enum Job {
    /// A fio job file. With a line `; compare-fs: drop_caches` fio lays its files out first
    /// (`--create_only=1`), then the page cache is dropped, then the timed run.
    Fio(PathBuf),
    /// fs_mark: `dirs` directories of small files of `bytes`, one thread per directory, no
    /// fsync, `files` files each.
    FsMark {
        /// Files per directory.
        files: u64,
        /// Bytes per file.
        bytes: u64,
        /// Directories (and fs_mark threads).
        dirs: u64,
    },
    /// Create, stat (warm), rename (in the same directory) and unlink `files` empty files
    /// spread over `dirs` directories, one thread; ops/s per phase.
    Metadata {
        /// Files in all.
        files: u64,
        /// Directories.
        dirs: u64,
    },
    /// `tar -xf` of a tarball (made once, in /dev/shm), then `rm -rf` of the tree.
    Tar {
        /// The directory it was made of (for the report).
        source: PathBuf,
        /// The tarball.
        tarball: PathBuf,
        /// Its top directory's name (what `rm -rf` removes).
        top: String,
        /// Entries in it (files, directories, links).
        entries: u64,
    },
    /// `git clone --no-local` of a local repository.
    GitClone {
        /// The repository.
        repo: PathBuf,
        /// Files in its HEAD (what the checkout writes).
        files: u64,
    },
    /// A stress-ng stressor for a fixed time.
    StressNg {
        /// `dentry`, `fallocate`, ...
        stressor: String,
        /// Instances (`--dentry N`).
        instances: u32,
        /// Seconds (`--timeout`).
        seconds: u32,
    },
}

impl Job {
    /// The name in reports.
    pub fn name(&self) -> String {
        match self {
            Job::Fio(p) => p
                .file_stem()
                .map_or("fio".into(), |s| s.to_string_lossy().into_owned()),
            Job::FsMark { files, bytes, dirs } => format!("fsmark {dirs}x{files}x{bytes}B"),
            Job::Metadata { files, dirs } => format!("metadata {files} files in {dirs} dirs"),
            Job::Tar { source, .. } => format!("tar -xf, rm -rf of {}", source.display()),
            Job::GitClone { repo, .. } => format!("git clone {}", repo.display()),
            Job::StressNg {
                stressor,
                instances,
                seconds,
            } => format!("stress-ng --{stressor} {instances} ({seconds} s)"),
        }
    }

    /// The external tool it runs, if any.
    pub fn tool(&self) -> Option<&'static str> {
        match self {
            Job::Fio(_) => Some("fio"),
            Job::FsMark { .. } => Some("fs_mark"),
            Job::Metadata { .. } => None,
            Job::Tar { .. } => Some("tar"),
            Job::GitClone { .. } => Some("git"),
            Job::StressNg { .. } => Some("stress-ng"),
        }
    }
}

/// One timed figure of a job.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Phase {
    /// `create`, `tar -xf`, the fio job's name, ...
    pub name: String,
    /// `MiB/s`, `files/s`, `ops/s`, `bogo ops/s` (higher is better) or `s` (lower is).
    pub unit: String,
    /// The figure.
    pub value: f64,
    /// Operations it did (files, I/Os, tar entries, bogo ops): what FUSE requests are
    /// divided by.
    pub ops: u64,
    /// FUSE requests it sent, on a FUSE mount with tracing.
    pub fuse: Option<Counts>,
    /// CPU time it took, the caller's and the FUSE daemon's (None: not measured).
    pub cpu: Option<Cpu>,
}

impl Phase {
    /// CPU time per operation, caller plus daemon, µs.
    pub fn cpu_us_per_op(&self) -> Option<f64> {
        self.cpu.and_then(|c| c.total_us_per_op(self.ops))
    }

    /// The daemon's CPU time per operation, µs.
    pub fn daemon_us_per_op(&self) -> Option<f64> {
        self.cpu.and_then(|c| c.daemon_us_per_op(self.ops))
    }
}

/// Collects a job's phases, reading the CPU counters and draining the FUSE trace at each
/// phase's end.
pub struct Recorder<'a> {
    trace: Option<&'a mut FuseTrace>,
    cpu: Option<CpuMeter>,
    /// The phases so far.
    pub phases: Vec<Phase>,
}

impl<'a> Recorder<'a> {
    /// A recorder counting FUSE requests through `trace`, if given, and CPU time through
    /// `cpu`, if given (its window open from now).
    pub fn new(trace: Option<&'a mut FuseTrace>, cpu: Option<CpuMeter>) -> Self {
        Recorder {
            trace,
            cpu,
            phases: Vec::new(),
        }
    }

    /// Ends a phase.
    pub fn phase(&mut self, name: &str, unit: &str, value: f64, ops: u64) -> Result<()> {
        let cpu = match self.cpu.as_ref() {
            Some(m) => Some(m.lap()?),
            None => None,
        };
        let fuse = match self.trace.as_mut() {
            Some(t) => Some(t.take()?),
            None => None,
        };
        self.restart_cpu()?;
        self.phases.push(Phase {
            name: name.to_string(),
            unit: unit.to_string(),
            value,
            ops,
            fuse,
            cpu,
        });
        Ok(())
    }

    /// Drops the requests and CPU time of untimed setup.
    pub fn discard(&mut self) -> Result<()> {
        if let Some(t) = self.trace.as_mut() {
            t.take()?;
        }
        self.restart_cpu()
    }

    fn restart_cpu(&mut self) -> Result<()> {
        match self.cpu.as_mut() {
            Some(m) => m.restart(),
            None => Ok(()),
        }
    }
}

/// Runs `job` with `root` (the mount's root) as its working directory.
pub fn run(job: &Job, root: &Path, rec: &mut Recorder) -> Result<()> {
    match job {
        Job::Fio(path) => fio(path, root, rec),
        Job::FsMark { files, bytes, dirs } => fsmark(*files, *bytes, *dirs, root, rec),
        Job::Metadata { files, dirs } => metadata(*files, *dirs, root, rec),
        Job::Tar {
            tarball,
            top,
            entries,
            ..
        } => {
            let t = Instant::now();
            kernel::run(
                Command::new("tar")
                    .arg("-xf")
                    .arg(tarball)
                    .arg("-C")
                    .arg(root),
            )?;
            rec.phase("tar -xf", "s", t.elapsed().as_secs_f64(), *entries)?;
            let t = Instant::now();
            kernel::run(Command::new("rm").arg("-rf").arg(root.join(top)))?;
            rec.phase("rm -rf", "s", t.elapsed().as_secs_f64(), *entries)
        }
        Job::GitClone { repo, files } => {
            let t = Instant::now();
            kernel::run(
                Command::new("git")
                    .args(["clone", "--no-local", "-q"])
                    .arg(repo)
                    .arg(root.join("clone")),
            )?;
            rec.phase("git clone", "s", t.elapsed().as_secs_f64(), *files)
        }
        Job::StressNg {
            stressor,
            instances,
            seconds,
        } => {
            let out = Command::new("stress-ng")
                .arg(format!("--{stressor}"))
                .arg(instances.to_string())
                .args(["--timeout", &format!("{seconds}s"), "--metrics-brief"])
                .arg("--temp-path")
                .arg(root)
                .current_dir(root)
                .output()
                .context("running stress-ng (scripts/ci/ci-deps.sh installs it)")?;
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            if !out.status.success() {
                bail!(
                    "stress-ng --{stressor} failed ({}): {}",
                    out.status,
                    text.trim()
                );
            }
            let (bogo, secs) = stress_ng_bogo_ops(&text, stressor)?;
            rec.phase(
                &format!("stress-ng --{stressor}"),
                "bogo ops/s",
                bogo as f64 / secs.max(1e-9),
                bogo,
            )
        }
    }
}

fn fio(path: &Path, root: &Path, rec: &mut Recorder) -> Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    for dir in directories(&text) {
        std::fs::create_dir_all(root.join(&dir))
            .with_context(|| format!("making {dir} for the job"))?;
    }
    let path = std::fs::canonicalize(path)?;
    if text
        .lines()
        .any(|l| l.trim() == "; compare-fs: drop_caches")
    {
        kernel::run(
            Command::new("fio")
                .current_dir(root)
                .args(["--create_only=1", "--output-format=json"])
                .arg(&path),
        )?;
        drop_caches()?;
    }
    rec.discard()?;
    let out = kernel::run(
        Command::new("fio")
            .current_dir(root)
            .arg("--output-format=json")
            .arg(&path),
    )?;
    let (bytes_per_sec, ios) = fio_bandwidth(&out)?;
    let name = path
        .file_stem()
        .map_or("fio".into(), |s| s.to_string_lossy().into_owned());
    rec.phase(&name, "MiB/s", bytes_per_sec / f64::from(1 << 20), ios)
}

/// `sync`, then drop the page cache, dentries and inodes.
pub fn drop_caches() -> Result<()> {
    rustix::fs::sync();
    std::fs::write("/proc/sys/vm/drop_caches", "3")
        .context("writing 3 to /proc/sys/vm/drop_caches (needs root)")
}

/// The bandwidth of every job of a fio JSON report, read and write, bytes per second
/// (fio's own `bw_bytes`, summed: the jobs run together), and the I/Os they did.
pub fn fio_bandwidth(json: &str) -> Result<(f64, u64)> {
    let mut bw = 0.0;
    let mut ios = 0;
    for j in super::writeback::fio_jobs(json)? {
        for dir in ["read", "write"] {
            bw += j[dir]["bw_bytes"].as_f64().unwrap_or(0.0);
            ios += j[dir]["total_ios"].as_u64().unwrap_or(0);
        }
    }
    Ok((bw, ios))
}

fn fsmark(files: u64, bytes: u64, dirs: u64, root: &Path, rec: &mut Recorder) -> Result<()> {
    // fs_mark takes directory names under 40 bytes: relative ones, from the root.
    let log = std::env::temp_dir().join(format!("extalloc-fsmark-{}.log", std::process::id()));
    let mut cmd = Command::new("fs_mark");
    cmd.current_dir(root).arg("-l").arg(&log);
    for i in 0..dirs {
        cmd.args(["-d", &format!("fsmark{i}")]);
    }
    cmd.args(["-n", &files.to_string(), "-s", &bytes.to_string()]);
    cmd.args(["-S", "0", "-k", "-L", "1", "-D", "16"]);
    let out = kernel::run(&mut cmd);
    let _ = std::fs::remove_file(&log);
    let per_sec = fsmark_files_per_sec(&out?)?;
    rec.phase("fs_mark", "files/s", per_sec, files * dirs)
}

/// The metadata loop: `files` empty files round-robin over `dirs` directories.
fn metadata(files: u64, dirs: u64, root: &Path, rec: &mut Recorder) -> Result<()> {
    let dirs = dirs.max(1);
    for d in 0..dirs {
        let p = root.join(format!("d{d}"));
        std::fs::create_dir(&p).with_context(|| format!("making {}", p.display()))?;
    }
    rec.discard()?;
    let name = |prefix: &str, i: u64| root.join(format!("d{}/{prefix}{i}", i % dirs));
    let timed = |rec: &mut Recorder,
                 phase: &str,
                 op: &mut dyn FnMut(u64) -> std::io::Result<()>|
     -> Result<()> {
        let t = Instant::now();
        for i in 0..files {
            if i % 1024 == 0 && INTERRUPTED.load(Ordering::Relaxed) {
                bail!("interrupted");
            }
            op(i).with_context(|| format!("{phase} of file {i} under {}", root.display()))?;
        }
        let secs = t.elapsed().as_secs_f64();
        rec.phase(phase, "ops/s", files as f64 / secs.max(1e-9), files)
    };
    timed(rec, "create", &mut |i| {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(name("f", i))
            .map(drop)
    })?;
    timed(rec, "stat", &mut |i| {
        std::fs::metadata(name("f", i)).map(drop)
    })?;
    timed(rec, "rename", &mut |i| {
        std::fs::rename(name("f", i), name("r", i))
    })?;
    timed(rec, "unlink", &mut |i| std::fs::remove_file(name("r", i)))
}

/// A stressor's bogo ops and real seconds from stress-ng's `--metrics-brief` lines:
/// `stress-ng: metrc: [1824] dentry  45056  2.04  0.17  1.26  22131.17  31692.93`.
pub fn stress_ng_bogo_ops(text: &str, stressor: &str) -> Result<(u64, f64)> {
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        for w in words.windows(3) {
            if w[0] == stressor {
                if let (Ok(ops), Ok(secs)) = (w[1].parse::<u64>(), w[2].parse::<f64>()) {
                    return Ok((ops, secs));
                }
            }
        }
    }
    bail!(
        "no bogo-ops line for {stressor} in stress-ng's output: {}",
        text.trim()
    )
}

/// A tarball of `source` in /dev/shm, made once per command; removed on drop.
pub struct Tarball {
    /// The directory it is made of.
    pub source: PathBuf,
    /// The tarball.
    pub path: PathBuf,
    /// The source's last component (the tree's top directory).
    pub top: String,
    /// Entries in it.
    pub entries: u64,
}

impl Tarball {
    /// `tar -cf /dev/shm/...tar -C PARENT NAME`.
    pub fn create(source: &Path) -> Result<Tarball> {
        let source = std::fs::canonicalize(source)
            .with_context(|| format!("{}: the tar job's source", source.display()))?;
        let (Some(parent), Some(top)) = (source.parent(), source.file_name()) else {
            bail!(
                "--tar-source {}: give a directory below /",
                source.display()
            );
        };
        let top = top.to_string_lossy().into_owned();
        let path = PathBuf::from("/dev/shm")
            .join(format!("extalloc-compare-{}-{top}.tar", std::process::id()));
        let mut t = Tarball {
            source: source.clone(),
            path,
            top,
            entries: 0,
        };
        kernel::run(
            Command::new("tar")
                .arg("-cf")
                .arg(&t.path)
                .arg("-C")
                .arg(parent)
                .arg(&t.top),
        )?;
        let list = kernel::run(Command::new("tar").arg("-tf").arg(&t.path))?;
        t.entries = list.lines().count() as u64;
        Ok(t)
    }
}

impl Drop for Tarball {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The files of a repository's HEAD (what a clone checks out).
pub fn repo_files(repo: &Path) -> Result<u64> {
    let out = kernel::run(Command::new("git").arg("-C").arg(repo).args([
        "ls-tree",
        "-r",
        "--name-only",
        "HEAD",
    ]))
    .with_context(|| {
        format!(
            "{}: not a git repository with a HEAD (--repo)",
            repo.display()
        )
    })?;
    Ok(out.lines().count() as u64)
}

/// The `directory=` values of a fio job file (relative ones are made under the mount).
pub fn directories(job: &str) -> Vec<String> {
    job.lines()
        .filter_map(|l| l.trim().strip_prefix("directory="))
        .flat_map(|v| v.split(':'))
        .map(|d| d.trim().to_string())
        .filter(|d| !d.is_empty() && !d.starts_with('/'))
        .collect()
}

/// fs_mark's files per second (its table's `Files/sec` column, summed over its rows).
pub fn fsmark_files_per_sec(out: &str) -> Result<f64> {
    let mut rows = 0;
    let mut sum = 0.0;
    for line in out.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() >= 4 && cols[0].parse::<u64>().is_ok() && cols[1].parse::<u64>().is_ok() {
            if let Ok(v) = cols[3].parse::<f64>() {
                sum += v;
                rows += 1;
            }
        }
    }
    if rows == 0 {
        bail!("no result row in fs_mark's output: {}", out.trim());
    }
    Ok(sum / f64::from(rows))
}

/// The repository the current directory is in (`git rev-parse --show-toplevel`).
pub fn own_repo() -> Result<PathBuf> {
    let out = kernel::run(Command::new("git").args(["rev-parse", "--show-toplevel"]))
        .context("the git-clone job clones the repository the current directory is in; run from inside one or give --repo PATH")?;
    Ok(PathBuf::from(out.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_directories_are_read() {
        let job = "[global]\ndirectory=dir1\n[a]\ndirectory=/abs\n[b]\ndirectory=d2:d3\n";
        assert_eq!(directories(job), ["dir1", "d2", "d3"]);
    }

    #[test]
    fn fsmark_rows_are_averaged() {
        let out = "#  fs_mark  -d x\n\nFSUse%        Count         Size    Files/sec     App Overhead\n     2         1000         4096       2000.0            12345\n     2         2000         4096       4000.0            12345\n";
        assert_eq!(fsmark_files_per_sec(out).unwrap(), 3000.0);
        assert!(fsmark_files_per_sec("nothing").is_err());
    }

    #[test]
    fn job_names_expand() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let all = expand_names(&names(&["issue34"])).unwrap();
        assert_eq!(all.len(), 10);
        assert_eq!(all[0], "jobs/seq-write-1m.fio");
        assert_eq!(all[9], "stress-fallocate");
        assert_eq!(
            expand_names(&names(&["metadata", "x.fio"])).unwrap(),
            ["metadata", "x.fio"]
        );
        assert!(expand_names(&names(&["bonnie"])).is_err());
    }

    #[test]
    fn stress_ng_metrics_are_read() {
        // Captured from stress-ng 0.15.06 on this machine.
        let out = "\
stress-ng: info:  [1824] dispatching hogs: 2 dentry
stress-ng: info:  [1825] dentry: 1289 dentries allocated
stress-ng: metrc: [1824] stressor       bogo ops real time  usr time  sys time   bogo ops/s     bogo ops/s
stress-ng: metrc: [1824]                           (secs)    (secs)    (secs)   (real time) (usr+sys time)
stress-ng: metrc: [1824] dentry            45056      2.04      0.17      1.26     22131.17       31692.93
stress-ng: metrc: [1824] miscellaneous metrics:
stress-ng: metrc: [1824] dentry             12295.80 nanosecs per file creation (geometic mean of 2 instances)
";
        assert_eq!(stress_ng_bogo_ops(out, "dentry").unwrap(), (45056, 2.04));
        assert!(stress_ng_bogo_ops(out, "fallocate").is_err());
    }

    #[test]
    fn fio_bandwidth_sums_reads_and_writes() {
        let json = r#"{"jobs": [{"read": {"bw_bytes": 100, "total_ios": 3}, "write": {"bw_bytes": 0, "total_ios": 0}},
                        {"read": {"bw_bytes": 0, "total_ios": 0}, "write": {"bw_bytes": 50.5, "total_ios": 2}}]}"#;
        assert_eq!(fio_bandwidth(json).unwrap(), (150.5, 5));
    }

    #[test]
    fn the_metadata_loop_leaves_nothing_and_counts_every_file() {
        let dir = std::env::temp_dir().join(format!("extalloc-meta-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut rec = Recorder::new(None, None);
        metadata(300, 7, &dir, &mut rec).unwrap();
        let names: Vec<&str> = rec.phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["create", "stat", "rename", "unlink"]);
        assert!(rec.phases.iter().all(|p| p.ops == 300 && p.value > 0.0));
        for d in 0..7 {
            let left = std::fs::read_dir(dir.join(format!("d{d}")))
                .unwrap()
                .count();
            assert_eq!(left, 0, "d{d} is empty after the unlink phase");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
