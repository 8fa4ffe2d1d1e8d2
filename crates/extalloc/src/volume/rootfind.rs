//! A lost root of the file tree made again over the nodes under it, for a repair's open
//! ([`find`]; `load.rs`), so that a volume whose only damage in the tree is its root is
//! mended on the page path (a page of files at a time) instead of by the salvage (every
//! file's entry in memory: 1.24 GB at 1M files).
//!
//! A copy-on-write checkpoint that writes a root at generation `g` writes the path from
//! it to every leaf it changed, each node at `g`: so the root's children are the nodes of
//! the highest level below the root's that carry `g`, with their older siblings. The
//! blocks the bitmaps mark used are read once (as the salvage's scan reads them,
//! `nodescan.rs`), and every whole node found there is noted, a few dozen bytes each
//! (never its entries): those the volume's stamp vouches for, no newer than the lost root,
//! held (not in a group held corrupt, whose bitmap cannot say which are), not the nodes
//! the root's checkpoint retired (its chain lists them: the previous
//! tree's, held until the next checkpoint frees them). Of the nodes at the children's
//! level whose whole subtree was found (every node it names, at the generation it names,
//! keys inside the ranges their parents route to them, marks no more than named), the
//! newest are taken first and each one whose keys overlap none taken before. The new root
//! stands only if the entries under what was taken are exactly as many as the lost root
//! counted and one of them carries the root's generation; else the level below is tried,
//! down to the leaves (a child lost with the root: the whole subtrees under it, and its
//! siblings', are found a level down). A stale subtree (one a checkpoint freed, found
//! where the block was handed out again but not yet written) adds keys the count does not
//! have; a subtree not whole leaves keys short of it: either way the count refuses. If no
//! level counts, each level from the children's down to the leaves' parents is tried with
//! holes ([`Take::WithHoles`]): a node a child's subtree names that was found nowhere
//! (zeroed, overwritten, unreadable) is a hole, and the root stands if the entries found
//! and one for each hole are no more than the root counted, the entries missing fit in
//! the holes ([`room`]: a subtree lost whole, which leaves no hole, is more than they
//! hold), every node noted at that level or below lies under a child taken (a node left
//! out says a range is missing or doubled), and every node under the children taken, a
//! hole too, older than the root is one the previous checkpoint's tree names (copy on
//! write shares what a checkpoint did not change; a stale node is not shared: it would
//! bring back entries no one judged). The count alone can no longer tell a stale or
//! missing range where holes give it slack: these say what it cannot. The walk under it then
//! gives the holes to the mend (`leafrepair.rs`) as under an intact root. Else the salvage
//! runs as before. A root over more children than a node holds
//! is split by the checkpoint's settle (`Tree::settle`), as any node that outgrew one.
//!
//! The new root is in memory only: the next checkpoint writes it, retiring the old one.
//! Until then nothing is written: a crash leaves the volume as it was.
//!
//! Data structures: [`Found`] (the children of the root made again), `Node` (a node
//! noted), `Sum` (what a subtree holds), [`Take`]. Invariant: the children found are in
//! key order, their key ranges disjoint, their entries as many as the lost root's, or,
//! with holes, fewer by at least one a hole and at most what the holes hold, every node
//! noted at their level or below under them, and every node under them older than the
//! root in the previous tree. Locks: none
//! (the volume is not shared yet).

use super::node::{self, ChildRef, NodeRef};
use super::root::{RootFound, TreeRoot};
use super::scanread::{used_to_read, NodeScans, Tally};
use super::state::Meta;
use super::tree::NodeIo;
use super::treeio::VolIo;
use super::walk::{self, Walked};
use crate::disk::device::Device;
use crate::error::{Error, Result};
use crate::geometry::Extent;
use crate::store::Store;
use std::collections::{BTreeMap, HashMap, HashSet};

