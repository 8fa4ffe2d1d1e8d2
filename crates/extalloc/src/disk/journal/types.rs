//! The values the journal's parts share: an [`Op`], a [`Record`], the [`Area`] the journal
//! lives in, what replay returns ([`Replayed`], [`Recent`], [`Damage`]) and the 4 KiB block
//! a mirror starts on. Plain values; this file names no other file of the journal.

use crate::geometry::Extent;

/// One change recorded in a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Blocks handed out by the transaction.
    Allocate(Extent),
    /// Blocks freed by the transaction (reusable once its record is durable).
    Free(Extent),
}

/// A committed transaction as replay returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The record's sequence number (each is the previous one's + 1).
    pub seq: u64,
    /// Every record with a sequence number up to this was durable when this one was written.
    pub durable_through: u64,
    /// The transaction's changes, allocations first.
    pub ops: Vec<Op>,
    /// The caller's payload, opaque to the store.
    pub payload: Vec<u8>,
}

/// The groups of `geometry` whose blocks `records` change (extents off the device are
/// left out: replay reports those).
pub fn groups_touched(
    records: &[Record],
    geometry: &crate::geometry::Geometry,
) -> std::collections::HashSet<u64> {
    records
        .iter()
        .flat_map(|r| r.ops.iter())
        .filter_map(|op| {
            let (Op::Allocate(e) | Op::Free(e)) = *op;
            geometry.validate(e).ok().map(|()| e)
        })
        .flat_map(|e| geometry.split(e).map(|(g, _, _)| g).collect::<Vec<_>>())
        .collect()
}

/// Where the journal lives: `len` bytes from byte `start` of the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Area {
    /// Byte offset of the area on the device.
    pub start: u64,
    /// Bytes in the area.
    pub len: u64,
}

/// The result of a replay: the records, and where writing continues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replayed {
    /// The intact records from the tail, in sequence.
    pub records: Vec<Record>,
    /// Offset (in the area) after the last good record, and the next sequence number.
    pub head: u64,
    /// The sequence number the next record takes.
    pub next_seq: u64,
    /// Committed records lost to damage in the middle of the journal, if any.
    pub damage: Option<Damage>,
    /// The last records' bytes, for the mirrors the journal writes next.
    pub recent: Recent,
}

impl Replayed {
    /// An empty journal: writing starts at offset 0 with record 1.
    pub fn empty() -> Self {
        Replayed {
            records: Vec::new(),
            head: 0,
            next_seq: 1,
            damage: None,
            recent: Recent::default(),
        }
    }
}

/// The bytes of the last records before the head (as replay read them, repaired from a
/// mirror if need be), from the record holding the start of the head's 4 KiB block: the
/// first mirror a journal writes after an open covers them, so damage to that block does
/// not lose committed records that nothing after them vouches for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Recent {
    /// Offset (in the area) of `bytes`.
    pub start: u64,
    /// The records' bytes, from `start` up to the head.
    pub bytes: Vec<u8>,
    /// `(sequence number, offset)` of each record in `bytes`.
    pub records: Vec<(u64, u64)>,
}

/// Damage in the middle of the journal: record `lost_seq` at `offset` (in the area) cannot
/// be read, yet intact records written after it had been made durable prove it committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The first record replay could not read.
    pub lost_seq: u64,
    /// Where it should have been (byte offset in the area).
    pub offset: u64,
    /// The intact records found after the damage (sequence order), which a replay cannot
    /// apply without the lost ones before them.
    pub stranded: Vec<Record>,
}

/// Mirrors start on this boundary of the device, so no 4 KiB block holds bytes of both a
/// record and the mirror written with it.
pub(super) const MIRROR_ALIGN: u64 = 4096;

/// The start (in the area, at least 0) of the 4 KiB block of the device holding `at`.
pub(super) fn block_start(area: Area, at: u64) -> u64 {
    ((area.start + at) / MIRROR_ALIGN * MIRROR_ALIGN).saturating_sub(area.start)
}
