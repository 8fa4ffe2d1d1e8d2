//! One group's block bitmap: which blocks are used, the free runs, and the fragment count;
//! it keeps its buddy summary (`buddy.rs`) in step with every change.
//!
//! # Data structures
//!
//! - `used`: one bit per block, 1 = used. Blocks past the end of a short last group (padding)
//!   are permanently 1 and never counted as free or used.
//! - `fragments`: the number of maximal free runs, kept exactly by looking at the two
//!   neighbours of every changed range.
//! - `buddy`: the per-order summary ([`Buddy`]): which aligned chunks of each order are
//!   entirely free, how many (`F_0` is the free block count), and first-free hints.
//!
//! # Invariants (checked by [`GroupBitmap::check`])
//!
//! ```text
//! padding blocks are used
//! F_0       = number of 0 bits of used below len_blocks
//! fragments = number of maximal runs of free blocks
//! no free block lies below first_free[0]
//! the buddy summary agrees with used (see buddy.rs)
//! ```
//!
//! # Operations
//!
//! - `mark_used(off, len)`: the range must be free. Sets the `used` bits, adjusts `fragments`,
//!   then lets the summary clear the chunks overlapping the range.
//! - `mark_free(off, len)`: the range must be used. Clears the bits, adjusts `fragments`, then
//!   lets the summary recompute the chunks overlapping the range.
//!
//! # Lock order
//!
//! The bitmap has no lock of its own: its owner (`Group`) keeps it under the group lock.

use super::buddy::Buddy;
use super::words::{next_one, word_mask};

/// One group's block bitmap (1 bit per block, 1 = used) with its fragment count and buddy
/// summary.
#[derive(Debug, Clone)]
pub struct GroupBitmap {
    /// Blocks that exist in this group.
    len_blocks: u32,
    used: Vec<u64>,
    fragments: u32,
    buddy: Buddy,
}

impl GroupBitmap {
    /// A group of `group_blocks` (a power of two) of which the first `len_blocks` exist; all
    /// existing blocks start free.
    pub fn new(group_blocks: u32, len_blocks: u32) -> Self {
        let mut bitmap = Self::all_used(group_blocks, len_blocks);
        bitmap.mark_free(0, len_blocks);
        bitmap
    }

    /// A group in its on-disk form (docs/format.md): bit `i` of `bytes` (LSB first) set =
    /// block `i` used. Bits past `len_blocks` are ignored (padding is always used); missing
    /// bytes count as used.
    pub fn from_used_bytes(group_blocks: u32, len_blocks: u32, bytes: &[u8]) -> Self {
        let mut bitmap = Self::all_used(group_blocks, len_blocks);
        let limit = u64::from(len_blocks);
        let word = |w: usize| -> u64 {
            let mut b = [0xffu8; 8];
            if let Some(src) = bytes.get(w * 8..) {
                let n = src.len().min(8);
                b[..n].copy_from_slice(&src[..n]);
            }
            !u64::from_le_bytes(b) // 1 = free
        };
        let words = (limit as usize).div_ceil(64);
        let mut run_start: Option<u64> = None;
        for w in 0..words {
            let mut free = word(w);
            let base = w as u64 * 64;
            if base + 64 > limit {
                free &= (1u64 << (limit - base)) - 1;
            }
            let mut at = 0u32;
            while at < 64 {
                let shifted = free >> at;
                match run_start {
                    None => {
                        if shifted == 0 {
                            break;
                        }
                        at += shifted.trailing_zeros();
                        run_start = Some(base + u64::from(at));
                    }
                    Some(start) => {
                        let ones = (!shifted).trailing_zeros().min(64 - at);
                        at += ones;
                        if at < 64 {
                            let end = base + u64::from(at);
                            bitmap.mark_free(start as u32, (end - start) as u32);
                            run_start = None;
                        }
                    }
                }
            }
        }
        if let Some(start) = run_start {
            bitmap.mark_free(start as u32, (limit - start) as u32);
        }
        bitmap
    }

    /// Every block used (padding included), nothing counted.
    fn all_used(group_blocks: u32, len_blocks: u32) -> Self {
        assert!(group_blocks.is_power_of_two());
        assert!(group_blocks >= 64);
        assert!(len_blocks >= 1 && len_blocks <= group_blocks);
        let words = group_blocks as usize / 64;
        GroupBitmap {
            len_blocks,
            used: vec![u64::MAX; words],
            fragments: 0,
            buddy: Buddy::all_used(group_blocks),
        }
    }

