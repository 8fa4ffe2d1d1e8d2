//! Stream goals: where a large file's allocations start scanning, and how they follow it.
//!
//! # Data structures
//!
//! `Allocator::stream_goals`: `stream_goals_per_class` cache-padded atomic group numbers per
//! size class (one class without size classes), laid out class by class: slot
//! `class * goals + k`. Their count is the policy's `stream_goals` (0: `min(cpus, groups / 4)`,
//! at least 1); where they start is its `stream_start`. A policy with `stream_goal_locked`
//! (ext4-base) uses instead the single goal in [`MdState`], under the global lock.
//!
//! A request is a stream's when its logical end passes `stream_threshold_kib`. A stream
//! request (or one without a goal) starts scanning at its file's goal: the file id folded
//! and taken modulo the goals of its class, except when its own goal lies in a group of
//! another size (a file that outgrew its class): it then starts at that group, and the walk
//! takes the nearest group of its class or nobody's, next to the file. A stream allocation
//! moves the goal to the group it got.
//!
//! Active groups (`stream_start=active`): the groups being filled at once are the goals'
//! groups, at most one per goal, so as many as the concurrency the goals are sized for
//! (`min(cpus, groups / 4)` per class). A goal starts unplaced. Before the passes, a stream's
//! request takes a best fit in its goal's group, else in the first group from group 0 whose
//! largest free aligned chunk holds it ([`Allocator::refill_active`]): groups in use and refilled holes first,
//! untouched space last. That search and the fast passes (1-3) skip the groups other goals
//! hold, so concurrent streams still fill different groups (the spreading the 2025 series
//! wants, without spreading the data over the device). The passes, when they run, start
//! from group 0.
//!
//! # Invariant
//!
//! Every goal is a group number below the group count, or (`active` only) the group count
//! itself for a goal not yet placed; a goal is written only when it changes (no shared-line
//! write while a stream stays in its group).
//!
//! # Lock order
//!
//! The atomic goals take no lock. The locked goal is read under the global lock alone, and
//! written under it while the allocating group's lock is held (group lock -> global lock).
//!
//! [`MdState`]: super::allocator::MdState

use super::allocator::Allocator;
use super::class;
use super::passes::{floor_log2, Pass};
use super::policy::{Policy, StreamStart};
use super::request::{AllocContext, AllocRequest};
use super::walk::{Route, Walk};
use crate::geometry::Extent;
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

impl Allocator {
    /// The stream goals of an allocator over `groups_count` groups with `policy`, at their
    /// start positions, and how many there are per size class.
    pub(super) fn stream_goal_slots(
        policy: &Policy,
        groups_count: u64,
    ) -> (Box<[CachePadded<AtomicU64>]>, u64) {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        let per_class = match policy.stream_goals {
            0 => cpus.min(groups_count / 4).max(1),
            n => u64::from(n),
        };
        // With size classes each class has its own goals, so a large short-lived stream does
        // not drag a small long-lived one along behind it.
        let slots = per_class * if policy.size_classes { 3 } else { 1 };
        let goals = (0..slots)
            .map(|i| {
                let start = match policy.stream_start {
                    StreamStart::Spread => i * groups_count / slots,
                    StreamStart::Front => 0,
                    StreamStart::Packed => i % groups_count,
                    // Unplaced: the first allocation places it (`scan_start`).
                    StreamStart::Active => groups_count,
                    StreamStart::Goals => {
                        // Slots are laid out class by class: slot = class * goals + k.
                        let (class, k) = (i / per_class, i % per_class);
                        (k * groups_count / per_class + class) % groups_count
                    }
                    StreamStart::Interleaved => {
                        // As `Goals`, but goal k of a class sits where `Spread` puts
                        // goal k of the first class.
                        let (class, k) = (i / per_class, i % per_class);
                        (k * groups_count / slots + class) % groups_count
                    }
                };
                CachePadded::new(AtomicU64::new(start))
            })
            .collect();
        (goals, per_class)
    }

    /// Number of stream goals in use (per size class, when size classes are on).
    pub fn stream_goals_count(&self) -> usize {
        self.stream_goals_per_class as usize
    }

