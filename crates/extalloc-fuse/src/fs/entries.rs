//! A directory's entries in memory, packed: what `DirState::entries` holds (`core.rs`).
//!
//! A `BTreeMap` of inline names took 73 bytes an entry (heaptrack of the daemon after 1M
//! creates: 40-byte elements in nodes about two thirds full, and internal nodes), the
//! largest per-file cost of a mount after the writeback cache's; names in an arena with
//! a 16-byte slot each took about 34. Here an entry is one record in an arena, its name
//! inline after a 10-byte head, and a 4-byte index slot: about 28 bytes for an 8-byte
//! name (heaptrack of 2M creates in 1,000 directories: `docs/results.md`, "The daemon's
//! memory at 2M").
//!
//! Data structures: [`Entries`]: `arena`, one record per entry made since the last
//! compaction, end to end (`ino u64 | kind u8 | len u8 | name`, little endian; `kind` is
//! [`Kind::code`]'s byte, 0 when not known, [`DEAD`] once the entry is removed); `index`,
//! the live records' offsets by the hash of their name (hashbrown's `HashTable`, with a
//! random seed per directory, so no caller can choose names that collide).
//!
//! `shelved`: the entries were let go to save memory (`ondemand.rs`, [`Entries::shelve`]):
//! the arena and index are empty, and the count they held is kept to check the read back
//! against; no accessor may be called until the directory's log is read back.
//!
//! **Listing positions** (`listing.rs`): a `readdir` position is a record's offset in the
//! arena, handed to the kernel as a cookie ([`Entries::cookie`]: the offset, `gen`, and
//! check bits keyed by the directory's seed), so an open directory costs no copy of its
//! entries. `listers` counts the open handles of the directory; while there is one the
//! arena is neither compacted nor shelved, so every position handed out stays a record's
//! start (a removed entry's record stays, dead, and is skipped; a new one is appended),
//! up to [`FORCED_DEAD`] bytes of dead records. A compaction bumps `gen`, so a cookie from
//! before it reads as stale (the listing fails with `EIO`), and one a caller made up as
//! the listing's end; a guessed one whose check bits match is walked only from a record
//! the index holds ([`Entries::iter_from`]), never from a place inside a record.
//!
//! Invariant: every live record is in `index` once, under the hash of its name, and no
//! dead one is; `dead` counts the arena's bytes in dead records; a shelved `Entries` holds
//! nothing and is never read (each accessor asserts it). Iteration is in the
//! arena's order (the order names were made since the last compaction), not in name
//! order: `readdir` promises no order, as ext4's hashed directories give none. Locks:
//! none (the namespace lock, `Fs::ns`, guards them).

use crate::inode::Kind;
use foldhash::fast::RandomState;
use hashbrown::HashTable;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// A directory entry in memory: the inode a name names, and its kind when known, so that
/// `readdir` reads no inode (as ext4's directory entries carry the file type). The kind
/// comes from the call that linked the name, from the mount's scan, from the inode once a
/// call reads it back, or from the add record on the volume (`dir/mod.rs`: adds written since
/// the volume carries `INCOMPAT_TYPED_ENTRIES`); an entry whose add carried none (written
/// before that, or by a repair) is not known until a call reads its inode, and `readdir`
/// gives it as `DT_UNKNOWN` (as XFS without `ftype` does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) ino: u64,
    pub(crate) kind: Option<Kind>,
}

/// Bytes of a record before its inode: the head byte and the name's length.
const HEAD: usize = 2;
/// The kind bits of a removed record ([`Kind::code`] never gives them).
const DEAD: u8 = 0x0f;

/// Bytes the little-endian inode `ino` needs, 1 to 8: every inode below 2^24 (a volume's
/// first 16M files) takes 3.
fn width(ino: u64) -> usize {
    (8 - ino.leading_zeros() as usize / 8).max(1)
}

/// The bytes of the record at `at`, whole.
fn size(arena: &[u8], at: usize) -> usize {
    HEAD + (arena[at] >> 4) as usize + arena[at + 1] as usize
}