    /// Blocks that exist in the group (fewer than the group size for a short last group).
    pub fn len_blocks(&self) -> u32 {
        self.len_blocks
    }

    /// log2 of the group size in blocks: the highest order.
    pub fn order_top(&self) -> u32 {
        self.buddy.order_top()
    }

    /// Free blocks.
    pub fn free_blocks(&self) -> u32 {
        self.buddy.free_blocks()
    }

    /// Maximal runs of free blocks.
    pub fn fragments(&self) -> u32 {
        self.fragments
    }

    /// ext4's buddy counter for `order`: free aligned chunks of `2^order` blocks that are not
    /// part of a larger free aligned chunk.
    pub fn buddy_count(&self, order: u32) -> u32 {
        self.buddy.buddy_count(order)
    }

    /// The largest order with a fully free aligned chunk, if any block is free.
    pub fn largest_free_order(&self) -> Option<u32> {
        self.buddy.largest_free_order()
    }

    /// Order of the average free run length (`floor(log2(free / fragments))`).
    pub fn avg_fragment_order(&self) -> Option<u32> {
        if self.fragments == 0 {
            return None;
        }
        let avg = self.free_blocks() / self.fragments;
        debug_assert!(avg >= 1);
        Some(31 - avg.leading_zeros())
    }

    /// True if block `off` of the group exists and is free.
    pub fn is_free(&self, off: u32) -> bool {
        off < self.len_blocks && self.used[off as usize / 64] & (1 << (off % 64)) == 0
    }

    /// Number of used bits in `off .. off + len` (padding counts as used).
    fn used_in(&self, off: u32, len: u32) -> u32 {
        let (lo, hi) = (u64::from(off), u64::from(off) + u64::from(len));
        let (w_lo, w_hi) = ((lo / 64) as usize, ((hi - 1) / 64) as usize);
        (w_lo..=w_hi)
            .map(|w| (self.used[w] & word_mask(w, lo, hi)).count_ones())
            .sum()
    }

    /// True if `off .. off + len` is non-empty, inside the group and all free.
    pub fn range_is_free(&self, off: u32, len: u32) -> bool {
        len > 0
            && off.checked_add(len).is_some_and(|e| e <= self.len_blocks)
            && self.used_in(off, len) == 0
    }

    /// True if `off .. off + len` is non-empty, inside the group and all used.
    pub fn range_is_used(&self, off: u32, len: u32) -> bool {
        len > 0
            && off.checked_add(len).is_some_and(|e| e <= self.len_blocks)
            && self.used_in(off, len) == len
    }

    /// Length of the free run starting at `off` (0 if `off` is used), capped at `cap`. A
    /// long run is measured through the buddy summary: a whole group's run in a few dozen
    /// steps instead of one per 64 blocks.
    pub fn free_run_at(&self, off: u32, cap: u32) -> u32 {
        let (off, limit) = (
            u64::from(off),
            u64::from(self.len_blocks).min(u64::from(off) + u64::from(cap)),
        );
        if off >= limit {
            return 0;
        }
        // The word holding `off`: the run may end inside it.
        let word = self.used[(off / 64) as usize] >> (off % 64);
        let in_word = 64 - off % 64;
        let end = if word != 0 || off + in_word >= limit {
            limit.min(off + u64::from(word.trailing_zeros()).min(in_word))
        } else {
            self.buddy.free_run_end(&self.used, off + in_word, limit)
        };
        (end - off) as u32
    }

    /// [`GroupBitmap::free_run_at`] one word at a time (what it was before the buddy
    /// steps), to check them against.
    #[cfg(test)]
    fn free_run_at_by_words(&self, off: u32, cap: u32) -> u32 {
        let limit = u64::from(self.len_blocks).min(u64::from(off) + u64::from(cap));
        match next_one(&self.used, u64::from(off), limit, false) {
            Some(used) => (used - u64::from(off)) as u32,
            None => (limit - u64::from(off).min(limit)) as u32,
        }
    }

