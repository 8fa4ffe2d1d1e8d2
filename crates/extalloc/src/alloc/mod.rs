//! The allocator core. It knows nothing of files (`crate::files` sits on top), journals or
//! devices beyond the [`BitmapSource`] a store hands it; `docs/architecture.md` maps the
//! layers. One concern a file:
//!
//! - `allocator.rs`: the [`Allocator`] struct, its construction, accessors and accounting.
//! - `request.rs`: [`AllocRequest`], its validation, the context of one allocation.
//! - `allocate.rs`: the allocation path: entry points, retries, the steps in order.
//! - `goal.rs`: stream goals: their slots and start positions, how a request picks and
//!   moves one.
//! - `passes.rs`: the criteria passes ([`Pass`]) and the search inside a group.
//! - `walk.rs`: the order groups are visited in: index walks, right then left, size-class
//!   tiers.
//! - `publish.rs`: a group's mirrors, index positions and tag after a change.
//! - `cache.rs`: locking a group with its bitmap loaded, read-ahead, dropping idle bitmaps,
//!   corrupt and home-dirty groups; `lazy.rs`: the loader and its read-ahead thread.
//! - `deferred.rs`: the free path: pending frees, seal, release, commit; `discard.rs`:
//!   durable frees held used until the caller has discarded (TRIMmed) them.
//! - `check.rs`: `check()` and the accounting equation; `repair.rs`: replacing a group's
//!   bitmap with one rebuilt from who owns each block.
//! - `class.rs` size classes, `policy.rs` policies, `space.rs` free-space figures,
//!   `stats.rs` sharded statistics.
//!
//! # Data structures
//!
//! The [`Allocator`] (`allocator.rs`) over the groups and indexes of `crate::groups`.
//!
//! # Invariant
//!
//! At quiescence, every cached figure (mirrors, index positions, tags, counters) agrees with
//! the group bitmaps, and `blocks marked used = allocated + reserved + pending`
//! (`check.rs`).
//!
//! # Lock order
//!
//! group locks in ascending group order -> the global lock (`md`) -> list-index locks.
//! `commit_lock` is taken before any of them, only by commit/release. The loader's locks
//! (`lazy.rs`) and the stats shards' latency locks are leaves.

mod allocate;
mod allocator;
mod cache;
mod check;
mod class;
mod deferred;
mod discard;
mod goal;
mod lazy;
mod passes;
mod policy;
mod policy_groups;
mod publish;
mod repair;
mod request;
mod space;
mod stats;
mod walk;

pub use allocator::{Allocator, Summaries};
#[cfg(test)]
pub(crate) use class::tag as class_tag;
pub use class::{Lifetime, SizeClass};
pub use lazy::{BitmapSource, GroupSummary};
pub use passes::Pass;
pub use policy::{FreeList, Policy, StreamStart, PRESETS};
pub use policy_groups::KeyGroup;
#[cfg(test)]
pub(crate) use publish::PARALLEL_INDEX_GROUPS;
pub use repair::Replaced;
pub use request::AllocRequest;
pub use space::{FreeBucket, FreeSpace, GroupFree};
pub use stats::{thread_lock_waits, HeldCounters, Stats, StatsSnapshot, SHARDS};
