//! The volume's bytes on the device (`docs/volume.md`): the changes it logs in journal
//! payloads ([`Change`]), the extent maps kept in map segments ([`encode_map`]) and where a
//! file's map is ([`MapRef`]). The root is `root.rs`; the file table's framing `table.rs`.
//! Pure functions over bytes: decoding never panics on any input and refuses what it cannot
//! read whole.
//!
//! Data structures: [`Change`], [`MapRef`] (with its [`SegRef`], [`RunsRef`]), [`SideRef`]. Invariant: `decode(encode(x)) == x` for each. Locks: none.
//!
//! Every change is a blind write of the state it names (map these blocks, set this size,
//! drop this file), so applying a change to a state that already holds it changes nothing.

use crate::error::{Corrupted, Error, Result};
use crate::geometry::Extent;

/// First bytes of a journal payload the volume wrote.
pub(super) const PAYLOAD_MAGIC: &[u8; 4] = b"XVOL";
/// A file of at most this many map entries keeps its map in the table (as an ext4 inode
/// keeps four extents in `i_block`); a longer map goes to a map segment.
pub(super) const INLINE_EXTENTS: usize = 4;
/// Bytes of one map entry: logical block, extent, unwritten flag.
pub(super) const MAP_ENTRY_BYTES: usize = 25;

/// One map entry: `(logical, extent, unwritten)`.
pub(super) type MapEntry = (u64, Extent, bool);

/// One metadata change of a volume, as logged in a journal payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Change {
    /// A new, empty file with this attribute blob (replaces any file of the id).
    Create { id: u64, attr: Vec<u8> },
    /// The file's size in bytes.
    SetSize { id: u64, size: u64 },
    /// The file's attribute blob.
    SetAttr { id: u64, attr: Vec<u8> },
    /// Logical blocks `logical ..` map `extent`; unwritten ones read as zeros.
    Map {
        id: u64,
        logical: u64,
        extent: Extent,
        unwritten: bool,
    },
    /// Logical blocks `logical .. logical + len` map nothing.
    Unmap { id: u64, logical: u64, len: u64 },
    /// Logical blocks `logical .. logical + len` (mapped) hold data: no longer unwritten.
    Written { id: u64, logical: u64, len: u64 },
    /// The file is gone.
    Unlink { id: u64 },
    /// The two file-table areas, each one extent (root version 2; still replayed).
    Areas { a: Extent, b: Extent },
    /// The two file-table areas, by their index chains (`area.rs`).
    TableAreas { a: SideRef, b: SideRef },
    /// The file's placement key: its first blocks go to the group the key picks.
    Placement { id: u64, key: u64 },
    /// A checkpoint wrote map segments `new` (allocated in this record) and freed `freed`
    /// (segments its table's predecessor had retired). Replayed after the root, it means
    /// that checkpoint never finished: `new` is unreferenced and retired, `freed` is gone.
    Segments {
        new: Vec<Extent>,
        freed: Vec<Extent>,
    },
}

