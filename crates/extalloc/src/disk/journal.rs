//! The journal: a circular log of transaction records in the journal area (docs/format.md).
//!
//! A record holds a transaction's allocations and frees and an opaque caller payload, so a
//! file system can commit "file X owns extent E" atomically with "E is used". `append`
//! writes a record after the head; `commit(seq)` returns once the record `seq` is durable,
//! and concurrent committers share one flush (group commit: whoever finds no flush running
//! flushes for everyone appended so far; the others wait for it). Replay reads records from
//! the tail in sequence and stops at the first one that is torn, corrupt or out of sequence.
//!
//! A torn tail and damage in the middle look alike at the point where replay stops; what
//! tells them apart is `durable_through`, the highest sequence number known durable when a
//! record was written. After stopping at record N, replay scans the whole area for intact
//! records with a higher sequence number: one whose `durable_through >= N` proves record N
//! had been committed, so the journal lost committed records ([`Damage`]); one written in
//! the same unflushed batch as N (`durable_through < N`) was never committed either, and
//! the stop is a torn tail.
//!
//! Data structures: [`Journal`] (the writer's head, tail and next sequence number; the flush
//! state: what is durable, whether a flush runs, who waits) and [`Record`] (sequence
//! number, ops, payload). Invariant: records are numbered without gaps from the tail, the
//! bytes between the tail and the head are never overwritten, and the byte after the last
//! record is zeroed so replay stops there.
//!
//! Locks: `writer` and `flush` are never held together; `writer` -> the device's lock (an
//! append writes under it); a flush of the device runs under neither. Committers wait on
//! `flushed` with the `flush` lock.
//!
//! Record (all little-endian, 8-byte aligned, crc32c over the whole record with the crc
//! field zero):
//!
//! ```text
//! 0  u32 magic "XJRN"   4 u16 kind (1 transaction, 2 wrap: continue at the area's start)
//! 6  u16 zero           8 u64 sequence number
//! 16 u32 record bytes  20 u32 crc32c
//! 24 u32 operations    28 u32 payload bytes
//! 32 u64 durable_through: every record up to this one was durable when this was written
//! 40 operations: u8 kind (1 allocate, 2 free), 7 zero bytes, u64 start, u64 len (24 bytes)
//! .. payload, zero padding to 8 bytes
//! ```

use crate::disk::device::Device;
use crate::error::{Error, Result};
use crate::geometry::Extent;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

const MAGIC: u32 = u32::from_le_bytes(*b"XJRN");
const KIND_TXN: u16 = 1;
const KIND_WRAP: u16 = 2;
const HEADER: usize = 40;
const OP: usize = 24;

/// One change recorded in a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Allocate(Extent),
    Free(Extent),
}

/// A committed transaction as replay returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    /// Every record with a sequence number up to this was durable when this one was written.
    pub durable_through: u64,
    pub ops: Vec<Op>,
    pub payload: Vec<u8>,
}

/// Encodes a transaction record.
pub fn encode(seq: u64, durable_through: u64, ops: &[Op], payload: &[u8]) -> Vec<u8> {
    let body = HEADER + ops.len() * OP + payload.len();
    let total = body.next_multiple_of(8);
    let mut b = vec![0u8; total];
    b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    b[4..6].copy_from_slice(&KIND_TXN.to_le_bytes());
    b[8..16].copy_from_slice(&seq.to_le_bytes());
    b[16..20].copy_from_slice(&(total as u32).to_le_bytes());
    b[24..28].copy_from_slice(&(ops.len() as u32).to_le_bytes());
    b[28..32].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    b[32..40].copy_from_slice(&durable_through.to_le_bytes());
    for (i, op) in ops.iter().enumerate() {
        let at = HEADER + i * OP;
        let (kind, e) = match op {
            Op::Allocate(e) => (1u8, e),
            Op::Free(e) => (2u8, e),
        };
        b[at] = kind;
        b[at + 8..at + 16].copy_from_slice(&e.start.to_le_bytes());
        b[at + 16..at + 24].copy_from_slice(&e.len.to_le_bytes());
    }
    b[HEADER + ops.len() * OP..body].copy_from_slice(payload);
    let crc = crc32c::crc32c(&b);
    b[20..24].copy_from_slice(&crc.to_le_bytes());
    b
}

