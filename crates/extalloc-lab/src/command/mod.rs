//! What the lab's commands do once the command line has read their arguments: `extalloc
//! bench` (one workload's matrix, a file workload on a volume over `--device`, or the quick
//! suite), `compare`, `commit-bench`, `capture` and `report` here; `replay`, `open-bench`
//! and `compare-fs` in [`replay`], [`open_bench`] and [`compare_fs`]. Tables go to stdout, progress to stderr, reports and
//! charts where [`output::Outputs`] says.
//!
//! Data structures: none of its own beyond [`output::Outputs`]; a workload is a row of the
//! registry ([`crate::workload::Workload`]), a matrix's options a [`LabOptions`].
//! Invariants: every path a run writes is checked before the run starts.

pub mod compare_fs;
pub mod open_bench;
pub mod output;
pub mod replay;

use crate::lab::backend::LabPolicy;
use crate::lab::volume_run::{OnDevice, OnVolume};
use crate::lab::writeback::WritebackParams;
use crate::lab::{self, LabOptions};
use crate::workload::{self, Shape, Workload};
use crate::{compare, suite};
use anyhow::{Context, Result};
use output::{emit, Outputs};
use std::path::Path;

/// A workload's run as `bench` and `compare` take it: the registry's row, the matrix's
/// options, where the results go, and writeback's own options.
pub struct Run {
    pub workload: &'static Workload,
    pub opts: LabOptions,
    pub out: Outputs,
    pub wb: Option<WritebackParams>,
}

impl Run {
    /// Writeback's options when the workload is writeback (it runs its own matrix).
    fn writeback(&self) -> Option<&WritebackParams> {
        self.wb
            .as_ref()
            .filter(|_| self.workload.shape == Shape::Writeback)
    }
}

/// `extalloc bench WORKLOAD`: its matrix (writeback: its own), or with `--device` a file
/// workload in memory and on a volume side by side.
pub fn bench(run: &Run) -> Result<()> {
    let (workload, opts, out) = (run.workload, &run.opts, &run.out);
    out.check()?;
    if let Some(wb) = run.writeback() {
        let report = lab::writeback::run_matrix(opts, wb, &mut lab::StderrProgress)?;
        return emit(&report, out);
    }
    if let (Some(volume), Some(_)) = (workload.on_volume, &opts.device) {
        return file_workload_volume(workload, opts, volume);
    }
    workload::refuse_outside(workload, opts)?;
    let report = lab::run_matrix(workload.name, opts, workload.run_once)?;
    emit(&report, out)
}

/// `extalloc bench --suite quick`: every table on stdout, each report under `--json DIR`
/// and `--plot DIR` (a folder per workload, and `DIR/index.md` linking every chart).
pub fn quick_suite(opts: &LabOptions, out: &Outputs) -> Result<()> {
    out.check_dirs()?;
    let reports = suite::run(&suite::quick(), opts)?;
    println!("## Summary\n\n{}", suite::summary(&reports));
    let mut sections = Vec::new();
    for report in &reports {
        if let Some(dir) = &out.json {
            std::fs::create_dir_all(dir)?;
            let path = dir.join(format!("{}.json", report.workload));
            std::fs::write(&path, serde_json::to_string_pretty(report)? + "\n")
                .with_context(|| format!("writing {}", path.display()))?;
        }
        if let Some(dir) = &out.plot {
            let charts = lab::charts::write_charts(report, &dir.join(&report.workload))?;
            sections.push((report.workload.clone(), charts));
        }
    }
    if let Some(dir) = &out.plot {
        let index = lab::charts::write_index(dir, &sections)?;
        eprintln!("wrote {} (a link to every chart)", index.display());
    }
    if let Some(dir) = out.json.as_ref().or(out.plot.as_ref()) {
        eprintln!("wrote the reports under {}", dir.display());
    }
    Ok(())
}

