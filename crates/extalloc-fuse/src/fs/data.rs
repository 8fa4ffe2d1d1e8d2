//! Data and attribute calls: open, release, read, write, setattr (mode, owner, size,
//! times), fallocate, fsync and statfs. A read from a file's start is a step of directory
//! read-ahead (`dirahead.rs`).
//!
//! Privileges: a write, truncate or fallocate by an unprivileged caller, and a change of
//! owner, clear set-user-id, and set-group-id when the group may execute or the caller is
//! not in the file's group (set-group-id without group execute otherwise marks mandatory
//! locking and stays), as the kernel's own file systems do (`setattr_should_drop_suidgid`,
//! generic/683-685). The FUSE layer says who is unprivileged: the kernel's
//! `FUSE_WRITE_KILL_SUIDGID` for a write, a caller other than root otherwise. FUSE passes
//! the caller's group but not its supplementary groups, so "in the file's group" is "the
//! caller's group is the file's": one in it only through a supplementary group loses the
//! bit where the kernel would keep it (the safe side). A write does not say who wrote, so
//! for a write set-group-id without group execute stays.

use super::core::{Attr, Caller, Errno, Fs, FsResult};
use super::dirahead::{self, DirAhead};
use super::flags;
use super::names::NewNode;
use crate::acl::Acl;
use crate::inode::{Inode, Kind, Time};
use crate::xattr::ACL_ACCESS;
use extalloc::volume::{Fallocate, Privilege};
use std::sync::atomic::Ordering::Relaxed;

/// Bytes one `copy_file_range` request copies at most.
pub const COPY_MAX: u64 = 16 << 20;

fn err<T>(e: i32) -> FsResult<T> {
    Err(Errno(e))
}

/// A time `setattr` sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    /// The current time.
    Now,
    /// This time.
    At(Time),
}

/// What `setattr` changes (`None`: unchanged).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// Permission bits (the type bits are ignored).
    pub mode: Option<u32>,
    /// Owner.
    pub uid: Option<u32>,
    /// Group.
    pub gid: Option<u32>,
    /// Size (truncate or extend).
    pub size: Option<u64>,
    /// Access time.
    pub atime: Option<SetTime>,
    /// Modification time.
    pub mtime: Option<SetTime>,
    /// Change time.
    pub ctime: Option<Time>,
    /// The kernel's writeback cache writing back the times of writes it cached (only
    /// `mtime` and `ctime`, through an open file): applied whatever the inode's flags, as
    /// ext4 sets a write's times when the write is made. The write came before any
    /// `chattr +i`/`+a` that would refuse it (`flags.rs`), and refusing its times would
    /// fail the next `fsync` of a file whose data is all written.
    pub cached_times: bool,
}

/// File system figures for `statfs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsStat {
    /// Block size.
    pub block_size: u32,
    /// Blocks of the device.
    pub blocks: u64,
    /// Free blocks.
    pub free: u64,
    /// Blocks an unprivileged caller may still take.
    pub available: u64,
    /// Inodes in use.
    pub files: u64,
    /// Inodes that may still be made (bounded by free blocks: each needs none, but its
    /// data needs some).
    pub files_free: u64,
}

impl Fs {
    /// Opens `ino` (`flags` as `open(2)`'s). None changes what the daemon does: with
    /// `O_DIRECT` the kernel bypasses its page cache (writing back and dropping the range
    /// first, `fuse.rs`) and sends plain reads and writes, which take the same path through
    /// the volume's cache as buffered ones, so both see the same data.
    pub fn open(&self, ino: u64, flags: i32) -> FsResult<u64> {
        let _pin = self.ensure_loaded(&[ino])?; // `ondemand.rs`: pinned
        self.live()?;
        let mut ns = self.ns_write();
        flags::check_open(&ns, ino, flags)?;
        let n = ns.node_mut(ino)?;
        n.open += 1;
        Ok(self.handle(Some(flags)))
    }

    /// Makes and opens a regular file (`creat`).
    pub fn create(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
        flags: i32,
        who: Caller,
    ) -> FsResult<(Attr, u64)> {
        self.live()?;
        let new = NewNode::file(mode, umask);
        let attr = self.make(parent, name, new, who)?;
        let fh = self.open(attr.ino, flags)?;
        Ok((attr, fh))
    }

