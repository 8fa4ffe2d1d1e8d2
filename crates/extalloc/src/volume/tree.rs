//! The file table as a copy-on-write B+tree of single nodes (`node.rs`; `docs/format.md`,
//! "The file tree"): keys are file ids, values the entries' frame bodies (`table.rs`).
//!
//! A checkpoint changes only the keys that changed since the last one: each change copies
//! the path from the root to its leaf into memory ([`Tree::put`]; the nodes it leaves
//! behind are `replaced`, for the caller to retire), [`Tree::settle`] splits what grew
//! past a node, merges a leaf that fell under a quarter with a neighbour and drops what
//! emptied, and [`Tree::write`] writes every changed node, children first, each to a block
//! the caller allocates one at a time. Nothing durable is ever written over: a crash at
//! any write leaves the previous root and every node under it whole.
//!
//! Marks: each node as its parent names it carries what the entries under it hold that an
//! open needs (`node::MARK_MAPS`, `node::MARK_PENDING`), computed when the node is written
//! (a leaf from its entries, an internal node from its children's), so an open reads only
//! the leaves whose marks are set (`walk.rs`). A tree read from an older root, whose
//! internal nodes carry no marks, has its leaves' marks computed by the walk that read
//! every leaf; its next checkpoint rewrites every internal node ([`Tree::settle`]).
//!
//! Memory: internal nodes stay loaded (one per ~168 leaves); a leaf is loaded only while a
//! checkpoint changes it and dropped once written. Nodes are shared between a tree and
//! its clones (`Arc`), so a checkpoint works on a clone at the cost of the paths it
//! changes, and a failed one leaves the durable tree untouched.
//!
//! Data structures: [`Tree`] (its root [`Slot`]); a `Slot` is a node as its parent names
//! it: its least key, where it lies if durable, its marks, and its contents if loaded
//! ([`Mem`]). Invariant: keys under child `i` lie in `[first_i, first_{i+1})` (the first
//! child also takes the keys below its own first); every node a durable slot names holds
//! what its `Mem` holds; a durable slot's marks are the OR of its entries' (but while the
//! tree's marks are stale, an internal node's may be short of them); after `settle` every node fits its bytes and an internal node has children.
//! Locks: none (the volume checkpoints under its gate).

use super::node::{self, ChildRef, NodeRef, Stamp, CHILD_BYTES, HEADER_BYTES};
use super::table::{entry_marks, put_file_frame, FRAME_HEADER};
use crate::error::Result;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The tree's I/O: reads of durable nodes, and blocks for new ones.
pub(super) trait NodeIo {
    /// The bytes of the node at `block` (unchecked).
    fn read_raw(&mut self, block: u64) -> Result<Vec<u8>>;
    /// The volume's stamp, which every node read must carry (`node::Stamp`; `None`: a
    /// tree older than stamps).
    fn stamp(&self) -> Option<Stamp>;
    /// The node `at` names, checked (`node::checked`).
    fn read(&mut self, at: NodeRef) -> Result<node::Decoded> {
        let d = node::checked(&self.read_raw(at.block)?, at, self.stamp())?;
        debug_assert!(d.level <= node::MAX_LEVEL, "a checked node's level");
        Ok(d)
    }
    /// A block (a run of `node::node_blocks`) for a new node.
    fn allocate(&mut self) -> Result<u64>;
    /// Writes a node's bytes at `block` (flushed by the caller).
    fn write(&mut self, block: u64, bytes: &[u8]) -> Result<()>;
}

/// A node's contents in memory.
#[derive(Debug, Clone)]
pub(super) enum Mem {
    /// File entries' frame bodies by id.
    Leaf(BTreeMap<u64, Vec<u8>>),
    Internal {
        level: u8,
        children: Vec<Slot>,
    },
}

/// A node as its parent names it.
#[derive(Debug, Clone)]
pub(super) struct Slot {
    first: u64,
    /// Where it lies, if durable; `None`: changed, to be written.
    at: Option<NodeRef>,
    /// Its contents, if loaded (an internal node always is).
    mem: Option<Arc<Mem>>,
    /// What its entries hold that an open needs (`node::MARK_*`), if durable; 0 while
    /// changed (computed when written).
    marks: u8,
}

