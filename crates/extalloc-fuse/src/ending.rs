//! Ending the session on SIGTERM, SIGINT or SIGHUP, even when unmounting cannot end it:
//! files still open, or the mount copied into another mount namespace (`unshare -m`, a
//! service's private mounts), where the kernel keeps the connection alive after this
//! namespace's unmount and a plain `umount` of the mount point fails with `EINVAL`.
//!
//! Steps: (1) while the mount is still this process's to reach, `syncfs` it, so the
//! kernel writes its dirty pages back to the daemon; (2) detach it lazily (`MNT_DETACH`:
//! it leaves the namespace at once, busy or not); (3) wait [`GRACE`] for the session to
//! end by itself (it does when nothing else holds the mount); (4) if it has not, sync the
//! file system (commit what reached the daemon) and abort the FUSE connection through
//! `/sys/fs/fuse/connections/N/abort` (mounting `fusectl` there if needed): the session's
//! threads then read `ENODEV` and the daemon unmounts as after `umount`. Whoever still
//! used the mount gets `ENOTCONN`.
//!
//! Data structures: [`Ending`], what the signal thread needs: the mount point, the
//! connection's number, a weak handle on the file system and the flag the serving thread
//! sets once the session has ended.
//!
//! Invariant: the signal thread holds the file system only while it syncs it (a weak
//! handle otherwise), so the close after the session finds it unshared.
//!
//! Lock order: none here.

use crate::fs::Fs;
use crate::mountinfo;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How long a detached session may go on serving before its connection is aborted.
pub const GRACE: Duration = Duration::from_secs(2);

const FUSECTL: &str = "/sys/fs/fuse/connections";

/// What ending the session needs (see the module documentation).
pub struct Ending {
    /// The mount point, canonical.
    pub mountpoint: PathBuf,
    /// The FUSE connection's number (`/sys/fs/fuse/connections/N`).
    pub connection: u32,
    /// The served file system.
    pub fs: Weak<Fs>,
    /// Set once the session has ended.
    pub ended: Arc<AtomicBool>,
}

impl Ending {
    /// Ends the session (the steps of the module documentation); `log` gets what went
    /// wrong and what was forced.
    pub fn end(&self, log: &dyn Fn(&str)) {
        if self.ended.load(Ordering::Acquire) {
            return;
        }
        if self.still_mounted_here() {
            if let Err(e) = syncfs(&self.mountpoint) {
                log(&format!("syncfs {}: {e}", self.mountpoint.display()));
            }
            if let Err(e) = detach(&self.mountpoint) {
                log(&format!("cannot detach {}: {e}", self.mountpoint.display()));
            }
        }
        if self.wait_ended(GRACE) {
            return;
        }
        log(&format!(
            "the mount is still in use {GRACE:?} after it was detached (open files, or \
             the mount lives on in another mount namespace): syncing and ending FUSE \
             connection {}; its users get ENOTCONN",
            self.connection
        ));
        if let Some(fs) = self.fs.upgrade() {
            if let Err(e) = fs.sync() {
                log(&format!("cannot sync before ending the connection: {e}"));
            }
        }
        if let Err(e) = abort(self.connection) {
            log(&format!(
                "cannot end FUSE connection {}: {e}; the daemon serves on until the \
                 last user lets go (unmount it in the other namespace, or `echo 1 > \
                 {FUSECTL}/{}/abort` once {FUSECTL} is mounted)",
                self.connection, self.connection
            ));
        }
    }

    /// Whether this namespace still has this connection's mount at the mount point.
    fn still_mounted_here(&self) -> bool {
        mountinfo::find(&self.mountpoint)
            .ok()
            .flatten()
            .is_some_and(|e| e.is_fuse() && e.connection() == self.connection)
    }

    fn wait_ended(&self, grace: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < grace {
            if self.ended.load(Ordering::Acquire) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.ended.load(Ordering::Acquire)
    }
}

/// `syncfs` of the file system mounted at `path`: the kernel writes its dirty pages back
/// (to this daemon, whose session threads serve the writes).
fn syncfs(path: &Path) -> std::io::Result<()> {
    let dir = std::fs::File::open(path)?;
    Ok(rustix::fs::syncfs(&dir)?)
}

/// Before a shutdown (`fs/shutdown.rs`): `syncfs` of the mount from a thread of its own,
/// so the kernel hands over what it still holds (dirty pages, and the times its writeback
/// cache keeps: fstests generic/622 found an mtime the shutdown's commit missed), waited
/// for at most [`HAND_OVER_WAIT`]. Other session threads serve what the sync sends; with a single
/// session thread, the one calling this, nothing can, so the wait ends at `wait` and the
/// sync finishes after the shutdown, refused.
pub(crate) fn hand_over(mountpoint: &Path) {
    let wait = HAND_OVER_WAIT;
    let (done, finished) = std::sync::mpsc::channel();
    let path = mountpoint.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("extalloc-syncfs".into())
        .spawn(move || {
            let r = syncfs(&path);
            let _ = done.send(r);
        });
    match spawned.map(|_| finished.recv_timeout(wait)) {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => log::warn!("shutdown: syncfs {}: {e}", mountpoint.display()),
        Ok(Err(_)) => log::warn!(
            "shutdown: syncfs {} still running after {wait:?}: committing without it",
            mountpoint.display()
        ),
        Err(e) => log::warn!("shutdown: cannot start the syncfs thread: {e}"),
    }
}

/// How long a shutdown waits for the kernel to hand over what it holds ([`hand_over`]).
pub const HAND_OVER_WAIT: Duration = Duration::from_secs(5);

/// `umount2(path, MNT_DETACH)`.
fn detach(path: &Path) -> std::io::Result<()> {
    Ok(rustix::mount::unmount(
        path,
        rustix::mount::UnmountFlags::DETACH,
    )?)
}

/// Aborts FUSE connection `n` (mounts `fusectl` first when it is not mounted).
fn abort(n: u32) -> std::io::Result<()> {
    let file = PathBuf::from(format!("{FUSECTL}/{n}/abort"));
    if !file.exists() {
        let mounted = rustix::mount::mount(
            "fusectl",
            FUSECTL,
            "fusectl",
            rustix::mount::MountFlags::empty(),
            None,
        );
        if let Err(e) = mounted {
            let e = std::io::Error::from(e);
            return Err(std::io::Error::new(
                e.kind(),
                format!(
                    "{} is not there and fusectl cannot be mounted on {FUSECTL}: {e}",
                    file.display()
                ),
            ));
        }
    }
    std::fs::write(&file, "1")
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot write {}: {e}", file.display())))
}
