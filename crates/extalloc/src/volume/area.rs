//! Chains of index blocks listing extents (**pieces**), and the file table's two areas
//! that volumes of root version 2 and 3 keep their table in (read only: the first
//! checkpoint of such a volume builds the file tree, `tree.rs`, and retires them). Each
//! area's pieces, runs of at most 1 MiB allocated one at a time, hold the table's bytes in
//! order. A version 4 root's retired chain is such a chain: its pieces are the blocks the
//! next checkpoint frees (`checkpoint.rs`).
//!
//! An area of format version 2 (one extent, no index) is still read. The root and the
//! journal's `TableAreas` change name an area by a [`SideRef`]: its index chain's first
//! block, or, for a version 2 area, its extent.
//!
//! **Index block** (one block; `docs/format.md`, "Table areas"): magic `XVTI`, count of
//! pieces (u32), the next index block (u64, 0: the last), crc32c (u32) of the block number
//! (8 bytes, little-endian) followed by the block with this field zero, 4 zero bytes, then
//! `count` pieces (start, len: u64 each). The crc seeded with the block number makes an
//! index block written to the wrong place fail its check.
//!
//! Data structures: [`Area`] (its index blocks and pieces, in order; the root names it by
//! a `record::SideRef`). Invariant: an area's pieces and index blocks are allocated to the
//! volume (owner `TABLE_OWNER`), never overlap, and its index chain, as written, lists
//! exactly its pieces. Locks: none (plain values; the checkpoint that writes a chain runs
//! under the volume's gate).

use super::record::{corrupt, put_extent, put_u64, Reader, SideRef};
use crate::disk::device::Device;
use crate::error::{Corrupted, Error, Result};
use crate::geometry::{Extent, Geometry};
use std::ops::Range;

/// An index block's magic.
const INDEX_MAGIC: &[u8; 4] = b"XVTI";
/// Bytes of an index block before its pieces.
const INDEX_HEADER: usize = 24;
/// Bytes of one piece in an index block.
const PIECE_BYTES: usize = 16;

/// One table area: its index blocks and its pieces, in table order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Area {
    /// The index chain's blocks, first to last (none for a version 2 area).
    pub index: Vec<u64>,
    /// Where the table's bytes lie, in order.
    pub pieces: Vec<Extent>,
}

impl Area {
    /// Blocks the area holds table bytes in.
    pub(super) fn blocks(&self) -> u64 {
        self.pieces.iter().map(|p| p.len).sum()
    }

    /// How the root names it.
    pub(super) fn side(&self) -> SideRef {
        match self.index.first() {
            Some(&head) => SideRef {
                extent: Extent::new(0, 0),
                head,
            },
            None => SideRef::legacy(self.pieces.first().copied().unwrap_or(Extent::new(0, 0))),
        }
    }

