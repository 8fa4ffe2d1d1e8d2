//! The room kept for metadata: the blocks data may not take, so that a commit, a
//! checkpoint, an unlink or a repair always finds its blocks (issue 50: "room for metadata
//! never runs out first").
//!
//! Two parts. A fixed part, 1/256 of the device (at least 64 blocks, at most 4,096), for
//! the map segments and the directory records a file system appends (written directly).
//! And the tree's part: what the next checkpoint may allocate for the file tree. A
//! checkpoint writes the leaves its changed files lie in copy-on-write (the new nodes
//! before the old are freed), so its need follows the files changed since the durable
//! tree, not the tree's size: [`Volume::tree_need`] bounds it for `n` changed files, and
//! never asks more than the whole tree (the bound before it, which stopped 4 KiB-file
//! volumes at 95 %: the tree was 5 % of the device).
//!
//! The bound, for `n` changed files (each entry at most a node's payload, `Tree::put`),
//! is the lesser of two. The whole tree written again, with two leaves for each changed
//! entry (which may be new) and the internal nodes they add. Or what the changed files'
//! leaves become: a changed leaf holds at most a node's payload plus what its changed entries added, and
//! a split cuts `T` bytes into at most `2T/payload + 1` leaves (each but the last holds
//! half a node, or ends where the next entry would not fit), so `t <= n` changed leaves
//! become at most `3t + 2n <= 5n`; a merge joins two into one. The internal nodes: every
//! one the tree has (a checkpoint may rewrite each path), plus what the new leaves add
//! (`2 * leaves / fan-out`, a node more a level). The retired chain: an index block per
//! its pieces. `Volume::build_tree` asserts what it wrote against this bound.
//!
//! Data structures: `Volume::table_blocks` (the durable tree's blocks), `tree_fixed` (its
//! internal nodes plus its height plus one; `NO_TREE` while the first checkpoint must build
//! it whole), `tree_dirty_limit` (changed files the room covers, as last computed).
//!
//! Invariant: data (cached writes' reservations, `fallocate`) takes a block only while the
//! allocatable blocks cover the reservations, the fixed part and the tree's need for the
//! changed files plus [`IN_FLIGHT_FILES`]; an operation that would change a file checks,
//! before its call, that the room still covers the changed files with its calls and
//! [`IN_FLIGHT_FILES`] (calls of other threads admitted beside it, each between its own
//! check and its change: one a serving thread or writeback context), and checkpoints
//! first if not. So a checkpoint's blocks are there; when even that leaves too little
//! (the room taken by direct writes, which check only cached data's reservations), the
//! call goes on after the checkpoint with the changed files at zero. The slack is not
//! counted exactly: more than 8 threads changing files at once on a nearly full device
//! could pass their checks together. The bound's worst case (5 nodes a file, for entries
//! of a whole node) is over twice what entries of under a quarter node take (a file
//! system's are about 100 bytes), which covers them.
//!
//! Locks: none of its own; reads `dirty` and `delalloc` (leaves) one at a time, and the
//! atomics.

use super::area;
use super::node::{node_blocks, node_bytes, CHILD_BYTES, HEADER_BYTES};
use super::state::{Volume, CHUNK_BUDGET};
use super::tree::Tree;
use crate::error::Result;
use std::sync::atomic::Ordering::Relaxed;

/// Calls of other threads that may change a file between an operation's check of the
/// room and its change (see the module documentation).
pub(super) const IN_FLIGHT_FILES: u64 = 8;

/// `tree_fixed` of a volume whose first checkpoint builds the tree from every file (opened
/// from table areas, or salvaged): the need is then the whole table.
pub(super) const NO_TREE: u64 = u64::MAX;

/// `tree_fixed` of `tree` (`None`: [`NO_TREE`]).
pub(super) fn fixed_need(tree: Option<&Tree>) -> u64 {
    tree.map_or(NO_TREE, |t| t.internal_nodes() + u64::from(t.height()) + 1)
}

