//! A file's preallocations (PAs): blocks reserved beyond what the file asked, at a fixed
//! logical position, and the set that holds a file's PAs (ext4's PA tree, or its old capped
//! list).
//!
//! # Data structures
//!
//! - [`Pa`]: `len` blocks at logical `lstart`, physical `pstart`, with a bitmap of the
//!   blocks already handed to the file (inline for PAs up to 64 blocks).
//! - [`PaSet`]: a tree keyed by logical start (`prealloc_index=tree`, O(log n)) or a list
//!   capped at [`PREALLOC_LIST_MAX`] (`prealloc_index=list`, O(n), as ext4 before 6.4).
//!
//! # Invariants (checked by `Files::check_file`)
//!
//! PAs of a file are disjoint in logical space; a PA block is used (mapped by the file) or
//! unused (reserved). The set lives under its file's lock.

use parking_lot::Mutex;
use std::collections::BTreeMap;

/// ext4's cap on a file's PA list before trimming (`s_mb_max_inode_prealloc`).
pub const PREALLOC_LIST_MAX: usize = 512;
/// The list is trimmed back to the cap once it exceeds the cap by this much, as ext4 does
/// (a quarter of the cap plus one), so trimming is not paid on every insert.
const PREALLOC_LIST_SLACK: usize = PREALLOC_LIST_MAX / 4 + 1;

/// A preallocation: `len` blocks reserved at logical `lstart`, physical `pstart`.
#[derive(Debug, Clone)]
pub(crate) struct Pa {
    pub(crate) lstart: u64,
    pub(crate) pstart: u64,
    pub(crate) len: u64,
    /// Bit `i` set: block `lstart + i` has been handed to the file. One inline word holds
    /// the bits of PAs up to 64 blocks (most of them), so those need no second allocation.
    used: UsedBits,
    pub(crate) used_count: u64,
}

#[derive(Debug, Clone)]
enum UsedBits {
    Inline(u64),
    Heap(Box<[u64]>),
}

impl UsedBits {
    pub(crate) fn new(len: u64) -> Self {
        if len <= 64 {
            UsedBits::Inline(0)
        } else {
            UsedBits::Heap(vec![0; len.div_ceil(64) as usize].into_boxed_slice())
        }
    }

    pub(crate) fn words(&self) -> &[u64] {
        match self {
            UsedBits::Inline(w) => std::slice::from_ref(w),
            UsedBits::Heap(v) => v,
        }
    }

    pub(crate) fn words_mut(&mut self) -> &mut [u64] {
        match self {
            UsedBits::Inline(w) => std::slice::from_mut(w),
            UsedBits::Heap(v) => v,
        }
    }
}

impl Pa {
    pub(crate) fn new(lstart: u64, pstart: u64, len: u64) -> Self {
        Pa {
            lstart,
            pstart,
            len,
            used: UsedBits::new(len),
            used_count: 0,
        }
    }

    pub(crate) fn lend(&self) -> u64 {
        self.lstart + self.len
    }

