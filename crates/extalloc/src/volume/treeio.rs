//! The file tree on the volume's device: its nodes' I/O ([`VolIo`]: reads checked, blocks
//! from the store one node at a time) and a durable tree read as the file table's bytes
//! ([`read_tree_table`]), so that the table's decoding and its frame-by-frame salvage
//! (`table.rs`) serve both the tree and the older table areas.
//!
//! The bytes a tree reads as: the table's header (its version, the root's entry count),
//! each leaf's frames in key order, then one frame of the retired blocks (the retired
//! chain's pieces; its own index blocks stay while the root is in force, and the next
//! checkpoint retires them). [`TreeTable::device`] maps a range of those
//! bytes back to the device bytes it came from (a leaf's payload), for reports and
//! damage campaigns.
//!
//! Data structures: [`VolIo`], [`TreeTable`]. Invariant: every node block `VolIo` hands
//! out is allocated to the volume (owner `TABLE_OWNER`) and listed in `got` until the
//! caller records it. Locks: none of its own (the checkpoint runs under the gate).

use super::area::{self, Area};
use super::node::{self, NodeRef, Stamp};
use super::record::SideRef;
use super::root::TreeRoot;
use super::state::TABLE_OWNER;
use super::table::{retired_frame, salvage_table, table_header, Damaged, Salvaged, HEADER_BYTES};
use super::tree::{NodeIo, Tree};
use super::walk::{self, Walked};
use crate::alloc::AllocRequest;
use crate::disk::device::Device;
use crate::error::{Error, Result};
use crate::geometry::{Extent, Geometry};
use crate::store::Store;
use std::ops::Range;

/// Nodes asked of the allocator at once (each handed out alone; the rest given back).
pub(super) const NODES_PER_ASK: u64 = 16;

/// The tree's I/O on a volume's device.
pub(super) struct VolIo<'a> {
    store: &'a Store,
    dev: &'a dyn Device,
    g: Geometry,
    /// Blocks of one node.
    nb: u64,
    /// Node blocks allocated and not handed out yet.
    spare: Vec<u64>,
    /// The volume's stamp, which every node read must carry (`node::checked`).
    stamp: Option<Stamp>,
    /// Every block handed out (nodes and index blocks), in order.
    pub got: Vec<Extent>,
}

impl<'a> VolIo<'a> {
    /// The I/O of a tree whose nodes `stamp` vouches for (`None`: a tree older than
    /// stamps).
    pub(super) fn new(store: &'a Store, dev: &'a dyn Device, stamp: Option<Stamp>) -> Self {
        let g = *store.geometry();
        VolIo {
            store,
            dev,
            stamp,
            g,
            nb: node::node_blocks(u64::from(g.block_size)),
            spare: Vec::new(),
            got: Vec::new(),
        }
    }

    fn goal(&self) -> u64 {
        self.g.group_start(self.g.groups_count() - 1)
    }

    /// Gives back the node blocks asked for and not handed out.
    pub(super) fn give_back_spare(&mut self) -> Result<()> {
        while let Some(b) = self.spare.pop() {
            self.store.free(Extent::new(b, self.nb))?;
        }
        debug_assert!(self.spare.is_empty(), "every spare node given back");
        Ok(())
    }

    /// Gives back every block handed out (a checkpoint that failed before recording them).
    pub(super) fn give_back_all(&mut self) {
        let _ = self.give_back_spare();
        for e in self.got.drain(..) {
            let _ = self.store.free(e);
        }
        // Nothing handed out is kept: the failed checkpoint leaves no block behind.
        debug_assert!(self.got.is_empty());
    }

    /// Writes the index chain that lists `pieces` (blocks of its own allocated one at a
    /// time); returns it, or an empty area for no pieces.
    pub(super) fn write_chain(&mut self, pieces: Vec<Extent>) -> Result<Area> {
        let bs = u64::from(self.g.block_size);
        let mut chain = Area {
            index: Vec::new(),
            pieces,
        };
        for _ in 0..area::index_blocks_for(chain.pieces.len() as u64, bs) {
            let req = AllocRequest::new(TABLE_OWNER, 1).goal(self.goal());
            let e = self.store.allocate(&req)?;
            self.got.push(e);
            chain.index.push(e.start);
        }
        assert_eq!(
            chain.index.len() as u64,
            area::index_blocks_for(chain.pieces.len() as u64, bs),
            "an index block per {} pieces",
            chain.pieces.len()
        );
        for (at, b) in chain.encode_index(bs) {
            self.dev.write_at(&b, at * bs)?;
        }
        Ok(chain)
    }

    /// The blocks handed out, adjacent ones joined.
    pub(super) fn got_joined(&self) -> Vec<Extent> {
        Extent::join_adjacent(self.got.clone())
    }
}

