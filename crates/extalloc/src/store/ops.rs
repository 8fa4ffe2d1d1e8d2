//! The shared transaction's operations: one list per stats shard, and the admission that
//! keeps the transaction's record within the journal's largest.
//!
//! Data structures: [`OpShards`], per shard a `ShardOps` (its list, and the admission credit
//! it holds) under the shard's own mutex, plus `reserved`, the ops admitted or held as
//! credit across shards, and `busy`, a bit per shard that holds ops or credit: a commit
//! visits only those (one thread's commit touches one shard, not all 64). Admission takes
//! from the caller's shard's credit (no shared write); a shard that runs out takes a chunk
//! of `CHUNK` from `reserved` while that still fits the limit, else exactly what it needs;
//! near the limit every shard's unused credit is taken back before a refusal, so a refusal
//! is exact: the ops pushed or admitted would not fit.
//!
//! Invariant: `reserved` = ops in the lists since the last `take` (an op merged into the
//! one before it is not one more: its admission goes back as credit) + ops admitted and
//! not yet pushed + every shard's credit + ops in flight (taken by a commit whose record is
//! being written: put back if the write fails, so they must fit with the next
//! transaction); `record_bytes(reserved) <= max` whenever `admit` returns `Ok`. No op
//! crosses a group. A shard whose `busy` bit is clear holds no ops and no credit: the bit is
//! set, under the shard's mutex, before ops or credit are added, and cleared, under it,
//! only once both are gone.
//!
//! Locks: a shard's mutex is taken under no allocator lock (an allocation may run under
//! it: `allocating`, and `allocating_open`, which holds no boundary shard: while the
//! boundary is open the shard's mutex stands in for it, and `fence`, under the closed
//! boundary, waits for it); `fence`, `reclaim_credits` and `take_in_flight` take each
//! shard's in turn, never two at once; `take` and `put_back` run under the store's closed
//! boundary. `spare` (the list the last commit recorded, kept for the next) is locked
//! alone. `in_flight` (debug builds: the count of ops in flight) is taken before a shard's.
//!
//! Checked: the closed boundary is a type, [`ClosedBoundary`], which only
//! [`OpShards::fence`] makes (given the boundary's write guards) and `take` and `put_back`
//! require; with it, debug builds recompute `reserved` and the `busy` mask from the shards
//! at every fence and take ([`OpShards::debug_check`]). A loom model (the tests below,
//! under `cfg(loom)`) runs an open-path allocation against the fence in every interleaving.

use crate::disk::journal::{Journal, Op};
use crate::error::{Error, Result};
use crate::sync::{AtomicBool, AtomicU64, Mutex, MutexGuard};
use crossbeam_utils::CachePadded;
use parking_lot::RwLockWriteGuard;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};

/// Ops a shard takes from `reserved` at a time while the transaction is far from the limit.
const CHUNK: u64 = 64;

#[derive(Default)]
struct ShardOps {
    ops: Vec<Op>,
    /// Ops this shard may still admit without touching `reserved`.
    credit: u64,
}

impl ShardOps {
    /// Pushes `op`, or grows the list's last op when `op` continues it (same kind, the
    /// next blocks, one group of `group_blocks`): a file appended to 8 KiB at a time
    /// then costs its transaction one op, not one per append. Returns whether it merged
    /// (the admitted op was then not used).
    ///
    /// Replay applies the merged op block for block as it would the two, and a group
    /// found corrupt skips exactly the ops inside it, as before: no op crosses a group.
    fn push_merging(&mut self, op: Op, group_blocks: u64) -> bool {
        let (Op::Allocate(new) | Op::Free(new)) = op;
        debug_assert!(new.len > 0, "an empty op");
        debug_assert_eq!(
            new.start / group_blocks,
            (new.end() - 1) / group_blocks,
            "an op crosses a group: {new:?}"
        );
        let merged = 'merge: {
            if let Some(last) = self.ops.last_mut() {
                let same_kind = matches!(
                    (&*last, op),
                    (Op::Allocate(_), Op::Allocate(_)) | (Op::Free(_), Op::Free(_))
                );
                let (Op::Allocate(prev) | Op::Free(prev)) = last;
                if same_kind
                    && prev.end() == new.start
                    && prev.start / group_blocks == (new.end() - 1) / group_blocks
                {
                    prev.len += new.len;
                    break 'merge true;
                }
            }
            self.ops.push(op);
            false
        };
        debug_assert!(
            self.ops
                .last()
                .is_some_and(|&(Op::Allocate(l) | Op::Free(l))| l.end() == new.end()),
            "the list does not end with the op pushed"
        );
        merged
    }
}

