//! `extalloc bench --suite quick`: every workload at a size that finishes in well under two
//! minutes in all on 2 cores (three repetitions), each comparing what it exists to show,
//! with a progress bar on a terminal (plain lines otherwise) and a final summary: a table
//! (each policy's run with the most threads, with its spread and its ratio to the
//! reference policy) and each workload's verdict.
//!
//! Data structures: [`Step`] (a workload and the options it differs in), the steps of
//! [`quick`], read from the workload registry ([`crate::workload`]). Invariants: every step runs the reference policy `extalloc`, so every table's
//! ratio column compares with the same policy; results go to stdout, progress and warnings
//! to stderr. Lock order: none.

use crate::lab::markdown::markdown;
use crate::lab::report::Report;
use crate::lab::{run_matrix_with, units, LabOptions, LineProgress, Progress, RunOnce};
use crate::workload::{Quick, Shape, Workload, WORKLOADS};
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
    pub writes: u64,
    pub fill: f64,
    /// replay: the trace (`--trace` overrides it); the step is skipped when it is missing.
    pub trace: Option<&'static str>,
}

/// Seconds per time-bound run in the quick suite unless `--seconds` says otherwise. Its
/// fallocate2 step is 30 such runs, most of the suite's time; at 1 s its medians, spreads
/// and verdict matched those at 2 s (`docs/results.md`, "The quick suite at 1 s a run"),
/// and the README's lab command stays within 3 minutes on a fresh clone, build included.
pub const QUICK_SECONDS: f64 = 1.0;

/// The trace the quick suite replays: one of the corpus in `traces/` (a fresh clone has it;
/// mixed lifetimes, with deletes), found from the checkout the binary was built in.
pub const QUICK_TRACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../traces/mixed-lifetimes.trace.txt.gz"
);

/// The quick tour: every workload with a quick step ([`crate::workload::Quick`]), the
/// allocator's (plain extents, where the outside allocators run too) first, then the files',
/// the trace last (its step is skipped when the trace is missing).
pub fn quick() -> Vec<Step> {
    let mut rows: Vec<(&Workload, &Quick)> = WORKLOADS
        .iter()
        .filter_map(|w| Some((w, w.quick.as_ref()?)))
        .collect();
    rows.sort_by_key(|(w, _)| match (w.outside, w.shape) {
        (true, _) => 0,
        (_, Shape::Trace) => 2,
        _ => 1,
    });
    rows.into_iter()
        .map(|(w, q)| Step {
            workload: w.name,
            run_once: w.run_once,
            policies: q.policies,
            threads: q.threads,
            device: q.device,
            file: q.file,
            writes: 200_000,
            fill: q.fill,
            trace: (w.shape == Shape::Trace).then_some(QUICK_TRACE),
        })
        .collect()
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

/// Runs every step; returns each step's report. Time-bound runs last `base.seconds` each
/// (`--seconds`; [`QUICK_SECONDS`] from the command line). Progress: a bar when stderr is a terminal,
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
            device_bytes: extalloc::parse_size(step.device)?,
            file_bytes: extalloc::parse_size(step.file)?,
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
    let reference = crate::lab::report::REFERENCE;
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
            .or_else(|| crate::lab::verdict::of(report))
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
        for w in WORKLOADS.iter().filter(|w| w.quick.is_some()) {
            assert!(
                names.contains(&w.name),
                "{} missing from the quick suite",
                w.name
            );
        }
        assert_eq!(names[..2], ["fallocate2", "frag"], "the allocator's first");
        assert_eq!(names.last(), Some(&"replay"), "the trace last");
        for s in &steps {
            for p in s.policies.split(',') {
                crate::lab::backend::LabPolicy::parse(p).unwrap();
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