impl NodeIo for VolIo<'_> {
    fn stamp(&self) -> Option<Stamp> {
        self.stamp
    }

    fn read_raw(&mut self, block: u64) -> Result<Vec<u8>> {
        self.g.validate(Extent::new(block, self.nb))?;
        let bs = u64::from(self.g.block_size);
        let mut b = vec![0u8; node::node_bytes(bs)];
        self.dev.read_at(&mut b, block * bs)?;
        debug_assert_eq!(b.len() as u64, self.nb * bs, "a whole node read");
        Ok(b)
    }

    fn allocate(&mut self) -> Result<u64> {
        if self.spare.is_empty() {
            let req = AllocRequest::new(TABLE_OWNER, NODES_PER_ASK * self.nb)
                .min_len(self.nb)
                .goal(self.goal());
            let e = match self.store.allocate(&req) {
                // Free blocks held by files' preallocations: given back, then asked again
                // (the room kept for the tree counts them, `room.rs`).
                Err(Error::NoSpace {
                    reserved_blocks, ..
                }) if reserved_blocks > 0 && self.store.discard_preallocations() > 0 => {
                    self.store.allocate(&req)
                }
                other => other,
            };
            let e = match e {
                // No free run of a node's length: a reserved one (`pool.rs`).
                Err(Error::NoSpace { .. }) if self.nb > 1 => {
                    match self.store.take_metadata_run(self.nb) {
                        Some(got) => got?,
                        None => self.store.allocate(&req)?,
                    }
                }
                other => other?,
            };
            let whole = e.len / self.nb * self.nb;
            if whole < e.len {
                self.store
                    .free(Extent::new(e.start + whole, e.len - whole))?;
            }
            self.spare = (0..whole / self.nb)
                .rev()
                .map(|i| e.start + i * self.nb)
                .collect();
        }
        let b = self.spare.pop().expect("a node's blocks");
        // Never handed out twice.
        debug_assert!(
            self.got.iter().all(|e| e.start != b),
            "block {b} handed out twice"
        );
        self.got.push(Extent::new(b, self.nb));
        Ok(b)
    }

    fn write(&mut self, block: u64, bytes: &[u8]) -> Result<()> {
        debug_assert_eq!(bytes.len() as u64, self.nb * u64::from(self.g.block_size));
        self.dev
            .write_at(bytes, block * u64::from(self.g.block_size))
    }
}

/// A durable tree read as the file table's bytes (see the module documentation).
pub(super) struct TreeTable {
    pub bytes: Vec<u8>,
    /// Every node checked and the retired chain read: `bytes` decode strictly.
    pub whole: bool,
    /// `(table byte, device byte, length)` of each leaf's payload, ascending.
    layout: Vec<(u64, u64, u64)>,
    /// What the walk read (the tree, if whole; its nodes; the lost internal nodes).
    pub walked: Walked,
    /// The retired chain, as far as it read.
    pub chain: Area,
    /// The retired chain read whole (else its list is lost).
    chain_read: bool,
}

impl TreeTable {
    /// The device bytes of table bytes `r` (to the end of the leaf it starts in; empty for
    /// the header and the retired frame).
    pub(super) fn device(&self, r: Range<u64>) -> Range<u64> {
        let i = self.layout.partition_point(|&(t, _, _)| t <= r.start);
        let Some(&(t, d, len)) = i.checked_sub(1).and_then(|i| self.layout.get(i)) else {
            return 0..0;
        };
        if r.start >= t + len {
            return 0..0;
        }
        d + (r.start - t)..d + (r.end.min(t + len) - t)
    }

    /// Every block the tree's nodes and the chain hold.
    pub(super) fn own(&self, nb: u64) -> Vec<Extent> {
        self.walked
            .nodes
            .iter()
            .map(|n| Extent::new(n.block, nb))
            .chain(self.chain.index.iter().map(|&b| Extent::new(b, 1)))
            .collect()
    }

    /// The tree to change by later checkpoints, if every node checked.
    pub(super) fn take_tree(&mut self) -> Option<Tree> {
        self.walked.tree.take()
    }
}

