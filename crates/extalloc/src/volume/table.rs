//! The volume's file table on the device (`docs/volume.md`, "The file table"): every file's
//! entry framed on its own, so that damage costs only the entries it touches.
//!
//! Version 3 (`TABLE_VERSION`; the root keeps its own version, `record.rs`): a header
//! (`XVTB`, the version, the count of file entries), then one frame per file and a last
//! frame holding the retired segments. A frame is a 4-byte magic (`FILE_FRAME` or
//! `RETIRED_FRAME`), the body's length (u32), the body's crc32c (u32), then the body: for a
//! file its id, size, attribute blob, placement key and map reference, as version 2 held
//! them unframed. Version 2 tables (one unframed blob) are still read; every checkpoint
//! writes version 3.
//!
//! The root's crc32c of the whole table is the fast path: a table that matches it is
//! decoded strictly ([`decode_table`]). One that does not is scanned frame by frame
//! ([`salvage_table`]): a frame whose crc checks is taken; after a bad one the scan resyncs
//! at the next magic whose frame checks, and each damaged stretch is split at the file
//! magics inside it into damaged entries, whose bodies are decoded ignoring the crc (the
//! caller decides whether to trust them).
//!
//! Data structures: [`Table`] (each file's [`TableFile`]), [`ById`] (a checkpoint's entries by id), [`Salvaged`] (a damaged table's
//! intact part and its [`Damaged`] entries). Invariant: `decode_table(encode_table(t)) ==
//! t`, and [`salvage_table`] of an undamaged table finds every entry intact. Pure
//! functions over bytes: decoding never panics on any input. Locks: none.

use super::record::{corrupt, put_blob, put_extents, put_u64, MapRef, Reader};
use crate::error::Result;
use crate::geometry::Extent;
use std::ops::Range;

const TABLE_MAGIC: &[u8; 4] = b"XVTB";
/// The file table's format version (separate from the root's): 3 frames each entry.
pub(super) const TABLE_VERSION: u32 = 3;
/// The version before framing, still read.
const UNFRAMED_VERSION: u32 = 2;
/// Magic, version, count of file entries.
pub(super) const HEADER_BYTES: usize = 16;
/// First bytes of a file entry's frame (a high byte: unlike most attribute text).
const FILE_FRAME: &[u8; 4] = b"\xF1XVF";
/// First bytes of the retired segments' frame.
const RETIRED_FRAME: &[u8; 4] = b"\xF1XVR";
/// Magic, body length, body crc32c.
pub(super) const FRAME_HEADER: usize = 12;
/// The smallest file body: id, size, blob length, placement flag and key, map kind.
const MIN_FILE_BODY: usize = 8 + 8 + 4 + 1 + 8 + 1;

/// One file as the table holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TableFile {
    pub id: u64,
    pub size: u64,
    pub attr: Vec<u8>,
    /// The placement key, if the file was created with one.
    pub placement: Option<u64>,
    pub map: MapRef,
}

/// The file table: every file, and the map segments no file of this table uses that the
/// next checkpoint frees (they were in use by the table before this one).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Table {
    pub files: Vec<TableFile>,
    pub retired: Vec<Extent>,
}

fn encode_file(f: &TableFile, out: &mut Vec<u8>) {
    let from = out.len();
    put_u64(out, f.id);
    put_u64(out, f.size);
    put_blob(out, &f.attr);
    out.push(u8::from(f.placement.is_some()));
    put_u64(out, f.placement.unwrap_or(0));
    f.map.encode(out);
    debug_assert!(read_file(&mut Reader::new(&out[from..])).is_ok_and(|back| back == *f));
}

fn read_file(r: &mut Reader<'_>) -> Result<TableFile> {
    let (id, size, attr) = (r.u64()?, r.u64()?, r.blob()?);
    let placement = match (r.u8()?, r.u64()?) {
        (0, _) => None,
        (1, key) => Some(key),
        _ => return Err(corrupt("a table file with a bad placement flag")),
    };
    let map = MapRef::decode(r)?;
    r.debug_check();
    Ok(TableFile {
        id,
        size,
        attr,
        placement,
        map,
    })
}

/// A file entry's body, every byte used.
pub(super) fn decode_file(body: &[u8]) -> Result<TableFile> {
    let mut r = Reader::new(body);
    let f = read_file(&mut r)?;
    if !r.done() {
        return Err(corrupt("bytes after a table file"));
    }
    Ok(f)
}

fn put_frame(out: &mut Vec<u8>, magic: &[u8; 4], body: &[u8]) {
    let from = out.len();
    out.extend_from_slice(magic);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
    out.extend_from_slice(body);
    debug_assert!(frame(&mut Reader::new(&out[from..]), magic, true).is_ok_and(|b| b == body));
}