impl Volume {
    /// Blocks kept out of data's reach for the volume's own metadata: the fixed part plus
    /// the tree's need for the files changed since the durable tree (see the module
    /// documentation). So data gets `ENOSPC` first and a commit, checkpoint, unlink or
    /// repair finds its blocks.
    ///
    /// On blocks under 4 KiB the tree's share is held as runs of a node's length
    /// (`pool.rs`), which are no longer allocatable: the margin counts only what they do
    /// not cover.
    pub fn reserve_margin(&self) -> u64 {
        let changed = self.dirty.lock().len() as u64;
        let tree = self
            .tree_need(changed + IN_FLIGHT_FILES)
            .saturating_sub(self.store.metadata_reserved_blocks());
        self.fixed_margin() + tree
    }

    /// Blocks the durable file tree takes (for tests outside the volume).
    #[cfg(test)]
    pub(crate) fn tree_blocks(&self) -> u64 {
        self.table_blocks.load(Relaxed)
    }

    /// The fixed part of the room: 1/256 of the device, at least 64 and at most 4,096
    /// blocks (map segments and directory records; 2 % of the device before the table was
    /// written in pieces: `ENOSPC` came at 98 %).
    pub(super) fn fixed_margin(&self) -> u64 {
        (self.store.geometry().blocks_count / 256).clamp(64, 4096)
    }

    /// Blocks the next checkpoint may allocate for the file tree when `files` files
    /// changed since the durable tree: the bound of the module documentation.
    pub(super) fn tree_need(&self, files: u64) -> u64 {
        self.tree_need_nodes(files)
            .saturating_mul(node_blocks(self.block_size))
    }

    /// [`Volume::tree_need`] in nodes (the chain's index blocks counted as nodes): the
    /// lesser of two bounds, each enough alone. What the changed files' leaves become,
    /// with every internal node; or the whole tree written again with what the changed
    /// files add (a first build from every file has only this one).
    pub(super) fn tree_need_nodes(&self, files: u64) -> u64 {
        if files == 0 {
            return 0;
        }
        let bs = self.block_size;
        let fanout = ((node_bytes(bs) - HEADER_BYTES) / CHILD_BYTES) as u64;
        // Internal nodes a tree gains over `leaves` new leaves, a node more a level.
        let gained = |leaves: u64| {
            leaves.saturating_mul(2).div_ceil(fanout) + u64::from(super::node::MAX_LEVEL)
        };
        let with_chain = |nodes: u64| nodes.saturating_add(area::index_blocks_for(nodes, bs));
        // The whole tree again: each changed entry adds at most a node's payload, so two
        // leaves.
        let whole = self.table_blocks.load(Relaxed).div_ceil(node_blocks(bs));
        let grown = files.saturating_mul(2);
        let rewrite = with_chain(whole.saturating_add(grown).saturating_add(gained(grown)));
        let fixed = self.tree_fixed.load(Relaxed);
        if fixed == NO_TREE {
            return rewrite;
        }
        let leaves = files.saturating_mul(5);
        let internal = fixed.saturating_add(leaves.saturating_mul(2).div_ceil(fanout));
        rewrite.min(with_chain(leaves.saturating_add(internal)))
    }

    /// Sets the tree's fixed need from the tree in force (`None`: the first checkpoint
    /// builds one whole).
    pub(super) fn set_tree_fixed(&self, tree: Option<&Tree>) {
        // Set by the checkpoint that put the tree in force.
        debug_assert!(
            self.gate.is_locked_exclusive(),
            "the tree changed, the gate open"
        );
        self.tree_fixed.store(fixed_need(tree), Relaxed);
        // The room is computed again at the next check.
        self.tree_dirty_limit.store(0, Relaxed);
    }

    /// Blocks the tree may take now: the allocatable ones and the node reserve's runs,
    /// less cached data's reservations and the fixed part.
    fn tree_room(&self) -> u64 {
        let reserved = *self.delalloc.lock();
        self.tree_room_of(self.store.allocatable_blocks(), reserved)
    }

