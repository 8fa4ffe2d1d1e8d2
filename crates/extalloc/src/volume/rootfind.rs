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
//! gives the holes to the mend (`leafrepair.rs`) as under an intact root. If no level holds
//! what was found with holes either (the root lost with nodes under it that nothing found
//! names: the whole path its checkpoint wrote, or an older child and a leaf under it), the
//! root is made over the leaves by the previous checkpoint's tree (`rootleaves.rs`): the
//! older leaves it names are taken, those it names and no block holds are holes, and the
//! ranges the lost checkpoint rewrote, or under that tree's nodes that did not read, are
//! left to the mend's scan (their entries judged as the salvage's are). Else (no previous
//! tree to read, a group held corrupt, leaves that overlap or count more than the root)
//! the salvage runs as before. A root over more children than a node holds
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
//! root in the previous tree; over the leaves, every child one the previous tree names,
//! not replaced, and no more entries than the root counted. Locks: none
//! (the volume is not shared yet).

use super::node::{self, ChildRef, NodeRef};
use super::root::{RootFound, TreeRoot};
use super::scanread::NodeScans;
use super::state::Meta;
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
    /// for the mend to rebuild (0 when every subtree was found whole); over the leaves
    /// ([`leaves::from_leaves`]), the previous tree's leaves found nowhere.
    pub holes: u64,
    /// Made over the leaves by the previous checkpoint's tree ([`leaves::from_leaves`]).
    pub from_leaves: bool,
    /// Made over the leaves: the key ranges under previous nodes that did not read, for
    /// the mend to scan the device for, each with the node that did not read there.
    pub scans: Vec<(leaves::Keys, NodeRef)>,
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
        from_leaves: f.from_leaves,
        scanned: (f.scans.iter())
            .map(|(keys, at)| (*keys, (at.block, at.generation)))
            .collect(),
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
    let block_size = u64::from(store.geometry().block_size);
    let (node_bytes, nb) = (node::node_bytes(block_size), node::node_blocks(block_size));
    let previous = || leaves::previous_tree(io, t);
    // Over the leaves, a group held corrupt hides which of its leaves the lost checkpoint
    // wrote (none is noted there): their ranges would be restored older, where the
    // salvage's scan finds them.
    let retired = store.corrupt_groups().is_empty().then_some(retired);
    let found = choose(&nodes, t, (node_bytes, previous), (retired, nb)).map(|c| Found {
        children: c.children,
        level: c.level + 1,
        levels_down: c.top - c.level,
        blocks_read: tally.read,
        blocks_unreadable: tally.unreadable,
        nodes_found: nodes.len() as u64,
        holes: c.holes,
        from_leaves: c.from_leaves,
        scans: c.scans,
    });
    // A root over children; one with holes over internal nodes (a hole is a child one
    // names), or over the leaves by the previous tree (its lost leaves the holes).
    debug_assert!(found.as_ref().is_none_or(|f| !f.children.is_empty()
        && (f.from_leaves || f.level > u8::from(f.holes > 0))
        && (f.from_leaves || f.scans.is_empty())));
    Ok(found)
}

/// The children [`choose`] takes: their level, the highest below the lost root's that
/// carries its generation (`top`; 0 over the leaves when none but the root did), the
/// holes under them, and whether they are the leaves by the previous tree, with the
/// ranges for the mend to scan for
/// ([`leaves::from_leaves`]).
#[derive(Debug)]
struct Chosen {
    children: Vec<ChildRef>,
    level: u8,
    top: u8,
    holes: u64,
    from_leaves: bool,
    scans: Vec<(leaves::Keys, NodeRef)>,
}

/// The children of a root made again over the `nodes` found (see the module
/// documentation) for `t`'s lost root, if any count what it counted; with holes (in nodes
/// of `node_bytes`), only over nodes the previous checkpoint's tree names when older than
/// the root (`previous`, read only then: [`leaves::previous_tree`]); else over the leaves
/// by the previous tree (`retired`: the blocks the root's chain lists, `None` to make no
/// root that way; nodes of `nb` blocks: [`leaves::from_leaves`]).
fn choose(
    nodes: &HashMap<u64, Node>,
    t: &TreeRoot,
    (node_bytes, previous): (usize, impl FnOnce() -> Option<leaves::Previous>),
    (retired, nb): (Option<&[Extent]>, u64),
) -> Option<Chosen> {
    let g = t.root.generation;
    // The children's level: the highest below the root's that carries its generation.
    let top = (nodes.values())
        .filter(|n| n.at.generation == g)
        .map(|n| n.level)
        .max();
    if top.is_some_and(|top| top >= node::MAX_LEVEL) {
        return None; // no tree is that tall
    }
    if let Some(c) = top.and_then(|top| by_levels(nodes, t, top)) {
        return Some(c);
    }
    // A node lost under a child: each level with holes in its place, if every node found
    // at it or below lies under what is taken, and every node under what is taken (a
    // hole too) older than the root is one the previous tree names.
    let previous = previous()?;
    if let Some(top) = top {
        let take = Take::WithHoles { node_bytes };
        let mut memo = HashMap::new();
        for level in (1..=top).rev() {
            let Some((children, holes)) = children_at(nodes, &mut memo, (level, take), t) else {
                continue;
            };
            let tops = children.iter().map(|c| c.at);
            if all_under(nodes, tops, level, (&previous.nodes, g)) {
                let (from_leaves, scans) = (false, Vec::new());
                return Some(Chosen {
                    children,
                    level,
                    top,
                    holes,
                    from_leaves,
                    scans,
                });
            }
        }
    }
    // No level of subtrees holds what was found: the leaves, by the previous tree.
    let f = leaves::from_leaves(nodes, t, (&previous, retired?, nb))?;
    Some(Chosen {
        children: f.children,
        level: 0,
        top: top.unwrap_or(0),
        holes: f.lost,
        from_leaves: true,
        scans: f.scans,
    })
}

/// [`choose`]'s first way: the highest level from `top` (the highest below the lost
/// root's that carries its generation) down to the leaves whose whole subtrees count what
/// the root counted (a child lost too, or its generation's: the level below it).
fn by_levels(nodes: &HashMap<u64, Node>, t: &TreeRoot, top: u8) -> Option<Chosen> {
    let mut memo = HashMap::new();
    (0..=top).rev().find_map(|level| {
        let (children, holes) = children_at(nodes, &mut memo, (level, Take::Whole), t)?;
        Some(Chosen {
            children,
            level,
            top,
            holes,
            from_leaves: false,
            scans: Vec::new(),
        })
    })
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
/// [`leaves::previous_tree`]).
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

#[path = "rootleaves.rs"]
mod leaves;

#[path = "rootnotes.rs"]
mod notes;
use notes::scan;

#[cfg(test)]
#[path = "rootfind_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "rootfind_holes_tests.rs"]
mod holes_tests;

#[cfg(test)]
#[path = "rootleaves_tests.rs"]
mod leaves_tests;
