//! The volume's open: the file table read from the root the last checkpoint
//! (`checkpoint.rs`) left, and the changes logged after it applied; maps stay unread
//! (`maps.rs`). When the root says its internal nodes' marks are whole
//! (`TreeRoot::marks_whole`), only the internal nodes are read, the leaves whose marks say
//! they hold a map outside the tree or a pending file, and the entries the changes name
//! ([`load_marked`]); else every leaf. A table with damaged entries is refused by a plain open, naming the
//! damage; `salvage.rs` opens it for repair with the pieces here ([`read_table`],
//! [`replay`], [`adopt_all`]). A version 2 or 3 root (two table areas written whole) is
//! read here too; the next checkpoint builds its tree (the upgrade).
//!
//! Data structures: none of their own (`record::Root`, `table::Table`, `tree::Tree`).
//! Invariant: what it returns holds every change of the records after the root (but, for
//! a repair's open of a tree it cannot read whole, those set aside in `Meta::aside` for
//! the mend), and each file's blocks are checked allocated by the store before the file
//! is adopted. Locks:
//! none of its own; it runs in the open, before anyone else sees the volume.

use super::area::{self, Area};
use super::file::{apply, maps_of, ReplayFile, VFile};
use super::maps::{adopt_entries, read_map};
use super::node::node_blocks;
use super::nodescan::Lost;
use super::record::{decode_payload, Change, SideRef};
use super::root::{Root, TreeRoot};
use super::scanread::NodeScans;
use super::state::Segs;
use super::state::{FileTable, Meta};
use super::table::{decode_placed, salvage_table, Salvaged, Table};
use super::tree::Tree;
use super::treeio::{read_root_tree, TreeTable};
use crate::disk::device::Device;
use crate::disk::journal::Record;
use crate::error::{Corrupted, Error, Result};
use crate::geometry::Extent;
use crate::store::Store;
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::Arc;

/// Reads the volume of an open store: its table (from the root's active area) and the
/// changes of `records`. Only the maps of files those changes map or unmap are read, and
/// handed to the file layer (which checks that the store holds each block allocated); the
/// others wait for their first use. A table with damaged entries is refused (see
/// [`damaged_table`]); `salvage.rs` opens it for repair. `repair`: a repair's open,
/// told how far a scan of the device for a lost root's children has gone
/// (`rootfind.rs`).
pub(super) fn load(
    store: &Store,
    dev: &dyn Device,
    records: &[Record],
    repair: Option<&NodeScans<'_>>,
) -> Result<(FileTable, Meta, Segs)> {
    let root = volume_root(store)?;
    if let Some(t) = root.tree.filter(TreeRoot::marks_whole) {
        if let Some(loaded) = load_marked(store, dev, &root, &t, (records, repair))? {
            return Ok(loaded);
        }
    }
    let read = read_table(store, dev, &root)?;
    let table = match read.table {
        TableRead::Whole(table, _) => table,
        TableRead::Damaged(s) => return Err(damaged_table(&root, &s)),
    };
    let segs = segs_of(&table, u64::from(store.geometry().block_size));
    let files = table
        .files
        .into_iter()
        .map(ReplayFile::from_table)
        .collect();
    let changes = changes_of(records)?;
    let replayed: BTreeSet<u64> = changes.iter().filter_map(Change::file).collect();
    let (mut files, mut meta, segs) = replay(store, dev, &root, files, segs, changes)?;
    let nb = node_blocks(u64::from(store.geometry().block_size));
    adopt_tree(&mut meta, &root, read.tree, (&read.nodes, &read.chain), nb);
    if meta.tree.is_some() {
        // The others are in the tree as they are: loaded when a call names them
        // (`cache.rs`). Pending ones stay, for the open to find and remove.
        files.retain(|id, f| replayed.contains(id) || f.attr == super::publish::PENDING);
    }
    meta.replayed = replayed;
    Ok((adopt_all(store, files)?, meta, segs))
}

