//! The store's discard notices ([`Discards`]): the switch, the queue, the extents handed
//! over and the held block count; `discard.rs` says how they are used, its invariant and
//! lock order. This file names no other file of the store.

use crate::geometry::Extent;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// The store's discard notices (see the module).
#[derive(Default)]
pub(super) struct Discards {
    pub(super) on: AtomicBool,
    pub(super) queue: Mutex<Vec<Extent>>,
    pub(super) taken: Mutex<BTreeMap<u64, u64>>,
    pub(super) held_blocks: AtomicU64,
}

impl Discards {
    /// Queues extents the allocator now holds.
    pub(super) fn hold(&self, held: Vec<Extent>) {
        if held.is_empty() {
            return;
        }
        debug_assert!(held.iter().all(|e| e.len > 0), "an empty extent held");
        let blocks: u64 = held.iter().map(|e| e.len).sum();
        self.held_blocks.fetch_add(blocks, Relaxed);
        self.queue.lock().extend(held);
    }

    /// Every held extent, queued or handed over (a checkpoint writes them home free).
    pub(super) fn held_extents(&self) -> Vec<Extent> {
        let queue = self.queue.lock();
        let mut all = queue.clone();
        all.extend(self.taken.lock().iter().map(|(&s, &l)| Extent::new(s, l)));
        // Counted before they are queued, uncounted after they leave `taken`.
        debug_assert!(all.iter().map(|e| e.len).sum::<u64>() <= self.held_blocks());
        all
    }

    /// Blocks held for a discard.
    pub(super) fn held_blocks(&self) -> u64 {
        self.held_blocks.load(Relaxed)
    }
}
