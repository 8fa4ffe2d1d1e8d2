//! The device scan of a repair's open for a lost root of the file tree (`rootfind.rs`):
//! every whole node of this volume in the blocks the bitmaps mark used, noted in a few
//! dozen bytes (a leaf's keys, count and marks; an internal node's children), never its
//! entries.
//!
//! Data structures: none of their own (`Node`, `Sum`). Invariant: a node noted is whole,
//! this volume's, no newer than the lost root, held, not the root's block nor one its
//! chain retired, and not in a group held corrupt. Locks: none (the volume is not shared
//! yet).

use super::super::node;
use super::super::root::TreeRoot;
use super::super::scanread::{used_to_read, NodeScans, Tally};
use super::{Node, NodeRef, Sum};
use crate::disk::device::Device;
use crate::error::Result;
use crate::geometry::Extent;
use crate::store::Store;
use std::collections::HashMap;

/// Every whole node in the blocks the bitmaps mark used, by block: vouched for by `t`'s
/// stamp, no newer than its root, held by the allocator (and not in a group held corrupt,
/// found so when its bitmap was read: that bitmap cannot say which of the group's nodes
/// are held, and every node ever freed there would pass for one), neither the root's
/// block nor a `retired` one. And the blocks read.
pub(super) fn scan(
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
    let items = super::super::tree::leaf_items(payload).ok()?;
    let (&lo, &hi) = (items.keys().next()?, items.keys().next_back()?);
    let marks = (items.values()).fold(0, |m, b| m | super::super::table::entry_marks(b));
    Some(Sum {
        lo,
        hi,
        count: items.len() as u64,
        marks,
        holes: 0,
        room: 0,
    })
}
