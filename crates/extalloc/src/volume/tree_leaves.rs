//! A tree's leaves one at a time, and a leaf that does not read replaced in memory: what
//! `fsck --repair` uses to mend a damaged leaf without reading every file into memory
//! (`leafrepair.rs`).
//!
//! Data structures: [`LeafVisit`], one leaf as the visit hands it over. Invariant: a
//! replaced leaf keeps the key range its parent routes to it, and every node on its path
//! is marked changed (its old place in `replaced`), so the next write puts the path back
//! with the leaf's new entries. Locks: none (the volume repairs under its gate).

use super::super::node::{self, NodeRef};
use super::{leaf_items, Mem, NodeIo, Slot, Tree};
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A leaf's entries, checked; or why it did not read, with its bytes if they read.
pub(in crate::volume) type LeafRead =
    std::result::Result<BTreeMap<u64, Vec<u8>>, (Error, Option<Vec<u8>>)>;

/// One leaf of a [`Tree::visit_leaves`].
pub(in crate::volume) struct LeafVisit {
    /// The keys its parent routes to it: `lo..hi` (`None`: no end).
    pub keys: (u64, Option<u64>),
    /// Where it lies (`None`: changed in memory since the last write).
    pub at: Option<NodeRef>,
    /// The level its parent names it at: 0, or above for an internal node a repair's
    /// open lost (a hole: [`Tree::replace_subtree`]).
    pub level: u8,
    /// Its entries, checked; or why it did not read, with its bytes if they read.
    pub read: LeafRead,
}

/// Why the open lost the internal node at `at` (a hole), as a read of it tells now: its
/// check's failure, or the read's error.
fn hole_why(io: &mut dyn NodeIo, at: Option<NodeRef>) -> Error {
    let lost = || super::super::record::corrupt("an internal node the open lost");
    // A hole is where its parent names a durable node.
    debug_assert!(at.is_some(), "a hole with no place");
    match at.map(|at| io.read(at)) {
        Some(Err(e @ (Error::Corrupt { .. } | Error::Io { .. }))) => e,
        // It reads as a node now (another checkpoint's, or a leaf where its parent names
        // an internal node), or fails otherwise: the open's verdict stands.
        Some(_) | None => lost(),
    }
}

impl Tree {
    /// Hands `f` every leaf in key order, each read and checked on its own (memory: one
    /// leaf at a time, beside the internal nodes, which stay loaded); a leaf that does not
    /// read is handed over with why, and the visit goes on; so is a hole (unread, at its
    /// level above 0: [`Tree::holes`]). Fails on what `f` returns.
    pub(in crate::volume) fn visit_leaves(
        &self,
        io: &mut dyn NodeIo,
        f: &mut dyn FnMut(LeafVisit) -> Result<()>,
    ) -> Result<()> {
        // Each slot with its keys and the level its parent names it at.
        let mut stack = vec![(&self.root, (0u64, None::<u64>), self.root.level())];
        let mut last: Option<u64> = None;
        while let Some((s, keys, level)) = stack.pop() {
            let read = match s.mem.as_deref() {
                Some(Mem::Internal { children, level }) => {
                    for (i, c) in children.iter().enumerate().rev() {
                        let lo = if i == 0 { keys.0 } else { c.first };
                        let hi = children.get(i + 1).map(|n| n.first).or(keys.1);
                        stack.push((c, (lo, hi), level - 1));
                    }
                    continue;
                }
                Some(Mem::Leaf(items)) => Ok(items.clone()),
                // A hole: lost by the open, whatever its block reads as now (a whole leaf
                // there is not what its parent names).
                None if level > 0 => Err((hole_why(io, s.at), None)),
                None => read_leaf(io, s.at.expect("an unloaded slot is durable")),
            };
            // Leaves come in key order, each routed keys above the last one's.
            debug_assert!(last.is_none_or(|l| l < keys.0), "{last:?} then {keys:?}");
            last = Some(keys.0);
            // Only a hole stands unloaded above the leaves.
            debug_assert!(level == 0 || (s.mem.is_none() && self.holes > 0));
            f(LeafVisit {
                keys,
                at: s.at,
                level,
                read,
            })?;
        }
        Ok(())
    }

