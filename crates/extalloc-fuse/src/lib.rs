//! A file system on an extalloc volume, mounted through FUSE: `extalloc mount DEVICE
//! MOUNTPOINT`.
//!
//! - [`fs::Fs`]: the file system itself (namespace, data through the volume's dirty cache
//!   and writeback contexts, crash repair at mount), callable without FUSE.
//! - `fuse.rs`: kernel requests to [`fs::Fs`] calls (the `fuser` crate, several threads).
//! - [`mount`]: the mount command (foreground or daemon, clean unmount on SIGTERM,
//!   exclusive access through the store's lock).
//! - `inode.rs` and `dir.rs`: what the file system keeps in each volume file's attribute
//!   blob and in a directory's data.
//!
//! `docs/mount.md` describes the layout, the crash behaviour and what the outside tools
//! (fsx, pjdfstest, fio) check.

#![warn(missing_docs)]

pub mod dir;
pub mod fs;
mod fuse;
pub mod inode;
pub mod mount;