/// A reader over bytes that fails instead of panicking.
#[derive(Clone)]
pub(super) struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(b: &'a [u8]) -> Self {
        Reader { b, at: 0 }
    }

    /// Debug builds: the reader is within its bytes.
    pub(super) fn debug_check(&self) {
        debug_assert!(self.at <= self.b.len(), "read past the end");
    }

    pub(super) fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or_else(|| corrupt("ends inside a field"))?;
        let s = &self.b[self.at..end];
        self.at = end;
        self.debug_check();
        Ok(s)
    }

    pub(super) fn u8(&mut self) -> Result<u8> {
        let v = self.bytes(1)?[0];
        self.debug_check();
        Ok(v)
    }

    pub(super) fn u32(&mut self) -> Result<u32> {
        let v = u32::from_le_bytes(self.bytes(4)?.try_into().expect("4"));
        self.debug_check();
        Ok(v)
    }

    pub(super) fn u64(&mut self) -> Result<u64> {
        let v = u64::from_le_bytes(self.bytes(8)?.try_into().expect("8"));
        self.debug_check();
        Ok(v)
    }

    pub(super) fn blob(&mut self) -> Result<Vec<u8>> {
        let n = self.u32()? as usize;
        let b = self.bytes(n)?.to_vec();
        debug_assert_eq!(b.len(), n, "a blob of the length its prefix says");
        Ok(b)
    }

    /// A count then that many extents (the count checked against the bytes left).
    pub(super) fn extents(&mut self) -> Result<Vec<Extent>> {
        let n = self.count(16)?;
        let es: Vec<Extent> = (0..n).map(|_| self.extent()).collect::<Result<_>>()?;
        debug_assert_eq!(es.len(), n);
        Ok(es)
    }

    /// A count of items of at least `item_bytes` each, refused if the bytes left cannot
    /// hold them (no allocation sized by a damaged count).
    pub(super) fn count(&mut self, item_bytes: usize) -> Result<usize> {
        let n = self.u64()?;
        let left = (self.b.len() - self.at) as u64;
        if n > left / item_bytes as u64 {
            return Err(corrupt("a count larger than the bytes that follow"));
        }
        // What the refusal above leaves: the items fit the bytes left.
        debug_assert!(n.saturating_mul(item_bytes as u64) <= left);
        Ok(n as usize)
    }

    pub(super) fn extent(&mut self) -> Result<Extent> {
        let e = Extent::new(self.u64()?, self.u64()?);
        self.debug_check();
        Ok(e)
    }

    /// Bytes read so far.
    pub(super) fn at(&self) -> usize {
        self.at
    }

    pub(super) fn done(&self) -> bool {
        self.at == self.b.len()
    }
}

/// The error of file `id`'s map in the map segment (or first run) at `seg`.
pub(super) fn map_corrupt(id: u64, seg: Extent, detail: &str) -> Error {
    Error::Corrupt {
        what: Corrupted::FileMap {
            id,
            segment: seg.start,
        },
        detail: format!("{detail}: run `extalloc fsck`"),
    }
}

pub(super) fn corrupt(detail: &str) -> Error {
    Error::Corrupt {
        what: Corrupted::VolumeMetadata,
        detail: detail.into(),
    }
}

pub(super) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
    debug_assert_eq!(Reader::new(&out[out.len() - 8..]).u64().ok(), Some(v));
}

pub(super) fn put_blob(out: &mut Vec<u8>, b: &[u8]) {
    // Blobs are bounded far below (`MAX_ATTR_BYTES`, a map's bytes): the length fits its
    // four bytes.
    let len = u32::try_from(b.len()).expect("a blob's length fits 32 bits");
    let at = out.len();
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(b);
    debug_assert!(Reader::new(&out[at..]).blob().is_ok_and(|back| back == b));
}

pub(super) fn put_extent(out: &mut Vec<u8>, e: Extent) {
    put_u64(out, e.start);
    put_u64(out, e.len);
    debug_assert_eq!(Reader::new(&out[out.len() - 16..]).extent().ok(), Some(e));
}

pub(super) fn put_extents(out: &mut Vec<u8>, es: &[Extent]) {
    let at = out.len();
    put_u64(out, es.len() as u64);
    es.iter().for_each(|&e| put_extent(out, e));
    debug_assert_eq!(out.len(), at + 8 + 16 * es.len());
}

