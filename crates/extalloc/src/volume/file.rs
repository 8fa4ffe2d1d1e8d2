//! One file of a volume in memory ([`VFile`]), the logical ranges it keeps unwritten
//! ([`Ranges`]), and the map replay rebuilds before the file layer adopts it
//! ([`ReplayMap`]).
//!
//! Data structures: a [`VFile`] holds its size in bytes, its attribute blob, its allocation
//! state in the file layer (`FileAlloc`: the logical -> physical map and preallocations),
//! the unwritten logical ranges, where the durable table keeps its map (`stored`), and
//! the bytes appended at its end that wait for the commit ([`Tail`], `tail.rs`).
//! Maps are read lazily: a file the open found untouched since the table keeps only
//! `stored` until an operation needs its map (`maps.rs`).
//!
//! Invariant: every unwritten range is mapped; ranges are disjoint and merged when they
//! touch. A file not `loaded` has `stored`, an empty `alloc` and no unwritten ranges, and
//! is not `map_dirty`. Locks: a `VFile` lives under the volume's per-file mutex (`mod.rs`).

use super::record::{Change, MapEntry, MapRef};
use super::table::TableFile;
use crate::alloc::Lifetime;
use crate::files::FileAlloc;
use crate::geometry::Extent;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Disjoint logical ranges, `start -> len`, merged when they touch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Ranges(BTreeMap<u64, u64>);

impl Ranges {
    /// Adds `start .. start + len`.
    pub(super) fn insert(&mut self, start: u64, len: u64) {
        if len == 0 {
            return;
        }
        self.remove(start, len);
        let (mut s, mut end) = (start, start + len);
        if let Some((&ps, &pl)) = self.0.range(..s).next_back() {
            if ps + pl == s {
                self.0.remove(&ps);
                s = ps;
            }
        }
        if let Some(nl) = self.0.remove(&end) {
            end += nl;
        }
        self.0.insert(s, end - s);
        // One range covers what was inserted.
        debug_assert!(
            (self.0.range(..=start).next_back()).is_some_and(|(&s, &l)| start + len <= s + l),
            "{start}+{len} inserted"
        );
    }

    /// Removes `start .. start + len` (saturating at the end of the logical space).
    pub(super) fn remove(&mut self, start: u64, len: u64) {
        let end = start.saturating_add(len);
        let hit: Vec<(u64, u64)> = self
            .0
            .range(..end)
            .rev()
            .take_while(|(&s, &l)| s + l > start)
            .map(|(&s, &l)| (s, l))
            .collect();
        for (s, l) in hit {
            self.0.remove(&s);
            if s < start {
                self.0.insert(s, start - s);
            }
            if s + l > end {
                self.0.insert(end, s + l - end);
            }
        }
        // No range overlaps what was removed.
        debug_assert!(
            self.0
                .range(..end)
                .next_back()
                .is_none_or(|(&s, &l)| s + l <= start),
            "{start}+{len} removed"
        );
    }

    /// True if block `l` lies in a range.
    pub(super) fn contains(&self, l: u64) -> bool {
        self.0
            .range(..=l)
            .next_back()
            .is_some_and(|(&s, &len)| l < s + len)
    }

    /// Whether block `l` lies in a range, and how many blocks from `l` share that answer
    /// (to the end of its range, or to the start of the next one; `u64::MAX` past the last).
    pub(super) fn run_at(&self, l: u64) -> (bool, u64) {
        if let Some((&s, &len)) = self.0.range(..=l).next_back() {
            if l < s + len {
                return (true, s + len - l);
            }
        }
        let next = self.0.range(l..).next().map_or(u64::MAX, |(&s, _)| s - l);
        (false, next)
    }

    /// The parts of the ranges inside `from .. to`, in order.
    pub(super) fn within(&self, from: u64, to: u64) -> Vec<(u64, u64)> {
        let first = self.0.range(..from).next_back().map_or(from, |(&s, _)| s);
        self.0
            .range(first..to)
            .filter(|&(&s, &len)| s + len > from)
            .map(|(&s, &len)| (s.max(from), (s + len).min(to)))
            .collect()
    }

