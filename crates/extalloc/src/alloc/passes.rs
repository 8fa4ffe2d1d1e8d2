//! The criteria passes: which groups each pass accepts and how it searches inside one.
//!
//! Pass 0 is the exact goal. Passes 1-5 ([`Pass`]) run fastest first until one finds space;
//! each walks groups (`walk.rs`), checks a group's lock-free mirrors (`good_group`), locks it
//! (try-lock in passes 1-4 when the policy says so) and searches its bitmap with bounded
//! effort (`scan_group`): pass 1 a free aligned chunk, passes 2-4 a best fit, pass 5 the first
//! run long enough or else the longest seen. `take` marks the extent used.
//!
//! A normalised window asks for more than its caller needs ([`AllocRequest::need`]): pass 3
//! trims it down to the need and no further, and with indexed slow passes, pass 4 looks for
//! the whole window, then for the smallest run that holds the need (taking as much of it as
//! the window asks), before pass 5 takes a shorter run.
//!
//! [`AllocRequest::need`]: super::request::AllocRequest::need
//!
//! # Data structures
//!
//! [`Pass`], the passes' names and numbers (stats count hits per pass). The rest reads the
//! allocator's: the group mirrors and indexes, and a locked group's bitmap.
//!
//! # Invariant
//!
//! Mirrors are hints: a group is searched only under its lock, in its loaded bitmap, so a
//! pass takes only blocks that are free there and not pending; an extent lies in one group.
//!
//! # Lock order
//!
//! One group lock at a time (a pass releases a group before it locks the next). Under it,
//! loading takes the loader's lock (`cache.rs`), and `take` the global lock (a locked stream
//! goal) and list-index locks (`publish.rs`).

use super::allocator::Allocator;
use super::request::AllocContext;
use super::walk::{Route, Tiers, Walk};
use crate::geometry::Extent;
use crate::groups::{GroupState, OrderIndex};

/// The allocation passes, fastest first. Each variant's doc says what it costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum Pass {
    /// The exact goal block: one group lock, one bitmap range test.
    Goal = 0,
    /// Power-of-two request: groups whose largest free order fits; one chunk lookup each.
    Power2Aligned = 1,
    /// Groups whose average free fragment is at least the request; bounded extent scan.
    GoalLenFast = 2,
    /// Request trimmed to the best length likely to exist; bounded extent scan.
    BestAvailLen = 3,
    /// Any group with enough free blocks; bounded extent scan of its bitmap.
    GoalLenSlow = 4,
    /// Any free blocks at all, waiting for busy groups; takes the best found.
    AnyFree = 5,
}

impl Pass {
    /// Every pass in the order they run; `StatsSnapshot::pass_hits` is indexed alike.
    pub const ALL: [Pass; 6] = [
        Pass::Goal,
        Pass::Power2Aligned,
        Pass::GoalLenFast,
        Pass::BestAvailLen,
        Pass::GoalLenSlow,
        Pass::AnyFree,
    ];

    /// The pass's kebab-case name, as reports print it.
    pub fn name(self) -> &'static str {
        match self {
            Pass::Goal => "goal",
            Pass::Power2Aligned => "power2-aligned",
            Pass::GoalLenFast => "goal-len-fast",
            Pass::BestAvailLen => "best-avail-len",
            Pass::GoalLenSlow => "goal-len-slow",
            Pass::AnyFree => "any-free",
        }
    }
}

pub(super) fn floor_log2(n: u64) -> u32 {
    63 - n.leading_zeros()
}

impl Allocator {
    /// Pass 0: the free run at exactly `goal`, up to `len` blocks, if it holds at least
    /// the request's `goal_min_len` (all of `len` unless the request says less).
    pub(super) fn alloc_at_goal(&self, ctx: &AllocContext<'_>, goal: u64) -> Option<Extent> {
        let len = ctx.request.len as u32;
        let want = match ctx.request.goal_min_len {
            0 => len,
            n => n as u32,
        };
        let g = self.geometry.group_of(goal);
        let off = (goal - self.geometry.group_start(g)) as u32;
        let group = self.groups.get(g);
        if group.free_blocks() < want {
            return None;
        }
        let mut state = self.lock_group(g, ctx.shard).ok()?;
        let run = state.bitmap.free_run_at(off, len);
        if run < want || run == 0 {
            return None;
        }
        Some(self.take(ctx, g, &mut state, off, run))
    }

