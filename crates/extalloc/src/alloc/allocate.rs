//! The allocation path: the entry points, the retries, and the steps of one attempt in order.
//!
//! 1. Validate the request (`request.rs`); nothing changes if it is bad.
//! 2. (Normalisation and 3. preallocation belong to the file layer, `crate::files`, which
//!    calls `reserve` here.)
//! 4. Goal: try the exact goal block in its group (`passes.rs`, pass 0).
//! 5. Stream: requests of large files (and requests without a goal) start scanning at the
//!    file's stream goal, picked by the file id modulo the number of goals; small files with
//!    a goal start in the goal's group (`goal.rs`).
//! 6. Passes 1-5 ([`Pass`]) over the group indexes, right of the start group first, then
//!    left (`passes.rs`, `walk.rs`). A group is checked through its lock-free mirrors, then
//!    locked (try-lock in passes 1-4 when the policy says so), rechecked and searched with
//!    bounded effort.
//! 7. Mark used: bitmap, buddy summary, mirrors, index positions (`passes.rs` `take`,
//!    `publish.rs`).
//!
//! Finding nothing, the core fails with `NoSpace`, saying how many blocks wait for a commit
//! and how many preallocations reserve; it applies no remedy itself. The owner of the
//! commits may ask for one (`allocate_committing`); the file layer discards preallocations.
//!
//! # Data structures
//!
//! None of its own: an attempt builds an [`AllocContext`] on the stack and reads the
//! allocator's (`allocator.rs`).
//!
//! # Invariant
//!
//! A returned extent has `min_len ..= len` blocks inside one group, marked used and counted
//! as allocated or reserved (its [`Hold`]) in the thread's shard; a failed call changes
//! nothing. A `NoSpace`'s figures are read after its last attempt, and no commit returned
//! space between that attempt's start and the figures (unless [`RACED_ATTEMPTS`] attempts
//! in a row were overtaken): blocks it shows free were not free to the attempt only if
//! they were pending when it started.
//!
//! # Lock order
//!
//! An attempt takes the global lock alone for a locked stream goal, then group locks one at
//! a time (each released before the next), under which loading takes the loader's lock and
//! `take` the global lock and list-index locks. A forced commit takes `commit_lock` holding
//! nothing else.

use super::allocator::{Allocator, Hold};
use super::passes::Pass;
use super::request::{AllocContext, AllocRequest};
use super::stats::Shard;
use crate::error::{Error, Result};
use crate::geometry::Extent;
use std::sync::atomic::Ordering::Acquire;
use std::time::Instant;

/// Attempts run again because a commit returned space while one ran (see
/// `allocate_validated`): each follows a release, so more than a few means other threads
/// take the space as fast as commits return it.
const RACED_ATTEMPTS: u32 = 8;

impl Allocator {
    /// Allocates one extent of `min_len ..= len` blocks inside one group and hands it to
    /// the caller. Finding no space, it fails with [`Error::NoSpace`], which says how many
    /// blocks wait for a commit and how many preallocations reserve: the layer that owns
    /// each remedy applies it and retries (see [`Allocator::allocate_committing`]).
    pub fn allocate(&self, req: &AllocRequest) -> Result<Extent> {
        self.allocate_as(req, Hold::Allocated, false)
    }

    /// [`Allocator::allocate`] for a caller that owns the commits (an allocator in memory,
    /// no journal): finding no space while frees wait, it commits them and retries once.
    pub fn allocate_committing(&self, req: &AllocRequest) -> Result<Extent> {
        self.allocate_as(req, Hold::Allocated, true)
    }

    pub(super) fn allocate_as(
        &self,
        req: &AllocRequest,
        hold: Hold,
        commit_first: bool,
    ) -> Result<Extent> {
        req.validate(&self.geometry)?;
        let shard = self.stats.shard();
        let started = Instant::now();
        let result = self.allocate_validated(req, shard, commit_first);
        shard.record_latency_ns(started.elapsed().as_nanos() as u64);
        if let Ok(extent) = &result {
            debug_assert!(extent.len >= req.min_len && extent.len <= req.len);
            debug_assert_eq!(
                self.geometry.group_of(extent.start),
                self.geometry.group_of(extent.end() - 1),
                "an extent lies in one group"
            );
            shard.add(&shard.counters.allocs, 1);
            // `alloc_blocks` counts it as held (see `HeldCounters`).
            shard.add(&shard.counters.alloc_blocks, extent.len);
            if hold == Hold::Reserved {
                shard.add(&shard.held.reserved, extent.len);
            }
        }
        result
    }

