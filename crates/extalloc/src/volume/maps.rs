//! Lazy extent maps and the map segments that hold the long ones.
//!
//! - **Inline maps.** A file of at most [`INLINE_EXTENTS`] map entries keeps its map in the
//!   file table, as an ext4 inode keeps four extents in `i_block`.
//! - **Map segments.** Longer maps live in map segments: runs of blocks allocated from the
//!   store (owner `TABLE_OWNER`, in the last group) holding many files' maps end to end, each
//!   named by the table with its offset, length and crc32c. A checkpoint writes only the maps
//!   that changed since the last one, copy-on-write: into a new segment, never over one the
//!   durable table names. Segments whose live maps fill less than a quarter of them are
//!   cleaned, when that gives blocks back: their live maps are copied into the new segment
//!   too.
//! - **Retiring.** A segment the new table no longer uses is *retired*: listed in the new
//!   table, and freed by the next checkpoint (until the new table is in force, a crash
//!   leaves the old one, which still names the segment). The freeing checkpoint logs
//!   `Segments {new, freed}` with the allocations; replayed after the root, that record means
//!   the checkpoint never finished, so open takes `freed` as gone and `new` as retired.
//! - **Lazy maps.** Open reads no map (and so loads no bitmap for one): a file keeps its
//!   `MapRef` until an operation needs the map, which is then read, checked against its crc
//!   and counts, and handed to the file layer (each block checked allocated). Files the
//!   journal's records after the table change are read at open, to replay onto.
//!
//! - **Visiting what changed.** `Segs` keeps, per named segment, the live bytes of the
//!   durable maps in it and their files: a checkpoint plans the files changed since the
//!   last one only, takes every other file's map as it stands, and joins the files of a
//!   segment it cleans.
//!
//! Data structures: [`Segs`] (the segments the durable table names, the retired ones, and
//! the accounts of live maps); `Pending` (a checkpoint's entries and new segments while
//! they are built). Invariant: every segment in `Segs` is allocated to `TABLE_OWNER`, none
//! is both named and retired, and the accounts hold exactly the durable entries' maps in
//! segments and runs. Locks: `segs`
//! is changed under the gate (written); a file is read under its own mutex.

use super::file::VFile;
use super::record::{
    decode_map, encode_map, map_corrupt, map_counts as counts, Change, MapEntry, MapRef, SegRef,
    INLINE_EXTENTS,
};
use super::state::{Volume, TABLE_OWNER};
use super::table::TableFile;
use crate::alloc::AllocRequest;
use crate::disk::device::Device;
use crate::error::{Corrupted, Error, Result};
use crate::files::FileAlloc;
use crate::geometry::Extent;
use crate::store::Store;
use parking_lot::{Mutex, MutexGuard};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// A new map segment holds at most this many bytes (unless one map is larger).
const SEGMENT_BYTES: usize = 1 << 20;

/// Where a map goes in a new segment: the segment's index, the byte offset, the length and
/// the crc32c.
#[derive(Debug, Clone, Copy)]
pub(super) struct Slot {
    seg: usize,
    offset: u32,
    len: u32,
    crc: u32,
}

/// The maps a checkpoint writes: each file's table entry, with its map where it is or at
/// a [`Slot`] of a new segment not yet allocated.
pub(super) struct Pending {
    pub(super) files: Vec<(TableFile, Option<Slot>)>,
    /// The file of each entry (parallel to `files`).
    pub(super) handles: Vec<Arc<Mutex<VFile>>>,
    /// The new segments' bytes.
    pub(super) segments: Vec<Vec<u8>>,
    /// Where each map starts in each new segment (ascending): a segment the device has no
    /// run for is cut there into pieces ([`Placed`]), never through a map.
    pub(super) starts: Vec<Vec<u32>>,
    /// Named segments no file of the new table uses.
    pub(super) dead: Vec<Extent>,
    /// Files whose map moved (dirty or cleaned), by index into `files`.
    pub(super) moved: Vec<usize>,
}

