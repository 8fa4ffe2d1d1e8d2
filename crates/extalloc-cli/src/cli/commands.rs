//! The arguments of the lab commands that have more than a few (`replay`, `open-bench`),
//! read into the lab's options and handed to `extalloc_lab::command`.

use anyhow::{Context, Result};
use extalloc_lab::command::output::Outputs;
use extalloc_lab::command::{open_bench as ob, replay as rp};

/// What `extalloc replay` is asked.
#[derive(clap::Args)]
pub struct ReplayArgs {
    /// The trace.
    pub trace: std::path::PathBuf,
    /// Device to keep, `major,minor` [default: the most frequent in the trace].
    #[arg(long)]
    pub dev: Option<String>,
    /// Device size in blocks [default: the trace's capture header, else the README next
    /// to it].
    #[arg(long)]
    pub blocks: Option<u64>,
    /// Blocks per group [default: the header or README, else 32768].
    #[arg(long)]
    pub group_blocks: Option<u64>,
    /// Block size in bytes [default: the header or README, else 4096].
    #[arg(long)]
    pub block_size: Option<u32>,
    /// Policies, comma-separated.
    #[arg(long, default_value = extalloc_lab::api::DEFAULT_REPLAY_POLICIES)]
    pub policy: String,
    /// Replay only the first N events.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Fidelity rules to switch off, comma-separated: commits, reuse, cpu, complete,
    /// streams, metagoals (docs/replay.md says what each does).
    #[arg(long, value_delimiter = ',')]
    pub without: Vec<String>,
    /// Write every file's extents on each side to this JSON file.
    #[arg(long)]
    pub dump_files: Option<std::path::PathBuf>,
    /// Write the JSON report here.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Also write report.md and PNG charts into this directory.
    #[arg(long)]
    pub plot: Option<std::path::PathBuf>,
}

/// `extalloc replay`: `--dev` and `--policy` read, then the replay
/// (`extalloc_lab::command::replay`).
pub fn replay(a: ReplayArgs) -> Result<()> {
    let ReplayArgs {
        trace,
        dev,
        blocks,
        group_blocks,
        block_size,
        policy,
        limit,
        without,
        dump_files,
        json,
        plot,
    } = a;
    let outputs = Outputs { json, plot };
    let dev = dev
        .map(|d| -> Result<(u32, u32)> {
            let (a, b) = d
                .split_once(',')
                .context("--dev: expected major,minor such as 7,1")?;
            Ok((
                a.trim().parse().context("--dev major")?,
                b.trim().parse().context("--dev minor")?,
            ))
        })
        .transpose()?;
    let policies: Vec<String> = policy
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    anyhow::ensure!(!policies.is_empty(), "--policy is empty");
    let opts = extalloc_lab::replay::ReplayOptions {
        trace: &trace,
        dev,
        blocks,
        group_blocks,
        block_size,
        policies,
        limit,
        without,
        dump_files,
    };
    rp::replay(&opts, &outputs)
}

/// Options of `extalloc open-bench`.
#[derive(clap::Args, Debug)]
pub struct OpenBenchArgs {
    /// A file to create (and remove afterwards).
    pub path: std::path::PathBuf,
    /// Size of the sparse device for the open measurement.
    #[arg(long, default_value = "16TiB")]
    pub size: String,
    /// Blocks per group of that device.
    #[arg(long, default_value_t = extalloc::GROUP_BLOCKS_DEFAULT)]
    pub group_blocks: u64,
    /// Records to replay, comma-separated (each a recovery measurement).
    #[arg(long, default_value = "1000,10000,100000")]
    pub records: String,
    /// Also open a volume holding this many files (0: skip).
    #[arg(long, default_value_t = 0)]
    pub volume_files: u64,
    /// Extents of each of those files.
    #[arg(long, default_value_t = 10)]
    pub extents_per_file: u64,
    /// Instead: open synthetic devices of each --size (comma-separated, e.g.
    /// 64GiB,1TiB,1PiB), --fill full; PATH is not used.
    #[arg(long)]
    pub synthetic: bool,
    /// --synthetic: fraction of each group in use (0 to 0.95).
    #[arg(long, default_value_t = 0.7)]
    pub fill: f64,
}

/// `extalloc open-bench`: opening a large device, then recovery at each record count (or,
/// with `--synthetic`, opening synthetic filled devices).
pub fn open_bench(a: &OpenBenchArgs) -> Result<()> {
    if a.synthetic {
        return ob::open_bench_synthetic(&a.size, a.group_blocks, a.fill);
    }
    ob::open_bench(
        &a.path,
        &a.size,
        a.group_blocks,
        &a.records,
        a.volume_files,
        a.extents_per_file,
    )
}
