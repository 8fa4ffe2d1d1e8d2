//! `extalloc mount`: open a device's volume, mount its file system through FUSE, serve it
//! until `umount` or a signal, then unmount cleanly.
//!
//! Data structures: [`MountOptions`]; the served [`Fs`] is shared between the session's
//! threads, the background commit ([`Committer`]) and this function, which gets it back
//! whole once the session has ended and the committer has stopped; the signal thread
//! (`Ending`, `ending.rs`) holds it weakly.
//!
//! Invariant: the volume is opened before the mount point is mounted on (so a busy or
//! foreign device never leaves a mount behind) and closed only after the session and the
//! committer have stopped (no request or commit can reach a closed volume). The store's
//! lock on the device makes a second mount of the same device fail; it is released when
//! the volume is closed, which `extalloc umount` waits for.
//!
//! Lock order: none here.

use crate::commit::Committer;
use crate::ending::Ending;
use crate::fs::{Fs, MountReport};
use crate::fuse::FuseFs;
use crate::mountinfo;
use extalloc::alloc::Policy;
use extalloc::disk::device::{Device, FenceDevice, FileDevice, OverlayDevice};
use extalloc::volume::Volume;
use extalloc::writeback::WritebackOptions;
use extalloc_fuse_transport::{MountSpec, Serving, Session};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What to mount and how.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// The extalloc device (a file or block device made by `extalloc mkfs`).
    pub device: PathBuf,
    /// An existing directory to mount on.
    pub mountpoint: PathBuf,
    /// Threads serving kernel requests.
    pub threads: usize,
    /// The dirty cache and writeback contexts.
    pub writeback: WritebackOptions,
    /// The allocation policy.
    pub policy: Policy,
    /// How often the background commit syncs the file system ([`Committer`]); zero: never
    /// (only `fsync` and unmount commit).
    pub commit_interval: Duration,
    /// Serve read-only: the device is opened to read, under a memory overlay that takes
    /// the journal's recovery, mount's repairs and everything else the volume writes, so
    /// nothing reaches the device; the kernel refuses every change (`EROFS`).
    pub read_only: bool,
    /// The mount point's flags beside `ro`.
    pub flags: MountFlags,
    /// The share of the kernel's dirty page threshold the mount may hold, in percent
    /// (`bdi.rs`): 100 as a kernel file system, 1 as FUSE's strict default.
    pub kernel_dirty_ratio: u32,
    /// Which FUSE transport serves the mount (`docs/mount.md`, "The FUSE transport").
    pub transport: Transport,
    /// How long a thread serving `/dev/fuse` polls for the next request before it sleeps
    /// (zero: it sleeps at once); one thread at a time, yielding its CPU between reads,
    /// backing off after a miss (`docs/mount.md`, "Round trips"). Not used with io_uring.
    pub poll: Duration,
    /// Directory read-ahead (`fs/dirahead.rs`): a reader walking a listed directory's
    /// files has the next ones advised to the device.
    pub dir_readahead: bool,
    /// Clean files the volume keeps in memory beyond those it must keep, (an eighth as
    /// many: [`crate::fs::NODE_CACHE_SHARE`]) nodes the file system keeps beyond those
    /// something other than the kernel holds ([`Fs::trim_nodes`]), and (256 bytes a file:
    /// [`crate::fs::DIR_CACHE_BYTES_PER_FILE`]) entries of directories not used since the
    /// last sync ([`Fs::shelve_dirs`]); the others are read back when named
    /// ([`extalloc::volume::DEFAULT_FILE_CACHE`]).
    pub file_cache: usize,
}

/// Which FUSE transport a mount serves through (`docs/mount.md`, "The FUSE transport").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Transport {
    /// FUSE over io_uring where the kernel offers it (Linux 6.14+ with the fuse module's
    /// `enable_uring` set before the mount), else `/dev/fuse`, with no word: the default,
    /// since the rings cost the same CPU per request or less and answered namespace calls
    /// 1.1-3.2x as fast idle and 1.3-2.4x on busy CPUs (docs/results.md).
    #[default]
    Auto,
    /// FUSE over io_uring; where the kernel does not offer it, the mount says so and
    /// serves through `/dev/fuse`.
    IoUring,
    /// `/dev/fuse` only (`read(2)` and `writev(2)`), even where the rings are offered.
    DevFuse,
}

/// `extalloc mount --poll-us`'s default, in microseconds (`docs/mount.md`, "Round trips").
pub const DEFAULT_POLL_US: u64 = 50;