/// The open of a tree whose marks are whole ([`TreeRoot::marks_whole`]): the internal
/// nodes and the retired chain are read; the marked leaves, for the files whose map lies
/// outside the tree (the segments' accounts) and the pending ones (which the open finds
/// and removes); and the entries of the files the records change, each from its leaf.
/// Every other file waits in the tree for a call that names it (`cache.rs`), and a
/// damaged leaf is found then. `None` when an internal node, a marked leaf or the chain
/// fails: the whole read ([`read_table`]) finds what is damaged and refuses, as it always
/// has. With `repair`, a tree that lost only internal nodes under the root, or marked
/// leaves but the root (`walk.rs`, `Walked::partial`), is taken with holes in the lost
/// nodes' places and the failed leaves where they are, for
/// `Volume::mend_unreadable_leaves` to mend before anything else; the records' changes
/// naming a file whose entry cannot be read (there, or in a leaf that fails when read)
/// are set aside for it (`Meta::aside`). A lost root is made again over the nodes under
/// it if they count what it counted (`rootfind.rs`), the old one left for the next
/// checkpoint to retire (`Meta::mended`).
fn load_marked(
    store: &Store,
    dev: &dyn Device,
    root: &Root,
    t: &TreeRoot,
    (records, scans): (&[Record], Option<&NodeScans<'_>>),
) -> Result<Option<(FileTable, Meta, Segs)>> {
    let repair = scans.is_some();
    let bs = u64::from(store.geometry().block_size);
    let mut io = super::treeio::VolIo::new(store, dev, t.stamp);
    let Some(chain) = retired_chain(store, dev, t) else {
        return Ok(None);
    };
    let (walked, found_root) =
        super::rootfind::walk_or_find((store, dev), &mut io, t, (&chain.pieces, scans))?;
    // The key ranges whose entries the open cannot read: the lost nodes' and the marked
    // leaves' that failed, and those a root made over the leaves leaves to the mend's
    // scan (a repair's open only).
    let failed = walked.leaves.iter().filter(|l| !l.checked);
    let scanned = (found_root.iter()).flat_map(|r| r.scanned.iter().map(|s| s.0));
    let lost: Vec<Keys> = (walked.lost.iter().map(|l| l.keys))
        .chain(failed.map(|l| l.keys))
        .chain(scanned)
        .collect();
    let unmended = walked.tree.is_none();
    let Some(tree) = walked.tree.or(walked.partial.filter(|_| repair)) else {
        return Ok(None);
    };
    let table = Table {
        files: marked_files(&walked.leaves)?,
        retired: chain.pieces.clone(),
    };
    // The accounts of every map outside the tree, as `load` builds them from every leaf.
    let segs = segs_of(&table, bs);
    let mut files: BTreeMap<u64, ReplayFile> = table
        .files
        .into_iter()
        .filter(|f| f.attr == super::publish::PENDING)
        .map(ReplayFile::from_table)
        .collect();
    #[cfg(debug_assertions)]
    let found = table_marked(&segs, &files);
    let changes = changes_of(records)?;
    // The changes naming a file whose entry cannot be read wait for the mend; the others
    // are replayed now.
    let (aside, changes) = read_changed(&tree, &mut io, (changes, &lost, repair), &mut files)?;
    let replayed: BTreeSet<u64> = changes.iter().filter_map(Change::file).collect();
    let (files, mut meta, segs) = replay(store, dev, root, files, segs, changes)?;
    // An id a change set aside names was handed out: never again.
    let named = aside.iter().filter_map(Change::file).max();
    meta.next_id = meta.next_id.max(named.map_or(1, |id| id + 1));
    meta.aside = aside;
    meta.unmended = unmended || !meta.aside.is_empty();
    adopt_tree(
        &mut meta,
        root,
        Some(tree),
        (&[], &chain.index),
        node_blocks(bs),
    );
    meta.replayed = replayed;
    if let Some(f) = found_root {
        super::rootfind::adopt(&mut meta, t, f, node_blocks(bs));
    }
    #[cfg(debug_assertions)]
    check_marks(store, dev, root, &found);
    Ok(Some((adopt_all(store, files)?, meta, segs)))
}

/// The retired chain `t` names, resolved; `None` if it does not read.
fn retired_chain(store: &Store, dev: &dyn Device, t: &TreeRoot) -> Option<Area> {
    match t.retired {
        0 => Some(Area::default()),
        head => {
            let side = SideRef {
                extent: Extent::new(0, 0),
                head,
            };
            area::resolve(dev, store.geometry(), side).ok()
        }
    }
}

/// The entries of the checked `leaves` that carry marks (`table::entry_marks`).
fn marked_files(leaves: &[super::walk::WalkLeaf]) -> Result<Vec<super::table::TableFile>> {
    let mut marked = Vec::new();
    for leaf in leaves.iter().filter(|l| l.checked) {
        for body in super::table::frames(&leaf.payload)? {
            if super::table::entry_marks(body) != 0 {
                marked.push(super::table::decode_file(body)?);
            }
        }
    }
    Ok(marked)
}

/// A key range: `lo ..` up to `hi` (exclusive; `None`: no end).
type Keys = (u64, Option<u64>);

/// Reads into `files` the entry of each file `changes` name, for the replay, and returns
/// the changes set aside and those to replay: a file whose entry cannot be read (its key
/// in a `lost` range, under a hole or in a failed leaf; with `repair`, in any leaf that
/// fails when read) has its changes set aside for the mend (`Meta::aside`).
fn read_changed(
    tree: &super::tree::Tree,
    io: &mut super::treeio::VolIo<'_>,
    (changes, lost, repair): (Vec<Change>, &[Keys], bool),
    files: &mut BTreeMap<u64, ReplayFile>,
) -> Result<(Vec<Change>, Vec<Change>)> {
    let in_lost =
        |id: &u64| (lost.iter()).any(|&(lo, hi)| *id >= lo && hi.is_none_or(|hi| *id < hi));
    let mut unread: BTreeSet<u64> = (changes.iter().filter_map(Change::file))
        .filter(in_lost)
        .collect();
    for id in changes.iter().filter_map(Change::file) {
        if files.contains_key(&id) || unread.contains(&id) {
            continue;
        }
        match tree.get(io, id) {
            Ok(Some(body)) => {
                let (id, f) = ReplayFile::from_table(super::table::decode_file(&body)?);
                files.insert(id, f);
            }
            Ok(None) => {}
            Err(Error::Corrupt { .. }) if repair => {
                unread.insert(id);
            }
            Err(e) => return Err(e),
        }
    }
    // Only a repair's open sets changes aside (where it met damage).
    debug_assert!(repair || (lost.is_empty() && unread.is_empty()));
    Ok((changes.into_iter()).partition(|c| c.file().is_some_and(|id| unread.contains(&id))))
}

/// What [`load_marked`] found through the marks (before the records' changes): the
/// segments named, the files holding maps there, and the pending files.
#[cfg(debug_assertions)]
type Found = (BTreeSet<Extent>, BTreeSet<u64>, BTreeSet<u64>);

#[cfg(debug_assertions)]
fn table_marked(segs: &Segs, files: &BTreeMap<u64, ReplayFile>) -> Found {
    let pending = files
        .iter()
        .filter(|(_, f)| f.attr == super::publish::PENDING)
        .map(|(&id, _)| id);
    (
        segs.named.clone(),
        segs.held.keys().copied().collect(),
        pending.collect(),
    )
}

/// In checked builds, what [`load_marked`] found through the marks (`found`) against
/// every leaf: the same segments and files holding maps outside the tree, and the same
/// pending files (a leaf that does not read is left to the call that reads it).
#[cfg(debug_assertions)]
fn check_marks(store: &Store, dev: &dyn Device, root: &Root, found: &Found) {
    let Ok(read) = read_table(store, dev, root) else {
        return;
    };
    if let TableRead::Whole(table, _) = read.table {
        let bs = u64::from(store.geometry().block_size);
        let all = table_marked(
            &segs_of(&table, bs),
            &table
                .files
                .into_iter()
                .map(ReplayFile::from_table)
                .filter(|(_, f)| f.attr == super::publish::PENDING)
                .collect(),
        );
        assert_eq!(&all, found, "the marks missed what the leaves hold");
    }
}

/// The volume's root, as the store keeps it.
pub(super) fn volume_root(store: &Store) -> Result<Root> {
    let root_bytes = store.root();
    if root_bytes.is_empty() {
        return Err(Error::NoVolume { root_bytes: 0 });
    }
    Root::decode(&root_bytes)
}

/// The map segments a table names and retires, and which file's map lies in which.
pub(super) fn segs_of(table: &Table, bs: u64) -> Segs {
    let mut segs = Segs {
        named: table.files.iter().flat_map(|f| f.map.segments()).collect(),
        retired: table.retired.clone(),
        ..Segs::default()
    };
    for f in &table.files {
        segs.hold(f.id, &f.map, bs);
    }
    segs
}

/// The changes of `records`, in order.
pub(super) fn changes_of(records: &[Record]) -> Result<Vec<Change>> {
    let mut changes = Vec::new();
    for r in records {
        changes.extend(decode_payload(&r.payload).map_err(|e| at_record(e, r.seq))?);
    }
    Ok(changes)
}

/// Applies `changes` to the files of the table (reading the maps they change first) and
/// returns the files, the volume's bookkeeping and its segments. A change naming a file
/// that is not there (unlinked, or lost to a damaged table) changes nothing.
pub(super) fn replay(
    store: &Store,
    dev: &dyn Device,
    root: &Root,
    mut files: BTreeMap<u64, ReplayFile>,
    mut segs: Segs,
    changes: Vec<Change>,
) -> Result<(BTreeMap<u64, ReplayFile>, Meta, Segs)> {
    let mut sides = root.sides;
    let mut meta = Meta {
        next_id: root.next_id,
        ..Meta::empty()
    };
    for id in changes.iter().filter_map(maps_of) {
        if let Some(f) = files.get_mut(&id).filter(|f| !f.loaded) {
            let stored = f.stored.as_ref().expect("a map not read is stored");
            f.set_loaded(read_map(store, dev, id, stored)?);
        }
    }
    for change in changes {
        match &change {
            Change::Areas { a, b } => sides = [SideRef::legacy(*a), SideRef::legacy(*b)],
            Change::TableAreas { a, b } => sides = [*a, *b],
            // A checkpoint that never finished: what it freed is gone, what it wrote
            // is named by no table.
            Change::Segments { new, freed } => segs.unfinished(new, freed),
            _ => {}
        }
        apply(&mut files, change);
    }
    meta.next_id = meta
        .next_id
        .max(files.keys().next_back().map_or(1, |id| id + 1));
    let g = store.geometry();
    meta.areas[root.active] = area::resolve(dev, g, sides[root.active])?;
    // The inactive area holds no table in force: an index damaged there costs only its
    // blocks (left allocated, reported leaked by the check; the next checkpoint makes a
    // new area), never the open.
    let inactive = 1 - root.active;
    meta.areas[inactive] = area::resolve(dev, g, sides[inactive]).unwrap_or_default();
    Ok((files, meta, segs))
}

/// The rebuilt files handed to the file layer ([`adopt`]).
pub(super) fn adopt_all(store: &Store, files: BTreeMap<u64, ReplayFile>) -> Result<FileTable> {
    let mut out = BTreeMap::new();
    for (id, f) in files {
        out.insert(id, Arc::new(Mutex::new(adopt(store, id, f)?)));
    }
    Ok(out)
}

fn at_record(e: Error, seq: u64) -> Error {
    match e {
        Error::Corrupt { what, detail } => Error::Corrupt {
            what: Corrupted::InJournalRecord {
                what: Box::new(what),
                seq,
            },
            detail,
        },
        other => other,
    }
}

/// The table the root names: whole (every check passed; each file's entry's device
/// bytes), or damaged (what [`salvage_table`] read of it, its ranges in device bytes).
pub(super) enum TableRead {
    Whole(Table, Vec<Range<u64>>),
    Damaged(Salvaged),
}

/// What [`read_table`] read: the table, the blocks that hold it (tree nodes and the
/// retired chain's index, or both table areas), and the tree to change by later
/// checkpoints (a version 4 root's, if every node checked).
pub(super) struct Read {
    pub table: TableRead,
    pub own: Vec<Extent>,
    /// The tree's nodes (of `own`).
    pub nodes: Vec<Extent>,
    /// The retired chain's index blocks (of `own`).
    pub chain: Vec<u64>,
    pub tree: Option<Tree>,
    /// The key ranges of the internal nodes the tree's walk lost (for the salvage's scan).
    pub lost: Vec<Lost>,
}

/// Reads the table the root names. A version 4 root's tree is whole when every node
/// checks; an area's table when its crc32c matches the root's (its frames' crcs not
/// checked again). Else the bytes are salvaged frame by frame.
pub(super) fn read_table(store: &Store, dev: &dyn Device, root: &Root) -> Result<Read> {
    let bs = u64::from(store.geometry().block_size);
    if let Some(t) = &root.tree {
        let mut tt = read_root_tree(store, dev, t)?;
        let table = match tt.whole {
            true => {
                let (table, places) = decode_placed(&tt.bytes, false)?;
                TableRead::Whole(table, places.into_iter().map(|p| tt.device(p)).collect())
            }
            false => TableRead::Damaged(tt.salvage(t.count, bs)),
        };
        let nb = node_blocks(bs);
        let nodes = tt
            .walked
            .nodes
            .iter()
            .map(|n| Extent::new(n.block, nb))
            .collect();
        let lost = tt.walked.lost.iter().map(Lost::of).collect();
        return Ok(Read {
            table,
            own: tt.own(nb),
            nodes,
            chain: tt.chain.index.clone(),
            tree: tt.take_tree(),
            lost,
        });
    }
    let areas = areas_of(store, dev, root);
    let active =
        area::resolve(dev, store.geometry(), root.sides[root.active]).map_err(|e| match e {
            Error::Corrupt { detail, .. } => Error::Corrupt {
                what: Corrupted::VolumeRoot,
                detail,
            },
            other => other,
        })?;
    let bytes = active.read(dev, bs, root.table_bytes)?;
    let table = match crc32c::crc32c(&bytes) == root.table_crc {
        true => {
            let (t, places) = decode_placed(&bytes, false)?;
            let places = places
                .into_iter()
                .map(|p| active.device_bytes(bs, p))
                .collect();
            TableRead::Whole(t, places)
        }
        false => TableRead::Damaged(to_device(salvage_table(&bytes), |r| {
            active.device_bytes(bs, r)
        })),
    };
    let own = areas
        .iter()
        .flat_map(Area::extents)
        .filter(|e| e.len > 0)
        .collect();
    Ok(Read {
        table,
        own,
        nodes: Vec::new(),
        chain: Vec::new(),
        tree: None,
        lost: Vec::new(),
    })
}

/// A salvaged table with its ranges moved to device bytes by `device`.
fn to_device(mut s: Salvaged, device: impl Fn(Range<u64>) -> Range<u64>) -> Salvaged {
    s.places = s.places.into_iter().map(&device).collect();
    for d in &mut s.damaged {
        d.bytes = device(d.bytes.clone());
    }
    s
}

/// The previous checkpoint's table, salvaged (its ranges in device bytes): a version 4
/// root's previous tree, or the inactive table area. `None` if there is none or its root
/// cannot be read.
pub(super) fn previous_table(store: &Store, dev: &dyn Device, root: &Root) -> Option<Salvaged> {
    let bs = u64::from(store.geometry().block_size);
    if let Some(t) = &root.tree {
        let (prev, count) = t.previous?;
        let tt: TreeTable =
            super::treeio::read_tree_table(store, dev, (prev, count, t.stamp), 0).ok()?;
        return Some(tt.salvage(count, bs));
    }
    let area = areas_of(store, dev, root)[1 - root.active].clone();
    if area.blocks() == 0 {
        return None;
    }
    let bytes = area.read(dev, bs, area.blocks() * bs).ok()?;
    Some(to_device(salvage_table(&bytes), |r| {
        area.device_bytes(bs, r)
    }))
}

/// Both areas a version 2 or 3 root names, as far as their index chains read (one that
/// does not is empty).
fn areas_of(store: &Store, dev: &dyn Device, root: &Root) -> [Area; 2] {
    let g = store.geometry();
    [0, 1].map(|i| area::resolve(dev, g, root.sides[i]).unwrap_or_default())
}

/// A version 4 root's tree as the volume keeps it: `meta` gains the generation, the
/// volume's stamp (none if the root is older than version 7: the next checkpoint mints
/// it), the durable root, its retired chain's index blocks (`chain`) and the tree (or, if it was
/// damaged, the blocks of its `nodes`, for the build that replaces it to retire).
pub(super) fn adopt_tree(
    meta: &mut Meta,
    root: &Root,
    tree: Option<Tree>,
    (nodes, chain): (&[Extent], &[u64]),
    nb: u64,
) {
    let Some(t) = &root.tree else {
        return;
    };
    meta.chain = chain.to_vec();
    meta.generation = t.generation;
    meta.durable = Some((t.root, t.count));
    meta.stamp = t.stamp;
    match &tree {
        Some(tree) => meta.tree_blocks = tree.nodes().len() as u64 * nb,
        None => meta.old_nodes = nodes.to_vec(),
    }
    // The tree adopted is the one the root names: its entry count as durable.
    debug_assert!(
        tree.as_ref()
            .is_none_or(|tr| tr.count() == t.count && tr.root().is_none_or(|r| r == t.root)),
        "the tree the root names"
    );
    meta.tree = tree;
}

/// The error a plain open gives for a table with damaged entries: how many, the ids it
/// could read, and what to run.
fn damaged_table(root: &Root, s: &Salvaged) -> Error {
    let readable: Vec<u64> = s
        .damaged
        .iter()
        .filter_map(|d| d.file.as_ref().map(|f| f.id))
        .collect();
    let mut detail = format!(
        "{} damaged file entries (ids readable in them: {readable:?}; {} entries intact)",
        s.damaged.len() as u64 + s.uncounted,
        s.table.files.len()
    );
    if s.retired_lost {
        detail.push_str(", the retired segments' list damaged");
    }
    if s.header_lost {
        detail.push_str(", its header damaged");
    }
    detail.push_str(": run `extalloc fsck --repair`");
    Error::Corrupt {
        what: match &root.tree {
            Some(t) => Corrupted::FileTree {
                root_block: t.root.block,
            },
            None => {
                let side = root.sides[root.active];
                Corrupted::FileTable {
                    start: side.extent.start,
                    len: side.extent.len,
                    head: side.head,
                }
            }
        },
        detail,
    }
}

/// A rebuilt file. One whose map was read (changed since the table) is handed to the file
/// layer now, each mapped extent checked allocated, and is written by the next checkpoint;
/// the others keep their stored map until first used.
pub(super) fn adopt(store: &Store, id: u64, f: ReplayFile) -> Result<VFile> {
    let alloc = store.create_file(id);
    let mut unwritten = super::file::Ranges::default();
    if f.loaded {
        let entries: Vec<_> = f.maps.iter().map(|(&l, &(e, u))| (l, e, u)).collect();
        adopt_entries(store, &alloc, &mut unwritten, id, &entries)?;
    }
    Ok(VFile {
        size: f.size,
        attr: f.attr,
        alloc,
        unwritten,
        placement: f.placement,
        lifetime: crate::alloc::Lifetime::Unknown,
        stored: f.stored,
        loaded: f.loaded,
        map_dirty: f.loaded,
        tail: None,
    })
}
