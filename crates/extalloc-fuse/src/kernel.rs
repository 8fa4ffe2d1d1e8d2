//! What the daemon asks of the kernel at `FUSE_INIT` ([`negotiate`]), and what it reads of
//! the mount's flags, which FUSE does not pass ([`MountFlags`]): the atime flags of the
//! mount (`fs/atime.rs`) and the superblock's `sync`/`dirsync` (`fs/syncmode.rs`), from
//! `/proc/self/mountinfo`, at most once a second (a remount may change them).
//!
//! Data structures: [`MountFlags`], the mount point and when its atime and its sync flags
//! were last read (apart: a read's view of the atime flags never waits on a change's read).
//! Invariant: each is read again only once [`RECHECK`] has passed since its last read.
//! Lock order: each `*_checked` lock is a leaf, never held across an [`Fs`] call.

use crate::fs::atime::AtimeMode;
use crate::fs::syncmode::SyncMode;
use crate::fs::Fs;
use extalloc_fuse_transport::{flags as f, Init};
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often the mount's flags are read again.
pub const RECHECK: Duration = Duration::from_secs(1);

/// Asks the kernel for what the file system serves best with, and tells `fs` what it got.
pub(crate) fn negotiate(fs: &Fs, config: &mut Init) {
    config.set_max_write(1 << 20);
    // The kernel gathers small writes in its page cache and sends them in pages (a 4 KiB
    // random write is otherwise one request each); fsync sends them first.
    let _ = config.want(f::WRITEBACK_CACHE);
    // The kernel leaves clearing set-user-id and set-group-id to the daemon and says when a
    // write's caller lacks CAP_FSETID (FUSE_WRITE_KILL_SUIDGID); it also sends a write from
    // such a caller to a set-id file straight through, not via its cache.
    if let Err(missing) = config.want(f::HANDLE_KILLPRIV_V2) {
        log::warn!("the kernel does not offer {missing:#x}: it clears set-id bits itself");
    }
    // File handles (`name_to_handle_at`, NFS export) name a node id and generation (always
    // 0: a volume never hands an inode number out twice). With export support the kernel
    // looks up "." of a node id it no longer holds (after a cache drop, or a remount: inode
    // numbers are the volume's file ids, stable on the device) and ".." for its parent,
    // instead of failing with ESTALE (`Fs::lookup` answers both).
    if let Err(missing) = config.want(f::EXPORT_SUPPORT) {
        log::warn!("the kernel does not offer {missing:#x}: file handles go stale");
    }
    // Lookups and listings of one directory side by side (the namespace lock lets lookups
    // share it); listings carry each entry's attributes (READDIRPLUS), so `ls -l`, `find`
    // and `rm -rf` need no LOOKUP per name, the kernel choosing plus or plain per listing
    // (READDIRPLUS_AUTO: plus while the entries are being looked up).
    let dirs = f::PARALLEL_DIROPS | f::DO_READDIRPLUS | f::READDIRPLUS_AUTO;
    if let Err(missing) = config.want(dirs) {
        log::warn!("the kernel does not offer {missing:#x}: a round trip per name listed");
    }
    // A synchronous file (`chattr +S`, `fs/flags.rs`), and a file opened for writing on a
    // nearly full device (`fs/headroom.rs`), are opened with FOPEN_DIRECT_IO; this lets a
    // program still map them shared. Without it, near-full opens keep the cache.
    match config.want(f::DIRECT_IO_ALLOW_MMAP) {
        Ok(()) => fs.headroom().allow_direct(),
        Err(missing) => log::warn!(
            "the kernel does not offer {missing:#x}: a synchronous file cannot be mapped, \
             and a write past a full device fails only at fsync or close"
        ),
    }
    // Idmapped mounts (`mount --bind -o X-mount.idmap=...`; the mount runs with
    // default_permissions, which the kernel requires for them): the kernel maps ids on the
    // way in and out itself. In exchange it sends the caller's ids only with the requests
    // that make an inode, and none (`replies::NO_ID`) with the rest, idmapped mount or not;
    // the few calls that ask who calls read the process's ids from /proc (`replies::caller`).
    if let Err(missing) = config.want(f::ALLOW_IDMAP) {
        log::warn!("the kernel does not offer {missing:#x}: no idmapped mounts");
    }
    // POSIX ACLs: the kernel enforces them; the daemon keeps them, their mode and their
    // inheritance, and applies the umask itself (FUSE_DONT_MASK; `fs/xattrs.rs`).
    let acl = f::POSIX_ACL | f::DONT_MASK;
    match config.want(acl) {
        Ok(()) => fs.enable_acls(),
        Err(missing) => log::warn!("the kernel does not offer {missing:#x}: no ACLs"),
    }
}

/// The mount's flags as last read (see the module documentation).
pub struct MountFlags {
    mountpoint: PathBuf,
    /// When the atime flags were last read (at a read or a listing).
    atime_checked: Mutex<Option<Instant>>,
    /// When the sync flags were last read (at a change). Apart from the atime flags', so
    /// that changes never make a read wait longer for a remount's atime flags.
    sync_checked: Mutex<Option<Instant>>,
}

impl MountFlags {
    /// Watches the mount at `mountpoint` (canonical).
    pub fn new(mountpoint: &Path) -> MountFlags {
        MountFlags {
            mountpoint: mountpoint.to_path_buf(),
            atime_checked: Mutex::new(None),
            sync_checked: Mutex::new(None),
        }
    }

    /// Reads the atime flags again into `fs` if they are over [`RECHECK`] old.
    pub fn refresh_atime(&self, fs: &Fs) {
        if let Some(e) = self.due(&self.atime_checked) {
            fs.set_atime_mode(AtimeMode::from_options(&e.options));
        }
    }

    /// Reads the sync flags again into `fs` if they are over [`RECHECK`] old.
    pub fn refresh_sync(&self, fs: &Fs) {
        if let Some(e) = self.due(&self.sync_checked) {
            fs.set_sync_mode(SyncMode::from_super_options(&e.super_options));
        }
    }

    /// The mount's entry in the mount table, if `checked` is over [`RECHECK`] old (then it
    /// is now) and the mount is listed.
    fn due(&self, checked: &Mutex<Option<Instant>>) -> Option<crate::mountinfo::MountEntry> {
        {
            let mut checked = checked.lock();
            if checked.is_some_and(|t| t.elapsed() < RECHECK) {
                return None;
            }
            *checked = Some(Instant::now());
        }
        crate::mountinfo::find(&self.mountpoint)
            .map_err(|e| {
                log::warn!(
                    "cannot read /proc/self/mountinfo for the flags of {}: {e} (keeping the \
                     last ones)",
                    self.mountpoint.display()
                )
            })
            .ok()
            .flatten()
    }
}
