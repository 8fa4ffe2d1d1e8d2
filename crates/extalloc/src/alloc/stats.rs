//! Sharded statistics: counters and an allocation latency histogram.
//!
//! # Data structures
//!
//! [`SHARDS`] cache-padded [`Shard`]s, each with its event counters, its share of the
//! accounting ([`HeldCounters`]) and a latency histogram under a mutex, made at the
//! shard's first recorded latency (each is about 220 KiB: 64 made up front held 14 MiB
//! of every daemon's memory, where a mount's few threads use a few shards). Each thread is given
//! a shard (round-robin on first use) and only ever writes its own shard's cache lines, so
//! counting adds no global shared write to the hot path. Lock waits are also counted per
//! thread ([`thread_lock_waits`]), in a thread-local cell.
//!
//! # Invariant
//!
//! Readers sum the shards; a snapshot taken while threads run is approximate, one taken at
//! quiescence is exact. The held counters' shares wrap; only their sum means anything.
//!
//! # Lock order
//!
//! A shard's histogram mutex is a leaf: taken after an allocation (holding no other lock),
//! and by readers one shard at a time.

use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Number of shards: enough that threads of a 2-64 core machine rarely share one.
pub const SHARDS: usize = 64;
const _: () = assert!(SHARDS.is_power_of_two());

/// Highest latency the histogram tracks: 60 s in ns; anything slower is clamped.
const LATENCY_NS_MAX: u64 = 60_000_000_000;

/// Counters of one shard. Field names say what is counted.
#[derive(Default)]
pub struct ShardCounters {
    pub allocs: AtomicU64,
    pub alloc_blocks: AtomicU64,
    pub frees: AtomicU64,
    pub free_blocks: AtomicU64,
    pub pass_hits: [AtomicU64; 6],
    /// Groups whose mirrors a pass checked (the lock-free look before any lock).
    pub groups_considered: AtomicU64,
    /// Groups a pass locked and searched.
    pub groups_scanned: AtomicU64,
    pub trylock_skips: AtomicU64,
    pub lock_waits: AtomicU64,
    pub stream_goal_hits: AtomicU64,
    pub forced_commits: AtomicU64,
    pub no_space: AtomicU64,
    /// Bitmaps read from the device (lazy loading), and how many of those the read-ahead
    /// thread had already read.
    pub bitmaps_loaded: AtomicU64,
    pub prefetch_hits: AtomicU64,
    /// Loads that failed with an I/O error (the group was skipped).
    pub load_errors: AtomicU64,
}

/// The accounting behind the allocator's invariant `marked used = allocated + reserved +
/// pending`, one shard's share, beside the counters the hot path keeps anyway:
///
/// ```text
/// allocated + reserved = adjusted + alloc_blocks - free_blocks - released
/// reserved             = reserved
/// ```
///
/// so a plain allocation or free adds no write of its own. A share may go below zero (a
/// block allocated on one thread and freed on another), so shares wrap and only their sum
/// means anything. Never reset: [`Stats::reset`] folds `alloc_blocks - free_blocks` into
/// `adjusted` before it zeroes them.
#[derive(Default)]
pub struct HeldCounters {
    /// Blocks found used on disk (at open, at a load, by a replay), and what resets folded
    /// in.
    pub adjusted: AtomicU64,
    /// Blocks reserved by preallocations, not handed to anyone.
    pub reserved: AtomicU64,
    /// Reserved blocks given back without being handed out (discarded preallocations).
    pub released: AtomicU64,
}

pub struct Shard {
    pub counters: ShardCounters,
    pub held: HeldCounters,
    /// Made at the first latency recorded (`None` until then).
    latency: Mutex<Option<Histogram<u64>>>,
}

impl Shard {
    /// Counts `n` waits for a lock, in the shard and in the calling thread's own count
    /// ([`thread_lock_waits`]).
    #[inline]
    pub fn lock_waited(&self, n: u64) {
        self.add(&self.counters.lock_waits, n);
        THREAD_LOCK_WAITS.with(|w| w.set(w.get() + n));
    }

    #[inline]
    pub fn add(&self, counter: &AtomicU64, n: u64) {
        // Only this shard's thread(s) write here; a relaxed add is enough.
        self.debug_check_owns(counter);
        counter.fetch_add(n, Relaxed);
    }

    /// Debug builds: `counter` is one of this shard's (what makes a relaxed add enough).
    #[inline]
    fn debug_check_owns(&self, counter: &AtomicU64) {
        let (at, me) = (
            counter as *const AtomicU64 as usize,
            self as *const Self as usize,
        );
        debug_assert!(
            (me..me + std::mem::size_of::<Self>()).contains(&at),
            "a counter of another shard"
        );
    }

