//! `ENOSPC` at the `write(2)` that does not fit, under FUSE's writeback cache.
//!
//! The kernel takes a buffered write into its page cache without asking the daemon, which
//! sees the data only when the kernel writes it back (at close, at fsync, or under memory
//! pressure). A write back that finds the device full fails there: the `write(2)` had
//! succeeded, and the error comes at `fsync` or `close`, where the kernel records it on
//! the file (a 200 MiB `dd` into a 64 MiB volume: 200 writes succeeded, `close` failed).
//! ext4 reserves blocks at the write and fails the `write(2)` itself. Two mechanisms bring
//! the error to the call:
//!
//! - **Direct writes near full.** An open for writing of a regular file made while the
//!   room data may still take (`statfs`'s available blocks, which leave out the blocks
//!   reserved for cached data and the room kept for metadata) is under the margin
//!   ([`Headroom::margin_blocks`]) is answered with `FOPEN_DIRECT_IO`: its `write(2)`s reach
//!   the daemon, which fails the one that does not fit with `ENOSPC`. A shared mapping of
//!   it still works (`FUSE_DIRECT_IO_ALLOW_MMAP`); a kernel without that grant keeps the
//!   cache for every open ([`Headroom::allow_direct`] is never called), since a mapping
//!   would fail with `ENODEV`.
//! - **A latch for opens made before.** A write back from the kernel's cache
//!   (`FUSE_WRITE_CACHE`) that fails with `ENOSPC` marks its inode, and the kernel's
//!   cached attributes of it are dropped. Before the kernel caches the next `write(2)` of
//!   the file it asks for them through the writer's handle (GETATTR with the handle), and
//!   `Fs::getattr_through` answers `ENOSPC` while the mark holds: the writer stops at its
//!   next call instead of writing on into a cache that cannot be written back. The mark
//!   goes when the room is back above the margin (at that question) or at the file's last
//!   close.
//!
//! What neither gives: the data a file opened with the cache held dirty when the device
//! filled is lost (the kernel drops pages whose write back failed), reported at its next
//! `write(2)`, `fsync` and `close`. That is at most what the kernel may hold dirty for the
//! mount, and only for files opened while more than the margin was free.
//!
//! The margin is a sixteenth of the device, at least [`MIN_MARGIN`] bytes and at most what
//! the kernel may hold dirty for the mount (`bdi::dirty_bound`: about 4.7 GiB on a 24 GiB
//! machine with the default `vm.dirty_ratio` of 20): a volume keeps the cache until its
//! last sixteenth, a small one (up to 1 GiB) until 64 MiB are left, a large one until
//! what the kernel could take past its end is left. Reads and opens for reading are never
//! changed.
//!
//! The rule's state is here; the file system's side of it (`Fs::writes_direct`, the
//! latch's `Fs::write_refused` and `Fs::check_headroom`) is in `data.rs`, its tests in
//! `headroom_tests.rs`.
//!
//! Data structures: [`Headroom`]: whether direct opens are allowed, the margin in blocks,
//! and the set of marked inodes with its size beside it (so a question about an unmarked
//! inode takes no lock). Invariant: `marked_count` is the set's size whenever the set's
//! lock is free. Lock order: `marked` is a leaf, taken after `ns` or alone.

use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};

/// The smallest margin, in bytes: a volume of up to 1 GiB gives up the cache for opens
/// for writing once less than this is left to data.
pub const MIN_MARGIN: u64 = 64 << 20;

/// The direct-write rule's state (see the module documentation).
#[derive(Debug, Default)]
pub struct Headroom {
    /// The kernel maps direct-I/O opens (`FUSE_DIRECT_IO_ALLOW_MMAP`): near full, opens
    /// for writing may bypass the cache.
    pub(crate) direct: AtomicBool,
    /// Below this many available blocks, opens for writing are direct.
    margin_blocks: AtomicU64,
    /// Inodes whose write back from the kernel's cache found no room.
    marked: Mutex<HashSet<u64>>,
    /// `marked`'s size, read without its lock.
    pub(crate) marked_count: AtomicUsize,
}

