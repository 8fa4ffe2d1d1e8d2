//! One group: its bitmap and buddy summary under a lock, lock-free mirrors of the figures
//! scans look at before locking, and the group's share of the deferred frees.
//!
//! The bitmap and the pending frees live in a box that may be absent: a group of a device
//! opened lazily starts *unloaded*, its mirrors taken from its on-disk descriptor, and
//! costs [`Group`]'s 64 bytes until a scan or a free first needs its bitmap (see
//! `alloc/lazy.rs`). Before anything touches it, not even that: the group table
//! (`table.rs`) keeps its figures packed in 4 bytes and makes the [`Group`] on first touch.
//!
//! A group fills one cache line of its own: its lock and mirrors are written on every
//! allocation in it, and packing groups at their natural 24 bytes put neighbours on one line
//! (2-thread fallocate2 fell from 15.8 M to 11.5 M ops/s).
//!
//! # Invariants (at quiescence)
//!
//! ```text
//! mirror.free_blocks   == bitmap.free_blocks()
//! mirror.largest_order == bitmap.largest_free_order()
//! mirror.avg_order     == bitmap.avg_fragment_order()   (except zombies, see policy)
//! every pending free is inside the group, marked used in the bitmap, and disjoint from the
//!   other pending frees of the group
//! ```
//!
//! Mirrors are written only under the lock and read without it; a reader may see a stale
//! value, which is why every scan rechecks under the lock.
//!
//! # Lock order
//!
//! A thread holding several group locks took them in ascending group order (a free that
//! spans groups). Under a group lock the core may take the global lock and the list-index
//! locks; it never waits for a group lock while holding one of those (see `alloc/mod.rs`).
//! Nothing in this file takes another lock.

use super::bitmap::GroupBitmap;
use parking_lot::{Mutex, MutexGuard};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering::Relaxed};

/// "No order": the group has no free blocks.
const ORDER_NONE: u8 = u8::MAX;

/// A freed extent waiting for its transaction to become durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingFree {
    /// Length in blocks; its offset in the group is its key in [`GroupState::pending`].
    pub len: u32,
    /// Transaction that freed it: released by the commit of this transaction or a later one.
    pub txn: u64,
    /// Identity in the global freed list (policies with a global list; 0 otherwise).
    pub id: u64,
}

/// What a group's lock protects once its bitmap is loaded: the bitmap and the frees waiting
/// for a commit.
pub struct GroupState {
    /// The group's block bitmap; blocks of pending frees stay marked used until released.
    pub bitmap: GroupBitmap,
    /// Pending frees keyed by offset in the group.
    pub pending: BTreeMap<u32, PendingFree>,
}

impl GroupState {
    /// True if any pending free overlaps `off .. off + len`.
    pub fn pending_overlaps(&self, off: u32, len: u32) -> bool {
        let end = off + len;
        if let Some((&s, p)) = self.pending.range(..=off).next_back() {
            if s + p.len > off {
                return true;
            }
        }
        self.pending.range(off..end).next().is_some()
    }
}

/// What the group lock protects: the state, or nothing while the bitmap is not loaded.
pub type Slot = Option<Box<GroupState>>;

/// One group: its state under a lock (absent while unloaded) and lock-free mirrors of its
/// figures, in one cache line.
#[repr(align(64))]
pub struct Group {
    state: Mutex<Slot>,
    free_blocks: AtomicU32,
    largest_order: AtomicU8,
    avg_order: AtomicU8,
    /// Size-class tag (0 = untagged); written under the lock.
    class_tag: AtomicU8,
    /// Set when a scan or free uses the group; cleared by the sweep that drops idle bitmaps
    /// (a CLOCK reference bit). Read before it is written, so a busy group costs no store.
    referenced: AtomicU8,
}

const _: () = assert!(std::mem::size_of::<Group>() == 64);

fn encode(order: Option<u32>) -> u8 {
    order.map_or(ORDER_NONE, |o| o as u8)
}

fn decode(v: u8) -> Option<u32> {
    (v != ORDER_NONE).then_some(u32::from(v))
}