fn wrap_marker(seq: u64) -> [u8; HEADER] {
    let mut b = [0u8; HEADER];
    b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    b[4..6].copy_from_slice(&KIND_WRAP.to_le_bytes());
    b[8..16].copy_from_slice(&seq.to_le_bytes());
    b[16..20].copy_from_slice(&(HEADER as u32).to_le_bytes());
    let crc = crc32c::crc32c(&b);
    b[20..24].copy_from_slice(&crc.to_le_bytes());
    b
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// What a header says, if it is one: (kind, seq, total bytes).
fn parse_header(h: &[u8]) -> Option<(u16, u64, usize)> {
    if h.len() < HEADER || u32_at(h, 0) != MAGIC {
        return None;
    }
    let kind = u16::from_le_bytes([h[4], h[5]]);
    let total = u32_at(h, 16) as usize;
    if total < HEADER || !total.is_multiple_of(8) || !matches!(kind, KIND_TXN | KIND_WRAP) {
        return None;
    }
    Some((kind, u64_at(h, 8), total))
}

/// Decodes a whole record (any bytes: never panics). `None` if torn or corrupt.
pub fn decode(b: &[u8]) -> Option<Record> {
    let (kind, seq, total) = parse_header(b)?;
    if kind != KIND_TXN || b.len() < total {
        return None;
    }
    let b = &b[..total];
    let mut check = b.to_vec();
    check[20..24].fill(0);
    if crc32c::crc32c(&check) != u32_at(b, 20) {
        return None;
    }
    let n_ops = u32_at(b, 24) as usize;
    let payload_len = u32_at(b, 28) as usize;
    let ops_end = n_ops.checked_mul(OP)?.checked_add(HEADER)?;
    if ops_end.checked_add(payload_len)? > total {
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
    pub start: u64,
    pub len: u64,
}

/// The result of a replay: the records, and where writing continues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replayed {
    pub records: Vec<Record>,
    /// Offset (in the area) after the last good record, and the next sequence number.
    pub head: u64,
    pub next_seq: u64,
    /// Committed records lost to damage in the middle of the journal, if any.
    pub damage: Option<Damage>,
}

/// Damage in the middle of the journal: record `lost_seq` at `offset` (in the area) cannot
/// be read, yet intact records written after it had been made durable prove it committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    pub lost_seq: u64,
    pub offset: u64,
    /// The intact records found after the damage (sequence order), which a replay cannot
    /// apply without the lost ones before them.
    pub stranded: Vec<Record>,
}

/// Reads the records from the tail (`tail` offset, expecting `tail_seq`) until one is
/// missing, torn, corrupt or out of sequence.
pub fn replay(dev: &dyn Device, area: Area, tail: u64, tail_seq: u64) -> Result<Replayed> {
    let mut at = tail;
    let mut seq = tail_seq;
    let mut records = Vec::new();
    let mut wrapped = false;
    loop {
        if at + HEADER as u64 > area.len {
            break;
        }
        let mut h = [0u8; HEADER];
        dev.read_at(&mut h, area.start + at)?;
        let Some((kind, s, total)) = parse_header(&h) else {
            break;
        };
        if s != seq || at + total as u64 > area.len {
            break;
        }
        if kind == KIND_WRAP {
            if wrapped
                || crc32c::crc32c(&{
                    let mut c = h;
                    c[20..24].fill(0);
                    c
                }) != u32_at(&h, 20)
            {
                break;
            }
            wrapped = true;
            at = 0;
            continue;
        }
        let mut b = vec![0u8; total];
        dev.read_at(&mut b, area.start + at)?;
        let Some(r) = decode(&b) else {
            break;
        };
        records.push(r);
        at += total as u64;
        seq += 1;
        // A replay never runs past where it started (a full circle).
        if wrapped && at > tail {
            break;
        }
    }
    let damage = find_damage(dev, area, seq, at)?;
    Ok(Replayed {
        records,
        head: at,
        next_seq: seq,
        damage,
    })
}

