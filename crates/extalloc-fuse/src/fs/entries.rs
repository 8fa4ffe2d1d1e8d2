//! A directory's entries in memory, packed: what `DirState::entries` holds (`core.rs`).
//!
//! A `BTreeMap` of inline names took 73 bytes an entry (heaptrack of the daemon after 1M
//! creates: 40-byte elements in nodes about two thirds full, and internal nodes), the
//! largest per-file cost of a mount after the writeback cache's. Here an entry takes its
//! name's bytes in one arena, a 16-byte slot and a 4-byte index slot (about 30 bytes for
//! an 8-byte name).
//!
//! Data structures: [`Entries`]: `names`, every live name's bytes end to end (removed
//! names leave dead bytes until a compaction); `slots`, one per entry ([`Slot`]: where its
//! name lies, its inode and its kind's byte, 16 bytes), a removed one free for the next
//! insert (length 0: a name is never empty); `index`, the live slots' numbers by the hash of their name
//! (hashbrown's `HashTable`, with a random seed per directory, so no caller can choose
//! names that collide).
//!
//! Invariant: every live slot is in `index` once, under the hash of its name, and no free
//! slot is; `free` lists exactly the free slots; `dead` counts the arena's bytes no live
//! slot names. Iteration is in slot order (the order names were made, a removed name's
//! slot reused), not in name order: `readdir` promises no order, as ext4's hashed
//! directories give none. Locks: none (the namespace lock, `Fs::ns`, guards them).

use crate::inode::Kind;
use foldhash::fast::RandomState;
use hashbrown::HashTable;
use std::hash::BuildHasher;

/// A directory entry in memory: the inode a name names, and its kind when known, so that
/// `readdir` reads no inode (as ext4's directory entries carry the file type). The log on
/// the volume holds the inode only (`dir.rs`): the kind comes from the call that linked
/// the name, from the mount's scan, or from the inode once a call reads it back; a
/// directory read back from its log (`ondemand.rs`) knows none of its entries' kinds
/// until then, and `readdir` gives those as `DT_UNKNOWN` (as XFS without `ftype` does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) ino: u64,
    pub(crate) kind: Option<Kind>,
}

/// One entry: its name at `names[at .. at + len]`, its inode, and its kind as
/// [`Kind::code`] gives it (0: not known); a free slot has `len` 0. 16 bytes, where an
/// [`Entry`] inside took 24.
#[derive(Debug, Clone, Copy)]
struct Slot {
    ino: u64,
    at: u32,
    len: u8,
    kind: u8,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 16);

impl Slot {
    fn entry(&self) -> Entry {
        Entry {
            ino: self.ino,
            kind: Kind::from_code(self.kind),
        }
    }

    fn set(&mut self, e: Entry) {
        self.ino = e.ino;
        self.kind = e.kind.map_or(0, Kind::code);
        debug_assert_eq!(self.entry(), e, "an entry reads back as set");
    }
}

/// A directory's entries, name to [`Entry`] (see the module documentation).
#[derive(Clone, Default)]
pub(crate) struct Entries {
    names: Vec<u8>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    index: HashTable<u32>,
    dead: usize,
    seed: RandomState,
}

impl Entries {
    fn name_of(&self, s: &Slot) -> &[u8] {
        &self.names[s.at as usize..s.at as usize + s.len as usize]
    }

    fn find(&self, name: &[u8]) -> Option<u32> {
        let hash = self.seed.hash_one(name);
        self.index
            .find(hash, |&i| self.name_of(&self.slots[i as usize]) == name)
            .copied()
    }

    /// Entries.
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// No entry.
    pub(crate) fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The entry of `name`.
    pub(crate) fn get(&self, name: &[u8]) -> Option<Entry> {
        self.find(name).map(|i| self.slots[i as usize].entry())
    }

    /// Sets the kind of `name`'s entry (the name and its inode stay); `false` when there
    /// is no such entry.
    pub(crate) fn set_kind(&mut self, name: &[u8], kind: Option<Kind>) -> bool {
        let Some(i) = self.find(name) else {
            return false;
        };
        let s = &mut self.slots[i as usize];
        s.set(Entry { ino: s.ino, kind });
        true
    }