    /// Every block the area holds: its pieces and its index blocks.
    pub(super) fn extents(&self) -> impl Iterator<Item = Extent> + '_ {
        self.pieces
            .iter()
            .copied()
            .chain(self.index.iter().map(|&b| Extent::new(b, 1)))
    }

    /// Reads the first `len` table bytes.
    pub(super) fn read(&self, dev: &dyn Device, bs: u64, len: u64) -> Result<Vec<u8>> {
        if len > self.blocks().saturating_mul(bs) {
            return Err(corrupt(&format!(
                "a {len}-byte table does not fit its area of {} blocks",
                self.blocks()
            )));
        }
        let mut out = vec![0u8; len as usize];
        let mut at = 0usize;
        for p in &self.pieces {
            if at == out.len() {
                break;
            }
            let n = ((p.len * bs) as usize).min(out.len() - at);
            dev.read_at(&mut out[at..at + n], p.start * bs)?;
            at += n;
        }
        debug_assert_eq!(at, out.len(), "every byte read");
        Ok(out)
    }

    /// The device bytes of table bytes `r`: where they start, up to the end of that piece
    /// (an entry cut by a piece's end is named by its first part).
    pub(super) fn device_bytes(&self, bs: u64, r: Range<u64>) -> Range<u64> {
        let mut base = 0u64;
        for p in &self.pieces {
            let len = p.len * bs;
            if r.start < base + len {
                let start = p.start * bs + (r.start - base);
                let end = p.start * bs + (r.end - base).min(len);
                return start..end;
            }
            base += len;
        }
        0..0
    }

    /// The index blocks that list `self.pieces` in `self.index` (as many as it needs:
    /// [`index_blocks_for`]): `(block, bytes)`, each checked by decoding it back.
    pub(super) fn encode_index(&self, bs: u64) -> Vec<(u64, Vec<u8>)> {
        let per = per_index(bs);
        assert_eq!(
            self.index.len() as u64,
            index_blocks_for(self.pieces.len() as u64, bs),
            "index blocks for {} pieces",
            self.pieces.len()
        );
        let mut out = Vec::with_capacity(self.index.len());
        for (i, chunk) in self.pieces.chunks(per as usize).enumerate() {
            let at = self.index[i];
            let next = self.index.get(i + 1).copied().unwrap_or(0);
            let mut b = Vec::with_capacity(bs as usize);
            b.extend_from_slice(INDEX_MAGIC);
            b.extend_from_slice(&(chunk.len() as u32).to_le_bytes());
            put_u64(&mut b, next);
            b.extend_from_slice(&[0u8; 8]);
            chunk.iter().for_each(|&p| put_extent(&mut b, p));
            b.resize(bs as usize, 0);
            let crc = index_crc(at, &b);
            b[16..20].copy_from_slice(&crc.to_le_bytes());
            debug_assert_eq!(
                decode_index(at, &b).ok(),
                Some((chunk.to_vec(), next)),
                "an index block reads back"
            );
            out.push((at, b));
        }
        out
    }
}

/// Pieces one index block lists.
fn per_index(bs: u64) -> u64 {
    (bs - INDEX_HEADER as u64) / PIECE_BYTES as u64
}

/// Index blocks `pieces` pieces need.
pub(super) fn index_blocks_for(pieces: u64, bs: u64) -> u64 {
    pieces.div_ceil(per_index(bs))
}

fn index_crc(block: u64, b: &[u8]) -> u32 {
    let mut zeroed = b.to_vec();
    zeroed[16..20].fill(0);
    crc32c::crc32c_append(crc32c::crc32c(&block.to_le_bytes()), &zeroed)
}

/// An index block's pieces and the next block of the chain.
fn decode_index(at: u64, b: &[u8]) -> Result<(Vec<Extent>, u64)> {
    let bad = |why: &str| Error::Corrupt {
        what: Corrupted::TableIndex { block: at },
        detail: why.to_string(),
    };
    if b.len() < INDEX_HEADER || &b[..4] != INDEX_MAGIC {
        return Err(bad("no index magic"));
    }
    let stored = u32::from_le_bytes(b[16..20].try_into().expect("four bytes"));
    if stored != index_crc(at, b) {
        return Err(bad("its checksum does not match"));
    }
    let mut r = Reader::new(&b[4..]);
    let count = r.u32()? as usize;
    let next = r.u64()?;
    if INDEX_HEADER + count * PIECE_BYTES > b.len() {
        return Err(bad("more pieces than the block holds"));
    }
    let mut r = Reader::new(&b[INDEX_HEADER..INDEX_HEADER + count * PIECE_BYTES]);
    let pieces = (0..count).map(|_| r.extent()).collect::<Result<Vec<_>>>()?;
    Ok((pieces, next))
}

