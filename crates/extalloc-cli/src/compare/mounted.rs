//! `extalloc compare-fs JOB --fs ext4,xfs,extalloc`: one job on whole file systems: the
//! kernel's (a loop device backed by /dev/shm, as `compare` makes them) and an extalloc
//! mount (`extalloc mount` of an image in /dev/shm of the same size). The job is a fio job
//! file (run with the mount as its working directory, so relative names land on it; every
//! `directory=` it names is made first) or `fsmark` (fs_mark's small files).
//!
//! Layout: every regular file's extents, merged where physically contiguous as FIEMAP's
//! are counted (the kernel's through FIEMAP; extalloc's from the volume after unmounting,
//! since FIEMAP does not reach through FUSE). Free space: the kernel's tools after
//! unmounting (`freespace.rs`); the store's own figures for extalloc.
//!
//! Data structures: [`Target`], [`Job`], one [`FsRun`] per target.
//!
//! Invariant: every device made is torn down (unmounted, detached, removed) whatever
//! fails, as `kernel::Device` and [`ExtallocMount`]'s `Drop` do.

use super::kernel::{self, Device, Fs};
use super::{free_space_of, preflight};
use crate::lab::report::{self, FreeSpaceJson};
use anyhow::{bail, Context, Result};
use extalloc::disk::device::{FileDevice, OverlayDevice};
use extalloc::Extent;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

/// A file system to run the job on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A kernel file system on a loop device.
    Kernel(Fs),
    /// `extalloc mount` of an image file.
    Extalloc,
}

impl Target {
    /// `ext4`, `xfs`, `btrfs` or `extalloc`.
    pub fn parse(s: &str) -> Result<Target> {
        match s.trim() {
            "extalloc" => Ok(Target::Extalloc),
            other => Fs::parse(other)
                .map(Target::Kernel)
                .context("--fs: expected ext4, xfs, btrfs or extalloc"),
        }
    }

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Target::Kernel(f) => f.name(),
            Target::Extalloc => "extalloc",
        }
    }
}

/// What to run on each file system.
#[derive(Debug, Clone)]
pub enum Job {
    /// A fio job file.
    Fio(PathBuf),
    /// fs_mark: `dirs` directories of small files of `bytes` (4 KiB by default), one
    /// thread per directory, no fsync, `files` files each.
    FsMark {
        /// Files per directory.
        files: u64,
        /// Bytes per file.
        bytes: u64,
        /// Directories (and fs_mark threads).
        dirs: u64,
    },
}

/// One file system's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FsRun {
    /// The file system.
    pub fs: String,
    /// Seconds the job took.
    pub seconds: f64,
    /// MiB the job wrote (fio's count, or fs_mark's files times their size).
    pub written_mib: f64,
    /// Written MiB per second.
    pub mib_per_sec: f64,
    /// fs_mark's files per second.
    pub files_per_sec: Option<f64>,
    /// Regular files left.
    pub files: u64,
    /// Extents per file (physically contiguous neighbours merged).
    pub extents_per_file: f64,
    /// The most extents of one file.
    pub max_extents: u64,
    /// Free space after the job (None for btrfs).
    pub free_space: Option<FreeSpaceJson>,
}

/// Runs `job` on every target, a fresh file system of `device_bytes` each.
pub fn run(
    job: &Job,
    targets: &[Target],
    device_bytes: u64,
    block_size: u32,
) -> Result<Vec<FsRun>> {
    let kernel_fs: Vec<Fs> = targets
        .iter()
        .filter_map(|t| match t {
            Target::Kernel(f) => Some(*f),
            Target::Extalloc => None,
        })
        .collect();
    let tool = match job {
        Job::Fio(p) => {
            anyhow::ensure!(p.is_file(), "fio job file {} not found", p.display());
            "fio"
        }
        Job::FsMark { .. } => "fs_mark",
    };
    preflight(&kernel_fs, &[tool])?;
    if targets.contains(&Target::Extalloc) {
        anyhow::ensure!(
            Path::new("/dev/fuse").exists(),
            "extalloc's side needs /dev/fuse (and fusermount3: scripts/fs-tools.sh)"
        );
    }
    kernel::catch_interrupt()?;
    let mut runs = Vec::new();
    for &t in targets {
        eprint!("compare-fs: {} ... ", t.name());
        let run = match t {
            Target::Kernel(f) => kernel_run(f, job, device_bytes, block_size),
            Target::Extalloc => extalloc_run(job, device_bytes, block_size),
        }
        .with_context(|| format!("the job on {}", t.name()))?;
        eprintln!(
            "{:.1} MiB/s, {:.2} extents per file",
            run.mib_per_sec, run.extents_per_file
        );
        runs.push(run);
    }
    Ok(runs)
}