/// Reads the tree `root` names (`count` entries) and, if `retired` is not 0, the chain of
/// retired blocks, as the table's bytes. Fails only if the root node cannot be read.
pub(super) fn read_tree_table(
    store: &Store,
    dev: &dyn Device,
    (root, count, stamp): (NodeRef, u64, Option<Stamp>),
    retired: u64,
) -> Result<TreeTable> {
    let g = store.geometry();
    let bs = u64::from(g.block_size);
    let mut io = VolIo::new(store, dev, stamp);
    let walked = walk::walk(&mut io, root, node::node_bytes(bs), count)?;
    let mut bytes = table_header(count);
    let mut layout = Vec::with_capacity(walked.leaves.len());
    for l in &walked.leaves {
        let dev_at = l.at.block * bs + node::HEADER_BYTES as u64;
        layout.push((bytes.len() as u64, dev_at, l.payload.len() as u64));
        bytes.extend_from_slice(&l.payload);
    }
    let side = SideRef {
        extent: Extent::new(0, 0),
        head: retired,
    };
    let chain = match retired {
        0 => Ok(Area::default()),
        _ => area::resolve(dev, g, side),
    };
    let chain_read = chain.is_ok();
    let chain = chain.unwrap_or_default();
    if chain_read {
        bytes.extend(retired_frame(&chain.pieces));
    }
    let whole = chain_read && walked.tree.is_some();
    Ok(TreeTable {
        bytes,
        whole,
        layout,
        walked,
        chain,
        chain_read,
    })
}

/// The durable tree of a version 4 root, read (see [`read_tree_table`]).
pub(super) fn read_root_tree(store: &Store, dev: &dyn Device, t: &TreeRoot) -> Result<TreeTable> {
    read_tree_table(store, dev, (t.root, t.count, t.stamp), t.retired)
}

impl TreeTable {
    /// What a tree with damage gives (ranges in device bytes): each checked leaf's entries
    /// as intact; in a leaf that failed its check, the frames whose own crc checks as
    /// intact and the rest as damaged, but every entry as damaged if the leaf is stale (a
    /// whole node of an older checkpoint: its frames check yet are not this leaf's, so
    /// each must pass the salvage's checks); of a leaf that failed, only entries whose id
    /// lies in the keys its parent routes to it. Then the retired list if its chain read,
    /// and the entries of `count` found nowhere.
    pub(super) fn salvage(&self, count: u64, bs: u64) -> Salvaged {
        let mut out = Salvaged::default();
        for l in &self.walked.leaves {
            // A checked leaf's entries are all taken, wherever its keys lie.
            let keys = if l.checked { (0, None) } else { l.keys };
            let frames = leaf_frames(&l.payload, l.at, keys, bs);
            if l.checked {
                debug_assert!(frames.damaged.is_empty(), "a checked leaf's frames check");
            }
            // A stale leaf's frames check yet are not this leaf's: each one as damaged.
            for (file, bytes) in frames.intact {
                match l.checked || !l.stale {
                    true => {
                        out.table.files.push(file);
                        out.places.push(bytes);
                    }
                    false => out.damaged.push(Damaged {
                        bytes,
                        file: Some(file),
                    }),
                }
            }
            out.damaged.extend(frames.damaged);
        }
        out.retired_lost = !self.chain_read;
        if self.chain_read {
            out.table.retired = self.chain.pieces.clone();
        }
        let found = (out.table.files.len() + out.damaged.len()) as u64;
        out.uncounted = count.saturating_sub(found);
        debug_assert_eq!(out.places.len(), out.table.files.len());
        out
    }
}

/// A leaf's frames, their places in device bytes: those whose own crc checks, and the
/// damaged stretches; of a leaf that failed its check, only what the keys its parent routes
/// to it (`keys`) take (a damaged stretch whose body does not decode is kept: its place is
/// all anyone knows). A checked leaf's frames all check and are all routed there.
pub(super) struct LeafFrames {
    pub intact: Vec<(super::table::TableFile, Range<u64>)>,
    pub damaged: Vec<Damaged>,
}

/// The frames of the leaf at `at` whose payload is `payload` (see [`LeafFrames`]), on
/// blocks of `bs` bytes.
pub(super) fn leaf_frames(
    payload: &[u8],
    at: NodeRef,
    keys: (u64, Option<u64>),
    bs: u64,
) -> LeafFrames {
    let mut bytes = table_header(0);
    bytes.extend_from_slice(payload);
    let s = salvage_table(&bytes);
    let base = at.block * bs + node::HEADER_BYTES as u64;
    let shift = |r: Range<u64>| {
        let at = |x: u64| base + x.saturating_sub(HEADER_BYTES as u64);
        at(r.start)..at(r.end)
    };
    let routed = |id: u64| id >= keys.0 && keys.1.is_none_or(|hi| id < hi);
    let intact: Vec<_> = (s.table.files.into_iter().zip(s.places))
        .filter(|(f, _)| routed(f.id))
        .map(|(f, p)| (f, shift(p)))
        .collect();
    let damaged: Vec<_> = (s.damaged.into_iter())
        .filter(|d| d.file.as_ref().is_none_or(|f| routed(f.id)))
        .map(|d| Damaged {
            bytes: shift(d.bytes),
            file: d.file,
        })
        .collect();
    // Only what the parent routes here, each in the leaf's payload.
    debug_assert!(intact.iter().all(|(f, p)| routed(f.id) && p.start >= base));
    LeafFrames { intact, damaged }
}