/// The area `side` names: a version 2 area's extent, or the pieces its index chain lists
/// (each index block and piece checked to lie on the device, the chain to end).
pub(super) fn resolve(dev: &dyn Device, g: &Geometry, side: SideRef) -> Result<Area> {
    if side.head == 0 {
        if side.extent.len > 0 {
            g.validate(side.extent)?;
        }
        let pieces = if side.extent.len > 0 {
            vec![side.extent]
        } else {
            vec![]
        };
        return Ok(Area {
            index: vec![],
            pieces,
        });
    }
    let bs = u64::from(g.block_size);
    let mut area = Area::default();
    let mut at = side.head;
    let mut b = vec![0u8; bs as usize];
    while at != 0 {
        g.validate(Extent::new(at, 1))?;
        if area.index.contains(&at) || area.index.len() as u64 > g.blocks_count {
            return Err(corrupt("the table's index chain loops"));
        }
        dev.read_at(&mut b, at * bs)?;
        let (pieces, next) = decode_index(at, &b)?;
        for p in &pieces {
            g.validate(*p)?;
        }
        area.index.push(at);
        area.pieces.extend(pieces);
        at = next;
    }
    debug_assert_eq!(area.side(), side);
    Ok(area)
}

#[cfg(test)]
impl Area {
    /// Writes `table` over the area's first bytes, each piece's last block padded with
    /// zeros (not flushed).
    fn write(&self, dev: &dyn Device, bs: u64, table: &[u8]) -> Result<()> {
        assert!(
            table.len() as u64 <= self.blocks() * bs,
            "a table of {} bytes in an area of {} blocks",
            table.len(),
            self.blocks()
        );
        let mut rest = table;
        for p in &self.pieces {
            if rest.is_empty() {
                break;
            }
            let n = ((p.len * bs) as usize).min(rest.len());
            let mut buf = rest[..n].to_vec();
            buf.resize((n as u64).div_ceil(bs) as usize * bs as usize, 0);
            dev.write_at(&buf, p.start * bs)?;
            rest = &rest[n..];
        }
        debug_assert!(rest.is_empty(), "the whole table written");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::device::MemDevice;

    #[test]
    fn an_area_of_many_pieces_round_trips_and_damage_is_caught() {
        let g = Geometry::new(512, 1024, 8192).unwrap();
        let bs = 512;
        let dev = MemDevice::new(8192 * 512);
        let pieces: Vec<Extent> = (0..70).map(|i| Extent::new(1000 + i * 3, 2)).collect();
        let index: Vec<u64> = (0..index_blocks_for(70, bs))
            .map(|i| 5000 + i * 2)
            .collect();
        assert_eq!(index.len(), 3, "30 pieces a 512-byte index block");
        let area = Area { index, pieces };
        for (at, b) in area.encode_index(bs) {
            dev.write_at(&b, at * bs).unwrap();
        }
        let back = resolve(&dev, &g, area.side()).unwrap();
        assert_eq!(back, area);
        let table: Vec<u8> = (0..70 * 2 * 512 - 100).map(|i| (i % 251) as u8).collect();
        area.write(&dev, bs, &table).unwrap();
        assert_eq!(area.read(&dev, bs, table.len() as u64).unwrap(), table);
        assert!(area.read(&dev, bs, 70 * 2 * 512 + 1).is_err());
        // Table byte 1030 lies in the second piece, 6 bytes in.
        assert_eq!(
            area.device_bytes(bs, 1030..1040),
            1003 * 512 + 6..1003 * 512 + 16
        );
        // A flipped byte in the second index block.
        let mut b = vec![0u8; 512];
        dev.read_at(&mut b, 5002 * bs).unwrap();
        b[40] ^= 1;
        dev.write_at(&b, 5002 * bs).unwrap();
        assert!(matches!(
            resolve(&dev, &g, area.side()),
            Err(Error::Corrupt { .. })
        ));
        // A version 2 area is its extent.
        let old = resolve(&dev, &g, SideRef::legacy(Extent::new(40, 8))).unwrap();
        assert_eq!((old.index.len(), old.blocks()), (0, 8));
        assert_eq!(old.side(), SideRef::legacy(Extent::new(40, 8)));
    }
}
