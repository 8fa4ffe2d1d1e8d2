//! `extalloc compare-fs`: its options, and the jobs they name (`compare::jobs`), made
//! here (the tar job's tarball included) before the lab runs them
//! (`extalloc_lab::command::compare_fs`).

use anyhow::{Context, Result};
use extalloc_lab::command::output::writable_file;

/// Options of `extalloc compare-fs`.
#[derive(clap::Args, Debug)]
pub struct CompareFsArgs {
    /// Jobs: fio job files (run from the mount's root; relative directories are made first),
    /// fsmark, metadata, tar, git-clone, stress-dentry, stress-fallocate, or issue34 for all
    /// of issue 34's table (run from the repository's root: its fio jobs are in jobs/); the
    /// aging jobs age-git and age-profile (issue 35) run once per target, after the rest.
    #[arg(required = true)]
    pub jobs: Vec<String>,
    /// File systems, comma-separated: ext4, xfs, btrfs, extalloc, extalloc-uring (the mount
    /// with --io-uring), extalloc-nopoll (the mount with --poll-us 0), fuse2fs, floor and
    /// floor-uring (the FUSE floor: an in-memory libfuse file system over /dev/fuse or
    /// io_uring, built by scripts/bench/build-floor.sh; skipped with the reason when it cannot be).
    /// Ratios (of the figures and of CPU per operation) are to ext4 when it is one of them,
    /// else to the first.
    #[arg(long, default_value = "ext4,xfs,extalloc")]
    pub fs: String,
    /// Rounds: each runs every job once on every target (a fresh file system each time),
    /// the targets' order rotated each round; the tables give medians.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Size of each file system.
    #[arg(long, default_value = "8GiB")]
    pub device_size: String,
    /// Block size.
    #[arg(long, default_value_t = 4096)]
    pub block_size: u32,
    /// The allocation policy of extalloc's mounts (a preset or a spec, as `mount --policy`;
    /// default: the mount's default, `extalloc`).
    #[arg(long)]
    pub extalloc_policy: Option<String>,
    /// Where the file systems' images go (default /dev/shm): a directory on a real disk
    /// makes the cold reads of age-git and the fio read jobs measure the layout, where a
    /// RAM-backed image measures mostly the CPU.
    #[arg(long)]
    pub image_dir: Option<std::path::PathBuf>,
    /// fsmark: files per directory, bytes per file, directories (threads).
    #[arg(long, default_value = "20000,4096,2")]
    pub fsmark: String,
    /// metadata: empty files, directories they are spread over.
    #[arg(long, default_value = "50000,100")]
    pub metadata: String,
    /// tar: the directory whose tarball (made once, in /dev/shm) is extracted then removed.
    #[arg(long, default_value = "/usr/include")]
    pub tar_source: std::path::PathBuf,
    /// git-clone: the repository to clone with --no-local (default: the one the current
    /// directory is in).
    #[arg(long)]
    pub repo: Option<std::path::PathBuf>,
    /// stress-dentry, stress-fallocate: seconds each stressor runs (2 instances).
    #[arg(long, default_value_t = 30)]
    pub stress_seconds: u32,
    /// Also write the runs and their summaries as JSON here.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// The aging jobs (age-git, age-profile).
    #[command(flatten)]
    pub age: super::compare_age::AgeArgs,
}

/// Positive numbers separated by commas, `n` of them.
fn positive_list(s: &str, n: usize, what: &str) -> Result<Vec<u64>> {
    let v: Vec<u64> = s
        .split(',')
        .map(|x| x.trim().parse())
        .collect::<std::result::Result<_, _>>()
        .with_context(|| format!("{what}: expected {n} numbers separated by commas"))?;
    anyhow::ensure!(
        v.len() == n && v.iter().all(|&x| x > 0),
        "{what} takes {n} positive numbers separated by commas, not '{s}'"
    );
    Ok(v)
}