/// The open transaction's ops, one list per stats shard.
///
/// A record lists its allocations before its frees. That is a valid order for replay: a
/// block freed in a transaction stays pending (unusable) until the transaction commits, so
/// within one transaction no allocation can follow a free of the same block, while a free
/// may follow an allocation of it (by another thread, in another shard).
pub(super) struct OpShards {
    shards: Box<[CachePadded<Mutex<ShardOps>>]>,
    reserved: CachePadded<AtomicU64>,
    /// The device's blocks per group: ops merge within one ([`ShardOps::push_merging`]).
    group_blocks: u64,
    /// The store's boundary is closed (set before, cleared after, under its write locks;
    /// see [`OpShards::fence`]): [`OpShards::allocating_open`] then steps aside.
    closed: CachePadded<AtomicBool>,
    /// The list the last commit recorded, given back ([`OpShards::recycle`]) for the next
    /// [`OpShards::take_in_flight`]: a commit's list can hold millions of ops.
    spare: Mutex<Vec<Op>>,
    /// Bit `i`: shard `i` may hold ops or credit (see the invariant).
    busy: CachePadded<AtomicU64>,
    /// Debug builds: the ops in flight (taken by [`OpShards::take_in_flight`], not yet
    /// settled or put back), changed under this lock together with `reserved` so that
    /// [`OpShards::debug_check`] sees both at once. Unused in release builds.
    in_flight: Mutex<u64>,
}

/// The witness that the store's boundary is closed: every boundary shard held for writing
/// and the open path fenced. Only [`OpShards::fence`] makes one; dropping it opens the
/// open path again ([`OpShards::reopen`]), so it must drop before the write guards.
pub(super) struct ClosedBoundary<'a> {
    ops: &'a OpShards,
}

impl Drop for ClosedBoundary<'_> {
    fn drop(&mut self) {
        debug_assert!(self.ops.closed.load(Relaxed), "reopened twice");
        self.ops.reopen();
    }
}

/// `e` cut at group boundaries: the ops that record it (no op crosses a group, so that a
/// group found corrupt at replay skips exactly its own blocks' changes).
pub(super) fn per_group(
    geometry: &crate::geometry::Geometry,
    e: crate::geometry::Extent,
) -> impl Iterator<Item = crate::geometry::Extent> + '_ {
    geometry.split(e).map(|(g, off, len)| {
        crate::geometry::Extent::new(geometry.group_start(g) + u64::from(off), u64::from(len))
    })
}

/// Largest op list kept for the next commit (in ops: 24 MiB).
const SPARE_KEEP_OPS: usize = 1 << 20;

impl OpShards {
    pub(super) fn new(group_blocks: u64) -> Self {
        assert!(group_blocks > 0, "a group holds blocks");
        const { assert!(crate::alloc::SHARDS <= 64, "one busy bit per shard") };
        OpShards {
            group_blocks,
            closed: CachePadded::new(AtomicBool::new(false)),
            shards: (0..crate::alloc::SHARDS)
                .map(|_| CachePadded::new(Mutex::new(ShardOps::default())))
                .collect(),
            reserved: CachePadded::new(AtomicU64::new(0)),
            spare: Mutex::new(Vec::new()),
            busy: CachePadded::new(AtomicU64::new(0)),
            in_flight: Mutex::new(0),
        }
    }

