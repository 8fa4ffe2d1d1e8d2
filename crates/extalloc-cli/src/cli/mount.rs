//! `extalloc mount DEVICE MOUNTPOINT`: the file system of `extalloc-fuse`, in the
//! foreground or detached; `extalloc umount MOUNTPOINT`, which waits for the device to be
//! released; and the namespace part of `extalloc fsck`.
//!
//! Detached, the command runs itself again in the foreground in a new process group with
//! `EXTALLOC_MOUNT_READY` set; that child prints one line on its standard output (`ready`
//! or the error) once the mount is served or has failed, and the parent waits for that
//! line, so `extalloc mount` returns only when the mount point works (or says why not).

use anyhow::{bail, Context, Result};
use extalloc::Policy;
use extalloc_fuse::fs::MountReport;
use extalloc_fuse::mount::{serve, MountFlags, MountOptions, Transport};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Set in a detached child: print the ready line on stdout.
const READY_ENV: &str = "EXTALLOC_MOUNT_READY";

/// Options of `extalloc mount`.
#[derive(clap::Args, Debug)]
pub struct MountArgs {
    /// The extalloc device (made by `extalloc mkfs`); an empty one gets a new file system.
    pub device: PathBuf,
    /// An existing directory to mount on.
    pub mountpoint: PathBuf,
    /// Stay in the foreground until unmounted (otherwise return once mounted).
    #[arg(long)]
    pub foreground: bool,
    /// Threads serving kernel requests (0: one per CPU, at most 8; measured in
    /// docs/mount.md "Round trips": more threads than cores only add context switches).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// The share of the kernel's dirty page threshold the mount may hold, in percent (1 to
    /// 100): 100 as a kernel file system, 1 as FUSE's strict default (the kernel then sends
    /// random writes one page a request; docs/mount.md "Round trips").
    #[arg(long, default_value_t = 100)]
    pub kernel_dirty_ratio: u32,
    /// Serve through FUSE over io_uring, and say so where the kernel does not offer it
    /// (then through /dev/fuse). Without this or --no-io-uring the mount uses the rings
    /// wherever the kernel offers them (Linux 6.14+, with
    /// /sys/module/fuse/parameters/enable_uring set to 1 before mounting) and /dev/fuse
    /// elsewhere, without a word (docs/mount.md, "The FUSE transport").
    #[arg(long, conflicts_with = "no_io_uring")]
    pub io_uring: bool,
    /// Serve through /dev/fuse even where the kernel offers FUSE over io_uring.
    #[arg(long)]
    pub no_io_uring: bool,
    /// Microseconds a serving thread keeps reading /dev/fuse for the next request before it
    /// sleeps (0: it sleeps at once). One thread at a time polls, yielding its CPU to any
    /// task that wants it, and a poll that finds nothing backs off (docs/mount.md, "Round
    /// trips").
    #[arg(long, default_value_t = extalloc_fuse::mount::DEFAULT_POLL_US)]
    pub poll_us: u64,
    /// Do not read ahead across a directory's files (on by default: a reader walking a
    /// listed directory, as `grep -r` or `tar c`, has the next files' data advised to the
    /// device; docs/mount.md, "Directory read-ahead").
    #[arg(long)]
    pub no_dir_readahead: bool,
    /// The dirty cache's hard limit (writers wait above it).
    #[arg(long, default_value = "256MiB")]
    pub dirty_limit: String,
    /// Clean files the volume keeps in memory (about 0.5 KiB each), an eighth as many
    /// inodes the file system keeps that only the kernel holds (about 0.2 KiB each), and
    /// 256 bytes a file of entries of directories not used since the last commit (about
    /// 21 bytes an entry); the others are read back when named. Files changed since the last checkpoint, or holding
    /// preallocations, open files and directories always stay (docs/format.md,
    /// "On-demand files").
    #[arg(long, default_value_t = extalloc::volume::DEFAULT_FILE_CACHE)]
    pub file_cache: usize,
    /// Writeback contexts (0: one per group range, min(groups, CPUs x 2)).
    #[arg(long, default_value_t = 0)]
    pub wb_contexts: usize,
    /// Allocation policy (a preset or a spec, as `bench --policy`).
    #[arg(long, default_value = "extalloc")]
    pub policy: String,
    /// Where a detached mount writes its messages (default: nowhere).
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Seconds between background commits (everything written back and committed, so a
    /// killed daemon loses at most about this much); 0: only fsync and unmount commit.
    #[arg(long, default_value_t = 5)]
    pub commit_interval: u64,
    /// Serve the file system read-only and write nothing to the device, not even the
    /// journal's recovery: the device is opened to read (a writer elsewhere refuses it)
    /// under a memory overlay, so a damaged file system can be copied off before repair.
    #[arg(long)]
    pub read_only: bool,
    /// Mount options as mount(8) passes them, comma-separated: `ro` (as --read-only),
    /// `rw`, `nosuid`/`suid`, `nodev`/`dev`, `noexec`/`exec`, `noatime`/`atime`/`relatime`,
    /// `lazytime` (times are always written lazily), `sync` (every change durable before
    /// it is answered), `async`, `dirsync` (every namespace change durable before it is
    /// answered), `norecovery`/`noload` (with `ro`: what a read-only mount does, the journal
    /// replayed into memory only), `defaults`; of two opposites the last wins. Others are
    /// refused.
    #[arg(short = 'o', value_delimiter = ',')]
    pub options: Vec<String>,
}

impl MountArgs {
    /// The transport --io-uring and --no-io-uring ask for (neither: the rings wherever the
    /// kernel offers them).
    fn transport(&self) -> Transport {
        match (self.io_uring, self.no_io_uring) {
            (true, _) => Transport::IoUring,
            (false, true) => Transport::DevFuse,
            (false, false) => Transport::Auto,
        }
    }