/// The table's bytes (version 3, as table areas held them: for tests of the upgrade).
#[cfg(test)]
pub(super) fn encode_table(t: &Table) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(TABLE_MAGIC);
    out.extend_from_slice(&TABLE_VERSION.to_le_bytes());
    put_u64(&mut out, t.files.len() as u64);
    let mut body = Vec::new();
    for f in &t.files {
        body.clear();
        encode_file(f, &mut body);
        put_frame(&mut out, FILE_FRAME, &body);
    }
    body.clear();
    put_extents(&mut body, &t.retired);
    put_frame(&mut out, RETIRED_FRAME, &body);
    out
}

/// The table's bytes as version 2 wrote them (for tests of the upgrade).
#[cfg(test)]
pub(super) fn encode_table_v2(t: &Table) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(TABLE_MAGIC);
    out.extend_from_slice(&UNFRAMED_VERSION.to_le_bytes());
    put_u64(&mut out, t.files.len() as u64);
    t.files.iter().for_each(|f| encode_file(f, &mut out));
    put_extents(&mut out, &t.retired);
    out
}

/// The table [`encode_table`] (or version 2) wrote, each frame's crc checked.
#[cfg(test)]
pub(super) fn decode_table(b: &[u8]) -> Result<Table> {
    decode_placed(b, true).map(|(t, _)| t)
}

/// The table and the byte range of each file's entry in it (its frame, or in a version 2
/// table its bytes). Frames' crcs are checked only if `verify` (the caller checked the
/// whole table's already).
pub(super) fn decode_placed(b: &[u8], verify: bool) -> Result<(Table, Vec<Range<u64>>)> {
    let mut r = Reader::new(b);
    if r.bytes(4)? != TABLE_MAGIC {
        return Err(corrupt("the file table has a bad magic"));
    }
    let version = r.u32()?;
    if version != TABLE_VERSION && version != UNFRAMED_VERSION {
        return Err(corrupt("the file table has an unknown version"));
    }
    let framed = version == TABLE_VERSION;
    let n = r.count(MIN_FILE_BODY + if framed { FRAME_HEADER } else { 0 })?;
    let mut files = Vec::with_capacity(n);
    let mut places = Vec::with_capacity(n);
    for _ in 0..n {
        let from = r.at() as u64;
        files.push(if framed {
            decode_file(frame(&mut r, FILE_FRAME, verify)?)?
        } else {
            read_file(&mut r)?
        });
        places.push(from..r.at() as u64);
    }
    let retired = if framed {
        let mut rr = Reader::new(frame(&mut r, RETIRED_FRAME, verify)?);
        let retired = rr.extents()?;
        if !rr.done() {
            return Err(corrupt("bytes after the retired segments"));
        }
        retired
    } else {
        r.extents()?
    };
    if !r.done() {
        return Err(corrupt("bytes after the file table"));
    }
    Ok((Table { files, retired }, places))
}

/// The table's header for `count` file entries (a tree's table bytes start with it).
pub(super) fn table_header(count: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES);
    out.extend_from_slice(TABLE_MAGIC);
    out.extend_from_slice(&TABLE_VERSION.to_le_bytes());
    put_u64(&mut out, count);
    out
}

/// The retired blocks' frame (a tree's table bytes end with it).
pub(super) fn retired_frame(retired: &[Extent]) -> Vec<u8> {
    let (mut body, mut out) = (Vec::new(), Vec::new());
    put_extents(&mut body, retired);
    put_frame(&mut out, RETIRED_FRAME, &body);
    out
}

/// A file entry's body (a tree's leaf holds it in a frame).
pub(super) fn file_body(f: &TableFile) -> Vec<u8> {
    let mut out = Vec::new();
    encode_file(f, &mut out);
    out
}

/// The attribute blob that marks a pending file (`publish.rs`: reserved, never a
/// caller's).
pub(crate) const PENDING: &[u8] = b"\0extalloc: pending file, not yet published\0";

/// What a file entry's body holds that an open needs (the marks its leaf carries up the
/// file tree, `node::MARK_MAPS` and `node::MARK_PENDING`): a map outside the tree, a
/// pending file. A body that does not decode is marked both, so an open reads its leaf and
/// meets the damage.
pub(super) fn entry_marks(body: &[u8]) -> u8 {
    use super::node::{MARK_MAPS, MARK_PENDING};
    match decode_file(body) {
        Ok(f) => {
            let maps = !matches!(f.map, MapRef::Inline(_));
            let pending = f.attr == PENDING;
            (u8::from(maps) * MARK_MAPS) | (u8::from(pending) * MARK_PENDING)
        }
        Err(_) => MARK_MAPS | MARK_PENDING,
    }
}

