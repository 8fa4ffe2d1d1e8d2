//! The order in which a pass visits groups: its walk over an index (or every group), right
//! of the start group first, then left, and with size classes the tiers it tries in turn.
//!
//! # Data structures
//!
//! - [`Walk`]: how a pass finds candidate groups: every group from the start (`Linear`), the
//!   sets of orders `>= order_min` of an index (`Index`), or one order's set (`IndexExact`).
//! - [`Route`]: one pass's walk, its start group, the request's size-class tag and the
//!   thread's stats shard.
//! - [`Tiers`]: the steps of a walk through the size-class tiers, in order, held in a small
//!   array on the stack: the request's own tag, the same size with another lifetime,
//!   untagged groups, other sizes.
//! - A [`SetsCursor`] per side of a walk over ordered sets, and one per read-ahead, on the
//!   stack (`groups/cursor.rs`); a tier that keeps untagged groups, or its own class's and
//!   untagged ones, gives the walk's cursor a [`Skip`] over the other tags' sets (in
//!   [`Route`]), so it steps over their groups without reading them.
//!
//! # Invariant
//!
//! A walk visits a group only if the pass's lock-free check (`good`) accepts it, and stops at
//! the first visit that gives an extent. Ordered indexes and per-tag sets are walked from the
//! start group to the end, then from group 0 to the start, each side through one
//! [`SetsCursor`] that keeps every set's next member: a set is looked up again only when the
//! walk passes that member, so a group that joins a set between the walk and the member kept
//! there is not seen by this walk (as one that joins behind the walk is not; entries are
//! hints, and the next walk sees it). The list index ("choose group") restarts from the head
//! of its lists for every try, at most one try per group.
//!
//! # Lock order
//!
//! A walk holds no group lock while it looks: the ordered indexes and the per-tag sets are
//! lock-free, the list index holds one list lock during a lookup, and read-ahead takes the
//! loader's queue lock to queue a group (`cache.rs`). `visit` takes one group lock at a time
//! (`passes.rs`).

use super::allocator::Allocator;
use super::class;
use super::stats::Shard;
use crate::geometry::Extent;
use crate::groups::{AtomicBitset, OrderIndex, SetsCursor, Skip};

/// How a pass walks the groups.
#[derive(Clone, Copy)]
pub(super) enum Walk<'a> {
    /// Every group from the start, wrapping around.
    Linear,
    /// Groups in the sets of orders `>= order_min` of an index.
    Index(&'a OrderIndex, u32),
    /// Groups in the set of exactly this order of an ordered index.
    IndexExact(&'a OrderIndex, u32),
}

/// One pass's walk: where it goes, where it starts, for which size class, counted where.
#[derive(Clone, Copy)]
pub(super) struct Route<'a> {
    pub walk: Walk<'a>,
    /// The start group: the goal's or the stream goal's.
    pub start: u64,
    /// The request's size-class tag (0 when size classes are off).
    pub class_tag: u8,
    pub shard: &'a Shard,
    /// Groups a walk over ordered sets passes over without a look (a tier's groups of other
    /// size classes); `None` outside the tiers.
    pub skip: Option<Skip<'a>>,
}

/// Which groups of the pass's own walk a tier keeps.
#[derive(Clone, Copy)]
pub(super) enum Keep {
    /// Those of this tier (the start group, when untagged, counts as tier 0).
    Tier(u8),
    /// Those of the request's tag or of none.
    OwnOrNone,
    /// Untagged ones.
    Untagged,
}

/// One step of a tiered walk.
#[derive(Clone, Copy)]
pub(super) enum Tier {
    /// The start group alone, if untagged.
    Start,
    /// The groups carrying this tag, through the pass's ordered index if it has one, else
    /// through the tag's set.
    Tag(u8),
    /// The pass's own walk, keeping some groups.
    Walk(Keep),
}

/// The steps of a tiered walk, in the order they are tried.
pub(super) struct Tiers {
    steps: [Tier; 11],
    len: usize,
    at: usize,
}