/// After a replay stopped at `offset` expecting record `lost_seq`: scans the whole area for
/// intact records numbered after it; if one of them was written once `lost_seq` was
/// durable, the stop was damage, not a torn tail.
fn find_damage(dev: &dyn Device, area: Area, lost_seq: u64, offset: u64) -> Result<Option<Damage>> {
    const CHUNK: u64 = 1 << 20;
    let mut later: Vec<Record> = Vec::new();
    let mut chunk = vec![0u8; CHUNK as usize];
    let mut base = 0u64;
    while base < area.len {
        let n = CHUNK.min(area.len - base) as usize;
        dev.read_at(&mut chunk[..n], area.start + base)?;
        let mut i = 0;
        while i + 8 <= n {
            if u32_at(&chunk, i) == MAGIC {
                // Records numbered before the stop (replayed, or of an older lap) need no
                // decoding: the header says so. A header across the chunk's end is read
                // whole.
                let older = i + HEADER <= n
                    && parse_header(&chunk[i..i + HEADER]).is_some_and(|(_, s, _)| s < lost_seq);
                if !older {
                    if let Some(r) = read_record_at(dev, area, base + i as u64)? {
                        if r.seq >= lost_seq {
                            later.push(r);
                        }
                    }
                }
            }
            i += 8;
        }
        base += n as u64;
    }
    if !later.iter().any(|r| r.durable_through >= lost_seq) {
        return Ok(None);
    }
    later.sort_by_key(|r| r.seq);
    later.dedup_by_key(|r| r.seq);
    Ok(Some(Damage {
        lost_seq,
        offset,
        stranded: later,
    }))
}

/// The intact transaction record at `at` (in the area), if there is one.
fn read_record_at(dev: &dyn Device, area: Area, at: u64) -> Result<Option<Record>> {
    if at + HEADER as u64 > area.len {
        return Ok(None);
    }
    let mut h = [0u8; HEADER];
    dev.read_at(&mut h, area.start + at)?;
    let Some((KIND_TXN, _, total)) = parse_header(&h) else {
        return Ok(None);
    };
    if at + total as u64 > area.len {
        return Ok(None);
    }
    let mut b = vec![0u8; total];
    dev.read_at(&mut b, area.start + at)?;
    Ok(decode(&b))
}

struct WriterState {
    head: u64,
    next_seq: u64,
    /// Oldest byte still needed (records not yet checkpointed start here).
    tail: u64,
    /// The head has wrapped past the area's end since the tail was set.
    wrapped: bool,
}

struct FlushState {
    /// Every record with seq <= this is durable.
    durable: u64,
    running: bool,
    flushes: u64,
    /// Records the last flush made durable: those after `last_from`, up to `durable`.
    last_batch: u64,
    last_from: u64,
    /// Committers waiting for a flush.
    waiters: u64,
}

