//! Group indexes: which groups have a given largest free order or average fragment order.
//!
//! # Data structures
//!
//! - [`AtomicBitset`] (`bitset.rs`): the lock-free hierarchical bitset of group numbers.
//!   A walk over the ordered sets reads them through a [`SetsCursor`] (`cursor.rs`).
//! - [`OrderIndex`]: one set of groups per order, either ordered (an `AtomicBitset` per order,
//!   the 2025 scheme) or list-based (a linked list per order under a reader/writer lock, the
//!   scheme before it, kept so the lab can show the difference).
//!
//! # Invariants
//!
//! ```text
//! at quiescence: summary bit (l+1, w) == (word (l, w) != 0)
//! at quiescence: a bitset's count == its set bits
//! a group is in at most one order's set of an index, the one its summary says
//! a group with no free blocks is in no set (unless the policy keeps "zombie" groups)
//! ```
//!
//! Entries are hints: a scan rechecks the group under the group's lock. Updates of one
//! group's membership happen under that group's lock, so they are serialised per group;
//! updates of different groups race only on shared words, which the protocol below handles:
//! a remover that empties a word clears the summary bit and then re-reads the word, setting
//! the bit again if an inserter refilled it meanwhile. A summary bit may thus be set over an
//! empty word for a moment; lookups skip such words.
//!
//! # Lock order
//!
//! The ordered sets take no lock. List-based index: group lock -> one list lock at a time
//! (`update` unlinks from the old order's list, then links into the new one's; `choose` reads
//! the lists one after another) -> the link lock of one entry at a time.

pub use super::bitset::AtomicBitset;
use super::cursor::SetsCursor;
use parking_lot::RwLock;

/// Lists of groups per order with ext4's pre-2025 semantics: each list under its own
/// reader/writer lock, a group moved to the tail of its new list on every change, and a
/// "choose group" lookup that returns the first good group from the head.
pub struct ListIndex {
    lists: Vec<RwLock<GroupList>>,
    /// Links of each group within whichever list holds it; protected by that list's lock.
    links: Vec<parking_lot::Mutex<Link>>,
}

#[derive(Default, Clone, Copy)]
struct GroupList {
    head: Option<u64>,
    tail: Option<u64>,
}

#[derive(Default, Clone, Copy)]
struct Link {
    prev: Option<u64>,
    next: Option<u64>,
}

impl ListIndex {
    fn new(orders: usize, groups: u64) -> Self {
        ListIndex {
            lists: (0..orders)
                .map(|_| RwLock::new(GroupList::default()))
                .collect(),
            links: (0..groups)
                .map(|_| parking_lot::Mutex::new(Link::default()))
                .collect(),
        }
    }

    fn push_tail(&self, order: usize, g: u64, waits: &mut u64) {
        let mut list = self.lists[order].try_write().unwrap_or_else(|| {
            *waits += 1;
            self.lists[order].write()
        });
        let old_tail = list.tail;
        let mut link = self.links[g as usize].lock();
        debug_assert!(
            link.prev.is_none() && link.next.is_none() && list.head != Some(g),
            "group {g} pushed onto list {order} while linked"
        );
        *link = Link {
            prev: old_tail,
            next: None,
        };
        drop(link);
        debug_assert_ne!(old_tail, Some(g), "group {g} is its own predecessor");
        match old_tail {
            Some(t) => self.links[t as usize].lock().next = Some(g),
            None => list.head = Some(g),
        }
        list.tail = Some(g);
    }

    fn unlink(&self, order: usize, g: u64, waits: &mut u64) {
        let mut list = self.lists[order].try_write().unwrap_or_else(|| {
            *waits += 1;
            self.lists[order].write()
        });
        let link = std::mem::take(&mut *self.links[g as usize].lock());
        debug_assert!(
            link.prev.is_some() || list.head == Some(g),
            "group {g} unlinked from list {order}, which does not hold it"
        );
        debug_assert!(link.next.is_some() || list.tail == Some(g));
        match link.prev {
            Some(p) => self.links[p as usize].lock().next = link.next,
            None => list.head = link.next,
        }
        match link.next {
            Some(n) => self.links[n as usize].lock().prev = link.prev,
            None => list.tail = link.prev,
        }
    }

    /// First group from the head of the lists of orders `>= order_min` that `good` accepts.
    fn choose(
        &self,
        order_min: usize,
        good: &mut dyn FnMut(u64) -> bool,
        waits: &mut u64,
    ) -> Option<u64> {
        for order in order_min..self.lists.len() {
            let list = self.lists[order].try_read().unwrap_or_else(|| {
                *waits += 1;
                self.lists[order].read()
            });
            let mut at = list.head;
            while let Some(g) = at {
                debug_assert!((g as usize) < self.links.len(), "group {g} in list {order}");
                if good(g) {
                    return Some(g);
                }
                at = self.links[g as usize].lock().next;
            }
        }
        None
    }