impl Tiers {
    /// The steps for a request of `route.class_tag` (not 0), a stream's or not.
    ///
    /// The list index walks once per tier, as its "choose group" lookup always restarts from
    /// the head. Other walks take the start group if untagged (claiming the stream's or
    /// goal's empty group keeps concurrent streams apart instead of crowding every stream of
    /// a class into the same groups), then each tag's groups from the start, so finding the
    /// few groups of a class costs nothing per group of other classes, and the untagged
    /// groups through the pass's own walk.
    ///
    /// A stream takes the first group from its goal that is its class's or nobody's, as a
    /// stream without size classes takes the first that fits: streams of one class then keep
    /// apart instead of interleaving in the same groups, and a group still holds one class
    /// only. That walk covers tiers 0 and 2: only the other tags remain.
    pub(super) fn new(route: &Route<'_>, stream: bool) -> Self {
        let mut tiers = Tiers {
            steps: [Tier::Start; 11],
            len: 0,
            at: 0,
        };
        if matches!(route.walk, Walk::Index(index, _) if !index.is_ordered()) {
            (0..class::TIERS).for_each(|t| tiers.push(Tier::Walk(Keep::Tier(t))));
            return tiers;
        }
        let (same, same_size, other_sizes) = class::tags_by_tier(route.class_tag);
        if stream {
            tiers.push(Tier::Walk(Keep::OwnOrNone));
        } else {
            tiers.push(Tier::Start);
            tiers.push(Tier::Tag(same));
        }
        same_size.into_iter().for_each(|t| tiers.push(Tier::Tag(t)));
        if !stream {
            tiers.push(Tier::Walk(Keep::Untagged));
        }
        other_sizes
            .into_iter()
            .for_each(|t| tiers.push(Tier::Tag(t)));
        tiers
    }

    fn push(&mut self, step: Tier) {
        debug_assert_eq!(self.at, 0, "a step pushed while the walk runs");
        self.steps[self.len] = step;
        self.len += 1;
    }
}

impl Iterator for Tiers {
    type Item = Tier;

    #[inline]
    fn next(&mut self) -> Option<Tier> {
        debug_assert!(self.at <= self.len, "the walk ran past its steps");
        let step = *self.steps[..self.len].get(self.at)?;
        self.at += 1;
        Some(step)
    }
}

impl Allocator {
    /// Calls `visit` on the groups of one tier that `good` accepts, until one returns an
    /// extent.
    pub(super) fn walk_tier<G: Fn(u64) -> bool>(
        &self,
        route: &Route<'_>,
        tier: Tier,
        good: &G,
        visit: &mut dyn FnMut(u64) -> Option<Extent>,
    ) -> Option<Extent> {
        debug_assert!(route.start < self.groups.len(), "a walk starts in a group");
        let tag_of = |g: u64| self.groups.class_tag(g);
        match tier {
            Tier::Start => {
                let start = route.start;
                if tag_of(start) == 0 && good(start) {
                    visit(start)
                } else {
                    None
                }
            }
            Tier::Tag(tag) => self.walk_tag(route, tag, good, visit),
            Tier::Walk(keep) => {
                let keeps = |g: u64| match keep {
                    Keep::Tier(t) => {
                        let tier = match class::tier(tag_of(g), route.class_tag) {
                            class::UNTAGGED_TIER if g == route.start => 0,
                            t => t,
                        };
                        tier == t
                    }
                    Keep::OwnOrNone => {
                        let t = tag_of(g);
                        t == 0 || t == route.class_tag
                    }
                    Keep::Untagged => tag_of(g) == 0,
                };
                // The tier's own check reads each group's tag; the tag sets pass over the
                // groups it would refuse for their tag without reading them (on a large
                // device a stream's walk met tens of other classes' groups per allocation).
                let except = match keep {
                    Keep::Tier(_) => None,
                    Keep::OwnOrNone => Some(usize::from(route.class_tag).checked_sub(1)),
                    Keep::Untagged => Some(None),
                };
                let skip = except.map(|except| Skip {
                    sets: &self.by_tag,
                    except,
                });
                let route = Route { skip, ..*route };
                self.walk_groups(&route, &|g| good(g) && keeps(g), visit)
            }
        }
    }