/// The file table's tree (see the module documentation).
#[derive(Debug, Clone)]
pub(super) struct Tree {
    root: Slot,
    /// Bytes of one node.
    size: usize,
    /// Keys in the tree.
    count: u64,
    /// Its internal nodes were read from a root older than marks (or carry marks short of
    /// what the leaves hold): the next [`Tree::settle`] rewrites every one of them.
    stale_marks: bool,
    /// Internal nodes lost where a repair's open found them (`walk.rs`, `Walked::partial`):
    /// unloaded slots above the leaves' level, each mended before any write
    /// (`Tree::replace_subtree`); no checkpoint writes a tree with holes.
    holes: usize,
}

/// Bytes a leaf's entry takes.
fn entry_bytes(body: &[u8]) -> usize {
    FRAME_HEADER + body.len()
}

fn leaf_bytes(items: &BTreeMap<u64, Vec<u8>>) -> usize {
    items.values().map(|b| entry_bytes(b)).sum()
}

impl Slot {
    fn leaf(items: BTreeMap<u64, Vec<u8>>) -> Slot {
        Slot {
            first: items.keys().next().copied().unwrap_or(0),
            at: None,
            mem: Some(Arc::new(Mem::Leaf(items))),
            marks: 0,
        }
    }

    /// A changed internal node's slot over `children` (of `level - 1`), to be written (a
    /// split's, or a root a repair made again: `rootfind.rs`).
    pub(super) fn internal(level: u8, children: Vec<Slot>) -> Slot {
        debug_assert!(!children.is_empty() && level > 0);
        Slot {
            first: children[0].first,
            at: None,
            mem: Some(Arc::new(Mem::Internal { level, children })),
            marks: 0,
        }
    }

    /// A durable node's slot with its `marks`, its contents loaded if it is internal
    /// (recursively).
    pub(super) fn durable(first: u64, at: NodeRef, marks: u8, mem: Option<Mem>) -> Slot {
        Slot {
            first,
            at: Some(at),
            mem: mem.map(Arc::new),
            marks,
        }
    }

    /// What its entries hold that an open needs (`node::MARK_*`; meaningful if durable).
    pub(super) fn marks(&self) -> u8 {
        self.marks
    }

    /// The least key under it.
    pub(super) fn first(&self) -> u64 {
        self.first
    }

    fn level(&self) -> u8 {
        match self.mem.as_deref() {
            Some(Mem::Internal { level, .. }) => *level,
            _ => 0,
        }
    }

    /// Loads the slot's contents (a durable leaf's) and marks it changed: its old place
    /// goes to `replaced`. Returns them to change.
    fn open(&mut self, io: &mut dyn NodeIo, replaced: &mut Vec<NodeRef>) -> Result<&mut Mem> {
        if self.mem.is_none() {
            let at = self.at.expect("an unloaded slot is durable");
            let d = io.read(at)?;
            assert_eq!(d.level, 0, "an internal node left unloaded");
            self.mem = Some(Arc::new(Mem::Leaf(leaf_items(&d.payload)?)));
        }
        if let Some(at) = self.at.take() {
            replaced.push(at);
        }
        self.marks = 0;
        Ok(Arc::make_mut(self.mem.as_mut().expect("loaded")))
    }

    /// Marks every internal node under it (itself included) changed, its old place to
    /// `replaced`, so that the next write gives each the marks of its children.
    fn open_internal(&mut self, replaced: &mut Vec<NodeRef>) {
        if self.level() == 0 {
            return;
        }
        if let Some(at) = self.at.take() {
            replaced.push(at);
        }
        self.marks = 0;
        if let Some(Mem::Internal { children, .. }) = self.mem.as_mut().map(Arc::make_mut) {
            children.iter_mut().for_each(|c| c.open_internal(replaced));
        }
        // Changed, to be written with the marks of its children.
        debug_assert!(self.at.is_none() && self.marks == 0);
    }
}

/// A leaf's entries: each frame's body by the id it starts with, checked.
pub(super) fn leaf_items(payload: &[u8]) -> Result<BTreeMap<u64, Vec<u8>>> {
    let mut items = BTreeMap::new();
    let mut last = None;
    for body in super::table::frames(payload)? {
        let id = super::table::frame_id(body)?;
        if last.is_some_and(|l| l >= id) {
            return Err(super::record::corrupt("a tree leaf's entries out of order"));
        }
        last = Some(id);
        items.insert(id, body.to_vec());
    }
    Ok(items)
}

impl Tree {
    /// An empty tree of nodes of `size` bytes (its one empty leaf not yet written).
    pub(super) fn empty(size: usize) -> Tree {
        Tree {
            root: Slot::leaf(BTreeMap::new()),
            size,
            count: 0,
            stale_marks: false,
            holes: 0,
        }
    }