    /// Passes 1-5 from group `start`: the extent and the pass that found it.
    pub(super) fn scan_passes<'a>(
        &'a self,
        ctx: &AllocContext<'_>,
        start: u64,
    ) -> Option<(Extent, Pass)> {
        let req = ctx.request;
        let len = req.len;
        let order = floor_log2(len);
        let indexed = self.policy.optimize_scan;
        let walk = |index: &'a OrderIndex, order_min: u32| -> Walk<'a> {
            if indexed {
                Walk::Index(index, order_min)
            } else {
                Walk::Linear
            }
        };
        // Without size classes every group is in tier 0; with them, each pass tries the tiers
        // in order (same class, same size, untagged, other size).
        let run = |pass: Pass, walk: Walk<'_>, want: u64| {
            self.run_pass(ctx, pass, walk, start, want)
                .map(|e| (e, pass))
        };

        if len.is_power_of_two() && order >= self.policy.order2_min_order {
            if let Some(hit) = run(Pass::Power2Aligned, walk(&self.by_largest, order), len) {
                return Some(hit);
            }
        }
        if let Some(hit) = run(Pass::GoalLenFast, walk(&self.by_avg, order), len) {
            return Some(hit);
        }
        // Trimmed, the request still holds what the caller needs (ext4's cr1.5 stops at
        // the original request's length, `ac_o_ex`): a window trimmed below it would map
        // the caller's blocks in two extents where one run may hold them all.
        let need = req.need();
        let trim_floor = order.saturating_sub(self.policy.best_avail_trim_orders);
        for trimmed in (trim_floor..order).rev() {
            let want = 1u64 << trimmed;
            if want < need {
                break;
            }
            if let Some(hit) = run(Pass::BestAvailLen, walk(&self.by_avg, trimmed), want) {
                return Some(hit);
            }
        }
        if !self.slow_indexed() {
            if let Some(hit) = run(Pass::GoalLenSlow, Walk::Linear, len) {
                return Some(hit);
            }
            return run(Pass::AnyFree, Walk::Linear, len);
        }
        self.indexed_slow_passes(ctx, start)
    }

    /// Passes 4 and 5 over the indexes (`slow_indexed`): pass 4 among groups with at least
    /// the request's order of free blocks, for the whole request, then for what the caller
    /// needs; pass 5 from the largest free chunk down, so a crowded device gives the longest
    /// extent there is and no scan looks at groups that cannot help.
    fn indexed_slow_passes(&self, ctx: &AllocContext<'_>, start: u64) -> Option<(Extent, Pass)> {
        let req = ctx.request;
        let (len, need) = (req.len, req.need());
        if let Some(e) = self.indexed_fit(ctx, start, len) {
            return Some((e, Pass::GoalLenSlow));
        }
        // The window found no room: a best fit of what the caller needs, wherever a group
        // may hold it, before pass 5 settles for the longest run near the start (XFS's
        // by-size lookup: the smallest free extent that holds the request). Only for a
        // need the caller states beyond `min_len`: a request that accepts any length from
        // `min_len` wants the longest run pass 5 finds, not the smallest that fits.
        if req.min_len < need && need < len {
            if let Some(e) = self.indexed_fit(ctx, start, need) {
                return Some((e, Pass::GoalLenSlow));
            }
        }
        let top = self.by_largest.order_count() - 1;
        // A free run of `min_len` blocks holds an aligned chunk of this order at least (a run
        // of 2^(k+1) - 1 blocks holds an aligned 2^k chunk wherever it starts).
        let floor = floor_log2(req.min_len + 1).saturating_sub(1);
        (floor..=top).rev().find_map(|o| {
            let walk = Walk::IndexExact(&self.by_largest, o);
            self.run_pass(ctx, Pass::AnyFree, walk, start, len)
                .map(|e| (e, Pass::AnyFree))
        })
    }

    /// Pass 4 through `by_free` for a best fit of `want` blocks. Only when some group's
    /// largest free chunk could hold the run: on a crowded device every group is in
    /// `by_free`'s sets and none passes, so the walk would cost the whole device each time.
    fn indexed_fit(&self, ctx: &AllocContext<'_>, start: u64, want: u64) -> Option<Extent> {
        let could = floor_log2(want + 1).saturating_sub(1);
        let groups = self.geometry.groups_count();
        self.by_largest.next_in_orders(could, 0, groups)?;
        let walk = Walk::Index(&self.by_free, floor_log2(want));
        self.run_pass(ctx, Pass::GoalLenSlow, walk, start, want)
    }

    /// Passes 4 and 5 walk indexes too (`slow_pass_index` with ordered indexes).
    pub(super) fn slow_indexed(&self) -> bool {
        self.policy.slow_pass_index && self.policy.optimize_scan && self.policy.ordered_index
    }

    /// The lock-free check of a group's mirrors before locking it (an untouched group's
    /// figures are read without making its [`crate::groups::Group`]).
    pub(super) fn good_group(&self, ctx: &AllocContext<'_>, g: u64, pass: Pass, want: u64) -> bool {
        let group = self.groups.figures(g);
        let free = u64::from(group.free_blocks);
        let min_len = ctx.request.min_len;
        match pass {
            Pass::Goal => unreachable!("the goal is not a scanning pass"),
            Pass::Power2Aligned => group.largest_order.is_some_and(|o| o >= floor_log2(want)),
            Pass::GoalLenFast | Pass::BestAvailLen => {
                free >= want
                    && group.avg_order.is_some_and(|o| o >= floor_log2(want))
                    && may_hold_run(group.largest_order, want)
            }
            // Enough free blocks is not enough: on a crowded device with small holes every
            // group has them, and searching each bitmap for a run it cannot hold made the
            // cost of a large request grow with the device.
            Pass::GoalLenSlow => free >= want && may_hold_run(group.largest_order, want),
            Pass::AnyFree => free >= min_len,
        }
    }

    /// Runs one pass: walks the groups from `start` (`walk.rs`), checking each with
    /// `good_group` and searching it with `scan_group`, until one gives an extent. With size
    /// classes, groups are tried in tiers ([`Tiers`]): the request's own tag first, other
    /// tags and untagged groups after.
    fn run_pass(
        &self,
        ctx: &AllocContext<'_>,
        pass: Pass,
        walk: Walk<'_>,
        start: u64,
        want: u64,
    ) -> Option<Extent> {
        let route = Route {
            walk,
            start,
            class_tag: ctx.class_tag,
            shard: ctx.shard,
            skip: None,
        };
        let fast = matches!(
            pass,
            Pass::GoalLenFast | Pass::BestAvailLen | Pass::Power2Aligned
        );
        let good = |g: u64| {
            self.good_group(ctx, g, pass, want) && !(fast && self.held_by_another_stream(ctx, g))
        };
        let mut visit = |g: u64| self.scan_group(ctx, g, pass, want);
        // With indexed slow passes the device is crowded by the time they run: they take
        // the best space the index knows whatever its class, rather than walking every
        // tagged group once per tier (and per order in pass 5).
        let untiered = self.slow_indexed() && matches!(pass, Pass::GoalLenSlow | Pass::AnyFree);
        if !self.policy.size_classes || ctx.class_tag == 0 || untiered {
            return self.walk_groups(&route, &good, &mut visit);
        }
        Tiers::new(&route, ctx.stream)
            .find_map(|tier| self.walk_tier(&route, tier, &good, &mut visit))
    }

    /// Locks group `g` (or skips it when busy and the pass allows) and searches it.
    pub(super) fn scan_group(
        &self,
        ctx: &AllocContext<'_>,
        g: u64,
        pass: Pass,
        want: u64,
    ) -> Option<Extent> {
        let (min_len, shard) = (ctx.request.min_len, ctx.shard);
        let group = self.groups.get(g);
        let slot = if self.policy.trylock && pass != Pass::AnyFree {
            match group.try_lock() {
                Some(s) => s,
                None => {
                    shard.add(&shard.counters.trylock_skips, 1);
                    return None;
                }
            }
        } else {
            self.lock_slot(group, shard)
        };
        // A group that cannot be read is skipped (its error is counted); others still serve.
        let mut state = self.loaded(g, slot, shard).ok()?;
        shard.add(&shard.counters.groups_scanned, 1);
        let hint = self.policy.first_free_hint;
        let want32 = want as u32;
        let found = match pass {
            Pass::Goal => unreachable!("the goal is not a scanning pass"),
            Pass::Power2Aligned => state
                .bitmap
                .find_free_chunk(floor_log2(want), hint)
                .map(|off| (off, want32)),
            Pass::GoalLenFast | Pass::BestAvailLen | Pass::GoalLenSlow => {
                if u64::from(state.bitmap.free_blocks()) < want {
                    None
                } else {
                    // The need's best fit (pass 4 for less than the request) takes as
                    // much of the run as the window asks: the rest is the file's
                    // preallocation, not a sliver left beside it.
                    let need_fit = pass == Pass::GoalLenSlow && want < ctx.request.len;
                    let most = if need_fit {
                        ctx.request.len as u32
                    } else {
                        want32
                    };
                    self.best_fit(&mut state, want32)
                        .map(|(off, run)| (off, run.min(most)))
                }
            }
            Pass::AnyFree => self.largest_fit(&mut state, want32, min_len as u32),
        };
        let (off, len) = found?;
        Some(self.take(ctx, g, &mut state, off, len))
    }

    /// Smallest free run of at least `want` blocks, examining a bounded number of runs:
    /// its offset and length.
    fn best_fit(&self, state: &mut GroupState, want: u32) -> Option<(u32, u32)> {
        let from = state
            .bitmap
            .find_free_chunk(0, self.policy.first_free_hint)?;
        let mut best: Option<(u32, u32)> = None;
        for (examined, (off, run)) in state.bitmap.free_runs(from).enumerate() {
            let examined = examined as u32 + 1;
            if run >= want && best.is_none_or(|(_, b)| run < b) {
                best = Some((off, run));
                if run == want {
                    break;
                }
            }
            if examined >= self.policy.max_scan_extents
                || (best.is_some() && examined >= self.policy.min_scan_extents)
            {
                break;
            }
        }
        let best = best.or_else(|| self.buddy_fit(state, want));
        debug_assert!(
            best.is_none_or(|(off, run)| run >= want && state.bitmap.range_is_free(off, run))
        );
        best
    }

    /// A run of at least `want` blocks that the bounded scans did not reach: when the
    /// group's largest aligned chunk holds `want`, the buddy orders find one directly (its
    /// offset and the free run from there). Without it a group of many small holes before
    /// its one long run split a file the run could hold whole.
    fn buddy_fit(&self, state: &mut GroupState, want: u32) -> Option<(u32, u32)> {
        let order = want.next_power_of_two().trailing_zeros();
        if state.bitmap.largest_free_order()? < order {
            return None;
        }
        let chunk = state
            .bitmap
            .find_free_chunk(order, self.policy.first_free_hint)?;
        // From the start of the free run holding the chunk: an aligned offset in the middle
        // of a longer run would leave the run's head free beside the allocation, a fragment
        // later small requests cut into instead of the holes that fit them.
        let off = state.bitmap.free_run_start(chunk);
        let run = state.bitmap.free_run_at(off, u32::MAX);
        debug_assert!(
            run >= want,
            "a free chunk of order {order} holds {want} blocks"
        );
        Some((off, run))
    }

    /// The first run of `want` blocks, or the longest run seen (at least `min_len`).
    fn largest_fit(&self, state: &mut GroupState, want: u32, min_len: u32) -> Option<(u32, u32)> {
        let from = state
            .bitmap
            .find_free_chunk(0, self.policy.first_free_hint)?;
        let mut best: Option<(u32, u32)> = None;
        for (examined, (off, run)) in state.bitmap.free_runs(from).enumerate() {
            if best.is_none_or(|(_, b)| run > b) {
                best = Some((off, run.min(want)));
            }
            if run >= want || examined as u32 + 1 >= self.policy.max_scan_extents {
                break;
            }
        }
        if best.is_none_or(|(_, len)| len < want) {
            if let Some((off, _)) = self.buddy_fit(state, want) {
                best = Some((off, want));
            }
        }
        debug_assert!(
            best.is_none_or(|(off, len)| len <= want && state.bitmap.range_is_free(off, len))
        );
        best.filter(|&(_, len)| len >= min_len)
    }

    /// Step 7: marks `off .. off + len` of group `g` used, publishes the new summary and
    /// moves a stream's goal to the group.
    fn take(
        &self,
        ctx: &AllocContext<'_>,
        g: u64,
        state: &mut GroupState,
        off: u32,
        len: u32,
    ) -> Extent {
        debug_assert!(
            !state.pending_overlaps(off, len),
            "allocating blocks that wait to be freed"
        );
        debug_assert!(
            len > 0 && u64::from(off + len) <= self.geometry.group_len(g),
            "group {g}: extent {off}+{len} outside the group"
        );
        debug_assert!(
            state.bitmap.range_is_free(off, len),
            "group {g}: handing out {off}+{len}, which is not all free"
        );
        debug_assert!(
            !self.corrupt.contains(g),
            "group {g} is held corrupt and must never be searched"
        );
        state.bitmap.mark_used(off, len);
        if ctx.class_tag != 0 && self.groups.class_tag(g) == 0 {
            // The group's first allocation gives it its class.
            self.set_group_tag(g, ctx.class_tag);
        }
        self.publish(g, state, ctx.shard);
        self.follow_stream(ctx, g);
        Extent::new(
            self.geometry.group_start(g) + u64::from(off),
            u64::from(len),
        )
    }
}

