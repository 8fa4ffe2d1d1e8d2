//! The volume's checkpoint: the changed maps written to map segments, the changed entries
//! of its file tree written, then the store's checkpoint with a root naming the tree's new
//! root. Its open, the other half of the format's story, is `load.rs`.
//!
//! The file table is a copy-on-write B+tree (`tree.rs`, `treeio.rs`): a checkpoint puts
//! the entries of the files changed since the last one (`Volume::dirty`, and those whose
//! map moved), writes the changed nodes to blocks the allocator hands out one node at a
//! time, and lists the nodes it replaced, with the map segments no file uses any more, in
//! a retired chain the next checkpoint frees (so a crash before the new root is durable
//! finds the old tree whole). A volume opened from a version 2 or 3 root (two table areas
//! written whole), or salvaged, has no tree in memory: its first checkpoint builds one from
//! every file and retires the areas (the upgrade).
//!
//! Data structures: none of their own (`Meta`, `record::Root`, `maps::Segs`, `tree::Tree`).
//! Invariant: the store's root names the durable tree, and the tree (with the map
//! segments it names) holds every change of the records the checkpoint left behind; its
//! nodes, its retired chain and what the chain lists are allocated (owner
//! `TABLE_OWNER`). Locks: runs under the gate, written.

use super::area::Area;
use super::file::VFile;
use super::node::{node_blocks, node_bytes, Stamp};
use super::record::{Change, SideRef};
use super::root::{Root, TreeRoot, HOLDS_MAPS, HOLDS_MARKED, HOLDS_PENDING};
use super::state::{Meta, Volume};
use super::table::{file_body, ById};
use super::tree::Tree;
use super::treeio::VolIo;
use crate::error::Result;
use crate::geometry::Extent;
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::Arc;

impl Volume {
    /// Under the gate (written): commits what is logged, writes the changed maps to new
    /// map segments, the changed entries to the file tree, and checkpoints the store with
    /// a root naming it. On failure every change stays for the next checkpoint.
    pub(super) fn checkpoint_locked(&self) -> Result<()> {
        debug_assert!(
            self.gate.is_locked_exclusive(),
            "a checkpoint, the gate open"
        );
        let unmended = {
            let meta = self.meta.lock();
            let holes = meta.tree.as_ref().is_some_and(|t| t.holes() > 0);
            // Holes and changes set aside wait for the mend (`load.rs`), which takes them.
            assert!(meta.unmended || (!holes && meta.aside.is_empty()));
            meta.unmended
        };
        if unmended {
            // Opened for a repair that has not mended them (`leafrepair.rs`): nothing is
            // written, not even a map segment.
            return Err(super::record::corrupt(
                "the file tree has damage that is not mended yet: run `extalloc fsck \
                 --repair`",
            ));
        }
        self.commit_locked()?;
        let dirty = std::mem::take(&mut *self.dirty.lock());
        let result = self.checkpoint_dirty(&dirty);
        match result {
            // Every change stays for the next checkpoint.
            Err(_) => self.dirty.lock().extend(dirty),
            // The tree in force holds every clean file as it is.
            Ok(()) => _ = self.evict_files(),
        }
        result
    }

    /// The checkpoint of the files in `dirty` (every file if there is no tree yet).
    fn checkpoint_dirty(&self, dirty: &BTreeSet<u64>) -> Result<()> {
        let full = self.meta.lock().tree.is_none();
        let files: Vec<Arc<Mutex<VFile>>> = {
            let all = self.files.read();
            match full {
                true => all.values().cloned().collect(),
                false => dirty.iter().filter_map(|id| all.get(id).cloned()).collect(),
            }
        };
        let pending = self.plan_maps(files, dirty, full)?;
        let placed = self.write_segments(&pending)?;
        let mut new = placed.extents();
        let mut entries = pending.resolve(&placed);
        debug_assert_eq!(entries.len(), pending.handles.len(), "an entry per file");
        let (spilled, runs) = self.spill(&mut entries)?;
        let mut moved = pending.moved.clone();
        moved.extend(&spilled);
        // What changed: the dirty files, and those a cleaning or a spill moved.
        let mut changed: Vec<u64> = dirty.iter().copied().collect();
        changed.extend(
            moved
                .iter()
                .map(|&i| entries[i].id)
                .filter(|id| !dirty.contains(id)),
        );
        let index = ById::new(&entries);
        let holds = self.holds(&pending.dead, !new.is_empty() || !runs.is_empty());
        let retired = self.write_tree(&index, &changed, (&pending.dead, &runs), full, holds)?;
        new.extend(runs);
        let bs = self.block_size;
        let mut segs = self.segs.lock();
        for dead in &pending.dead {
            segs.named.remove(dead);
        }
        segs.named.extend(&new);
        segs.retired = retired;
        if full {
            // Every file was planned: the accounts start again from the entries.
            segs.held.clear();
            segs.live.clear();
            entries.iter().for_each(|f| segs.hold(f.id, &f.map, bs));
        } else {
            for &id in &changed {
                match index.get(id) {
                    Some(f) => segs.hold(id, &f.map, bs),
                    None => segs.release(id),
                }
            }
        }
        // Every segment the accounts name is named.
        debug_assert!(segs.live.keys().all(|s| segs.named.contains(s)), "{segs:?}");
        // A root that says no map lies outside the tree is right (an open trusts it).
        assert!(
            holds & HOLDS_MAPS != 0 || (segs.named.is_empty() && segs.held.is_empty()),
            "the root says no map lies outside the tree, but {segs:?}"
        );
        // The tree's marks (what an open reads by) say a map lies outside it exactly when
        // the accounts hold one: paired with the open's accounts built from the marked
        // leaves (`load.rs`).
        let marks = self.meta.lock().tree.as_ref().map(|t| t.root_marks());
        debug_assert_eq!(
            marks.map(|m| m & super::node::MARK_MAPS != 0),
            Some(!segs.held.is_empty()),
            "the tree's marks against {segs:?}"
        );
        drop(segs);
        for &i in &moved {
            let mut f = pending.handles[i].lock();
            f.stored = Some(entries[i].map.clone());
            f.map_dirty = false;
        }
        Ok(())
    }

