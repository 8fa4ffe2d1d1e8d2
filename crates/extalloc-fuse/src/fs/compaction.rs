//! When a directory's log is compacted, and when into a run ([`Compaction`], set by
//! `Fs::set_compaction`; the compaction itself is `names/compact.rs`'s).
//!
//! Data structures: two atomics. Invariant: none beyond their meaning (any values are
//! sound: small ones make compactions frequent). Lock order: none (atomics, read under
//! the namespace lock held for writing).

use crate::dir::run;
use std::sync::atomic::AtomicU64;

/// A directory's log is compacted once it exceeds this and four times its live entries
/// (by default: `Fs::set_compaction`).
pub(crate) const COMPACT_MIN_BYTES: u64 = 64 << 10;

/// When a directory's log is compacted, and when into a run (`Fs::set_compaction`).
#[derive(Debug)]
pub(crate) struct Compaction {
    /// A log is compacted once it exceeds this and four times its live entries.
    pub(crate) min_log: AtomicU64,
    /// A compaction writes a run from this many bytes of live entries as records.
    pub(crate) run_from: AtomicU64,
}

impl Default for Compaction {
    fn default() -> Compaction {
        Compaction {
            min_log: AtomicU64::new(COMPACT_MIN_BYTES),
            run_from: AtomicU64::new(run::RUN_MIN_BYTES),
        }
    }
}