    /// The last close of one open: pending times are written, and a file unlinked while
    /// open is removed once nothing else holds it.
    pub fn release(&self, ino: u64) -> FsResult<()> {
        let _pin = self.ensure_loaded(&[ino])?; // `ondemand.rs`: pinned
                                                // auto_da_alloc: the last close of a file truncated to zero writes its new data
                                                // back, so it goes with the next commit as the truncate does. A shared look first:
                                                // this runs at every close, and the flag is rare.
        let rewritten = self
            .ns
            .read()
            .node(ino)
            .is_ok_and(|n| n.rewritten && n.open <= 1);
        if rewritten {
            self.vol.write_back(ino)?;
            self.ns_write().node_mut(ino)?.rewritten = false;
        }
        self.flush_attrs(Some(ino))?;
        let mut ns = self.ns_write();
        let n = ns.node_mut(ino)?;
        n.open = n.open.saturating_sub(1);
        let (last, kind) = (n.open == 0, n.inode.kind);
        if last {
            self.headroom_closed(ino, n.open);
        }
        if last && kind == Kind::File && n.inode.nlink > 0 {
            self.vol.close_file(ino)?;
        }
        self.reap(&mut ns, ino)
    }

    /// Reads up to `len` bytes at `offset` (fewer at the end of the file); updates atime
    /// as the mount's atime mode says (`atime.rs`). A read from offset 0 is a step of
    /// directory read-ahead (`dirahead.rs`), which may advise the device of the next
    /// files of a listed directory first.
    pub fn read(&self, ino: u64, offset: u64, len: u32) -> FsResult<Vec<u8>> {
        let _pin = self.ensure_loaded(&[ino])?; // `ondemand.rs`: pinned
        self.live()?;
        self.regular(ino, libc::EINVAL)?;
        if offset == 0 && self.dir_ahead_on.load(Relaxed) {
            self.read_ahead_dir(ino);
        }
        let data = self.vol.read(ino, offset, u64::from(len))?;
        self.accessed(ino)?;
        Ok(data)
    }

    /// Directory read-ahead's step for a read of `ino` from its start: the device is
    /// advised of the files it names (`dirahead.rs`). Advice changes nothing a read
    /// returns: a device that refuses it is logged, and the read goes on.
    fn read_ahead_dir(&self, ino: u64) {
        let next = self.dir_ahead.lock().step(ino);
        if next.is_empty() {
            return;
        }
        if let Err(e) = self.vol.volume().will_need(&next, dirahead::PER_FILE_BYTES) {
            log::debug!("directory read-ahead after inode {ino}: {e}");
        }
    }

    /// Turns directory read-ahead (`dirahead.rs`) on or off; on by default. Off, listings
    /// are no longer remembered and reads advise nothing.
    pub fn set_dir_readahead(&self, on: bool) {
        self.dir_ahead_on.store(on, Relaxed);
        if !on {
            *self.dir_ahead.lock() = DirAhead::default();
        }
    }

    /// Writes `data` at `offset` into the cache; returns the bytes written. `kill_priv`:
    /// the writer is unprivileged (see the module documentation). A write reaching past
    /// the largest file ([`extalloc::volume::MAX_FILE_BYTES`], 2^63 - 1, the kernel's own) is `EFBIG` and changes
    /// nothing.
    pub fn write(&self, ino: u64, offset: u64, data: &[u8], kill_priv: bool) -> FsResult<u32> {
        self.write_clearing(ino, offset, data, kill_priv)
            .map(|(n, _)| n)
    }

    /// [`Fs::write`], and whether it cleared set-user-id or set-group-id (a cache of the
    /// mode, the kernel's, is then stale).
    pub fn write_clearing(
        &self,
        ino: u64,
        offset: u64,
        data: &[u8],
        kill_priv: bool,
    ) -> FsResult<(u32, bool)> {
        self.write_from(ino, offset, data, kill_priv, false, Caller::ROOT)
    }