    /// Calls `visit` on the groups carrying `tag` that `good` accepts, right of the start,
    /// then left, until one returns an extent. The tag set is a hint: the tag is read again,
    /// and the group rechecked under its lock by the visit.
    fn walk_tag<G: Fn(u64) -> bool>(
        &self,
        route: &Route<'_>,
        tag: u8,
        good: &G,
        visit: &mut dyn FnMut(u64) -> Option<Extent>,
    ) -> Option<Extent> {
        // Tag 0 is "untagged": it has no set.
        debug_assert!(
            tag >= 1 && usize::from(tag) <= self.by_tag.len(),
            "tag {tag}"
        );
        let set = &self.by_tag[usize::from(tag - 1)];
        let good = |g: u64| self.groups.class_tag(g) == tag && good(g);
        match route.walk {
            // Both walks give the tag's groups that serve the pass in the same order (right
            // of the start, then left): walk the smaller set. On a crowded device the index
            // is the smaller (few groups can serve); on a large device with few groups of
            // the tag yet, the tag's set is (the index walk looked at 15,000 untagged groups
            // per allocation on a 1 PiB device).
            Walk::Index(index, order_min)
                if index.is_ordered()
                    && index
                        .population_in_orders(order_min)
                        .is_some_and(|n| n <= set.population()) =>
            {
                self.walk_groups(route, &good, visit)
            }
            _ => self.right_then_left(route, std::slice::from_ref(set), &good, visit),
        }
    }

    /// Visits the members of `sets` right of the start, then left of it (the order of the
    /// ordered indexes and of the per-tag sets), those passing `good`, until one gives an
    /// extent. Each side keeps one cursor ([`SetsCursor`]): a set is looked up once per side
    /// and once per member taken from it, not once per candidate.
    fn right_then_left(
        &self,
        route: &Route<'_>,
        sets: &[AtomicBitset],
        good: &dyn Fn(u64) -> bool,
        visit: &mut dyn FnMut(u64) -> Option<Extent>,
    ) -> Option<Extent> {
        let (shard, start) = (route.shard, route.start);
        let groups_count = self.groups.len();
        for (from, limit) in [(start, groups_count), (0, start)] {
            let mut cursor = SetsCursor::new(sets).skipping(route.skip);
            let mut at = from;
            while let Some(g) = cursor.next(at, limit) {
                debug_assert!((at..limit).contains(&g), "group {g} outside {at}..{limit}");
                shard.add(&shard.counters.groups_considered, 1);
                if good(g) {
                    // Read-ahead looks past `g` with a cursor of its own, leaving the
                    // walk's where it is; it passes over nothing, so its budget of
                    // `prefetch_groups` steps covers the groups it always did.
                    let mut ahead = SetsCursor::new(sets);
                    self.read_ahead(g, &mut |p| ahead.next(p + 1, limit), good);
                    if let Some(e) = visit(g) {
                        return Some(e);
                    }
                }
                at = g + 1;
            }
        }
        None
    }

    /// Calls `visit` on the groups the route's walk yields that `good` accepts, until one
    /// returns an extent.
    pub(super) fn walk_groups<G: Fn(u64) -> bool>(
        &self,
        route: &Route<'_>,
        good: &G,
        visit: &mut dyn FnMut(u64) -> Option<Extent>,
    ) -> Option<Extent> {
        let groups_count = self.groups.len();
        let (shard, start) = (route.shard, route.start);
        debug_assert!(start < groups_count, "a walk starts in a group");
        match route.walk {
            Walk::Linear => (0..groups_count).find_map(|i| {
                let g = (start + i) % groups_count;
                shard.add(&shard.counters.groups_considered, 1);
                if good(g) {
                    self.read_ahead(g, &mut |p| Some((p + 1) % groups_count), good);
                    visit(g)
                } else {
                    None
                }
            }),
            // Right of the start across all orders >= order_min, then left of it.
            Walk::Index(index, order_min) if index.is_ordered() => {
                self.right_then_left(route, index.ordered_sets(order_min, u32::MAX), good, visit)
            }
            Walk::IndexExact(index, order) => {
                let sets = index.ordered_sets(order, order.saturating_add(1));
                self.right_then_left(route, sets, good, visit)
            }
            Walk::Index(index, order_min) => {
                // Pre-2025 "choose group": the first good group from the list heads, up to
                // one try per group.
                for _ in 0..groups_count {
                    let mut waits = 0;
                    let chosen = index.choose(
                        order_min,
                        &mut |g| {
                            shard.add(&shard.counters.groups_considered, 1);
                            good(g)
                        },
                        &mut waits,
                    );
                    shard.lock_waited(waits);
                    if let Some(e) = visit(chosen?) {
                        return Some(e);
                    }
                }
                None
            }
        }
    }
}