/// Entries of each CPU's io_uring queue: requests a queue's thread can have handed to it
/// at once (one is served at a time; the rest wait in the ring instead of the kernel).
const URING_DEPTH: usize = 4;

/// Mount flags the kernel applies to the mount point (mount(8)'s `nosuid`, `nodev`,
/// `noexec`, `noatime`); the defaults are ext4's: suid, dev, exec, relatime.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MountFlags {
    /// Set-user-id and set-group-id bits are ignored on exec.
    pub nosuid: bool,
    /// Device nodes cannot be opened.
    pub nodev: bool,
    /// Files cannot be executed.
    pub noexec: bool,
    /// Reads never update atime.
    pub noatime: bool,
    /// `sync`: every change is durable before it is answered (`fs/syncmode.rs`).
    pub sync: bool,
    /// `dirsync`: every namespace change is durable before it is answered.
    pub dirsync: bool,
    /// `norecovery` (with read-only): a volume whose journal needs recovery is served from
    /// a write-protected device all the same (replayed into memory only); without it such
    /// a mount is refused, as ext4 refuses it.
    pub norecovery: bool,
}

/// Opens the device, mounts, calls `ready` once the file system is served, and serves it
/// until it is unmounted (`umount`, `fusermount3 -u`, or SIGTERM, SIGINT or SIGHUP to
/// this process, which end the session even when the mount is busy or copied into another
/// mount namespace: `ending.rs`); then writes everything back and closes the volume.
pub fn serve(opts: &MountOptions, ready: impl FnOnce(&MountReport)) -> Result<(), String> {
    let dev_name = opts.device.display().to_string();
    let mountpoint = opts
        .mountpoint
        .canonicalize()
        .map_err(|e| format!("mount point {}: {e}", opts.mountpoint.display()))?;
    if !mountpoint.is_dir() {
        return Err(format!(
            "mount point {} is not a directory",
            mountpoint.display()
        ));
    }
    let (fs, report) = open_fs(opts, &dev_name)?;
    // The canonical path: `extalloc umount` finds the device from the mount's source.
    let source = opts
        .device
        .canonicalize()
        .map_err(|e| format!("{dev_name}: {e}"))?;
    let spec = spec(&source.display().to_string(), opts);
    let fuse = Arc::new(FuseFs::new(fs.clone(), &mountpoint));
    let notifier = fuse.notifier_slot();
    let mut session = match Session::mount(&mountpoint, &spec) {
        Ok(s) => s,
        Err(e) => {
            let _ = close(fs, opts.read_only);
            return Err(format!(
                "cannot mount {dev_name} on {}: {e} (is /dev/fuse there, and are you root or \
                 is fusermount3 installed?)",
                mountpoint.display()
            ));
        }
    };
    // Set before any request is served? Requests may come first; until then a cleared
    // set-id bit shows in the kernel's cache for at most the attribute timeout.
    let _ = notifier.set(session.notifier());
    let ended = Arc::new(AtomicBool::new(false));
    let started = mountinfo::find(&mountpoint)
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))
        .and_then(|m| {
            let m = m.ok_or("the new mount is not in /proc/self/mountinfo")?;
            tune_writeback(&fs, m.dev, opts);
            let ending = Ending {
                mountpoint: mountpoint.clone(),
                connection: m.connection(),
                fs: Arc::downgrade(&fs),
                ended: ended.clone(),
            };
            watch_signals(ending)?;
            // Read-only: nothing to commit (the overlay would only grow); the caches are
            // still trimmed.
            let interval = match opts.read_only {
                true => None,
                false => Some(opts.commit_interval).filter(|i| !i.is_zero()),
            };
            start_committer(&fs, interval)
        });
    let committer = match started {
        Ok(c) => c,
        Err(e) => {
            let _ = session.unmount();
            drop(session);
            let _ = close(fs, opts.read_only);
            return Err(e);
        }
    };
    // Ready once FUSE_INIT is answered: the mount then serves (and a caller that turned on
    // io_uring for this mount may turn it off again).
    let served = session.run(fuse, serving(opts), || ready(&report));
    ended.store(true, Ordering::Release);
    drop(committer);
    let closed = close(fs, opts.read_only);
    served.map_err(|e| format!("the FUSE session failed: {e}"))?;
    closed
}

/// How the session serves: threads, transport, polling.
fn serving(opts: &MountOptions) -> Serving {
    Serving {
        threads: opts.threads.max(1),
        uring: (opts.transport != Transport::DevFuse).then_some(URING_DEPTH),
        uring_said: opts.transport == Transport::IoUring,
        poll: opts.poll,
    }
}

