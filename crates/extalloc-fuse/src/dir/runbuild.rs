//! Writing a directory run (`run.rs` has the format and reads runs back): [`build`] from
//! entries in any order, and [`merge`] of a run on the volume with the changes after it
//! (a viewed directory's compaction: the run's key kept, so its order stands, and no
//! entry is sorted, replayed or held by name), both through a [`Builder`].
//!
//! A merge hands its entry chunks to the caller's writer as they fill (a batch at a time,
//! [`Builder::take_sealed`]), then the index and filter chunks, and the header's chunk
//! last, so its memory is a batch and the run's index and filter, not the run: a crash
//! before the header is written leaves a tail with no run header, a compaction cut short.
//!
//! Data structures: [`Builder`]: the run's bytes after the header's chunk not yet handed
//! over (each entry chunk appended as it fills) and how many were, the entry chunk being
//! filled, each entry chunk's first hash, the filter's bits (sized from the count given up
//! front), the last entry pushed. Invariant: entries come ascending by (hash, name) under
//! the builder's key, distinct, of 1 to `NAME_MAX` bytes, exactly as many as the count
//! given; [`Builder::finish`] and [`Builder::finish_parts`] give a whole run (the debug
//! build of `finish` reads it back). Lock order: none (plain values).

use super::record::{frame, Added, NAME_MAX, RUN};
use super::run::{self, Key, ReadAt, Shape, CHUNK, ENTRY_HEAD, HEAD, INDEX_ITEMS, PAYLOAD};
use super::run::{MAGIC_ENTRIES, MAGIC_FILTER, MAGIC_INDEX};
use super::Changed;
use crate::inode::Kind;
use std::collections::HashSet;

/// Entry chunks a merge reads from the volume at once (1 MiB).
const MERGE_BATCH: u64 = 256;

/// A chunk: head and payload, padded to [`CHUNK`] bytes.
fn chunk(magic: [u8; 4], key: &Key, number: usize, items: usize, payload: &[u8]) -> Vec<u8> {
    debug_assert!(payload.len() <= PAYLOAD && items <= usize::from(u16::MAX));
    let mut c = Vec::with_capacity(CHUNK);
    c.extend_from_slice(&magic);
    c.extend_from_slice(&key.tag());
    c.extend_from_slice(&(number as u32).to_le_bytes());
    c.extend_from_slice(&(items as u16).to_le_bytes());
    c.extend_from_slice(&(payload.len() as u16).to_le_bytes());
    c.extend_from_slice(&[0; 4]);
    c.extend_from_slice(payload);
    c.resize(CHUNK, 0);
    let crc = crc32c::crc32c(&c);
    c[16..20].copy_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(c.len(), HEAD + PAYLOAD);
    c
}

/// A run written entry by entry, in its order (see the module documentation).
pub struct Builder {
    key: Key,
    count: u64,
    /// The run's bytes from `CHUNK + flushed` on (after the header's chunk).
    out: Vec<u8>,
    /// Bytes after the header's chunk handed over by [`Builder::take_sealed`].
    flushed: u64,
    payload: Vec<u8>,
    items: usize,
    firsts: Vec<u64>,
    bits: Vec<u8>,
    filter_bits: u64,
    pushed: u64,
    name_bytes: u64,
    last: Option<(u64, Vec<u8>)>,
}

impl Builder {
    /// A run of `count` entries under `key`.
    pub fn new(key: Key, count: u64) -> Builder {
        let filter_chunks = run::filter_chunks_for(count);
        let filter_bytes = filter_chunks as usize * PAYLOAD;
        Builder {
            key,
            count,
            out: Vec::new(),
            flushed: 0,
            payload: Vec::with_capacity(PAYLOAD),
            items: 0,
            firsts: Vec::new(),
            bits: vec![0; filter_bytes],
            filter_bits: filter_bytes as u64 * 8,
            pushed: 0,
            name_bytes: 0,
            last: None,
        }
    }

