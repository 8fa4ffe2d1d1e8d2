//! The atomics that lock-free code uses, and the mutex of the store's op shards, swapped
//! for loom's under `cfg(loom)` so the loom tests (`tests/loom_index.rs`, and the model of
//! the op shards' fence in `store/ops.rs`) can check every interleaving.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use parking_lot::{Mutex, MutexGuard};

/// loom's mutex with parking_lot's interface (`lock` returns the guard: no poisoning).
#[cfg(loom)]
pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

#[cfg(loom)]
impl<T> Mutex<T> {
    pub(crate) fn new(t: T) -> Self {
        Mutex(loom::sync::Mutex::new(t))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().expect("no poisoning: a panic ends the model")
    }
}
