//! The atomics that lock-free code uses, swapped for loom's under `cfg(loom)` so the loom
//! tests in `tests/loom_index.rs` can check every interleaving.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
