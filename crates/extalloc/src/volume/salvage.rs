//! Opening a damaged volume for repair ([`Volume::open_salvaging`]), and where each file's
//! metadata lives ([`Volume::places`]).
//!
//! A damaged file table entry costs at most that file: the table's intact frames are taken
//! (`table.rs`); a damaged entry whose body still decodes is kept if its map survived
//! (every extent on the device outside its metadata, allocated, overlapping nothing kept
//! so far, the logical ranges sorted and disjoint, a segment map's crc matching), else
//! reported lost. When the table is damaged, the table in the other area (the previous
//! checkpoint's) gives back each file the damaged one lost whose old map survives the
//! same checks (`restored`: its bytes may be older). Every map is read: a file whose map
//! segment fails keeps its id, size and attribute with an empty map. The journal's
//! changes then apply (those naming a lost file do nothing, and are counted; an unlink
//! removes a kept file again); a kept file that now shares a block with another is
//! dropped. The next checkpoint writes all of it as a clean table.
//!
//! Data structures: [`Salvage`] (the report), [`LostEntry`], [`ClearedMap`],
//! [`FilePlace`]; `Kept` (the kept entries while the open goes on). Invariant: once the
//! journal's changes apply, no kept file maps a block any other file maps, nor a block of
//! the table areas or map segments; a segment is named again only if the table named it
//! or it is allocated and clear of everything else (never freed twice). Locks: none of
//! its own (the volume is not shared yet; `places` reads only the durable root and
//! table).

use super::file::{Ranges, ReplayFile};
use super::load::{
    adopt_all, adopt_tree, changes_of, previous_table, read_table, replay, segs_of, volume_root,
    TableRead,
};
use super::maps::read_map;
use super::nodescan::Lost;
use super::record::{Change, MapEntry};
use super::root::Root;
use super::scanread::NodeScans;
use super::state::Segs;
use super::state::Volume;
use super::table::{Salvaged, TableFile};
use crate::alloc::Policy;
use crate::disk::device::Device;
use crate::error::{Error, Result};
use crate::geometry::Extent;
use crate::store::Store;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

#[path = "salvage_report.rs"]
mod report;
#[path = "salvage_scan.rs"]
pub(super) mod scan;
#[path = "salvage_survival.rs"]
mod survival;
pub use report::{
    ClearedMap, FilePlace, KeyRange, LostEntry, MendedLeaves, RootFound, Salvage, TreeNodePlace,
    TreeScan,
};
pub(super) use survival::{check_map, journal_by_file, replay_one, survived_after, Journal};

impl Volume {
    /// Opens a damaged volume for repair: the store accepting a journal damaged in the
    /// middle ([`Store::open_accepting_journal_loss`]), then the file table salvaged and
    /// every map read (see the module documentation and `docs/volume.md`). The caller
    /// makes the result durable with [`Volume::checkpoint`] (which writes a clean tree from
    /// every file when anything was damaged, else only what changed), after which a plain
    /// [`Volume::open`] succeeds. On an undamaged volume it is
    /// [`Volume::open`] with every map read, and the report is clean.
    pub fn open_salvaging(dev: Arc<dyn Device>, policy: Policy) -> Result<(Volume, Salvage)> {
        Volume::open_salvaging_reporting(dev, policy, &NodeScans::unwatched())
    }

