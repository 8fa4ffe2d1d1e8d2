//! The volume's checkpoint (its file table written, then the store's checkpoint with a root
//! pointing at it) and its open (the table read, the changes logged after it applied).
//!
//! Two table areas take turns: the table goes to the inactive one, which no durable root
//! points at, so a crash while it is written leaves the old table whole. An area too small
//! for the table is replaced first (a new one allocated, the old inactive one freed, in a
//! transaction of its own that logs the new areas).
//!
//! Data structures: none of their own (`Meta`, `record::Root`). Invariant: the store's root
//! names the active area, and the table there holds every change of the records the
//! checkpoint left behind; both areas are allocated (owner `TABLE_OWNER`). Locks: runs
//! under the gate, written.

use super::file::{apply, ReplayFile, VFile};
use super::record::{decode_payload, decode_table, encode_table, Change, Root, PAYLOAD_MAGIC};
use super::{FileTable, Meta, Volume, TABLE_OWNER};
use crate::alloc::AllocRequest;
use crate::disk::device::Device;
use crate::disk::journal::Record;
use crate::error::{Error, Result};
use crate::store::Store;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

impl Volume {
    /// Under the gate (written): commits what is logged, writes the table to the inactive
    /// area and checkpoints the store with a root naming it.
    pub(super) fn checkpoint_locked(&self) -> Result<()> {
        self.commit_locked()?;
        let files: Vec<Arc<Mutex<VFile>>> = self.files.read().values().cloned().collect();
        let images: Vec<_> = files.iter().map(|f| f.lock().image()).collect();
        let table = encode_table(&images);
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
        let len = (need * 2).max(16);
        // In the last group: out of the way of the files' streams.
        let g = self.store.geometry();
        let goal = g.group_start(g.groups_count() - 1);
        let new = self
            .store
            .allocate(&AllocRequest::new(TABLE_OWNER, len).min_len(need).goal(goal))?;
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
/// changes of `records`, then hands every file's map to the file layer (which checks that
/// the store holds each block allocated).
pub(super) fn load(
    store: &Store,
    dev: &dyn Device,
    records: &[Record],
) -> Result<(FileTable, Meta)> {
    let root_bytes = store.root();
    if root_bytes.is_empty() {
        return Err(Error::InvalidRequest(
            "the device holds a store but no volume: make one with `extalloc mkfs`".into(),
        ));
    }
    let root = Root::decode(&root_bytes)?;
    let table = read_table(store, dev, &root)?;
    let mut files: BTreeMap<u64, ReplayFile> =
        table.into_iter().map(ReplayFile::from_image).collect();
    let mut meta = Meta {
        next_id: root.next_id,
        areas: root.areas,
        active: root.active,
    };
    for r in records {
        for change in decode_payload(&r.payload).map_err(|e| at_record(e, r.seq))? {
            if let Change::Areas { a, b } = change {
                meta.areas = [a, b];
            }
            apply(&mut files, change);
        }
    }
    meta.next_id = meta
        .next_id
        .max(files.keys().next_back().map_or(1, |id| id + 1));
    let mut out = BTreeMap::new();
    for (id, f) in files {
        out.insert(id, Arc::new(Mutex::new(adopt(store, id, f)?)));
    }
    Ok((out, meta))
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

fn read_table(
    store: &Store,
    dev: &dyn Device,
    root: &Root,
) -> Result<Vec<super::record::FileImage>> {
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
    if crc32c::crc32c(&table) != root.table_crc {
        return Err(Error::Corrupt {
            what: format!("volume file table at block {}", area.start),
            detail: "its crc32c does not match the root's: run `extalloc fsck`".into(),
        });
    }
    decode_table(&table)
}

/// A rebuilt file: the file layer adopts each mapped extent (checked allocated).
fn adopt(store: &Store, id: u64, f: ReplayFile) -> Result<VFile> {
    let alloc = store.create_file(id);
    let mut unwritten = super::file::Ranges::default();
    for (&l, &(e, u)) in &f.maps {
        store
            .adopt_data(&alloc, l, e)
            .map_err(|err| Error::Corrupt {
                what: format!("volume file {id}"),
                detail: format!("logical block {l} maps {}+{}: {err}", e.start, e.len),
            })?;
        if u {
            unwritten.insert(l, e.len);
        }
    }
    Ok(VFile {
        size: f.size,
        attr: f.attr,
        alloc,
        unwritten,
        placement: f.placement,
        lifetime: crate::alloc::Lifetime::Unknown,
    })
}
