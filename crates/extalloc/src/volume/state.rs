//! The [`Volume`] itself: its fields and the state they hold ([`Meta`], the file table,
//! the map segments in use, the claimed runs of groups), the figures its listings return
//! ([`FileInfo`], [`FileExtent`]) and the constants every part of the volume uses. What
//! each field means and the lock order are in the parent module; the volume's calls live
//! in the parent and the other files. This file names only `file.rs` (a file in memory).

use super::file::VFile;
use crate::disk::device::Device;
use crate::geometry::Extent;
use crate::store::Store;
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::Arc;

/// Blocks one chunk of a write or fallocate maps at most (one trip through the gate).
pub(crate) const CHUNK_BLOCKS: u64 = 16;
/// Extents one chunk of a truncate, punch or unlink frees at most.
pub(super) const CHUNK_EXTENTS: usize = 16;
/// Journal bytes one chunk may add at most: an allocation or free (24 bytes in the store's
/// record) and a change (counted as 48 bytes in the payload; a map change, the largest a
/// chunk logs for a block, takes 34) per block, twice over.
pub(super) const CHUNK_BUDGET: u64 = CHUNK_BLOCKS * 2 * (24 + 48);
/// A journal record with no change: its header.
pub(super) const EMPTY_RECORD_BYTES: u64 = 40;
/// The id of the allocations holding the volume's own table areas.
pub(super) const TABLE_OWNER: u64 = u64::MAX;
/// The next volume's identity (atomic groups tell volumes apart by it).
pub(super) static NEXT_IDENTITY: AtomicU64 = AtomicU64::new(1);

/// One file as [`Volume::list`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct FileInfo {
    /// The file's id.
    pub id: u64,
    /// Size in bytes.
    pub size: u64,
    /// Mapped extents (written or not).
    pub extents: u64,
    /// Blocks mapped.
    pub blocks: u64,
    /// Blocks its preallocations hold beyond what it maps (given back at `close_file`).
    pub prealloc_blocks: u64,
}

/// One mapped extent of a file ([`Volume::extents`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct FileExtent {
    /// First logical block.
    pub logical: u64,
    /// The physical blocks.
    pub extent: Extent,
    /// Allocated by `fallocate` and not written since: reads as zeros.
    pub unwritten: bool,
}

/// The volume's files by id, each under its own mutex.
pub(super) type FileTable = BTreeMap<u64, Arc<Mutex<VFile>>>;

/// The volume's own bookkeeping: ids and where its table lives.
#[derive(Debug, Clone)]
pub(super) struct Meta {
    pub(super) next_id: u64,
    /// The two table areas of a volume opened from a version 2 or 3 root (`area.rs`): the
    /// active one holds the table the root names. The first checkpoint retires both.
    pub(super) areas: [super::area::Area; 2],
    /// The durable file tree (`tree.rs`); `None`: the next checkpoint builds one from every
    /// file (a new volume, an upgrade, a salvage).
    pub(super) tree: Option<super::tree::Tree>,
    /// The durable root's tree and its entries (the next root's `previous`); `None` also
    /// after a repair's open made a lost root again (`rootfind.rs`: the lost one does not
    /// read).
    pub(super) durable: Option<(super::node::NodeRef, u64)>,
    /// The checkpoint generation of the durable root.
    pub(super) generation: u64,
    /// The volume's stamp, which every node the next checkpoints write carries: the
    /// durable root's (version 7); `None` until the first checkpoint of a new volume or of
    /// an older root mints it (`node::Stamp::mint`).
    pub(super) stamp: Option<super::node::Stamp>,
    /// The durable tree's nodes when `tree` is `None` (read, but damaged): the build that
    /// replaces it retires them.
    pub(super) old_nodes: Vec<Extent>,
    /// Blocks the durable tree's nodes take (a lost root made again: with the lost one's,
    /// which waits in `mended`).
    pub(super) tree_blocks: u64,
    /// The index blocks of the durable root's retired chain: kept while that root is in
    /// force (an open reads the chain), so retired by the next checkpoint, not freed.
    pub(super) chain: Vec<u64>,
    /// Files the open replayed changes onto: changed since the durable tree.
    pub(super) replayed: BTreeSet<u64>,
    /// Nodes of the durable tree a repair replaced in `tree` (a leaf that did not read,
    /// and the path above it: `leafrepair.rs`; a lost root made again: `rootfind.rs`), for
    /// the next checkpoint to retire.
    pub(super) mended: Vec<super::node::NodeRef>,
    /// The journal's changes naming files whose entries a repair's open could not read
    /// (`load.rs`: under a hole, in a failed leaf), in order, set aside for the mend to
    /// apply to the entries it keeps (`leafkeep.rs`); empty once the mend has run.
    pub(super) aside: Vec<super::record::Change>,
    /// A repair's open took a tree it could not read whole (holes, failed marked leaves,
    /// changes set aside): no checkpoint until the mend has run (`leafrepair.rs`).
    pub(super) unmended: bool,
    /// A repair's open made the file tree's root again over the nodes under it
    /// (`rootfind.rs`): what the mend reports of it.
    pub(super) root_found: Option<super::root::RootFound>,
}