    /// A durable tree: its root slot (internal nodes loaded, `Slot::durable`) and count;
    /// `stale_marks` if its internal nodes' marks may fall short of what the leaves hold
    /// (the next [`Tree::settle`] rewrites them).
    pub(super) fn from_root(root: Slot, size: usize, count: u64, stale_marks: bool) -> Tree {
        assert!(root.at.is_some(), "a durable tree's root is written");
        Tree {
            root,
            size,
            count,
            stale_marks,
            holes: 0,
        }
    }

    /// A tree whose root a repair made again in memory over durable children (`rootfind.rs`,
    /// `Slot::internal`), of `count` keys, with `holes` internal nodes lost under it (as
    /// [`Tree::with_holes`]): the next write writes the root, once the holes are mended.
    pub(super) fn under_new_root(root: Slot, size: usize, count: u64, holes: usize) -> Tree {
        assert!(
            root.at.is_none() && root.level() > 0,
            "a changed internal root"
        );
        Tree {
            root,
            size,
            count,
            stale_marks: false,
            holes,
        }
    }

    /// A durable tree read with `holes` internal nodes lost (`walk.rs`): their slots stay
    /// unloaded, for a repair to mend ([`Tree::replace_subtree`]) before any write.
    pub(super) fn with_holes(root: Slot, size: usize, count: u64, holes: usize) -> Tree {
        assert!(holes > 0, "a tree with holes has one");
        Tree {
            holes,
            ..Tree::from_root(root, size, count, false)
        }
    }

    /// Internal nodes lost and not mended yet ([`Tree::with_holes`]).
    pub(super) fn holes(&self) -> usize {
        self.holes
    }

    /// What the tree's entries hold that an open needs (`node::MARK_*`), as written.
    pub(super) fn root_marks(&self) -> u8 {
        assert!(self.root.at.is_some(), "the marks of a tree not written");
        self.root.marks
    }

    /// Its marks may fall short of what the leaves hold (read from an older root).
    #[cfg(test)]
    pub(super) fn stale_marks(&self) -> bool {
        self.stale_marks
    }

    /// Keys in the tree.
    pub(super) fn count(&self) -> u64 {
        self.count
    }

    /// The durable root, if nothing changed since the last write.
    pub(super) fn root(&self) -> Option<NodeRef> {
        self.root.at
    }

    /// Levels above the leaves.
    pub(super) fn height(&self) -> u8 {
        self.root.level()
    }

    /// Its internal nodes (all loaded: a walk of memory, about one node per 168 leaves).
    pub(super) fn internal_nodes(&self) -> u64 {
        let mut n = 0;
        let mut stack = vec![&self.root];
        while let Some(s) = stack.pop() {
            if let Some(Mem::Internal { children, .. }) = s.mem.as_deref() {
                n += 1;
                stack.extend(children.iter());
            }
        }
        n
    }

    /// Sets `key` to `value` (`None`: removes it). Every node on its path is loaded and
    /// marked changed; the durable ones it leaves go to `replaced`.
    pub(super) fn put(
        &mut self,
        io: &mut dyn NodeIo,
        key: u64,
        value: Option<Vec<u8>>,
        replaced: &mut Vec<NodeRef>,
    ) -> Result<()> {
        if let Some(v) = &value {
            assert!(
                HEADER_BYTES + entry_bytes(v) <= self.size,
                "an entry of {} bytes in nodes of {}",
                v.len(),
                self.size
            );
        }
        let mut slot = &mut self.root;
        loop {
            match slot.open(io, replaced)? {
                Mem::Leaf(items) => {
                    let had = match value {
                        Some(v) => items.insert(key, v).is_some(),
                        None => items.remove(&key).is_some(),
                    };
                    let now = items.contains_key(&key);
                    self.count = self.count + u64::from(now) - u64::from(had);
                    return Ok(());
                }
                Mem::Internal { children, .. } => {
                    let i = children.partition_point(|c| c.first <= key).max(1) - 1;
                    slot = &mut children[i];
                }
            }
        }
    }

