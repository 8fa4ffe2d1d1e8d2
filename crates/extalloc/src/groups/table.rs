//! The table of groups: a [`Group`] comes into being the first time something touches it;
//! until then a group is the figures it was opened with, packed in 4 bytes (8 with groups
//! of more than 2^17 blocks).
//!
//! # Data structures
//!
//! - `chunks`: one slot per [`CHUNK`] consecutive groups, empty until one of them is
//!   touched ([`GroupTable::get`]), then a box of `CHUNK` [`Group`]s (64 bytes each, a cache
//!   line) made from the opened figures. A slot is filled once and never emptied.
//! - `opened`: each group's [`Figures`] as the device's descriptors gave them at open
//!   (empty for a table made loaded, whose chunks are all filled at construction).
//!
//! # Invariant
//!
//! ```text
//! a group's figures = its Group's mirrors when its chunk is filled, else opened[g]
//! a chunk is filled => its Groups were made from opened[] and only the group lock changes them
//! opened[] never changes after construction
//! ```
//!
//! So a reader that asks for figures ([`GroupTable::figures`]) of an untouched group reads
//! `opened`, and one that asks after the chunk was filled reads the mirrors: once a chunk is
//! filled, `opened` is stale for it and is never read for it again.
//!
//! # Memory
//!
//! An untouched group costs its packed figures plus a share of its chunk's slot (8 bytes
//! over [`CHUNK`] groups): 4.06 bytes with groups of up to 2^17 blocks. A touched group
//! costs its [`Group`] too. See [`GroupTable::memory_per_untouched_group`].
//!
//! # Lock order
//!
//! Filling a chunk takes the slot's one-time initialisation (a leaf: the maker takes no
//! lock); nothing else here takes a lock.

use super::group::Group;
use std::sync::OnceLock;

/// Groups per chunk: a touch makes this many [`Group`]s (8 KiB).
pub const CHUNK: u64 = 128;

/// A group's figures: what its descriptor records, and what its mirrors hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Figures {
    /// Free blocks.
    pub free_blocks: u32,
    /// Largest order with a free aligned chunk; `None` when no block is free.
    pub largest_order: Option<u32>,
    /// Order of the average free run; `None` when no block is free.
    pub avg_order: Option<u32>,
    /// Size-class tag (0: none).
    pub class_tag: u8,
}

/// The packed figures of every group as opened.
enum Opened {
    /// No group is opened unloaded (every chunk filled at construction).
    None,
    /// Free blocks in bits 0..18, largest order + 1 in 18..23, average order + 1 in 23..28,
    /// tag in 28..32 (groups of up to 2^17 blocks, orders up to 30, tags up to 15).
    Narrow(Box<[u32]>),
    /// Free blocks in bits 0..32, largest order + 1 in 32..40, average order + 1 in 40..48,
    /// tag in 48..56.
    Wide(Box<[u64]>),
}

/// Largest group (in blocks) whose figures pack into 32 bits.
const NARROW_GROUP_BLOCKS_MAX: u64 = 1 << 17;

fn order_code(o: Option<u32>) -> u32 {
    o.map_or(0, |o| o + 1)
}

fn order_of(code: u32) -> Option<u32> {
    code.checked_sub(1)
}

impl Opened {
    fn pack(wide: bool, f: Figures) -> Result<u64, String> {
        let (l, a) = (order_code(f.largest_order), order_code(f.avg_order));
        let t = u32::from(f.class_tag);
        if wide {
            return Ok(u64::from(f.free_blocks)
                | u64::from(l) << 32
                | u64::from(a) << 40
                | u64::from(t) << 48);
        }
        if f.free_blocks >= 1 << 18 || l >= 1 << 5 || a >= 1 << 5 || t >= 1 << 4 {
            return Err(format!("figures {f:?} do not fit a narrow packing"));
        }
        Ok(u64::from(f.free_blocks | l << 18 | a << 23 | t << 28))
    }

    fn get(&self, g: u64) -> Figures {
        let (free, l, a, t) = match self {
            Opened::None => unreachable!("group {g} read from figures a loaded table lacks"),
            Opened::Narrow(v) => {
                let p = v[g as usize];
                (p & 0x3_ffff, (p >> 18) & 31, (p >> 23) & 31, p >> 28)
            }
            Opened::Wide(v) => {
                let p = v[g as usize];
                (
                    p as u32,
                    (p >> 32) as u32 & 0xff,
                    (p >> 40) as u32 & 0xff,
                    (p >> 48) as u32 & 0xff,
                )
            }
        };
        Figures {
            free_blocks: free,
            largest_order: order_of(l),
            avg_order: order_of(a),
            class_tag: t as u8,
        }
    }

    fn bytes(&self) -> u64 {
        match self {
            Opened::None => 0,
            Opened::Narrow(v) => 4 * v.len() as u64,
            Opened::Wide(v) => 8 * v.len() as u64,
        }
    }
}