/// Persistent files on a [`Store`] (see the module documentation).
pub struct Volume {
    pub(super) store: Store,
    pub(super) dev: Arc<dyn Device>,
    pub(super) block_size: u64,
    /// Atomic groups read, commits write: no commit falls inside a group (`atomic.rs`).
    pub(super) groups: RwLock<()>,
    /// Why commits stopped: a group was left half made (`atomic.rs`).
    pub(super) aborted: Mutex<Option<String>>,
    /// Shut down ([`Volume::shutdown`]): every change and commit is refused.
    pub(super) shut: AtomicBool,
    /// This volume among others in the process (atomic groups' thread-local list).
    pub(super) identity: u64,
    /// Operations read, commits write: an operation's store changes and its logged
    /// changes always land in the same transaction.
    pub(super) gate: RwLock<()>,
    pub(super) files: RwLock<FileTable>,
    /// Encoded changes since the last commit.
    pub(super) log: Mutex<Vec<u8>>,
    pub(super) meta: Mutex<Meta>,
    /// The root the next checkpoint writes: set by the volume's own checkpoint, taken by
    /// the store's checkpoint hook. Any other checkpoint finds none and is refused.
    pub(super) prepared_root: Arc<Mutex<Option<Vec<u8>>>>,
    /// Blocks reserved for cached data not yet placed (`delalloc.rs`).
    pub(super) delalloc: Mutex<u64>,
    /// Files holding a reservation for cached data (`delalloc.rs`): each becomes a changed
    /// file when written back, so the room kept for the tree counts them beside the
    /// changed files (`room.rs`). Grows only under `delalloc`.
    pub(super) cached_files: AtomicU64,
    /// Runs of groups placed files have claimed for their first allocations (`io.rs`).
    pub(super) claims: Mutex<Claims>,
    /// Data written since the last flush (set under the gate read, taken under it written).
    pub(super) unflushed: AtomicBool,
    /// Files holding appended bytes not yet on the device (`tail.rs`): the next commit
    /// writes them before its flush.
    pub(super) tails: Mutex<std::collections::BTreeSet<u64>>,
    /// The map segments in use (`maps.rs`).
    pub(super) segs: Mutex<Segs>,
    /// Maps read since the open.
    pub(super) maps_read: AtomicU64,
    /// Blocks the durable file tree takes (or, opened from table areas, the table): part
    /// of the room kept for metadata (`room.rs`, `Volume::reserve_margin`).
    pub(super) table_blocks: AtomicU64,
    /// What a checkpoint may rewrite of the tree whatever changed: its internal nodes, its
    /// height and one (`room.rs`; `room::NO_TREE` while the first checkpoint builds it).
    pub(super) tree_fixed: AtomicU64,
    /// Files, changed or admitted, the room kept for the tree covered when last computed
    /// (`room.rs`; 0: compute it at the next check).
    pub(super) tree_dirty_limit: AtomicU64,
    /// Calls admitted to change files and not yet done (`room.rs`, `room::Admitted`):
    /// counted in the room kept for the tree beside the changed files.
    pub(super) in_flight: AtomicU64,
    /// The allocator's release count when the node reserve last fell short of its target
    /// (`pool.rs`; `u64::MAX`: it did not): a later top-up tries again only once frees
    /// were released.
    pub(super) node_reserve_short_at: AtomicU64,
    /// Files whose table entry changed since the durable tree (every logged change names
    /// its file here): what the next checkpoint writes.
    pub(super) dirty: Mutex<BTreeSet<u64>>,
    /// Files kept in memory beyond those that must stay (`cache.rs`).
    pub(super) file_cache: AtomicUsize,
    /// The id the next eviction starts from (`cache.rs`).
    pub(super) evict_from: AtomicU64,
    /// Files read from the tree since the open.
    pub(super) files_loaded: AtomicU64,
    /// Files dropped from memory since the open.
    pub(super) files_evicted: AtomicU64,
    /// Keyed reads read, the publish step of a keyed put writes: a key names at most one
    /// file among keyed puts, and a keyed get never reads a file a keyed put removes
    /// (`keyed.rs`).
    pub(super) keys: RwLock<()>,
    /// Files by their blob's hash, for keyed lookups (`keyindex.rs`): built on the first.
    pub(super) key_index: Mutex<super::keyindex::IndexState>,
    /// A keyed lookup asked for the index: `log` keeps it from then on.
    pub(super) key_index_used: AtomicBool,
    /// Held for a build of the key index: one at a time (lookups share `keys`).
    pub(super) key_index_build: Mutex<()>,
}