impl Group {
    /// A loaded group holding `bitmap`: untagged, no pending frees.
    pub fn new(bitmap: GroupBitmap) -> Self {
        Group {
            free_blocks: AtomicU32::new(bitmap.free_blocks()),
            largest_order: AtomicU8::new(encode(bitmap.largest_free_order())),
            avg_order: AtomicU8::new(encode(bitmap.avg_fragment_order())),
            class_tag: AtomicU8::new(0),
            referenced: AtomicU8::new(0),
            state: Mutex::new(Some(Box::new(GroupState {
                bitmap,
                pending: BTreeMap::new(),
            }))),
        }
    }

    /// A group whose bitmap is not loaded, with the figures its descriptor records.
    pub fn unloaded(free: u32, largest: Option<u32>, avg: Option<u32>, class_tag: u8) -> Self {
        Group {
            free_blocks: AtomicU32::new(free),
            largest_order: AtomicU8::new(encode(largest)),
            avg_order: AtomicU8::new(encode(avg)),
            class_tag: AtomicU8::new(class_tag),
            referenced: AtomicU8::new(0),
            state: Mutex::new(None),
        }
    }

    /// Marks the group used since the last sweep.
    #[inline]
    pub fn touch(&self) {
        let referenced = self.referenced.load(Relaxed);
        debug_assert!(referenced <= 1, "the reference bit holds {referenced}");
        if referenced == 0 {
            self.referenced.store(1, Relaxed);
        }
    }

    /// Clears the reference bit; returns whether it was set.
    pub fn take_referenced(&self) -> bool {
        let was = self.referenced.swap(0, Relaxed);
        debug_assert!(was <= 1, "the reference bit held {was}");
        was != 0
    }

    /// Takes the lock, waiting if needed; `waited` is set when it had to wait.
    #[inline]
    pub fn lock(&self, waited: &mut bool) -> MutexGuard<'_, Slot> {
        let guard = match self.state.try_lock() {
            Some(g) => g,
            None => {
                *waited = true;
                self.state.lock()
            }
        };
        // Mirrors change only under the lock, so whoever held it left them true.
        debug_assert!(
            guard
                .as_ref()
                .is_none_or(|s| s.bitmap.free_blocks() == self.free_blocks()),
            "group free-block mirror stale under its lock"
        );
        guard
    }

    /// Takes the lock if it is free, without waiting.
    #[inline]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, Slot>> {
        self.state.try_lock()
    }

    /// True if a thread holds the lock at this moment.
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.state.is_locked()
    }

    /// Mirror: free blocks (read without the lock: a hint).
    #[inline]
    pub fn free_blocks(&self) -> u32 {
        self.free_blocks.load(Relaxed)
    }

    /// Mirror: largest order with a free aligned chunk; `None` with no free block.
    #[inline]
    pub fn largest_order(&self) -> Option<u32> {
        decode(self.largest_order.load(Relaxed))
    }

    /// Mirror: order of the average free run; `None` with no free block (a full group may
    /// keep its old order under the `zombie_groups` policy).
    #[inline]
    pub fn avg_order(&self) -> Option<u32> {
        decode(self.avg_order.load(Relaxed))
    }

    /// Size-class tag (0 = untagged).
    #[inline]
    pub fn class_tag(&self) -> u8 {
        self.class_tag.load(Relaxed)
    }

    /// Sets the size-class tag (under the lock).
    pub fn set_class_tag(&self, tag: u8) {
        debug_assert!(self.state.is_locked(), "a class tag set without the lock");
        if self.class_tag.load(Relaxed) != tag {
            self.class_tag.store(tag, Relaxed);
        }
    }

    /// Stores new mirror values (under the lock). Returns the old `(free, largest, avg)`.
    pub fn set_mirrors(
        &self,
        free: u32,
        largest: Option<u32>,
        avg: Option<u32>,
    ) -> (u32, Option<u32>, Option<u32>) {
        debug_assert!(self.state.is_locked(), "mirrors set without the lock");
        debug_assert_eq!(largest.is_none(), free == 0, "largest order vs free blocks");
        debug_assert!(largest.is_none_or(|o| o < u32::from(ORDER_NONE)));
        let old_free = self.free_blocks.load(Relaxed);
        if old_free != free {
            self.free_blocks.store(free, Relaxed);
        }
        let old_largest = decode(self.largest_order.load(Relaxed));
        if old_largest != largest {
            self.largest_order.store(encode(largest), Relaxed);
        }
        let old_avg = decode(self.avg_order.load(Relaxed));
        if old_avg != avg {
            self.avg_order.store(encode(avg), Relaxed);
        }
        (old_free, old_largest, old_avg)
    }
}
