//! `extalloc`: the allocation lab.
//!
//! `extalloc bench fallocate2` runs a workload against each policy and thread count on the
//! embedded memory device and prints a Markdown table (and writes JSON with `--json`).
//! `extalloc compare WORKLOAD --fs ext4,xfs,btrfs` runs it on the kernel's file systems too.
//! `extalloc policies` lists the presets and the keys a policy spec may set.

use extalloc_cli::{compare, lab, replay, torture};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use lab::LabOptions;

#[derive(Parser)]
#[command(name = "extalloc", version, about = "The extalloc allocation lab")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Workload {
    /// will-it-scale fallocate2: append 8 KiB until 1 MiB, truncate, repeat (one file per thread)
    Fallocate2,
    /// will-it-scale fallocate3: truncate a 70 MiB file and fallocate it again, repeat
    /// (--fill pre-fills the device; a crowded device scans every group and forces commits)
    Fallocate3,
    /// 1 KiB writes at random offsets of a large sparse file (--writes, --file-size)
    SparseWrites,
    /// fill a file with random 1 KiB writes (--file-size, --seq-burst)
    RandomFill,
    /// create 2 KiB files until the device is full
    SmallFiles,
    /// long-lived files grow by appends while large short-lived fallocates come and go
    AppendVsFallocate,
    /// extents a hair under the size-class borders (--mix: lifetime against size)
    SizeClassEdge,
    /// every job appends 4 KiB at a time to its own file up to --file-size (--jobs)
    Frag,
    /// a kernel trace (--trace), one thread per traced task
    Replay,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Fallocate2 => "fallocate2",
            Workload::Fallocate3 => "fallocate3",
            Workload::SparseWrites => "sparse-writes",
            Workload::RandomFill => "random-fill",
            Workload::SmallFiles => "small-files",
            Workload::AppendVsFallocate => "append-vs-fallocate",
            Workload::SizeClassEdge => "size-class-edge",
            Workload::Frag => "frag",
            Workload::Replay => "replay",
        }
    }

    fn default_threads(self) -> &'static str {
        match self {
            Workload::Frag => "16",
            Workload::Fallocate3 => "1,2",
            _ => "1,2,4,8",
        }
    }

    fn default_device_size(self) -> &'static str {
        match self {
            Workload::SmallFiles => "4GiB",
            // The size the kernel reference figures were taken on.
            Workload::Fallocate3 => "8GiB",
            _ => "16GiB",
        }
    }

    fn default_file_size(self) -> &'static str {
        match self {
            Workload::RandomFill => "5GiB",
            Workload::Frag => "256MiB",
            _ => "4GiB",
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum Suite {
    /// Every workload, small: about a minute on 2 cores.
    Quick,
}

#[derive(Subcommand)]
enum Command {
    /// Run a workload for every policy x thread count and print a results table.
    Bench {
        /// Instead of one workload: a tour of them all (`quick`: about a minute on 2 cores),
        /// with a progress bar and a summary table. `--json` and `--plot` then name
        /// directories (one report per workload).
        #[arg(long, value_enum, conflicts_with = "workload")]
        suite: Option<Suite>,
        #[command(flatten)]
        args: BenchArgs,
    },
    /// Run a workload on extalloc's policies and on the kernel's ext4, XFS and btrfs (loop
    /// devices backed by /dev/shm; needs root) and print one table.
    Compare {
        /// Kernel file systems, comma-separated (those whose mkfs is installed).
        #[arg(long, default_value = "ext4,xfs,btrfs")]
        fs: String,
        #[command(flatten)]
        args: BenchArgs,
    },
    /// Replay a kernel ext4 allocation trace (tracefs text, plain or .gz) through policies
    /// and compare the layout and free space with what the kernel decided.
    Replay {
        /// The trace.
        trace: std::path::PathBuf,
        /// Device to keep, `major,minor` [default: the most frequent in the trace].
        #[arg(long)]
        dev: Option<String>,
        /// Device size in blocks [default: the trace's capture header, else the README next
        /// to it].
        #[arg(long)]
        blocks: Option<u64>,
        /// Blocks per group [default: the header or README, else 32768].
        #[arg(long)]
        group_blocks: Option<u64>,
        /// Block size in bytes [default: the header or README, else 4096].
        #[arg(long)]
        block_size: Option<u32>,
        /// Policies, comma-separated.
        #[arg(long, default_value = "ext4-base,ext4-2025,extalloc")]
        policy: String,
        /// Replay only the first N events.
        #[arg(long)]
        limit: Option<usize>,
        /// Fidelity rules to switch off, comma-separated: commits, reuse, cpu, complete,
        /// streams (docs/replay.md says what each does).
        #[arg(long, value_delimiter = ',')]
        without: Vec<String>,
        /// Write every file's extents on each side to this JSON file.
        #[arg(long)]
        dump_files: Option<std::path::PathBuf>,
        /// Write the JSON report here.
        #[arg(long)]
        json: Option<std::path::PathBuf>,
        /// Also write report.md and PNG charts into this directory.
        #[arg(long)]
        plot: Option<std::path::PathBuf>,
    },
    /// Record ext4's allocation events on one device while a command runs (root), as a
    /// gzip trace that `replay` reads.
    Capture {
        /// The block device (e.g. /dev/loop0) whose events to keep.
        #[arg(long)]
        dev: std::path::PathBuf,
        /// Where to write the trace (gzip).
        #[arg(long, default_value = "capture.trace.txt.gz")]
        out: std::path::PathBuf,
        /// The command to run (after `--`).
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Make an extalloc file system on a file or block device (docs/format.md).
    Mkfs {
        /// The file (created or truncated to --size) or block device.
        path: std::path::PathBuf,
        /// Size (K, M, G, T); a block device's own size when omitted.
        #[arg(long)]
        size: Option<String>,
        #[arg(long, default_value_t = 4096)]
        block_size: u32,
        #[arg(long, default_value_t = extalloc::GROUP_BLOCKS_DEFAULT)]
        group_blocks: u64,
        /// Journal size (K, M, G).
        #[arg(long, default_value = "64MiB")]
        journal_size: String,
        /// Overwrite a target that holds data or an extalloc device.
        #[arg(long)]
        force: bool,
    },
    /// Group commit on a real file: commits per second at each thread count.
    CommitBench {
        /// A file to create (and remove afterwards): on /dev/shm, or on a disk.
        path: std::path::PathBuf,
        #[arg(long, default_value = "1,2,8")]
        threads: String,
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        /// Caller payload bytes per record.
        #[arg(long, default_value_t = 64)]
        payload: usize,
    },
    /// What mounting costs: open time of a large sparse device (bytes read, bitmaps loaded),
    /// then recovery time against the number of journal records to replay.
    OpenBench {
        /// A file to create (and remove afterwards).
        path: std::path::PathBuf,
        /// Size of the sparse device for the open measurement.
        #[arg(long, default_value = "16TiB")]
        size: String,
        /// Blocks per group of that device.
        #[arg(long, default_value_t = extalloc::GROUP_BLOCKS_DEFAULT)]
        group_blocks: u64,
        /// Records to replay, comma-separated (each a recovery measurement).
        #[arg(long, default_value = "1000,10000,100000")]
        records: String,
    },
    /// Random transactions with crashes on a fault-injecting device, checked after every
    /// recovery against a model. Exits non-zero on any loss, leak or double allocation.
    Torture {
        #[arg(long, default_value_t = 200)]
        crashes: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long, default_value_t = 2)]
        threads: usize,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// Check an extalloc device without changing it: superblocks, every group's checksums
    /// and counts, metadata marked used, the journal's records against the home state.
    /// Exits non-zero when it finds a problem.
    Fsck {
        path: std::path::PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the superblock and the free space of each group of an extalloc device.
    Info {
        path: std::path::PathBuf,
        /// Read and check every group's bitmap and print each group (slow on large devices).
        #[arg(long)]
        groups: bool,
    },
    /// Turn a bench or compare JSON report into Markdown and PNG charts.
    Report {
        /// The JSON report (`--json` of bench or compare).
        json: std::path::PathBuf,
        /// Directory for report.md and the PNGs.
        #[arg(long, default_value = "lab-out/report")]
        out: std::path::PathBuf,
    },
    /// List the policy presets and the keys a policy spec may set.
    Policies,
}

/// A workload and its options (shared by `bench` and `compare`).
#[derive(clap::Args)]
struct BenchArgs {
    /// The workload (bench: or --suite).
    #[arg(value_enum, required_unless_present = "suite")]
    workload: Option<Workload>,
    /// Thread counts, comma-separated (`--jobs` is the same) [default: 1,2,4,8; frag 16].
    #[arg(long, visible_alias = "jobs")]
    threads: Option<String>,
    /// Policies: presets or specs (`preset:key=value:...`), comma-separated.
    #[arg(long, default_value = "ext4-base,ext4-2025,extalloc")]
    policy: String,
    /// Seconds per run (time-bound workloads; an upper bound for small-files).
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Repetitions of the whole matrix; the table shows the median.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Device size (K, M, G, T; KiB, MiB, GiB, TiB) [default: 16GiB; small-files 4GiB].
    #[arg(long)]
    device_size: Option<String>,
    /// File size for sparse-writes and frag (per thread) and random-fill (split between
    /// threads) [default: 4GiB; random-fill 5GiB; frag 256MiB].
    #[arg(long)]
    file_size: Option<String>,
    /// sparse-writes: number of 1 KiB writes (split between threads).
    #[arg(long, default_value_t = 200_000)]
    writes: u64,
    /// random-fill: sequential 1 KiB writes before each jump.
    #[arg(long, default_value_t = 1)]
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
    /// replay: the kernel trace to replay (one thread per traced task; --threads is ignored).
    #[arg(long)]
    trace: Option<std::path::PathBuf>,
    /// Block size in bytes.
    #[arg(long, default_value_t = 4096)]
    block_size: u32,
    /// Blocks per group (a power of two).
    #[arg(long, default_value_t = extalloc::GROUP_BLOCKS_DEFAULT)]
    group_blocks: u64,
    /// How often the committer makes pending frees reusable, in milliseconds.
    #[arg(long, default_value_t = 100)]
    commit_ms: u64,
    /// Seed: varies file ids (and so stream-goal hashing) between runs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the JSON report (schema extalloc-bench/1) here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Also write report.md and PNG charts into this directory (as `extalloc report`).
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Policies => {
            println!("presets: {}", extalloc::PRESETS.join(", "));
            println!("keys (spec: preset:key=value:key=value; lists: spec,spec):");
            for (key, values) in extalloc::Policy::keys() {
                println!("  {key:<26} {values}");
            }
            Ok(())
        }
        Command::Bench {
            suite: Some(Suite::Quick),
            args,
        } => {
            let (_, opts, out) = args.into_options_for(Workload::Fallocate2)?;
            out.check_dirs()?;
            let reports = lab::suite::run(&lab::suite::quick(), &opts)?;
            println!("## Summary\n\n{}", lab::suite::summary(&reports));
            for report in &reports {
                if let Some(dir) = &out.json {
                    std::fs::create_dir_all(dir)?;
                    let path = dir.join(format!("{}.json", report.workload));
                    std::fs::write(&path, serde_json::to_string_pretty(report)? + "\n")
                        .with_context(|| format!("writing {}", path.display()))?;
                }
                if let Some(dir) = &out.plot {
                    lab::charts::write_all(report, &dir.join(&report.workload))?;
                }
            }
            if let Some(dir) = out.json.as_ref().or(out.plot.as_ref()) {
                eprintln!("wrote the reports under {}", dir.display());
            }
            Ok(())
        }
        Command::Bench { suite: None, args } => {
            let (workload, opts, out) = args.into_options()?;
            out.check()?;
            let run_once = workload.run_once();
            let report = lab::run_matrix(workload.name(), &opts, run_once)?;
            emit(&report, &out)
        }
        Command::Compare { fs, args } => {
            let (workload, opts, out) = args.into_options()?;
            out.check()?;
            let fs = fs
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(compare::kernel::Fs::parse)
                .collect::<Result<Vec<_>>>()?;
            let report = compare::run(workload.name(), workload.run_once(), &fs, &opts)?;
            emit(&report, &out)
        }
        Command::Replay {
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
        } => {
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
            let outputs = Outputs { json, plot };
            outputs.check()?;
            if let Some(path) = &dump_files {
                writable_file("--dump-files", path)?;
            }
            let (report, odd, trace) = replay::run(&replay::ReplayOptions {
                trace: &trace,
                dev,
                blocks,
                group_blocks,
                block_size,
                policies,
                limit,
                without,
                dump_files,
            })?;
            eprintln!(
                "{} lines, {} events, {} requests replayed",
                trace.lines,
                trace.events.len(),
                odd.requests
            );
            if trace.malformed > 0 {
                eprintln!("{} malformed lines, for example:", trace.malformed);
                for l in &trace.malformed_examples {
                    eprintln!("  {l}");
                }
            }
            for (what, n) in [
                (
                    "frees of blocks the trace never allocated",
                    odd.frees_of_unseen_blocks,
                ),
                (
                    "requests over blocks already mapped",
                    odd.requests_over_mapped_blocks,
                ),
                ("decisions without a request", odd.decisions_without_request),
            ] {
                if n > 0 {
                    eprintln!("{n} {what}");
                }
            }
            emit(&report, &outputs)
        }
        Command::Capture { dev, out, command } => {
            let lines = replay::capture::capture(&dev, &command, &out)?;
            eprintln!("wrote {} ({lines} trace lines)", out.display());
            Ok(())
        }
        Command::Mkfs {
            path,
            size,
            block_size,
            group_blocks,
            journal_size,
            force,
        } => {
            use extalloc::device::{Device, FileDevice};
            // Everything is checked before the target is touched.
            let journal_bytes = lab::parse_size(&journal_size).context("--journal-size")?;
            let bytes = match &size {
                Some(s) => lab::parse_size(s).context("--size")?,
                None => FileDevice::open_read_only(&path)
                    .with_context(|| format!("{}: give --size to create it", path.display()))?
                    .size(),
            };
            let blocks = bytes / u64::from(block_size);
            let geometry =
                extalloc::Geometry::new(block_size, group_blocks, blocks).with_context(|| {
                    format!(
                        "{}: {bytes} bytes make {blocks} blocks of {block_size} bytes",
                        path.display()
                    )
                })?;
            let journal_blocks = journal_bytes.div_ceil(u64::from(block_size));
            extalloc::format::Superblock::layout(&geometry, journal_blocks, [0; 16])
                .with_context(|| format!("{}: --journal-size {journal_size}", path.display()))?;
            let existed = path.exists();
            if existed && !force {
                refuse_overwrite(&path)?;
            }
            let dev = match size {
                Some(_) => FileDevice::create(&path, bytes)?,
                None => FileDevice::open(&path)?,
            };
            let sb = match extalloc::format::mkfs(&dev, &geometry, journal_blocks, rand::random()) {
                Ok(sb) => sb,
                Err(e) => {
                    // Never leave a half-made file behind.
                    if !existed {
                        let _ = std::fs::remove_file(&path);
                    }
                    return Err(e).with_context(|| format!("{}: mkfs", path.display()));
                }
            };
            println!(
                "{}: {} blocks of {} bytes, {} groups, metadata in blocks 0..{}, journal {} blocks",
                path.display(),
                sb.blocks_count,
                sb.block_size,
                sb.groups(),
                sb.metadata_end(),
                sb.journal_blocks
            );
            Ok(())
        }
        Command::OpenBench {
            path,
            size,
            group_blocks,
            records,
        } => {
            let bytes = lab::parse_size(&size)?;
            let open = lab::open_bench::open_big(&path, bytes, group_blocks)?;
            let mut rows = Vec::new();
            for n in records.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let n: u64 = n
                    .parse()
                    .with_context(|| format!("--records: {n:?} is not a count"))?;
                eprintln!("recovery: {n} records...");
                rows.push(lab::open_bench::recovery(&path, n)?);
            }
            print!("{}", lab::open_bench::markdown(&open, &rows));
            Ok(())
        }
        Command::CommitBench {
            path,
            threads,
            seconds,
            payload,
        } => {
            anyhow::ensure!(
                seconds > 0.0 && seconds.is_finite(),
                "--seconds must be positive"
            );
            let threads = lab::parse_threads(&threads)?;
            let rows = lab::commit_bench::run(&path, &threads, seconds, payload)?;
            print!("{}", lab::commit_bench::markdown(&path, &rows));
            Ok(())
        }
        Command::Torture {
            crashes,
            seed,
            threads,
            json,
        } => {
            anyhow::ensure!((1..=64).contains(&threads), "--threads must be 1 to 64");
            let out = torture::run(crashes, seed, threads)?;
            let text = serde_json::to_string(&out)?;
            println!("{text}");
            if let Some(path) = json {
                std::fs::write(&path, text + "\n")
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            anyhow::ensure!(
                out.lost == 0 && out.leaked == 0 && out.double_allocated == 0,
                "torture found {} lost, {} leaked, {} doubly allocated blocks",
                out.lost,
                out.leaked,
                out.double_allocated
            );
            Ok(())
        }
        Command::Fsck { path, json } => {
            let dev = extalloc::device::FileDevice::open_read_only(&path)?;
            let r = extalloc::fsck::check(&dev).with_context(|| format!("{}", path.display()))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "{}: {} blocks, {} groups, {} free; superblocks: primary {}, backup {}; \
                     journal: {} records to replay{}",
                    path.display(),
                    r.blocks,
                    r.groups,
                    r.free_blocks,
                    if r.primary_superblock_ok {
                        "ok"
                    } else {
                        "DAMAGED"
                    },
                    if r.backup_superblock_ok {
                        "ok"
                    } else {
                        "DAMAGED"
                    },
                    r.journal_records,
                    if r.checkpoint_interrupted {
                        " (a checkpoint was interrupted: open repairs it)"
                    } else {
                        ""
                    }
                );
                for p in &r.problems {
                    println!("problem: {p}");
                }
            }
            anyhow::ensure!(r.clean(), "{} problems found", r.problems.len());
            Ok(())
        }
        Command::Info { path, groups } => {
            let dev = extalloc::device::FileDevice::open_read_only(&path)?;
            let sb = extalloc::format::read_superblock(&dev)
                .with_context(|| format!("{}", path.display()))?;
            let bs = u64::from(sb.block_size);
            println!(
                "{}: extalloc format {}, {} blocks of {bs} bytes ({:.1} GiB), {} groups of {} \
                 blocks",
                path.display(),
                extalloc::format::VERSION,
                sb.blocks_count,
                (sb.blocks_count * bs) as f64 / f64::from(1u32 << 30),
                sb.groups(),
                sb.group_blocks
            );
            println!(
                "metadata in blocks 0..{} (journal {} blocks from block {}), backup superblock \
                 at {}; journal tail at byte {} (sequence {}); generation {}{}",
                sb.metadata_end(),
                sb.journal_blocks,
                sb.journal_start,
                sb.backup_block(),
                sb.journal_tail,
                sb.journal_tail_seq,
                sb.generation,
                if sb.state & extalloc::format::STATE_CHECKPOINTING != 0 {
                    "; a checkpoint was interrupted (open repairs it)"
                } else {
                    ""
                }
            );
            if !groups {
                // The descriptors only: one read of the table, no bitmap.
                let descs = extalloc::format::read_descriptors(&dev, &sb)?;
                let (mut free, mut uninit, mut bad) = (0u64, 0u64, 0u64);
                for d in &descs {
                    match d {
                        Ok(d) => {
                            free += u64::from(d.free_blocks);
                            uninit +=
                                u64::from(d.flags & extalloc::format::DESC_BITMAP_UNINIT != 0);
                        }
                        Err(_) => bad += 1,
                    }
                }
                println!(
                    "{} groups, {free} free blocks ({uninit} groups never written), {bad} \
                     corrupt descriptors (from the descriptors; --groups checks every bitmap)",
                    sb.groups()
                );
                return Ok(());
            }
            let mut free = 0u64;
            let mut corrupt = 0u64;
            for g in 0..sb.groups() {
                match extalloc::format::read_group(&dev, &sb, g) {
                    Ok((desc, _)) => {
                        free += u64::from(desc.free_blocks);
                        println!(
                            "group {g}: {} free, largest order {:?}, tag {}",
                            desc.free_blocks, desc.largest_order, desc.class_tag
                        );
                    }
                    Err(e) => {
                        corrupt += 1;
                        println!("group {g}: {e}");
                    }
                }
            }
            println!(
                "{} groups, {free} free blocks, {corrupt} corrupt groups",
                sb.groups()
            );
            Ok(())
        }
        Command::Report { json, out } => {
            let text = std::fs::read_to_string(&json)
                .with_context(|| format!("reading {}", json.display()))?;
            let report: lab::report::Report = serde_json::from_str(&text)
                .with_context(|| format!("{}: not a bench report", json.display()))?;
            anyhow::ensure!(
                report.schema == "extalloc-bench/1",
                "{}: schema '{}', expected extalloc-bench/1",
                json.display(),
                report.schema
            );
            for path in lab::charts::write_all(&report, &out)? {
                println!("wrote {}", path.display());
            }
            Ok(())
        }
    }
}

