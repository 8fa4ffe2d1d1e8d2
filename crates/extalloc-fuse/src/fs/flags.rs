//! `chattr` flags: synchronous, immutable, append-only, no-dump and no-atime, kept in the
//! inode and enforced by the daemon.
//!
//! The kernel reads and sets them through `FS_IOC_GETFLAGS`/`FS_IOC_SETFLAGS` (and
//! `FS_IOC_FSGETXATTR`/`FS_IOC_FSSETXATTR`, `xfs_io chattr`), which FUSE forwards as ioctls
//! after checking that the caller owns the inode and, for immutable and append-only, has
//! `CAP_LINUX_IMMUTABLE`. FUSE does not mark its inodes `S_IMMUTABLE`/`S_APPEND`, so the
//! kernel's own checks of those flags never fire: every call that changes an inode or a
//! directory checks them here, with ext4's errors (`EPERM`):
//!
//! - an **immutable** inode: no open for writing or truncation, no attribute change (mode,
//!   owner, times, size), no extended attribute change, no new link, not unlinked,
//!   renamed or replaced; an immutable directory gains and loses no entries;
//! - an **append-only** inode: opened for writing only with `O_APPEND`, never truncated,
//!   its mode, owner and explicit times unchanged, no extended attribute change, no new
//!   link, not unlinked, renamed or replaced; an append-only directory gains entries but
//!   loses none;
//! - **no-atime**: a read never updates atime (`atime.rs`); **no-dump** is only kept;
//! - **synchronous** (`chattr +S`, ext4's `EXT4_SYNC_FL`): a change of the inode is
//!   durable before it is answered, as on a `sync` mount for that inode alone
//!   (`syncmode.rs`): its attribute changes and, for a directory, the names made or removed
//!   in it are committed before their replies; a regular file is opened with
//!   `FOPEN_DIRECT_IO`, so that each `write(2)` reaches the daemon, which commits it before
//!   answering (the kernel does not know the flag, so it would otherwise keep the write in
//!   its cache and never follow it with an fsync, as it does for `IS_SYNC` inodes). Opens
//!   made before the flag was set keep the cache until closed.
//!
//! Writes themselves reach the daemon from the kernel's page cache long after `write(2)`
//! returned, so an open for writing is where the flags are enforced, and for a file
//! opened before its flag was set, the attributes the kernel asks for before it caches a
//! write: an immutable or append-only file's attributes are never cached by the kernel
//! (`Fs::attr_ttl`), and asked through a handle opened for writing (without `O_APPEND`,
//! for append-only) they are refused with `EPERM` (`Fs::getattr_through`), which the
//! kernel answers the `write(2)` with, as ext4 does. Data cached before the flag is
//! written back, and the writeback cache's own time updates for it are applied
//! (`SetAttr::cached_times`), so its `fsync` succeeds.
//!
//! Data structures: the flags are `Inode::flags` (their bits are defined with the inode's
//! encoding in `inode.rs`, re-exported here). Invariant: only [`KEPT`] bits are ever
//! set. Lock order: `ns` (read for checks inside a caller's section, written to set).

use super::core::{Caller, Errno, Fs, FsResult, Ns};
use crate::inode::{Kind, Time};

// The flag bits are part of the inode's encoding (`inode.rs`), re-exported here.
pub use crate::inode::{APPEND, IMMUTABLE, KEPT, NOATIME, NODUMP, SYNC};

/// `FS_IOC_GETFLAGS` (`_IOR('f', 1, long)`).
pub const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
/// `FS_IOC_SETFLAGS` (`_IOW('f', 2, long)`).
pub const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
/// `FS_IOC_FSGETXATTR` (`_IOR('X', 31, struct fsxattr)`).
pub const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
/// `FS_IOC_FSSETXATTR` (`_IOW('X', 32, struct fsxattr)`).
pub const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;
/// `FS_IOC_SHUTDOWN` (`_IOR('X', 125, __u32)`), the same number as XFS's
/// `XFS_IOC_GOINGDOWN` (`shutdown.rs`).
pub const FS_IOC_SHUTDOWN: u32 = 0x8004_587d;
/// Bytes of `struct fsxattr`.
pub const FSXATTR_BYTES: usize = 28;

/// `FS_XFLAG_*` bits and the flags they stand for.
const XFLAGS: [(u32, u32); 5] = [
    (0x08, IMMUTABLE),
    (0x10, APPEND),
    (0x40, NOATIME),
    (0x20, SYNC),
    (0x80, NODUMP),
];

/// The `fsx_xflags` of `flags`.
pub fn to_xflags(flags: u32) -> u32 {
    XFLAGS
        .iter()
        .filter(|(_, f)| flags & f != 0)
        .fold(0, |x, (b, _)| x | b)
}

/// The flags of `fsx_xflags`; `None` when it has a bit this file system does not keep.
pub fn from_xflags(xflags: u32) -> Option<u32> {
    let known = XFLAGS.iter().fold(0, |x, (b, _)| x | b);
    (xflags & !known == 0).then(|| {
        XFLAGS
            .iter()
            .filter(|(b, _)| xflags & b != 0)
            .fold(0, |f, (_, v)| f | v)
    })
}

/// `EPERM` when `ino` is immutable, or append-only and `append_too`.
pub(crate) fn check(ns: &Ns, ino: u64, append_too: bool) -> FsResult<()> {
    let f = ns.node(ino)?.inode.flags;
    let stop = if append_too {
        IMMUTABLE | APPEND
    } else {
        IMMUTABLE
    };
    if f & stop != 0 {
        return Err(Errno(libc::EPERM));
    }
    Ok(())
}

