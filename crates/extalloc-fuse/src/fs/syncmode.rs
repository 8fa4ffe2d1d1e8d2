//! `-o dirsync` and `-o sync`: a change is durable before it is answered, as ext4 makes it
//! with those flags.
//!
//! - **dirsync**: a namespace change (a name made, removed, linked or renamed) is committed
//!   before its reply.
//! - **sync**: that, and every change of an inode's attributes (`chmod`, `chown`, times,
//!   truncation, `fallocate`, extended attributes, `chattr`) is written with its data and
//!   committed before its reply. Data writes need nothing here: on a `sync` mount the
//!   kernel follows each `write(2)` with an `fsync` of the file (`IS_SYNC`), which writes it
//!   back and commits.
//!
//! The flags are the superblock's (`mount -o sync`, `mount -o remount,dirsync`): the FUSE
//! layer reads them from `/proc/self/mountinfo`, as the atime flags (`atime.rs`), at most
//! once a second, so a remount takes effect for the daemon within about a second.
//!
//! Data structures: [`SyncMode`] and its one-byte code in `Fs::sync_mode`. Invariant: under
//! a mode, a call that [`Fs::settle`]s has committed before it returns `Ok`. Lock order:
//! none held here; a commit takes the volume's locks (`fs/mod.rs`).

use super::core::{Fs, FsResult};
use std::sync::atomic::Ordering::Relaxed;

/// When changes are committed, as the mount's `sync`/`dirsync` flags ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum SyncMode {
    /// Neither flag: changes are durable at `fsync`, the background commit and unmount.
    #[default]
    Lazy,
    /// `dirsync`: namespace changes are committed before their replies.
    DirSync,
    /// `sync`: namespace and attribute changes are committed before their replies.
    Sync,
}

impl SyncMode {
    /// The mode the file system options of a mountinfo line give (`rw,sync,...`).
    pub fn from_super_options(options: &str) -> SyncMode {
        let has = |o: &str| options.split(',').any(|x| x == o);
        if has("sync") {
            SyncMode::Sync
        } else if has("dirsync") {
            SyncMode::DirSync
        } else {
            SyncMode::Lazy
        }
    }

    fn code(self) -> u8 {
        self as u8
    }

    fn from_code(c: u8) -> SyncMode {
        match c {
            0 => SyncMode::Lazy,
            1 => SyncMode::DirSync,
            2 => SyncMode::Sync,
            _ => unreachable!("only SyncMode::code is stored"),
        }
    }
}

/// What a change touched, for [`Fs::settle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// The namespace: a name made, removed, linked or renamed in these directories (the
    /// same one twice when one directory changed).
    Names([u64; 2]),
    /// An inode's attributes (or its data's size and blocks).
    Inode(u64),
    /// A write of an inode's data: committed only for a synchronous inode (`chattr +S`,
    /// whose writes the kernel never follows with an fsync); under `-o sync` the kernel
    /// fsyncs after each `write(2)` itself, so no second commit here.
    Data(u64),
    /// Nothing the mount's sync modes cover (a query).
    Nothing,
}

impl Settle {
    /// A name made or removed in directory `dir`.
    pub fn names(dir: u64) -> Settle {
        Settle::Names([dir, dir])
    }
}

impl Fs {
    /// Sets the mode (the FUSE layer reads it from the mount's flags).
    pub fn set_sync_mode(&self, mode: SyncMode) {
        self.sync_mode.store(mode.code(), Relaxed);
    }

    /// The mode in force.
    pub fn sync_mode(&self) -> SyncMode {
        SyncMode::from_code(self.sync_mode.load(Relaxed))
    }

    /// Commits what a change that succeeded touched, if the mode asks for it or the inode
    /// (for names, a directory) has the synchronous flag (`chattr +S`, `flags.rs`). On
    /// failure the change stands in memory and becomes durable at a later commit, if any
    /// succeeds.
    pub fn settle(&self, what: Settle) -> FsResult<()> {
        let mode = match what {
            Settle::Data(ino) if self.is_sync_inode(ino) => SyncMode::Sync,
            Settle::Data(_) => return Ok(()),
            Settle::Inode(ino) if self.is_sync_inode(ino) => SyncMode::Sync,
            Settle::Names(dirs) if dirs.iter().any(|&d| self.is_sync_inode(d)) => SyncMode::DirSync,
            _ => self.sync_mode(),
        };
        match (mode, what) {
            (SyncMode::Lazy, _)
            | (SyncMode::DirSync, Settle::Inode(_) | Settle::Data(_))
            | (_, Settle::Nothing) => Ok(()),
            (_, Settle::Names(_)) => Ok(self.vol.volume().sync()?),
            (SyncMode::Sync, Settle::Inode(ino) | Settle::Data(ino)) => self.fsync(ino),
        }
    }