    /// [`Fs::write_clearing`] for `who`; `from_cache`: the kernel's page cache writes the
    /// data back (`FUSE_WRITE_CACHE`), and mtime and ctime are left alone. A write `who`
    /// made directly (not from the cache) that would take root's share of the device is
    /// refused with `ENOSPC` unless `who` is root ([`Caller::privilege`]); a write back
    /// from the cache carries no writer (the kernel's flusher sends it) and may take it:
    /// what the kernel holds dirty is bounded by the room `statfs` gives as available
    /// (`headroom.rs`), and opens for writing go direct before that room runs out.
    ///
    /// Under the writeback cache the kernel owns a regular file's times and sends them in
    /// a SETATTR of its own (when it writes the inode back, at fsync and at close);
    /// stamping them here raced that SETATTR: a writeback's WRITE served after it, on
    /// another session thread, replaced the kernel's times with the daemon's later clock
    /// (fstests generic/003, "modify time has changed for file1 after remount", about 1
    /// run in 10 under load). A commit between the two keeps the new data with the old
    /// times, as the kernel had not yet handed them over.
    pub fn write_from(
        &self,
        ino: u64,
        offset: u64,
        data: &[u8],
        kill_priv: bool,
        from_cache: bool,
        who: Caller,
    ) -> FsResult<(u32, bool)> {
        let _pin = self.ensure_loaded(&[ino])?; // `ondemand.rs`: pinned
        self.live()?;
        self.regular(ino, libc::EINVAL)?;
        let share = match from_cache {
            true => Caller::ROOT.privilege(),
            false => who.privilege(),
        };
        let wrote = self.vol.write_for(ino, offset, data, share);
        if self.headroom.spend(data.len() as u64) {
            self.headroom.retune(self.room_bytes());
        }
        if let Err(e) = wrote {
            let e = Errno::from(e);
            self.write_refused(ino, e, from_cache);
            return Err(e);
        }
        let cleared = self.data_changed(ino, kill_priv.then_some(None), !from_cache)?;
        Ok((data.len() as u32, cleared))
    }

    /// `copy_file_range(2)` served by the daemon: up to `len` bytes of `ino_in` from
    /// `off_in` (fewer at its end, and at most [`COPY_MAX`] a call: a short copy, which
    /// callers loop over) written to `ino_out` at `off_out` through the cache; returns the
    /// bytes copied. An immutable target is `EPERM` (the kernel's own check does not see
    /// FUSE's flags, `flags.rs`); the kernel has cleared its set-id bits already. Written
    /// for `who` as [`Fs::write_from`] writes a direct write.
    pub fn copy_range(
        &self,
        (ino_in, off_in): (u64, u64),
        (ino_out, off_out): (u64, u64),
        len: u64,
        who: Caller,
    ) -> FsResult<u32> {
        let _pin = self.ensure_loaded(&[ino_in, ino_out])?; // `ondemand.rs`: pinned
        self.live()?;
        flags::check(&self.ns.read(), ino_out, false)?;
        let data = self.read(ino_in, off_in, len.min(COPY_MAX) as u32)?;
        if data.is_empty() {
            return Ok(0);
        }
        Ok(self
            .write_from(ino_out, off_out, &data, false, false, who)?
            .0)
    }

