//! `extalloc compare-fs age-git age-profile`: the aging jobs' options (flattened into
//! `compare-fs`'s), read into the lab's [`AgeOptions`]; the lab runs them
//! (`compare::age_run`) apart from the other jobs' rounds, since each aging run is long and
//! unmounts its file system mid-job.

use anyhow::{Context, Result};
use extalloc::parse_size;
use extalloc_lab::compare::age_git::GitOptions;
use extalloc_lab::compare::age_profile::ProfileOptions;
use extalloc_lab::compare::age_run::{AgeOptions, AGING_JOBS};
use std::path::PathBuf;

/// The aging jobs' options.
#[derive(clap::Args, Debug)]
pub struct AgeArgs {
    /// age-git: commits checked out, evenly spaced over the history, oldest first.
    #[arg(long, default_value_t = 100)]
    pub age_checkouts: usize,
    /// age-git: measure every this many checkouts (and after the last).
    #[arg(long, default_value_t = 10)]
    pub age_every: usize,
    /// age-git: cold reads of each tree per measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub age_reads: usize,
    /// age-profile: fill target, percent of the file system's size.
    #[arg(long, default_value_t = 80.0)]
    pub age_fill: f64,
    /// age-profile: bytes created during the churn, in multiples of the file system's size.
    #[arg(long, default_value_t = 2.0)]
    pub age_rewrites: f64,
    /// age-profile: the seed of the sizes, lifetimes and deletions.
    #[arg(long, default_value_t = 1)]
    pub age_seed: u64,
    /// age-profile: smallest and largest file (log-uniform in between).
    #[arg(long, default_value = "4KiB,4MiB")]
    pub age_sizes: String,
    /// age-profile: percent of files that are short-lived.
    #[arg(long, default_value_t = 70.0)]
    pub age_short_lived: f64,
    /// age-git: write its chart (age-git.png) into this directory.
    #[arg(long)]
    pub age_charts: Option<PathBuf>,
}

/// Splits job names into the aging jobs and the rest.
pub fn split_jobs(jobs: &[String]) -> (Vec<String>, Vec<String>) {
    jobs.iter()
        .cloned()
        .partition(|j| AGING_JOBS.contains(&j.as_str()))
}

/// The options of the aging jobs named in `aging`.
pub fn options(
    a: &AgeArgs,
    aging: &[String],
    repo: Option<&PathBuf>,
    device_bytes: u64,
    block_size: u32,
    policy: Option<&str>,
) -> Result<AgeOptions> {
    let git = if aging.iter().any(|j| j == "age-git") {
        anyhow::ensure!(a.age_checkouts >= 1, "--age-checkouts must be at least 1");
        let repo = match repo {
            Some(r) => r.clone(),
            None => extalloc_lab::compare::jobs::own_repo()?,
        };
        Some(GitOptions {
            repo,
            checkouts: a.age_checkouts,
            every: a.age_every.max(1),
            reads: a.age_reads.max(1),
        })
    } else {
        None
    };
    let profile = if aging.iter().any(|j| j == "age-profile") {
        let (min, max) = a
            .age_sizes
            .split_once(',')
            .context("--age-sizes: expected MIN,MAX (4KiB,4MiB)")?;
        let (min_bytes, max_bytes) = (parse_size(min.trim())?, parse_size(max.trim())?);
        anyhow::ensure!(
            0 < min_bytes && min_bytes <= max_bytes,
            "--age-sizes {}: expected 0 < MIN <= MAX",
            a.age_sizes
        );
        anyhow::ensure!(
            a.age_fill > 0.0 && a.age_fill < 100.0,
            "--age-fill is a percentage between 0 and 100"
        );
        anyhow::ensure!(
            (0.0..=100.0).contains(&a.age_short_lived),
            "--age-short-lived is a percentage"
        );
        anyhow::ensure!(a.age_rewrites >= 0.0, "--age-rewrites must not be negative");
        Some(ProfileOptions {
            fill: a.age_fill / 100.0,
            rewrites: a.age_rewrites,
            seed: a.age_seed,
            min_bytes,
            max_bytes,
            short_share: a.age_short_lived / 100.0,
        })
    } else {
        None
    };
    Ok(AgeOptions {
        device_bytes,
        block_size,
        git,
        profile,
        policy: policy.map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aging_jobs_are_split_off() {
        let names: Vec<String> = ["metadata", "age-git", "age-profile"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (aging, rest) = split_jobs(&names);
        assert_eq!(aging, ["age-git", "age-profile"]);
        assert_eq!(rest, ["metadata"]);
    }
}