    /// Puts the `changed` entries (every entry, if there is no tree yet) into a copy of the
    /// durable tree, writes its changed nodes and the retired chain (the `dead` segments,
    /// the nodes replaced, and on a first build the old table areas and nodes), logs and
    /// commits the blocks it took (with the spilled maps' `runs`), and checkpoints the
    /// store with a root naming it.
    /// Returns what the new root retired (the next checkpoint frees it; the chain's own
    /// blocks wait one checkpoint more, `Meta::chain`). On failure the
    /// durable tree stays in force: blocks not yet recorded are given back, recorded ones
    /// are retired as an open would find them.
    fn write_tree(
        &self,
        entries: &ById<'_>,
        changed: &[u64],
        (dead, runs): (&[Extent], &[Extent]),
        full: bool,
        holds: u64,
    ) -> Result<Vec<Extent>> {
        debug_assert!(
            self.gate.is_locked_exclusive(),
            "a tree written, the gate open"
        );
        let mut meta = self.meta.lock().clone();
        // The stamp every node of this checkpoint carries: minted now on a new volume or
        // an older root's (from the store's uuid; on a store without one, at random, so a
        // retry after a failure mints another: the failed attempt's nodes are no one's).
        let stamp = meta
            .stamp
            .unwrap_or_else(|| Stamp::mint(self.store.uuid(), meta.generation + 1));
        meta.stamp = Some(stamp);
        let mut io = VolIo::new(&self.store, self.dev.as_ref(), Some(stamp));
        // Spilled maps' runs are recorded, or given back, with the nodes.
        io.got.extend_from_slice(runs);
        debug_assert_eq!(full, meta.tree.is_none(), "a full plan for a first build");
        let built = self.build_tree(&mut meta, &mut io, entries, changed, dead);
        let (tree, chain) = match built {
            Ok(t) => t,
            Err(e) => {
                io.give_back_all();
                return Err(e);
            }
        };
        let got = io.got_joined();
        self.log(&[Change::Segments {
            new: got.clone(),
            freed: Vec::new(),
        }]);
        let root = root_of(
            &meta,
            &tree,
            chain.index.first().copied().unwrap_or(0),
            holds,
        );
        let t = root.tree.expect("a tree's root");
        let result = self.commit_locked().and_then(|()| {
            *self.prepared_root.lock() = Some(root.encode());
            let r = self.store.checkpoint();
            // A checkpoint that failed before its hook ran leaves the root unused.
            self.prepared_root.lock().take();
            r
        });
        if let Err(e) = result {
            // Recorded or waiting for the next commit: what an open would find.
            self.segs.lock().unfinished(&got, &[]);
            return Err(e);
        }
        self.table_blocks
            .store(meta.tree_blocks, std::sync::atomic::Ordering::Relaxed);
        self.set_tree_fixed(Some(&tree));
        // The tree may have grown (or a checkpoint took reserved runs): top it up.
        self.fill_node_reserve();
        meta.tree = Some(tree);
        meta.durable = Some((t.root, t.count));
        meta.generation = t.generation;
        meta.areas = Default::default();
        meta.old_nodes.clear();
        meta.chain = chain.index;
        *self.meta.lock() = meta;
        Ok(chain.pieces)
    }

    /// What the tree this checkpoint writes holds that an open would need from its leaves
    /// (`TreeRoot::holds`): maps outside the tree if a segment named now outlives the
    /// `dead` ones or the checkpoint wrote segments or runs (`wrote_maps`), pending files
    /// if any is in memory (a pending file is never dropped from memory, `cache.rs`); and
    /// always that the tree's internal nodes carry marks (every checkpoint leaves them
    /// whole, `Tree::settle`).
    /// Errs on the side of "holds": the open then reads every leaf, as before.
    fn holds(&self, dead: &[Extent], wrote_maps: bool) -> u64 {
        let maps = wrote_maps || self.segs.lock().named.iter().any(|s| !dead.contains(s));
        let pending = !self.pending().is_empty();
        (u64::from(maps) * HOLDS_MAPS) | (u64::from(pending) * HOLDS_PENDING) | HOLDS_MARKED
    }

