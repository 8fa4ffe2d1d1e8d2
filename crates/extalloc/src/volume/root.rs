//! The volume's root, kept in the store's durable root (`docs/format.md`, "The file
//! tree"): where the file table is. Version 4 names the file tree ([`TreeRoot`]); versions
//! 2 and 3 name two table areas (`area.rs`) and are still read. Pure functions over bytes:
//! decoding never panics on any input and refuses what it cannot read whole.
//!
//! Data structures: [`Root`], [`TreeRoot`], and [`RootFound`] (what a repair made of a
//! lost tree root: `rootfind.rs`). Invariant: `decode(encode(x)) == x`. Locks:
//! none.

use super::node::{NodeRef, Stamp};
use super::record::{corrupt, put_u64, Reader, SideRef};
use crate::error::{Error, Result};
use crate::geometry::Extent;

const ROOT_MAGIC: &[u8; 4] = b"XVRT";
/// The root's version. 2: maps of more than `INLINE_EXTENTS` extents live in map
/// segments. 3: a table area is a chain of pieces listed by index blocks (`area.rs`), named
/// by its first index block (a version 2 area, one extent, is still named by it). 4: the
/// file table is a copy-on-write B+tree of single nodes (`tree.rs`, [`TreeRoot`]); its
/// retired blocks are listed by an index chain. 5: version 4 and what the tree's leaves
/// hold that the open would need ([`TreeRoot::holds`]), so an open whose tree holds
/// neither reads no leaf. 6: every internal node's children carry their marks
/// (`node::MARK_MAPS`, `node::MARK_PENDING`; [`HOLDS_MARKED`]), so an open reads only
/// the leaves that hold what it needs. 7: version 6 and the volume's stamp
/// ([`TreeRoot::stamp`], `node::Stamp`), which every node written since carries, so the
/// salvage's scan of the device takes no node of another volume. Roots of version 2 to 6
/// are read, and the next checkpoint writes version 7 (the upgrade; from a tree without
/// marks, it rewrites every internal node; the stamp is minted then, for the nodes
/// written from that checkpoint on). The file table's entries keep their own version
/// (`table::TABLE_VERSION`).
const VERSION: u32 = 7;
const OLDEST_VERSION: u32 = 2;
/// The volume's root, kept in the store's durable root: where the file table is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Root {
    /// The two table areas of a version 2 or 3 root; the table lies at the start of
    /// `sides[active]`. Zero in a version 4 root.
    pub sides: [SideRef; 2],
    pub active: usize,
    pub table_bytes: u64,
    pub table_crc: u32,
    /// The id the next new file takes.
    pub next_id: u64,
    /// The file tree (version 4).
    pub tree: Option<TreeRoot>,
}

/// Where a version 4 root's file tree is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TreeRoot {
    /// The tree's root node, and the entries (files) under it.
    pub root: NodeRef,
    pub count: u64,
    /// The checkpoint that wrote it (each node's generation is at most this).
    pub generation: u64,
    /// The first block of the index chain that lists the blocks this checkpoint retired
    /// (the next one frees them); 0: none.
    pub retired: u64,
    /// The previous checkpoint's tree: its nodes this one replaced are among the retired,
    /// so until the next checkpoint it reads whole (the salvage's second copy).
    pub previous: Option<(NodeRef, u64)>,
    /// What the tree's entries hold that the open needs from every leaf ([`HOLDS_MAPS`],
    /// [`HOLDS_PENDING`]); a version 4 root, which does not say, reads as holding both.
    pub holds: u64,
    /// The volume's stamp (version 7): every node written from its `since` on carries it.
    /// `None` in a root of version 4 to 6 (which is encoded as version 6 again).
    pub stamp: Option<Stamp>,
}

/// [`TreeRoot::holds`]: some entry's map lies in a map segment or in runs of its own, so
/// the open builds the segments' accounts from every leaf (`load.rs`, `Segs`).
pub(super) const HOLDS_MAPS: u64 = 1;
/// [`TreeRoot::holds`]: some entry is a pending file, which the open finds and removes.
pub(super) const HOLDS_PENDING: u64 = 2;
/// [`TreeRoot::holds`] (version 6): the tree's internal nodes carry their children's
/// marks, so the open reads only the leaves whose marks are set (`walk.rs`).
pub(super) const HOLDS_MARKED: u64 = 4;

