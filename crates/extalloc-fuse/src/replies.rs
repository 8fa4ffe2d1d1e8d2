//! Replies the kernel gets for answers that take more than one line to build (the negative
//! entry of a name that is not there, the size-or-bytes answer of extended attribute
//! calls), and a caller's supplementary groups, which FUSE does not pass.
//!
//! Data structures: none (free functions). Invariant: each function sends exactly one
//! reply. Lock order: none.

use crate::fs::Errno as FsErrno;
use fuser::{Errno, FileAttr, INodeNo, ReplyXattr};
use std::time::SystemTime;

/// The attributes of a lookup that found nothing: node id 0, which the kernel caches as a
/// negative entry for the entry timeout.
pub(crate) fn negative_entry() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: SystemTime::UNIX_EPOCH,
        mtime: SystemTime::UNIX_EPOCH,
        ctime: SystemTime::UNIX_EPOCH,
        crtime: SystemTime::UNIX_EPOCH,
        kind: fuser::FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

/// A value or a listing: its size when the caller asked with size 0, `ERANGE` when it does
/// not fit the caller's buffer, else the bytes.
pub(crate) fn xattr_reply(r: Result<Vec<u8>, FsErrno>, size: u32, reply: ReplyXattr) {
    match r {
        Ok(v) if size == 0 => reply.size(v.len() as u32),
        Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
        Ok(v) => reply.data(&v),
        Err(e) => reply.error(Errno::from_i32(e.0)),
    }
}

/// The supplementary groups of process `pid` when a setxattr of `name` needs them (only an
/// access ACL does: it decides set-group-id), from `Groups:` of `/proc/PID/status`; none
/// when it cannot be read (the process is gone), so only the request's own group counts.
pub(crate) fn acl_groups(name: &[u8], pid: u32) -> Vec<u32> {
    if name != crate::xattr::ACL_ACCESS {
        return Vec::new();
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}