impl Change {
    /// Appends the change's bytes to `out`: what [`Change::decode`] reads back.
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        let at = out.len();
        match self {
            Change::Create { id, attr } => {
                out.push(1);
                put_u64(out, *id);
                put_blob(out, attr);
            }
            Change::SetSize { id, size } => {
                out.push(2);
                put_u64(out, *id);
                put_u64(out, *size);
            }
            Change::SetAttr { id, attr } => {
                out.push(3);
                put_u64(out, *id);
                put_blob(out, attr);
            }
            Change::Map {
                id,
                logical,
                extent,
                unwritten,
            } => {
                out.push(4);
                put_u64(out, *id);
                put_u64(out, *logical);
                put_extent(out, *extent);
                out.push(u8::from(*unwritten));
            }
            Change::Unmap { id, logical, len } | Change::Written { id, logical, len } => {
                out.push(if matches!(self, Change::Unmap { .. }) {
                    5
                } else {
                    6
                });
                put_u64(out, *id);
                put_u64(out, *logical);
                put_u64(out, *len);
            }
            Change::Unlink { id } => {
                out.push(7);
                put_u64(out, *id);
            }
            Change::Areas { a, b } => {
                out.push(8);
                put_extent(out, *a);
                put_extent(out, *b);
            }
            Change::Placement { id, key } => {
                out.push(9);
                put_u64(out, *id);
                put_u64(out, *key);
            }
            Change::Segments { new, freed } => {
                out.push(10);
                put_extents(out, new);
                put_extents(out, freed);
            }
            Change::TableAreas { a, b } => {
                out.push(11);
                a.encode(out);
                b.encode(out);
            }
        }
        debug_assert!(
            Change::decode(&mut Reader::new(&out[at..])).is_ok_and(|back| back == *self),
            "a change reads back as written"
        );
    }

    /// The file the change names (none for `Areas` and `Segments`).
    pub(super) fn file(&self) -> Option<u64> {
        match self {
            Change::Create { id, .. }
            | Change::SetSize { id, .. }
            | Change::SetAttr { id, .. }
            | Change::Map { id, .. }
            | Change::Unmap { id, .. }
            | Change::Written { id, .. }
            | Change::Unlink { id }
            | Change::Placement { id, .. } => Some(*id),
            Change::Areas { .. } | Change::TableAreas { .. } | Change::Segments { .. } => None,
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<Change> {
        r.debug_check();
        Ok(match r.u8()? {
            1 => Change::Create {
                id: r.u64()?,
                attr: r.blob()?,
            },
            2 => Change::SetSize {
                id: r.u64()?,
                size: r.u64()?,
            },
            3 => Change::SetAttr {
                id: r.u64()?,
                attr: r.blob()?,
            },
            4 => Change::Map {
                id: r.u64()?,
                logical: r.u64()?,
                extent: r.extent()?,
                unwritten: match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(corrupt("a map change with a bad unwritten flag")),
                },
            },
            k @ (5 | 6) => {
                let (id, logical, len) = (r.u64()?, r.u64()?, r.u64()?);
                if k == 5 {
                    Change::Unmap { id, logical, len }
                } else {
                    Change::Written { id, logical, len }
                }
            }
            7 => Change::Unlink { id: r.u64()? },
            8 => Change::Areas {
                a: r.extent()?,
                b: r.extent()?,
            },
            9 => Change::Placement {
                id: r.u64()?,
                key: r.u64()?,
            },
            10 => Change::Segments {
                new: r.extents()?,
                freed: r.extents()?,
            },
            11 => Change::TableAreas {
                a: SideRef::decode(r)?,
                b: SideRef::decode(r)?,
            },
            _ => return Err(corrupt("an unknown change kind")),
        })
    }
}

/// The changes of one journal payload. An empty payload holds none; one that does not
/// start with the volume's magic is refused.
pub(super) fn decode_payload(payload: &[u8]) -> Result<Vec<Change>> {
    if payload.is_empty() {
        return Ok(Vec::new());
    }
    let rest = payload
        .strip_prefix(PAYLOAD_MAGIC)
        .ok_or_else(|| corrupt("a journal payload the volume did not write"))?;
    let mut r = Reader::new(rest);
    let mut changes = Vec::new();
    while !r.done() {
        changes.push(Change::decode(&mut r)?);
    }
    Ok(changes)
}

/// Where a file's map is, as the table names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum MapRef {
    /// In the table itself: at most [`INLINE_EXTENTS`] entries, or any number when no free
    /// run held the map's segment (root version 3).
    Inline(Vec<MapEntry>),
    /// In a map segment.
    Segment(SegRef),
    /// In blocks of its own, wherever the allocator found them: a map too long for a
    /// tree node that no free run could hold whole (a fragmented device; `maps.rs`).
    Runs(RunsRef),
}

/// A map in runs of its own: its `len` bytes ([`encode_map`]) laid end to end over `runs`
/// with their crc32c, and the map's extent and block counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RunsRef {
    pub runs: Vec<Extent>,
    pub len: u32,
    pub crc: u32,
    pub extents: u64,
    pub blocks: u64,
}

/// A map in a map segment: `len` bytes at byte `offset` of segment `seg` ([`encode_map`]),
/// with their crc32c, and the map's extent and block counts (for listing without reading
/// it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SegRef {
    pub seg: Extent,
    pub offset: u32,
    pub len: u32,
    pub crc: u32,
    pub extents: u64,
    pub blocks: u64,
}

