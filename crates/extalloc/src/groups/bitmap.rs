//! One group's block bitmap and its buddy summary.
//!
//! # Data structures
//!
//! - `used`: one bit per block, 1 = used. Blocks past the end of a short last group (padding)
//!   are permanently 1 and never counted as free or used.
//! - `full[k]` for orders `k >= 1`: one bit per aligned chunk of `2^k` blocks, 1 = every block of
//!   the chunk is free. Order 0's "full" bitmap is `!used`.
//! - `full_count[k]`: how many order-`k` chunks are fully free (`F_k`). `F_0` is the free block
//!   count.
//! - `fragments`: the number of maximal free runs.
//! - `first_free[k]`: a block offset below which no fully-free order-`k` chunk starts, so a
//!   search never rescans a prefix it already knows is full.
//!
//! # Invariants (checked by [`GroupBitmap::check`])
//!
//! ```text
//! full[k](c) = full[k-1](2c) && full[k-1](2c+1)          (k >= 1; full[0] = !used)
//! F_k        = popcount(full[k])
//! buddy counter of order k (maximal free aligned chunks, as ext4 counts them)
//!            = F_k - 2 * F_{k+1}                            (F_{max+1} = 0)
//! largest free order = max { k : F_k > 0 }
//! no full[k] bit is set below first_free[k] >> k
//! ```
//!
//! The counter identity holds because a fully-free chunk whose parent is also fully free is
//! exactly one of the two children of a fully-free parent; every other fully-free chunk is
//! maximal. Keeping `F_k` instead of the counters makes every update a plain add.
//!
//! # Operations
//!
//! - `mark_used(off, len)`: the range must be free. Clears `used`-free bits, then at each order
//!   clears the chunks overlapping the range; stops at the first order where no chunk was full
//!   (a parent can only be full if its children are). Cost: O(len / 64 + orders).
//! - `mark_free(off, len)`: the range must be used. Sets the bits, then at each order
//!   recomputes the chunks overlapping the range from their children, a 64-bit word at a time;
//!   stops at the first order where nothing became full.
//!
//! The bitmap has no lock of its own: its owner (`Group`) keeps it under the group lock.

/// Highest order a group can have: groups are at most 2^20 blocks.
pub const ORDER_MAX: usize = 20;
/// Number of orders, 0 ..= ORDER_MAX.
pub const ORDERS: usize = ORDER_MAX + 1;
const _: () = assert!(1u64 << ORDER_MAX == crate::geometry::GROUP_BLOCKS_MAX);

#[derive(Debug, Clone)]
pub struct GroupBitmap {
    /// Blocks that exist in this group.
    len_blocks: u32,
    /// log2 of the group size.
    order_top: u32,
    used: Vec<u64>,
    /// `full[k - 1]` is the order-`k` bitmap.
    full: Vec<Vec<u64>>,
    full_count: [u32; ORDERS],
    fragments: u32,
    first_free: [u32; ORDERS],
}

/// Extracts the even-numbered bits of `x` into the low 32 bits.
#[inline]
fn even_bits(mut x: u64) -> u64 {
    x &= 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x >> 16)) & 0x0000_0000_FFFF_FFFF;
    x
}

/// Mask of bits `lo .. hi` (hi exclusive) that fall into word `w`.
#[inline]
fn word_mask(w: usize, lo: u64, hi: u64) -> u64 {
    let word_lo = (w as u64) * 64;
    let a = lo.max(word_lo) - word_lo;
    let b = hi.min(word_lo + 64) - word_lo;
    debug_assert!(a < b);
    let upper = if b == 64 { u64::MAX } else { (1u64 << b) - 1 };
    upper & !((1u64 << a) - 1)
}