/// Packs the figures of groups opened unloaded one at a time, as their descriptors are read,
/// into a [`GroupTable`].
pub enum TableBuilder {
    /// Figures of groups of up to 2^17 blocks (see [`Opened::Narrow`]).
    Narrow(Vec<u32>),
    /// Figures of larger groups (see [`Opened::Wide`]).
    Wide(Vec<u64>),
}

impl TableBuilder {
    /// A builder for `groups` groups (a capacity, not a limit) of `group_blocks` blocks.
    pub fn new(group_blocks: u64, groups: u64) -> Self {
        if group_blocks > NARROW_GROUP_BLOCKS_MAX {
            TableBuilder::Wide(Vec::with_capacity(groups as usize))
        } else {
            TableBuilder::Narrow(Vec::with_capacity(groups as usize))
        }
    }

    /// Groups pushed so far.
    pub fn len(&self) -> u64 {
        match self {
            TableBuilder::Narrow(v) => v.len() as u64,
            TableBuilder::Wide(v) => v.len() as u64,
        }
    }

    /// True before the first push.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds the next group's figures. Refuses figures that do not fit (an error naming the
    /// group), adding nothing.
    pub fn push(&mut self, f: Figures) -> Result<(), String> {
        let g = self.len();
        let wide = matches!(self, TableBuilder::Wide(_));
        let p = Opened::pack(wide, f).map_err(|e| format!("group {g}: {e}"))?;
        match self {
            TableBuilder::Narrow(v) => v.push(p as u32),
            TableBuilder::Wide(v) => v.push(p),
        }
        debug_assert_eq!(self.len(), g + 1, "one group added");
        Ok(())
    }

    /// Adds `other`'s groups after these (a builder of the same width: the same geometry).
    pub fn append(&mut self, other: TableBuilder) {
        let expected = self.len() + other.len();
        match (&mut *self, other) {
            (TableBuilder::Narrow(a), TableBuilder::Narrow(b)) => a.extend_from_slice(&b),
            (TableBuilder::Wide(a), TableBuilder::Wide(b)) => a.extend_from_slice(&b),
            _ => panic!("tables of groups of different sizes appended"),
        }
        assert_eq!(self.len(), expected, "every appended group kept");
    }

    /// The table of the groups pushed, none of them made yet.
    pub fn finish(self) -> GroupTable {
        let len = self.len();
        let opened = match self {
            TableBuilder::Narrow(v) => Opened::Narrow(v.into_boxed_slice()),
            TableBuilder::Wide(v) => Opened::Wide(v.into_boxed_slice()),
        };
        let table = GroupTable {
            len,
            opened,
            chunks: (0..len.div_ceil(CHUNK)).map(|_| OnceLock::new()).collect(),
        };
        debug_assert_eq!(table.touched(), 0, "a table made with no group touched");
        table
    }
}

type Chunk = Box<[Group; CHUNK as usize]>;

/// Every group of an allocator, made on first touch (see the module documentation).
pub struct GroupTable {
    len: u64,
    opened: Opened,
    chunks: Box<[OnceLock<Chunk>]>,
}

fn chunk_of(groups: impl Iterator<Item = Group>) -> Chunk {
    let v: Vec<Group> = groups
        .chain(std::iter::repeat_with(|| Group::unloaded(0, None, None, 0)))
        .take(CHUNK as usize)
        .collect();
    match v.into_boxed_slice().try_into() {
        Ok(c) => c,
        Err(_) => unreachable!("a chunk of {CHUNK} groups"),
    }
}

impl GroupTable {
    /// A table of `len` groups made now by `make(g)` (an allocator in memory).
    pub fn loaded(len: u64, mut make: impl FnMut(u64) -> Group) -> Self {
        let chunks: Box<[OnceLock<Chunk>]> = (0..len.div_ceil(CHUNK))
            .map(|c| {
                let end = ((c + 1) * CHUNK).min(len);
                OnceLock::from(chunk_of((c * CHUNK..end).map(&mut make)))
            })
            .collect();
        GroupTable {
            len,
            opened: Opened::None,
            chunks,
        }
    }

    /// A table of groups opened unloaded with `figures` (one per group, in order), each
    /// group made on first touch; groups of `group_blocks` blocks. Refuses figures that do
    /// not fit (an error naming the group), which a valid descriptor never has.
    pub fn unloaded(
        group_blocks: u64,
        figures: impl ExactSizeIterator<Item = Figures>,
    ) -> Result<Self, String> {
        let mut b = TableBuilder::new(group_blocks, figures.len() as u64);
        for f in figures {
            b.push(f)?;
        }
        Ok(b.finish())
    }

    /// Number of groups.
    #[inline]
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for a table of no groups.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Group `g`, made now (with the rest of its chunk) if nothing touched it before.
    #[inline]
    pub fn get(&self, g: u64) -> &Group {
        assert!(g < self.len, "group {g} of {}", self.len);
        let c = g / CHUNK;
        let chunk = self.chunks[c as usize].get_or_init(|| {
            let end = ((c + 1) * CHUNK).min(self.len);
            chunk_of((c * CHUNK..end).map(|g| {
                let f = self.opened.get(g);
                Group::unloaded(f.free_blocks, f.largest_order, f.avg_order, f.class_tag)
            }))
        });
        &chunk[(g % CHUNK) as usize]
    }

