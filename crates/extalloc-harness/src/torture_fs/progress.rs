//! What the torture's threads have finished, for syncs: a sync reads every thread's count
//! of finished states as it starts, and once it succeeds those states are durable.
//!
//! Data structures: [`Progress`]: per thread, the states finished (an atomic count) and
//! the highest count a successful sync started after.
//!
//! Invariant: a count in `durable` was read from `done` by a sync that then succeeded;
//! each round makes a new one. Lock order: `durable` alone (no other lock under it).

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// How many states each thread had finished, published for syncs to read at their start.
pub(super) struct Progress {
    pub(super) done: Vec<AtomicU64>,
    /// For each thread, the highest state count a finished sync started after.
    pub(super) durable: Mutex<Vec<u64>>,
}

impl Progress {
    /// How many states each thread has finished, read as a sync starts.
    pub(super) fn marks(&self) -> Vec<u64> {
        self.done.iter().map(|d| d.load(Relaxed)).collect()
    }

    /// A sync that started at `marks` succeeded: those states are durable.
    pub(super) fn durable_from(&self, marks: Vec<u64>) {
        let mut durable = self.durable.lock();
        for (d, mark) in durable.iter_mut().zip(marks) {
            *d = (*d).max(mark);
        }
    }
}
