//! `extalloc`: the admin tools of extalloc devices (mkfs, mount, fsck, ls, get), the
//! allocation lab and its comparisons with the kernel's file systems.
//!
//! `extalloc bench fallocate2` runs a workload against each policy and thread count on the
//! embedded memory device and prints a Markdown table (and writes JSON with `--json`).
//! `extalloc compare WORKLOAD --fs ext4,xfs,btrfs` runs it on the kernel's file systems too.
//! `extalloc policies` lists the presets and the keys a policy spec may set.
//!
//! This file holds the arguments and the dispatch only: the lab's commands run in
//! `extalloc-lab` (`extalloc_lab::command`; the default feature `lab`, without which the
//! binary is the admin tool alone), the torture in `extalloc-harness`, the admin commands
//! in [`cli`].

mod cli;

use anyhow::Result;
use clap::{Parser, Subcommand};
#[cfg(feature = "lab")]
use cli::options::BenchArgs;
#[cfg(feature = "lab")]
use extalloc_lab::command as lab;

#[derive(Parser)]
#[command(
    name = "extalloc",
    version,
    about = "extalloc: make, mount, check and read extalloc devices, and the allocation lab"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[cfg(feature = "lab")]
#[derive(Clone, Copy, clap::ValueEnum)]
enum Suite {
    /// Every workload, small, three repetitions: about a minute and a half on 2 cores.
    Quick,
}