    /// Appends the entry `name` (of hash `hash` under the key) naming `ino` of `kind`:
    /// after every entry pushed before it, in (hash, name) order.
    pub fn push(&mut self, hash: u64, name: &[u8], (ino, kind): Added) {
        debug_assert_eq!(self.key.hash(name), hash, "an entry's hash is its name's");
        assert!(
            (1..=NAME_MAX).contains(&name.len())
                && self
                    .last
                    .as_ref()
                    .is_none_or(|(h, n)| (*h, n.as_slice()) < (hash, name)),
            "a run's names are distinct, of 1 to {NAME_MAX} bytes, in order"
        );
        assert!(
            self.pushed < self.count,
            "more entries than the run's count"
        );
        let need = ENTRY_HEAD + name.len();
        if self.items > 0 && self.payload.len() + need > PAYLOAD {
            self.seal();
        }
        if self.items == 0 {
            self.firsts.push(hash);
        }
        self.payload.extend_from_slice(&hash.to_le_bytes());
        self.payload.extend_from_slice(&ino.to_le_bytes());
        self.payload.push(kind.map_or(0, Kind::code));
        self.payload.push(name.len() as u8);
        self.payload.extend_from_slice(name);
        self.items += 1;
        for p in run::probes(hash, self.filter_bits) {
            self.bits[(p / 8) as usize] |= 1 << (p % 8);
        }
        self.pushed += 1;
        self.name_bytes += name.len() as u64;
        match &mut self.last {
            Some((h, n)) => {
                *h = hash;
                n.clear();
                n.extend_from_slice(name);
            }
            None => self.last = Some((hash, name.to_vec())),
        }
    }

    /// Writes the entry chunk being filled.
    fn seal(&mut self) {
        debug_assert!(self.items > 0, "an entry chunk holds an entry");
        let number = self.firsts.len() - 1;
        let c = chunk(MAGIC_ENTRIES, &self.key, number, self.items, &self.payload);
        self.out.extend(c);
        self.payload.clear();
        self.items = 0;
    }

    /// The entry chunks sealed since the last call and their offset in the run, handed over
    /// to be written (the chunk being filled stays, and so does the header's chunk:
    /// [`Builder::finish_parts`] gives it last).
    pub fn take_sealed(&mut self) -> (u64, Vec<u8>) {
        let at = (CHUNK as u64) + self.flushed;
        let bytes = std::mem::take(&mut self.out);
        self.flushed += bytes.len() as u64;
        debug_assert_eq!(bytes.len() % CHUNK, 0, "whole chunks handed over");
        (at, bytes)
    }

    /// The run's last parts: its shape, the header's chunk (at offset 0), and what follows
    /// what [`Builder::take_sealed`] handed over, with its offset (the entry chunks left,
    /// the index and filter chunks).
    pub fn finish_parts(mut self) -> (Shape, Vec<u8>, (u64, Vec<u8>)) {
        assert_eq!(
            self.pushed, self.count,
            "a run holds the entries it counted"
        );
        if self.items > 0 {
            self.seal();
        }
        let shape = Shape {
            key: self.key,
            count: self.count,
            entry_chunks: self.firsts.len() as u32,
            index_chunks: self.firsts.len().div_ceil(INDEX_ITEMS) as u32,
            filter_chunks: run::filter_chunks_for(self.count) as u32,
            name_bytes: self.name_bytes,
        };
        let mut header = frame(RUN, self.count, &shape.body());
        assert!(header.len() <= CHUNK, "a run's header fits its chunk");
        header.resize(CHUNK, 0);
        for (number, part) in self.firsts.chunks(INDEX_ITEMS).enumerate() {
            let payload: Vec<u8> = part.iter().flat_map(|h| h.to_le_bytes()).collect();
            let c = chunk(MAGIC_INDEX, &self.key, number, part.len(), &payload);
            self.out.extend(c);
        }
        for (number, part) in self.bits.chunks(PAYLOAD).enumerate() {
            self.out
                .extend(chunk(MAGIC_FILTER, &self.key, number, 0, part));
        }
        let at = (CHUNK as u64) + self.flushed;
        assert_eq!(
            at + self.out.len() as u64,
            shape.bytes(),
            "a run is as long as its shape says"
        );
        (shape, header, (at, self.out))
    }

    /// The run: its header record and chunks, [`Shape::bytes`] long (nothing handed over by
    /// [`Builder::take_sealed`]).
    pub fn finish(self) -> Vec<u8> {
        assert_eq!(self.flushed, 0, "a run finished whole was not handed over");
        let (shape, mut out, (at, rest)) = self.finish_parts();
        debug_assert_eq!(at, CHUNK as u64);
        out.extend(rest);
        debug_assert!(
            run::read(&shape, &out).whole(),
            "a run built reads back whole"
        );
        out
    }
}