    /// Replaces the leaf that `key` is routed to, which does not read, with `items` (keys
    /// it routes there), in memory: its place and those of the internal nodes above it go
    /// to `replaced`, and the next [`Tree::write`] writes the path again. The caller sets
    /// the count once it knows it ([`Tree::recount`]: what the leaf held is not known).
    pub(in crate::volume) fn replace_leaf(
        &mut self,
        key: u64,
        items: BTreeMap<u64, Vec<u8>>,
        replaced: &mut Vec<NodeRef>,
    ) {
        let added = items.len() as u64;
        let mut slot = &mut self.root;
        loop {
            if let Some(at) = slot.at.take() {
                replaced.push(at);
            }
            slot.marks = 0;
            match Arc::make_mut(
                slot.mem
                    .get_or_insert_with(|| Arc::new(Mem::Leaf(BTreeMap::new()))),
            ) {
                Mem::Leaf(old) => {
                    *old = items;
                    break;
                }
                Mem::Internal { children, .. } => {
                    let i = children.partition_point(|c| c.first <= key).max(1) - 1;
                    slot = &mut children[i];
                }
            }
        }
        // The path is changed, the leaf loaded with what it now holds.
        debug_assert!(self.root.at.is_none() && slot_holds(&self.root, key, added));
    }

    /// Fills the hole (an internal node of `level` a repair's open lost: [`Tree::holes`])
    /// that `key` is routed to with an empty subtree of that level, in memory: a chain of
    /// one child a level down to an empty leaf, which [`Tree::put`] fills and
    /// [`Tree::settle`] shapes (splits what outgrew a node, drops what stayed empty). Its
    /// place and those of the nodes above it go to `replaced`, as [`Tree::replace_leaf`]'s.
    pub(in crate::volume) fn replace_subtree(
        &mut self,
        key: u64,
        level: u8,
        replaced: &mut Vec<NodeRef>,
    ) {
        assert!(
            self.holes > 0 && level > 0,
            "a hole of level {level} to fill"
        );
        let mut slot = &mut self.root;
        loop {
            if let Some(at) = slot.at.take() {
                replaced.push(at);
            }
            slot.marks = 0;
            if slot.mem.is_none() {
                let mut chain = Slot::leaf(BTreeMap::new());
                for l in 1..=level {
                    chain = Slot::internal(l, vec![chain]);
                }
                slot.mem = chain.mem;
                break;
            }
            match Arc::make_mut(slot.mem.as_mut().expect("loaded")) {
                Mem::Internal { children, .. } => {
                    let i = children.partition_point(|c| c.first <= key).max(1) - 1;
                    slot = &mut children[i];
                }
                Mem::Leaf(_) => unreachable!("a hole lies under internal nodes"),
            }
        }
        self.holes -= 1;
        // The hole is an empty subtree of its level now.
        debug_assert!(slot_holds(&self.root, key, 0));
    }

    /// Sets the count of keys (after [`Tree::replace_leaf`]: the caller counted the
    /// leaves that read and what the replaced ones hold now).
    pub(in crate::volume) fn recount(&mut self, keys: u64) {
        self.count = keys;
        // At least what the leaves in memory hold.
        debug_assert!(keys >= loaded_keys(&self.root), "{keys} keys");
    }
}

/// The leaf `key` is routed to holds `n` entries (in memory).
fn slot_holds(root: &Slot, key: u64, n: u64) -> bool {
    let mut slot = root;
    loop {
        match slot.mem.as_deref() {
            Some(Mem::Internal { children, .. }) => {
                slot = &children[children.partition_point(|c| c.first <= key).max(1) - 1];
            }
            Some(Mem::Leaf(items)) => return items.len() as u64 == n,
            None => return false,
        }
    }
}

/// Keys the leaves in memory under `slot` hold.
fn loaded_keys(slot: &Slot) -> u64 {
    match slot.mem.as_deref() {
        Some(Mem::Internal { children, .. }) => children.iter().map(loaded_keys).sum(),
        Some(Mem::Leaf(items)) => items.len() as u64,
        None => 0,
    }
}

/// A durable leaf's entries, checked; or why not, with its bytes if they read.
fn read_leaf(io: &mut dyn NodeIo, at: NodeRef) -> LeafRead {
    let raw = io.read_raw(at.block).map_err(|e| (e, None))?;
    let checked = node::checked(&raw, at, io.stamp()).and_then(|d| match d.level {
        0 => leaf_items(&d.payload),
        _ => Err(super::super::record::corrupt(
            "an unloaded tree node not a leaf",
        )),
    });
    let read = checked.map_err(|e| (e, Some(raw)));
    // Bytes that read are handed over with why they failed (the salvage of its frames).
    debug_assert!(matches!(&read, Ok(_) | Err((_, Some(_)))));
    read
}
