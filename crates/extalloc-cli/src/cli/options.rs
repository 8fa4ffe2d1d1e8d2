//! `bench` and `compare`'s arguments ([`BenchArgs`]) and the workload argument
//! ([`WorkloadArg`]: the names and help of the lab's workload registry,
//! `extalloc_lab::workload`) turned into [`LabOptions`] and [`Outputs`]: the workload's
//! defaults filled in, sizes and thread counts parsed, every option checked before any work
//! starts. Checks run in a fixed order, so the first that fails is the error whatever else
//! is wrong.

use anyhow::{Context, Result};
use clap::builder::PossibleValue;
use extalloc_lab::api;
use extalloc_lab::command::output::Outputs;
use extalloc_lab::command::Run;
use extalloc_lab::lab::{self, LabOptions};
use extalloc_lab::workload::{self, Shape, Workload, WORKLOADS};

/// A workload on the command line: a row of the registry, its name and help as clap shows
/// them.
#[derive(Clone, Copy)]
pub struct WorkloadArg(&'static Workload);

impl clap::ValueEnum for WorkloadArg {
    fn value_variants<'a>() -> &'a [Self] {
        static ALL: std::sync::OnceLock<Vec<WorkloadArg>> = std::sync::OnceLock::new();
        ALL.get_or_init(|| WORKLOADS.iter().map(WorkloadArg).collect())
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.0.name).help(self.0.help))
    }
}

/// The workload whose defaults the suite's base options take (each step sets its own).
pub fn suite_base() -> &'static Workload {
    Workload::named("fallocate2").expect("in the registry")
}