    /// --read-only and the flags of `-o` (an `ro` or `rw` there wins over --read-only).
    fn flags(&self) -> Result<(bool, MountFlags)> {
        let (mut ro, mut f) = (self.read_only, MountFlags::default());
        let mut norecovery = false;
        for o in &self.options {
            match o.as_str() {
                "ro" | "rw" => ro = o == "ro",
                "nosuid" | "suid" => f.nosuid = o == "nosuid",
                "nodev" | "dev" => f.nodev = o == "nodev",
                "noexec" | "exec" => f.noexec = o == "noexec",
                "noatime" | "atime" | "relatime" => f.noatime = o == "noatime",
                // Times are lazy already: kept in memory, written at fsync, the last close,
                // the background commit, `sync MOUNTPOINT` and unmount (docs/mount.md).
                "defaults" | "lazytime" | "nolazytime" | "" => {}
                "sync" | "async" => f.sync = o == "sync",
                "dirsync" => f.dirsync = true,
                // ext4's: mount read-only without replaying the journal onto the device,
                // which is what a read-only mount does here (it replays into memory).
                "norecovery" | "noload" => norecovery = true,
                "strictatime" | "nodiratime" => {
                    bail!("-o {o}: not supported by extalloc mount (atime is relatime or noatime)")
                }
                other => bail!(
                    "-o {other}: unknown mount option (extalloc mount takes ro, rw, nosuid, \
                     suid, nodev, dev, noexec, exec, noatime, atime, relatime, lazytime, sync, \
                     async, dirsync, norecovery, defaults)"
                ),
            }
        }
        f.norecovery = norecovery;
        if norecovery && !ro {
            bail!(
                "-o norecovery needs ro (as ext4's): a read-only mount writes nothing to the \
                 device, not even the journal's recovery"
            );
        }
        Ok((ro, f))
    }

