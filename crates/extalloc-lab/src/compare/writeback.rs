//! `extalloc compare writeback`: the seed's fio job on the kernel's file systems beside
//! extalloc's buffered volume. One fio job per file, each in its own directory, 4 KiB
//! buffered writes through `io_uring` at iodepth 32 (`randwrite` or `write`), `end_fsync`;
//! MiB/s is the data over fio's wall time (to durable), extents come from FIEMAP after it,
//! free space from the file system's tools once unmounted. The kernel's dirty limits are the
//! machine's (`--dirty-limit` applies to extalloc's runs only).

use super::kernel::{self, Device, Fs, INTERRUPTED};
use super::{free_space_of, kernel_matrix, preflight};
use crate::lab::report::{self, Report, Run};
use crate::lab::writeback::{Pattern, WritebackFields, WritebackParams, WRITE_BYTES};
use crate::lab::{LabOptions, StderrProgress};
use anyhow::{bail, Context, Result};
use std::fmt::Write as _;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// extalloc's matrix, then each kernel file system in `fs`.
pub fn run(fs: &[Fs], opts: &LabOptions, wb: &WritebackParams) -> Result<Report> {
    preflight(fs, &["fio"])?;
    let mut report = crate::lab::writeback::run_matrix(opts, wb, &mut StderrProgress)?;
    kernel::catch_interrupt()?;
    kernel_matrix(&mut report, "writeback", fs, opts, |f, _| {
        kernel_run(f, opts, wb)
    })?;
    Ok(report)
}

/// fio's job file: one job per file, `dir<i>/file` under `root` (absolute names: fio takes
/// a global `filename` relative to its working directory, not to a job's `directory`).
pub fn job_file(root: &std::path::Path, opts: &LabOptions, wb: &WritebackParams) -> String {
    let rw = match wb.pattern {
        Pattern::Random => "randwrite",
        Pattern::Seq => "write",
    };
    let mut job = format!(
        "[global]\nrw={rw}\nbs={WRITE_BYTES}\nioengine=io_uring\niodepth=32\ndirect=0\n\
         end_fsync=1\nsize={}\nrandrepeat=1\nrandseed={}\n",
        opts.file_bytes, opts.seed
    );
    for i in 0..wb.files {
        let _ = write!(
            job,
            "\n[job{i}]\nfilename={}\n",
            root.join(format!("dir{i}/file")).display()
        );
    }
    job
}

/// One fio job's write completion latencies, in nanoseconds.
struct JobClat {
    p50: f64,
    p95: f64,
    p99: f64,
    max: f64,
}

/// The report fio prints with `--output-format=json` starts at the first line that opens
/// an object (`{`); notes may come before it.
const REPORT_OPENS: char = '\u{7b}';

/// The jobs of fio's JSON report (after any notes fio prints before it); an error for a
/// report without jobs.
pub fn fio_jobs(out: &str) -> Result<Vec<serde_json::Value>> {
    let start = if out.starts_with(REPORT_OPENS) {
        0
    } else {
        out.find(&format!("\n{REPORT_OPENS}"))
            .context("fio printed no JSON report")?
            + 1
    };
    let mut v: serde_json::Value =
        serde_json::from_str(&out[start..]).context("parsing fio's JSON report")?;
    match v["jobs"].take() {
        serde_json::Value::Array(jobs) if !jobs.is_empty() => Ok(jobs),
        _ => anyhow::bail!("fio's report has no jobs"),
    }
}

/// Each job's write completion latencies from fio's JSON report.
fn fio_job_clats(json: &str) -> Result<Vec<JobClat>> {
    let jobs = fio_jobs(json)?;
    jobs.iter()
        .map(|job| {
            let c = &job["write"]["clat_ns"];
            let get = |x: &serde_json::Value, key: &str| {
                x.as_f64()
                    .with_context(|| format!("fio's report: no write clat_ns {key}"))
            };
            let pct = |key: &str| get(&c["percentile"][key], key);
            Ok(JobClat {
                p50: pct("50.000000")?,
                p95: pct("95.000000")?,
                p99: pct("99.000000")?,
                max: get(&c["max"], "max")?,
            })
        })
        .collect()
}

