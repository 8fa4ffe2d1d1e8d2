//! A file system on an extalloc volume, mounted through FUSE: `extalloc mount DEVICE
//! MOUNTPOINT`.
//!
//! - [`fs::Fs`]: the file system itself (namespace, data through the volume's dirty cache
//!   and writeback contexts, crash repair at mount), callable without FUSE.
//! - The crate `extalloc-fuse-transport`: the daemon's own FUSE transport (mount,
//!   `/dev/fuse` and io_uring requests decoded and replies encoded, several threads);
//!   `fuse.rs`: its `Handler`, kernel requests to [`fs::Fs`] calls;
//!   `kernel.rs`: what it asks of the kernel at init and reads of the mount's flags;
//!   `replies.rs`: the replies it sends and who makes a request (supplementary groups).
//! - [`mount`]: the mount command (foreground or daemon, clean unmount on SIGTERM,
//!   exclusive access through the store's lock); [`commit`]: its background commit;
//!   `ending.rs`: how a signal ends the session even when the mount is busy or copied
//!   into another mount namespace.
//! - [`repair`]: `extalloc fsck --repair`, the file system repaired offline.
//! - [`umount`]: `extalloc umount`, which unmounts and waits until the daemon has
//!   released the device ([`mountinfo`] finds the device from the mount point).
//! - [`acl`]: POSIX ACLs as the kernel hands them over, and the mode arithmetic they
//!   bring (the kernel enforces them; the daemon keeps them).
//! - `inode.rs`, `dir.rs` and `xattr.rs`: what the file system keeps in each volume
//!   file's attribute blob, in a directory's data and in an extended attribute spill file.
//!
//! `docs/mount.md` describes the layout, the crash behaviour and what the outside tools
//! (fsx, pjdfstest, fio) check.
//!
//! System calls go through `rustix` (typed flags, owned and borrowed descriptors, no
//! `unsafe` at the call; the two ioctls rustix has no wrapper for go through its typed
//! `ioctl`); no call goes through `libc`. What stays on `libc` is constants: the errno values
//! (`libc::ENOENT`) the file system returns, which FUSE carries as a negated `i32` in a
//! reply header, so a plain `c_int` per value is what every reply wants (rustix's `Errno`
//! would be unwrapped back to that at each of the 194 places, tests included); and the
//! `O_*`, `S_*` and `FALLOC_FL_*` bits the kernel hands over in requests as plain
//! integers.

#![warn(missing_docs)]

pub mod acl;
pub mod bdi;
pub mod commit;
pub mod dir;
mod ending;
pub mod fs;
mod fuse;
#[cfg(test)]
mod fuse_tests;
pub mod inode;
mod kernel;
pub mod mount;
pub use extalloc_fuse_transport::mountinfo;
pub mod repair;
mod replies;
pub mod umount;
pub mod xattr;

/// For the fuzz target `fuse_request` (`fuzz/`): decodes one request as read from
/// `/dev/fuse` (`buf` whole), true if it is well formed. Not part of the crate's API.
#[doc(hidden)]
pub fn fuzz_request(buf: &[u8]) -> bool {
    extalloc_fuse_transport::fuzz::request(buf)
}