    /// The arguments that give the same flags again (for the detached child).
    fn flag_args(&self) -> Result<Vec<String>> {
        let (ro, f) = self.flags()?;
        let on = [
            (ro, "ro"),
            (f.nosuid, "nosuid"),
            (f.nodev, "nodev"),
            (f.noexec, "noexec"),
            (f.noatime, "noatime"),
            (f.sync, "sync"),
            (f.dirsync, "dirsync"),
            (f.norecovery, "norecovery"),
        ];
        let list: Vec<&str> = on.iter().filter(|(b, _)| *b).map(|(_, n)| *n).collect();
        Ok(match list.is_empty() {
            true => Vec::new(),
            false => vec!["-o".into(), list.join(",")],
        })
    }
}

/// Options of `extalloc umount`.
#[derive(clap::Args, Debug)]
pub struct UmountArgs {
    /// Where an extalloc file system is mounted.
    pub mountpoint: PathBuf,
    /// Seconds to wait for the daemon to write back and release the device.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
}

/// `extalloc mount`.
pub fn mount(args: &MountArgs) -> Result<()> {
    let opts = options(args)?;
    if !args.foreground || std::env::var_os(READY_ENV).is_none() {
        check_mountpoint(&args.mountpoint)?;
    }
    if !args.foreground {
        return detach(args);
    }
    let announce = std::env::var_os(READY_ENV).is_some();
    let result = serve(&opts, |r| report(&opts, r, announce));
    if let Err(e) = &result {
        if announce {
            super::output::say_out(&format!("error: {e}"));
        }
    }
    result.map_err(anyhow::Error::msg)
}

/// Refuses a mount point something is mounted on already (a second mount would stack on
/// it and hide the first); warns, as `mount` does with `-o nonempty`, when the directory
/// holds files, which the mount hides until it is unmounted.
fn check_mountpoint(mp: &std::path::Path) -> Result<()> {
    let canon = mp
        .canonicalize()
        .with_context(|| format!("mount point {}", mp.display()))?;
    anyhow::ensure!(
        canon.is_dir(),
        "mount point {}: not a directory",
        mp.display()
    );
    if let Some(m) = extalloc_fuse::mountinfo::find(&canon)
        .context("cannot read /proc/self/mountinfo to check the mount point")?
    {
        anyhow::bail!(
            "{} is a mount point already ({} of type {}): unmount it first (`extalloc umount` \
             or `umount`), or choose another directory",
            mp.display(),
            m.source,
            m.fstype
        );
    }
    let busy = std::fs::read_dir(&canon)
        .with_context(|| format!("mount point {}", mp.display()))?
        .next()
        .is_some();
    if busy {
        super::output::say_err(&format!(
            "extalloc mount: warning: {} is not empty; its files are hidden until the file \
             system is unmounted",
            mp.display()
        ));
    }
    Ok(())
}

fn options(args: &MountArgs) -> Result<MountOptions> {
    anyhow::ensure!(
        (1..=100).contains(&args.kernel_dirty_ratio),
        "--kernel-dirty-ratio must be a percentage from 1 to 100"
    );
    anyhow::ensure!(
        (0..=64).contains(&args.threads),
        "--threads must be from 0 (one per CPU) to 64"
    );
    anyhow::ensure!(
        args.poll_us <= 10_000,
        "--poll-us must be from 0 (no polling) to 10000 (10 ms)"
    );
    let writeback = extalloc::writeback::WritebackOptions {
        dirty_limit_bytes: extalloc::parse_size(&args.dirty_limit).context("--dirty-limit")?,
        contexts: args.wb_contexts,
        ..Default::default()
    };
    Ok(MountOptions {
        device: args.device.clone(),
        mountpoint: args.mountpoint.clone(),
        threads: match args.threads {
            0 => extalloc_fuse::mount::default_threads(),
            n => n,
        },
        writeback,
        policy: Policy::parse(&args.policy).context("--policy")?,
        commit_interval: std::time::Duration::from_secs(args.commit_interval),
        kernel_dirty_ratio: args.kernel_dirty_ratio,
        transport: args.transport(),
        poll: std::time::Duration::from_micros(args.poll_us),
        dir_readahead: !args.no_dir_readahead,
        file_cache: args.file_cache,
        read_only: args.flags()?.0,
        flags: args.flags()?.1,
    })
}

/// `extalloc umount`: unmount, then wait until the daemon has released the device, so that
/// `extalloc fsck` or a new mount can follow at once.
pub fn umount(args: &UmountArgs) -> Result<()> {
    let timeout = std::time::Duration::from_secs(args.timeout);
    let done = extalloc_fuse::umount::unmount(&args.mountpoint, timeout, &|m| {
        eprintln!("extalloc umount: {m}")
    })
    .map_err(anyhow::Error::msg)?;
    println!(
        "unmounted {}; {} released {} ms after the unmount{}",
        args.mountpoint.display(),
        done.device.display(),
        done.waited.as_millis(),
        if done.nudged {
            " (the daemon was asked to end its session)"
        } else {
            ""
        }
    );
    if let Some(why) = done.unclean {
        anyhow::bail!("{}: {why}", done.device.display());
    }
    Ok(())
}

fn report(opts: &MountOptions, r: &MountReport, announce: bool) {
    let what = if r.created {
        "made a new file system".to_string()
    } else if !r.salvage.clean() {
        "damaged: read-only, salvaged in memory; `extalloc fsck --repair` repairs it".into()
    } else if r.crash_covered && r.corrupt_groups.is_empty() {
        // Every inode a crash leaves unnamed was a pending file, which the open removed.
        "not closed cleanly; nothing left to repair".to_string()
    } else if r.repaired.clean() && r.corrupt_groups.is_empty() {
        "clean".to_string()
    } else if r.repaired.clean() {
        format!("{} groups held corrupt", r.corrupt_groups.len())
    } else {
        format!("repaired {}", r.repaired.summary())
    };
    let counts = match r.scanned {
        true => format!(
            "{} directories, {} files",
            r.repaired.dirs, r.repaired.files
        ),
        // After a clean unmount only the root was read: the rest is read when named.
        false => format!("{} inodes", r.inodes),
    };
    let line = format!(
        "mounted {} on {} ({what}; {counts})",
        opts.device.display(),
        opts.mountpoint.display(),
    );
    super::output::say_err(&line);
    for l in extalloc_fuse::repair::salvage_lines(&r.salvage) {
        super::output::say_err(&format!("  salvaged: {l}"));
    }
    for p in r
        .repaired
        .bad_entries
        .iter()
        .chain(&r.repaired.link_counts)
        .chain(&r.repaired.logs)
    {
        super::output::say_err(&format!("  repaired: {p}"));
    }
    if !r.repaired.lost_found.is_empty() {
        super::output::say_err(&format!(
            "  linked into /lost+found (damage had cut them from their names): inodes {:?}",
            r.repaired.lost_found
        ));
    }
    if !r.corrupt_groups.is_empty() {
        super::output::say_err(&format!(
            "  groups {:?} failed their checks: held out of allocation, their files still \
             read; `extalloc fsck {}` says what is damaged",
            r.corrupt_groups,
            opts.device.display()
        ));
    }
    if announce {
        super::output::say_out(&format!("ready: {line}"));
    }
}

/// Runs the mount in a detached child and waits for its ready line.
fn detach(args: &MountArgs) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the extalloc executable")?;
    let stderr = match &args.log {
        Some(p) => Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("{}", p.display()))?,
        ),
        None => Stdio::null(),
    };
    let mut cmd = Command::new(exe);
    cmd.arg("mount")
        .arg("--foreground")
        .args(["--threads", &args.threads.to_string()])
        .args(["--dirty-limit", &args.dirty_limit])
        .args(["--file-cache", &args.file_cache.to_string()])
        .args(["--wb-contexts", &args.wb_contexts.to_string()])
        .args(["--policy", &args.policy])
        .args(["--commit-interval", &args.commit_interval.to_string()])
        .args(["--kernel-dirty-ratio", &args.kernel_dirty_ratio.to_string()])
        .args(args.io_uring.then_some("--io-uring"))
        .args(args.no_io_uring.then_some("--no-io-uring"))
        .args(["--poll-us", &args.poll_us.to_string()])
        .args(args.no_dir_readahead.then_some("--no-dir-readahead"))
        .args(args.flag_args()?)
        .arg(&args.device)
        .arg(&args.mountpoint)
        .env(READY_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .process_group(0);
    let mut child = cmd.spawn().context("cannot start the mount process")?;
    let out = child
        .stdout
        .take()
        .context("no pipe from the mount process")?;
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line)?;
    match line.trim_end().strip_prefix("ready: ") {
        Some(msg) => {
            println!("{msg} (process {})", child.id());
            Ok(())
        }
        None => {
            let status = child.wait()?;
            let msg = line
                .trim_end()
                .strip_prefix("error: ")
                .unwrap_or(line.trim_end());
            if msg.is_empty() {
                bail!("the mount process exited ({status}) without a word");
            }
            bail!("{msg}")
        }
    }
}