/// The write completion latency from fio's JSON report: each percentile the median over
/// the jobs, the maximum their largest.
pub fn fio_latency(json: &str) -> Result<report::Latency> {
    let jobs = fio_job_clats(json)?;
    let median = |f: fn(&JobClat) -> f64| {
        let v: Vec<f64> = jobs.iter().map(f).collect();
        report::median(&v).round() as u64
    };
    Ok(report::Latency {
        p50: median(|j| j.p50),
        p95: median(|j| j.p95),
        p99: median(|j| j.p99),
        max: jobs.iter().map(|j| j.max).fold(0.0, f64::max) as u64,
    })
}

/// The job on a fresh kernel file system.
fn kernel_run(fs: Fs, opts: &LabOptions, wb: &WritebackParams) -> Result<Run> {
    let data = wb.files as u64 * opts.file_bytes;
    anyhow::ensure!(
        data < opts.device_bytes,
        "writeback: {} files of {} bytes do not fit a {}-byte device",
        wb.files,
        opts.file_bytes,
        opts.device_bytes
    );
    let mut dev = Device::create(fs, opts.device_bytes, opts.block_size)?;
    let root = dev.path("");
    for i in 0..wb.files {
        std::fs::create_dir(root.join(format!("dir{i}")))
            .with_context(|| format!("making dir{i} on {}", fs.name()))?;
    }
    let job = std::env::temp_dir().join(format!("extalloc-wb-{}.fio", std::process::id()));
    std::fs::write(&job, job_file(&root, opts, wb))
        .with_context(|| format!("writing {}", job.display()))?;
    let started = Instant::now();
    let out = Command::new("fio")
        .arg("--output-format=json")
        .arg(&job)
        .output();
    let seconds = started.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&job);
    let out = out.context("running fio")?;
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    anyhow::ensure!(
        out.status.success(),
        "fio failed on {}: {}",
        fs.name(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let files = (0..wb.files)
        .map(|i| kernel::file_extents(&root.join(format!("dir{i}/file")), opts.block_size))
        .collect::<Result<Vec<_>>>()?;
    dev.unmount()?;
    let free_space = free_space_of(fs, &dev, opts.block_size)?;
    drop(dev);
    let ops = data / WRITE_BYTES;
    let mib_per_sec = data as f64 / f64::from(1 << 20) / seconds;
    Ok(Run {
        policy: format!("kernel-{}", fs.name()),
        threads: wb.files,
        seconds,
        ops,
        ops_per_sec: ops as f64 / seconds,
        ops_per_sec_repeats: vec![ops as f64 / seconds],
        latency_ns: fio_latency(&String::from_utf8_lossy(&out.stdout))?,
        layout: report::layout(&files, opts.block_size),
        free_space,
        counters: None,
        progress: None,
        writeback: Some(WritebackFields {
            wb_contexts: 0,
            wb_affinity: "kernel".into(),
            mib_per_sec,
            pattern: wb.pattern,
            cache: None,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(p50: u64, max: u64) -> String {
        format!(
            "{{\"write\": {{\"clat_ns\": {{\"max\": {max}, \"percentile\": \
             {{\"50.000000\": {p50}, \"95.000000\": {}, \"99.000000\": {}}}}}}}}}",
            p50 * 2,
            p50 * 3
        )
    }

    /// Percentiles are medians over the jobs, the maximum the largest; a note fio prints
    /// before its report is skipped; a report without jobs or latencies is an error.
    #[test]
    fn fio_latency_reads_the_jobs_of_a_report() {
        let report = format!(
            "note: both iodepth >= 1 and synchronous I/O engine are selected\n{{\"jobs\": [{}, {}, {}]}}",
            job(10, 100),
            job(30, 900),
            job(20, 400)
        );
        let l = fio_latency(&report).unwrap();
        assert_eq!((l.p50, l.p95, l.p99, l.max), (20, 40, 60, 900));
        assert!(fio_latency("{\"jobs\": []}").is_err());
        assert!(fio_latency("{\"jobs\": [{\"write\": {}}]}").is_err());
        assert!(fio_latency("fio: no such file").is_err());
    }
}
