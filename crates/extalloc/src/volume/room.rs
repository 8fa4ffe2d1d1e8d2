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
//! it whole), `tree_dirty_limit` (files the room covers, changed or admitted, as last
//! computed), `in_flight` (calls admitted and not yet done, each held by an [`Admitted`]),
//! `cached_files` (files holding cached data's reservations, `delalloc.rs`).
//!
//! Invariant: data (cached writes' reservations, `fallocate`) takes a block only while the
//! allocatable blocks cover the reservations, the fixed part and the tree's need for the
//! changed files plus the calls in flight plus the files holding cached data's
//! reservations (each changed when written back: without them the tree's growth at
//! writeback took blocks promised to cached data, and an `fsync` failed); an operation that would change a file is
//! admitted first ([`Volume::keep_tree_room`]: it counts its calls in `in_flight` until
//! it is done, then checks that the room covers the changed files and every call
//! admitted, its own included), and checkpoints first if not. The counting is exact,
//! whatever the number of threads: an admission counts itself before it reads the room,
//! and a reservation reads the count under the lock it reserves under, so of a call and
//! a reservation racing, one sees the other (`reserve_margin`). So a checkpoint's blocks
//! are there; when even that leaves too little (the room taken by direct writes, which
//! check only cached data's reservations), the call goes on after the checkpoint with the
//! changed files at zero. A call whose change is logged and which is not done yet is
//! counted twice (changed and in flight): the room errs on the large side.
//!
//! Locks: none of its own; reads `dirty` (a leaf), under `delalloc` in a reservation
//! (`delalloc` then `dirty`), and the atomics.

use super::area;
use super::node::{node_blocks, node_bytes, CHILD_BYTES, HEADER_BYTES};
use super::state::{Volume, CHUNK_BUDGET};
use super::tree::Tree;
use crate::error::Result;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};

/// Calls admitted by [`Volume::keep_tree_room`] and counted in the room until dropped,
/// when the call is done (its changes logged, or none made). Holds none for a call inside
/// an atomic group: the group's admission counts it.
#[must_use = "the calls are counted in the room only while this lives"]
pub(super) struct Admitted<'a> {
    vol: &'a Volume,
    calls: u64,
}

impl<'a> Admitted<'a> {
    /// Counts `calls` in flight on `vol` (before the caller reads the room).
    fn new(vol: &'a Volume, calls: u64) -> Self {
        let was = vol.in_flight.fetch_add(calls, SeqCst);
        debug_assert!(
            was.checked_add(calls).is_some(),
            "calls in flight overflowed"
        );
        Admitted { vol, calls }
    }

    /// Nothing counted: a call inside an atomic group.
    pub(super) fn inside_group(vol: &'a Volume) -> Self {
        Admitted { vol, calls: 0 }
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        if self.calls > 0 {
            let was = self.vol.in_flight.fetch_sub(self.calls, SeqCst);
            // Paired with `Admitted::new`: only admissions are released.
            assert!(
                was >= self.calls,
                "released {} of {was} in flight",
                self.calls
            );
        }
    }
}

/// `tree_fixed` of a volume whose first checkpoint builds the tree from every file (opened
/// from table areas, or salvaged): the need is then the whole table.
pub(super) const NO_TREE: u64 = u64::MAX;

/// `tree_fixed` of `tree` (`None`: [`NO_TREE`]).
pub(super) fn fixed_need(tree: Option<&Tree>) -> u64 {
    tree.map_or(NO_TREE, |t| t.internal_nodes() + u64::from(t.height()) + 1)
}

impl Volume {
    /// The store's free, pending and superuser's blocks without a locality lock
    /// (`Store::free_pending_root_blocks`).
    pub(crate) fn free_pending_root_blocks(&self) -> (u64, u64, u64) {
        self.store.free_pending_root_blocks()
    }