/// Whether `vol` holds a file system (an inode in file 1).
pub fn is_fs(vol: &extalloc::volume::Volume) -> bool {
    vol.attr(extalloc_fuse::fs::ROOT)
        .ok()
        .and_then(|a| extalloc_fuse::inode::Inode::decode(&a))
        .is_some()
}

/// Each inode's path and kind when `vol` holds a file system, for `ls`.
/// `e` from opening `device`, with where it is mounted when it is busy because a mount
/// serves it (a mounted volume is read through its mount point; the commands that read the
/// device wait for `extalloc umount`).
pub fn busy(device: &std::path::Path, e: extalloc::Error) -> anyhow::Error {
    let at = match &e {
        extalloc::Error::DeviceBusy { .. } => extalloc_fuse::mountinfo::mounted_from(device),
        _ => Vec::new(),
    };
    match at.first() {
        Some(at) => anyhow::anyhow!(
            "{}: mounted on {}: read it there, or `extalloc umount {}` first ({e})",
            device.display(),
            at.display(),
            at.display()
        ),
        None => anyhow::Error::new(e).context(device.display().to_string()),
    }
}

/// The device on `path`, opened to read, or [`busy`]'s error.
pub fn open_read_only(path: &std::path::Path) -> Result<extalloc::disk::device::FileDevice> {
    extalloc::disk::device::FileDevice::open_read_only(path).map_err(|e| busy(path, e))
}

