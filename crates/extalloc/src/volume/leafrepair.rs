//! Mending the file tree's leaves that do not read, in place of the salvage, for
//! `fsck --repair`'s page path ([`Volume::mend_unreadable_leaves`]): the intact tree kept,
//! and each damaged leaf's key range rebuilt from what survives, with the salvage's rules
//! (`salvage.rs`): the leaf's frames that check, as they are (all of them checked as
//! damaged entries when the leaf is a whole node of another checkpoint); a damaged entry
//! whose body decodes, if its map survived (under a fresh id when its own is not free);
//! and the previous checkpoint's entries for the range that neither gave, if their maps
//! survived (their bytes may be older). A pending entry is not kept (an open removes it);
//! one whose map lies outside the tree is kept where it lies if that place survived too
//! (`leafkeep.rs`, which decides what is kept). An internal node the open lost (a hole,
//! `walk.rs`, a map outside the tree under it or not) is
//! filled from the salvage's scan of the device for the leaves under it (`nodescan.rs`),
//! its entries taken as damaged ones, the journal's changes to them (set aside by the
//! open) applied. Memory: one leaf at a time, the damaged ranges'
//! entries, and every mapped extent (for the survival checks), never every file.
//!
//! Data structures: [`MendedLeaves`], the report. Invariant: afterwards every leaf of the
//! tree in memory reads, no entry kept maps a block another file, the tree or a map
//! segment holds, and the nodes replaced wait in `Meta::mended` for the next checkpoint to
//! retire (owned until then). Locks: the gate for writing, then the meta mutex (briefly,
//! never across a read).

use super::leafkeep::{Candidate, Keeper};
use super::node::{self, NodeRef};
use super::nodescan::{self, Lost};
use super::salvage::KeyRange;
use super::salvage::{LostEntry, MendedLeaves};
use super::scanread::NodeScans;
use super::state::Volume;
use super::table::file_body;
use super::tree::{LeafVisit, Tree};
use super::treeio::VolIo;
use crate::error::{Error, Result};
use std::collections::{BTreeMap, BTreeSet};

/// A leaf's entries by id.
type Items = BTreeMap<u64, Vec<u8>>;

impl Bad {
    /// The key range a hole (an internal node the open lost) leaves, for the scan.
    fn lost(&self) -> Lost {
        Lost {
            keys: self.keys,
            generation: self.at.generation,
            block: self.at.block,
            why: self.why.to_string(),
        }
    }
}

/// A leaf that did not read (or, at a level above 0, an internal node the open lost: a
/// hole): the keys its parent routes to it, where it lies, why, and its bytes if they
/// read.
struct Bad {
    keys: (u64, Option<u64>),
    at: NodeRef,
    level: u8,
    why: Error,
    raw: Option<Vec<u8>>,
}

impl Volume {
    /// Reads every leaf of the file tree once (one at a time) and rebuilds each one that
    /// does not read from what survives (see the module documentation), in memory: the
    /// next checkpoint writes the mended leaves and the paths above them, and until it
    /// does nothing is durable (a crash leaves the tree as it was). For a repair, right
    /// after [`Volume::open_for_repair`], before any other call; the bitmaps' rebuild
    /// ([`Volume::rebuild_allocation`]) then frees what the lost entries held.
    ///
    /// The internal nodes the open lost (holes: [`Volume::open_for_repair`]) are filled
    /// from a scan of the device for the leaves under them (`nodescan.rs`: the blocks the
    /// bitmaps mark used read once, a chunk at a time, the others only while keys are
    /// missing), each entry found a damaged entry kept only if its map survived; memory
    /// grows with the entries under the lost nodes, not with the file count. The
    /// journal's changes to files under them, which the open set aside, are applied to
    /// the entries kept under their own ids (judged on the map they leave; a file they
    /// unlink is not kept: [`MendedLeaves::removed`]), and the files they create are made
    /// from them; those files are then in memory, for the next checkpoint to write.
    ///
    /// Fails, changing nothing, on an I/O error, and with [`Error::Corrupt`] on damage it
    /// does not mend: a leaf whose bytes are another volume's whole node (its keys may lie
    /// anywhere on the device: the salvage scans for them), or a kept entry whose map lies
    /// in a map segment the volume retired.
    pub fn mend_unreadable_leaves(&self) -> Result<MendedLeaves> {
        self.mend_unreadable_leaves_reporting(&NodeScans::unwatched())
    }