    /// Changes `ino`'s attributes for `who` (a truncate by anyone but root, and a change
    /// of owner, clear set-user-id and set-group-id as the module documentation says; `who`
    /// is read only for a truncate, and may be [`Caller::NOBODY`] otherwise).
    pub fn setattr(&self, ino: u64, set: SetAttr, who: Caller) -> FsResult<Attr> {
        let _pin = self.ensure_loaded(&[ino])?; // `ondemand.rs`: pinned
        self.live()?;
        let kind = self.setattr_allowed(ino, &set)?;
        let mut rewritten = false;
        if let Some(size) = set.size {
            match kind {
                Kind::File => {
                    rewritten = size == 0 && self.vol.size(ino)? > 0;
                    if rewritten {
                        // The truncate and the rewrite's write-back at the last close go
                        // in one commit unless the rewrite is large: a commit the volume
                        // makes by itself between them would leave the file empty.
                        self.vol.volume().commit_unless_room()?;
                    }
                    self.vol.truncate(ino, size)?
                }
                Kind::Dir => return err(libc::EISDIR),
                _ => return err(libc::EINVAL),
            }
        }
        let mut ns = self.ns_write();
        let n = ns.node_mut(ino)?;
        n.rewritten |= rewritten;
        let t = Time::now();
        let i = &mut n.inode;
        let chown = set.uid.is_some() || set.gid.is_some();
        if set.size.is_some() && who.uid != 0 {
            drop_privileges(i, Some(who.gid));
        } else if chown {
            drop_privileges(i, None);
        }
        if let Some(m) = set.mode {
            i.perm = (m & 0o7777) as u16;
        }
        if let Some(u) = set.uid {
            i.uid = u;
        }
        if let Some(g) = set.gid {
            i.gid = g;
        }
        let pick = |s: SetTime| match s {
            SetTime::Now => t,
            SetTime::At(x) => x,
        };
        if let Some(a) = set.atime {
            i.atime = pick(a);
        }
        match set.mtime {
            Some(m) => i.mtime = pick(m),
            None if set.size.is_some() => i.mtime = t,
            None => {}
        }
        i.ctime = set.ctime.unwrap_or(t);
        let perm = i.perm;
        let times_only = set.size.is_none() && set.mode.is_none() && !chown;
        match n.xattrs.get(ACL_ACCESS).and_then(|v| Acl::parse(v)) {
            // A chmod rewrites the access ACL's base entries with the inode, in one group
            // (the same entries, so the set does not grow: whoever asks).
            Some(mut acl) if set.mode.is_some() => {
                acl.chmod(perm);
                let mut xattrs = n.xattrs.clone();
                xattrs.insert(ACL_ACCESS.to_vec(), acl.encode());
                self.store_set(&mut ns, ino, xattrs, Privilege::Superuser)?;
            }
            // Times alone (the writeback cache's mtime and ctime at every close, `touch`,
            // `utimensat`) wait in memory for the next commit, `fsync`, last close or
            // unmount, as a write's times do: what a crash before then loses is what ext4
            // loses of an uncommitted journal (`-o sync` commits it at once).
            _ if times_only => ns.times_dirty(ino)?,
            _ => self.persist(&mut ns, ino)?,
        }
        self.attr_of(&ns, ino)
    }

    /// What `setattr` checks first: the inode's flags allow the change (`flags.rs`); the
    /// inode's kind.
    fn setattr_allowed(&self, ino: u64, set: &SetAttr) -> FsResult<Kind> {
        let ns = self.ns.read();
        // Append-only: times may only be set to now (`utime(path, NULL)`, `touch`). With
        // the writeback cache the kernel sends even that mtime as a time, but its atime
        // as "now" (FATTR_ATIME_NOW): an explicit atime, or an mtime alone, is explicit.
        let at = |t: Option<SetTime>| matches!(t, Some(SetTime::At(_)));
        let explicit = at(set.atime) || (set.atime.is_none() && at(set.mtime));
        let fixed = set.size.is_some()
            || set.mode.is_some()
            || set.uid.is_some()
            || set.gid.is_some()
            || explicit;
        if set.cached_times {
            debug_assert!(set.size.is_none() && set.mode.is_none() && set.atime.is_none());
        } else {
            flags::check(&ns, ino, fixed)?;
        }
        Ok(ns.node(ino)?.inode.kind)
    }

    /// `fallocate(2)` with Linux's `mode` bits: plain, `KEEP_SIZE`, `PUNCH_HOLE |
    /// KEEP_SIZE` and `ZERO_RANGE` (with or without `KEEP_SIZE`); others are
    /// `EOPNOTSUPP`. An allocation that would take root's share of the device is `ENOSPC`
    /// unless `who` is root ([`Caller::privilege`]).
    /// An unprivileged `who` (not root) clears set-user-id and set-group-id as a write does.
    pub fn fallocate(
        &self,
        ino: u64,
        offset: u64,
        len: u64,
        mode: i32,
        who: Caller,
    ) -> FsResult<()> {
        self.fallocate_clearing(ino, offset, len, mode, who)
            .map(|_| ())
    }