/// Can a group whose largest free aligned chunk has order `largest` hold a free run of
/// `want` blocks? A run of `want` blocks holds an aligned chunk of order
/// `floor(log2(want + 1)) - 1` wherever it starts, so a smaller largest order rules it out.
fn may_hold_run(largest: Option<u32>, want: u64) -> bool {
    largest.is_some_and(|o| o >= floor_log2(want + 1).saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use crate::alloc::{AllocRequest, Allocator, Policy};
    use crate::geometry::{Extent, Geometry};

    /// `groups` groups of 4,096 blocks under `policy`, every block used.
    fn full(groups: u64, policy: &str) -> Allocator {
        let a = Allocator::new(
            Geometry::new(4096, 4096, groups * 4096).unwrap(),
            Policy::parse(policy).unwrap(),
        )
        .unwrap();
        while a.allocate(&AllocRequest::new(1, 4096)).is_ok() {}
        assert_eq!(a.free_blocks(), 0);
        a
    }

    /// Four groups of 4,096 blocks, all used but for: in group 0, 20 runs of 128 blocks (a
    /// good average fragment); in group 1, one run of 600 blocks among 100 single blocks
    /// (a poor average, but the only run that holds 600).
    fn aged() -> Allocator {
        let a = full(4, "extalloc");
        for i in 0..20 {
            a.free(Extent::new(i * 129, 128)).unwrap();
        }
        a.free(Extent::new(4096, 600)).unwrap();
        for i in 0..100 {
            a.free(Extent::new(4096 + 700 + 2 * i, 1)).unwrap();
        }
        a.commit();
        a
    }

    /// A normalised window (1,024 blocks) of which the caller needs 600: pass 3 does not
    /// trim it to the 128-block runs near the goal, and the run that holds the whole need
    /// is found elsewhere. Asking for nothing in particular (a need of one block), the
    /// trimmed window near the goal is taken, as before.
    #[test]
    fn a_window_is_not_trimmed_below_what_its_caller_needs() {
        let a = aged();
        let window = AllocRequest::new(7, 1024).min_len(1).goal(0);
        let got = a.allocate(&window.need_len(600)).unwrap();
        assert_eq!(
            got,
            Extent::new(4096, 600),
            "the one run that holds the need"
        );
        a.check().unwrap();

        let a = aged();
        let got = a.allocate(&window).unwrap();
        assert!(
            got.len < 600 && got.start < 4096,
            "{got:?}: trimmed near the goal"
        );
        a.check().unwrap();
    }

    /// One full group with 300 one-block holes, then `run` free.
    fn holes_before(run: Extent) -> Allocator {
        let a = full(1, "extalloc");
        for i in 0..300 {
            a.free(Extent::new(2 * i, 1)).unwrap();
        }
        a.free(run).unwrap();
        a.commit();
        a
    }

    /// A group with 300 one-block holes before its one long run: the bounded scans (200
    /// free extents) never reach the run, but the group's buddy orders say it is there,
    /// and the request takes it whole instead of one block of the first hole.
    #[test]
    fn a_run_past_the_scans_bound_is_found_through_the_buddy_orders() {
        let a = holes_before(Extent::new(2048, 1024));
        let got = a.allocate(&AllocRequest::new(7, 1000).min_len(1)).unwrap();
        assert_eq!(got, Extent::new(2048, 1000));
        a.check().unwrap();
    }

    /// The same group with its long run starting off the buddy alignment (blocks 2,000 to
    /// 3,071): the request starts where the run does, not at the aligned chunk inside it,
    /// and leaves one piece of the run free instead of a 48-block head and a 24-block tail.
    #[test]
    fn a_buddy_fit_starts_at_its_runs_start() {
        let a = holes_before(Extent::new(2000, 1072));
        let got = a.allocate(&AllocRequest::new(7, 1000).min_len(1)).unwrap();
        assert_eq!(got, Extent::new(2000, 1000));
        let after = a.free_space();
        assert_eq!(after.free_extents, 301, "300 holes and the run's one tail");
        assert_eq!(after.largest_free_extent_blocks, 72);
        a.check().unwrap();
    }

    /// A 1,024-block window on a device whose group 0 holds a free run of 1,030 blocks
    /// (no aligned 1,024-block chunk in it) and group 1 a run of 3,584 (one aligned chunk
    /// in its middle). `extalloc` takes the best fit in group 0 and leaves group 1's run
    /// whole; pass 1 (`ext4-2025`, every power-of-two request of 4 blocks or more) takes
    /// the aligned chunk and splits group 1's run in two.
    #[test]
    fn a_window_below_pass_1s_order_takes_the_best_fit_not_an_aligned_chunk() {
        let setup = |policy: &str| {
            let a = full(4, policy);
            a.free(Extent::new(100, 1030)).unwrap();
            a.free(Extent::new(4096 + 512, 3584)).unwrap();
            a.commit();
            a
        };
        let window = AllocRequest::new(7, 1024).min_len(1).goal(0);

        let a = setup("extalloc");
        assert_eq!(a.allocate(&window).unwrap(), Extent::new(100, 1024));
        let after = a.free_space();
        assert_eq!(
            after.largest_free_extent_blocks, 3584,
            "group 1's run left whole"
        );
        a.check().unwrap();

        let a = setup("ext4-2025");
        let got = a.allocate(&window).unwrap();
        assert_eq!(got, Extent::new(4096 + 1024, 1024), "the aligned chunk");
        assert_eq!(
            a.free_space().largest_free_extent_blocks,
            2048,
            "a piece on each side"
        );
        a.check().unwrap();
    }
}
