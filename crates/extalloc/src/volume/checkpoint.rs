//! The volume's checkpoint (the changed maps written to map segments, its file table
//! written, then the store's checkpoint with a root pointing at it) and its open (the table
//! read, the changes logged after it applied; maps stay unread, `maps.rs`). A table whose
//! crc does not match the root's is salvaged frame by frame (`table.rs`); a plain open
//! refuses it, naming the damage, and `salvage.rs` opens it for repair with the pieces
//! here ([`read_table`], [`replay`], [`adopt_all`]).
//!
//! Two table areas take turns: the table goes to the inactive one, which no durable root
//! points at, so a crash while it is written leaves the old table whole. An area too small
//! for the table is replaced first (a new one allocated, the old inactive one freed, in a
//! transaction of its own that logs the new areas).
//!
//! Data structures: none of their own (`Meta`, `record::Root`, `maps::Segs`). Invariant:
//! the store's root names the active area, and the table there (with the map segments it
//! names) holds every change of the records the checkpoint left behind; both areas are
//! allocated (owner `TABLE_OWNER`). Locks: runs under the gate, written.

use super::area::{self, index_blocks_for, max_piece_blocks, Area};
use super::file::{apply, maps_of, ReplayFile, VFile};
use super::maps::{adopt_entries, read_map};
use super::record::{decode_payload, Change, Root, SideRef, PAYLOAD_MAGIC};
use super::state::Segs;
use super::state::{FileTable, Meta, Volume, TABLE_OWNER};
use super::table::{decode_placed, decode_table, encode_table, salvage_table, Salvaged, Table};
use crate::alloc::AllocRequest;
use crate::disk::device::Device;
use crate::disk::journal::Record;
use crate::error::{Error, Result};
use crate::geometry::{Extent, Geometry};
use crate::store::Store;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