/// Opens the device's volume and mounts its file system (nothing is mounted yet).
/// Returns to the system the heap the mount's scan let go (its maps of every inode):
/// glibc keeps freed heap memory for reuse, and the scan's maps, freed when it ends,
/// would stay resident for the daemon's life (at 1M inodes, 114 MiB of it).
fn give_back_scan_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointer and only releases free memory of the heap.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The kernel's writeback limits for the mount on device `dev` (`bdi.rs`), and the rules
/// near full that follow from them (`fs/headroom.rs`): the margin under which opens for
/// writing are direct, capped at what the kernel may hold dirty, and the dirty cap that
/// shrinks with the room (only where the bdi could be set, and not read-only).
fn tune_writeback(fs: &Fs, dev: (u32, u32), opts: &MountOptions) {
    let applied = match crate::bdi::set_dirty_ratio(dev, opts.kernel_dirty_ratio) {
        Ok(()) => true,
        Err(e) => {
            log::warn!("the kernel keeps FUSE's 1 % dirty limit for this mount: {e}");
            false
        }
    };
    let block_size = fs.volume().volume().block_size() as u32;
    if let Some(bound) = crate::bdi::dirty_bound(opts.kernel_dirty_ratio, applied) {
        fs.headroom().cap_margin(bound, block_size);
        if applied && !opts.read_only {
            let bdi = crate::bdi::Bdi::of(dev);
            fs.headroom()
                .enable_cap(bdi, opts.kernel_dirty_ratio, bound);
            fs.headroom().retune(fs.room_bytes());
        }
    }
    let margin = fs.headroom().margin_blocks() * u64::from(block_size);
    log::info!(
        "opens for writing bypass the kernel's cache once less than {} MiB is left to data \
         (fs/headroom.rs)",
        margin >> 20
    );
}

fn open_fs(opts: &MountOptions, dev_name: &str) -> Result<(Arc<Fs>, MountReport), String> {
    // Read-write, the device sits behind a fence a shutdown closes (`fs/shutdown.rs`).
    let mut fence = None;
    let dev: Arc<dyn Device> = if opts.read_only {
        let dev =
            FileDevice::open_read_only(&opts.device).map_err(|e| device_error(dev_name, e))?;
        Arc::new(OverlayDevice::new(Arc::new(dev)))
    } else {
        let dev = FileDevice::open(&opts.device).map_err(|e| device_error(dev_name, e))?;
        let f = Arc::new(FenceDevice::new(Arc::new(dev)));
        fence = Some(f.clone());
        f
    };
    // Read-only, the volume is salvaged into the overlay: a damaged journal, table entry or
    // map segment still lets every file that survived be copied off before a repair.
    let (vol, salvage) = if opts.read_only {
        Volume::open_salvaging(dev, opts.policy.clone())
    } else {
        Volume::open(dev, opts.policy.clone()).map(|v| (v, Default::default()))
    }
    .map_err(|e| device_error(dev_name, e))?;
    vol.set_file_cache(opts.file_cache);
    let needs_recovery = vol.store().unclean_close().is_some();
    if opts.read_only && !opts.flags.norecovery && needs_recovery && write_protected(&opts.device) {
        return Err(format!(
            "cannot mount {dev_name} read-only: it was not closed cleanly and its journal \
             needs recovery, which a write-protected device cannot take (mount it with -o \
             ro,norecovery to replay the journal into memory only)"
        ));
    }
    let mounted = if opts.read_only {
        Fs::mount_read_only(vol, opts.writeback)
    } else {
        Fs::mount(vol, opts.writeback)
    };
    let (fs, mut report) = mounted.map_err(|e| format!("{dev_name}: {e}"))?;
    report.salvage = salvage;
    give_back_scan_memory();
    fs.set_dir_readahead(opts.dir_readahead);
    fs.set_node_cache(opts.file_cache / crate::fs::NODE_CACHE_SHARE);
    fs.set_dir_cache(
        opts.file_cache
            .saturating_mul(crate::fs::DIR_CACHE_BYTES_PER_FILE),
    );
    if let Some(f) = fence {
        fs.attach_fence(f)
            .expect("a file system just mounted has no fence yet");
    }
    Ok((Arc::new(fs), report))
}

/// The threads serving kernel requests when none are asked for: one per CPU this process
/// may run on, at most 8. A request is a short burst of work between two context switches,
/// so threads beyond the cores only add switches: on 2 cores, fs_mark ran 1.5x faster with
/// 2 threads than with 4 (docs/mount.md "Round trips").
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().clamp(1, 8))
}