/// The root made again: its children (in key order, each named by the least key under
/// it, with the marks of what is under it) and its level.
#[derive(Debug, Clone)]
pub(super) struct Found {
    pub children: Vec<ChildRef>,
    pub level: u8,
    /// Levels below the highest that carries the lost root's generation.
    pub levels_down: u8,
    /// Blocks read (or covered by an earlier scan's note), those of them that did not
    /// read, and the whole nodes of this volume found in them.
    pub blocks_read: u64,
    pub blocks_unreadable: u64,
    pub nodes_found: u64,
    /// Nodes the subtrees taken name that were found nowhere (lost with the root): holes,
    /// for the mend to rebuild (0 when every subtree was found whole).
    pub holes: u64,
}

/// A whole node found on the device: its level and what the parent of a subtree needs of
/// it (a leaf's keys, count and marks; an internal node's children).
#[derive(Debug)]
struct Node {
    at: NodeRef,
    level: u8,
    /// A leaf's least and greatest keys, entry count and marks.
    leaf: Option<Sum>,
    /// An internal node's children.
    children: Vec<ChildRef>,
}

/// What a subtree holds: its least and greatest keys, its entries, and its marks as its
/// parent names them (a leaf's: its entries').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sum {
    lo: u64,
    hi: u64,
    count: u64,
    marks: u8,
    /// Children named under it and found nowhere ([`Take::WithHoles`] only): their
    /// entries are not in `count`.
    holes: u64,
    /// The most entries those holes could have held ([`room`] of each one's level).
    room: u64,
}

/// How [`children_at`] takes a subtree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Take {
    /// Only whole: every node under it found.
    Whole,
    /// With holes where a node it names was found nowhere (its block holds no node of
    /// this volume: zeroed, overwritten, unreadable); nodes of `node_bytes` bytes.
    WithHoles { node_bytes: usize },
}

/// The most entries a subtree of `level` can hold in nodes of `node_bytes` bytes: a leaf's
/// payload in frames of at least a header and an id each, an internal node's in
/// children of [`node::CHILD_BYTES`].
fn room(level: u8, node_bytes: usize) -> u64 {
    let payload = node_bytes.saturating_sub(node::HEADER_BYTES) as u64;
    let leaf = payload / (super::table::FRAME_HEADER as u64 + 8);
    let fan = payload / node::CHILD_BYTES as u64;
    (0..level).fold(leaf, |r, _| r.saturating_mul(fan))
}

