//! The last way a repair's open makes a lost root of the file tree again ([`from_leaves`],
//! tried by `rootfind.rs` when no level of whole subtrees counts, with holes or without):
//! over the leaves found, each one the previous checkpoint's tree says is the tree's.
//!
//! Copy on write says which leaves the lost root's tree has without any node of it: those
//! its checkpoint (generation `g`) wrote, and the previous checkpoint's leaves that the
//! checkpoint did not replace (it shares what it did not change; what it replaced its
//! chain lists, `retired`). The previous tree is read through its internal nodes (one
//! that does not read is noted with the keys its parent routes to it). A leaf found that
//! the previous tree names, not replaced, is taken as it is (a stale leaf, in a block a
//! checkpoint freed and someone was handed again, is not named); one it names, not
//! replaced, and found nowhere is named under the new root as the previous tree named it,
//! for the mend (`leafrepair.rs`) to rebuild as any leaf that does not read. The lost
//! checkpoint's own leaves are not taken as they are (a stale leaf carrying `g`, from a
//! checkpoint cut short whose blocks were handed out again and not written, would pass
//! for one): the key ranges of the leaves it replaced, where its leaves lie, and those
//! under the previous tree's nodes that did not read, are left to the mend's scan of the
//! device (`nodescan.rs`, as under a lost internal node): the newest copy of each key, each
//! entry kept only if its map survived, as the salvage judges them. Memory: the previous
//! tree's leaves as routed, and the entries of the ranges scanned (what one checkpoint
//! rewrote, what lay under a lost node), never every file. This needs no internal node of
//! the lost tree at all: a root lost with the whole path under it (a checkpoint writes a
//! path's nodes close together, so one failing region takes them all) is made again here,
//! where the levels of subtrees cannot be (a level's orphans lie under no node found).
//!
//! The root stands only if the children's key ranges are disjoint, the entries in the
//! leaves taken are no more than the lost root counted, and, if fewer, something is lost
//! to account for them (a leaf named, or a range to scan); no leaf taken means no root.
//! The new root is of level 1, over every leaf; the checkpoint's settle (`Tree::settle`)
//! builds the levels above them.
//!
//! Data structures: [`Previous`] (the previous tree's nodes, its leaves as routed, its
//! nodes that did not read), [`FromLeaves`]. Invariant: the children are in key order,
//! each leaf's keys below the next child's least key, each one the previous tree names;
//! every range scanned for lies outside every child's. Locks: none (the volume is not
//! shared yet).

use super::{Node, NodeRef};
use crate::geometry::Extent;
use std::collections::{HashMap, HashSet};

use super::super::node::{self, ChildRef};
use super::super::root::TreeRoot;
use super::super::tree::NodeIo;
use super::super::treeio::VolIo;

/// A key range: `lo ..` up to `hi` (exclusive; `None`: no end).
pub(in crate::volume) type Keys = (u64, Option<u64>);

/// The previous checkpoint's tree, read through its internal nodes.
#[derive(Debug, Default, Clone)]
pub(super) struct Previous {
    /// Every node of it, its leaves as their parents name them.
    pub nodes: HashSet<NodeRef>,
    /// Its leaves in key order, each with the keys its parent routes to it and the marks
    /// it names.
    pub leaves: Vec<(NodeRef, Keys, u8)>,
    /// Its internal nodes below the root that did not read (lost with the root: a node
    /// older than the root's checkpoint and not replaced by it is the lost tree's too),
    /// each with the keys its parent routes to it: no leaf under one is known.
    pub unread: Vec<(NodeRef, Keys)>,
}

/// Every node of the previous checkpoint's tree (`t.previous`) that its readable internal
/// nodes name, and those that did not read ([`Previous::unread`]); `None` when its root
/// does not read or the root names no previous tree. A node of `t`'s tree older than its
/// root is one of them (copy on write: a checkpoint shares what it did not change); a
/// stale node, one a checkpoint before freed, is not. The previous tree's replaced nodes
/// are held until the next checkpoint (the root's retired chain), so only damage keeps
/// one from reading.
pub(super) fn previous_tree(io: &mut VolIo<'_>, t: &TreeRoot) -> Option<Previous> {
    let (root, _) = t.previous?;
    let mut out = Previous::default();
    // Depth first, the first child on top: leaves come in key order.
    let mut stack = vec![(root, None, (0u64, None::<u64>), 0u8)];
    while let Some((at, level, keys, marks)) = stack.pop() {
        if !out.nodes.insert(at) {
            return None; // a node named twice: no tree
        }
        if level == Some(0) {
            out.leaves.push((at, keys, marks));
            continue;
        }
        let d = match (io.read(at), level) {
            (Ok(d), Some(l)) if d.level != l => None,
            (Ok(d), _) => Some(d),
            (Err(_), _) => None,
        };
        let Some(d) = d else {
            level?; // the root itself: no tree
            out.unread.push((at, keys));
            continue;
        };
        if d.level == 0 {
            // A tree of one leaf: its root.
            out.leaves.push((at, keys, marks));
            continue;
        }
        let Ok(children) = node::decode_children(&d, at.generation) else {
            level?;
            out.unread.push((at, keys));
            continue;
        };
        for (i, c) in children.iter().enumerate().rev() {
            let lo = if i == 0 { keys.0 } else { c.first };
            let hi = children.get(i + 1).map(|n| n.first).or(keys.1);
            stack.push((c.at, Some(d.level - 1), (lo, hi), c.marks));
        }
    }
    // The root, and each node under it once; its leaves in key order, their ranges
    // meeting end to start.
    debug_assert!(out.nodes.contains(&root));
    debug_assert!(
        !out.unread.is_empty() || out.leaves.windows(2).all(|w| w[0].1 .1 == Some(w[1].1 .0))
    );
    Some(out)
}