/// What a job run reports before the layout is read.
struct Ran {
    seconds: f64,
    written_bytes: u64,
    files_per_sec: Option<f64>,
}

fn kernel_run(fs: Fs, job: &Job, device_bytes: u64, block_size: u32) -> Result<FsRun> {
    let mut dev = Device::create(fs, device_bytes, block_size)?;
    let root = dev.path("");
    let ran = run_job(job, &root)?;
    let mut files = Vec::new();
    for path in regular_files(&root)? {
        files.push(kernel::file_extents(&path, block_size)?);
    }
    dev.unmount()?;
    let free_space = free_space_of(fs, &dev, block_size)?;
    Ok(fs_run(fs.name(), &ran, &files, block_size, free_space))
}

fn extalloc_run(job: &Job, device_bytes: u64, block_size: u32) -> Result<FsRun> {
    let mut m = ExtallocMount::create(device_bytes, block_size)?;
    let ran = run_job(job, &m.mountpoint)?;
    m.unmount()?;
    let dev = FileDevice::open_read_only(&m.image)?;
    let view: Arc<dyn extalloc::disk::device::Device> = Arc::new(OverlayDevice::new(Arc::new(dev)));
    let vol = extalloc::volume::Volume::open(view, extalloc::Policy::default())?;
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
    Ok(fs_run("extalloc", &ran, &files, block_size, Some(free)))
}

/// A volume file's extents in logical order, physically contiguous ones merged.
fn merged(map: &[extalloc::volume::FileExtent]) -> Vec<Extent> {
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
    ran: &Ran,
    files: &[Vec<Extent>],
    block_size: u32,
    free_space: Option<FreeSpaceJson>,
) -> FsRun {
    let layout = report::layout(files, block_size);
    let mib = ran.written_bytes as f64 / f64::from(1 << 20);
    FsRun {
        fs: name.to_string(),
        seconds: ran.seconds,
        written_mib: mib,
        mib_per_sec: mib / ran.seconds.max(1e-9),
        files_per_sec: ran.files_per_sec,
        files: layout.files,
        extents_per_file: layout.extents_per_file,
        max_extents: files.iter().map(|f| f.len() as u64).max().unwrap_or(0),
        free_space,
    }
}

