//! Mending the file tree's leaves that do not read, in place of the salvage, for
//! `fsck --repair`'s page path ([`Volume::mend_unreadable_leaves`]): the intact tree kept,
//! and each damaged leaf's key range rebuilt from what survives, with the salvage's rules
//! (`salvage.rs`): the leaf's frames that check, as they are (all of them checked as
//! damaged entries when the leaf is a whole node of another checkpoint); a damaged entry
//! whose body decodes, if its map survived (under a fresh id when its own is not free);
//! and the previous checkpoint's entries for the range that neither gave, if their maps
//! survived (their bytes may be older). A pending entry is not kept (an open removes it);
//! one whose map lies outside the tree and survived sends the repair to the salvage,
//! which writes such a map anew. An internal node the open lost (a hole, `walk.rs`) is
//! filled from the salvage's scan of the device for the leaves under it (`nodescan.rs`),
//! its entries taken as damaged ones. Memory: one leaf at a time, the damaged ranges'
//! entries, and every mapped extent (for the survival checks), never every file.
//!
//! Data structures: [`MendedLeaves`], the report. Invariant: afterwards every leaf of the
//! tree in memory reads, no entry kept maps a block another file, the tree or a map
//! segment holds, and the nodes replaced wait in `Meta::mended` for the next checkpoint to
//! retire (owned until then). Locks: the gate for writing, then the meta mutex (briefly,
//! never across a read).

use super::node::{self, NodeRef};
use super::nodescan::{self, Lost, ScanProgress};
use super::salvage::{survived, LostEntry, Salvage, TreeScan};
use super::state::{FileTable, Volume};
use super::table::{decode_file, file_body, TableFile};
use super::tree::{LeafVisit, NodeIo, Tree};
use super::treeio::VolIo;
use crate::error::{Error, Result};
use std::collections::{BTreeMap, BTreeSet};

/// What [`Volume::mend_unreadable_leaves`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct MendedLeaves {
    /// The leaves that did not read: each one's first block and why.
    pub leaves: Vec<(u64, String)>,
    /// Entries kept from their frames that checked, as they were.
    pub intact: u64,
    /// Damaged entries kept: `(id it has now, id its entry named)` (a fresh id when the
    /// one named is 0, never handed out, or another file's, as the salvage gives it).
    pub recovered: Vec<(u64, u64)>,
    /// Files taken from the previous checkpoint's tree (their bytes may be older).
    pub restored: Vec<u64>,
    /// Damaged entries not kept (their blocks are owned by no one: the bitmaps' rebuild
    /// frees them).
    pub lost: Vec<LostEntry>,
    /// Entries the tree counted that were found nowhere: in none of the leaves that read,
    /// and in no frame of those that did not (lost inside a damaged stretch).
    pub uncounted: u64,
    /// Blocks the maps of the lost entries that decoded counted (at most what they leave
    /// owned by no one).
    pub lost_blocks: u64,
    /// Internal nodes the open lost (a hole under the root: `walk.rs`), filled from a scan
    /// of the device for the leaves under them, as the salvage's scan does
    /// (`nodescan.rs`); `None` when none was lost.
    pub tree_scan: Option<TreeScan>,
}

impl MendedLeaves {
    /// At most how many blocks the mend leaves owned by no one, if known: the lost entries'
    /// that decoded; `None` when an entry was lost with its bytes (undecodable, or found
    /// nowhere), whose blocks no one can tell (the salvage keeps none of them either).
    pub fn leaked_bound(&self) -> Option<u64> {
        // A lost node's subtree (its own internal nodes, the leaves the scan found) is
        // owned by no one now, in a number no one counted.
        let unknown = self.uncounted > 0
            || self.lost.iter().any(|l| l.id.is_none())
            || self.tree_scan.is_some();
        (!unknown).then_some(self.lost_blocks)
    }