    /// Debug builds: the count of ops in flight, locked (see `in_flight`); `None` in
    /// release builds, which do not count them.
    fn in_flight(&self) -> Option<MutexGuard<'_, u64>> {
        cfg!(debug_assertions).then(|| self.in_flight.lock())
    }

    /// Debug builds: recomputes `reserved` (ops in the lists + every shard's credit + ops
    /// in flight: none are admitted and not pushed while the boundary is closed) and the
    /// `busy` mask (a shard that holds ops or credit has its bit set) from the shards, and
    /// panics if they disagree. Consistent under the closed boundary: nothing admits,
    /// pushes or takes credit, and the ops in flight change only under `in_flight`, held
    /// here while each shard is locked in turn. O(shards + ops): not in release builds.
    fn debug_check(&self, closed: &ClosedBoundary<'_>) {
        if cfg!(debug_assertions) {
            self.assert_invariant(closed);
        }
    }

    /// [`OpShards::debug_check`]'s check, in any build (the loom model runs it).
    fn assert_invariant(&self, closed: &ClosedBoundary<'_>) {
        assert!(std::ptr::eq(closed.ops, self), "another store's boundary");
        assert!(self.closed.load(Relaxed), "the boundary is open");
        let in_flight = self.in_flight.lock();
        let busy = self.busy.load(Acquire);
        let mut held = *in_flight;
        for (i, s) in self.shards.iter().enumerate() {
            let s = s.lock();
            let holds = s.ops.len() as u64 + s.credit;
            assert!(
                holds == 0 || busy & (1 << i) != 0,
                "shard {i} holds {} ops and {} credit, its busy bit clear",
                s.ops.len(),
                s.credit
            );
            held += holds;
        }
        assert_eq!(
            self.reserved.load(Relaxed),
            held,
            "reserved is not the ops listed + credit + {} in flight",
            *in_flight
        );
    }

    fn shard(&self, shard: usize) -> &Mutex<ShardOps> {
        &self.shards[shard % self.shards.len()]
    }

    /// Locks `shard` to add ops or credit to it: its `busy` bit is set first.
    fn lock_adding(&self, shard: usize) -> MutexGuard<'_, ShardOps> {
        let i = shard % self.shards.len();
        let guard = self.shards[i].lock();
        let bit = 1u64 << i;
        // Read first: while the bit stays set (a busy shard), no shared write.
        if self.busy.load(Acquire) & bit == 0 {
            self.busy.fetch_or(bit, AcqRel);
        }
        debug_assert!(
            self.busy.load(Relaxed) & bit != 0,
            "adding to shard {i}, not busy"
        );
        guard
    }

    /// Clears shard `i`'s `busy` bit if `s` (its locked state) holds nothing.
    fn settle_busy(&self, i: usize, s: &ShardOps) {
        #[cfg(not(loom))]
        debug_assert!(
            std::ptr::eq(s, self.shards[i].data_ptr()),
            "the state of another shard than {i}"
        );
        if s.ops.is_empty() && s.credit == 0 {
            self.busy.fetch_and(!(1u64 << i), AcqRel);
        }
    }

    /// The shards that may hold ops or credit, with their index. Those that become busy
    /// after the call are not seen: callers run where nobody adds (the boundary closed),
    /// or want no more than a shard's state at some moment.
    fn busy_shards(&self) -> impl Iterator<Item = (usize, &Mutex<ShardOps>)> {
        let mut mask = self.busy.load(Acquire);
        std::iter::from_fn(move || {
            if mask == 0 {
                return None;
            }
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            Some((i, &*self.shards[i]))
        })
    }

    /// Admits `n` more ops to the open transaction if its record (with no payload) still
    /// fits `max` bytes; the caller pushes them, or gives back what it did not use.
    pub(super) fn admit(&self, shard: usize, n: u64, max: u64) -> Result<()> {
        // Under a boundary shard read: credit is never given while the boundary is closed.
        debug_assert!(!self.closed.load(Relaxed), "admission, the boundary closed");
        {
            let mut s = self.shard(shard).lock();
            if s.credit >= n {
                s.credit -= n;
                return Ok(());
            }
        }
        let fits = |total: u64| Journal::record_bytes(total, 0) <= max;
        for want in [CHUNK.max(n), n] {
            let before = self.reserved.fetch_add(want, Relaxed);
            if fits(before + want) {
                self.lock_adding(shard).credit += want - n;
                return Ok(());
            }
            let was = self.reserved.fetch_sub(want, Relaxed);
            debug_assert!(was >= want, "reserved fell below the ops it counts");
        }
        // Near the limit: unused credit of every shard goes back, then one exact try.
        self.reclaim_credits();
        let before = self.reserved.fetch_add(n, Relaxed);
        if !fits(before + n) {
            let was = self.reserved.fetch_sub(n, Relaxed);
            debug_assert!(was >= n, "reserved fell below the ops it counts");
            return Err(Error::TransactionTooLarge {
                bytes: Journal::record_bytes(before + n, 0),
                max,
            });
        }
        Ok(())
    }

    fn reclaim_credits(&self) {
        for (i, s) in self.busy_shards() {
            let mut s = s.lock();
            let credit = std::mem::take(&mut s.credit);
            self.settle_busy(i, &s);
            drop(s);
            let was = self.reserved.fetch_sub(credit, Relaxed);
            debug_assert!(was >= credit, "a shard held more credit than reserved");
        }
    }

    /// The boundary closes: after this, no [`OpShards::allocating_open`] is under way or
    /// starts until the witness returned drops. Called with every boundary shard held for
    /// writing (`held`, the write guards); takes each busy shard's lock once, in turn: a
    /// call that held one has finished, and one that takes it later sees `closed` (set
    /// before, published by the lock). A shard that is not busy holds no credit, so no call
    /// runs in it, and none can get credit while the boundary is closed (credit is given
    /// under it).
    pub(super) fn fence(&self, held: &[RwLockWriteGuard<'_, ()>]) -> ClosedBoundary<'_> {
        assert_eq!(held.len(), self.shards.len(), "every boundary shard held");
        let was = self.closed.swap(true, Relaxed);
        assert!(!was, "the boundary closed twice");
        for (_, s) in self.busy_shards() {
            drop(s.lock());
        }
        let closed = ClosedBoundary { ops: self };
        self.debug_check(&closed);
        closed
    }

    /// The boundary opens again (before its write locks are released): by the witness's
    /// drop only.
    fn reopen(&self) {
        let was = self.closed.swap(false, Relaxed);
        debug_assert!(was, "the boundary opened while open");
    }

    /// [`OpShards::allocating`] without the caller holding its boundary shard: the shard's
    /// own lock stands in for it while the boundary is open and the shard holds credit
    /// (one lock per allocation, the common case). `None` when it cannot (the boundary is
    /// closed, or the shard needs admission): the caller takes its boundary shard and
    /// calls [`OpShards::allocating`].
    pub(super) fn allocating_open(
        &self,
        shard: usize,
        allocate: impl FnOnce() -> Result<crate::geometry::Extent>,
    ) -> Option<Result<crate::geometry::Extent>> {
        let mut s = self.shard(shard).lock();
        if s.credit == 0 || self.closed.load(Relaxed) {
            return None;
        }
        // What lets the fence wait for this call: a shard with credit is busy.
        debug_assert!(
            self.busy.load(Relaxed) & (1 << (shard % self.shards.len())) != 0,
            "credit in a shard not busy"
        );
        let got = allocate();
        if let Ok(e) = got {
            if !s.push_merging(Op::Allocate(e), self.group_blocks) {
                s.credit -= 1;
            }
        }
        Some(got)
    }

    /// Runs `allocate` as one admitted op and pushes the extent it returns; an error gives
    /// the admission back. While the caller's shard holds credit, one trip through its lock
    /// does both (held across the allocation: nothing takes a shard's lock under an
    /// allocator lock, and the core's allocation waits for no one who could hold one);
    /// otherwise [`OpShards::admit`] first. Not for the file layer's allocations, whose
    /// no-space remedy waits for other files' locks.
    pub(super) fn allocating(
        &self,
        shard: usize,
        max: u64,
        allocate: impl FnOnce() -> Result<crate::geometry::Extent>,
    ) -> Result<crate::geometry::Extent> {
        debug_assert!(
            !self.closed.load(Relaxed),
            "allocating, the boundary closed"
        );
        {
            let mut s = self.shard(shard).lock();
            if s.credit >= 1 {
                let got = allocate();
                if let Ok(e) = got {
                    if !s.push_merging(Op::Allocate(e), self.group_blocks) {
                        s.credit -= 1;
                    }
                }
                return got;
            }
        }
        self.admit(shard, 1, max)?;
        let got = allocate();
        match got {
            Ok(e) => self.push(shard, Op::Allocate(e)),
            Err(_) => self.unadmit(shard, 1),
        }
        got
    }

    /// Gives back `n` admitted ops that were not pushed.
    pub(super) fn unadmit(&self, shard: usize, n: u64) {
        debug_assert!(
            !self.closed.load(Relaxed),
            "credit back, the boundary closed"
        );
        self.lock_adding(shard).credit += n;
    }

    /// Pushes an admitted op (merged into the shard's last when it continues it: its
    /// admission then goes back as credit).
    pub(super) fn push(&self, shard: usize, op: Op) {
        debug_assert!(!self.closed.load(Relaxed), "a push, the boundary closed");
        let mut s = self.lock_adding(shard);
        if s.push_merging(op, self.group_blocks) {
            s.credit += 1;
        }
    }

    /// Every op, allocations first (under the closed boundary: nobody admits or pushes
    /// meanwhile). The transaction starts again empty: no credit, nothing reserved, so no
    /// op may be in flight (its count would be lost).
    pub(super) fn take(&self, closed: &ClosedBoundary<'_>) -> Vec<Op> {
        let ops = self.take_in_flight(closed);
        if let Some(mut in_flight) = self.in_flight() {
            assert_eq!(*in_flight, ops.len() as u64, "a take with ops in flight");
            *in_flight = 0;
        }
        self.reserved.store(0, Relaxed);
        self.debug_check(closed);
        ops
    }

    /// [`OpShards::take`] for a record written while the next transaction gathers: the
    /// ops taken stay counted in `reserved` (so the next transaction and they, put back
    /// after a failed write, still fit one record) until [`OpShards::settle`] or
    /// [`OpShards::put_back_in_flight`].
    pub(super) fn take_in_flight(&self, closed: &ClosedBoundary<'_>) -> Vec<Op> {
        self.debug_check(closed);
        // Sized once (nobody pushes meanwhile): a commit can take millions of ops, and a
        // list grown by doubling copies them and faults in fresh pages at every step.
        // Each shard's lock is taken in turn, once per pass, never two at once.
        let total = self.busy_shards().map(|(_, s)| s.lock().ops.len()).sum();
        let mut ops = std::mem::take(&mut *self.spare.lock());
        ops.clear();
        ops.reserve(total);
        // Allocations first, then frees; each kind keeps its order within a shard.
        for (_, s) in self.busy_shards() {
            let s = s.lock();
            ops.extend(s.ops.iter().filter(|op| matches!(op, Op::Allocate(_))));
        }
        for (i, s) in self.busy_shards() {
            let mut s = s.lock();
            ops.extend(s.ops.iter().filter(|op| matches!(op, Op::Free(_))));
            s.ops.clear();
            self.reserved
                .fetch_sub(std::mem::take(&mut s.credit), Relaxed);
            self.settle_busy(i, &s);
        }
        debug_assert_eq!(ops.len(), total, "ops pushed under the closed boundary");
        if let Some(mut in_flight) = self.in_flight() {
            *in_flight += ops.len() as u64;
        }
        self.debug_check(closed);
        ops
    }

    /// The in-flight ops (`n` of them) are recorded: they no longer count.
    pub(super) fn settle(&self, n: u64) {
        let in_flight = self.in_flight();
        if let Some(mut in_flight) = in_flight {
            assert!(*in_flight >= n, "{n} ops settled, {} in flight", *in_flight);
            *in_flight -= n;
            // Held across the change of `reserved`.
            let was = self.reserved.fetch_sub(n, Relaxed);
            assert!(was >= n, "reserved fell below the ops it counts");
            return;
        }
        self.reserved.fetch_sub(n, Relaxed);
    }

    /// Takes back a recorded list's memory for the next commit.
    pub(super) fn recycle(&self, ops: Vec<Op>) {
        if ops.capacity() <= SPARE_KEEP_OPS {
            *self.spare.lock() = ops;
        }
    }

    /// Returns in-flight ops whose record was not written to the open transaction (still
    /// counted, so they fit with it).
    pub(super) fn put_back_in_flight(&self, ops: Vec<Op>) {
        // The count is held across the splice: in flight or listed, never both or neither.
        let in_flight = self.in_flight();
        if let Some(mut in_flight) = in_flight {
            assert!(
                *in_flight >= ops.len() as u64,
                "more ops back than in flight"
            );
            *in_flight -= ops.len() as u64;
            self.lock_adding(0).ops.splice(0..0, ops);
            return;
        }
        self.lock_adding(0).ops.splice(0..0, ops);
    }

    /// The allocations of the open transaction so far (for a checkpoint, which must not
    /// write them home).
    pub(super) fn allocations(&self) -> Vec<Op> {
        self.busy_shards()
            .flat_map(|(_, s)| {
                s.lock()
                    .ops
                    .iter()
                    .filter(|op| matches!(op, Op::Allocate(_)))
                    .copied()
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Returns ops of a failed append to the open transaction (taken by
    /// [`OpShards::take`], under the same closed boundary).
    pub(super) fn put_back(&self, ops: Vec<Op>, closed: &ClosedBoundary<'_>) {
        self.reserved.fetch_add(ops.len() as u64, Relaxed);
        self.lock_adding(0).ops.splice(0..0, ops);
        self.debug_check(closed);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.busy_shards().all(|(_, s)| s.lock().ops.is_empty())
    }

    /// An upper bound of [`OpShards::record_bytes`] from one atomic load: the ops admitted
    /// (pushed or not) and the credit shards hold.
    pub(super) fn record_bytes_bound(&self) -> u64 {
        Journal::record_bytes(self.reserved.load(Relaxed), 0)
    }

    /// Bytes of the open transaction's record so far with no payload (ops pushed).
    pub(super) fn record_bytes(&self) -> u64 {
        let pushed: usize = self.busy_shards().map(|(_, s)| s.lock().ops.len()).sum();
        Journal::record_bytes(pushed as u64, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Extent;
    use crate::store::state::Boundary;
    #[cfg(not(loom))]
    use std::{sync::mpsc, time::Duration};

    /// The fence waits for an allocation under way on the open path (its op is in the
    /// list when the fence returns), and while the boundary is closed the open path steps
    /// aside; once reopened it runs again.
    #[cfg(not(loom))]
    #[test]
    fn the_fence_waits_for_open_allocations_and_closes_the_open_path() {
        let ops = OpShards::new(1024);
        let boundary = Boundary::new();
        ops.admit(0, 1, u64::MAX).unwrap();
        ops.unadmit(0, 1);
        let (started, wait_started) = mpsc::channel();
        let mut closed = None;
        std::thread::scope(|s| {
            let ops = &ops;
            let worker = s.spawn(move || {
                ops.allocating_open(0, || {
                    started.send(()).unwrap();
                    std::thread::sleep(Duration::from_millis(50));
                    Ok(Extent::new(5000, 1))
                })
            });
            wait_started.recv().unwrap();
            closed = Some(boundary.close(ops));
            assert_eq!(ops.allocations(), vec![Op::Allocate(Extent::new(5000, 1))]);
            assert!(worker.join().unwrap().is_some_and(|r| r.is_ok()));
        });
        let mut ran = false;
        assert!(ops
            .allocating_open(0, || {
                ran = true;
                Ok(Extent::new(6000, 1))
            })
            .is_none());
        assert!(
            !ran,
            "nothing allocates on the open path while the boundary is closed"
        );
        drop(closed);
        let got = ops.allocating_open(0, || Ok(Extent::new(6000, 1)));
        assert_eq!(got.map(|r| r.unwrap()), Some(Extent::new(6000, 1)));
        // Continuing ops merge; one that crosses into the next group does not.
        // (group 5 ends at block 6144).
        ops.push(0, Op::Allocate(Extent::new(6001, 2)));
        ops.push(0, Op::Allocate(Extent::new(6003, 141)));
        ops.push(0, Op::Allocate(Extent::new(6144, 1)));
        assert_eq!(
            ops.allocations(),
            vec![
                Op::Allocate(Extent::new(5000, 1)),
                Op::Allocate(Extent::new(6000, 144)),
                Op::Allocate(Extent::new(6144, 1)),
            ]
        );
    }

    /// A commit visits only busy shards: one with ops or credit is busy, and a take leaves
    /// none busy; the ops of every shard, and only those, are taken, allocations first.
    #[cfg(not(loom))]
    #[test]
    fn only_shards_with_ops_or_credit_are_busy() {
        let ops = OpShards::new(1024);
        assert_eq!(ops.busy.load(Relaxed), 0);
        ops.admit(5, 1, u64::MAX).unwrap();
        ops.push(5, Op::Free(Extent::new(10, 1)));
        ops.admit(63, 1, u64::MAX).unwrap();
        ops.push(63, Op::Allocate(Extent::new(3000, 1)));
        ops.admit(7, 1, u64::MAX).unwrap();
        ops.unadmit(7, 1);
        let busy = ops.busy.load(Relaxed);
        assert_eq!(busy, (1 << 5) | (1 << 7) | (1 << 63), "{busy:#x}");
        assert!(!ops.is_empty());
        assert_eq!(ops.record_bytes(), Journal::record_bytes(2, 0));
        let boundary = Boundary::new();
        let closed = boundary.close(&ops);
        assert_eq!(
            ops.take(&closed.fenced),
            vec![
                Op::Allocate(Extent::new(3000, 1)),
                Op::Free(Extent::new(10, 1)),
            ]
        );
        assert_eq!(ops.busy.load(Relaxed), 0, "a take leaves no shard busy");
        assert!(ops.is_empty());
        // Ops put back after a failed write make shard 0 busy again.
        ops.put_back(vec![Op::Allocate(Extent::new(4000, 1))], &closed.fenced);
        assert_eq!(ops.busy.load(Relaxed), 1);
        assert_eq!(ops.allocations(), vec![Op::Allocate(Extent::new(4000, 1))]);
    }

    /// Loom: every interleaving of an allocation on the open path and a fence. When the
    /// fence returns, no allocation is under way: one that started has finished, its op
    /// listed, and one that had not started steps aside (nothing allocated); `reserved`
    /// and `busy` agree with the shards. Run with `RUSTFLAGS="--cfg loom" cargo test -p
    /// extalloc --release --lib loom_`.
    #[cfg(loom)]
    #[test]
    fn loom_allocating_open_against_the_fence() {
        use loom::sync::atomic::{AtomicU8, Ordering::SeqCst};
        use loom::sync::Arc;
        const IDLE: u8 = 0;
        const UNDER_WAY: u8 = 1;
        const DONE: u8 = 2;
        loom::model(|| {
            let ops = Arc::new(OpShards::new(1024));
            ops.admit(3, 1, u64::MAX).unwrap();
            ops.unadmit(3, 1);
            let state = Arc::new(AtomicU8::new(IDLE));
            let worker = {
                let (ops, state) = (ops.clone(), state.clone());
                loom::thread::spawn(move || {
                    ops.allocating_open(3, || {
                        state.store(UNDER_WAY, SeqCst);
                        loom::thread::yield_now();
                        state.store(DONE, SeqCst);
                        Ok(Extent::new(5000, 1))
                    })
                    .map(|r| r.is_ok())
                })
            };
            let boundary = Boundary::new();
            let closed = boundary.close(&ops);
            let seen = state.load(SeqCst);
            assert_ne!(seen, UNDER_WAY, "an allocation under way past the fence");
            let ran = worker.join().unwrap();
            // Not started when the fence returned: it never runs while the boundary is closed.
            assert_eq!(ran.is_some(), seen == DONE, "ran: {ran:?}");
            let want = if seen == DONE {
                vec![Op::Allocate(Extent::new(5000, 1))]
            } else {
                vec![]
            };
            assert_eq!(ops.allocations(), want);
            ops.assert_invariant(&closed.fenced);
            drop(closed);
        });
    }
}