/// First set bit at or after `from` in `words`, below `limit`.
#[inline]
fn next_one(words: &[u64], from: u64, limit: u64, invert: bool) -> Option<u64> {
    if from >= limit {
        return None;
    }
    let mut w = (from / 64) as usize;
    let load = |w: usize| if invert { !words[w] } else { words[w] };
    let mut word = load(w) & (u64::MAX << (from % 64));
    loop {
        if word != 0 {
            let bit = (w as u64) * 64 + u64::from(word.trailing_zeros());
            return (bit < limit).then_some(bit);
        }
        w += 1;
        if w >= words.len() || (w as u64) * 64 >= limit {
            return None;
        }
        word = load(w);
    }
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
        let order_top = group_blocks.trailing_zeros();
        let words = group_blocks as usize / 64;
        let full = (1..=order_top)
            .map(|k| vec![0u64; ((group_blocks >> k) as usize).div_ceil(64)])
            .collect();
        GroupBitmap {
            len_blocks,
            order_top,
            used: vec![u64::MAX; words],
            full,
            full_count: [0; ORDERS],
            fragments: 0,
            first_free: [0; ORDERS],
        }
    }

    pub fn len_blocks(&self) -> u32 {
        self.len_blocks
    }

    pub fn order_top(&self) -> u32 {
        self.order_top
    }

    pub fn free_blocks(&self) -> u32 {
        self.full_count[0]
    }

    pub fn fragments(&self) -> u32 {
        self.fragments
    }

    /// ext4's buddy counter for `order`: free aligned chunks of `2^order` blocks that are not
    /// part of a larger free aligned chunk.
    pub fn buddy_count(&self, order: u32) -> u32 {
        let k = order as usize;
        if order > self.order_top {
            return 0;
        }
        let parent = if order == self.order_top {
            0
        } else {
            self.full_count[k + 1]
        };
        self.full_count[k] - 2 * parent
    }

    /// The largest order with a fully free aligned chunk, if any block is free.
    pub fn largest_free_order(&self) -> Option<u32> {
        (0..=self.order_top)
            .rev()
            .find(|&k| self.full_count[k as usize] > 0)
    }

    /// Order of the average free run length (`floor(log2(free / fragments))`).
    pub fn avg_fragment_order(&self) -> Option<u32> {
        if self.fragments == 0 {
            return None;
        }
        let avg = self.full_count[0] / self.fragments;
        debug_assert!(avg >= 1);
        Some(31 - avg.leading_zeros())
    }

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

    pub fn range_is_free(&self, off: u32, len: u32) -> bool {
        len > 0
            && off.checked_add(len).is_some_and(|e| e <= self.len_blocks)
            && self.used_in(off, len) == 0
    }

    pub fn range_is_used(&self, off: u32, len: u32) -> bool {
        len > 0
            && off.checked_add(len).is_some_and(|e| e <= self.len_blocks)
            && self.used_in(off, len) == len
    }

    /// Length of the free run starting at `off` (0 if `off` is used), capped at `cap`.
    pub fn free_run_at(&self, off: u32, cap: u32) -> u32 {
        let limit = u64::from(self.len_blocks).min(u64::from(off) + u64::from(cap));
        match next_one(&self.used, u64::from(off), limit, false) {
            Some(used) => (used - u64::from(off)) as u32,
            None => (limit - u64::from(off).min(limit)) as u32,
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
        if order > self.order_top || self.full_count[order as usize] == 0 {
            return None;
        }
        let k = order as usize;
        let from = if use_hint {
            u64::from(self.first_free[k] >> order)
        } else {
            0
        };
        let chunks = u64::from(self.len_blocks >> order);
        let found = if k == 0 {
            next_one(&self.used, from, u64::from(self.len_blocks), true)
        } else {
            next_one(&self.full[k - 1], from, chunks, false)
        };
        let start = found.map(|c| (c << order) as u32);
        if use_hint {
            self.first_free[k] = start.unwrap_or(self.len_blocks);
        }
        start
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
            self.first_free[0]
        } else {
            0
        }
    }

    /// Length of the longest free run.
    pub fn largest_free_run(&self) -> u32 {
        self.free_runs(0).map(|(_, len)| len).max().unwrap_or(0)
    }

    /// Marks `off .. off + len` used. The range must be free.
    #[allow(clippy::needless_range_loop)] // word ranges index several bitmaps at once
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
        self.full_count[0] -= len;
        match (left_free, right_free) {
            (true, true) => self.fragments += 1,
            (false, false) => self.fragments -= 1,
            _ => {}
        }
        for k in 1..=self.order_top as usize {
            let (c_lo, c_hi) = (lo >> k, ((hi - 1) >> k) + 1);
            let words = &mut self.full[k - 1];
            let mut cleared = 0;
            for w in (c_lo / 64) as usize..=((c_hi - 1) / 64) as usize {
                let mask = word_mask(w, c_lo, c_hi);
                cleared += (words[w] & mask).count_ones();
                words[w] &= !mask;
            }
            if cleared == 0 {
                break;
            }
            self.full_count[k] -= cleared;
        }
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
        self.full_count[0] += len;
        match (left_free, right_free) {
            (true, true) => self.fragments -= 1,
            (false, false) => self.fragments += 1,
            _ => {}
        }
        self.first_free[0] = self.first_free[0].min(off);
        for k in 1..=self.order_top as usize {
            let (c_lo, c_hi) = (lo >> k, ((hi - 1) >> k) + 1);
            let mut added = 0;
            let mut lowest = None;
            for w in (c_lo / 64) as usize..=((c_hi - 1) / 64) as usize {
                let child = |i: usize| -> u64 {
                    if k == 1 {
                        self.used.get(i).map_or(0, |x| !x)
                    } else {
                        self.full[k - 2].get(i).copied().unwrap_or(0)
                    }
                };
                let (a, b) = (child(2 * w), child(2 * w + 1));
                let computed = even_bits(a & (a >> 1)) | (even_bits(b & (b >> 1)) << 32);
                let mask = word_mask(w, c_lo, c_hi);
                let words = &mut self.full[k - 1];
                let new = computed & mask & !words[w];
                if new != 0 && lowest.is_none() {
                    lowest = Some((w as u64) * 64 + u64::from(new.trailing_zeros()));
                }
                words[w] |= new;
                added += new.count_ones();
            }
            if added == 0 {
                break;
            }
            self.full_count[k] += added;
            let start = (lowest.expect("bits were added") << k) as u32;
            self.first_free[k] = self.first_free[k].min(start);
        }
    }

    /// Recomputes every cached figure from `used` and compares. Returns what disagrees.
    pub fn check(&self) -> Result<(), String> {
        let group_blocks = 1u64 << self.order_top;
        // Padding is used.
        for b in u64::from(self.len_blocks)..group_blocks {
            if self.used[(b / 64) as usize] & (1 << (b % 64)) == 0 {
                return Err(format!("padding block {b} is marked free"));
            }
        }
        let mut prev: Vec<u64> = self.used.iter().map(|w| !w).collect();
        let free_blocks: u32 = prev.iter().map(|w| w.count_ones()).sum();
        if free_blocks != self.full_count[0] {
            return Err(format!(
                "free count {} but bitmap has {free_blocks}",
                self.full_count[0]
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
            if b < self.first_free[0] {
                return Err(format!(
                    "free block {b} below first-free hint {}",
                    self.first_free[0]
                ));
            }
        }
        for k in 1..=self.order_top as usize {
            let chunks = (group_blocks >> k) as usize;
            let mut expect = vec![0u64; chunks.div_ceil(64)];
            for c in 0..chunks {
                let a = prev[(2 * c) / 64] >> ((2 * c) % 64) & 1;
                let b = prev[(2 * c + 1) / 64] >> ((2 * c + 1) % 64) & 1;
                if a & b == 1 {
                    expect[c / 64] |= 1 << (c % 64);
                }
            }
            if expect != self.full[k - 1] {
                return Err(format!(
                    "order-{k} buddy bitmap disagrees with the block bitmap"
                ));
            }
            let count: u32 = expect.iter().map(|w| w.count_ones()).sum();
            if count != self.full_count[k] {
                return Err(format!(
                    "order-{k} full count {} but bitmap has {count}",
                    self.full_count[k]
                ));
            }
            if let Some(c) = next_one(&expect, 0, chunks as u64, false) {
                if ((c << k) as u32) < self.first_free[k] {
                    return Err(format!(
                        "free order-{k} chunk {c} below hint {}",
                        self.first_free[k]
                    ));
                }
            }
            prev = expect;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                assert_eq!(got.full, expect.full);
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