impl TreeRoot {
    /// The marks of this tree's internal nodes say what every leaf holds that the open
    /// needs: they carry marks ([`HOLDS_MARKED`]), or no entry holds anything (a version 5
    /// root that holds nothing, whose marks read as zero). The open then reads the internal
    /// nodes and the marked leaves only (`load.rs`).
    pub(super) fn marks_whole(&self) -> bool {
        self.holds == 0 || self.holds & HOLDS_MARKED != 0
    }
}

impl Root {
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(ROOT_MAGIC);
        let Some(t) = &self.tree else {
            // Version 3 (tests of the upgrade write it).
            out.extend_from_slice(&3u32.to_le_bytes());
            self.sides[0].encode(&mut out);
            self.sides[1].encode(&mut out);
            out.push(self.active as u8);
            put_u64(&mut out, self.table_bytes);
            out.extend_from_slice(&self.table_crc.to_le_bytes());
            put_u64(&mut out, self.next_id);
            return out;
        };
        let version = match t.stamp {
            Some(_) => VERSION,
            None => 6,
        };
        out.extend_from_slice(&version.to_le_bytes());
        let (prev, prev_count) = t.previous.unwrap_or((
            NodeRef {
                block: 0,
                generation: 0,
            },
            0,
        ));
        for v in [
            t.root.block,
            t.root.generation,
            t.count,
            t.generation,
            t.retired,
            prev.block,
            prev.generation,
            prev_count,
            self.next_id,
            t.holds,
        ] {
            put_u64(&mut out, v);
        }
        if let Some(stamp) = t.stamp {
            assert!(
                stamp.value != 0 && stamp.since <= t.generation,
                "a stamp {stamp:?} for a root of checkpoint {}",
                t.generation
            );
            put_u64(&mut out, stamp.value);
            put_u64(&mut out, stamp.since);
        }
        debug_assert_eq!(Root::decode(&out).ok().as_ref(), Some(self));
        out
    }

    fn decode_tree(r: &mut Reader<'_>, version: u32) -> Result<Root> {
        let mut v = [0u64; 12];
        let fields = match version {
            7.. => 12,
            5 | 6 => 10,
            _ => 9,
        };
        for x in &mut v[..fields] {
            *x = r.u64()?;
        }
        let node = |block, generation| NodeRef { block, generation };
        let t = TreeRoot {
            root: node(v[0], v[1]),
            count: v[2],
            generation: v[3],
            retired: v[4],
            previous: (v[5] != 0).then(|| (node(v[5], v[6]), v[7])),
            holds: match version {
                4 => HOLDS_MAPS | HOLDS_PENDING,
                _ => v[9],
            },
            stamp: (version >= 7).then_some(Stamp {
                value: v[10],
                since: v[11],
            }),
        };
        let known = match version {
            6.. => HOLDS_MAPS | HOLDS_PENDING | HOLDS_MARKED,
            _ => HOLDS_MAPS | HOLDS_PENDING,
        };
        let holds_ok = t.holds & !known == 0;
        let stamp_ok = t
            .stamp
            .is_none_or(|s| s.value != 0 && s.since <= t.generation);
        if !r.done()
            || t.root.block == 0
            || t.root.generation > t.generation
            || !holds_ok
            || !stamp_ok
        {
            return Err(corrupt("the volume root is malformed"));
        }
        debug_assert!(t.previous.is_none_or(|(p, _)| p.block != 0));
        Ok(Root {
            sides: [SideRef::legacy(Extent::new(0, 0)); 2],
            active: 0,
            table_bytes: 0,
            table_crc: 0,
            next_id: v[8],
            tree: Some(t),
        })
    }

    pub(super) fn decode(b: &[u8]) -> Result<Root> {
        let mut r = Reader::new(b);
        if b.len() >= 8 && b[..4] == ROOT_MAGIC[..] {
            let version = u32::from_le_bytes(b[4..8].try_into().expect("four bytes"));
            if !(OLDEST_VERSION..=VERSION).contains(&version) {
                return Err(Error::UnsupportedVolumeVersion {
                    found: version,
                    supported: VERSION,
                });
            }
        }
        let version = match r.bytes(4)? == ROOT_MAGIC {
            true => r.u32()?,
            false => 0,
        };
        if !(OLDEST_VERSION..=VERSION).contains(&version) {
            return Err(Error::NoVolume {
                root_bytes: b.len() as u64,
            });
        }
        let sides = match version {
            4..=7 => return Root::decode_tree(&mut r, version),
            2 => [SideRef::legacy(r.extent()?), SideRef::legacy(r.extent()?)],
            _ => [SideRef::decode(&mut r)?, SideRef::decode(&mut r)?],
        };
        let active = r.u8()? as usize;
        let root = Root {
            sides,
            active,
            table_bytes: r.u64()?,
            table_crc: r.u32()?,
            next_id: r.u64()?,
            tree: None,
        };
        if active > 1 || !r.done() {
            return Err(corrupt("the volume root is malformed"));
        }
        Ok(root)
    }
}

