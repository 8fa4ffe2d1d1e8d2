//! A large directory's entries as one sorted, indexed run (`docs/format.md`, "Directory
//! runs"): what a compaction writes, in place of a reset and an add per entry, once the
//! entries take [`RUN_MIN_BYTES`] as records and the device carries
//! `INCOMPAT_DIR_RUNS`.
//!
//! Data structures: a run is its header record (the log's record shape, `dir/mod.rs`:
//! tag `RUN`, the entry count in place of the inode, a 40-byte body in place of the name:
//! the hash key, 16 bytes, the entry, index and filter chunk counts and a zero, u32 each,
//! and the names' bytes, u64, so a reader knows the entries' size without reading them),
//! zeros to [`CHUNK`] bytes, then its chunks, [`CHUNK`] bytes each, counted from
//! the header's first byte: the entry chunks, the index chunks, the filter chunks. A
//! chunk opens with a 20-byte head: its magic (`XDRE`, `XDRI`, `XDRF`), the key's first
//! four bytes (the run it belongs to), its number among its run's chunks of its kind, its
//! item count (u16), its payload bytes (u16), and the crc32c of the chunk with this last
//! field zero.
//!
//! - An **entry chunk** holds entries ascending by (hash, name) across the whole run:
//!   `hash u64 | ino u64 | kind u8 | name length u8 | name`, the hash SipHash-1-3 of the
//!   name under the run's key (random for each run, so no caller can choose names that
//!   collide); an entry never crosses a chunk.
//! - An **index chunk** holds the first hash of each entry chunk (u64), 509 a chunk: a
//!   lookup finds the one entry chunk that can hold a name from the index alone.
//! - The **filter chunks** hold a Bloom filter of the entries' hashes (10 bits an entry,
//!   7 probes): a lookup of a name that is not there reads no entry chunk 99 times in 100.
//!
//! Invariant: a run is whole when every chunk checks (head, crc, the entries ascending
//! and hashing as their names do), the entries count to the header's count, each index
//! item is its entry chunk's first hash and every entry's probes are set in the filter.
//! `runbuild.rs` writes only whole runs (its debug build reads each back); [`read`] reports a
//! run that is not whole and gives the entries of the chunks that check. What the log
//! makes of a run that is not whole (a compaction cut short, or damage) is `dir/mod.rs`'s.
//! Lock order: none (plain values).

use super::record::{Added, NAME_MAX, RECORD_OVERHEAD, RUN};
use crate::inode::Kind;
use siphasher::sip::SipHasher13;
use std::collections::BTreeMap;
use std::hash::Hasher;

/// Bytes of a run's header and of each of its chunks.
pub const CHUNK: usize = 4096;
/// Bytes of a chunk's head.
pub(super) const HEAD: usize = 20;
/// Bytes after a chunk's head.
pub(super) const PAYLOAD: usize = CHUNK - HEAD;
/// Bytes of the header record's body.
pub(super) const BODY: usize = 40;
/// Bytes of an entry besides its name.
pub(super) const ENTRY_HEAD: usize = 18;
/// First hashes an index chunk holds.
pub(super) const INDEX_ITEMS: usize = PAYLOAD / 8;
/// The Bloom filter's bits an entry, and its probes (about 1 % false positives).
const FILTER_BITS_PER_ENTRY: usize = 10;
const PROBES: u64 = 7;
/// Live entries' bytes as records (`dir::live_bytes`) from which a compaction writes a
/// run: below that, a reset and an add per entry take less room (a run takes at least
/// four chunks).
pub const RUN_MIN_BYTES: u64 = 4 * CHUNK as u64;

pub(super) const MAGIC_ENTRIES: [u8; 4] = *b"XDRE";
pub(super) const MAGIC_INDEX: [u8; 4] = *b"XDRI";
pub(super) const MAGIC_FILTER: [u8; 4] = *b"XDRF";

/// A run's hash key: a name's place in the run is its SipHash-1-3 under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key(pub [u8; 16]);

impl Key {
    /// A key from the kernel's random source (a run's order is then no caller's choice).
    ///
    /// # Errors
    /// The `getrandom` system call's.
    pub fn random() -> std::io::Result<Key> {
        let mut k = [0u8; 16];
        let got = rustix::rand::getrandom(&mut k, rustix::rand::GetRandomFlags::empty())?;
        if got != k.len() {
            return Err(std::io::Error::other("getrandom returned fewer bytes"));
        }
        Ok(Key(k))
    }

