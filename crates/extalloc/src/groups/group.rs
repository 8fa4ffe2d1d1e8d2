//! One group: its bitmap and buddy summary under a lock, lock-free mirrors of the figures
//! scans look at before locking, and the group's share of the deferred frees.
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

use super::bitmap::GroupBitmap;
use parking_lot::{Mutex, MutexGuard};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering::Relaxed};

/// "No order": the group has no free blocks.
const ORDER_NONE: u8 = u8::MAX;

/// A freed extent waiting for its transaction to become durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingFree {
    pub len: u32,
    /// Transaction that freed it: released by the commit of this transaction or a later one.
    pub txn: u64,
    /// Identity in the global freed list (policies with a global list; 0 otherwise).
    pub id: u64,
}

pub struct GroupState {
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

pub struct Group {
    state: Mutex<GroupState>,
    free_blocks: AtomicU32,
    largest_order: AtomicU8,
    avg_order: AtomicU8,
    /// Size-class tag (0 = untagged); written under the lock.
    class_tag: AtomicU8,
}

fn encode(order: Option<u32>) -> u8 {
    order.map_or(ORDER_NONE, |o| o as u8)
}

fn decode(v: u8) -> Option<u32> {
    (v != ORDER_NONE).then_some(u32::from(v))
}

impl Group {
    pub fn new(bitmap: GroupBitmap) -> Self {
        let g = Group {
            free_blocks: AtomicU32::new(bitmap.free_blocks()),
            largest_order: AtomicU8::new(encode(bitmap.largest_free_order())),
            avg_order: AtomicU8::new(encode(bitmap.avg_fragment_order())),
            class_tag: AtomicU8::new(0),
            state: Mutex::new(GroupState {
                bitmap,
                pending: BTreeMap::new(),
            }),
        };
        debug_assert!(g.free_blocks() > 0);
        g
    }

    /// Takes the lock, waiting if needed; `waited` is set when it had to wait.
    #[inline]
    pub fn lock(&self, waited: &mut bool) -> MutexGuard<'_, GroupState> {
        match self.state.try_lock() {
            Some(g) => g,
            None => {
                *waited = true;
                self.state.lock()
            }
        }
    }

    #[inline]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, GroupState>> {
        self.state.try_lock()
    }

    #[inline]
    pub fn is_locked(&self) -> bool {
        self.state.is_locked()
    }

    #[inline]
    pub fn free_blocks(&self) -> u32 {
        self.free_blocks.load(Relaxed)
    }

    #[inline]
    pub fn largest_order(&self) -> Option<u32> {
        decode(self.largest_order.load(Relaxed))
    }

    #[inline]
    pub fn avg_order(&self) -> Option<u32> {
        decode(self.avg_order.load(Relaxed))
    }

    #[inline]
    pub fn class_tag(&self) -> u8 {
        self.class_tag.load(Relaxed)
    }

    /// Sets the size-class tag (under the lock).
    pub fn set_class_tag(&self, tag: u8) {
        if self.class_tag.load(Relaxed) != tag {
            self.class_tag.store(tag, Relaxed);
        }
    }

    /// Stores new mirror values (under the lock). Returns the old `(largest, avg)` orders.
    pub fn set_mirrors(
        &self,
        free: u32,
        largest: Option<u32>,
        avg: Option<u32>,
    ) -> (Option<u32>, Option<u32>) {
        if self.free_blocks.load(Relaxed) != free {
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
        (old_largest, old_avg)
    }
}
