//! Which damaged entries the page path's mend keeps (`leafrepair.rs`): the salvage's
//! rules (`salvage.rs`) checked against what everything else owns, a page path's way.
//! An entry is kept if its map survived (`salvage_survival.rs`), under its own id if no
//! file has it, else under a fresh one; a pending entry is not kept (an open removes
//! it); a map outside the tree is kept where it lies if that place survived too (a
//! segment named already, or one no one owns and allocated), and held in the segments'
//! accounts when the mend ends. The previous checkpoint's entries for a damaged leaf's
//! range that no leaf gave are restored by the same rules (their bytes may be older).
//! The journal's changes to files whose entries the open could not read (under a lost
//! node, in a failed leaf), which it set aside (`load.rs`), are applied as its replay
//! would have: the files they create made
//! from them first (their blocks are the journal's), then each entry kept under its own
//! id judged on the map they leave it and kept with them applied, or not kept if they
//! unlink it; such files go into memory, changed, for the next checkpoint to write.
//!
//! Data structures: [`Keeper`], what is taken (every block owned by a file, the tree or a
//! map segment, with the entries kept so far), the ids handed out, the segments the kept
//! maps lie in, the changes set aside by file and the files they changed. Invariant: no
//! entry kept maps a block another owner holds; each kept map outside the tree is held
//! in the accounts, and each file changed is in memory and dirty, once the mend ends
//! (nothing before: a mend that fails changes none of it). Locks: the caller
//! holds the gate for writing; the meta and segments mutexes are taken briefly, never
//! across a read, and at the end the files lock (writing), then the dirty set.

use super::file::{ReplayFile, VFile};
use super::node::{self, NodeRef};
use super::record::{Change, MapEntry, MapRef};
use super::salvage::{check_map, journal_by_file, loaded, replay_one, survived_after};
use super::salvage::{Journal, LostEntry, MendedLeaves};
use super::state::{FileTable, Volume};
use super::table::{decode_file, file_body, TableFile};
use super::tree::{NodeIo, Tree};
use super::treeio::VolIo;
use crate::error::{Error, Result};
use crate::geometry::Extent;
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::Arc;

/// An entry to keep if its map survived, with its bytes on the device.
pub(super) struct Candidate {
    pub(super) file: TableFile,
    pub(super) bytes: std::ops::Range<u64>,
    /// Its own frame checked (in a whole leaf, or an intact frame of a damaged one): its
    /// size is its own. Else the size is cut to the end of its last mapped block (a
    /// damaged size is not believed past the map).
    pub(super) intact: bool,
}

/// What the entries offered for a mended leaf are checked against: every block owned by
/// a file, the tree or a map segment (with those kept so far), the ids in use.
pub(super) struct Keeper<'a> {
    vol: &'a Volume,
    taken: super::file::Ranges,
    next_id: u64,
    cached: FileTable,
    /// The segments and runs the maps outside the tree of the entries kept lie in.
    named: BTreeSet<Extent>,
    /// Those entries: their ids now and their maps, to hold ([`Keeper::settle`]).
    outside: Vec<(u64, MapRef)>,
    /// The journal's changes the open set aside (`Meta::aside`), by file, until applied.
    journal: Journal,
    /// The files those changes create ([`Keeper::make_created`]).
    made: BTreeSet<u64>,
    /// The files those changes unlink, whose entries were not kept: no older copy (the
    /// previous checkpoint's) brings one back.
    removed: BTreeSet<u64>,
    /// The files kept or made with those changes applied, for the next checkpoint to
    /// write ([`Keeper::adopt_replayed`]).
    replayed: Vec<(u64, ReplayFile)>,
}

/// What became of an entry offered to [`Keeper::keep`].
enum Kept {
    /// In the tree (and in memory, changed, if the journal changed it).
    InTree,
    /// The journal's changes since the last checkpoint unlink its file.
    Removed,
    Lost(String),
}