    /// [`Volume::mend_unreadable_leaves`], its scan of the device for the leaves under a
    /// lost internal node (it runs only then: on a large device the mend's one long step)
    /// made by `scans`: told how far it has gone after each 256 blocks read, and sharing
    /// what it read with the repair's other scans of the same device ([`NodeScans`]). It
    /// leaves what [`Volume::mend_unreadable_leaves`] leaves.
    pub fn mend_unreadable_leaves_reporting(&self, scans: &NodeScans<'_>) -> Result<MendedLeaves> {
        let _closed = self.gate.write();
        let (tree, mended, next_id) = {
            let meta = self.meta.lock();
            (meta.tree.clone(), meta.mended.len(), meta.next_id)
        };
        let result = self.mend_locked(scans);
        debug_assert!(
            result.as_ref().is_err() || self.meta.lock().mended.len() >= mended,
            "what the mend replaced waits for the checkpoint"
        );
        if result.is_err() {
            // Changing nothing: the tree, what it replaced and the ids it drew back.
            let mut meta = self.meta.lock();
            meta.tree = tree;
            meta.mended.truncate(mended);
            meta.next_id = next_id;
        }
        result
    }

    /// [`Volume::mend_unreadable_leaves`] under the gate; on failure it may have changed
    /// the tree in memory (the caller puts it back).
    fn mend_locked(&self, scans: &NodeScans<'_>) -> Result<MendedLeaves> {
        debug_assert!(self.gate.is_locked_exclusive(), "a mend, the gate open");
        let mut out = MendedLeaves::default();
        let (tree, stamp, previous, aside) = {
            let meta = self.meta.lock();
            out.root_found = meta.root_found.clone();
            let previous = super::load::volume_root(&self.store)?
                .tree
                .and_then(|t| t.previous);
            let aside: BTreeSet<u64> = meta.aside.iter().filter_map(|c| c.file()).collect();
            (meta.tree.clone(), meta.stamp, previous, aside)
        };
        let Some(mut tree) = tree else {
            debug_assert!(aside.is_empty(), "changes set aside with no tree");
            return Ok(out); // every file in memory: no leaf to read
        };
        let mut io = VolIo::new(&self.store, self.dev.as_ref(), stamp);
        let counted = tree.count();
        let (bad, good) = unreadable_leaves(&tree, &mut io)?;
        // A root made over the leaves: the ranges a lost leaf of its checkpoint held, and
        // those under the previous tree's nodes that did not read.
        let under_unread = left_to_scan(out.root_found.as_ref());
        if bad.is_empty() && under_unread.is_empty() {
            debug_assert_eq!(tree.holes(), 0, "a hole reads as no leaf");
            return self.nothing_to_mend(&aside).map(|()| out);
        }
        let (holes, bad): (Vec<Bad>, Vec<Bad>) = bad.into_iter().partition(|b| b.level > 0);
        for b in &bad {
            if b.raw.as_ref().is_some_and(|r| node::is_foreign(r, stamp)) {
                return Err(super::record::corrupt(
                    "a file tree leaf holds another volume's node: its keys are found by the \
                     salvage's scan",
                ));
            }
        }
        // The tree's nodes as the open found them: a leaf the scan meets there is no lost one.
        let mut lost: Vec<Lost> = holes.iter().map(Bad::lost).collect();
        lost.extend(under_unread.iter().cloned());
        let read: BTreeSet<u64> = match lost.is_empty() {
            true => BTreeSet::new(),
            false => tree.nodes().iter().map(|n| n.block).collect(),
        };
        let mut candidates = self.replace_damage(&mut tree, (&bad, &holes), &aside, &mut out);
        let kept = out.intact;
        let found = good + kept + (candidates.len() + out.lost.len()) as u64;
        tree.recount(good + kept);
        self.meta.lock().tree = Some(tree.clone());
        let mut keeper = Keeper::new(self)?;
        // The journal's files first: their blocks are not an older copy's to claim.
        keeper.make_created(&mut out)?;
        let missing = counted.saturating_sub(found);
        let read = (&read, missing);
        let scanned = self.scan_holes(&lost, read, (&mut keeper, scans), &mut out)?;
        out.uncounted = counted.saturating_sub(found + scanned.len() as u64);
        candidates.extend(scanned);
        keeper.take_damaged(candidates, &mut tree, &mut io, &mut out)?;
        if let Some((root, _)) = previous {
            // A lost leaf under a root made over the leaves is routed up to the next
            // child's least key, over ranges left to the scan: those are the scan's (a key
            // a newer leaf spans without it was removed), not the previous tree's.
            let scanned: Vec<KeyRange> = under_unread.iter().map(|l| l.keys).collect();
            for b in &bad {
                for keys in outside(b.keys, &scanned) {
                    keeper.restore_previous(root, keys, &mut tree, &mut io, &mut out)?;
                }
            }
        }
        // An entry the previous checkpoint's tree gave back was found after all.
        out.uncounted = out.uncounted.saturating_sub(out.restored.len() as u64);
        let added = (out.recovered.len() + out.restored.len()) as u64;
        tree.recount(good + kept + added);
        let adopted = keeper.adopt_replayed()?;
        // Every leaf reads now (those mended are in memory), no hole is left, and what was
        // kept is counted.
        debug_assert!(out.leaves.len() == bad.len() && tree.holes() == 0);
        debug_assert_eq!(out.tree_scan.is_some(), !lost.is_empty());
        self.meta.lock().tree = Some(tree);
        keeper.settle(adopted);
        Ok(out)
    }