/// A directory's entries, name to [`Entry`] (see the module documentation).
#[derive(Default)]
pub(crate) struct Entries {
    arena: Vec<u8>,
    index: HashTable<u32>,
    dead: usize,
    seed: RandomState,
    /// Shelved ([`Entries::shelve`]): how many entries were let go.
    shelved: Option<usize>,
    /// Open handles listing the directory (see the module documentation): counted under
    /// the namespace lock held for reading (`opendir`, `releasedir`), read under it held
    /// for writing, so a compaction or a shelving sees a count no one changes.
    listers: AtomicU32,
    /// Compactions so far (wrapping): a listing cookie's generation.
    gen: u16,
}

/// A listing cookie's marks: bit 62 set (no cookie of an entry is 0, 1 or 2, the
/// positions of the start, `.` and `..`), 14 check bits at 48, the generation at 32, the
/// arena offset in the low 32 bits. Below 2^63, as the kernel's `loff_t` needs.
const COOKIE_MARK: u64 = 1 << 62;
const COOKIE_CHECK_BITS: u32 = 14;

/// What a listing cookie names ([`Entries::position`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Position {
    /// A record's start (or the arena's end) in this generation.
    At(usize),
    /// A cookie of an earlier generation: the listing it belongs to was cut short.
    Stale,
    /// Not a cookie the directory gave.
    Unknown,
}

/// Bytes of dead records past which the arena compacts even under open listings
/// ([`Entries::compact_if_due`]; the unit tests' bound is small enough to reach).
const FORCED_DEAD: usize = if cfg!(test) { 64 << 10 } else { 64 << 20 };

/// The record at `at` in `arena`: its name, and its entry (`None`: removed).
fn record(arena: &[u8], at: u32) -> (&[u8], Option<Entry>) {
    let at = at as usize;
    let w = (arena[at] >> 4) as usize;
    let len = arena[at + 1] as usize;
    let name = &arena[at + HEAD + w..at + HEAD + w + len];
    let entry = match arena[at] & 0x0f {
        DEAD => None,
        code => {
            let mut ino = [0u8; 8];
            ino[..w].copy_from_slice(&arena[at + HEAD..at + HEAD + w]);
            Some(Entry {
                ino: u64::from_le_bytes(ino),
                kind: Kind::from_code(code),
            })
        }
    };
    (name, entry)
}

/// Writes `e` into the record at `at`, keeping the record's width; `false` (nothing
/// written) when `e`'s inode needs more bytes than the record holds.
fn set(arena: &mut [u8], at: u32, e: Entry) -> bool {
    let at = at as usize;
    let w = (arena[at] >> 4) as usize;
    if width(e.ino) > w {
        return false;
    }
    arena[at] = (w as u8) << 4 | e.kind.map_or(0, Kind::code);
    arena[at + HEAD..at + HEAD + w].copy_from_slice(&e.ino.to_le_bytes()[..w]);
    debug_assert_eq!(
        record(arena, at as u32).1,
        Some(e),
        "an entry reads back as set"
    );
    true
}

impl Entries {
    /// Every accessor's guard: a shelved directory's entries are read back first.
    fn held(&self) {
        assert!(
            self.shelved.is_none(),
            "a shelved directory's entries used before being read back"
        );
    }

    /// Lets the entries go (their directory's log holds them: `ondemand.rs`), keeping
    /// their count for [`Entries::shelved`]. Returns the bytes given back.
    pub(crate) fn shelve(&mut self) -> usize {
        self.held();
        assert_eq!(self.listers(), 0, "a listed directory's entries shelved");
        let (bytes, count) = (self.heap_bytes(), self.len());
        *self = Entries {
            shelved: Some(count),
            ..Entries::default()
        };
        debug_assert!(self.arena.capacity() == 0 && self.index.capacity() == 0);
        bytes
    }

    /// Entries let go before they were ever read: `count` of them, in a log read back
    /// later (`runlookup.rs`: a directory read back through its run's view).
    pub(crate) fn shelved_with(count: usize) -> Entries {
        let e = Entries {
            shelved: Some(count),
            ..Entries::default()
        };
        debug_assert_eq!(e.shelved(), Some(count));
        e
    }