#[cfg(test)]
thread_local! {
    /// Tests: checkpoints write version 2 tables (to test reading them).
    pub(super) static WRITE_V2: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Volume {
    /// Under the gate (written): commits what is logged, writes the changed maps to new
    /// map segments, the table to the inactive area, and checkpoints the store with a root
    /// naming it.
    pub(super) fn checkpoint_locked(&self) -> Result<()> {
        debug_assert!(
            self.gate.is_locked_exclusive(),
            "a checkpoint, the gate open"
        );
        self.commit_locked()?;
        let files: Vec<Arc<Mutex<VFile>>> = self.files.read().values().cloned().collect();
        let pending = self.plan_maps(&files)?;
        let placed = self.write_segments(&pending)?;
        let new = placed.extents();
        let table = Table {
            files: pending.resolve(&placed),
            retired: pending.dead.clone(),
        };
        debug_assert_eq!(table.files.len(), files.len(), "a table entry per file");
        self.write_table(&table)?;
        let mut segs = self.segs.lock();
        for dead in &pending.dead {
            segs.named.remove(dead);
        }
        segs.named.extend(&new);
        segs.retired = pending.dead.clone();
        drop(segs);
        for &i in &pending.moved {
            let mut f = files[i].lock();
            f.stored = Some(table.files[i].map.clone());
            f.map_dirty = false;
        }
        Ok(())
    }

    /// Writes `table` to the inactive area (replaced first if too small) and checkpoints
    /// the store with a root naming it.
    fn write_table(&self, table: &Table) -> Result<()> {
        #[cfg(test)]
        let encoded = if WRITE_V2.with(|v| v.get()) {
            super::table::encode_table_v2(table)
        } else {
            encode_table(table)
        };
        #[cfg(not(test))]
        let encoded = encode_table(table);
        debug_assert_eq!(decode_table(&encoded).ok().as_ref(), Some(table));
        let table = encoded;
        let need = (table.len() as u64).div_ceil(self.block_size);
        self.table_blocks
            .store(need, std::sync::atomic::Ordering::Relaxed);
        let mut meta = self.meta.lock().clone();
        let inactive = 1 - meta.active;
        if meta.areas[inactive].blocks() < need {
            self.replace_area(&mut meta, inactive, need)?;
        }
        meta.areas[inactive].write(self.dev.as_ref(), self.block_size, &table)?;
        self.dev.flush()?;
        let root = Root {
            sides: [meta.areas[0].side(), meta.areas[1].side()],
            active: inactive,
            table_bytes: table.len() as u64,
            table_crc: crc32c::crc32c(&table),
            next_id: meta.next_id,
        };
        *self.prepared_root.lock() = Some(root.encode());
        let result = self.store.checkpoint();
        // A checkpoint that failed before its hook ran leaves the root unused.
        self.prepared_root.lock().take();
        result?;
        meta.active = inactive;
        *self.meta.lock() = meta;
        Ok(())
    }

    /// Gives area `which` room for at least `need` blocks: a new one (twice the need where
    /// the device has it, so the table may grow) of pieces of at most
    /// [`max_piece_blocks`] each, found wherever the allocator has room, and the index
    /// blocks that list them, written and flushed; then the old area freed and the new
    /// areas logged and committed. On failure the old area stays and nothing is committed
    /// (what was allocated goes back with the open transaction's frees).
    fn replace_area(&self, meta: &mut Meta, which: usize, need: u64) -> Result<()> {
        debug_assert!(which < meta.areas.len() && need > 0);
        let g = *self.store.geometry();
        let bs = self.block_size;
        let new = match self.allocate_area(&g, need) {
            Ok(area) => area,
            Err((e, got)) => {
                for x in got {
                    let _ = self.store.free(x);
                }
                return Err(e);
            }
        };
        debug_assert!(
            new.blocks() >= need,
            "an area of {} blocks for {need}",
            new.blocks()
        );
        let written = new
            .encode_index(bs)
            .into_iter()
            .try_for_each(|(at, b)| self.dev.write_at(&b, at * bs))
            .and_then(|()| self.dev.flush());
        if let Err(e) = written {
            new.extents().for_each(|x| {
                let _ = self.store.free(x);
            });
            return Err(e);
        }
        let old = std::mem::replace(&mut meta.areas[which], new);
        for x in old.extents() {
            if let Err(e) = self.store.free(x) {
                // Part of the old area may be freed in the open transaction while the
                // volume still names it: that must never commit.
                self.abort(&format!("freeing the old table area failed: {e}"));
                return Err(e);
            }
        }
        let mut payload = PAYLOAD_MAGIC.to_vec();
        Change::TableAreas {
            a: meta.areas[0].side(),
            b: meta.areas[1].side(),
        }
        .encode(&mut payload);
        self.store.commit(&payload)?;
        *self.meta.lock() = meta.clone();
        Ok(())
    }

    /// Allocates an area for `need` blocks (twice that where there is room): its pieces,
    /// each at most a piece long and in the last group where it can be (out of the way of
    /// the files' streams), then the index blocks that list them. On failure, the error and
    /// what was allocated.
    fn allocate_area(
        &self,
        g: &Geometry,
        need: u64,
    ) -> std::result::Result<Area, (Error, Vec<Extent>)> {
        let bs = self.block_size;
        let want = (need * 2).max(16);
        let piece = max_piece_blocks(g);
        let goal = g.group_start(g.groups_count() - 1);
        let mut got: Vec<Extent> = Vec::new();
        let mut have = 0u64;
        while have < want {
            let len = (want - have).min(piece);
            let req = AllocRequest::new(TABLE_OWNER, len).goal(goal);
            // A whole piece where one is free, else any run at all.
            let e = match self.store.allocate(&req.min_len(len)) {
                Ok(e) => Ok(e),
                Err(e) if e.kind() == crate::ErrorKind::NoSpace => {
                    self.store.allocate(&req.min_len(1))
                }
                Err(e) => Err(e),
            };
            match e {
                Ok(e) => {
                    have += e.len;
                    got.push(e);
                }
                // The doubling is a margin, not a need.
                Err(_) if have >= need => break,
                Err(e) => return Err((e, got)),
            }
        }
        let mut index = Vec::new();
        while (index.len() as u64) < index_blocks_for(got.len() as u64, bs) {
            match self
                .store
                .allocate(&AllocRequest::new(TABLE_OWNER, 1).goal(goal))
            {
                Ok(e) => index.push(e.start),
                Err(e) => {
                    got.extend(index.iter().map(|&b| Extent::new(b, 1)));
                    return Err((e, got));
                }
            }
        }
        Ok(Area { index, pieces: got })
    }
}

/// Reads the volume of an open store: its table (from the root's active area) and the
/// changes of `records`. Only the maps of files those changes map or unmap are read, and
/// handed to the file layer (which checks that the store holds each block allocated); the
/// others wait for their first use. A table with damaged entries is refused (see
/// [`damaged_table`]); `salvage.rs` opens it for repair.
pub(super) fn load(
    store: &Store,
    dev: &dyn Device,
    records: &[Record],
) -> Result<(FileTable, Meta, Segs)> {
    let root = volume_root(store)?;
    let table = match read_table(store, dev, &root)? {
        TableRead::Whole(table, _) => table,
        TableRead::Damaged(s) => return Err(damaged_table(&root, &s)),
    };
    let segs = segs_of(&table);
    let files = table
        .files
        .into_iter()
        .map(ReplayFile::from_table)
        .collect();
    let changes = changes_of(records)?;
    let (files, meta, segs) = replay(store, dev, &root, files, segs, changes)?;
    Ok((adopt_all(store, files)?, meta, segs))
}

/// The volume's root, as the store keeps it.
pub(super) fn volume_root(store: &Store) -> Result<Root> {
    let root_bytes = store.root();
    if root_bytes.is_empty() {
        return Err(Error::NoVolume { root_bytes: 0 });
    }
    Root::decode(&root_bytes)
}

/// The map segments a table names and retires.
pub(super) fn segs_of(table: &Table) -> Segs {
    Segs {
        named: table.files.iter().filter_map(|f| f.map.segment()).collect(),
        retired: table.retired.clone(),
    }
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
        areas: Default::default(),
        active: root.active,
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
            what: format!("{what} in journal record {seq}"),
            detail,
        },
        other => other,
    }
}