/// The jobs of `args`; the tarball the tar job extracts is made here (and removed when
/// the returned guard drops).
fn compare_fs_jobs(
    args: &CompareFsArgs,
) -> Result<(
    Vec<extalloc_lab::compare::jobs::Job>,
    Option<extalloc_lab::compare::jobs::Tarball>,
)> {
    use extalloc_lab::compare::jobs::{self, Job};
    let mut tarball = None;
    let mut out = Vec::new();
    let (_, names) = super::compare_age::split_jobs(&args.jobs);
    for name in jobs::expand_names(&names)? {
        out.push(match name.as_str() {
            "fsmark" => {
                let v = positive_list(&args.fsmark, 3, "--fsmark FILES,BYTES,DIRS")?;
                Job::FsMark {
                    files: v[0],
                    bytes: v[1],
                    dirs: v[2],
                }
            }
            "metadata" => {
                let v = positive_list(&args.metadata, 2, "--metadata FILES,DIRS")?;
                Job::Metadata {
                    files: v[0],
                    dirs: v[1],
                }
            }
            "tar" => {
                if tarball.is_none() {
                    eprintln!(
                        "compare-fs: making a tarball of {}",
                        args.tar_source.display()
                    );
                    tarball = Some(jobs::Tarball::create(&args.tar_source)?);
                }
                let t = tarball.as_ref().expect("just made");
                Job::Tar {
                    source: t.source.clone(),
                    tarball: t.path.clone(),
                    top: t.top.clone(),
                    entries: t.entries,
                }
            }
            "git-clone" => {
                let repo = match &args.repo {
                    Some(r) => r.clone(),
                    None => jobs::own_repo()?,
                };
                let files = jobs::repo_files(&repo)?;
                Job::GitClone { repo, files }
            }
            s if s.starts_with("stress-") => Job::StressNg {
                stressor: s.trim_start_matches("stress-").to_string(),
                instances: 2,
                seconds: args.stress_seconds,
            },
            fio => Job::Fio(std::path::PathBuf::from(fio)),
        });
    }
    Ok((out, tarball))
}

/// `extalloc compare-fs`.
pub fn compare_fs(args: &CompareFsArgs) -> Result<()> {
    use extalloc_lab::command::compare_fs::CompareFs;
    use extalloc_lab::compare::mounted::{self, Target};
    let targets = args
        .fs
        .split(',')
        .map(Target::parse)
        .collect::<Result<Vec<_>>>()?;
    let opts = mounted::Options {
        device_bytes: extalloc::parse_size(&args.device_size).context("--device-size")?,
        block_size: args.block_size,
        rounds: args.repeat,
        policy: args.extalloc_policy.clone(),
    };
    if let Some(d) = &args.image_dir {
        extalloc_lab::compare::kernel::set_image_dir(d.clone())?;
    }
    if let Some(p) = &args.extalloc_policy {
        extalloc::Policy::parse(p).map_err(|e| anyhow::anyhow!("--extalloc-policy: {e}"))?;
    }
    anyhow::ensure!(args.repeat >= 1, "--repeat must be at least 1");
    if let Some(p) = &args.json {
        writable_file("--json", p)?;
    }
    let (aging, rest) = super::compare_age::split_jobs(&args.jobs);
    let age_opts = super::compare_age::options(
        &args.age,
        &aging,
        args.repo.as_ref(),
        opts.device_bytes,
        opts.block_size,
        opts.policy.as_deref(),
    )?;
    let (jobs, _tarball) = compare_fs_jobs(args)?;
    extalloc_lab::command::compare_fs::compare_fs(&CompareFs {
        targets: &targets,
        opts: &opts,
        jobs: if rest.is_empty() { &[] } else { &jobs },
        aging: (!aging.is_empty()).then_some(&age_opts),
        age_charts: args.age.age_charts.as_deref(),
        json: args.json.as_deref(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::path::Path;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: CompareFsArgs,
    }

    fn parse(argv: &[&str]) -> CompareFsArgs {
        Cmd::try_parse_from(std::iter::once("compare-fs").chain(argv.iter().copied()))
            .unwrap()
            .args
    }

    #[test]
    fn compare_fs_arguments_parse() {
        let a = parse(&["metadata", "tar", "--fs", "ext4,fuse2fs,extalloc"]);
        assert_eq!(a.jobs, ["metadata", "tar"]);
        assert_eq!(a.repeat, 3, "three rounds unless told");
        assert_eq!(a.metadata, "50000,100");
        assert_eq!(a.tar_source, Path::new("/usr/include"));
        let a = parse(&[
            "metadata",
            "stress-dentry",
            "--repeat",
            "5",
            "--metadata",
            "2000,10",
            "--stress-seconds",
            "5",
        ]);
        assert_eq!(a.repeat, 5);
        assert_eq!(a.stress_seconds, 5);
        let (jobs, tarball) = compare_fs_jobs(&a).unwrap();
        assert!(tarball.is_none(), "no tar job, no tarball");
        assert!(matches!(
            jobs[0],
            extalloc_lab::compare::jobs::Job::Metadata {
                files: 2000,
                dirs: 10
            }
        ));
        assert!(matches!(
            &jobs[1],
            extalloc_lab::compare::jobs::Job::StressNg { stressor, instances: 2, seconds: 5 }
                if stressor == "dentry"
        ));
        assert!(
            Cmd::try_parse_from(["compare-fs"]).is_err(),
            "a job is required"
        );
        let bad = parse(&["metadata", "--metadata", "10"]);
        assert!(compare_fs_jobs(&bad).is_err());
    }
}
