//! The journal's on-disk records: encoding and decoding (`docs/format.md`, "Journal
//! records"). Pure functions over bytes: decoding never panics on any input.
//!
//! Data structures: none of their own (a [`Record`] is `mod.rs`'s); the layouts are in the
//! module comment of `mod.rs`. Invariant: `decode(encode(r)) == r`, and a record with any
//! byte changed fails its crc32c; a mirror's crc32c covers its header, and each record in
//! its span carries its own. Locks: none.

use super::types::{Op, Record};
use crate::geometry::Extent;

pub(super) const MAGIC: u32 = u32::from_le_bytes(*b"XJRN");
pub(super) const KIND_TXN: u16 = 1;
pub(super) const KIND_WRAP: u16 = 2;
pub(super) const KIND_MIRROR: u16 = 3;
pub(super) const HEADER: usize = 40;
pub(super) const OP: usize = 24;

/// Bytes of a record holding `ops` operations and `payload` bytes (header and padding
/// included).
pub(super) fn record_bytes(ops: u64, payload: u64) -> u64 {
    (HEADER as u64 + ops * OP as u64 + payload).next_multiple_of(8)
}

/// Pads the record encoded in `b` with zeros to `total` bytes (a multiple of 8, at least
/// its length), its length field and crc32c set to match: the zeros are part of it, which
/// [`decode`] takes as any record's (it reads its operations and payload by their counts).
pub(super) fn pad_to(b: &mut Vec<u8>, total: usize) {
    assert!(
        total >= b.len() && total.is_multiple_of(8),
        "padding {} to {total}",
        b.len()
    );
    b.resize(total, 0);
    b[16..20].copy_from_slice(&(total as u32).to_le_bytes());
    b[20..24].fill(0);
    let crc = crc32c::crc32c(b);
    b[20..24].copy_from_slice(&crc.to_le_bytes());
}

/// Encodes a transaction record.
pub fn encode(seq: u64, durable_through: u64, ops: &[Op], payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    encode_into(&mut b, seq, durable_through, ops, payload);
    b
}

/// [`encode`] into `b` (cleared first), so a writer can keep one buffer from record to
/// record instead of mapping and zeroing fresh pages for each.
pub(super) fn encode_into(
    b: &mut Vec<u8>,
    seq: u64,
    durable_through: u64,
    ops: &[Op],
    payload: &[u8],
) {
    let body = HEADER + ops.len() * OP + payload.len();
    let total = body.next_multiple_of(8);
    b.clear();
    b.reserve(total);
    let mut h = [0u8; HEADER];
    h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    h[4..6].copy_from_slice(&KIND_TXN.to_le_bytes());
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    h[16..20].copy_from_slice(&(total as u32).to_le_bytes());
    h[24..28].copy_from_slice(&(ops.len() as u32).to_le_bytes());
    h[28..32].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    h[32..40].copy_from_slice(&durable_through.to_le_bytes());
    b.extend_from_slice(&h);
    for op in ops {
        let (kind, e) = match op {
            Op::Allocate(e) => (1u8, e),
            Op::Free(e) => (2u8, e),
        };
        let mut o = [0u8; OP];
        o[0] = kind;
        o[8..16].copy_from_slice(&e.start.to_le_bytes());
        o[16..24].copy_from_slice(&e.len.to_le_bytes());
        b.extend_from_slice(&o);
    }
    b.extend_from_slice(payload);
    b.resize(total, 0);
    let crc = crc32c::crc32c(b);
    b[20..24].copy_from_slice(&crc.to_le_bytes());
    // Paired with the reader: the header parses back as written.
    debug_assert_eq!(parse_header(b), Some((KIND_TXN, seq, total)));
}

pub(super) fn wrap_marker(seq: u64) -> [u8; HEADER] {
    let mut b = [0u8; HEADER];
    b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    b[4..6].copy_from_slice(&KIND_WRAP.to_le_bytes());
    b[8..16].copy_from_slice(&seq.to_le_bytes());
    b[16..20].copy_from_slice(&(HEADER as u32).to_le_bytes());
    let crc = crc32c::crc32c(&b);
    b[20..24].copy_from_slice(&crc.to_le_bytes());
    b
}

pub(super) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

pub(super) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// What a header says, if it is one: (kind, seq, total bytes).
pub(super) fn parse_header(h: &[u8]) -> Option<(u16, u64, usize)> {
    if h.len() < HEADER || u32_at(h, 0) != MAGIC {
        return None;
    }
    let kind = u16::from_le_bytes([h[4], h[5]]);
    let total = u32_at(h, 16) as usize;
    if total < HEADER
        || !total.is_multiple_of(8)
        || !matches!(kind, KIND_TXN | KIND_WRAP | KIND_MIRROR)
    {
        return None;
    }
    Some((kind, u64_at(h, 8), total))
}