    /// Is there an entry for `name`?
    pub(crate) fn contains_key(&self, name: &[u8]) -> bool {
        self.find(name).is_some()
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
        if let Some(i) = self.find(name) {
            let s = &mut self.slots[i as usize];
            let was = s.entry();
            s.set(e);
            return Some(was);
        }
        let at = u32::try_from(self.names.len()).expect("a directory's names within 4 GiB");
        grow(&mut self.names, name.len());
        self.names.extend_from_slice(name);
        let mut slot = Slot {
            ino: 0,
            at,
            len: name.len() as u8,
            kind: 0,
        };
        slot.set(e);
        let i = match self.free.pop() {
            Some(i) => {
                debug_assert_eq!(self.slots[i as usize].len, 0, "a free slot");
                self.slots[i as usize] = slot;
                i
            }
            None => {
                grow(&mut self.slots, 1);
                self.slots.push(slot);
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 entries")
            }
        };
        let (seed, names, slots) = (&self.seed, &self.names, &self.slots);
        let hash = seed.hash_one(name);
        self.index.insert_unique(hash, i, |&j| {
            let s = &slots[j as usize];
            seed.hash_one(&names[s.at as usize..s.at as usize + s.len as usize])
        });
        // Found again where it was put.
        debug_assert_eq!(self.find(name), Some(i));
        None
    }

    /// Removes `name`'s entry; returns it.
    pub(crate) fn remove(&mut self, name: &[u8]) -> Option<Entry> {
        let hash = self.seed.hash_one(name);
        let (names, slots) = (&self.names, &self.slots);
        let found = self.index.find_entry(hash, |&i| {
            let s = &slots[i as usize];
            &names[s.at as usize..s.at as usize + s.len as usize] == name
        });
        let i = found.ok()?.remove().0;
        let s = &mut self.slots[i as usize];
        let e = s.entry();
        self.dead += s.len as usize;
        s.len = 0;
        self.free.push(i);
        if self.free.len() > 64 && self.free.len() * 2 > self.slots.len()
            || self.dead > 4096 && self.dead * 2 > self.names.len()
        {
            self.compact();
        }
        debug_assert!(self.find(name).is_none(), "removed");
        Some(e)
    }

    /// Rebuilt from the live entries: no dead bytes, no free slots.
    fn compact(&mut self) {
        let live = self.len();
        let mut out = Entries {
            seed: self.seed.clone(),
            ..Entries::default()
        };
        out.names.reserve(self.names.len() - self.dead);
        out.slots.reserve(live);
        for (name, e) in self.iter() {
            out.insert(name, e);
        }
        *self = out;
        debug_assert!(self.len() == live && self.free.is_empty() && self.dead == 0);
    }

    /// Every entry, in slot order (see the module documentation).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], Entry)> + '_ {
        self.slots
            .iter()
            .filter(|s| s.len > 0)
            .map(|s| (self.name_of(s), s.entry()))
    }

    /// Every name, in slot order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.iter().map(|(n, _)| n)
    }

    /// Every entry's inode and kind, in slot order.
    pub(crate) fn values(&self) -> impl Iterator<Item = Entry> + '_ {
        self.iter().map(|(_, e)| e)
    }

    /// Bytes held (the arena, the slots and the index, by their capacities): for the
    /// tests that bound an entry's cost.
    #[cfg(test)]
    pub(crate) fn heap_bytes(&self) -> usize {
        // The index's buckets: a power of two, at most 7/8 of them used.
        let buckets = (self.index.capacity() * 8 / 7).next_power_of_two();
        self.names.capacity()
            + self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.free.capacity() * 4
            + buckets * (4 + 1)
    }
}

/// Room for `more` items in `v`, grown by a quarter (at least 16) when full instead of
/// doubled: a directory's arrays are most of a mount's memory per file, and doubling
/// left them a third empty on average. Still amortised O(1) per item.
fn grow<T>(v: &mut Vec<T>, more: usize) {
    if v.len() + more > v.capacity() {
        v.reserve_exact((v.len() / 4).max(16).max(more));
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

    /// 10,000 eight-byte names cost under 40 bytes each (the `BTreeMap` took 73, 24-byte
    /// slots about 42).
    #[test]
    fn an_entry_costs_its_name_and_a_slot() {
        let e: Entries = (0..10_000u64)
            .map(|i| format!("f{:07}", 1_000_000 + i).into_bytes())
            .collect::<Vec<_>>()
            .iter()
            .map(|n| (n.as_slice(), entry(1)))
            .collect();
        assert_eq!(e.len(), 10_000);
        let per = e.heap_bytes() / 10_000;
        assert!(per < 40, "{per} bytes an entry");
    }
}
