//! The allocator: requests, stream goals, criteria passes (`allocator.rs`), `check()`
//! (`check.rs`), deferred frees, files (`file.rs`) with their preallocations (`pa.rs`) and
//! locality chunks (`locality.rs`), lazy loading, policies, stats.

mod allocator;
mod check;
mod class;
mod file;
mod free;
mod lazy;
mod locality;
mod pa;
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