impl Meta {
    pub(super) fn empty() -> Meta {
        Meta {
            next_id: 1,
            areas: Default::default(),
            tree: None,
            durable: None,
            generation: 0,
            stamp: None,
            old_nodes: Vec::new(),
            tree_blocks: 0,
            chain: Vec::new(),
            replayed: BTreeSet::new(),
            mended: Vec::new(),
            aside: Vec::new(),
            unmended: false,
            root_found: None,
        }
    }
}

/// Runs of free groups claimed by placed files that want more than a group: by group
/// (the claiming file) and by file (the run's first group and length).
#[derive(Default)]
pub(super) struct Claims {
    pub(super) groups: BTreeMap<u64, u64>,
    pub(super) by_file: HashMap<u64, (u64, u64)>,
}

/// The map segments in use: those the durable table names and those it retired; and,
/// so that a checkpoint visits only the files that changed, which file's map lies in
/// which named segment (or spilled run) and the live bytes of each.
#[derive(Debug, Default, Clone)]
pub(super) struct Segs {
    pub(super) named: BTreeSet<Extent>,
    pub(super) retired: Vec<Extent>,
    /// Each file whose durable map is in segments or runs: where, and its bytes there.
    pub(super) held: HashMap<u64, Vec<(Extent, u64)>>,
    /// Each segment or run holding durable maps: their bytes, and their files.
    pub(super) live: BTreeMap<Extent, (u64, BTreeSet<u64>)>,
}

impl Segs {
    /// Notes that file `id`'s durable map is `map` (replacing what was noted).
    pub(super) fn hold(&mut self, id: u64, map: &super::record::MapRef, bs: u64) {
        self.release(id);
        let parts = map.parts(bs);
        if parts.is_empty() {
            return;
        }
        for &(seg, bytes) in &parts {
            let l = self.live.entry(seg).or_default();
            l.0 += bytes;
            l.1.insert(id);
            // A segment's live bytes are its maps' bytes: never more than the segment.
            debug_assert!(l.0 <= seg.len * bs, "segment {seg:?} holds {} bytes", l.0);
        }
        self.held.insert(id, parts);
    }

    /// Notes that file `id` has no durable map in a segment (unlinked, or moved).
    pub(super) fn release(&mut self, id: u64) {
        for (seg, bytes) in self.held.remove(&id).unwrap_or_default() {
            let l = self.live.get_mut(&seg).expect("a held segment is live");
            debug_assert!(l.0 >= bytes && l.1.contains(&id), "{seg:?} holds file {id}");
            l.0 -= bytes;
            l.1.remove(&id);
            if l.1.is_empty() {
                self.live.remove(&seg);
            }
        }
        debug_assert!(!self.held.contains_key(&id));
    }