    /// Blocks kept out of data's reach for the volume's own metadata: the fixed part plus
    /// the tree's need for the files changed since the durable tree (see the module
    /// documentation). So data gets `ENOSPC` first and a commit, checkpoint, unlink or
    /// repair finds its blocks.
    ///
    /// On blocks under 4 KiB the tree's share is held as runs of a node's length
    /// (`pool.rs`), which are no longer allocatable: the margin counts only what they do
    /// not cover.
    ///
    /// The calls in flight are read before the changed files: a call that is done by then
    /// logged its change first, so each is counted once at least. Files holding cached
    /// data's reservations count as changed files: writeback changes each
    /// (`delalloc.rs`). A file both changed and cached is counted twice: the room errs on
    /// the large side.
    pub fn reserve_margin(&self) -> u64 {
        let flying = self.in_flight.load(SeqCst);
        let cached = self.cached_files.load(SeqCst);
        let changed = self.dirty.lock().len() as u64;
        let tree = self
            .tree_need(changed + flying + cached)
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
    pub fn fixed_margin(&self) -> u64 {
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
        if held == 0 || self.tree_need(held) <= room {
            return;
        }
        let limit = self.files_covered(room);
        // The limit kept is one the room covers (0: no call is covered, every call checks
        // again).
        debug_assert!(self.tree_need(limit) <= room);
        self.tree_dirty_limit.fetch_min(limit, Relaxed);
    }

    /// True if `e` is no space that a checkpoint would remedy: the room kept for the
    /// tree's changed files is above what it keeps with none changed.
    pub(super) fn checkpoint_frees_room(&self, e: &crate::Error) -> bool {
        let flying = self.in_flight.load(SeqCst) + self.cached_files.load(SeqCst);
        let changed = self.dirty.lock().len() as u64;
        matches!(e, crate::Error::NoSpace { .. })
            && changed > 0
            && self.tree_need(changed + flying) > self.tree_need(flying)
    }

    /// The most files (changed, or admitted to change) whose checkpoint fits `room`
    /// blocks (every count's need grows with the files, since an entry may be new: there
    /// is always a largest; none changed need nothing).
    fn files_covered(&self, room: u64) -> u64 {
        // The need grows with the files: the largest count that fits, by bisection.
        let fits = |n: u64| self.tree_need(n) <= room;
        debug_assert!(fits(0), "no files need no room");
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

    /// Admits calls that may change files, with room for `bytes` of journal (a chunk's
    /// [`CHUNK_BUDGET`] each, at most a file a call): counts them in flight until the
    /// returned [`Admitted`] drops, then checkpoints first when the room kept for the tree
    /// no longer covers the changed files and every call in flight. Costs two atomics, a
    /// lock and a compare while the room is known to cover them; else the free count (a
    /// sum over the groups). On a failed checkpoint the calls are not admitted (nothing
    /// stays counted).
    pub(super) fn keep_tree_room(&self, bytes: u64) -> Result<Admitted<'_>> {
        // A checkpoint from inside an atomic group would split it: a group makes its room
        // when it opens (`atomic.rs`).
        debug_assert!(
            !self.inside_group(),
            "the tree's room checked inside a group"
        );
        let calls = bytes.div_ceil(CHUNK_BUDGET).max(1);
        // Counted before the room is read (see the module documentation).
        let admitted = Admitted::new(self, calls);
        let flying = self.in_flight.load(SeqCst);
        debug_assert!(flying >= calls, "this call's own admission is in flight");
        let changed = self.dirty.lock().len() as u64;
        if changed + flying <= self.tree_dirty_limit.load(Relaxed) {
            return Ok(admitted);
        }
        let limit = self.files_covered(self.tree_room());
        self.tree_dirty_limit.store(limit, Relaxed);
        if changed == 0 || changed + flying <= limit {
            return Ok(admitted);
        }
        // Before the tree's room runs out: write what changed (the checkpoint's old nodes
        // come back at the next commit). One that finds no room leaves every change for
        // the next (`checkpoint_locked`), and the call goes on as it would without it: the
        // call itself needs no block of the tree.
        match self.checkpoint() {
            Err(e) if e.kind() != crate::ErrorKind::NoSpace => Err(e),
            _ => Ok(admitted),
        }
    }
}

impl Volume {
    /// Commits first (as [`Volume::sync`]) when the changes already open might, with a
    /// sixteenth of the largest transaction more, take the open record past the bound at
    /// which the volume commits on its own, so that the next changes up to that much go
    /// into one commit together. For a caller whose next changes must not be split by a
    /// commit the volume makes by itself: a file system's truncate to zero and the
    /// rewrite's write-back after it (`auto_da_alloc`), so that a crash leaves the old
    /// content or the new one. Changes nothing when there is room; on failure nothing is
    /// lost (the changes stay for the next commit).
    pub fn commit_unless_room(&self) -> Result<()> {
        if self.inside_group() {
            return Ok(()); // A group made its room when it opened; a commit would split it.
        }
        let bound = self.store.max_transaction_bytes() / 8;
        let open = self.store.open_transaction_bytes_bound() + self.log.lock().len() as u64;
        if open + bound / 2 > bound {
            self.sync()?;
            // Paired with the latch: a store that failed a write or flush commits nothing.
            debug_assert!(self.store.io_failure().is_none(), "a commit after a latch");
        }
        Ok(())
    }
}
