//! The node reserve: on blocks under 4 KiB a tree node is a run of several blocks
//! (`node.rs`), and data written in single blocks can leave no such run anywhere while half
//! the device is free. The volume keeps runs of a node's length reserved in the store
//! (`store/reserve.rs`) so that a commit, a checkpoint, an unlink or a mount's repairs
//! always find their nodes: [`super::treeio::VolIo`] asks the allocator first and takes a
//! reserved run only when no free run is left.
//!
//! Data structures: none of its own (the runs are the store's `meta_reserved` list; the
//! target follows the tree's size, `table_blocks`).
//!
//! Invariant: with one-block nodes (blocks of 4 KiB or more) nothing is reserved. The
//! reserve counts toward the room kept for metadata (`Volume::reserve_margin`), so data
//! loses nothing to it: the tree's share of the margin is held as whole runs instead of a
//! count of blocks.
//!
//! Locks: none of its own; the store's list is a leaf. Filled at open (before anything
//! commits), after each checkpoint, and after a commit that released frees while the
//! reserve was short, under the gate or before the volume is shared.

use super::node::node_blocks;
use super::state::{Volume, TABLE_OWNER};
use super::treeio::NODES_PER_ASK;
use crate::alloc::AllocRequest;
use std::sync::atomic::Ordering::Relaxed;

impl Volume {
    /// Runs of one node the reserve should hold: twice the tree's nodes, plus one ask's
    /// worth; none when a node is one block. A checkpoint may rewrite every leaf (the new
    /// nodes written before the old are freed), and the tree grows with the files: once
    /// data has split every free run the reserve can no longer grow, so it keeps room for
    /// a tree twice today's (measured: a reserve of the tree's size alone ran short when a
    /// 1 KiB-block volume filled, and the mount after a crash could not commit).
    pub(super) fn node_reserve_target(&self) -> u64 {
        let nb = node_blocks(self.block_size);
        if nb == 1 {
            return 0;
        }
        2 * self.table_blocks.load(Relaxed).div_ceil(nb) + NODES_PER_ASK
    }

    /// Tops the node reserve up to its target, an ask of up to [`NODES_PER_ASK`] runs at a
    /// time near the device's end, as the tree's nodes are placed; stops quietly when no run
    /// of a node's length is left (what was reserved stays). Returns the runs held after.
    pub(super) fn fill_node_reserve(&self) -> u64 {
        let nb = node_blocks(self.block_size);
        let target = self.node_reserve_target();
        let mut held = self.store.metadata_reserved_blocks() / nb;
        while held < target {
            let g = self.store.geometry();
            let want = (target - held).min(NODES_PER_ASK);
            let req = AllocRequest::new(TABLE_OWNER, want * nb)
                .min_len(nb)
                .goal(g.group_start(g.groups_count() - 1));
            match self.store.reserve_metadata_runs(&req) {
                Ok(n) => {
                    debug_assert!(n >= 1 && n <= want, "{n} runs for an ask of {want}");
                    held += n;
                }
                // No run left (or a group unreadable): the reserve holds what it has.
                Err(_) => break,
            }
        }
        debug_assert_eq!(held, self.store.metadata_reserved_blocks() / nb);
        let releases = self.store.allocator().releases();
        let short_at = if held < target { releases } else { u64::MAX };
        self.node_reserve_short_at.store(short_at, Relaxed);
        held
    }

    /// After a commit: tops the reserve up if it is short of its target and frees were
    /// released since it last fell short (the old nodes a checkpoint freed come back as
    /// whole runs: taken again before data can split them). Costs a load and a compare
    /// otherwise.
    pub(super) fn top_up_node_reserve(&self) {
        let nb = node_blocks(self.block_size);
        if nb == 1 {
            return;
        }
        let short_at = self.node_reserve_short_at.load(Relaxed);
        let full = self.store.metadata_reserved_blocks() / nb >= self.node_reserve_target();
        if full || short_at == self.store.allocator().releases() {
            return;
        }
        self.fill_node_reserve();
    }
}
