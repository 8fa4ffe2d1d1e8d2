//! `extalloc compare-fs`'s run once its arguments are read (the jobs made, the tarball
//! included): the jobs' rounds on every target ([`mounted::run`]) and their tables, then
//! the aging jobs ([`age_run::run`]) and their tables and chart, then the JSON report
//! (schema `extalloc-compare-fs/2`). A target that cannot run here (the floor, unbuilt) is
//! skipped with its reason, printed and in the JSON (`skipped`).

use crate::compare::age_run::{self, AgeOptions};
use crate::compare::mounted::{self, Job, Target};
use anyhow::{Context, Result};
use std::path::Path;

/// What `compare-fs` runs, and where its results go besides stdout.
pub struct CompareFs<'a> {
    pub targets: &'a [Target],
    pub opts: &'a mounted::Options,
    /// The jobs run in rounds (none: only aging).
    pub jobs: &'a [Job],
    /// The aging jobs' options (none: no aging job), and the directory of their chart.
    pub aging: Option<&'a AgeOptions>,
    pub age_charts: Option<&'a Path>,
    pub json: Option<&'a Path>,
}

/// A target left out of the runs, and why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Skipped {
    /// The target.
    pub fs: String,
    /// Why it cannot run here.
    pub reason: String,
}

/// The targets that can run here, and the others with the reason (the floor when it cannot
/// be built, or has no io_uring in this kernel); nothing is run for a skipped target.
pub fn available(targets: &[Target]) -> (Vec<Target>, Vec<Skipped>) {
    let mut ok = Vec::new();
    let mut skipped = Vec::new();
    for &t in targets {
        let why = match t {
            Target::Floor { uring } => crate::compare::floor::unavailable(uring),
            _ => None,
        };
        match why {
            Some(reason) => {
                eprintln!("compare-fs: skipping {}: {reason}", t.name());
                skipped.push(Skipped {
                    fs: t.name().to_string(),
                    reason,
                });
            }
            None => ok.push(t),
        }
    }
    (ok, skipped)
}

/// Runs the jobs, then the aging jobs, printing each one's tables; writes the JSON report.
pub fn compare_fs(c: &CompareFs<'_>) -> Result<()> {
    let (targets, skipped) = available(c.targets);
    anyhow::ensure!(
        !targets.is_empty(),
        "no target of --fs can run here (see the reasons above)"
    );
    let names: Vec<String> = targets.iter().map(|t| t.name().to_string()).collect();
    for s in &skipped {
        println!("> skipped {}: {}\n", s.fs, s.reason);
    }
    let mut reports = Vec::new();
    if !c.jobs.is_empty() {
        reports = mounted::run(c.jobs, &targets, c.opts)?;
        println!("{}", mounted::report_text(&names, c.opts.rounds, &reports));
    }
    let aging_report = match c.aging {
        Some(opts) => Some(aging(&targets, opts, c.age_charts)?),
        None => None,
    };
    if let Some(p) = c.json {
        let json = serde_json::json!({
            "schema": "extalloc-compare-fs/2",
            "targets": names,
            "skipped": skipped,
            "rounds": c.opts.rounds,
            "jobs": reports,
            "aging": aging_report,
        });
        std::fs::write(p, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// Runs the aging jobs, prints their tables on stdout and writes the chart into `charts`.
fn aging(
    targets: &[Target],
    opts: &AgeOptions,
    charts: Option<&Path>,
) -> Result<age_run::AgeReport> {
    if let Some(dir) = charts {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("making --age-charts {}", dir.display()))?;
    }
    let report = age_run::run(targets, opts)?;
    println!("{}", age_run::report_text(&report));
    if let Some(dir) = charts {
        let path = dir.join("age-git.png");
        if crate::compare::age_chart::git_chart(&report.git, &path)? {
            eprintln!("compare-fs: wrote {}", path.display());
        }
    }
    Ok(report)
}