/// The file system's namespace check for `fsck`, on a read-only view of the volume: `None`
/// when the volume holds no file system (no inode in file 1).
pub fn check_namespace(
    vol: &extalloc::volume::Volume,
) -> Result<Option<extalloc_fuse::fs::NamespaceReport>> {
    if !is_fs(vol) {
        return Ok(None);
    }
    Ok(Some(
        extalloc_fuse::fs::check(vol).map_err(anyhow::Error::msg)?,
    ))
}

/// `fsck`'s text lines for a namespace check.
pub fn print_namespace(n: &extalloc_fuse::fs::NamespaceReport) {
    println!(
        "file system: {} directories, {} files, {} symbolic links, {} others; {}",
        n.dirs,
        n.files,
        n.symlinks,
        n.others,
        n.summary()
    );
    for p in n.bad_entries.iter().chain(&n.link_counts).chain(&n.logs) {
        println!("problem: {p}");
    }
    if !n.orphans.is_empty() {
        println!(
            "problem: orphan inodes, link count 0 (mount removes them): {:?}",
            n.orphans
        );
    }
    if !n.damaged_inodes.is_empty() {
        println!(
            "problem: volume files whose attributes are not an inode (damage; mount refuses, \
             `extalloc fsck --repair` gives each a new inode and keeps its data): {:?}",
            n.damaged_inodes
        );
    }
    if !n.unnamed.is_empty() {
        println!(
            "problem: inodes no name refers to, with links (damage; mount and `fsck --repair` \
             link them into /lost+found as #INODE, with their data): {:?}",
            n.unnamed
        );
    }
}