    /// Start of the free run holding free block `off`: the block after the last used one
    /// below it (0 when none is).
    pub fn free_run_start(&self, off: u32) -> u32 {
        debug_assert!(self.is_free(off), "block {off} is not free");
        let mut w = off as usize / 64;
        // Bits below `off` in its own word, then whole words downwards.
        let mut word = self.used[w] & ((1u64 << (off % 64)) - 1);
        loop {
            if word != 0 {
                return (w * 64 + 64 - word.leading_zeros() as usize) as u32;
            }
            if w == 0 {
                return 0;
            }
            w -= 1;
            word = self.used[w];
        }
    }

    /// Next free block at or after `from`.
    pub fn next_free(&self, from: u32) -> Option<u32> {
        next_one(
            &self.used,
            u64::from(from),
            u64::from(self.len_blocks),
            true,
        )
        .map(|b| b as u32)
    }

    /// Start of the first fully-free aligned chunk of `order`, searching from the hint when
    /// `use_hint` (and advancing the hint past what the search proved full).
    pub fn find_free_chunk(&mut self, order: u32, use_hint: bool) -> Option<u32> {
        let found = self
            .buddy
            .find_free_chunk(&self.used, self.len_blocks, order, use_hint);
        debug_assert!(
            found.is_none_or(|off| off % (1 << order) == 0
                && off + (1 << order) <= self.len_blocks
                && self.range_is_free(off, 1 << order)),
            "chunk {found:?} of order {order} is not aligned, inside and free"
        );
        found
    }

