//! The volume's bytes on the device (`docs/volume.md`): the changes it logs in journal
//! payloads ([`Change`]), its file table ([`encode_table`]) and its root ([`Root`]).
//! Pure functions over bytes: decoding never panics on any input and refuses what it cannot
//! read whole.
//!
//! Data structures: [`Change`], [`FileImage`], [`Root`]. Invariant: `decode(encode(x)) ==
//! x` for each. Locks: none.
//!
//! Every change is a blind write of the state it names (map these blocks, set this size,
//! drop this file), so applying a change to a state that already holds it changes nothing.

use crate::error::{Error, Result};
use crate::geometry::Extent;

/// First bytes of a journal payload the volume wrote.
pub(super) const PAYLOAD_MAGIC: &[u8; 4] = b"XVOL";
const TABLE_MAGIC: &[u8; 4] = b"XVTB";
const ROOT_MAGIC: &[u8; 4] = b"XVRT";
const VERSION: u32 = 1;

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
    /// The two file-table areas.
    Areas { a: Extent, b: Extent },
    /// The file's placement key: its first blocks go to the group the key picks.
    Placement { id: u64, key: u64 },
}

/// A reader over bytes that fails instead of panicking.
pub(super) struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(b: &'a [u8]) -> Self {
        Reader { b, at: 0 }
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or_else(|| corrupt("ends inside a field"))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    pub(super) fn u8(&mut self) -> Result<u8> {
        Ok(self.bytes(1)?[0])
    }

    pub(super) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into().expect("4")))
    }

    pub(super) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.bytes(8)?.try_into().expect("8")))
    }

    fn blob(&mut self) -> Result<Vec<u8>> {
        let n = self.u32()? as usize;
        Ok(self.bytes(n)?.to_vec())
    }

    fn extent(&mut self) -> Result<Extent> {
        Ok(Extent::new(self.u64()?, self.u64()?))
    }

    pub(super) fn done(&self) -> bool {
        self.at == self.b.len()
    }
}

fn corrupt(detail: &str) -> Error {
    Error::Corrupt {
        what: "volume metadata".into(),
        detail: detail.into(),
    }
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_blob(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn put_extent(out: &mut Vec<u8>, e: Extent) {
    put_u64(out, e.start);
    put_u64(out, e.len);
}

impl Change {
    /// Appends the change's bytes to `out`.
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
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
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<Change> {
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

/// One file as the table holds it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct FileImage {
    pub id: u64,
    pub size: u64,
    pub attr: Vec<u8>,
    /// The placement key, if the file was created with one.
    pub placement: Option<u64>,
    /// `(logical, extent, unwritten)`, in logical order.
    pub maps: Vec<(u64, Extent, bool)>,
}

/// The file table: every file with its map.
pub(super) fn encode_table(files: &[FileImage]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(TABLE_MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    put_u64(&mut out, files.len() as u64);
    for f in files {
        put_u64(&mut out, f.id);
        put_u64(&mut out, f.size);
        put_blob(&mut out, &f.attr);
        out.push(u8::from(f.placement.is_some()));
        put_u64(&mut out, f.placement.unwrap_or(0));
        put_u64(&mut out, f.maps.len() as u64);
        for &(l, e, unwritten) in &f.maps {
            put_u64(&mut out, l);
            put_extent(&mut out, e);
            out.push(u8::from(unwritten));
        }
    }
    out
}

pub(super) fn decode_table(b: &[u8]) -> Result<Vec<FileImage>> {
    let mut r = Reader::new(b);
    if r.bytes(4)? != TABLE_MAGIC || r.u32()? != VERSION {
        return Err(corrupt("the file table has a bad magic or version"));
    }
    let n = r.u64()?;
    let mut files = Vec::new();
    for _ in 0..n {
        let (id, size, attr) = (r.u64()?, r.u64()?, r.blob()?);
        let placement = match (r.u8()?, r.u64()?) {
            (0, _) => None,
            (1, key) => Some(key),
            _ => return Err(corrupt("a table file with a bad placement flag")),
        };
        let maps_n = r.u64()?;
        let mut maps = Vec::new();
        for _ in 0..maps_n {
            let (l, e) = (r.u64()?, r.extent()?);
            let unwritten = match r.u8()? {
                0 => false,
                1 => true,
                _ => return Err(corrupt("a table map with a bad unwritten flag")),
            };
            maps.push((l, e, unwritten));
        }
        files.push(FileImage {
            id,
            size,
            attr,
            placement,
            maps,
        });
    }
    if !r.done() {
        return Err(corrupt("bytes after the file table"));
    }
    Ok(files)
}

/// The volume's root, kept in the store's durable root: where the file table is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Root {
    /// The two table areas; the table lies at the start of `areas[active]`.
    pub areas: [Extent; 2],
    pub active: usize,
    pub table_bytes: u64,
    pub table_crc: u32,
    /// The id the next new file takes.
    pub next_id: u64,
}

impl Root {
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(ROOT_MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        put_extent(&mut out, self.areas[0]);
        put_extent(&mut out, self.areas[1]);
        out.push(self.active as u8);
        put_u64(&mut out, self.table_bytes);
        out.extend_from_slice(&self.table_crc.to_le_bytes());
        put_u64(&mut out, self.next_id);
        out
    }

    pub(super) fn decode(b: &[u8]) -> Result<Root> {
        let mut r = Reader::new(b);
        if r.bytes(4)? != ROOT_MAGIC || r.u32()? != VERSION {
            return Err(Error::InvalidRequest(
                "the device holds a store but no volume (its root is not a volume's): make \
                 one with `extalloc mkfs`"
                    .into(),
            ));
        }
        let areas = [r.extent()?, r.extent()?];
        let active = r.u8()? as usize;
        let root = Root {
            areas,
            active,
            table_bytes: r.u64()?,
            table_crc: r.u32()?,
            next_id: r.u64()?,
        };
        if active > 1 || !r.done() {
            return Err(corrupt("the volume root is malformed"));
        }
        Ok(root)
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
            Change::Placement { id: 7, key: 99 },
        ];
        let mut payload = PAYLOAD_MAGIC.to_vec();
        changes.iter().for_each(|c| c.encode(&mut payload));
        assert_eq!(decode_payload(&payload).unwrap(), changes);
        for cut in 5..payload.len() {
            // Every truncation either fails or decodes a prefix: never panics.
            let _ = decode_payload(&payload[..cut]);
        }
        assert!(decode_payload(b"junk").is_err());
        let files = vec![FileImage {
            id: 1,
            size: 5,
            attr: b"a".to_vec(),
            placement: Some(4),
            maps: vec![(0, Extent::new(9, 1), false)],
        }];
        let table = encode_table(&files);
        assert_eq!(decode_table(&table).unwrap(), files);
        assert!(decode_table(&table[..table.len() - 1]).is_err());
        let root = Root {
            areas: [Extent::new(1, 2), Extent::new(3, 4)],
            active: 1,
            table_bytes: 10,
            table_crc: 5,
            next_id: 3,
        };
        assert_eq!(Root::decode(&root.encode()).unwrap(), root);
        assert!(Root::decode(b"").is_err());
    }
}
