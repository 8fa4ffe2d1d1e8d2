//! Replay: reading the records from the tail, repairing a damaged tail from its mirror, and
//! telling damage in the middle from a torn tail.
//!
//! Data structures: an `Overlay` (a mirror's bytes laid over the area while replay reads
//! it). Invariant: replay returns records in sequence from the tail, each intact (read from
//! the area, or from a mirror written with a record at least as new); it never returns a
//! record that was not written whole. Locks: none (it reads a device no journal writes).

use super::record::{
    decode, decode_mirror, parse_header, u32_at, Mirror, HEADER, KIND_MIRROR, KIND_TXN, KIND_WRAP,
    MAGIC,
};
use super::types::{block_start, Area, Damage, Recent, Record, Replayed};
use crate::disk::device::Device;
use crate::error::Result;

/// Reads `buf.len()` bytes at `at` (in the area), with `overlay`'s bytes in place of the
/// area's where it covers them.
fn read(
    dev: &dyn Device,
    area: Area,
    overlay: Option<&Mirror>,
    buf: &mut [u8],
    at: u64,
) -> Result<()> {
    debug_assert!(
        at + buf.len() as u64 <= area.len,
        "a read past the journal area"
    );
    dev.read_at(buf, area.start + at)?;
    if let Some(m) = overlay {
        let (from, to) = (
            at.max(m.span_start),
            (at + buf.len() as u64).min(m.span_start + m.bytes.len() as u64),
        );
        if from < to {
            buf[(from - at) as usize..(to - at) as usize].copy_from_slice(
                &m.bytes[(from - m.span_start) as usize..(to - m.span_start) as usize],
            );
        }
    }
    Ok(())
}

/// Where a pass of [`replay`] stopped.
struct Stop {
    at: u64,
    seq: u64,
    wrapped: bool,
}

/// Reads the records from the tail (`tail` offset, expecting `tail_seq`) until one is
/// missing, torn, corrupt or out of sequence.
///
/// Where it stops, a mirror written with a record numbered at least the missing one that
/// covers the stop (a damaged last block: no later record vouches for it) supplies the
/// bytes, and the records go on from there.
pub fn replay(dev: &dyn Device, area: Area, tail: u64, tail_seq: u64) -> Result<Replayed> {
    let mut records = Vec::new();
    let mut stop = Stop {
        at: tail,
        seq: tail_seq,
        wrapped: false,
    };
    let mut overlay: Option<Mirror> = None;
    // Mirrors tried as overlays: a mirror's crc32c covers only its header, so one whose
    // span is damaged gets the replay no further, and an older one may (its records are
    // checked one by one).
    let mut tried: Vec<(u64, u64)> = Vec::new();
    loop {
        stop = read_records(dev, area, overlay.as_ref(), tail, stop, &mut records)?;
        let (mirrors, later) = scan(dev, area, stop.seq)?;
        let next = mirrors
            .into_iter()
            .filter(|m| m.covers(stop.at) && !tried.contains(&(m.seq, m.span_start)))
            .max_by_key(|m| m.seq);
        match next {
            Some(m) => {
                tried.push((m.seq, m.span_start));
                overlay = Some(m);
            }
            None => {
                let recent = recent(dev, area, overlay.as_ref(), stop.at, &records)?;
                return Ok(Replayed {
                    records: records.into_iter().map(|(r, _)| r).collect(),
                    head: stop.at,
                    next_seq: stop.seq,
                    damage: damage(later, stop.seq, stop.at),
                    recent,
                });
            }
        }
    }
}

/// The bytes of the records before `head` from the one holding the start of `head`'s
/// 4 KiB block (see [`Recent`]), read through `overlay`. `records` are the replayed ones
/// with their offsets.
fn recent(
    dev: &dyn Device,
    area: Area,
    overlay: Option<&Mirror>,
    head: u64,
    records: &[(Record, u64)],
) -> Result<Recent> {
    let block = block_start(area, head);
    // Records after a wrap lie before the head; the ones before it, after the head.
    let kept: Vec<(u64, u64)> = records
        .iter()
        .map(|(r, at)| (r.seq, *at))
        .filter(|&(_, at)| at < head)
        .collect();
    let first = kept
        .iter()
        .rposition(|&(_, at)| at <= block)
        .or_else(|| kept.iter().position(|&(_, at)| at >= block))
        .unwrap_or(kept.len());
    let kept = kept[first..].to_vec();
    let start = kept.first().map_or(head, |&(_, at)| at);
    let mut bytes = vec![0u8; (head - start) as usize];
    read(dev, area, overlay, &mut bytes, start)?;
    Ok(Recent {
        start,
        bytes,
        records: kept,
    })
}

