//! What the device has room for, as the cache's callers see it: `statfs` with the blocks
//! cached data has reserved and the room kept for metadata taken off
//! ([`Buffered::statfs`]), the frees since the last commit counted in
//! ([`Buffered::free_and_available_with_pending`]), and the cheap question an open asks
//! before each create ([`Buffered::available_at_least`]).
//!
//! Data structures: none of their own (the volume's figures, `options::free_and_available`).
//! Invariant: the available figure never counts blocks cached data reserved, the room
//! kept, or the superuser's share; the lock-free bound is never above it. Locks: those
//! the volume's figures take (`delalloc`, `dirty`, the allocator's), one at a time.

use super::{options, Buffered};
use crate::store::Statfs;

impl Buffered {
    /// The volume's `statfs`; blocks reserved for cached data count as used, neither free
    /// nor available (ext4's `statfs` takes its delayed-allocation blocks off both): a
    /// `df` taken before writeback shows the data written, and `ENOSPC` comes when it says
    /// the device is full, not at half. The room kept for metadata is not available
    /// either ([`Volume::reserve_margin`](crate::volume::Volume::reserve_margin)).
    pub fn statfs(&self) -> Statfs {
        let mut s = self.shared.vol.statfs();
        let cached = self.shared.vol.delalloc_reserved_blocks();
        let kept = self.shared.vol.reserve_margin();
        s.available_blocks = s.available_blocks.saturating_sub(cached + kept);
        s.free_blocks = s.free_blocks.saturating_sub(cached);
        s
    }

    /// [`Buffered::statfs`]'s free and available blocks with the blocks freed since the
    /// last commit counted in, as `df` shows them between a free and its commit (the
    /// reservations and the room kept come off the sum: `options::free_and_available`).
    pub fn free_and_available_with_pending(&self) -> (u64, u64) {
        let v = &self.shared.vol;
        options::free_and_available(
            &v.statfs(),
            v.delalloc_reserved_blocks(),
            v.reserve_margin(),
        )
    }

    /// Whether [`Buffered::free_and_available_with_pending`]'s available figure is at least
    /// `blocks`. A lower bound that takes no locality lock answers first (the same sum
    /// without the preallocations, which only add to it: `options::free_and_available`);
    /// the whole figure is taken only when that bound falls short. An open for writing asks
    /// it (the mount's headroom), so a create does not sum every locality's claims.
    pub fn available_at_least(&self, blocks: u64) -> bool {
        let v = &self.shared.vol;
        let (free, pending, root) = v.free_pending_root_blocks();
        let bound = (free + pending)
            .saturating_sub(root + v.delalloc_reserved_blocks() + v.reserve_margin());
        bound >= blocks || self.free_and_available_with_pending().1 >= blocks
    }
}