/// The marked walk of `t`'s tree; for a repair (whose `scans` read the device and tell
/// how far they have gone) whose walk lost the root to damage (not to an I/O error), the walk under a
/// root made again over the nodes found under it ([`find`]; `retired`: the blocks the
/// root's chain lists), if one can be: then with what the repair reports of it. Otherwise
/// what the walk gave.
pub(super) fn walk_or_find(
    (store, dev): (&Store, &dyn Device),
    io: &mut VolIo<'_>,
    t: &TreeRoot,
    (retired, scans): (&[Extent], Option<&NodeScans<'_>>),
) -> Result<(Walked, Option<RootFound>)> {
    let size = node::node_bytes(u64::from(store.geometry().block_size));
    let walked = walk::walk_marked(io, t.root, size, t.count);
    let why = match &walked {
        Err(e @ Error::Corrupt { .. }) => e.to_string(),
        Ok(w) => match w.lost.iter().find(|l| l.said.is_none()) {
            Some(l) => l.why.clone(),
            None => return walked.map(|w| (w, None)),
        },
        Err(_) => return walked.map(|w| (w, None)),
    };
    let Some(scans) = scans else {
        return walked.map(|w| (w, None));
    };
    let Some(f) = find((store, dev), io, t, (retired, scans))? else {
        return walked.map(|w| (w, None));
    };
    let under = walk::walk_marked_under(io, (f.level, &f.children), size, t.count)?;
    // A partial tree only where the root was made with holes: their subtrees' nodes.
    if under.tree.is_none() && (under.partial.is_none() || f.holes == 0) {
        return walked.map(|w| (w, None));
    }
    // A tree under a root with no place yet, for the next checkpoint to write: whole, or
    // with holes and failed leaves for the mend.
    debug_assert!(
        (under.tree.as_ref().or(under.partial.as_ref())).is_some_and(|tr| tr.root().is_none())
    );
    debug_assert!(under.tree.as_ref().is_none_or(|tr| tr.holes() == 0));
    let report = RootFound {
        lost: (t.root.block, why),
        blocks_read: f.blocks_read,
        blocks_unreadable: f.blocks_unreadable,
        nodes_found: f.nodes_found,
        children: f.children.len() as u64,
        level: f.level,
        levels_down: f.levels_down,
        holes: f.holes,
    };
    Ok((under, Some(report)))
}

/// A root [`walk_or_find`] made again into `meta`, over `t`'s lost one
/// (of `nb` blocks): the lost root waits with the mended nodes for the next checkpoint to
/// retire (its blocks the tree's until then), that checkpoint names no previous tree, and
/// none runs before the mend (which reports `found`).
pub(super) fn adopt(meta: &mut Meta, t: &TreeRoot, found: RootFound, nb: u64) {
    // The tree adopted is the one under the new root: no place yet, the old one's count.
    assert!(
        meta.tree
            .as_ref()
            .is_some_and(|tr| tr.root().is_none() && tr.count() == t.count),
        "a root made again"
    );
    meta.mended.push(t.root);
    meta.tree_blocks += nb;
    meta.durable = None;
    meta.root_found = Some(found);
    meta.unmended = true;
}

/// The root of `t`, lost, made again over the nodes found on the device (see the module
/// documentation); `retired`: the blocks the root's chain lists; `scans` read the device
/// (`scanread.rs`: a block that does not read skipped and counted). `None` when no root
/// can be made that counts what the lost one counted (the salvage then runs). Fails only
/// on the device's error (`scanread.rs`: blocks in a row that do not read).
pub(super) fn find(
    (store, dev): (&Store, &dyn Device),
    io: &mut VolIo<'_>,
    t: &TreeRoot,
    (retired, scans): (&[Extent], &NodeScans<'_>),
) -> Result<Option<Found>> {
    let (nodes, tally) = scan(store, dev, t, (retired, scans))?;
    let node_bytes = node::node_bytes(u64::from(store.geometry().block_size));
    let previous = || previous_nodes(io, t);
    let found = choose(&nodes, t, (node_bytes, previous)).map(|c| Found {
        children: c.children,
        level: c.level + 1,
        levels_down: c.top - c.level,
        blocks_read: tally.read,
        blocks_unreadable: tally.unreadable,
        nodes_found: nodes.len() as u64,
        holes: c.holes,
    });
    // A root over children; one with holes over internal nodes (a hole is a child one
    // names).
    debug_assert!(found
        .as_ref()
        .is_none_or(|f| !f.children.is_empty() && f.level > u8::from(f.holes > 0)));
    Ok(found)
}

/// The children [`choose`] takes: their level, the highest below the lost root's that
/// carries its generation (`top`), and the holes under them.
#[derive(Debug)]
struct Chosen {
    children: Vec<ChildRef>,
    level: u8,
    top: u8,
    holes: u64,
}

/// The children of a root made again over the `nodes` found (see the module
/// documentation) for `t`'s lost root, if any count what it counted; with holes (in nodes
/// of `node_bytes`), only over nodes the previous checkpoint's tree names when older than
/// the root (`previous`, read only then: [`previous_nodes`]).
fn choose(
    nodes: &HashMap<u64, Node>,
    t: &TreeRoot,
    (node_bytes, previous): (usize, impl FnOnce() -> Option<HashSet<NodeRef>>),
) -> Option<Chosen> {
    let g = t.root.generation;
    // The children's level: the highest below the root's that carries its generation.
    let top = (nodes.values())
        .filter(|n| n.at.generation == g)
        .map(|n| n.level)
        .max()?;
    if top >= node::MAX_LEVEL {
        return None; // no tree is that tall
    }
    let chosen = |(children, holes): (Vec<ChildRef>, u64), level: u8| Chosen {
        children,
        level,
        top,
        holes,
    };
    // A child lost too (or its generation's): the level below it, down to the leaves.
    let mut memo = HashMap::new();
    for level in (0..=top).rev() {
        if let Some(taken) = children_at(nodes, &mut memo, (level, Take::Whole), t) {
            return Some(chosen(taken, level));
        }
    }
    // A node lost under a child: each level with holes in its place, if every node found
    // at it or below lies under what is taken, and every node under what is taken (a
    // hole too) older than the root is one the previous tree names.
    let previous = previous()?;
    let take = Take::WithHoles { node_bytes };
    let mut memo = HashMap::new();
    for level in (1..=top).rev() {
        let Some(taken) = children_at(nodes, &mut memo, (level, take), t) else {
            continue;
        };
        let tops = taken.0.iter().map(|c| c.at);
        if all_under(nodes, tops, level, (&previous, t.root.generation)) {
            return Some(chosen(taken, level));
        }
    }
    None
}

/// Every node of the previous checkpoint's tree (`t.previous`), its leaves as their
/// parents name them, if every internal node of it reads and checks (`None` otherwise, or
/// when the root names no previous tree). A node of `t`'s tree older than its root is one
/// of them (copy on write: a checkpoint shares what it did not change); a stale node, one
/// a checkpoint before freed, is not. The previous tree's replaced nodes are held until
/// the next checkpoint (the root's retired chain), so it reads whole.
fn previous_nodes(io: &mut VolIo<'_>, t: &TreeRoot) -> Option<HashSet<NodeRef>> {
    let (root, _) = t.previous?;
    let mut out = HashSet::new();
    let mut stack = vec![(root, None)];
    while let Some((at, level)) = stack.pop() {
        if !out.insert(at) || level == Some(0) {
            continue;
        }
        let d = io.read(at).ok()?;
        if level.is_some_and(|l| l != d.level) {
            return None;
        }
        if d.level > 0 {
            let children = node::decode_children(&d, at.generation).ok()?;
            stack.extend(children.iter().map(|c| (c.at, Some(d.level - 1))));
        }
    }
    // The root, and each node under it once.
    debug_assert!(out.contains(&root));
    Some(out)
}

/// The nodes of `level` a root made again names (see the module documentation), if what
/// they hold counts what `t`'s lost root counted, and the holes under them. With
/// [`Take::WithHoles`] the entries found and one for each hole are at most as many as the
/// root counted (the rest were the holes'), at least one hole, and every node found at
/// `level` or below lies under a node taken: a node left out (a stale one in a block
/// handed out again, or one under a node of `level` lost too) would say that a range is
/// missing or doubled, which the count can no longer tell. (The nodes above `level` are
/// those a root made lower leaves to the bitmaps' rebuild.)
fn children_at(
    nodes: &HashMap<u64, Node>,
    memo: &mut HashMap<u64, Option<Sum>>,
    (level, take): (u8, Take),
    t: &TreeRoot,
) -> Option<(Vec<ChildRef>, u64)> {
    let mut taken: Vec<(NodeRef, Sum)> = (nodes.values())
        .filter(|n| n.level == level)
        .filter_map(|n| Some((n.at, sum_of(nodes, memo, (n.at, level), take)?)))
        .collect();
    taken.sort_by_key(|(at, _)| (std::cmp::Reverse(at.generation), at.block));
    // Newest first; each one whose keys overlap none taken before (by least key).
    let mut spans: BTreeMap<u64, (u64, NodeRef, Sum)> = BTreeMap::new();
    for (at, s) in taken {
        let before = spans.range(..=s.hi).next_back();
        if before.is_none_or(|(_, (hi, _, _))| *hi < s.lo) {
            spans.insert(s.lo, (s.hi, at, s));
        }
    }
    let count = spans.values().map(|(_, _, s)| s.count).sum::<u64>();
    let holes = spans.values().map(|(_, _, s)| s.holes).sum::<u64>();
    let newest = (spans.values()).any(|(_, at, _)| at.generation == t.root.generation);
    let room = spans
        .values()
        .map(|(_, _, s)| s.room)
        .fold(0, u64::saturating_add);
    let counts = match take {
        Take::Whole => count == t.count,
        // What the holes held: at least an entry each, at most what they had room for.
        Take::WithHoles { .. } => {
            holes > 0
                && count.checked_add(holes).is_some_and(|c| c <= t.count)
                && t.count - count <= room
        }
    };
    if !counts || !newest {
        return None;
    }
    let children: Vec<ChildRef> = spans
        .values()
        .map(|&(_, at, s)| ChildRef {
            first: s.lo,
            at,
            marks: s.marks,
        })
        .collect();
    // In key order, disjoint; as many entries as the root counted, or holes for the rest.
    debug_assert!(children.windows(2).all(|w| w[0].first < w[1].first));
    debug_assert!((take == Take::Whole) == (holes == 0) && holes <= room);
    Some((children, holes))
}

/// Every node in `nodes` at `level` or below lies under one of `taken` (nodes of `level`;
/// a hole names no node found), and every node under them, a hole too, older than `g`
/// (the lost root's generation) is one of `previous` (the previous checkpoint's tree:
/// [`previous_nodes`]).
fn all_under(
    nodes: &HashMap<u64, Node>,
    taken: impl Iterator<Item = NodeRef>,
    level: u8,
    (previous, g): (&HashSet<NodeRef>, u64),
) -> bool {
    let mut under = HashSet::new();
    let mut stack: Vec<NodeRef> = taken.collect();
    while let Some(at) = stack.pop() {
        if at.generation < g && !previous.contains(&at) {
            return false; // stale, or named by a stale node
        }
        let Some(n) = nodes.get(&at.block).filter(|n| n.at == at) else {
            continue; // a hole
        };
        if under.insert(at.block) {
            stack.extend(n.children.iter().map(|c| c.at));
        }
    }
    let below = nodes.values().filter(|n| n.level <= level).count();
    // Only nodes found are counted, each at `level` or below.
    debug_assert!(under.len() <= below);
    under.len() == below
}

/// Every whole node in the blocks the bitmaps mark used, by block: vouched for by `t`'s
/// stamp, no newer than its root, held by the allocator (and not in a group held corrupt,
/// found so when its bitmap was read: that bitmap cannot say which of the group's nodes
/// are held, and every node ever freed there would pass for one), neither the root's
/// block nor a `retired` one. And the blocks read.
fn scan(
    store: &Store,
    dev: &dyn Device,
    t: &TreeRoot,
    (retired, scans): (&[Extent], &NodeScans<'_>),
) -> Result<(HashMap<u64, Node>, Tally)> {
    let (kinds, to_read) = used_to_read(store)?;
    let mut nodes = HashMap::new();
    let mut tally = Tally {
        to_read,
        ..Tally::default()
    };
    let corrupt = store.corrupt_groups();
    scans.pass((store, dev), (false, &kinds), &mut tally, &mut |at, d| {
        if let Some(node) = noted(store, (t, retired, &corrupt), (at, d)) {
            nodes.insert(node.at.block, node);
        }
    })?;
    // Every block counted read, as the progress callback was told.
    debug_assert_eq!(tally.read, to_read, "every used block read");
    Ok((nodes, tally))
}

/// The whole node `at` (`d`, its bytes decoded) as [`scan`] notes it, if it does
/// (`corrupt`: the groups held corrupt).
fn noted(
    store: &Store,
    (t, retired, corrupt): (&TreeRoot, &[Extent], &[u64]),
    (at, d): (NodeRef, node::Decoded),
) -> Option<Node> {
    let nb = node::node_blocks(u64::from(store.geometry().block_size));
    let block = at.block;
    let ours = t.stamp.is_none_or(|s| s.vouches(d.stamp, at.generation));
    let place = Extent::new(block, nb);
    if corrupt.contains(&store.geometry().group_of(block))
        || !ours
        || at.generation > t.root.generation
        || block == t.root.block
        || retired
            .iter()
            .any(|r| r.start < place.end() && place.start < r.end())
        || store.allocator().check_held(place).is_err()
    {
        return None;
    }
    let node = match d.level {
        0 => Node {
            at,
            level: 0,
            leaf: Some(leaf_sum(&d.payload)?),
            children: Vec::new(),
        },
        level => Node {
            at,
            level,
            leaf: None,
            children: node::decode_children(&d, at.generation).ok()?,
        },
    };
    // A node noted is the one found, no newer than the root, of this volume.
    debug_assert!(node.at.block == block && node.at.generation <= t.root.generation);
    Some(node)
}

/// A leaf's keys, count and marks; `None` for an empty leaf (only a root is) or one whose
/// frames do not read.
fn leaf_sum(payload: &[u8]) -> Option<Sum> {
    let items = super::tree::leaf_items(payload).ok()?;
    let (&lo, &hi) = (items.keys().next()?, items.keys().next_back()?);
    let marks = (items.values()).fold(0, |m, b| m | super::table::entry_marks(b));
    Some(Sum {
        lo,
        hi,
        count: items.len() as u64,
        marks,
        holes: 0,
        room: 0,
    })
}

/// What the subtree of the node `at` (of `level`) holds, if it was found whole (with
/// [`Take::WithHoles`], or with holes where a node it names was found nowhere): the node
/// noted at that block with that generation and level, and under an internal one each
/// child's subtree found so, its keys inside the range the node routes to it, its marks
/// no more than the node names. Memoized by block (a memo serves one way of taking).
fn sum_of(
    nodes: &HashMap<u64, Node>,
    memo: &mut HashMap<u64, Option<Sum>>,
    (at, level): (NodeRef, u8),
    take: Take,
) -> Option<Sum> {
    if let Some(&s) = memo.get(&at.block) {
        return s.filter(|_| {
            nodes
                .get(&at.block)
                .is_some_and(|n| n.at == at && n.level == level)
        });
    }
    let n = nodes
        .get(&at.block)
        .filter(|n| n.at == at && n.level == level)?;
    let s = match n.leaf {
        Some(s) => Some(s),
        None => children_sum(nodes, memo, (&n.children, level), take),
    };
    // A subtree found holds keys, in order, or holes where they were.
    debug_assert!(s.is_none_or(|s| s.lo <= s.hi && s.count + s.holes > 0));
    debug_assert!(s.is_none_or(|s| take != Take::Whole || s.holes == 0));
    memo.insert(at.block, s);
    s
}

/// What the children of an internal node of `level` hold together (see [`sum_of`]).
fn children_sum(
    nodes: &HashMap<u64, Node>,
    memo: &mut HashMap<u64, Option<Sum>>,
    (children, level): (&[ChildRef], u8),
    take: Take,
) -> Option<Sum> {
    let mut total: Option<Sum> = None;
    for (i, c) in children.iter().enumerate() {
        let below = level.checked_sub(1)?;
        let s = match take {
            // Found nowhere: its least key and marks as the node names them, its entries
            // unknown.
            Take::WithHoles { node_bytes } if !nodes.contains_key(&c.at.block) => Sum {
                lo: c.first,
                hi: c.first,
                count: 0,
                marks: c.marks,
                holes: 1,
                room: room(below, node_bytes),
            },
            _ => sum_of(nodes, memo, (c.at, below), take)?,
        };
        let inside = (i == 0 || s.lo >= c.first)
            && children.get(i + 1).is_none_or(|next| s.hi < next.first)
            && total.is_none_or(|t| t.hi < s.lo);
        if !inside || s.marks & !c.marks != 0 {
            return None;
        }
        total = Some(match total {
            None => Sum {
                marks: c.marks,
                ..s
            },
            Some(t) => Sum {
                lo: t.lo,
                hi: s.hi,
                count: t.count.checked_add(s.count)?,
                marks: t.marks | c.marks,
                holes: t.holes + s.holes,
                room: t.room.saturating_add(s.room),
            },
        });
    }
    // At least an entry or a hole per child, its keys in order.
    debug_assert!(total.is_none_or(|t| t.lo <= t.hi && t.count + t.holes >= children.len() as u64));
    total
}

#[cfg(test)]
#[path = "rootfind_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "rootfind_holes_tests.rs"]
mod holes_tests;