    /// The hash of `name` under this key.
    pub fn hash(&self, name: &[u8]) -> u64 {
        let mut h = SipHasher13::new_with_key(&self.0);
        h.write(name);
        h.finish()
    }

    /// The key's first four bytes: every chunk of the run carries them.
    pub(super) fn tag(&self) -> [u8; 4] {
        self.0[..4].try_into().expect("4 bytes")
    }
}

/// A run's shape, as its header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// The hash key.
    pub key: Key,
    /// Entries in the run.
    pub count: u64,
    /// Chunks of entries.
    pub entry_chunks: u32,
    /// Chunks of the index (each entry chunk's first hash).
    pub index_chunks: u32,
    /// Chunks of the filter.
    pub filter_chunks: u32,
    /// Bytes of the entries' names, all told.
    pub name_bytes: u64,
}

/// Filter chunks for `count` entries.
pub(super) fn filter_chunks_for(count: u64) -> u64 {
    (count * FILTER_BITS_PER_ENTRY as u64).div_ceil(PAYLOAD as u64 * 8)
}

impl Shape {
    /// Bytes of the run: the header and every chunk.
    pub fn bytes(&self) -> u64 {
        let chunks = 1
            + u64::from(self.entry_chunks)
            + u64::from(self.index_chunks)
            + u64::from(self.filter_chunks);
        chunks * CHUNK as u64
    }

    /// The header record's body.
    pub(super) fn body(&self) -> [u8; BODY] {
        let mut b = [0u8; BODY];
        b[..16].copy_from_slice(&self.key.0);
        b[16..20].copy_from_slice(&self.entry_chunks.to_le_bytes());
        b[20..24].copy_from_slice(&self.index_chunks.to_le_bytes());
        b[24..28].copy_from_slice(&self.filter_chunks.to_le_bytes());
        b[32..40].copy_from_slice(&self.name_bytes.to_le_bytes());
        b
    }

    /// Bytes the entries take as log records (`dir::live_bytes`): what a reader that
    /// reads no entry chunk knows of them.
    pub fn live_bytes(&self) -> u64 {
        self.count * RECORD_OVERHEAD as u64 + self.name_bytes
    }

    /// The shape a header of `count` entries and body `b` says, if it is one `runbuild::build`
    /// writes: every chunk holds at least one entry and at most a chunk's worth of the
    /// shortest, the index and filter take what the entries need, the names 1 to
    /// [`NAME_MAX`] bytes each, the spare field zero.
    pub(super) fn from_body(count: u64, b: &[u8]) -> Option<Shape> {
        let word = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        if b.len() != BODY || word(28) != 0 {
            return None;
        }
        let s = Shape {
            key: Key(b[..16].try_into().expect("16 bytes")),
            count,
            entry_chunks: word(16),
            index_chunks: word(20),
            filter_chunks: word(24),
            name_bytes: u64::from_le_bytes(b[32..40].try_into().expect("8 bytes")),
        };
        let e = u64::from(s.entry_chunks);
        let fits = (e == 0) == (count == 0)
            && e <= count
            && count <= e * (PAYLOAD / (ENTRY_HEAD + 1)) as u64
            && u64::from(s.index_chunks) == e.div_ceil(INDEX_ITEMS as u64)
            && u64::from(s.filter_chunks) == filter_chunks_for(count)
            && (count..=count.saturating_mul(NAME_MAX as u64)).contains(&s.name_bytes);
        fits.then_some(s)
    }

    /// The shape of the run whose header record starts `b`, if one does (its frame and
    /// crc checking, as the log's parse reads it).
    fn from_header(b: &[u8]) -> Option<Shape> {
        let len = RECORD_OVERHEAD + BODY;
        let frame = b.get(..len)?;
        let word = u64::from_le_bytes(frame[1..9].try_into().expect("8 bytes"));
        let stored = u32::from_le_bytes(frame[len - 4..].try_into().expect("4 bytes"));
        let sound = frame[0] == RUN
            && usize::from(u16::from_le_bytes([frame[9], frame[10]])) == BODY
            && crc32c::crc32c(&frame[..len - 4]) == stored;
        sound.then(|| Shape::from_body(word, &frame[11..11 + BODY]))?
    }
}

/// The filter bits a hash sets (double hashing over `bits`).
pub(super) fn probes(hash: u64, bits: u64) -> impl Iterator<Item = u64> {
    let step = hash.rotate_left(32) | 1;
    (0..PROBES).map(move |i| hash.wrapping_add(i.wrapping_mul(step)) % bits)
}

