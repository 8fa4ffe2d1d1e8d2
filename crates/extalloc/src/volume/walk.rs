//! Reading a durable file tree (`tree.rs`) whole, going on past damage ([`walk`]): an
//! open whose root does not say what its leaves hold (a root older than version 6 whose
//! leaves hold maps outside the tree or pending files) reads every leaf, and the salvage
//! scans the payload of each leaf that failed its check (`treeio.rs`); any other open reads
//! the internal nodes and only the leaves whose marks say they hold what it needs
//! ([`walk_marked`]). Every node is read through `node::checked`, so a whole node of
//! another volume (one that names the expected block and generation but carries another
//! stamp) is damage; a leaf of another volume gives nothing (its keys are lost, for the
//! salvage's scan), where a damaged leaf of this one gives its frames that check.
//!
//! Data structures: [`Walked`] (the leaves read in key order, each a [`WalkLeaf`]; the
//! internal nodes lost, each a [`LostNode`]; the tree, if whole). Invariant: levels fall by one from parent to
//! child, so a walk ends whatever the bytes say; a leaf read has the marks of its entries
//! (the slot's, whatever its parent said). Locks: none.

use super::node::{self, NodeRef};
use super::tree::{Mem, NodeIo, Slot, Tree};
use crate::error::Result;

/// One leaf a walk found, in key order.
#[derive(Debug, Clone)]
pub(super) struct WalkLeaf {
    pub at: NodeRef,
    /// The keys its parent routes to it: `lo ..` up to `hi` (exclusive; `None`: no end).
    pub keys: (u64, Option<u64>),
    /// Its frames: the checked payload, or, for a leaf that failed, the bytes where its
    /// payload would be (for the salvage to scan).
    pub payload: Vec<u8>,
    pub checked: bool,
    /// It failed as a whole node of another place or checkpoint (`node::is_stale`): its
    /// frames are older contents, not this leaf's.
    pub stale: bool,
}

/// An internal node a walk could not read (or whose children did not check).
#[derive(Debug, Clone)]
pub(super) struct LostNode {
    /// Where its parent names it, and the generation it names: no node under it is newer.
    pub at: NodeRef,
    /// The keys its parent routes to it: `lo ..` up to `hi` (exclusive; `None`: no end).
    pub keys: (u64, Option<u64>),
    /// Why it failed.
    pub why: String,
    /// Its level and marks as its parent names them (`None`: the root).
    pub said: Option<(u8, u8)>,
}

impl LostNode {
    /// An internal node under the root, so a tree that lost only such nodes can be opened
    /// for repair with holes in their place ([`Walked::partial`]). A map outside the tree
    /// under it is missing from the open's accounts of map segments until the mend keeps
    /// its file and holds it (`leafkeep.rs`, `Keeper::settle`); no checkpoint
    /// runs before the mend. A pending file under it is not found by the open, which
    /// removes pending files; the mend does not keep it either (its blocks, owned by no
    /// one, are freed by the bitmaps' rebuild), which is the same end.
    fn mendable(&self) -> bool {
        self.said.is_some_and(|(level, _)| level > 0)
    }
}

/// What [`walk`] read of a durable tree.
#[derive(Debug, Default)]
pub(super) struct Walked {
    pub leaves: Vec<WalkLeaf>,
    /// Internal nodes that failed (read or check): the entries under them are lost to the
    /// walk (the salvage looks for their leaves on the device: `nodescan.rs`).
    pub lost: Vec<LostNode>,
    /// Every node read whose check passed (a failed leaf's place too: it is the tree's).
    pub nodes: Vec<NodeRef>,
    /// The tree, to change by later checkpoints: only if every node checked.
    pub tree: Option<Tree>,
    /// A marked walk's tree with holes where it lost internal nodes, when every lost node
    /// is an internal one under the root ([`LostNode::mendable`]) and every marked leaf
    /// but the root checked or failed as a leaf (left in place): for a repair, which
    /// mends the holes and the failed leaves before anything else
    /// (`leafrepair.rs`); no checkpoint writes a tree with holes ([`Tree::holes`]).
    pub partial: Option<Tree>,
}