/// The table the root names: whole (its crc matched; each file's entry's bytes in it), or
/// damaged (what [`salvage_table`] read of it).
pub(super) enum TableRead {
    Whole(Table, Vec<Range<u64>>),
    Damaged(Salvaged),
}

/// Reads the table the root names. Its crc32c matching the root's, it is decoded whole
/// (its frames' crcs not checked again); else salvaged.
pub(super) fn read_table(store: &Store, dev: &dyn Device, root: &Root) -> Result<TableRead> {
    let table = read_table_bytes(store, dev, root)?;
    if crc32c::crc32c(&table) == root.table_crc {
        let (t, places) = decode_placed(&table, false)?;
        return Ok(TableRead::Whole(t, places));
    }
    Ok(TableRead::Damaged(salvage_table(&table)))
}

fn read_table_bytes(store: &Store, dev: &dyn Device, root: &Root) -> Result<Vec<u8>> {
    let area = area::resolve(dev, store.geometry(), root.sides[root.active])?;
    let bs = u64::from(store.geometry().block_size);
    area.read(dev, bs, root.table_bytes).map_err(|e| match e {
        Error::Corrupt { detail, .. } => Error::Corrupt {
            what: "volume root".into(),
            detail,
        },
        other => other,
    })
}

/// Both areas the root names, as far as their index chains read (one that does not is
/// empty): for the salvage and [`Volume::places`], which must go on whatever is damaged.
pub(super) fn areas_of(store: &Store, dev: &dyn Device, root: &Root) -> [Area; 2] {
    let g = store.geometry();
    [0, 1].map(|i| area::resolve(dev, g, root.sides[i]).unwrap_or_default())
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
        what: format!("volume file table at {:?}", root.sides[root.active]),
        detail,
    }
}

/// A rebuilt file. One whose map was read (changed since the table) is handed to the file
/// layer now, each mapped extent checked allocated, and is written by the next checkpoint;
/// the others keep their stored map until first used.
fn adopt(store: &Store, id: u64, f: ReplayFile) -> Result<VFile> {
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
    })
}
