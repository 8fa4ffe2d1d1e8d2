//! `extalloc bench --suite quick`: every workload at a size that finishes in well under two
//! minutes in all on 2 cores (three repetitions), each comparing what it exists to show,
//! with a progress bar on a terminal (plain lines otherwise) and a final summary: a table
//! (each policy's run with the most threads, with its spread and its ratio to the
//! reference policy) and each workload's verdict.
//!
//! Data structures: [`Step`] (a workload and the options it differs in), the list of
//! [`quick`]. Invariants: every step runs the reference policy `extalloc`, so every table's
//! ratio column compares with the same policy; results go to stdout, progress and warnings
//! to stderr. Lock order: none.

use super::report::{markdown, Report};
use super::{run_matrix_with, units, LabOptions, LineProgress, Progress, RunOnce};
use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

/// One entry of a suite: a workload, what it compares and the options that differ from the
/// defaults.
pub struct Step {
    pub workload: &'static str,
    pub run_once: RunOnce,
    pub policies: &'static str,
    pub threads: &'static [usize],
    pub device: &'static str,
    pub file: &'static str,
    pub seconds: f64,
    pub writes: u64,
    pub fill: f64,
    /// replay: the trace (`--trace` overrides it); the step is skipped when it is missing.
    pub trace: Option<&'static str>,
}

/// The trace the quick suite replays: one of the corpus in `traces/` (a fresh clone has it;
/// mixed lifetimes, with deletes), found from the checkout the binary was built in.
pub const QUICK_TRACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../traces/mixed-lifetimes.trace.txt.gz"
);

impl Step {
    /// A step of `seconds` 2, `writes` 200,000, `fill` 1 and no trace.
    fn new(
        workload: &'static str,
        run_once: RunOnce,
        policies: &'static str,
        threads: &'static [usize],
        device: &'static str,
        file: &'static str,
    ) -> Step {
        Step {
            workload,
            run_once,
            policies,
            threads,
            device,
            file,
            seconds: 2.0,
            writes: 200_000,
            fill: 1.0,
            trace: None,
        }
    }
}

/// The quick tour: the allocator's workloads, then the files'.
pub fn quick() -> Vec<Step> {
    let mut steps = allocator_steps();
    steps.extend(file_steps());
    steps
}

/// Workloads of plain extents, where the outside allocators run too.
fn allocator_steps() -> Vec<Step> {
    vec![
        Step::new(
            "fallocate2",
            super::fallocate2::run_once,
            "ext4-base,ext4-2025,extalloc,tlsf,first-fit",
            &[1, 2],
            "16GiB",
            "1MiB",
        ),
        Step::new(
            "frag",
            super::frag::run_once,
            "ext4-base,extalloc,tlsf,first-fit",
            &[16],
            "16GiB",
            "256MiB",
        ),
    ]
}

/// Workloads of files: preallocation, locality, size classes, writeback, a trace.
fn file_steps() -> Vec<Step> {
    vec![
        Step::new(
            "sparse-writes",
            super::sparse_writes::run_once,
            "extalloc:prealloc_index=list,extalloc",
            &[1],
            "16GiB",
            "4GiB",
        ),
        Step::new(
            "random-fill",
            super::random_fill::run_once,
            "ext4-base,extalloc",
            &[2],
            "4GiB",
            "1GiB",
        ),
        Step {
            fill: 0.9,
            ..Step::new(
                "small-files",
                super::small_files::run_once,
                "extalloc:locality_prealloc=false,extalloc",
                &[2],
                "1GiB",
                "4GiB",
            )
        },
        Step::new(
            "append-vs-fallocate",
            super::append_vs_fallocate::run_once,
            "extalloc:size_classes=false,extalloc",
            &[2],
            "16GiB",
            "4GiB",
        ),
        Step::new(
            "size-class-edge",
            super::size_class_edge::run_once,
            "extalloc:size_classes=false,extalloc",
            &[2],
            "16GiB",
            "4GiB",
        ),
        Step::new(
            "writeback",
            super::writeback::run_quick,
            "extalloc",
            &[4],
            "2GiB",
            "128MiB",
        ),
        Step {
            trace: Some(QUICK_TRACE),
            ..Step::new(
                "replay",
                crate::replay::bench::run_once,
                "ext4-base,extalloc",
                &[1],
                "4GiB",
                "4GiB",
            )
        },
    ]
}

struct Bar<'a>(&'a ProgressBar);

impl Progress for Bar<'_> {
    fn start(&mut self, label: &str) {
        self.0.set_message(label.to_string());
    }
    fn done(&mut self, _ops_per_sec: f64) {
        self.0.inc(1);
    }
}