/// Appends a file entry's frame around `body` to `out` (a leaf of the file tree holds
/// them: `tree.rs`).
pub(super) fn put_file_frame(out: &mut Vec<u8>, body: &[u8]) {
    put_frame(out, FILE_FRAME, body);
}

/// The bodies of the file frames that fill `payload` end to end, each crc checked.
pub(super) fn frames(payload: &[u8]) -> Result<Vec<&[u8]>> {
    let mut r = Reader::new(payload);
    let mut out = Vec::new();
    while !r.done() {
        out.push(frame(&mut r, FILE_FRAME, true)?);
    }
    Ok(out)
}

/// The body of the file entry `id` among `payload`'s frames (a tree leaf's, in id order),
/// or `None`: one pass over the frames, no copy of the others. Only the match's crc32c is
/// computed (the node's own, checked when it was read, covers every byte); the ids must
/// still rise strictly, as [`frames`]' caller checks.
pub(super) fn find_frame(payload: &[u8], id: u64) -> Result<Option<&[u8]>> {
    let mut r = Reader::new(payload);
    let (mut last, mut found) = (None, None);
    while !r.done() {
        let at = r.clone();
        let body = frame(&mut r, FILE_FRAME, false)?;
        let this = frame_id(body)?;
        if last.is_some_and(|l| l >= this) {
            return Err(corrupt("a tree leaf's entries out of order"));
        }
        last = Some(this);
        if this == id {
            // Read again with its crc32c: the bytes handed out are checked where read.
            found = Some(frame(&mut at.clone(), FILE_FRAME, true)?);
        }
    }
    debug_assert!(
        found.is_none_or(|b| frame_id(b).ok() == Some(id)),
        "entry {id}"
    );
    Ok(found)
}

/// The id a file entry's body starts with.
pub(super) fn frame_id(body: &[u8]) -> Result<u64> {
    Reader::new(body).u64()
}

/// The body of the frame at `r`, which must start with `magic`.
fn frame<'a>(r: &mut Reader<'a>, magic: &[u8; 4], verify: bool) -> Result<&'a [u8]> {
    if r.bytes(4)? != magic {
        return Err(corrupt("a table frame with a bad magic"));
    }
    let (len, crc) = (r.u32()?, r.u32()?);
    let body = r.bytes(len as usize)?;
    r.debug_check();
    if verify && crc32c::crc32c(body) != crc {
        return Err(corrupt("a table frame whose crc32c does not match"));
    }
    Ok(body)
}

/// One damaged stretch of a table, taken as one file's entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Damaged {
    /// Its bytes in the table.
    pub bytes: Range<u64>,
    /// Its body decoded ignoring the crc, if it decodes: to be trusted only once checked.
    pub file: Option<TableFile>,
}

/// What [`salvage_table`] read of a table whose crc did not match.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Salvaged {
    /// The entries whose frames check, and the retired segments if theirs does.
    pub table: Table,
    /// Each intact file's entry in the table (parallel to `table.files`).
    pub places: Vec<Range<u64>>,
    /// The damaged stretches taken as file entries, in table order.
    pub damaged: Vec<Damaged>,
    /// The retired segments' frame was not found whole (those segments leak).
    pub retired_lost: bool,
    /// The header was damaged (the count of entries unknown).
    pub header_lost: bool,
    /// File entries the header counts that were found neither intact nor damaged (lost
    /// inside a damaged stretch with their magics).
    pub uncounted: u64,
}

/// Reads what it can of a damaged version 3 table (see the module's documentation). A
/// version 2 table (no frames) salvages nothing: it is one damaged stretch.
pub(super) fn salvage_table(b: &[u8]) -> Salvaged {
    let mut out = Salvaged::default();
    let header = b.get(..HEADER_BYTES);
    let word = |r: Range<usize>| header.map(|h| &h[r]);
    if word(4..8) == Some(&UNFRAMED_VERSION.to_le_bytes()[..]) {
        out.damaged.push(Damaged {
            bytes: 0..b.len() as u64,
            file: None,
        });
        out.retired_lost = true;
        return out;
    }
    let count = match header {
        Some(h) if h[..4] == TABLE_MAGIC[..] && h[4..8] == TABLE_VERSION.to_le_bytes() => {
            Some(u64::from_le_bytes(h[8..16].try_into().expect("8 bytes")))
        }
        _ => None,
    };
    out.header_lost = count.is_none();
    out.retired_lost = true;
    let mut at = HEADER_BYTES.min(b.len());
    let mut bad_from: Option<usize> = None;
    while at < b.len() {
        match good_frame(b, at) {
            Some((magic, body)) => {
                if let Some(from) = bad_from.take() {
                    damaged_stretch(b, from..at, &mut out);
                }
                let end = at + FRAME_HEADER + body.len();
                take_frame(magic, body, at..end, &mut out);
                at = end;
            }
            None => {
                bad_from.get_or_insert(at);
                at = next_magic(b, at + 1);
            }
        }
    }
    if let Some(from) = bad_from {
        damaged_stretch(b, from..b.len(), &mut out);
    }
    let found = (out.table.files.len() + out.damaged.len()) as u64;
    out.uncounted = count.map_or(0, |n| n.saturating_sub(found));
    debug_assert_eq!(out.places.len(), out.table.files.len());
    out
}