/// A range of file ids: `lo ..` up to `hi` (exclusive; `None`: no end).
pub type KeyRange = (u64, Option<u64>);

/// The file tree's root, lost, made again by `fsck --repair`'s open over the nodes found
/// under it (every block the bitmaps mark used read once): the nodes of the root's
/// children's level whose whole subtrees were found, newest first, each whose keys overlap
/// none taken before, kept only if their entries are exactly as many as the lost root
/// counted, or, with holes where a node they name was found nowhere, fewer by no more
/// than the holes hold, every older node among them one the previous checkpoint's tree
/// names (`docs/format.md`, "A lost root made again"). Every entry found is kept as it
/// was, the holes' ranges are mended as a lost leaf's or node's; the next checkpoint
/// writes the new root.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RootFound {
    /// The lost root's first block, and why it was lost.
    pub lost: (u64, String),
    /// Blocks the scan read (or covered by an earlier scan's note during the same
    /// repair, reading only the nodes found there).
    pub blocks_read: u64,
    /// Of them, blocks that did not read (a bad sector: the device's read error), skipped;
    /// a node there was not found.
    pub blocks_unreadable: u64,
    /// Whole nodes of this volume found in them (held by the allocator, no newer than the
    /// lost root, not retired by its checkpoint).
    pub nodes_found: u64,
    /// The nodes the new root names.
    pub children: u64,
    /// The new root's level (its children's plus one).
    pub level: u8,
    /// How many levels below the highest carrying the lost root's generation its
    /// children were found (0: that level; more: a node over them was lost too, and the
    /// nodes between, owned by no one now, are freed by the bitmaps' rebuild).
    pub levels_down: u8,
    /// Nodes the subtrees found name that were found nowhere (lost with the root: zeroed,
    /// overwritten or unreadable): left as holes under the new root, their key ranges
    /// rebuilt by the mend as a lost leaf's or internal node's are
    /// ([`Volume::mend_unreadable_leaves`](crate::volume::Volume::mend_unreadable_leaves));
    /// 0 when every subtree was found whole. Made over the leaves (`from_leaves`): the
    /// leaves the previous checkpoint's tree names, not replaced since, found nowhere
    /// (children of the new root that do not read, mended as any such leaf).
    pub holes: u64,
    /// Made over the leaves found, each one the lost root's checkpoint wrote or the
    /// previous checkpoint's tree names (when no level of whole subtrees held what was
    /// found: a node over them lost too, with no node left naming the lost ones); the
    /// levels above them are built again by the next checkpoint.
    pub from_leaves: bool,
    /// Made over the leaves: the key ranges (`lo..hi`, `None`: no end) the lost root's
    /// checkpoint rewrote (its own leaves are found there by a scan, their entries judged
    /// as a lost node's are), and those under nodes of the previous checkpoint's tree that
    /// did not read (the lost tree's too when that checkpoint did not replace them), where
    /// the mend scans the device for leaves as under a lost internal node; each with the
    /// block and generation of the node lost there (the lost root for a range its
    /// checkpoint rewrote: no leaf there is newer).
    pub scanned: Vec<(KeyRange, (u64, u64))>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::record::put_extent;

    /// A version 7 root of a tree.
    fn stamped_root() -> Root {
        let node = |block, generation| NodeRef { block, generation };
        Root {
            sides: [SideRef::legacy(Extent::new(0, 0)); 2],
            active: 0,
            table_bytes: 0,
            table_crc: 0,
            next_id: 12,
            tree: Some(TreeRoot {
                root: node(40, 7),
                count: 11,
                generation: 7,
                retired: 41,
                previous: Some((node(30, 6), 10)),
                holds: HOLDS_PENDING | HOLDS_MARKED,
                stamp: Some(Stamp {
                    value: 0x5eed,
                    since: 3,
                }),
            }),
        }
    }

    #[test]
    fn a_stamp_of_zero_or_from_a_later_checkpoint_is_refused() {
        let stamped = stamped_root().encode();
        for (i, v) in [(16, 0u64), (8, 8)] {
            let mut bad = stamped.clone();
            let at = bad.len() - i;
            bad[at..at + 8].copy_from_slice(&v.to_le_bytes());
            assert!(Root::decode(&bad).is_err(), "field {i} from the end as {v}");
        }
        for cut in 0..stamped.len() {
            assert!(Root::decode(&stamped[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn roots_round_trip_and_garbage_is_refused() {
        let root = Root {
            sides: [
                SideRef::legacy(Extent::new(1, 2)),
                SideRef {
                    extent: Extent::new(0, 0),
                    head: 9,
                },
            ],
            active: 1,
            table_bytes: 10,
            table_crc: 5,
            next_id: 3,
            tree: None,
        };
        assert_eq!(Root::decode(&root.encode()).unwrap(), root);
        let tree = stamped_root();
        let stamped = tree.encode();
        assert_eq!(Root::decode(&stamped).unwrap(), tree);
        // A version 6 root: no stamp.
        let mut tree = tree;
        tree.tree.as_mut().unwrap().stamp = None;
        let bytes = tree.encode();
        let mut v6 = stamped[..stamped.len() - 16].to_vec();
        v6[4..8].copy_from_slice(&6u32.to_le_bytes());
        assert_eq!(bytes, v6, "version 6: version 7 without the stamp");
        assert_eq!(Root::decode(&bytes).unwrap(), tree);
        // A version 4 root (no `holds`): read as holding both, so the open reads every leaf.
        let mut v4 = bytes[..bytes.len() - 8].to_vec();
        v4[4..8].copy_from_slice(&4u32.to_le_bytes());
        let old = Root::decode(&v4).unwrap();
        assert_eq!(old.tree.unwrap().holds, HOLDS_MAPS | HOLDS_PENDING);
        assert!(!old.tree.unwrap().marks_whole());
        assert!(tree.tree.unwrap().marks_whole());
        // Bits not defined are refused: any above the three; marks in a version 5 root.
        let mut odd = bytes.clone();
        let at = odd.len() - 8;
        odd[at] = 8;
        assert!(Root::decode(&odd).is_err());
        let mut v5 = bytes.clone();
        v5[4..8].copy_from_slice(&5u32.to_le_bytes());
        assert!(
            Root::decode(&v5).is_err(),
            "a version 5 root that says marks"
        );
        v5[at] = 0;
        assert!(Root::decode(&v5).unwrap().tree.unwrap().marks_whole());
        for cut in 0..bytes.len() {
            assert!(Root::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        // A version 2 root: two extents.
        let mut v2 = ROOT_MAGIC.to_vec();
        v2.extend_from_slice(&2u32.to_le_bytes());
        put_extent(&mut v2, Extent::new(1, 2));
        put_extent(&mut v2, Extent::new(3, 4));
        v2.push(0);
        put_u64(&mut v2, 10);
        v2.extend_from_slice(&5u32.to_le_bytes());
        put_u64(&mut v2, 3);
        let old = Root::decode(&v2).unwrap();
        assert_eq!(old.sides[1], SideRef::legacy(Extent::new(3, 4)));
        v2[4] = 1;
        assert!(matches!(
            Root::decode(&v2),
            Err(Error::UnsupportedVolumeVersion { found: 1, .. })
        ));
        assert!(Root::decode(b"").is_err());
    }
}