/// Which leaves a walk reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leaves {
    /// Every one.
    All,
    /// Those whose marks (as their parents name them) are set.
    Marked,
}

/// Reads the durable tree whose root is `root` (of `count` keys): every node, the leaves
/// in key order, going on past damage (see [`Walked`]). Fails only if the root itself
/// cannot be read as a node.
pub(super) fn walk(io: &mut dyn NodeIo, root: NodeRef, size: usize, count: u64) -> Result<Walked> {
    walk_with(io, (root, size, count), Leaves::All)
}

/// [`walk`] reading the internal nodes and the leaves whose marks are set: any other leaf
/// is taken as its parent names it, unread (in `nodes`, not in `leaves`), for an open that
/// needs only the marked entries (`load.rs`); a damaged leaf is then found when a call
/// reads it. A root that is a leaf is read. Trusts the marks: only for a tree whose root
/// says they are whole (`TreeRoot::marks_whole`).
pub(super) fn walk_marked(
    io: &mut dyn NodeIo,
    root: NodeRef,
    size: usize,
    count: u64,
) -> Result<Walked> {
    walk_with(io, (root, size, count), Leaves::Marked)
}

/// [`walk_marked`] under a root made again in memory over `children` (`rootfind.rs`: the
/// durable root was lost), at `level`: a tree if every node under it checks and its
/// marks hold; else, if its marks hold and every node lost is an internal one or a leaf
/// that failed as a leaf (a node found nowhere where a child names it: `rootfind.rs`'s
/// holes), a partial tree for a repair to mend, as [`walk_marked`] gives one. Its root is
/// changed, with no place yet, for the next checkpoint to write.
pub(super) fn walk_marked_under(
    io: &mut dyn NodeIo,
    (level, children): (u8, &[node::ChildRef]),
    size: usize,
    count: u64,
) -> Result<Walked> {
    assert!(
        level > 0 && !children.is_empty(),
        "a root made again over children"
    );
    let mut w = Walked::default();
    let mut stale = false;
    let leaves = (Leaves::Marked, &mut stale);
    let slots = walk_children(io, (level, children), (0, None), leaves, &mut w)?;
    let root = Slot::internal(level, slots);
    if !stale && w.lost.is_empty() && w.leaves.iter().all(|l| l.checked) {
        w.tree = Some(Tree::under_new_root(root, size, count, 0));
    } else if !stale && w.lost.iter().all(LostNode::mendable) {
        // Marked leaves that failed stay in the tree as their parents name them, for the
        // mend to find (it reads every leaf).
        w.partial = Some(Tree::under_new_root(root, size, count, w.lost.len()));
    }
    // A whole tree under the new root, a partial one with a hole per node lost, or none.
    debug_assert!(w.tree.is_none() || w.lost.is_empty());
    debug_assert!(w.partial.as_ref().is_none_or(|t| t.holes() == w.lost.len()));
    Ok(w)
}

