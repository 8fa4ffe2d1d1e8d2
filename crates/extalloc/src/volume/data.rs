//! The data a write places: one buffer, or the blocks of a writeback's cache as they lie.
//!
//! Data structures: [`Data`], borrowed slices only. Invariant: every block is whole (the
//! callers assert it where they write). Locks: none.

/// Whole blocks to write: one buffer, or one slice per block (a writeback's cached
/// blocks, written as they lie instead of gathered into one buffer first).
#[derive(Clone, Copy)]
pub(super) enum Data<'a> {
    One(&'a [u8]),
    Blocks(&'a [&'a [u8]]),
}

impl<'a> Data<'a> {
    /// Blocks `at .. at + n` of it (blocks of `bs` bytes).
    pub(super) fn blocks(self, bs: u64, at: u64, n: u64) -> Data<'a> {
        match self {
            Data::One(buf) => Data::One(&buf[(at * bs) as usize..((at + n) * bs) as usize]),
            Data::Blocks(blocks) => Data::Blocks(&blocks[at as usize..(at + n) as usize]),
        }
    }

    /// Its length in blocks of `bs` bytes.
    pub(super) fn len_blocks(self, bs: u64) -> u64 {
        match self {
            Data::One(buf) => buf.len() as u64 / bs,
            Data::Blocks(blocks) => blocks.len() as u64,
        }
    }
}