    /// Puts what the mend found into `salvage` as the salvage reports the same entries
    /// (damaged entries counted, kept ones in `recovered`, restored ones in both
    /// `restored` and `recovered`, lost ones in `lost`), with the leaves mended.
    pub fn report_into(self, salvage: &mut Salvage) {
        salvage.damaged_entries += (self.recovered.len() + self.lost.len()) as u64 + self.uncounted;
        salvage.recovered.extend(self.recovered);
        salvage
            .recovered
            .extend(self.restored.iter().map(|&id| (id, id)));
        salvage.restored.extend(self.restored);
        salvage.lost.extend(self.lost);
        salvage.leaves_mended.extend(self.leaves);
        salvage.tree_scan = self.tree_scan.or(salvage.tree_scan.take());
        // Every leaf mended is reported, each kept entry once.
        debug_assert!(salvage.recovered.len() >= salvage.restored.len());
    }
}

/// A leaf's entries by id.
type Items = BTreeMap<u64, Vec<u8>>;

/// A damaged entry to keep if its map survived, with its bytes on the device.
type Candidate = (TableFile, std::ops::Range<u64>);

/// What the entries offered for a mended leaf are checked against: every block owned by
/// a file, the tree or a map segment (with those kept so far), the ids in use.
struct Keeper<'a> {
    vol: &'a Volume,
    taken: super::file::Ranges,
    next_id: u64,
    cached: FileTable,
}