    /// [`Volume::open_salvaging`], its scan of the device for the file tree's leaves (it
    /// runs only when the tree lost an internal node or its root, and reads the blocks the
    /// bitmaps mark used, the others only while keys are missing: on a large device the
    /// one long step) made by `scans`: told how far it has gone after each 256 blocks
    /// read, and sharing what it read with the repair's other scans of the same device
    /// ([`NodeScans`]). It leaves what [`Volume::open_salvaging`] leaves.
    pub fn open_salvaging_reporting(
        dev: Arc<dyn Device>,
        policy: Policy,
        scans: &NodeScans<'_>,
    ) -> Result<(Volume, Salvage)> {
        let (store, records) = Store::open_accepting_journal_loss(dev.clone(), policy.clone())?;
        let mut report = Salvage {
            journal_loss: store.journal_loss(),
            journal_loss_earlier: store.journal_loss_earlier(),
            ..Salvage::default()
        };
        let root = volume_root(&store)?;
        let Found {
            s,
            own,
            nodes,
            chain,
            tree,
            held_spans,
        } = salvage_table(&store, dev.as_ref(), &root, (&mut report, scans))?;
        report.damaged_entries = s.damaged.len() as u64 + s.uncounted;
        report.retired_lost = s.retired_lost;
        let mut segs = segs_of(&s.table, u64::from(store.geometry().block_size));
        let mut files = read_all_maps(&store, dev.as_ref(), &s.table.files, &mut report);
        let changes = changes_of(&records)?;
        let mut kept = Kept {
            journal: journal_by_file(&changes),
            ..Kept::default()
        };
        kept.take(
            &store,
            dev.as_ref(),
            &root,
            &own,
            &s,
            &mut files,
            &mut segs,
            &mut report,
        )?;
        if report.table_damaged {
            kept.restore_previous(
                &store,
                dev.as_ref(),
                &root,
                (&own, &held_spans),
                &mut files,
                &mut segs,
                &mut report,
            )?;
        }
        report.changes_skipped = skipped(&files, &changes);
        let (mut files, mut meta, mut segs) =
            replay(&store, dev.as_ref(), &root, files, segs, changes)?;
        // No tree is taken: the next checkpoint builds a clean one and retires these.
        let nb = super::node::node_blocks(u64::from(store.geometry().block_size));
        adopt_tree(&mut meta, &root, None, (&nodes, &chain), nb);
        report.segments_unretired = segs.settle_salvaged() as u64;
        for (was, bytes, f) in std::mem::take(&mut kept.fresh) {
            let id = meta.next_id;
            meta.next_id += 1;
            kept.now.insert(id, (was, bytes));
            files.insert(id, f);
        }
        kept.settle(&mut files, &mut report);
        if tree && report.clean() && store.unclean_close().is_none() {
            // Nothing damaged, closed cleanly (nothing replayed; a read-only mount still
            // sees an unclean close as the store that found it reports it), every map
            // read and checked: the volume a plain open gives,
            // which keeps the tree, so that the next checkpoint writes only what changed
            // (a rebuild from every file needs room for a whole tree, which a full device
            // does not keep: `room.rs`).
            drop((files, meta, segs, store));
            return Ok((Volume::open(dev, policy)?, report));
        }
        let table = adopt_all(&store, files)?;
        let vol = Volume::with_store(store, (table, meta, segs))?;
        Ok((vol, report))
    }

    /// Where the file tree's internal nodes lie, root first, as the volume holds them
    /// (written ones only: a checkpoint writes the others), for a damage campaign's ground
    /// truth beside [`Volume::places`] (whose entries lie in the leaves). Reads nothing:
    /// the internal nodes stay in memory. Empty for a tree of one leaf.
    pub fn tree_nodes(&self) -> Vec<TreeNodePlace> {
        let meta = self.meta.lock();
        let Some(tree) = meta.tree.as_ref() else {
            return Vec::new();
        };
        let bytes = super::node::node_bytes(self.block_size) as u64;
        let root = tree.root();
        (tree.internal_places().into_iter())
            .map(|(at, level)| TreeNodePlace {
                bytes: at.block * self.block_size..at.block * self.block_size + bytes,
                level,
                root: root == Some(at),
            })
            .collect()
    }

    /// Where each file's metadata lives on the device, in id order (see [`FilePlace`]):
    /// for a damage campaign's ground truth. Reads the durable table again.
    pub fn places(&self) -> Result<Vec<FilePlace>> {
        let root = volume_root(&self.store)?;
        let (table, places) = match read_table(&self.store, self.dev.as_ref(), &root)?.table {
            TableRead::Whole(t, p) => (t, p),
            TableRead::Damaged(s) => (s.table, s.places),
        };
        let bs = self.block_size;
        let durable: BTreeMap<u64, FilePlace> = table
            .files
            .iter()
            .zip(places)
            .map(|(f, p)| {
                let map = f.map.seg_ref().map(|r| {
                    let start = r.seg.start * bs + u64::from(r.offset);
                    start..start + u64::from(r.len)
                });
                let table = p;
                (
                    f.id,
                    FilePlace {
                        id: f.id,
                        table,
                        map,
                    },
                )
            })
            .collect();
        let ids: Vec<u64> = {
            let _open = self.gate.read_recursive();
            self.all_ids()?
        };
        Ok(ids
            .into_iter()
            .map(|id| {
                durable.get(&id).cloned().unwrap_or(FilePlace {
                    id,
                    table: 0..0,
                    map: None,
                })
            })
            .collect())
    }
}