impl BenchArgs {
    /// Checks the options and resolves the workload's defaults.
    fn into_options(self) -> Result<(Workload, LabOptions, Outputs)> {
        let workload = self
            .workload
            .context("a workload is required (or, for bench, --suite quick)")?;
        self.into_options_for(workload)
    }

    /// The options with `workload`'s defaults.
    fn into_options_for(self, workload: Workload) -> Result<(Workload, LabOptions, Outputs)> {
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
            fill,
            trace,
            block_size,
            group_blocks,
            commit_ms,
            seed,
            json,
            plot,
            device,
        } = self;
        {
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
            if device.is_some() {
                anyhow::ensure!(
                    matches!(
                        workload,
                        Workload::Fallocate2 | Workload::Fallocate3 | Workload::Frag
                    ),
                    "--device runs fallocate2, fallocate3 and frag (the journaled store does \
                     not record files and preallocations)"
                );
            }
            anyhow::ensure!(
                seconds > 0.0 && seconds.is_finite(),
                "--seconds must be positive"
            );
            anyhow::ensure!(repeat >= 1, "--repeat must be at least 1");
            let mut opts = LabOptions {
                threads: lab::parse_threads(
                    threads.as_deref().unwrap_or(workload.default_threads()),
                )?,
                policies: policy
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
                trace: trace.clone(),
                block_size,
                group_blocks,
                commit_ms,
                seed,
                device,
                prefill,
            };
            anyhow::ensure!(!opts.policies.is_empty(), "--policy is empty");
            if matches!(workload, Workload::Replay) {
                anyhow::ensure!(
                    opts.trace.is_some(),
                    "bench replay needs --trace PATH (e.g. traces/git-checkout.trace.txt.gz)"
                );
                // One thread per traced task: the run reports how many.
                opts.threads = vec![1];
            }
            anyhow::ensure!(writes >= 1, "--writes must be at least 1");
            if file_size.is_some() {
                anyhow::ensure!(
                    opts.file_bytes >= u64::from(block_size),
                    "--file-size must be at least one block ({block_size} bytes)"
                );
            }
            anyhow::ensure!(
                (1..=1 << 20).contains(&seq_burst),
                "--seq-burst must be from 1 to 1048576"
            );
            Ok((workload, opts, Outputs { json, plot }))
        }
    }
}