    /// Iterates the maximal free runs `(offset, len)` starting at or after `from`.
    pub fn free_runs(&self, from: u32) -> impl Iterator<Item = (u32, u32)> + '_ {
        let mut at = from;
        std::iter::from_fn(move || {
            let start = self.next_free(at)?;
            let len = self.free_run_at(start, u32::MAX);
            at = start + len;
            Some((start, len))
        })
    }

    /// Where free-run scans may start: the first free block (by hint) or 0.
    pub fn scan_start(&self, use_hint: bool) -> u32 {
        if use_hint {
            self.buddy.first_free(0)
        } else {
            0
        }
    }

    /// Length of the longest free run.
    pub fn largest_free_run(&self) -> u32 {
        self.free_runs(0).map(|(_, len)| len).max().unwrap_or(0)
    }

    /// Marks `off .. off + len` used. The range must be free.
    pub fn mark_used(&mut self, off: u32, len: u32) {
        assert!(len > 0);
        let end = off.checked_add(len).expect("range overflows");
        assert!(end <= self.len_blocks, "range past the group end");
        debug_assert!(
            self.range_is_free(off, len),
            "mark_used of a range that is not free"
        );
        let left_free = off > 0 && self.is_free(off - 1);
        let right_free = self.is_free(end);
        let (lo, hi) = (u64::from(off), u64::from(end));
        for w in (lo / 64) as usize..=((hi - 1) / 64) as usize {
            self.used[w] |= word_mask(w, lo, hi);
        }
        match (left_free, right_free) {
            (true, true) => self.fragments += 1,
            (false, false) => self.fragments -= 1,
            _ => {}
        }
        self.buddy.mark_used(lo, hi);
    }

    /// Marks `off .. off + len` free. The range must be used (and exist).
    pub fn mark_free(&mut self, off: u32, len: u32) {
        assert!(len > 0);
        let end = off.checked_add(len).expect("range overflows");
        assert!(end <= self.len_blocks, "range past the group end");
        debug_assert!(
            self.range_is_used(off, len),
            "mark_free of a range that is not used"
        );
        let left_free = off > 0 && self.is_free(off - 1);
        let right_free = self.is_free(end);
        let (lo, hi) = (u64::from(off), u64::from(end));
        for w in (lo / 64) as usize..=((hi - 1) / 64) as usize {
            self.used[w] &= !word_mask(w, lo, hi);
        }
        match (left_free, right_free) {
            (true, true) => self.fragments -= 1,
            (false, false) => self.fragments += 1,
            _ => {}
        }
        self.buddy.mark_free(&self.used, lo, hi);
    }

    /// Recomputes every cached figure from `used` and compares. Returns what disagrees.
    pub fn check(&self) -> Result<(), String> {
        let group_blocks = 1u64 << self.order_top();
        // Padding is used.
        for b in u64::from(self.len_blocks)..group_blocks {
            if self.used[(b / 64) as usize] & (1 << (b % 64)) == 0 {
                return Err(format!("padding block {b} is marked free"));
            }
        }
        let free_blocks: u32 = self.used.iter().map(|w| (!w).count_ones()).sum();
        if free_blocks != self.free_blocks() {
            return Err(format!(
                "free count {} but bitmap has {free_blocks}",
                self.free_blocks()
            ));
        }
        let runs = self.free_runs(0).count() as u32;
        if runs != self.fragments {
            return Err(format!(
                "fragments {} but bitmap has {runs} free runs",
                self.fragments
            ));
        }
        if let Some(b) = self.next_free(0) {
            if b < self.buddy.first_free(0) {
                return Err(format!(
                    "free block {b} below first-free hint {}",
                    self.buddy.first_free(0)
                ));
            }
        }
        self.buddy.check(&self.used)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Free runs measured through the buddy summary agree with a word-by-word scan, for
        /// every start and cap, on groups (and short last groups) of long and short runs.
        #[test]
        fn free_runs_through_the_buddy_match_a_word_scan(
            order in 6u32..13,
            short in 0u32..100,
            used in proptest::collection::vec((0u32..8192, 1u32..300), 0..12),
            probes in proptest::collection::vec((0u32..8192, 1u32..10_000), 40),
        ) {
            let group = 1u32 << order;
            let len = group - (short * group / 100).min(group - 1);
            let mut b = GroupBitmap::new(group, len);
            for (off, n) in used {
                let off = off % len;
                let n = n.min(len - off);
                if b.range_is_free(off, n) {
                    b.mark_used(off, n);
                }
            }
            for (off, cap) in probes {
                let off = off % (len + 1);
                let cap = if cap > 9_000 { u32::MAX } else { cap };
                prop_assert_eq!(
                    b.free_run_at(off, cap),
                    b.free_run_at_by_words(off, cap),
                    "group {} of {} blocks, off {}, cap {}", group, len, off, cap
                );
            }
        }
    }

    /// Counts maximal free aligned chunks per order the slow way.
    fn naive_buddy(b: &GroupBitmap) -> Vec<u32> {
        let n = 1u32 << b.order_top();
        let free = |o: u32, l: u32| (o..o + l).all(|x| b.is_free(x));
        (0..=b.order_top())
            .map(|k| {
                let size = 1 << k;
                (0..n / size)
                    .filter(|c| {
                        let o = c * size;
                        free(o, size)
                            && (k == b.order_top() || !free(o & !(2 * size - 1), 2 * size))
                    })
                    .count() as u32
            })
            .collect()
    }

    fn assert_buddy(b: &GroupBitmap) {
        b.check().unwrap();
        let naive = naive_buddy(b);
        for k in 0..=b.order_top() {
            assert_eq!(b.buddy_count(k), naive[k as usize], "order {k}");
        }
    }

    #[test]
    fn from_used_bytes_matches_marking() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for len in [64u32, 100, 1000, 1024] {
            for _ in 0..50 {
                let mut expect = GroupBitmap::new(1024, len);
                let mut bytes = vec![0u8; 128];
                for i in 0..len {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    // Long runs of each kind, so runs cross word borders.
                    if (rng >> 60) < 7 && (i / 37).is_multiple_of(2) || rng.is_multiple_of(5) {
                        bytes[(i / 8) as usize] |= 1 << (i % 8);
                        expect.mark_used(i, 1);
                    }
                }
                let got = GroupBitmap::from_used_bytes(1024, len, &bytes);
                got.check().unwrap();
                assert_eq!(got.free_blocks(), expect.free_blocks());
                assert_eq!(got.fragments(), expect.fragments());
                assert_eq!(got.used, expect.used);
                assert_eq!(got.buddy.levels(), expect.buddy.levels());
            }
        }
        // All free, all used, and short input.
        assert_eq!(
            GroupBitmap::from_used_bytes(1024, 1000, &[0; 128]).free_blocks(),
            1000
        );
        assert_eq!(
            GroupBitmap::from_used_bytes(1024, 1000, &[0xff; 128]).free_blocks(),
            0
        );
        assert_eq!(
            GroupBitmap::from_used_bytes(1024, 1000, &[0; 8]).free_blocks(),
            64
        );
    }

    #[test]
    fn new_group_is_one_chunk() {
        let b = GroupBitmap::new(1024, 1024);
        assert_eq!(b.free_blocks(), 1024);
        assert_eq!(b.largest_free_order(), Some(10));
        assert_eq!(b.buddy_count(10), 1);
        assert_eq!(b.fragments(), 1);
        assert_buddy(&b);
    }

    #[test]
    fn short_group_padding_never_free() {
        let b = GroupBitmap::new(128, 100);
        assert_eq!(b.free_blocks(), 100);
        assert!(!b.is_free(100));
        assert!(!b.range_is_free(90, 11));
        assert_eq!(b.largest_free_order(), Some(6));
        assert_eq!(b.free_run_at(64, 1000), 36);
        assert_buddy(&b);
    }

    #[test]
    fn split_and_merge() {
        let mut b = GroupBitmap::new(256, 256);
        b.mark_used(3, 2);
        assert_eq!(b.fragments(), 2);
        assert_eq!(b.free_blocks(), 254);
        assert_buddy(&b);
        b.mark_used(0, 3);
        assert_eq!(b.fragments(), 1);
        assert_buddy(&b);
        b.mark_free(0, 5);
        assert_eq!(b.fragments(), 1);
        assert_eq!(b.largest_free_order(), Some(8));
        assert_buddy(&b);
    }

    #[test]
    fn ends_of_group() {
        let mut b = GroupBitmap::new(64, 64);
        b.mark_used(63, 1);
        assert_eq!(b.fragments(), 1);
        assert_buddy(&b);
        b.mark_used(0, 1);
        assert_eq!(b.fragments(), 1);
        b.mark_used(1, 62);
        assert_eq!(b.fragments(), 0);
        assert_eq!(b.largest_free_order(), None);
        assert_eq!(b.avg_fragment_order(), None);
        assert_buddy(&b);
        b.mark_free(0, 64);
        assert_buddy(&b);
    }

    #[test]
    fn chunk_search_and_hints() {
        let mut b = GroupBitmap::new(512, 512);
        b.mark_used(0, 5);
        assert_eq!(b.find_free_chunk(3, true), Some(8));
        assert_eq!(b.find_free_chunk(0, true), Some(5));
        b.mark_used(5, 3);
        assert_eq!(b.find_free_chunk(0, true), Some(8));
        b.mark_free(2, 3);
        assert_eq!(b.find_free_chunk(0, true), Some(2));
        assert_eq!(b.find_free_chunk(9, true), None);
        assert_buddy(&b);
    }

    #[test]
    fn a_free_runs_start_is_found_from_inside_it() {
        let mut b = GroupBitmap::new(256, 256);
        b.mark_used(10, 10);
        b.mark_used(63, 2);
        assert_eq!(b.free_run_start(0), 0);
        assert_eq!(b.free_run_start(9), 0);
        assert_eq!(b.free_run_start(20), 20);
        assert_eq!(b.free_run_start(62), 20);
        assert_eq!(b.free_run_start(65), 65);
        assert_eq!(b.free_run_start(255), 65, "across whole free words");
    }

    #[test]
    fn free_runs_iterate_in_order() {
        let mut b = GroupBitmap::new(128, 128);
        b.mark_used(10, 10);
        b.mark_used(64, 1);
        let runs: Vec<_> = b.free_runs(0).collect();
        assert_eq!(runs, vec![(0, 10), (20, 44), (65, 63)]);
        assert_eq!(b.largest_free_run(), 63);
        assert_eq!(b.avg_fragment_order(), Some(5)); // 117 / 3 = 39
    }

    #[test]
    fn random_ops_match_naive() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for &(size, len) in &[(64u32, 64u32), (256, 200), (1024, 1024)] {
            let mut b = GroupBitmap::new(size, len);
            for _ in 0..400 {
                let off = rng.gen_range(0..len);
                let l = rng.gen_range(1..=(len - off).min(40));
                if b.range_is_free(off, l) {
                    b.mark_used(off, l);
                } else if b.range_is_used(off, l) {
                    b.mark_free(off, l);
                }
                assert_buddy(&b);
            }
        }
    }
}
