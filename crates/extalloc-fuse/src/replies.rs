//! Replies the kernel gets (empty, data, an open handle and the flags every open is answered
//! with, the negative entry of a name that is not there, the size-or-bytes answer of
//! extended attribute calls), how long the kernel may cache what a reply carries ([`TTL`])
//! and the notice that drops what it cached ([`drop_attrs`]), and who makes a request
//! ([`caller`]: its ids, read from `/proc` where the kernel sends none, and its
//! supplementary groups, which FUSE does not pass).
//!
//! Data structures: none (free functions). Invariant: each function that takes a reply
//! sends exactly one. Lock order: none.

use crate::fs::data::SetTime;
use crate::fs::{Attr, Caller, Errno as FsErrno};
use crate::inode::Time;
use extalloc_fuse_transport::{self as transport, Notifier, Reply, Request, TimeOrNow};
use std::sync::OnceLock;
use std::time::Duration;

/// The kernel's errno for a file system error.
pub(crate) fn errno(e: FsErrno) -> i32 {
    debug_assert!(e.0 > 0, "an errno is positive: {}", e.0);
    e.0
}

/// What the kernel puts in a request's uid and gid when it sends none
/// (`FUSE_INVALID_UIDGID`): with `FUSE_ALLOW_IDMAP` (`kernel.rs`) it sends the caller's ids
/// only with the requests that make an inode (mknod, mkdir, symlink, create, a rename's
/// whiteout), mapped through the mount's idmap, and this with every other one.
pub(crate) const NO_ID: u32 = u32::MAX;

/// Who makes the request: the ids in its header, or, where the kernel sent [`NO_ID`], the
/// filesystem ids of the calling process read from `/proc/PID/status` (`Uid:`/`Gid:`, the
/// fourth field). Those are the process's own ids, not mapped through an idmapped mount's
/// idmap; the daemon asks who calls only to decide privilege (root may trim, shut down,
/// list `trusted.` names; a truncate or fallocate by anyone else clears set-id bits), which
/// the idmap does not change for a caller that is root outside it. When the process is gone
/// the ids stay [`NO_ID`]: an unprivileged caller in no group.
pub(crate) fn caller(req: &Request) -> Caller {
    caller_of(req.uid, req.gid, req.pid)
}

/// [`caller`] where the call asks who calls (`asks`), else [`Caller::NOBODY`]: the calls
/// whose callee reads `who` only in some cases (a setattr for a truncate, a setxattr for an
/// access ACL, a rename for its whiteout) read /proc only in those.
pub(crate) fn caller_if(req: &Request, asks: bool) -> Caller {
    match asks {
        true => caller(req),
        false => Caller::NOBODY,
    }
}

/// [`caller`] of a request's header fields.
fn caller_of(uid: u32, gid: u32, pid: u32) -> Caller {
    if uid != NO_ID && gid != NO_ID {
        return Caller { uid, gid };
    }
    let status = proc_status(pid);
    let id = |key: &str, given: u32| {
        if given != NO_ID {
            return given;
        }
        status_field(&status, key)
            .and_then(|f| f.split_whitespace().nth(3)?.parse().ok())
            .unwrap_or(NO_ID)
    };
    Caller {
        uid: id("Uid:", uid),
        gid: id("Gid:", gid),
    }
}

/// `/proc/PID/status`, empty when it cannot be read (the process is gone, or pid 0: a
/// request the kernel makes on no process's behalf).
fn proc_status(pid: u32) -> String {
    if pid == 0 {
        return String::new();
    }
    std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default()
}

/// The rest of the line of `status` that starts with `key`.
fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status.lines().find_map(|l| l.strip_prefix(key))
}

