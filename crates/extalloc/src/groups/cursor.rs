//! A walk's cursor over a few ordered sets: the smallest member at or after a position in
//! any of them, each set's next member kept between lookups, so that a walk moving right
//! looks a set up again only once it has passed the member it kept there.
//!
//! Why: an index walk asks "the next group in any order `>= order_min`" once per candidate
//! group. Asked afresh, that is one [`AtomicBitset::next_set`] per order per candidate, and
//! on a large device the sets of the higher orders are sparse: each of those lookups climbs
//! the hierarchy to the top and down again, touching cache lines that no longer fit in L1
//! (at 524,288 groups, 64 TiB, that was 24-30 % of fallocate3's time). Kept, each set is
//! looked up once per walk plus once per member the walk takes from it.
//!
//! # Data structures
//!
//! [`SetsCursor`]: the sets (a slice of at most [`ORDERS`] bitsets) and, per set, the
//! position its last lookup started from (`from`) and the member it found there (`kept`;
//! `u64::MAX` for none), both on the stack; optionally a [`Skip`]: other sets (a tier's
//! per-tag sets) whose members, but for one set's, the cursor steps over with a bit test.
//!
//! # Invariant
//!
//! ```text
//! for each set i: at its last lookup, set i had no member in [from[i], kept[i])
//! next(at, limit) == min over i of the first member >= at of set i, if below limit, where
//!   set i is looked up again unless from[i] <= at <= kept[i]
//! with a Skip: next(at, limit) is the first such member that no skip set but `except`'s
//!   holds at the moment of the bit test
//! ```
//!
//! Without concurrent updates that is exactly `min_i sets[i].next_set(at)`. Under them a
//! walk is no snapshot either way: a group that joins a set behind the walk is missed by it,
//! and one that joins set i within `[at, kept[i])` after the lookup is missed too. Entries
//! are hints (a visit rechecks the group under its lock); the next walk sees the group.
//!
//! # Lock order
//!
//! None: the sets take no lock, and the cursor is one walk's, on its stack.

use super::bitset::AtomicBitset;
use super::buddy::ORDERS;

/// Members a walk passes over without a look: those of any of `sets` but the one at
/// `except` (a tiered walk's groups of other size classes, through the per-tag sets).
#[derive(Clone, Copy)]
pub struct Skip<'a> {
    /// The sets whose members are passed over (the per-tag sets).
    pub sets: &'a [AtomicBitset],
    /// The one set whose members are not (the walk's own tag's), if any.
    pub except: Option<usize>,
}

impl Skip<'_> {
    /// True if `g` is in one of the sets other than `except`'s.
    #[inline]
    fn passes_over(&self, g: u64) -> bool {
        self.sets
            .iter()
            .enumerate()
            .any(|(i, set)| Some(i) != self.except && set.contains(g))
    }
}

/// The next member of any of a few sets, for a walk that moves right (see the module doc).
pub struct SetsCursor<'a> {
    sets: &'a [AtomicBitset],
    from: [u64; ORDERS],
    kept: [u64; ORDERS],
    skip: Option<Skip<'a>>,
    /// Lookups made (`next_set` calls): what the cursor saves shows here.
    lookups: u64,
    /// Members passed over by `skip`.
    skipped: u64,
}

impl<'a> SetsCursor<'a> {
    /// A cursor over `sets` (at most [`ORDERS`]) that has looked nothing up yet.
    pub fn new(sets: &'a [AtomicBitset]) -> Self {
        assert!(
            sets.len() <= ORDERS,
            "a cursor over {} sets (at most {ORDERS})",
            sets.len()
        );
        SetsCursor {
            sets,
            // `from` past any position: the first `next` looks every set up.
            from: [u64::MAX; ORDERS],
            kept: [0; ORDERS],
            skip: None,
            lookups: 0,
            skipped: 0,
        }
    }

    /// The same cursor, passing over the members `skip` names (a hint, as the sets are: the
    /// walk still checks what it is given).
    pub fn skipping(self, skip: Option<Skip<'a>>) -> Self {
        SetsCursor { skip, ..self }
    }

    /// The smallest member in `[at, limit)` of any of the sets that `skip` does not name.
    pub fn next(&mut self, mut at: u64, limit: u64) -> Option<u64> {
        debug_assert!(at <= limit, "a lookup from {at} past its limit {limit}");
        loop {
            let g = self.first_from(at).filter(|&g| g < limit)?;
            match self.skip {
                Some(skip) if skip.passes_over(g) => {
                    self.skipped += 1;
                    at = g + 1;
                }
                _ => return Some(g),
            }
        }
    }

