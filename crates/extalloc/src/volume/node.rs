//! One node of the file table's copy-on-write B+tree (`tree.rs`; `docs/format.md`, "The
//! file tree"): its bytes on the device and back.
//!
//! A node is one block (on blocks under 4 KiB, a run of 4 KiB: [`node_blocks`]), written
//! once to a block the allocator handed out and never written in place. **Header** (64
//! bytes): magic `XVBN`, level (u8: 0 a leaf), three zero bytes, item count (u32), payload
//! bytes (u32), the checkpoint generation that wrote it (u64), its own first block (u64),
//! crc32c (u32) seeded with that block number over the node with this field zero, the
//! volume's stamp (u64, [`Stamp`]; zero in a node written before root version 7), 20 zero
//! bytes. **Payload**: a leaf holds file entries as the table's frames (`table.rs`: magic,
//! length, crc32c of the body, body; the body starts with the file's id), in id order; an
//! internal node holds `(first key, child block, child marks and generation)`, u64 each,
//! in key order: the top byte of the third word is the child's marks ([`MARK_MAPS`],
//! [`MARK_PENDING`]: what the entries under it hold that an open needs), the rest its
//! generation (root version 6; older internal nodes have zero there, `root.rs`). A node that fails its crc, names another block or a generation past its
//! parent's is damage, never data; a leaf's frames keep their own crcs, so a damaged leaf
//! still gives the entries whose frames check (`table::salvage_table`).
//!
//! The stamp: a random number the volume's root keeps and every node it writes carries,
//! so that a node found without a parent to vouch for it (the salvage's scan of the
//! device, `nodescan.rs`) is known for this volume's: a former volume's leaves left in
//! free blocks by a `mkfs` without discard, or a leaf's bytes a user wrote into a file,
//! name their own block and check, but carry no stamp of this volume.
//!
//! Data structures: [`NodeRef`] (where a node lies and which checkpoint wrote it),
//! [`Decoded`] (a checked node's level, stamp and payload), [`Stamp`]. Invariant:
//! `decode(encode(x)) == x` for a node written at the block it names. Pure functions over bytes: decoding never
//! panics on any input. Locks: none.

use super::record::corrupt;
use crate::error::Result;

/// A node's magic.
const NODE_MAGIC: &[u8; 4] = b"XVBN";
/// Bytes of a node's header.
pub(super) const HEADER_BYTES: usize = 64;
/// Bytes of one child in an internal node: first key, block, generation.
pub(super) const CHILD_BYTES: usize = 24;
/// The least bytes of a node (on smaller blocks, a node is a run of them).
const MIN_NODE_BYTES: u64 = 4096;
/// A child's marks: some entry under it has its map outside the tree (in a map segment
/// or in runs of its own), so an open reads that leaf for the segments' accounts.
pub(super) const MARK_MAPS: u8 = 1;
/// A child's marks: some entry under it is a pending file, which the open finds.
pub(super) const MARK_PENDING: u8 = 2;
/// Where a child's marks lie in its third word (above the generation).
const MARKS_SHIFT: u32 = 56;
/// The tallest tree read (a fan-out of 168 reaches 2^64 keys well before).
pub(super) const MAX_LEVEL: u8 = 16;

/// Blocks one node takes on blocks of `bs` bytes.
pub(super) fn node_blocks(bs: u64) -> u64 {
    MIN_NODE_BYTES.div_ceil(bs).max(1)
}

/// Bytes of one node on blocks of `bs` bytes.
pub(super) fn node_bytes(bs: u64) -> usize {
    (node_blocks(bs) * bs) as usize
}

/// Where a node lies (its first block) and the checkpoint generation that wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct NodeRef {
    pub block: u64,
    pub generation: u64,
}

/// The volume's stamp (root version 7, `root.rs`): every node written from checkpoint
/// `since` on carries `value`; nodes older than that carry zero (written before the
/// volume's root was version 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    /// Random, never zero.
    pub value: u64,
    /// The first checkpoint generation whose nodes carry it.
    pub since: u64,
}

