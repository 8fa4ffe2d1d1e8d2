//! The lock-free set the ordered group indexes are made of (`index.rs`).
//!
//! # Data structures
//!
//! [`AtomicBitset`]: a hierarchical bitset of group numbers. Level 0 has one bit per group;
//! each higher level has one bit per word of the level below, set when that word may be
//! non-zero. Lookups (`next_set`) take no lock: they read words and descend.
//!
//! # Invariants
//!
//! ```text
//! at quiescence: summary bit (l+1, w) == (word (l, w) != 0)
//! at quiescence: a bitset's count == its set bits
//! ```
//!
//! Updates of different members race only on shared words, which the protocol below
//! handles: a remover that empties a word clears the summary bit and then re-reads the word,
//! setting the bit again if an inserter refilled it meanwhile. A summary bit may thus be set
//! over an empty word for a moment; lookups skip such words. At construction
//! (`insert_mut`, `summarise_mut`) the set is written through `&mut self` before anyone
//! can see it.
//!
//! # Lock order
//!
//! None: the set takes no lock (checked with loom, `tests/loom_index.rs`).

use crate::sync::{
    AtomicU64,
    Ordering::{Relaxed, SeqCst},
};

/// A set of `u64` below a fixed bound with lock-free insert, remove and ordered lookup.
pub struct AtomicBitset {
    bits: u64,
    levels: Vec<Vec<AtomicU64>>,
    /// Members (exact at quiescence): lets a walk pick the smaller of two sets.
    count: AtomicU64,
}

