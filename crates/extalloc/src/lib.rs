//! extalloc: a scalable, fragmentation-resistant extent allocator for storage in user space.
//!
//! Which layer do I want?
//!
//! | you have | use |
//! | --- | --- |
//! | your own on-disk format, blocks in memory | [`Allocator`] |
//! | files whose blocks should stay contiguous | [`Files`] over an [`Allocator`] |
//! | a device, your own metadata in each commit | [`store::Store`] |
//! | a device, files by id (a blob store) | [`volume::Volume`] ([`volume::Volume::mkfs_file`]) |
//! | many small writes to a volume | [`writeback::Buffered`] |
//!
//! Each has a runnable program in the crate's `examples/` (`vm_image`, `store_payloads`,
//! `blobstore`).
//!
//! One [`Allocator`] serves one device. Threads call [`Allocator::allocate`] and
//! [`Allocator::free`] concurrently; freed blocks become reusable at [`Allocator::commit`].
//! Every call returns a [`Result`]; an `allocate` or `free` that fails changes nothing (what
//! a failure leaves in each layer: `error.rs`). [`Allocator::check`] recomputes every
//! cached figure and compares, and checks the accounting equation
//! `marked used = allocated + reserved + pending`.
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
//! A file system's data writes go through the file layer, [`Files`], which normalises
//! requests and keeps preallocations (see `docs/preallocation.md`). Blocks a preallocation
//! reserves are not allocated: they are handed to nobody until the file maps them.
//!
//! ```
//! use extalloc::{Allocator, DataRequest, Error, Files, Geometry, Lifetime, Policy};
//! let core = Allocator::new(Geometry::new(4096, 32768, 1 << 20)?, Policy::parse("extalloc")?)?;
//! let alloc = Files::new(core);
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
//! assert_eq!(alloc.reserved_blocks(), unused);
//! assert_eq!(alloc.release_prealloc(&file)?, unused);
//! assert_eq!(alloc.reserved_blocks(), 0);
//! alloc.check()?;
//! # Ok::<(), Error>(())
//! ```
//!
//! Layers (see `docs/architecture.md`), each importing only from those below it:
//! `groups` (bitmap + buddy summary + lock, group indexes) under `alloc` (the core: the
//! allocation and free paths, size classes, policies, stats) under `files` (placement of file
//! data: normalisation, preallocations) under `store` (transactions, checkpoint, recovery,
//! fsck) under `volume` (persistent files: their data on the device, extent maps, the file
//! table, atomic groups, repair) under `writeback` (buffered writes: a dirty cache, delayed
//! allocation, writeback contexts). Beside them, `disk` (devices, the on-disk format, the
//! journal): `store` and `volume` keep their state on it, and it uses `groups` alone.
#![warn(missing_docs)]

pub mod alloc;
pub mod disk;
mod error;
pub mod files;
mod geometry;
pub mod groups;
/// The sequence fuzzers of the volume and the store (the `testing` feature: the project's
/// tests and fuzz targets; not in a default build).
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod sequence;
pub mod store;
mod sync;
pub mod volume;
pub mod writeback;

pub use alloc::{
    AllocRequest, Allocator, FreeSpace, KeyGroup, Lifetime, Pass, Policy, SizeClass, StatsSnapshot,
    StreamStart, PRESETS,
};
pub use error::{Corrupted, Error, ErrorKind, IoSource, Result};
pub use files::{DataRequest, FileAlloc, Files};
pub use geometry::{parse_size, Extent, Geometry, DEVICE_BLOCKS_MAX, GROUP_BLOCKS_DEFAULT};
