//! Kernel requests to [`Fs`] calls, through the daemon's own FUSE transport
//! (the crate `extalloc-fuse-transport`). Each request is served on the session's thread that read it (several
//! threads; [`Fs`] is shared).
//!
//! Data structures: [`FuseFs`] holds the shared [`Fs`], the block size, and the mount's
//! flags as last read (`kernel.rs`: at a read, a listing and a change, at most once a
//! second: FUSE does not pass them, and a remount may change them).
//!
//! Invariant: every request gets exactly one reply; an [`Fs`] error becomes its `errno`;
//! a change is answered only once settled as `-o sync`/`-o dirsync` or the inode's
//! `chattr +S` ask (`fs/syncmode.rs`).
//!
//! Lock order: the flags' lock is a leaf, never held across an [`Fs`] call (see
//! `fs/mod.rs`).

use crate::fs::data::SetAttr;
use crate::fs::flags;
use crate::fs::names::NewNode;
use crate::fs::syncmode::Settle;
use crate::fs::{Attr, Caller, Errno as FsErrno, Fs, FsResult, Plus};
use crate::inode::{Kind, Time};
use crate::kernel::{negotiate, MountFlags};
use crate::replies::{
    acl_groups, caller, caller_if, data, drop_attrs, empty, errno, file_attr, negative_entry,
    open_flags, opened, set_time, statfs_reply, statx, xattr_reply, DIR_OPEN_FLAGS, TTL,
};
use extalloc_fuse_transport::{
    self as transport, flags as init_flags, DirBuf, Handler, Init, Notifier, Op, Reply,
};
use extalloc_fuse_transport::{CreateIn, Request, Setattr, TimeOrNow};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::OnceLock;

/// The file system the transport serves: the shared [`Fs`].
pub(crate) struct FuseFs {
    fs: Arc<Fs>,
    /// The session's channel for telling the kernel its cache is stale (set once the
    /// session exists: `mount.rs`).
    notifier: Arc<OnceLock<Notifier>>,
    block_size: u32,
    /// The flags of the mount `fs` is served on.
    flags: MountFlags,
    /// Where it is mounted (canonical).
    mountpoint: std::path::PathBuf,
}

impl FuseFs {
    /// Serves `fs` mounted on `mountpoint`.
    pub(crate) fn new(fs: Arc<Fs>, mountpoint: &Path) -> FuseFs {
        let block_size = fs.volume().volume().block_size() as u32;
        let mountpoint = mountpoint
            .canonicalize()
            .unwrap_or_else(|_| mountpoint.to_path_buf());
        let notifier: Arc<OnceLock<Notifier>> = Arc::new(OnceLock::new());
        let slot = notifier.clone();
        fs.on_stale_attrs(Box::new(move |ino| drop_attrs(&slot, ino)));
        FuseFs {
            fs,
            notifier,
            block_size,
            flags: MountFlags::new(&mountpoint),
            mountpoint,
        }
    }

    /// Where the session's notifier goes once the session exists (so a data call that
    /// clears set-id bits can tell the kernel).
    pub(crate) fn notifier_slot(&self) -> Arc<OnceLock<Notifier>> {
        self.notifier.clone()
    }

    /// A write or fallocate cleared set-user-id or set-group-id: the kernel keeps the
    /// mode it cached (an unprivileged fallocate invalidates only size and times there), so
    /// its attributes are dropped now; `stat` then asks again (fstests generic/683-685).
    fn mode_changed(&self, ino: u64) {
        drop_attrs(&self.notifier, ino);
    }

    /// `r`, settled as the mount's `sync`/`dirsync` ask (`fs/syncmode.rs`).
    fn settled<T>(&self, r: FsResult<T>, what: Settle) -> FsResult<T> {
        if r.is_ok() {
            self.flags.refresh_sync(&self.fs);
        }
        self.fs.settled(r, what)
    }

    fn file_attr(&self, a: &Attr) -> transport::Attr {
        file_attr(a, self.block_size)
    }