    pub(crate) fn is_used(&self, i: u64) -> bool {
        self.used.words()[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    pub(crate) fn mark_used(&mut self, from: u64, n: u64) {
        for i in from..from + n {
            debug_assert!(!self.is_used(i), "PA block handed out twice");
            self.used.words_mut()[(i / 64) as usize] |= 1 << (i % 64);
        }
        self.used_count += n;
    }

    /// Unused blocks from `i` on, at most `max`.
    pub(crate) fn unused_run(&self, i: u64, max: u64) -> u64 {
        (i..self.len.min(i + max))
            .take_while(|&j| !self.is_used(j))
            .count() as u64
    }

    /// Maximal runs `(offset, len)` of unused blocks.
    pub(crate) fn unused_runs(&self) -> Vec<(u64, u64)> {
        let mut runs = Vec::new();
        let mut i = 0;
        while i < self.len {
            if self.is_used(i) {
                i += 1;
                continue;
            }
            let n = self.unused_run(i, self.len);
            runs.push((i, n));
            i += n;
        }
        runs
    }

    pub(crate) fn unused(&self) -> u64 {
        self.len - self.used_count
    }
}

/// A file's PAs.
pub(crate) enum PaSet {
    /// Keyed by logical start.
    Tree(BTreeMap<u64, Pa>),
    /// ext4's list before 6.4, oldest first, searched newest first: one heap node per PA,
    /// and every walk takes each visited PA's lock, as ext4's walks took `pa_lock` (they ran
    /// under RCU, beside concurrent users of the same PA). Normalisation walks all of it.
    /// The boxes are deliberate: each PA is its own allocation, as a list node is.
    #[allow(clippy::vec_box)]
    List(Vec<Box<Mutex<Pa>>>),
}

impl PaSet {
    pub(crate) fn new(tree: bool) -> Self {
        if tree {
            PaSet::Tree(BTreeMap::new())
        } else {
            PaSet::List(Vec::new())
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            PaSet::Tree(t) => t.len(),
            PaSet::List(l) => l.len(),
        }
    }

    /// Copies of the PAs (for checks and reports, not the hot path).
    pub(crate) fn snapshot(&self) -> Vec<Pa> {
        match self {
            PaSet::Tree(t) => t.values().cloned().collect(),
            PaSet::List(l) => l.iter().map(|pa| pa.lock().clone()).collect(),
        }
    }

    /// The start of the unused physical block `l` would take from the PA whose logical
    /// range holds it, if one does.
    pub(crate) fn covering_block(&self, l: u64) -> Option<u64> {
        let at = |pa: &Pa| (pa.lstart <= l && l < pa.lend()).then(|| pa.pstart + (l - pa.lstart));
        match self {
            PaSet::Tree(t) => t.range(..=l).next_back().and_then(|(_, pa)| at(pa)),
            PaSet::List(list) => list.iter().rev().find_map(|pa| at(&pa.lock())),
        }
    }

    /// The PA whose logical range holds `l`.
    pub(crate) fn covering_mut(&mut self, l: u64) -> Option<&mut Pa> {
        match self {
            PaSet::Tree(t) => t
                .range_mut(..=l)
                .next_back()
                .map(|(_, pa)| pa)
                .filter(|pa| pa.lend() > l),
            PaSet::List(list) => {
                let i = list.iter().rposition(|pa| {
                    let pa = pa.lock();
                    pa.lstart <= l && l < pa.lend()
                })?;
                Some(list[i].get_mut())
            }
        }
    }

    /// Shrinks the window `ws .. we` around `logical` (which no PA covers) so it overlaps
    /// no PA.
    pub(crate) fn clamp(&self, logical: u64, mut ws: u64, mut we: u64) -> (u64, u64) {
        let mut fit = |pa: &Pa| {
            if pa.lend() <= logical {
                ws = ws.max(pa.lend());
            } else if pa.lstart > logical {
                we = we.min(pa.lstart);
            }
        };
        match self {
            PaSet::Tree(t) => {
                if let Some((_, pa)) = t.range(..=logical).next_back() {
                    fit(pa);
                }
                if let Some((_, pa)) = t.range(logical + 1..).next() {
                    fit(pa);
                }
            }
            PaSet::List(list) => list.iter().for_each(|pa| fit(&pa.lock())),
        }
        (ws, we)
    }

    /// Adds a PA; returns PAs the list cap pushes out (to be discarded).
    pub(crate) fn insert(&mut self, pa: Pa) -> Vec<Pa> {
        match self {
            PaSet::Tree(t) => {
                t.insert(pa.lstart, pa);
                Vec::new()
            }
            PaSet::List(list) => {
                list.push(Box::new(Mutex::new(pa)));
                let evicted = if list.len() > PREALLOC_LIST_MAX + PREALLOC_LIST_SLACK {
                    let excess = list.len() - PREALLOC_LIST_MAX;
                    list.drain(..excess).map(|pa| pa.into_inner()).collect()
                } else {
                    Vec::new()
                };
                // The list stays bounded: what it evicts goes back to the caller.
                debug_assert!(list.len() <= PREALLOC_LIST_MAX + PREALLOC_LIST_SLACK);
                evicted
            }
        }
    }

    pub(crate) fn take_all(&mut self) -> Vec<Pa> {
        let all: Vec<Pa> = match self {
            PaSet::Tree(t) => std::mem::take(t).into_values().collect(),
            PaSet::List(l) => std::mem::take(l)
                .into_iter()
                .map(|pa| pa.into_inner())
                .collect(),
        };
        debug_assert_eq!(self.len(), 0, "every preallocation taken");
        all
    }

    /// Drops PAs whose blocks are all used.
    pub(crate) fn remove_exhausted(&mut self, lstart: u64) {
        match self {
            PaSet::Tree(t) => {
                if t.get(&lstart).is_some_and(|pa| pa.unused() == 0) {
                    t.remove(&lstart);
                }
            }
            PaSet::List(l) => l.retain_mut(|pa| {
                let pa = pa.get_mut();
                pa.lstart != lstart || pa.unused() > 0
            }),
        }
        // No exhausted preallocation is left at `lstart`.
        debug_assert!(self
            .covering_mut(lstart)
            .is_none_or(|pa| pa.lstart != lstart || pa.unused() > 0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pa_runs() {
        let mut pa = Pa::new(0, 100, 10);
        pa.mark_used(2, 3);
        pa.mark_used(9, 1);
        assert_eq!(pa.unused_runs(), vec![(0, 2), (5, 4)]);
        assert_eq!(pa.unused(), 6);
        assert_eq!(pa.unused_run(5, 2), 2);
    }
}
