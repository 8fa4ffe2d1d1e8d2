//! The loader of lazily loaded bitmaps: per-group load states, the read-ahead thread and
//! its staged copies. The allocator's side (locking a group with its bitmap loaded, queueing
//! read-ahead, dropping idle bitmaps) is `cache.rs`.
//!
//! # Data structures
//!
//! - `state`: one byte per group: `UNLOADED`, `QUEUED` (for the read-ahead thread) or
//!   `LOADED`.
//! - `staged` (a mutex): bitmaps the read-ahead thread read, by group, waiting for a load;
//!   `in_flight`: the group it is reading.
//! - `queue`: the channel to the read-ahead thread (absent without read-ahead).
//!
//! # Loading
//!
//! An allocator opened over a persistent device starts with every group *unloaded*: the
//! group's mirrors (free blocks, largest and average free order, size-class tag) come from
//! its on-disk descriptor, so the indexes and the cheap checks of every pass work before any
//! bitmap is read. A group's bitmap is read the first time a scan that passed the cheap
//! checks, a free or a journal replay locks it.
//!
//! # Read-ahead
//!
//! When a scan reaches an unloaded group, it queues the next `prefetch_groups` groups its
//! walk would visit (those that pass the same cheap checks and are unloaded) for a
//! background thread, which reads and decodes them and leaves them *staged*. The scan does
//! not wait: it loads the group in hand itself, and a later load of a staged group takes
//! the staged bitmap instead of reading. The per-group load state is read with a plain load
//! before the compare-and-swap that queues it, so scans over loaded groups make no shared
//! write; groups are considered only after their mirrors passed.
//!
//! # Invariant: a staged copy is never stale
//!
//! A staged bitmap is the group's home copy read while the group was unloaded. The home copy
//! of an unloaded group is its current state (a group is dropped only when it is clean: its
//! home copy written by a checkpoint and no frees pending). Staging and loading both happen
//! under the `staged` lock: the reader stages only if the group is still `QUEUED`, and a load
//! sets `LOADED` and removes any staged copy. So a staged copy can never outlive a load and
//! come back stale after the group is changed, written home and dropped again.
//!
//! # Memory
//!
//! An unloaded group nothing has touched costs its packed figures in the group table (4
//! bytes, 8 with groups over 2^17 blocks, `groups/table.rs`), one load-state byte, and its
//! bits in the indexes and sets (about 7.6 bytes with groups of 2^15 blocks): 12.7 bytes
//! with the default geometry. A touched one adds its [`crate::groups::Group`] (64 bytes:
//! one cache line, see there), made with the 127 others of its chunk. See
//! `Allocator::memory_per_unloaded_group`. With
//! `bitmap_memory_mib` set, the store's sweep after each checkpoint drops clean,
//! unreferenced bitmaps until the loaded ones fit (`Allocator::drop_idle_bitmaps`).
//!
//! # Lock order
//!
//! `staged` is a leaf: a load and a drop take it under the group lock, the read-ahead thread
//! alone. The queue's mutex is a leaf too, taken by a scan holding no group lock.

use crate::error::Result;
use crate::geometry::Geometry;
use crate::groups::GroupBitmap;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Where an allocator's bitmaps come from: a persistent device's home copies.
pub trait BitmapSource: Send + Sync {
    /// Group `g`'s on-disk bitmap (1 bit per block, LSB first, 1 = used), checked against
    /// its descriptor. `Err(Error::Corrupt)` marks the group corrupt.
    fn read_bitmap(&self, g: u64) -> Result<Vec<u8>>;
}

/// What a group's descriptor says about it: enough to place it in every index unloaded
/// (the figures the group table keeps for it until it is touched).
pub type GroupSummary = crate::groups::Figures;

pub(super) const UNLOADED: u8 = 0;
pub(super) const QUEUED: u8 = 1;
pub(super) const LOADED: u8 = 2;

struct Shared {
    source: Arc<dyn BitmapSource>,
    geometry: Geometry,
    state: Box<[AtomicU8]>,
    staged: Mutex<HashMap<u64, Result<GroupBitmap>>>,
    /// Bitmaps read by the read-ahead thread.
    prefetched: AtomicU64,
    /// The group the read-ahead thread is reading (`u64::MAX`: none); set and read under
    /// `staged`. Such a group is not dropped, so the read cannot be of a home copy that a
    /// load, a change, a checkpoint and a drop made stale while it ran.
    in_flight: AtomicU64,
}

impl Shared {
    fn decode(&self, g: u64) -> Result<GroupBitmap> {
        let bytes = self.source.read_bitmap(g)?;
        Ok(GroupBitmap::from_used_bytes(
            self.geometry.group_blocks as u32,
            self.geometry.group_len(g) as u32,
            &bytes,
        ))
    }
}

pub(super) struct Lazy {
    shared: Arc<Shared>,
    queue: Option<Mutex<mpsc::Sender<u64>>>,
    reader: Option<JoinHandle<()>>,
    /// Loaded bitmaps now.
    pub loaded: AtomicU64,
}

