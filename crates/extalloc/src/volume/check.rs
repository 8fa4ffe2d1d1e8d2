//! The volume's ownership check: every block a file maps is allocated and mapped once,
//! and every allocated block belongs to a file, to the table areas or to the store's own
//! metadata (else it is leaked).
//!
//! [`Volume::rebuild_allocation`], `fsck --repair`'s use of the same owners: the store's
//! bitmaps rebuilt from them; [`Volume::open_for_repair`], the open that comes before it
//! (a damaged journal accepted, the files a crash left pending kept for after it).
//!
//! Data structures: [`VolumeCheck`], the counts. Invariant: the check only reads and is
//! exact at quiescence (no call running); after a rebuild the check finds no block mapped
//! free, none leaked and no group held corrupt. Locks: the gate for writing (no chunk runs
//! meanwhile), then each file's mutex in turn.

use super::maps::read_map;
use super::record::map_counts;
use super::scanread::NodeScans;
use super::state::{FileTable, Volume};
use crate::alloc::Policy;
use crate::disk::device::Device;
use crate::error::Result;
use crate::geometry::Extent;
use crate::store::Store;
use std::sync::Arc;

/// What [`Volume::check`] found. A clean volume has zeros in every count but the first
/// four.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct VolumeCheck {
    /// Files on the volume.
    pub files: u64,
    /// Extents they map.
    pub extents: u64,
    /// Blocks they map.
    pub blocks_mapped: u64,
    /// Of those, unwritten (fallocated, not written).
    pub blocks_unwritten: u64,
    /// Mapped blocks the allocator holds free.
    pub mapped_free: u64,
    /// Blocks mapped by two files (or twice by one, or by a file and the table areas).
    pub mapped_twice: u64,
    /// Allocated blocks no file, table area or store metadata owns (counted only while no
    /// group is held corrupt: such a group's blocks are all held used).
    pub leaked: u64,
    /// Groups the store holds corrupt (found damaged at open or load; `extalloc fsck` tells
    /// more).
    pub corrupt_groups: u64,
}

impl VolumeCheck {
    /// True if nothing is wrong.
    pub fn clean(&self) -> bool {
        self.mapped_free == 0
            && self.mapped_twice == 0
            && self.leaked == 0
            && self.corrupt_groups == 0
    }
}

impl Volume {
    /// [`Volume::open`] for a repair: the store opened accepting a journal damaged in the
    /// middle ([`Store::open_accepting_journal_loss`]: the records before the damage
    /// replayed, the groups later ones touch held corrupt; [`Store::journal_loss`] says
    /// what was lost), and the files a crash left pending left as they are (hidden from
    /// every listing) until [`Volume::remove_pending`], since the rebuild of the bitmaps
    /// ([`Volume::rebuild_allocation`]) must come before any free (a free into a group
    /// held corrupt is refused). A file tree that lost internal nodes (a node that does
    /// not check under the root) opens with holes in their place, the journal's changes
    /// naming files under them set aside for the mend (a pending file under one is not
    /// found, and the mend drops it, as an open removes it):
    /// [`Volume::mend_unreadable_leaves`] must come next, and
    /// until it fills them no checkpoint is written (a close fails with
    /// [`Error::Corrupt`](crate::Error::Corrupt), writing nothing). Fails as
    /// [`Volume::open`] does, but for the journal's damage and such holes.
    ///
    /// A tree whose root was lost (it fails its check, or holds no node) has it made again
    /// over the nodes found under it, if they count what it counted (`rootfind.rs`; the
    /// blocks the bitmaps mark used are read once; the mend reports it,
    /// [`MendedLeaves::root_found`](super::MendedLeaves::root_found)); otherwise the open
    /// fails, for the salvage.
    pub fn open_for_repair(dev: Arc<dyn Device>, policy: Policy) -> Result<Volume> {
        Volume::open_for_repair_reporting(dev, policy, &NodeScans::unwatched())
    }

    /// [`Volume::open_for_repair`], its scan of the device for a lost root's children (it
    /// runs only then) made by `scans`: told how far it has gone after each 256 blocks
    /// read, and sharing what it read with the repair's other scans of the same device
    /// ([`NodeScans`]: a block that does not read is skipped and counted; blocks scanned
    /// before are not read again, but their nodes). It leaves what
    /// [`Volume::open_for_repair`] leaves.
    pub fn open_for_repair_reporting(
        dev: Arc<dyn Device>,
        policy: Policy,
        scans: &NodeScans<'_>,
    ) -> Result<Volume> {
        let (store, records) = Store::open_accepting_journal_loss(dev.clone(), policy)?;
        Volume::open_store(store, dev.as_ref(), &records, Some(scans))
    }

