//! `extalloc umount MOUNTPOINT`: unmount, then wait until the daemon has released the
//! device. A plain `umount` returns as soon as the kernel has let go of the mount: the
//! kernel sends a FUSE mount (not `fuseblk`) no `DESTROY`, so the daemon learns of the
//! unmount only when its next read of `/dev/fuse` fails, and only then writes back its
//! cache, checkpoints and closes the device. Until then `extalloc fsck` and a new mount
//! find the device in use.
//!
//! Data structures: none kept; the device is the mount's source in
//! `/proc/self/mountinfo`, and the daemon is the holder of the device's exclusive lock in
//! `/proc/locks`. Invariant: nothing is unmounted unless the mount point is a FUSE mount
//! whose source is a device held under an exclusive lock (an extalloc mount's daemon).
//!
//! Lock order: none.

use crate::mountinfo;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// After this long with the device still held, the daemon is asked to end its session
/// (SIGTERM) if its FUSE connection is still there (the mount lives on in another mount
/// namespace); if the connection is gone, it is only slow to close, and is waited for.
const NUDGE_AFTER: Duration = Duration::from_secs(1);

/// What an unmount did.
#[derive(Debug, Clone)]
pub struct Unmounted {
    /// The device the mount served.
    pub device: PathBuf,
    /// How long the device stayed held after the kernel's unmount.
    pub waited: Duration,
    /// Whether the daemon had to be sent SIGTERM to end its session.
    pub nudged: bool,
    /// Why the daemon did not close the device cleanly, if it did not: the device is
    /// still marked in use once released (its final write-back or checkpoint failed, or
    /// it was killed), so what it held since its last commit may be lost; the next mount
    /// recovers every commit.
    pub unclean: Option<String>,
}

