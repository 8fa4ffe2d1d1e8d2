//! Shutting the file system down (`FS_IOC_SHUTDOWN`, the same request as XFS's
//! `XFS_IOC_GOINGDOWN`, which `godown` and `xfs_io -c shutdown` send): what reached the
//! daemon is committed, then the device is fenced (`extalloc::disk::device::FenceDevice`)
//! and every later change fails with `EIO` until the next mount, which finds the volume as
//! a crash right after that commit would leave it.
//!
//! The request carries a flag word (flush the log or not), but FUSE forwards an ioctl
//! declared to read into the caller's buffer without that buffer's contents, so the daemon
//! cannot tell the two apart; it always commits first, the stronger of the two promises
//! (everything the kernel had handed over survives, as with the log flushed).
//!
//! Data structures: [`Fs`]'s `down` flag and the fence it was given at mount.
//!
//! Invariant: once `down` is set, nothing reaches the device: the fence is set right after
//! it, and the flag is set under the namespace lock held for writing, so no namespace change
//! runs between the commit and the fence. Data written back by the kernel after the commit
//! is dropped, as in a crash.
//!
//! Lock order: `ns` (written) -> the volume's locks, as everywhere (`fs/mod.rs`).

use super::core::{Errno, Fs, FsResult};
use extalloc::disk::device::FenceDevice;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Fs {
    /// Gives the file system the fence over its device, for [`Fs::shutdown`] (once; a
    /// second fence is refused with `EBUSY` and changes nothing).
    pub fn attach_fence(&self, fence: Arc<FenceDevice>) -> FsResult<()> {
        self.fence.set(fence).map_err(|_| Errno(libc::EBUSY))
    }

    /// Whether [`Fs::shutdown`] has run: every change is refused with `EIO`.
    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }

    /// `EIO` once the file system is shut down, for calls that would change it.
    pub fn live(&self) -> FsResult<()> {
        if self.is_down() {
            return Err(Errno(libc::EIO));
        }
        Ok(())
    }

    /// Commits what reached the daemon (pending times, the dirty cache, the journal), then
    /// stops every write to the device for good. A failed commit is logged and the shutdown
    /// goes on (the device keeps its last commit). A second call does nothing. Without a
    /// fence (a read-only mount, whose writes stay in memory) only the flag is set.
    pub fn shutdown(&self) {
        let mut ns = self.ns_write();
        if self.is_down() {
            return;
        }
        let committed = self
            .flush_attrs_locked(&mut ns, None)
            .and_then(|()| Ok(self.vol.sync()?));
        if let Err(e) = committed {
            log::error!("shutdown: cannot commit what reached the daemon ({e}); the device keeps its last commit");
        }
        self.down.store(true, Ordering::Release);
        if let Some(f) = self.fence.get() {
            f.fence();
        }
        debug_assert!(
            self.is_down() && self.fence.get().is_none_or(|f| f.is_fenced()),
            "down and fenced before the namespace is let go"
        );
        drop(ns);
        log::warn!("the file system was shut down: every change now fails with EIO; unmount and mount again");
    }
}

#[cfg(test)]
mod tests {
    use super::super::flags::FS_IOC_SHUTDOWN;
    use super::super::tests::{device, find, mkdir, node, put, remount, ME};
    use super::super::{Caller, ROOT};
    use super::*;
    use crate::inode::Kind;
    use extalloc::disk::device::Crash;
    use extalloc::volume::Volume;
    use extalloc::writeback::WritebackOptions;
    use extalloc::{Geometry, Policy};

    const EIO: Result<(), Errno> = Err(Errno(libc::EIO));

    #[test]
    fn a_shutdown_keeps_what_reached_the_daemon_and_writes_nothing_after() {
        let dev = device(11);
        let fence = Arc::new(FenceDevice::new(dev.clone()));
        let geometry = Geometry::new(4096, 1024, 8192).unwrap();
        let vol = Volume::mkfs(fence.clone(), &geometry, 64, Policy::default()).unwrap();
        let (fs, _) = Fs::mount(vol, WritebackOptions::default()).unwrap();
        fs.attach_fence(fence.clone()).unwrap();
        assert_eq!(fs.attach_fence(fence.clone()), Err(Errno(libc::EBUSY)));
        let d = mkdir(&fs, ROOT, "d");
        let kept = put(&fs, d, "kept", b"handed over before the shutdown");
        let user = Caller {
            uid: 1000,
            gid: 1000,
        };
        assert_eq!(
            fs.ioctl(ROOT, FS_IOC_SHUTDOWN, &[], user),
            Err(Errno(libc::EPERM))
        );
        assert!(!fs.is_down(), "only root shuts the file system down");
        assert_eq!(fs.ioctl(ROOT, FS_IOC_SHUTDOWN, &[], ME), Ok(Vec::new()));
        assert!(fs.is_down() && fence.is_fenced());

        // Every change fails; lookups and stat go on from memory.
        let file = node(Kind::File);
        assert_eq!(fs.make(ROOT, b"late", file, ME).map(|_| ()), EIO);
        assert_eq!(fs.write(kept, 0, b"later", false).map(|_| ()), EIO);
        assert_eq!(fs.unlink(d, b"kept"), EIO);
        assert_eq!(fs.rename(d, b"kept", ROOT, b"moved", 0, ME), EIO);
        assert_eq!(fs.open(kept, libc::O_RDONLY).map(|_| ()), EIO);
        assert_eq!(fs.read(kept, 0, 10).map(|_| ()), EIO);
        assert_eq!(fs.fsync(kept), EIO);
        assert_eq!(fs.sync(), EIO);
        assert_eq!(fs.setxattr(kept, b"user.a", b"1", 0, ME, &[]), EIO);
        assert_eq!(fs.ioctl(kept, 0x8008_6601, &[], ME).map(|_| ()), EIO);
        assert_eq!(find(&fs, "d/kept"), Ok(kept));
        assert_eq!(fs.ioctl(ROOT, FS_IOC_SHUTDOWN, &[], ME), Ok(Vec::new()));
        fs.unmount().unwrap();

        // Whatever was not flushed is lost; the shutdown's commit was.
        dev.crash(Crash::DropAll).unwrap();
        let (fs, _) = remount(&dev);
        let kept = find(&fs, "d/kept").unwrap();
        assert_eq!(
            fs.read(kept, 0, 100).unwrap(),
            b"handed over before the shutdown"
        );
        assert_eq!(find(&fs, "late"), Err(Errno(libc::ENOENT)));
        fs.unmount().unwrap();
    }
}