    /// The ranges, in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.0.iter().map(|(&s, &l)| (s, l))
    }
}

/// A file of the volume in memory.
pub(super) struct VFile {
    pub(super) size: u64,
    pub(super) attr: Vec<u8>,
    pub(super) alloc: Arc<FileAlloc>,
    pub(super) unwritten: Ranges,
    /// The caller's placement key, if any (see `Volume::create_placed`).
    pub(super) placement: Option<u64>,
    /// The caller's write-life hint (see `Volume::set_lifetime`): in memory only, as
    /// Linux's `F_SET_RW_HINT`.
    pub(super) lifetime: Lifetime,
    /// Where the durable table keeps the map (`None`: not in a checkpointed table yet).
    pub(super) stored: Option<MapRef>,
    /// The map is in `alloc` and `unwritten` (else it is only `stored`).
    pub(super) loaded: bool,
    /// The map changed since `stored` was written: the next checkpoint writes it.
    pub(super) map_dirty: bool,
    /// Bytes appended inside the file's last block and not yet written to the device
    /// (`tail.rs`).
    pub(super) tail: Option<Tail>,
}

/// Bytes appended to a file and not yet written to the device (`tail.rs`).
#[derive(Debug, Clone)]
pub(super) struct Tail {
    /// The first byte's offset in the file.
    pub(super) pos: u64,
    /// The first byte's offset on the device.
    pub(super) at: u64,
    pub(super) bytes: Vec<u8>,
}

impl Tail {
    /// The file offset just past the tail.
    pub(super) fn end(&self) -> u64 {
        self.pos + self.bytes.len() as u64
    }

    /// Lays the tail's bytes that fall in `offset .. offset + out.len()` over `out`.
    pub(super) fn overlay(&self, offset: u64, out: &mut [u8]) {
        debug_assert!(!self.bytes.is_empty(), "a tail holds bytes");
        let (from, to) = (
            self.pos.max(offset),
            self.end().min(offset + out.len() as u64),
        );
        if from < to {
            out[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&self.bytes[(from - self.pos) as usize..(to - self.pos) as usize]);
        }
    }
}

impl VFile {
    /// Does a hole at logical block `l` start right after the last mapped block? Such a
    /// fallocate gets a preallocation: appenders whose requests interleave finely (writers
    /// behind a FUSE daemon, fio's falloc engine) would otherwise take turns block by
    /// block and split each other's files.
    pub(super) fn appends_at(&self, l: u64) -> bool {
        l > 0 && self.alloc.lookup(l - 1).is_some() && self.alloc.next_mapped(l).is_none()
    }

    /// A new, empty file (mapped nothing, in no table yet).
    pub(super) fn new(alloc: Arc<FileAlloc>, attr: Vec<u8>, placement: Option<u64>) -> VFile {
        VFile {
            size: 0,
            attr,
            alloc,
            unwritten: Ranges::default(),
            placement,
            lifetime: Lifetime::Unknown,
            stored: None,
            loaded: true,
            map_dirty: true,
            tail: None,
        }
    }

    /// The map's entries, split where unwritten ranges begin and end (a loaded file's).
    pub(super) fn entries(&self) -> Vec<MapEntry> {
        debug_assert!(self.loaded);
        let mut maps = Vec::new();
        for (l, e) in self.alloc.extents() {
            let mut at = l;
            let end = l + e.len;
            while at < end {
                let (unwritten, run) = self.unwritten.run_at(at);
                let next = at.saturating_add(run).min(end);
                maps.push((at, Extent::new(e.start + (at - l), next - at), unwritten));
                at = next;
            }
        }
        maps
    }

    /// The file as a table holds it, its map at `map`.
    pub(super) fn table_file(&self, map: MapRef) -> TableFile {
        TableFile {
            id: self.alloc.id(),
            size: self.size,
            attr: self.attr.clone(),
            placement: self.placement,
            map,
        }
    }
}