    fn allocate_validated(
        &self,
        req: &AllocRequest,
        shard: &Shard,
        commit_first: bool,
    ) -> Result<Extent> {
        let mut committed = false;
        let mut raced = 0;
        loop {
            let releases = self.releases.load(Acquire);
            if let Some(extent) = self.try_allocate(req, shard) {
                return Ok(extent);
            }
            if commit_first && !committed && self.pending_free_blocks() > 0 {
                // The caller owns the commits: space waiting for one is made reusable.
                committed = true;
                shard.add(&shard.counters.forced_commits, 1);
                self.commit();
                continue;
            }
            #[cfg(test)]
            tests::after_failed_attempt(self);
            // The figures first, then whether a commit returned space since the attempt
            // began: groups that became free behind a walk (or moved to an order it had
            // already passed) were missed, and a release between the attempt and these
            // figures would show its blocks free and none pending, so the owner of the
            // commits would see nothing to remedy and give up with space free.
            let err = Error::NoSpace {
                requested: req.len,
                min_len: req.min_len,
                free_blocks: self.free_blocks(),
                pending_blocks: self.pending_free_blocks(),
                reserved_blocks: self.reserved_blocks(),
            };
            if self.releases.load(Acquire) != releases && raced < RACED_ATTEMPTS {
                raced += 1;
                continue;
            }
            shard.add(&shard.counters.no_space, 1);
            return Err(err);
        }
    }

    /// One attempt: steps 4 to 7.
    fn try_allocate(&self, req: &AllocRequest, shard: &Shard) -> Option<Extent> {
        let ctx = self.context(req, shard);

        // Step 4: the exact goal.
        if let Some(goal) = req.goal {
            if let Some(extent) = self.alloc_at_goal(&ctx, goal) {
                shard.add(&shard.counters.pass_hits[Pass::Goal as usize], 1);
                return Some(extent);
            }
        }

        // Step 5: where scanning starts.
        let start = self.scan_start(&ctx);

        // Step 6: the passes (under active groups, a refill from the device's start first).
        let (extent, pass) = self
            .refill_active(&ctx)
            .or_else(|| self.scan_passes(&ctx, start))?;
        shard.add(&shard.counters.pass_hits[pass as usize], 1);
        if ctx.stream && self.geometry.group_of(extent.start) == start {
            shard.add(&shard.counters.stream_goal_hits, 1);
        }
        Some(extent)
    }

    /// What is decided about a request before any group is looked at: whether it is a
    /// stream's, its size class, its stream goal.
    #[inline]
    fn context<'a>(&self, req: &'a AllocRequest, shard: &'a Shard) -> AllocContext<'a> {
        let stream = self.is_stream(req);
        let (class_tag, class_index) = if self.policy.size_classes {
            req.size_class(self.geometry.block_size)
        } else {
            (0, 0)
        };
        AllocContext {
            request: req,
            stream,
            slot: self.stream_slot(req.file, class_index),
            class_tag,
            shard,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Allocator;
    use crate::alloc::{AllocRequest, Policy};
    use crate::error::Error;
    use crate::geometry::Geometry;
    use std::cell::RefCell;

    /// What a test runs after a failed attempt (see [`after_failed_attempt`]).
    type Hook = Box<dyn FnOnce(&Allocator)>;

    thread_local! {
        /// Run once on this thread after an attempt found nothing, before the error's
        /// figures are read: where another thread's commit may land.
        static AFTER_FAILED_ATTEMPT: RefCell<Option<Hook>> = RefCell::new(None);
    }

    pub(super) fn after_failed_attempt(alloc: &Allocator) {
        if let Some(hook) = AFTER_FAILED_ATTEMPT.with(|h| h.borrow_mut().take()) {
            hook(alloc);
        }
    }

    /// A commit that returns space after an attempt found none, and before the error says
    /// how much waits for a commit, must not end in `NoSpace` with the space free and
    /// nothing pending: the owner of the commits would see nothing to remedy and give up
    /// (the lab's fallocate3 did, under load, with 10,084 blocks free). The attempt runs
    /// again instead.
    #[test]
    fn a_commit_between_the_attempt_and_the_figures_runs_it_again() {
        for policy in ["extalloc", "extalloc:atomic_pending=false"] {
            let alloc = Allocator::new(
                Geometry::new(4096, 4096, 2 * 4096).unwrap(),
                Policy::parse(policy).unwrap(),
            )
            .unwrap();
            let mut held = Vec::new();
            let mut file = 0;
            loop {
                file += 1;
                match alloc.allocate(&AllocRequest::new(file, 512)) {
                    Ok(e) => held.push(e),
                    Err(Error::NoSpace { .. }) => break,
                    Err(e) => panic!("{policy}: {e}"),
                }
            }
            assert_eq!(alloc.free_blocks(), 0, "{policy}");
            for e in held.drain(..) {
                alloc.free(e).unwrap();
            }
            assert_eq!(alloc.pending_free_blocks(), 2 * 4096, "{policy}");
            AFTER_FAILED_ATTEMPT.with(|h| {
                *h.borrow_mut() = Some(Box::new(|a: &Allocator| {
                    assert_eq!(a.commit(), 2 * 4096);
                }));
            });
            let got = alloc.allocate(&AllocRequest::new(file + 1, 512));
            assert!(
                AFTER_FAILED_ATTEMPT.with(|h| h.borrow().is_none()),
                "{policy}: the first attempt found nothing"
            );
            let got = got.unwrap_or_else(|e| panic!("{policy}: {e}"));
            assert_eq!(got.len, 512, "{policy}");
        }
    }
}
