//! The salvage's report ([`Salvage`]), the page path's mend's ([`MendedLeaves`]) and the
//! places of each file's metadata ([`FilePlace`]): what `Volume::open_salvaging` and
//! `Volume::mend_unreadable_leaves` found damaged and what they made of it.
//!
//! Data structures: [`Salvage`], [`MendedLeaves`], [`TreeScan`], [`RootFound`], [`LostEntry`],
//! [`ClearedMap`], [`FilePlace`]. Invariant: a clean report is the default one. Locks:
//! none (plain data).

pub use super::super::root::{KeyRange, RootFound};
#[cfg(doc)]
use super::Volume;
use std::ops::Range;

/// What [`Volume::open_salvaging`] found damaged and what it made of it. A volume with no
/// damage gives an empty one ([`Salvage::clean`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Salvage {
    /// The journal was damaged in the middle: the first record lost, and how many intact
    /// records after it could not be replayed.
    pub journal_loss: Option<(u64, u64)>,
    /// An earlier open accepted such a loss and the repair after it did not finish
    /// ([`Store::journal_loss_earlier`](crate::store::Store::journal_loss_earlier)): what
    /// it lost is no longer known.
    pub journal_loss_earlier: bool,
    /// Damaged file table entries (at least: a damaged stretch that lost its entries'
    /// magics counts as one, unless the table's header counts more).
    pub damaged_entries: u64,
    /// Damaged entries kept: `(id it has now, id its entry named)`.
    pub recovered: Vec<(u64, u64)>,
    /// Damaged entries lost (their files are gone; their blocks stay allocated).
    pub lost: Vec<LostEntry>,
    /// Damaged entries not kept because the journal's changes since the last checkpoint
    /// remove their files (unlinked, or made anew under their ids): the page path's mend
    /// ([`MendedLeaves::removed`]; the salvage keeps such an entry and its replay then
    /// removes it). Their ids.
    pub removed: Vec<u64>,
    /// Files whose map could not be read: kept with an empty map (they read as holes).
    pub maps_cleared: Vec<ClearedMap>,
    /// The table's crc did not match the root's (it was read frame by frame).
    pub table_damaged: bool,
    /// Journal changes that named a file not there (lost), skipped.
    pub changes_skipped: u64,
    /// The table's list of retired map segments was damaged: those segments leak.
    pub retired_lost: bool,
    /// Files the damaged table lost that the previous checkpoint's table (in the other
    /// area) still held with a map that survived: taken from it, so their bytes may be
    /// older than at the last checkpoint. Also listed in `recovered` once settled.
    pub restored: Vec<u64>,
    /// Map segments the table both named (in an entry, its map whole) and listed as
    /// retired, a stale table block's doing: kept named, so that they are freed once, by
    /// a later checkpoint, and not twice.
    pub segments_unretired: u64,
    /// The file tree lost internal nodes (or its root): the device was scanned for the
    /// leaves under them, whose entries are then kept as damaged entries are.
    pub tree_scan: Option<TreeScan>,
    /// Leaves of the file tree that did not read, mended in place by `fsck --repair`'s
    /// page path ([`Volume::mend_unreadable_leaves`]): each one's first block and why.
    /// Their entries are in `recovered`, `restored` and `lost` as the salvage's are.
    pub leaves_mended: Vec<(u64, String)>,
    /// The file tree's root was lost and `fsck --repair`'s page path made it again over
    /// the nodes under it ([`MendedLeaves::root_found`]).
    pub root_found: Option<RootFound>,
}

/// The salvage's scan of the device for the file tree's leaves under the internal nodes
/// (or the root) its walk lost: every block the bitmaps mark used is read (every other
/// block too if that leaves keys missing), and each key of a lost range is taken from the newest
/// whole leaf spanning it that the allocator holds, else from the newest free one
/// (`docs/format.md`, "The file tree").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TreeScan {
    /// The internal nodes lost (the root, when it did not read as a node, is one): each
    /// one's first block and why it was lost.
    pub nodes_lost: Vec<(u64, String)>,
    /// Blocks the scan read (or covered by an earlier scan's note during the same
    /// repair, reading only the nodes found there).
    pub blocks_read: u64,
    /// Of them, blocks that did not read (a bad sector: the device's read error), skipped;
    /// a leaf there was not found, and its entries are missing as a damaged leaf's are.
    pub blocks_unreadable: u64,
    /// Whole leaves found, in blocks the allocator holds, that the walk had not read.
    pub leaves_found: u64,
    /// Whole leaves found in free blocks (copies older checkpoints freed): taken only for
    /// keys no held leaf spans, as where the tree's one leaf was lost after the checkpoint
    /// that freed its previous copy.
    pub freed_leaves_found: u64,
    /// Entries of the lost key ranges the leaves gave back (each then kept only if its map
    /// survived, as any damaged entry).
    pub entries: u64,
    /// Of them, those from leaves in free blocks (their bytes may be older).
    pub entries_freed: u64,
    /// Whole leaves found that carry no stamp of this volume (root version 7): another
    /// volume's, left by a `mkfs` without discard, or a node's bytes written into a file;
    /// none of their entries is taken.
    pub foreign_leaves: u64,
}

