//! `bench` and `compare`'s arguments ([`BenchArgs`], defined with the other arguments in
//! `main.rs`) turned into [`LabOptions`] and [`Outputs`]: the workload's defaults filled in,
//! sizes and thread counts parsed, every option checked before any work starts. Checks run
//! in a fixed order, so the first that fails is the error whatever else is wrong.

use super::output::Outputs;
use crate::{BenchArgs, Workload};
use anyhow::{Context, Result};
use extalloc_cli::lab::{self, LabOptions};

impl BenchArgs {
    /// Checks the options and resolves the workload's defaults.
    pub(crate) fn into_options(self) -> Result<(Workload, LabOptions, Outputs)> {
        let workload = self
            .workload
            .context("a workload is required (or, for bench, --suite quick)")?;
        self.into_options_for(workload)
    }

    /// The options with `workload`'s defaults. Checks run in a fixed order: the first that
    /// fails is the error.
    pub(crate) fn into_options_for(
        self,
        workload: Workload,
    ) -> Result<(Workload, LabOptions, Outputs)> {
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
        if matches!(workload, Workload::Replay) {
            // One thread per traced task: the run reports how many.
            opts.threads = vec![1];
        }
        if matches!(workload, Workload::Writeback) {
            // One writer per file.
            opts.threads = vec![files];
        }
        Ok((workload, opts, out))
    }

    /// `--synthetic`'s device: for fallocate2, fallocate3 and frag, not with `--device`;
    /// `--fill` is its fill (default 0.7, at most 0.95).
    fn synthetic_options(&self, workload: Workload) -> Result<Option<lab::Synthetic>> {
        if !self.synthetic {
            return Ok(None);
        }
        anyhow::ensure!(
            matches!(
                workload,
                Workload::Fallocate2 | Workload::Fallocate3 | Workload::Frag
            ),
            "--synthetic runs fallocate2, fallocate3 and frag"
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
    fn check_run(&self, workload: Workload) -> Result<()> {
        if self.device.is_some() {
            anyhow::ensure!(
                matches!(
                    workload,
                    Workload::Fallocate2
                        | Workload::Fallocate3
                        | Workload::Frag
                        | Workload::SmallFiles
                        | Workload::SparseWrites
                        | Workload::RandomFill
                        | Workload::AppendVsFallocate
                        | Workload::SizeClassEdge
                        | Workload::Writeback
                ),
                "--device runs fallocate2 and fallocate3 on a journaled store, and \
                 small-files, sparse-writes, random-fill, append-vs-fallocate, \
                 size-class-edge, frag and writeback on a volume (replay does not run on a \
                 device)"
            );
        }
        anyhow::ensure!(
            self.seconds > 0.0 && self.seconds.is_finite(),
            "--seconds must be positive"
        );
        anyhow::ensure!(self.repeat >= 1, "--repeat must be at least 1");
        Ok(())
    }

    /// The lab options with the workload's defaults for threads and sizes (parsed here), and
    /// where the results go.
    fn into_lab_options(
        self,
        workload: Workload,
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
        let opts = LabOptions {
            threads: lab::parse_threads(threads.as_deref().unwrap_or(workload.default_threads()))?,
            policies: policy
                .as_deref()
                .unwrap_or(workload.default_policies())
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            seconds,
            repeat,
            device_bytes: lab::parse_size(
                device_size
                    .as_deref()
                    .unwrap_or(workload.default_device_size()),
            )?,
            file_bytes: lab::parse_size(
                file_size.as_deref().unwrap_or(workload.default_file_size()),
            )?,
            writes,
            seq_burst,
            mix,
            fill,
            trace,
            block_size,
            group_blocks,
            commit_ms,
            seed,
            device,
            prefill,
            synthetic: None,
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
                .map(lab::parse_size)
                .transpose()
                .context("--dirty-limit")?,
        })
    }
}

/// `--fill` as `(prefill, fill)`: fallocate3 pre-fills that fraction of the device (0 <= f <
/// 1, default 0) and fills to the end; small-files stops at it (0 < f <= 1, default 1).
fn fill_fractions(workload: Workload, fill: Option<f64>) -> Result<(f64, f64)> {
    let prefill = if matches!(workload, Workload::Fallocate3) {
        let f = fill.unwrap_or(0.0);
        anyhow::ensure!(
            (0.0..1.0).contains(&f),
            "fallocate3 --fill must be at least 0 and below 1"
        );
        f
    } else {
        0.0
    };
    let fill = if matches!(workload, Workload::Fallocate3) {
        1.0
    } else {
        fill.unwrap_or(1.0)
    };
    anyhow::ensure!(
        fill > 0.0 && fill <= 1.0,
        "--fill must be above 0 and at most 1"
    );
    Ok((prefill, fill))
}

/// The checks on the resolved options: some policy, a trace for replay, `--writes`, a
/// `--file-size` (when given) of at least one block, `--seq-burst`.
fn check_lab_options(workload: Workload, opts: &LabOptions, file_size_given: bool) -> Result<()> {
    anyhow::ensure!(!opts.policies.is_empty(), "--policy is empty");
    if matches!(workload, Workload::Replay) {
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