fn walk_with(
    io: &mut dyn NodeIo,
    (root, size, count): (NodeRef, usize, u64),
    leaves: Leaves,
) -> Result<Walked> {
    let mut w = Walked::default();
    let mut stale = false;
    let slot = walk_node(
        io,
        (root, None),
        (0, (0, None)),
        (leaves, &mut stale),
        &mut w,
    )?;
    // A marked walk that finds a leaf holding more than its parent said cannot trust the
    // marks of the leaves it did not read: it gives no tree (the open reads every leaf).
    let trusted = leaves == Leaves::All || !stale;
    // Each leaf read is one of the tree's nodes.
    debug_assert!(
        w.nodes.len() >= w.leaves.len(),
        "{} leaves of {} nodes",
        w.leaves.len(),
        w.nodes.len()
    );
    let checked = w.leaves.iter().all(|l| l.checked);
    if checked && trusted && w.lost.is_empty() {
        w.tree = Some(Tree::from_root(slot, size, count, stale));
    } else if trusted
        && leaves == Leaves::Marked
        && w.lost.iter().all(LostNode::mendable)
        && w.leaves.iter().all(|l| l.checked || l.at != root)
    {
        // Marked leaves that failed stay in the tree as their parents name them, for the
        // mend to find (it reads every leaf).
        w.partial = Some(match w.lost.len() {
            0 => Tree::from_root(slot, size, count, false),
            holes => Tree::with_holes(slot, size, count, holes),
        });
    }
    // A tree with holes only where internal nodes under the root were lost; a whole one
    // without.
    debug_assert!(w.partial.as_ref().is_none_or(|t| t.holes() == w.lost.len()));
    debug_assert!(w.tree.is_none() || w.lost.is_empty());
    Ok(w)
}

/// The marks of a leaf's checked payload: those of its entries (`table::entry_marks`).
fn leaf_marks(payload: &[u8]) -> u8 {
    match super::table::frames(payload) {
        Ok(bodies) => bodies
            .iter()
            .fold(0, |m, b| m | super::table::entry_marks(b)),
        Err(_) => node::MARK_MAPS | node::MARK_PENDING,
    }
}

/// Reads node `at` (of level `level` and with the marks `said`, if its parent says; named
/// by key `first`, the keys `keys` routed to it) and what is under it; sets `stale` if
/// the marks read fall short of those found. A root that fails its check is taken as a
/// damaged leaf unless it still reads as an internal node (then the whole tree is lost:
/// an error).
fn walk_node(
    io: &mut dyn NodeIo,
    (at, said): (NodeRef, Option<(u8, u8)>),
    (first, keys): (u64, (u64, Option<u64>)),
    (leaves, stale): (Leaves, &mut bool),
    w: &mut Walked,
) -> Result<Slot> {
    let level = said.map(|(l, _)| l);
    if let Some((0, 0)) = said.filter(|_| leaves == Leaves::Marked) {
        w.nodes.push(at); // the tree's, as its parent names it
        return Ok(Slot::durable(first, at, 0, None));
    }
    let raw = io.read_raw(at.block);
    let stamp = io.stamp();
    let checked = raw.as_ref().map_err(Clone::clone).and_then(|b| {
        let d = node::checked(b, at, stamp)?;
        match level.is_some_and(|l| l != d.level) {
            true => Err(super::record::corrupt("a tree node of the wrong level")),
            false => Ok(d),
        }
    });
    let d = match checked {
        Ok(d) => d,
        Err(e) => {
            let foreign = raw.as_ref().is_ok_and(|b| node::is_foreign(b, stamp));
            return walk_failed((raw, foreign), at, said, (first, keys), e, w);
        }
    };
    w.nodes.push(at);
    let short = |found: u8| said.is_some_and(|(_, s)| found & !s != 0);
    if d.level == 0 {
        let marks = leaf_marks(&d.payload);
        *stale |= short(marks);
        w.leaves.push(WalkLeaf {
            at,
            keys,
            payload: d.payload,
            checked: true,
            stale: false,
        });
        return Ok(Slot::durable(first, at, marks, None));
    }
    let children = match node::decode_children(&d, at.generation) {
        Ok(c) => c,
        Err(e) => {
            w.lost.push(LostNode {
                at,
                keys,
                why: e.to_string(),
                said,
            });
            return Ok(Slot::durable(first, at, said_marks(said), None));
        }
    };
    let slots = walk_children(io, (d.level, &children), keys, (leaves, &mut *stale), w)?;
    debug_assert_eq!(slots.len(), children.len(), "a slot per child");
    let marks = slots.iter().fold(0, |m, s| m | s.marks());
    *stale |= short(marks);
    let mem = Mem::Internal {
        level: d.level,
        children: slots,
    };
    Ok(Slot::durable(first, at, marks, Some(mem)))
}