/// The root [`from_leaves`] makes: its children (leaves), how many of them were found
/// nowhere, and the key ranges for the mend to scan the device for
/// (each with the node lost there, or the lost root for a range its checkpoint rewrote).
#[derive(Debug)]
pub(super) struct FromLeaves {
    pub children: Vec<ChildRef>,
    pub lost: u64,
    pub scans: Vec<(Keys, NodeRef)>,
}

/// The root of `t`, lost, made again over the leaves in `nodes` that `previous` says are
/// its tree's, with the ranges its checkpoint rewrote, and those under the previous
/// tree's nodes that did not read, left for the mend to scan for (see the module
/// documentation); `retired`: the blocks the root's chain lists (the previous nodes its
/// checkpoint replaced), each node `nb` blocks. `None` when no leaf is left to take, the
/// leaves overlap, hold more than the root counted, or hold fewer with nothing lost to
/// account for it.
pub(super) fn from_leaves(
    nodes: &HashMap<u64, Node>,
    t: &TreeRoot,
    (previous, retired, nb): (&Previous, &[Extent], u64),
) -> Option<FromLeaves> {
    let replaced = replaced_by(retired, nb);
    let mut kids: Vec<(u64, Option<u64>, ChildRef, bool)> = Vec::new();
    let mut found = 0u64;
    let mut taken = HashSet::new();
    for n in nodes.values().filter(|n| n.level == 0) {
        let s = n.leaf?;
        // The lost checkpoint's own leaves are scanned for (their entries judged): a
        // stale leaf carrying its generation would pass for one.
        if previous.nodes.contains(&n.at) && !replaced(n.at) {
            found = found.checked_add(s.count)?;
            taken.insert(n.at);
            let child = ChildRef {
                first: s.lo,
                at: n.at,
                marks: s.marks,
            };
            kids.push((s.lo, Some(s.hi), child, true));
        }
    }
    let mut scans: Vec<(Keys, NodeRef)> = Vec::new();
    for &(at, keys, marks) in &previous.leaves {
        if replaced(at) {
            scans.push((keys, t.root));
        } else if !taken.contains(&at) {
            // The tree's leaf, shared from the previous checkpoint, found nowhere.
            let child = ChildRef {
                first: keys.0,
                at,
                marks,
            };
            kids.push((keys.0, keys.1.map(|hi| hi.saturating_sub(1)), child, false));
        }
    }
    // Under a previous node that did not read, the lost checkpoint's own leaves too when
    // it replaced the node: no leaf there is newer than the root.
    let g = t.root.generation;
    let unread = (previous.unread.iter()).map(|&(at, keys)| {
        let at = NodeRef {
            block: at.block,
            generation: g,
        };
        (keys, at)
    });
    scans.extend(unread);
    kids.sort_by_key(|k| k.0);
    let scans = merged(scans, t.root);
    // Disjoint: each child's keys below the next one's least.
    let disjoint = (kids.windows(2)).all(|w| w[0].1.is_some_and(|last| last < w[1].0));
    let lost = kids.iter().filter(|k| !k.3).count() as u64;
    if kids.is_empty() || !disjoint || found > t.count {
        return None;
    }
    let scans = match found < t.count {
        true => scans,
        // Nothing missing: a scan would give back only removed files.
        false if lost == 0 => Vec::new(),
        false => return None, // a leaf of the tree lost, yet every entry found
    };
    if found < t.count && lost == 0 && scans.is_empty() {
        return None; // keys missing with nowhere they could have been
    }
    let children: Vec<ChildRef> = kids.iter().map(|k| k.2).collect();
    // In key order, a child per leaf; every range scanned for outside every child's.
    debug_assert!(children.windows(2).all(|w| w[0].first < w[1].first));
    debug_assert!(scans.iter().all(|(r, _)| kids
        .iter()
        .all(|k| r.1.is_some_and(|hi| hi <= k.0) || k.1.is_some_and(|last| last < r.0))));
    Some(FromLeaves {
        children,
        lost,
        scans,
    })
}

/// Whether a node of `nb` blocks lies in a piece of the root's chain (`retired`: the
/// previous nodes its checkpoint replaced), the pieces sorted once by start (disjoint), so
/// that a node's check is a logarithm of them, however many a bulk change retired.
fn replaced_by(retired: &[Extent], nb: u64) -> impl Fn(NodeRef) -> bool {
    let mut retired = retired.to_vec();
    retired.sort_unstable_by_key(|r| r.start);
    debug_assert!(retired.windows(2).all(|w| w[0].end() <= w[1].start));
    move |at: NodeRef| {
        let place = Extent::new(at.block, nb);
        let i = retired.partition_point(|r| r.end() <= place.start);
        retired.get(i).is_some_and(|r| r.start < place.end())
    }
}

/// `ranges` in key order with those that meet merged (named then by `root`, the newest a
/// leaf there can be): the scan checks each key against every range.
fn merged(mut ranges: Vec<(Keys, NodeRef)>, root: NodeRef) -> Vec<(Keys, NodeRef)> {
    ranges.sort_by_key(|(k, _)| k.0);
    let mut out: Vec<(Keys, NodeRef)> = Vec::new();
    for (keys, at) in ranges {
        match out.last_mut() {
            Some((last, by)) if last.1.is_some_and(|hi| hi >= keys.0) || last.1.is_none() => {
                last.1 = match (last.1, keys.1) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    _ => None,
                };
                *by = root;
            }
            _ => out.push((keys, at)),
        }
    }
    // Disjoint, in order, each holding a key.
    debug_assert!(out
        .windows(2)
        .all(|w| w[0].0 .1.is_some_and(|hi| hi < w[1].0 .0)));
    out
}