/// Does the filter `bits` (the filter chunks' payloads, end to end) let `hash` through?
pub fn may_hold(bits: &[u8], hash: u64) -> bool {
    let n = bits.len() as u64 * 8;
    n > 0 && probes(hash, n).all(|p| bits[(p / 8) as usize] & (1 << (p % 8)) != 0)
}

/// Bytes of a run of `count` entries that take `live` bytes as log records, at most
/// (what a compaction checks room for before it builds one).
pub fn max_bytes(count: u64, live: u64) -> u64 {
    // An entry takes 3 bytes more than its record; a chunk wastes less than an entry.
    let entry_bytes = live + 3 * count;
    let e = entry_bytes.div_ceil((PAYLOAD - ENTRY_HEAD - NAME_MAX) as u64);
    let chunks = 1 + e + e.div_ceil(INDEX_ITEMS as u64) + filter_chunks_for(count);
    chunks * CHUNK as u64
}

/// A run read back ([`read`]).
#[derive(Debug, Default)]
pub struct Read {
    /// The entries of the entry chunks that check, in the run's order.
    pub entries: Vec<(Vec<u8>, Added)>,
    /// What did not check, one line a chunk (empty: the run is whole).
    pub problems: Vec<String>,
}

impl Read {
    /// Every chunk checked and the entries count to the header's count.
    pub fn whole(&self) -> bool {
        self.problems.is_empty()
    }
}

/// The payload of chunk `number` of kind `magic` at `at` in `run`, with its item count,
/// or why not.
pub(super) fn open_chunk<'r>(
    run: &'r [u8],
    at: usize,
    magic: [u8; 4],
    key: &Key,
    number: usize,
) -> Result<(&'r [u8], usize), String> {
    let Some(c) = run.get(at..at + CHUNK) else {
        return Err("missing (the run is cut short)".into());
    };
    let word = |i: usize| u32::from_le_bytes(c[i..i + 4].try_into().expect("4 bytes"));
    if c[..4] != magic || c[4..8] != key.tag() || word(8) as usize != number {
        return Err("not this run's chunk".into());
    }
    check_chunk(c)
}

/// The payload of chunk `c` ([`CHUNK`] bytes) with its item count, when its crc and its
/// payload's length check (not its magic, run or number: [`open_chunk`]'s), or why not.
fn check_chunk(c: &[u8]) -> Result<(&[u8], usize), String> {
    debug_assert_eq!(c.len(), CHUNK, "a whole chunk");
    let word = |i: usize| u32::from_le_bytes(c[i..i + 4].try_into().expect("4 bytes"));
    // The crc of the chunk with its crc field zero, without a copy of the chunk.
    let crc = crc32c::crc32c_append(
        crc32c::crc32c_append(crc32c::crc32c(&c[..16]), &[0; 4]),
        &c[20..],
    );
    if crc != word(16) {
        return Err("checksum mismatch".into());
    }
    let items = usize::from(u16::from_le_bytes([c[12], c[13]]));
    let used = usize::from(u16::from_le_bytes([c[14], c[15]]));
    if used > PAYLOAD {
        return Err(format!("{used} payload bytes"));
    }
    Ok((&c[HEAD..HEAD + used], items))
}

/// An entry read from a chunk: its hash, its name (in the chunk's bytes) and what it says.
pub(super) type ChunkEntry<'p> = (u64, &'p [u8], Added);

/// The entries of one entry chunk's payload, each after `prev` (the last one the chunks
/// before gave, which this one's last replaces), or why not; each hashing as its name
/// does under `key` (not checked without one: [`salvage`]).
pub(super) fn chunk_entries<'p>(
    payload: &'p [u8],
    items: usize,
    key: Option<&Key>,
    prev: &mut Option<(u64, Vec<u8>)>,
) -> Result<Vec<ChunkEntry<'p>>, String> {
    let mut out: Vec<ChunkEntry<'p>> = Vec::with_capacity(items);
    let mut at = 0;
    while at < payload.len() {
        let Some(head) = payload.get(at..at + ENTRY_HEAD) else {
            return Err(format!("an entry cut at byte {at}"));
        };
        let hash = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        let ino = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
        let (code, len) = (head[16], usize::from(head[17]));
        let Some(name) = payload.get(at + ENTRY_HEAD..at + ENTRY_HEAD + len) else {
            return Err(format!("an entry cut at byte {at}"));
        };
        let kind = Kind::from_code(code);
        if len == 0 || (code != 0 && kind.is_none()) || key.is_some_and(|k| k.hash(name) != hash) {
            return Err(format!("entry {} does not check", out.len()));
        }
        let before = match out.last() {
            Some(&(h, n, _)) => Some((h, n)),
            None => prev.as_ref().map(|(h, n)| (*h, n.as_slice())),
        };
        if before.is_some_and(|b| b >= (hash, name)) {
            return Err(format!("entry {} out of order", out.len()));
        }
        out.push((hash, name, (ino, kind)));
        at += ENTRY_HEAD + len;
    }
    if out.len() != items {
        return Err(format!("{} entries where the head says {items}", out.len()));
    }
    if let Some(&(h, n, _)) = out.last() {
        *prev = Some((h, n.to_vec()));
    }
    Ok(out)
}

