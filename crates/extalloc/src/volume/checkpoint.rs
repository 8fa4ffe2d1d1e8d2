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

use super::file::{apply, maps_of, ReplayFile, VFile};
use super::maps::{adopt_entries, read_map};
use super::record::{decode_payload, Change, Root, PAYLOAD_MAGIC};
use super::state::Segs;
use super::state::{FileTable, Meta, Volume, TABLE_OWNER};
use super::table::{decode_placed, decode_table, encode_table, salvage_table, Salvaged, Table};
use crate::alloc::AllocRequest;
use crate::disk::device::Device;
use crate::disk::journal::Record;
use crate::error::{Error, Result};
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
        let new = self.write_segments(&pending)?;
        let table = Table {
            files: pending.resolve(&new),
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
        let mut meta = *self.meta.lock();
        let inactive = 1 - meta.active;
        if meta.areas[inactive].len < need {
            self.replace_area(&mut meta, inactive, need)?;
        }
        let mut padded = table.clone();
        padded.resize((need * self.block_size) as usize, 0);
        self.dev
            .write_at(&padded, meta.areas[inactive].start * self.block_size)?;
        self.dev.flush()?;
        let root = Root {
            areas: meta.areas,
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

    /// Gives area `which` at least `need` blocks: a new one (twice the need, so the table
    /// may grow), the old one freed, the new areas logged and committed.
    fn replace_area(&self, meta: &mut Meta, which: usize, need: u64) -> Result<()> {
        debug_assert!(which < meta.areas.len() && need > 0);
        let len = (need * 2).max(16);
        // In the last group: out of the way of the files' streams.
        let g = self.store.geometry();
        let goal = g.group_start(g.groups_count() - 1);
        let new = self
            .store
            .allocate(&AllocRequest::new(TABLE_OWNER, len).min_len(need).goal(goal))?;
        debug_assert!(new.len >= need, "an area of {} blocks for {need}", new.len);
        let old = meta.areas[which];
        if old.len > 0 {
            if let Err(e) = self.store.free(old) {
                // Nothing recorded yet: give the new area back with the transaction.
                let _ = self.store.free(new);
                return Err(e);
            }
        }
        meta.areas[which] = new;
        let mut payload = PAYLOAD_MAGIC.to_vec();
        Change::Areas {
            a: meta.areas[0],
            b: meta.areas[1],
        }
        .encode(&mut payload);
        self.store.commit(&payload)?;
        *self.meta.lock() = *meta;
        Ok(())
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
    let mut meta = Meta {
        next_id: root.next_id,
        areas: root.areas,
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
            Change::Areas { a, b } => meta.areas = [*a, *b],
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
    let area = root.areas[root.active];
    let bs = u64::from(store.geometry().block_size);
    if root.table_bytes > area.len.saturating_mul(bs) {
        return Err(Error::Corrupt {
            what: "volume root".into(),
            detail: format!(
                "a {}-byte table does not fit its area of {} blocks",
                root.table_bytes, area.len
            ),
        });
    }
    store.geometry().validate(area)?;
    let mut table = vec![0u8; root.table_bytes as usize];
    dev.read_at(&mut table, area.start * bs)?;
    Ok(table)
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
        what: format!(
            "volume file table at block {}",
            root.areas[root.active].start
        ),
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