/// `extalloc bench FILE-WORKLOAD --device PATH`: each extalloc policy and thread count in
/// memory and on a journaled volume made anew over PATH (data written through the volume),
/// side by side.
fn file_workload_volume(
    workload: &Workload,
    opts: &LabOptions,
    volume_run: OnVolume,
) -> Result<()> {
    let name = workload.name;
    let path = opts.device.clone().context("--device")?;
    let mut in_memory = opts.clone();
    in_memory.device = None;
    println!(
        "| {name} policy | threads | memory ops/s | volume ops/s | volume/memory | extents/file \
         memory | volume | free extents memory | volume |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for spec in &opts.policies {
        let policy = LabPolicy::parse(spec)?;
        let LabPolicy::Extalloc(p) = &policy else {
            anyhow::bail!("--device runs extalloc policies only, not {spec}");
        };
        for &t in &opts.threads {
            eprintln!(
                "{name} {spec} x{t}: memory, then the volume on {}",
                path.display()
            );
            let mem = (workload.run_once)(&policy, t, &in_memory)?;
            let vol = volume_run(&OnDevice {
                path: &path,
                policy: p,
                threads: t,
                opts,
            })?;
            println!(
                "| {spec} | {t} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {} |",
                mem.ops_per_sec,
                vol.ops_per_sec,
                vol.ops_per_sec / mem.ops_per_sec,
                mem.layout.extents_per_file,
                vol.extents_per_file,
                mem.free_space.as_ref().map_or(0, |f| f.free_extents),
                vol.free_extents
            );
        }
    }
    Ok(())
}

/// `extalloc compare`: the workload on our policies and on the kernel file systems `fs`
/// (comma-separated).
pub fn compare(fs: &str, run: &Run) -> Result<()> {
    let (workload, opts, out) = (run.workload, &run.opts, &run.out);
    out.check()?;
    let fs = fs
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(compare::kernel::Fs::parse)
        .collect::<Result<Vec<_>>>()?;
    if let Some(wb) = run.writeback() {
        let report = compare::writeback::run(&fs, opts, wb)?;
        return emit(&report, out);
    }
    anyhow::ensure!(
        workload.kernel,
        "compare runs {} on the kernel; {} is a bench workload only",
        workload::list(|w| w.kernel).join(", "),
        workload.name
    );
    let report = compare::run(workload.name, workload.run_once, &fs, opts)?;
    emit(&report, out)
}

/// `extalloc capture`: the trace of `command` on `dev`, written to `out`.
pub fn capture(dev: &Path, out: &Path, command: &[String]) -> Result<()> {
    let lines = crate::replay::capture::capture(dev, command, out)?;
    eprintln!("wrote {} ({lines} trace lines)", out.display());
    Ok(())
}

/// `extalloc commit-bench`: the table of commits per second at each thread count, on the
/// bare journal or (`mode`) through the store's transactions, `ops` each with an
/// allocation and a free.
pub fn commit_bench(
    path: &Path,
    threads: &str,
    seconds: f64,
    payload: usize,
    mode: Option<lab::commit_bench::StoreMode>,
    ops: bool,
) -> Result<()> {
    anyhow::ensure!(
        seconds > 0.0 && seconds.is_finite(),
        "--seconds must be positive"
    );
    let threads = lab::parse_threads(threads)?;
    let rows = match mode {
        Some(mode) => lab::commit_bench::run_store(path, &threads, seconds, payload, mode, ops)?,
        None => lab::commit_bench::run(path, &threads, seconds, payload)?,
    };
    print!("{}", lab::commit_bench::markdown(path, &rows));
    Ok(())
}

/// `extalloc report`: charts and tables from a bench or compare report.
pub fn report(json: &Path, out: &Path) -> Result<()> {
    let text =
        std::fs::read_to_string(json).with_context(|| format!("reading {}", json.display()))?;
    let report: lab::report::Report = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a bench report", json.display()))?;
    anyhow::ensure!(
        report.schema == "extalloc-bench/1",
        "{}: schema '{}', expected extalloc-bench/1",
        json.display(),
        report.schema
    );
    for path in lab::charts::write_all(&report, out)? {
        println!("wrote {}", path.display());
    }
    Ok(())
}
