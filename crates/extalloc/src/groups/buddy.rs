//! A group's buddy summary: which aligned chunks of every order are entirely free.
//!
//! # Data structures
//!
//! - `full[k]` for orders `k >= 1`: one bit per aligned chunk of `2^k` blocks, 1 = every block
//!   of the chunk is free. Order 0's "full" bitmap is the block bitmap's `!used`, which the
//!   owner ([`super::GroupBitmap`]) keeps and passes in.
//! - `full_count[k]`: how many order-`k` chunks are fully free (`F_k`). `F_0` is the free
//!   block count.
//! - `first_free[k]`: a block offset below which no fully-free order-`k` chunk starts, so a
//!   search never rescans a prefix it already knows is full.
//!
//! # Invariants (checked by [`Buddy::check`] and the bitmap's own check)
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
//! # Updates
//!
//! - [`Buddy::mark_used`] (after the range's `used` bits were set): at each order clears the
//!   chunks overlapping the range; stops at the first order where no chunk was full (a parent
//!   can only be full if its children are). Cost: O(len / 64 + orders).
//! - [`Buddy::mark_free`] (after the range's `used` bits were cleared): at each order
//!   recomputes the chunks overlapping the range from their children, a 64-bit word at a
//!   time (pair-AND, then compact even bits); stops at the first order where nothing became
//!   full.
//!
//! # Queries
//!
//! - [`Buddy::find_free_chunk`]: the first fully free aligned chunk of an order, from its
//!   hint.
//! - [`Buddy::free_run_end`]: where a free run stops, stepping over the largest fully free
//!   chunk at each position (best-fit's run lengths: a whole free group in about a dozen
//!   steps instead of one per 64 blocks).
//!
//! # Lock order
//!
//! None of its own: the summary lives inside the group's bitmap, under the group lock.

use super::words::{even_bits, next_one, word_mask};

/// Highest order a group can have: groups are at most 2^20 blocks.
pub const ORDER_MAX: usize = 20;
/// Number of orders, 0 ..= ORDER_MAX.
pub const ORDERS: usize = ORDER_MAX + 1;
const _: () = assert!(1u64 << ORDER_MAX == crate::geometry::GROUP_BLOCKS_MAX);

/// The per-order summary of one group of `2^order_top` blocks.
#[derive(Debug, Clone)]
pub(super) struct Buddy {
    /// log2 of the group size.
    order_top: u32,
    /// `full[k - 1]` is the order-`k` bitmap.
    full: Vec<Vec<u64>>,
    full_count: [u32; ORDERS],
    first_free: [u32; ORDERS],
}

impl Buddy {
    /// The summary of a group of `group_blocks` (a power of two) with no block free.
    pub(super) fn all_used(group_blocks: u32) -> Self {
        let order_top = group_blocks.trailing_zeros();
        let full = (1..=order_top)
            .map(|k| vec![0u64; ((group_blocks >> k) as usize).div_ceil(64)])
            .collect();
        Buddy {
            order_top,
            full,
            full_count: [0; ORDERS],
            first_free: [0; ORDERS],
        }
    }

    pub(super) fn order_top(&self) -> u32 {
        self.order_top
    }

    /// `F_0`: the free blocks.
    #[inline]
    pub(super) fn free_blocks(&self) -> u32 {
        self.full_count[0]
    }

