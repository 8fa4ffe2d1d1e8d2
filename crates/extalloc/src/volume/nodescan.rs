//! The salvage's scan of the device for the file tree's leaves ([`scan`]): when a walk
//! loses an internal node (or the root itself) that does not check, the entries under it
//! are not lost with it; the leaves that hold them still lie on the device, whole, each
//! naming its own block and the checkpoint that wrote it (`node.rs`). As `btrfs rescue`
//! and `xfs_repair` do, the scan reads (`scanread.rs`) the blocks the bitmaps mark used (a group held
//! corrupt whole) and, if that leaves keys of the root's count missing, every other block
//! too, keeps each whole leaf no newer than the lost node, and gives back the entries of
//! the lost key ranges from the newest copy of each.
//!
//! "This volume's": a leaf counts only if the volume's stamp vouches for it (`node::Stamp`:
//! it carries the stamp of the root, or is older than the stamp and carries none), so a
//! former volume's leaves that a `mkfs` without discard left in free blocks, and a leaf's
//! bytes written into a file by whoever can write one, give nothing; they are counted
//! ([`Scanned::foreign`]).
//!
//! "Newest copy": leaves the allocator holds are taken first, newest checkpoint first; each
//! claims the span from its least to its greatest key of a lost range, and a later leaf
//! gives only keys no span before it holds; no key the walk found is given. Leaves in free
//! blocks (copies a checkpoint freed) come last, the same way, and only while the held
//! leaves left keys of the root's count missing: they answer a tree whose only leaf was
//! lost after the checkpoint that freed its previous copy. A key removed since an older leaf was written
//! stays removed where a newer leaf spans it; one at the edge of a leaf could come back
//! from an older copy, so every entry given back is a damaged entry for the salvage: kept
//! only if its map survived (every block allocated and claimed by nothing else:
//! `salvage.rs`), and, named by no directory, it lands in `/lost+found`.
//!
//! Data structures: [`Lost`] (a key range lost, and the newest generation a node under it
//! can have), [`Scanned`] (what the scan gives). Invariant: an entry given back lies in a
//! lost range, comes from a whole leaf that the walk did not read, that the volume's stamp
//! vouches for, written no later than its range's lost node, and from a free leaf only if
//! no held leaf spans it; no key is given back twice. Locks: none (the volume is not shared yet).

use super::file::Ranges;
use super::node::{self, NodeRef, Stamp};
use super::scanread::{used_to_read, NodeScans, Tally};
use super::table::{salvage_table, table_header, Damaged, HEADER_BYTES};
use super::walk::LostNode;
use crate::disk::device::Device;
use crate::error::Result;
use crate::geometry::Extent;
use crate::store::Store;
use std::collections::BTreeSet;
use std::ops::Range;

/// A key range a walk lost with its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Lost {
    /// `lo ..` up to `hi` (exclusive; `None`: no end).
    pub keys: (u64, Option<u64>),
    /// The generation the lost node's parent (or the root) names: no node under it is newer.
    pub generation: u64,
    /// Where the node lies, and why it was lost.
    pub block: u64,
    pub why: String,
}

impl Lost {
    /// The range a walk's lost node leaves.
    pub(super) fn of(n: &LostNode) -> Lost {
        Lost {
            keys: n.keys,
            generation: n.at.generation,
            block: n.at.block,
            why: n.why.clone(),
        }
    }

    fn holds(&self, key: u64, generation: u64) -> bool {
        key >= self.keys.0 && self.keys.1.is_none_or(|hi| key < hi) && generation <= self.generation
    }
}

/// What [`scan`] found.
#[derive(Debug, Default)]
pub(super) struct Scanned {
    /// The entries given back (their bytes on the device), for the salvage's checks.
    pub entries: Vec<Damaged>,
    /// Of them, those from leaves in free blocks.
    pub entries_freed: u64,
    /// The leaves they came from.
    pub leaves: Vec<Extent>,
    /// Whole leaves found that the walk had not read: in blocks the allocator holds, and in
    /// free blocks (older copies).
    pub leaves_found: (u64, u64),
    /// Blocks read (or covered by an earlier scan's note: `scanread.rs`).
    pub blocks_read: u64,
    /// Of them, blocks that did not read (a bad sector), skipped.
    pub unreadable: u64,
    /// Whole leaves found that the volume's stamp does not vouch for (another volume's),
    /// left out.
    pub foreign: u64,
    /// The key spans the held leaves newer than the previous checkpoint claimed (each from
    /// its least to its greatest key of a lost range, within that range, where no newer
    /// leaf had claimed): a key inside one that no leaf gave is one the tree no longer held
    /// (removed since the previous checkpoint), which the previous table should not give
    /// back.
    pub held_spans: Ranges,
}