impl Stamp {
    /// A new stamp for nodes from checkpoint `since` on (a new volume, or the first
    /// checkpoint of a volume whose root is older than version 7), for the store whose
    /// uuid is `uuid`: a hash (std's SipHash, `DefaultHasher`) of the uuid and `since`, so
    /// that a run seeded down to its uuid, as the damage campaign is, makes the same bytes
    /// again with the same toolchain, and no one who cannot read the device knows it; or
    /// random for a store without a uuid (all zeros).
    pub(super) fn mint(uuid: [u8; 16], since: u64) -> Stamp {
        use std::hash::{Hash, Hasher};
        let value = if uuid == [0; 16] {
            rand::random()
        } else {
            let mut h = std::hash::DefaultHasher::new();
            (b"extalloc node stamp", uuid, since).hash(&mut h);
            h.finish()
        };
        // Zero says "written before stamps": never a stamp's value.
        Stamp {
            value: value.max(1),
            since,
        }
    }

    /// True if a node written by checkpoint `generation` carrying `stamp` is this
    /// volume's: it carries the stamp, or it carries none and was written by a checkpoint
    /// before the stamp's (checkpoints count from 1: a node of generation 0 is no one's,
    /// so a new volume, whose stamp is from checkpoint 1, vouches for no unstamped node).
    pub(super) fn vouches(&self, stamp: u64, generation: u64) -> bool {
        stamp == self.value || stamp == 0 && (1..self.since).contains(&generation)
    }
}

/// One internal node's child, as its parent names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ChildRef {
    /// The least key under it (the first child's may be larger than keys routed to it).
    pub first: u64,
    pub at: NodeRef,
    /// What the entries under it hold that an open needs ([`MARK_MAPS`], [`MARK_PENDING`]).
    pub marks: u8,
}

/// A node whose header and crc checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Decoded {
    pub level: u8,
    pub count: u32,
    /// The volume's stamp it carries ([`Stamp`]; zero if written before version 7).
    pub stamp: u64,
    /// The payload: frames (a leaf) or children (an internal node).
    pub payload: Vec<u8>,
}