impl<'a> Keeper<'a> {
    /// Reads what everything owns now (every map once; memory: every mapped extent). The
    /// caller holds the gate for writing.
    pub(super) fn new(vol: &'a Volume) -> Result<Keeper<'a>> {
        let mut owned = vol.files_owned(&mut super::check::VolumeCheck::default())?;
        vol.own_metadata(&mut owned);
        let mut taken = super::file::Ranges::default();
        owned.iter().for_each(|e| taken.insert(e.start, e.len));
        // Every owner is taken (each extent's first block, at least).
        debug_assert!(owned
            .iter()
            .all(|e| e.len == 0 || !taken.within(e.start, e.start + 1).is_empty()));
        let (next_id, journal) = {
            let meta = vol.meta.lock();
            (meta.next_id, journal_by_file(&meta.aside))
        };
        Ok(Keeper {
            vol,
            taken,
            next_id,
            cached: vol.files.read().clone(),
            named: BTreeSet::new(),
            outside: Vec::new(),
            journal,
            made: BTreeSet::new(),
            removed: BTreeSet::new(),
            replayed: Vec::new(),
        })
    }

    /// Takes the blocks of `leaves` (found by the scan for a hole's keys): no kept map may
    /// claim them.
    pub(super) fn take_leaves(&mut self, leaves: &[Extent]) {
        for e in leaves {
            self.taken.insert(e.start, e.len);
        }
        debug_assert!(leaves
            .iter()
            .all(|e| e.len == 0 || !self.taken.within(e.start, e.start + 1).is_empty()));
    }

    /// `id` is one a file may have (handed out) and no file has now.
    fn wanted(&self, id: u64, tree: &Tree, io: &mut VolIo<'_>) -> Result<bool> {
        let free = id != 0
            && id < self.next_id
            && !self.cached.contains_key(&id)
            && !self.made.contains(&id)
            && !self.removed.contains(&id);
        let wanted = free && tree.get(io, id)?.is_none();
        debug_assert!(
            !wanted || (id > 0 && id < self.next_id),
            "id {id} never handed out"
        );
        Ok(wanted)
    }

    /// Puts `f` into the tree under id `now` if its map survived (see `salvage.rs`), its
    /// blocks then taken; [`Kept::Lost`] if not (a pending file is not kept: an open
    /// removes it, as the salvage's repair does). Kept under its own id, the journal's
    /// changes to it that the open set aside are its own: judged on the map they leave
    /// (`survived_after`) and applied, the file then in memory for the next checkpoint
    /// to write ([`Keeper::adopt_replayed`]), or [`Kept::Removed`] if they unlink it. A
    /// map outside the tree (in a map segment or runs of its own) is kept where it lies
    /// if that place survived too ([`Keeper::outside_survived`]), and held in the
    /// segments' accounts when the mend ends ([`Keeper::settle`]).
    fn keep(
        &mut self,
        f: TableFile,
        (now, intact): (u64, bool),
        tree: &mut Tree,
        io: &mut VolIo<'_>,
    ) -> Result<Kept> {
        let v = self.vol;
        let changes = match now == f.id {
            true => self.journal.remove(&f.id).unwrap_or_default(),
            false => Vec::new(),
        };
        let judged = survived_after(&v.store, v.dev.as_ref(), &f, (&self.taken, &changes))?;
        let (entries, after) = match judged {
            Ok(maps) => maps,
            Err(why) => return Ok(Kept::Lost(why)),
        };
        let end = |map: &[MapEntry]| {
            map.last()
                .map_or(0, |&(l, e, _)| (l + e.len) * v.block_size)
        };
        let f = TableFile {
            id: now,
            // A damaged size believed up to the end of the map it has, or will have once
            // the journal's writes are in (they log no size within the file's).
            size: match intact {
                true => f.size,
                false => f.size.min(end(&entries).max(end(&after))),
            },
            ..f
        };
        let replayed = match changes.is_empty() {
            true => None,
            false => match replay_one(loaded(&f, entries), now, changes) {
                Some(rf) => Some(rf),
                None => {
                    self.removed.insert(now);
                    return Ok(Kept::Removed);
                }
            },
        };
        if replayed.as_ref().map_or(&f.attr, |rf| &rf.attr) == super::publish::PENDING {
            return Ok(Kept::Lost(
                "a pending file: removed, as an open removes it".into(),
            ));
        }
        if let Err(why) = self.outside_survived(&f.map)? {
            return Ok(Kept::Lost(why));
        }
        for (_, e, _) in &after {
            self.taken.insert(e.start, e.len);
        }
        for seg in f.map.segments() {
            self.taken.insert(seg.start, seg.len);
            self.named.insert(seg);
        }
        if !f.map.segments().is_empty() {
            self.outside.push((now, f.map.clone()));
        }
        let mut replaced = Vec::new();
        tree.put(io, now, Some(file_body(&f)), &mut replaced)?;
        // A fresh id's leaf was another (read, then changed): retired with the mended ones.
        v.meta.lock().mended.extend(replaced);
        debug_assert!(
            tree.get(io, now).is_ok_and(|b| b.is_some()),
            "file {now} kept"
        );
        self.replayed.extend(replayed.map(|rf| (now, rf)));
        Ok(Kept::InTree)
    }

    /// Makes each file the set-aside changes create (after the last checkpoint, under a
    /// hole) from those changes alone, as the open's replay makes it, before any entry is
    /// judged: its blocks are the journal's, which an older copy of an entry the scan
    /// found may not claim (its id is taken, so such a copy gets a fresh one and is
    /// judged against them). One whose map meets blocks already taken is reported lost
    /// (no entry's bytes: an empty range), one the changes unlink again is not made.
    pub(super) fn make_created(&mut self, out: &mut MendedLeaves) -> Result<()> {
        let created: Vec<u64> = (self.journal.iter())
            .filter(|(_, cs)| cs.iter().any(|c| matches!(c, Change::Create { .. })))
            .map(|(&id, _)| id)
            .collect();
        for id in created {
            let changes = self.journal.remove(&id).expect("a created file's changes");
            self.made.insert(id);
            let Some(rf) = replay_one(ReplayFile::default(), id, changes) else {
                continue; // unlinked again
            };
            let after: Vec<MapEntry> = rf.maps.iter().map(|(&l, &(e, u))| (l, e, u)).collect();
            if let Err(why) = check_map(&self.vol.store, &after, &self.taken) {
                out.lost.push(LostEntry {
                    bytes: 0..0,
                    id: Some(id),
                    why: format!("made after the last checkpoint: {why}"),
                });
                continue;
            }
            for (_, e, _) in &after {
                self.taken.insert(e.start, e.len);
            }
            self.replayed.push((id, rf));
        }
        debug_assert!(self.made.iter().all(|id| !self.journal.contains_key(id)));
        Ok(())
    }

    /// Keeps each damaged entry whose map survived, under its own id if no file has it,
    /// else under a fresh one (the salvage's `Kept::take`); reports the others lost.
    pub(super) fn take_damaged(
        &mut self,
        candidates: Vec<Candidate>,
        tree: &mut Tree,
        io: &mut VolIo<'_>,
        out: &mut MendedLeaves,
    ) -> Result<()> {
        let before = out.recovered.len() + out.lost.len() + out.removed.len();
        let offered = candidates.len();
        for Candidate {
            file: f,
            bytes,
            intact,
        } in candidates
        {
            let was = f.id;
            let blocks = f.map.counts().1;
            if self.made.contains(&was) {
                // The journal made its file anew after this copy (unlinked and made again
                // under its id): the copy is the old file, gone as the replay drops it.
                out.removed.push(was);
                continue;
            }
            // The fresh id is drawn only for a file kept.
            let own = self.wanted(was, tree, io)?;
            let now = if own { was } else { self.next_id };
            match self.keep(f, (now, intact), tree, io)? {
                Kept::InTree => {
                    if !own {
                        assert_eq!(self.fresh(), now, "the fresh id drawn");
                    }
                    out.recovered.push((now, was));
                }
                Kept::Removed => out.removed.push(was),
                Kept::Lost(why) => {
                    out.lost_blocks = out.lost_blocks.saturating_add(blocks);
                    out.lost.push(LostEntry {
                        bytes,
                        id: Some(was),
                        why,
                    });
                }
            }
        }
        // Each damaged entry is kept, removed as the journal says, or reported lost.
        let after = out.recovered.len() + out.lost.len() + out.removed.len();
        debug_assert_eq!(after, before + offered);
        Ok(())
    }

    /// Restores from the previous checkpoint's tree (root `root`) each entry of the key
    /// range `keys` that no file has now and whose map survived (its bytes may be older).
    pub(super) fn restore_previous(
        &mut self,
        root: NodeRef,
        keys: (u64, Option<u64>),
        tree: &mut Tree,
        io: &mut VolIo<'_>,
        out: &mut MendedLeaves,
    ) -> Result<()> {
        let first = out.restored.len();
        for (id, body) in previous_range(io, root, keys)? {
            let Ok(f) = decode_file(&body) else { continue };
            let kept = |k: &mut Self, tree: &mut Tree, io: &mut VolIo<'_>| {
                // Its frame checked, in a whole leaf of the previous checkpoint.
                Ok::<_, Error>(matches!(k.keep(f, (id, true), tree, io)?, Kept::InTree))
            };
            if self.wanted(id, tree, io)? && kept(self, tree, io)? {
                out.restored.push(id);
            }
        }
        // What it restored lies in the range, each id once.
        debug_assert!(out.restored[first..]
            .iter()
            .all(|&id| id >= keys.0 && keys.1.is_none_or(|hi| id < hi)));
        debug_assert!(out.restored[first..].windows(2).all(|w| w[0] < w[1]));
        Ok(())
    }