    /// Group `g` if something touched it (or its chunk) already; never makes it.
    #[inline]
    pub fn peek(&self, g: u64) -> Option<&Group> {
        assert!(g < self.len, "group {g} of {}", self.len);
        self.chunks[(g / CHUNK) as usize]
            .get()
            .map(|c| &c[(g % CHUNK) as usize])
    }

    /// Group `g`'s figures (its mirrors, read without its lock: a hint), without making it.
    #[inline]
    pub fn figures(&self, g: u64) -> Figures {
        match self.peek(g) {
            Some(group) => Figures {
                free_blocks: group.free_blocks(),
                largest_order: group.largest_order(),
                avg_order: group.avg_order(),
                class_tag: group.class_tag(),
            },
            None => self.opened.get(g),
        }
    }

    /// Group `g`'s free blocks (a hint), without making it.
    #[inline]
    pub fn free_blocks(&self, g: u64) -> u32 {
        self.peek(g)
            .map_or_else(|| self.opened.get(g).free_blocks, Group::free_blocks)
    }

    /// Group `g`'s size-class tag, without making it.
    #[inline]
    pub fn class_tag(&self, g: u64) -> u8 {
        self.peek(g)
            .map_or_else(|| self.opened.get(g).class_tag, Group::class_tag)
    }

    /// Every group in order, each made if it was not (checks and whole-device reports).
    pub fn iter(&self) -> impl Iterator<Item = (u64, &Group)> + '_ {
        (0..self.len).map(|g| (g, self.get(g)))
    }

    /// The groups made so far, in order; untouched chunks are skipped.
    pub fn iter_touched(&self) -> impl Iterator<Item = (u64, &Group)> + '_ {
        self.chunks
            .iter()
            .enumerate()
            .filter_map(|(c, slot)| slot.get().map(|chunk| (c as u64, chunk)))
            .flat_map(move |(c, chunk)| {
                let first = c * CHUNK;
                let n = (self.len - first).min(CHUNK);
                chunk[..n as usize]
                    .iter()
                    .enumerate()
                    .map(move |(i, g)| (first + i as u64, g))
            })
    }

    /// Groups made so far (whole chunks).
    pub fn touched(&self) -> u64 {
        self.chunks.iter().filter(|c| c.get().is_some()).count() as u64 * CHUNK
    }

    /// Bytes an untouched group costs here: its packed figures and its share of the chunk
    /// slots.
    pub fn memory_per_untouched_group(&self) -> f64 {
        if self.len == 0 {
            return 0.0;
        }
        let slots = (self.chunks.len() * std::mem::size_of::<OnceLock<Chunk>>()) as u64;
        (self.opened.bytes() + slots) as f64 / self.len as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(free: u32, l: Option<u32>, a: Option<u32>, t: u8) -> Figures {
        Figures {
            free_blocks: free,
            largest_order: l,
            avg_order: a,
            class_tag: t,
        }
    }

    #[test]
    fn figures_round_trip_narrow_and_wide() {
        let all = [
            fig(0, None, None, 0),
            fig(1 << 17, Some(17), Some(17), 9),
            fig(5, Some(2), Some(0), 3),
        ];
        for group_blocks in [1 << 15, 1 << 17, 1 << 20] {
            let t = GroupTable::unloaded(group_blocks, all.iter().copied()).unwrap();
            for (g, f) in all.iter().enumerate() {
                assert_eq!(t.figures(g as u64), *f);
                assert!(t.peek(g as u64).is_none(), "a read made group {g}");
            }
            assert_eq!(t.touched(), 0);
        }
    }

    #[test]
    fn a_touch_makes_its_chunk_from_the_opened_figures() {
        let n = CHUNK * 2 + 3;
        let figs: Vec<Figures> = (0..n).map(|g| fig(g as u32, Some(0), Some(0), 1)).collect();
        let t = GroupTable::unloaded(1 << 15, figs.iter().copied()).unwrap();
        let g = t.get(CHUNK + 5);
        assert_eq!(g.free_blocks(), (CHUNK + 5) as u32);
        assert_eq!(t.touched(), CHUNK);
        let touched: Vec<u64> = t.iter_touched().map(|(g, _)| g).collect();
        assert_eq!(touched, (CHUNK..2 * CHUNK).collect::<Vec<_>>());
        // The last, partial chunk yields only real groups.
        t.get(n - 1);
        assert_eq!(t.iter_touched().count() as u64, CHUNK + 3);
        assert!(t.memory_per_untouched_group() < 4.2);
    }

    #[test]
    fn narrow_packing_refuses_what_does_not_fit() {
        let e = GroupTable::unloaded(1 << 15, [fig(0, None, None, 16)].into_iter());
        assert!(e.is_err_and(|e| e.contains("group 0")));
    }
}