    /// A lookup's or a made name's entry: the file system counted one lookup of the node,
    /// which the kernel counts only if the reply reaches it (an interrupted request's does
    /// not, and no forget would ever come for it).
    fn entry(&self, r: Result<Attr, FsErrno>, reply: Reply<'_>) {
        match r {
            Ok(a) => {
                if !reply.entry(Fs::attr_ttl(&a, TTL), &self.file_attr(&a), 0) {
                    self.fs.forget(a.ino, 1);
                }
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn attr(&self, r: Result<Attr, FsErrno>, reply: Reply<'_>) {
        match r {
            Ok(a) => reply.attr(Fs::attr_ttl(&a, TTL), &self.file_attr(&a)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn make(&self, req: &Request, name: &OsStr, new: NewNode<'_>, r: Reply<'_>) {
        let parent = req.nodeid;
        let made = self.fs.make(parent, name.as_bytes(), new, caller(req));
        self.entry(self.settled(made, Settle::names(parent)), r);
    }
}

impl Handler for FuseFs {
    fn init(&self, init: &mut Init) {
        // The mount is not in the mount table before init is answered: the flags are read
        // at the first read, listing or change.
        negotiate(&self.fs, init);
    }

    fn forget(&self, ino: u64, nlookup: u64) {
        self.fs.forget(ino, nlookup);
    }

    fn forget_batch(&self, nodes: &[(u64, u64)]) {
        self.fs.forget_many(nodes);
    }

    fn serve(&self, req: &Request, op: Op<'_>, reply: Reply<'_>) {
        let ino = req.nodeid;
        match op {
            Op::Lookup(name) => self.lookup(ino, name, reply),
            Op::Getattr(fh) => self.attr(self.fs.getattr_through(ino, fh), reply),
            Op::Statx(fh) => self.statx(ino, fh, reply),
            Op::Setattr(set) => self.setattr(req, set, reply),
            Op::Readlink => data(self.fs.readlink(ino), reply),
            Op::Symlink { name, target } => self.make(req, name, symlink(target), reply),
            Op::Mknod {
                name,
                mode,
                umask,
                rdev,
            } => self.mknod(req, name, mode, umask, rdev, reply),
            Op::Mkdir { name, mode, umask } => self.make(req, name, dir(mode, umask), reply),
            Op::Unlink(name) => self.unmake(ino, self.fs.unlink(ino, name.as_bytes()), reply),
            Op::Rmdir(name) => self.unmake(ino, self.fs.rmdir(ino, name.as_bytes()), reply),
            Op::Rename {
                name,
                newdir,
                newname,
                flags,
            } => self.rename(req, name, newdir, newname, flags, reply),
            Op::Link { ino: from, newname } => {
                let r = self.fs.link(from, ino, newname.as_bytes(), caller(req));
                self.entry(self.settled(r, Settle::names(ino)), reply)
            }
            op => self.serve_data(req, op, reply),
        }
    }
}

impl FuseFs {
    /// [`Handler::serve`] of the requests about data, attributes, listings and the rest.
    fn serve_data(&self, req: &Request, op: Op<'_>, reply: Reply<'_>) {
        let ino = req.nodeid;
        match op {
            Op::Open { flags } => self.open(ino, flags, reply),
            Op::Read { offset, size } => {
                self.flags.refresh_atime(&self.fs);
                data(self.fs.read(ino, offset, size), reply)
            }
            Op::Write {
                offset,
                data,
                flags,
            } => self.write(req, offset, data, flags, reply),
            Op::Statfs => statfs_reply(self.fs.statfs(), reply),
            Op::Release => empty(self.fs.release(ino), reply),
            Op::Fsync => empty(self.fs.fsync(ino), reply),
            Op::Setxattr { name, value, flags } => self.setxattr(req, name, value, flags, reply),
            Op::Getxattr { name, size } => {
                xattr_reply(self.fs.getxattr(ino, name.as_bytes()), size, reply)
            }
            // Privilege as the uid says: FUSE passes no capabilities.
            Op::Listxattr { size } => {
                let r = self.fs.listxattr(ino, || caller(req).uid == 0);
                xattr_reply(r, size, reply)
            }
            Op::Removexattr(name) => {
                let r = self.fs.removexattr(ino, name.as_bytes());
                empty(self.settled(r, Settle::Inode(ino)), reply)
            }
            // Nothing to do at a close: the kernel writes the file's dirty pages back before
            // it sends FLUSH, and `release` writes the times. ENOSYS once makes the kernel
            // stop sending FLUSH for the mount's life (its write-back stays), a round trip
            // less per close; locks are the kernel's own (no lock requests are served).
            Op::Flush => reply.error(libc::ENOSYS),
            Op::Opendir => self.opendir(ino, reply),
            Op::Readdir {
                fh,
                offset,
                size,
                plus,
            } => self.readdir(fh, offset, size, plus, reply),
            Op::Releasedir { fh } => {
                self.fs.releasedir(fh);
                reply.ok()
            }
            Op::Fsyncdir => self.fsyncdir(ino, reply),
            Op::Create { name, create } => self.create(req, Some(name), create, reply),
            Op::Tmpfile { create } => self.create(req, None, create, reply),
            Op::Ioctl { cmd, data } => self.ioctl(req, cmd, data, reply),
            Op::Fallocate {
                offset,
                length,
                mode,
            } => self.fallocate(req, offset, length, mode, reply),
            Op::CopyFileRange {
                off_in,
                ino_out,
                off_out,
                len,
            } => {
                // The kernel has written both ranges' dirty pages back and drops the
                // target's after.
                let who = match self.fs.room_for_anyone(len) {
                    true => Caller::ROOT,
                    false => caller(req),
                };
                let r = (self.fs).copy_range((ino, off_in), (ino_out, off_out), len, who);
                match self.settled(r, Settle::Inode(ino_out)) {
                    Ok(n) => reply.written(n),
                    Err(e) => reply.error(errno(e)),
                }
            }
            _ => reply.error(libc::ENOSYS),
        }
    }
}

/// A new symbolic link to `target`.
fn symlink(target: &OsStr) -> NewNode<'_> {
    NewNode {
        kind: Kind::Symlink,
        mode: 0o777,
        umask: 0,
        rdev: 0,
        target: Some(target.as_bytes()),
    }
}

/// A new directory.
fn dir(mode: u32, umask: u32) -> NewNode<'static> {
    NewNode {
        kind: Kind::Dir,
        mode,
        umask,
        rdev: 0,
        target: None,
    }
}

impl FuseFs {
    fn lookup(&self, parent: u64, name: &OsStr, reply: Reply<'_>) {
        match self.fs.lookup(parent, name.as_bytes()) {
            // A name that is not there: node id 0 with the entry timeout, so the kernel
            // caches the miss (a negative dentry) instead of asking again at every stat or
            // open of a missing name. Every name is made through the kernel, which replaces
            // the negative entry when it makes one; nothing makes names behind its back
            // while the mount is served.
            Err(FsErrno(libc::ENOENT)) => {
                // No node: nothing counted, nothing to undo.
                reply.entry(TTL, &negative_entry(), 0);
            }
            r => self.entry(r, reply),
        }
    }

    /// An open of a file. A reply that does not reach the kernel (the request was
    /// interrupted) is undone at once: the kernel holds no handle, and no release comes.
    fn open(&self, ino: u64, flags: i32, reply: Reply<'_>) {
        self.flags.refresh_atime(&self.fs);
        let r = self.fs.open(ino, flags);
        if opened(r, open_flags(&self.fs, ino, flags), reply).is_some() {
            if let Err(e) = self.fs.release(ino) {
                log::warn!("inode {ino}: an interrupted open's release: {e:?}");
            }
        }
    }

    /// An open of a directory, undone as [`FuseFs::open`]'s when its reply does not reach
    /// the kernel (the directory lists one handle fewer).
    fn opendir(&self, ino: u64, reply: Reply<'_>) {
        if let Some(fh) = opened(self.fs.opendir(ino), DIR_OPEN_FLAGS, reply) {
            self.fs.releasedir(fh);
        }
    }

    /// A statx: the attributes with the birth time (`FUSE_STATX`, sent when a caller asks
    /// for more than the basic attributes the other replies carry).
    fn statx(&self, ino: u64, fh: Option<u64>, reply: Reply<'_>) {
        match self.fs.getattr_through(ino, fh) {
            Ok(a) => reply.statx(Fs::attr_ttl(&a, TTL), &statx(&a, self.block_size)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(&self, req: &Request, s: Setattr, reply: Reply<'_>) {
        let set = SetAttr {
            mode: s.mode,
            uid: s.uid,
            gid: s.gid,
            size: s.size,
            atime: s.atime.map(set_time),
            mtime: s.mtime.map(set_time),
            ctime: s.ctime.map(|(secs, nanos)| Time { secs, nanos }),
            // The writeback cache's time update: mtime and ctime as times, through a file.
            cached_times: s.fh.is_some()
                && matches!(s.mtime, Some(TimeOrNow::At(..)))
                && s.ctime.is_some()
                && s.atime.is_none()
                && (s.mode, s.uid, s.gid, s.size) == (None, None, None, None),
        };
        let who = caller_if(req, s.size.is_some());
        let r = self.fs.setattr(req.nodeid, set, who);
        self.attr(self.settled(r, Settle::Inode(req.nodeid)), reply);
    }

    fn mknod(&self, req: &Request, name: &OsStr, mode: u32, umask: u32, rdev: u32, r: Reply<'_>) {
        let Some(kind) = Kind::from_mode(mode).filter(|k| !matches!(k, Kind::Dir | Kind::Symlink))
        else {
            return r.error(libc::EINVAL);
        };
        let new = NewNode {
            kind,
            mode,
            umask,
            rdev,
            target: None,
        };
        self.make(req, name, new, r);
    }

    /// A name removed from `parent` (unlink, rmdir).
    fn unmake(&self, parent: u64, r: FsResult<()>, reply: Reply<'_>) {
        empty(self.settled(r, Settle::names(parent)), reply);
    }

    fn rename(
        &self,
        req: &Request,
        name: &OsStr,
        newdir: u64,
        newname: &OsStr,
        flags: u32,
        reply: Reply<'_>,
    ) {
        let from = (req.nodeid, name.as_bytes());
        let to = (newdir, newname.as_bytes());
        let who = caller_if(req, flags & crate::fs::names::RENAME_WHITEOUT != 0);
        let r = self.fs.rename(from.0, from.1, to.0, to.1, flags, who);
        empty(self.settled(r, Settle::Names([from.0, to.0])), reply);
    }

    fn write(&self, req: &Request, offset: u64, data: &[u8], flags: u32, reply: Reply<'_>) {
        let ino = req.nodeid;
        let kill = flags & init_flags::WRITE_KILL_SUIDGID != 0;
        let cached = flags & init_flags::WRITE_CACHE != 0;
        // Whose write it is matters only near root's share of the device (`Fs::write_from`).
        let who = match cached || self.fs.room_for_anyone(data.len() as u64) {
            true => Caller::ROOT,
            false => caller(req),
        };
        let r = (self.fs).write_from(ino, offset, data, kill, cached, who);
        match self.settled(r, Settle::Data(ino)) {
            Ok((n, cleared)) => {
                if cleared {
                    self.mode_changed(ino);
                }
                reply.written(n)
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir(&self, fh: u64, offset: u64, size: u32, plus: bool, reply: Reply<'_>) {
        if offset == 0 {
            self.flags.refresh_atime(&self.fs);
        }
        let mut buf = DirBuf::new(size);
        // The nodes `readdirplus_entries` counted a lookup of (every entry with attributes
        // but the dots): forgotten again if the reply does not reach the kernel.
        let mut looked_up = Vec::new();
        let r = if plus {
            self.fs
                .readdirplus_entries(fh, offset, |name, e, next| match e {
                    Plus::Read(a) => {
                        let entry = DirBuf::entry(Fs::attr_ttl(a, TTL), &self.file_attr(a));
                        let kind = a.inode.kind.dirent_type();
                        let full = buf.add(a.ino, next, kind, name, Some(&entry));
                        if !full && name != b"." && name != b".." {
                            looked_up.push((a.ino, 1));
                        }
                        full
                    }
                    // An inode that cannot be read: its name without attributes (node 0: the
                    // kernel makes no dentry, and a lookup of the name gets the error).
                    Plus::Unread { ino, kind } => {
                        let dtype = kind.map_or(u32::from(libc::DT_UNKNOWN), Kind::dirent_type);
                        buf.add(ino, next, dtype, name, Some(&DirBuf::unread()))
                    }
                })
        } else {
            self.fs.readdir(fh, offset, |name, ino, kind, next| {
                // A kind not known yet (an add written before the volume's typed entries,
                // or by a repair, and the inode not read since): DT_UNKNOWN.
                let dtype = kind.map_or(u32::from(libc::DT_UNKNOWN), Kind::dirent_type);
                buf.add(ino, next, dtype, name, None)
            })
        };
        match r {
            Ok(()) => {
                if !buf.send(reply) && !looked_up.is_empty() {
                    self.fs.forget_many(&looked_up);
                }
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn fsyncdir(&self, ino: u64, reply: Reply<'_>) {
        // The kernel sends a FUSE mount no syncfs (docs/mount.md): an fsync of the root
        // directory (`sync MOUNTPOINT`) syncs the whole file system instead.
        let r = if ino == crate::fs::ROOT {
            self.fs.sync()
        } else {
            self.fs.fsync(ino)
        };
        empty(r, reply);
    }

    /// CREATE of `name`, or TMPFILE (`name` None: a file with no name, `open(O_TMPFILE)`,
    /// which changes no directory until `linkat` names it).
    fn create(&self, req: &Request, name: Option<&OsStr>, c: CreateIn, reply: Reply<'_>) {
        let (parent, who) = (req.nodeid, caller(req));
        let (mode, umask, flags) = (c.mode, c.umask, c.flags as i32);
        let (r, settle) = match name {
            Some(n) => (
                self.fs
                    .create(parent, n.as_bytes(), mode, umask, flags, who),
                Settle::names(parent),
            ),
            None => (
                self.fs.tmpfile(parent, mode, umask, flags, who),
                Settle::Nothing,
            ),
        };
        match self.settled(r, settle) {
            Ok((a, fh)) => {
                // As an open's: direct for a file made synchronous by its directory's
                // flag (`chattr +S`, inherited) or on a nearly full device.
                let open = open_flags(&self.fs, a.ino, flags);
                if !reply.created(Fs::attr_ttl(&a, TTL), &self.file_attr(&a), fh, open) {
                    // Interrupted: the kernel holds neither the node nor the handle.
                    if let Err(e) = self.fs.release(a.ino) {
                        log::warn!("inode {}: an interrupted create's release: {e:?}", a.ino);
                    }
                    self.fs.forget(a.ino, 1);
                }
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn fallocate(&self, req: &Request, offset: u64, length: u64, mode: i32, reply: Reply<'_>) {
        let ino = req.nodeid;
        let r = self
            .fs
            .fallocate_clearing(ino, offset, length, mode, caller(req));
        let r = self.settled(r, Settle::Inode(ino));
        if r == Ok(true) {
            self.mode_changed(ino);
        }
        empty(r.map(|_| ()), reply);
    }

    fn setxattr(&self, req: &Request, name: &OsStr, value: &[u8], flags: i32, reply: Reply<'_>) {
        let name = name.as_bytes();
        let groups = acl_groups(name, req.pid);
        // Who calls decides an access ACL's set-group-id, and near root's share of the
        // device whether a spilled set may take it (`Fs::setxattr`); far from the share a
        // set of any size fits for anyone, and the ids are not asked for.
        let near = !(self.fs).room_for_anyone(crate::xattr::MAX_SET_BYTES as u64);
        let who = caller_if(req, name == crate::xattr::ACL_ACCESS || near);
        let r = self
            .fs
            .setxattr(req.nodeid, name, value, flags, who, &groups);
        empty(self.settled(r, Settle::Inode(req.nodeid)), reply);
    }

    fn ioctl(&self, req: &Request, cmd: u32, in_data: &[u8], reply: Reply<'_>) {
        // chattr and lsattr (`fs/flags.rs`; the kernel has checked who may), and the
        // shutdown (`fs/shutdown.rs`). The kernel keeps the attributes it cached across
        // the ioctl: a set moved ctime and changed what a write through an open handle
        // may do (`Fs::attr_ttl`), so they are dropped before the reply, not after it: once
        // chattr returns, the caller's next write or fstat asks the daemon again
        // (`tools/flags-after-open.py`), never the attributes cached before the flag.
        let (ino, who) = (req.nodeid, caller(req));
        if cmd == flags::FS_IOC_SHUTDOWN && who.uid == 0 && !self.fs.is_down() {
            crate::ending::hand_over(&self.mountpoint);
        }
        let set = matches!(cmd, flags::FS_IOC_SETFLAGS | flags::FS_IOC_FSSETXATTR);
        let r = self.fs.ioctl(ino, cmd, in_data, who);
        let what = match set {
            true => Settle::Inode(ino),
            false => Settle::Nothing,
        };
        match self.settled(r, what) {
            Ok(out) => {
                if set {
                    self.mode_changed(ino);
                }
                reply.ioctl(0, &out);
            }
            Err(e) => reply.error(errno(e)),
        }
    }
}