    /// A shelved directory's count after a change written through its run's view
    /// (`runview.rs`): one more entry (`added`) or one fewer.
    pub(crate) fn shelved_change(&mut self, added: bool) {
        let count = self
            .shelved
            .expect("a change through a view of shelved entries");
        let after = match added {
            true => count + 1,
            false => count.checked_sub(1).expect("a remove of an entry counted"),
        };
        self.shelved = Some(after);
        debug_assert!(
            self.arena.is_empty() && self.index.is_empty(),
            "still shelved"
        );
    }

    /// `Some(count)` when shelved: the count of entries let go.
    pub(crate) fn shelved(&self) -> Option<usize> {
        self.shelved
    }

    fn find(&self, name: &[u8]) -> Option<u32> {
        self.held();
        let hash = self.seed.hash_one(name);
        self.index
            .find(hash, |&at| record(&self.arena, at).0 == name)
            .copied()
    }

    /// Entries.
    pub(crate) fn len(&self) -> usize {
        self.held();
        self.index.len()
    }

    /// No entry.
    pub(crate) fn is_empty(&self) -> bool {
        self.held();
        self.index.is_empty()
    }

    /// The entry of `name`.
    pub(crate) fn get(&self, name: &[u8]) -> Option<Entry> {
        let at = self.find(name)?;
        let e = record(&self.arena, at).1;
        debug_assert!(e.is_some(), "the index names live records only");
        e
    }

    /// Sets the kind of `name`'s entry (the name and its inode stay); `false` when there
    /// is no such entry.
    pub(crate) fn set_kind(&mut self, name: &[u8], kind: Option<Kind>) -> bool {
        let Some(at) = self.find(name) else {
            return false;
        };
        let ino = record(&self.arena, at).1.expect("a live record").ino;
        let fits = set(&mut self.arena, at, Entry { ino, kind });
        assert!(fits, "a record holds its own inode");
        true
    }

    /// Sets `name`'s entry to `e`; returns the one it replaced. `name` is 1 to 255 bytes
    /// (`dir::NAME_MAX`): a directory's names come from calls that checked them, or from
    /// a log whose records hold no other.
    pub(crate) fn insert(&mut self, name: &[u8], e: Entry) -> Option<Entry> {
        assert!(
            !name.is_empty() && name.len() <= crate::dir::NAME_MAX,
            "a name of {} bytes",
            name.len()
        );
        if let Some(at) = self.find(name) {
            let was = record(&self.arena, at).1;
            debug_assert!(was.is_some(), "the index names live records only");
            if !set(&mut self.arena, at, e) {
                // A wider inode than the record holds: the name moves to a new record.
                self.remove(name);
                let none = self.insert(name, e);
                debug_assert!(none.is_none(), "removed just now");
            }
            return was;
        }
        let at = u32::try_from(self.arena.len()).expect("a directory's records within 4 GiB");
        let w = width(e.ino);
        grow(&mut self.arena, HEAD + w + name.len());
        self.arena
            .extend_from_slice(&[(w as u8) << 4, name.len() as u8]);
        self.arena.extend_from_slice(&[0; 8][..w]);
        self.arena.extend_from_slice(name);
        let fits = set(&mut self.arena, at, e);
        debug_assert!(fits, "a record made for its inode");
        let (seed, arena) = (&self.seed, &self.arena);
        let hash = seed.hash_one(name);
        self.index
            .insert_unique(hash, at, |&other| seed.hash_one(record(arena, other).0));
        // Found again where it was put.
        debug_assert_eq!(self.find(name), Some(at));
        None
    }

    /// Removes `name`'s entry; returns it.
    pub(crate) fn remove(&mut self, name: &[u8]) -> Option<Entry> {
        self.held();
        let hash = self.seed.hash_one(name);
        let arena = &self.arena;
        let found = self
            .index
            .find_entry(hash, |&at| record(arena, at).0 == name);
        let at = found.ok()?.remove().0;
        let e = record(&self.arena, at).1;
        debug_assert!(e.is_some(), "the index names live records only");
        self.arena[at as usize] |= DEAD;
        self.dead += size(&self.arena, at as usize);
        self.compact_if_due();
        debug_assert!(self.find(name).is_none(), "removed");
        e
    }