/// A file while replay rebuilds it: its map `logical -> (extent, unwritten)`, disjoint,
/// once `loaded` (a file no replayed change maps or unmaps keeps only `stored`).
#[derive(Debug, Clone)]
pub(super) struct ReplayFile {
    pub(super) size: u64,
    pub(super) attr: Vec<u8>,
    pub(super) placement: Option<u64>,
    pub(super) maps: BTreeMap<u64, (Extent, bool)>,
    pub(super) stored: Option<MapRef>,
    pub(super) loaded: bool,
}

impl Default for ReplayFile {
    /// A new, empty file: loaded (there is nothing to read).
    fn default() -> Self {
        ReplayFile {
            size: 0,
            attr: Vec::new(),
            placement: None,
            maps: BTreeMap::new(),
            stored: None,
            loaded: true,
        }
    }
}

impl ReplayFile {
    /// A file of the table, its map not read yet.
    pub(super) fn from_table(t: TableFile) -> (u64, Self) {
        (
            t.id,
            ReplayFile {
                size: t.size,
                attr: t.attr,
                placement: t.placement,
                maps: BTreeMap::new(),
                stored: Some(t.map),
                loaded: false,
            },
        )
    }

    /// Takes the map's entries as read from `stored`.
    pub(super) fn set_loaded(&mut self, entries: Vec<MapEntry>) {
        // A map is read once: a loaded one has changed since, and reading it again would
        // drop those changes.
        debug_assert!(!self.loaded, "a map read over a loaded one");
        self.maps = entries.into_iter().map(|(l, e, u)| (l, (e, u))).collect();
        self.loaded = true;
    }

    /// Cuts the map at `l` and `end`, so that no entry straddles either.
    fn cut(&mut self, l: u64, end: u64) {
        for at in [l, end] {
            let hit = self
                .maps
                .range(..at)
                .next_back()
                .filter(|(&s, (e, _))| s + e.len > at)
                .map(|(&s, &v)| (s, v));
            if let Some((s, (e, u))) = hit {
                self.maps.insert(s, (Extent::new(e.start, at - s), u));
                self.maps
                    .insert(at, (Extent::new(e.start + (at - s), s + e.len - at), u));
            }
            debug_assert!(
                self.maps
                    .range(..at)
                    .next_back()
                    .is_none_or(|(&s, (e, _))| s + e.len <= at),
                "an extent still crosses {at}"
            );
        }
    }

    fn keys_in(&self, l: u64, end: u64) -> Vec<u64> {
        self.maps.range(l..end).map(|(&s, _)| s).collect()
    }

    /// Unmaps `l .. end`.
    fn clear(&mut self, l: u64, end: u64) {
        self.cut(l, end);
        for k in self.keys_in(l, end) {
            self.maps.remove(&k);
        }
        debug_assert!(self.keys_in(l, end).is_empty(), "{l}..{end} still mapped");
    }
}

/// The file a change maps, unmaps or marks written, if any: its map must be loaded
/// before the change applies.
pub(super) fn maps_of(change: &Change) -> Option<u64> {
    match change {
        Change::Map { id, .. } | Change::Unmap { id, .. } | Change::Written { id, .. } => Some(*id),
        _ => None,
    }
}

