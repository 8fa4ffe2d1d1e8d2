//! A directory's state in memory ([`DirState`]): its entries (`entries.rs`), its parent,
//! its log's bounds, and whether a call used it since the last trim ([`Used`]).
//!
//! Invariant: `entries` is the log replayed from `log_start` to `log_bytes`, or shelved
//! with the count of entries it replays to (`ondemand.rs`), and then perhaps a view of
//! the log's run (`runview.rs`), which no directory with its entries in memory holds;
//! `live` is what the entries take as records, `run_live` what the log's run held when
//! written (0: none); `log_start <= log_bytes <= mapped_to` once `mapped_to` is known.
//! Lock order: none of its own (the namespace lock, `Fs::ns`, guards it; [`Used`] is
//! atomic so a holder of that lock for reading can set it).

use std::sync::atomic::{AtomicBool, Ordering};

/// A directory's state in memory.
#[derive(Debug)]
pub(crate) struct DirState {
    /// Name to entry, packed (`entries.rs`).
    pub(crate) entries: super::entries::Entries,
    /// The directory holding this one (the root's is itself).
    pub(crate) parent: u64,
    /// Bytes of the entry log on the volume (where the next record goes).
    pub(crate) log_bytes: u64,
    /// Where the log's live part starts (the blocks before it are punched or history).
    pub(crate) log_start: u64,
    /// Bytes the entries would take as records (compaction's yardstick).
    pub(crate) live: u64,
    /// Bytes as records of the entries the log's run held when it was written (0: the
    /// log starts with no run): a large directory grown to twice that is compacted into a
    /// new run (`names/compact.rs`), so one that only grows has a run too.
    pub(crate) run_live: u64,
    /// The log's blocks are mapped up to this byte (0: not known; `names.rs` maps a
    /// change's records before it starts, so no append inside one allocates).
    pub(crate) mapped_to: u64,
    /// Named by a call since the last trim of directories (`Fs::shelve_dirs`): a
    /// directory in use keeps its entries.
    pub(crate) used: Used,
    /// Shelved only: its run's index and the changes after it, which answer a lookup
    /// without reading the entries whole (`runview.rs`).
    pub(crate) view: Option<Box<super::runview::RunView>>,
}

impl DirState {
    /// No entries (shelved or not: a shelved directory kept its count).
    pub(crate) fn is_empty(&self) -> bool {
        match self.entries.shelved() {
            Some(count) => count == 0,
            None => self.entries.is_empty(),
        }
    }

    /// Its entries were let go (`Fs::shelve_dirs`): `Fs::unshelve` reads them back.
    pub(crate) fn shelved(&self) -> bool {
        self.entries.shelved().is_some()
    }
}

/// A directory's "used since the last trim" mark ([`DirState::used`]): set under the
/// namespace lock held for reading or writing, taken under it held for writing.
#[derive(Debug, Default)]
pub(crate) struct Used(AtomicBool);

impl Used {
    /// Marks the directory used (a read first: lookups in one directory from several
    /// threads then share its cache line instead of writing it each time).
    pub(crate) fn mark(&self) {
        if !self.0.load(Ordering::Relaxed) {
            self.0.store(true, Ordering::Relaxed);
        }
        // Only a trim, under the namespace lock held for writing, clears it.
        debug_assert!(self.0.load(Ordering::Relaxed), "marked used");
    }

    /// Was it used since the last call? Clears the mark.
    pub(crate) fn take(&self) -> bool {
        self.0.swap(false, Ordering::Relaxed)
    }
}