    /// The smallest member `>= at` of any of the sets.
    fn first_from(&mut self, at: u64) -> Option<u64> {
        let mut best = u64::MAX;
        for (i, set) in self.sets.iter().enumerate() {
            if !(self.from[i] <= at && at <= self.kept[i]) {
                self.from[i] = at;
                // An empty set costs its count's load, not a climb of its hierarchy.
                self.kept[i] = if set.population() == 0 {
                    u64::MAX
                } else {
                    self.lookups += 1;
                    set.next_set(at).unwrap_or(u64::MAX)
                };
            }
            best = best.min(self.kept[i]);
        }
        debug_assert!(best >= at, "member {best} found before {at}");
        (best != u64::MAX).then_some(best)
    }

    /// `next_set` calls made so far.
    pub fn lookups(&self) -> u64 {
        self.lookups
    }

    /// Members passed over by the cursor's [`Skip`] so far.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeSet;

    /// Against a model, through walks that move right, restart to the left and step past
    /// the limit, with the sets changed between walks.
    #[test]
    fn cursor_matches_fresh_lookups() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(52);
        let n = 20_000;
        let sets: Vec<AtomicBitset> = (0..6).map(|_| AtomicBitset::new(n)).collect();
        let mut model = vec![BTreeSet::new(); sets.len()];
        for _ in 0..40 {
            for _ in 0..300 {
                let (s, g) = (rng.gen_range(0..sets.len()), rng.gen_range(0..n));
                if rng.gen_bool(0.7) {
                    sets[s].insert(g);
                    model[s].insert(g);
                } else {
                    sets[s].remove(g);
                    model[s].remove(&g);
                }
            }
            let lo = rng.gen_range(0..sets.len());
            let mut cursor = SetsCursor::new(&sets[lo..]);
            let mut at = rng.gen_range(0..n);
            for _ in 0..200 {
                let limit = rng.gen_range(at..=n);
                let want = model[lo..]
                    .iter()
                    .filter_map(|m| m.range(at..).next().copied())
                    .min()
                    .filter(|&g| g < limit);
                assert_eq!(cursor.next(at, limit), want, "from {at} below {limit}");
                // Mostly the walk's step past what it found; sometimes a jump either way.
                at = match want {
                    Some(g) if rng.gen_bool(0.9) => g + 1,
                    _ => rng.gen_range(0..n),
                };
            }
        }
    }

    /// With a [`Skip`], the walk yields what a walk without it followed by the tag filter
    /// keeps, in the same order, and counts what it passed over.
    #[test]
    fn skip_passes_over_other_tags_only() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let n = 5_000;
        let sets: Vec<AtomicBitset> = (0..3).map(|_| AtomicBitset::new(n)).collect();
        let tags: Vec<AtomicBitset> = (0..4).map(|_| AtomicBitset::new(n)).collect();
        let mut tag_of = vec![None; n as usize];
        for g in 0..n {
            if rng.gen_bool(0.6) {
                sets[rng.gen_range(0..sets.len())].insert(g);
            }
            if rng.gen_bool(0.7) {
                let t = rng.gen_range(0..tags.len());
                tags[t].insert(g);
                tag_of[g as usize] = Some(t);
            }
        }
        for except in [None, Some(0), Some(2)] {
            let walk = |mut cursor: SetsCursor<'_>| {
                let (mut at, mut out) = (0, Vec::new());
                while let Some(g) = cursor.next(at, n) {
                    out.push(g);
                    at = g + 1;
                }
                (out, cursor.skipped())
            };
            let (all, none_skipped) = walk(SetsCursor::new(&sets));
            let skip = Skip {
                sets: &tags,
                except,
            };
            let (kept, skipped) = walk(SetsCursor::new(&sets).skipping(Some(skip)));
            let want: Vec<u64> = all
                .iter()
                .copied()
                .filter(|&g| tag_of[g as usize].is_none_or(|t| Some(t) == except))
                .collect();
            assert_eq!(kept, want, "except {except:?}");
            assert_eq!(none_skipped, 0);
            assert_eq!(skipped as usize, all.len() - want.len());
            assert!(skipped > 0 && !kept.is_empty());
        }
    }

    /// A walk over one dense set among a sparse one and empty ones looks each non-empty set
    /// up once, then only the set whose member it took: not every set per member.
    #[test]
    fn cursor_looks_up_only_the_set_it_took_from() {
        let n = 1 << 19;
        let sets: Vec<AtomicBitset> = (0..16).map(|_| AtomicBitset::new(n)).collect();
        (0..1000).for_each(|g| sets[3].insert(g * 7));
        sets[15].insert(n - 1);
        let mut cursor = SetsCursor::new(&sets);
        let (mut at, mut seen) = (0, Vec::new());
        while let Some(g) = cursor.next(at, n) {
            seen.push(g);
            at = g + 1;
        }
        assert_eq!(seen.len(), 1001);
        assert_eq!(seen[999], 999 * 7);
        assert_eq!(seen[1000], n - 1);
        // Two first lookups (the 14 empty sets cost none), then one per member taken.
        assert_eq!(cursor.lookups(), 2 + 1001);
    }
}