    /// Splits what outgrew its node, merges small changed leaves with a neighbour, drops
    /// empty nodes and collapses a root of one child (see the module documentation).
    pub(super) fn settle(
        &mut self,
        io: &mut dyn NodeIo,
        replaced: &mut Vec<NodeRef>,
    ) -> Result<()> {
        assert_eq!(self.holes, 0, "a tree with lost nodes not mended settled");
        if self.stale_marks {
            // Every internal node written again, with its children's marks.
            self.root.open_internal(replaced);
            self.stale_marks = false;
        }
        let root = std::mem::replace(&mut self.root, Slot::leaf(BTreeMap::new()));
        let mut slots = settle::settle_slot(root, self.size, true, io, replaced)?;
        while slots.len() > 1 {
            let level = slots[0].level() + 1;
            slots =
                settle::settle_slot(Slot::internal(level, slots), self.size, true, io, replaced)?;
        }
        let mut root = slots.pop().unwrap_or_else(|| Slot::leaf(BTreeMap::new()));
        loop {
            let only = match root.mem.as_deref() {
                Some(Mem::Internal { children, .. }) if children.len() == 1 => children[0].clone(),
                _ => break,
            };
            if let Some(at) = root.at {
                replaced.push(at);
            }
            root = only;
        }
        self.root = root;
        debug_assert!(self.check_shape().is_ok(), "{:?}", self.check_shape());
        Ok(())
    }

    /// Writes every changed node (children first) to a block `io` allocates, as checkpoint
    /// `generation`, each carrying the volume's `stamp` (`node::Stamp`); a written leaf is
    /// dropped from memory. Returns the blocks written. The tree must be settled.
    pub(super) fn write(
        &mut self,
        io: &mut dyn NodeIo,
        generation: u64,
        stamp: u64,
    ) -> Result<Vec<u64>> {
        let mut written = Vec::new();
        write_slot(
            &mut self.root,
            (self.size, stamp),
            io,
            generation,
            &mut written,
        )?;
        debug_assert!(self.root.at.is_some(), "the root written");
        Ok(written)
    }

    /// The value of `key`, reading at most its leaf (internal nodes are in memory): what a
    /// file not kept in memory is loaded from (`Volume::file`).
    pub(super) fn get(&self, io: &mut dyn NodeIo, key: u64) -> Result<Option<Vec<u8>>> {
        let mut slot = &self.root;
        loop {
            match slot.mem.as_deref() {
                Some(Mem::Internal { children, .. }) => {
                    // The last child whose first key is at most `key` (the first child
                    // takes the keys below its own first).
                    let i = children.partition_point(|c| c.first <= key).max(1) - 1;
                    // Internal nodes in memory are the tree's own: never empty, keys in order.
                    debug_assert!(i + 1 == children.len() || key < children[i + 1].first);
                    slot = &children[i];
                }
                Some(Mem::Leaf(items)) => return Ok(items.get(&key).cloned()),
                None => {
                    let at = slot.at.expect("an unloaded slot is durable");
                    let d = io.read(at)?;
                    if d.level != 0 {
                        return Err(super::record::corrupt("an unloaded tree node not a leaf"));
                    }
                    // One entry wanted: found in place, the leaf not decoded (a lookup of a
                    // dropped inode reads a leaf per call).
                    let found = super::table::find_frame(&d.payload, key)?;
                    return Ok(found.map(<[u8]>::to_vec));
                }
            }
        }
    }