    /// The live bytes of each segment without the maps of the files in `moving`.
    pub(super) fn live_without(&self, moving: &BTreeSet<u64>) -> BTreeMap<Extent, u64> {
        let mut live: BTreeMap<Extent, u64> = self.live.iter().map(|(&s, l)| (s, l.0)).collect();
        for id in moving {
            for &(seg, bytes) in self.held.get(id).into_iter().flatten() {
                let l = live.get_mut(&seg).expect("a held segment is live");
                *l -= bytes;
            }
        }
        live.retain(|_, &mut bytes| bytes > 0);
        live
    }

    /// Every segment allocated to maps.
    pub(super) fn all(&self) -> impl Iterator<Item = Extent> + '_ {
        self.named
            .iter()
            .copied()
            .chain(self.retired.iter().copied())
    }

    /// A checkpoint that never finished (its `Segments` record replayed after the root):
    /// what it freed is gone and what it wrote is retired, but for a segment a salvaged
    /// file names: a salvaging open can take a lost file from the frames that checkpoint
    /// had written (`salvage.rs`, `restore_previous`), whose map lies in one of its new
    /// segments. Named, such a segment is retired by the next checkpoint once no map uses
    /// it, and so freed once; named and retired, it would be freed twice (found by
    /// `torture --fs-damage --seed 7`: a file table block zeroed).
    pub(super) fn unfinished(&mut self, new: &[Extent], freed: &[Extent]) {
        self.retired.retain(|s| !freed.contains(s));
        self.retired
            .extend(new.iter().filter(|s| !self.named.contains(s)));
        debug_assert!(
            self.retired.iter().all(|s| !self.named.contains(s)),
            "a segment named and retired: {self:?}"
        );
    }

    /// After a salvaging open: a segment both named and retired is named only, and each
    /// retired segment is listed once. A table with a stale block (its crc whole, its
    /// bytes older) can name a segment in an old entry that its newer retired list retires
    /// (`torture --fs-damage --seed 9`); the map read from it checked out, so the file keeps
    /// it, and the next checkpoint retires it once no map uses it: freed once, not twice.
    /// Returns how many retired entries were dropped.
    pub(super) fn settle_salvaged(&mut self) -> usize {
        let before = self.retired.len();
        let mut seen = BTreeSet::new();
        let named = &self.named;
        self.retired
            .retain(|s| !named.contains(s) && seen.insert(*s));
        debug_assert!(self.retired.iter().all(|s| !self.named.contains(s)));
        before - self.retired.len()
    }
}

#[cfg(test)]
mod segs_tests {
    use super::Segs;
    use crate::geometry::Extent;

    #[test]
    fn an_unfinished_checkpoint_retires_its_new_segments_but_those_still_named() {
        let e = |start| Extent { start, len: 1 };
        let mut s = Segs {
            named: [e(10), e(30)].into_iter().collect(),
            retired: vec![e(20), e(21)],
            ..Segs::default()
        };
        s.unfinished(&[e(30), e(40)], &[e(21)]);
        assert_eq!(
            s.retired,
            vec![e(20), e(40)],
            "30 stays named only; 21 is gone"
        );
        assert_eq!(s.named.len(), 2);
        let mut all: Vec<_> = s.all().collect();
        all.sort_unstable_by_key(|x| x.start);
        all.dedup();
        assert_eq!(all.len(), 4, "no segment twice");
    }

    #[test]
    fn a_salvaged_segment_named_and_retired_is_named_only_and_retired_once() {
        let e = |start| Extent { start, len: 1 };
        let mut s = Segs {
            named: [e(10), e(30)].into_iter().collect(),
            retired: vec![e(30), e(20), e(20), e(40)],
            ..Segs::default()
        };
        assert_eq!(s.settle_salvaged(), 2);
        assert_eq!(s.retired, vec![e(20), e(40)]);
        assert_eq!(s.settle_salvaged(), 0, "settled already");
    }
}