    /// Whether the place of map `map` outside the tree survived: each segment one the
    /// volume or an entry kept before names (a segment holds many files' maps: the map's
    /// bytes there were checked against its crc by `survived_after`), or one no one owns,
    /// outside the device's metadata and allocated; own runs (a file's alone) only the
    /// latter. `Ok(Err(why))` if not. [`Error::Corrupt`] for a segment the volume
    /// retired (freed by the next checkpoint): the salvage keeps such a segment named.
    fn outside_survived(&self, map: &MapRef) -> Result<std::result::Result<(), String>> {
        let segs = self.vol.segs.lock();
        for seg in map.segments() {
            let crosses = |r: &Extent| r.start < seg.end() && seg.start < r.end();
            if segs.retired.iter().any(crosses) {
                return Err(super::record::corrupt(
                    "a damaged file tree entry's map lies in a retired map segment: the \
                     salvage keeps such a segment named",
                ));
            }
            let shared = matches!(map, MapRef::Segment(_))
                && (segs.named.contains(&seg) || self.named.contains(&seg));
            if shared {
                continue;
            }
            if !self.taken.within(seg.start, seg.end()).is_empty() {
                return Ok(Err(format!(
                    "its map's segment {}+{} is in use",
                    seg.start, seg.len
                )));
            }
            let store = &self.vol.store;
            let held =
                (store.check_not_metadata(seg)).and_then(|()| store.allocator().check_held(seg));
            if let Err(e) = held {
                return Ok(Err(format!(
                    "its map's segment {}+{}: {e}",
                    seg.start, seg.len
                )));
            }
        }
        Ok(Ok(()))
    }

