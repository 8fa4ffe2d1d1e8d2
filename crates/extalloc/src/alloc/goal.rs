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
//! # Invariant
//!
//! Every goal is a group number below the group count; a goal is written only when it
//! changes (no shared-line write while a stream stays in its group).
//!
//! # Lock order
//!
//! The atomic goals take no lock. The locked goal is read under the global lock alone, and
//! written under it while the allocating group's lock is held (group lock -> global lock).
//!
//! [`MdState`]: super::allocator::MdState

use super::allocator::Allocator;
use super::class;
use super::policy::{Policy, StreamStart};
use super::request::{AllocContext, AllocRequest};
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
            _ => self.stream_goals[ctx.slot].load(Relaxed),
        };
        start % groups_count
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
