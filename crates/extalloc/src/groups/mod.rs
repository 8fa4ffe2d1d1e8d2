//! Per-group state and the group indexes.
//!
//! # Data structures
//!
//! - `words.rs`: bit helpers over `u64` words.
//! - `buddy.rs`: a group's buddy summary (which aligned chunks of each order are free).
//! - `bitmap.rs`: a group's block bitmap, which keeps its buddy summary in step.
//! - `group.rs`: one group: bitmap and pending frees under a lock, lock-free mirrors.
//! - `bitset.rs`: the lock-free hierarchical bitset the ordered indexes are made of.
//! - `cursor.rs`: a walk's cursor over a few such sets, each set's next member kept.
//! - `index.rs`: sets of groups by order.
//! - `table.rs`: every group of a device, each made on first touch from packed figures.
//!
//! # Invariant
//!
//! Each file states its own; across them, a group's mirrors and index positions follow its
//! bitmap's figures (the allocator core, `crate::alloc`, publishes them under the group lock).
//!
//! # Lock order
//!
//! group lock -> list-index locks (a list lock, then the link locks of its entries). Nothing
//! here takes the allocator's global lock. This layer imports nothing from `crate::alloc` or
//! anything above it.

mod bitmap;
mod bitset;
mod buddy;
mod cursor;
mod group;
mod index;
mod table;
mod words;

pub use bitmap::GroupBitmap;
pub use buddy::{ORDERS, ORDER_MAX};
pub use cursor::{SetsCursor, Skip};
pub use group::{Group, GroupState, PendingFree, Slot};
pub use index::{AtomicBitset, OrderIndex};
pub use table::{Figures, GroupTable, TableBuilder, CHUNK};