    /// `r`, once [`Fs::settle`]d if it succeeded.
    pub fn settled<T>(&self, r: FsResult<T>, what: Settle) -> FsResult<T> {
        let v = r?;
        self.settle(what)?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::super::core::Errno;
    use super::super::data::SetAttr;
    use super::super::tests::{device, find, fresh, node, remount, ME};
    use super::super::ROOT;
    use super::*;
    use crate::inode::Kind;
    use extalloc::disk::device::{Crash, FaultDevice, MemDevice};
    use std::sync::Arc;

    #[test]
    fn the_flags_give_the_mode() {
        let m = SyncMode::from_super_options;
        assert_eq!(m("rw,user_id=0,group_id=0"), SyncMode::Lazy);
        assert_eq!(m("rw,dirsync,user_id=0"), SyncMode::DirSync);
        assert_eq!(m("rw,sync,dirsync"), SyncMode::Sync);
        assert_eq!(m("rw,syncx"), SyncMode::Lazy);
        for mode in [SyncMode::Lazy, SyncMode::DirSync, SyncMode::Sync] {
            assert_eq!(SyncMode::from_code(mode.code()), mode);
        }
    }

    /// Sets `ino`'s mode to 0600, settled.
    fn chmod_600(fs: &Fs, ino: u64) {
        let chmod = SetAttr {
            mode: Some(0o600),
            ..SetAttr::default()
        };
        let changed = fs.setattr(ino, chmod, ME);
        fs.settled(changed, Settle::Inode(ino)).unwrap();
    }

    /// `fs` after a power cut that loses every write not flushed, remounted.
    fn power_cut(fs: Fs, dev: &Arc<FaultDevice<MemDevice>>) -> Fs {
        dev.fail_writes(true);
        drop(fs);
        dev.crash(Crash::DropAll).unwrap();
        dev.fail_writes(false);
        remount(dev).0
    }

    /// Makes a name and changes a mode under `mode`, then loses every unflushed write:
    /// which of the two survived.
    fn survivors(mode: SyncMode) -> (bool, bool) {
        let dev = device(5);
        let fs = fresh(&dev);
        fs.sync().unwrap();
        fs.set_sync_mode(mode);
        assert_eq!(fs.sync_mode(), mode);
        let made = fs.make(ROOT, b"f", node(Kind::File), ME);
        let ino = fs.settled(made, Settle::names(ROOT)).unwrap().ino;
        chmod_600(&fs, ino);
        let fs = power_cut(fs, &dev);
        let named = find(&fs, "f").ok();
        let perm = named.map(|i| fs.getattr(i).unwrap().inode.perm);
        (named.is_some(), perm == Some(0o600))
    }

    /// Under a lazy mount, `chattr +S` on the root makes a name and changes a mode in it,
    /// then loses every unflushed write: which of the two survived (both: the directory's
    /// flag commits the name, the new file inherits the flag and commits its mode).
    #[test]
    fn the_synchronous_flag_commits_its_inode_and_its_directory_alone() {
        let dev = device(6);
        let fs = fresh(&dev);
        fs.sync().unwrap();
        assert_eq!(fs.sync_mode(), SyncMode::Lazy);
        let other = fs.make(ROOT, b"plain", node(Kind::Dir), ME).unwrap().ino;
        let set = super::super::flags::SYNC.to_le_bytes();
        let r = fs.ioctl(ROOT, super::super::flags::FS_IOC_SETFLAGS, &set, ME);
        fs.settled(r, Settle::Inode(ROOT)).unwrap();
        assert!(fs.is_sync_inode(ROOT) && !fs.is_sync_inode(other));
        let made = fs.make(ROOT, b"f", node(Kind::File), ME);
        let ino = fs.settled(made, Settle::names(ROOT)).unwrap().ino;
        assert!(
            fs.is_sync_inode(ino),
            "a file inherits +S from its directory"
        );
        chmod_600(&fs, ino);
        // A write from the kernel's cache, as the FUSE layer settles it: committed for
        // the synchronous file (the kernel follows it with no fsync).
        let w = fs.write_from(ino, 0, b"synced", false, true, crate::fs::Caller::ROOT);
        fs.settled(w, Settle::Data(ino)).unwrap();
        // A name made in a directory without the flag waits for a commit.
        let lazy = fs.make(other, b"g", node(Kind::File), ME);
        fs.settled(lazy, Settle::names(other)).unwrap();
        let fs = power_cut(fs, &dev);
        let f = find(&fs, "f").expect("the name made in a +S directory survives");
        assert_eq!(fs.read(f, 0, 6).unwrap(), b"synced");
        assert_eq!(fs.getattr(f).unwrap().inode.perm, 0o600);
        let other = find(&fs, "plain").unwrap();
        assert_eq!(fs.lookup(other, b"g").map(|_| ()), Err(Errno(libc::ENOENT)));
    }

    #[test]
    fn dirsync_commits_names_and_sync_attributes_too() {
        assert_eq!(survivors(SyncMode::Lazy), (false, false));
        assert_eq!(survivors(SyncMode::DirSync), (true, false));
        assert_eq!(survivors(SyncMode::Sync), (true, true));
    }
}