/// Walks the `children` of an internal node of `level` (routed the keys `keys`) and what
/// is under each, in key order.
fn walk_children(
    io: &mut dyn NodeIo,
    (level, children): (u8, &[node::ChildRef]),
    keys: (u64, Option<u64>),
    (leaves, stale): (Leaves, &mut bool),
    w: &mut Walked,
) -> Result<Vec<Slot>> {
    let mut slots = Vec::with_capacity(children.len());
    for (i, c) in children.iter().enumerate() {
        let lo = if i == 0 { keys.0 } else { c.first };
        let hi = children.get(i + 1).map(|n| n.first).or(keys.1);
        slots.push(walk_node(
            io,
            (c.at, Some((level - 1, c.marks))),
            (c.first, (lo, hi)),
            (leaves, &mut *stale),
            w,
        )?);
    }
    // Every child walked, in key order.
    debug_assert!(slots.windows(2).all(|p| p[0].first() < p[1].first()));
    Ok(slots)
}

/// A node that failed its check (`raw`: its bytes, if they read): a leaf's payload kept
/// for the salvage to scan, an internal node's subtree lost. A root that is no leaf fails
/// the walk. A whole node of another volume (`foreign`: a former volume's where this
/// one's lies) gives nothing: its keys are lost to the walk, for the salvage's scan to
/// find this volume's copies.
fn walk_failed(
    (raw, foreign): (Result<Vec<u8>>, bool),
    at: NodeRef,
    said: Option<(u8, u8)>,
    (first, keys): (u64, (u64, Option<u64>)),
    e: crate::error::Error,
    w: &mut Walked,
) -> Result<Slot> {
    let level = said.map(|(l, _)| l);
    let leaf = match level {
        Some(l) => l == 0,
        None => raw
            .as_ref()
            .is_ok_and(|b| !node::leaf_payload_unchecked(b).is_empty()),
    };
    if level.is_none() && !leaf && !foreign {
        return Err(e);
    }
    if foreign {
        w.lost.push(LostNode {
            at,
            keys,
            why: e.to_string(),
            said,
        });
        w.nodes.push(at); // the tree's place, as its parent (or the root) names it
        return Ok(Slot::durable(first, at, said_marks(said), None));
    }
    let unknown = |b: &Vec<u8>| !node::has_magic(b) || node::is_stale(b, at);
    if leaf && level.is_none() && raw.as_ref().map_or(true, unknown) {
        // A root with no node's magic (zeroed, overwritten), or a stale leaf where it lies,
        // may stand for an internal node: its bytes are scanned as a leaf's, and every key
        // is lost to the walk (the salvage's scan finds the leaves).
        w.lost.push(LostNode {
            at,
            keys,
            why: e.to_string(),
            said,
        });
    }
    if leaf {
        let stale = raw.as_ref().is_ok_and(|b| node::is_stale(b, at));
        let payload = raw.map(|b| node::leaf_payload_unchecked(&b).to_vec());
        w.leaves.push(WalkLeaf {
            at,
            keys,
            payload: payload.unwrap_or_default(),
            checked: false,
            stale,
        });
        w.nodes.push(at);
    } else {
        w.lost.push(LostNode {
            at,
            keys,
            why: e.to_string(),
            said,
        });
    }
    debug_assert!(w.leaves.last().is_some_and(|l| l.at == at) || !w.lost.is_empty());
    Ok(Slot::durable(first, at, said_marks(said), None))
}

/// The marks a node's parent names it with (0 for the root): a node that failed keeps
/// them, so its parent's marks do not look short of its children's (which would make the
/// walk distrust every mark).
fn said_marks(said: Option<(u8, u8)>) -> u8 {
    said.map_or(0, |(_, marks)| marks)
}