/// A workload and its options (shared by `bench` and `compare`).
#[derive(clap::Args)]
pub struct BenchArgs {
    /// The workload (bench: or --suite; checked when the options are read, since
    /// `compare` shares these arguments and has no --suite).
    #[arg(value_enum)]
    workload: Option<WorkloadArg>,
    /// Thread counts, comma-separated (`--jobs` is the same) [default: 1,2,4,8; frag 16].
    #[arg(long, visible_alias = "jobs")]
    threads: Option<String>,
    /// Policies: presets or specs (`preset:key=value:...`), comma-separated [default:
    /// ext4-base,ext4-2025,extalloc; writeback extalloc].
    #[arg(long)]
    policy: Option<String>,
    /// Seconds per run (time-bound workloads; an upper bound for small-files) [default: 2;
    /// --suite quick 1].
    #[arg(long)]
    seconds: Option<f64>,
    /// Repetitions of the whole matrix, interleaved; the tables show the median with the
    /// min-max beside it, and the verdict flags a lead within that noise (1: one run each,
    /// no spread).
    #[arg(long, default_value_t = api::DEFAULT_REPEAT)]
    repeat: usize,
    /// Device size (K, M, G, T; KiB, MiB, GiB, TiB) [default: 16GiB; small-files 4GiB].
    #[arg(long)]
    device_size: Option<String>,
    /// File size for sparse-writes and frag (per thread) and random-fill (split between
    /// threads) [default: 4GiB; random-fill 5GiB; frag 256MiB].
    #[arg(long)]
    file_size: Option<String>,
    /// sparse-writes: number of 1 KiB writes (split between threads).
    #[arg(long, default_value_t = api::DEFAULT_WRITES)]
    writes: u64,
    /// random-fill: sequential 1 KiB writes before each jump.
    #[arg(long, default_value_t = api::DEFAULT_SEQ_BURST)]
    seq_burst: u64,
    /// size-class-edge: pass lifetime hints that run against size.
    #[arg(long)]
    mix: bool,
    /// small-files: stop when this fraction of the device is used (0 < fill <= 1) [default:
    /// 1]. fallocate3: first fill this fraction of the device with scattered extents
    /// (0 <= fill < 1) [default: 0].
    #[arg(long)]
    fill: Option<f64>,
    /// Run on a journaled store on a file device made anew at PATH (sparse; removed and
    /// made again for every run) instead of the memory device: fallocate2, fallocate3, frag.
    #[arg(long, value_name = "PATH")]
    device: Option<std::path::PathBuf>,
    /// Run on a journaled store on a synthetic device of --device-size (up to 1 PiB),
    /// already --fill full (default 0.7, at most 0.95), generated from --seed on demand:
    /// fallocate2, fallocate3, frag.
    #[arg(long)]
    synthetic: bool,
    /// --synthetic: the free runs' sizes in KiB, log-uniform between the two.
    #[arg(long, default_value = "4-4096", value_name = "MIN-MAX")]
    free_extent_kib: String,
    /// writeback: files, one writer each, each in its own directory (placement key).
    #[arg(long, default_value_t = 12)]
    files: usize,
    /// writeback: the order of the 4 KiB writes, random or seq.
    #[arg(long, default_value = "random")]
    pattern: String,
    /// writeback: writeback contexts, comma-separated (one run each; cut to the pool's
    /// bound of min(groups, 2 x CPUs)).
    #[arg(long, default_value = "1,2,4")]
    wb_contexts: String,
    /// writeback: affinities, comma-separated (group, file, none; one run each).
    #[arg(long, default_value = "group,file,none")]
    wb_affinity: String,
    /// writeback: the dirty cache's hard limit (e.g. 256MiB) [default: all the data,
    /// no pressure].
    #[arg(long)]
    dirty_limit: Option<String>,
    /// replay: the kernel trace to replay (one thread per traced task; --threads is ignored).
    #[arg(long)]
    trace: Option<std::path::PathBuf>,
    /// Block size in bytes.
    #[arg(long, default_value_t = api::DEFAULT_BLOCK_SIZE)]
    block_size: u32,
    /// Blocks per group (a power of two).
    #[arg(long, default_value_t = extalloc::GROUP_BLOCKS_DEFAULT)]
    group_blocks: u64,
    /// How often the committer makes pending frees reusable, in milliseconds.
    #[arg(long, default_value_t = api::DEFAULT_COMMIT_MS)]
    commit_ms: u64,
    /// Seed: varies file ids (and so stream-goal hashing) between runs.
    #[arg(long, default_value_t = api::DEFAULT_SEED)]
    seed: u64,
    /// Write the JSON report (schema extalloc-bench/1) here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Also write report.md and PNG charts into this directory (as `extalloc report`).
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
}

impl BenchArgs {
    /// The workload, its options and where its results go, and (writeback) its own
    /// options, checked first.
    pub(crate) fn into_run(self) -> Result<Run> {
        let wb = match self.workload {
            Some(WorkloadArg(w)) if w.shape == Shape::Writeback => Some(self.writeback_params()?),
            _ => None,
        };
        let (workload, opts, out) = self.into_options()?;
        Ok(Run {
            workload,
            opts,
            out,
            wb,
        })
    }

    /// Checks the options and resolves the workload's defaults.
    fn into_options(self) -> Result<(&'static Workload, LabOptions, Outputs)> {
        let WorkloadArg(workload) = self
            .workload
            .context("a workload is required (or, for bench, --suite quick)")?;
        self.into_options_for(workload)
    }

    /// These arguments with `seconds` per run unless `--seconds` was given (the quick
    /// suite's shorter default).
    pub(crate) fn seconds_or(mut self, seconds: f64) -> Self {
        self.seconds.get_or_insert(seconds);
        self
    }

