//! `extalloc bench --suite quick`: every workload at a size that finishes in about a minute
//! in all on 2 cores, each comparing what it exists to show, with a progress bar and a final
//! summary table (each policy's run with the most threads).

use super::report::{markdown, Report};
use super::{run_matrix_with, LabOptions, Progress, RunOnce};
use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};

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

/// Runs every step; returns each step's report.
pub fn run(steps: &[Step], base: &LabOptions) -> Result<Vec<Report>> {
    let total: usize = steps
        .iter()
        .map(|s| s.policies.split(',').count() * s.threads.len() * base.repeat)
        .sum();
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
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
            bar.inc((step.policies.split(',').count() * step.threads.len() * base.repeat) as u64);
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
        let report = run_matrix_with(step.workload, &opts, step.run_once, &mut Bar(&bar))?;
        // Results go to stdout whatever it is; the bar (stderr) steps aside while they print.
        bar.suspend(|| println!("## {}\n\n{}", step.workload, markdown(&report)));
        reports.push(report);
    }
    bar.finish_and_clear();
    Ok(reports)
}

/// One row per workload x policy: the policy's run with the most threads.
pub fn summary(reports: &[Report]) -> String {
    let mut out = String::from(
        "| workload | policy | threads | ops/s | p99 ns | extents/file | free extents | fragmented groups |\n|---|---|---:|---:|---:|---:|---:|---:|\n",
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
            let fs = best.free_space.as_ref();
            out.push_str(&format!(
                "| {} | {} | {} | {:.0} | {} | {:.2} | {} | {} |\n",
                report.workload,
                best.policy,
                best.threads,
                best.ops_per_sec,
                best.latency_ns.p99,
                best.layout.extents_per_file,
                fs.map_or("-".into(), |f| f.free_extents.to_string()),
                fs.and_then(|f| f.fragmented_groups)
                    .map_or("-".into(), |v| v.to_string()),
            ));
        }
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
        // One row per policy (its 2-job run), after the header and the rule.
        let rows: Vec<_> = table.lines().skip(2).collect();
        assert_eq!(rows.len(), 2, "{table}");
        assert!(rows[0].starts_with("| frag | extalloc | 2 |"), "{table}");
        assert!(rows[1].starts_with("| frag | tlsf | 2 |"), "{table}");
    }
}