    fn members(&self, order: usize) -> Vec<u64> {
        let list = self.lists[order].read();
        let mut out = Vec::new();
        let mut at = list.head;
        while let Some(g) = at {
            debug_assert!(out.len() < self.links.len(), "a cycle in list {order}");
            out.push(g);
            at = self.links[g as usize].lock().next;
        }
        debug_assert_eq!(
            out.last().copied(),
            list.tail,
            "list {order} ends past its tail"
        );
        out
    }
}

/// How an index keeps its per-order sets.
pub enum OrderSets {
    Ordered(Vec<AtomicBitset>),
    List(ListIndex),
}

/// Groups by an order-valued key (largest free order, or average fragment order).
pub struct OrderIndex {
    sets: OrderSets,
    groups: u64,
}

impl OrderIndex {
    /// An empty index of `groups` groups with a set for each of `orders` orders: bitsets if
    /// `ordered`, else the list-based sets.
    pub fn new(ordered: bool, orders: usize, groups: u64) -> Self {
        let sets = if ordered {
            OrderSets::Ordered((0..orders).map(|_| AtomicBitset::new(groups)).collect())
        } else {
            OrderSets::List(ListIndex::new(orders, groups))
        };
        OrderIndex { sets, groups }
    }

    /// True for the ordered (bitset) sets, false for the list-based ones.
    pub fn is_ordered(&self) -> bool {
        matches!(self.sets, OrderSets::Ordered(_))
    }

    fn orders(&self) -> usize {
        match &self.sets {
            OrderSets::Ordered(v) => v.len(),
            OrderSets::List(l) => l.lists.len(),
        }
    }

    /// Moves `group` from the set of `old` to the set of `new` (either may be none). Must be
    /// called under the group's lock. Returns the lock waits it met.
    pub fn update(&self, group: u64, old: Option<u32>, new: Option<u32>) -> u64 {
        let mut waits = 0;
        if old == new {
            return 0;
        }
        match &self.sets {
            OrderSets::Ordered(sets) => {
                if let Some(n) = new {
                    sets[n as usize].insert(group);
                }
                if let Some(o) = old {
                    sets[o as usize].remove(group);
                }
            }
            OrderSets::List(lists) => {
                if let Some(o) = old {
                    lists.unlink(o as usize, group, &mut waits);
                }
                if let Some(n) = new {
                    lists.push_tail(n as usize, group, &mut waits);
                }
            }
        }
        waits
    }

    /// Places `group`, in no set yet, in the set of `order` while nothing else can see the
    /// index (at construction): plain writes for the ordered sets, whose summaries
    /// [`OrderIndex::summarise_mut`] then rebuilds, before anyone looks the index up.
    #[inline]
    pub fn insert_mut(&mut self, group: u64, order: Option<u32>) {
        let Some(o) = order else {
            return;
        };
        assert!(group < self.groups, "group {group} of {}", self.groups);
        match &mut self.sets {
            OrderSets::Ordered(sets) => sets[o as usize].insert_mut(group),
            OrderSets::List(lists) => lists.push_tail(o as usize, group, &mut 0),
        }
    }

    /// Rebuilds the ordered sets' summaries after [`OrderIndex::insert_mut`].
    pub fn summarise_mut(&mut self) {
        if let OrderSets::Ordered(sets) = &mut self.sets {
            sets.iter_mut().for_each(AtomicBitset::summarise_mut);
            debug_assert!(
                sets.iter().all(|s| s.check().is_ok()),
                "every set summarised"
            );
        }
    }

    /// Members of the sets of orders `>= order_min` (ordered sets; `None` for lists).
    pub fn population_in_orders(&self, order_min: u32) -> Option<u64> {
        match &self.sets {
            OrderSets::Ordered(sets) => Some(
                sets.get(order_min as usize..)
                    .unwrap_or(&[])
                    .iter()
                    .map(AtomicBitset::population)
                    .sum(),
            ),
            OrderSets::List(_) => None,
        }
    }

    /// Ordered sets only: the sets of orders `lo..hi` that exist (a walk's [`SetsCursor`]
    /// runs over them).
    pub fn ordered_sets(&self, lo: u32, hi: u32) -> &[AtomicBitset] {
        let OrderSets::Ordered(sets) = &self.sets else {
            panic!("ordered_sets on a list index");
        };
        let hi = (hi as usize).min(sets.len());
        sets.get(lo as usize..hi).unwrap_or(&[])
    }

    /// Ordered sets only: the smallest group in `[from, limit)` in any order `>= order_min`.
    /// A walk asking this for every candidate keeps a [`SetsCursor`] instead.
    pub fn next_in_orders(&self, order_min: u32, from: u64, limit: u64) -> Option<u64> {
        SetsCursor::new(self.ordered_sets(order_min, u32::MAX)).next(from, limit)
    }