    /// The options with `workload`'s defaults. Checks run in a fixed order: the first that
    /// fails is the error.
    pub(crate) fn into_options_for(
        self,
        workload: &'static Workload,
    ) -> Result<(&'static Workload, LabOptions, Outputs)> {
        let synthetic = self.synthetic_options(workload)?;
        let (prefill, fill) = if synthetic.is_some() {
            (0.0, 1.0)
        } else {
            fill_fractions(workload, self.fill)?
        };
        let files = self.files;
        self.check_run(workload)?;
        let file_size_given = self.file_size.is_some();
        let (mut opts, out) = self.into_lab_options(workload, prefill, fill)?;
        opts.synthetic = synthetic;
        check_lab_options(workload, &opts, file_size_given)?;
        match workload.shape {
            // One thread per traced task: the run reports how many.
            Shape::Trace => opts.threads = vec![1],
            // One writer per file.
            Shape::Writeback => opts.threads = vec![files],
            Shape::Threads | Shape::Prefill => {}
        }
        Ok((workload, opts, out))
    }

    /// `--synthetic`'s device: for fallocate2, fallocate3 and frag, not with `--device`;
    /// `--fill` is its fill (default 0.7, at most 0.95).
    fn synthetic_options(&self, workload: &Workload) -> Result<Option<lab::Synthetic>> {
        if !self.synthetic {
            return Ok(None);
        }
        anyhow::ensure!(
            workload.synthetic,
            "--synthetic runs {}",
            workload::names(|w| w.synthetic)
        );
        anyhow::ensure!(
            self.device.is_none(),
            "--synthetic and --device are two devices: give one"
        );
        let fill = self.fill.unwrap_or(0.7);
        anyhow::ensure!(
            (0.0..=0.95).contains(&fill),
            "--synthetic --fill must be from 0 to 0.95"
        );
        let (lo, hi) = self
            .free_extent_kib
            .split_once('-')
            .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)))
            .filter(|&(a, b): &(u64, u64)| a >= 1 && a <= b)
            .context("--free-extent-kib takes MIN-MAX in KiB, 1 <= MIN <= MAX (e.g. 4-4096)")?;
        Ok(Some(lab::Synthetic {
            fill,
            free_extent_kib: (lo, hi),
        }))
    }

    /// The checks on how the run is made: `--device` for the workloads the journaled store
    /// runs, `--seconds`, `--repeat`.
    fn check_run(&self, workload: &Workload) -> Result<()> {
        if self.device.is_some() {
            anyhow::ensure!(
                workload.on_device(),
                "--device runs fallocate2 and fallocate3 on a journaled store, and \
                 small-files, sparse-writes, random-fill, append-vs-fallocate, \
                 size-class-edge, frag and writeback on a volume (replay does not run on a \
                 device)"
            );
        }
        anyhow::ensure!(
            self.seconds.is_none_or(|s| s > 0.0 && s.is_finite()),
            "--seconds must be positive"
        );
        anyhow::ensure!(self.repeat >= 1, "--repeat must be at least 1");
        Ok(())
    }

    /// The lab options with the workload's defaults for threads and sizes (parsed here), and
    /// where the results go.
    fn into_lab_options(
        self,
        workload: &Workload,
        prefill: f64,
        fill: f64,
    ) -> Result<(LabOptions, Outputs)> {
        let BenchArgs {
            workload: _,
            threads,
            policy,
            seconds,
            repeat,
            device_size,
            file_size,
            writes,
            seq_burst,
            mix,
            fill: _,
            files: _,
            pattern: _,
            wb_contexts: _,
            wb_affinity: _,
            dirty_limit: _,
            synthetic: _,
            free_extent_kib: _,
            trace,
            block_size,
            group_blocks,
            commit_ms,
            seed,
            json,
            plot,
            device,
        } = self;
        let params = api::Params {
            policies: policy,
            threads,
            seconds,
            repeat: Some(repeat),
            device_size,
            file_size,
            seed: Some(seed),
        };
        let opts = LabOptions {
            writes,
            seq_burst,
            mix,
            fill,
            trace,
            block_size,
            group_blocks,
            commit_ms,
            device,
            prefill,
            ..api::lab_options(workload, &params)?
        };
        Ok((opts, Outputs { json, plot }))
    }
}