impl Lazy {
    pub fn new(source: Arc<dyn BitmapSource>, geometry: Geometry, prefetch: bool) -> Self {
        let groups = geometry.groups_count();
        let shared = Arc::new(Shared {
            source,
            geometry,
            state: (0..groups).map(|_| AtomicU8::new(UNLOADED)).collect(),
            staged: Mutex::new(HashMap::new()),
            prefetched: AtomicU64::new(0),
            in_flight: AtomicU64::new(u64::MAX),
        });
        let (queue, reader) = if prefetch {
            let (tx, rx) = mpsc::channel::<u64>();
            let s = shared.clone();
            let reader = std::thread::Builder::new()
                .name("extalloc-prefetch".into())
                .spawn(move || {
                    // Ends when the allocator drops the sender.
                    while let Ok(g) = rx.recv() {
                        {
                            let _staged = s.staged.lock();
                            if s.state[g as usize].load(Relaxed) != QUEUED {
                                continue;
                            }
                            // One reader: no read is under way when it starts one.
                            debug_assert_eq!(s.in_flight.load(Relaxed), u64::MAX);
                            s.in_flight.store(g, Relaxed);
                        }
                        let read = s.decode(g);
                        s.prefetched.fetch_add(1, Relaxed);
                        let mut staged = s.staged.lock();
                        s.in_flight.store(u64::MAX, Relaxed);
                        if s.state[g as usize].load(Relaxed) == QUEUED {
                            staged.insert(g, read);
                        }
                    }
                })
                .ok();
            match reader {
                Some(r) => (Some(Mutex::new(tx)), Some(r)),
                // No thread to spare: loads stay synchronous.
                None => (None, None),
            }
        } else {
            (None, None)
        };
        Lazy {
            shared,
            queue,
            reader,
            loaded: AtomicU64::new(0),
        }
    }

    #[inline]
    pub fn state(&self, g: u64) -> u8 {
        self.shared.state[g as usize].load(Relaxed)
    }

    /// Queues `g` for read-ahead if it is unloaded. Reads before the compare-and-swap.
    pub fn queue(&self, g: u64) -> bool {
        let Some(queue) = &self.queue else {
            return false;
        };
        let state = &self.shared.state[g as usize];
        if state.load(Relaxed) != UNLOADED
            || state
                .compare_exchange(UNLOADED, QUEUED, Relaxed, Relaxed)
                .is_err()
        {
            return false;
        }
        if queue.lock().send(g).is_err() {
            // Only this call moves the group out of QUEUED before the reader sees it.
            let was = state.swap(UNLOADED, Relaxed);
            debug_assert_eq!(was, QUEUED, "group {g} changed state while being queued");
            return false;
        }
        true
    }

    /// Reads group `g`'s bitmap for a load under its lock: the staged copy if the read-ahead
    /// thread left one (second of the pair), else a read now. Marks the group loaded.
    pub fn load(&self, g: u64) -> (Result<GroupBitmap>, bool) {
        let staged = {
            let mut staged = self.shared.staged.lock();
            let was = self.shared.state[g as usize].swap(LOADED, Relaxed);
            debug_assert_ne!(was, LOADED, "group {g} loaded twice");
            staged.remove(&g)
        };
        self.loaded.fetch_add(1, Relaxed);
        match staged {
            Some(read) => (read, true),
            None => (self.shared.decode(g), false),
        }
    }

    /// A load failed with an I/O error: the group is unloaded again.
    pub fn unload_failed(&self, g: u64) {
        let loaded = self.loaded.fetch_sub(1, Relaxed);
        debug_assert!(loaded > 0, "more groups unloaded than loaded");
        let was = self.shared.state[g as usize].swap(UNLOADED, Relaxed);
        debug_assert_eq!(was, LOADED, "group {g} unloaded, not loaded");
    }

    /// Before dropping group `g`'s bitmap (under its lock): false if the read-ahead thread
    /// is reading it, in which case it must stay loaded.
    pub fn try_drop(&self, g: u64) -> bool {
        let _staged = self.shared.staged.lock();
        if self.shared.in_flight.load(Relaxed) == g {
            return false;
        }
        let loaded = self.loaded.fetch_sub(1, Relaxed);
        debug_assert!(loaded > 0, "more groups dropped than loaded");
        let was = self.shared.state[g as usize].swap(UNLOADED, Relaxed);
        debug_assert_eq!(was, LOADED, "group {g} dropped, not loaded");
        true
    }

    pub fn prefetched(&self) -> u64 {
        self.shared.prefetched.load(Relaxed)
    }

    pub fn prefetch_enabled(&self) -> bool {
        self.queue.is_some()
    }
}

impl Drop for Lazy {
    fn drop(&mut self) {
        self.queue = None;
        if let Some(r) = self.reader.take() {
            if r.join().is_ok() {
                // The reader ended between reads.
                debug_assert_eq!(self.shared.in_flight.load(Relaxed), u64::MAX);
            }
        }
    }
}