    /// The mend's first step, in memory: each damaged leaf of `bad` replaced by its frames
    /// that check (`out.intact` counts them), each hole by an empty subtree of its level
    /// (for the scan's entries); the nodes replaced noted for the next checkpoint to
    /// retire. Returns the entries to judge against what everything else owns.
    fn replace_damage(
        &self,
        tree: &mut Tree,
        (bad, holes): (&[Bad], &[Bad]),
        aside: &BTreeSet<u64>,
        out: &mut MendedLeaves,
    ) -> Vec<Candidate> {
        let mut mended = Vec::new();
        let mut candidates = Vec::new();
        for b in bad {
            let (items, damaged) = self.salvage_leaf(b, aside, out);
            out.intact += items.len() as u64;
            out.leaves.push((b.at.block, b.why.to_string()));
            tree.replace_leaf(b.keys.0, items, &mut mended);
            candidates.extend(damaged);
        }
        for h in holes {
            tree.replace_subtree(h.keys.0, h.level, &mut mended);
        }
        // Each damaged leaf reported, no hole left.
        debug_assert!(out.leaves.len() == bad.len() && tree.holes() == 0);
        self.meta.lock().mended.extend(mended);
        candidates
    }

    /// Every leaf read: the mend's end when the open set no change aside (it met no
    /// damage); else damage every leaf now reads past, not one to mend.
    fn nothing_to_mend(&self, aside: &BTreeSet<u64>) -> Result<()> {
        if !aside.is_empty() {
            return Err(super::record::corrupt(
                "the journal names files whose leaf failed once and reads now",
            ));
        }
        let mut meta = self.meta.lock();
        // Nothing set aside, no hole left: nothing the checkpoint must wait for.
        debug_assert!(meta.aside.is_empty() && meta.tree.as_ref().is_none_or(|t| t.holes() == 0));
        meta.unmended = false;
        Ok(())
    }

    /// The entries under the `holes` (internal nodes the open lost), from a scan of the
    /// device for the leaves under them (`nodescan.rs`, as the salvage's: the newest copy
    /// of each key, no leaf of `read`, the tree's nodes; `missing`, the keys the tree
    /// counted that were found nowhere else, decides whether free leaves are read too):
    /// damaged entries, each kept only if its map survived. The leaves they came from are
    /// taken, so no kept map claims them (owned by no one after the mend, they are freed
    /// by the bitmaps' rebuild). Nothing, and no scan, when there is no hole.
    fn scan_holes(
        &self,
        lost: &[Lost],
        (read, missing): (&BTreeSet<u64>, u64),
        (keeper, scans): (&mut Keeper<'_>, &NodeScans<'_>),
        out: &mut MendedLeaves,
    ) -> Result<Vec<Candidate>> {
        if lost.is_empty() {
            return Ok(Vec::new());
        }
        let stamp = self.meta.lock().stamp;
        let known = BTreeSet::new(); // the holes' ranges hold no key the open found
        let sc = nodescan::scan(
            &self.store,
            self.dev.as_ref(),
            lost,
            (read, &known, missing),
            // No previous table gives back keys under a hole: its spans are not needed.
            (stamp, u64::MAX, scans),
        )?;
        keeper.take_leaves(&sc.leaves);
        out.tree_scan = Some(super::salvage::scan::tree_scan(lost, &sc));
        // Each from a whole leaf: its frame checked.
        let entries: Vec<Candidate> = (sc.entries.into_iter())
            .filter_map(|d| {
                let (bytes, intact) = (d.bytes, true);
                d.file.map(|file| Candidate {
                    file,
                    bytes,
                    intact,
                })
            })
            .collect();
        // Each entry lies in a hole's range.
        debug_assert!(entries.iter().all(|c| lost
            .iter()
            .any(|l| c.file.id >= l.keys.0 && l.keys.1.is_none_or(|hi| c.file.id < hi))));
        Ok(entries)
    }