impl Volume {
    /// Locks `file`, reading its map first if the open left it unread.
    pub(super) fn lock_loaded<'a>(&self, file: &'a Mutex<VFile>) -> Result<MutexGuard<'a, VFile>> {
        let mut f = file.lock();
        self.load(&mut f)?;
        Ok(f)
    }

    /// Reads the map of a locked file if the open left it unread.
    pub(super) fn load(&self, f: &mut VFile) -> Result<()> {
        if !f.loaded {
            let id = f.alloc.id();
            let stored = f.stored.as_ref().expect("a map not read is stored");
            let entries = read_map(&self.store, self.dev.as_ref(), id, stored)?;
            let fresh = self.store.create_file(id);
            let mut unwritten = super::file::Ranges::default();
            adopt_entries(&self.store, &fresh, &mut unwritten, id, &entries)?;
            debug_assert_eq!(fresh.id(), id, "a map read into another file");
            f.alloc = fresh;
            f.unwritten = unwritten;
            f.loaded = true;
            self.maps_read.fetch_add(1, Relaxed);
        }
        debug_assert!(f.loaded);
        Ok(())
    }

    /// Maps read since the open (figures: an open reads none of the files it did not
    /// replay changes onto).
    pub fn maps_read(&self) -> u64 {
        self.maps_read.load(Relaxed)
    }

    /// Under the gate (written): the table entry of each of `files` (every file if `full`;
    /// else the files of `changed`, the ids changed since the last checkpoint, unlinked
    /// ones included), the changed maps laid out in new
    /// segments (with the live maps of sparse segments, whose files join the entries), and
    /// the named segments that die. Visits only `files` and the segments' accounts
    /// (`Segs::live`), not every file.
    pub(super) fn plan_maps(
        &self,
        files: Vec<Arc<Mutex<VFile>>>,
        changed: &BTreeSet<u64>,
        full: bool,
    ) -> Result<Pending> {
        let bs = self.block_size;
        let mut p = Pending {
            files: Vec::with_capacity(files.len()),
            handles: files,
            segments: Vec::new(),
            starts: Vec::new(),
            dead: Vec::new(),
            moved: Vec::new(),
        };
        // Every file planned is among the changed (or all are planned).
        let visiting = changed;
        debug_assert!(
            full || p
                .handles
                .iter()
                .all(|f| visiting.contains(&f.lock().alloc.id()))
        );
        let segs = self.segs.lock();
        let mut live = match full {
            true => BTreeMap::new(),
            false => segs.live_without(visiting),
        };
        drop(segs);
        let handles = std::mem::take(&mut p.handles);
        for file in &handles {
            p.plan_file(&file.lock(), &mut live, bs);
        }
        p.handles = handles;
        debug_assert_eq!(p.files.len(), p.handles.len(), "an entry per file");
        let mut sparse: BTreeSet<Extent> = live
            .iter()
            .filter(|(seg, &bytes)| bytes * 4 < seg.len * bs)
            .map(|(&seg, _)| seg)
            .collect();
        // Cleaning must give blocks back: a lone segment already as small as its maps
        // (one block of a few maps) stays.
        let held: u64 = sparse.iter().map(|s| s.len).sum();
        let need = sparse.iter().map(|s| live[s]).sum::<u64>().div_ceil(bs);
        if held <= need {
            sparse.clear();
        }
        // The files of sparse segments not visited yet join, to be cleaned (a full plan
        // visits every file): found in the accounts of those segments only.
        let joining: Vec<(u64, Extent)> = match full {
            true => Vec::new(),
            false => {
                let segs = self.segs.lock();
                sparse
                    .iter()
                    .filter_map(|seg| segs.live.get(seg).map(|l| (seg, l)))
                    .flat_map(|(seg, l)| l.1.iter().map(move |&id| (id, *seg)))
                    .filter(|(id, _)| !visiting.contains(id))
                    .collect()
            }
        };
        for (id, seg) in joining {
            self.join_unchanged(&mut p, id, seg);
        }
        self.clean(&mut p, &sparse)?;
        for seg in &sparse {
            live.remove(seg);
        }
        p.dead = self
            .segs
            .lock()
            .named
            .iter()
            .filter(|s| !live.contains_key(s))
            .copied()
            .collect();
        Ok(p)
    }

    /// Adds file `id`, unchanged since the durable tree, whose map lies in `seg`, to `p`.
    fn join_unchanged(&self, p: &mut Pending, id: u64, seg: Extent) {
        // Evicted or not, a file the accounts name is in the durable tree.
        let file = match self.file_locked(id) {
            Ok(f) => f,
            Err(e) => panic!("file {id}, whose map segment {seg:?} is live, cannot be read: {e}"),
        };
        let f = file.lock();
        let stored = f.stored.clone().expect("a durable map");
        debug_assert!(stored.segments().contains(&seg) && !f.map_dirty);
        p.files.push((f.table_file(stored), None));
        drop(f);
        p.handles.push(file);
    }

    /// Copies the maps kept in `sparse` segments into new ones (checked against their crc).
    fn clean(&self, p: &mut Pending, sparse: &BTreeSet<Extent>) -> Result<()> {
        let mut cache: BTreeMap<Extent, Vec<u8>> = BTreeMap::new();
        for i in 0..p.files.len() {
            let r = match &p.files[i] {
                (
                    TableFile {
                        map: MapRef::Segment(r),
                        ..
                    },
                    None,
                ) if sparse.contains(&r.seg) => *r,
                _ => continue,
            };
            let (seg, offset, len) = (r.seg, r.offset, r.len);
            if let std::collections::btree_map::Entry::Vacant(e) = cache.entry(seg) {
                let mut bytes = vec![0u8; (seg.len * self.block_size) as usize];
                self.dev.read_at(&mut bytes, seg.start * self.block_size)?;
                e.insert(bytes);
            }
            let bytes = &cache[&seg][offset as usize..(offset + len) as usize];
            if crc32c::crc32c(bytes) != r.crc {
                let id = p.files[i].0.id;
                return Err(map_corrupt(
                    id,
                    seg,
                    "its crc32c does not match the table's",
                ));
            }
            let at = p.push(bytes);
            p.files[i].0.map = placeholder((r.extents, r.blocks));
            p.files[i].1 = Some(at);
            p.moved.push(i);
        }
        // No file's map is left in a segment being cleaned.
        debug_assert!(p.files.iter().all(|(t, slot)| slot.is_some()
            || !matches!(&t.map, MapRef::Segment(r) if sparse.contains(&r.seg))));
        Ok(())
    }

    /// Allocates and writes `p`'s new segments (flushed; each in pieces cut at map
    /// boundaries where the device has no run that long, [`Volume::place_piece`]), frees the segments the durable
    /// table retired, and commits both with a `Segments` change. Returns the new
    /// segments, where each went. On failure after the change is logged, the retired list becomes what an
    /// open would find (the freed ones gone, the new ones retired).
    pub(super) fn write_segments(&self, p: &Pending) -> Result<Placed> {
        let bs = self.block_size;
        let g = self.store.geometry();
        let goal = g.group_start(g.groups_count() - 1);
        let mut placed = Placed::default();
        let written = (|| -> Result<()> {
            for (s, bytes) in p.segments.iter().enumerate() {
                placed.pieces.push(Vec::new());
                let mut from = 0u32;
                while (from as usize) < bytes.len() {
                    let (cut, e) = self.place_piece(p, s, from, goal)?;
                    placed.pieces[s].push((from, e));
                    if let Some(e) = e {
                        let mut padded = bytes[from as usize..cut as usize].to_vec();
                        padded.resize((e.len * bs) as usize, 0);
                        self.dev.write_at(&padded, e.start * bs)?;
                    }
                    from = cut;
                }
            }
            self.dev.flush()
        })();
        let new = placed.extents();
        if let Err(e) = written {
            // Nothing recorded yet: the new segments go back with the transaction.
            for &seg in &new {
                let _ = self.store.free(seg);
            }
            return Err(e);
        }
        // Every planned segment placed whole, its pieces in order from its first byte.
        assert_eq!(
            placed.pieces.len(),
            p.segments.len(),
            "a segment not placed"
        );
        debug_assert!(placed
            .pieces
            .iter()
            .all(|ps| ps.first().is_some_and(|&(from, _)| from == 0)
                && ps.windows(2).all(|w| w[0].0 < w[1].0)));
        let retired = self.segs.lock().retired.clone();
        if new.is_empty() && retired.is_empty() {
            return Ok(placed);
        }
        let mut freed = Vec::new();
        let mut result = Ok(());
        for &seg in &retired {
            result = self.store.free(seg);
            if result.is_err() {
                break;
            }
            freed.push(seg);
        }
        self.log(&[Change::Segments {
            new: new.clone(),
            freed: freed.clone(),
        }]);
        let result = result.and_then(|()| self.commit_locked());
        // Committed or waiting for the next commit, this is what an open would find until
        // the new table is in force.
        self.segs.lock().unfinished(&new, &freed);
        result.map(|()| placed)
    }

    /// Allocates the next piece of new segment `s` from its byte `from`: the rest of the
    /// segment where a run that long is free, else the longest run the allocator finds
    /// that holds at least the next map, cut at the last map boundary it holds (its tail
    /// past that given back). A map of more than a block that no free run holds gets no
    /// blocks: it stays in the table (`None`). Returns where the piece ends in the segment
    /// and its blocks.
    fn place_piece(
        &self,
        p: &Pending,
        s: usize,
        from: u32,
        goal: u64,
    ) -> Result<(u32, Option<Extent>)> {
        let bs = self.block_size;
        let end = p.segments[s].len() as u32;
        let first = p
            .cuts_after(s, from)
            .next()
            .expect("a map after every start");
        let blocks = |to: u32| u64::from(to - from).div_ceil(bs);
        let req = AllocRequest::new(TABLE_OWNER, blocks(end))
            .min_len(blocks(first))
            .goal(goal);
        let e = match self.store.allocate(&req) {
            Ok(e) => e,
            Err(e) if e.kind() == crate::ErrorKind::NoSpace && blocks(first) > 1 => {
                return Ok((first, None));
            }
            Err(e) => return Err(e),
        };
        let fits = |b: &u32| blocks(*b) <= e.len;
        let cut = p
            .cuts_after(s, from)
            .take_while(fits)
            .last()
            .unwrap_or(first);
        assert!(
            blocks(cut) <= e.len,
            "a piece of {} blocks for {} bytes",
            e.len,
            cut - from
        );
        let keep = blocks(cut);
        if keep < e.len {
            self.store.free(Extent::new(e.start + keep, e.len - keep))?;
        }
        debug_assert!(cut > from && (cut == end || p.starts[s].contains(&cut)));
        Ok((cut, Some(Extent::new(e.start, keep))))
    }
}