/// What to mount: the device's path as the source, the `MS_*` flags of the options, the
/// kernel's permission checks (`default_permissions`) for everyone (`allow_other`).
fn spec(source: &str, opts: &MountOptions) -> MountSpec {
    use rustix::mount::MountFlags;
    let f = opts.flags;
    let flag = |on: bool, bit: MountFlags| if on { bit } else { MountFlags::empty() };
    MountSpec {
        source: source.to_string(),
        subtype: "extalloc".into(),
        flags: flag(opts.read_only, MountFlags::RDONLY)
            | flag(f.nosuid, MountFlags::NOSUID)
            | flag(f.nodev, MountFlags::NODEV)
            | flag(f.noexec, MountFlags::NOEXEC)
            | flag(f.noatime, MountFlags::NOATIME)
            | flag(f.sync, MountFlags::SYNCHRONOUS)
            | flag(f.dirsync, MountFlags::DIRSYNC),
        options: vec!["default_permissions", "allow_other"],
    }
}

/// A thread that ends the session on SIGTERM, SIGINT or SIGHUP (each signal tries again).
fn watch_signals(ending: Ending) -> Result<(), String> {
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ])
    .map_err(|e| format!("cannot catch signals: {e}"))?;
    std::thread::Builder::new()
        .name("extalloc-signals".into())
        .spawn(move || {
            for _ in signals.forever() {
                ending.end(&log_line);
            }
        })
        .map_err(|e| format!("cannot start the signal thread: {e}"))?;
    Ok(())
}

/// A line of the daemon's log (its stderr): never panics when stderr is closed or full,
/// as `eprintln!` would, ending the thread that had something to say.
fn log_line(m: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "extalloc mount: {m}");
}

/// The background thread: commits every `every` (`None`: never), trims the caches between.
fn start_committer(fs: &Arc<Fs>, every: Option<Duration>) -> Result<Committer, String> {
    Committer::start(fs.clone(), every, log_line)
        .map_err(|e| format!("cannot start the background commit thread: {e}"))
}

/// Closes the file system once the session has let go of it. Read-only, nothing is
/// written back: the overlay that took the recovery and repairs goes with the process.
fn close(fs: Arc<Fs>, read_only: bool) -> Result<(), String> {
    match Arc::try_unwrap(fs) {
        Ok(fs) if read_only => {
            drop(fs);
            Ok(())
        }
        // The process exits next: its memory is not freed piece by piece (`Fs::unmount_for_exit`).
        Ok(fs) => fs.unmount_for_exit(),
        Err(fs) => {
            // A session thread still holds it: write everything back at least.
            fs.sync().map_err(|e| format!("cannot sync: {e}"))?;
            Err(
                "the file system is still in use after the session ended; synced, not closed"
                    .into(),
            )
        }
    }
}

/// Whether `path` is a block device the kernel holds read-only (`blockdev --setro`).
fn write_protected(path: &std::path::Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    if !file
        .metadata()
        .is_ok_and(|m| m.file_type().is_block_device())
    {
        return false;
    }
    // BLKROGET (`linux/fs.h`: _IO(0x12, 94)): the block device's read-only flag.
    const BLKROGET: rustix::ioctl::Opcode = 0x125e;
    // SAFETY: BLKROGET writes one int, which the getter provides.
    let ro = unsafe {
        rustix::ioctl::ioctl(
            &file,
            rustix::ioctl::Getter::<BLKROGET, rustix::ffi::c_int>::new(),
        )
    };
    ro.is_ok_and(|ro| ro != 0)
}

/// A device that cannot be opened, said so that the user knows what to do.
fn device_error(dev: &str, e: extalloc::Error) -> String {
    match e {
        extalloc::Error::DeviceBusy { .. } => {
            match crate::mountinfo::mounted_from(Path::new(dev)).first() {
                Some(at) => format!(
                    "{dev} is mounted on {} already: `extalloc umount {}` first ({e})",
                    at.display(),
                    at.display()
                ),
                None => format!(
                    "{dev} is in use by another process (an extalloc command, or a daemon still \
                 writing back after a plain `umount`): {e}"
                ),
            }
        }
        extalloc::Error::NotExtalloc(_) => format!(
            "{dev} is not an extalloc device ({e}); if it is meant to be one, `extalloc mkfs \
             {dev} --size SIZE` makes it (and refuses a file that holds data unless given \
             --force)"
        ),
        other => format!("{dev}: {other}"),
    }
}