    /// Calls `f` with every key from `from` on and its value, in key order, reading each
    /// unloaded leaf once (memory: one leaf at a time), until `f` says to stop
    /// (`Ok(false)`). The subtrees whose keys all lie below `from` are passed over unread
    /// (a child's keys lie below its right neighbour's first), so a visit that starts in
    /// the middle reads one node per level to get there.
    pub(super) fn visit_from(
        &self,
        io: &mut dyn NodeIo,
        from: u64,
        f: &mut dyn FnMut(u64, &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let mut stack = vec![&self.root];
        let mut last: Option<u64> = None;
        while let Some(s) = stack.pop() {
            let read;
            let items = match s.mem.as_deref() {
                Some(Mem::Internal { children, .. }) => {
                    debug_assert!(!children.is_empty(), "an internal node without children");
                    // The first child that may hold `from` or a later key, and those after it.
                    let skip = children
                        .windows(2)
                        .take_while(|w| w[1].first <= from)
                        .count();
                    stack.extend(children[skip..].iter().rev());
                    continue;
                }
                Some(Mem::Leaf(items)) => items,
                None => {
                    let d = io.read(s.at.expect("an unloaded slot is durable"))?;
                    if d.level != 0 {
                        return Err(super::record::corrupt("an unloaded tree node not a leaf"));
                    }
                    read = leaf_items(&d.payload)?;
                    &read
                }
            };
            for (&k, v) in items.range(from..) {
                // Keys come in order across leaves: the tree's invariant, read back (bytes
                // on the device, so damage, not a bug, if not).
                if last.is_some_and(|l| l >= k) {
                    return Err(super::record::corrupt("tree leaves' keys out of order"));
                }
                last = Some(k);
                if !f(k, v)? {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Each durable internal node's place and level, root first (a walk of memory: they
    /// are all loaded).
    pub(super) fn internal_places(&self) -> Vec<(NodeRef, u8)> {
        let mut out = Vec::new();
        let mut stack = vec![&self.root];
        while let Some(s) = stack.pop() {
            if let Some(Mem::Internal { children, level }) = s.mem.as_deref() {
                out.extend(s.at.map(|at| (at, *level)));
                stack.extend(children.iter());
            }
        }
        debug_assert!(out.iter().all(|&(_, l)| l > 0));
        out
    }

    /// Every durable node's place (for the volume's own blocks), root first.
    pub(super) fn nodes(&self) -> Vec<NodeRef> {
        let mut out = Vec::new();
        let mut stack = vec![&self.root];
        while let Some(s) = stack.pop() {
            out.extend(s.at);
            if let Some(Mem::Internal { children, .. }) = s.mem.as_deref() {
                stack.extend(children.iter());
            }
        }
        out
    }

    /// Checks the settled shape: children of each internal node one level down with keys
    /// ascending, every loaded node within its bytes.
    fn check_shape(&self) -> std::result::Result<(), String> {
        let mut stack = vec![&self.root];
        while let Some(s) = stack.pop() {
            match s.mem.as_deref() {
                Some(Mem::Leaf(items)) if HEADER_BYTES + leaf_bytes(items) > self.size => {
                    return Err(format!("a leaf of {} bytes", leaf_bytes(items)));
                }
                Some(Mem::Internal { level, children }) => {
                    if children.is_empty()
                        || HEADER_BYTES + children.len() * CHILD_BYTES > self.size
                    {
                        return Err(format!("an internal node of {} children", children.len()));
                    }
                    if children.windows(2).any(|w| w[0].first >= w[1].first) {
                        return Err("children out of order".into());
                    }
                    if children.iter().any(|c| c.level() + 1 != *level) {
                        return Err(format!("a child not one level under {level}"));
                    }
                    stack.extend(children.iter());
                }
                _ => {}
            }
        }
        Ok(())
    }
}

fn write_slot(
    slot: &mut Slot,
    (size, stamp): (usize, u64),
    io: &mut dyn NodeIo,
    generation: u64,
    written: &mut Vec<u64>,
) -> Result<()> {
    if slot.at.is_some() {
        return Ok(());
    }
    let mem = Arc::make_mut(slot.mem.as_mut().expect("a changed slot is loaded"));
    let mut marks = 0;
    let (level, count, payload) = match mem {
        Mem::Leaf(items) => {
            let mut payload = Vec::with_capacity(leaf_bytes(items));
            for b in items.values() {
                put_file_frame(&mut payload, b);
                marks |= entry_marks(b);
            }
            (0, items.len(), payload)
        }
        Mem::Internal { level, children } => {
            for c in children.iter_mut() {
                write_slot(c, (size, stamp), io, generation, written)?;
            }
            let refs: Vec<ChildRef> = children
                .iter()
                .map(|c| ChildRef {
                    first: c.first,
                    at: c.at.expect("a child written first"),
                    marks: c.marks,
                })
                .collect();
            marks = refs.iter().fold(0, |m, c| m | c.marks);
            (*level, refs.len(), node::encode_children(&refs))
        }
    };
    let block = io.allocate()?;
    let at = NodeRef { block, generation };
    io.write(
        block,
        &node::encode(size, (level, count as u32), &payload, at, stamp),
    )?;
    written.push(block);
    slot.at = Some(at);
    slot.marks = marks;
    if level == 0 {
        slot.mem = None;
    }
    // Written once: every node under it is durable too.
    debug_assert!(slot.at.is_some() && written.last() == Some(&block));
    Ok(())
}

#[path = "tree_leaves.rs"]
mod leaves;
#[path = "tree_settle.rs"]
mod settle;
pub(super) use leaves::LeafVisit;
#[cfg(test)]
#[path = "tree_tests.rs"]
mod tests;