impl Pending {
    /// Adds `f`'s entry: its map where it is (counted in `live`), or, changed, laid out
    /// in a new segment (or inline) and noted as moved.
    fn plan_file(&mut self, f: &VFile, live: &mut BTreeMap<Extent, u64>, bs: u64) {
        match &f.stored {
            Some(stored) if !f.map_dirty => {
                for (seg, bytes) in stored.parts(bs) {
                    *live.entry(seg).or_default() += bytes;
                }
                self.files.push((f.table_file(stored.clone()), None));
            }
            _ => {
                let entries = f.entries();
                let counts = counts(&entries);
                if entries.len() <= INLINE_EXTENTS {
                    self.files
                        .push((f.table_file(MapRef::Inline(entries)), None));
                } else {
                    let at = self.push(&encode_map(&entries));
                    self.files
                        .push((f.table_file(placeholder(counts)), Some(at)));
                }
                self.moved.push(self.files.len() - 1);
            }
        }
        debug_assert!(self.moved.last().is_none_or(|&i| i < self.files.len()));
    }

    /// Appends a map's bytes to the last new segment (or a fresh one) and returns where.
    fn push(&mut self, bytes: &[u8]) -> Slot {
        let (len, crc) = (bytes.len() as u32, crc32c::crc32c(bytes));
        let slot = match self.segments.last_mut() {
            Some(seg) if seg.len() + bytes.len() <= SEGMENT_BYTES => {
                let offset = seg.len() as u32;
                seg.extend_from_slice(bytes);
                self.starts
                    .last_mut()
                    .expect("a start per segment")
                    .push(offset);
                Slot {
                    seg: self.segments.len() - 1,
                    offset,
                    len,
                    crc,
                }
            }
            _ => {
                self.segments.push(bytes.to_vec());
                self.starts.push(vec![0]);
                Slot {
                    seg: self.segments.len() - 1,
                    offset: 0,
                    len,
                    crc,
                }
            }
        };
        let (at, end) = (slot.offset as usize, (slot.offset + slot.len) as usize);
        debug_assert_eq!(&self.segments[slot.seg][at..end], bytes, "a map misplaced");
        slot
    }

