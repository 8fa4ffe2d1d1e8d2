//! The metadata reserve: runs the layer above reserves ahead for its own metadata (a
//! volume's tree nodes on blocks under 4 KiB, which need runs of several blocks), so that a
//! device fragmented by data to single free blocks still has them when a commit needs one.
//!
//! # Data structures
//!
//! `Store::meta_reserved`: the reserved runs, each marked used in the allocator and counted
//! there as reserved (`Allocator::reserve`), handed to nobody and never journaled.
//!
//! # Invariant
//!
//! ```text
//! every run listed is marked used, not pending, and held by nothing else
//! a checkpoint writes the runs home free (a crash frees them): home holds what records say
//! a run leaves the list only as a recorded allocation (`take_metadata_run`) or released at
//! once (`release_metadata_reserve`)
//! ```
//!
//! # Lock order
//!
//! `meta_reserved` is a leaf: taken with no other store lock held, and nothing is taken
//! under it but the allocator's group locks (through `Allocator::reserve` and release).

use super::state::Store;
use crate::alloc::AllocRequest;
use crate::error::Result;
use crate::geometry::Extent;

impl Store {
    /// Reserves runs of `req.min_len` blocks (at least 1) for the caller's metadata: one
    /// allocation as `req` asks, cut into such runs (a remainder given back at once). Nothing
    /// is recorded: each run is marked used, counted as reserved and listed until
    /// [`Store::take_metadata_run`] or [`Store::release_metadata_reserve`]; a checkpoint
    /// writes it home free, so a crash gives it back. Returns the runs added; fails as an
    /// allocation does ([`Error::NoSpace`](crate::Error::NoSpace): nothing reserved).
    pub(crate) fn reserve_metadata_runs(&self, req: &AllocRequest) -> Result<u64> {
        let run = req.min_len.max(1);
        let e = self.alloc().reserve(req, false)?;
        debug_assert!(e.len >= run, "a reserved run of its minimum");
        let whole = e.len / run * run;
        if whole < e.len {
            self.alloc()
                .release_reserved(Extent::new(e.start + whole, e.len - whole))?;
        }
        let mut runs = self.meta_reserved.lock();
        assert!(
            runs.iter()
                .all(|r| r.end() <= e.start || e.start + whole <= r.start),
            "blocks of {e:?} reserved twice"
        );
        let before = runs.len();
        runs.extend((0..whole / run).map(|i| Extent::new(e.start + i * run, run)));
        self.files.reserved_outside(whole, 0);
        Ok((runs.len() - before) as u64)
    }

    /// Hands one reserved run of `len` blocks to the caller as an allocation, recorded as
    /// [`Store::allocate`]'s are; `None` when no run of that length is listed. On a failure
    /// to record (the remedies of a full transaction failed) the run stays listed.
    pub(crate) fn take_metadata_run(&self, len: u64) -> Option<Result<Extent>> {
        let e = {
            let runs = self.meta_reserved.lock();
            *runs.iter().rev().find(|r| r.len == len)?
        };
        let got = self.with_forced_commits(|| {
            let shard = self.alloc().stats_handle().shard_index();
            let claim = || {
                self.alloc().claim(e);
                Ok(e)
            };
            if let Some(got) = self.ops.allocating_open(shard, claim) {
                return got;
            }
            let _open = self.boundary.read(shard);
            self.ops
                .allocating(shard, self.max_transaction_bytes, claim)
        });
        if got.is_ok() {
            let mut runs = self.meta_reserved.lock();
            let at = runs.iter().position(|r| *r == e).expect("listed above");
            runs.swap_remove(at);
            self.files.reserved_outside(0, e.len);
            debug_assert!(!runs.contains(&e), "a run listed twice");
        }
        Some(got)
    }

    /// Gives every reserved run back to the free space at once (none was recorded): before
    /// a rebuild of the allocation, which wants nothing held. Fails only if a group cannot
    /// be read (the runs not given back stay listed).
    pub(crate) fn release_metadata_reserve(&self) -> Result<()> {
        let mut runs = self.meta_reserved.lock();
        while let Some(&e) = runs.last() {
            self.alloc().release_reserved(e)?;
            runs.pop();
            self.files.reserved_outside(0, e.len);
        }
        assert!(runs.is_empty(), "every run given back");
        Ok(())
    }

    /// The runs reserved for metadata now.
    pub(crate) fn metadata_reserve(&self) -> Vec<Extent> {
        self.meta_reserved.lock().clone()
    }

    /// Blocks reserved for metadata now (neither free nor allocated: see `store/reserve.rs`).
    pub fn metadata_reserved_blocks(&self) -> u64 {
        self.meta_reserved.lock().iter().map(|e| e.len).sum()
    }
}