/// A whole frame at `at` whose crc checks: its magic and body.
fn good_frame(b: &[u8], at: usize) -> Option<(&[u8], &[u8])> {
    let head = b.get(at..at.checked_add(FRAME_HEADER)?)?;
    let magic = &head[..4];
    if magic != FILE_FRAME && magic != RETIRED_FRAME {
        return None;
    }
    let len = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    let body = b.get(at + FRAME_HEADER..(at + FRAME_HEADER).checked_add(len)?)?;
    (crc32c::crc32c(body) == crc).then_some((magic, body))
}

/// Takes a frame whose crc checked: a file (or, if its body does not decode, a damaged
/// entry) or the retired segments.
fn take_frame(magic: &[u8], body: &[u8], bytes: Range<usize>, out: &mut Salvaged) {
    let bytes = bytes.start as u64..bytes.end as u64;
    if magic == FILE_FRAME {
        match decode_file(body) {
            Ok(f) => {
                out.table.files.push(f);
                out.places.push(bytes);
            }
            Err(_) => out.damaged.push(Damaged { bytes, file: None }),
        }
        debug_assert_eq!(out.table.files.len(), out.places.len(), "a place per file");
        return;
    }
    let mut r = Reader::new(body);
    if let Ok(retired) = r.extents() {
        if r.done() && out.retired_lost {
            out.table.retired = retired;
            out.retired_lost = false;
        }
    }
}

/// The first offset at or after `from` where a frame magic starts (else the end).
fn next_magic(b: &[u8], from: usize) -> usize {
    b.get(from..)
        .and_then(|rest| {
            rest.windows(4)
                .position(|w| w == FILE_FRAME || w == RETIRED_FRAME)
        })
        .map_or(b.len(), |p| from + p)
}

/// Splits a damaged stretch at the file magics inside it, one damaged entry each (a piece
/// that starts with the retired magic is the retired frame, lost).
fn damaged_stretch(b: &[u8], stretch: Range<usize>, out: &mut Salvaged) {
    debug_assert!(
        stretch.start < stretch.end && stretch.end <= b.len(),
        "{stretch:?}"
    );
    let mut starts = vec![stretch.start];
    let mut at = stretch.start + 1;
    while at < stretch.end {
        let next = next_magic(&b[..stretch.end], at);
        if next < stretch.end && &b[next..next + 4] == FILE_FRAME {
            starts.push(next);
        }
        at = next + 1;
    }
    for (i, &s) in starts.iter().enumerate() {
        let e = starts.get(i + 1).copied().unwrap_or(stretch.end);
        if b[s..e].starts_with(RETIRED_FRAME) {
            continue;
        }
        out.damaged.push(Damaged {
            bytes: s as u64..e as u64,
            file: guess_file(&b[s..e]),
        });
    }
}

/// A damaged entry's body decoded ignoring its crc: all the bytes after the frame header,
/// or as many as its length field says.
fn guess_file(piece: &[u8]) -> Option<TableFile> {
    let body = piece.get(FRAME_HEADER..)?;
    if let Ok(f) = decode_file(body) {
        return Some(f);
    }
    let len = u32::from_le_bytes(piece.get(4..8)?.try_into().ok()?) as usize;
    decode_file(body.get(..len)?).ok()
}

/// A checkpoint's entries found by id (a binary search over their order by id).
pub(super) struct ById<'a> {
    entries: &'a [TableFile],
    order: Vec<usize>,
}

impl<'a> ById<'a> {
    pub(super) fn new(entries: &'a [TableFile]) -> Self {
        let mut order: Vec<usize> = (0..entries.len()).collect();
        order.sort_unstable_by_key(|&i| entries[i].id);
        debug_assert!(order
            .windows(2)
            .all(|w| entries[w[0]].id < entries[w[1]].id));
        ById { entries, order }
    }

    pub(super) fn get(&self, id: u64) -> Option<&'a TableFile> {
        let at = self
            .order
            .binary_search_by_key(&id, |&i| self.entries[i].id);
        at.ok().map(|k| &self.entries[self.order[k]])
    }

    pub(super) fn all(&self) -> &'a [TableFile] {
        self.entries
    }
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