    /// The table's entries, each moved map pointing into the piece of its new segment
    /// that holds it.
    pub(super) fn resolve(&self, placed: &Placed) -> Vec<TableFile> {
        self.files
            .iter()
            .map(|(t, at)| {
                let mut t = t.clone();
                if let (Some(slot), MapRef::Segment(r)) = (at, &mut t.map) {
                    match placed.piece_of(slot) {
                        (from, Some(seg)) => {
                            r.seg = seg;
                            r.offset = slot.offset - from;
                            r.len = slot.len;
                            r.crc = slot.crc;
                        }
                        (_, None) => {
                            let (at, end) =
                                (slot.offset as usize, (slot.offset + slot.len) as usize);
                            let m = decode_map(&self.segments[slot.seg][at..end])
                                .expect("a map this checkpoint encoded decodes");
                            t.map = MapRef::Inline(m);
                        }
                    }
                }
                t
            })
            .collect()
    }

    /// Where segment `s`'s map that starts at or after `from` ends, for each start: the
    /// byte offsets a piece may end at (the segment's end included).
    fn cuts_after(&self, s: usize, from: u32) -> impl Iterator<Item = u32> + '_ {
        self.starts[s]
            .iter()
            .copied()
            .filter(move |&b| b > from)
            .chain(std::iter::once(self.segments[s].len() as u32))
    }
}