    /// Compacts when dead records are more than half the arena (and over 4 KiB), unless
    /// a handle lists the directory (its positions must stay records' starts).
    ///
    /// Past [`FORCED_DEAD`] bytes of dead records it compacts even so, so that a handle
    /// held open while names come and go cannot grow the arena without bound: the
    /// positions the open handles hold are then of the previous generation, and their
    /// listings fail with `EIO` from there (said in the log).
    fn compact_if_due(&mut self) {
        if !self.compaction_due() {
            return;
        }
        let listers = self.listers();
        if listers > 0 {
            if self.dead <= FORCED_DEAD {
                return;
            }
            log::warn!(
                "a directory's entries compacted under {} open listings ({} bytes of \
                 removed entries kept for them): reading on, those listings get EIO",
                listers,
                self.dead
            );
        }
        self.compact();
        debug_assert_eq!(self.dead, 0, "a compaction leaves no dead record");
    }

    /// Rebuilt from the live entries: no dead records, the next generation of cookies
    /// (the open listings stay counted).
    fn compact(&mut self) {
        let live = self.len();
        let mut out = Entries {
            seed: self.seed.clone(),
            gen: self.gen.wrapping_add(1),
            listers: AtomicU32::new(self.listers()),
            ..Entries::default()
        };
        out.arena.reserve_exact(self.arena.len() - self.dead);
        out.index.reserve(live, |_| 0);
        for (name, e) in self.iter() {
            out.insert(name, e);
        }
        *self = out;
        debug_assert!(self.len() == live && self.dead == 0);
    }

    /// A handle opened a listing of the directory: positions stay until it closes
    /// ([`Entries::close_lister`]). Takes `&self`: `opendir` holds the namespace lock
    /// for reading only.
    pub(crate) fn open_lister(&self) {
        assert!(
            self.shelved.is_none(),
            "a shelved directory listed before being read back"
        );
        let before = self.listers.fetch_add(1, Relaxed);
        assert!(before < u32::MAX, "listers of one directory overflowed");
    }

    /// A handle's listing closed (the namespace lock held for reading: `releasedir`).
    /// True when it was the last one and a compaction waited for it: the caller then
    /// runs [`Entries::compact_waiting`] under the lock held for writing.
    #[must_use]
    pub(crate) fn close_lister(&self) -> bool {
        self.held();
        let before = self.listers.fetch_sub(1, Relaxed);
        assert!(before > 0, "a listing closed that was never opened");
        before == 1 && self.compaction_due()
    }

    /// Runs a compaction that waited for the last listing to close, if it is still due
    /// (the namespace lock held for writing: no lister can come or go meanwhile).
    pub(crate) fn compact_waiting(&mut self) {
        self.held();
        self.compact_if_due();
        // Compacted unless a listing opened before the lock was taken (it waits again).
        debug_assert!(
            self.listers() > 0 || !self.compaction_due(),
            "a compaction that waited left due"
        );
    }

    /// Open handles listing the directory.
    pub(crate) fn listers(&self) -> u32 {
        self.listers.load(Relaxed)
    }

    /// Dead records are more than half the arena and over 4 KiB.
    fn compaction_due(&self) -> bool {
        self.dead > 4096 && self.dead * 2 > self.arena.len()
    }

    /// The check bits of a cookie for arena offset `pos` in generation `gen`.
    fn check(&self, gen: u16, pos: u32) -> u64 {
        self.seed.hash_one((gen, pos)) >> (64 - COOKIE_CHECK_BITS)
    }