    /// Gives every file whose map does not read (a map segment, or the map's bytes in it,
    /// failing its check) an empty map, as the salvaging open does: its data reads as
    /// holes, its size and attribute blob are kept, and the blocks the map named are
    /// owned by no one (leaked, until [`Volume::rebuild_allocation`] frees them, which
    /// comes next). The next checkpoint writes those files' entries; until it does,
    /// nothing is durable (a crash leaves the maps as they were). Returns each such
    /// file with the blocks its table entry counted for the map and why it did not read,
    /// in id order. For a repair, right after [`Volume::open_for_repair`]. Cost: every
    /// map read once (memory: one map at a time); fails, changing nothing, on an I/O
    /// error or a file tree leaf that does not read.
    pub fn clear_unreadable_maps(&self) -> Result<Vec<(u64, u64, String)>> {
        let _closed = self.gate.write();
        let mut bad: Vec<(u64, u64, String)> = Vec::new();
        let unreadable = |id: u64, map: &super::record::MapRef, bad: &mut Vec<_>| match read_map(
            &self.store,
            self.dev.as_ref(),
            id,
            map,
        ) {
            Ok(_) => Ok(()),
            Err(e @ crate::error::Error::Corrupt { .. }) => {
                bad.push((id, map.counts().1, e.to_string()));
                Ok(())
            }
            Err(e) => Err(e),
        };
        let cached: FileTable = self.files.read().clone();
        for (&id, f) in &cached {
            let f = f.lock();
            if !f.loaded {
                unreadable(
                    id,
                    f.stored.as_ref().expect("a map not read is stored"),
                    &mut bad,
                )?;
            }
        }
        self.visit_tree_only(&cached, 0, &mut |id, entry| {
            unreadable(id, &entry.map, &mut bad)?;
            Ok(true)
        })?;
        bad.sort_unstable_by_key(|b| b.0);
        for &(id, _, _) in &bad {
            let file = self.file_locked(id)?;
            let mut f = file.lock();
            debug_assert!(!f.loaded && f.tail.is_none(), "file {id}'s map was read");
            f.alloc = self.store.create_file(id);
            f.unwritten = super::file::Ranges::default();
            f.loaded = true;
            f.map_dirty = true;
            drop(f);
            self.dirty.lock().insert(id);
        }
        // Each cleared file is in memory with an empty map, for the checkpoint to write.
        debug_assert!(bad
            .iter()
            .all(|&(id, _, _)| self.files.read().get(&id).is_some_and(|f| f
                .lock()
                .alloc
                .extents()
                .is_empty())));
        Ok(bad)
    }

    /// Checks who owns every block (see [`VolumeCheck`]); also runs the store's allocator
    /// `check()`. Blocks of the open transaction count as what they will be once it
    /// commits (allocations owned by their files, frees pending). Cost: one look per
    /// mapped block; memory: every mapped extent (files not in memory are read from the
    /// file tree leaf by leaf and not kept).
    pub fn check(&self) -> Result<VolumeCheck> {
        let _closed = self.gate.write();
        self.store.allocator().check()?;
        let mut out = VolumeCheck::default();
        let mut owned = self.files_owned(&mut out)?;
        debug_assert!(
            out.blocks_unwritten <= out.blocks_mapped && out.extents <= out.blocks_mapped,
            "unwritten blocks are mapped ones, and each extent maps one: {out:?}"
        );
        let view = self.store.allocator();
        for e in &owned {
            for b in e.start..e.end() {
                if view.is_free(b)? {
                    out.mapped_free += 1;
                }
            }
        }
        self.own_metadata(&mut owned);
        let mut reach = 0u64;
        let mut distinct = 0u64;
        for e in &owned {
            if e.start < reach {
                out.mapped_twice += reach.min(e.end()) - e.start;
            }
            distinct += e.end().saturating_sub(reach.max(e.start));
            reach = reach.max(e.end());
        }
        out.corrupt_groups = self.store.corrupt_groups().len() as u64;
        if out.corrupt_groups == 0 {
            let s = self.store.statfs();
            let used = s.blocks - s.free_blocks - s.pending_blocks - s.discard_held_blocks;
            let accounted = s.metadata_blocks
                + s.prealloc_reserved_blocks
                + self.store.metadata_reserved_blocks()
                + distinct;
            out.leaked = used.saturating_sub(accounted);
        }
        Ok(out)
    }