/// Builds the run of `entries` (distinct names of 1 to [`NAME_MAX`] bytes) under `key`:
/// its header record and chunks, [`Shape::bytes`] long.
pub fn build<'a>(entries: impl Iterator<Item = (&'a [u8], Added)>, key: Key) -> Vec<u8> {
    let mut items: Vec<(u64, &[u8], Added)> = entries.map(|(n, a)| (key.hash(n), n, a)).collect();
    items.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let mut b = Builder::new(key, items.len() as u64);
    for (hash, name, added) in items {
        b.push(hash, name, added);
    }
    b.finish()
}

/// Where a merge writes its run: bytes at an offset in the run.
pub type WriteAt<'a> = dyn FnMut(u64, &[u8]) -> Result<(), String> + 'a;

/// Writes through `write` the run that the run `index` describes (its entry chunks read
/// through `read`) and the changes after it (`tail`: each name a record after the run
/// touched, with its entry after them, `None`: removed) replay to, `count` entries, under
/// the same key: the run's entries that no change touched and the changes' entries,
/// merged in (hash, name) order; entry chunks a batch at a time, the header's chunk last
/// (see the module documentation). Returns the new run's shape. An error where an entry
/// chunk cannot be read or does not check, or the entries do not come to `count` (the
/// caller reads the log whole, which says what is wrong); the chunks written before it
/// are no run (no header names them).
///
/// # Errors
/// What `read` or `write` returns, a chunk that does not check, or a count that does not
/// add up.
pub fn merge(
    index: &run::Index,
    (read, write): (&mut ReadAt<'_>, &mut WriteAt<'_>),
    tail: &dyn Changed,
    count: u64,
) -> Result<Shape, String> {
    let key = index.shape.key;
    let mut adds: Vec<(u64, Vec<u8>, Added)> = Vec::new();
    // The hashes of every name a change touched: most of the run's names are not among
    // them, and a set of hashes says so without a look in the changes by name.
    let mut touched: HashSet<u64> = HashSet::new();
    tail.each(&mut |name, state| {
        let hash = key.hash(name);
        touched.insert(hash);
        if let Some(a) = state {
            adds.push((hash, name.to_vec(), a));
        }
    });
    adds.sort_unstable_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let mut b = Builder::new(key, count);
    let mut pushed = 0u64;
    let mut next_add = 0usize;
    let mut prev = None;
    let chunks = u64::from(index.shape.entry_chunks);
    let mut first = 0u64;
    while first < chunks {
        let n = MERGE_BATCH.min(chunks - first);
        let bytes = read(index.at + (1 + first) * CHUNK as u64, n * CHUNK as u64)?;
        for i in 0..n as usize {
            let number = first as usize + i;
            let (p, items) = run::open_chunk(&bytes, i * CHUNK, MAGIC_ENTRIES, &key, number)
                .map_err(|why| format!("entry chunk {number}: {why}"))?;
            let entries = run::chunk_entries(p, items, Some(&key), &mut prev)
                .map_err(|why| format!("entry chunk {number}: {why}"))?;
            for (hash, name, added) in entries {
                if touched.contains(&hash) && tail.state(name).is_some() {
                    continue; // the change's entry, if any, comes from `adds`
                }
                while let Some((h, an, a)) =
                    (adds.get(next_add)).filter(|x| (x.0, x.1.as_slice()) < (hash, name))
                {
                    push_counted(&mut b, &mut pushed, count, (*h, an, *a))?;
                    next_add += 1;
                }
                push_counted(&mut b, &mut pushed, count, (hash, name, added))?;
            }
        }
        first += n;
        let (at, sealed) = b.take_sealed();
        if !sealed.is_empty() {
            write(at, &sealed)?;
        }
    }
    for (h, an, a) in &adds[next_add..] {
        push_counted(&mut b, &mut pushed, count, (*h, an, *a))?;
    }
    if pushed != count {
        return Err(format!(
            "{pushed} entries where the directory counts {count}"
        ));
    }
    let (shape, header, (at, rest)) = b.finish_parts();
    write(at, &rest)?;
    write(0, &header)?;
    Ok(shape)
}

/// Pushes `entry` unless `count` are there already (a count that does not add up: an
/// error, not the builder's assertion).
fn push_counted(
    b: &mut Builder,
    pushed: &mut u64,
    count: u64,
    (hash, name, added): (u64, &[u8], Added),
) -> Result<(), String> {
    if *pushed == count {
        return Err(format!("more entries than the directory counts ({count})"));
    }
    b.push(hash, name, added);
    *pushed += 1;
    Ok(())
}

#[cfg(test)]
#[path = "runbuild_tests.rs"]
mod tests;