/// The flags a new inode of `kind` takes from its directory's `dir_flags`, as ext4's
/// `EXT4_FL_INHERITED` masked by kind: synchronous, no-dump and no-atime for a file or a
/// directory; no-dump and no-atime for the rest. Immutable and append-only are never
/// inherited.
pub(crate) fn inherited(dir_flags: u32, kind: Kind) -> u32 {
    let passed = match kind {
        Kind::File | Kind::Dir => SYNC | NODUMP | NOATIME,
        _ => NODUMP | NOATIME,
    };
    dir_flags & passed
}

/// An open of `ino` with `flags` (`open(2)`'s): `EPERM` for writing an immutable inode,
/// and for writing an append-only one without `O_APPEND` or with `O_TRUNC`.
pub(crate) fn check_open(ns: &Ns, ino: u64, flags: i32) -> FsResult<()> {
    let writes = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
    if !writes {
        return Ok(());
    }
    // Immutable always stops a writer; append-only unless it only appends.
    let appends = flags & libc::O_APPEND != 0 && flags & libc::O_TRUNC == 0;
    check(ns, ino, !appends)
}

impl Fs {
    /// Whether `ino` has the synchronous flag (`chattr +S`); false for an inode not there.
    pub fn is_sync_inode(&self, ino: u64) -> bool {
        let _pin = self.ensure_loaded(&[ino]); // `ondemand.rs`: missing reads as false
        self.ns
            .read()
            .node(ino)
            .is_ok_and(|n| n.inode.flags & SYNC != 0)
    }

    /// `ino`'s `chattr` flags.
    pub fn get_flags(&self, ino: u64) -> FsResult<u32> {
        let _pin = self.ensure_loaded(&[ino])?; // `ondemand.rs`: pinned
        Ok(self.ns.read().node(ino)?.inode.flags)
    }

    /// Sets `ino`'s `chattr` flags (the kernel has checked who may); a flag this file
    /// system does not keep is `EOPNOTSUPP`, with nothing changed. The ctime moves.
    pub fn set_flags(&self, ino: u64, flags: u32) -> FsResult<()> {
        let _pin = self.ensure_loaded(&[ino])?; // `ondemand.rs`: pinned
        if flags & !KEPT != 0 {
            return Err(Errno(libc::EOPNOTSUPP));
        }
        let mut ns = self.ns_write();
        let n = ns.node_mut(ino)?;
        let old = n.inode;
        n.inode.flags = flags;
        n.inode.ctime = Time::now();
        let r = self.persist(&mut ns, ino);
        if r.is_err() {
            ns.node_mut(ino)?.inode = old;
        }
        r
    }

    /// The ioctls FUSE forwards for `chattr`/`lsattr` (`cmd` and its input; the output's
    /// bytes): `FS_IOC_GETFLAGS`/`SETFLAGS` with a 4-byte flags word, and
    /// `FS_IOC_FSGETXATTR`/`FSSETXATTR` with a `struct fsxattr` (a project id other than 0
    /// is `EOPNOTSUPP`: no project quotas), and `FS_IOC_SHUTDOWN` from root (`EPERM`
    /// otherwise; [`Fs::shutdown`]), and `FITRIM` ([`Fs::trim`]). Any other command is
    /// `ENOTTY`, input cut short
    /// `EINVAL`; after a shutdown every command but another shutdown is `EIO`.
    pub fn ioctl(&self, ino: u64, cmd: u32, input: &[u8], who: Caller) -> FsResult<Vec<u8>> {
        let _pin = self.ensure_loaded(&[ino])?; // `ondemand.rs`: pinned
        if cmd == FS_IOC_SHUTDOWN {
            // ext4 asks for CAP_SYS_ADMIN; FUSE passes no capabilities, so root by uid.
            if who.uid != 0 {
                return Err(Errno(libc::EPERM));
            }
            self.shutdown();
            return Ok(Vec::new());
        }
        if cmd == super::trim::FITRIM {
            return self.trim(input, who);
        }
        self.live()?;
        let word = |at: usize| {
            input
                .get(at..at + 4)
                .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
                .ok_or(Errno(libc::EINVAL))
        };
        match cmd {
            FS_IOC_GETFLAGS => Ok(self.get_flags(ino)?.to_le_bytes().to_vec()),
            FS_IOC_SETFLAGS => self.set_flags(ino, word(0)?).map(|()| Vec::new()),
            FS_IOC_FSGETXATTR => {
                let mut out = vec![0u8; FSXATTR_BYTES];
                out[..4].copy_from_slice(&to_xflags(self.get_flags(ino)?).to_le_bytes());
                Ok(out)
            }
            FS_IOC_FSSETXATTR => {
                let flags = from_xflags(word(0)?).ok_or(Errno(libc::EOPNOTSUPP))?;
                if word(12)? != 0 {
                    return Err(Errno(libc::EOPNOTSUPP));
                }
                self.set_flags(ino, flags).map(|()| Vec::new())
            }
            _ => Err(Errno(libc::ENOTTY)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_inodes_inherit_what_ext4_passes_on() {
        let all = KEPT;
        assert_eq!(inherited(all, Kind::File), SYNC | NODUMP | NOATIME);
        assert_eq!(inherited(all, Kind::Dir), SYNC | NODUMP | NOATIME);
        for k in [Kind::Symlink, Kind::Fifo, Kind::Socket, Kind::CharDevice] {
            assert_eq!(inherited(all, k), NODUMP | NOATIME, "{k:?}");
        }
        assert_eq!(inherited(IMMUTABLE | APPEND, Kind::File), 0);
    }

    #[test]
    fn xflags_map_both_ways() {
        for f in [0, SYNC, IMMUTABLE, APPEND, NODUMP, NOATIME, KEPT] {
            assert_eq!(from_xflags(to_xflags(f)), Some(f));
        }
        assert_eq!(from_xflags(0x01), None, "realtime is not kept");
    }
}