    /// [`Volume::tree_room`] with `have` allocatable blocks and `reserved` for cached data.
    fn tree_room_of(&self, have: u64, reserved: u64) -> u64 {
        let have = have + self.store.metadata_reserved_blocks();
        have.saturating_sub(reserved + self.fixed_margin())
    }

    /// After cached data reserved blocks (`have` allocatable, `reserved` for cached data
    /// now): the changed files the room covers, computed again (it only shrank) when the
    /// limit held no longer fits it. A look at the need for the limit held otherwise (a
    /// write pays it): the bisection runs only as the device fills.
    pub(super) fn note_tree_room(&self, have: u64, reserved: u64) {
        let room = self.tree_room_of(have, reserved);
        let held = self.tree_dirty_limit.load(Relaxed);
        // 0: computed at the next check anyway.
        if held == 0 || self.tree_need(held.saturating_add(IN_FLIGHT_FILES)) <= room {
            return;
        }
        let limit = self.files_covered(room);
        // The limit kept is one the room covers (0: not even the calls in flight fit, and
        // every call checks again).
        debug_assert!(limit == 0 || self.tree_need(limit + IN_FLIGHT_FILES) <= room);
        self.tree_dirty_limit.fetch_min(limit, Relaxed);
    }

    /// True if `e` is no space that a checkpoint would remedy: the room kept for the
    /// tree's changed files is above what it keeps with none changed.
    pub(super) fn checkpoint_frees_room(&self, e: &crate::Error) -> bool {
        let changed = self.dirty.lock().len() as u64;
        matches!(e, crate::Error::NoSpace { .. })
            && changed > 0
            && self.tree_need(changed + IN_FLIGHT_FILES) > self.tree_need(IN_FLIGHT_FILES)
    }

    /// The most changed files (with [`IN_FLIGHT_FILES`] beside them) whose checkpoint
    /// fits `room` blocks (every count's need grows with the files changed, since an entry
    /// may be new: there is always a largest).
    fn files_covered(&self, room: u64) -> u64 {
        // The need grows with the files: the largest count that fits, by bisection.
        let fits = |n: u64| self.tree_need(n + IN_FLIGHT_FILES) <= room;
        if !fits(0) {
            return 0;
        }
        let (mut lo, mut hi) = (0u64, u64::MAX / 16);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            match fits(mid) {
                true => lo = mid,
                false => hi = mid - 1,
            }
        }
        debug_assert!(fits(lo) && !fits(lo + 1), "the largest count that fits");
        lo
    }

    /// Before calls that may change files, with room for `bytes` of journal (a chunk's
    /// [`CHUNK_BUDGET`] each, at most a file a call): checkpoints first when the room
    /// kept for the tree no longer covers the changed files, these calls and
    /// [`IN_FLIGHT_FILES`]. Costs a lock and a compare while the room is known to cover
    /// them; else the free count (a sum over the groups).
    pub(super) fn keep_tree_room(&self, bytes: u64) -> Result<()> {
        // A checkpoint from inside an atomic group would split it: a group makes its room
        // when it opens (`atomic.rs`).
        debug_assert!(
            !self.inside_group(),
            "the tree's room checked inside a group"
        );
        let calls = bytes.div_ceil(CHUNK_BUDGET).max(1);
        let changed = self.dirty.lock().len() as u64;
        if changed + calls <= self.tree_dirty_limit.load(Relaxed) {
            return Ok(());
        }
        let limit = self.files_covered(self.tree_room());
        self.tree_dirty_limit.store(limit, Relaxed);
        if changed == 0 || changed + calls <= limit {
            return Ok(());
        }
        // Before the tree's room runs out: write what changed (the checkpoint's old nodes
        // come back at the next commit). One that finds no room leaves every change for
        // the next (`checkpoint_locked`), and the call goes on as it would without it: the
        // call itself needs no block of the tree.
        match self.checkpoint() {
            Err(e) if e.kind() == crate::ErrorKind::NoSpace => Ok(()),
            other => other,
        }
    }
}