    /// The files kept or made with the journal's set-aside changes applied, as the
    /// open's replay hands its files to the volume (`load.rs`, `adopt`), for the mend's
    /// end: fallible, so before [`Keeper::settle`].
    pub(super) fn adopt_replayed(&mut self) -> Result<Vec<(u64, VFile)>> {
        let store = &self.vol.store;
        let adopted: Vec<(u64, VFile)> = (self.replayed.drain(..))
            .map(|(id, rf)| Ok((id, super::load::adopt(store, id, rf)?)))
            .collect::<Result<_>>()?;
        // Each file once, and none in memory yet (the open replayed none under a hole).
        debug_assert!(adopted
            .iter()
            .all(|(id, _)| !self.vol.files.read().contains_key(id)));
        debug_assert_eq!(
            adopted
                .iter()
                .map(|(id, _)| id)
                .collect::<BTreeSet<_>>()
                .len(),
            adopted.len()
        );
        Ok(adopted)
    }

    /// The mend's end, once nothing can fail: the maps outside the tree of the entries
    /// kept held in the segments' accounts, as an open holds those it reads from the
    /// marked leaves (`load.rs`); the `adopted` files in memory, changed since the durable
    /// tree; the changes set aside taken (those left named a file no entry gave: dropped,
    /// as the replay drops a change naming a file that is not there).
    pub(super) fn settle(self, adopted: Vec<(u64, VFile)>) {
        let vol = self.vol;
        {
            let mut segs = vol.segs.lock();
            segs.named.extend(self.named.iter().copied());
            for (id, map) in &self.outside {
                segs.hold(*id, map, vol.block_size);
            }
            // Every segment the accounts hold is named.
            debug_assert!(segs.live.keys().all(|s| segs.named.contains(s)));
            debug_assert!(self
                .outside
                .iter()
                .all(|(id, _)| segs.held.contains_key(id)));
        }
        let mut files = vol.files.write();
        let mut dirty = vol.dirty.lock();
        for (id, f) in adopted {
            let was = files.insert(id, Arc::new(Mutex::new(f)));
            assert!(was.is_none(), "file {id} adopted twice");
            dirty.insert(id);
        }
        drop((files, dirty));
        let mut meta = vol.meta.lock();
        meta.aside.clear();
        meta.unmended = false;
    }