impl<'a> Keeper<'a> {
    /// Reads what everything owns now (every map once; memory: every mapped extent). The
    /// caller holds the gate for writing.
    fn new(vol: &'a Volume) -> Result<Keeper<'a>> {
        let mut owned = vol.files_owned(&mut super::check::VolumeCheck::default())?;
        vol.own_metadata(&mut owned);
        let mut taken = super::file::Ranges::default();
        owned.iter().for_each(|e| taken.insert(e.start, e.len));
        // Every owner is taken (each extent's first block, at least).
        debug_assert!(owned
            .iter()
            .all(|e| e.len == 0 || !taken.within(e.start, e.start + 1).is_empty()));
        Ok(Keeper {
            vol,
            taken,
            next_id: vol.meta.lock().next_id,
            cached: vol.files.read().clone(),
        })
    }

    /// `id` is one a file may have (handed out) and no file has now.
    fn wanted(&self, id: u64, tree: &Tree, io: &mut VolIo<'_>) -> Result<bool> {
        let free = id != 0 && id < self.next_id && !self.cached.contains_key(&id);
        let wanted = free && tree.get(io, id)?.is_none();
        debug_assert!(
            !wanted || (id > 0 && id < self.next_id),
            "id {id} never handed out"
        );
        Ok(wanted)
    }

    /// Puts `f` into the tree under id `now` if its map survived (see `salvage.rs`), its
    /// blocks then taken; `Ok(Err(why))` if not (a pending file is not kept: an open
    /// removes it, as the salvage's repair does). A map outside the tree (in a map segment
    /// or runs of its own) is refused with [`Error::Corrupt`]: the salvage loads such a map
    /// and writes it anew, which the mend does not (the repair then takes the salvage).
    fn keep(
        &mut self,
        f: TableFile,
        now: u64,
        tree: &mut Tree,
        io: &mut VolIo<'_>,
    ) -> Result<std::result::Result<(), String>> {
        let v = self.vol;
        let entries = match survived(&v.store, v.dev.as_ref(), &f, &self.taken) {
            Ok(entries) => entries,
            Err(why) => return Ok(Err(why)),
        };
        if !f.map.segments().is_empty() {
            return Err(super::record::corrupt(
                "a damaged file tree leaf's entry has its map outside the tree: the salvage \
                 writes it anew",
            ));
        }
        if f.attr == super::publish::PENDING {
            return Ok(Err("a pending file: removed, as an open removes it".into()));
        }
        for (_, e, _) in &entries {
            self.taken.insert(e.start, e.len);
        }
        let end = entries
            .last()
            .map_or(0, |&(l, e, _)| (l + e.len) * v.block_size);
        let f = TableFile {
            id: now,
            size: f.size.min(end),
            ..f
        };
        let mut replaced = Vec::new();
        tree.put(io, now, Some(file_body(&f)), &mut replaced)?;
        // A fresh id's leaf was another (read, then changed): retired with the mended ones.
        v.meta.lock().mended.extend(replaced);
        debug_assert!(
            tree.get(io, now).is_ok_and(|b| b.is_some()),
            "file {now} kept"
        );
        Ok(Ok(()))
    }

    /// Keeps each damaged entry whose map survived, under its own id if no file has it,
    /// else under a fresh one (the salvage's `Kept::take`); reports the others lost.
    fn take_damaged(
        &mut self,
        candidates: Vec<Candidate>,
        tree: &mut Tree,
        io: &mut VolIo<'_>,
        out: &mut MendedLeaves,
    ) -> Result<()> {
        let before = out.recovered.len() + out.lost.len();
        let offered = candidates.len();
        for (f, bytes) in candidates {
            let was = f.id;
            let blocks = f.map.counts().1;
            // The fresh id is drawn only for a file kept.
            let own = self.wanted(was, tree, io)?;
            let now = if own { was } else { self.next_id };
            match self.keep(f, now, tree, io)? {
                Ok(()) => {
                    if !own {
                        assert_eq!(self.fresh(), now, "the fresh id drawn");
                    }
                    out.recovered.push((now, was));
                }
                Err(why) => {
                    out.lost_blocks += blocks;
                    out.lost.push(LostEntry {
                        bytes,
                        id: Some(was),
                        why,
                    });
                }
            }
        }
        // Each damaged entry is kept or reported lost.
        debug_assert_eq!(out.recovered.len() + out.lost.len(), before + offered);
        Ok(())
    }

    /// Restores from the previous checkpoint's tree (root `root`) each entry of the key
    /// range `keys` that no file has now and whose map survived (its bytes may be older).
    fn restore_previous(
        &mut self,
        root: NodeRef,
        keys: (u64, Option<u64>),
        tree: &mut Tree,
        io: &mut VolIo<'_>,
        out: &mut MendedLeaves,
    ) -> Result<()> {
        let first = out.restored.len();
        for (id, body) in previous_range(io, root, keys)? {
            let Ok(f) = decode_file(&body) else { continue };
            if self.wanted(id, tree, io)? && self.keep(f, id, tree, io)?.is_ok() {
                out.restored.push(id);
            }
        }
        // What it restored lies in the range, each id once.
        debug_assert!(out.restored[first..]
            .iter()
            .all(|&id| id >= keys.0 && keys.1.is_none_or(|hi| id < hi)));
        debug_assert!(out.restored[first..].windows(2).all(|w| w[0] < w[1]));
        Ok(())
    }

    /// A fresh id for a kept entry whose own is not free (the next the volume hands out).
    fn fresh(&mut self) -> u64 {
        let mut meta = self.vol.meta.lock();
        let id = meta.next_id;
        meta.next_id += 1;
        self.next_id = meta.next_id;
        debug_assert!(id > 0 && id < self.next_id);
        id
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
    /// grows with the entries under the lost nodes, not with the file count.
    ///
    /// Fails, changing nothing, on an I/O error, and with [`Error::Corrupt`] on damage it
    /// does not mend: a leaf whose bytes are another volume's whole node (its keys may lie
    /// anywhere on the device: the salvage scans for them).
    pub fn mend_unreadable_leaves(&self) -> Result<MendedLeaves> {
        self.mend_unreadable_leaves_reporting(&|_| {})
    }

    /// [`Volume::mend_unreadable_leaves`], telling `progress` how far the scan of the
    /// device for the leaves under a lost internal node has gone (it runs only then: on a
    /// large device the mend's one long step), after each 256 blocks read. It leaves what
    /// [`Volume::mend_unreadable_leaves`] leaves.
    pub fn mend_unreadable_leaves_reporting(
        &self,
        progress: &dyn Fn(ScanProgress),
    ) -> Result<MendedLeaves> {
        let _closed = self.gate.write();
        let (tree, mended, next_id) = {
            let meta = self.meta.lock();
            (meta.tree.clone(), meta.mended.len(), meta.next_id)
        };
        let result = self.mend_locked(progress);
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
    fn mend_locked(&self, progress: &dyn Fn(ScanProgress)) -> Result<MendedLeaves> {
        debug_assert!(self.gate.is_locked_exclusive(), "a mend, the gate open");
        let mut out = MendedLeaves::default();
        let (tree, stamp, previous) = {
            let meta = self.meta.lock();
            let previous = super::load::volume_root(&self.store)?
                .tree
                .and_then(|t| t.previous);
            (meta.tree.clone(), meta.stamp, previous)
        };
        let Some(mut tree) = tree else {
            return Ok(out); // every file in memory: no leaf to read
        };
        let mut io = VolIo::new(&self.store, self.dev.as_ref(), stamp);
        let counted = tree.count();
        let (bad, good) = unreadable_leaves(&tree, &mut io)?;
        if bad.is_empty() {
            debug_assert_eq!(tree.holes(), 0, "a hole reads as no leaf");
            return Ok(out);
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
        let read: BTreeSet<u64> = match holes.is_empty() {
            true => BTreeSet::new(),
            false => tree.nodes().iter().map(|n| n.block).collect(),
        };
        // Each damaged leaf's frames that check, in place of the leaf; the rest to be
        // checked against what everything else owns. Each hole an empty subtree, for the
        // scan's entries.
        let mut mended = Vec::new();
        let mut candidates = Vec::new();
        let mut kept = 0u64;
        for b in &bad {
            let (items, damaged) = self.salvage_leaf(b, &mut out);
            kept += items.len() as u64;
            out.leaves.push((b.at.block, b.why.to_string()));
            tree.replace_leaf(b.keys.0, items, &mut mended);
            candidates.extend(damaged);
        }
        for h in &holes {
            tree.replace_subtree(h.keys.0, h.level, &mut mended);
        }
        out.intact = kept;
        let found = good + kept + (candidates.len() + out.lost.len()) as u64;
        tree.recount(good + kept);
        {
            let mut meta = self.meta.lock();
            meta.tree = Some(tree.clone());
            meta.mended.extend(mended.iter().copied());
        }
        let mut keeper = Keeper::new(self)?;
        let missing = counted.saturating_sub(found);
        let read = (&read, missing);
        let scanned = self.scan_holes(&holes, read, (&mut keeper, progress), &mut out)?;
        out.uncounted = counted.saturating_sub(found + scanned.len() as u64);
        candidates.extend(scanned);
        keeper.take_damaged(candidates, &mut tree, &mut io, &mut out)?;
        if let Some((root, _)) = previous {
            for b in &bad {
                keeper.restore_previous(root, b.keys, &mut tree, &mut io, &mut out)?;
            }
        }
        let added = (out.recovered.len() + out.restored.len()) as u64;
        tree.recount(good + kept + added);
        // Every leaf reads now (those mended are in memory), no hole is left, and what was
        // kept is counted.
        debug_assert!(out.leaves.len() == bad.len() && tree.holes() == 0);
        debug_assert_eq!(out.tree_scan.is_some(), !holes.is_empty());
        self.meta.lock().tree = Some(tree);
        Ok(out)
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
        holes: &[Bad],
        (read, missing): (&BTreeSet<u64>, u64),
        (keeper, progress): (&mut Keeper<'_>, &dyn Fn(ScanProgress)),
        out: &mut MendedLeaves,
    ) -> Result<Vec<Candidate>> {
        if holes.is_empty() {
            return Ok(Vec::new());
        }
        let lost: Vec<Lost> = holes
            .iter()
            .map(|h| Lost {
                keys: h.keys,
                generation: h.at.generation,
                block: h.at.block,
                why: h.why.to_string(),
            })
            .collect();
        let stamp = self.meta.lock().stamp;
        let known = BTreeSet::new(); // the holes' ranges hold no key the open found
        let sc = nodescan::scan(
            &self.store,
            self.dev.as_ref(),
            &lost,
            (read, &known, missing),
            // No previous table gives back keys under a hole: its spans are not needed.
            (stamp, u64::MAX, progress),
        )?;
        for e in &sc.leaves {
            keeper.taken.insert(e.start, e.len);
        }
        out.tree_scan = Some(super::salvage::scan::tree_scan(&lost, &sc));
        let entries: Vec<Candidate> = (sc.entries.into_iter())
            .filter_map(|d| d.file.map(|f| (f, d.bytes)))
            .collect();
        // Each entry lies in a hole's range.
        debug_assert!(entries.iter().all(|(f, _)| lost
            .iter()
            .any(|l| f.id >= l.keys.0 && l.keys.1.is_none_or(|hi| f.id < hi))));
        Ok(entries)
    }

    /// A damaged leaf's entries routed to it: those whose frames check (none if the leaf
    /// is a whole node of another checkpoint: stale; none whose map lies outside the
    /// tree), to keep as they are; and the others whose bodies decode, with their bytes on
    /// the device, to keep only if their maps survived. What does not decode goes to
    /// `out.lost`.
    fn salvage_leaf(&self, b: &Bad, out: &mut MendedLeaves) -> (Items, Vec<Candidate>) {
        let raw = b.raw.as_deref().unwrap_or_default();
        let stale = node::is_stale(raw, b.at);
        let payload = node::leaf_payload_unchecked(raw);
        let frames = super::treeio::leaf_frames(payload, b.at, b.keys, self.block_size);
        let mut items = BTreeMap::new();
        let mut damaged = Vec::new();
        for (f, bytes) in frames.intact {
            // A stale leaf's frames are not this leaf's; a map outside the tree is damage in
            // an unmarked leaf: both checked as damaged entries are (`Keeper::keep`).
            if stale || !f.map.segments().is_empty() {
                damaged.push((f, bytes));
            } else {
                items.insert(f.id, file_body(&f));
            }
        }
        for d in frames.damaged {
            match d.file {
                Some(f) => damaged.push((f, d.bytes)),
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
        debug_assert!(damaged.iter().all(|(f, _)| routed(f.id)));
        (items, damaged)
    }
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

/// The previous checkpoint's entries whose keys lie in `keys` (`lo..hi`), reading only the
/// nodes on the way to them; a node that does not read gives nothing (best effort: it is
/// a second copy).
fn previous_range(
    io: &mut VolIo<'_>,
    root: NodeRef,
    keys: (u64, Option<u64>),
) -> Result<Vec<(u64, Vec<u8>)>> {
    let mut out = Vec::new();
    // Each node with the level its parent is at (a child must be below it: no cycle).
    let mut stack = vec![(root, (0u64, None::<u64>), node::MAX_LEVEL + 1)];
    let overlaps = |r: (u64, Option<u64>)| {
        r.1.is_none_or(|hi| hi > keys.0) && keys.1.is_none_or(|hi| r.0 < hi)
    };
    while let Some((at, range, above)) = stack.pop() {
        let d = match io.read(at) {
            Ok(d) if d.level < above => d,
            Ok(_) | Err(Error::Corrupt { .. }) => continue,
            Err(e) => return Err(e),
        };
        if d.level == 0 {
            let Ok(items) = super::tree::leaf_items(&d.payload) else {
                continue;
            };
            let inside = |id: &u64| *id >= keys.0 && keys.1.is_none_or(|hi| *id < hi);
            out.extend(items.into_iter().filter(|(id, _)| inside(id)));
            continue;
        }
        let Ok(children) = node::decode_children(&d, at.generation) else {
            continue;
        };
        for (i, c) in children.iter().enumerate() {
            let lo = if i == 0 { range.0 } else { c.first };
            let hi = children.get(i + 1).map(|n| n.first).or(range.1);
            if overlaps((lo, hi)) {
                stack.push((c.at, (lo, hi), d.level));
            }
        }
    }
    out.sort_unstable_by_key(|(id, _)| *id);
    debug_assert!(out
        .iter()
        .all(|(id, _)| *id >= keys.0 && keys.1.is_none_or(|hi| *id < hi)));
    Ok(out)
}