impl AtomicBitset {
    /// An empty set of numbers below `bits` (at least 1).
    pub fn new(bits: u64) -> Self {
        assert!(bits > 0);
        let mut levels = Vec::new();
        let mut n = bits;
        loop {
            let words = n.div_ceil(64);
            levels.push((0..words).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
            if words == 1 {
                break;
            }
            n = words;
        }
        AtomicBitset {
            bits,
            levels,
            count: AtomicU64::new(0),
        }
    }

    /// The bound: every member is below it.
    pub fn capacity(&self) -> u64 {
        self.bits
    }

    /// Bytes the set's words take (every level).
    pub fn memory_bytes(&self) -> u64 {
        self.levels.iter().map(|l| 8 * l.len() as u64).sum()
    }

    /// Members (exact at quiescence, a moment behind under concurrent updates).
    pub fn population(&self) -> u64 {
        self.count.load(SeqCst)
    }

    /// True if `i` (below the capacity) is in the set.
    pub fn contains(&self, i: u64) -> bool {
        assert!(i < self.bits);
        self.levels[0][(i / 64) as usize].load(SeqCst) & (1 << (i % 64)) != 0
    }

    /// Adds `i` (below the capacity), without a lock.
    pub fn insert(&self, i: u64) {
        assert!(i < self.bits);
        let word = &self.levels[0][(i / 64) as usize];
        let bit = 1u64 << (i % 64);
        // Read before writing: no shared-line write when the bit is already there.
        if word.load(SeqCst) & bit != 0 {
            return;
        }
        if word.fetch_or(bit, SeqCst) & bit == 0 {
            self.count.fetch_add(1, SeqCst);
        }
        self.set_summary(0, i / 64);
    }

    /// Adds `i` (below the capacity) while nothing else can see the set (at construction):
    /// a plain write of the member's bit only. The summary levels are wrong until
    /// [`AtomicBitset::summarise_mut`], which must run before anyone looks up the set.
    #[inline]
    pub fn insert_mut(&mut self, i: u64) {
        assert!(i < self.bits);
        // Relaxed loads and stores through `&mut self` (plain moves; loom's atomics have no
        // `get_mut`): nothing else can see the set yet.
        let word = &self.levels[0][(i / 64) as usize];
        let bit = 1u64 << (i % 64);
        let w = word.load(Relaxed);
        if w & bit == 0 {
            word.store(w | bit, Relaxed);
            self.count.store(self.count.load(Relaxed) + 1, Relaxed);
        }
    }

    /// Rebuilds every summary level from the members (after [`AtomicBitset::insert_mut`]).
    pub fn summarise_mut(&mut self) {
        for l in 1..self.levels.len() {
            let (below, above) = self.levels.split_at_mut(l);
            let (below, above) = (&mut below[l - 1], &mut above[0]);
            for (w, word) in above.iter_mut().enumerate() {
                let mut bits = 0u64;
                for (i, b) in below[w * 64..].iter().take(64).enumerate() {
                    if b.load(Relaxed) != 0 {
                        bits |= 1 << i;
                    }
                }
                word.store(bits, Relaxed);
            }
        }
        debug_assert_eq!(self.check(), Ok(()), "summaries rebuilt");
    }

    /// Removes `i` (below the capacity), without a lock.
    pub fn remove(&self, i: u64) {
        assert!(i < self.bits);
        let w = i / 64;
        let bit = 1u64 << (i % 64);
        let word = &self.levels[0][w as usize];
        if word.load(SeqCst) & bit == 0 {
            return;
        }
        let prev = word.fetch_and(!bit, SeqCst);
        if prev & bit != 0 {
            self.count.fetch_sub(1, SeqCst);
        }
        if prev & !bit == 0 {
            self.clear_summary(0, w);
        }
    }

    /// Word `w` of level `l` is non-empty: make sure every level above shows it.
    fn set_summary(&self, mut l: usize, mut w: u64) {
        debug_assert!(
            (w as usize) < self.levels[l].len(),
            "word {w} past level {l}"
        );
        while l + 1 < self.levels.len() {
            let bit = 1u64 << (w % 64);
            let parent = &self.levels[l + 1][(w / 64) as usize];
            let prev = parent.fetch_or(bit, SeqCst);
            if prev & bit != 0 {
                return;
            }
            l += 1;
            w /= 64;
        }
    }

    /// Word `w` of level `l` was seen empty: clear its summary bit, then repair if it was
    /// refilled in the meantime.
    fn clear_summary(&self, l: usize, w: u64) {
        debug_assert!(
            (w as usize) < self.levels[l].len(),
            "word {w} past level {l}"
        );
        if l + 1 == self.levels.len() {
            return;
        }
        let bit = 1u64 << (w % 64);
        let parent = &self.levels[l + 1][(w / 64) as usize];
        let prev = parent.fetch_and(!bit, SeqCst);
        if prev & !bit == 0 {
            self.clear_summary(l + 1, w / 64);
        }
        if self.levels[l][w as usize].load(SeqCst) != 0 {
            self.set_summary(l, w);
        }
    }

    /// The smallest member `>= from`, if any.
    pub fn next_set(&self, from: u64) -> Option<u64> {
        let mut l = 0;
        let mut idx = from;
        loop {
            let w = idx / 64;
            let word = self.levels[l].get(w as usize)?;
            let word = word.load(SeqCst) & (u64::MAX << (idx % 64));
            if word == 0 {
                if l + 1 == self.levels.len() {
                    return None;
                }
                l += 1;
                idx = w + 1;
                continue;
            }
            let mut pos = w * 64 + u64::from(word.trailing_zeros());
            let mut stale = false;
            while l > 0 {
                l -= 1;
                let below = self.levels[l][pos as usize].load(SeqCst);
                if below == 0 {
                    // A summary bit over an empty word: look further right at this level.
                    idx = (pos + 1) * 64;
                    stale = true;
                    break;
                }
                pos = pos * 64 + u64::from(below.trailing_zeros());
            }
            if !stale {
                return Some(pos);
            }
        }
    }

    /// Members in increasing order (a snapshot-free walk; for checks and reports).
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        let mut at = 0;
        std::iter::from_fn(move || {
            let found = self.next_set(at)?;
            at = found + 1;
            Some(found)
        })
    }

    /// Checks that summaries agree with the words below them (call at quiescence).
    pub fn check(&self) -> Result<(), String> {
        for l in 0..self.levels.len() - 1 {
            for (w, word) in self.levels[l].iter().enumerate() {
                let nonempty = word.load(SeqCst) != 0;
                let summary = self.levels[l + 1][w / 64].load(SeqCst) & (1 << (w % 64)) != 0;
                if nonempty != summary {
                    return Err(format!(
                        "bitset level {l} word {w}: non-empty {nonempty} but summary {summary}"
                    ));
                }
            }
        }
        let members: u64 = self.levels[0]
            .iter()
            .map(|w| u64::from(w.load(SeqCst).count_ones()))
            .sum();
        if members != self.population() {
            return Err(format!(
                "bitset holds {members} members but counts {}",
                self.population()
            ));
        }
        Ok(())
    }
}