    /// A fresh id for a kept entry whose own is not free (the next the volume hands out).
    fn fresh(&mut self) -> u64 {
        let mut meta = self.vol.meta.lock();
        let id = meta.next_id;
        meta.next_id += 1;
        self.next_id = meta.next_id;
        debug_assert!(id > 0 && id < self.next_id);
        id
    }
}

/// The previous checkpoint's entries whose keys lie in `keys` (`lo..hi`), reading only the
/// nodes on the way to them; a node that does not read gives nothing (best effort: it is
/// a second copy).
fn previous_range(
    io: &mut VolIo<'_>,
    root: NodeRef,
    keys: (u64, Option<u64>),
) -> Result<Vec<(u64, Vec<u8>)>> {
    let mut out = Vec::new();
    // Each node with the level its parent is at (a child must be below it: no cycle).
    let mut stack = vec![(root, (0u64, None::<u64>), node::MAX_LEVEL + 1)];
    let overlaps = |r: (u64, Option<u64>)| {
        r.1.is_none_or(|hi| hi > keys.0) && keys.1.is_none_or(|hi| r.0 < hi)
    };
    while let Some((at, range, above)) = stack.pop() {
        let d = match io.read(at) {
            Ok(d) if d.level < above => d,
            Ok(_) | Err(Error::Corrupt { .. }) => continue,
            Err(e) => return Err(e),
        };
        if d.level == 0 {
            let Ok(items) = super::tree::leaf_items(&d.payload) else {
                continue;
            };
            let inside = |id: &u64| *id >= keys.0 && keys.1.is_none_or(|hi| *id < hi);
            out.extend(items.into_iter().filter(|(id, _)| inside(id)));
            continue;
        }
        let Ok(children) = node::decode_children(&d, at.generation) else {
            continue;
        };
        for (i, c) in children.iter().enumerate() {
            let lo = if i == 0 { range.0 } else { c.first };
            let hi = children.get(i + 1).map(|n| n.first).or(range.1);
            if overlaps((lo, hi)) {
                stack.push((c.at, (lo, hi), d.level));
            }
        }
    }
    out.sort_unstable_by_key(|(id, _)| *id);
    debug_assert!(out
        .iter()
        .all(|(id, _)| *id >= keys.0 && keys.1.is_none_or(|hi| *id < hi)));
    Ok(out)
}