#[derive(Subcommand)]
enum Command {
    /// Run a workload for every policy x thread count and print a results table.
    #[cfg(feature = "lab")]
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
    #[cfg(feature = "lab")]
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
    #[cfg(feature = "lab")]
    CompareFs(cli::compare_fs::CompareFsArgs),
    /// Replay a kernel ext4 allocation trace (tracefs text, plain or .gz) through policies
    /// and compare the layout and free space with what the kernel decided.
    #[cfg(feature = "lab")]
    Replay(cli::commands::ReplayArgs),
    /// Record ext4's allocation events on one device while a command runs (root), as a
    /// gzip trace that `replay` reads.
    #[cfg(feature = "lab")]
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
    #[cfg(feature = "lab")]
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
    #[cfg(feature = "lab")]
    OpenBench(cli::commands::OpenBenchArgs),
    /// Random transactions with crashes on a fault-injecting device, checked after every
    /// recovery against a model. Exits non-zero on any loss, leak or double allocation.
    Torture(cli::torture::TortureArgs),
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
    /// Copy a host file into the volume on DEVICE; prints the new file's id. Without
    /// --key the file is named after HOST_FILE and streamed in, and a second put of one
    /// name adds a second file; with --key the blob replaces the one KEY named (atomically:
    /// a crash leaves the old or the new). Refuses a file system made by `extalloc mount`
    /// (mount it instead).
    Put {
        /// The volume's device or image (made by `extalloc mkfs`).
        device: std::path::PathBuf,
        /// The host file to copy in.
        host_file: std::path::PathBuf,
        /// Store the file under KEY, replacing the blob KEY named, if any (the host file is
        /// read whole into memory first).
        #[arg(long)]
        key: Option<String>,
    },
    /// Remove FILE from the volume on DEVICE (its blocks are freed): an id, or a name (a
    /// key) as `extalloc ls` prints them, one file's only. Refuses a file system made by `extalloc mount`,
    /// as put does.
    Rm {
        /// The volume's device or image.
        device: std::path::PathBuf,
        /// A file id, or a name (refused when several files have it: give the id).
        file: String,
        /// FILE is a name even if it reads as a number.
        #[arg(long)]
        key: bool,
    },
    /// Copy FILE of the volume on DEVICE out to HOST_FILE (the device is only read): an
    /// id or a name (a key) on a plain volume; on a file system made by `extalloc mount`,
    /// a regular file's path or inode number (as `extalloc ls` prints them).
    Get {
        /// The volume's device or image.
        device: std::path::PathBuf,
        /// A file id or name (the newest file of that name); on a file system, a path or
        /// inode number.
        file: String,
        /// The host file to write (created or truncated).
        host_file: std::path::PathBuf,
        /// FILE is a name even if it reads as a number (plain volumes).
        #[arg(long)]
        key: bool,
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
    #[cfg(feature = "lab")]
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

fn main() {
    let cli = Cli::parse();
    // The mount's daemon logs what it meets (`log` records of the FUSE layer and the file
    // system: a kernel without a feature, a failed write-back) to stderr, which `--log`
    // sends to a file, at `warn` unless RUST_LOG says otherwise. Other commands report for
    // themselves (a torture's injected faults would flood it).
    if matches!(&cli.command, Command::Mount(_)) {
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
            .format_target(true)
            .init();
    }
    // Every command but the mount's server writes to stdout only to report: a closed
    // pipe (`extalloc ls IMG | head`) ends it quietly, as it ends `ls` or `cat`.
    if !matches!(&cli.command, Command::Mount(m) if m.foreground) {
        cli::output::end_quietly_on_closed_stdout();
    } else {
        // The daemon: malloc tuned for a long-lived server, before its first thread.
        cli::output::tune_malloc();
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
        cli::output::say_err(&format!("error: {}", cli::output::error_text(&e)));
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Policies => {
            cli::policies::print_policies();
            Ok(())
        }
        #[cfg(feature = "lab")]
        Command::Bench { suite, args } => bench(suite, args),
        #[cfg(feature = "lab")]
        Command::Compare { fs, args } => lab::compare(&fs, &args.into_run()?),
        #[cfg(feature = "lab")]
        Command::CompareFs(args) => cli::compare_fs::compare_fs(&args),
        #[cfg(feature = "lab")]
        Command::Replay(args) => cli::commands::replay(args),
        #[cfg(feature = "lab")]
        Command::Capture { dev, out, command } => lab::capture(&dev, &out, &command),
        Command::Mkfs(args) => cli::device::mkfs(&args),
        #[cfg(feature = "lab")]
        Command::OpenBench(args) => cli::commands::open_bench(&args),
        #[cfg(feature = "lab")]
        Command::CommitBench {
            path,
            threads,
            seconds,
            payload,
            handles,
            shared,
            payload_only,
        } => {
            use extalloc_lab::lab::commit_bench::StoreMode;
            let mode = match (handles, shared) {
                (true, _) => Some(StoreMode::Handles),
                (_, true) => Some(StoreMode::Shared),
                _ => None,
            };
            lab::commit_bench(&path, &threads, seconds, payload, mode, !payload_only)
        }
        Command::Torture(args) => cli::torture::torture_command(&args),
        Command::Fsck { .. } => unreachable!("fsck sets its own exit code (main)"),
        Command::Mount(args) => cli::mount::mount(&args),
        Command::Umount(args) => cli::mount::umount(&args),
        Command::Info {
            path,
            groups,
            files,
        } => cli::device::info(&path, groups, files),
        Command::Put {
            device,
            host_file,
            key,
        } => cli::volume::put(&device, &host_file, key.as_deref()),
        Command::Get {
            device,
            file,
            host_file,
            key,
        } => cli::volume::get(&device, &file, &host_file, key),
        Command::Rm { device, file, key } => cli::volume::rm(&device, &file, key),
        Command::Ls {
            device,
            json,
            extents,
        } => cli::volume::ls(&device, json, extents),
        #[cfg(feature = "lab")]
        Command::Report { json, out } => lab::report(&json, &out),
    }
}

/// `extalloc bench`: the suite (with fallocate2's defaults under its steps' own options), or
/// one workload.
#[cfg(feature = "lab")]
fn bench(suite: Option<Suite>, args: BenchArgs) -> Result<()> {
    match suite {
        Some(Suite::Quick) => {
            let (_, opts, out) = args
                .seconds_or(extalloc_lab::suite::QUICK_SECONDS)
                .into_options_for(cli::options::suite_base())?;
            lab::quick_suite(&opts, &out)
        }
        None => lab::bench(&args.into_run()?),
    }
}
