//! Per-group state and the group indexes.

mod bitmap;
mod group;
mod index;

pub use bitmap::{GroupBitmap, ORDERS, ORDER_MAX};
pub use group::{Group, GroupState, PendingFree, Slot};
pub use index::{AtomicBitset, OrderIndex};