/// A whole leaf found on the device.
struct Found {
    at: NodeRef,
    payload: Vec<u8>,
    /// The allocator holds its blocks.
    held: bool,
}

/// Reads every block marked used (every block of a group held corrupt) for whole leaves
/// that `read` (the nodes the walk read) does not name, and gives back the entries of the
/// `lost` ranges (see the module documentation); if that gives fewer than `missing`, the
/// other blocks too. `previous`: the previous checkpoint's generation, for
/// [`Scanned::held_spans`]. Only leaves `stamp` vouches for count (every leaf,
/// for a root older than stamps). `scans` reads the device (`scanread.rs`: a block that
/// does not read is skipped and counted; blocks an earlier scan of this repair read are
/// not read again, but their nodes) and tells the repair how far it has read. Fails only
/// on the device's error (`scanread.rs`: blocks in a row that do not read).
pub(super) fn scan(
    store: &Store,
    dev: &dyn Device,
    lost: &[Lost],
    (read, known, missing): (&BTreeSet<u64>, &BTreeSet<u64>, u64),
    (stamp, previous, scans): (Option<Stamp>, u64, &NodeScans<'_>),
) -> Result<Scanned> {
    let mut out = Scanned::default();
    if lost.is_empty() {
        return Ok(out);
    }
    let newest = lost.iter().map(|l| l.generation).max().unwrap_or(0);
    let mut found = Vec::new();
    let g = store.geometry();
    let bs = u64::from(g.block_size);
    // The first pass reads the blocks marked used (a group held corrupt whole), the second
    // the rest (`pass_runs`).
    let (kinds, to_read) = used_to_read(store)?;
    let mut tally = Tally {
        to_read,
        ..Tally::default()
    };
    for second in [false, true] {
        if second {
            if newest_copies(&found, lost, (known, missing), bs).0.len() as u64 >= missing {
                break; // every key found in the blocks marked used
            }
            tally.to_read = g.blocks_count;
        }
        let within = (read, newest, stamp);
        scans.pass((store, dev), (second, &kinds), &mut tally, &mut |at, d| {
            out.foreign += leaf_found(store, (at, d), within, &mut found);
        })?;
    }
    // Each pass read every block it meant to, as `progress` was told.
    debug_assert_eq!(tally.read, tally.to_read, "every block of each pass read");
    (out.blocks_read, out.unreadable) = (tally.read, tally.unreadable);
    let held = found.iter().filter(|f| f.held).count() as u64;
    out.leaves_found = (held, found.len() as u64 - held);
    let nb = node::node_blocks(bs);
    let (entries, leaves, freed, spans) = newest_copies(&found, lost, (known, missing), bs);
    out.entries = entries;
    out.held_spans = held_after(&spans, lost, previous);
    out.entries_freed = freed;
    out.leaves = leaves.into_iter().map(|b| Extent::new(b, nb)).collect();
    Ok(out)
}

/// The whole node `at` (`d`, its bytes decoded) into `found` if it is a leaf, not in
/// `read`, no newer than `newest` and vouched for by `stamp` (if any). Returns 1 for a
/// whole leaf `stamp` does not vouch for, else 0.
fn leaf_found(
    store: &Store,
    (at, d): (NodeRef, node::Decoded),
    (read, newest, stamp): (&BTreeSet<u64>, u64, Option<Stamp>),
    found: &mut Vec<Found>,
) -> u64 {
    let nb = node::node_blocks(u64::from(store.geometry().block_size));
    if stamp.is_some_and(|s| !s.vouches(d.stamp, at.generation)) {
        return u64::from(d.level == 0);
    }
    if d.level == 0 && at.generation <= newest && !read.contains(&at.block) {
        let held = store
            .allocator()
            .check_held(Extent::new(at.block, nb))
            .is_ok();
        found.push(Found {
            at,
            payload: d.payload,
            held,
        });
        // The leaf taken is no newer than the lost nodes and unread by the walk.
        debug_assert!(!read.contains(&at.block) && at.generation <= newest);
    }
    0
}

/// The entries of the `lost` ranges from the newest copy of each key among `found`, as
/// damaged entries (device bytes), none of `known` (the walk found them); the blocks of the
/// leaves that gave any; how many came from free leaves; each leaf's claim (for
/// [`Scanned::held_spans`]). Leaves the allocator holds come
/// first, newest first; a free leaf (an older copy a checkpoint freed) is read only while
/// fewer than `missing` keys were given, and gives only keys no leaf before it spans.
fn newest_copies(
    found: &[Found],
    lost: &[Lost],
    (known, missing): (&BTreeSet<u64>, u64),
    bs: u64,
) -> (Vec<Damaged>, Vec<u64>, u64, Vec<Claim>) {
    let mut order: Vec<&Found> = found.iter().collect();
    order.sort_by_key(|f| (!f.held, std::cmp::Reverse(f.at.generation), f.at.block));
    // The lost ranges by their least key (disjoint: a lookup is a logarithm of them,
    // however many a root made over the leaves leaves to the scan).
    let mut by_key: Vec<&Lost> = lost.iter().collect();
    by_key.sort_by_key(|l| l.keys.0);
    debug_assert!(by_key
        .windows(2)
        .all(|w| w[0].keys.1.is_some_and(|hi| hi <= w[1].keys.0)));
    let holding = |id: u64, generation: u64| {
        let i = by_key.partition_point(|l| l.keys.0 <= id);
        i > 0 && by_key[i - 1].holds(id, generation)
    };
    // Key spans claimed so far (a lookup and an insert cost a logarithm of the spans,
    // whatever the number of leaves).
    let mut spans = Ranges::default();
    let mut claims = Vec::new();
    let mut given: BTreeSet<u64> = BTreeSet::new();
    let mut entries = Vec::new();
    let (mut leaves, mut freed) = (Vec::new(), 0);
    for f in order {
        if !f.held && entries.len() as u64 >= missing {
            break; // the held leaves gave every key missing: no older copy is needed
        }
        let mut bytes = table_header(0);
        bytes.extend_from_slice(&f.payload);
        let s = salvage_table(&bytes);
        let base = f.at.block * bs + node::HEADER_BYTES as u64;
        let device = |r: &Range<u64>| {
            let at = |x: u64| base + x.saturating_sub(HEADER_BYTES as u64);
            at(r.start)..at(r.end)
        };
        // The span of the keys this leaf could hold as a live leaf of a lost range.
        let mut span: Option<(u64, u64)> = None;
        let before = entries.len();
        for (file, place) in s.table.files.into_iter().zip(&s.places) {
            if !holding(file.id, f.at.generation) {
                continue;
            }
            span = Some(span.map_or((file.id, file.id), |(a, _)| (a, file.id)));
            let newer = spans.contains(file.id);
            if !newer && !known.contains(&file.id) && given.insert(file.id) {
                entries.push(Damaged {
                    bytes: device(place),
                    file: Some(file),
                });
            }
        }
        if entries.len() > before {
            leaves.push(f.at.block);
            freed += u64::from(!f.held) * (entries.len() - before) as u64;
        }
        if let Some((lo, hi)) = span {
            spans.insert(lo, hi - lo + 1);
            claims.push(Claim {
                generation: f.at.generation,
                held: f.held,
                keys: (lo, hi),
            });
        }
    }
    // No key given back twice, each in a lost range.
    debug_assert_eq!(given.len(), entries.len());
    (entries, leaves, freed, claims)
}

/// The span of keys of lost ranges a leaf held, from its least to its greatest (both
/// included), as [`newest_copies`] read it.
struct Claim {
    generation: u64,
    held: bool,
    keys: (u64, u64),
}

/// [`Scanned::held_spans`]: the claims of held leaves newer than the `previous`
/// checkpoint, each cut to the lost ranges (a leaf's span may cross keys between two
/// lost nodes, which no walk lost).
fn held_after(claims: &[Claim], lost: &[Lost], previous: u64) -> Ranges {
    let mut out = Ranges::default();
    for c in claims.iter().filter(|c| c.held && c.generation > previous) {
        for l in lost {
            let lo = c.keys.0.max(l.keys.0);
            let hi = l
                .keys
                .1
                .map_or(c.keys.1, |end| c.keys.1.min(end.saturating_sub(1)));
            if lo <= hi && l.keys.1.is_none_or(|end| lo < end) {
                out.insert(lo, hi - lo + 1);
            }
        }
    }
    // Every span lies in a lost range.
    debug_assert!(out.iter().all(|(s, n)| lost
        .iter()
        .any(|l| s >= l.keys.0 && l.keys.1.is_none_or(|end| s + n <= end))));
    out
}

#[cfg(test)]
#[path = "nodescan_tests.rs"]
mod volume_tests;

#[cfg(test)]
#[path = "nodescan_salvage_tests.rs"]
mod salvage_tests;

#[cfg(test)]
#[path = "nodescan_mend_tests.rs"]
mod mend_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::record::MapRef;
    use crate::volume::table::{encode_table, Table, TableFile};

    /// A leaf's payload: empty files `ids` (after the table's header, frames as a leaf's).
    fn leaf(block: u64, generation: u64, ids: &[u64]) -> Found {
        leaf_held(block, generation, ids, true)
    }

    fn leaf_held(block: u64, generation: u64, ids: &[u64], held: bool) -> Found {
        let files = ids
            .iter()
            .map(|&id| TableFile {
                id,
                size: 0,
                attr: vec![1, 2, 3],
                placement: None,
                map: MapRef::Inline(Vec::new()),
            })
            .collect();
        let table = encode_table(&Table {
            files,
            retired: Vec::new(),
        });
        Found {
            at: NodeRef { block, generation },
            payload: table[HEADER_BYTES..].to_vec(),
            held,
        }
    }

    fn given(found: Vec<Found>, lost: &[Lost]) -> Vec<(u64, u64)> {
        let none = BTreeSet::new();
        let (entries, _, _, _) = newest_copies(&found, lost, (&none, u64::MAX), 4096);
        let mut out: Vec<(u64, u64)> = entries
            .iter()
            .map(|d| (d.file.as_ref().unwrap().id, d.bytes.start / 4096))
            .collect();
        out.sort_unstable();
        out
    }

    fn lost(keys: (u64, Option<u64>), generation: u64) -> Lost {
        Lost {
            keys,
            generation,
            block: 1,
            why: String::new(),
        }
    }

    #[test]
    fn the_newest_leaf_spanning_a_key_gives_it() {
        // Block 10 (generation 5) is the live leaf of keys 1..=4 (3 removed since block 20,
        // generation 3, was written); block 30 holds keys past it, from generation 2.
        let found = vec![
            leaf(20, 3, &[1, 2, 3, 4]),
            leaf(10, 5, &[1, 2, 4]),
            leaf(30, 2, &[5, 6]),
        ];
        assert_eq!(
            given(found, &[lost((0, None), 9)]),
            vec![(1, 10), (2, 10), (4, 10), (5, 30), (6, 30)]
        );
    }

    #[test]
    fn only_lost_ranges_and_no_newer_generation_give_keys() {
        let lost = [lost((3, Some(6)), 4)];
        let found = vec![
            leaf(10, 4, &[1, 2, 3, 4]),
            leaf(20, 7, &[5]), // newer than the lost node: an unfinished checkpoint's
            leaf(30, 3, &[5, 6]), // 6 is routed elsewhere
        ];
        assert_eq!(given(found, &lost), vec![(3, 10), (4, 10), (5, 30)]);
    }

    #[test]
    fn a_free_leaf_gives_only_keys_no_held_leaf_spans() {
        // Held: block 10 (generation 3) spans 4..=6. Free: block 20 (generation 5, newer
        // yet freed) holds 5, 6 and 7; block 30 (generation 2) holds 1 and 5.
        let found = vec![
            leaf(10, 3, &[4, 6]),
            leaf_held(20, 5, &[5, 6, 7], false),
            leaf_held(30, 2, &[1, 5], false),
        ];
        let all = [lost((0, None), 9)];
        let none = BTreeSet::new();
        let (entries, leaves, freed, _) = newest_copies(&found, &all, (&none, u64::MAX), 4096);
        let ids: Vec<u64> = entries
            .iter()
            .map(|d| d.file.as_ref().unwrap().id)
            .collect();
        assert_eq!(ids, vec![4, 6, 7, 1]);
        assert_eq!((leaves, freed), (vec![10, 20, 30], 2));
    }

    #[test]
    fn free_leaves_are_read_only_for_keys_still_missing_and_known_keys_stay_the_walks() {
        let found = vec![leaf(10, 3, &[4, 6]), leaf_held(20, 5, &[1, 7], false)];
        let all = [lost((0, None), 9)];
        // Two keys missing, the held leaf gives both: the free copy is not read.
        let (entries, _, freed, _) = newest_copies(&found, &all, (&BTreeSet::new(), 2), 4096);
        assert_eq!((entries.len(), freed), (2, 0));
        // Three missing: the free copy gives what the held leaf does not span.
        let (entries, _, freed, _) = newest_copies(&found, &all, (&BTreeSet::new(), 3), 4096);
        assert_eq!((entries.len(), freed), (4, 2));
        // A key the walk found is never given again.
        let known = BTreeSet::from([6]);
        let (entries, _, _, _) = newest_copies(&found, &all, (&known, 1), 4096);
        let ids: Vec<u64> = entries
            .iter()
            .map(|d| d.file.as_ref().unwrap().id)
            .collect();
        assert_eq!(ids, vec![4]);
    }
}