/// The sequence number and bytes of the whole `kind` record at the front of `b`, if its
/// header says `kind` and its crc32c holds.
pub(super) fn checked(b: &[u8], kind: u16) -> Option<(u64, &[u8])> {
    let (k, seq, total) = parse_header(b)?;
    if k != kind || b.len() < total {
        return None;
    }
    let b = &b[..total];
    let mut check = b.to_vec();
    check[20..24].fill(0);
    (crc32c::crc32c(&check) == u32_at(b, 20)).then_some((seq, b))
}

/// Decodes a whole record (any bytes: never panics). `None` if torn or corrupt.
pub fn decode(b: &[u8]) -> Option<Record> {
    let (seq, b) = checked(b, KIND_TXN)?;
    let n_ops = u32_at(b, 24) as usize;
    let payload_len = u32_at(b, 28) as usize;
    let ops_end = n_ops.checked_mul(OP)?.checked_add(HEADER)?;
    if ops_end.checked_add(payload_len)? > b.len() {
        return None;
    }
    let mut ops = Vec::with_capacity(n_ops);
    for i in 0..n_ops {
        let at = HEADER + i * OP;
        let e = Extent::new(u64_at(b, at + 8), u64_at(b, at + 16));
        ops.push(match b[at] {
            1 => Op::Allocate(e),
            2 => Op::Free(e),
            _ => return None,
        });
    }
    Some(Record {
        seq,
        durable_through: u64_at(b, 32),
        ops,
        payload: b[ops_end..ops_end + payload_len].to_vec(),
    })
}

/// A mirror: a copy of the journal bytes `span_start .. span_start + bytes.len()` (offsets
/// in the area), written after a record, on a 4 KiB boundary of its own, with the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Mirror {
    /// The last record the span holds (the one it was written with).
    pub seq: u64,
    pub span_start: u64,
    pub bytes: Vec<u8>,
}

impl Mirror {
    pub(super) fn covers(&self, at: u64) -> bool {
        self.span_start <= at && at < self.span_start + self.bytes.len() as u64
    }
}

/// Appends to `out` a mirror, written with record `seq`, of `prefix` followed by `out`'s
/// first `record` bytes (the record just encoded there), the span starting at `span_start`
/// in the area. The record is copied once, within `out`.
pub(super) fn append_mirror(
    out: &mut Vec<u8>,
    seq: u64,
    span_start: u64,
    prefix: &[u8],
    record: usize,
) {
    let span = prefix.len() + record;
    let total = (HEADER + span).next_multiple_of(8);
    let at = out.len();
    let mut h = [0u8; HEADER];
    h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    h[4..6].copy_from_slice(&KIND_MIRROR.to_le_bytes());
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    h[16..20].copy_from_slice(&(total as u32).to_le_bytes());
    h[24..32].copy_from_slice(&span_start.to_le_bytes());
    h[32..40].copy_from_slice(&(span as u64).to_le_bytes());
    out.reserve(total);
    out.extend_from_slice(&h);
    out.extend_from_slice(prefix);
    out.extend_from_within(..record);
    out.resize(at + total, 0);
    // The header alone: every record in the span carries its own crc32c, which replay
    // checks as it reads through the mirror.
    let crc = crc32c::crc32c(&out[at..at + HEADER]);
    out[at + 20..at + 24].copy_from_slice(&crc.to_le_bytes());
    // Paired with the reader: the header parses back as written.
    debug_assert_eq!(parse_header(&out[at..]), Some((KIND_MIRROR, seq, total)));
}

/// Decodes a whole mirror (any bytes: never panics). `None` if its header is torn or
/// corrupt; the span's records are checked one by one as replay reads them.
pub(super) fn decode_mirror(b: &[u8]) -> Option<Mirror> {
    let (kind, seq, total) = parse_header(b)?;
    if kind != KIND_MIRROR || b.len() < total {
        return None;
    }
    let mut h = [0u8; HEADER];
    h.copy_from_slice(&b[..HEADER]);
    h[20..24].fill(0);
    if crc32c::crc32c(&h) != u32_at(b, 20) {
        return None;
    }
    let b = &b[..total];
    let span_len = usize::try_from(u64_at(b, 32)).ok()?;
    if HEADER.checked_add(span_len)? > total {
        return None;
    }
    Some(Mirror {
        seq,
        span_start: u64_at(b, 24),
        bytes: b[HEADER..HEADER + span_len].to_vec(),
    })
}
