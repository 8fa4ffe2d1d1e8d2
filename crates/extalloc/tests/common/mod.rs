//! Helpers shared by the integration tests.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::ScopedJoinHandle;

/// Joins every worker, then tells the committer to stop (even when a worker panicked, so the
/// panic is reported instead of the scope waiting on the committer for ever), then re-raises
/// the first worker's panic.
pub fn join_workers(workers: Vec<ScopedJoinHandle<'_, ()>>, stop: &AtomicBool) {
    let results: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
    stop.store(true, Ordering::Relaxed);
    for r in results {
        if let Err(panic) = r {
            std::panic::resume_unwind(panic);
        }
    }
}
