//! Kernel requests to [`Fs`] calls, through the `fuser` crate. Each request is served on
//! the session's thread that read it (several threads; [`Fs`] is shared).
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
use crate::fs::{Attr, Errno as FsErrno, Fs, FsResult};
use crate::inode::{Kind, Time};
use crate::kernel::{negotiate, MountFlags};
use crate::replies::{
    acl_groups, caller, caller_if, data, drop_attrs, empty, errno, file_attr, negative_entry,
    open_flags, opened, set_time, statfs_reply, xattr_reply, DIR_OPEN_FLAGS, OPEN_FLAGS, TTL,
};
use fuser::{
    CopyFileRangeFlags, Errno, FileAttr, FileHandle, Filesystem, Generation, INodeNo, IoctlFlags,
    KernelConfig, LockOwner, Notifier, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::SystemTime;

/// The `fuser` file system: the shared [`Fs`].
pub struct FuseFs {
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
    pub fn new(fs: Arc<Fs>, mountpoint: &Path) -> FuseFs {
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
    pub fn notifier_slot(&self) -> Arc<OnceLock<Notifier>> {
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

    fn file_attr(&self, a: &Attr) -> FileAttr {
        file_attr(a, self.block_size)
    }

    fn entry(&self, r: Result<Attr, FsErrno>, reply: ReplyEntry) {
        match r {
            Ok(a) => reply.entry(&TTL, &self.file_attr(&a), Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn attr(&self, r: Result<Attr, FsErrno>, reply: ReplyAttr) {
        match r {
            Ok(a) => reply.attr(&TTL, &self.file_attr(&a)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn make(&self, req: &Request, parent: INodeNo, name: &OsStr, new: NewNode<'_>, r: ReplyEntry) {
        let made = self.fs.make(parent.0, name.as_bytes(), new, caller(req));
        self.entry(self.settled(made, Settle::names(parent.0)), r);
    }
}

impl Filesystem for FuseFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // The mount is not in the mount table before init is answered: the flags are read
        // at the first read, listing or change.
        negotiate(&self.fs, config);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.fs.lookup(parent.0, name.as_bytes()) {
            // A name that is not there: node id 0 with the entry timeout, so the kernel
            // caches the miss (a negative dentry) instead of asking again at every stat or
            // open of a missing name. Every name is made through the kernel, which replaces
            // the negative entry when it makes one; nothing makes names behind its back
            // while the mount is served.
            Err(FsErrno(libc::ENOENT)) => {
                reply.entry(&TTL, &negative_entry(), Generation(0));
            }
            r => self.entry(r, reply),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.attr(self.fs.getattr(ino.0), reply);
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(set_time),
            mtime: mtime.map(set_time),
            ctime: ctime.map(Time::from_system),
        };
        let who = caller_if(req, size.is_some());
        let r = self.fs.setattr(ino.0, set, who);
        self.attr(self.settled(r, Settle::Inode(ino.0)), reply);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        data(self.fs.readlink(ino.0), reply);
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let Some(kind) = Kind::from_mode(mode).filter(|k| !matches!(k, Kind::Dir | Kind::Symlink))
        else {
            return reply.error(Errno::EINVAL);
        };
        let new = NewNode {
            kind,
            mode,
            umask,
            rdev,
            target: None,
        };
        self.make(req, parent, name, new, reply);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let new = NewNode {
            kind: Kind::Dir,
            mode,
            umask,
            rdev: 0,
            target: None,
        };
        self.make(req, parent, name, new, reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.fs.unlink(parent.0, name.as_bytes());
        empty(self.settled(r, Settle::names(parent.0)), reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.fs.rmdir(parent.0, name.as_bytes());
        empty(self.settled(r, Settle::names(parent.0)), reply);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let new = NewNode {
            kind: Kind::Symlink,
            mode: 0o777,
            umask: 0,
            rdev: 0,
            target: Some(target.as_os_str().as_bytes()),
        };
        self.make(req, parent, link_name, new, reply);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let (from, to) = (
            (parent.0, name.as_bytes()),
            (newparent.0, newname.as_bytes()),
        );
        let who = caller_if(req, flags.bits() & crate::fs::names::RENAME_WHITEOUT != 0);
        let r = self
            .fs
            .rename(from.0, from.1, to.0, to.1, flags.bits(), who);
        empty(self.settled(r, Settle::Names([from.0, to.0])), reply);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = self.fs.link(ino.0, newparent.0, newname.as_bytes());
        self.entry(self.settled(r, Settle::names(newparent.0)), reply);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.flags.refresh_atime(&self.fs);
        opened(
            self.fs.open(ino.0, flags.0),
            open_flags(&self.fs, ino.0),
            reply,
        );
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.flags.refresh_atime(&self.fs);
        data(self.fs.read(ino.0, offset, size), reply);
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        let cached = write_flags.contains(WriteFlags::FUSE_WRITE_CACHE);
        let r = self.fs.write_from(ino.0, offset, data, kill, cached);
        let r = self.settled(r, Settle::Data(ino.0));
        match r {
            Ok((n, cleared)) => {
                if cleared {
                    self.mode_changed(ino.0);
                }
                reply.written(n)
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing to do at a close: the kernel writes the file's dirty pages back before it
        // sends FLUSH, and `release` writes the times. ENOSYS once makes the kernel stop
        // sending FLUSH for the mount's life (its write-back stays), a round trip less per
        // close; locks are the kernel's own (no lock requests are served).
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        empty(self.fs.release(ino.0), reply);
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _ds: bool, reply: ReplyEmpty) {
        empty(self.fs.fsync(ino.0), reply);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        opened(self.fs.opendir(ino.0), DIR_OPEN_FLAGS, reply);
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if offset == 0 {
            self.flags.refresh_atime(&self.fs);
        }
        let r = self.fs.readdir(fh.0, offset, |name, ino, kind, next| {
            reply.add(
                INodeNo(ino),
                next,
                kind.file_type(),
                OsStr::from_bytes(name),
            )
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        if offset == 0 {
            self.flags.refresh_atime(&self.fs);
        }
        let r = self.fs.readdirplus(fh.0, offset, |name, a, next| {
            let attr = self.file_attr(a);
            let name = OsStr::from_bytes(name);
            reply.add(INodeNo(a.ino), next, name, &TTL, &attr, Generation(0))
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.fs.releasedir(fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _ds: bool,
        reply: ReplyEmpty,
    ) {
        // The kernel sends a FUSE mount no syncfs (docs/mount.md): an fsync of the root
        // directory (`sync MOUNTPOINT`) syncs the whole file system instead.
        let r = if ino.0 == crate::fs::ROOT {
            self.fs.sync()
        } else {
            self.fs.fsync(ino.0)
        };
        empty(r, reply);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        statfs_reply(self.fs.statfs(), reply);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let who = caller(req);
        let r = self
            .fs
            .create(parent.0, name.as_bytes(), mode, umask, flags, who);
        match self.settled(r, Settle::names(parent.0)) {
            Ok((a, fh)) => reply.created(
                &TTL,
                &self.file_attr(&a),
                Generation(0),
                FileHandle(fh),
                OPEN_FLAGS,
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let r = self
            .fs
            .fallocate_clearing(ino.0, offset, length, mode, caller(req));
        let r = self.settled(r, Settle::Inode(ino.0));
        if r == Ok(true) {
            self.mode_changed(ino.0);
        }
        empty(r.map(|_| ()), reply);
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let name = name.as_bytes();
        let groups = acl_groups(name, req.pid());
        let who = caller_if(req, name == crate::xattr::ACL_ACCESS);
        let r = self.fs.setxattr(ino.0, name, value, flags, who, &groups);
        empty(self.settled(r, Settle::Inode(ino.0)), reply);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        xattr_reply(self.fs.getxattr(ino.0, name.as_bytes()), size, reply);
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        // Privilege as the uid says: FUSE passes no capabilities.
        xattr_reply(
            self.fs.listxattr(ino.0, || caller(req).uid == 0),
            size,
            reply,
        );
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.fs.removexattr(ino.0, name.as_bytes());
        empty(self.settled(r, Settle::Inode(ino.0)), reply);
    }

    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        // chattr and lsattr (`fs/flags.rs`; the kernel has checked who may), and the
        // shutdown (`fs/shutdown.rs`). The kernel keeps the attributes it cached across
        // the ioctl: a set moved ctime, so drop them.
        let who = caller(req);
        if cmd == flags::FS_IOC_SHUTDOWN && who.uid == 0 && !self.fs.is_down() {
            crate::ending::hand_over(&self.mountpoint);
        }
        let set = matches!(cmd, flags::FS_IOC_SETFLAGS | flags::FS_IOC_FSSETXATTR);
        let r = self.fs.ioctl(ino.0, cmd, in_data, who);
        let what = match set {
            true => Settle::Inode(ino.0),
            false => Settle::Nothing,
        };
        match self.settled(r, what) {
            Ok(out) => {
                reply.ioctl(0, &out);
                if set {
                    self.mode_changed(ino.0);
                }
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        // The kernel has written both ranges' dirty pages back and drops the target's after.
        let r = self
            .fs
            .copy_range(ino_in.0, offset_in, ino_out.0, offset_out, len);
        match self.settled(r, Settle::Inode(ino_out.0)) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(errno(e)),
        }
    }
}