impl Workload {
    fn run_once(self) -> lab::RunOnce {
        match self {
            Workload::Fallocate2 => lab::fallocate2::run_once,
            Workload::Fallocate3 => lab::fallocate3::run_once,
            Workload::SparseWrites => lab::sparse_writes::run_once,
            Workload::RandomFill => lab::random_fill::run_once,
            Workload::SmallFiles => lab::small_files::run_once,
            Workload::AppendVsFallocate => lab::append_vs_fallocate::run_once,
            Workload::SizeClassEdge => lab::size_class_edge::run_once,
            Workload::Frag => lab::frag::run_once,
            Workload::Replay => replay::bench::run_once,
        }
    }
}

/// Refuses to make a file system over `path` when it holds an extalloc device or other
/// data (a non-empty file, a block device whose first MiB is not all zeros).
fn refuse_overwrite(path: &std::path::Path) -> Result<()> {
    use std::io::Read;
    let meta = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
    anyhow::ensure!(
        !meta.is_dir(),
        "{}: is a directory; give a file or a block device",
        path.display()
    );
    let mut head = vec![0u8; 1 << 20];
    let mut f = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    let mut n = 0;
    while n < head.len() {
        match f.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }
    let head = &head[..n];
    if head.starts_with(&extalloc::format::MAGIC.to_le_bytes()) {
        anyhow::bail!(
            "{}: already an extalloc device; mkfs would discard everything on it \
             (give --force to do so)",
            path.display()
        );
    }
    let has_data = if meta.is_file() {
        meta.len() > 0
    } else {
        head.iter().any(|&b| b != 0)
    };
    anyhow::ensure!(
        !has_data,
        "{}: holds data ({} bytes) and is not an extalloc device; give --force to overwrite it",
        path.display(),
        if meta.is_file() { meta.len() } else { n as u64 }
    );
    Ok(())
}

