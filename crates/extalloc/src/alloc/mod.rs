//! The allocator core: requests, stream goals and the criteria passes (`allocator.rs`),
//! `check()` and its accounting equation (`check.rs`), deferred frees (`free.rs`), lazy
//! loading (`lazy.rs`), size classes, policies, free-space figures, stats. It knows nothing
//! of files (`crate::files` sits on top), journals or devices beyond the
//! [`BitmapSource`] a store hands it.

mod allocator;
mod check;
mod class;
mod free;
mod lazy;
mod policy;
mod space;
mod stats;

pub use allocator::{AllocRequest, Allocator};
#[cfg(test)]
pub(crate) use class::tag as class_tag;
pub use class::{Lifetime, SizeClass};
pub use lazy::{BitmapSource, GroupSummary};
pub use policy::{FreeList, Policy, StreamStart, PRESETS};
pub use space::{FreeBucket, FreeSpace, GroupFree};
pub use stats::{HeldCounters, Pass, Stats, StatsSnapshot, SHARDS};