impl BenchArgs {
    /// The writeback workload's own options, checked.
    pub(crate) fn writeback_params(&self) -> Result<lab::writeback::WritebackParams> {
        anyhow::ensure!(
            (1..=1024).contains(&self.files),
            "--files must be from 1 to 1024"
        );
        let contexts = lab::parse_threads(&self.wb_contexts).context("--wb-contexts")?;
        let affinities: Vec<String> = self
            .wb_affinity
            .split(',')
            .map(|s| s.trim().to_string())
            .collect();
        for a in &affinities {
            a.parse::<extalloc::writeback::Affinity>()?;
        }
        Ok(lab::writeback::WritebackParams {
            files: self.files,
            pattern: self.pattern.parse()?,
            contexts,
            affinities,
            dirty_limit_bytes: self
                .dirty_limit
                .as_deref()
                .map(extalloc::parse_size)
                .transpose()
                .context("--dirty-limit")?,
        })
    }
}

/// `--fill` as `(prefill, fill)`: fallocate3 pre-fills that fraction of the device (0 <= f <
/// 1, default 0) and fills to the end; small-files stops at it (0 < f <= 1, default 1).
fn fill_fractions(workload: &Workload, fill: Option<f64>) -> Result<(f64, f64)> {
    let prefills = workload.shape == Shape::Prefill;
    let prefill = if prefills {
        let f = fill.unwrap_or(0.0);
        anyhow::ensure!(
            (0.0..1.0).contains(&f),
            "{} --fill must be at least 0 and below 1",
            workload.name
        );
        f
    } else {
        0.0
    };
    let fill = if prefills { 1.0 } else { fill.unwrap_or(1.0) };
    anyhow::ensure!(
        fill > 0.0 && fill <= 1.0,
        "--fill must be above 0 and at most 1"
    );
    Ok((prefill, fill))
}

/// The checks on the resolved options: some policy, a trace for replay, `--writes`, a
/// `--file-size` (when given) of at least one block, `--seq-burst`.
fn check_lab_options(workload: &Workload, opts: &LabOptions, file_size_given: bool) -> Result<()> {
    anyhow::ensure!(!opts.policies.is_empty(), "--policy is empty");
    if workload.shape == Shape::Trace {
        anyhow::ensure!(
            opts.trace.is_some(),
            "bench replay needs --trace PATH (e.g. traces/git-checkout.trace.txt.gz)"
        );
    }
    anyhow::ensure!(opts.writes >= 1, "--writes must be at least 1");
    if file_size_given {
        let block_size = opts.block_size;
        anyhow::ensure!(
            opts.file_bytes >= u64::from(block_size),
            "--file-size must be at least one block ({block_size} bytes)"
        );
    }
    anyhow::ensure!(
        (1..=1 << 20).contains(&opts.seq_burst),
        "--seq-burst must be from 1 to 1048576"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn seconds(argv: &[&str], suite_default: Option<f64>) -> Result<f64> {
        let mut args =
            Cmd::try_parse_from(std::iter::once("bench").chain(argv.iter().copied()))?.args;
        if let Some(s) = suite_default {
            args = args.seconds_or(s);
        }
        Ok(args.into_options_for(suite_base())?.1.seconds)
    }

    #[test]
    fn seconds_default_given_and_refused() {
        assert_eq!(seconds(&[], None).unwrap(), api::DEFAULT_SECONDS);
        assert_eq!(seconds(&[], Some(1.0)).unwrap(), 1.0, "the suite's default");
        let given = seconds(&["--seconds", "0.5"], Some(1.0)).unwrap();
        assert_eq!(given, 0.5, "--seconds wins over the suite's default");
        for bad in ["0", "--seconds=-1", "inf"] {
            let argv = if bad.starts_with("--") {
                vec![bad]
            } else {
                vec!["--seconds", bad]
            };
            let err = seconds(&argv, None).unwrap_err();
            assert!(
                err.to_string().contains("--seconds must be positive"),
                "{bad}: {err}"
            );
        }
    }
}