    /// A damaged leaf's entries routed to it: those whose frames check (none if the leaf
    /// is a whole node of another checkpoint: stale; none whose map lies outside the
    /// tree), to keep as they are; and the others whose bodies decode, with their bytes on
    /// the device, to keep only if their maps survived. What does not decode goes to
    /// `out.lost`.
    fn salvage_leaf(
        &self,
        b: &Bad,
        aside: &BTreeSet<u64>,
        out: &mut MendedLeaves,
    ) -> (Items, Vec<Candidate>) {
        let raw = b.raw.as_deref().unwrap_or_default();
        let stale = node::is_stale(raw, b.at);
        let payload = node::leaf_payload_unchecked(raw);
        let frames = super::treeio::leaf_frames(payload, b.at, b.keys, self.block_size);
        let mut items = BTreeMap::new();
        let mut damaged = Vec::new();
        for (f, bytes) in frames.intact {
            // A stale leaf's frames are not this leaf's: checked as damaged entries are
            // (`Keeper::keep`). So is a map outside the tree (its place must survive: it
            // is damage in an unmarked leaf, and the open did not hold it for a marked
            // one), a pending file (dropped, as the open it missed would have removed
            // it), and a file whose changes the open set aside (applied there).
            let pending = f.attr == super::publish::PENDING;
            if stale || !f.map.segments().is_empty() || pending || aside.contains(&f.id) {
                // A stale leaf's frame is whole, but another leaf's: its size is cut.
                let intact = !stale;
                damaged.push(Candidate {
                    file: f,
                    bytes,
                    intact,
                });
            } else {
                items.insert(f.id, file_body(&f));
            }
        }
        for d in frames.damaged {
            match d.file {
                Some(f) => damaged.push(Candidate {
                    file: f,
                    bytes: d.bytes,
                    intact: false,
                }),
                None => out.lost.push(LostEntry {
                    bytes: d.bytes,
                    id: None,
                    why: "its frame does not decode".into(),
                }),
            }
        }
        // Only what the parent routes here, to keep as it is or to check.
        let routed = |id: u64| id >= b.keys.0 && b.keys.1.is_none_or(|hi| id < hi);
        debug_assert!(items.keys().all(|&id| routed(id)));
        debug_assert!(damaged.iter().all(|c| routed(c.file.id)));
        (items, damaged)
    }
}

/// The key ranges a root made over the leaves (`found`) left to the mend's scan: those its
/// checkpoint rewrote, and those under the previous tree's nodes that did not read.
fn left_to_scan(found: Option<&super::salvage::RootFound>) -> Vec<Lost> {
    let Some(r) = found else {
        return Vec::new();
    };
    (r.scanned.iter())
        .map(|&(keys, (block, generation))| Lost {
            keys,
            generation,
            block,
            why: match block == r.lost.0 {
                true => "made over the leaves: a key range its checkpoint rewrote".into(),
                false => "a node of the previous checkpoint's tree, under the lost root made \
                          over the leaves"
                    .into(),
            },
        })
        .collect()
}

/// The parts of `keys` outside every range of `ranges` (in key order, disjoint).
fn outside(keys: KeyRange, ranges: &[KeyRange]) -> Vec<KeyRange> {
    let mut out = Vec::new();
    let mut from = Some(keys.0);
    for r in ranges {
        let Some(f) = from else { break };
        let before_end = keys.1.is_none_or(|hi| r.0 < hi);
        if r.1.is_some_and(|hi| hi <= f) || !before_end {
            continue; // wholly before what is left, or after the range
        }
        if r.0 > f {
            out.push((f, Some(r.0)));
        }
        from = r.1;
    }
    if let Some(f) = from.filter(|&f| keys.1.is_none_or(|hi| f < hi)) {
        out.push((f, keys.1));
    }
    // Each part inside `keys`, outside every range.
    debug_assert!(out.iter().all(|p| p.0 >= keys.0
        && ranges
            .iter()
            .all(|r| r.1.is_some_and(|hi| hi <= p.0) || p.1.is_some_and(|hi| hi <= r.0))));
    out
}

/// The leaves of `tree` that do not read, and how many entries the others hold. An I/O
/// error fails it (damage is not taken for what a read could not tell).
fn unreadable_leaves(tree: &Tree, io: &mut VolIo<'_>) -> Result<(Vec<Bad>, u64)> {
    let mut bad = Vec::new();
    let mut good = 0u64;
    tree.visit_leaves(io, &mut |l: LeafVisit| {
        match l.read {
            Ok(items) => good += items.len() as u64,
            Err((e @ Error::Corrupt { .. }, raw)) => bad.push(Bad {
                keys: l.keys,
                at: l.at.expect("a leaf in memory reads"),
                level: l.level,
                why: e,
                raw,
            }),
            Err((e, _)) => return Err(e),
        }
        Ok(())
    })?;
    // In key order, each range holding keys.
    debug_assert!(bad.windows(2).all(|w| w[0].keys.0 < w[1].keys.0));
    debug_assert!(bad.iter().all(|b| b.keys.1.is_none_or(|hi| b.keys.0 < hi)));
    Ok((bad, good))
}
