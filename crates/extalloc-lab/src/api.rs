//! The lab called from a program (the Python package's `extalloc.lab`): a workload's
//! matrix by name with `extalloc bench`'s defaults, or a trace's replay, each returning the
//! report (schema `extalloc-bench/1`) instead of printing tables. Progress goes to stderr
//! as whole lines, one per run.
//!
//! Data structures: [`Params`], the options a caller may set (everything else is
//! `extalloc bench`'s default: [`DEFAULT_SECONDS`] and the others below, which the command
//! line's defaults are too). Invariant: a workload runs here exactly as `extalloc bench`
//! runs it in memory with the same options. Locks: none of its own.

use crate::lab::report::Report;
use crate::lab::{self, LabOptions, LineProgress};
use crate::replay::{self, ReplayOptions};
use crate::workload::{self, Shape, Workload};
use anyhow::{Context, Result};
use std::path::Path;

/// Seconds per run (time-bound workloads).
pub const DEFAULT_SECONDS: f64 = 2.0;
/// Repetitions of the matrix.
pub const DEFAULT_REPEAT: usize = 3;
/// sparse-writes: 1 KiB writes.
pub const DEFAULT_WRITES: u64 = 200_000;
/// random-fill: sequential 1 KiB writes before each jump.
pub const DEFAULT_SEQ_BURST: u64 = 1;
/// Bytes per block.
pub const DEFAULT_BLOCK_SIZE: u32 = 4096;
/// How often the committer makes pending frees reusable, in milliseconds.
pub const DEFAULT_COMMIT_MS: u64 = 100;
/// The seed (file ids, and so stream-goal hashing).
pub const DEFAULT_SEED: u64 = 1;
/// The policies a replay compares by default.
pub const DEFAULT_REPLAY_POLICIES: &str = "ext4-base,ext4-2025,extalloc";

/// What a caller may set; `None` is the workload's default (as `extalloc bench`).
#[derive(Debug, Clone, Default)]
pub struct Params {
    /// Policies (presets, specs or outside allocators), comma-separated.
    pub policies: Option<String>,
    /// Thread counts, comma-separated.
    pub threads: Option<String>,
    /// Seconds per run.
    pub seconds: Option<f64>,
    /// Repetitions of the matrix.
    pub repeat: Option<usize>,
    /// Device size (`16GiB`).
    pub device_size: Option<String>,
    /// File size, for the workloads of files.
    pub file_size: Option<String>,
    /// The seed.
    pub seed: Option<u64>,
}

/// Names of the workloads [`run`] takes.
pub fn workloads() -> Vec<&'static str> {
    workload::list(runs_here)
}

/// Runs here: in memory, one matrix (writeback runs its own, replay takes a trace).
fn runs_here(w: &Workload) -> bool {
    !matches!(w.shape, Shape::Writeback | Shape::Trace)
}

/// Runs workload `name`'s matrix in memory under `p` and returns its report. Fails, having
/// run nothing, on an unknown workload, a bad option or policy, or an outside allocator
/// with a workload of files.
pub fn run(name: &str, p: &Params) -> Result<Report> {
    let w = Workload::named(name)
        .filter(|w| runs_here(w))
        .with_context(|| {
            format!(
                "no workload {name:?} to run here: one of {} (writeback and replay: the \
                 `extalloc bench` command, or replay() for a trace)",
                workloads().join(", ")
            )
        })?;
    let opts = lab_options(w, p)?;
    anyhow::ensure!(
        opts.seconds > 0.0 && opts.seconds.is_finite(),
        "seconds must be positive"
    );
    anyhow::ensure!(opts.repeat >= 1, "repeat must be at least 1");
    anyhow::ensure!(!opts.policies.is_empty(), "policies is empty");
    crate::workload::refuse_outside(w, &opts)?;
    lab::run_matrix_with(w.name, &opts, w.run_once, &mut LineProgress::default())
}

/// `w`'s options: `p` over `extalloc bench`'s defaults (the command line's too: it sets
/// the rest of its options over these). Parses threads and sizes; checks nothing else.
pub fn lab_options(w: &Workload, p: &Params) -> Result<LabOptions> {
    let policies: Vec<String> = p
        .policies
        .as_deref()
        .unwrap_or(w.policies)
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let size = |given: &Option<String>, default| -> Result<u64> {
        Ok(extalloc::parse_size(given.as_deref().unwrap_or(default))?)
    };
    Ok(LabOptions {
        threads: lab::parse_threads(p.threads.as_deref().unwrap_or(w.threads))?,
        policies,
        seconds: p.seconds.unwrap_or(DEFAULT_SECONDS),
        repeat: p.repeat.unwrap_or(DEFAULT_REPEAT),
        device_bytes: size(&p.device_size, w.device_size)?,
        file_bytes: size(&p.file_size, w.file_size)?,
        writes: DEFAULT_WRITES,
        seq_burst: DEFAULT_SEQ_BURST,
        mix: false,
        fill: 1.0,
        trace: None,
        block_size: DEFAULT_BLOCK_SIZE,
        group_blocks: extalloc::GROUP_BLOCKS_DEFAULT,
        commit_ms: DEFAULT_COMMIT_MS,
        seed: p.seed.unwrap_or(DEFAULT_SEED),
        device: None,
        prefill: 0.0,
        synthetic: None,
    })
}

/// Replays kernel trace `trace` through `policies` (comma-separated; `None`:
/// [`DEFAULT_REPLAY_POLICIES`]) beside the kernel's own decisions, the device's shape from
/// the trace, and returns the report.
pub fn replay(trace: &Path, policies: Option<&str>) -> Result<Report> {
    let policies: Vec<String> = policies
        .unwrap_or(DEFAULT_REPLAY_POLICIES)
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    anyhow::ensure!(!policies.is_empty(), "policies is empty");
    let opts = ReplayOptions {
        trace,
        dev: None,
        blocks: None,
        group_blocks: None,
        block_size: None,
        policies,
        limit: None,
        without: Vec::new(),
        dump_files: None,
    };
    let (report, _odd, _trace) = replay::run(&opts)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_runs_by_name_and_bad_names_and_options_are_refused() {
        let p = Params {
            policies: Some("extalloc".into()),
            threads: Some("1".into()),
            seconds: Some(0.05),
            repeat: Some(1),
            device_size: Some("256MiB".into()),
            ..Params::default()
        };
        let r = run("fallocate2", &p).unwrap();
        assert_eq!(r.workload, "fallocate2");
        assert_eq!(r.runs.len(), 1);
        assert!(r.runs[0].ops > 0);
        assert!(workloads().contains(&"frag") && !workloads().contains(&"writeback"));
        let e = run("writeback", &p).unwrap_err().to_string();
        assert!(e.contains("no workload \"writeback\""), "{e}");
        let bad = Params {
            repeat: Some(0),
            ..p.clone()
        };
        assert!(run("frag", &bad).is_err());
        let outside = Params {
            policies: Some("tlsf".into()),
            ..p
        };
        assert!(run("small-files", &outside).is_err());
    }
}
