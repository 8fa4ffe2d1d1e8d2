//! `extalloc`: the allocation lab.
//!
//! `extalloc bench fallocate2` runs a workload against each policy and thread count on the
//! embedded memory device and prints a Markdown table (and writes JSON with `--json`).
//! `extalloc compare WORKLOAD --fs ext4,xfs,btrfs` runs it on the kernel's file systems too.
//! `extalloc policies` lists the presets and the keys a policy spec may set.

mod cli;

use cli::output::emit;
use extalloc_cli::{compare, lab, replay};

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};

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
    /// seed 003's fio job on a buffered volume: --files files, each in its own directory,
    /// 4 KiB writes (--pattern), fsync, sync; per --wb-contexts x --wb-affinity
    Writeback,
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
            Workload::Writeback => "writeback",
        }
    }

    fn default_policies(self) -> &'static str {
        match self {
            // Buffered writes run on a volume, which takes extalloc's policies.
            Workload::Writeback => "extalloc",
            _ => "ext4-base,ext4-2025,extalloc",
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
            // The kernel reference figures' file system.
            Workload::Writeback => "10GiB",
            _ => "16GiB",
        }
    }

    fn default_file_size(self) -> &'static str {
        match self {
            Workload::RandomFill => "5GiB",
            Workload::Frag | Workload::Writeback => "256MiB",
            _ => "4GiB",
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum Suite {
    /// Every workload, small, three repetitions: about a minute and a half on 2 cores.
    Quick,
}

#[derive(Subcommand)]
enum Command {
    /// Run a workload for every policy x thread count and print a results table.
    Bench {
        /// Instead of one workload: a tour of them all (`quick`: about a minute and a half
        /// on 2 cores), with a progress bar (plain lines when stderr is not a terminal), a
        /// verdict per workload and a summary. `--json` and `--plot` then name directories
        /// (one report per workload; `--plot DIR/index.md` links every chart).
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
    /// Run a fio job file (or `fsmark`) on whole file systems: the kernel's (loop devices
    /// in /dev/shm) and an extalloc mount of the same size; MiB/s, extents per file and
    /// free space after (root).
    CompareFs(cli::compare_fs::CompareFsArgs),
    /// Replay a kernel ext4 allocation trace (tracefs text, plain or .gz) through policies
    /// and compare the layout and free space with what the kernel decided.
    Replay(cli::commands::ReplayArgs),
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
    Mkfs(cli::device::MkfsArgs),
    /// Group commit on a real file: commits per second at each thread count.
    #[command(group(clap::ArgGroup::new("store").args(["handles", "shared"])))]
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
        /// Commit through the store's per-caller transactions (each: begin, allocate one
        /// block, free the one allocated before, commit) instead of the bare journal.
        #[arg(long)]
        handles: bool,
        /// The same work through the store's shared transaction (allocate, free, commit: a
        /// commit takes every thread's operations so far).
        #[arg(long)]
        shared: bool,
        /// With --handles or --shared: each commit records only the payload (no allocation,
        /// no free), so the run measures what the transaction itself adds to group commit.
        #[arg(long, requires = "store")]
        payload_only: bool,
    },
    /// What mounting costs: open time of a large sparse device (bytes read, bitmaps loaded),
    /// then recovery time against the number of journal records to replay.
    OpenBench(cli::commands::OpenBenchArgs),
    /// Random transactions with crashes on a fault-injecting device, checked after every
    /// recovery against a model. Exits non-zero on any loss, leak or double allocation.
    Torture(cli::commands::TortureArgs),
    /// Check an extalloc device without changing it (the default, `-n`): superblocks,
    /// every group's checksums and counts, metadata marked used, the journal's records
    /// against the home state, who owns every block, the file system's names and link
    /// counts. With `--repair` (`-y`), repair the file system, then check it again.
    /// Exits as e2fsck: 0 clean, 1 problems fixed (`--repair`), 4 problems left
    /// uncorrected, 8 an operational error (no such file, the device in use, not an
    /// extalloc device, I/O).
    Fsck {
        path: std::path::PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Repair: rebuild bitmaps and descriptors from the files' maps, give damaged
        /// inodes new ones, link names lost to damage into /lost+found, fix link counts,
        /// then check again. Every change is printed. Needs the device unmounted.
        #[arg(short = 'y', long, conflicts_with = "no_changes")]
        repair: bool,
        /// Only check, change nothing (the default; e2fsck's `-n`).
        #[arg(short = 'n')]
        no_changes: bool,
    },
    /// Mount the file system on an extalloc device through FUSE (an empty device gets a new
    /// one); returns once it is served unless --foreground. Unmount with `extalloc umount`
    /// (or `umount`, or SIGTERM to the daemon).
    Mount(cli::mount::MountArgs),
    /// Unmount an extalloc mount and wait until its daemon has written everything back and
    /// released the device (a plain `umount` returns before that).
    Umount(cli::mount::UmountArgs),
    /// Print the superblock and the free space of each group of an extalloc device.
    Info {
        path: std::path::PathBuf,
        /// Read and check every group's bitmap and print each group (slow on large devices).
        #[arg(long)]
        groups: bool,
        /// Also the volume's files: how many, their bytes and extents.
        #[arg(long)]
        files: bool,
    },
    /// Copy a host file into the volume on DEVICE through its write path; prints the new
    /// file's id. Refuses a file system made by `extalloc mount` (mount it instead).
    Put {
        device: std::path::PathBuf,
        host_file: std::path::PathBuf,
    },
    /// Remove file ID from the volume on DEVICE (its blocks are freed); refuses a file
    /// system made by `extalloc mount`, as put and get do.
    Rm { device: std::path::PathBuf, id: u64 },
    /// Copy file ID of the volume on DEVICE out to HOST_FILE (the device is only read).
    Get {
        device: std::path::PathBuf,
        id: u64,
        host_file: std::path::PathBuf,
    },
    /// List the files of the volume on DEVICE: id, size, extents, blocks, name (on a file
    /// system made by `extalloc mount`: path and kind); --extents maps each (the device is
    /// only read).
    Ls {
        device: std::path::PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Also each file's mapped extents (logical block, physical blocks, unwritten).
        #[arg(long)]
        extents: bool,
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
    /// The workload (bench: or --suite; checked when the options are read, since
    /// `compare` shares these arguments and has no --suite).
    #[arg(value_enum)]
    workload: Option<Workload>,
    /// Thread counts, comma-separated (`--jobs` is the same) [default: 1,2,4,8; frag 16].
    #[arg(long, visible_alias = "jobs")]
    threads: Option<String>,
    /// Policies: presets or specs (`preset:key=value:...`), comma-separated [default:
    /// ext4-base,ext4-2025,extalloc; writeback extalloc].
    #[arg(long)]
    policy: Option<String>,
    /// Seconds per run (time-bound workloads; an upper bound for small-files).
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Repetitions of the whole matrix, interleaved; the tables show the median with the
    /// min-max beside it, and the verdict flags a lead within that noise (1: one run each,
    /// no spread).
    #[arg(long, default_value_t = 3)]
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
    let cli = Cli::parse();
    // Every command but the mount's server writes to stdout only to report: a closed
    // pipe (`extalloc ls IMG | head`) ends it quietly, as it ends `ls` or `cat`.
    if !matches!(&cli.command, Command::Mount(m) if m.foreground) {
        cli::output::end_quietly_on_closed_stdout();
    }
    if let Command::Fsck {
        path, json, repair, ..
    } = &cli.command
    {
        std::process::exit(match repair {
            true => cli::fsck::fsck_repair(path, *json),
            false => cli::fsck::fsck(path, *json),
        });
    }
    if let Err(e) = run(cli) {
        eprintln!("error: {}", cli::output::error_text(&e));
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Policies => {
            print_policies();
            Ok(())
        }
        Command::Bench { suite, args } => bench(suite, args),
        Command::Compare { fs, args } => compare(&fs, args),
        Command::CompareFs(args) => cli::compare_fs::compare_fs(&args),
        Command::Replay(args) => cli::commands::replay(args),
        Command::Capture { dev, out, command } => capture(&dev, &out, &command),
        Command::Mkfs(args) => cli::device::mkfs(&args),
        Command::OpenBench(args) => cli::commands::open_bench(&args),
        Command::CommitBench {
            path,
            threads,
            seconds,
            payload,
            handles,
            shared,
            payload_only,
        } => {
            use lab::commit_bench::StoreMode;
            let mode = match (handles, shared) {
                (true, _) => Some(StoreMode::Handles),
                (_, true) => Some(StoreMode::Shared),
                _ => None,
            };
            commit_bench(&path, &threads, seconds, payload, mode, !payload_only)
        }
        Command::Torture(args) => cli::commands::torture_command(&args),
        Command::Fsck { .. } => unreachable!("fsck sets its own exit code (main)"),
        Command::Mount(args) => cli::mount::mount(&args),
        Command::Umount(args) => cli::mount::umount(&args),
        Command::Info {
            path,
            groups,
            files,
        } => cli::device::info(&path, groups, files),
        Command::Put { device, host_file } => cli::volume::put(&device, &host_file),
        Command::Get {
            device,
            id,
            host_file,
        } => cli::volume::get(&device, id, &host_file),
        Command::Rm { device, id } => cli::volume::rm(&device, id),
        Command::Ls {
            device,
            json,
            extents,
        } => cli::volume::ls(&device, json, extents),
        Command::Report { json, out } => cli::commands::report(&json, &out),
    }
}

/// `extalloc policies`: the presets and the keys a spec may set.
fn print_policies() {
    println!("presets: {}", extalloc::PRESETS.join(", "));
    println!("keys (spec: preset:key=value:key=value; lists: spec,spec):");
    for (key, values) in extalloc::Policy::keys() {
        println!("  {key:<26} {values}");
    }
}

/// `extalloc bench`: one workload's matrix, or the suite.
fn bench(suite: Option<Suite>, args: BenchArgs) -> Result<()> {
    match suite {
        Some(Suite::Quick) => {
            let (_, opts, out) = args.into_options_for(Workload::Fallocate2)?;
            cli::commands::quick_suite(&opts, &out)
        }
        None if matches!(args.workload, Some(Workload::Writeback)) => {
            let wb = args.writeback_params()?;
            let (_, opts, out) = args.into_options()?;
            out.check()?;
            let report = lab::writeback::run_matrix(&opts, &wb, &mut lab::StderrProgress)?;
            emit(&report, &out)
        }
        None => {
            let (workload, opts, out) = args.into_options()?;
            out.check()?;
            let on_volume: Option<(cli::commands::InMemory, cli::commands::OnVolume)> =
                match workload {
                    Workload::SmallFiles => {
                        Some((lab::small_files::run_once, lab::small_files::run_volume))
                    }
                    Workload::SparseWrites => {
                        Some((lab::sparse_writes::run_once, lab::sparse_writes::run_volume))
                    }
                    Workload::RandomFill => {
                        Some((lab::random_fill::run_once, lab::random_fill::run_volume))
                    }
                    Workload::AppendVsFallocate => Some((
                        lab::append_vs_fallocate::run_once,
                        lab::append_vs_fallocate::run_volume,
                    )),
                    Workload::SizeClassEdge => Some((
                        lab::size_class_edge::run_once,
                        lab::size_class_edge::run_volume,
                    )),
                    Workload::Frag => Some((lab::frag::run_once, lab::frag::run_volume)),
                    _ => None,
                };
            if let (Some((memory, volume)), Some(_)) = (on_volume, &opts.device) {
                return cli::commands::file_workload_volume(workload.name(), &opts, memory, volume);
            }
            let report = lab::run_matrix(workload.name(), &opts, workload.run_once())?;
            emit(&report, &out)
        }
    }
}

/// `extalloc compare`: the workload on our policies and on the kernel file systems `fs`
/// (comma-separated).
fn compare(fs: &str, args: BenchArgs) -> Result<()> {
    let wb = match args.workload {
        Some(Workload::Writeback) => Some(args.writeback_params()?),
        _ => None,
    };
    let (workload, opts, out) = args.into_options()?;
    out.check()?;
    let fs = fs
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(compare::kernel::Fs::parse)
        .collect::<Result<Vec<_>>>()?;
    if let Some(wb) = wb {
        let report = compare::writeback::run(&fs, &opts, &wb)?;
        return emit(&report, &out);
    }
    let report = compare::run(workload.name(), workload.run_once(), &fs, &opts)?;
    emit(&report, &out)
}

/// `extalloc capture`: the trace of `command` on `dev`, written to `out`.
fn capture(dev: &std::path::Path, out: &std::path::Path, command: &[String]) -> Result<()> {
    let lines = replay::capture::capture(dev, command, out)?;
    eprintln!("wrote {} ({lines} trace lines)", out.display());
    Ok(())
}

/// `extalloc commit-bench`: the table of commits per second at each thread count.
fn commit_bench(
    path: &std::path::Path,
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
            Workload::Writeback => unreachable!("writeback runs its own matrix (bench)"),
        }
    }
}