/// What [`salvage_table`] read of the table the root names.
struct Found {
    /// The table, whole or salvaged.
    s: Salvaged,
    /// The blocks the durable table owns (its nodes or areas, the retired chain).
    own: Vec<Extent>,
    /// The tree's nodes, to retire once a clean tree replaces them.
    nodes: Vec<Extent>,
    /// The retired chain's index blocks.
    chain: Vec<u64>,
    /// The table is a tree that was read (a plain open would keep it).
    tree: bool,
    /// The key spans the scan's held leaves claimed (`nodescan.rs`, `Scanned::held_spans`):
    /// a key inside one that no leaf gave was removed, and the previous table does not
    /// give it back.
    held_spans: Ranges,
}

/// The table `root` names, read whole or salvaged entry by entry (`report.table_damaged`
/// set then); one whose area index or tree root is unreadable is lost whole, and the
/// previous checkpoint's table gives back what it can (`Kept::restore_previous`).
fn salvage_table(
    store: &Store,
    dev: &dyn Device,
    root: &Root,
    (report, scans): (&mut Salvage, &NodeScans<'_>),
) -> Result<Found> {
    let (mut found, lost) = read_salvaging(store, dev, root, report)?;
    scan::scanned(store, dev, root, &lost, &mut found, (report, scans))?;
    // Each intact entry has its place; a scan ran exactly when the walk lost nodes.
    debug_assert_eq!(found.s.places.len(), found.s.table.files.len());
    debug_assert_eq!(report.tree_scan.is_some(), !lost.is_empty());
    Ok(found)
}

/// [`salvage_table`]'s read: the table and the key ranges of the tree nodes it lost (the
/// whole range when the root did not read as a node).
fn read_salvaging(
    store: &Store,
    dev: &dyn Device,
    root: &Root,
    report: &mut Salvage,
) -> Result<(Found, Vec<Lost>)> {
    match read_table(store, dev, root) {
        Ok(read) => {
            let s = match read.table {
                TableRead::Whole(table, places) => Salvaged {
                    table,
                    places,
                    ..Salvaged::default()
                },
                TableRead::Damaged(s) => {
                    report.table_damaged = true;
                    s
                }
            };
            // A tree that was read owns its nodes (the root at least) and its chain's
            // index blocks, nothing else (`TreeTable::own`).
            debug_assert!(
                read.tree.is_none()
                    || (!read.nodes.is_empty()
                        && read.own.len() == read.nodes.len() + read.chain.len())
            );
            let found = Found {
                s,
                own: read.own,
                nodes: read.nodes,
                chain: read.chain,
                tree: read.tree.is_some(),
                held_spans: Ranges::default(),
            };
            Ok((found, read.lost))
        }
        Err(e @ Error::Corrupt { .. }) => {
            report.table_damaged = true;
            let found = Found {
                s: Salvaged {
                    header_lost: true,
                    ..Salvaged::default()
                },
                own: Vec::new(),
                nodes: Vec::new(),
                chain: Vec::new(),
                tree: false,
                held_spans: Ranges::default(),
            };
            // A tree whose root does not read as a node lost every key under it.
            let lost = root.tree.as_ref().map(|t| Lost {
                keys: (0, None),
                generation: t.root.generation,
                block: t.root.block,
                why: format!("the root: {e}"),
            });
            Ok((found, lost.into_iter().collect()))
        }
        Err(e) => Err(e),
    }
}

/// The damaged entries kept, while the open goes on.
#[derive(Default)]
struct Kept {
    /// Kept under their own id (in the files): `id -> (id named, entry's device bytes)`;
    /// then those given fresh ids too.
    now: BTreeMap<u64, (u64, Range<u64>)>,
    /// To get a fresh id once the journal's changes are applied: `(id named, entry's
    /// device bytes, file)`.
    fresh: Vec<(u64, Range<u64>, ReplayFile)>,
    /// The journal's changes by file: an entry kept under its own id is judged on the map
    /// its file has once they are applied (`salvage_survival.rs`).
    journal: Journal,
}

impl Kept {
    /// The journal's changes to file `id`, in order.
    fn journal_of(&self, id: u64) -> &[Change] {
        self.journal.get(&id).map_or(&[], Vec::as_slice)
    }

    /// Takes from the table in the other area (the previous checkpoint's, or the frames a
    /// checkpoint cut short had written) every file the damaged table lost: an id no file
    /// has now, below `next_id`, not inside a span a held leaf of the device scan claimed
    /// without it (`removed`: the file was removed since), whose map survived (as a
    /// damaged entry's must). Its bytes may be older than the lost entry's; each is
    /// reported in `restored`.
    #[allow(clippy::too_many_arguments)]
    fn restore_previous(
        &mut self,
        store: &Store,
        dev: &dyn Device,
        root: &Root,
        (own, removed): (&[Extent], &Ranges),
        files: &mut BTreeMap<u64, ReplayFile>,
        segs: &mut Segs,
        report: &mut Salvage,
    ) -> Result<()> {
        let bs = u64::from(store.geometry().block_size);
        let Some(previous) = previous_table(store, dev, root) else {
            return Ok(());
        };
        let mut taken = taken_of(files, own, segs);
        let fresh: Vec<u64> = self.fresh.iter().map(|(was, _, _)| *was).collect();
        for (f, at) in previous.table.files.iter().zip(&previous.places) {
            let known = files.contains_key(&f.id) || fresh.contains(&f.id);
            // Inside a span a newer leaf claimed and did not give it: removed since.
            if known || f.id == 0 || f.id >= root.next_id || removed.contains(f.id) {
                continue;
            }
            let judged = survived_after(store, dev, f, (&taken, self.journal_of(f.id)))?;
            let Ok((entries, after)) = judged else {
                continue; // gone since (its blocks freed or taken), or never whole
            };
            after
                .iter()
                .for_each(|(_, e, _)| taken.insert(e.start, e.len));
            adopt_segment(store, f, segs, &mut taken);
            self.now.insert(f.id, (f.id, at.clone()));
            files.insert(f.id, kept_file(f, entries, bs));
            report.restored.push(f.id);
        }
        debug_assert!(report.restored.iter().all(|id| files.contains_key(id)));
        Ok(())
    }

    /// Takes each damaged entry of `s` whose map survived (see [`survived_after`]) into `files`
    /// (its own id free and sane) or `fresh`; reports the others lost.
    #[allow(clippy::too_many_arguments)]
    fn take(
        &mut self,
        store: &Store,
        dev: &dyn Device,
        root: &Root,
        own: &[Extent],
        s: &Salvaged,
        files: &mut BTreeMap<u64, ReplayFile>,
        segs: &mut Segs,
        report: &mut Salvage,
    ) -> Result<()> {
        let bs = u64::from(store.geometry().block_size);
        let mut taken = taken_of(files, own, segs);
        let accounted =
            |me: &Self, report: &Salvage| me.now.len() + me.fresh.len() + report.lost.len();
        let before = accounted(self, report);
        for d in &s.damaged {
            let bytes = d.bytes.clone();
            let Some(f) = &d.file else {
                report.lost.push(LostEntry {
                    bytes,
                    id: None,
                    why: "its bytes do not decode as a file".into(),
                });
                continue;
            };
            // Kept under its own id, the journal's changes to that id are its own.
            let own = f.id != 0 && f.id < root.next_id && !files.contains_key(&f.id);
            let journal = if own { self.journal_of(f.id) } else { &[] };
            match survived_after(store, dev, f, (&taken, journal))? {
                Ok((entries, after)) => {
                    after
                        .iter()
                        .for_each(|(_, e, _)| taken.insert(e.start, e.len));
                    adopt_segment(store, f, segs, &mut taken);
                    let rf = kept_file(f, entries, bs);
                    if own {
                        self.now.insert(f.id, (f.id, bytes));
                        files.insert(f.id, rf);
                    } else {
                        self.fresh.push((f.id, bytes, rf));
                    }
                }
                Err(why) => report.lost.push(LostEntry {
                    bytes,
                    id: Some(f.id),
                    why,
                }),
            }
        }
        // Each damaged entry is kept, taken as fresh, or reported lost.
        debug_assert_eq!(accounted(self, report), before + s.damaged.len());
        Ok(())
    }

    /// After the journal's changes: drops each kept file that now maps a block another
    /// file maps (its entry named the wrong file), reporting it lost, and reports the
    /// others recovered. Leaves no kept file sharing a block with any file.
    fn settle(self, files: &mut BTreeMap<u64, ReplayFile>, report: &mut Salvage) {
        let mut others = Ranges::default();
        for (id, f) in files.iter() {
            if !self.now.contains_key(id) {
                f.maps
                    .values()
                    .for_each(|(e, _)| others.insert(e.start, e.len));
            }
        }
        for (id, (was, bytes)) in self.now {
            let Some(f) = files.get(&id) else {
                // Removed by a journal change after the table (an unlink): nothing to keep.
                report.restored.retain(|&r| r != id);
                continue;
            };
            assert!(f.loaded, "a kept file's map is read");
            let clash = f
                .maps
                .values()
                .find(|(e, _)| !others.within(e.start, e.end()).is_empty());
            if let Some((e, _)) = clash {
                report.lost.push(LostEntry {
                    bytes,
                    id: Some(was),
                    why: format!(
                        "after the journal's changes it maps {}+{}, another file's",
                        e.start, e.len
                    ),
                });
                files.remove(&id);
                continue;
            }
            f.maps
                .values()
                .for_each(|(e, _)| others.insert(e.start, e.len));
            report.recovered.push((id, was));
        }
    }
}

/// The intact files with their maps read; one whose map fails is kept with an empty map
/// and reported.
fn read_all_maps(
    store: &Store,
    dev: &dyn Device,
    files: &[TableFile],
    report: &mut Salvage,
) -> BTreeMap<u64, ReplayFile> {
    let mut out = BTreeMap::new();
    for t in files {
        let (id, mut f) = ReplayFile::from_table(t.clone());
        match read_map(store, dev, id, &t.map) {
            Ok(entries) => f.set_loaded(entries),
            Err(e) => {
                report.maps_cleared.push(ClearedMap {
                    id,
                    why: e.to_string(),
                });
                f.set_loaded(Vec::new());
            }
        }
        out.insert(id, f);
    }
    debug_assert!(report.maps_cleared.iter().all(|c| out.contains_key(&c.id)));
    out
}

/// The blocks the intact files, the table areas and the map segments hold.
fn taken_of(files: &BTreeMap<u64, ReplayFile>, own: &[Extent], segs: &Segs) -> Ranges {
    let mut taken = Ranges::default();
    for f in files.values() {
        f.maps
            .values()
            .for_each(|(e, _)| taken.insert(e.start, e.len));
    }
    own.iter().for_each(|a| taken.insert(a.start, a.len));
    segs.all().for_each(|s| taken.insert(s.start, s.len));
    taken
}

/// Names a kept damaged file's map segment (or its map's own runs), so the next
/// checkpoints retire and free it:
/// if it is a segment named already, or (the file its only user) allocated and clear of
/// everything `taken`. Any other (its reference damaged, though the map's crc matched) is
/// left alone: never freed twice, nor over what something else holds.
fn adopt_segment(store: &Store, f: &TableFile, segs: &mut Segs, taken: &mut Ranges) {
    for seg in f.map.segments() {
        let clear = taken.within(seg.start, seg.end()).is_empty()
            && store.allocator().check_held(seg).is_ok();
        if segs.named.contains(&seg) || clear {
            segs.named.insert(seg);
            taken.insert(seg.start, seg.len);
        }
        // A segment adopted is taken: no salvaged file may claim its blocks.
        debug_assert!(!segs.named.contains(&seg) || !taken.within(seg.start, seg.end()).is_empty());
    }
}

/// A kept damaged file: its map loaded, its size at most the end of its last mapped block.
pub(super) fn kept_file(f: &TableFile, entries: Vec<MapEntry>, bs: u64) -> ReplayFile {
    let end = entries.last().map_or(0, |&(l, e, _)| (l + e.len) * bs);
    let mut rf = loaded(f, entries);
    rf.size = rf.size.min(end);
    rf
}

/// File `f` with its map `entries` read, its size as its entry says.
pub(super) fn loaded(f: &TableFile, entries: Vec<MapEntry>) -> ReplayFile {
    let (_, mut rf) = ReplayFile::from_table(f.clone());
    rf.set_loaded(entries);
    rf
}

/// Changes that name a file neither in `files` nor created by an earlier change.
fn skipped(files: &BTreeMap<u64, ReplayFile>, changes: &[Change]) -> u64 {
    let mut known: std::collections::BTreeSet<u64> = files.keys().copied().collect();
    let mut n = 0;
    for c in changes {
        match c {
            Change::Create { id, .. } => {
                known.insert(*id);
            }
            Change::Areas { .. } | Change::Segments { .. } => {}
            other => {
                let id = other.file().expect("a change naming a file");
                if !known.contains(&id) {
                    n += 1;
                }
                if matches!(other, Change::Unlink { .. }) {
                    known.remove(&id);
                }
            }
        }
    }
    n
}
