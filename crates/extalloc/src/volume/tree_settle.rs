//! Settling a changed file tree (`tree.rs`, [`Tree::settle`]): what outgrew its node
//! split, small changed leaves merged with a neighbour, internal nodes refilled up to the
//! fan-out. A child of `tree.rs`, so it works on the tree's own slots.
//!
//! Data structures: none of their own (`Slot`, `Mem`). Invariant: a settled slot's nodes
//! each fit their bytes, keys stay in order across splits and joins, and a durable slot
//! is returned as it is. Locks: none.

use super::{entry_bytes, leaf_bytes, Mem, NodeIo, NodeRef, Slot, CHILD_BYTES, HEADER_BYTES};
use crate::error::Result;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The most children of an internal node of `size` bytes.
fn fanout(size: usize) -> usize {
    (size - HEADER_BYTES) / CHILD_BYTES
}

/// A settled slot: itself if durable, else what it became (none, one, or several split).
/// A node on the tree's right edge (`last`) splits full, the rest of it last, since keys
/// are file ids, which grow: new files land there, and an even split would leave every
/// leaf behind them half full.
pub(super) fn settle_slot(
    slot: Slot,
    size: usize,
    last: bool,
    io: &mut dyn NodeIo,
    replaced: &mut Vec<NodeRef>,
) -> Result<Vec<Slot>> {
    if slot.at.is_some() {
        return Ok(vec![slot]);
    }
    let mem = Arc::unwrap_or_clone(slot.mem.expect("a changed slot is loaded"));
    match mem {
        Mem::Leaf(items) => Ok(split_leaf(items, size - HEADER_BYTES, last)),
        Mem::Internal { level, children } => {
            let mut kids = Vec::with_capacity(children.len());
            let n = children.len();
            for (i, c) in children.into_iter().enumerate() {
                kids.extend(settle_slot(c, size, last && i + 1 == n, io, replaced)?);
            }
            merge_small_leaves(&mut kids, size - HEADER_BYTES, io, replaced)?;
            let per = fanout(size);
            let n = kids.len().div_ceil(per);
            let mut out = Vec::with_capacity(n);
            let mut rest = kids.into_iter();
            for i in 0..n {
                let take = match last {
                    true => per.min(rest.len()),
                    false => (rest.len()).div_ceil(n - i),
                };
                out.push(Slot::internal(level, rest.by_ref().take(take).collect()));
            }
            debug_assert!(out.iter().all(|s| matches!(s.mem.as_deref(),
                Some(Mem::Internal { children, .. }) if children.len() <= per)));
            Ok(out)
        }
    }
}

/// A changed leaf cut into leaves of at most `room` payload bytes each, as even as the
/// entries allow, or each full but the last if `pack` (none if it is empty).
fn split_leaf(items: BTreeMap<u64, Vec<u8>>, room: usize, pack: bool) -> Vec<Slot> {
    let total = leaf_bytes(&items);
    if total <= room {
        return match items.is_empty() {
            true => vec![],
            false => vec![Slot::leaf(items)],
        };
    }
    let n = total.div_ceil(room);
    let target = match pack {
        true => room,
        false => total.div_ceil(n),
    };
    let mut out = Vec::with_capacity(n + 1);
    let (mut cur, mut bytes) = (BTreeMap::new(), 0usize);
    for (k, v) in items {
        let b = entry_bytes(&v);
        if !cur.is_empty() && (bytes + b > room || bytes >= target) {
            out.push(Slot::leaf(std::mem::take(&mut cur)));
            bytes = 0;
        }
        bytes += b;
        cur.insert(k, v);
    }
    out.push(Slot::leaf(cur));
    debug_assert!(out.iter().all(|s| matches!(s.mem.as_deref(),
        Some(Mem::Leaf(i)) if leaf_bytes(i) <= room && !i.is_empty())));
    out
}

/// Merges each changed leaf under a quarter full with its right (else left) neighbour,
/// loading a durable one, when both fit one leaf.
fn merge_small_leaves(
    kids: &mut Vec<Slot>,
    room: usize,
    io: &mut dyn NodeIo,
    replaced: &mut Vec<NodeRef>,
) -> Result<()> {
    let small = |s: &Slot| {
        s.at.is_none() && matches!(s.mem.as_deref(), Some(Mem::Leaf(i)) if leaf_bytes(i) < room / 4)
    };
    let mut i = 0;
    while kids.len() > 1 && i < kids.len() {
        if !small(&kids[i]) {
            i += 1;
            continue;
        }
        let j = if i + 1 < kids.len() { i + 1 } else { i - 1 };
        if kids[j].level() != 0 {
            i += 1;
            continue;
        }
        let (a, b) = (i.min(j), i.max(j));
        let mut pair = Vec::with_capacity(2);
        for k in [a, b] {
            let mut s = kids[k].clone();
            let Mem::Leaf(items) = s.open(io, replaced)?.clone() else {
                unreachable!("a leaf")
            };
            pair.push((s, items));
        }
        let joined = leaf_bytes(&pair[0].1) + leaf_bytes(&pair[1].1);
        if joined > room {
            // Too full to join: the neighbour stays as it was (its place not replaced).
            if let Some(at) = kids[j].at {
                replaced.retain(|r| *r != at);
            }
            i += 1;
            continue;
        }
        let mut items = std::mem::take(&mut pair[0].1);
        items.append(&mut pair[1].1);
        debug_assert!(leaf_bytes(&items) <= room, "a joined leaf fits");
        kids.splice(a..=b, [Slot::leaf(items)]);
        i = a;
    }
    // Keys stay in order across the joins.
    debug_assert!(kids.windows(2).all(|w| w[0].first < w[1].first));
    Ok(())
}
