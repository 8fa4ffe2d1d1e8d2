//! Maps too long for a node of the file tree, in runs of their own (`record::RunsRef`).
//!
//! A long map goes to a map segment (`maps.rs`), which needs a run of blocks as long as
//! the map; on a device fragmented to short runs the segment cannot be placed, and the
//! map used to stay inline in the file's table entry. A tree node holds an entry of at
//! most a node's payload, so such an entry's map is written instead over runs the
//! allocator finds one at a time, however short ([`Volume::spill`]), and the entry names
//! the runs. The runs are the file's alone: named with the map segments while its entry
//! names them, retired (and freed by the checkpoint after) once the map moves or the file
//! goes.
//!
//! Data structures: none of their own (`record::RunsRef`). Invariant: an entry a
//! checkpoint puts into the tree fits one node. Locks: runs under the gate, written.

use super::node::{node_bytes, HEADER_BYTES};
use super::record::{decode_map, encode_map, map_corrupt, map_counts, MapEntry, MapRef, RunsRef};
use super::state::{Volume, TABLE_OWNER};
use super::table::{file_body, TableFile, FRAME_HEADER};
use crate::alloc::AllocRequest;
use crate::disk::device::Device;
use crate::error::{Error, Result};
use crate::geometry::Extent;
use crate::store::Store;

/// True if `f`'s entry fits one tree node on blocks of `bs` bytes.
pub(super) fn fits(f: &TableFile, bs: u64) -> bool {
    HEADER_BYTES + FRAME_HEADER + file_body(f).len() <= node_bytes(bs)
}

impl Volume {
    /// Writes the map of each entry too long for a node to runs of its own (not flushed)
    /// and names them in the entry. Returns the entries changed and every run allocated
    /// (to record, or give back). On failure what it allocated is given back and
    /// `entries` may be partly changed (the caller discards them).
    pub(super) fn spill(&self, entries: &mut [TableFile]) -> Result<(Vec<usize>, Vec<Extent>)> {
        let mut got = Vec::new();
        let mut changed = Vec::new();
        for (i, entry) in entries.iter_mut().enumerate() {
            if fits(entry, self.block_size) {
                continue;
            }
            match self.spill_one(entry, &mut got) {
                Ok(map) => entry.map = map,
                Err(e) => {
                    got.drain(..).for_each(|x| {
                        let _ = self.store.free(x);
                    });
                    return Err(e);
                }
            }
            if !fits(entry, self.block_size) {
                let s = self.store.statfs();
                got.drain(..).for_each(|x| {
                    let _ = self.store.free(x);
                });
                // Its runs alone outgrow a node: the device has almost no run of two.
                return Err(Error::NoSpace {
                    requested: 2,
                    min_len: 2,
                    free_blocks: s.free_blocks,
                    pending_blocks: s.pending_blocks,
                    reserved_blocks: s.prealloc_reserved_blocks,
                });
            }
            changed.push(i);
        }
        debug_assert!(entries.iter().all(|f| fits(f, self.block_size)));
        Ok((changed, got))
    }

    /// `f`'s map written over runs of any length, allocated one at a time.
    fn spill_one(&self, f: &TableFile, got: &mut Vec<Extent>) -> Result<MapRef> {
        let MapRef::Inline(m) = &f.map else {
            unreachable!("only an inline map outgrows a node (file {})", f.id)
        };
        let bs = self.block_size;
        let bytes = encode_map(m);
        let need = (bytes.len() as u64).div_ceil(bs);
        let g = self.store.geometry();
        let goal = g.group_start(g.groups_count() - 1);
        let mut runs = Vec::new();
        let mut have = 0u64;
        while have < need {
            let req = AllocRequest::new(TABLE_OWNER, need - have)
                .min_len(1)
                .goal(goal);
            let e = self.store.allocate(&req)?;
            got.push(e);
            runs.push(e);
            have += e.len;
        }
        let mut at = 0usize;
        for run in &runs {
            let n = ((run.len * bs) as usize).min(bytes.len() - at);
            let mut buf = bytes[at..at + n].to_vec();
            buf.resize((run.len * bs) as usize, 0);
            self.dev.write_at(&buf, run.start * bs)?;
            at += n;
        }
        assert_eq!(at, bytes.len(), "the whole map written");
        let (extents, blocks) = map_counts(m);
        Ok(MapRef::Runs(RunsRef {
            runs,
            len: bytes.len() as u32,
            crc: crc32c::crc32c(&bytes),
            extents,
            blocks,
        }))
    }
}

/// File `id`'s map read from its own runs, checked against the crc32c and counts its
/// entry keeps.
pub(super) fn read_runs(
    store: &Store,
    dev: &dyn Device,
    id: u64,
    r: &RunsRef,
) -> Result<Vec<MapEntry>> {
    let bs = u64::from(store.geometry().block_size);
    let first = r.runs.first().copied().unwrap_or(Extent::new(0, 0));
    let mut held = 0u64;
    for run in &r.runs {
        store.geometry().validate(*run)?;
        held = held.saturating_add(run.len * bs);
    }
    if u64::from(r.len) > held {
        return Err(map_corrupt(id, first, "its runs are shorter than the map"));
    }
    let mut bytes = vec![0u8; r.len as usize];
    let mut at = 0usize;
    for run in &r.runs {
        let n = ((run.len * bs) as usize).min(bytes.len() - at);
        dev.read_at(&mut bytes[at..at + n], run.start * bs)?;
        at += n;
    }
    if crc32c::crc32c(&bytes) != r.crc {
        return Err(map_corrupt(
            id,
            first,
            "its crc32c does not match the table's",
        ));
    }
    let entries = decode_map(&bytes).map_err(|e| map_corrupt(id, first, &e.to_string()))?;
    if map_counts(&entries) != (r.extents, r.blocks) {
        return Err(map_corrupt(
            id,
            first,
            "its extent and block counts differ from the table's",
        ));
    }
    Ok(entries)
}