impl MapRef {
    /// Mapped extents and blocks, as the file layer counts them ([`map_counts`]).
    pub(super) fn counts(&self) -> (u64, u64) {
        match self {
            MapRef::Inline(m) => map_counts(m),
            MapRef::Segment(r) => (r.extents, r.blocks),
            MapRef::Runs(r) => (r.extents, r.blocks),
        }
    }

    /// Every run of blocks holding the map (its segment, or its own runs).
    pub(super) fn segments(&self) -> Vec<Extent> {
        self.parts(1).into_iter().map(|(seg, _)| seg).collect()
    }

    /// Each run holding the map with the map's live bytes there (on blocks of `bs` bytes):
    /// its bytes in its segment, or each of its own runs whole (they are the file's alone,
    /// so a cleaning never takes them).
    pub(super) fn parts(&self, bs: u64) -> Vec<(Extent, u64)> {
        match self {
            MapRef::Inline(_) => Vec::new(),
            MapRef::Segment(r) => vec![(r.seg, u64::from(r.len))],
            MapRef::Runs(r) => r.runs.iter().map(|&run| (run, run.len * bs)).collect(),
        }
    }

    /// The reference into a map segment, if the map is not inline.
    pub(super) fn seg_ref(&self) -> Option<&SegRef> {
        match self {
            MapRef::Inline(_) | MapRef::Runs(_) => None,
            MapRef::Segment(r) => Some(r),
        }
    }

    /// Appends the reference's bytes to `out`: what [`MapRef::decode`] reads back.
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        let at = out.len();
        match self {
            MapRef::Inline(m) => {
                out.push(0);
                put_map(out, m);
            }
            MapRef::Segment(r) => {
                out.push(1);
                put_extent(out, r.seg);
                for v in [r.offset, r.len, r.crc] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
                put_u64(out, r.extents);
                put_u64(out, r.blocks);
            }
            MapRef::Runs(r) => {
                out.push(2);
                put_extents(out, &r.runs);
                for v in [r.len, r.crc] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
                put_u64(out, r.extents);
                put_u64(out, r.blocks);
            }
        }
        debug_assert!(
            MapRef::decode(&mut Reader::new(&out[at..])).is_ok_and(|back| back == *self),
            "a map reference reads back as written"
        );
    }

    pub(super) fn decode(r: &mut Reader<'_>) -> Result<MapRef> {
        let m = match r.u8()? {
            // Any length: a map the device had no run for stays in the table (`maps.rs`,
            // `Placed`); a checkpoint inlines at most `INLINE_EXTENTS` entries otherwise.
            0 => MapRef::Inline(read_map(r)?),
            1 => MapRef::Segment(SegRef {
                seg: r.extent()?,
                offset: r.u32()?,
                len: r.u32()?,
                crc: r.u32()?,
                extents: r.u64()?,
                blocks: r.u64()?,
            }),
            2 => MapRef::Runs(RunsRef {
                runs: r.extents()?,
                len: r.u32()?,
                crc: r.u32()?,
                extents: r.u64()?,
                blocks: r.u64()?,
            }),
            _ => return Err(corrupt("a table file with a bad map kind")),
        };
        r.debug_check();
        Ok(m)
    }
}

/// A map's extents and blocks as the file layer counts them: entries that continue each
/// other logically and physically (split only where unwritten ranges begin and end) are
/// one extent.
pub(super) fn map_counts(m: &[MapEntry]) -> (u64, u64) {
    let mut extents = 0;
    let mut prev: Option<(u64, Extent)> = None;
    for &(l, e, _) in m {
        if !prev.is_some_and(|(pl, pe)| pl + pe.len == l && pe.end() == e.start) {
            extents += 1;
        }
        prev = Some((l, e));
    }
    (extents, m.iter().map(|(_, e, _)| e.len).sum())
}

fn put_map(out: &mut Vec<u8>, m: &[MapEntry]) {
    let from = out.len();
    put_u64(out, m.len() as u64);
    for &(l, e, unwritten) in m {
        put_u64(out, l);
        put_extent(out, e);
        out.push(u8::from(unwritten));
    }
    debug_assert!(read_map(&mut Reader::new(&out[from..])).is_ok_and(|back| back == m));
}