thread_local! {
    /// The sequence number this thread last committed (for the batching estimate).
    static LAST_COMMIT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Appends records and commits them with shared flushes.
pub struct Journal {
    dev: Arc<dyn Device>,
    area: Area,
    writer: Mutex<WriterState>,
    flush: Mutex<FlushState>,
    flushed: Condvar,
    /// `next_seq` of the writer, readable without its lock (for the batching wait).
    appended: AtomicU64,
    /// Every record up to this one is durable (the flush state's `durable`, readable by
    /// `append` without the flush lock); written into each record as `durable_through`.
    durable_seq: AtomicU64,
    /// Moving average of a flush's duration.
    avg_flush_ns: AtomicU64,
}

impl Journal {
    /// A journal that continues after `replayed` (or starts empty at `tail`).
    pub fn new(dev: Arc<dyn Device>, area: Area, tail: u64, replayed: &Replayed) -> Self {
        Journal {
            dev,
            area,
            writer: Mutex::new(WriterState {
                head: replayed.head,
                next_seq: replayed.next_seq,
                tail,
                wrapped: replayed.head < tail,
            }),
            flush: Mutex::new(FlushState {
                durable: replayed.next_seq.saturating_sub(1),
                running: false,
                flushes: 0,
                last_batch: 0,
                last_from: 0,
                waiters: 0,
            }),
            flushed: Condvar::new(),
            appended: AtomicU64::new(replayed.next_seq),
            durable_seq: AtomicU64::new(replayed.next_seq.saturating_sub(1)),
            avg_flush_ns: AtomicU64::new(0),
        }
    }

    /// Writes a record after the head; returns its sequence number. A journal without room
    /// returns `JournalFull` and changes nothing: the caller checkpoints (moves the tail) and
    /// tries again.
    pub fn append(&self, ops: &[Op], payload: &[u8]) -> Result<u64> {
        let mut w = self.writer.lock();
        let durable = self.durable_seq.load(std::sync::atomic::Ordering::Acquire);
        let record = encode(w.next_seq, durable, ops, payload);
        let n = record.len() as u64;
        if n + HEADER as u64 > self.area.len {
            return Err(Error::InvalidRequest(format!(
                "a {n}-byte record does not fit a {}-byte journal",
                self.area.len
            )));
        }
        let mut at = w.head;
        let mut wrap = false;
        if !w.wrapped && at + n + HEADER as u64 > self.area.len {
            // Continue at the start, leaving a marker (there is always room for one). A log
            // that has wrapped already has only the space up to its tail.
            wrap = true;
            at = 0;
        }
        // Room: the bytes up to the tail (after wrapping) must stay untouched.
        let wrapped = w.wrapped || wrap;
        if wrapped && at + n + HEADER as u64 > w.tail {
            return Err(Error::JournalFull { needed: n });
        }
        if wrap {
            self.dev
                .write_at(&wrap_marker(w.next_seq), self.area.start + w.head)?;
        }
        // The byte after the record is zeroed so replay stops there (no stale record).
        let mut out = record;
        out.extend_from_slice(&[0u8; HEADER]);
        self.dev.write_at(&out, self.area.start + at)?;
        w.head = at + n;
        w.wrapped = wrapped;
        let seq = w.next_seq;
        w.next_seq += 1;
        self.appended.store(w.next_seq, Relaxed);
        Ok(seq)
    }

    /// Returns once record `seq` is durable. Committers that arrive while a flush runs wait
    /// for it, and the next flush covers all of them.
    pub fn commit(&self, seq: u64) -> Result<()> {
        let mine = LAST_COMMIT.with(|c| c.replace(seq));
        let mut f = self.flush.lock();
        loop {
            if f.durable >= seq {
                return Ok(());
            }
            if !f.running {
                break;
            }
            f.waiters += 1;
            self.flushed.wait(&mut f);
            f.waiters -= 1;
        }
        f.running = true;
        // The committers the last flush released are likely to commit again at once, and
        // those waiting now already have: wait briefly for them to append, so this flush
        // covers all of them instead of half (jbd2 batches the same way).
        // This thread's previous commit may be one of the last batch: do not count it twice.
        let in_last = u64::from(mine > f.last_from && mine <= f.durable);
        let expect = (f.last_batch + f.waiters + 1).saturating_sub(in_last);
        let durable = f.durable;
        drop(f);
        self.gather(durable, expect);
        // Everything appended before this point is covered by this flush.
        let upto = self.writer.lock().next_seq - 1;
        let started = std::time::Instant::now();
        let result = self.dev.flush();
        let took = started.elapsed().as_nanos() as u64;
        // Average flush time (a moving average over about 8 flushes).
        let avg = self.avg_flush_ns.load(Relaxed);
        self.avg_flush_ns.store(
            if avg == 0 {
                took
            } else {
                avg - avg / 8 + took / 8
            },
            Relaxed,
        );
        let mut f = self.flush.lock();
        f.running = false;
        f.flushes += 1;
        if result.is_ok() {
            f.last_batch = upto.saturating_sub(f.durable);
            f.last_from = f.durable;
            f.durable = f.durable.max(upto);
            self.durable_seq
                .store(f.durable, std::sync::atomic::Ordering::Release);
        }
        self.flushed.notify_all();
        result
    }

    /// The batching wait before a flush: yields until `expect` records wait after `durable`,
    /// for at most half the average flush time, and stops early once no record arrived for
    /// a tenth of it. On a device whose flush costs nothing, this costs nothing.
    fn gather(&self, durable: u64, expect: u64) {
        let avg = self.avg_flush_ns.load(Relaxed);
        if avg < 20_000 || expect <= 1 {
            return;
        }
        let limit = std::time::Duration::from_nanos(avg / 2);
        let quiet = std::time::Duration::from_nanos(avg / 10);
        let started = std::time::Instant::now();
        let mut seen = self.appended.load(Relaxed);
        let mut last_change = started;
        while seen.saturating_sub(1).saturating_sub(durable) < expect {
            let now = std::time::Instant::now();
            if now - started >= limit || now - last_change >= quiet {
                break;
            }
            std::thread::yield_now();
            let next = self.appended.load(Relaxed);
            if next != seen {
                seen = next;
                last_change = std::time::Instant::now();
            }
        }
    }

    /// Moves the tail: records before `tail` (offset in the area) are no longer needed
    /// (their changes are written home). The caller records the tail in the superblock.
    pub fn set_tail(&self, tail: u64) {
        let mut w = self.writer.lock();
        w.tail = tail;
        w.wrapped = w.head < tail;
    }

    /// Empties the journal: the next record goes at the front of the area (a checkpoint
    /// wrote every record home and set the superblock's tail to offset 0).
    pub fn restart(&self) {
        let mut w = self.writer.lock();
        w.head = 0;
        w.tail = 0;
        w.wrapped = false;
    }

    /// The head offset and next sequence number (for a checkpoint that frees everything).
    pub fn head(&self) -> (u64, u64) {
        let w = self.writer.lock();
        (w.head, w.next_seq)
    }

    /// Flushes issued so far.
    pub fn flushes(&self) -> u64 {
        self.flush.lock().flushes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::device::{Crash, FaultDevice, MemDevice};
    use proptest::prelude::*;

    const AREA: Area = Area {
        start: 4096,
        len: 64 << 10,
    };

    fn ops(i: u64) -> Vec<Op> {
        vec![
            Op::Allocate(Extent::new(i * 10, 3)),
            Op::Free(Extent::new(i, 1)),
        ]
    }

    fn empty() -> Replayed {
        Replayed {
            records: Vec::new(),
            head: 0,
            next_seq: 1,
            damage: None,
        }
    }

    #[test]
    fn committed_records_survive_a_crash_and_others_do_not() {
        let dev = Arc::new(FaultDevice::new(MemDevice::new(1 << 20), 5));
        let j = Journal::new(dev.clone(), AREA, 0, &empty());
        for i in 1..=5 {
            let s = j
                .append(&ops(i), format!("payload {i}").as_bytes())
                .unwrap();
            assert_eq!(s, i);
        }
        j.commit(5).unwrap();
        j.append(&ops(6), b"not committed").unwrap();
        dev.crash(Crash::DropAll).unwrap();
        let r = replay(dev.as_ref(), AREA, 0, 1).unwrap();
        assert_eq!(r.records.len(), 5);
        assert_eq!(r.records[4].payload, b"payload 5");
        assert_eq!(r.records[2].ops, ops(3));
        assert_eq!(r.next_seq, 6);
    }

    #[test]
    fn a_torn_or_corrupt_record_ends_replay() {
        for seed in 0..30 {
            let dev = Arc::new(FaultDevice::new(MemDevice::new(1 << 20), seed));
            let j = Journal::new(dev.clone(), AREA, 0, &empty());
            for i in 1..=3 {
                j.append(&ops(i), &[i as u8; 700]).unwrap();
            }
            j.commit(3).unwrap();
            j.append(&ops(4), &[4; 2000]).unwrap();
            dev.crash(Crash::Random {
                keep: 1.0,
                tear: true,
            })
            .unwrap();
            let r = replay(dev.as_ref(), AREA, 0, 1).unwrap();
            assert_eq!(
                r.records.len(),
                3,
                "seed {seed}: the torn record is not replayed"
            );
        }
        let dev = MemDevice::new(1 << 20);
        let dev: Arc<dyn Device> = Arc::new(dev);
        let j = Journal::new(dev.clone(), AREA, 0, &empty());
        let mut offsets = Vec::new();
        for i in 1..=4 {
            offsets.push(j.head().0);
            j.append(&ops(i), b"x").unwrap();
        }
        // Flip one payload byte of record 3.
        let at = AREA.start + offsets[2] + HEADER as u64 + 2 * OP as u64;
        let mut b = [0u8];
        dev.read_at(&mut b, at).unwrap();
        dev.write_at(&[b[0] ^ 1], at).unwrap();
        assert_eq!(replay(dev.as_ref(), AREA, 0, 1).unwrap().records.len(), 2);
    }

    /// After one wrap the only room is up to the tail: a record that does not fit there is
    /// refused instead of wrapping again over live records.
    #[test]
    fn a_wrapped_log_never_wraps_again_over_its_tail() {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(1 << 20));
        let area = Area {
            start: 0,
            len: 4096,
        };
        let j = Journal::new(dev.clone(), area, 0, &empty());
        // Fill most of the area, checkpoint near its end, wrap, then fill up to the tail.
        while j.append(&ops(1), &[0; 100]).is_ok() {}
        let (tail, tail_seq) = j.head();
        j.set_tail(tail);
        let mut appended = 0;
        loop {
            match j.append(&ops(2), &[1; 100]) {
                Ok(_) => appended += 1,
                Err(Error::JournalFull { .. }) => break,
                Err(e) => panic!("{e}"),
            }
            assert!(appended < 1000, "the log never fills");
        }
        let r = replay(dev.as_ref(), area, tail, tail_seq).unwrap();
        assert_eq!(
            r.records.len(),
            appended,
            "every record since the tail replays"
        );
    }

    #[test]
    fn the_log_wraps_and_refuses_to_overrun_its_tail() {
        let dev: Arc<dyn Device> = Arc::new(MemDevice::new(1 << 20));
        let area = Area {
            start: 0,
            len: 4096,
        };
        let j = Journal::new(dev.clone(), area, 0, &empty());
        let mut last = 0;
        loop {
            match j.append(&ops(1), &[0; 300]) {
                Ok(s) => last = s,
                Err(Error::JournalFull { .. }) => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert!(last > 5);
        // A checkpoint frees everything up to the head: the log wraps and goes on.
        let (head, next) = j.head();
        j.set_tail(head);
        let s = j.append(&ops(2), b"after the wrap").unwrap();
        assert_eq!(s, next);
        let r = replay(dev.as_ref(), area, head, next).unwrap();
        assert_eq!(r.records.len(), 1);
        assert_eq!(r.records[0].payload, b"after the wrap");
    }

    /// A device whose flush takes a while, as a disk's does.
    struct SlowFlush(MemDevice);

    impl Device for SlowFlush {
        fn size(&self) -> u64 {
            self.0.size()
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
            self.0.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
            self.0.write_at(buf, offset)
        }
        fn flush(&self) -> Result<()> {
            std::thread::sleep(std::time::Duration::from_micros(300));
            Ok(())
        }
    }

    #[test]
    fn concurrent_committers_share_flushes() {
        let dev: Arc<dyn Device> = Arc::new(SlowFlush(MemDevice::new(4 << 20)));
        let j = Journal::new(
            dev.clone(),
            Area {
                start: 0,
                len: 2 << 20,
            },
            0,
            &empty(),
        );
        let commits = 8 * 200;
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let j = &j;
                s.spawn(move || {
                    for i in 0..200u64 {
                        let seq = j.append(&ops(t * 1000 + i), &[t as u8; 16]).unwrap();
                        j.commit(seq).unwrap();
                    }
                });
            }
        });
        // While one committer flushes, the others queue up behind one shared flush.
        assert!(
            j.flushes() < commits / 2,
            "{} flushes for {commits} commits",
            j.flushes()
        );
        let r = replay(
            dev.as_ref(),
            Area {
                start: 0,
                len: 2 << 20,
            },
            0,
            1,
        )
        .unwrap();
        assert_eq!(r.records.len() as u64, commits);
    }

    proptest! {
        /// Random bytes never panic the decoder, and a record decodes to what was encoded.
        #[test]
        fn records_round_trip_and_garbage_is_refused(
            seq in any::<u64>(),
            durable_through in any::<u64>(),
            exts in prop::collection::vec((any::<bool>(), any::<u64>(), any::<u64>()), 0..20),
            payload in prop::collection::vec(any::<u8>(), 0..200),
            garbage in prop::collection::vec(any::<u8>(), 0..400),
        ) {
            let ops: Vec<Op> = exts
                .iter()
                .map(|&(a, s, l)| if a { Op::Allocate(Extent::new(s, l)) } else { Op::Free(Extent::new(s, l)) })
                .collect();
            let b = encode(seq, durable_through, &ops, &payload);
            prop_assert_eq!(
                decode(&b),
                Some(Record { seq, durable_through, ops, payload })
            );
            let _ = decode(&garbage);
            let mut flipped = b.clone();
            let i = garbage.len() % flipped.len();
            flipped[i] ^= 0x40;
            prop_assert!(decode(&flipped).is_none() || flipped == b);
        }
    }
}
