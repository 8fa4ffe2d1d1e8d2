//! Word-level bit helpers shared by the block bitmap (`bitmap.rs`) and the buddy summary
//! (`buddy.rs`): masks of a bit range within one 64-bit word, the next set bit of a word
//! slice, and the compaction of even bits that builds one order from the one below.
//!
//! # Data structures
//!
//! None of their own: they read `&[u64]` slices, bit `i` of a slice being bit `i % 64` of
//! word `i / 64`.
//!
//! # Invariant
//!
//! Pure functions: a result depends on the arguments only.
//!
//! # Lock order
//!
//! None: these functions take no lock (their callers hold the group lock).

/// Extracts the even-numbered bits of `x` into the low 32 bits.
#[inline]
pub(super) fn even_bits(mut x: u64) -> u64 {
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
pub(super) fn word_mask(w: usize, lo: u64, hi: u64) -> u64 {
    let word_lo = (w as u64) * 64;
    let a = lo.max(word_lo) - word_lo;
    let b = hi.min(word_lo + 64) - word_lo;
    debug_assert!(a < b);
    let upper = if b == 64 { u64::MAX } else { (1u64 << b) - 1 };
    upper & !((1u64 << a) - 1)
}

/// First set bit at or after `from` in `words`, below `limit`.
#[inline]
pub(super) fn next_one(words: &[u64], from: u64, limit: u64, invert: bool) -> Option<u64> {
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
