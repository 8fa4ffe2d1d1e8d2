//! Size classes and lifetime hints (after btrfs's size classes).
//!
//! An allocation is small (< 128 KiB), medium (< 8 MiB) or large. A group takes the tag of
//! its first allocation, size class and lifetime hint, and loses it when it becomes empty.
//! Passes try groups in tiers: same size and lifetime, same size, untagged, other size. Small
//! short-lived extents then do not leave holes in groups of large long-lived ones, and the
//! reverse.
//!
//! # Data structures
//!
//! [`SizeClass`] and [`Lifetime`], and the tag that combines them: `1 + 3 * size +
//! lifetime`, 0 for an untagged group.
//!
//! # Invariant
//!
//! Tags run from 1 to `TAGS`; every tag other than a request's own is in exactly one of its
//! tiers 1 and 3 (`tags_by_tier`), untagged groups are tier 2.
//!
//! # Lock order
//!
//! None: pure functions and plain data.

use crate::error::Error;

/// What the caller expects of an extent's lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum Lifetime {
    /// No hint (the default); tagged apart from short- and long-lived extents.
    #[default]
    Unknown = 0,
    /// Freed soon (temporary files, short-lived fallocates).
    Short = 1,
    /// Kept (log files, long-lived data).
    Long = 2,
}

impl TryFrom<u8> for Lifetime {
    type Error = Error;

    /// From the numeric hint of a C-style API: 0 unknown, 1 short, 2 long.
    fn try_from(v: u8) -> Result<Self, Error> {
        match v {
            0 => Ok(Lifetime::Unknown),
            1 => Ok(Lifetime::Short),
            2 => Ok(Lifetime::Long),
            _ => Err(Error::InvalidHint {
                value: u64::from(v),
                valid: "0 (unknown), 1 (short-lived), 2 (long-lived)",
            }),
        }
    }
}

/// An allocation's size class, by its length in bytes; with the lifetime hint it makes a
/// group's tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum SizeClass {
    /// Below `SMALL_BYTES_MAX` (128 KiB).
    Small = 0,
    /// From 128 KiB up to, not including, `MEDIUM_BYTES_MAX` (8 MiB).
    Medium = 1,
    /// 8 MiB and more.
    Large = 2,
}

/// Small below this many bytes.
pub const SMALL_BYTES_MAX: u64 = 128 << 10;
/// Medium below this many bytes.
pub const MEDIUM_BYTES_MAX: u64 = 8 << 20;

impl SizeClass {
    /// The class of an allocation of `bytes` bytes.
    pub fn of_bytes(bytes: u64) -> Self {
        if bytes < SMALL_BYTES_MAX {
            SizeClass::Small
        } else if bytes < MEDIUM_BYTES_MAX {
            SizeClass::Medium
        } else {
            SizeClass::Large
        }
    }
}

/// A group's tag: 0 = untagged, else `1 + 3 * size + lifetime`.
pub(crate) fn tag(size: SizeClass, lifetime: Lifetime) -> u8 {
    1 + 3 * size as u8 + lifetime as u8
}

/// Number of preference tiers; tier 0 is tried first.
pub(crate) const TIERS: u8 = 4;
/// Number of tags (size classes x lifetimes); tags run from 1 to `TAGS`.
pub(crate) const TAGS: u8 = 9;

/// For a request's tag: its own, those of the same size with another lifetime, and those of
/// the other sizes (tiers 0, 1 and 3; untagged groups are tier 2).
pub(crate) fn tags_by_tier(request_tag: u8) -> (u8, [u8; 2], [u8; 6]) {
    let size = |t: u8| (t - 1) / 3;
    let (mut same_size, mut other) = ([0u8; 2], [0u8; 6]);
    let (mut s, mut o) = (0, 0);
    for t in (1..=TAGS).filter(|&t| t != request_tag) {
        if size(t) == size(request_tag) {
            same_size[s] = t;
            s += 1;
        } else {
            other[o] = t;
            o += 1;
        }
    }
    (request_tag, same_size, other)
}

/// The tier of an untagged group.
pub(crate) const UNTAGGED_TIER: u8 = 2;

/// How well a group with `group_tag` suits a request with `request_tag`.
pub(crate) fn tier(group_tag: u8, request_tag: u8) -> u8 {
    if group_tag == 0 {
        return UNTAGGED_TIER;
    }
    let size = |t: u8| (t - 1) / 3;
    if group_tag == request_tag {
        0
    } else if size(group_tag) == size(request_tag) {
        1
    } else {
        3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_and_tiers() {
        assert_eq!(SizeClass::of_bytes(127 << 10), SizeClass::Small);
        assert_eq!(SizeClass::of_bytes(128 << 10), SizeClass::Medium);
        assert_eq!(SizeClass::of_bytes(8 << 20), SizeClass::Large);
        let small_long = tag(SizeClass::Small, Lifetime::Long);
        let small_short = tag(SizeClass::Small, Lifetime::Short);
        let large = tag(SizeClass::Large, Lifetime::Unknown);
        assert_eq!(tier(small_long, small_long), 0);
        let (own, same_size, other) = tags_by_tier(small_long);
        assert_eq!(own, small_long);
        assert!(same_size.iter().all(|&t| t != own && tier(t, own) == 1));
        assert!(other.iter().all(|&t| tier(t, own) == 3));
        let mut all: Vec<u8> = [own]
            .iter()
            .chain(&same_size)
            .chain(&other)
            .copied()
            .collect();
        all.sort();
        assert_eq!(all, (1..=TAGS).collect::<Vec<_>>());
        assert_eq!(tier(small_short, small_long), 1);
        assert_eq!(tier(0, small_long), 2);
        assert_eq!(tier(large, small_long), 3);
        assert!(Lifetime::try_from(3).is_err());
        assert_eq!(Lifetime::try_from(2).unwrap(), Lifetime::Long);
    }
}