fn read_map(r: &mut Reader<'_>) -> Result<Vec<MapEntry>> {
    let n = r.count(MAP_ENTRY_BYTES)?;
    let mut m = Vec::with_capacity(n);
    for _ in 0..n {
        let (l, e) = (r.u64()?, r.extent()?);
        let unwritten = match r.u8()? {
            0 => false,
            1 => true,
            _ => return Err(corrupt("a map entry with a bad unwritten flag")),
        };
        m.push((l, e, unwritten));
    }
    r.debug_check();
    Ok(m)
}

/// A map as a map segment holds it: a count, then the entries.
pub(super) fn encode_map(m: &[MapEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + m.len() * MAP_ENTRY_BYTES);
    put_map(&mut out, m);
    out
}

/// The entries of a map [`encode_map`] wrote (every byte of `b` used).
pub(super) fn decode_map(b: &[u8]) -> Result<Vec<MapEntry>> {
    let mut r = Reader::new(b);
    let m = read_map(&mut r)?;
    if !r.done() {
        return Err(corrupt("bytes after a map"));
    }
    Ok(m)
}

// A table area as the root and `TableAreas` name it (`area.rs`).
/// How the root or a journal change names an area: by the first block of its index chain
/// (`head`), or, for an area of format version 2, by its one extent (`head` 0). Both zero:
/// no area yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SideRef {
    pub extent: Extent,
    pub head: u64,
}

impl SideRef {
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        // Never both (`decode` refuses it).
        debug_assert!(self.head == 0 || self.extent.len == 0, "{self:?}");
        put_extent(out, self.extent);
        put_u64(out, self.head);
    }

    pub(super) fn decode(r: &mut Reader<'_>) -> Result<SideRef> {
        let s = SideRef {
            extent: r.extent()?,
            head: r.u64()?,
        };
        if s.head != 0 && s.extent.len != 0 {
            return Err(corrupt("a table area named by both an extent and an index"));
        }
        r.debug_check();
        Ok(s)
    }

    /// A version 2 area: one extent.
    pub(super) fn legacy(extent: Extent) -> SideRef {
        SideRef { extent, head: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_round_trips_and_garbage_is_refused() {
        let changes = vec![
            Change::Create {
                id: 7,
                attr: b"mode".to_vec(),
            },
            Change::SetSize { id: 7, size: 9000 },
            Change::SetAttr {
                id: 7,
                attr: vec![],
            },
            Change::Map {
                id: 7,
                logical: 3,
                extent: Extent::new(100, 4),
                unwritten: true,
            },
            Change::Unmap {
                id: 7,
                logical: 3,
                len: 1,
            },
            Change::Written {
                id: 7,
                logical: 4,
                len: 2,
            },
            Change::Unlink { id: 7 },
            Change::Areas {
                a: Extent::new(1, 2),
                b: Extent::new(3, 4),
            },
            Change::TableAreas {
                a: SideRef::legacy(Extent::new(5, 6)),
                b: SideRef {
                    extent: Extent::new(0, 0),
                    head: 77,
                },
            },
            Change::Placement { id: 7, key: 99 },
            Change::Segments {
                new: vec![Extent::new(50, 1)],
                freed: vec![Extent::new(60, 2), Extent::new(70, 1)],
            },
        ];
        let mut payload = PAYLOAD_MAGIC.to_vec();
        changes.iter().for_each(|c| c.encode(&mut payload));
        assert_eq!(decode_payload(&payload).unwrap(), changes);
        for cut in 5..payload.len() {
            // Every truncation either fails or decodes a prefix: never panics.
            let _ = decode_payload(&payload[..cut]);
        }
        assert!(decode_payload(b"junk").is_err());
        let map: Vec<MapEntry> = (0..9)
            .map(|i| (i * 3, Extent::new(100 + i * 7, 2), i % 2 == 0))
            .collect();
        let bytes = encode_map(&map);
        assert_eq!(bytes.len(), 8 + map.len() * MAP_ENTRY_BYTES);
        assert_eq!(decode_map(&bytes).unwrap(), map);
        assert!(decode_map(&bytes[..bytes.len() - 1]).is_err());
    }
}