    /// Takes `n` from a wrapping counter (a [`HeldCounters`] share).
    #[inline]
    pub fn sub(&self, counter: &AtomicU64, n: u64) {
        self.debug_check_owns(counter);
        counter.fetch_sub(n, Relaxed);
    }

    pub fn record_latency_ns(&self, ns: u64) {
        let mut latency = self.latency.lock();
        let h = latency.get_or_insert_with(new_histogram);
        h.saturating_record(ns.clamp(1, LATENCY_NS_MAX));
        debug_assert!(!h.is_empty(), "a latency recorded");
    }
}

/// An empty latency histogram (1 ns to [`LATENCY_NS_MAX`], 3 significant figures).
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_NS_MAX, 3).expect("valid bounds")
}

/// The allocator's statistics: [`SHARDS`] per-thread shards of counters, accounting shares
/// and latency histograms, summed when read.
pub struct Stats {
    shards: Box<[CachePadded<Shard>]>,
}

thread_local! {
    static SHARD_INDEX: Cell<usize> = const { Cell::new(usize::MAX) };
    static THREAD_LOCK_WAITS: Cell<u64> = const { Cell::new(0) };
}

/// Lock waits (group, global and cache locks) the calling thread has counted since it
/// started: a caller that runs one role per thread (a writeback context) reads its own
/// contention by the difference of two calls.
pub fn thread_lock_waits() -> u64 {
    THREAD_LOCK_WAITS.with(Cell::get)
}
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

/// A summed copy of the counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct StatsSnapshot {
    /// Allocations that succeeded (preallocation reserves included).
    pub allocs: u64,
    /// Blocks those allocations returned.
    pub alloc_blocks: u64,
    /// Frees accepted (each waits for a commit).
    pub frees: u64,
    /// Blocks those frees covered.
    pub free_blocks: u64,
    /// Hits per pass, indexed like [`Pass::ALL`](super::Pass::ALL).
    pub pass_hits: [u64; 6],
    /// Groups whose mirrors a pass checked (the lock-free look before any lock).
    pub groups_considered: u64,
    /// Groups a pass locked and searched.
    pub groups_scanned: u64,
    /// Groups a pass skipped because their lock was busy (policy `trylock`).
    pub trylock_skips: u64,
    /// Lock acquisitions that had to wait: group locks, the global lock, index-list locks.
    pub lock_waits: u64,
    /// Stream requests served by the group their scan started at (the stream goal's).
    pub stream_goal_hits: u64,
    /// Commits forced by an allocation that found no space while frees waited.
    pub forced_commits: u64,
    /// Allocations that failed with `NoSpace`.
    pub no_space: u64,
    /// Bitmaps read from the device on first use (lazy loading).
    pub bitmaps_loaded: u64,
    /// Of those loads, the ones that took a copy the read-ahead thread had already read.
    pub prefetch_hits: u64,
    /// Loads that failed with an I/O error (the group was skipped).
    pub load_errors: u64,
    /// Gauge (filled by `Allocator::stats`, like the two below): bitmaps in memory now.
    pub loaded_bitmaps: u64,
    /// Gauge: bitmaps the read-ahead thread has read so far.
    pub prefetched_bitmaps: u64,
    /// Gauge: groups held corrupt (all used, never allocated from).
    pub corrupt_groups: u64,
}

impl Default for Stats {
    fn default() -> Self {
        Stats::new()
    }
}

impl Stats {
    /// Zeroed counters and empty histograms in every shard.
    pub fn new() -> Self {
        let shards = (0..SHARDS)
            .map(|_| {
                CachePadded::new(Shard {
                    counters: ShardCounters::default(),
                    held: HeldCounters::default(),
                    latency: Mutex::new(None),
                })
            })
            .collect();
        Stats { shards }
    }

    /// This thread's shard number, `0 .. SHARDS`.
    #[inline]
    pub fn shard_index(&self) -> usize {
        // The mask below takes a thread's number modulo SHARDS.
        const { assert!(SHARDS.is_power_of_two()) };
        let i = SHARD_INDEX.with(|c| {
            let mut i = c.get();
            if i == usize::MAX {
                i = NEXT_SHARD.fetch_add(1, Relaxed);
                c.set(i);
            }
            i
        });
        i & (SHARDS - 1)
    }

    /// This thread's shard.
    #[inline]
    pub fn shard(&self) -> &Shard {
        &self.shards[self.shard_index()]
    }