    /// The end of the free run that reaches the 64-aligned block `at`, at most `limit`:
    /// steps over the largest fully free aligned chunk at each position (a few steps per
    /// order instead of one per 64 blocks), then reads the block bitmap `used` for where
    /// the run stops inside the last word.
    pub(super) fn free_run_end(&self, used: &[u64], mut at: u64, limit: u64) -> u64 {
        debug_assert_eq!(at % 64, 0);
        'step: while at < limit {
            // Orders above 6 whose chunk starts at `at` and ends by `limit`, largest first.
            let top = self.order_top.min(at.trailing_zeros());
            for k in (7..=top).rev() {
                let size = 1u64 << k;
                if at + size <= limit
                    && self.full[k as usize - 1][(at >> k) as usize / 64] >> ((at >> k) % 64) & 1
                        == 1
                {
                    at += size;
                    continue 'step;
                }
            }
            // Order 6 is one word of the block bitmap.
            let word = used[(at / 64) as usize];
            if word != 0 {
                return limit.min(at + u64::from(word.trailing_zeros()));
            }
            at += 64;
        }
        limit
    }

    /// The order-`k` first-free hint.
    pub(super) fn first_free(&self, k: usize) -> u32 {
        self.first_free[k]
    }

    /// ext4's buddy counter for `order`: free aligned chunks of `2^order` blocks that are not
    /// part of a larger free aligned chunk.
    pub(super) fn buddy_count(&self, order: u32) -> u32 {
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
    pub(super) fn largest_free_order(&self) -> Option<u32> {
        (0..=self.order_top)
            .rev()
            .find(|&k| self.full_count[k as usize] > 0)
    }

    /// Start of the first fully-free aligned chunk of `order` in a group of `len_blocks`
    /// blocks whose block bitmap is `used`, searching from the hint when `use_hint` (and
    /// advancing the hint past what the search proved full).
    pub(super) fn find_free_chunk(
        &mut self,
        used: &[u64],
        len_blocks: u32,
        order: u32,
        use_hint: bool,
    ) -> Option<u32> {
        if order > self.order_top || self.full_count[order as usize] == 0 {
            return None;
        }
        let k = order as usize;
        let from = if use_hint {
            u64::from(self.first_free[k] >> order)
        } else {
            0
        };
        let chunks = u64::from(len_blocks >> order);
        let found = if k == 0 {
            next_one(used, from, u64::from(len_blocks), true)
        } else {
            next_one(&self.full[k - 1], from, chunks, false)
        };
        let start = found.map(|c| (c << order) as u32);
        // An aligned chunk of the order, inside the group.
        debug_assert!(start.is_none_or(|s| s % (1 << order) == 0 && s + (1 << order) <= len_blocks));
        if use_hint {
            self.first_free[k] = start.unwrap_or(len_blocks);
        }
        start
    }

    /// Blocks `lo .. hi`, free before, are now marked in the block bitmap: clears the chunks
    /// that overlap them, order by order.
    #[inline]
    #[allow(clippy::needless_range_loop)] // `w` also places each word's mask
    pub(super) fn mark_used(&mut self, lo: u64, hi: u64) {
        debug_assert!(lo < hi, "marking {lo}..{hi}");
        debug_assert!(
            self.full_count[0] as u64 >= hi - lo,
            "marking more than was free"
        );
        self.full_count[0] -= (hi - lo) as u32;
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

    /// Blocks `lo .. hi`, used before, are now clear in the block bitmap `used`: recomputes
    /// the chunks that overlap them from their children, order by order.
    #[inline]
    pub(super) fn mark_free(&mut self, used: &[u64], lo: u64, hi: u64) {
        debug_assert!(
            lo < hi && hi <= used.len() as u64 * 64,
            "freeing {lo}..{hi}"
        );
        self.full_count[0] += (hi - lo) as u32;
        self.first_free[0] = self.first_free[0].min(lo as u32);
        for k in 1..=self.order_top as usize {
            let (c_lo, c_hi) = (lo >> k, ((hi - 1) >> k) + 1);
            let mut added = 0;
            let mut lowest = None;
            for w in (c_lo / 64) as usize..=((c_hi - 1) / 64) as usize {
                let child = |i: usize| -> u64 {
                    if k == 1 {
                        used.get(i).map_or(0, |x| !x)
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

    /// Recomputes every order `k >= 1` from the block bitmap `used` and compares the order
    /// bitmaps, their counts and their hints. Returns what disagrees.
    pub(super) fn check(&self, used: &[u64]) -> Result<(), String> {
        let group_blocks = 1u64 << self.order_top;
        let mut prev: Vec<u64> = used.iter().map(|w| !w).collect();
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

    /// The order bitmaps `full[1..]`, for tests comparing two ways of building a group.
    #[cfg(test)]
    pub(super) fn levels(&self) -> &[Vec<u64>] {
        &self.full
    }
}