    /// The new tree (its changed nodes written, not flushed) and the retired chain
    /// written: the `dead` segments as they are (each keeps its identity in the retired
    /// list), then the nodes replaced (and, on a first build, the old areas and nodes),
    /// adjacent ones joined. `meta.tree_blocks` counts the new tree's blocks.
    fn build_tree(
        &self,
        meta: &mut Meta,
        io: &mut VolIo<'_>,
        entries: &ById<'_>,
        changed: &[u64],
        dead: &[Extent],
    ) -> Result<(Tree, Area)> {
        // Refused before anything was written (`checkpoint_locked`).
        debug_assert!(meta.tree.as_ref().is_none_or(|t| t.holes() == 0));
        let mut retire = Vec::new();
        let nb = node_blocks(self.block_size);
        // What a repair replaced (`leafrepair.rs`) goes with what this checkpoint replaces.
        let mut replaced = std::mem::take(&mut meta.mended);
        let mended = !replaced.is_empty();
        let rebuild = meta.tree.is_none();
        debug_assert!(!rebuild || !mended, "a tree rebuilt, yet nodes mended");
        let mut tree = match meta.tree.clone() {
            Some(mut tree) => {
                for &id in changed {
                    let value = entries.get(id).map(file_body);
                    tree.put(io, id, value, &mut replaced)?;
                }
                tree
            }
            None => {
                let mut tree = Tree::empty(node_bytes(self.block_size));
                for f in entries.all() {
                    tree.put(io, f.id, Some(file_body(f)), &mut replaced)?;
                }
                retire.extend(
                    meta.areas
                        .iter()
                        .flat_map(Area::extents)
                        .filter(|e| e.len > 0),
                );
                retire.append(&mut meta.old_nodes);
                tree
            }
        };
        tree.settle(io, &mut replaced)?;
        let stamp = meta.stamp.expect("minted by write_tree").value;
        let written = (tree.write(io, meta.generation + 1, stamp)?).len() as u64;
        // The room kept for the tree covered what this checkpoint wrote (`room.rs`): the
        // bound for its changed files on the tree in force (after a repair's mended leaves,
        // their paths too: not bounded by the changed files).
        debug_assert!(
            rebuild || mended || written <= self.tree_need_nodes(changed.len() as u64),
            "{written} nodes written for {} changed files, past the bound",
            changed.len()
        );
        // Every file in memory is in the tree now (others were evicted from it).
        debug_assert!(
            tree.count() >= self.files.read().len() as u64,
            "an entry per file"
        );
        let kept = match rebuild {
            true => 0,
            false => meta.tree_blocks - replaced.len() as u64 * nb,
        };
        meta.tree_blocks = kept + written * nb;
        debug_assert_eq!(meta.tree_blocks, tree.nodes().len() as u64 * nb);
        retire.extend(replaced.iter().map(|r| Extent::new(r.block, nb)));
        io.give_back_spare()?;
        // The durable root's chain is read by an open until this root is in force.
        retire.extend(meta.chain.iter().map(|&b| Extent::new(b, 1)));
        let mut listed = dead.to_vec();
        listed.extend(Extent::join_adjacent(retire));
        let chain = io.write_chain(listed)?;
        Ok((tree, chain))
    }
}

/// The root a checkpoint writes for `tree` (written, as checkpoint `meta.generation + 1`,
/// with `meta`'s stamp), whose retired chain starts at `retired` and whose leaves hold
/// `holds` (`TreeRoot::holds`); the previous tree is `meta`'s durable one.
fn root_of(meta: &Meta, tree: &Tree, retired: u64, holds: u64) -> Root {
    // The root's word covers the tree's marks (it may say more, never less).
    assert_eq!(
        u64::from(tree.root_marks()) & !holds,
        0,
        "a root holding {holds:#x} over a tree marked {:#x}",
        tree.root_marks()
    );
    let stamp = meta.stamp.expect("minted before the tree was written");
    let t = TreeRoot {
        root: tree.root().expect("the tree written"),
        count: tree.count(),
        generation: meta.generation + 1,
        retired,
        previous: meta.durable,
        holds,
        stamp: Some(stamp),
    };
    // Every node of the tree is of this checkpoint or older, stamped since `since`.
    debug_assert!(t.root.generation <= t.generation && stamp.since <= t.generation);
    Root {
        sides: [SideRef::legacy(Extent::new(0, 0)); 2],
        active: 0,
        table_bytes: 0,
        table_crc: 0,
        next_id: meta.next_id,
        tree: Some(t),
    }
}
