//! extalloc: a scalable, fragmentation-resistant extent allocator for storage in user space.
//!
//! One [`Allocator`] serves one device. Threads call [`Allocator::allocate`] and
//! [`Allocator::free`] concurrently; freed blocks become reusable at [`Allocator::commit`].
//! Every call returns a [`Result`]; a failed call changes nothing. [`Allocator::check`]
//! recomputes every cached figure and compares.
//!
//! ```
//! use extalloc::{AllocRequest, Allocator, Geometry, Policy};
//! let geometry = Geometry::new(4096, 32768, 1 << 20).unwrap();
//! let alloc = Allocator::new(geometry, Policy::default()).unwrap();
//! let extent = alloc.allocate(&AllocRequest::new(7, 16)).unwrap();
//! assert_eq!(extent.len, 16);
//! alloc.free(extent).unwrap();
//! assert_eq!(alloc.commit(), 16);
//! alloc.check().unwrap();
//! ```
//!
//! Layers (DESIGN.md section 2): `groups` (bitmap + buddy summary + lock, group indexes) under
//! `alloc` (the allocation and free paths, policies, stats).

pub mod alloc;
mod error;
mod geometry;
pub mod groups;
mod sync;

pub use alloc::{
    AllocRequest, Allocator, DataRequest, FileAlloc, FreeSpace, Lifetime, Pass, Policy, SizeClass,
    StatsSnapshot, PRESETS,
};
pub use error::{Error, Result};
pub use geometry::{Extent, Geometry, DEVICE_BLOCKS_MAX, GROUP_BLOCKS_DEFAULT};