/// Applies one logged change to the files being rebuilt (a blind write: see `record.rs`).
/// A file a map change names is loaded (`maps_of`).
pub(super) fn apply(files: &mut BTreeMap<u64, ReplayFile>, change: Change) {
    if let Some(f) = maps_of(&change).and_then(|id| files.get(&id)) {
        assert!(f.loaded, "a map change applied to a map not read");
    }
    match change {
        Change::Create { id, attr } => {
            files.insert(
                id,
                ReplayFile {
                    attr,
                    ..ReplayFile::default()
                },
            );
        }
        Change::Unlink { id } => {
            files.remove(&id);
        }
        Change::SetSize { id, size } => {
            if let Some(f) = files.get_mut(&id) {
                f.size = size;
            }
        }
        Change::SetAttr { id, attr } => {
            if let Some(f) = files.get_mut(&id) {
                f.attr = attr;
            }
        }
        Change::Map {
            id,
            logical,
            extent,
            unwritten,
        } => {
            if let Some(f) = files.get_mut(&id) {
                f.clear(logical, logical.saturating_add(extent.len));
                f.maps.insert(logical, (extent, unwritten));
            }
        }
        Change::Unmap { id, logical, len } => {
            if let Some(f) = files.get_mut(&id) {
                f.clear(logical, logical.saturating_add(len));
            }
        }
        Change::Written { id, logical, len } => {
            if let Some(f) = files.get_mut(&id) {
                let end = logical.saturating_add(len);
                f.cut(logical, end);
                for k in f.keys_in(logical, end) {
                    if let Some(v) = f.maps.get_mut(&k) {
                        v.1 = false;
                    }
                }
            }
        }
        Change::Placement { id, key } => {
            if let Some(f) = files.get_mut(&id) {
                f.placement = Some(key);
            }
        }
        Change::Areas { .. } | Change::TableAreas { .. } | Change::Segments { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_split_and_answer() {
        let mut r = Ranges::default();
        r.insert(10, 5);
        r.insert(15, 5);
        r.insert(0, 2);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(0, 2), (10, 10)]);
        r.remove(12, 3);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(0, 2), (10, 2), (15, 5)]);
        assert!(r.contains(16) && !r.contains(13) && !r.contains(2));
        assert_eq!(r.run_at(10), (true, 2));
        assert_eq!(r.run_at(12), (false, 3));
        assert_eq!(r.run_at(30), (false, u64::MAX));
        assert_eq!(r.within(11, 17), vec![(11, 12), (15, 17)]);
        r.remove(1, u64::MAX);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(0, 1)]);
    }

    /// Overlapping and touching inserts (as the salvage's scan claims leaves' key spans,
    /// `nodescan.rs`) answer as a list of them would, and stay disjoint, not touching.
    #[test]
    fn ranges_answer_as_a_list_of_their_inserts_would() {
        let mut r = Ranges::default();
        let mut list: Vec<(u64, u64)> = Vec::new();
        let in_list = |list: &[(u64, u64)], k: u64| list.iter().any(|&(a, b)| (a..=b).contains(&k));
        let mut x = 7u64;
        for _ in 0..2000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let lo = (x >> 33) % 5000;
            let hi = lo + (x >> 20) % 40;
            r.insert(lo, hi - lo + 1);
            list.push((lo, hi));
            let k = (x >> 7) % 5100;
            assert_eq!(r.contains(k), in_list(&list, k), "key {k}");
        }
        let all: Vec<(u64, u64)> = r.iter().collect();
        assert!(
            all.windows(2).all(|w| w[0].0 + w[0].1 < w[1].0),
            "disjoint, not touching"
        );
        for k in 0..5100 {
            assert_eq!(r.contains(k), in_list(&list, k), "key {k}");
        }
    }

    #[test]
    fn replayed_changes_are_blind_writes() {
        let mut files = BTreeMap::new();
        let log = vec![
            Change::Create {
                id: 1,
                attr: vec![],
            },
            Change::Map {
                id: 1,
                logical: 0,
                extent: Extent::new(100, 10),
                unwritten: true,
            },
            Change::Written {
                id: 1,
                logical: 2,
                len: 3,
            },
            Change::Unmap {
                id: 1,
                logical: 8,
                len: 5,
            },
            Change::SetSize {
                id: 1,
                size: 4096 * 8,
            },
        ];
        for c in log.clone() {
            apply(&mut files, c);
        }
        let once: Vec<_> = files[&1].maps.clone().into_iter().collect();
        assert_eq!(
            once,
            vec![
                (0, (Extent::new(100, 2), true)),
                (2, (Extent::new(102, 3), false)),
                (5, (Extent::new(105, 3), true)),
            ]
        );
        // Applying the log again (a root that holds it already) changes nothing.
        for c in log {
            apply(&mut files, c);
        }
        let twice: Vec<_> = files[&1].maps.clone().into_iter().collect();
        assert_eq!(once, twice);
    }
}