/// Every regular file under `root`.
fn regular_files(root: &Path) -> Result<Vec<PathBuf>> {
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

/// Runs the job with `root` as its working directory.
fn run_job(job: &Job, root: &Path) -> Result<Ran> {
    match job {
        Job::Fio(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            for dir in directories(&text) {
                std::fs::create_dir_all(root.join(&dir))
                    .with_context(|| format!("making {dir} for the job"))?;
            }
            let path = std::fs::canonicalize(path)?;
            let started = Instant::now();
            let out = kernel::run(
                Command::new("fio")
                    .current_dir(root)
                    .arg("--output-format=json")
                    .arg(&path),
            )?;
            Ok(Ran {
                seconds: started.elapsed().as_secs_f64(),
                written_bytes: fio_written(&out)?,
                files_per_sec: None,
            })
        }
        Job::FsMark { files, bytes, dirs } => {
            // fs_mark takes directory names under 40 bytes: relative ones, from the root.
            let log =
                std::env::temp_dir().join(format!("extalloc-fsmark-{}.log", std::process::id()));
            let mut cmd = Command::new("fs_mark");
            cmd.current_dir(root).arg("-l").arg(&log);
            for i in 0..*dirs {
                cmd.args(["-d", &format!("fsmark{i}")]);
            }
            cmd.args(["-n", &files.to_string(), "-s", &bytes.to_string()]);
            cmd.args(["-S", "0", "-k", "-L", "1", "-D", "16"]);
            let started = Instant::now();
            let out = kernel::run(&mut cmd);
            let _ = std::fs::remove_file(&log);
            let out = out?;
            let seconds = started.elapsed().as_secs_f64();
            Ok(Ran {
                seconds,
                written_bytes: files * dirs * bytes,
                files_per_sec: Some(fsmark_files_per_sec(&out)?),
            })
        }
    }
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

/// Bytes every job of a fio JSON report wrote.
pub fn fio_written(json: &str) -> Result<u64> {
    Ok(super::writeback::fio_jobs(json)?
        .iter()
        .map(|j| j["write"]["io_bytes"].as_u64().unwrap_or(0))
        .sum())
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

/// An extalloc image in /dev/shm, mounted by `extalloc mount` in a child process;
/// unmounted and removed on drop.
struct ExtallocMount {
    image: PathBuf,
    mountpoint: PathBuf,
    pid: Option<u32>,
}

impl ExtallocMount {
    fn create(bytes: u64, block_size: u32) -> Result<Self> {
        let tag = format!("extalloc-compare-{}-extalloc", std::process::id());
        let mut m = ExtallocMount {
            image: PathBuf::from("/dev/shm").join(format!("{tag}.img")),
            mountpoint: std::env::temp_dir().join(tag),
            pid: None,
        };
        let exe = std::env::current_exe().context("cannot find the extalloc executable")?;
        std::fs::create_dir_all(&m.mountpoint)?;
        kernel::run(
            Command::new(&exe)
                .arg("mkfs")
                .arg(&m.image)
                .args(["--size", &bytes.to_string()])
                .args(["--block-size", &block_size.to_string()]),
        )?;
        let out = kernel::run(
            Command::new(&exe)
                .arg("mount")
                .arg(&m.image)
                .arg(&m.mountpoint),
        )?;
        m.pid = out
            .rsplit_once("(process ")
            .and_then(|(_, p)| p.trim().trim_end_matches(')').parse().ok());
        anyhow::ensure!(m.pid.is_some(), "no process id in mount's answer: {out}");
        Ok(m)
    }

    /// Unmounts and waits for the daemon to write everything back and release the device
    /// (`extalloc umount`; a plain `umount` returns before that).
    fn unmount(&mut self) -> Result<()> {
        if self.pid.take().is_some() {
            let ten_minutes = std::time::Duration::from_secs(600);
            extalloc_fuse::umount::unmount(&self.mountpoint, ten_minutes, &|m| {
                eprintln!("extalloc umount: {m}")
            })
            .map_err(anyhow::Error::msg)?;
        }
        Ok(())
    }
}

impl Drop for ExtallocMount {
    fn drop(&mut self) {
        if let Err(e) = self.unmount() {
            eprintln!("cleanup: {e:#}");
        }
        let _ = std::fs::remove_dir(&self.mountpoint);
        let _ = std::fs::remove_file(&self.image);
    }
}

/// The runs as a Markdown table.
pub fn table(job: &str, runs: &[FsRun]) -> String {
    let mut s = format!(
        "### compare-fs: {job}\n\n| fs | seconds | MiB/s | files/s | files | extents/file | \
         max extents | free extents | largest free (MiB) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    for r in runs {
        let free = r.free_space.as_ref();
        s.push_str(&format!(
            "| {} | {:.1} | {:.1} | {} | {} | {:.2} | {} | {} | {} |\n",
            r.fs,
            r.seconds,
            r.mib_per_sec,
            r.files_per_sec.map_or("-".into(), |v| format!("{v:.0}")),
            r.files,
            r.extents_per_file,
            r.max_extents,
            free.map_or("-".into(), |f| f.free_extents.to_string()),
            free.and_then(|f| f.largest_free_extent_kib)
                .map_or("-".into(), |k| format!("{:.0}", k / 1024.0)),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_directories_and_fio_bytes_are_read() {
        let job = "[global]\ndirectory=dir1\n[a]\ndirectory=/abs\n[b]\ndirectory=d2:d3\n";
        assert_eq!(directories(job), ["dir1", "d2", "d3"]);
        let json = "note: x\n{\"jobs\": [{\"write\": {\"io_bytes\": 10}}, {\"write\": {\"io_bytes\": 5}}]}";
        assert_eq!(fio_written(json).unwrap(), 15);
        assert!(fio_written("{\"x\": 1}").is_err());
    }

    #[test]
    fn fsmark_rows_are_averaged() {
        let out = "#  fs_mark  -d x\n\nFSUse%        Count         Size    Files/sec     App Overhead\n     2         1000         4096       2000.0            12345\n     2         2000         4096       4000.0            12345\n";
        assert_eq!(fsmark_files_per_sec(out).unwrap(), 3000.0);
        assert!(fsmark_files_per_sec("nothing").is_err());
    }

    #[test]
    fn targets_parse() {
        assert_eq!(Target::parse("extalloc").unwrap(), Target::Extalloc);
        assert_eq!(Target::parse("xfs").unwrap(), Target::Kernel(Fs::Xfs));
        assert!(Target::parse("zfs").is_err());
    }
}