    /// The group file `file`'s next stream allocation of `blocks` (a window's length)
    /// would start scanning from: its stream goal in the size class of that length.
    pub fn stream_goal_group(&self, file: u64, blocks: u64) -> u64 {
        if self.policy.stream_goal_locked {
            return self.lock_md(self.stats.shard()).stream_goal % self.groups.len();
        }
        let class_index = if self.policy.size_classes {
            AllocRequest::new(file, blocks.max(1))
                .size_class(self.geometry.block_size)
                .1
        } else {
            0
        };
        self.stream_goals[self.stream_slot(file, class_index)].load(Relaxed) % self.groups.len()
    }

    /// True if `req` is a large file's: it starts at, and moves, its stream goal.
    #[inline]
    pub(super) fn is_stream(&self, req: &AllocRequest) -> bool {
        req.logical.saturating_add(req.len) > self.stream_threshold_blocks
    }

    /// The stream goal of `file` in the size class of index `class_index`.
    #[inline]
    pub(super) fn stream_slot(&self, file: u64, class_index: u64) -> usize {
        // The file's id folded and taken modulo the number of goals, as ext4 takes the inode
        // number modulo: consecutive ids (how most callers number files) land on different
        // goals, so concurrent streams start in different groups.
        let per_class = self.stream_goals_per_class;
        ((file ^ (file >> 32)) % per_class + class_index * per_class) as usize
    }

    /// Step 5: the group the passes start from. Requests of large files, and any request
    /// without a goal, start at the stream goal; a small file's request with a goal starts
    /// in the goal's group.
    #[inline]
    pub(super) fn scan_start(&self, ctx: &AllocContext<'_>) -> u64 {
        let groups_count = self.groups.len();
        let start = match ctx.request.goal {
            Some(goal) if !ctx.stream => self.geometry.group_of(goal),
            Some(goal) if self.leaves_class(ctx, goal) => self.geometry.group_of(goal),
            _ if self.policy.stream_goal_locked => self.lock_md(ctx.shard).stream_goal,
            _ if self.refills(ctx) => 0,
            _ => self.stream_goals[ctx.slot].load(Relaxed),
        };
        start % groups_count
    }

    /// Whether a stream request is placed by [`Allocator::refill_active`] (active groups):
    /// a stream's, unless its own goal lies in another class's group (a file that outgrew
    /// its class, placed next to itself as without active groups). The passes after it
    /// start from the device's start.
    fn refills(&self, ctx: &AllocContext<'_>) -> bool {
        self.active_groups()
            && ctx.stream
            && !ctx
                .request
                .goal
                .is_some_and(|goal| self.leaves_class(ctx, goal))
    }

    /// Active groups, before the passes: a stream takes a best fit of its whole request in
    /// its goal's group, else in the first group from the device's start that holds it (its
    /// class's or nobody's, and no other goal's), so a group in use, or a hole that
    /// frees left behind, is filled before untouched space is cut into. The passes' fast
    /// walks skip a group whose average free fragment is shorter than the request, which
    /// is what a group in use has: without this they took fresh groups further in. The
    /// passes run only when no group's aligned chunk holds the request (they find an
    /// unaligned run, or trim it).
    pub(super) fn refill_active(&self, ctx: &AllocContext<'_>) -> Option<(Extent, Pass)> {
        if !self.refills(ctx) || !self.slow_indexed() {
            return None;
        }
        let want = ctx.request.len;
        let good = |g: u64| {
            let tag = self.groups.class_tag(g);
            (tag == 0 || tag == ctx.class_tag)
                && self.good_group(ctx, g, Pass::GoalLenSlow, want)
                && !self.held_by_another_stream(ctx, g)
        };
        let mut visit = |g: u64| self.scan_group(ctx, g, Pass::GoalLenSlow, want);
        let goal = self.stream_goals[ctx.slot].load(Relaxed);
        if goal < self.groups.len() && good(goal) {
            if let Some(e) = visit(goal) {
                return Some((e, Pass::GoalLenSlow));
            }
        }
        // Only groups whose largest free aligned chunk holds the whole request: their
        // search cannot fail (`buddy_fit`), so the walk locks one group, not every group
        // that might hold a run (on a 70 %-full device that was every group: fallocate3
        // scanned 1,653 groups per allocation at 64 GiB, 486,216 at 64 TiB).
        let route = Route {
            walk: Walk::Index(&self.by_largest, floor_log2(want.next_power_of_two())),
            start: 0,
            class_tag: ctx.class_tag,
            shard: ctx.shard,
            skip: None,
        };
        self.walk_groups(&route, &good, &mut visit)
            .map(|e| (e, Pass::GoalLenSlow))
    }