/// Where the new segments went: for each planned segment, its pieces as (first byte of the
/// segment the piece holds, the piece's blocks). A segment the allocator had a run for is
/// one piece; on a fragmented device it is cut at map boundaries into as many as it takes,
/// and a map longer than any free run stays in the table instead (no blocks: `None`; an
/// inline map of any length, table entries being written through the table's pieces).
#[derive(Debug, Default)]
pub(super) struct Placed {
    pub(super) pieces: Vec<Vec<(u32, Option<Extent>)>>,
}

impl Placed {
    /// Every piece's blocks.
    pub(super) fn extents(&self) -> Vec<Extent> {
        self.pieces
            .iter()
            .flatten()
            .filter_map(|&(_, e)| e)
            .collect()
    }

    /// The piece holding the map at `slot`: its first byte in the segment and its blocks.
    fn piece_of(&self, slot: &Slot) -> (u32, Option<Extent>) {
        let pieces = &self.pieces[slot.seg];
        let i = pieces.partition_point(|&(from, _)| from <= slot.offset) - 1;
        debug_assert!(i == pieces.len() - 1 || slot.offset + slot.len <= pieces[i + 1].0);
        pieces[i]
    }
}

/// A segment reference whose place is filled in by [`Pending::resolve`].
fn placeholder((extents, blocks): (u64, u64)) -> MapRef {
    MapRef::Segment(SegRef {
        seg: Extent::new(0, 0),
        offset: 0,
        len: 0,
        crc: 0,
        extents,
        blocks,
    })
}

/// File `id`'s map entries as `stored` names them: inline, or read from its segment and
/// checked against the crc32c and counts the table keeps.
pub(super) fn read_map(
    store: &Store,
    dev: &dyn Device,
    id: u64,
    stored: &MapRef,
) -> Result<Vec<MapEntry>> {
    let r = match stored {
        MapRef::Inline(entries) => return Ok(entries.clone()),
        MapRef::Segment(r) => r,
        MapRef::Runs(r) => return super::spill::read_runs(store, dev, id, r),
    };
    let (seg, offset, len, crc) = (r.seg, u64::from(r.offset), u64::from(r.len), r.crc);
    store.geometry().validate(seg)?;
    let bs = u64::from(store.geometry().block_size);
    if offset + len > seg.len * bs {
        return Err(map_corrupt(
            id,
            seg,
            "the table places it past the segment's end",
        ));
    }
    let mut bytes = vec![0u8; len as usize];
    dev.read_at(&mut bytes, seg.start * bs + offset)?;
    if crc32c::crc32c(&bytes) != crc {
        return Err(map_corrupt(
            id,
            seg,
            "its crc32c does not match the table's",
        ));
    }
    let entries = decode_map(&bytes).map_err(|e| map_corrupt(id, seg, &e.to_string()))?;
    if counts(&entries) != stored.counts() {
        return Err(map_corrupt(
            id,
            seg,
            "its extent and block counts differ from the table's",
        ));
    }
    Ok(entries)
}

/// Hands `entries` to the file layer's `alloc` (each block checked allocated) and notes the
/// unwritten ones.
pub(super) fn adopt_entries(
    store: &Store,
    alloc: &FileAlloc,
    unwritten: &mut super::file::Ranges,
    id: u64,
    entries: &[MapEntry],
) -> Result<()> {
    for &(l, e, u) in entries {
        store
            .adopt_data(alloc, l, e)
            .map_err(|err| Error::Corrupt {
                what: Corrupted::File { id },
                detail: format!("logical block {l} maps {}+{}: {err}", e.start, e.len),
            })?;
        if u {
            unwritten.insert(l, e.len);
        }
        // Paired with the map read: the file maps the entry now, to its blocks.
        debug_assert_eq!(
            alloc.lookup(l).map(|(p, _)| p),
            Some(e.start),
            "file {id} at {l}"
        );
    }
    Ok(())
}