fn put_u32(out: &mut [u8], at: usize, v: u32) {
    debug_assert!(at + 4 <= HEADER_BYTES, "a header field at {at}");
    out[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut [u8], at: usize, v: u64) {
    debug_assert!(at + 8 <= HEADER_BYTES, "a header field at {at}");
    out[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn crc_of(block: u64, node: &[u8]) -> u32 {
    let head = crc32c::crc32c_append(crc32c::crc32c(&block.to_le_bytes()), &node[..32]);
    let zero = crc32c::crc32c_append(head, &[0u8; 4]);
    crc32c::crc32c_append(zero, &node[36..])
}

/// A node's bytes (`size` of them): header (carrying the volume's `stamp`), then `payload`
/// (which must fit), then zeros.
pub(super) fn encode(
    size: usize,
    (level, count): (u8, u32),
    payload: &[u8],
    at: NodeRef,
    stamp: u64,
) -> Vec<u8> {
    assert!(
        HEADER_BYTES + payload.len() <= size,
        "a payload of {} bytes in a node of {size}",
        payload.len()
    );
    assert!(level <= MAX_LEVEL, "a node of level {level}");
    let mut b = vec![0u8; size];
    b[..4].copy_from_slice(NODE_MAGIC);
    b[4] = level;
    put_u32(&mut b, 8, count);
    put_u32(&mut b, 12, payload.len() as u32);
    put_u64(&mut b, 16, at.generation);
    put_u64(&mut b, 24, at.block);
    put_u64(&mut b, 36, stamp);
    b[HEADER_BYTES..HEADER_BYTES + payload.len()].copy_from_slice(payload);
    let crc = crc_of(at.block, &b);
    put_u32(&mut b, 32, crc);
    debug_assert_eq!(
        decode(&b, at).ok(),
        Some(Decoded {
            level,
            count,
            stamp,
            payload: payload.to_vec()
        }),
        "a node reads back"
    );
    b
}

/// The node `at` names, checked: magic, crc, its own block and generation, a payload
/// within the node. Damage is `Corrupt`, naming the block.
pub(super) fn decode(b: &[u8], at: NodeRef) -> Result<Decoded> {
    let bad = |why: &str| crate::error::Error::Corrupt {
        what: crate::error::Corrupted::TreeNode { block: at.block },
        detail: why.to_string(),
    };
    if b.len() < HEADER_BYTES || &b[..4] != NODE_MAGIC {
        return Err(bad("no node magic"));
    }
    if get_u32(b, 32) != crc_of(at.block, b) {
        return Err(bad("its crc32c does not match"));
    }
    if get_u64(b, 24) != at.block {
        return Err(bad(&format!("it names block {}", get_u64(b, 24))));
    }
    if get_u64(b, 16) != at.generation {
        return Err(bad(&format!(
            "written by checkpoint {}, its parent expects {}",
            get_u64(b, 16),
            at.generation
        )));
    }
    let (level, count, len) = (b[4], get_u32(b, 8), get_u32(b, 12) as usize);
    if level > MAX_LEVEL || len > b.len() - HEADER_BYTES {
        return Err(bad("a level or payload length out of range"));
    }
    if level > 0 && len != count as usize * CHILD_BYTES {
        return Err(bad("an internal node's payload does not hold its children"));
    }
    Ok(Decoded {
        level,
        count,
        stamp: get_u64(b, 36),
        payload: b[HEADER_BYTES..HEADER_BYTES + len].to_vec(),
    })
}

/// The node `at` names, checked as [`decode`] does and vouched for by `stamp` (if any:
/// `Stamp::vouches`): a whole node of another volume that names the same block and
/// generation (a former volume's, left where this one's now lies) is damage, never data.
pub(super) fn checked(b: &[u8], at: NodeRef, stamp: Option<Stamp>) -> Result<Decoded> {
    let d = decode(b, at)?;
    match stamp.is_none_or(|s| s.vouches(d.stamp, at.generation)) {
        true => Ok(d),
        false => Err(crate::error::Error::Corrupt {
            what: crate::error::Corrupted::TreeNode { block: at.block },
            detail: format!("it carries another volume's stamp ({:#x})", d.stamp),
        }),
    }
}

/// True if `b` is a whole node (magic and crc check, at the block it names) that `stamp`
/// does not vouch for: another volume's, whose every entry is not this volume's.
pub(super) fn is_foreign(b: &[u8], stamp: Option<Stamp>) -> bool {
    whole_somewhere(b) && !vouched(b, stamp)
}

/// True if `b` is a whole node for the block it names (magic, crc), wherever it was read.
fn whole_somewhere(b: &[u8]) -> bool {
    b.len() >= HEADER_BYTES && &b[..4] == NODE_MAGIC && get_u32(b, 32) == crc_of(get_u64(b, 24), b)
}

/// The node `b` holds if it is whole where it was read, at `block`: its magic, the block it
/// names and its crc check (its generation is what its header says). For the salvage's
/// scan of the device (`nodescan.rs`), which has no parent to name it; `None` for any
/// other bytes.
pub(super) fn whole_at(b: &[u8], block: u64) -> Option<(NodeRef, Decoded)> {
    if b.len() < HEADER_BYTES || &b[..4] != NODE_MAGIC || get_u64(b, 24) != block {
        return None;
    }
    let at = NodeRef {
        block,
        generation: get_u64(b, 16),
    };
    decode(b, at).ok().map(|d| (at, d))
}

/// True if `b` is a whole node (magic and crc check) written for another place or by
/// another checkpoint than `at` says: a stale block (older contents where a node now
/// lies) or one written to the wrong place, whose every entry is suspect.
pub(super) fn is_stale(b: &[u8], at: NodeRef) -> bool {
    whole_somewhere(b) && (get_u64(b, 24) != at.block || get_u64(b, 16) != at.generation)
}

/// True if `stamp` (if any: a root older than version 7 has none) vouches for the node
/// whose header `b` starts with, by the stamp and generation it carries (`Stamp::vouches`).
pub(super) fn vouched(b: &[u8], stamp: Option<Stamp>) -> bool {
    stamp.is_none_or(|s| b.len() >= HEADER_BYTES && s.vouches(get_u64(b, 36), get_u64(b, 16)))
}

/// True if `b` starts with a node's magic (whole or not).
pub(super) fn has_magic(b: &[u8]) -> bool {
    b.len() >= HEADER_BYTES && &b[..4] == NODE_MAGIC
}

/// The payload bytes (up to its length field, within the node) of a node that failed its
/// check: for the salvage, which scans them for frames. Empty if the node is no leaf.
pub(super) fn leaf_payload_unchecked(b: &[u8]) -> &[u8] {
    let magic = b.len() >= HEADER_BYTES && &b[..4] == NODE_MAGIC;
    if b.len() < HEADER_BYTES || magic && b[4] != 0 {
        return &[];
    }
    let len = match magic {
        true => (get_u32(b, 12) as usize).min(b.len() - HEADER_BYTES),
        false => b.len() - HEADER_BYTES,
    };
    &b[HEADER_BYTES..HEADER_BYTES + len]
}

/// An internal node's payload.
pub(super) fn encode_children(children: &[ChildRef]) -> Vec<u8> {
    let mut out = Vec::with_capacity(children.len() * CHILD_BYTES);
    for c in children {
        assert!(
            c.at.generation >> MARKS_SHIFT == 0,
            "a generation of {} leaves no room for marks",
            c.at.generation
        );
        let marked = c.at.generation | (u64::from(c.marks) << MARKS_SHIFT);
        out.extend_from_slice(&c.first.to_le_bytes());
        out.extend_from_slice(&c.at.block.to_le_bytes());
        out.extend_from_slice(&marked.to_le_bytes());
    }
    out
}

/// An internal node's children, checked: keys strictly ascending, each generation at most
/// its parent's (`generation`), no child at block 0.
pub(super) fn decode_children(d: &Decoded, generation: u64) -> Result<Vec<ChildRef>> {
    debug_assert!(d.level > 0, "a leaf has no children");
    let children: Vec<ChildRef> = d
        .payload
        .chunks_exact(CHILD_BYTES)
        .map(|c| ChildRef {
            first: get_u64(c, 0),
            at: NodeRef {
                block: get_u64(c, 8),
                generation: get_u64(c, 16) & ((1 << MARKS_SHIFT) - 1),
            },
            marks: (get_u64(c, 16) >> MARKS_SHIFT) as u8,
        })
        .collect();
    if children.is_empty() {
        return Err(corrupt("an internal tree node without children"));
    }
    if children.windows(2).any(|w| w[0].first >= w[1].first) {
        return Err(corrupt("an internal tree node's keys out of order"));
    }
    if children.iter().any(|c| {
        c.at.block == 0
            || c.at.generation > generation
            || c.marks & !(MARK_MAPS | MARK_PENDING) != 0
    }) {
        return Err(corrupt(
            "an internal tree node names a child it cannot have",
        ));
    }
    Ok(children)
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT: NodeRef = NodeRef {
        block: 77,
        generation: 5,
    };

    #[test]
    fn a_node_reads_back_and_refuses_another_place_or_generation() {
        let b = encode(4096, (0, 2), b"payload", AT, 9);
        let d = decode(&b, AT).unwrap();
        assert_eq!((d.level, d.count, &d.payload[..]), (0, 2, &b"payload"[..]));
        let moved = NodeRef { block: 78, ..AT };
        assert!(decode(&b, moved).is_err(), "written elsewhere");
        assert!(is_stale(&b, moved) && !is_stale(&b, AT));
        let older = NodeRef {
            generation: 4,
            ..AT
        };
        assert!(decode(&b, older).is_err(), "another checkpoint's");
        assert!(is_stale(&b, older));
        for i in [0, 4, 12, 40, 64, 4095] {
            let mut bad = b.clone();
            bad[i] ^= 1;
            assert!(decode(&bad, AT).is_err(), "byte {i} flipped");
            assert!(!is_stale(&bad, AT), "byte {i} flipped: damaged, not stale");
        }
        assert_eq!(leaf_payload_unchecked(&b)[..7], b"payload"[..]);
    }

    #[test]
    fn a_node_found_where_it_lies_gives_its_generation() {
        let b = encode(4096, (0, 2), b"payload", AT, 9);
        let (at, d) = whole_at(&b, AT.block).unwrap();
        assert_eq!((at, d.level, &d.payload[..]), (AT, 0, &b"payload"[..]));
        assert_eq!(d.stamp, 9, "the stamp it carries");
        let stamp = |value, since| Some(Stamp { value, since });
        assert!(vouched(&b, stamp(9, 1)) && vouched(&b, None) && !vouched(&b, stamp(8, 1)));
        assert!(!vouched(&b[..10], stamp(9, 1)), "too short for a header");
        assert!(
            whole_at(&b, AT.block + 1).is_none(),
            "read at another block"
        );
        let mut bad = b.clone();
        bad[100] ^= 1;
        assert!(whole_at(&bad, AT.block).is_none(), "damaged");
        assert!(whole_at(&[0u8; 4096], 0).is_none() && whole_at(&b[..10], 77).is_none());
    }

    #[test]
    fn a_stamp_vouches_for_its_own_nodes_and_for_unstamped_older_ones() {
        let s = Stamp {
            value: 0x5eed,
            since: 10,
        };
        assert!(s.vouches(0x5eed, 10) && s.vouches(0x5eed, 3) && s.vouches(0, 9));
        assert!(!s.vouches(0, 10), "unstamped, written after the stamp");
        assert!(!s.vouches(0, 0), "generation 0: no checkpoint writes it");
        let new = Stamp { value: 7, since: 1 };
        assert!(
            (0..5).all(|g| !new.vouches(0, g)),
            "a new volume: no unstamped node"
        );
        assert!(!s.vouches(0x5eee, 4), "another volume's");
        let (a, b) = (Stamp::mint([0; 16], 1), Stamp::mint([0; 16], 1));
        assert!(a.value != 0 && a.value != b.value && a.since == 1, "random");
        let (c, d) = (Stamp::mint([7; 16], 1), Stamp::mint([7; 16], 1));
        assert_eq!(c, d, "the same uuid and checkpoint, the same stamp");
        assert!(
            c.value != 0
                && c != Stamp::mint([8; 16], 1)
                && c.value != Stamp::mint([7; 16], 2).value
        );
        // The stamp is covered by the crc: a node of another volume is not this one's
        // with its stamp changed.
        let mut n = encode(4096, (0, 0), b"", AT, 0x5eee);
        n[36] ^= 0x5eee_u64 as u8 ^ 0x5eed_u64 as u8;
        assert!(whole_at(&n, AT.block).is_none());
    }

    #[test]
    fn children_read_back_and_bad_ones_are_refused() {
        let kids = [
            ChildRef {
                first: 1,
                at: NodeRef {
                    block: 9,
                    generation: 5,
                },
                marks: MARK_MAPS | MARK_PENDING,
            },
            ChildRef {
                first: 40,
                at: NodeRef {
                    block: 10,
                    generation: 3,
                },
                marks: 0,
            },
        ];
        let b = encode(4096, (1, 2), &encode_children(&kids), AT, 9);
        let d = decode(&b, AT).unwrap();
        assert_eq!(decode_children(&d, 5).unwrap(), kids);
        assert!(
            decode_children(&d, 4).is_err(),
            "a child newer than its parent"
        );
        let swapped = [kids[1], kids[0]];
        let b = encode(4096, (1, 2), &encode_children(&swapped), AT, 9);
        assert!(decode_children(&decode(&b, AT).unwrap(), 5).is_err());
        // A marks byte with a bit no version writes is damage.
        let mut payload = encode_children(&kids);
        payload[23] |= 0x80;
        let b = encode(4096, (1, 2), &payload, AT, 9);
        assert!(decode_children(&decode(&b, AT).unwrap(), 5).is_err());
    }

    #[test]
    fn decoding_never_panics_on_noise() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            let mut b = encode(4096, (1, 1), &[7u8; 24], AT, 9);
            for _ in 0..8 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                b[(seed % 4096) as usize] = (seed >> 32) as u8;
            }
            if let Ok(d) = decode(&b, AT) {
                let _ = d.level.checked_sub(1).map(|_| decode_children(&d, 5));
            }
            let _ = leaf_payload_unchecked(&b);
        }
    }
}