    /// Ordered sets only: the smallest group in `[from, limit)` in the set of `order`.
    pub fn next_in_order(&self, order: u32, from: u64, limit: u64) -> Option<u64> {
        SetsCursor::new(self.ordered_sets(order, order.saturating_add(1))).next(from, limit)
    }

    /// Bytes the index takes besides its struct (sets, or lists and per-group links).
    pub fn memory_bytes(&self) -> u64 {
        match &self.sets {
            OrderSets::Ordered(v) => v.iter().map(AtomicBitset::memory_bytes).sum(),
            OrderSets::List(l) => {
                (l.lists.len() * std::mem::size_of::<RwLock<GroupList>>()
                    + l.links.len() * std::mem::size_of::<parking_lot::Mutex<Link>>())
                    as u64
            }
        }
    }

    /// Number of orders the index has sets for.
    pub fn order_count(&self) -> u32 {
        self.orders() as u32
    }

    /// List sets only: ext4's pre-2025 choose-group lookup.
    pub fn choose(
        &self,
        order_min: u32,
        good: &mut dyn FnMut(u64) -> bool,
        waits: &mut u64,
    ) -> Option<u64> {
        let OrderSets::List(lists) = &self.sets else {
            panic!("choose on an ordered index");
        };
        let found = lists.choose(order_min as usize, good, waits);
        debug_assert!(
            found.is_none_or(|g| g < self.groups),
            "group {found:?} chosen"
        );
        found
    }

    /// The order whose set holds `group`, checking that it is in at most one (quiescent).
    pub fn membership(&self) -> Result<Vec<Option<u32>>, String> {
        let mut out = vec![None; self.groups as usize];
        for order in 0..self.orders() {
            let members: Vec<u64> = match &self.sets {
                OrderSets::Ordered(sets) => {
                    sets[order].check()?;
                    sets[order].iter().collect()
                }
                OrderSets::List(lists) => lists.members(order),
            };
            for g in members {
                if let Some(prev) = out[g as usize] {
                    return Err(format!(
                        "group {g} is in the sets of orders {prev} and {order}"
                    ));
                }
                out[g as usize] = Some(order as u32);
            }
        }
        Ok(out)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn bitset_next_set_multi_level() {
        let s = AtomicBitset::new(10_000);
        for i in [0u64, 63, 64, 4095, 4096, 9999] {
            s.insert(i);
        }
        assert_eq!(
            s.iter().collect::<Vec<_>>(),
            vec![0, 63, 64, 4095, 4096, 9999]
        );
        assert_eq!(s.next_set(65), Some(4095));
        s.remove(4095);
        s.remove(4096);
        assert_eq!(s.next_set(65), Some(9999));
        assert_eq!(s.next_set(10_000), None);
        s.check().unwrap();
    }

    #[test]
    fn bitset_random_against_model() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let n = 5000;
        let s = AtomicBitset::new(n);
        let mut model = std::collections::BTreeSet::new();
        for _ in 0..20_000 {
            let i = rng.gen_range(0..n);
            if rng.gen_bool(0.5) {
                s.insert(i);
                model.insert(i);
            } else {
                s.remove(i);
                model.remove(&i);
            }
            let from = rng.gen_range(0..n);
            assert_eq!(s.next_set(from), model.range(from..).next().copied());
        }
        s.check().unwrap();
    }

    #[test]
    fn list_index_moves_and_chooses_from_head() {
        let idx = OrderIndex::new(false, 4, 8);
        idx.update(3, None, Some(2));
        idx.update(5, None, Some(2));
        idx.update(1, None, Some(3));
        let mut waits = 0;
        assert_eq!(idx.choose(2, &mut |_| true, &mut waits), Some(3));
        assert_eq!(idx.choose(2, &mut |g| g != 3, &mut waits), Some(5));
        idx.update(3, Some(2), Some(1));
        assert_eq!(idx.choose(2, &mut |_| true, &mut waits), Some(5));
        let m = idx.membership().unwrap();
        assert_eq!(m[3], Some(1));
        assert_eq!(m[1], Some(3));
        assert_eq!(m[0], None);
    }

    #[test]
    fn ordered_index_next_in_orders() {
        let idx = OrderIndex::new(true, 4, 100);
        idx.update(10, None, Some(1));
        idx.update(20, None, Some(3));
        idx.update(5, None, Some(0));
        assert_eq!(idx.next_in_orders(1, 0, 100), Some(10));
        assert_eq!(idx.next_in_orders(1, 11, 100), Some(20));
        assert_eq!(idx.next_in_orders(0, 0, 100), Some(5));
        assert_eq!(idx.next_in_orders(1, 11, 20), None);
        idx.update(20, Some(3), None);
        assert_eq!(idx.next_in_orders(1, 11, 100), None);
    }
}