    /// The listing cookie of arena offset `pos` (a record's start, or the arena's end).
    pub(crate) fn cookie(&self, pos: usize) -> u64 {
        let pos = u32::try_from(pos).expect("a directory's records within 4 GiB");
        debug_assert!(
            pos as usize <= self.arena.len(),
            "a cookie inside the arena"
        );
        let c = COOKIE_MARK | self.check(self.gen, pos) << 48 | u64::from(self.gen) << 32;
        c | u64::from(pos)
    }

    /// The arena offset `cookie` names, if it is one [`Entries::cookie`] gave in this
    /// generation; [`Position::Stale`] for one it gave in an earlier generation (a
    /// compaction forced under open listings came between); [`Position::Unknown`] for
    /// any other value.
    pub(crate) fn position(&self, cookie: u64) -> Position {
        let pos = cookie as u32;
        let gen = (cookie >> 32) as u16;
        let marked = cookie & !((1 << (48 + COOKIE_CHECK_BITS)) - 1) == COOKIE_MARK;
        let checks = (cookie >> 48) & ((1 << COOKIE_CHECK_BITS) - 1) == self.check(gen, pos);
        match (marked && checks, gen == self.gen) {
            (true, true) if pos as usize <= self.arena.len() => Position::At(pos as usize),
            (true, false) => Position::Stale,
            _ => Position::Unknown,
        }
    }

    /// The live entries from arena offset `from` on, each with its record's offset and
    /// the offset after it. `from` comes from [`Entries::position`], so it is a record's
    /// start unless a caller guessed a cookie's check bits: until a live record is found
    /// to be the index's own for its name, each one is checked so (a guessed position
    /// inside a record finds none and ends the walk, a record that does not hold together
    /// ends it too), and from the first that is, the walk is on records' starts.
    pub(crate) fn iter_from(
        &self,
        from: usize,
    ) -> impl Iterator<Item = (usize, usize, &[u8], Entry)> + '_ {
        self.held();
        let mut at = from;
        let mut aligned = from == 0;
        std::iter::from_fn(move || loop {
            let a = &self.arena;
            if at + HEAD > a.len() {
                return None;
            }
            let (w, code) = ((a[at] >> 4) as usize, a[at] & 0x0f);
            let sound = (1..=8).contains(&w)
                && (code == DEAD || code == 0 || Kind::from_code(code).is_some())
                && a[at + 1] > 0
                && at + size(a, at) <= a.len();
            if !sound {
                return None;
            }
            let here = at;
            at += size(a, at);
            if let (name, Some(e)) = record(a, here as u32) {
                if !aligned && self.find(name) != Some(here as u32) {
                    return None; // not a record the directory holds
                }
                aligned = true;
                return Some((here, at, name, e));
            }
        })
    }

    /// Every entry, in the arena's order (see the module documentation).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], Entry)> + '_ {
        self.held();
        let mut at = 0usize;
        std::iter::from_fn(move || loop {
            if at >= self.arena.len() {
                return None;
            }
            let (name, e) = record(&self.arena, at as u32);
            at += size(&self.arena, at);
            if let Some(e) = e {
                return Some((name, e));
            }
        })
    }

    /// Every name, in the arena's order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.iter().map(|(n, _)| n)
    }

    /// Every entry's inode and kind, in the arena's order.
    pub(crate) fn values(&self) -> impl Iterator<Item = Entry> + '_ {
        self.iter().map(|(_, e)| e)
    }

    /// Bytes held (the arena and the index, by their capacities): what shelving gives
    /// back, and the tests' bound on an entry's cost.
    pub(crate) fn heap_bytes(&self) -> usize {
        // The index's buckets: a power of two, at most 7/8 of them used.
        let buckets = match self.index.capacity() {
            0 => 0,
            c => (c * 8 / 7).next_power_of_two(),
        };
        self.arena.capacity() + buckets * (4 + 1)
    }
}

/// Room for `more` bytes in `v`, grown by a quarter (at least 256) when full instead of
/// doubled: a directory's arena is most of a mount's memory per file, and doubling left it
/// a third empty on average. Still amortised O(1) per byte.
fn grow(v: &mut Vec<u8>, more: usize) {
    if v.len() + more > v.capacity() {
        v.reserve_exact((v.len() / 4).max(256).max(more));
    }
    debug_assert!(v.capacity() >= v.len() + more);
}