/// The entry of `name` (of hash `hash`) in an entry chunk's payload, which checked its
/// crc: a walk of the entries' heads to the name's hash (the full check of every entry's
/// hash and order is [`read`]'s, which a whole read makes).
fn find_in_chunk(payload: &[u8], hash: u64, name: &[u8]) -> Result<Option<Added>, String> {
    let mut at = 0;
    while at < payload.len() {
        let Some(head) = payload.get(at..at + ENTRY_HEAD) else {
            return Err(format!("an entry cut at byte {at}"));
        };
        let h = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        let len = usize::from(head[17]);
        if h > hash {
            break; // ascending: the name is not here
        }
        if h == hash && payload.get(at + ENTRY_HEAD..at + ENTRY_HEAD + len) == Some(name) {
            let ino = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
            let kind = Kind::from_code(head[16]);
            if head[16] != 0 && kind.is_none() {
                return Err(format!("an entry at byte {at} of no kind"));
            }
            return Ok(Some((ino, kind)));
        }
        at += ENTRY_HEAD + len;
    }
    Ok(None)
}

/// Reads the run of shape `shape` from `run` (its bytes from the header's first, however
/// many are there): the entries of every entry chunk that checks, and what did not.
pub fn read(shape: &Shape, run: &[u8]) -> Read {
    let key = &shape.key;
    let mut r = Read::default();
    let mut prev = None;
    let mut firsts: Vec<Option<u64>> = Vec::with_capacity(shape.entry_chunks as usize);
    let mut hashes = Vec::new();
    for number in 0..shape.entry_chunks as usize {
        let got = open_chunk(run, (1 + number) * CHUNK, MAGIC_ENTRIES, key, number)
            .and_then(|(p, items)| chunk_entries(p, items, Some(key), &mut prev));
        match got {
            Ok(es) if !es.is_empty() => {
                firsts.push(Some(es[0].0));
                for (hash, name, added) in es {
                    hashes.push(hash);
                    r.entries.push((name.to_vec(), added));
                }
            }
            Ok(_) => {
                firsts.push(None);
                r.problems.push(format!("entry chunk {number}: no entries"));
            }
            Err(why) => {
                firsts.push(None);
                r.problems.push(format!("entry chunk {number}: {why}"));
            }
        }
    }
    if r.problems.is_empty() && r.entries.len() as u64 != shape.count {
        let n = r.entries.len();
        r.problems
            .push(format!("{n} entries where the header says {}", shape.count));
    }
    let at = (1 + shape.entry_chunks as usize) * CHUNK;
    for number in 0..shape.index_chunks as usize {
        let got = open_chunk(run, at + number * CHUNK, MAGIC_INDEX, key, number);
        let lo = (number * INDEX_ITEMS).min(firsts.len());
        let want = &firsts[lo..(lo + INDEX_ITEMS).min(firsts.len())];
        let ok = got.is_ok_and(|(p, items)| {
            items == want.len()
                && p.len() == 8 * items
                && (p.chunks(8).zip(want)).all(|(b, f)| f.is_none_or(|f| b == f.to_le_bytes()))
        });
        if !ok {
            r.problems
                .push(format!("index chunk {number} does not check"));
        }
    }
    let at = at + shape.index_chunks as usize * CHUNK;
    let mut bits = Vec::with_capacity(shape.filter_chunks as usize * PAYLOAD);
    for number in 0..shape.filter_chunks as usize {
        match open_chunk(run, at + number * CHUNK, MAGIC_FILTER, key, number) {
            Ok((p, 0)) if p.len() == PAYLOAD => bits.extend_from_slice(p),
            _ => {
                r.problems
                    .push(format!("filter chunk {number} does not check"));
                bits.clear();
                break;
            }
        }
    }
    if !bits.is_empty() && !hashes.iter().all(|&h| may_hold(&bits, h)) {
        r.problems.push("the filter misses an entry".into());
    }
    r
}