    /// [`Fs::fallocate`], and whether it cleared set-user-id or set-group-id.
    pub fn fallocate_clearing(
        &self,
        ino: u64,
        offset: u64,
        len: u64,
        mode: i32,
        who: Caller,
    ) -> FsResult<bool> {
        let _pin = self.ensure_loaded(&[ino])?; // `ondemand.rs`: pinned
        self.live()?;
        flags::check(&self.ns.read(), ino, true)?;
        const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
        const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE;
        const ZERO: i32 = libc::FALLOC_FL_ZERO_RANGE;
        let how = match mode {
            0 => Fallocate::Allocate,
            KEEP => Fallocate::KeepSize,
            m if m == PUNCH | KEEP => Fallocate::PunchHole,
            ZERO => Fallocate::ZeroRange { keep_size: false },
            m if m == ZERO | KEEP => Fallocate::ZeroRange { keep_size: true },
            _ => return err(libc::EOPNOTSUPP),
        };
        if len == 0 {
            return err(libc::EINVAL);
        }
        self.regular(ino, libc::ENODEV)?;
        self.vol
            .fallocate_for(ino, how, offset, len, who.privilege())?;
        self.data_changed(ino, (who.uid != 0).then_some(Some(who.gid)), true)
    }

    /// Ok for a regular file; `EISDIR` for a directory, `other` for the rest.
    fn regular(&self, ino: u64, other: i32) -> FsResult<()> {
        match self.ns.read().node(ino)?.inode.kind {
            Kind::File => Ok(()),
            Kind::Dir => err(libc::EISDIR),
            _ => err(other),
        }
    }

    /// The data of `ino` changed: with `stamp`, mtime and ctime are now, written later;
    /// `kill_priv` (an unprivileged caller, with its group when known) clears set-user-id
    /// and set-group-id as [`drop_privileges`] says, moving ctime, written now (a crash
    /// must not bring them back). True when it cleared a bit.
    fn data_changed(
        &self,
        ino: u64,
        kill_priv: Option<Option<u32>>,
        stamp: bool,
    ) -> FsResult<bool> {
        let mut ns = self.ns_write();
        let n = ns.node_mut(ino)?;
        let t = Time::now();
        if stamp {
            n.inode.mtime = t;
            n.inode.ctime = t;
            n.attr_dirty = true;
            ns.dirty_attrs.insert(ino);
        }
        let n = ns.node_mut(ino)?;
        let cleared = kill_priv.is_some_and(|gid| drop_privileges(&mut n.inode, gid));
        debug_assert!(!cleared || n.inode.perm & libc::S_ISUID as u16 == 0);
        if cleared {
            n.inode.ctime = t;
            self.persist(&mut ns, ino)?;
        }
        Ok(cleared)
    }

    /// Makes `ino` durable, with every namespace change before it (one journal).
    pub fn fsync(&self, ino: u64) -> FsResult<()> {
        let _pin = self.ensure_loaded(&[ino])?; // `ondemand.rs`: pinned
        self.live()?;
        self.flush_attrs(Some(ino))?;
        self.vol.fsync(ino)?;
        if let Ok(n) = self.ns_write().node_mut(ino) {
            n.synced = Some(std::time::Instant::now());
        }
        Ok(())
    }

    /// Figures for `statfs`. Blocks freed since the last commit (a removed file's, a
    /// punched range's) count as free, as ext4's counter counts them at the free: a `df`
    /// after `rm` shows the space back, with no commit (a `statfs` used to commit them
    /// first, and stress-ng's dentry stressor sends ten a loop). They become reusable at
    /// the next commit, which an allocation that finds no room makes itself
    /// (`Volume::write` commits and tries again while frees wait).
    pub fn statfs(&self) -> FsResult<FsStat> {
        let s = self.vol.statfs();
        let (free, available) = self.vol.free_and_available_with_pending();
        Ok(FsStat {
            block_size: s.block_size,
            blocks: s.blocks,
            free,
            available,
            files: self.inodes(),
            files_free: s.available_blocks,
        })
    }
}

/// Blocks beyond a write's own that [`Fs::room_for_anyone`] wants available before it
/// lets the writer's ids go unasked: more than the room a file's first cached data adds to
/// what is kept for metadata (its entry in the file tree), so a write it lets through
/// unasked would pass the unprivileged check too.
pub const SHARE_SLACK_BLOCKS: u64 = 64;

