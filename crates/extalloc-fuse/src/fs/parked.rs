//! The kernel's references to inodes whose node was dropped from memory while only those
//! references held it ([`Parked`]; `ondemand.rs`, `Fs::trim_nodes`).
//!
//! After a create storm the kernel holds a reference to every inode made, one lookup
//! each, and forgets them only when it evicts the inodes. A map of counts cost 17 bytes a
//! bucket (285 MB at 10M files); almost every count is 1, and inode numbers come in runs.
//!
//! Data structures: `ones`, a compressed bitmap (roaring) of the inodes whose count is 1,
//! a few bits an inode where numbers come in runs; `more`, a map of the counts above 1.
//!
//! Invariant: an inode is in at most one of the two, and every count kept is above 0 (a
//! count that reaches 0 leaves at once). `len` is the number of inodes kept.
//!
//! Lock order: [`super::core::Ns`] holds a `Parked` under its own mutex, taken under the
//! namespace lock (a forget holds it for reading; parking and taking back hold it for
//! writing and reach the `Parked` without the mutex). Nothing is locked under it.

use roaring::RoaringTreemap;
use std::collections::HashMap;

/// Counts by inode number (as `core::InoMap`, named here so this leaf imports nothing of
/// `fs/`).
type InoMap<V> = HashMap<u64, V, foldhash::fast::RandomState>;

/// The parked lookup counts (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct Parked {
    ones: RoaringTreemap,
    more: InoMap<u64>,
}

impl Parked {
    /// Parks `n` (above 0) references to `ino`, which holds none parked.
    pub(crate) fn park(&mut self, ino: u64, n: u64) {
        assert!(n > 0, "a parked count is above 0");
        assert!(!self.contains(ino), "inode {ino} parked twice");
        if n == 1 {
            self.ones.insert(ino);
        } else {
            self.more.insert(ino, n);
        }
        debug_assert_eq!(self.count(ino), n, "the count parked reads back");
    }

    /// Takes `ino`'s parked count back (0 when none was parked).
    pub(crate) fn take(&mut self, ino: u64) -> u64 {
        let n = if self.ones.remove(ino) {
            1
        } else {
            self.more.remove(&ino).unwrap_or(0)
        };
        debug_assert!(!self.contains(ino), "a count taken leaves");
        n
    }

    /// `n` of `ino`'s parked references fewer (never below 0, as `Refs::forget`); a count
    /// that reaches 0 leaves. Returns whether `ino` had a count parked.
    pub(crate) fn forget(&mut self, ino: u64, n: u64) -> bool {
        if n == 0 {
            return self.contains(ino);
        }
        if self.ones.remove(ino) {
            return true;
        }
        let Some(c) = self.more.get_mut(&ino) else {
            return false;
        };
        *c = c.saturating_sub(n);
        match *c {
            0 => {
                self.more.remove(&ino);
            }
            1 => {
                self.more.remove(&ino);
                self.ones.insert(ino);
            }
            _ => {}
        }
        // A count of 1 lives in the bitmap, a larger one in the map, never both.
        debug_assert!(self.more.get(&ino).is_none_or(|&c| c > 1));
        debug_assert!(!(self.ones.contains(ino) && self.more.contains_key(&ino)));
        true
    }

    /// Whether `ino` has a count parked.
    pub(crate) fn contains(&self, ino: u64) -> bool {
        self.ones.contains(ino) || self.more.contains_key(&ino)
    }

    /// `ino`'s parked count (0 when none).
    pub(crate) fn count(&self, ino: u64) -> u64 {
        if self.ones.contains(ino) {
            1
        } else {
            self.more.get(&ino).copied().unwrap_or(0)
        }
    }

    /// How many inodes have a count parked.
    pub(crate) fn len(&self) -> u64 {
        self.ones.len() + self.more.len() as u64
    }

    /// Every inode with a count parked (the counts of 1 first, in order).
    pub(crate) fn inodes(&self) -> impl Iterator<Item = u64> + '_ {
        self.ones.iter().chain(self.more.keys().copied())
    }

    /// Gives the map's room back once it is mostly empty.
    pub(crate) fn shrink(&mut self, from: usize) {
        if self.more.capacity() > from && self.more.len() * 4 < self.more.capacity() {
            self.more.shrink_to(self.more.len() * 2);
        }
    }

    /// Bytes the bitmap and the map hold, about.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> u64 {
        self.ones.serialized_size() as u64 + self.more.capacity() as u64 * 17
    }
}

#[cfg(test)]
mod tests {
    use super::Parked;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        /// Against a plain map of counts: park, take, forget in any order.
        #[test]
        fn parked_counts_match_a_map(ops in proptest::collection::vec((0u8..3, 0u64..40, 0u64..4), 0..200)) {
            let mut p = Parked::default();
            let mut model: HashMap<u64, u64> = HashMap::new();
            for (op, ino, n) in ops {
                match op {
                    0 if n > 0 && !model.contains_key(&ino) => {
                        p.park(ino, n);
                        model.insert(ino, n);
                    }
                    1 => prop_assert_eq!(p.take(ino), model.remove(&ino).unwrap_or(0)),
                    2 => {
                        let had = model.contains_key(&ino);
                        prop_assert_eq!(p.forget(ino, n), had);
                        if let Some(c) = model.get_mut(&ino) {
                            *c = c.saturating_sub(n);
                            if *c == 0 {
                                model.remove(&ino);
                            }
                        }
                    }
                    _ => {}
                }
                prop_assert_eq!(p.len(), model.len() as u64);
                for (&i, &c) in &model {
                    prop_assert_eq!(p.count(i), c);
                }
                let mut all: Vec<u64> = p.inodes().collect();
                all.sort_unstable();
                let mut want: Vec<u64> = model.keys().copied().collect();
                want.sort_unstable();
                prop_assert_eq!(all, want);
            }
        }
    }

    #[test]
    fn a_million_counts_of_one_in_a_run_take_little_room() {
        let mut p = Parked::default();
        for ino in 1_000..1_001_000 {
            p.park(ino, 1);
        }
        assert_eq!(p.len(), 1_000_000);
        assert!(p.bytes() < 256 * 1024, "{} bytes", p.bytes());
    }
}