impl<'a> IntoIterator for &'a Entries {
    type Item = (&'a [u8], Entry);
    type IntoIter = Box<dyn Iterator<Item = (&'a [u8], Entry)> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl<'a> FromIterator<(&'a [u8], Entry)> for Entries {
    fn from_iter<I: IntoIterator<Item = (&'a [u8], Entry)>>(iter: I) -> Entries {
        let mut out = Entries::default();
        for (name, e) in iter {
            out.insert(name, e);
        }
        out
    }
}

impl std::fmt::Debug for Entries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(count) = self.shelved {
            return write!(f, "<{count} entries shelved>");
        }
        f.debug_map()
            .entries(self.iter().map(|(n, e)| (String::from_utf8_lossy(n), e)))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn entry(ino: u64) -> Entry {
        Entry {
            ino,
            kind: ino.is_multiple_of(3).then_some(Kind::File),
        }
    }

    /// Random inserts, replaces and removes against a `BTreeMap`: the same entries, every
    /// name found or not as the model says, through compactions.
    #[test]
    fn entries_hold_what_a_map_holds() {
        let mut model: BTreeMap<Vec<u8>, Entry> = BTreeMap::new();
        let mut e = Entries::default();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..60_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = x % 3000;
            let name = match n % 7 {
                0 => vec![b'x'; 1 + (n as usize % 255)],
                _ => format!("f{n}").into_bytes(),
            };
            if x % 5 < 3 {
                assert_eq!(
                    e.insert(&name, entry(step)),
                    model.insert(name.clone(), entry(step))
                );
            } else {
                assert_eq!(e.remove(&name), model.remove(&name));
            }
            assert_eq!(e.get(&name), model.get(&name).copied());
            assert_eq!(e.len(), model.len());
        }
        let got: BTreeMap<Vec<u8>, Entry> = e.iter().map(|(n, v)| (n.to_vec(), v)).collect();
        assert_eq!(got, model);
        for (n, v) in &model {
            assert_eq!(e.get(n), Some(*v));
        }
        while let Some(n) = model.keys().next().cloned() {
            assert!(e.remove(&n).is_some());
            model.remove(&n);
        }
        assert!(e.is_empty() && e.iter().next().is_none());
    }

    /// 10,000 eight-byte names of inodes near 10M cost under 25 bytes each (the
    /// `BTreeMap` took 73, 24-byte slots about 42, 16-byte slots about 34, records with a
    /// `u64` inode about 28).
    #[test]
    fn an_entry_costs_its_name_and_a_slot() {
        let names: Vec<Vec<u8>> = (0..10_000u64)
            .map(|i| format!("f{:07}", 1_000_000 + i).into_bytes())
            .collect();
        let e: Entries = names
            .iter()
            .zip(10_000_000u64..)
            .map(|(n, ino)| (n.as_slice(), entry(ino)))
            .collect();
        assert_eq!(e.len(), 10_000);
        let per = e.heap_bytes() / 10_000;
        assert!(per < 25, "{per} bytes an entry");
    }

    /// An inode of any width, 1 to 8 bytes, reads back as written, and replacing an
    /// entry's inode with a wider one moves the name to a record that holds it.
    #[test]
    fn inodes_of_every_width_read_back() {
        let mut e = Entries::default();
        let inos: Vec<u64> = (0..64).map(|b| 1u64 << b).chain([0, u64::MAX]).collect();
        for (i, &ino) in inos.iter().enumerate() {
            let name = format!("n{i}").into_bytes();
            assert_eq!(e.insert(&name, entry(ino)), None);
            assert_eq!(e.get(&name), Some(entry(ino)));
        }
        // Every name's inode widened to eight bytes, then narrowed again.
        for (i, &ino) in inos.iter().enumerate() {
            let name = format!("n{i}").into_bytes();
            assert_eq!(e.insert(&name, entry(u64::MAX - 1)), Some(entry(ino)));
            assert_eq!(e.insert(&name, entry(ino)), Some(entry(u64::MAX - 1)));
            assert_eq!(e.get(&name), Some(entry(ino)));
        }
        assert_eq!(e.len(), inos.len());
        assert_eq!(e.iter().count(), inos.len());
    }

    /// A listing's cookies name records through churn while a handle is open (no
    /// compaction, where one would come after about a thousand steps here), past
    /// `FORCED_DEAD` bytes of dead records the arena compacts anyway and the old cookies
    /// read as stale; a made-up cookie names nothing, and a walk from a guessed place
    /// inside a record lists only records the directory holds.
    #[test]
    fn cookies_hold_until_a_forced_compaction() {
        let mut e = Entries::default();
        let name = |i: u32| format!("name-{i:06}").into_bytes();
        for i in 0..1_000 {
            e.insert(&name(i), entry(u64::from(i) + 1));
        }
        e.open_lister();
        let mid = e.iter_from(0).nth(500).unwrap().0;
        let cookie = e.cookie(mid);
        assert_eq!(e.position(cookie), Position::At(mid));
        assert_eq!(
            e.position(cookie ^ 1 << 50),
            Position::Unknown,
            "check bits"
        );
        assert_eq!(
            e.position(cookie + (1 << 32)),
            Position::Unknown,
            "another generation"
        );
        // A guessed cookie with the right check bits for a place inside a record: the walk
        // from it lists no record the directory does not hold.
        let inside = mid + 3;
        let guessed = COOKIE_MARK | e.check(e.gen, inside as u32) << 48 | inside as u64;
        assert_eq!(e.position(guessed), Position::At(inside));
        for (at, _, name, _) in e.iter_from(inside) {
            assert_eq!(e.find(name), Some(at as u32), "a record the index holds");
        }
        let mut steps = 0u32;
        while e.position(cookie) == Position::At(mid) {
            assert!(e.remove(&name(steps)).is_some());
            e.insert(&name(1_000 + steps), entry(u64::from(steps) + 2_000));
            steps += 1;
            assert!(steps < 100_000, "never compacted");
        }
        assert_eq!(
            e.position(cookie),
            Position::Stale,
            "a cookie of the listing cut short"
        );
        // A record is 16 bytes: compacted only past the bound.
        assert!(
            steps as usize * 16 > FORCED_DEAD,
            "compacted after {steps} steps"
        );
        assert_eq!(
            (e.len(), e.listers()),
            (1_000, 1),
            "the open listing stays counted"
        );
        assert!(!e.close_lister(), "compacted already: nothing waits");
        // A position inside the first record: no record the index holds starts the walk.
        assert_eq!(e.iter_from(1).count(), 0);
    }

    /// Removals under two open listings leave their dead records; the first close says
    /// nothing waits (one listing is still open), the last says a compaction waited, and
    /// `compact_waiting` runs it: no dead record, the next generation, the same entries.
    #[test]
    fn a_compaction_waits_for_the_last_listing_to_close() {
        let mut e = Entries::default();
        let name = |i: u32| format!("name-{i:06}").into_bytes();
        for i in 0..1_000 {
            e.insert(&name(i), entry(u64::from(i) + 1));
        }
        e.open_lister();
        e.open_lister();
        for i in 0..800 {
            assert!(e.remove(&name(i)).is_some());
        }
        assert!(
            e.dead > 4096 && e.dead * 2 > e.arena.len(),
            "due: {}",
            e.dead
        );
        let gen = e.gen;
        assert_eq!(e.gen, gen, "not compacted under open listings");
        assert!(!e.close_lister(), "one listing is still open");
        assert!(e.close_lister(), "the last close finds the compaction due");
        assert_eq!(e.listers(), 0);
        e.compact_waiting();
        assert_eq!((e.dead, e.gen, e.len()), (0, gen.wrapping_add(1), 200));
        for i in 800..1_000 {
            assert!(e.find(&name(i)).is_some(), "entry {i} kept");
        }
        e.open_lister();
        assert!(!e.close_lister(), "nothing dead: nothing waits");
    }
}
