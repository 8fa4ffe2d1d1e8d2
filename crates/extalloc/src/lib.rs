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
//! A file system's data writes go through files, which normalise requests and keep
//! preallocations (see `docs/preallocation.md`):
//!
//! ```
//! use extalloc::{Allocator, DataRequest, Error, Geometry, Lifetime, Policy};
//! let alloc = Allocator::new(Geometry::new(4096, 32768, 1 << 20)?, Policy::parse("extalloc")?)?;
//! let file = alloc.create_file(42);
//! // Append 256 KiB: the window grows to a size bucket, the surplus is preallocated.
//! let first = alloc.allocate_data(&file, &DataRequest::new(0, 64).lifetime(Lifetime::Long))?;
//! let next = alloc.allocate_data(&file, &DataRequest::new(64, 64))?;
//! assert_eq!(next.start, first.end(), "the next append comes from the preallocation");
//! // Writing over mapped blocks is refused, and changes nothing.
//! assert!(matches!(
//!     alloc.allocate_data(&file, &DataRequest::new(10, 4)),
//!     Err(Error::LogicalOverlap { .. })
//! ));
//! // Closing the file returns the unused preallocation at once.
//! let unused = file.prealloc_unused_blocks();
//! assert_eq!(alloc.release_prealloc(&file)?, unused);
//! alloc.check()?;
//! # Ok::<(), Error>(())
//! ```
//!
//! Layers (DESIGN.md section 2): `groups` (bitmap + buddy summary + lock, group indexes) under
//! `alloc` (the allocation and free paths, files and preallocation, size classes, policies,
//! stats).

pub mod alloc;
pub mod device;
mod error;
pub mod format;
pub mod fsck;
mod geometry;
pub mod groups;
pub mod journal;
pub mod store;
mod sync;

pub use alloc::{
    AllocRequest, Allocator, DataRequest, FileAlloc, FreeSpace, Lifetime, Pass, Policy, SizeClass,
    StatsSnapshot, StreamStart, PRESETS,
};
pub use error::{Error, IoSource, Result};
pub use geometry::{Extent, Geometry, DEVICE_BLOCKS_MAX, GROUP_BLOCKS_DEFAULT};