/// What [`salvage`] found of a run whose header is lost.
#[derive(Debug, Default)]
pub struct Salvaged {
    /// The entries of the entry chunks that check, in the run's order.
    pub entries: Vec<(Vec<u8>, Added)>,
    /// Entry chunks that checked.
    pub chunks: usize,
}

/// The entries of a run's entry chunks that check in `stretch`, bytes a log's parse steps
/// over (`dir/mod.rs`): where a run's header is damaged, its chunks still name their run
/// and check on their own. From the first entry chunk that checks, each [`CHUNK`] bytes
/// on: a chunk whose crc, head and entries (each well formed, ascending within it) check
/// gives its entries, if it names the run most of them name (a stray chunk of another
/// run, a stale block, gives none). Their hashes cannot be checked (the key is the
/// header's) nor their count (the header's too): a crc over each chunk is what vouches
/// for them, as for every chunk a lookup reads alone.
pub fn salvage(stretch: &[u8]) -> Salvaged {
    let chunk_at = |q: usize| {
        let c = stretch.get(q..q + CHUNK)?;
        let (p, items) = (c[..4] == MAGIC_ENTRIES).then(|| check_chunk(c).ok())??;
        let entries = chunk_entries(p, items, None, &mut None).ok()?;
        Some((c[4..8].to_vec(), entries))
    };
    let mut out = Salvaged::default();
    let last = stretch.len().saturating_sub(CHUNK - 1);
    let Some(first) = (0..last).find(|&q| chunk_at(q).is_some()) else {
        return out;
    };
    let found: Vec<_> = (first..stretch.len())
        .step_by(CHUNK)
        .filter_map(chunk_at)
        .collect();
    let mut runs: BTreeMap<&[u8], usize> = BTreeMap::new();
    for (tag, _) in &found {
        *runs.entry(tag.as_slice()).or_default() += 1;
    }
    let (tag, _) = (runs.into_iter())
        .max_by_key(|&(_, n)| n)
        .expect("the first chunk checked");
    let tag = tag.to_vec();
    for (_, entries) in found.iter().filter(|(t, _)| *t == tag) {
        out.chunks += 1;
        (out.entries).extend(entries.iter().map(|&(_, n, a)| (n.to_vec(), a)));
    }
    debug_assert!(out.chunks > 0, "the most named run has a chunk");
    out
}

/// An entry of a run as a listing reads it ([`Index::chunk`]): its hash, its name, what
/// it says.
pub type ListedEntry = (u64, Vec<u8>, Added);

/// Reads `len` bytes at byte `at` of the directory's file (an I/O error as a message).
pub type ReadAt<'a> = dyn FnMut(u64, u64) -> Result<Vec<u8>, String> + 'a;

/// A run's header, index and filter in memory, its entry chunks left on the volume: what
/// a lookup of one name needs (the filter, then the one chunk the index names), about 1.3
/// bytes an entry.
#[derive(Debug)]
pub struct Index {
    /// The run's shape.
    pub shape: Shape,
    /// Where the run starts in the directory's file.
    pub at: u64,
    /// Each entry chunk's first hash.
    firsts: Vec<u64>,
    /// The filter chunks' payloads, end to end.
    filter: Vec<u8>,
}

impl Index {
    /// The index of the run at byte `at`, where one starts there: its header, index and
    /// filter chunks read (not its entries). `Ok(None)`: no run header there; an error:
    /// a chunk that cannot be read or does not check (the caller reads the log whole,
    /// which says what is wrong with it).
    ///
    /// # Errors
    /// What `read` returns, or the chunk that does not check.
    pub fn open(read: &mut ReadAt<'_>, at: u64) -> Result<Option<Index>, String> {
        let Some(shape) = Shape::from_header(&read(at, CHUNK as u64)?) else {
            return Ok(None);
        };
        let key = &shape.key;
        let from = 1 + u64::from(shape.entry_chunks);
        let chunks = u64::from(shape.index_chunks) + u64::from(shape.filter_chunks);
        let bytes = read(at + from * CHUNK as u64, chunks * CHUNK as u64)?;
        let mut firsts = Vec::with_capacity(shape.entry_chunks as usize);
        for number in 0..shape.index_chunks as usize {
            let (p, items) = open_chunk(&bytes, number * CHUNK, MAGIC_INDEX, key, number)
                .map_err(|why| format!("index chunk {number}: {why}"))?;
            if p.len() != 8 * items {
                return Err(format!(
                    "index chunk {number}: {items} items in {} bytes",
                    p.len()
                ));
            }
            firsts.extend(
                p.chunks(8)
                    .map(|b| u64::from_le_bytes(b.try_into().expect("8"))),
            );
        }
        let base = shape.index_chunks as usize * CHUNK;
        let mut filter = Vec::with_capacity(shape.filter_chunks as usize * PAYLOAD);
        for number in 0..shape.filter_chunks as usize {
            match open_chunk(&bytes, base + number * CHUNK, MAGIC_FILTER, key, number) {
                Ok((p, 0)) if p.len() == PAYLOAD => filter.extend_from_slice(p),
                _ => return Err(format!("filter chunk {number} does not check")),
            }
        }
        if firsts.len() != shape.entry_chunks as usize || !firsts.is_sorted() {
            return Err("the index does not name every entry chunk in order".into());
        }
        Ok(Some(Index {
            shape,
            at,
            firsts,
            filter,
        }))
    }

