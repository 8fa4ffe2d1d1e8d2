//! `ENOSPC` at the `write(2)` that does not fit, under FUSE's writeback cache.
//!
//! The kernel takes a buffered write into its page cache without asking the daemon, which
//! sees the data only when the kernel writes it back (at close, at fsync, or under memory
//! pressure). A write back that finds the device full fails there: the `write(2)` had
//! succeeded, and the error comes at `fsync` or `close`, where the kernel records it on
//! the file (a 200 MiB `dd` into a 64 MiB volume: 200 writes succeeded, `close` failed).
//! ext4 reserves blocks at the write and fails the `write(2)` itself. Three mechanisms
//! bring the error to the call:
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
//!   goes when the room is back above the margin (at that question), at the file's last
//!   close, or, for a write back that failed after it (the kernel's own, late), when the
//!   kernel forgets the inode (`Fs::reap`): no handle is left to ask through.
//! - **What the kernel may hold dirty shrinks with the room.** The latch acts once a write
//!   back fails, and the kernel writes back late (a writer of 2 GiB into a 1 GiB volume on
//!   a 24 GiB machine wrote it all into the cache before the first write back). So once
//!   the room left to data is under twice the kernel's dirty bound for the mount, the
//!   bdi's `max_bytes` is set, strictly, to half the room rounded down to a power of two
//!   (at least [`MIN_CAP`]); the kernel then throttles the mount's writers there and
//!   writes back as they go, and what it holds dirty always fits in the room, until the
//!   room is under [`MIN_CAP`]. The room is looked at again after every sixteenth of it
//!   has been written ([`Headroom::spend`]), and the cap raised or lowered when its power
//!   of two changes; the mount's own limits come back once the room is over twice the
//!   bound. It needs the bdi's files writable (root); without them the kernel's limits
//!   stay.
//!
//! What none of them gives: the data a file opened with the cache held dirty when the
//! device filled is lost (the kernel drops pages whose write back failed), reported at its
//! next `write(2)`, `fsync` and `close`: at most the cap then (or, without the cap, what
//! the kernel may hold dirty for the mount), and only for files opened while more than
//! the margin was free.
//!
//! The margin is a sixteenth of the device, at least [`MIN_MARGIN`] bytes and at most what
//! the kernel may hold dirty for the mount (`bdi::dirty_bound`: about 4.7 GiB on a 24 GiB
//! machine with the default `vm.dirty_ratio` of 20): a volume keeps the cache until its
//! last sixteenth, a small one (up to 1 GiB) until 64 MiB are left, a large one until
//! what the kernel could take past its end is left. Reads and opens for reading are never
//! changed.
//!
//! The rules' state is here; the file system's side of them (`Fs::writes_direct`, the
//! latch's `Fs::write_refused` and `Fs::check_headroom`, the cap's `Headroom::spend` in
//! `Fs::write_from`) is in `data.rs`, the mount's setup in `mount.rs`
//! (`tune_writeback`), the tests through the file system in `headroom_tests.rs`.
//!
//! Data structures: [`Headroom`]: whether direct opens are allowed, the margin in blocks,
//! the set of marked inodes with its size beside it (so a question about an unmarked
//! inode takes no lock), and the dirty cap ([`Cap`]: the bdi, the kernel's bound, the cap
//! applied) with the bytes that may be written before the room is looked at again.
//! Invariant: `marked_count` is the set's size whenever the set's lock is free; the cap
//! applied is what the bdi's files were last set to. Lock order: `marked` and `cap` are
//! leaves, taken after `ns` or alone (`cap` only by try-lock from a write).

use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize};

/// The smallest margin, in bytes: a volume of up to 1 GiB gives up the cache for opens
/// for writing once less than this is left to data.
pub const MIN_MARGIN: u64 = 64 << 20;

/// The smallest dirty cap, in bytes (the kernel throttles writers hard under a few
/// megabytes).
pub const MIN_CAP: u64 = 4 << 20;

/// The dirty cap's state (see the module documentation).
#[derive(Debug)]
pub struct Cap {
    /// The mount's bdi.
    bdi: crate::bdi::Bdi,
    /// The mount's own share of the threshold, put back when the cap is lifted.
    ratio: u32,
    /// What the kernel may hold dirty for the mount without a cap (`bdi::dirty_bound`).
    bound: u64,
    /// The cap the bdi has now; None: the mount's own limits.
    applied: Option<u64>,
}

