//! Picking and making one damage: a metadata kind, a form, a place.
//!
//! Data structures: [`Form`] and [`Damage`] (kind, form, the device byte it starts at);
//! a bad sector ([`bad_sector`]) is a file and a block of its data; a [`leaf`] zeroed
//! besides a tree node is a damage of its own.
//! Invariant: a damage changes only the block it starts in, and what it reports as damaged
//! is the span of bytes it really changed (a stale block equal to the current one changes
//! nothing and hits nothing). Lock order: none.

use super::image::BLOCK;
use super::truth::Truth;
use super::types::MetaKind;
use rand::Rng;
use std::ops::Range;

/// How a damage changes its block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Form {
    /// One byte flipped (xor with a non-zero byte).
    FlipByte,
    /// The whole 4 KiB block zeroed.
    ZeroBlock,
    /// The block as it was in a snapshot taken before the last checkpoint.
    StaleBlock,
}

/// One damage.
#[derive(Debug, Clone, Copy)]
pub(super) struct Damage {
    pub(super) kind: MetaKind,
    pub(super) form: Form,
    /// The device byte it starts at.
    pub(super) at: u64,
}

/// A damage of a kind the image has places of, a form, and a byte of those places.
pub(super) fn pick(rng: &mut impl Rng, truth: &Truth) -> Damage {
    let kinds: Vec<(&MetaKind, &Vec<Range<u64>>)> = truth
        .places
        .iter()
        .filter(|(_, p)| p.iter().any(|r| !r.is_empty()))
        .collect();
    let (&kind, places) = kinds[rng.gen_range(0..kinds.len())];
    let places: Vec<&Range<u64>> = places.iter().filter(|r| !r.is_empty()).collect();
    let r = places[rng.gen_range(0..places.len())];
    let form = match rng.gen_range(0..3) {
        0 => Form::FlipByte,
        1 => Form::ZeroBlock,
        _ => Form::StaleBlock,
    };
    Damage {
        kind,
        form,
        at: rng.gen_range(r.clone()),
    }
}

/// A bad sector to come with a damage: a block of a regular file's data, as the file it
/// lies in and its device bytes (`None` when the image's files hold no data).
pub(super) fn bad_sector(rng: &mut impl Rng, truth: &Truth) -> Option<(u64, Range<u64>)> {
    if truth.file_data.is_empty() {
        return None;
    }
    let (ino, r) = &truth.file_data[rng.gen_range(0..truth.file_data.len())];
    let at = rng.gen_range(r.clone()) / BLOCK * BLOCK;
    // A whole block of the file's data.
    debug_assert!(r.start <= at && at + BLOCK <= r.end);
    Some((*ino, at..at + BLOCK))
}

/// A leaf of the file tree zeroed, to come with a damage to one of its internal nodes (a
/// root lost with a leaf under it, as a failing region of a disk takes both: a checkpoint
/// writes a path's nodes close together): the block of a file's table entry (`None` when
/// the image has none).
pub(super) fn leaf(rng: &mut impl Rng, truth: &Truth) -> Option<Damage> {
    let places = truth.places.get(&MetaKind::FileTable)?;
    let places: Vec<&Range<u64>> = places.iter().filter(|r| !r.is_empty()).collect();
    if places.is_empty() {
        return None;
    }
    let r = places[rng.gen_range(0..places.len())];
    let at = rng.gen_range(r.clone());
    // A byte of an entry, in the leaf that holds it.
    debug_assert!(r.contains(&at));
    Some(Damage {
        kind: MetaKind::FileTable,
        form: Form::ZeroBlock,
        at,
    })
}

/// Makes `damage` on `bytes` (`stale`: the earlier snapshot); returns the span of bytes it
/// changed (empty when it changed none).
pub(super) fn make(bytes: &mut [u8], stale: &[u8], damage: Damage, flip: u8) -> Range<u64> {
    let block = damage.at / BLOCK * BLOCK;
    let span = block as usize..(block + BLOCK) as usize;
    let before = bytes[span.clone()].to_vec();
    match damage.form {
        Form::FlipByte => bytes[damage.at as usize] ^= flip.max(1),
        Form::ZeroBlock => bytes[span.clone()].fill(0),
        Form::StaleBlock => bytes[span.clone()].copy_from_slice(&stale[span.clone()]),
    }
    let after = &bytes[span];
    let changed = |i: &usize| before[*i] != after[*i];
    match (
        (0..before.len()).find(changed),
        (0..before.len()).rev().find(changed),
    ) {
        (Some(first), Some(last)) => block + first as u64..block + last as u64 + 1,
        _ => block..block,
    }
}