/// Where a run's results go besides stdout.
struct Outputs {
    json: Option<std::path::PathBuf>,
    plot: Option<std::path::PathBuf>,
}

impl Outputs {
    /// Before any work: `--json` names a file that can be written, `--plot` a directory
    /// (made now). A run of minutes must not fail at its end on a mistyped path.
    fn check(&self) -> Result<()> {
        if let Some(path) = &self.json {
            writable_file("--json", path)?;
        }
        if let Some(dir) = &self.plot {
            ready_dir("--plot", dir)?;
        }
        Ok(())
    }

    /// The same for the suite, whose `--json` is a directory too.
    fn check_dirs(&self) -> Result<()> {
        for (flag, dir) in [("--json", &self.json), ("--plot", &self.plot)] {
            if let Some(dir) = dir {
                ready_dir(flag, dir)?;
            }
        }
        Ok(())
    }
}

/// `path` can be created or replaced: its directory exists and it is not a directory.
fn writable_file(flag: &str, path: &std::path::Path) -> Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    anyhow::ensure!(
        parent.is_dir(),
        "{flag} {}: the directory {} does not exist (create it first)",
        path.display(),
        parent.display()
    );
    anyhow::ensure!(
        !path.is_dir(),
        "{flag} {}: is a directory; give a file name",
        path.display()
    );
    let meta = std::fs::metadata(parent)
        .with_context(|| format!("{flag} {}: reading {}", path.display(), parent.display()))?;
    anyhow::ensure!(
        !meta.permissions().readonly(),
        "{flag} {}: the directory {} is read-only",
        path.display(),
        parent.display()
    );
    Ok(())
}

/// Makes directory `dir` (and its parents) now, or says why it cannot.
fn ready_dir(flag: &str, dir: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("{flag} {}: cannot create the directory", dir.display()))
}

/// Prints the tables, writes the JSON report and the charts.
fn emit(report: &lab::report::Report, out: &Outputs) -> Result<()> {
    print!("{}", lab::report::markdown(report));
    if let Some(dir) = &out.plot {
        for path in lab::charts::write_all(report, dir)? {
            eprintln!("wrote {}", path.display());
        }
    }
    if let Some(path) = &out.json {
        let text = serde_json::to_string_pretty(report)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