/// A damaged table entry whose file could not be kept.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct LostEntry {
    /// The entry's bytes on the device.
    pub bytes: Range<u64>,
    /// Its file's id, if its body decoded.
    pub id: Option<u64>,
    /// Why it was not kept.
    pub why: String,
}

/// A file kept without its map.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ClearedMap {
    /// The file's id.
    pub id: u64,
    /// Why its map could not be read.
    pub why: String,
}

/// Where a file's metadata lives on the device ([`Volume::places`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct FilePlace {
    /// The file's id.
    pub id: u64,
    /// Device bytes of its entry in the active table as of the last checkpoint (empty if
    /// the file is newer than that table).
    pub table: Range<u64>,
    /// Device bytes of its map in a map segment (none if the map is in the table, or the
    /// file is newer than the table).
    pub map: Option<Range<u64>>,
}

/// Where one of the file tree's internal nodes lies ([`Volume::tree_nodes`](crate::volume::Volume::tree_nodes)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct TreeNodePlace {
    /// Its device bytes.
    pub bytes: Range<u64>,
    /// Its level: 1 for a node whose children are leaves.
    pub level: u8,
    /// It is the tree's root.
    pub root: bool,
}

impl Salvage {
    /// True if nothing was damaged.
    pub fn clean(&self) -> bool {
        *self == Salvage::default()
    }
}

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
    /// Entries found (under a lost node, in a leaf that did not read) whose files the
    /// journal's changes since the last checkpoint remove (unlinked, or made anew under
    /// their ids): not kept, as the replay drops them (their ids).
    pub removed: Vec<u64>,
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
    /// The root was lost, and the repair's open made it again over the nodes under it
    /// ([`Volume::open_for_repair`]); `None` when it was not.
    pub root_found: Option<RootFound>,
}

impl MendedLeaves {
    /// At most how many blocks the mend leaves owned by no one, if known: the lost entries'
    /// that decoded; `None` when an entry was lost with its bytes (undecodable, or found
    /// nowhere), whose blocks no one can tell (the salvage keeps none of them either).
    pub fn leaked_bound(&self) -> Option<u64> {
        // A lost node's subtree (its own internal nodes, the leaves the scan found), or
        // the nodes between a root made again and the level its children were found at
        // below the one they belong to, are owned by no one now, in a number no one
        // counted. (A lost root made again over its own children waits in the mended.)
        let unknown = self.uncounted > 0
            || self.lost.iter().any(|l| l.id.is_none())
            || self.tree_scan.is_some()
            || self.root_found.as_ref().is_some_and(|r| r.levels_down > 0);
        (!unknown).then_some(self.lost_blocks)
    }

    /// Puts what the mend found into `salvage` as the salvage reports the same entries
    /// (damaged entries counted, kept ones in `recovered`, restored ones in both
    /// `restored` and `recovered`, lost ones in `lost`), with the leaves mended.
    pub fn report_into(self, salvage: &mut Salvage) {
        let found = self.recovered.len() + self.lost.len() + self.removed.len();
        salvage.damaged_entries += found as u64 + self.uncounted;
        salvage.removed.extend(self.removed);
        salvage.recovered.extend(self.recovered);
        salvage
            .recovered
            .extend(self.restored.iter().map(|&id| (id, id)));
        salvage.restored.extend(self.restored);
        salvage.lost.extend(self.lost);
        salvage.leaves_mended.extend(self.leaves);
        salvage.tree_scan = self.tree_scan.or(salvage.tree_scan.take());
        salvage.root_found = self.root_found.or(salvage.root_found.take());
        // Every leaf mended is reported, each kept entry once.
        debug_assert!(salvage.recovered.len() >= salvage.restored.len());
    }
}