/// Unmounts the extalloc mount at `mountpoint` and waits up to `timeout` for its daemon to
/// release the device; `say` gets progress worth telling the user.
pub fn unmount(
    mountpoint: &Path,
    timeout: Duration,
    say: &dyn Fn(&str),
) -> Result<Unmounted, String> {
    let mp = mountpoint
        .canonicalize()
        .map_err(|e| format!("{}: {e}", mountpoint.display()))?;
    let (device, read_only, connection) = device_of(&mp)?;
    let pid = holder(&device);
    umount(&mp, pid)?;
    let start = Instant::now();
    let (mut nudged, mut closing_said) = (false, false);
    while busy(&device)? {
        let waited = start.elapsed();
        if waited >= timeout {
            return Err(format!(
                "{} is still in use {timeout:?} after {} was unmounted: {} has not \
                 released it (its --log says why); `extalloc fsck` and a new mount refuse \
                 the device until it does",
                device.display(),
                mp.display(),
                daemon(pid)
            ));
        }
        if let (Some(p), false, false) = (pid, nudged, closing_said) {
            if waited >= NUDGE_AFTER && connection_gone(connection) {
                // The kernel let go of the connection everywhere: the daemon's session
                // has ended and it is only slow to close (its final write-back and
                // checkpoint); a SIGTERM would change nothing.
                say(&format!(
                    "{} is still held {NUDGE_AFTER:?} after the unmount: {} is writing back \
                     and closing it",
                    device.display(),
                    daemon(pid)
                ));
                closing_said = true;
            } else if waited >= NUDGE_AFTER {
                say(&format!(
                    "{} is still held {NUDGE_AFTER:?} after the unmount (the mount lives on \
                     in another mount namespace): asking {} to end its session",
                    device.display(),
                    daemon(pid)
                ));
                // A process gone meanwhile (ESRCH) has nothing left to end.
                let pid = i32::try_from(p)
                    .ok()
                    .and_then(rustix::process::Pid::from_raw);
                if let Some(pid) = pid {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                }
                nudged = true;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let waited = start.elapsed();
    // A read-only mount writes nothing: a mark left by an earlier owner is not its doing.
    let unclean = (!read_only)
        .then(|| unclean_close(&device, start + timeout))
        .flatten();
    Ok(Unmounted {
        device,
        waited,
        nudged,
        unclean,
    })
}

/// Why the released `device` was not closed cleanly, if it was not: a read-write daemon
/// clears the in-use mark at a clean close, and leaves it set when its final write-back or
/// checkpoint failed (or it died). A read-only mount never sets it.
///
/// A loop device's daemon holds the backing file's lock too, and lets go of it a moment
/// after the device's: until `deadline`, a device still busy is waited for (the mount
/// tests met that window while the daemon freed its memory).
fn unclean_close(device: &Path, deadline: Instant) -> Option<String> {
    use extalloc::disk::{device::FileDevice, format};
    let dev = loop {
        match FileDevice::open_read_only(device) {
            Ok(d) => break d,
            Err(e) if e.kind() == extalloc::ErrorKind::Busy && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Some(format!("cannot read its superblock to check: {e}")),
        }
    };
    match format::read_superblock(&dev) {
        Ok(sb) if sb.state & format::STATE_IN_USE != 0 => Some(
            "the daemon did not close it cleanly (its final write-back or checkpoint \
             failed, or it was killed: its --log says why); what it held since its last \
             commit may be lost, and the next mount recovers every commit"
                .into(),
        ),
        Ok(_) => None,
        Err(e) => Some(format!("its superblock does not read: {e}")),
    }
}

/// The device an extalloc mount at `mp` serves, and whether the mount is read-only;
/// anything else is refused.
fn device_of(mp: &Path) -> Result<(PathBuf, bool, u32), String> {
    let m = mountinfo::find(mp)
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?
        .ok_or_else(|| format!("nothing is mounted on {}", mp.display()))?;
    let not_ours = |why: String| {
        format!(
            "{} is not an extalloc mount ({why}); nothing was unmounted (use `umount`)",
            mp.display()
        )
    };
    if !m.is_fuse() {
        return Err(not_ours(format!("its type is {}", m.fstype)));
    }
    let device = PathBuf::from(&m.source);
    if !device.exists() {
        return Err(not_ours(format!("its source {} is not a file", m.source)));
    }
    if !busy(&device)? {
        return Err(not_ours(format!("no daemon holds its source {}", m.source)));
    }
    let read_only = m.options.split(',').any(|o| o == "ro");
    Ok((device, read_only, m.connection()))
}

/// Whether FUSE connection `n` is gone from the kernel: its directory has left
/// `/sys/fs/fuse/connections` while others, or none, remain there with `fusectl` mounted.
/// `false` when that cannot be told (`fusectl` not mounted: the directory is empty).
fn connection_gone(n: u32) -> bool {
    const FUSECTL: &str = "/sys/fs/fuse/connections";
    let mounted = mountinfo::find(Path::new(FUSECTL))
        .ok()
        .flatten()
        .is_some_and(|m| m.fstype == "fusectl");
    mounted && !Path::new(FUSECTL).join(n.to_string()).exists()
}

/// Whether a daemon holds `device` (to write, or to read for a read-only mount): it has
/// not closed it yet.
fn busy(device: &Path) -> Result<bool, String> {
    use rustix::fs::FlockOperation;
    // A probe for any holder, a reader (`mount --read-only`) too: an exclusive try-lock.
    let f = std::fs::File::open(device)
        .map_err(|e| format!("cannot check whether {} is in use: {e}", device.display()))?;
    // The lock goes with the file.
    match rustix::fs::flock(&f, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(false),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(true),
        Err(e) => Err(format!(
            "cannot check whether {} is in use: {}",
            device.display(),
            std::io::Error::from(e)
        )),
    }
}

/// `umount2(mp, 0)`, its errors said with what to do. Refused (`EPERM`: not root), the
/// unmount goes through `fusermount3 -u`, the setuid helper that lets a user unmount a
/// FUSE mount of their own, as a mount made through it is unmounted.
fn umount(mp: &Path, pid: Option<u32>) -> Result<(), String> {
    let Err(e) = rustix::mount::unmount(mp, rustix::mount::UnmountFlags::empty()) else {
        return Ok(());
    };
    if e == rustix::io::Errno::PERM {
        let helper = std::process::Command::new("fusermount3")
            .arg("-u")
            .arg("--")
            .arg(mp)
            .output();
        match helper {
            Ok(out) if out.status.success() => return Ok(()),
            Ok(out) => {
                return Err(format!(
                    "cannot unmount {}: not root, and `fusermount3 -u` refused: {}",
                    mp.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
            // No helper: the error below says to run as root.
            Err(_) => {}
        }
    }
    let e = std::io::Error::from(e);
    Err(match e.raw_os_error() {
        Some(libc::EBUSY) => format!(
            "cannot unmount {}: busy (a process has a file or its working directory there; \
             `fuser -vm {}` lists them): close them, or `kill -TERM` {} to end the mount \
             anyway (it writes everything back first)",
            mp.display(),
            mp.display(),
            daemon(pid)
        ),
        Some(libc::EPERM) => format!("cannot unmount {}: {e} (run as root)", mp.display()),
        _ => format!("cannot unmount {}: {e}", mp.display()),
    })
}

/// The daemon, for messages.
fn daemon(pid: Option<u32>) -> String {
    pid.map_or("the daemon".into(), |p| format!("the daemon (process {p})"))
}

/// The process holding `device`'s `flock` (exclusive, or shared for a read-only mount),
/// from `/proc/locks` (`N: FLOCK ADVISORY WRITE|READ PID MAJOR:MINOR:INODE 0 EOF`, major
/// and minor in hex).
fn holder(device: &Path) -> Option<u32> {
    let meta = std::fs::metadata(device).ok()?;
    let want = (
        u64::from(rustix::fs::major(meta.dev())),
        u64::from(rustix::fs::minor(meta.dev())),
        meta.ino(),
    );
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        let t: Vec<&str> = line.split_whitespace().collect();
        if t.get(1) != Some(&"FLOCK") || !matches!(t.get(3), Some(&"WRITE" | &"READ")) {
            return None;
        }
        let mut id = t.get(5)?.split(':');
        let major = u64::from_str_radix(id.next()?, 16).ok()?;
        let minor = u64::from_str_radix(id.next()?, 16).ok()?;
        let ino = id.next()?.parse().ok()?;
        ((major, minor, ino) == want).then(|| t[4].parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use extalloc::disk::device::FileDevice;

    #[test]
    fn the_holder_of_a_locked_device_is_this_process() {
        let dir = std::env::temp_dir().join(format!("extalloc-umount-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("dev.img");
        let dev = FileDevice::create(&path, 1 << 20).unwrap();
        assert_eq!(busy(&path), Ok(true));
        assert_eq!(holder(&path), Some(std::process::id()));
        drop(dev);
        assert_eq!(busy(&path), Ok(false));
        assert_eq!(holder(&path), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_directory_that_is_no_mount_is_refused_untouched() {
        let e = unmount(&std::env::temp_dir(), Duration::from_secs(1), &|_| {}).unwrap_err();
        assert!(
            e.contains("nothing is mounted") || e.contains("not an extalloc mount"),
            "{e}"
        );
    }
}
