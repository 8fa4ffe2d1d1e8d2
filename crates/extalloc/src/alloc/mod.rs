//! The allocator: requests, stream goals, criteria passes, deferred frees, policies, stats.

mod allocator;
mod class;
mod file;
mod free;
mod lazy;
mod policy;
mod space;
mod stats;

pub use allocator::{AllocRequest, Allocator};
pub use class::{Lifetime, SizeClass};
pub use file::{DataRequest, FileAlloc};
pub use lazy::{BitmapSource, GroupSummary};
pub use policy::{FreeList, Policy, StreamStart, PRESETS};
pub use space::{FreeBucket, FreeSpace, GroupFree};
pub use stats::{Pass, Stats, StatsSnapshot, SHARDS};