/// Clears set-user-id, and set-group-id when the group may execute or the caller's group
/// `caller_gid` (when known) is not the file's, of a regular file (the kernel's
/// `setattr_should_drop_suidgid`); true if a bit changed.
fn drop_privileges(i: &mut Inode, caller_gid: Option<u32>) -> bool {
    if i.kind != Kind::File {
        return false;
    }
    let before = i.perm;
    i.perm &= !(libc::S_ISUID as u16);
    if i.perm & libc::S_IXGRP as u16 != 0 || caller_gid.is_some_and(|g| g != i.gid) {
        i.perm &= !(libc::S_ISGID as u16);
    }
    i.perm != before
}

impl Fs {
    /// The direct-write rule of this file system (see `headroom.rs`).
    pub fn headroom(&self) -> &super::headroom::Headroom {
        &self.headroom
    }

    /// Blocks data may still take: `statfs`'s available blocks (cached data's reservations
    /// and the room kept for metadata left out) and those freed since the last commit.
    pub(crate) fn room_blocks(&self) -> u64 {
        self.vol.free_and_available_with_pending().1
    }

    /// The bytes data may still take: `statfs`'s available blocks (cached data's
    /// reservations and the room kept for metadata left out) and those freed since the
    /// last commit.
    pub fn room_bytes(&self) -> u64 {
        self.room_blocks() * self.vol.volume().block_size()
    }

    /// Whether a write of `bytes` fits what `statfs` shows available with room to spare
    /// ([`SHARE_SLACK_BLOCKS`]): then root's share of the device is not near and the
    /// writer's ids do not matter, so the daemon need not learn them (the kernel sends a
    /// write's without them, and reading them from `/proc` costs a file read per write).
    /// A lower bound taking no locality lock answers first (`available_at_least`).
    pub fn room_for_anyone(&self, bytes: u64) -> bool {
        let blocks = bytes.div_ceil(self.vol.volume().block_size());
        self.vol.available_at_least(blocks + SHARE_SLACK_BLOCKS)
    }

    /// Whether an open of regular file `ino` with `open(2)`'s `flags` bypasses the kernel's
    /// cache because the device is nearly full (`headroom.rs`). Only opens for writing,
    /// only when the kernel maps direct opens.
    pub fn writes_direct(&self, ino: u64, flags: i32) -> bool {
        let h = &self.headroom;
        flags & libc::O_ACCMODE != libc::O_RDONLY
            && h.direct.load(Relaxed)
            && !self.vol.available_at_least(h.margin_blocks())
            && self
                .ns
                .read()
                .node(ino)
                .is_ok_and(|n| n.inode.kind == crate::inode::Kind::File)
    }

    /// After a write of `ino` failed with `err`: a write back from the kernel's cache
    /// (`from_cache`) that found no room marks the inode and drops the kernel's cached
    /// attributes of it, so that its writer's next cached `write(2)` asks
    /// [`Fs::getattr_through`] and gets `ENOSPC`. Called with no lock held.
    pub(crate) fn write_refused(&self, ino: u64, err: Errno, from_cache: bool) {
        debug_assert!(err.0 > 0, "a refused write has an errno ({})", err.0);
        if from_cache && err.0 == libc::ENOSPC {
            // No assertion that it is marked now: a last close may take the mark off at
            // once (a close's own write back fails here while its release runs).
            self.headroom.mark(ino);
            self.attrs_changed(ino);
        }
    }

    /// `ENOSPC` for a question about `ino`'s attributes through a handle opened for
    /// writing while `ino` is marked and the room is still under the margin; the mark goes
    /// once the room is back.
    pub(crate) fn check_headroom(&self, ino: u64) -> FsResult<()> {
        if !self.headroom.is_marked(ino) {
            return Ok(());
        }
        if self.room_blocks() < self.headroom.margin_blocks() {
            return Err(Errno(libc::ENOSPC));
        }
        // A write back failing now may mark it again: that is the next latch.
        self.headroom.unmark(ino);
        Ok(())
    }

    /// The last close of `ino`: its mark goes (the kernel reported the lost write back at
    /// that close).
    pub(crate) fn headroom_closed(&self, ino: u64, open: u32) {
        debug_assert_eq!(open, 0, "only the last close of {ino} takes its latch off");
        self.headroom.unmark(ino);
    }
}
