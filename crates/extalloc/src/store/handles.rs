//! The store's registry of callers' transactions ([`Handles`]) and one handle's changes
//! ([`TxnOps`]); `txn.rs` says how they are used, its invariant and lock order. This file
//! names no other file of the store.

use crate::error::{Error, Result};
use crate::geometry::Extent;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// One handle's changes so far.
#[derive(Default)]
pub(super) struct TxnOps {
    pub(super) allocs: Vec<Extent>,
    pub(super) frees: Vec<Extent>,
}

/// The store's view of its handles.
#[derive(Default)]
pub(super) struct Handles {
    pub(super) next_id: AtomicU64,
    /// Open handles that allocated, by id: their allocations are unrecorded.
    pub(super) open: Mutex<HashMap<u64, Arc<Mutex<TxnOps>>>>,
    /// Frees of appended records not yet applied in memory, by sequence number.
    pub(super) appended: Mutex<BTreeMap<u64, Vec<Extent>>>,
    /// Every extent a handle frees, until the free is applied or cancelled: start -> len.
    pub(super) freeing: Mutex<BTreeMap<u64, u64>>,
    /// Entries in `freeing` (written under its lock): the shared transaction's frees skip
    /// the lock while no handle frees anything.
    pub(super) freeing_len: AtomicU64,
    /// Allocations open handles hold (recorded nowhere yet): frees skip the registry while
    /// there are none.
    pub(super) unrecorded_len: AtomicU64,
}

impl Handles {
    /// Every open handle's allocations (for a checkpoint: not home yet).
    pub(super) fn unrecorded(&self) -> Vec<Extent> {
        let open = self.open.lock();
        open.values()
            .flat_map(|ops| ops.lock().allocs.clone())
            .collect()
    }

    /// Takes every appended record's frees (a checkpoint applies them).
    pub(super) fn take_appended(&self) -> Vec<Extent> {
        let frees: Vec<Extent> = std::mem::take(&mut *self.appended.lock())
            .into_values()
            .flatten()
            .collect();
        // `freeing` let no block be freed twice: the frees are disjoint.
        debug_assert!({
            let mut sorted = frees.clone();
            sorted.sort_unstable_by_key(|e| e.start);
            sorted.windows(2).all(|w| w[0].end() <= w[1].start)
        });
        frees
    }

    /// `Err` if `e` overlaps an allocation of an open handle other than `except`: it is
    /// recorded nowhere yet, so a record freeing it would free at replay a block no record
    /// allocated. Takes the registry and each handle's lock: call holding neither.
    pub(super) fn check_not_unrecorded(&self, e: Extent, except: Option<u64>) -> Result<()> {
        if self.unrecorded_len.load(Relaxed) == 0 {
            return Ok(());
        }
        let open = self.open.lock();
        for (&id, ops) in open.iter() {
            if Some(id) == except {
                continue;
            }
            if ops
                .lock()
                .allocs
                .iter()
                .any(|a| a.start < e.end() && e.start < a.end())
            {
                return Err(Error::OwnedByTransaction {
                    start: e.start,
                    len: e.len,
                    txn: id,
                });
            }
        }
        Ok(())
    }

    /// Whether `e` overlaps an extent a handle frees.
    pub(super) fn is_freeing(&self, e: Extent) -> bool {
        if self.freeing_len.load(Relaxed) == 0 {
            // A handle's free marks `freeing` before its blocks could reach this caller's
            // free (they stay allocated until the handle's record is durable).
            return false;
        }
        let freeing = self.freeing.lock();
        freeing
            .range(..e.end())
            .next_back()
            .is_some_and(|(&s, &l)| s + l > e.start)
    }

    pub(super) fn unmark_freeing(&self, extents: &[Extent]) {
        let mut freeing = self.freeing.lock();
        for e in extents {
            let was = freeing.remove(&e.start);
            debug_assert_eq!(was, Some(e.len), "{e:?} was not being freed");
        }
        self.freeing_len.store(freeing.len() as u64, Relaxed);
    }
}