    /// The entry `name` has in the run, if it has one: the filter first, then each entry
    /// chunk whose hashes can hold the name's (one, unless names of one hash straddle a
    /// chunk's end). An error: a chunk that cannot be read or does not check.
    ///
    /// # Errors
    /// What `read` returns, or the chunk that does not check.
    pub fn lookup(&self, read: &mut ReadAt<'_>, name: &[u8]) -> Result<Option<Added>, String> {
        let key = &self.shape.key;
        let hash = key.hash(name);
        if !may_hold(&self.filter, hash) {
            return Ok(None);
        }
        // The chunks that start at the name's hash, if any, then the last one that
        // starts below it (names of one hash may straddle a chunk's end): one chunk read,
        // unless two names' hashes are the same.
        let lo = self.firsts.partition_point(|&f| f < hash);
        let at_hash = (lo..self.firsts.len()).take_while(|&c| self.firsts[c] == hash);
        for number in at_hash.chain(lo.checked_sub(1)) {
            let bytes = read(self.at + (1 + number as u64) * CHUNK as u64, CHUNK as u64)?;
            let (p, _) = open_chunk(&bytes, 0, MAGIC_ENTRIES, key, number)
                .map_err(|why| format!("entry chunk {number}: {why}"))?;
            if let Some(added) = find_in_chunk(p, hash, name)
                .map_err(|why| format!("entry chunk {number}: {why}"))?
            {
                return Ok(Some(added));
            }
        }
        Ok(None)
    }

    /// The entry chunk a listing from hash `hash` starts in: the last one whose first hash
    /// is below it (names of one hash may straddle a chunk's end), or the first.
    pub fn chunk_for(&self, hash: u64) -> usize {
        self.firsts.partition_point(|&f| f < hash).saturating_sub(1)
    }

    /// The entries of entry chunk `number` (below the run's count of entry chunks), in the
    /// run's order: (hash, name, entry). An error: the chunk cannot be read or does not
    /// check (its head, its crc, each entry's hash and order, its item count).
    ///
    /// # Errors
    /// What `read` returns, or the check that fails.
    pub fn chunk(&self, read: &mut ReadAt<'_>, number: usize) -> Result<Vec<ListedEntry>, String> {
        assert!(
            number < self.firsts.len(),
            "entry chunk {number} of the run"
        );
        let key = &self.shape.key;
        let bytes = read(self.at + (1 + number as u64) * CHUNK as u64, CHUNK as u64)?;
        let entries = open_chunk(&bytes, 0, MAGIC_ENTRIES, key, number)
            .and_then(|(p, items)| chunk_entries(p, items, Some(key), &mut None))
            .map_err(|why| format!("entry chunk {number}: {why}"))?;
        if entries.first().is_some_and(|e| e.0 != self.firsts[number]) {
            return Err(format!("entry chunk {number}: not the index's first hash"));
        }
        Ok((entries.into_iter())
            .map(|(hash, name, added)| (hash, name.to_vec(), added))
            .collect())
    }

    /// Whether the run may hold `name`: false only when its filter rules the name out
    /// (no read; a name the run holds is never ruled out).
    pub fn may_hold(&self, name: &[u8]) -> bool {
        may_hold(&self.filter, self.shape.key.hash(name))
    }

    /// Bytes held in memory.
    pub fn heap_bytes(&self) -> usize {
        self.firsts.capacity() * 8 + self.filter.capacity()
    }
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