/// The cap for `room` bytes left to data under a kernel bound of `bound` bytes: none
/// while the room is at least twice the bound, else half the room rounded down to a
/// power of two, at least [`MIN_CAP`].
pub fn wanted_cap(room: u64, bound: u64) -> Option<u64> {
    if room / 2 >= bound {
        return None;
    }
    let half = (room / 2).max(MIN_CAP);
    Some(1 << half.ilog2())
}

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
    /// The dirty cap, once the mount could set its bdi ([`Headroom::enable_cap`]).
    cap: Mutex<Option<Cap>>,
    /// Bytes that may still be written before the room is looked at again (at or under
    /// zero: now); only counted with a cap enabled.
    budget: AtomicI64,
    /// A cap is enabled ([`Headroom::spend`] counts nothing before).
    capping: AtomicBool,
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
        debug_assert!(
            self.margin_blocks() > 0,
            "a margin of nothing never goes direct"
        );
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

    /// Lets the room set the dirty cap of `bdi` (a mount whose share of the threshold is
    /// `ratio` percent, `bound` bytes); the caller then calls [`Headroom::retune`] with the
    /// room.
    pub fn enable_cap(&self, bdi: crate::bdi::Bdi, ratio: u32, bound: u64) {
        assert!(bound > 0, "a bound of nothing");
        *self.cap.lock() = Some(Cap {
            bdi,
            ratio,
            bound,
            applied: None,
        });
        self.capping.store(true, Relaxed);
    }

    /// The cap the bdi has now (None: the mount's own limits, or no cap enabled).
    pub fn cap_applied(&self) -> Option<u64> {
        self.cap.lock().as_ref().and_then(|c| c.applied)
    }

    /// Counts `bytes` written; true when the room is due to be looked at again
    /// ([`Headroom::retune`]). One atomic subtraction while the budget lasts.
    pub fn spend(&self, bytes: u64) -> bool {
        if !self.capping.load(Relaxed) {
            return false;
        }
        // One request's data (the mount's max_write is 1 MiB; a library caller's write is
        // cut into pieces by the volume's cache): far from wrapping the budget.
        debug_assert!(bytes <= 1 << 40, "a write of {bytes} bytes");
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        self.budget.fetch_sub(bytes, Relaxed) <= bytes
    }

    /// Sets the cap for `room` bytes left to data ([`wanted_cap`]), writing the bdi's
    /// files only when it changes, and the budget to a sixteenth of the room (at least
    /// 1 MiB). Skipped when another thread is at it. A bdi that refuses the write: logged,
    /// and the cap is given up (the kernel's limits stay as they are).
    pub fn retune(&self, room: u64) {
        let Some(mut slot) = self.cap.try_lock() else {
            return;
        };
        let Some(cap) = slot.as_mut() else {
            return;
        };
        let budget = (room / 16).max(1 << 20);
        self.budget
            .store(i64::try_from(budget).unwrap_or(i64::MAX), Relaxed);
        let want = wanted_cap(room, cap.bound);
        if want == cap.applied {
            return;
        }
        let set = match want {
            Some(bytes) => cap.bdi.set_cap(bytes),
            None => cap.bdi.set_ratio(cap.ratio),
        };
        match set {
            Ok(()) => {
                log::debug!("dirty cap {want:?} bytes for {room} bytes of room");
                cap.applied = want;
            }
            Err(e) => {
                log::warn!("cannot cap what the kernel holds dirty near full: {e}");
                *slot = None;
                self.capping.store(false, Relaxed);
            }
        }
        debug_assert!(
            slot.as_ref().is_none_or(|c| c.applied == want),
            "the cap applied is the bdi's"
        );
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
    fn the_cap_is_half_the_room_in_powers_of_two_under_twice_the_bound() {
        let gib = 1u64 << 30;
        assert_eq!(wanted_cap(10 * gib, 4 * gib), None);
        assert_eq!(
            wanted_cap(8 * gib, 4 * gib),
            None,
            "twice the bound: none yet"
        );
        assert_eq!(wanted_cap(8 * gib - 1, 4 * gib), Some(2 * gib));
        assert_eq!(wanted_cap(3 * gib, 4 * gib), Some(gib));
        assert_eq!(wanted_cap(100 << 20, 4 * gib), Some(32 << 20));
        assert_eq!(wanted_cap(1 << 20, 4 * gib), Some(MIN_CAP));
        assert_eq!(wanted_cap(0, 4 * gib), Some(MIN_CAP));
    }

    /// The bdi's files (plain files here) are written only when the cap's power of two
    /// changes, the budget follows the room, and a bdi that refuses gives the cap up.
    #[test]
    fn retune_writes_the_bdi_only_on_a_change() {
        let dir = std::env::temp_dir().join(format!("extalloc-bdi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let read = |n: &str| std::fs::read_to_string(dir.join(n)).unwrap_or_default();
        let h = Headroom::new(8192, 4096);
        assert!(!h.spend(1 << 40), "nothing counted before a cap is enabled");
        h.enable_cap(crate::bdi::Bdi::at(dir.clone()), 100, 4 << 30);
        h.retune(16 << 30);
        assert_eq!((h.cap_applied(), read("max_bytes")), (None, String::new()));
        assert!(
            !h.spend(512 << 20) && h.spend(512 << 20),
            "a sixteenth of 16 GiB"
        );
        h.retune(1 << 30);
        assert_eq!(h.cap_applied(), Some(512 << 20));
        assert_eq!(
            (read("max_bytes"), read("strict_limit")),
            ("536870912".into(), "1".into())
        );
        std::fs::remove_file(dir.join("max_bytes")).unwrap();
        h.retune((1 << 30) + (100 << 20));
        assert_eq!(
            read("max_bytes"),
            "",
            "the same power of two: not written again"
        );
        h.retune(9 << 30);
        assert_eq!(h.cap_applied(), None);
        assert_eq!(
            (read("max_ratio"), read("strict_limit")),
            ("100".into(), "0".into())
        );
        std::fs::remove_dir_all(&dir).unwrap();
        h.retune(1 << 30);
        assert_eq!(h.cap_applied(), None, "a bdi gone: the cap is given up");
        assert!(!h.spend(1 << 40));
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