/// Reads records in sequence from `stop` (through `overlay`) into `records` until one is
/// missing, torn, corrupt or out of sequence; returns where.
fn read_records(
    dev: &dyn Device,
    area: Area,
    overlay: Option<&Mirror>,
    tail: u64,
    stop: Stop,
    records: &mut Vec<(Record, u64)>,
) -> Result<Stop> {
    let Stop {
        mut at,
        mut seq,
        mut wrapped,
    } = stop;
    loop {
        if at + HEADER as u64 > area.len {
            break;
        }
        let mut h = [0u8; HEADER];
        read(dev, area, overlay, &mut h, at)?;
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
        read(dev, area, overlay, &mut b, at)?;
        let Some(r) = decode(&b) else {
            break;
        };
        debug_assert_eq!(r.seq, seq, "a record out of sequence");
        records.push((r, at));
        at += total as u64;
        seq += 1;
        // A replay never runs past where it started (a full circle).
        if wrapped && at > tail {
            break;
        }
    }
    Ok(Stop { at, seq, wrapped })
}

/// After a replay stopped expecting record `lost_seq`: reads the whole area once for the
/// mirrors written with a record numbered `lost_seq` or later (their headers intact), and
/// the intact records numbered `lost_seq` or later (for [`damage`]).
fn scan(dev: &dyn Device, area: Area, lost_seq: u64) -> Result<(Vec<Mirror>, Vec<Record>)> {
    const CHUNK: u64 = 1 << 20;
    let mut later: Vec<Record> = Vec::new();
    let mut mirrors: Vec<Mirror> = Vec::new();
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
                let header = (i + HEADER <= n)
                    .then(|| parse_header(&chunk[i..i + HEADER]))
                    .flatten();
                let older = header.is_some_and(|(_, s, _)| s < lost_seq);
                if !older {
                    let at = base + i as u64;
                    if header.is_none_or(|(k, _, _)| k == KIND_MIRROR) {
                        if let Some(m) = read_mirror_at(dev, area, at)? {
                            if m.seq >= lost_seq {
                                mirrors.push(m);
                            }
                        }
                    }
                    if let Some(r) = read_record_at(dev, area, at)? {
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
    Ok((mirrors, later))
}

/// The stop at `offset` expecting `lost_seq` was damage, not a torn tail, if one of the
/// intact `later` records was written once `lost_seq` was durable.
fn damage(mut later: Vec<Record>, lost_seq: u64, offset: u64) -> Option<Damage> {
    if !later.iter().any(|r| r.durable_through >= lost_seq) {
        return None;
    }
    later.sort_by_key(|r| r.seq);
    later.dedup_by_key(|r| r.seq);
    Some(Damage {
        lost_seq,
        offset,
        stranded: later,
    })
}

/// The intact mirror at `at` (in the area), if there is one.
fn read_mirror_at(dev: &dyn Device, area: Area, at: u64) -> Result<Option<Mirror>> {
    Ok(read_kind_at(dev, area, at, KIND_MIRROR)?.and_then(|b| decode_mirror(&b)))
}

/// The intact transaction record at `at` (in the area), if there is one.
fn read_record_at(dev: &dyn Device, area: Area, at: u64) -> Result<Option<Record>> {
    Ok(read_kind_at(dev, area, at, KIND_TXN)?.and_then(|b| decode(&b)))
}

/// The bytes of the `kind` record at `at` (in the area), as long as its header says, if
/// its header says `kind` and it lies in the area.
fn read_kind_at(dev: &dyn Device, area: Area, at: u64, kind: u16) -> Result<Option<Vec<u8>>> {
    if at + HEADER as u64 > area.len {
        return Ok(None);
    }
    let mut h = [0u8; HEADER];
    dev.read_at(&mut h, area.start + at)?;
    match parse_header(&h) {
        Some((k, _, total)) if k == kind && at + total as u64 <= area.len => {
            let mut b = vec![0u8; total];
            dev.read_at(&mut b, area.start + at)?;
            Ok(Some(b))
        }
        _ => Ok(None),
    }
}
