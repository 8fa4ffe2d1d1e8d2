//! The identity behind a path: a loop device's backing file, so that a device open through
//! the image file and through a loop device over it is one device to the locks.
//!
//! `flock` follows the inode, not the path, so hard links, bind mounts and
//! `/proc/self/fd/N` of one file already share one lock. A loop device is another inode
//! (a block device node) over the same bytes: [`backing_file`] asks the loop driver
//! (`LOOP_GET_STATUS64`) which file backs it (its device and inode numbers), finds it
//! through `/sys/block/loopN/loop/backing_file` and checks the file found is that inode.
//! The caller locks that file too (`file.rs`).
//!
//! Data structure: [`LoopInfo64`], the kernel's `struct loop_info64`. Invariant: a file is
//! returned only if it is the inode the driver names. A backing file that cannot be
//! reached by its path (another mount namespace, deleted) yields `None`: the on-disk
//! owner record (`store/claim.rs`) still refuses a second opener. Locks: none.

use std::fs::File;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::PathBuf;

/// The kernel's `struct loop_info64` (`linux/loop.h`).
#[repr(C)]
#[derive(Clone, Copy)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// `LOOP_GET_STATUS64` (`linux/loop.h`; not an `_IOR` number).
const LOOP_GET_STATUS64: rustix::ioctl::Opcode = 0x4C05;

/// The file backing a loop device `file` (open), with its path; `None` if `file` is not a
/// bound loop device, or its backing file cannot be reached by path from here.
pub(super) fn backing_file(file: &File) -> Option<(File, PathBuf)> {
    if !file.metadata().ok()?.file_type().is_block_device() {
        return None;
    }
    // SAFETY: LOOP_GET_STATUS64 writes one `struct loop_info64`, which `LoopInfo64` is;
    // on a block device that is not a loop device the call fails (ENOTTY or EINVAL).
    let info = unsafe {
        rustix::ioctl::ioctl(
            file,
            rustix::ioctl::Getter::<LOOP_GET_STATUS64, LoopInfo64>::new(),
        )
    }
    .ok()?;
    let sys = format!("/sys/block/loop{}/loop/backing_file", info.lo_number);
    let path = PathBuf::from(std::fs::read_to_string(sys).ok()?.trim_end_matches('\n'));
    let backing = File::open(&path).ok()?;
    let meta = backing.metadata().ok()?;
    (meta.dev() == info.lo_device && meta.ino() == info.lo_inode).then_some((backing, path))
}
