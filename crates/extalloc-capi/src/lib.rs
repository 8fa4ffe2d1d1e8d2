//! The C API of extalloc: a volume of blobs on a file ([`volume`], blobs by key in
//! [`keyed`]) and the allocator in
//! memory ([`allocator`]), behind opaque handles, with error codes ([`error`]). The header
//! `include/extalloc.h` is generated from these files by cbindgen (`cbindgen.toml`;
//! `tests/header.rs` fails when the committed one is stale); `docs/c.md` is the guide.
//!
//! Data structures: an opaque handle per object, a `Box` the caller owns between its
//! `_create`/`_open`/`_new` and its `_close`/`_destroy`: [`volume::extalloc_volume`] (a
//! `Volume`), [`allocator::extalloc_allocator`] (an `Allocator`); plain `#[repr(C)]`
//! structs for what a call fills in ([`volume::extalloc_statfs`],
//! [`allocator::extalloc_extent`]); one thread-local last error per thread.
//!
//! Invariant: every entry point runs inside `error::guard`: it checks its pointers before
//! it reads them, returns an [`error::extalloc_code`], sets the calling thread's last error
//! (cleared on success), and never lets a panic cross into C (caught, turned into
//! `EXTALLOC_PANIC`). Out-parameters are written only on success, except the `NULL` a
//! failed constructor stores, what a call reports with `EXTALLOC_BUFFER_TOO_SMALL` (the size
//! or count it needs, the ids that fit) and the part of a blob a failed get read.
//!
//! Lock order: this crate takes no lock of its own beyond the thread-local last error (never
//! held across a call into the library); each handle's calls take the library's locks, in
//! the library's order. A handle is `Send + Sync`: any thread may call on it, concurrently,
//! except its `_close`/`_destroy`, which must follow every other call on it.
#![warn(missing_docs)]
// The C names: `extalloc_volume`, `EXTALLOC_OK`, as C programs spell them.
#![allow(non_camel_case_types)]

pub mod allocator;
pub mod error;
pub mod keyed;
pub mod volume;

pub use allocator::{extalloc_allocator, extalloc_extent, EXTALLOC_NO_GOAL};
pub use error::extalloc_code;
pub use volume::{extalloc_statfs, extalloc_volume, EXTALLOC_MAX_ATTR_BYTES};
