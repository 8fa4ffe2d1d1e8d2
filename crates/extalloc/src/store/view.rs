//! The read-only view of a store's allocator: figures, stats and checks.
//!
//! Data structure: [`AllocatorView`], a borrowed reference to the store's file layer (and
//! through it the allocator core). Invariant: it offers nothing that changes allocator
//! state (zeroing the stats counters aside), so no change can bypass the journal.
//!
//! Locks: none of the store's; each call takes only the allocator's or the file layer's own.

use crate::alloc::{Allocator, Policy};
use crate::error::Result;
use crate::files::Files;
use crate::geometry::Geometry;

/// A read-only view of a store's allocator (`Store::allocator` hands it out): figures,
/// stats and checks. It offers nothing that changes allocator state, so no change can
/// bypass the journal.
#[derive(Clone, Copy)]
pub struct AllocatorView<'a> {
    files: &'a Files,
}

impl<'a> AllocatorView<'a> {
    pub(super) fn new(files: &'a Files) -> Self {
        AllocatorView { files }
    }

    fn alloc(&self) -> &'a Allocator {
        self.files.allocator()
    }

    /// Group `g`'s runs of blocks marked used (see [`Allocator::used_runs`]).
    pub(crate) fn used_runs(&self, g: u64) -> crate::error::Result<Vec<crate::geometry::Extent>> {
        self.alloc().used_runs(g)
    }

    /// Group `g`'s blocks marked used (see [`Allocator::used_blocks`]).
    pub(crate) fn used_blocks(&self, g: u64) -> crate::error::Result<u64> {
        self.alloc().used_blocks(g)
    }

    /// `Ok` if every block of `extent` is allocated (or in a group held corrupt).
    pub(crate) fn check_held(&self, extent: crate::geometry::Extent) -> crate::error::Result<()> {
        self.alloc().check_held(extent)
    }

    /// The device's geometry.
    pub fn geometry(&self) -> &'a Geometry {
        self.alloc().geometry()
    }

    /// The allocation policy the store was opened with.
    pub fn policy(&self) -> &'a Policy {
        self.alloc().policy()
    }

    /// See [`Allocator::free_blocks`].
    pub fn free_blocks(&self) -> u64 {
        self.alloc().free_blocks()
    }

    /// See [`Allocator::pending_free_blocks`].
    pub fn pending_free_blocks(&self) -> u64 {
        self.alloc().pending_free_blocks()
    }

    /// See [`Files::allocated_blocks`].
    pub fn allocated_blocks(&self) -> u64 {
        self.files.allocated_blocks()
    }

    /// See [`Allocator::releases`].
    pub fn releases(&self) -> u64 {
        self.files.allocator().releases()
    }

    /// See [`Files::reserved_blocks`].
    pub fn reserved_blocks(&self) -> u64 {
        self.files.reserved_blocks()
    }

    /// See [`Allocator::is_free`].
    pub fn is_free(&self, block: u64) -> Result<bool> {
        self.alloc().is_free(block)
    }

    /// See [`Allocator::free_space`] (loads every group).
    pub fn free_space(&self) -> crate::alloc::FreeSpace {
        self.alloc().free_space()
    }

    /// See [`Allocator::stats`].
    pub fn stats(&self) -> crate::alloc::StatsSnapshot {
        self.alloc().stats()
    }

    /// Zeroes the stats counters (between lab phases); no allocator state changes.
    pub fn reset_stats(&self) {
        self.alloc().stats_handle().reset();
    }

    /// All shards' allocation latencies merged.
    pub fn latency_histogram(&self) -> hdrhistogram::Histogram<u64> {
        self.alloc().stats_handle().latency_histogram()
    }

    /// The core's checks and the file layer's ([`Files::check`]). Call at quiescence.
    pub fn check(&self) -> Result<()> {
        self.files.check()
    }

    /// Groups changed since their home copy was written.
    pub fn home_dirty_groups(&self) -> Vec<u64> {
        self.alloc().home_dirty_groups()
    }

    /// True if group `g`'s bitmap is in memory.
    pub fn is_loaded(&self, g: u64) -> bool {
        self.alloc().is_loaded(g)
    }

    /// See [`Allocator::group_bitmap_bytes`]: memory's bitmap, reserved blocks included.
    pub fn group_bitmap_bytes(&self, g: u64, bytes: usize) -> Result<Vec<u8>> {
        self.alloc().group_bitmap_bytes(g, bytes)
    }

    /// See [`Allocator::memory_per_unloaded_group`].
    pub fn memory_per_unloaded_group(&self) -> f64 {
        self.alloc().memory_per_unloaded_group()
    }
}