/// Runs every step; returns each step's report. Progress: a bar when stderr is a terminal,
/// else a plain line per run.
pub fn run(steps: &[Step], base: &LabOptions) -> Result<Vec<Report>> {
    let total: usize = steps.iter().map(|s| runs_of(s, base)).sum();
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    let (mut lines, mut on_terminal) = (LineProgress::default(), Bar(&bar));
    let progress: &mut dyn Progress = if std::io::stderr().is_terminal() {
        &mut on_terminal
    } else {
        &mut lines
    };
    let mut reports = Vec::new();
    for step in steps {
        let trace = match (step.trace, &base.trace) {
            (None, _) => None,
            (Some(_), Some(given)) => Some(given.clone()),
            (Some(default), None) => Some(std::path::PathBuf::from(default)),
        };
        if let Some(t) = trace.as_ref().filter(|t| !t.exists()) {
            // Loudly, on stdout with the tables (a hidden bar would swallow `println`).
            bar.suspend(|| {
                println!(
                    "## {}\n\nskipped: no trace at {} (give one with --trace)\n",
                    step.workload,
                    t.display()
                )
            });
            bar.inc(runs_of(step, base) as u64);
            continue;
        }
        let opts = LabOptions {
            trace,
            threads: step.threads.to_vec(),
            policies: step.policies.split(',').map(str::to_string).collect(),
            seconds: step.seconds,
            device_bytes: super::parse_size(step.device)?,
            file_bytes: super::parse_size(step.file)?,
            writes: step.writes,
            fill: step.fill,
            device: None,
            prefill: 0.0,
            ..base.clone()
        };
        let report = run_matrix_with(step.workload, &opts, step.run_once, progress)?;
        // Results go to stdout whatever it is; the bar (stderr) steps aside while they print.
        bar.suspend(|| println!("## {}\n\n{}", step.workload, markdown(&report)));
        reports.push(report);
    }
    bar.finish_and_clear();
    Ok(reports)
}

/// The runs a step makes.
fn runs_of(step: &Step, base: &LabOptions) -> usize {
    step.policies.split(',').count() * step.threads.len() * base.repeat
}

/// The summary: one row per workload x policy (the policy's run with the most threads:
/// median ops/s, its min-max, the ratio to the reference policy at the same threads, p99,
/// layout), then each workload's verdict and any warning.
pub fn summary(reports: &[Report]) -> String {
    let reference = super::report::REFERENCE;
    let mut out = format!(
        "| workload | policy | threads | ops/s | min-max | vs {reference} (reference) | p99 | extents/file | free extents | fragmented groups |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    for report in reports {
        let mut seen: Vec<&str> = Vec::new();
        for r in &report.runs {
            if seen.contains(&r.policy.as_str()) {
                continue;
            }
            seen.push(&r.policy);
            let best = report
                .runs
                .iter()
                .filter(|x| x.policy == r.policy)
                .max_by_key(|x| x.threads)
                .expect("this run");
            let base = report
                .runs
                .iter()
                .find(|b| b.policy == reference && b.threads == best.threads)
                .map(|b| b.ops_per_sec);
            let fs = best.free_space.as_ref();
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {:.2} | {} | {} |\n",
                report.workload,
                best.policy,
                best.threads,
                units::rate(best.ops_per_sec),
                units::spread(&best.ops_per_sec_repeats, units::rate),
                base.map_or("-".into(), |b| format!("{:.2}x", best.ops_per_sec / b)),
                units::ns(best.latency_ns.p99),
                best.layout.extents_per_file,
                fs.map_or("-".into(), |f| f.free_extents.to_string()),
                fs.and_then(|f| f.fragmented_groups)
                    .map_or("-".into(), |v| v.to_string()),
            ));
        }
    }
    out.push('\n');
    for report in reports {
        if let Some(v) = report
            .verdict
            .clone()
            .or_else(|| super::verdict::of(report))
        {
            out.push_str(&format!("- **{}**: {}\n", report.workload, v.text));
        }
    }
    let busy: Vec<&str> = reports
        .iter()
        .filter(|r| !r.warnings.is_empty())
        .map(|r| r.workload.as_str())
        .collect();
    if !busy.is_empty() {
        out.push_str(&format!(
            "\n> warning: the machine was busy during {} (see each table's warning): rerun on \
             a quiet machine before acting on these figures\n",
            busy.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_covers_every_workload_and_summarises() {
        let steps = quick();
        let names: Vec<_> = steps.iter().map(|s| s.workload).collect();
        for w in [
            "fallocate2",
            "frag",
            "sparse-writes",
            "random-fill",
            "small-files",
            "append-vs-fallocate",
            "size-class-edge",
            "writeback",
            "replay",
        ] {
            assert!(names.contains(&w), "{w} missing from the quick suite");
        }
        for s in &steps {
            for p in s.policies.split(',') {
                super::super::backend::LabPolicy::parse(p).unwrap();
            }
        }
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/frag-report.json"
        );
        let report: Report =
            serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
        let table = summary(&[report]);
        // One row per policy (its 2-job run), after the header and the rule; then the
        // verdict.
        let rows: Vec<_> = table
            .lines()
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .collect();
        assert_eq!(rows.len(), 2, "{table}");
        assert!(
            rows[0].starts_with("| frag | extalloc | 2 | 96.9 k | - | 1.00x |"),
            "{table}"
        );
        assert!(
            rows[1].starts_with("| frag | tlsf | 2 | 96.7 k | - | 1.00x |"),
            "{table}"
        );
        assert!(table.contains("| vs extalloc (reference) |"), "{table}");
        assert!(
            table.contains("- **frag**: 2 threads, median of 1: fastest extalloc, 1.00x tlsf"),
            "{table}"
        );
        assert!(
            table.contains("fewest extents/file extalloc 1.00 (next tlsf 46.00)"),
            "{table}"
        );
    }
}