    /// Active groups (`stream_start=active`): streams fill the first groups with room, one
    /// group per goal at a time.
    #[inline]
    fn active_groups(&self) -> bool {
        self.policy.stream_start == StreamStart::Active && !self.policy.stream_goal_locked
    }

    /// Whether a fast pass of a stream request must skip group `g`: under active groups,
    /// another goal holds it (another stream is filling it). Slow passes take any group.
    #[inline]
    pub(super) fn held_by_another_stream(&self, ctx: &AllocContext<'_>, g: u64) -> bool {
        ctx.stream
            && self.active_groups()
            && self
                .stream_goals
                .iter()
                .enumerate()
                .any(|(slot, goal)| slot != ctx.slot && goal.load(Relaxed) == g)
    }

    /// Whether a stream request's own goal lies in a group tagged for another size class.
    ///
    /// Such a goal is a file that outgrew its class (it began small and became a stream).
    /// Scanning from its goal's group, the walk takes the nearest group of the stream's class
    /// or nobody's, next to the file; scanning from the class's shared goal would instead cut
    /// into the untouched space around that goal and shrink the device's largest free
    /// extent (`docs/results.md`, the mixed-lifetimes trace).
    fn leaves_class(&self, ctx: &AllocContext<'_>, goal: u64) -> bool {
        if ctx.class_tag == 0 {
            return false;
        }
        let group = self.geometry.group_of(goal);
        class::tier(self.groups.class_tag(group), ctx.class_tag) > class::UNTAGGED_TIER
    }

    /// A stream allocation got group `g` (under its lock): its goal moves there.
    #[inline]
    pub(super) fn follow_stream(&self, ctx: &AllocContext<'_>, g: u64) {
        debug_assert!(g < self.groups.len(), "stream goal {g} past the groups");
        if !ctx.stream {
            return;
        }
        if self.policy.stream_goal_locked {
            self.lock_md(ctx.shard).stream_goal = g;
        } else if self.stream_goals[ctx.slot].load(Relaxed) != g {
            self.stream_goals[ctx.slot].store(g, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::alloc::{AllocRequest, Allocator, Policy};
    use crate::geometry::{Extent, Geometry};

    /// Eight groups of 4,096 blocks under `policy`, without size classes.
    fn device(policy: &str) -> Allocator {
        let spec = format!("{policy}:size_classes=false");
        Allocator::new(
            Geometry::new(4096, 4096, 8 * 4096).unwrap(),
            Policy::parse(&spec).unwrap(),
        )
        .unwrap()
    }

    /// A stream's 1,024-block window (its logical offset makes it a stream's).
    fn window(file: u64) -> AllocRequest {
        AllocRequest::new(file, 1024).logical(4096)
    }

    fn group(e: Extent) -> u64 {
        e.start / 4096
    }

    /// One goal fills groups 0 and 1; group 0 is then freed. The next stream takes group 0
    /// again under active groups, where `spread` cuts into untouched group 2.
    #[test]
    fn a_stream_refills_the_first_group_with_room_before_untouched_space() {
        for (policy, want) in [
            ("extalloc:stream_goals=1:stream_start=active", 0),
            ("extalloc:stream_goals=1:stream_start=spread", 2),
        ] {
            let a = device(policy);
            let first: Vec<Extent> = (0..8).map(|_| a.allocate(&window(1)).unwrap()).collect();
            assert_eq!(first.iter().map(|&e| group(e)).max(), Some(1), "{policy}");
            first
                .iter()
                .filter(|&&e| group(e) == 0)
                .for_each(|&e| a.free(e).unwrap());
            a.commit();
            assert_eq!(group(a.allocate(&window(2)).unwrap()), want, "{policy}");
            a.check().unwrap();
        }
    }

    /// Two goals: two streams fill two groups, side by side at the front under active
    /// groups (the second skips the group the first one's goal holds), far apart with
    /// `spread`.
    #[test]
    fn concurrent_streams_fill_different_groups_side_by_side() {
        for (policy, want) in [
            ("extalloc:stream_goals=2:stream_start=active", 1),
            ("extalloc:stream_goals=2:stream_start=spread", 4),
        ] {
            let a = device(policy);
            assert_eq!(group(a.allocate(&window(0)).unwrap()), 0, "{policy}");
            assert_eq!(group(a.allocate(&window(1)).unwrap()), want, "{policy}");
            assert_eq!(group(a.allocate(&window(0)).unwrap()), 0, "{policy}");
            a.check().unwrap();
        }
    }
}