    /// The counters summed over the shards (exact at quiescence); the gauges stay 0, as
    /// only the allocator knows them.
    pub fn snapshot(&self) -> StatsSnapshot {
        let mut s = StatsSnapshot::default();
        for shard in self.shards.iter() {
            let c = &shard.counters;
            s.allocs += c.allocs.load(Relaxed);
            s.alloc_blocks += c.alloc_blocks.load(Relaxed);
            s.frees += c.frees.load(Relaxed);
            s.free_blocks += c.free_blocks.load(Relaxed);
            for (sum, hits) in s.pass_hits.iter_mut().zip(&c.pass_hits) {
                *sum += hits.load(Relaxed);
            }
            s.groups_considered += c.groups_considered.load(Relaxed);
            s.groups_scanned += c.groups_scanned.load(Relaxed);
            s.trylock_skips += c.trylock_skips.load(Relaxed);
            s.lock_waits += c.lock_waits.load(Relaxed);
            s.stream_goal_hits += c.stream_goal_hits.load(Relaxed);
            s.forced_commits += c.forced_commits.load(Relaxed);
            s.no_space += c.no_space.load(Relaxed);
            s.bitmaps_loaded += c.bitmaps_loaded.load(Relaxed);
            s.prefetch_hits += c.prefetch_hits.load(Relaxed);
            s.load_errors += c.load_errors.load(Relaxed);
        }
        s
    }

    /// `(allocated, reserved)` summed over the shards (see [`HeldCounters`]); exact at
    /// quiescence.
    pub fn held(&self) -> (u64, u64) {
        let (held, reserved) = self.shards.iter().fold((0u64, 0u64), |(h, r), s| {
            let (c, d) = (&s.counters, &s.held);
            let h = h
                .wrapping_add(d.adjusted.load(Relaxed))
                .wrapping_add(c.alloc_blocks.load(Relaxed))
                .wrapping_sub(c.free_blocks.load(Relaxed))
                .wrapping_sub(d.released.load(Relaxed));
            (h, r.wrapping_add(d.reserved.load(Relaxed)))
        });
        (held.wrapping_sub(reserved), reserved)
    }

    /// All shards' allocation latencies merged.
    pub fn latency_histogram(&self) -> Histogram<u64> {
        let mut all = new_histogram();
        for shard in self.shards.iter() {
            if let Some(h) = shard.latency.lock().as_ref() {
                all.add(h).expect("same bounds");
            }
        }
        all
    }

    /// Zeroes every counter and histogram (between lab phases; not atomic as a whole).
    pub fn reset(&self) {
        for shard in self.shards.iter() {
            let c = &shard.counters;
            // The accounting keeps what these two say (see `HeldCounters`).
            let allocated = c.alloc_blocks.swap(0, Relaxed);
            let freed = c.free_blocks.swap(0, Relaxed);
            shard.add(&shard.held.adjusted, allocated.wrapping_sub(freed));
            for a in [
                &c.allocs,
                &c.frees,
                &c.groups_considered,
                &c.groups_scanned,
                &c.trylock_skips,
                &c.lock_waits,
                &c.stream_goal_hits,
                &c.forced_commits,
                &c.no_space,
                &c.bitmaps_loaded,
                &c.prefetch_hits,
                &c.load_errors,
            ] {
                a.store(0, Relaxed);
            }
            c.pass_hits.iter().for_each(|a| a.store(0, Relaxed));
            if let Some(latency) = shard.latency.lock().as_mut() {
                latency.reset();
                debug_assert_eq!(latency.len(), 0, "a latency left after the reset");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shard's histogram is made at its first latency, in that shard only; the merged
    /// histogram holds what was recorded, and a reset empties it.
    #[test]
    fn a_shard_makes_its_histogram_at_its_first_latency() {
        let stats = Stats::new();
        let made = |s: &Stats| {
            s.shards
                .iter()
                .filter(|x| x.latency.lock().is_some())
                .count()
        };
        assert_eq!(made(&stats), 0, "none up front");
        assert_eq!(stats.latency_histogram().len(), 0);
        stats.shard().record_latency_ns(1_500);
        stats.shard().record_latency_ns(0); // clamped to 1 ns
        assert_eq!(made(&stats), 1, "this thread's shard only");
        let h = stats.latency_histogram();
        assert_eq!((h.len(), h.min()), (2, 1));
        stats.reset();
        assert_eq!(stats.latency_histogram().len(), 0);
    }

    /// A lock wait counts in the shard and in the waiting thread's own count, and only
    /// there (another thread's count does not move).
    #[test]
    fn lock_waits_count_per_shard_and_per_thread() {
        let stats = Stats::new();
        let before = thread_lock_waits();
        stats.shard().lock_waited(3);
        assert_eq!(thread_lock_waits() - before, 3);
        assert_eq!(stats.snapshot().lock_waits, 3);
        let other = std::thread::spawn(thread_lock_waits).join().unwrap();
        assert_eq!(other, 0);
    }
}
