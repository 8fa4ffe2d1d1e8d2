//! The salvage's use of the device scan (`nodescan.rs`): the entries under the file tree's
//! lost nodes given back as damaged entries, a stale root's own entries set aside for
//! them.
//!
//! Data structures: none of its own (`Found`, `Salvaged`, `TreeScan`). Invariant: no key
//! the walk found is given again; a stale root's entries come after the scan's. Locks:
//! none (the volume is not shared yet).

use super::super::node;
use super::super::nodescan::{self, Lost};
use super::super::root::{Root, TreeRoot};
use super::super::scanread::NodeScans;
use super::super::table::{Damaged, Salvaged};
use super::{Found, Salvage, TreeScan};
use crate::disk::device::Device;
use crate::error::Result;
use crate::store::Store;
use std::collections::BTreeSet;

/// Gives back, from a scan of the device (`nodescan.rs`), the entries under the tree nodes
/// the walk lost: each a damaged entry, kept only if its map survives as any other; the
/// leaves they came from join what the table owns, so that no salvaged map claims them.
pub(super) fn scanned(
    store: &Store,
    dev: &dyn Device,
    root: &Root,
    lost: &[Lost],
    found: &mut Found,
    (report, scans): (&mut Salvage, &NodeScans<'_>),
) -> Result<()> {
    if lost.is_empty() {
        return Ok(());
    }
    let read: BTreeSet<u64> = found.nodes.iter().map(|e| e.start).collect();
    // A stale root's entries are older copies: set aside, the scan's newer copies first.
    let stale = stale_root_entries(store, dev, root, &mut found.s);
    // A root taken as a damaged leaf may have given some keys already: they stay its.
    let known: BTreeSet<u64> = (found.s.table.files.iter().map(|f| f.id))
        .chain(
            found
                .s
                .damaged
                .iter()
                .filter_map(|d| d.file.as_ref().map(|f| f.id)),
        )
        .collect();
    let count = root.tree.as_ref().map_or(0, |t| t.count);
    let missing = count.saturating_sub(known.len() as u64);
    let stamp = root.tree.as_ref().and_then(|t| t.stamp);
    // The previous checkpoint's generation: leaves newer than it say what was removed since.
    let previous = (root.tree.as_ref())
        .and_then(|t| t.previous)
        .map_or(0, |(at, _)| at.generation);
    let sc = nodescan::scan(
        store,
        dev,
        lost,
        (&read, &known, missing),
        (stamp, previous, scans),
    )?;
    report.tree_scan = Some(tree_scan(lost, &sc));
    found.own.extend(sc.leaves);
    found.held_spans = sc.held_spans;
    // A root with no magic, scanned as a leaf's bytes too: a stretch of it that decodes as
    // no file is an internal node's or zeros, no file lost (one lost there still counts
    // among the entries the root's count finds nowhere).
    let bs = u64::from(store.geometry().block_size);
    let root_lost = |t: &&TreeRoot| lost.iter().any(|l| l.block == t.root.block);
    if let Some(t) = root.tree.as_ref().filter(root_lost) {
        let node = t.root.block * bs..(t.root.block + node::node_blocks(bs)) * bs;
        found
            .s
            .damaged
            .retain(|d| d.file.is_some() || !node.contains(&d.bytes.start));
    }
    // The scan gives no key the walk found: a root taken as a damaged leaf keeps its own.
    debug_assert!(
        (sc.entries.iter()).all(|d| d.file.as_ref().is_some_and(|f| !known.contains(&f.id)))
    );
    let given: BTreeSet<u64> = (sc.entries.iter())
        .filter_map(|d| d.file.as_ref().map(|f| f.id))
        .collect();
    found.s.damaged.extend(sc.entries);
    let older = stale.into_iter();
    (found.s.damaged)
        .extend(older.filter(|d| d.file.as_ref().is_some_and(|f| !given.contains(&f.id))));
    let seen = (found.s.table.files.len() + found.s.damaged.len()) as u64;
    found.s.uncounted = count.saturating_sub(seen);
    // Only a tree's walk loses nodes; what the scan gave back is damaged, never intact.
    debug_assert!(root.tree.is_some() && report.table_damaged);
    Ok(())
}

/// What a scan for the leaves under the `lost` nodes found, as a repair reports it (the
/// salvage's, and the page path's mend: `leafrepair.rs`).
pub(in crate::volume) fn tree_scan(lost: &[Lost], sc: &nodescan::Scanned) -> TreeScan {
    TreeScan {
        nodes_lost: lost.iter().map(|l| (l.block, l.why.clone())).collect(),
        blocks_read: sc.blocks_read,
        blocks_unreadable: sc.unreadable,
        leaves_found: sc.leaves_found.0,
        freed_leaves_found: sc.leaves_found.1,
        entries: sc.entries.len() as u64,
        entries_freed: sc.entries_freed,
        foreign_leaves: sc.foreign,
    }
}

/// The damaged entries `s` took from the tree's root when the root's block holds a stale
/// node (whole, of another place or checkpoint): taken out of `s`, for the scan to go
/// first; dropped if the volume's stamp does not vouch for that node (another volume's).
/// Nothing for any other root.
fn stale_root_entries(
    store: &Store,
    dev: &dyn Device,
    root: &Root,
    s: &mut Salvaged,
) -> Vec<Damaged> {
    let Some(t) = &root.tree else {
        return Vec::new();
    };
    let bs = u64::from(store.geometry().block_size);
    let mut raw = vec![0u8; node::node_bytes(bs)];
    if dev.read_at(&mut raw, t.root.block * bs).is_err() || !node::is_stale(&raw, t.root) {
        return Vec::new();
    }
    let span = t.root.block * bs..(t.root.block + node::node_blocks(bs)) * bs;
    let (mine, rest) = std::mem::take(&mut s.damaged)
        .into_iter()
        .partition(|d| span.contains(&d.bytes.start));
    s.damaged = rest;
    // The root's entries are damaged ones: a stale leaf's frames are never taken intact.
    debug_assert!(s.places.iter().all(|p| !span.contains(&p.start)));
    match node::vouched(&raw, t.stamp) {
        true => mine,
        false => Vec::new(),
    }
}