impl Headroom {
    /// A rule for a device of `blocks` blocks of `block_size` bytes, direct opens not yet
    /// allowed.
    pub fn new(blocks: u64, block_size: u32) -> Headroom {
        assert!(block_size > 0, "a block has bytes");
        let bytes = blocks.saturating_mul(u64::from(block_size));
        let margin = (bytes / 16).max(MIN_MARGIN) / u64::from(block_size);
        Headroom {
            margin_blocks: AtomicU64::new(margin),
            ..Headroom::default()
        }
    }

    /// Lets opens for writing near full be direct: the kernel maps such opens.
    pub fn allow_direct(&self) {
        self.direct.store(true, Relaxed);
    }

    /// The margin in blocks.
    pub fn margin_blocks(&self) -> u64 {
        self.margin_blocks.load(Relaxed)
    }

    /// Caps the margin at `bytes` (what the kernel may hold dirty for the mount,
    /// `bdi::dirty_bound`), never under [`MIN_MARGIN`]: a large volume's last sixteenth
    /// may be far more than the kernel could ever have taken past its end.
    pub fn cap_margin(&self, bytes: u64, block_size: u32) {
        assert!(block_size > 0, "a block has bytes");
        let cap = bytes.max(MIN_MARGIN) / u64::from(block_size);
        self.margin_blocks.fetch_min(cap, Relaxed);
        debug_assert!(self.margin_blocks() <= cap, "capped");
    }

    /// Sets the margin to `blocks` (tests, and a caller that knows its device better).
    pub fn set_margin_blocks(&self, blocks: u64) {
        self.margin_blocks.store(blocks, Relaxed);
    }

    /// Marks `ino`: a write back of its cached data found no room.
    pub(crate) fn mark(&self, ino: u64) {
        let mut m = self.marked.lock();
        if m.insert(ino) {
            self.marked_count.fetch_add(1, Relaxed);
        }
        debug_assert_eq!(
            self.marked_count.load(Relaxed),
            m.len(),
            "the count is the set's"
        );
    }

    /// Whether `ino` is marked; no lock while nothing is.
    pub(crate) fn is_marked(&self, ino: u64) -> bool {
        self.marked_count.load(Relaxed) != 0 && self.marked.lock().contains(&ino)
    }

    /// Takes `ino`'s mark off, if it has one.
    pub(crate) fn unmark(&self, ino: u64) {
        if self.marked_count.load(Relaxed) == 0 {
            return;
        }
        let mut m = self.marked.lock();
        if m.remove(&ino) {
            self.marked_count.fetch_sub(1, Relaxed);
        }
        debug_assert_eq!(
            self.marked_count.load(Relaxed),
            m.len(),
            "the count is the set's"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_margin_is_a_sixteenth_of_the_device_and_at_least_64_mib() {
        assert_eq!(Headroom::new(8192, 4096).margin_blocks(), MIN_MARGIN / 4096);
        let tib = (1u64 << 40) / 4096;
        assert_eq!(Headroom::new(tib, 4096).margin_blocks(), tib / 16);
        assert!(
            !Headroom::new(tib, 4096).direct.load(Relaxed),
            "off until allowed"
        );
    }

    #[test]
    fn marks_are_counted_and_taken_off_once() {
        let h = Headroom::new(8192, 4096);
        assert!(!h.is_marked(5));
        h.mark(5);
        h.mark(5);
        h.mark(6);
        assert!(h.is_marked(5) && h.is_marked(6) && !h.is_marked(7));
        assert_eq!(h.marked_count.load(Relaxed), 2);
        h.unmark(5);
        h.unmark(5);
        h.unmark(7);
        assert!(!h.is_marked(5) && h.is_marked(6));
        assert_eq!(h.marked_count.load(Relaxed), 1);
    }
}