/// An empty reply, or the error.
pub(crate) fn empty(r: Result<(), FsErrno>, reply: Reply<'_>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}

/// The bytes, or the error.
pub(crate) fn data(r: Result<Vec<u8>, FsErrno>, reply: Reply<'_>) {
    match r {
        Ok(d) => {
            reply.data(&d);
        }
        Err(e) => reply.error(errno(e)),
    }
}

/// The flags a directory's open is answered with: none (the kernel keeps no listing
/// cache, `FOPEN_CACHE_DIR`: a listing reads the daemon's entries, `fs/listing.rs`).
pub(crate) const DIR_OPEN_FLAGS: u32 = 0;

/// The flags a file's open (`O_DIRECT` or not) is answered with when a read would set no
/// atime (`Fs::access_keeps_atime`): `FOPEN_KEEP_CACHE`, so an open keeps the pages the
/// kernel holds of the file instead of dropping them (a file read again after a close is
/// read from memory, as on a kernel file system). They are never stale: a file's data
/// changes only through the kernel, which updates or drops its pages for each change
/// (writes go through its cache; a direct write, a punch, a zeroed range and a
/// `copy_file_range` the daemon serves drop the range they touch), and the image is held
/// exclusively. When a read would set the atime, the open drops them ([`OPEN_FLAGS`]
/// without it), so that the first read reaches the daemon. Without `FOPEN_DIRECT_IO` the kernel serves an `O_DIRECT` open through its
/// own direct I/O path (the address space's `direct_IO`): before a direct write it writes
/// back and drops the page-cache pages of the range, and drops them again after; before a
/// direct read it writes back the range's dirty pages. So a buffered read or a mapping sees
/// a direct write, and a direct read sees data still dirty in the page cache (the writeback
/// cache). `FOPEN_DIRECT_IO` would send every read and write of that open, buffered ones
/// too, to the daemon, and refuse a shared mapping of it unless `FUSE_DIRECT_IO_ALLOW_MMAP`
/// were negotiated: only a synchronous file's open wants that ([`OPEN_SYNC_FLAGS`]).
pub(crate) const OPEN_FLAGS: u32 = 0;

/// [`OPEN_FLAGS`] for an open of a file with the synchronous flag (`chattr +S`,
/// `fs/flags.rs`): every read and write of it goes to the daemon, which commits each write
/// before it answers. A shared mapping of it still works (`FUSE_DIRECT_IO_ALLOW_MMAP`,
/// `kernel.rs`): the kernel writes back and drops the cached pages of a range around each
/// such write.
pub(crate) const OPEN_SYNC_FLAGS: u32 = transport::FOPEN_DIRECT_IO;

/// [`OPEN_FLAGS`] for an open whose reads would set no atime.
pub(crate) const OPEN_KEEPING_FLAGS: u32 = transport::FOPEN_KEEP_CACHE;

/// The flags an open of file `ino` with `open(2)`'s `flags` is answered with:
/// [`OPEN_SYNC_FLAGS`] for a synchronous file, or for an open for writing while the device
/// is nearly full (`fs/headroom.rs`: its `write(2)`s then reach the daemon and fail at the
/// call when they do not fit); else [`OPEN_KEEPING_FLAGS`] when a read would set no atime,
/// or [`OPEN_FLAGS`].
pub(crate) fn open_flags(fs: &crate::fs::Fs, ino: u64, flags: i32) -> u32 {
    if fs.is_sync_inode(ino) || fs.writes_direct(ino, flags) {
        OPEN_SYNC_FLAGS
    } else if fs.access_keeps_atime(ino) {
        OPEN_KEEPING_FLAGS
    } else {
        OPEN_FLAGS
    }
}

/// `statfs`'s figures (names up to [`crate::dir::NAME_MAX`] bytes; the fragment size is
/// the block size), or the error.
pub(crate) fn statfs_reply(r: Result<crate::fs::data::FsStat, FsErrno>, reply: Reply<'_>) {
    let s = match r {
        Ok(s) => s,
        Err(e) => return reply.error(errno(e)),
    };
    let (files, ffree) = inode_counts(&s);
    let out = transport::StatfsOut {
        blocks: s.blocks,
        bfree: s.free,
        bavail: s.available,
        files,
        ffree,
        bsize: s.block_size,
        namelen: crate::dir::NAME_MAX as u32,
        frsize: s.block_size,
        ..Default::default()
    };
    reply.with(&out, &[]);
}

/// An open handle with `flags` ([`OPEN_FLAGS`] or [`DIR_OPEN_FLAGS`]), or the error.
/// The handle is returned when the reply did not reach the kernel (an interrupted open),
/// for the caller to release: no release request will come for it.
pub(crate) fn opened(r: Result<u64, FsErrno>, flags: u32, reply: Reply<'_>) -> Option<u64> {
    match r {
        Ok(fh) => (!reply.opened(fh, flags)).then_some(fh),
        Err(e) => {
            reply.error(errno(e));
            None
        }
    }
}

/// The attributes of a lookup that found nothing: node id 0, which the kernel caches as a
/// negative entry for the entry timeout.
pub(crate) fn negative_entry() -> transport::Attr {
    transport::Attr::default()
}

/// A value or a listing: its size when the caller asked with size 0, `ERANGE` when it does
/// not fit the caller's buffer, else the bytes.
pub(crate) fn xattr_reply(r: Result<Vec<u8>, FsErrno>, size: u32, reply: Reply<'_>) {
    match r {
        Ok(v) if size == 0 => reply.xattr_size(v.len() as u32),
        Ok(v) if v.len() > size as usize => reply.error(libc::ERANGE),
        Ok(v) => {
            reply.data(&v);
        }
        Err(e) => reply.error(errno(e)),
    }
}

/// The supplementary groups of process `pid` when a setxattr of `name` needs them (only an
/// access ACL does: it decides set-group-id), from `Groups:` of `/proc/PID/status`; none
/// when it cannot be read (the process is gone), so only the request's own group counts.
pub(crate) fn acl_groups(name: &[u8], pid: u32) -> Vec<u32> {
    if name != crate::xattr::ACL_ACCESS {
        return Vec::new();
    }
    let status = proc_status(pid);
    status_field(&status, "Groups:")
        .map(|g| {
            g.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// `stat`'s view of `a` for the kernel (`st_blocks` in 512-byte sectors; the birth time
/// goes only with a statx reply, [`statx`]).
pub(crate) fn file_attr(a: &Attr, block_size: u32) -> transport::Attr {
    let i = &a.inode;
    transport::Attr {
        ino: a.ino,
        size: a.size,
        blocks: a.allocated / 512,
        atime: i.atime.secs as u64,
        mtime: i.mtime.secs as u64,
        ctime: i.ctime.secs as u64,
        atimensec: i.atime.nanos,
        mtimensec: i.mtime.nanos,
        ctimensec: i.ctime.nanos,
        mode: i.kind.mode_bits() | u32::from(i.perm),
        nlink: i.nlink,
        uid: i.uid,
        gid: i.gid,
        rdev: i.rdev,
        blksize: block_size,
        flags: 0,
    }
}

/// `statx`'s view of `a`: [`file_attr`]'s and the birth time, where the inode has one
/// (inodes written before birth times were kept have none: the mask then says so). The
/// kernel fills in the device itself.
pub(crate) fn statx(a: &Attr, block_size: u32) -> transport::Statx {
    let f = file_attr(a, block_size);
    let sx = |t: Time| transport::SxTime {
        tv_sec: t.secs,
        tv_nsec: t.nanos,
        reserved: 0,
    };
    let i = &a.inode;
    let mut mask = transport::STATX_BASIC_STATS;
    if i.btime.is_some() {
        mask |= transport::STATX_BTIME;
    }
    // The chattr flags statx reports (`STATX_ATTR_*`, each the same bit as the inode flag's
    // `FS_*_FL`): this kernel takes only the mask and the birth time of the reply and fills
    // the attributes itself (none for FUSE), so `stx_attributes` stays empty (fstests 424).
    let shown = crate::inode::IMMUTABLE | crate::inode::APPEND | crate::inode::NODUMP;
    let s = transport::Statx {
        mask,
        attributes: u64::from(i.flags & shown),
        attributes_mask: u64::from(shown),
        blksize: f.blksize,
        nlink: f.nlink,
        uid: f.uid,
        gid: f.gid,
        mode: f.mode as u16,
        ino: f.ino,
        size: f.size,
        blocks: f.blocks,
        atime: sx(i.atime),
        btime: i.btime.map(sx).unwrap_or_default(),
        ctime: sx(i.ctime),
        mtime: sx(i.mtime),
        rdev_major: rustix::fs::major(u64::from(i.rdev)),
        rdev_minor: rustix::fs::minor(u64::from(i.rdev)),
        ..Default::default()
    };
    debug_assert_eq!(s.mode as u32, f.mode, "a mode fits 16 bits");
    s
}

/// A time a setattr asks for.
pub(crate) fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::At(secs, nanos) => SetTime::At(Time { secs, nanos }),
    }
}

/// How long the kernel may keep attributes, names and misses. Every change to the mount
/// comes through the kernel, which updates or drops what it cached for each (a create or
/// unlink drops the directory's attributes and replaces the name; a link, rename, setattr,
/// write, fallocate or xattr change drops the inode's); the image is held exclusively, so
/// nothing else changes it. What the daemon changes on its own, it says with a
/// notification ([`drop_attrs`]: an atime a read set, set-id bits a write cleared). So the
/// timeout is long, and a `stat`, `open` or path walk of a known name costs no round trip
/// (at 1 s, a tree touched again after a second was looked up again name by name).
pub(crate) const TTL: Duration = Duration::from_secs(3600);

/// Tells the kernel to drop its cached attributes of `ino` (offset -1: its pages stay),
/// once the session exists. A node the kernel no longer holds (`ENOENT`) has nothing to
/// drop.
pub(crate) fn drop_attrs(notifier: &OnceLock<Notifier>, ino: u64) {
    if let Some(n) = notifier.get() {
        match n.inval_inode(ino, -1, 0) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => log::warn!("cannot invalidate inode {ino}'s cached attributes: {e}"),
        }
    }
}

/// `statfs`'s `f_files` and `f_ffree`: the inodes in all (in use and free) and the free
/// ones, as `df -i` reads them (used = `f_files - f_ffree`). `f_files` was the inodes in
/// use alone, so `df -i` showed a negative count in use once more could be made than
/// were.
fn inode_counts(s: &crate::fs::data::FsStat) -> (u64, u64) {
    let total = s.files.saturating_add(s.files_free);
    debug_assert_eq!(
        total - s.files_free,
        s.files,
        "df -i's used is the inodes in use"
    );
    (total, s.files_free)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn df_reads_the_inodes_in_use_from_statfs() {
        let s = crate::fs::data::FsStat {
            block_size: 4096,
            blocks: 1 << 20,
            free: 1 << 19,
            available: 1 << 19,
            files: 1_403_625,
            files_free: 15_827_474,
        };
        let (files, ffree) = inode_counts(&s);
        assert_eq!(files - ffree, 1_403_625, "df -i: used");
        assert_eq!(ffree, 15_827_474);
        let full = crate::fs::data::FsStat { files_free: 0, ..s };
        assert_eq!(inode_counts(&full), (1_403_625, 0));
    }

    #[test]
    fn a_caller_without_ids_is_read_from_proc_and_nobody_once_gone() {
        // Ids the kernel sent are taken as they are, whatever the process.
        let given = caller_of(1000, 100, 0);
        assert_eq!((given.uid, given.gid), (1000, 100));
        // None sent: this process's filesystem ids, as the kernel would have sent them.
        let me = caller_of(NO_ID, NO_ID, std::process::id());
        let (uid, gid) = (
            rustix::process::geteuid().as_raw(),
            rustix::process::getegid().as_raw(),
        );
        assert_eq!((me.uid, me.gid), (uid, gid));
        // Only the missing one is read.
        let half = caller_of(7, NO_ID, std::process::id());
        assert_eq!((half.uid, half.gid), (7, gid));
        // No process: unprivileged, in no group.
        for pid in [0, u32::MAX] {
            let gone = caller_of(NO_ID, NO_ID, pid);
            assert_eq!((gone.uid, gone.gid), (NO_ID, NO_ID), "pid {pid}");
            assert_eq!(gone, Caller::NOBODY);
        }
    }
}