    /// Every extent the files map, counted into `out` (files, extents, blocks mapped and
    /// unwritten): the files in memory, then those in the file tree only, read leaf by
    /// leaf and not kept (memory: every mapped extent, not every file). The caller holds
    /// the gate for writing.
    pub(super) fn files_owned(&self, out: &mut VolumeCheck) -> Result<Vec<Extent>> {
        debug_assert!(
            self.gate.is_locked_exclusive(),
            "the owners read, the gate open"
        );
        let mut owned: Vec<Extent> = Vec::new();
        let cached: FileTable = self.files.read().clone();
        for f in cached.values() {
            let f = self.lock_loaded(f)?;
            out.files += 1;
            for (s, len) in f.unwritten.iter() {
                debug_assert!((s..s + len).all(|b| f.alloc.lookup(b).is_some()));
                out.blocks_unwritten += len;
            }
            for (_, e) in f.alloc.extents() {
                out.extents += 1;
                out.blocks_mapped += e.len;
                owned.push(e);
            }
        }
        self.visit_tree_only(&cached, 0, &mut |id, entry| {
            let map = read_map(&self.store, self.dev.as_ref(), id, &entry.map)?;
            self.maps_read
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let (extents, blocks) = map_counts(&map);
            debug_assert_eq!((extents, blocks), entry.map.counts(), "file {id}'s counts");
            out.files += 1;
            out.extents += extents;
            out.blocks_mapped += blocks;
            for (_, e, unwritten) in map {
                out.blocks_unwritten += if unwritten { e.len } else { 0 };
                owned.push(e);
            }
            Ok(true)
        })?;
        Ok(owned)
    }

    /// The volume's own blocks (the file tree's nodes, or the table areas of a volume not
    /// yet upgraded; the nodes a repair replaced, until a checkpoint retires them; the map
    /// segments; the retired blocks) added to `owned`, then everything sorted by start.
    pub(super) fn own_metadata(&self, owned: &mut Vec<Extent>) {
        let meta = self.meta.lock();
        let nb = super::node::node_blocks(self.block_size);
        let mut own: Vec<Extent> = meta
            .areas
            .iter()
            .flat_map(|a| a.extents())
            .filter(|a| a.len > 0)
            .collect();
        let nodes = meta.tree.as_ref().map(|t| t.nodes()).unwrap_or_default();
        own.extend(nodes.iter().map(|n| Extent::new(n.block, nb)));
        own.extend(meta.old_nodes.iter().copied());
        own.extend(meta.mended.iter().map(|n| Extent::new(n.block, nb)));
        own.extend(meta.chain.iter().map(|&b| Extent::new(b, 1)));
        drop(meta);
        own.extend(self.segs.lock().all());
        own.sort_unstable_by_key(|e| e.start);
        // Allocated from the store one by one: the table areas' pieces and index blocks and
        // the segments never overlap.
        debug_assert!(own.windows(2).all(|w| w[0].end() <= w[1].start), "{own:?}");
        owned.extend(own);
        owned.sort_unstable_by_key(|e| e.start);
    }

    /// Rebuilds the store's bitmaps from what the volume owns (every file's map, the table
    /// areas, the map segments; [`Store::rebuild_allocation`](crate::store::Store::rebuild_allocation)
    /// adds the store's metadata) and clears the groups held corrupt. Nothing is written
    /// until the next [`checkpoint`](Volume::checkpoint), which writes the changed groups
    /// home.
    ///
    /// Runs right after an open, before any other call (refused once files hold
    /// preallocations, cached data waits for placement or frees are pending, with nothing
    /// changed). Fails with the file's
    /// error when a file's map cannot be read (a damaged map segment: open with
    /// [`Volume::open_salvaging`] first), changing nothing.
    pub fn rebuild_allocation(&self) -> Result<crate::store::Rebuilt> {
        let _closed = self.gate.write();
        let cached = *self.delalloc.lock();
        if cached > 0 {
            return Err(crate::error::Error::NotAtRest {
                count: cached,
                what: "blocks reserved for cached data not yet placed",
            });
        }
        // The owners as the check reads them: the files not in memory stay out of it.
        let mut owned = self.files_owned(&mut VolumeCheck::default())?;
        self.own_metadata(&mut owned);
        // The node reserve is held, not owned: given back for the rebuild, then taken again
        // from what the rebuild leaves free.
        self.store.release_metadata_reserve()?;
        let rebuilt = self.store.rebuild_allocation(&owned);
        self.fill_node_reserve();
        let rebuilt = rebuilt?;
        debug_assert!(self.store.corrupt_groups().is_empty());
        Ok(rebuilt)
    }
}
