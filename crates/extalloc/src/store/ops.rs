//! The shared transaction's operations: one list per stats shard, and the admission that
//! keeps the transaction's record within the journal's largest.
//!
//! Data structures: [`OpShards`], per shard a `ShardOps` (its list, and the admission credit
//! it holds) under the shard's own mutex, plus `reserved`, the ops admitted or held as
//! credit across shards. Admission takes from the caller's shard's credit (no shared write);
//! a shard that runs out takes a chunk of `CHUNK` from `reserved` while that still fits the
//! limit, else exactly what it needs; near the limit every shard's unused credit is taken
//! back before a refusal, so a refusal is exact: the ops pushed or admitted would not fit.
//!
//! Invariant: `reserved` = ops pushed since the last `take` + ops admitted and not yet
//! pushed + every shard's credit; `record_bytes(reserved) <= max` whenever `admit` returns
//! `Ok`.
//!
//! Locks: a shard's mutex is a leaf; `reclaim_credits` takes each shard's in turn, never
//! two at once; `take` and `put_back` run under the store's closed boundary.

use crate::disk::journal::{Journal, Op};
use crate::error::{Error, Result};
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Ops a shard takes from `reserved` at a time while the transaction is far from the limit.
const CHUNK: u64 = 64;

#[derive(Default)]
struct ShardOps {
    ops: Vec<Op>,
    /// Ops this shard may still admit without touching `reserved`.
    credit: u64,
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
}

impl OpShards {
    pub(super) fn new() -> Self {
        OpShards {
            shards: (0..crate::alloc::SHARDS)
                .map(|_| CachePadded::new(Mutex::new(ShardOps::default())))
                .collect(),
            reserved: CachePadded::new(AtomicU64::new(0)),
        }
    }

    fn shard(&self, shard: usize) -> &Mutex<ShardOps> {
        &self.shards[shard % self.shards.len()]
    }

    /// Admits `n` more ops to the open transaction if its record (with no payload) still
    /// fits `max` bytes; the caller pushes them, or gives back what it did not use.
    pub(super) fn admit(&self, shard: usize, n: u64, max: u64) -> Result<()> {
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
                self.shard(shard).lock().credit += want - n;
                return Ok(());
            }
            self.reserved.fetch_sub(want, Relaxed);
        }
        // Near the limit: unused credit of every shard goes back, then one exact try.
        self.reclaim_credits();
        let before = self.reserved.fetch_add(n, Relaxed);
        if !fits(before + n) {
            self.reserved.fetch_sub(n, Relaxed);
            return Err(Error::TransactionTooLarge {
                bytes: Journal::record_bytes(before + n, 0),
                max,
            });
        }
        Ok(())
    }

    fn reclaim_credits(&self) {
        for s in self.shards.iter() {
            let credit = std::mem::take(&mut s.lock().credit);
            self.reserved.fetch_sub(credit, Relaxed);
        }
    }

    /// Gives back `n` admitted ops that were not pushed.
    pub(super) fn unadmit(&self, shard: usize, n: u64) {
        self.shard(shard).lock().credit += n;
    }

    /// Pushes an admitted op.
    pub(super) fn push(&self, shard: usize, op: Op) {
        self.shard(shard).lock().ops.push(op);
    }

    /// Every op, allocations first (under the closed boundary: nobody admits or pushes
    /// meanwhile). The transaction starts again empty: no credit, nothing reserved.
    pub(super) fn take(&self) -> Vec<Op> {
        let mut ops: Vec<Op> = Vec::new();
        for s in self.shards.iter() {
            let mut s = s.lock();
            ops.append(&mut s.ops);
            s.credit = 0;
        }
        self.reserved.store(0, Relaxed);
        // Stable: each kind keeps its order within a shard.
        ops.sort_by_key(|op| matches!(op, Op::Free(_)));
        ops
    }

    /// Returns ops of a failed append to the open transaction.
    pub(super) fn put_back(&self, ops: Vec<Op>) {
        self.reserved.fetch_add(ops.len() as u64, Relaxed);
        self.shards[0].lock().ops.splice(0..0, ops);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.shards.iter().all(|s| s.lock().ops.is_empty())
    }

    /// Bytes of the open transaction's record so far with no payload (ops pushed).
    pub(super) fn record_bytes(&self) -> u64 {
        let pushed: usize = self.shards.iter().map(|s| s.lock().ops.len()).sum();
        Journal::record_bytes(pushed as u64, 0)
    }
}
